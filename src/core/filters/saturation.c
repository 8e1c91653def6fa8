/* saturation filter: drops endpoints whose effective queue (reported waiting plus requests
 * sent since the report) is over queue_threshold or whose KV utilisation is over
 * kv_threshold, and stale ones. Soft: when every endpoint is saturated, all stay, and the
 * scorers choose among them. Thresholds follow GIE's defaults (queue 5, KV 0.8); a request
 * released by flow control's gate uses the gate's where tighter. */
#include "core/sched.h"

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    const sb_profile *p = ctx->profile;
    double q = p->queue_threshold, kv = p->kv_threshold;
    /* A request flow control released goes where its gate saw room. */
    if (req->gated && req->gate_queue >= 0 && req->gate_queue < q)
        q = req->gate_queue;
    if (req->gated && req->gate_kv >= 0 && req->gate_kv < kv)
        kv = req->gate_kv;
    for (size_t i = 0; i < n; i++) {
        if (c[i].removed_by)
            continue;
        if (c[i].stale || sb_endpoint_waiting(c[i].ep) > q || sb_endpoint_kv_usage(c[i].ep) > kv)
            c[i].removed_by = "saturation";
    }
}

const sb_filter_def sb_filter_saturation = {.name = "saturation", .soft = true, .run = run};
