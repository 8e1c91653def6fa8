/* bench_collide: hash flooding against the prefix index, before and after keyed slots.
 *
 * Block hashes are public functions of a prompt (chained xxh3 seeded by the model name), so an
 * attacker can grind prompts offline until their blocks share one home slot; with linear
 * probing, n such keys cost n^2/2 probes to insert and as much again to look up. This bench
 * grinds random 64-bit keys into a small window of slots (the attacker's offline work, done
 * here directly on hashes) for:
 *   - the old unkeyed slot function (h ^ h >> 29) & mask, and
 *   - the keyed function under a KNOWN secret A (the attack with a leaked secret),
 * then inserts them (one-block prompts over 8 endpoints) and looks each up in:
 *   (a) the index as it was: core/prefix_index.c compiled a second time below, renamed, with
 *       the old slot function in place of the keyed one and without the lookahead;
 *   (b) the keyed index under secret A: the attack works;
 *   (c) the keyed index under a fresh random secret: the attack fails.
 * It prints ns per operation and mean and longest probe lengths (slots examined beyond the
 * home slot), with random keys alongside, medians of 5 runs. Then the cost of the slot
 * function alone. Built by `make bench` (build/bench/bench_collide). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* (a) The unkeyed index. The real source, with its public names renamed, sb_hash_u64
 * replaced by the slot function it had before keying, and no lookahead (one block at a time,
 * as it was: the lookahead came with keying, to hide its cost). */
#include "base/hash.h"
#define sb_hash_u64(key, h) ((void)(key), (h) ^ ((h) >> 29))
#define SB_PREFIX_INDEX_AHEAD 1
#define sb_prefix_index unkeyed_index
#define sb_prefix_index_new unkeyed_index_new
#define sb_prefix_index_free unkeyed_index_free
#define sb_prefix_index_set_capacity unkeyed_index_set_capacity
#define sb_prefix_index_capacity unkeyed_index_capacity
#define sb_prefix_index_insert unkeyed_index_insert
#define sb_prefix_index_insert_pending unkeyed_index_insert_pending
#define sb_prefix_index_settle unkeyed_index_settle
#define sb_prefix_index_settle_all unkeyed_index_settle_all
#define sb_prefix_index_match unkeyed_index_match
#define sb_prefix_index_clear_endpoint unkeyed_index_clear_endpoint
#define sb_prefix_index_entries unkeyed_index_entries
#define sb_prefix_index_endpoint_entries unkeyed_index_endpoint_entries
#define sb_prefix_index_endpoint_pending unkeyed_index_endpoint_pending
#define sb_prefix_index_bytes unkeyed_index_bytes
#define sb_prefix_index_evictions unkeyed_index_evictions
#define sb_prefix_index_probes unkeyed_index_probes
#define sb_prefix_index_set_clock unkeyed_index_set_clock
#define sb_prefix_index_expire unkeyed_index_expire
#define sb_prefix_index_expired unkeyed_index_expired
#define sb_prefix_index_remap unkeyed_index_remap
#define sb_prefix_index_hashes unkeyed_index_hashes
#include "core/prefix_index.c"
#undef sb_hash_u64
#undef sb_prefix_index
#undef sb_prefix_index_new
#undef sb_prefix_index_free
#undef sb_prefix_index_set_capacity
#undef sb_prefix_index_capacity
#undef sb_prefix_index_insert
#undef sb_prefix_index_insert_pending
#undef sb_prefix_index_settle
#undef sb_prefix_index_settle_all
#undef sb_prefix_index_match
#undef sb_prefix_index_clear_endpoint
#undef sb_prefix_index_entries
#undef sb_prefix_index_endpoint_entries
#undef sb_prefix_index_endpoint_pending
#undef sb_prefix_index_bytes
#undef sb_prefix_index_evictions
#undef sb_prefix_index_set_clock
#undef sb_prefix_index_expire
#undef sb_prefix_index_expired
#undef sb_prefix_index_probes
#undef sb_prefix_index_remap
#undef sb_prefix_index_hashes
#undef SB_PREFIX_INDEX_AHEAD
/* (b), (c): the real one, from libsb. */
#undef SB_CORE_PREFIX_INDEX_H
#include "bench_util.h"
#include "core/prefix_index.h"

enum {
    N = 12000,        /* keys per set: the table ends at 32768 slots */
    TABLE_BITS = 15,
    WINDOW = 32,      /* crafted keys land in slots [0, WINDOW) of the final table */
    EPS = 8,
    RUNS = 5,
};

