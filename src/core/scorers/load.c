/* Distribution scorers over one load signal each; lower load scores higher (min-max over the
 * pool, stale endpoints score 0: see sb_score_lower_is_better).
 *   queue            effective waiting requests (report + sent since the report)
 *   running          running requests (report, else the router's in-flight count)
 *   kv-cache         KV-cache utilisation (report + prompt tokens sent since, over capacity)
 *   in-flight        the router's own in-flight requests (never stale: it is ours)
 *   pending-prefill  the router's estimate of prompt tokens sent whose first byte has not come
 * One file for the five because each is one line of signal over a shared normalisation. */
#include "core/sched.h"

#define MAX_STACK 256

typedef double (*signal_fn)(const sb_endpoint *ep);

static double queue_signal(const sb_endpoint *ep) { return sb_endpoint_waiting(ep); }
static double running_signal(const sb_endpoint *ep) { return sb_endpoint_running(ep); }
static double kv_signal(const sb_endpoint *ep) { return sb_endpoint_kv_usage(ep); }
static double inflight_signal(const sb_endpoint *ep) { return ep->in_flight; }
static double prefill_signal(const sb_endpoint *ep) { return (double)ep->pending_prefill_tokens; }

static void score_with(signal_fn f, bool own, const sb_candidate *c, size_t n, double *out)
{
    /* Values go to `out` first, then are normalised in place: no allocation. */
    for (size_t i = 0; i < n; i++)
        out[i] = f(c[i].ep);
    if (own) {
        /* Our own accounting is never stale. */
        double lo = out[0], hi = out[0];
        for (size_t i = 1; i < n; i++) {
            lo = out[i] < lo ? out[i] : lo;
            hi = out[i] > hi ? out[i] : hi;
        }
        for (size_t i = 0; i < n; i++)
            out[i] = hi > lo ? 1.0 - (out[i] - lo) / (hi - lo) : 1.0;
        return;
    }
    sb_score_lower_is_better(c, n, out, out);
}

#define LOAD_SCORER(ident, label, fn, own)                                                                         \
    static void ident##_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c,         \
                              size_t n, double *out)                                                               \
    {                                                                                                              \
        (void)ctx;                                                                                                 \
        (void)req;                                                                                                 \
        score_with(fn, own, c, n, out);                                                                            \
    }                                                                                                              \
    const sb_scorer_def sb_scorer_##ident = {.name = label, .category = SB_DISTRIBUTION, .score = ident##_score};

LOAD_SCORER(queue, "queue", queue_signal, false)
LOAD_SCORER(running, "running", running_signal, false)
LOAD_SCORER(kv_cache, "kv-cache", kv_signal, false)
LOAD_SCORER(in_flight, "in-flight", inflight_signal, true)
LOAD_SCORER(pending_prefill, "pending-prefill", prefill_signal, true)
