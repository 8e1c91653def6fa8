/* aibrix-prefix: AIBrix's prefix-cache routing (vllm-project/aibrix
 * pkg/plugins/gateway/algorithms/prefix_cache.go as of the v0.3 releases, with
 * pkg/utils/prefixcacheindexer/hash.go and the least-request helpers of least_request.go).
 *
 * The rule, per request, with each pod's requests in flight as the gateway counts them
 * (getRequestCounts: RealtimeNumRequestsRunning, tracked by the gateway itself):
 *   1. imbalanced: if max - min > 8 (AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT),
 *      a random pod among those with the fewest requests;
 *   2. otherwise match the prompt's chained block hashes in the prefix table: walking block by
 *      block while some still-matching pod holds the next block, each pod gets the percentage
 *      (blocks matched x 100 / blocks, integer) of its deepest block; among matched pods, sorted
 *      by percentage descending then requests ascending (shuffled first, so equals are random),
 *      the first whose requests <= mean + 1 x standard deviation of all pods' requests
 *      (AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR 1);
 *   3. no match, or no matched pod within mean + sigma: a random pod among the least loaded.
 *   The prompt's blocks are then added to the table for the chosen pod.
 * The table (PrefixHashTable) is one LRU store shared by all pods: 200,000 blocks
 * (AIBRIX_PREFIX_CACHE_BLOCK_NUMBER) of 4 tokens (AIBRIX_PREFIX_CACHE_BLOCK_SIZE; with the
 * default character tokenizer a "token" is a byte), entries unused for 20 minutes expire
 * (AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS), and AddPrefix writes a prompt's blocks head
 * first, so under pressure a prompt's head is the first of its blocks to go.
 *
 * Here: blocks are the router's 64-byte hashes (16 token ids), and the store holds 12,500 of
 * them: the same 800,000 bytes of prompt text as 200,000 four-byte blocks (about 200,000 tokens
 * for the whole fleet, a few dozen long prompts). Percentages are over 16-token blocks instead
 * of 4-byte ones. AIBrix's main branch has since replaced step 1 by a gate (max > 2 x (mean + 1)
 * and max - min >= 8) that restricts step 2 to the least loaded pods; this file keeps the
 * published v0.3 rule the issue names. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "replay/policies/block_lru.h"
#include "replay/policy.h"

#define IMBALANCE_ABS_COUNT 8             /* defaultPodRunningRequestImbalanceAbsCount */
#define STDDEV_FACTOR 1.0                 /* defaultStandardDeviationFactor */
#define STORE_BYTES (200000u * 4u)        /* defaultPrefixCacheBlockNumber x defaultPrefixCacheBlockSize */
#define TTL_NS (20ULL * 60 * SB_NS_PER_S) /* defaultPrefixCacheEvictionDurationInMins */
#define BYTES_PER_TOKEN 4

typedef struct state {
    uint32_t n, words; /* payload: [0] last access time, [1..words] pod bitmask */
    uint32_t capacity; /* router blocks */
    sb_block_lru *store;
    uint32_t *counts, *percent, *order, *ties;
    uint64_t *selected;
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_block_lru_free(s->store);
    sb_free(s->counts);
    sb_free(s->percent);
    sb_free(s->order);
    sb_free(s->ties);
    sb_free(s->selected);
    sb_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = env->n_replicas;
    s->words = (s->n + 63) / 64;
    uint32_t bt = env->router_block_tokens ? env->router_block_tokens : 16;
    s->capacity = STORE_BYTES / BYTES_PER_TOKEN / bt;
    size_t n = s->n ? s->n : 1;
    s->store = sb_block_lru_new(1 + s->words);
    s->counts = sb_calloc(n, sizeof(uint32_t));
    s->percent = sb_calloc(n, sizeof(uint32_t));
    s->order = sb_calloc(n, sizeof(uint32_t));
    s->ties = sb_calloc(n, sizeof(uint32_t));
    s->selected = sb_calloc(s->words + 1, sizeof(uint64_t));
    if (!s->store || !s->counts || !s->percent || !s->order || !s->ties || !s->selected) {
        destroy(s);
        return NULL;
    }
    return s;
}

/* The store's entry for hash if present and not expired (an expired one is dropped). */
static uint32_t lookup(state *s, uint64_t hash, sb_ns now)
{
    uint32_t e = sb_block_lru_find(s->store, hash);
    if (e == SB_BLOCK_LRU_NONE)
        return e;
    uint64_t *pl = sb_block_lru_payload(s->store, e);
    if (now - pl[0] > TTL_NS) {
        memset(pl + 1, 0, s->words * sizeof(uint64_t));
        return SB_BLOCK_LRU_NONE;
    }
    return e;
}

