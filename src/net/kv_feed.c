/* The gateway's KV-event subscriptions: which endpoint reads which publisher, across reloads. */
#include "net/kv_feed.h"

#include <string.h>
#include <uv.h>

#include "base/log.h"
#include "core/kv_index.h"
#include "core/router.h"

/* One event into the pool's precise index (core/kv_index.h, rules there). */
static void apply_event(sb_kv_index *kv, uint32_t ep, const sb_kv_event *ev)
{
    bool other_medium = ev->medium != SB_KV_MEDIUM_GPU; /* no medium given: GPU */
    switch (ev->kind) {
    case SB_KV_BLOCK_STORED: {
        uint64_t extra = 0;
        if (ev->lora_name)
            extra = sb_kv_extra_of_adapter(ev->lora_name, ev->lora_name_len);
        else if (ev->has_lora_id && ev->lora_id > 0)
            extra = (uint64_t)ev->lora_id << 1; /* even: never an adapter name's key; unmatched */
        sb_kv_stored st = {.engine_hashes = ev->hashes,
                           .n = ev->n_hashes,
                           .has_parent = ev->has_parent,
                           .parent_engine_hash = ev->parent_hash,
                           .token_ids = ev->tokens,
                           .n_tokens = ev->n_tokens,
                           .block_size = ev->block_size ? ev->block_size : sb_kv_index_block_size(kv),
                           .extra = extra,
                           .other_medium = other_medium};
        sb_kv_index_block_stored(kv, ep, &st);
        break;
    }
    case SB_KV_BLOCK_REMOVED: sb_kv_index_block_removed(kv, ep, ev->hashes, ev->n_hashes, other_medium); break;
    case SB_KV_ALL_CLEARED: sb_kv_index_clear(kv, ep); break;
    }
}

/* The subscriber's batches feed the router's precise index; the endpoint's stream is heard
 * from its first batch on (an idle engine publishes nothing: silence never unhears it). */
static void on_kv_batch(void *ud, uint32_t pool, uint32_t ep, const sb_kv_batch *b, double lag_seconds)
{
    sb_gateway *gw = ud;
    gw->kv_batches++;
    sb_kv_index *kv = sb_router_kv_index(gw->router, pool);
    if (!kv)
        return;
    for (uint32_t i = 0; i < b->n_events; i++)
        apply_event(kv, ep, &b->events[i]);
    sb_router_kv_live(gw->router, pool, ep, true);
}

/* A gap nothing could fill, or the publisher restarted: the endpoint holds nothing we know. */
static void on_kv_clear(void *ud, uint32_t pool, uint32_t ep)
{
    sb_gateway *gw = ud;
    gw->kv_clears++;
    sb_router_kv_cleared(gw->router, pool, ep, uv_hrtime());
}

static size_t slot(const sb_gateway *gw, size_t p, size_t e)
{
    return gw->pool_first_up[p] + e;
}

/* Endpoint e of pool p's subscriber options from kc, addresses expanded into the buffers. */
static bool kv_opts(const sb_kv_events_config *kc, const sb_endpoint_config *ec, char *sub, char *rep, size_t cap,
                    sb_kv_sub_opts *o)
{
    if (sb_config_kv_address(kc->endpoint, ec->host, ec->port, sub, cap) < 0 ||
        (kc->replay_endpoint && sb_config_kv_address(kc->replay_endpoint, ec->host, ec->port, rep, cap) < 0))
        return false;
    *o = (sb_kv_sub_opts){.endpoint = sub,
                          .replay_endpoint = kc->replay_endpoint ? rep : NULL,
                          .topic = kc->topic,
                          .stale_after_ms = kc->stale_after_ms,
                          .replay_timeout_ms = kc->replay_timeout_ms,
                          .max_messages_per_turn = kc->max_messages_per_turn,
                          .reconnect_ms = kc->reconnect_ms,
                          .reconnect_max_ms = kc->reconnect_max_ms,
                          .heartbeat_ms = kc->heartbeat_ms,
                          .replay_on_join = kc->replay_on_join,
                          .limits = kc->limits};
    return true;
}

static int ensure_hub(sb_gateway *gw)
{
    if (gw->kv_hub)
        return 0;
    int rc = sb_kv_hub_new(gw->loop, &gw->kv_hub);
    if (rc < 0)
        SB_ERROR("kv events: cannot create the ZMQ context: %s", strerror(-rc));
    return rc;
}

