/* kv_shadow: one block_lru per replica, in-flight records indexed by request id (replay's ids
 * are dense workload indexes, so a growable array of pointers is the simplest map), and a
 * per-replica list of records in dispatch order. */
#include "replay/policies/kv_shadow.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "replay/lag_queue.h"
#include "replay/policies/block_lru.h"
#include "replay/policy.h"

typedef struct record {
    uint64_t id;
    uint32_t replica;
    uint32_t n_prompt, uncached, anon;
    struct record *prev, *next; /* the replica's in-flight list, oldest first */
    size_t n;
    uint32_t entries[]; /* the block_lru entries it pins, prompt order */
} record;

typedef struct rep_state {
    sb_block_lru *blocks;
    uint64_t anon; /* unhashed blocks reserved by in-flight requests */
    record *oldest, *newest;
} rep_state;

struct sb_kv_shadow {
    uint32_t n;
    uint32_t block_size, capacity;
    rep_state *reps;
    record **by_id;
    size_t by_id_cap;
};

sb_kv_shadow *sb_kv_shadow_new(uint32_t n_replicas, const sb_engine_params *p)
{
    sb_kv_shadow *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = n_replicas;
    s->block_size = p->block_size ? p->block_size : 16;
    s->capacity = p->num_gpu_blocks;
    s->reps = sb_calloc(n_replicas ? n_replicas : 1, sizeof(rep_state));
    if (!s->reps)
        goto fail;
    for (uint32_t i = 0; i < n_replicas; i++)
        if (!(s->reps[i].blocks = sb_block_lru_new(0)))
            goto fail;
    return s;
fail:
    sb_kv_shadow_free(s);
    return NULL;
}

void sb_kv_shadow_free(sb_kv_shadow *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->by_id_cap; i++)
        sb_free(s->by_id[i]);
    sb_free(s->by_id);
    for (uint32_t i = 0; s->reps && i < s->n; i++)
        sb_block_lru_free(s->reps[i].blocks);
    sb_free(s->reps);
    sb_free(s);
}

uint32_t sb_kv_shadow_cached_blocks(const sb_kv_shadow *s, uint32_t replica, const uint64_t *hashes, size_t n)
{
    const sb_block_lru *b = s->reps[replica].blocks;
    uint32_t k = 0;
    while (k < n && sb_block_lru_find(b, hashes[k]) != SB_BLOCK_LRU_NONE)
        k++;
    return k;
}

bool sb_kv_shadow_holds(const sb_kv_shadow *s, uint32_t replica, uint64_t hash)
{
    return sb_block_lru_find(s->reps[replica].blocks, hash) != SB_BLOCK_LRU_NONE;
}

uint32_t sb_kv_shadow_cached_tokens(const sb_kv_shadow *s, uint32_t cached_blocks, uint32_t n_prompt)
{
    if (n_prompt == 0)
        return 0;
    uint32_t max_blocks = (n_prompt - 1) / s->block_size;
    return (cached_blocks < max_blocks ? cached_blocks : max_blocks) * s->block_size;
}

uint32_t sb_kv_shadow_new_active_blocks(const sb_kv_shadow *s, uint32_t replica, const uint64_t *hashes, size_t n)
{
    const sb_block_lru *b = s->reps[replica].blocks;
    uint32_t fresh = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t e = sb_block_lru_find(b, hashes[i]);
        if (e == SB_BLOCK_LRU_NONE || sb_block_lru_refs(b, e) == 0)
            fresh++;
    }
    return fresh;
}

uint32_t sb_kv_shadow_active_blocks(const sb_kv_shadow *s, uint32_t replica)
{
    return (uint32_t)sb_block_lru_pinned(s->reps[replica].blocks);
}

uint32_t sb_kv_shadow_cached_total(const sb_kv_shadow *s, uint32_t replica)
{
    return (uint32_t)sb_block_lru_count(s->reps[replica].blocks);
}

