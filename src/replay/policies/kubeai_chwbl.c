/* kubeai-chwbl: KubeAI's PrefixHash load balancing, consistent hashing with bounded loads
 * (substratusai/kubeai internal/loadbalancer/group.go: key = req.Adapter + req.Prefix;
 * balance_chwbl.go: the ring walk and chwblLoadOK; defaults
 * from api/k8s/v1 Model loadBalancing.prefixHash: prefixCharLength 100, replication 256,
 * meanLoadFactor 125).
 *
 * The rule: key = adapter + the first 100 characters of the prompt (here the first 25 token
 * ids, at the gateway's 4 bytes per token, hashed with the adapter as seed). Walk the ring
 * clockwise from the key; the first endpoint whose load passes
 *     load + 1 <= (total + 1) / n x 1.25
 * takes the request (load: the balancer's own in-flight count for that endpoint; total: the sum
 * over all n endpoints), and when the total is 0 any endpoint passes. If none passes after a
 * full turn, the first endpoint met (the key's owner) takes it. Note what that float rule does
 * at low load: while (total + 1) x 1.25 / n < 1 nobody passes, so the owner takes everything
 * (pure consistent hashing) until the fleet has about n / 1.25 requests in flight; only then
 * does the bound start spilling a hot key to the next endpoints.
 *
 * Uses core/chash.h for the ring (256 points per replica, named "#<index>" like the router's)
 * and its first-admissible walk; KubeAI's own bound is applied here, not sb_chash_load_bound's
 * ceiling (which would let idle endpoints take a key as soon as its owner had one request). */
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "core/chash.h"
#include "replay/policy.h"

#define PREFIX_TOKENS 25 /* prefixCharLength 100 at 4 bytes per token */
#define REPLICATION 256  /* KubeAI prefixHash.replication default */
#define LOAD_FACTOR 1.25 /* KubeAI prefixHash.meanLoadFactor default 125 (%) */

typedef struct state {
    sb_chash *ring;
    uint64_t *allowed; /* one bit per replica */
    uint32_t n;
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_chash_free(s->ring);
    sb_free(s->allowed);
    sb_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_calloc(1, sizeof(*s));
    char **ids = sb_calloc(env->n_replicas ? env->n_replicas : 1, sizeof(char *));
    if (!s || !ids)
        goto fail;
    s->n = env->n_replicas;
    for (uint32_t i = 0; i < s->n; i++) {
        char name[24];
        snprintf(name, sizeof(name), "#%u", i);
        if (!(ids[i] = sb_strdup(name)))
            goto fail;
    }
    s->ring = sb_chash_new((const char *const *)ids, s->n, REPLICATION);
    s->allowed = sb_calloc((s->n + 63) / 64 + 1, sizeof(uint64_t));
    if (!s->ring || !s->allowed)
        goto fail;
    for (uint32_t i = 0; i < s->n; i++)
        sb_free(ids[i]);
    sb_free(ids);
    return s;
fail:
    for (uint32_t i = 0; ids && s && i < s->n; i++)
        sb_free(ids[i]);
    sb_free(ids);
    destroy(s);
    return NULL;
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    uint32_t pk = r->n_tokens < PREFIX_TOKENS ? r->n_tokens : PREFIX_TOKENS;
    uint64_t key = XXH3_64bits_withSeed(r->tokens, pk * sizeof(uint32_t), r->engine_adapter);
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n; i++)
        total += sb_router_endpoint(f->router, f->pool, i)->in_flight;
    double threshold = (double)(total + 1) / (double)s->n * LOAD_FACTOR;
    memset(s->allowed, 0, (s->n + 63) / 64 * sizeof(uint64_t));
    bool any = false;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t load = sb_router_endpoint(f->router, f->pool, i)->in_flight;
        if (total == 0 || (double)load + 1 <= threshold) {
            s->allowed[i / 64] |= 1ULL << (i % 64);
            any = true;
        }
    }
    /* Every replica serves every adapter in replay (max_loras covers the workloads'), so the
     * adapter check of balance_chwbl.go never excludes one: the default is the owner. */
    return any ? sb_chash_first(s->ring, key, s->allowed) : sb_chash_owner(s->ring, key);
}

static const sb_replay_custom_ops ops = {.create = create, .destroy = destroy, .pick = pick};

const sb_replay_policy_def sb_policy_kubeai_chwbl = {
    .name = "kubeai-chwbl",
    .summary = "KubeAI PrefixHash: CHWBL on adapter + first 100 chars, 256 vnodes, load factor 1.25 on in-flight "
               "(kubeai internal/loadbalancer/balance_chwbl.go)",
    .custom = &ops,
};
