// Build and run (from the repository root):
//   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/bench_chash.c src/core/chash.c src/base/alloc.c
//       -lxxhash -lm -o /tmp/bench_chash && /tmp/bench_chash

/* bench_chash: the bounded-load consistent-hash ring (core/chash.h) with 256 points per
 * endpoint, for pools of 8, 64, 256 and 1024 endpoints:
 *   build   time to build the ring (once per pool, at start-up or when addresses change)
 *   owner   unbounded look-up: one binary search over n * 256 points
 *   pick    bounded look-up over every endpoint (totals n loads, then walks the ring); loads
 *           random in 0..7, so the owner is often at the bound and the walk goes on
 *   hot     one hot key whose first 3/4 endpoints on the ring are over the bound: about
 *           the longest walk the bound allows
 *   first   the walk over a candidate bitmap, the scorers' path once the bound is known
 * Keys are random (a fresh key per look-up), so the binary search misses cache as it would on
 * a busy gateway. Each figure is the median of 5 runs. Prints figures only: a benchmark never
 * fails a build. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/chash.h"

#define RUNS 5
#define ITERS 2000000
#define MAXN 1024

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static char idbuf[MAXN][48];
static const char *ids[MAXN];
static bool eligible[MAXN];
static uint32_t load[MAXN], hot_load[MAXN];
static uint64_t allowed[MAXN / 64];

enum mode { OWNER, PICK, HOT, FIRST };

static double run_once(const sb_chash *ring, size_t n, enum mode mode)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL, hot = 0xfeedface;
    volatile long sink = 0;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < ITERS; i++) {
        switch (mode) {
        case OWNER: sink += sb_chash_owner(ring, xorshift(&s)); break;
        case PICK: sink += sb_chash_pick(ring, xorshift(&s), eligible, load, n, SB_CHASH_DEFAULT_LOAD_FACTOR); break;
        case HOT: sink += sb_chash_pick(ring, hot, eligible, hot_load, n, SB_CHASH_DEFAULT_LOAD_FACTOR); break;
        case FIRST: sink += sb_chash_first(ring, xorshift(&s), allowed); break;
        }
    }
    uint64_t t1 = now_ns();
    (void)sink;
    return (double)(t1 - t0) / ITERS;
}

static double median(const sb_chash *ring, size_t n, enum mode mode)
{
    double t[RUNS];
    run_once(ring, n, mode); /* warm caches */
    for (int k = 0; k < RUNS; k++)
        t[k] = run_once(ring, n, mode);
    qsort(t, RUNS, sizeof(double), cmp_double);
    return t[RUNS / 2];
}

/* Loads for the hot case: the first three quarters of the endpoints on the hot key's walk
 * at 100 in flight, the rest idle. The bound is then ceil(1.25 (75n + 1) / n) = 94, so the walk
 * passes all of them. (At most n / c endpoints can be at the bound at once: this is close to
 * the longest walk there is.) */
static void make_hot_loads(const sb_chash *ring, size_t n)
{
    uint64_t bits[MAXN / 64];
    memset(bits, 0xff, sizeof(bits));
    memset(hot_load, 0, sizeof(hot_load));
    for (size_t k = 0; k < n * 3 / 4; k++) {
        int e = sb_chash_first(ring, 0xfeedface, bits);
        bits[e / 64] &= ~(1ULL << (e % 64));
        hot_load[e] = 100;
    }
}

int main(void)
{
    const size_t sizes[] = {8, 64, 256, 1024};
    double base[4] = {0};
    printf("consistent-hash ring, %u points per endpoint, c = %.2f, median of %d runs of %d look-ups\n\n",
           SB_CHASH_DEFAULT_VNODES, SB_CHASH_DEFAULT_LOAD_FACTOR, RUNS, ITERS);
    printf("%9s %9s %9s %10s %10s %10s %10s %12s %13s\n", "endpoints", "build ms", "ring KiB", "owner ns", "pick ns",
           "hot ns", "first ns", "owner Mops/s", "owner vs n=8");
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        size_t n = sizes[z];
        uint64_t s = 12345;
        for (size_t i = 0; i < n; i++) {
            snprintf(idbuf[i], sizeof(idbuf[i]), "10.%zu.%zu.%zu:8000", i / 65536, i / 256 % 256, i % 256);
            ids[i] = idbuf[i];
            eligible[i] = true;
            load[i] = (uint32_t)(xorshift(&s) % 8);
        }
        memset(allowed, 0, sizeof(allowed));
        for (size_t i = 0; i < n; i++)
            if (i % 4 != 0) /* three quarters of the pool left by the filters */
                allowed[i / 64] |= 1ULL << (i % 64);
        uint64_t t0 = now_ns();
        sb_chash *ring = sb_chash_new(ids, n, 0);
        uint64_t t1 = now_ns();
        if (!ring) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        make_hot_loads(ring, n);
        double owner = median(ring, n, OWNER), pick = median(ring, n, PICK), hot = median(ring, n, HOT),
               first = median(ring, n, FIRST);
        if (z == 0)
            base[0] = owner;
        double kib = (double)n * SB_CHASH_DEFAULT_VNODES * (sizeof(uint64_t) + sizeof(uint16_t)) / 1024.0;
        printf("%9zu %9.2f %9.0f %10.1f %10.1f %10.1f %10.1f %12.1f %12.2fx\n", n, (double)(t1 - t0) / 1e6, kib, owner,
               pick, hot, first, 1e3 / owner, owner / base[0]);
        sb_chash_free(ring);
    }
    return 0;
}
