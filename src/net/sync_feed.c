/* The gateway's side of gateway sync: names for what its router dispatches, and what the peers
 * dispatched applied to its router. */
#include "net/sync_feed.h"

#include <string.h>
#include <uv.h>

#include "base/log.h"
#include "core/router.h"
#include "net/peer_sync.h"

/* ---- ours, told to the peers (the router's hooks; under the lock, any thread) ---- */

static uint64_t on_dispatched(void *ud, uint32_t pool, uint32_t ep, const uint64_t *hashes, size_t n,
                              uint32_t prompt_tokens)
{
    sb_gateway *gw = ud;
    const sb_config *cfg = gw->cfg;
    if (!gw->sync || pool >= cfg->n_pools || ep >= cfg->pools[pool].n_endpoints)
        return 0;
    return sb_peer_sync_publish_sent(gw->sync, cfg->pools[pool].name, cfg->pools[pool].endpoints[ep].address, hashes, n,
                                     prompt_tokens);
}

static void on_first_byte(void *ud, uint64_t id)
{
    sb_gateway *gw = ud;
    if (gw->sync)
        sb_peer_sync_publish(gw->sync, SB_PEER_FIRST, id);
}

static void on_finished(void *ud, uint64_t id)
{
    sb_gateway *gw = ud;
    if (gw->sync)
        sb_peer_sync_publish(gw->sync, SB_PEER_DONE, id);
}

/* ---- theirs, applied to our router (the main loop) ---- */

/* Pools and endpoints by name: a fleet has a handful of pools and at most
 * discovery.max_endpoints endpoints per pool, and this runs once per peer dispatch. */
static bool resolve(const sb_config *cfg, const char *pool, size_t pool_len, const char *ep, size_t ep_len,
                    uint32_t *pi, uint32_t *ei)
{
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        if (strlen(pc->name) != pool_len || memcmp(pc->name, pool, pool_len))
            continue;
        for (size_t e = 0; e < pc->n_endpoints; e++) {
            const char *a = pc->endpoints[e].address;
            if (strlen(a) == ep_len && !memcmp(a, ep, ep_len)) {
                *pi = (uint32_t)p, *ei = (uint32_t)e;
                return true;
            }
        }
        return false;
    }
    return false;
}

static bool on_peer_sent(void *ud, const char *pool, size_t pool_len, const char *endpoint, size_t endpoint_len,
                         const uint64_t *hashes, size_t n, uint32_t prompt_tokens, uint32_t *pi, uint32_t *ei,
                         sb_ticket *t)
{
    sb_gateway *gw = ud;
    if (!resolve(gw->cfg, pool, pool_len, endpoint, endpoint_len, pi, ei))
        return false;
    *t = sb_router_peer_dispatched(gw->router, *pi, *ei, hashes, n, prompt_tokens, uv_hrtime());
    return true;
}

static void on_peer_first_byte(void *ud, uint32_t pool, uint32_t ep, sb_ticket *t)
{
    sb_gateway *gw = ud;
    sb_router_first_byte(gw->router, pool, ep, t, uv_hrtime());
    sb_router_first_token(gw->router, pool, ep, t); /* its blocks now match (computed) */
}

/* A peer's request ended (or is forgotten): neither its success nor its failure is ours to
 * judge the endpoint's health by. */
static void on_peer_done(void *ud, uint32_t pool, uint32_t ep, sb_ticket *t)
{
    sb_gateway *gw = ud;
    sb_router_finished(gw->router, pool, ep, t, true, false, uv_hrtime());
}

/* ---- lifecycle ---- */

static sb_peer_sync_opts opts_of(const sb_config *cfg)
{
    return (sb_peer_sync_opts){.listen = cfg->sync_listen,
                               .peers = (const char *const *)cfg->sync_peers,
                               .n_peers = cfg->n_sync_peers,
                               .heartbeat_ms = cfg->sync_heartbeat_ms,
                               .peer_timeout_ms = cfg->sync_peer_timeout_ms,
                               .max_request_ms = cfg->sync_max_request_ms,
                               .max_tracked = cfg->sync_max_tracked,
                               .max_hashes = cfg->max_prompt_blocks,
                               .curve_secret = cfg->sync_has_key ? cfg->sync_key : NULL,
                               .curve_rotation_secret = cfg->sync_has_rotation_key ? cfg->sync_rotation_key : NULL};
}

int sb_gateway_sync_start(sb_gateway *gw, sb_gateway *old)
{
    sb_peer_sync_cbs cbs = {.sent = on_peer_sent, .first_byte = on_peer_first_byte, .done = on_peer_done, .ud = gw};
    if (old && old->sync) {
        gw->sync = old->sync;
        sb_peer_sync_ref(gw->sync);
        sb_peer_sync_set_owner(gw->sync, &cbs);
    } else if (gw->cfg->sync_listen) {
        uint64_t id = 0;
        while (!id) /* a sender id, never 0; getrandom fails only before the pool is seeded */
            if (uv_random(NULL, NULL, &id, sizeof id, 0, NULL) < 0)
                id = uv_hrtime() ^ (uint64_t)(uintptr_t)gw;
        sb_peer_sync_opts o = opts_of(gw->cfg);
        int rc = sb_peer_sync_start(gw->loop, &o, id, &cbs, &gw->sync);
        if (rc < 0)
            return rc;
    }
    if (gw->sync) {
        sb_router_sync hooks = {
            .dispatched = on_dispatched, .first_byte = on_first_byte, .finished = on_finished, .ud = gw};
        sb_router_set_sync(gw->router, &hooks);
    }
    return 0;
}

void sb_gateway_sync_stop(sb_gateway *gw)
{
    if (!gw->sync)
        return;
    sb_peer_sync_unref(gw->sync, gw);
    gw->sync = NULL;
}

static bool same_str(const char *a, const char *b)
{
    return (!a || !b) ? a == b : !strcmp(a, b);
}

bool sb_gateway_sync_same(const sb_config *a, const sb_config *b)
{
    if (!same_str(a->sync_listen, b->sync_listen) || a->n_sync_peers != b->n_sync_peers ||
        a->sync_heartbeat_ms != b->sync_heartbeat_ms || a->sync_peer_timeout_ms != b->sync_peer_timeout_ms ||
        a->sync_max_tracked != b->sync_max_tracked || a->sync_max_request_ms != b->sync_max_request_ms ||
        a->sync_has_key != b->sync_has_key || strcmp(a->sync_key, b->sync_key) ||
        a->sync_has_rotation_key != b->sync_has_rotation_key || strcmp(a->sync_rotation_key, b->sync_rotation_key))
        return false;
    for (size_t i = 0; i < a->n_sync_peers; i++)
        if (strcmp(a->sync_peers[i], b->sync_peers[i]))
            return false;
    return true;
}