/* The thread's CPU time, not wall time: on a shared machine, time spent descheduled would
 * otherwise swamp differences of a few nanoseconds per operation. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t os_secret(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s)) {
        fprintf(stderr, "getrandom failed\n");
        exit(1);
    }
    return s;
}

/* Random keys whose slot under `slot` falls in the window: the attacker's offline grinding. */
static void grind(uint64_t *out, uint64_t (*slot)(uint64_t, const sb_hash_key *), const sb_hash_key *k, double *tries)
{
    uint64_t n = 0, t = 0;
    const uint64_t mask = ((uint64_t)1 << TABLE_BITS) - 1;
    while (n < N) {
        uint64_t x = next_u64();
        t++;
        if ((slot(x, k) & mask) < WINDOW)
            out[n++] = x;
    }
    *tries = (double)t;
}

static uint64_t old_slot(uint64_t h, const sb_hash_key *k)
{
    (void)k;
    return h ^ (h >> 29);
}

static uint64_t keyed_slot(uint64_t h, const sb_hash_key *k) { return sb_hash_u64(k, h); }

typedef struct result {
    double insert_ns, lookup_ns, mean_probes, longest;
} result;

/* secret: 0 and unkeyed -> the old index; otherwise the keyed one. */
static result run(const uint64_t *keys, bool unkeyed, uint64_t secret, bool fresh_secret)
{
    double ins[RUNS], look[RUNS], mean[RUNS], longest[RUNS];
    static uint32_t match[EPS];
    for (int r = 0; r < RUNS; r++) {
        size_t sink = 0;
        sb_table_probes p;
        if (fresh_secret)
            secret = os_secret();
        if (unkeyed) {
            unkeyed_index *ix = unkeyed_index_new(EPS, 1u << 20, 1u << 20, 0);
            double t0 = now_s();
            for (size_t i = 0; i < N; i++)
                unkeyed_index_insert(ix, (uint32_t)(i % EPS), &keys[i], 1);
            double t1 = now_s();
            for (size_t i = 0; i < N; i++)
                sink += unkeyed_index_match(ix, &keys[i], 1, match);
            double t2 = now_s();
            p = unkeyed_index_probes(ix);
            unkeyed_index_free(ix);
            ins[r] = (t1 - t0) * 1e9 / N;
            look[r] = (t2 - t1) * 1e9 / N;
        } else {
            sb_prefix_index *ix = sb_prefix_index_new(EPS, 1u << 20, 1u << 20, secret);
            double t0 = now_s();
            for (size_t i = 0; i < N; i++)
                sb_prefix_index_insert(ix, (uint32_t)(i % EPS), &keys[i], 1);
            double t1 = now_s();
            for (size_t i = 0; i < N; i++)
                sink += sb_prefix_index_match(ix, &keys[i], 1, match);
            double t2 = now_s();
            p = sb_prefix_index_probes(ix);
            sb_prefix_index_free(ix);
            ins[r] = (t1 - t0) * 1e9 / N;
            look[r] = (t2 - t1) * 1e9 / N;
        }
        if (sink != N)
            printf("(lookups missed: %zu of %d)\n", (size_t)N - sink, N);
        mean[r] = (double)p.probes / (double)p.searches;
        longest[r] = (double)p.longest;
    }
    return (result){median(ins, RUNS), median(look, RUNS), median(mean, RUNS), median(longest, RUNS)};
}

/* bench_prefix's warm-index workload (16 endpoints, 64-block prompts from 2,000 prefix
 * families), the index as it was and as it is side by side, runs interleaved: what keying
 * (with the lookahead that came with it) costs in ordinary use. */
static void family(uint64_t f, size_t n, uint64_t *out)
{
    uint64_t h = f * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= i;
        out[i] = h;
    }
}

static void warm_cost(void)
{
    enum { WEPS = 16, BLOCKS = 64, FAMILIES = 2000, OPS = 200000 };
    static uint64_t hs[BLOCKS];
    static uint32_t m[WEPS];
    double ins[2][RUNS], look[2][RUNS];
    for (int r = 0; r < RUNS; r++) {
        for (int keyed = 0; keyed < 2; keyed++) {
            unkeyed_index *u = keyed ? NULL : unkeyed_index_new(WEPS, 1u << 22, 29205, 0);
            sb_prefix_index *k = keyed ? sb_prefix_index_new(WEPS, 1u << 22, 29205, os_secret()) : NULL;
            uint64_t x = 12345;
            size_t sink = 0;
            double t0 = now_s();
            for (int i = 0; i < OPS; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                family((x >> 33) % FAMILIES, BLOCKS, hs);
                uint32_t ep = (uint32_t)((x >> 20) % WEPS);
                if (keyed)
                    sb_prefix_index_insert(k, ep, hs, BLOCKS);
                else
                    unkeyed_index_insert(u, ep, hs, BLOCKS);
            }
            double t1 = now_s();
            for (int i = 0; i < OPS; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                family((x >> 33) % FAMILIES, BLOCKS, hs);
                sink += keyed ? sb_prefix_index_match(k, hs, BLOCKS, m) : unkeyed_index_match(u, hs, BLOCKS, m);
            }
            double t2 = now_s();
            if (sink == 0)
                printf("(no matches)\n");
            ins[keyed][r] = (t1 - t0) * 1e9 / ((double)OPS * BLOCKS);
            look[keyed][r] = (t2 - t1) * 1e9 / ((double)OPS * BLOCKS);
            unkeyed_index_free(u);
            sb_prefix_index_free(k);
        }
    }
    double io = median(ins[0], RUNS), ik = median(ins[1], RUNS), lo = median(look[0], RUNS), lk = median(look[1], RUNS);
    printf("warm index, bench_prefix's workload (ns per block, median of %d, interleaved):\n", RUNS);
    printf("  insert  old %6.1f  keyed %6.1f  (%.2fx)\n", io, ik, ik / io);
    printf("  lookup  old %6.1f  keyed %6.1f  (%.2fx)\n\n", lo, lk, lk / lo);
}

