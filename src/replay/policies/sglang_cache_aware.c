/* sglang-cache-aware, sglang-cache-aware-rust: the SGLang model gateway's (sgl-router's)
 * cache-aware policy, with its two published default sets (sgl-project/sglang):
 *   sglang-cache-aware       the router's command line, sgl-router/py_src/sglang_router/
 *                            router_args.py (RouterArgs): cache_threshold 0.3,
 *                            balance_abs_threshold 64, balance_rel_threshold 1.5,
 *                            eviction_interval_secs 120, max_tree_size 2^26;
 *   sglang-cache-aware-rust  the Rust library's CacheAwareConfig::default(),
 *                            sgl-router/src/policies/mod.rs: 0.5, 32, 1.1, 30 s, 10,000.
 * One file, two entries: the rule is the same, only the constants differ.
 *
 * The rule (sgl-router/src/policies/cache_aware.rs, select_worker):
 *   load = each worker's requests in flight from the router (Worker::load);
 *   imbalanced = max_load - min_load > balance_abs_threshold
 *                AND max_load > min_load x balance_rel_threshold;
 *   imbalanced: the least loaded worker (first of equals);
 *   otherwise: match the prompt in the approximate radix tree of what was routed to each worker
 *     (policies/tree.rs): matched = the longest prefix any worker's tree holds, match rate =
 *     matched / prompt length; if rate > cache_threshold, a worker holding that prefix,
 *     else the worker with the smallest tree (fewest characters: most free cache).
 *   Either way the prompt is then inserted in the chosen worker's tree.
 *   Every eviction_interval_secs, each worker's tree above max_tree_size characters loses its
 *   least recently used leaves until it fits (Tree::evict_tenant_by_size).
 *
 * Here (docs/replay.md, "Reference policies"): the tree is over the router's 64-byte block
 * hashes (16 token ids, chained) instead of characters, held in a core/prefix_index.h per run
 * (per worker, least recently used first, prompts inserted tail first so leaves age before
 * their stems); a match is counted in whole blocks (up to 15 tokens short of the character
 * match); sizes convert at 4 characters per token (max_tree_size 2^26 characters = 1,048,576
 * blocks, 10,000 characters = 156 blocks). Eviction runs on the virtual clock at the interval,
 * as sglang's thread does; between runs trees grow freely. sglang takes the first tenant of a
 * concurrent map at the matched node, and the first of equal smallest trees: arbitrary, so a
 * random one here (seeded). Memory: trees grow freely between evictions, so the index is capped
 * only at 12M entries (about 400 MB, allocated as used); beyond that it would evict early
 * (docs/replay.md gives the peak of the documented runs). */
#include <stdint.h>

#include "base/alloc.h"
#include "core/prefix_index.h"
#include "replay/policy.h"

#define CHARS_PER_TOKEN 4
#define MAX_ENTRIES (12u << 20) /* memory cap of the whole index, entries */

typedef struct params {
    double cache_threshold;
    uint32_t balance_abs;
    double balance_rel;
    sb_ns eviction_interval_ns;
    uint64_t max_tree_chars;
} params;

/* sgl-router/py_src/sglang_router/router_args.py RouterArgs defaults (the CLI's). */
static const params cli = {0.3, 64, 1.5, 120 * SB_NS_PER_S, 1ULL << 26};
/* sgl-router/src/policies/mod.rs CacheAwareConfig::default() (the library's). */
static const params rust = {0.5, 32, 1.1, 30 * SB_NS_PER_S, 10000};

typedef struct state {
    params p;
    uint32_t n, block_tokens, max_tree_blocks;
    sb_prefix_index *trees;
    uint32_t *match, *ties;
    sb_ns next_eviction_ns; /* 0 until the first pick */
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_prefix_index_free(s->trees);
    sb_free(s->match);
    sb_free(s->ties);
    sb_free(s);
}

