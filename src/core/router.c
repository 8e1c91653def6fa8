#include "core/router.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/table.h"
#include "core/chash.h"
#include "core/hot_prefix.h"
#include "core/kv_index.h"
#include "core/prefix_index.h"

/* Hot-prefix table per pool (profiles with hot_prefix): 4,096 slots, 64 KiB. Each request
 * takes about two slots per octave of its length; the slots of prefixes asked for once are
 * replaced first, so the hot ones stay. */
#define HOT_SLOTS 4096

typedef struct model_entry {
    char *name;
    size_t len;
    uint32_t pool;
    int adapter;
    enum sb_model_kind kind;
} model_entry;

typedef struct pool {
    char *name;
    const sb_profile *profile;
    sb_pool_params params;
    sb_endpoint *eps;
    size_t n_eps;
    size_t rr_cursor;
    char *served;
    size_t served_len;
    int n_adapters;
    /* Decision scratch, sized for the pool: no allocation per pick. */
    sb_decision last;
    sb_profile last_profile; /* the decision's profile, copied: it outlives configs and snapshots */
    bool have_last;
    sb_prefix_index *prefix;
    uint32_t *prefix_match;
    sb_hot_prefix *hot;           /* demand per prefix, made at the first pick that asks for it */
    sb_chash *ring;               /* NULL until sb_router_build_ring */
    /* What the last pick added to the index as pending, handed to the dispatch that follows. */
    bool pick_pending;
    uint32_t pick_pending_ep;
    uint64_t pick_pending_hash;
    /* The last pick's endpoint and the prompt tokens its index says that endpoint holds, for
     * the dispatch that follows: only the rest is prefill work (sb_router_dispatched). */
    int pick_ep;
    double pick_matched_tokens;
    /* Pending marks of answers whose first token the caller cannot see (non-streamed):
     * settled when their predicted prefill is over. A min-heap on `at`, at most
     * params.timed_settle_max entries. */
    struct timed_settle *timed;
    uint32_t n_timed, cap_timed;
    /* The precise index, when the pool's engines report their caches (sb_router_kv_enable):
     * per-pick scratch for its matches, which endpoints' streams are heard, and how long the
     * router's own marks still count on those. */
    sb_kv_index *kv;
    uint32_t *kv_match;
    uint8_t *kv_live;
    sb_ns *kv_cleared; /* when the stream last cleared an endpoint itself (sb_router_kv_cleared) */
    sb_ns kv_cover_ns;
    uint64_t panics; /* picks that routed over ejected or down endpoints (sb_router_pool_panics) */
    /* Gateway sync (sb_router_set_sync): the last pick's block hashes, told with its dispatch. */
    uint64_t *sync_hashes;
    size_t n_sync_hashes, cap_sync_hashes;
} pool;

typedef struct timed_settle {
    sb_ns at;
    uint64_t hash;
    uint32_t ep;
} timed_settle;

struct sb_router {
    pool *pools;
    size_t n_pools;
    /* Model names, in the order added, and a table from name to index in that array. Names
     * come from clients at lookup: the table is keyed (base/table.h); the same secret keys
     * every pool's prefix index. */
    model_entry *models;
    size_t models_cap;
    size_t n_models;
    sb_table model_table;
    uint64_t rng;
    uint64_t hash_secret;
    sb_router_sync sync; /* gateway sync hooks; zeros: none */
};

sb_pool_params sb_pool_params_default(void)
{
    return (sb_pool_params){.stale_ns = SB_MS(1000),
                            .health = sb_health_params_default(),
                            .prefix_max_entries = 1u << 20,
                            .prefix_default_blocks = 16384,
                            .block_bytes = 64,
                            .bytes_per_token = 4.0,
                            .prefix_ref_tokens = 4096,
                            .timed_settle_max = 4096,
                            .prefix_calibrate = true};
}

/* Zero fields take their defaults, so callers set only what they know. */
static sb_pool_params complete_params(const sb_pool_params *in)
{
    sb_pool_params d = sb_pool_params_default(), p = in ? *in : d;
    if (!p.stale_ns)
        p.stale_ns = d.stale_ns;
    if (!p.health.max_failures)
        p.health = d.health;
    if (!p.prefix_max_entries)
        p.prefix_max_entries = d.prefix_max_entries;
    if (!p.prefix_default_blocks)
        p.prefix_default_blocks = d.prefix_default_blocks;
    if (!p.block_bytes)
        p.block_bytes = d.block_bytes;
    if (!(p.bytes_per_token > 0))
        p.bytes_per_token = d.bytes_per_token;
    if (!(p.prefix_ref_tokens > 0))
        p.prefix_ref_tokens = d.prefix_ref_tokens;
    if (!p.timed_settle_max)
        p.timed_settle_max = d.timed_settle_max;
    return p;
}

sb_router *sb_router_new(uint64_t seed, uint64_t hash_secret)
{
    sb_router *r = sb_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    r->hash_secret = hash_secret;
    sb_table_init(&r->model_table, hash_secret);
    return r;
}

void sb_router_free(sb_router *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_pools; i++) {
        sb_free(r->pools[i].name);
        sb_free(r->pools[i].eps);
        sb_free(r->pools[i].last.cands);
        sb_free(r->pools[i].last.live);
        sb_free(r->pools[i].last.scores);
        sb_prefix_index_free(r->pools[i].prefix);
        sb_hot_prefix_free(r->pools[i].hot);
        sb_free(r->pools[i].prefix_match);
        sb_chash_free(r->pools[i].ring);
        sb_free(r->pools[i].timed);
        sb_kv_index_free(r->pools[i].kv);
        sb_free(r->pools[i].kv_match);
        sb_free(r->pools[i].kv_live);
        sb_free(r->pools[i].kv_cleared);
        sb_free(r->pools[i].sync_hashes);
    }
    sb_free(r->pools);
    for (size_t i = 0; i < r->n_models; i++)
        sb_free(r->models[i].name);
    sb_free(r->models);
    sb_table_free(&r->model_table);
    sb_free(r);
}

