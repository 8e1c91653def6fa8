/* predicted-latency scorer: for each candidate, the expected time to first token
 *     ttft = (prefill work queued in front of it + this request's uncached prompt tokens)
 *            / that endpoint's prefill speed
 * where the work in front is the router's own pending prefill tokens (sent, first byte not
 * yet seen) plus the engine's reported waiting requests at the request's prompt size, the
 * uncached tokens are the prompt less what the prefix index says the endpoint holds, and the
 * prefill speed is learned online from answered requests (sb_endpoint_observe_ttft), with the
 * pool's mean as the prior for endpoints not yet observed (and 10,000 tokens/s before any
 * observation: the order of magnitude of an 8B model's prefill on one H100, as
 * docs/simulator.md calibrates). Scores best / ttft, so the fastest endpoint scores 1.0 and one
 * twice as slow 0.5. It weighs affinity against load in one unit, seconds, instead of adding
 * scores of different kinds. Stale endpoints score 0, as for the other load scorers. */
#include "core/sched.h"

#define PRIOR_TPS 10000.0

static void score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                  double *out)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].ep->ttft_observations) {
            sum += c[i].ep->prefill_tps;
            k++;
        }
    double prior = k ? sum / (double)k : PRIOR_TPS;
    double tokens = req->prompt_tokens ? (double)req->prompt_tokens : 1.0;
    double best = 0;
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *ep = c[i].ep;
        double matched = ctx->prefix_match ? ctx->prefix_match[ep->index] * ctx->block_tokens : 0.0;
        double uncached = tokens - matched > 1.0 ? tokens - matched : 1.0;
        double waiting = ep->report.have_waiting ? ep->report.waiting : 0.0;
        double ahead = (double)ep->pending_prefill_tokens + waiting * tokens;
        double tps = ep->ttft_observations ? ep->prefill_tps : prior;
        double ttft = (ahead + uncached) / (tps > 1.0 ? tps : 1.0);
        out[i] = ttft;
        if (!c[i].stale && (best == 0 || ttft < best))
            best = ttft;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = c[i].stale || best == 0 ? 0.0 : best / out[i];
}

const sb_scorer_def sb_scorer_predicted_latency = {.name = "predicted-latency", .category = SB_DISTRIBUTION,
                                                  .score = score};
