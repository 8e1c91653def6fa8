/* slots: free slots over total, llama.cpp's concurrency unit (an agent's report or a /slots
 * scrape; core/endpoint.h, sb_endpoint_slots_idle, corrected by the gateway's own traffic
 * since the report). Paddler's balancer sends each request to the replica with the most idle
 * slots; scoring the fraction instead keeps the scale [0,1] and, in a fleet of equal
 * replicas, orders them the same way. An endpoint with no fresh slots report scores 0, as
 * loaded: stale state is never trusted (core/sched.h). */
#include "core/sched.h"

static void slots_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                        double *out)
{
    (void)req;
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *ep = c[i].ep;
        out[i] = sb_endpoint_slots_fresh(ep, ctx->now) ? (double)sb_endpoint_slots_idle(ep) / ep->slots.total : 0.0;
    }
}

const sb_scorer_def sb_scorer_slots = {.name = "slots", .category = SB_DISTRIBUTION, .score = slots_score};