int sb_router_add_pool(sb_router *r, const char *name, const sb_profile *profile, size_t n_endpoints,
                       const sb_pool_params *params)
{
    pool *np = sb_realloc(r->pools, (r->n_pools + 1) * sizeof(pool));
    if (!np)
        return -1;
    r->pools = np;
    pool *p = &np[r->n_pools];
    memset(p, 0, sizeof(*p));
    size_t n = n_endpoints ? n_endpoints : 1;
    p->name = sb_strdup(name);
    p->eps = sb_calloc(n, sizeof(sb_endpoint));
    p->last.cands = sb_calloc(n, sizeof(sb_candidate));
    p->last.live = sb_calloc(n, sizeof(sb_candidate));
    p->last.scores = sb_calloc(n * SB_MAX_SCORERS, sizeof(double));
    p->params = complete_params(params);
    p->prefix = sb_prefix_index_new((uint32_t)n_endpoints, p->params.prefix_max_entries,
                                    p->params.prefix_default_blocks, r->hash_secret);
    p->prefix_match = sb_calloc(n, sizeof(uint32_t));
    p->pick_ep = -1;
    if (!p->name || !p->eps || !p->last.cands || !p->last.live || !p->last.scores || !p->prefix ||
        !p->prefix_match) {
        sb_free(p->name);
        sb_free(p->eps);
        sb_free(p->last.cands);
        sb_free(p->last.live);
        sb_free(p->last.scores);
        sb_prefix_index_free(p->prefix);
        sb_free(p->prefix_match);
        return -1;
    }
    p->profile = profile;
    p->n_eps = n_endpoints;
    for (size_t i = 0; i < n_endpoints; i++) {
        p->eps[i].pool = (uint32_t)r->n_pools;
        p->eps[i].index = (uint32_t)i;
    }
    return (int)r->n_pools++;
}

void sb_router_set_profile(sb_router *r, uint32_t pool_idx, const sb_profile *profile)
{
    if (pool_idx < r->n_pools) {
        r->pools[pool_idx].profile = profile;
        r->pools[pool_idx].have_last = false;
    }
}

void sb_router_set_pool_params(sb_router *r, uint32_t pool_idx, const sb_pool_params *params)
{
    if (pool_idx < r->n_pools)
        r->pools[pool_idx].params = complete_params(params);
}

typedef struct name_probe {
    const model_entry *models;
    const char *name;
    size_t len;
} name_probe;

static bool model_named(const void *ctx, uint32_t i)
{
    const name_probe *q = ctx;
    return q->models[i].len == q->len && memcmp(q->models[i].name, q->name, q->len) == 0;
}

/* The slot of the model called name (tag: its keyed hash), or the empty slot where it would
 * go; SIZE_MAX while the table has no slots. */
static size_t model_slot(const sb_router *r, const char *name, size_t len, uint64_t tag)
{
    name_probe q = {r->models, name, len};
    size_t steps;
    return sb_table_search(&r->model_table, tag, model_named, &q, &steps);
}

int sb_router_add_model(sb_router *r, uint32_t pool_idx, const char *name, enum sb_model_kind kind)
{
    if (pool_idx >= r->n_pools)
        return -1;
    size_t len = strlen(name);
    uint64_t tag = sb_table_tag_bytes(&r->model_table, name, len);
    if (sb_table_occupied(&r->model_table, model_slot(r, name, len, tag)))
        return -2;
    if (r->n_models == r->models_cap) {
        size_t cap = r->models_cap ? r->models_cap * 2 : 32;
        model_entry *m = sb_realloc(r->models, cap * sizeof(model_entry));
        if (!m)
            return -1;
        r->models = m;
        r->models_cap = cap;
    }
    if (r->n_models >= SB_TABLE_VAL_MAX || sb_table_reserve(&r->model_table, r->n_models + 1) < 0)
        return -1;
    pool *p = &r->pools[pool_idx];
    char *copy = sb_strndup(name, len);
    if (!copy)
        return -1;
    model_entry *e = &r->models[r->n_models];
    *e = (model_entry){.name = copy, .len = len, .pool = pool_idx, .kind = kind, .adapter = -1};
    if (kind == SB_MODEL_ADAPTER)
        e->adapter = p->n_adapters++;
    if (kind == SB_MODEL_SERVED && !p->served) {
        p->served = copy;
        p->served_len = len;
    }
    sb_table_put(&r->model_table, model_slot(r, name, len, tag), tag, (uint32_t)r->n_models);
    r->n_models++;
    return 0;
}

int sb_router_resolve(const sb_router *r, const char *name, size_t len, sb_model_match *out)
{
    size_t slot = model_slot(r, name, len, sb_table_tag_bytes(&r->model_table, name, len));
    if (!sb_table_occupied(&r->model_table, slot))
        return -1;
    const model_entry *e = &r->models[sb_table_val(&r->model_table, slot)];
    const pool *p = &r->pools[e->pool];
    out->pool = e->pool;
    out->adapter = e->adapter;
    out->is_alias = e->kind == SB_MODEL_ALIAS;
    out->served = p->served ? p->served : e->name;
    out->served_len = p->served ? p->served_len : e->len;
    out->name = e->name;
    return 0;
}

int sb_router_adapter_index(const sb_router *r, uint32_t pool_idx, const char *name, size_t len)
{
    sb_model_match m;
    if (sb_router_resolve(r, name, len, &m) < 0 || m.pool != pool_idx)
        return -1;
    return m.adapter;
}

