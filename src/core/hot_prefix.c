/* hot_prefix: decayed demand per prefix length (core/hot_prefix.h). */
#include "core/hot_prefix.h"

#include <math.h>
#include <stdbool.h>

#include "base/alloc.h"
#include "base/hash.h"

/* Demand decays with this time constant: a prefix that stops being asked for stops being hot
 * within tens of seconds, and a burst of a few requests does not make one hot. */
#define HOT_TAU_NS 10000000000ULL
/* A prefix asked for fewer times than this (decayed) is never hot, however young the pool's
 * count is: two requests of one conversation in a pool's first seconds are not a hot prefix. */
#define HOT_MIN_COUNT 4.0
#define PROBE 8 /* slots looked at per key before replacing the least-demanded one */
/* Ladder lengths a prompt of up to 2^40 blocks can have: 1, 2, 3, then two per octave. */
#define MAX_RUNGS 96
/* A clock read this far backwards is out of order (counted as no time passed); any larger
 * backward step is a forward gap past 2^31 ms, which has decayed everything. */
#define BACKWARDS_MS 60000u

typedef struct slot {
    uint64_t key;   /* 0: empty */
    float count;    /* decayed requests at `stamp` */
    uint32_t stamp; /* ms, wrapping (differences only) */
} slot;

struct sb_hot_prefix {
    slot *slots;
    size_t mask;
    sb_hash_key key; /* slot placement: block hashes are not secret, their slots are */
    double total;    /* the pool's decayed requests at total_ms (0 before the first) */
    uint32_t total_ms;
};

sb_hot_prefix *sb_hot_prefix_new(size_t slots, uint64_t secret)
{
    size_t n = 64;
    while (n < slots && n < ((size_t)1 << 30))
        n <<= 1;
    sb_hot_prefix *h = sb_calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->slots = sb_calloc(n, sizeof(slot));
    if (!h->slots) {
        sb_free(h);
        return NULL;
    }
    h->mask = n - 1;
    h->key = sb_hash_key_from_secret(secret);
    return h;
}

void sb_hot_prefix_free(sb_hot_prefix *h)
{
    if (!h)
        return;
    sb_free(h->slots);
    sb_free(h);
}

size_t sb_hot_prefix_bytes(const sb_hot_prefix *h)
{
    return h ? sizeof *h + (h->mask + 1) * sizeof(slot) : 0;
}

static double decay(uint32_t from_ms, uint32_t to_ms)
{
    uint32_t dt = to_ms - from_ms; /* wraps: differences stay right for 24 days */
    if (dt > 0x80000000u)
        return from_ms - to_ms <= BACKWARDS_MS ? 1.0 : 0.0;
    return exp(-(double)dt * 1e6 / (double)HOT_TAU_NS);
}

/* Adds one request to key's count (add 1), or only reads it (add 0: nothing is written, a
 * key not there counts 0); returns the count after it. One exp() when the key is there; a
 * miss that adds replaces the window's least-demanded slot (an empty one first). */
static double bump(sb_hot_prefix *h, uint64_t key, uint32_t now_ms, double add)
{
    if (!key) /* 0 marks an empty slot */
        key = 1;
    size_t i = (size_t)sb_hash_u64(&h->key, key) & h->mask;
    for (size_t k = 0; k < PROBE; k++) {
        slot *s = &h->slots[(i + k) & h->mask];
        if (s->key == key) {
            double c = s->count * decay(s->stamp, now_ms) + add;
            if (add > 0) {
                s->count = (float)c;
                s->stamp = now_ms;
            }
            return c;
        }
    }
    if (!(add > 0))
        return 0.0;
    size_t victim = i;
    double least = INFINITY;
    for (size_t k = 0; k < PROBE && least > 0; k++) {
        slot *s = &h->slots[(i + k) & h->mask];
        double c = s->key ? s->count * decay(s->stamp, now_ms) : 0.0;
        if (c < least) {
            least = c;
            victim = (i + k) & h->mask;
        }
    }
    h->slots[victim] = (slot){.key = key, .count = 1.0f, .stamp = now_ms};
    return 1.0;
}

size_t sb_hot_prefix_next_length(size_t len)
{
    return len < 4 ? len + 1 : (len & (len - 1)) == 0 ? len + len / 2 : len + len / 3;
}

static size_t observe(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints, double share,
                      double *needed, double add)
{
    *needed = 0;
    if (!h || !n || !n_endpoints || !(share > 0))
        return 0;
    uint32_t now_ms = (uint32_t)(now / 1000000);
    double total = h->total * decay(h->total_ms, now_ms) + add;
    if (add > 0) {
        h->total = total;
        h->total_ms = now_ms;
    }
    double fair = total / (double)n_endpoints;
    /* A pool asked less than HOT_MIN_COUNT requests per endpoint (decayed) has room for any
     * prefix on one endpoint; it is counted, never found hot. */
    bool busy = total >= HOT_MIN_COUNT * (double)n_endpoints;
    /* Ladder: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 3 x 2^(k-1)), then the whole prompt. */
    size_t len[MAX_RUNGS];
    double count[MAX_RUNGS];
    size_t rungs = 0;
    for (size_t l = 1; rungs < MAX_RUNGS;) {
        len[rungs] = l;
        count[rungs++] = bump(h, hashes[l - 1], now_ms, add);
        if (l == n)
            break;
        size_t next = sb_hot_prefix_next_length(l);
        l = next > n ? n : next;
    }
    /* A length is hot when the demand that branches off it, away from this request's own
     * continuation (its count less the next rung's), is a fair share: a prefix many
     * conversations start with branches at its end, while one conversation's history is a
     * single chain whose turns each extend the last. Only the earlier turns that ended inside
     * a rung count as branching there, so a few conversations on many endpoints seldom make
     * their own histories hot, and then with needed under 2 (tests/unit/core/test_hot_prefix.c). */
    size_t hot = 0;
    for (size_t k = 0; k < rungs; k++) {
        double branching = count[k] - (k + 1 < rungs ? count[k + 1] : 0.0);
        if (busy && count[k] >= HOT_MIN_COUNT && branching >= share * fair) {
            hot = len[k];
            *needed = count[k] / fair;
        }
    }
    return hot;
}

size_t sb_hot_prefix_observe(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints,
                             double share, double *needed)
{
    return observe(h, hashes, n, now, n_endpoints, share, needed, 1.0);
}

size_t sb_hot_prefix_peek(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints,
                          double share, double *needed)
{
    return observe(h, hashes, n, now, n_endpoints, share, needed, 0.0);
}
