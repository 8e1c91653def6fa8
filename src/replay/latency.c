/* latency: see the header. */
#include "replay/latency.h"

#include <math.h>
#include <stdlib.h>

#define SUB SB_REPLAY_ITL_SUB

double sb_replay_percentile(const sb_ns *v, size_t n, double q)
{
    if (!n)
        return 0;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n)
        return (double)v[n - 1];
    double f = pos - (double)lo;
    return (double)v[lo] + f * ((double)v[lo + 1] - (double)v[lo]);
}

size_t sb_replay_itl_bucket(sb_ns v)
{
    if (v < 2 * SUB)
        return (size_t)v;
    unsigned e = (unsigned)(63 - __builtin_clzll(v)) - 7; /* v >> e in [128, 256) */
    return (size_t)e * SUB + (size_t)(v >> e);
}

/* The midpoint of a bucket, ns. */
static double itl_value(size_t idx)
{
    if (idx < 2 * SUB)
        return (double)idx;
    unsigned e = (unsigned)(idx / SUB) - 1;
    double lo = (double)((sb_ns)(idx - (size_t)e * SUB) << e), width = (double)(1ULL << e);
    return lo + (width - 1) / 2;
}

static int cmp_ns(const void *a, const void *b)
{
    sb_ns x = *(const sb_ns *)a, y = *(const sb_ns *)b;
    return x < y ? -1 : x > y;
}

void sb_replay_sort_ns(sb_ns *v, size_t n) { qsort(v, n, sizeof(sb_ns), cmp_ns); }

void sb_replay_latency_summary(sb_replay_result *out, sb_ns *ttft, sb_ns *e2e, size_t n, const uint64_t *hist)
{
    sb_replay_sort_ns(ttft, n);
    sb_replay_sort_ns(e2e, n);
    const double ms = 1e-6;
    out->ttft_p50_ms = sb_replay_percentile(ttft, n, 0.50) * ms;
    out->ttft_p90_ms = sb_replay_percentile(ttft, n, 0.90) * ms;
    out->ttft_p99_ms = sb_replay_percentile(ttft, n, 0.99) * ms;
    out->e2e_p50_ms = sb_replay_percentile(e2e, n, 0.50) * ms;
    out->e2e_p99_ms = sb_replay_percentile(e2e, n, 0.99) * ms;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)ttft[i];
    out->ttft_mean_ms = n ? sum / (double)n * ms : 0;

    uint64_t gaps = 0, seen = 0;
    for (size_t i = 0; i < SB_REPLAY_ITL_BUCKETS; i++)
        gaps += hist[i];
    for (size_t i = 0; i < SB_REPLAY_ITL_BUCKETS && gaps; i++) {
        seen += hist[i];
        if (2 * seen >= gaps) {
            out->itl_p50_ms = itl_value(i) * ms;
            break;
        }
    }
}

double sb_replay_imbalance_cv(const sb_replay_result *out, uint32_t n)
{
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < n; i++)
        mean += (double)out->per_replica[i];
    mean /= n;
    for (uint32_t i = 0; i < n; i++)
        var += ((double)out->per_replica[i] - mean) * ((double)out->per_replica[i] - mean);
    return mean > 0 ? sqrt(var / n) / mean : 0;
}
