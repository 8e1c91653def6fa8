/* round-robin picker: ignores scores; the next candidate after the last one picked, in
 * endpoint order (the cursor is per pool, kept by the caller in ctx->rr_cursor). */
#include "core/sched.h"

static size_t pick(sb_sched_ctx *ctx, const sb_candidate *c, size_t n)
{
    /* First live candidate whose endpoint index is at or after the cursor, else wrap. */
    size_t best = 0;
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (c[i].ep->index >= ctx->rr_cursor) {
            best = i;
            found = true;
            break;
        }
    if (!found)
        best = 0;
    ctx->rr_cursor = c[best].ep->index + 1;
    return best;
}

const sb_picker_def sb_picker_round_robin = {.name = "round-robin", .pick = pick};
