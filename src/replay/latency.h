/* latency: the latency figures of a replay run, from what the driver collected: percentiles of
 * sorted samples, the inter-token gap histogram, and the spread of requests over replicas.
 * Pure arithmetic over the driver's arrays; no state of its own. */
#ifndef SB_REPLAY_LATENCY_H
#define SB_REPLAY_LATENCY_H

#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "replay/result.h"

/* Inter-token gap histogram: exact below 256 ns, then 128 log-linear sub-buckets per power of
 * two (relative width under 0.8%, midpoint error under 0.4%). 64-bit values need
 * 56 * 128 + 256 buckets. */
#define SB_REPLAY_ITL_SUB 128
#define SB_REPLAY_ITL_BUCKETS (56 * SB_REPLAY_ITL_SUB + 2 * SB_REPLAY_ITL_SUB)

/* Percentile q in [0,1] of sorted values v[0..n), linearly interpolated between closest ranks
 * (numpy's default); 0 when n is 0. Pure. */
double sb_replay_percentile(const sb_ns *v, size_t n, double q);

/* The bucket of a gap of v ns. */
size_t sb_replay_itl_bucket(sb_ns v);

/* Sorts the completed requests' TTFT and E2E samples (n each, ns) in place and fills out's
 * TTFT p50/p90/p99/mean, E2E p50/p99 (ms), and the median inter-token gap from hist
 * (SB_REPLAY_ITL_BUCKETS counts). */
void sb_replay_latency_summary(sb_replay_result *out, sb_ns *ttft, sb_ns *e2e, size_t n, const uint64_t *hist);

/* Sorts v[0..n) ascending (ns). */
void sb_replay_sort_ns(sb_ns *v, size_t n);

/* Coefficient of variation of the requests dispatched per replica (out->per_replica, n of
 * them): 0 for an even spread, or when nothing was dispatched. */
double sb_replay_imbalance_cv(const sb_replay_result *out, uint32_t n);

#endif
