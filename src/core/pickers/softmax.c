/* softmax picker: probability proportional to exp(total / temperature). Temperature near 0
 * approaches max-score; large temperatures approach uniform. */
#include <math.h>

#include "core/sched.h"

static size_t pick(sb_sched_ctx *ctx, const sb_candidate *c, size_t n)
{
    double t = ctx->profile->temperature > 1e-6 ? ctx->profile->temperature : 1e-6;
    double hi = c[0].total;
    for (size_t i = 1; i < n; i++)
        hi = c[i].total > hi ? c[i].total : hi;
    /* Subtract the maximum before exp: no overflow, same distribution. */
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += exp((c[i].total - hi) / t);
    double r = sb_rand_unit(ctx->rng) * sum;
    for (size_t i = 0; i < n; i++) {
        r -= exp((c[i].total - hi) / t);
        if (r < 0)
            return i;
    }
    return n - 1;
}

const sb_picker_def sb_picker_softmax = {.name = "softmax", .pick = pick};
