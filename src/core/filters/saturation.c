/* saturation filter: drops endpoints whose effective queue (reported waiting plus requests
 * sent since the report) is over queue_threshold or whose KV utilisation is over
 * kv_threshold, and stale ones. Soft: when every endpoint is saturated, all stay, and the
 * scorers choose among them. Thresholds follow GIE's defaults (queue 5, KV 0.8); a request
 * released by flow control's gate uses the gate's where tighter.
 *
 * gate filter: the same test for the requests flow control's gate released; for every other
 * request only the stale endpoints go. What the gate releases goes where it saw room, while
 * ordinary traffic is left to the scorers (the default profile's choice: the saturation
 * filter's thresholds on every request sent traffic away from the replicas holding its prefix,
 * docs/benchmarks.md section 10). */
#include "core/sched.h"

static void drop_saturated(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n,
                           const char *name)
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
            c[i].removed_by = name;
    }
}

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    drop_saturated(ctx, req, c, n, "saturation");
}

const sb_filter_def sb_filter_saturation = {.name = "saturation", .soft = true, .run = run};

static void run_gate(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    if (req->gated) {
        drop_saturated(ctx, req, c, n, "gate");
        return;
    }
    /* Stale endpoints go for every request, as saturation drops them: an endpoint whose
     * reports stopped may be gone, and its prefix score and our own counters would still
     * make it win. One whose requests still succeed is not `stale` here (stale but serving,
     * core/endpoint.h): it stays, scored from our own accounting. */
    for (size_t i = 0; i < n; i++)
        if (!c[i].removed_by && c[i].stale)
            c[i].removed_by = "gate";
}

const sb_filter_def sb_filter_gate = {.name = "gate", .soft = true, .run = run_gate};