static int reserve_ids(sb_kv_shadow *s, uint64_t id)
{
    if (id < s->by_id_cap)
        return 0;
    size_t cap = s->by_id_cap ? s->by_id_cap : 1024;
    while (cap <= id)
        cap *= 2;
    record **nb = sb_realloc(s->by_id, cap * sizeof(record *));
    if (!nb)
        return -ENOMEM;
    memset(nb + s->by_id_cap, 0, (cap - s->by_id_cap) * sizeof(record *));
    s->by_id = nb;
    s->by_id_cap = cap;
    return 0;
}

/* Evicts free blocks until pinned + free + reserved fit the engine's cache. Pinned blocks may
 * exceed it on their own (the engine would be queueing requests then); nothing is evicted
 * beyond the free ones. */
static void enforce_capacity(sb_kv_shadow *s, rep_state *r)
{
    while (sb_block_lru_count(r->blocks) + r->anon > s->capacity && sb_block_lru_evict_one(r->blocks))
        ;
}

int sb_kv_shadow_dispatch(sb_kv_shadow *s, uint32_t replica, uint64_t id, const uint64_t *hashes, size_t n,
                          uint32_t n_prompt, uint32_t max_tokens, uint32_t uncached)
{
    if (reserve_ids(s, id) < 0)
        return -ENOMEM;
    if (s->by_id[id])
        return -EEXIST;
    record *rec = sb_malloc(sizeof(record) + n * sizeof(uint32_t));
    if (!rec)
        return -ENOMEM;
    rep_state *r = &s->reps[replica];
    size_t pinned = 0;
    for (; pinned < n; pinned++) {
        uint32_t e = sb_block_lru_get(r->blocks, hashes[pinned], NULL);
        if (e == SB_BLOCK_LRU_NONE)
            break;
        sb_block_lru_pin(r->blocks, e);
        rec->entries[pinned] = e;
    }
    if (pinned < n) {
        for (size_t k = pinned; k-- > 0;)
            sb_block_lru_unpin(r->blocks, rec->entries[k]);
        sb_free(rec);
        return -ENOMEM;
    }
    uint64_t total_blocks = ((uint64_t)n_prompt + max_tokens + s->block_size - 1) / s->block_size;
    rec->id = id;
    rec->replica = replica;
    rec->n_prompt = n_prompt;
    rec->uncached = uncached;
    rec->anon = total_blocks > n ? (uint32_t)(total_blocks - n) : 0;
    rec->n = n;
    rec->next = NULL;
    rec->prev = r->newest;
    if (r->newest)
        r->newest->next = rec;
    else
        r->oldest = rec;
    r->newest = rec;
    r->anon += rec->anon;
    s->by_id[id] = rec;
    enforce_capacity(s, r);
    return 0;
}

void sb_kv_shadow_finish(sb_kv_shadow *s, uint64_t id)
{
    if (id >= s->by_id_cap || !s->by_id[id])
        return;
    record *rec = s->by_id[id];
    rep_state *r = &s->reps[rec->replica];
    /* Tail first: the head is freed last, so it is the most recently used and evicted last. */
    for (size_t k = rec->n; k-- > 0;)
        sb_block_lru_unpin(r->blocks, rec->entries[k]);
    r->anon -= rec->anon;
    if (rec->prev)
        rec->prev->next = rec->next;
    else
        r->oldest = rec->next;
    if (rec->next)
        rec->next->prev = rec->prev;
    else
        r->newest = rec->prev;
    s->by_id[id] = NULL;
    sb_free(rec);
}

uint64_t sb_kv_shadow_pending_uncached(const sb_kv_shadow *s, uint32_t replica, uint64_t pending_prompt_tokens,
                                       uint32_t *n_requests)
{
    uint64_t seen = 0, uncached = 0;
    uint32_t count = 0;
    for (const record *rec = s->reps[replica].newest; rec && seen < pending_prompt_tokens; rec = rec->prev) {
        seen += rec->n_prompt;
        uncached += rec->uncached;
        count++;
    }
    if (n_requests)
        *n_requests = count;
    return uncached;
}

