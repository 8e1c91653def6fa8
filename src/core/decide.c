/* decide: the pick (core/router.h) plus its ranked fallbacks; see the header. */
#include "core/decide.h"

/* Whether candidate a goes before b: higher total, then nearer after the pick in pool order. */
static bool before(const sb_candidate *c, size_t n, size_t pick, size_t a, size_t b)
{
    if (c[a].total != c[b].total)
        return c[a].total > c[b].total;
    return (a + n - pick) % n < (b + n - pick) % n;
}

/* Keeps the best `max` of the live candidates other than the pick, by insertion: max is at
 * most SB_DECIDE_MAX_RANKED - 1, so O(n * max) over a pool's endpoints with no allocation. */
static void rank_fallbacks(const sb_decision *d, size_t pick, size_t max, sb_ranking *out)
{
    const sb_candidate *c = d->cands;
    uint32_t *fb = out->ep + 1;
    size_t k = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (i == pick || c[i].slot < 0)
            continue;
        size_t j = k < max ? k++ : max;
        while (j > 0 && before(c, d->n, pick, i, fb[j - 1])) {
            if (j < max)
                fb[j] = fb[j - 1];
            j--;
        }
        if (j < max)
            fb[j] = (uint32_t)i;
    }
    for (size_t i = 0; i < k; i++)
        out->total[i + 1] = c[fb[i]].total;
    out->n = 1 + k;
}

int sb_decide(sb_router *r, const sb_request_desc *req, size_t max_ranked, sb_ns now, sb_ranking *out)
{
    int ep = sb_router_pick(r, &req->sched, now);
    out->n = 0;
    out->why = sb_router_last_decision(r, req->sched.pool);
    if (ep < 0 || !out->why)
        return -1;
    out->ep[0] = (uint32_t)ep;
    out->total[0] = out->why->cands[ep].total;
    out->n = 1;
    if (max_ranked > SB_DECIDE_MAX_RANKED)
        max_ranked = SB_DECIDE_MAX_RANKED;
    if (max_ranked > 1)
        rank_fallbacks(out->why, (size_t)ep, max_ranked - 1, out);
    return ep;
}

int sb_decide_render_endpoints(sb_router *r, uint32_t pool, const sb_ranking *rk, sb_buf *b)
{
    int rc = 0;
    bool first = true;
    for (size_t i = 0; i < rk->n; i++) {
        const sb_endpoint *e = sb_router_endpoint(r, pool, rk->ep[i]);
        if (!e || !e->address || !e->address[0])
            continue;
        rc |= sb_buf_printf(b, "%s%s", first ? "" : ",", e->address);
        first = false;
    }
    return rc ? -1 : 0;
}
