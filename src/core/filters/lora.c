/* lora filter: for an adapter request, keeps endpoints that have the adapter loaded or room
 * to load it (fewer than max_lora adapters running). Endpoints with no LoRA report are kept
 * (unknown is not full). Soft: if none qualifies, all stay (the engine queues the request). */
#include "core/sched.h"

static bool qualifies(const sb_endpoint *ep, int adapter)
{
    const sb_endpoint_report *r = &ep->report;
    if (!r->have_lora)
        return true;
    if (adapter < 64 && (r->lora_running_mask >> adapter) & 1)
        return true;
    return r->max_lora == 0 || r->lora_running_count < r->max_lora;
}

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    (void)ctx;
    if (req->adapter < 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (!c[i].removed_by && !qualifies(c[i].ep, req->adapter))
            c[i].removed_by = "lora";
}

const sb_filter_def sb_filter_lora = {.name = "lora", .soft = true, .run = run};