void sb_kv_shadow_record(sb_kv_shadow *s, uint32_t replica, const sb_replay_request_view *r)
{
    uint32_t overlap = sb_kv_shadow_cached_blocks(s, replica, r->engine_hashes, r->n_engine_hashes);
    uint32_t uncached = r->n_tokens - sb_kv_shadow_cached_tokens(s, overlap, r->n_tokens);
    (void)sb_kv_shadow_dispatch(s, replica, r->id, r->engine_hashes, r->n_engine_hashes, r->n_tokens,
                                r->max_tokens, uncached);
}

/* ---- sb_kv_view ---- */

enum { VIEW_DISPATCH = 1, VIEW_FINISH };

/* A dispatch as it travels through the lag queue: the fields sb_kv_shadow_record reads. */
typedef struct dispatch_msg {
    uint32_t replica, n_tokens, max_tokens;
    uint32_t n_hashes;
    uint64_t hashes[];
} dispatch_msg;

struct sb_kv_view {
    sb_kv_shadow *now;    /* the router's own sequences */
    sb_kv_shadow *lagged; /* the caches as the events tell them; NULL with lag 0 */
    sb_lag_queue *q;
};

static void view_apply(void *ctx, uint32_t kind, uint64_t id, const void *payload, size_t len)
{
    sb_kv_view *v = ctx;
    (void)len;
    if (kind == VIEW_FINISH) {
        sb_kv_shadow_finish(v->lagged, id);
        return;
    }
    const dispatch_msg *m = payload;
    sb_replay_request_view r = {.id = id,
                                .n_tokens = m->n_tokens,
                                .max_tokens = m->max_tokens,
                                .engine_hashes = m->hashes,
                                .n_engine_hashes = m->n_hashes};
    sb_kv_shadow_record(v->lagged, m->replica, &r);
}

sb_kv_view *sb_kv_view_new(uint32_t n_replicas, const sb_engine_params *p, sb_ns lag_ns)
{
    sb_kv_view *v = sb_calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    if (!(v->now = sb_kv_shadow_new(n_replicas, p)))
        goto fail;
    if (lag_ns &&
        (!(v->lagged = sb_kv_shadow_new(n_replicas, p)) || !(v->q = sb_lag_queue_new(lag_ns, 0, 0, view_apply, v))))
        goto fail;
    return v;
fail:
    sb_kv_view_free(v);
    return NULL;
}

void sb_kv_view_free(sb_kv_view *v)
{
    if (!v)
        return;
    sb_lag_queue_free(v->q); /* before the shadows: it owns nothing of theirs */
    sb_kv_shadow_free(v->now);
    sb_kv_shadow_free(v->lagged);
    sb_free(v);
}

void sb_kv_view_record(sb_kv_view *v, sb_ns now, uint32_t replica, const sb_replay_request_view *r)
{
    sb_kv_shadow_record(v->now, replica, r);
    if (!v->q)
        return;
    size_t len = sizeof(dispatch_msg) + r->n_engine_hashes * sizeof(uint64_t);
    dispatch_msg *m = sb_malloc(len);
    if (!m)
        return; /* the events of this request are lost: the lagged caches miss its blocks */
    m->replica = replica;
    m->n_tokens = r->n_tokens;
    m->max_tokens = r->max_tokens;
    m->n_hashes = (uint32_t)r->n_engine_hashes;
    memcpy(m->hashes, r->engine_hashes, r->n_engine_hashes * sizeof(uint64_t));
    (void)sb_lag_queue_push(v->q, now, VIEW_DISPATCH, r->id, m, len);
    sb_free(m);
}

void sb_kv_view_finish(sb_kv_view *v, sb_ns now, uint64_t id)
{
    sb_kv_shadow_finish(v->now, id);
    if (v->q)
        (void)sb_lag_queue_push(v->q, now, VIEW_FINISH, id, NULL, 0);
}

const sb_kv_shadow *sb_kv_view_active(const sb_kv_view *v)
{
    return v->now;
}

const sb_kv_shadow *sb_kv_view_cache(sb_kv_view *v, sb_ns now)
{
    if (!v->q)
        return v->now;
    sb_lag_queue_advance(v->q, now);
    return v->lagged;
}