static bool uses_prefix(const sb_profile *prof)
{
    for (size_t i = 0; prof && i < prof->n_scorers; i++) {
        const char *n = prof->scorers[i].def->name;
        if (!strcmp(n, "prefix") || !strcmp(n, "prefix-tokens") || !strcmp(n, "predicted-latency"))
            return true;
    }
    return false;
}

static void heap_swap(timed_settle *h, uint32_t a, uint32_t b)
{
    timed_settle t = h[a];
    h[a] = h[b];
    h[b] = t;
}

static timed_settle heap_pop(pool *p)
{
    timed_settle *h = p->timed, top = h[0];
    h[0] = h[--p->n_timed];
    for (uint32_t i = 0;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < p->n_timed && h[l].at < h[m].at)
            m = l;
        if (r < p->n_timed && h[r].at < h[m].at)
            m = r;
        if (m == i)
            break;
        heap_swap(h, i, m);
        i = m;
    }
    return top;
}

/* Pending marks whose predicted prefill is over count as computed. */
static void settle_due(pool *p, sb_ns now)
{
    while (p->n_timed && p->timed[0].at <= now) {
        timed_settle t = heap_pop(p);
        sb_prefix_index_settle(p->prefix, t.ep, t.hash, true);
    }
}

/* ---- fusion: the engines' reports and the router's own marks ----
 *
 * On an endpoint whose event stream is heard, the precise index is the truth for what it
 * reported; the router's own marks (sb_prefix_index) cover only what the reports cannot show
 * yet: blocks routed there in the last kv_cover_ns (the engine computes them, then reports
 * with a lag). Older marks on such an endpoint are forgotten: keeping them is what makes an
 * approximate index send traffic after blocks the engine has evicted. On an endpoint whose
 * stream is not heard the marks stand as before. Where both speak the larger match wins: a
 * mark younger than the lag is newer knowledge than any report; a report of blocks the router
 * never routed there (another gateway's traffic, bypass traffic, restarts before we marked)
 * is knowledge the marks cannot have. Units: precise matches are engine blocks of real tokens,
 * marks are text blocks of block_tokens estimated tokens; both become text blocks. */

/* The index's clock: about a millisecond per tick (2^20 ns), 32 bits: 50 days before the
 * wrap, far past any cover window. */
static uint32_t mark_clock(sb_ns now)
{
    return (uint32_t)(now >> 20);
}

static void age_marks(pool *p, sb_ns now)
{
    sb_prefix_index_set_clock(p->prefix, mark_clock(now));
    uint32_t before = mark_clock(now > p->kv_cover_ns ? now - p->kv_cover_ns : 0);
    for (size_t e = 0; e < p->n_eps; e++)
        if (p->kv_live[e])
            sb_prefix_index_expire(p->prefix, (uint32_t)e, before);
}

/* Raises prefix_match[e] to the precise match where that is longer; per-endpoint source in
 * last.cands after the run (explain_prefix). Returns whether the request had precise keys. */
static bool fuse(pool *p, const sb_sched_request *req, double block_tokens)
{
    if (!req->kv_keys || !req->n_kv_keys)
        return false;
    sb_kv_index_match(p->kv, req->kv_keys, req->n_kv_keys, p->kv_match);
    double tokens_per_block = (double)sb_kv_index_block_size(p->kv);
    for (size_t e = 0; e < p->n_eps; e++) {
        double m = (double)p->kv_match[e] * tokens_per_block / block_tokens;
        uint32_t blocks = m >= (double)req->n_blocks ? (uint32_t)req->n_blocks : (uint32_t)m;
        p->kv_match[e] = blocks; /* now in text blocks, for the explanation */
        if (blocks > p->prefix_match[e])
            p->prefix_match[e] = blocks;
    }
    return true;
}

static void explain_prefix(pool *p, bool precise)
{
    for (size_t e = 0; e < p->n_eps && e < p->last.n; e++) {
        sb_candidate *c = &p->last.cands[e];
        uint32_t m = p->prefix_match[e];
        c->prefix_blocks = m;
        if (!m)
            c->prefix_source = SB_PREFIX_NONE;
        else if (!precise || p->kv_match[e] < m)
            c->prefix_source = SB_PREFIX_ROUTED;
        else
            c->prefix_source = SB_PREFIX_REPORTED;
    }
}

/* Gateway sync: the pick's hashes, for its dispatch to tell (none if they cannot be kept). */
static void keep_sync_hashes(pool *p, const sb_sched_request *req)
{
    p->n_sync_hashes = 0;
    if (!req)
        return;
    if (req->n_blocks > p->cap_sync_hashes) {
        uint64_t *grown = sb_realloc(p->sync_hashes, req->n_blocks * sizeof(uint64_t));
        if (!grown)
            return;
        p->sync_hashes = grown;
        p->cap_sync_hashes = req->n_blocks;
    }
    memcpy(p->sync_hashes, req->block_hashes, req->n_blocks * sizeof(uint64_t));
    p->n_sync_hashes = req->n_blocks;
}

/* Tells the sync hooks of a dispatch of this router's own (with the pick's hashes when it went
 * where picked). */
static void tell_dispatched(sb_router *r, pool *p, uint32_t pool_idx, uint32_t ep, bool picked, sb_ticket *t,
                            uint32_t prompt_tokens)
{
    if (!r->sync.dispatched)
        return;
    bool with = picked && p->n_sync_hashes;
    t->sync_id = r->sync.dispatched(r->sync.ud, pool_idx, ep, with ? p->sync_hashes : NULL, with ? p->n_sync_hashes : 0,
                                    prompt_tokens);
    p->n_sync_hashes = 0;
}

void sb_router_set_sync(sb_router *r, const sb_router_sync *hooks)
{
    r->sync = hooks ? *hooks : (sb_router_sync){0};
}

