/* llm-d-sticky: llm-d's router default since 2026-08, "sticky until saturated" (token-aware
 * routing): the prefix-cache-affinity filter, then the token-load scorer, max-score picker.
 * Sources (llm-d/llm-d-router and llm-d/llm-d, read at their 2026-08 heads):
 *   - blog llm-d.github.io blog/2026-08-17_sticky-until-saturated-token-aware-routing.mdx (the
 *     rule, the calibration of peakPrefillThroughput = B / T(B), and that it ships as the
 *     default of the optimized-baseline, agentic, multimodal and P/D guides);
 *   - guides/optimized-baseline/router/optimized-baseline.values.yaml (plugins:
 *     approx-prefix-cache-producer, inflight-load-producer, prefix-cache-affinity-filter,
 *     token-load-scorer; no picker named: max-score);
 *   - pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity/plugin.go (Filter,
 *     DefaultConfig: affinityThreshold 0.80, explorationProbability 0, maxTTFTPenaltyMs 18000,
 *     ttftSource prefillThroughput, peakPrefillThroughput 15928);
 *   - pkg/epp/framework/plugins/scheduling/scorer/tokenload/token_load.go (score = 1 -
 *     min(1, (in-flight tokens + this request's uncached tokens) / 4194304));
 *   - pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/README.md (only the
 *     uncached part of a prompt counts; released at the first streamed chunk);
 *   - .../dataproducer/approximateprefix/README.md (blocks of token ids, at least 64 tokens
 *     (#1158); per-server LRU auto-tuned from the engine's cache; at most 131072 tokens matched).
 *
 * The rule, per request:
 *   match(e)    = leading 64-token blocks of the prompt the approximate index holds for e (what
 *                 this router sent e, LRU per endpoint within e's cache size);
 *   affinity(e) = match(e) / prompt blocks;    sticky = { e : affinity(e) >= 0.8 };
 *   inflight(e) = uncached prompt tokens sent to e whose first byte has not come back;
 *   gate: if sticky is empty, or min over sticky of inflight / R - min over the others of
 *         inflight / R > 18 s (the saturation release, R = peakPrefillThroughput), every
 *         endpoint stays; else only the sticky ones;
 *   score(e)    = 1 - min(1, (inflight(e) + prompt - 64 match(e)) / 4194304); the highest wins,
 *                 ties at random.
 * After the pick the prompt's blocks go into the chosen endpoint's index and its uncached
 * tokens into its in-flight count.
 *
 * Here: R is calibrated for the simulated engine as llm-d's recipe calibrates it (one unloaded
 * chunk of max_num_batched_tokens: R = B / (step overhead + B x prefill per token)), not
 * transplanted from H100 numbers (the blog: "do not transplant"); with the default engine
 * R = 55,700 tokens/s, so the gate opens at about 1M tokens of in-flight lead. The 18 s
 * tolerance is the filter's default. Blocks are chained xxh3 hashes of 64 token ids seeded by
 * the model's router seed (llm-d hashes token ids too). Exploration is 0 (the default). */
#include <xxhash.h>

#include "base/alloc.h"
#include "core/prefix_index.h"
#include "replay/policy.h"

#define AFFINITY_THRESHOLD 0.80          /* prefixcacheaffinity DefaultConfig */
#define MAX_TTFT_PENALTY_NS 18e9         /* DefaultConfig.MaxTTFTPenaltyMs 18000 (PR #1639) */
#define QUEUE_THRESHOLD_TOKENS 4194304.0 /* tokenload tokenQueueThresholdDefault */
#define APPROX_BLOCK_TOKENS 64           /* approx producer: smaller blocks are clamped to 64 */
#define MAX_PREFIX_TOKENS 131072         /* approx producer maxPrefixTokensToMatch default */
#define MAX_ENTRIES (8u << 20)           /* memory cap of the whole index, entries */

typedef struct req_state {
    uint32_t replica;
    uint32_t uncached;
    bool pending; /* counted in inflight until its first byte or its end */
} req_state;

typedef struct state {
    uint32_t n;
    double peak_tps;
    uint32_t capacity_blocks;
    sb_prefix_index *index;
    uint64_t *inflight;
    uint32_t *match, *ties;
    uint64_t *hashes;
    size_t hashes_cap;
    req_state *reqs;
    size_t reqs_cap;
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_prefix_index_free(s->index);
    sb_free(s->inflight);
    sb_free(s->match);
    sb_free(s->ties);
    sb_free(s->hashes);
    sb_free(s->reqs);
    sb_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    const sb_engine_params *p = env->engine;
    s->n = env->n_replicas;
    /* llm-d's calibration recipe: peakPrefillThroughput = CHUNK_SIZE / median TTFT of one
     * unloaded chunk; the simulated engine computes that chunk in one step. */
    double chunk = (double)p->max_num_batched_tokens;
    s->peak_tps = chunk / ((p->step_overhead_ns + chunk * p->prefill_token_ns) * 1e-9);
    /* autoTune: the per-server LRU holds what the engine's cache holds. */
    uint64_t cap = (uint64_t)p->num_gpu_blocks * p->block_size / APPROX_BLOCK_TOKENS;
    s->capacity_blocks = cap > MAX_ENTRIES ? MAX_ENTRIES : (uint32_t)(cap ? cap : 1);
    s->index = sb_prefix_index_new(s->n, MAX_ENTRIES, s->capacity_blocks, env->hash_secret);
    s->inflight = sb_calloc(s->n ? s->n : 1, sizeof(uint64_t));
    s->match = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    s->ties = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    if (!s->index || !s->inflight || !s->match || !s->ties) {
        destroy(s);
        return NULL;
    }
    return s;
}

