/* bench_util: what the C benchmarks share (a monotonic clock, a comparator for medians). */
#ifndef SB_BENCH_UTIL_H
#define SB_BENCH_UTIL_H

#include <time.h>

#include "base/time.h"

static inline sb_ns clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (sb_ns)ts.tv_sec * SB_NS_PER_S + (sb_ns)ts.tv_nsec;
}

/* qsort order for doubles (medians of runs). */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
