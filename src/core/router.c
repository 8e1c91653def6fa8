#include "core/router.h"

#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"

typedef struct model_entry {
    char *name;
    size_t len;
    uint64_t hash;
    uint32_t pool;
    int adapter;
    enum sb_model_kind kind;
} model_entry;

typedef struct pool {
    char *name;
    enum sb_policy_kind policy;
    sb_endpoint_stats *eps;
    size_t n_eps;
    size_t rr_next;
    char *served;
    size_t served_len;
    int n_adapters;
} pool;

struct sb_router {
    pool *pools;
    size_t n_pools;
    /* Open-addressing table of model names: a handful to a few thousand names, looked up
     * once per request, so linear probing over a power-of-two table is plenty. */
    model_entry *models;
    size_t models_cap;
    size_t n_models;
    uint64_t rng;
};

static uint64_t next_rand(sb_router *r)
{
    /* xorshift64*: cheap, deterministic from the seed, good enough for tie-breaks. */
    uint64_t x = r->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

sb_router *sb_router_new(uint64_t seed)
{
    sb_router *r = sb_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    r->models_cap = 64;
    r->models = sb_calloc(r->models_cap, sizeof(model_entry));
    if (!r->models) {
        sb_free(r);
        return NULL;
    }
    return r;
}

void sb_router_free(sb_router *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_pools; i++) {
        sb_free(r->pools[i].name);
        sb_free(r->pools[i].eps);
    }
    sb_free(r->pools);
    for (size_t i = 0; i < r->models_cap; i++)
        sb_free(r->models[i].name);
    sb_free(r->models);
    sb_free(r);
}

int sb_router_add_pool(sb_router *r, const char *name, enum sb_policy_kind policy, size_t n_endpoints)
{
    pool *np = sb_realloc(r->pools, (r->n_pools + 1) * sizeof(pool));
    if (!np)
        return -1;
    r->pools = np;
    pool *p = &np[r->n_pools];
    memset(p, 0, sizeof(*p));
    p->name = sb_strdup(name);
    p->eps = sb_calloc(n_endpoints, sizeof(sb_endpoint_stats));
    if (!p->name || !p->eps) {
        sb_free(p->name);
        sb_free(p->eps);
        return -1;
    }
    p->policy = policy;
    p->n_eps = n_endpoints;
    return (int)r->n_pools++;
}

static model_entry *find_slot(model_entry *tab, size_t cap, const char *name, size_t len, uint64_t h)
{
    size_t i = (size_t)h & (cap - 1);
    for (;;) {
        model_entry *e = &tab[i];
        if (!e->name || (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0))
            return e;
        i = (i + 1) & (cap - 1);
    }
}

static int grow_models(sb_router *r)
{
    size_t cap = r->models_cap * 2;
    model_entry *tab = sb_calloc(cap, sizeof(model_entry));
    if (!tab)
        return -1;
    for (size_t i = 0; i < r->models_cap; i++) {
        model_entry *e = &r->models[i];
        if (e->name)
            *find_slot(tab, cap, e->name, e->len, e->hash) = *e;
    }
    sb_free(r->models);
    r->models = tab;
    r->models_cap = cap;
    return 0;
}

int sb_router_add_model(sb_router *r, uint32_t pool_idx, const char *name, enum sb_model_kind kind)
{
    if (pool_idx >= r->n_pools)
        return -1;
    if ((r->n_models + 1) * 2 > r->models_cap && grow_models(r) < 0)
        return -1;
    size_t len = strlen(name);
    uint64_t h = XXH3_64bits(name, len);
    model_entry *e = find_slot(r->models, r->models_cap, name, len, h);
    if (e->name)
        return -2;
    pool *p = &r->pools[pool_idx];
    char *copy = sb_strndup(name, len);
    if (!copy)
        return -1;
    *e = (model_entry){.name = copy, .len = len, .hash = h, .pool = pool_idx, .kind = kind, .adapter = -1};
    if (kind == SB_MODEL_ADAPTER)
        e->adapter = p->n_adapters++;
    if (kind == SB_MODEL_SERVED && !p->served) {
        p->served = copy;
        p->served_len = len;
    }
    r->n_models++;
    return 0;
}