static void *create_with(const sb_replay_policy_env *env, const params *p)
{
    state *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->p = *p;
    s->n = env->n_replicas;
    s->block_tokens = env->router_block_tokens ? env->router_block_tokens : 16;
    uint64_t blocks = p->max_tree_chars / CHARS_PER_TOKEN / s->block_tokens;
    s->max_tree_blocks = blocks > MAX_ENTRIES ? MAX_ENTRIES : (uint32_t)blocks;
    s->trees = sb_prefix_index_new(s->n, MAX_ENTRIES, MAX_ENTRIES, env->hash_secret);
    s->match = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    s->ties = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    if (!s->trees || !s->match || !s->ties) {
        destroy(s);
        return NULL;
    }
    return s;
}

static void *create_cli(const sb_replay_policy_env *env)
{
    return create_with(env, &cli);
}
static void *create_rust(const sb_replay_policy_env *env)
{
    return create_with(env, &rust);
}

/* Tree::evict_tenant_by_size on every worker: trim to the bound, then lift it again. */
static void evict_due(state *s, sb_ns now)
{
    if (s->next_eviction_ns == 0)
        s->next_eviction_ns = now + s->p.eviction_interval_ns;
    if (now < s->next_eviction_ns)
        return;
    while (s->next_eviction_ns <= now)
        s->next_eviction_ns += s->p.eviction_interval_ns;
    for (uint32_t i = 0; i < s->n; i++)
        if (sb_prefix_index_endpoint_entries(s->trees, i) > s->max_tree_blocks) {
            sb_prefix_index_set_capacity(s->trees, i, s->max_tree_blocks);
            sb_prefix_index_set_capacity(s->trees, i, MAX_ENTRIES);
        }
}

static uint32_t random_of(const sb_replay_fleet_view *f, const uint32_t *c, uint32_t n)
{
    return n == 1 ? c[0] : c[sb_rand_next(f->rng) % n];
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    uint32_t max_load = 0, min_load = UINT32_MAX, least = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t load = sb_router_endpoint(f->router, f->pool, i)->in_flight;
        if (load > max_load)
            max_load = load;
        if (load < min_load) {
            min_load = load;
            least = i;
        }
    }
    if (max_load - min_load > s->p.balance_abs && (double)max_load > (double)min_load * s->p.balance_rel)
        return (int)least;

    evict_due(s, f->now);
    size_t best = sb_prefix_index_match(s->trees, r->sched->block_hashes, r->sched->n_blocks, s->match);
    double rate = r->n_tokens ? (double)best * s->block_tokens / (double)r->n_tokens : 0.0;
    uint32_t nt = 0;
    if (best > 0 && rate > s->p.cache_threshold) {
        for (uint32_t i = 0; i < s->n; i++)
            if (s->match[i] == best)
                s->ties[nt++] = i;
    } else {
        size_t smallest = SIZE_MAX;
        for (uint32_t i = 0; i < s->n; i++) {
            size_t size = sb_prefix_index_endpoint_entries(s->trees, i);
            if (size < smallest) {
                smallest = size;
                nt = 0;
            }
            if (size == smallest)
                s->ties[nt++] = i;
        }
    }
    return (int)random_of(f, s->ties, nt);
}

static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    (void)f;
    state *s = st;
    sb_prefix_index_insert(s->trees, replica, r->sched->block_hashes, r->sched->n_blocks);
}

static const sb_replay_custom_ops ops_cli = {
    .create = create_cli, .destroy = destroy, .pick = pick, .on_dispatch = on_dispatch};
static const sb_replay_custom_ops ops_rust = {
    .create = create_rust, .destroy = destroy, .pick = pick, .on_dispatch = on_dispatch};

const sb_replay_policy_def sb_policy_sglang_cache_aware = {
    .name = "sglang-cache-aware",
    .summary = "SGLang router cache-aware, CLI defaults: threshold 0.3, abs 64, rel 1.5, evict 120 s to 2^26 chars "
               "(sgl-router policies/cache_aware.rs, tree.rs; py_src/sglang_router/router_args.py)",
    .custom = &ops_cli,
};

const sb_replay_policy_def sb_policy_sglang_cache_aware_rust = {
    .name = "sglang-cache-aware-rust",
    .summary = "SGLang router cache-aware, Rust library defaults: threshold 0.5, abs 32, rel 1.1, evict 30 s to "
               "10,000 chars (sgl-router policies/cache_aware.rs, policies/mod.rs CacheAwareConfig::default)",
    .custom = &ops_rust,
};
