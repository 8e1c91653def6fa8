/* saturation filter: drops endpoints whose effective queue (reported waiting plus requests
 * sent since the report) is over queue_threshold or whose KV utilisation is over
 * kv_threshold, and stale ones. Soft: when every endpoint is saturated, all stay, and the
 * scorers choose among them. Thresholds follow GIE's defaults (queue 5, KV 0.8). */
#include "core/sched.h"

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    (void)req;
    const sb_profile *p = ctx->profile;
    for (size_t i = 0; i < n; i++) {
        if (c[i].removed_by)
            continue;
        if (c[i].stale || sb_endpoint_waiting(c[i].ep) > p->queue_threshold ||
            sb_endpoint_kv_usage(c[i].ep) > p->kv_threshold)
            c[i].removed_by = "saturation";
    }
}

const sb_filter_def sb_filter_saturation = {.name = "saturation", .soft = true, .run = run};
