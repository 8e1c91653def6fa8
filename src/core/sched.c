#include "core/sched.h"

#include <math.h>
#include <string.h>

void sb_score_lower_is_better(const sb_candidate *c, size_t n, const double *values, double min_range,
                              bool skip_stale, double *out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (skip_stale && c[i].stale)
            continue;
        lo = values[i] < lo ? values[i] : lo;
        hi = values[i] > hi ? values[i] : hi;
    }
    double range = hi - lo > min_range ? hi - lo : min_range;
    for (size_t i = 0; i < n; i++) {
        if (skip_stale && c[i].stale)
            out[i] = 0.0;
        else
            out[i] = range > 0 ? 1.0 - (values[i] - lo) / range : 1.0;
    }
}

static bool excluded(const sb_sched_request *req, uint32_t idx)
{
    for (size_t i = 0; i < req->n_exclude; i++)
        if (req->exclude[i] == idx)
            return true;
    return false;
}

int sb_sched_run(sb_sched_ctx *ctx, const sb_sched_request *req, sb_endpoint *eps, size_t n, sb_decision *d)
{
    const sb_profile *p = ctx->profile;
    d->profile = p;
    d->pool = req->pool;
    d->pool_name = NULL; /* the router names it */
    d->n = n;
    d->picked = -1;
    d->n_live = 0;
    d->n_stale = 0;
    d->panic = false;
    d->reason = NULL;
    d->hot_blocks = ctx->hot_blocks;
    d->hot_needed = ctx->hot_needed;
    size_t alive = 0;
    for (size_t i = 0; i < n; i++) {
        sb_candidate *c = &d->cands[i];
        c->ep = &eps[i];
        /* A stale endpoint whose requests succeed is kept as if fresh: the router has put its
         * own accounting in place of the old report (sb_endpoint_expire_report). */
        bool stale = sb_endpoint_is_stale(&eps[i], ctx->stale_ns, ctx->now);
        c->serving = stale && sb_endpoint_serving(&eps[i], ctx->now);
        c->stale = stale && !c->serving;
        c->panic = false;
        c->removed_by = excluded(req, (uint32_t)i) ? "retry-excluded" : NULL;
        c->total = 0;
        c->slot = -1;
        c->prefix_blocks = 0;
        c->prefix_source = SB_PREFIX_NONE;
        alive += !c->removed_by;
    }
    for (size_t f = 0; f < p->n_filters && alive; f++) {
        const sb_filter_def *fd = p->filters[f];
        fd->run(ctx, req, d->cands, n);
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += !d->cands[i].removed_by;
        if (left == 0 && fd->soft) {
            /* A soft filter never empties the pool: undo what it removed. */
            for (size_t i = 0; i < n; i++)
                if (d->cands[i].removed_by && !strcmp(d->cands[i].removed_by, fd->name))
                    d->cands[i].removed_by = NULL;
            continue;
        }
        alive = left;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (d->cands[i].removed_by)
            continue;
        d->cands[i].slot = (int32_t)m;
        d->live[m++] = d->cands[i];
        d->n_stale += d->cands[i].stale;
        d->panic |= d->cands[i].panic;
    }
    d->n_live = m;
    if (m == 0) {
        d->reason = "no candidate left after filters";
        return -1;
    }
    double wsum = 0;
    for (size_t s = 0; s < p->n_scorers; s++) {
        double *out = &d->scores[s * m];
        p->scorers[s].def->score(ctx, req, d->live, m, out);
        wsum += p->scorers[s].weight;
        for (size_t i = 0; i < m; i++)
            d->live[i].total += p->scorers[s].weight * out[i];
    }
    if (wsum > 0)
        for (size_t i = 0; i < m; i++)
            d->live[i].total /= wsum;
    size_t k = p->picker->pick(ctx, d->live, m);
    /* Positions in eps, not ep->index: a caller may pass a slice of a larger table, and
     * cands has exactly n entries. */
    for (size_t i = 0; i < m; i++)
        d->cands[d->live[i].ep - eps].total = d->live[i].total;
    d->picked = (int)(d->live[k].ep - eps);
    if (d->panic)
        d->reason = "panic: every endpoint left is ejected or down, routing over them all";
    else
        d->reason = d->n_stale == m && p->n_scorers ? "all candidates stale: scored as loaded" : p->picker->name;
    return d->picked;
}