/* This router's share of the pool's traffic: its own completions over the engines' request
 * counters, summed over the endpoints (the decayed sums of sb_endpoint_traffic_share, decayed to
 * now, so an endpoint that stopped reporting fades out). 1 until the counters have shown 8
 * requests, or without counters; at least 0.05. Below 1 with several gateway replicas behind an
 * L4 balancer, or beside traffic that bypasses them. Its cost, only on picks of a hot prefix:
 * one exp() per endpoint, about 6 ns each (a hot pick and its dispatch with the default profile,
 * 1.05 -> 1.09 us at 8 endpoints, 7.2 -> 7.8 at 128, 45 -> 52 at 1,024; the pick itself scans
 * every endpoint already). Sums kept pre-scaled to a pool epoch would save the exp()s at the
 * price of state beside the endpoints' own. */
static double pool_traffic_share(const pool *p, sb_ns now)
{
    double own = 0, engine = 0;
    for (size_t i = 0; i < p->n_eps; i++) {
        double o, e;
        sb_endpoint_share_sums(&p->eps[i], now, &o, &e);
        own += o;
        engine += e;
    }
    return sb_traffic_share_of(own, engine);
}

int sb_router_pick(sb_router *r, const sb_sched_request *req, sb_ns now)
{
    if (req->pool >= r->n_pools)
        return -1;
    pool *p = &r->pools[req->pool];
    settle_due(p, now);
    /* The previous pick was never dispatched: what it marked will never be computed. */
    if (p->pick_pending) {
        sb_prefix_index_settle(p->prefix, p->pick_pending_ep, p->pick_pending_hash, false);
        p->pick_pending = false;
    }
    sb_sched_ctx ctx = {.now = now, .stale_ns = p->params.stale_ns, .rng = &r->rng, .rr_cursor = p->rr_cursor,
                        .profile = req->profile ? req->profile : p->profile,
                        .block_tokens = p->params.block_bytes / p->params.bytes_per_token,
                        .prefix_ref_tokens = p->params.prefix_ref_tokens,
                        .ring = p->ring};
    /* The index is kept (looked up and fed) only for profiles that read it: a pool routed by
     * round robin or by load alone pays nothing for it. */
    bool blocks = req->block_hashes && req->n_blocks && uses_prefix(ctx.profile);
    if (blocks) {
        if (p->kv)
            age_marks(p, now);
        sb_prefix_index_match(p->prefix, req->block_hashes, req->n_blocks, p->prefix_match);
        ctx.prefix_match = p->prefix_match;
        ctx.prefix_blocks = req->n_blocks;
        if (ctx.profile->hot_prefix > 0) {
            if (!p->hot)
                p->hot = sb_hot_prefix_new(HOT_SLOTS, r->hash_secret);
            ctx.hot_blocks = (uint32_t)(req->repeat ? sb_hot_prefix_peek : sb_hot_prefix_observe)(
                p->hot, req->block_hashes, req->n_blocks, now, p->n_eps, ctx.profile->hot_prefix, &ctx.hot_needed);
        }
    }
    bool precise = blocks && p->kv && fuse(p, req, ctx.block_tokens);
    /* The fair share is the fleet's: routed on the approximate index, this router plans holders
     * for its own share of the traffic only (pool_traffic_share), since it knows only the
     * holders it made. The precise index sees every holder, whoever sent them the prefix, so a
     * pick it scores plans for the whole demand. */
    if (ctx.hot_blocks && !precise)
        ctx.hot_needed *= pool_traffic_share(p, now);
    /* A stale endpoint still serving is scored from our own accounting, not its old report
     * (core/endpoint.h). */
    for (size_t i = 0; i < p->n_eps; i++)
        if (sb_endpoint_is_stale(&p->eps[i], ctx.stale_ns, now) && sb_endpoint_serving(&p->eps[i], now))
            sb_endpoint_expire_report(&p->eps[i]);
    int ep = sb_sched_run(&ctx, req, p->eps, p->n_eps, &p->last);
    p->panics += ep >= 0 && p->last.panic;
    if (blocks)
        explain_prefix(p, precise);
    p->rr_cursor = ctx.rr_cursor;
    p->have_last = true;
    p->pick_ep = ep;
    p->pick_matched_tokens = ep >= 0 && blocks ? (double)p->prefix_match[ep] * ctx.block_tokens : 0.0;
    if (r->sync.dispatched)
        keep_sync_hashes(p, ep >= 0 && blocks ? req : NULL);
    p->last_profile = *ctx.profile;
    p->last.profile = &p->last_profile;
    p->last.pool_name = p->name;
    /* Recorded at once, so the next request already sees it (DESIGN.md, prefix index), but
     * as pending: until this request's first token the engine has not computed the new blocks,
     * and a request sent there meanwhile would compute them again behind it (the opening burst
     * of a hot prefix would pile onto the first holder). */
    p->pick_pending = false;
    if (ep >= 0 && blocks) {
        p->pick_pending = sb_prefix_index_insert_pending(p->prefix, (uint32_t)ep, req->block_hashes, req->n_blocks,
                                                         &p->pick_pending_hash);
        p->pick_pending_ep = (uint32_t)ep;
    }
    return ep;
}

const sb_decision *sb_router_last_decision(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools && r->pools[pool_idx].have_last ? &r->pools[pool_idx].last : NULL;
}

sb_endpoint *sb_router_endpoint(sb_router *r, uint32_t pool_idx, uint32_t ep)
{
    if (pool_idx >= r->n_pools || ep >= r->pools[pool_idx].n_eps)
        return NULL;
    return &r->pools[pool_idx].eps[ep];
}