/* The prompt's 64-token block hashes (at most MAX_PREFIX_TOKENS' worth) into s->hashes. */
static size_t block_hashes(state *s, const sb_replay_request_view *r)
{
    uint32_t tokens = r->n_tokens < MAX_PREFIX_TOKENS ? r->n_tokens : MAX_PREFIX_TOKENS;
    size_t nb = tokens / APPROX_BLOCK_TOKENS;
    if (nb > s->hashes_cap) {
        uint64_t *h = sb_realloc(s->hashes, nb * sizeof(uint64_t));
        if (!h)
            return 0; /* no memory: the request is scored as if nothing matched */
        s->hashes = h;
        s->hashes_cap = nb;
    }
    /* Seeded as the router's first block is (model and adapter): a block is the same key for
     * every request that shares the prompt up to there, and only for those. */
    uint64_t h = r->sched->n_blocks ? r->sched->block_hashes[0] : 0x6c6c6d2d64ULL;
    for (size_t i = 0; i < nb; i++)
        s->hashes[i] = h =
            XXH3_64bits_withSeed(r->tokens + i * APPROX_BLOCK_TOKENS, APPROX_BLOCK_TOKENS * sizeof(uint32_t), h);
    return nb;
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    size_t nb = block_hashes(s, r);
    if (nb)
        sb_prefix_index_match(s->index, s->hashes, nb, s->match);
    else
        for (uint32_t i = 0; i < s->n; i++)
            s->match[i] = 0;
    /* The filter: sticky endpoints, unless none, or the best of them is saturated. */
    double best_sticky = -1, best_other = -1;
    uint32_t n_sticky = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        double ttft = (double)s->inflight[i] / s->peak_tps * 1e9;
        if (nb && (double)s->match[i] / (double)nb >= AFFINITY_THRESHOLD) {
            n_sticky++;
            best_sticky = best_sticky < 0 || ttft < best_sticky ? ttft : best_sticky;
        } else {
            best_other = best_other < 0 || ttft < best_other ? ttft : best_other;
        }
    }
    bool stick = n_sticky > 0 && !(best_other >= 0 && best_sticky - best_other > MAX_TTFT_PENALTY_NS);
    /* The token-load scorer over what the filter kept, max-score with random ties. */
    double best = -1;
    uint32_t nt = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (stick && !((double)s->match[i] / (double)nb >= AFFINITY_THRESHOLD))
            continue;
        uint64_t cached = (uint64_t)s->match[i] * APPROX_BLOCK_TOKENS;
        double tokens = (double)s->inflight[i] + (double)(r->n_tokens > cached ? r->n_tokens - cached : 0);
        double score =
            1.0 - (tokens < QUEUE_THRESHOLD_TOKENS ? tokens : QUEUE_THRESHOLD_TOKENS) / QUEUE_THRESHOLD_TOKENS;
        if (score > best) {
            best = score;
            nt = 0;
        }
        if (score == best)
            s->ties[nt++] = i;
    }
    return (int)s->ties[nt == 1 ? 0 : sb_rand_next(f->rng) % nt];
}

static req_state *req_of(state *s, uint64_t id, bool grow)
{
    if (id >= s->reqs_cap) {
        if (!grow)
            return NULL;
        size_t cap = s->reqs_cap ? s->reqs_cap : 1024;
        while (cap <= id)
            cap *= 2;
        req_state *nr = sb_realloc(s->reqs, cap * sizeof(req_state));
        if (!nr)
            return NULL;
        for (size_t i = s->reqs_cap; i < cap; i++)
            nr[i] = (req_state){0};
        s->reqs = nr;
        s->reqs_cap = cap;
    }
    return &s->reqs[id];
}

static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    state *s = st;
    (void)f;
    /* Matched again rather than trusted from pick: the uncached part is what this endpoint
     * lacks of this very prompt, whoever called pick last. */
    size_t nb = block_hashes(s, r);
    if (nb)
        sb_prefix_index_match(s->index, s->hashes, nb, s->match);
    else
        for (uint32_t i = 0; i < s->n; i++)
            s->match[i] = 0;
    uint64_t cached = (uint64_t)s->match[replica] * APPROX_BLOCK_TOKENS;
    uint32_t uncached = r->n_tokens > cached ? (uint32_t)(r->n_tokens - cached) : 0;
    req_state *q = req_of(s, r->id, true);
    if (q) {
        *q = (req_state){.replica = replica, .uncached = uncached, .pending = true};
        s->inflight[replica] += uncached;
    }
    if (nb)
        sb_prefix_index_insert(s->index, replica, s->hashes, nb);
}

static void release(state *s, uint64_t id)
{
    req_state *q = req_of(s, id, false);
    if (q && q->pending) {
        s->inflight[q->replica] -= q->uncached;
        q->pending = false;
    }
}

static void on_first_token(void *st, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica)
{
    (void)f;
    (void)replica;
    release(st, id);
}

static void on_finish(void *st, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica, bool ok)
{
    (void)f;
    (void)replica;
    (void)ok;
    release(st, id);
}

static const sb_replay_custom_ops ops = {.create = create,
                                         .destroy = destroy,
                                         .pick = pick,
                                         .on_dispatch = on_dispatch,
                                         .on_finish = on_finish,
                                         .on_first_token = on_first_token};

const sb_replay_policy_def sb_policy_llm_d_sticky = {
    .name = "llm-d-sticky",
    .summary = "llm-d router default since 2026-08, sticky until saturated: prefix-cache-affinity filter 0.8 "
               "(released past 18 s of in-flight prefill at the calibrated peak rate) + token-load scorer, "
               "max-score (llm-d-router prefixcacheaffinity, tokenload; llm-d.ai blog 2026-08-17)",
    .custom = &ops,
};
