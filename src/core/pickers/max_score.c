/* max-score picker: the highest total; ties broken uniformly at random (reservoir sampling),
 * so equal endpoints share load instead of the first one taking everything. */
#include "core/sched.h"

static size_t pick(sb_sched_ctx *ctx, const sb_candidate *c, size_t n)
{
    size_t best = 0;
    uint64_t ties = 1;
    for (size_t i = 1; i < n; i++) {
        if (c[i].total > c[best].total + 1e-12) {
            best = i;
            ties = 1;
        } else if (c[i].total > c[best].total - 1e-12 && sb_rand_next(ctx->rng) % ++ties == 0) {
            best = i;
        }
    }
    return best;
}

const sb_picker_def sb_picker_max_score = {.name = "max-score", .pick = pick};