sb_ticket sb_router_dispatched(sb_router *r, uint32_t pool_idx, uint32_t ep, uint32_t prompt_tokens, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return (sb_ticket){0};
    pool *p = &r->pools[pool_idx];
    /* The work this request brings: its prompt less what the pick's index says the endpoint
     * holds (sent elsewhere than picked: the whole prompt). */
    uint32_t uncached = prompt_tokens;
    bool picked = p->pick_ep == (int)ep;
    if (picked && p->pick_matched_tokens > 0)
        uncached =
            p->pick_matched_tokens >= (double)prompt_tokens ? 1 : prompt_tokens - (uint32_t)p->pick_matched_tokens;
    p->pick_ep = -1;
    sb_ticket t = sb_endpoint_dispatch(e, prompt_tokens, now);
    sb_endpoint_dispatch_uncached(e, &t, uncached);
    sb_endpoint_sent_tokens_add(e, uncached, now);
    t.sent_tokens = uncached;
    t.sent_ns = now;
    if (p->pick_pending && p->pick_pending_ep == ep) {
        t.has_prefix_pending = true;
        t.prefix_pending = p->pick_pending_hash;
    } else if (p->pick_pending) {
        /* Sent elsewhere than picked: the picked endpoint will not compute it. */
        sb_prefix_index_settle(p->prefix, p->pick_pending_ep, p->pick_pending_hash, false);
    }
    p->pick_pending = false;
    tell_dispatched(r, p, pool_idx, ep, picked, &t, prompt_tokens);
    return t;
}

sb_ticket sb_router_dispatched_unpicked(sb_router *r, uint32_t pool_idx, uint32_t ep, uint32_t prompt_tokens, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return (sb_ticket){0};
    sb_ticket t = sb_endpoint_dispatch(e, prompt_tokens, now);
    sb_endpoint_sent_tokens_add(e, prompt_tokens, now);
    t.sent_tokens = prompt_tokens;
    t.sent_ns = now;
    tell_dispatched(r, &r->pools[pool_idx], pool_idx, ep, false, &t, prompt_tokens);
    return t;
}

sb_ticket sb_router_peer_dispatched(sb_router *r, uint32_t pool_idx, uint32_t ep, const uint64_t *hashes, size_t n,
                                    uint32_t prompt_tokens, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return (sb_ticket){0};
    pool *p = &r->pools[pool_idx];
    /* The work it brings, as this router's index sees the endpoint: the peer's own estimate
     * was from its index, which may know more or less. */
    uint32_t uncached = prompt_tokens;
    bool pending = false;
    uint64_t pending_hash = 0;
    if (hashes && n && p->prefix) {
        settle_due(p, now);
        sb_prefix_index_match(p->prefix, hashes, n, p->prefix_match);
        double held = (double)p->prefix_match[ep] * (p->params.block_bytes / p->params.bytes_per_token);
        uncached = held >= (double)prompt_tokens ? 1 : prompt_tokens - (uint32_t)held;
        /* Pending, as this router's own picks are, until the peer says the first byte came
         * (sb_router_first_token): inserted as held, a hot prefix's opening burst across the
         * gateways would stack onto its first holder before it computed anything. */
        pending = sb_prefix_index_insert_pending(p->prefix, ep, hashes, n, &pending_hash);
    }
    /* In flight and pending prefill, as for its own dispatch; not its sent tokens: that
     * signal is this router's own spreading of its own traffic, and gateways that all see
     * each other's recent sends (a moment late) turn away from the same replicas together
     * (replay --gateway-sync-ms 0.5 over the routing matrix: 33 cells better than the best
     * peer and 34 worse with the peers' sends counted, 34 and 32 without). */
    sb_ticket t = sb_endpoint_dispatch(e, prompt_tokens, now);
    sb_endpoint_dispatch_uncached(e, &t, uncached);
    t.has_prefix_pending = pending;
    t.prefix_pending = pending_hash;
    return t;
}

sb_ticket sb_router_redispatched(sb_router *r, uint32_t pool_idx, uint32_t ep, const sb_ticket *prev, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return (sb_ticket){0};
    /* The same request again: counted in flight again, but its work was charged once. */
    sb_ticket t = sb_endpoint_dispatch(e, prev->prefill_tokens, now);
    sb_endpoint_dispatch_uncached(e, &t, prev->uncached_tokens);
    t.sent_tokens = prev->sent_tokens;
    t.sent_ns = prev->sent_ns;
    tell_dispatched(r, &r->pools[pool_idx], pool_idx, ep, false, &t, prev->prefill_tokens);
    return t;
}

void sb_router_withdraw_sent(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ticket *t, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (e && t->sent_tokens)
        sb_endpoint_sent_tokens_withdraw(e, t->sent_tokens, t->sent_ns, now);
    t->sent_tokens = 0;
}

static void settle_prefix(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ticket *t, bool computed)
{
    if (t->has_prefix_pending) {
        t->has_prefix_pending = false;
        sb_prefix_index_settle(r->pools[pool_idx].prefix, ep, t->prefix_pending, computed);
    }
}

void sb_router_first_byte(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ticket *t, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return;
    if (t->sync_id && !t->first_byte_seen && r->sync.first_byte)
        r->sync.first_byte(r->sync.ud, t->sync_id);
    sb_endpoint_first_byte(e, t, now);
}

void sb_router_first_token(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ticket *t)
{
    if (sb_router_endpoint(r, pool_idx, ep))
        settle_prefix(r, pool_idx, ep, t, true);
}

/* Before any answer has taught an endpoint its prefill speed: the order of magnitude of an 8B
 * model's prefill on one H100 (as the predicted-latency scorer assumes). */
#define PRIOR_PREFILL_TPS 10000.0

