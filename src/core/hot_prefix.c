/* hot_prefix: decayed demand per prefix length (core/hot_prefix.h). */
#include "core/hot_prefix.h"

#include <math.h>
#include <stdbool.h>

#include "base/alloc.h"

/* Demand decays with this time constant: a prefix that stops being asked for stops being hot
 * within tens of seconds, and a burst of a few requests does not make one hot. */
#define HOT_TAU_NS 10000000000ULL
/* A prefix asked for fewer times than this (decayed) is never hot, however young the pool's
 * count is: two requests of one conversation in a pool's first seconds are not a hot prefix. */
#define HOT_MIN_COUNT 4.0
#define PROBE 8 /* slots looked at per key before replacing the least-demanded one */

typedef struct slot {
    uint64_t key;   /* 0: empty */
    float count;    /* decayed requests at `stamp` */
    uint32_t stamp; /* ms, wrapping (differences only) */
} slot;

struct sb_hot_prefix {
    slot *slots;
    size_t mask;
    double total; /* the pool's decayed requests at total_ms */
    uint32_t total_ms;
    bool have_total;
};

sb_hot_prefix *sb_hot_prefix_new(size_t slots)
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
    uint32_t dt = to_ms - from_ms; /* wraps: differences stay right for 49 days */
    if (dt > 0x80000000u)          /* a clock read out of order */
        return 1.0;
    return exp(-(double)dt * 1e6 / (double)HOT_TAU_NS);
}

/* Adds one request to key's count; returns the count after it. */
static double bump(sb_hot_prefix *h, uint64_t key, uint32_t now_ms)
{
    if (!key) /* 0 marks an empty slot */
        key = 1;
    size_t i = (size_t)(key ^ (key >> 29)) & h->mask, victim = i;
    double victim_count = INFINITY;
    for (size_t k = 0; k < PROBE; k++) {
        slot *s = &h->slots[(i + k) & h->mask];
        if (s->key == key) {
            double c = s->count * decay(s->stamp, now_ms) + 1.0;
            s->count = (float)c;
            s->stamp = now_ms;
            return c;
        }
        double c = s->key ? s->count * decay(s->stamp, now_ms) : -1.0;
        if (c < victim_count) {
            victim_count = c;
            victim = (i + k) & h->mask;
        }
    }
    h->slots[victim] = (slot){.key = key, .count = 1.0f, .stamp = now_ms};
    return 1.0;
}

size_t sb_hot_prefix_observe(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints,
                             double share, double *needed)
{
    *needed = 0;
    if (!h || !n || !n_endpoints || !(share > 0))
        return 0;
    uint32_t now_ms = (uint32_t)(now / 1000000);
    h->total = (h->have_total ? h->total * decay(h->total_ms, now_ms) : 0.0) + 1.0;
    h->total_ms = now_ms;
    h->have_total = true;
    double fair = h->total / (double)n_endpoints;
    size_t hot = 0;
    /* Ladder: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 3 x 2^(k-1)), then the whole prompt. */
    for (size_t len = 1;;) {
        double c = bump(h, hashes[len - 1], now_ms);
        if (c >= HOT_MIN_COUNT && c >= share * fair) {
            hot = len;
            *needed = c / fair;
        }
        if (len == n)
            break;
        size_t next = len < 4 ? len + 1 : (len & (len - 1)) == 0 ? len + len / 2 : len + len / 3;
        len = next > n ? n : next;
    }
    return hot;
}