/* Starts endpoint (p, e)'s subscriber; on failure the endpoint stays on the approximate path. */
static void start_one(sb_gateway *gw, size_t p, size_t e, const sb_kv_sub_opts *o)
{
    const sb_pool_config *pc = &gw->cfg->pools[p];
    if (ensure_hub(gw) < 0)
        return;
    sb_kv_sub_cbs cbs = {.batch = on_kv_batch, .clear = on_kv_clear, .ud = gw};
    int rc = sb_kv_sub_start(gw->kv_hub, o, (uint32_t)p, (uint32_t)e, &cbs, &gw->kv_subs[slot(gw, p, e)]);
    if (rc < 0)
        SB_ERROR("pool %s: endpoint %s: kv events from %s: %s; this endpoint routes on the approximate index", pc->name,
                 pc->endpoints[e].address, o->endpoint, strerror(-rc));
    else
        SB_INFO("pool %s: endpoint %s: kv events from %s%s%s", pc->name, pc->endpoints[e].address, o->endpoint,
                o->replay_endpoint ? ", replay " : "", o->replay_endpoint ? o->replay_endpoint : "");
}

/* old's subscriber for the same pool name and endpoint address with the same options, taken
 * from old; NULL if none. */
static sb_kv_sub *take_from(sb_gateway *old, const char *pool, const char *address, const sb_kv_sub_opts *o)
{
    if (!old || !old->kv_subs)
        return NULL;
    for (size_t q = 0; q < old->cfg->n_pools; q++) {
        const sb_pool_config *op = &old->cfg->pools[q];
        if (strcmp(op->name, pool))
            continue;
        for (size_t f = 0; f < op->n_endpoints; f++) {
            sb_kv_sub **s = &old->kv_subs[slot(old, q, f)];
            if (*s && !strcmp(op->endpoints[f].address, address) && sb_kv_sub_same_opts(*s, o)) {
                sb_kv_sub *taken = *s;
                *s = NULL;
                return taken;
            }
        }
    }
    return NULL;
}

void sb_gateway_kv_start(sb_gateway *gw, sb_gateway *old)
{
    const sb_config *cfg = gw->cfg;
    if (old && old->kv_hub) {
        gw->kv_hub = old->kv_hub;
        sb_kv_hub_ref(gw->kv_hub);
    }
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        if (!pc->kv_events)
            continue;
        for (size_t e = 0; e < pc->n_endpoints; e++) {
            char sub[512], rep[512];
            sb_kv_sub_opts o;
            if (!kv_opts(pc->kv_events, &pc->endpoints[e], sub, rep, sizeof sub, &o)) {
                SB_ERROR("pool %s: endpoint %s: kv events address too long", pc->name, pc->endpoints[e].address);
                continue;
            }
            sb_kv_sub *moved = take_from(old, pc->name, pc->endpoints[e].address, &o);
            if (moved) {
                sb_kv_sub_cbs cbs = {.batch = on_kv_batch, .clear = on_kv_clear, .ud = gw};
                sb_kv_sub_set_owner(moved, (uint32_t)p, (uint32_t)e, &cbs);
                gw->kv_subs[slot(gw, p, e)] = moved;
            } else {
                start_one(gw, p, e, &o);
            }
        }
    }
}

void sb_gateway_kv_reconfigure(sb_gateway *gw)
{
    const sb_config *cfg = gw->cfg;
    if (!gw->kv_subs)
        return;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        for (size_t e = 0; e < pc->n_endpoints; e++) {
            sb_kv_sub **s = &gw->kv_subs[slot(gw, p, e)];
            char sub[512], rep[512];
            sb_kv_sub_opts o;
            bool want = pc->kv_events && kv_opts(pc->kv_events, &pc->endpoints[e], sub, rep, sizeof sub, &o);
            if (*s && want && sb_kv_sub_same_opts(*s, &o))
                continue;
            if (*s) {
                sb_kv_sub_stop(*s);
                *s = NULL;
            }
            if (want)
                start_one(gw, p, e, &o);
        }
    }
}

void sb_gateway_kv_stop(sb_gateway *gw)
{
    if (gw->kv_subs && gw->cfg) {
        size_t total = gw->pool_first_up[gw->cfg->n_pools];
        for (size_t i = 0; i < total; i++) {
            sb_kv_sub_stop(gw->kv_subs[i]);
            gw->kv_subs[i] = NULL;
        }
    }
    if (gw->kv_hub)
        sb_kv_hub_unref(gw->kv_hub);
    gw->kv_hub = NULL;
}

const sb_kv_sub *sb_gateway_kv_sub(const sb_gateway *gw, uint32_t pool, uint32_t ep)
{
    return gw->kv_subs ? gw->kv_subs[slot(gw, pool, ep)] : NULL;
}