void sb_router_first_token_unseen(sb_router *r, uint32_t pool_idx, uint32_t ep, const sb_ticket *t, sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e || !t->has_prefix_pending)
        return;
    pool *p = &r->pools[pool_idx];
    if (p->n_timed == p->cap_timed) {
        if (p->cap_timed >= p->params.timed_settle_max) {
            /* Full: the earliest-due mark is settled now, early, to make room. */
            timed_settle old = heap_pop(p);
            sb_prefix_index_settle(p->prefix, old.ep, old.hash, true);
        } else {
            uint32_t cap = p->cap_timed ? p->cap_timed * 2 : 64;
            if (cap > p->params.timed_settle_max)
                cap = p->params.timed_settle_max;
            timed_settle *h = sb_realloc(p->timed, (size_t)cap * sizeof(*h));
            if (!h) {
                sb_prefix_index_settle(p->prefix, ep, t->prefix_pending, true); /* no room: ready now */
                return;
            }
            p->timed = h;
            p->cap_timed = cap;
        }
    }
    /* Its prefill and those of the requests waiting in front of it, each taken as long as its
     * own, at the endpoint's learned speed or the prior. The queue is the fresh report's plus
     * what was sent since (this request among them); without a fresh report only this request
     * counts, since what was sent since an old report is mostly decoding by now. Not the
     * endpoint's pending prefill tokens: for non-streamed answers those include every request
     * still decoding, whose prefill is long done. */
    double tps = e->ttft_observations && e->prefill_tps > 1 ? e->prefill_tps : PRIOR_PREFILL_TPS;
    double waiting = sb_endpoint_is_stale(e, p->params.stale_ns, now) ? 1 : sb_endpoint_waiting(e);
    double secs = (waiting > 1 ? waiting : 1) * (double)t->prefill_tokens / tps;
    if (secs < 0.001)
        secs = 0.001;
    if (secs > 60)
        secs = 60;
    timed_settle *h = p->timed;
    uint32_t i = p->n_timed++;
    h[i] = (timed_settle){.at = now + (sb_ns)(secs * 1e9), .hash = t->prefix_pending, .ep = ep};
    while (i > 0 && h[(i - 1) / 2].at > h[i].at) {
        heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

void sb_router_finished(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ticket *t, bool ok, bool counts_for_health,
                        sb_ns now)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return;
    if (t->sync_id && r->sync.finished)
        r->sync.finished(r->sync.ud, t->sync_id);
    t->sync_id = 0;
    /* Still pending: no token of an answer ever came back (every answer's first body bytes
     * settle it, sb_router_first_token): nothing known computed, so nothing is kept. */
    settle_prefix(r, pool_idx, ep, t, false);
    pool *p = &r->pools[pool_idx];
    /* The ejection bound (Envoy's max_ejection_percent): one endpoint may always be ejected,
     * more only while they stay within the share; a failing replica beyond it keeps serving
     * (its requests are retried elsewhere) rather than leave the pool to the few left. */
    size_t ejected = 0;
    for (size_t i = 0; i < p->n_eps; i++)
        ejected += sb_endpoint_outlier_ejected(&p->eps[i]);
    uint32_t pct = p->params.health.max_eject_percent;
    bool may_eject = ejected == 0 || pct == 0 || pct >= 100 || (ejected + 1) * 100 <= (size_t)pct * p->n_eps;
    sb_endpoint_finish(e, t, ok, counts_for_health, &p->params.health, may_eject, now);
}

void sb_router_pool_carry_counters(sb_router *dst, uint32_t dp, const sb_router *src, uint32_t sp)
{
    if (dp < dst->n_pools && sp < src->n_pools)
        dst->pools[dp].panics = src->pools[sp].panics;
}

uint64_t sb_router_pool_panics(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].panics : 0;
}

/* The calibration's shrink past which the router's traffic share also bounds the index. */
#define SHARE_AFTER_SHRINK 0.1

/* Sets endpoint ep's index capacity from the engine's cache size in tokens and what the router
 * learned of its own view (prefix_share, prefix_calibrate). */
static void set_capacity(pool *p, uint32_t ep, uint64_t capacity_tokens)
{
    double blocks = (double)capacity_tokens * p->params.bytes_per_token / p->params.block_bytes;
    /* The engine's cache turns over with all its traffic, and this router's marks see only its
     * own: with a third of an endpoint's requests (three gateway replicas) what it routed there
     * a third of a cache ago is likely gone already. Off by default: where the other replicas
     * send the same prefixes (they refresh them) the marks then expire too early (the routing
     * matrix, docs/benchmarks.md section 10, session 28: three gateways under cache pressure
     * p99 3,601 -> 399 ms, but shared-prefix and hot-prefix cells without pressure lose). */
    if (p->params.prefix_share && ep < p->n_eps) {
        double share = sb_endpoint_traffic_share(&p->eps[ep]);
        if (share < 0.9)
            blocks *= share;
    }
    /* What the answers taught (sb_router_observe_cached); once they show the marks outliving
     * the engine's cache, and this router sends the endpoint only part of its traffic, the
     * index keeps at most that part: the evidence says the rest of the cache is the other
     * senders' (over the routing matrix, a share applied only then: WORSE 23 -> 22, p90
     * geomean 0.965 -> 0.962, p99 0.990 -> 0.986, thresholds 0.05-0.2 alike). */
    if (p->params.prefix_calibrate && ep < p->n_eps) {
        double keep = 1.0 - p->eps[ep].index_shrink;
        if (p->eps[ep].index_shrink > SHARE_AFTER_SHRINK) {
            double share = sb_endpoint_traffic_share(&p->eps[ep]);
            keep = share < keep ? share : keep;
        }
        blocks *= keep;
    }
    uint32_t b = blocks > 4e9 ? 4000000000u : (uint32_t)blocks;
    if (b != sb_prefix_index_capacity(p->prefix, ep))
        sb_prefix_index_set_capacity(p->prefix, ep, b);
}

void sb_router_prefix_capacity(sb_router *r, uint32_t pool_idx, uint32_t ep, uint64_t capacity_tokens)
{
    if (pool_idx >= r->n_pools || capacity_tokens == 0)
        return;
    set_capacity(&r->pools[pool_idx], ep, capacity_tokens);
}

