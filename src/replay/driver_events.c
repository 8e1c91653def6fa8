/* The product's precise index in replay (opts.kv_events): the simulated engines record their
 * KV-cache events (sim/engine.h), a lag queue (replay/lag_queue.h) delays them by
 * opts.event_lag_ns as publishing and transport would, and then every gateway replica's router
 * hears them, exactly as net/kv_feed.c feeds a live gateway: BlockStored with the adapter's
 * name as the chain's extra, BlockRemoved, AllBlocksCleared; the endpoint's stream is heard
 * from its first event. A restart is heard as a clear (a live subscriber sees the sequence
 * start again). Requests carry their keys computed from their token ids, which a live gateway
 * gets from the engines' /tokenize. */
#include "replay/driver_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "core/kv_index.h"
#include "core/router.h"

/* A record in the lag queue: this header, then n_blocks hashes, then the token ids. */
typedef struct rec_head {
    uint32_t n_blocks, n_tokens, block_size, adapter;
    uint64_t parent_hash;
    bool has_parent;
} rec_head;

static uint64_t extra_of(uint32_t adapter)
{
    if (!adapter)
        return 0;
    char name[32];
    int len = snprintf(name, sizeof(name), "adapter-%u", adapter); /* as set_up_pool names them */
    return sb_kv_extra_of_adapter(name, (size_t)len);
}

/* The lag queue's apply: one event, to every gateway's index. */
static void apply(void *ctx, uint32_t kind, uint64_t rep, const void *payload, size_t len)
{
    driver *d = ctx;
    rec_head h = {0};
    const uint64_t *hashes = NULL;
    if (kind != SB_ENGINE_KV_CLEARED) {
        memcpy(&h, payload, sizeof h);
        hashes = (const uint64_t *)((const char *)payload + sizeof h);
    }
    for (uint32_t g = 0; g < d->n_gw; g++) {
        sb_kv_index *kv = sb_router_kv_index(d->gw[g].router, 0);
        if (!kv)
            continue;
        if (kind == SB_ENGINE_KV_CLEARED) {
            /* As the live subscriber's clear on a restart: stamped, so a scrape noticing the
             * same restart later keeps what the new engine reported since. */
            sb_router_kv_cleared(d->gw[g].router, 0, (uint32_t)rep, d->now);
        } else if (kind == SB_ENGINE_KV_REMOVED) {
            sb_kv_index_block_removed(kv, (uint32_t)rep, hashes, h.n_blocks, false);
        } else {
            sb_kv_stored st = {.engine_hashes = hashes,
                               .n = h.n_blocks,
                               .has_parent = h.has_parent,
                               .parent_engine_hash = h.parent_hash,
                               .token_ids = (const uint32_t *)(hashes + h.n_blocks),
                               .n_tokens = h.n_tokens,
                               .block_size = h.block_size,
                               .extra = extra_of(h.adapter)};
            sb_kv_index_block_stored(kv, (uint32_t)rep, &st);
        }
        sb_router_kv_live(d->gw[g].router, 0, (uint32_t)rep, true);
    }
    (void)len;
}

int drv_events_set_up(driver *d, uint64_t secret)
{
    if (!d->o->kv_events)
        return 0;
    sb_kv_index_config kc = {.max_entries = SB_KV_INDEX_DEFAULT_MAX_ENTRIES,
                             .block_size = d->o->engine.block_size,
                             .key_seed = SB_KV_KEY_SEED,
                             .hash_secret = secret};
    for (uint32_t g = 0; g < d->n_gw; g++)
        if (sb_router_kv_enable(d->gw[g].router, 0, &kc, d->o->kv_cover_ns) < 0)
            return -ENOMEM;
    d->kv_lag = sb_lag_queue_new(d->o->event_lag_ns, 0, 0, apply, d);
    size_t maxp = d->w->max_prompt ? d->w->max_prompt : 1;
    d->kv_keys = sb_malloc((maxp / d->o->engine.block_size + 1) * sizeof(uint64_t));
    return d->kv_lag && d->kv_keys ? 0 : -ENOMEM;
}

void drv_events_tear_down(driver *d)
{
    sb_lag_queue_free(d->kv_lag);
    d->kv_lag = NULL;
    sb_free(d->kv_keys);
    d->kv_keys = NULL;
    sb_free(d->kv_rec);
    d->kv_rec = NULL;
}

/* Room for a record of n bytes in the scratch. */
static void *rec_room(driver *d, size_t n)
{
    if (n > d->kv_rec_cap) {
        void *p = sb_realloc(d->kv_rec, n);
        if (!p)
            return NULL;
        d->kv_rec = p;
        d->kv_rec_cap = n;
    }
    return d->kv_rec;
}

void drv_events_collect(driver *d, uint32_t rep)
{
    sb_engine *e = d->engines[rep];
    size_t n = sb_engine_kv_count(e);
    for (size_t i = 0; d->kv_lag && i < n; i++) {
        sb_engine_kv_event ev;
        sb_engine_kv_event_at(e, i, &ev);
        uint32_t nt = ev.kind == SB_ENGINE_KV_STORED && ev.token_ids ? ev.n_blocks * ev.block_size : 0;
        size_t bytes = sizeof(rec_head) + ev.n_blocks * sizeof(uint64_t) + nt * sizeof(uint32_t);
        char *r = rec_room(d, bytes);
        if (!r) {
            /* As a live subscriber that lost events: the endpoint is cleared. */
            sb_lag_queue_push(d->kv_lag, d->now, SB_ENGINE_KV_CLEARED, rep, NULL, 0);
            break;
        }
        rec_head h = {.n_blocks = ev.n_blocks,
                      .n_tokens = nt,
                      .block_size = ev.block_size,
                      .adapter = ev.adapter,
                      .parent_hash = ev.parent_hash,
                      .has_parent = ev.has_parent};
        memcpy(r, &h, sizeof h);
        if (ev.n_blocks)
            memcpy(r + sizeof h, ev.block_hashes, ev.n_blocks * sizeof(uint64_t));
        if (nt)
            memcpy(r + sizeof h + ev.n_blocks * sizeof(uint64_t), ev.token_ids, nt * sizeof(uint32_t));
        sb_lag_queue_push(d->kv_lag, d->now, ev.kind, rep, r, bytes);
    }
    sb_engine_kv_drain(e);
}

void drv_events_advance(driver *d)
{
    if (d->kv_lag)
        sb_lag_queue_advance(d->kv_lag, d->now);
}

void drv_events_restart(driver *d, uint32_t rep)
{
    if (d->kv_lag)
        sb_lag_queue_push(d->kv_lag, d->now, SB_ENGINE_KV_CLEARED, rep, NULL, 0);
}

void drv_events_keys(driver *d, uint32_t n_prompt, uint32_t adapter, sb_sched_request *s)
{
    if (!d->kv_keys)
        return;
    s->kv_keys = d->kv_keys;
    s->n_kv_keys = sb_kv_keys_from_tokens(SB_KV_KEY_SEED, d->tokens, n_prompt, d->o->engine.block_size,
                                          extra_of(adapter), d->kv_keys);
}
