/* lora-affinity scorer (affinity): for an adapter request, 1.0 where the adapter is loaded,
 * 0.8 where there is room to load it, 0.6 where requests already wait for it, 0 otherwise;
 * the values of the Gateway API Inference Extension's LoRA affinity scorer. Endpoints with
 * no LoRA report score 0.8 (room assumed). Base-model requests score 1.0 everywhere. */
#include "core/sched.h"

static void score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                  double *out)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint_report *r = &c[i].ep->report;
        int a = req->adapter;
        if (a < 0)
            out[i] = 1.0;
        else if (!r->have_lora)
            out[i] = 0.8;
        else if (a < 64 && ((r->lora_running_mask >> a) & 1))
            out[i] = 1.0;
        else if (r->max_lora == 0 || r->lora_running_count < r->max_lora)
            out[i] = 0.8;
        else if (a < 64 && ((r->lora_waiting_mask >> a) & 1))
            out[i] = 0.6;
        else
            out[i] = 0.0;
    }
}

const sb_scorer_def sb_scorer_lora_affinity = {.name = "lora-affinity", .category = SB_AFFINITY, .score = score};
