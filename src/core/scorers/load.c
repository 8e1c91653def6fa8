/* Distribution scorers over one load signal each; lower load scores higher (min-max over the
 * pool with a minimum range, stale endpoints score 0: see sb_score_lower_is_better).
 *   queue            effective waiting requests (report + sent since the report)
 *   running          running requests (report, else the router's in-flight count)
 *   kv-cache         KV-cache utilisation (report + prompt tokens sent since, over capacity),
 *                    scored absolutely as 1 - utilisation, as GIE's KV scorer does: an endpoint
 *                    holding a prefix naturally uses more KV, and min-max over the pool would
 *                    turn a 0.1% difference into the whole score range and undo prefix affinity
 *   in-flight        the router's own in-flight requests (never stale: it is ours)
 *   pending-prefill  the router's estimate of the prompt tokens it sent that are still to be
 *                    computed: sent, first byte not come, less what the prefix index said the
 *                    endpoint held (a follow-up turn on the replica holding its conversation
 *                    is a few hundred tokens of work, not its whole prompt; counting whole
 *                    prompts made the holder of many conversations look busy and moved turns
 *                    off it, losing their cache: docs/benchmarks.md section 10)
 *   sent-tokens      uncached prompt tokens sent lately, decayed (sb_endpoint_sent_tokens)
 *   lru              when the router last sent the endpoint a request: the least recently used
 *                    scores 1, the last used 0 (min-max over the time of the last dispatch).
 *                    A tie-break among equals that rotates like round robin where max-score's
 *                    random tie-break collides (llm-d's no-hit LRU scorer spreads cold
 *                    requests the same way)
 *   kv-room          whether the request's uncached prompt fits in the free KV cache (below)
 * One file for the eight because each is one line of signal over a shared normalisation. */
#include "core/sched.h"

typedef double (*signal_fn)(const sb_endpoint *ep);

static double queue_signal(const sb_endpoint *ep) { return sb_endpoint_waiting(ep); }
static double running_signal(const sb_endpoint *ep) { return sb_endpoint_running(ep); }
static double kv_signal(const sb_endpoint *ep) { return sb_endpoint_kv_usage(ep); }
static double inflight_signal(const sb_endpoint *ep) { return ep->in_flight; }
static double prefill_signal(const sb_endpoint *ep)
{
    return (double)ep->pending_uncached_tokens;
}
/* Never dispatched: 0, the oldest. */
static double last_dispatch_signal(const sb_endpoint *ep)
{
    return (double)ep->last_dispatch_ns;
}

static void score_with(signal_fn f, bool own, double min_range, const sb_candidate *c, size_t n, double *out)
{
    /* Values go to `out` first, then are normalised in place: no allocation. Our own
     * accounting is never stale. */
    for (size_t i = 0; i < n; i++)
        out[i] = f(c[i].ep);
    sb_score_lower_is_better(c, n, out, min_range, !own, out);
}

#define LOAD_SCORER(ident, label, fn, own, min_range)                                                                       \
    static void ident##_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c,         \
                              size_t n, double *out)                                                               \
    {                                                                                                              \
        (void)ctx;                                                                                                 \
        (void)req;                                                                                                 \
        score_with(fn, own, min_range, c, n, out);                                                                          \
    }                                                                                                              \
    const sb_scorer_def sb_scorer_##ident = {.name = label, .category = SB_DISTRIBUTION, .score = ident##_score};

/* Minimum ranges: 4 requests; 4096 prompt tokens (~70 ms of prefill on the reference H100). */
LOAD_SCORER(queue, "queue", queue_signal, false, 4)
LOAD_SCORER(running, "running", running_signal, false, 4)
/* A minimum range of 1 ns: any difference in order is the whole range, as a rotation wants. */
LOAD_SCORER(lru, "lru", last_dispatch_signal, true, 1)
static void kv_cache_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                           double *out)
{
    (void)ctx;
    (void)req;
    for (size_t i = 0; i < n; i++)
        out[i] = c[i].stale ? 0.0 : 1.0 - kv_signal(c[i].ep);
}
const sb_scorer_def sb_scorer_kv_cache = {.name = "kv-cache", .category = SB_DISTRIBUTION, .score = kv_cache_score};
/* sent-tokens reads the clock (its signal decays), so it is written out rather than made
 * with LOAD_SCORER: one decay factor per epoch met (endpoints share their epoch, so usually
 * one exp() per pick; sb_sent_epoch_factor). Minimum range as pending-prefill's. */
static void sent_tokens_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                              double *out)
{
    (void)req;
    sb_ns epoch = 0;
    double f = 0.0;
    bool have = false;
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *ep = c[i].ep;
        if (!ep->sent_scaled) {
            out[i] = 0.0;
            continue;
        }
        if (ctx->now < ep->sent_last_ns) { /* a clock read out of order: rare */
            out[i] = sb_endpoint_sent_tokens(ep, ctx->now);
            continue;
        }
        if (!have || ep->sent_epoch_ns != epoch) {
            epoch = ep->sent_epoch_ns;
            f = sb_sent_epoch_factor(epoch, ctx->now);
            have = true;
        }
        out[i] = ep->sent_scaled * f;
    }
    sb_score_lower_is_better(c, n, out, 4096, false, out);
}
const sb_scorer_def sb_scorer_sent_tokens = {
    .name = "sent-tokens", .category = SB_DISTRIBUTION, .score = sent_tokens_score};
LOAD_SCORER(in_flight, "in-flight", inflight_signal, true, 4)
LOAD_SCORER(pending_prefill, "pending-prefill", prefill_signal, true, 4096)

/* kv-room: whether the request's uncached prompt fits in the endpoint's free KV cache. Free =
 * capacity less the reported use and the prompts sent since (sb_endpoint_kv_usage); the need =
 * the prompt less what the prefix index says the endpoint holds. Scores 1 while the request
 * fits with a margin of ROOM_MARGIN of the capacity to spare, falling to 0 where it does not
 * fit: an engine out of blocks queues the request or preempts running ones, and a cached
 * prefix there saves milliseconds of prefill against seconds of waiting. Unknown capacity: 1
 * (neutral); stale: 0. */
#define ROOM_MARGIN 0.05
static void kv_room_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                          double *out)
{
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *ep = c[i].ep;
        if (c[i].stale) {
            out[i] = 0.0;
            continue;
        }
        if (!ep->report.have_capacity || !ep->report.num_gpu_blocks || !ep->report.block_size) {
            out[i] = 1.0;
            continue;
        }
        double cap = (double)ep->report.num_gpu_blocks * ep->report.block_size;
        double held = ctx->prefix_match ? ctx->prefix_match[ep->index] * ctx->block_tokens : 0.0;
        double need = (double)req->prompt_tokens - held;
        double free_after = (1.0 - sb_endpoint_kv_usage(ep)) * cap - (need > 0 ? need : 0);
        double s = free_after / (ROOM_MARGIN * cap);
        out[i] = s > 1 ? 1 : s < 0 ? 0 : s;
    }
}
const sb_scorer_def sb_scorer_kv_room = {.name = "kv-room", .category = SB_DISTRIBUTION, .score = kv_room_score};