void sb_router_observe_cached(sb_router *r, uint32_t pool_idx, uint32_t ep, const sb_ticket *t, uint64_t prompt_tokens,
                              uint64_t cached_tokens)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (!e)
        return;
    pool *p = &r->pools[pool_idx];
    /* A pool fed by the engines' events predicts from their reports too: a shortfall there is
     * an event still on its way, not the marks forgetting too slowly. */
    if (!p->params.prefix_calibrate || p->kv || !t->prefill_tokens || !prompt_tokens)
        return;
    /* The ticket counts the router's estimate of tokens, the answer the engine's own: the
     * prediction is carried over as a fraction of the prompt. */
    double predicted = 1.0 - (double)t->uncached_tokens / t->prefill_tokens;
    if (predicted < 0.05)
        return;
    /* A shortfall counts when it passes a tenth of the prompt and two engine blocks: an engine
     * caches whole blocks and computes a prompt's last token again, so a short prompt found
     * whole reads a few blocks short. */
    double block = e->report.block_size ? (double)e->report.block_size : 16.0;
    double shortfall = predicted * (double)prompt_tokens - (double)cached_tokens;
    double margin = 0.1 * (double)prompt_tokens > 2 * block ? 0.1 * (double)prompt_tokens : 2 * block;
    if (shortfall > margin)
        e->index_shrink = 1.0 - (1.0 - e->index_shrink) * 0.85;
    else
        e->index_shrink *= 0.95;
    if (e->index_shrink > 0.95)
        e->index_shrink = 0.95;
    if (e->report.have_capacity && e->report.num_gpu_blocks && e->report.block_size)
        set_capacity(p, ep, (uint64_t)e->report.num_gpu_blocks * e->report.block_size);
}

void sb_router_remap_prefix_index(sb_router *dst, uint32_t dp, sb_router *src, uint32_t sp, const int32_t *map)
{
    if (dp >= dst->n_pools || sp >= src->n_pools)
        return;
    pool *d = &dst->pools[dp], *s = &src->pools[sp];
    /* The old pool keeps picking until it retires (queued and parked requests go on): it needs
     * an empty index of its own size, not the new pool's (its match array is n_eps long). */
    sb_prefix_index *fresh = sb_prefix_index_new((uint32_t)s->n_eps, s->params.prefix_max_entries,
                                                 s->params.prefix_default_blocks, src->hash_secret);
    if (!fresh)
        return;
    /* A pick never dispatched (a request that waited for a probe, say): its mark is not work
     * the endpoint will do. */
    if (s->pick_pending) {
        sb_prefix_index_settle(s->prefix, s->pick_pending_ep, s->pick_pending_hash, false);
        s->pick_pending = false;
    }
    if (sb_prefix_index_remap(s->prefix, map, (uint32_t)d->n_eps, d->params.prefix_default_blocks) < 0) {
        sb_prefix_index_free(fresh);
        return;
    }
    sb_prefix_index_free(d->prefix);
    d->prefix = s->prefix;
    s->prefix = fresh; /* its last requests settle there */
    sb_prefix_index_settle_all(d->prefix);
    /* Demand is keyed by block hashes, not endpoints: it carries over whole (the old pool, if
     * it picks again before it retires, starts a table of its own). */
    sb_hot_prefix_free(d->hot);
    d->hot = s->hot;
    s->hot = NULL;
}

void sb_router_move_prefix_index(sb_router *dst, uint32_t dp, sb_router *src, uint32_t sp)
{
    if (dp >= dst->n_pools || sp >= src->n_pools || dst->pools[dp].n_eps != src->pools[sp].n_eps)
        return;
    /* An index keeps its own slot key, so it stays valid under dst whatever dst's secret. */
    sb_prefix_index *t = dst->pools[dp].prefix;
    dst->pools[dp].prefix = src->pools[sp].prefix;
    src->pools[sp].prefix = t;
    sb_hot_prefix *h = dst->pools[dp].hot; /* the demand seen so far, likewise */
    dst->pools[dp].hot = src->pools[sp].hot;
    src->pools[sp].hot = h;
    /* The precise index too, with what is heard, when both pools keep one of one block size
     * (a changed block size or a pool that gained events starts empty). */
    pool *d = &dst->pools[dp], *s = &src->pools[sp];
    if (d->kv && s->kv && sb_kv_index_block_size(d->kv) == sb_kv_index_block_size(s->kv)) {
        sb_kv_index *k = d->kv;
        d->kv = s->kv;
        s->kv = k;
        uint8_t *l = d->kv_live;
        d->kv_live = s->kv_live;
        s->kv_live = l;
        sb_ns *c = d->kv_cleared;
        d->kv_cleared = s->kv_cleared;
        s->kv_cleared = c;
    }
    /* Requests in flight settle against src's router, which no longer has these entries:
     * count what they were computing as computed rather than leave it pending for ever. */
    sb_prefix_index_settle_all(dst->pools[dp].prefix);
}

int sb_router_kv_enable(sb_router *r, uint32_t pool_idx, const sb_kv_index_config *cfg, sb_ns cover_ns)
{
    if (pool_idx >= r->n_pools)
        return -1;
    pool *p = &r->pools[pool_idx];
    if (p->kv)
        return 0;
    sb_kv_index_config c = *cfg;
    c.n_endpoints = (uint32_t)p->n_eps;
    size_t n = p->n_eps ? p->n_eps : 1;
    p->kv = sb_kv_index_new(&c);
    p->kv_match = sb_calloc(n, sizeof(uint32_t));
    p->kv_live = sb_calloc(n, 1);
    p->kv_cleared = sb_calloc(n, sizeof(sb_ns));
    if (!p->kv || !p->kv_match || !p->kv_live || !p->kv_cleared) {
        sb_kv_index_free(p->kv);
        sb_free(p->kv_match);
        sb_free(p->kv_live);
        sb_free(p->kv_cleared);
        p->kv = NULL;
        p->kv_match = NULL;
        p->kv_live = NULL;
        p->kv_cleared = NULL;
        return -1;
    }
    p->kv_cover_ns = cover_ns;
    return 0;
}