/* A keyed multiply-xorshift mixer, the cheaper alternative considered for base/hash.h: the
 * key xored in, a 64x64->128 multiply folded, a second key-dependent round. */
static inline uint64_t fold_mix(uint64_t x, const sb_hash_key *k)
{
    __uint128_t p = (__uint128_t)(x ^ k->k0) * (k->k1 | 1);
    uint64_t h = (uint64_t)p ^ (uint64_t)(p >> 64);
    p = (__uint128_t)(h ^ k->k1) * 0x9E3779B97F4A7C15ULL;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static void slot_function_cost(void)
{
    enum { CALLS = 50000000 };
    sb_hash_key k = sb_hash_key_from_secret(os_secret());
    double t[3][RUNS];
    uint64_t sink = 0;
    for (int r = 0; r < RUNS; r++) {
        /* Each call depends on the last, as a probe sequence's first slot does on its key. */
        uint64_t x = 1;
        double t0 = now_s();
        for (int i = 0; i < CALLS; i++)
            x = old_slot(x + (uint64_t)i, &k);
        double t1 = now_s();
        for (int i = 0; i < CALLS; i++)
            x = sb_hash_u64(&k, x + (uint64_t)i);
        double t2 = now_s();
        for (int i = 0; i < CALLS; i++)
            x = fold_mix(x + (uint64_t)i, &k);
        double t3 = now_s();
        sink += x;
        t[0][r] = (t1 - t0) * 1e9 / CALLS;
        t[1][r] = (t2 - t1) * 1e9 / CALLS;
        t[2][r] = (t3 - t2) * 1e9 / CALLS;
    }
    double o = median(t[0], RUNS), s = median(t[1], RUNS), f = median(t[2], RUNS);
    printf("slot function alone (ns per call, dependent chain, median of %d):\n", RUNS);
    printf("  old (h ^ h >> 29)       %6.2f\n", o);
    printf("  SipHash-1-3 (keyed)     %6.2f  (%.1fx old)\n", s, s / o);
    printf("  fold-multiply (keyed)   %6.2f  (%.1fx old; not used: no analysis against crafted keys)\n", f, f / o);
    if (sink == 42)
        printf("\n");
}

int main(void)
{
    static uint64_t rnd[N], vs_old[N], vs_known[N];
    const uint64_t A = 0x0123456789abcdefULL; /* the secret the attacker knows in (b) */
    sb_hash_key ka = sb_hash_key_from_secret(A);
    double t_old, t_known;
    for (size_t i = 0; i < N; i++)
        rnd[i] = next_u64();
    double g0 = now_s();
    grind(vs_old, old_slot, NULL, &t_old);
    double g1 = now_s();
    grind(vs_known, keyed_slot, &ka, &t_known);
    double g2 = now_s();
    printf("%d keys per set, table of 2^%d slots at the end (at most half full), %d endpoints;\n", N, TABLE_BITS, EPS);
    printf("crafted keys land in slots [0, %d): ground in %.0f M tries (%.2f s) against the old function, %.0f M "
           "tries (%.2f s) against secret A\n\n",
           WINDOW, t_old / 1e6, g1 - g0, t_known / 1e6, g2 - g1);

    static const char *set_names[3] = {"random keys", "crafted vs old", "crafted vs A"};
    const uint64_t *sets[3] = {rnd, vs_old, vs_known};
    static const char *ix_names[3] = {"(a) old unkeyed", "(b) keyed, secret A", "(c) keyed, random"};
    printf("%-20s %-15s %12s %12s %12s %10s\n", "index", "keys", "insert ns", "lookup ns", "mean probes",
           "longest");
    for (int i = 0; i < 3; i++) {
        for (int s = 0; s < 3; s++) {
            result r = run(sets[s], i == 0, A, i == 2);
            printf("%-20s %-15s %12.1f %12.1f %12.2f %10.0f\n", ix_names[i], set_names[s], r.insert_ns, r.lookup_ns,
                   r.mean_probes, r.longest);
        }
    }
    printf("\n");
    warm_cost();
    slot_function_cost();
    return 0;
}
