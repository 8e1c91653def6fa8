/* p2c picker (power of two choices): two distinct candidates at random, the better total wins
 * (a tie goes to the first drawn). Mitzenmacher's result: exponentially better max load than
 * one random choice, without herding onto the single best endpoint. */
#include "core/sched.h"

static size_t pick(sb_sched_ctx *ctx, const sb_candidate *c, size_t n)
{
    if (n == 1)
        return 0;
    size_t a = (size_t)(sb_rand_next(ctx->rng) % n);
    size_t b = (size_t)(sb_rand_next(ctx->rng) % (n - 1));
    if (b >= a)
        b++;
    return c[b].total > c[a].total ? b : a;
}

const sb_picker_def sb_picker_p2c = {.name = "p2c", .pick = pick};