struct sb_kv_index *sb_router_kv_index(sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].kv : NULL;
}

void sb_router_kv_live(sb_router *r, uint32_t pool_idx, uint32_t ep, bool live)
{
    if (pool_idx < r->n_pools && r->pools[pool_idx].kv && ep < r->pools[pool_idx].n_eps)
        r->pools[pool_idx].kv_live[ep] = live;
}

void sb_router_prefix_clear(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ns since)
{
    if (pool_idx >= r->n_pools)
        return;
    pool *p = &r->pools[pool_idx];
    sb_prefix_index_clear_endpoint(p->prefix, ep);
    /* The engine's reports too, unless its stream cleared them itself since `since` (the
     * report before the one that showed the restart): then it saw this restart (its sequence
     * went back, net/kv_subscriber.c) and what it reported after is the new engine's, which
     * must not be erased. Otherwise the old engine's blocks would stand as truth until the new
     * one publishes (an idle engine never does). */
    if (p->kv && ep < p->n_eps && !(p->kv_cleared[ep] > since))
        sb_kv_index_clear(p->kv, ep);
}

void sb_router_kv_cleared(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ns now)
{
    if (pool_idx >= r->n_pools || !r->pools[pool_idx].kv || ep >= r->pools[pool_idx].n_eps)
        return;
    pool *p = &r->pools[pool_idx];
    sb_kv_index_clear(p->kv, ep);
    p->kv_cleared[ep] = now;
}

const struct sb_prefix_index *sb_router_prefix_index(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].prefix : NULL;
}

void sb_router_observe_ttft(sb_router *r, uint32_t pool_idx, uint32_t ep, uint64_t prompt_tokens, uint64_t cached_tokens,
                            sb_ns ttft_ns)
{
    sb_endpoint *e = sb_router_endpoint(r, pool_idx, ep);
    if (e && prompt_tokens > cached_tokens)
        sb_endpoint_observe_ttft(e, prompt_tokens - cached_tokens, ttft_ns);
}

int sb_router_build_ring(sb_router *r, uint32_t pool_idx)
{
    if (pool_idx >= r->n_pools)
        return -1;
    pool *p = &r->pools[pool_idx];
    size_t n = p->n_eps ? p->n_eps : 1;
    const char **ids = sb_calloc(n, sizeof(char *));
    char (*unnamed)[16] = sb_calloc(n, sizeof(*unnamed)); /* "#" + a uint32_t */
    sb_chash *ring = NULL;
    if (ids && unnamed) {
        for (size_t i = 0; i < p->n_eps; i++) {
            snprintf(unnamed[i], sizeof(unnamed[i]), "#%u", (unsigned)i);
            ids[i] = p->eps[i].address ? p->eps[i].address : unnamed[i];
        }
        ring = sb_chash_new(ids, p->n_eps, SB_CHASH_DEFAULT_VNODES);
    }
    sb_free(ids);
    sb_free(unnamed);
    if (!ring)
        return -1;
    sb_chash_free(p->ring);
    p->ring = ring;
    return 0;
}

bool sb_router_pool_saturated(sb_router *r, uint32_t pool_idx, double queue_threshold, double kv_threshold,
                              sb_ns now)
{
    if (pool_idx >= r->n_pools)
        return false;
    pool *p = &r->pools[pool_idx];
    double q = p->profile ? p->profile->queue_threshold : 5, kv = p->profile ? p->profile->kv_threshold : 0.8;
    if (queue_threshold >= 0)
        q = queue_threshold;
    if (kv_threshold >= 0)
        kv = kv_threshold;
    size_t evidence = 0;
    if (sb_profile_slots_gate(p->profile)) {
        /* A slots pool is saturated when no endpoint has a free slot by its fresh slots report
         * and the gateway's own traffic since; an endpoint without one is no evidence. */
        for (size_t i = 0; i < p->n_eps; i++) {
            sb_endpoint *ep = &p->eps[i];
            if (!sb_endpoint_available(ep, now) || !sb_endpoint_slots_fresh(ep, now))
                continue;
            if (sb_endpoint_slots_idle(ep) > 0)
                return false;
            evidence++;
        }
        return evidence > 0;
    }
    for (size_t i = 0; i < p->n_eps; i++) {
        sb_endpoint *ep = &p->eps[i];
        if (!sb_endpoint_available(ep, now) || sb_endpoint_is_stale(ep, p->params.stale_ns, now))
            continue;
        if (sb_endpoint_waiting(ep) > q || sb_endpoint_kv_usage(ep) > kv)
            evidence++;
        else
            return false;
    }
    return evidence > 0;
}

bool sb_router_pool_available(sb_router *r, uint32_t pool_idx, sb_ns now)
{
    if (pool_idx >= r->n_pools)
        return false;
    /* Panic routing (the healthy filter) takes ejected and down endpoints when no other is
     * left: only draining ones, which the operator took out, never take a request. */
    for (size_t i = 0; i < r->pools[pool_idx].n_eps; i++)
        if (sb_endpoint_health(&r->pools[pool_idx].eps[i], now) != SB_HEALTH_DRAINING)
            return true;
    return false;
}

size_t sb_router_pool_count(const sb_router *r) { return r->n_pools; }

size_t sb_router_endpoint_count(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].n_eps : 0;
}

const char *sb_router_pool_name(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].name : NULL;
}

const sb_profile *sb_router_pool_profile(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].profile : NULL;
}

const sb_pool_params *sb_router_pool_params(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? &r->pools[pool_idx].params : NULL;
}
