/* fallback: moving a request to the next pool of its pool's `fallbacks:` (net/fallback.h). */
#include "net/fallback.h"

#include <string.h>
#include <uv.h>

#include "core/admission.h"

bool sb_gateway_fallback(sb_gateway *gw, const sb_config *cfg, sb_proxy_target *t, sb_sched_request *rr,
                         enum sb_fallback_reason why, bool for_picker)
{
    uint32_t from = t->fell_back ? t->requested_pool : t->pool;
    if (from >= cfg->n_pools || from >= gw->cfg->n_pools)
        return false;
    const sb_pool_config *pc = &cfg->pools[from];
    size_t n = pc->n_fallbacks < SB_FALLBACKS_MAX ? pc->n_fallbacks : SB_FALLBACKS_MAX;
    if (t->fallback_next >= n)
        return false;
    uint32_t pools[SB_FALLBACKS_MAX];
    bool skip[SB_FALLBACKS_MAX];
    size_t n_router = sb_router_pool_count(gw->router);
    for (size_t i = 0; i < n; i++) {
        uint32_t p = pc->fallbacks[i].pool;
        pools[i] = p;
        /* Envoy forwards what the picker picks to the address it is given over its own
         * cluster's transport (ORIGINAL_DST: plain): an https:// pool is not reachable that
         * way (docs/endpoint-picker.md). An upstream key is (the picker sets it). */
        skip[i] = p >= n_router || p >= cfg->n_pools || (for_picker && cfg->pools[p].tls);
    }
    size_t cursor = t->fallback_next;
    enum sb_band band = t->band >= 0 && t->band < SB_BAND_COUNT ? (enum sb_band)t->band : SB_BAND_STANDARD;
    int i = sb_admission_fallback(gw->adm, gw->router, pools, skip, n, &cursor, band, uv_hrtime());
    t->fallback_next = (uint8_t)cursor;
    if (i < 0)
        return false;
    const sb_fallback_config *fb = &pc->fallbacks[i];
    const char *served = fb->model ? fb->model : cfg->pools[fb->pool].models[0];
    t->fell_back = true;
    t->requested_pool = from;
    t->fallback_reason = (uint8_t)why;
    t->pool = fb->pool;
    t->adapter = -1;
    /* Always spliced, even when the name is the one asked: the fallback pool's endpoints may
     * know only their own name. model_tok_start/end and insert_model stay the body's. */
    t->served = served;
    t->served_len = strlen(served);
    rr->pool = fb->pool;
    rr->adapter = -1;
    /* The router's profile of the pool at each pick, as a fresh request of that pool gets:
     * the pointer into gw->cfg would be the configuration in force now, which the exchange does
     * not hold (it holds its own snapshot); a second reload would free it under the retry. */
    rr->profile = NULL;
    rr->gated = false;
    rr->exclude = NULL;
    rr->n_exclude = 0;
    /* Hashed under the requested model's seed: they would match nothing of the fallback's. */
    rr->block_hashes = NULL;
    rr->n_blocks = 0;
    rr->kv_keys = NULL;
    rr->n_kv_keys = 0;
    rr->prefix_key = 0;
    /* The counters are laid out by the entries of the configuration in force (stats.cfg), and
     * cfg may be the request's older snapshot: a reload that reordered the list would count
     * under another fallback's label by position. By name; an entry the reload removed is not
     * counted (its series is gone). */
    const sb_config *sc = gw->stats.cfg;
    if (gw->stats.fallbacks && sc && from < sc->n_pools) {
        const sb_pool_config *sp = &sc->pools[from];
        for (size_t k = 0; k < sp->n_fallbacks && k < SB_FALLBACKS_MAX; k++)
            if (!strcmp(sp->fallbacks[k].pool_name, fb->pool_name)) {
                gw->stats.fallbacks[(size_t)from * SB_FALLBACKS_MAX + k][why]++;
                break;
            }
    }
    return true;
}