static uint32_t least_loaded(state *s, const sb_replay_fleet_view *f)
{
    uint32_t min = UINT32_MAX, nt = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->counts[i] < min) {
            min = s->counts[i];
            nt = 0;
        }
        if (s->counts[i] == min)
            s->ties[nt++] = i;
    }
    return s->ties[sb_rand_next(f->rng) % nt];
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    uint32_t max = 0, min = UINT32_MAX;
    double sum = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t c = sb_router_endpoint(f->router, f->pool, i)->in_flight;
        s->counts[i] = c;
        max = c > max ? c : max;
        min = c < min ? c : min;
        sum += c;
    }
    if (max - min > IMBALANCE_ABS_COUNT)
        return (int)least_loaded(s, f);

    /* MatchPrefix: walk while some still-selected pod holds the next block. */
    size_t nb = r->sched->n_blocks;
    memset(s->percent, 0, s->n * sizeof(uint32_t));
    memset(s->selected, 0, s->words * sizeof(uint64_t));
    for (uint32_t i = 0; i < s->n; i++)
        s->selected[i / 64] |= 1ULL << (i % 64);
    uint32_t matched = 0;
    for (size_t b = 0; b < nb; b++) {
        uint32_t e = lookup(s, r->sched->block_hashes[b], f->now);
        if (e == SB_BLOCK_LRU_NONE)
            break;
        sb_block_lru_touch(s->store, e); /* the store's Get refreshes the entry */
        const uint64_t *mask = sb_block_lru_payload(s->store, e) + 1;
        bool any = false;
        for (uint32_t w = 0; w < s->words; w++)
            any |= (s->selected[w] & mask[w]) != 0;
        if (!any)
            break;
        uint32_t pct = (uint32_t)((b + 1) * 100 / nb);
        for (uint32_t w = 0; w < s->words; w++)
            s->selected[w] &= mask[w];
        for (uint32_t i = 0; i < s->n; i++)
            if (s->selected[i / 64] >> (i % 64) & 1)
                s->percent[i] = pct;
    }
    for (uint32_t i = 0; i < s->n; i++)
        if (s->percent[i])
            s->order[matched++] = i;
    if (matched) {
        double mean = sum / s->n, var = 0;
        for (uint32_t i = 0; i < s->n; i++)
            var += ((double)s->counts[i] - mean) * ((double)s->counts[i] - mean);
        double bound = mean + STDDEV_FACTOR * sqrt(var / s->n);
        /* Shuffle, then a stable insertion sort by (percent desc, requests asc): equals stay in
         * random order, as rand.Shuffle + sort.SliceStable leave them. n is small. */
        for (uint32_t i = matched; i > 1; i--) {
            uint32_t j = (uint32_t)(sb_rand_next(f->rng) % i), t = s->order[i - 1];
            s->order[i - 1] = s->order[j];
            s->order[j] = t;
        }
        for (uint32_t i = 1; i < matched; i++) {
            uint32_t x = s->order[i], k = i;
            for (; k > 0; k--) {
                uint32_t y = s->order[k - 1];
                bool before =
                    s->percent[x] > s->percent[y] || (s->percent[x] == s->percent[y] && s->counts[x] < s->counts[y]);
                if (!before)
                    break;
                s->order[k] = y;
            }
            s->order[k] = x;
        }
        for (uint32_t i = 0; i < matched; i++)
            if ((double)s->counts[s->order[i]] <= bound)
                return (int)s->order[i];
    }
    return (int)least_loaded(s, f);
}

/* AddPrefix: every block of the prompt, head first, marked for the pod and refreshed. */
static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    state *s = st;
    for (size_t b = 0; b < r->sched->n_blocks; b++) {
        bool created;
        uint32_t e = sb_block_lru_get(s->store, r->sched->block_hashes[b], &created);
        if (e == SB_BLOCK_LRU_NONE)
            return;
        uint64_t *pl = sb_block_lru_payload(s->store, e);
        if (!created && f->now - pl[0] > TTL_NS)
            memset(pl + 1, 0, s->words * sizeof(uint64_t));
        pl[0] = f->now;
        pl[1 + replica / 64] |= 1ULL << (replica % 64);
        sb_block_lru_touch(s->store, e);
        while (sb_block_lru_count(s->store) > s->capacity && sb_block_lru_evict_one(s->store))
            ;
    }
}

static const sb_replay_custom_ops ops = {
    .create = create, .destroy = destroy, .pick = pick, .on_dispatch = on_dispatch};

const sb_replay_policy_def sb_policy_aibrix_prefix = {
    .name = "aibrix-prefix",
    .summary = "AIBrix prefix-cache: least-request if max-min running > 8, else best prefix match within mean + 1 "
               "sigma, 200k-block shared LRU table (aibrix gateway/algorithms/prefix_cache.go v0.3, "
               "utils/prefixcacheindexer/hash.go)",
    .custom = &ops,
};