int sb_router_resolve(const sb_router *r, const char *name, size_t len, sb_model_match *out)
{
    uint64_t h = XXH3_64bits(name, len);
    const model_entry *e = find_slot(r->models, r->models_cap, name, len, h);
    if (!e->name)
        return -1;
    const pool *p = &r->pools[e->pool];
    out->pool = e->pool;
    out->adapter = e->adapter;
    out->is_alias = e->kind == SB_MODEL_ALIAS;
    out->served = p->served ? p->served : e->name;
    out->served_len = p->served ? p->served_len : e->len;
    out->name = e->name;
    return 0;
}

static bool excluded(const sb_route_request *req, size_t ep)
{
    for (size_t i = 0; i < req->n_exclude; i++)
        if (req->exclude[i] == ep)
            return true;
    return false;
}

/* Round robin: the next endpoint in order that is not excluded. */
static int pick_round_robin(pool *p, const sb_route_request *req)
{
    for (size_t k = 0; k < p->n_eps; k++) {
        size_t ep = (p->rr_next + k) % p->n_eps;
        if (!excluded(req, ep)) {
            p->rr_next = (ep + 1) % p->n_eps;
            return (int)ep;
        }
    }
    return -1;
}

/* Least request: fewest router-counted in-flight requests; ties broken uniformly at random
 * (reservoir sampling over the tied set) so equal endpoints share load evenly. */
static int pick_least_request(sb_router *r, pool *p, const sb_route_request *req)
{
    int best = -1;
    uint32_t best_load = UINT32_MAX;
    uint64_t ties = 0;
    for (size_t ep = 0; ep < p->n_eps; ep++) {
        if (excluded(req, ep))
            continue;
        uint32_t load = p->eps[ep].in_flight;
        if (load < best_load) {
            best = (int)ep;
            best_load = load;
            ties = 1;
        } else if (load == best_load && next_rand(r) % ++ties == 0) {
            best = (int)ep;
        }
    }
    return best;
}

int sb_router_pick(sb_router *r, const sb_route_request *req, sb_ns now)
{
    (void)now;
    if (req->pool >= r->n_pools)
        return -1;
    pool *p = &r->pools[req->pool];
    switch (p->policy) {
    case SB_POLICY_ROUND_ROBIN:
        return pick_round_robin(p, req);
    case SB_POLICY_LEAST_REQUEST:
    default:
        return pick_least_request(r, p, req);
    }
}

static sb_endpoint_stats *stats(sb_router *r, uint32_t pool_idx, uint32_t ep)
{
    if (pool_idx >= r->n_pools || ep >= r->pools[pool_idx].n_eps)
        return NULL;
    return &r->pools[pool_idx].eps[ep];
}

void sb_router_dispatched(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ns now)
{
    sb_endpoint_stats *s = stats(r, pool_idx, ep);
    if (!s)
        return;
    s->in_flight++;
    s->dispatched++;
    s->last_dispatch_ns = now;
}

void sb_router_first_byte(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ns now)
{
    sb_endpoint_stats *s = stats(r, pool_idx, ep);
    if (s)
        s->last_first_byte_ns = now;
}

void sb_router_completed(sb_router *r, uint32_t pool_idx, uint32_t ep, int status, sb_ns now)
{
    (void)status;
    (void)now;
    sb_endpoint_stats *s = stats(r, pool_idx, ep);
    if (!s)
        return;
    if (s->in_flight)
        s->in_flight--;
    s->completed++;
}

void sb_router_failed(sb_router *r, uint32_t pool_idx, uint32_t ep, sb_ns now)
{
    (void)now;
    sb_endpoint_stats *s = stats(r, pool_idx, ep);
    if (!s)
        return;
    if (s->in_flight)
        s->in_flight--;
    s->failed++;
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

enum sb_policy_kind sb_router_pool_policy(const sb_router *r, uint32_t pool_idx)
{
    return pool_idx < r->n_pools ? r->pools[pool_idx].policy : SB_POLICY_LEAST_REQUEST;
}

const sb_endpoint_stats *sb_router_endpoint_stats(const sb_router *r, uint32_t pool_idx, uint32_t ep)
{
    return stats((sb_router *)r, pool_idx, ep);
}
