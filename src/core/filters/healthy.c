/* healthy filter: drops ejected, down and draining endpoints, and half-open ones whose trial
 * request is already out. Hard: with none left, the request gets 503. */
#include "core/sched.h"

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    (void)req;
    for (size_t i = 0; i < n; i++)
        if (!c[i].removed_by && !sb_endpoint_available(c[i].ep, ctx->now))
            c[i].removed_by = "healthy";
}

const sb_filter_def sb_filter_healthy = {.name = "healthy", .soft = false, .run = run};
