/* healthy filter: drops ejected, down and draining endpoints, and half-open ones whose trial
 * request is already out. Panic routing (Envoy's panic threshold, at 100%): when that would
 * leave no candidate, the ejected, down and busy half-open ones stay, marked `panic`: a pool
 * whose every replica looks sick is more likely a blip of our view (a restart, a partition of
 * the prober) than a fleet that cannot answer, and trying beats answering 503 at once.
 * Draining endpoints never stay: the operator took them out. */
#include <string.h>

#include "core/sched.h"

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    (void)req;
    size_t left = 0;
    bool tried_available = false;
    for (size_t i = 0; i < n; i++) {
        if (c[i].removed_by) {
            /* Panic is about the pool, not about what a retry has left: with a healthy endpoint
             * already tried, the sick ones left are not tried in panic. */
            if (!strcmp(c[i].removed_by, "retry-excluded") && sb_endpoint_available(c[i].ep, ctx->now))
                tried_available = true;
            continue;
        }
        if (sb_endpoint_available(c[i].ep, ctx->now))
            left++;
        else
            c[i].removed_by = "healthy";
    }
    if (left || tried_available)
        return;
    for (size_t i = 0; i < n; i++)
        if (c[i].removed_by && !strcmp(c[i].removed_by, "healthy") &&
            sb_endpoint_health(c[i].ep, ctx->now) != SB_HEALTH_DRAINING) {
            c[i].removed_by = NULL;
            c[i].panic = true;
        }
}

const sb_filter_def sb_filter_healthy = {.name = "healthy", .soft = false, .run = run};
