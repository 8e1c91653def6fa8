/* weighted-random picker: probability proportional to the total score (uniform when every
 * total is 0). Spreads load while still preferring better endpoints. */
#include "core/sched.h"

static size_t pick(sb_sched_ctx *ctx, const sb_candidate *c, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += c[i].total;
    if (sum <= 0)
        return (size_t)(sb_rand_next(ctx->rng) % n);
    double r = sb_rand_unit(ctx->rng) * sum;
    for (size_t i = 0; i < n; i++) {
        r -= c[i].total;
        if (r < 0)
            return i;
    }
    return n - 1;
}

const sb_picker_def sb_picker_weighted_random = {.name = "weighted-random", .pick = pick};
