/* Prefix scorers (affinity), from the router's prefix-index lookup (ctx->prefix_match):
 *   prefix         the fraction of the prompt's blocks the endpoint holds as a leading run,
 *                  with a hot run's blocks (profile hot_prefix) counted at holders / needed
 *                  while too few candidates hold it (hot_keep below), except where the
 *                  match reaches past the hot run (the request's own history is there);
 *                  where one candidate's does, the run counts for nothing on the others;
 *   prefix-tokens  the prefill the endpoint would save, in tokens, over prefix_ref_tokens
 *                  (capped at 1): for mixed prompt lengths, a long shared prefix outweighs a
 *                  short prompt matched whole, which the fraction would score the same.
 * A request without blocks (shorter than one block) scores 0 everywhere: no preference. */
#include "core/sched.h"

#include "core/hot_prefix.h"

/* The hot leading run as the candidates hold it (profile hot_prefix, core/hot_prefix.h):
 * its length, capped at the longest match among them (a filter may have removed its only
 * whole holder), and the credit it keeps: holders / needed while fewer candidates hold it than
 * its demand needs, so that the load scorers can send it to another endpoint; 1 once enough
 * do. */
static double hot_keep(const sb_sched_ctx *ctx, const sb_candidate *c, size_t n, double *run)
{
    *run = 0;
    if (!ctx->hot_blocks || !(ctx->hot_needed > 0))
        return 1.0;
    uint32_t longest = 0;
    for (size_t i = 0; i < n; i++)
        if (ctx->prefix_match[c[i].ep->index] > longest)
            longest = ctx->prefix_match[c[i].ep->index];
    uint32_t hot = ctx->hot_blocks < longest ? ctx->hot_blocks : longest;
    size_t holders = 0;
    for (size_t i = 0; hot && i < n; i++)
        holders += ctx->prefix_match[c[i].ep->index] >= hot;
    *run = hot;
    double keep = (double)holders / ctx->hot_needed;
    return keep < 1.0 ? keep : 1.0;
}

static void fraction(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                     double *out)
{
    (void)req;
    if (!ctx->prefix_match || !ctx->prefix_blocks) {
        for (size_t i = 0; i < n; i++)
            out[i] = 0.0;
        return;
    }
    double run;
    double keep = hot_keep(ctx, c, n, &run);
    /* A match reaching the ladder length after the hot run holds more than the shared prefix:
     * this request's own continuation (a conversation's history), which no other endpoint
     * has. The discount is for where a shared prefix goes next, not for moving a follow-up
     * off the endpoint holding its history (that costs the whole history's prefill). */
    double own = run > 0 ? (double)sb_hot_prefix_next_length((size_t)run) : 0.0;
    /* The ladder stops at the prompt's own length (sb_hot_prefix_observe): a prompt between
     * the hot run and the next length is held past the run by a match of all of it. */
    if (run < (double)ctx->prefix_blocks && own > (double)ctx->prefix_blocks)
        own = (double)ctx->prefix_blocks;
    /* A request that continues what a candidate holds past the hot run (a follow-up whose
     * history is there) is not placing the hot run: it is deciding whether to leave its
     * history. The hot run is on every endpoint that needs it, or will be, so it earns the
     * others nothing, and only what they hold past it counts: a follow-up leaves its holder
     * for load alone when the holder's load outweighs its history, not when the system
     * prompt's blocks held elsewhere make up most of the difference (docs/benchmarks.md
     * section 10, session 38: multi-turn at three gateways near capacity, 24-39 follow-ups
     * of 640 moved off their history before, none with this). */
    for (size_t i = 0; run > 0 && keep > 0 && i < n; i++)
        if ((double)ctx->prefix_match[c[i].ep->index] >= own)
            keep = 0.0;
    for (size_t i = 0; i < n; i++) {
        double m = (double)ctx->prefix_match[c[i].ep->index];
        double hot = m < run ? m : run;
        out[i] = (m >= own ? m : m - hot * (1.0 - keep)) / (double)ctx->prefix_blocks;
    }
}

static void tokens(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                   double *out)
{
    (void)req;
    for (size_t i = 0; i < n; i++) {
        double saved = ctx->prefix_match ? ctx->prefix_match[c[i].ep->index] * ctx->block_tokens : 0.0;
        double s = ctx->prefix_ref_tokens > 0 ? saved / ctx->prefix_ref_tokens : 0.0;
        out[i] = s > 1.0 ? 1.0 : s;
    }
}

const sb_scorer_def sb_scorer_prefix = {.name = "prefix", .category = SB_AFFINITY, .score = fraction};
const sb_scorer_def sb_scorer_prefix_tokens = {.name = "prefix-tokens", .category = SB_AFFINITY, .score = tokens};
