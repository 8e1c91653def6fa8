/* dynamo-kv: NVIDIA Dynamo's KV router, default cost with KV events (ai-dynamo/dynamo
 * lib/llm/src/kv_router/scheduler.rs, DefaultWorkerSelector::select_worker; later moved to
 * lib/kv-router/src/scheduling/selector.rs; active sequences in sequence.rs; defaults in
 * kv_router.rs KvRouterConfig: overlap_score_weight 1.0, router_temperature 0.0, use_kv_events
 * true).
 *
 * The rule, for each worker w:
 *   overlap(w)        = leading blocks of the request cached on w (from the engines' KV events:
 *                       exact);
 *   prefill_tokens(w) = the prompt tokens w still has to prefill for its active requests
 *                       + this request's isl - overlap(w) x block_size;
 *   decode_blocks(w)  = blocks of w's active requests + the blocks this request would add;
 *   logit(w)          = overlap_weight x prefill_tokens(w) / block_size + decode_blocks(w);
 * temperature 0: the lowest logit wins; ties go to the smaller cache tree, then at random.
 *
 * Here: the engines' exact cache state is what KV events would give; sim/engine.h has no
 * read-only look-up of cached hashes, so it comes from kv_shadow.h, a replay of each engine's
 * prefix cache from the requests sent to it (its departures from the engine are listed there
 * and in docs/replay.md). Blocks are the engines' own (16 tokens, their chained hashes). Active
 * requests are this policy's dispatches not yet answered; those still in prefill are the
 * newest whose prompts add up to the router's first-byte-pending count (Dynamo marks prefill
 * complete when the first token comes back), each counted with the tokens it had to compute.
 *
 * The cache side (overlap, tree size) is heard through KV events, so it lags: kv_shadow.h's
 * sb_kv_view shows the caches as they were --event-lag-ms ago (default one engine step,
 * replay/driver.h); the active side (Dynamo's ActiveSequences) is the router's own and exact. */
#include "base/alloc.h"
#include "replay/policies/kv_shadow.h"
#include "replay/policy.h"

#define OVERLAP_SCORE_WEIGHT 1.0 /* KvRouterConfig default */

typedef struct state {
    uint32_t n, block_size;
    sb_kv_view *view;
    uint32_t *ties;
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_kv_view_free(s->view);
    sb_free(s->ties);
    sb_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = env->n_replicas;
    s->block_size = env->engine->block_size;
    s->view = sb_kv_view_new(s->n, env->engine, env->event_lag_ns);
    s->ties = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    if (!s->view || !s->ties) {
        destroy(s);
        return NULL;
    }
    return s;
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    double best = 0;
    uint32_t best_tree = 0, nt = 0;
    uint32_t partial = r->n_tokens % s->block_size ? 1 : 0;
    const sb_kv_shadow *cache = sb_kv_view_cache(s->view, f->now), *active = sb_kv_view_active(s->view);
    for (uint32_t i = 0; i < s->n; i++) {
        const sb_endpoint *ep = sb_router_endpoint(f->router, f->pool, i);
        uint32_t overlap = sb_kv_shadow_cached_blocks(cache, i, r->engine_hashes, r->n_engine_hashes);
        uint64_t cached = (uint64_t)overlap * s->block_size;
        uint64_t own = r->n_tokens > cached ? r->n_tokens - cached : 0;
        uint64_t queued = sb_kv_shadow_pending_uncached(active, i, ep->pending_prefill_tokens, NULL);
        double prefill_blocks = (double)(queued + own) / s->block_size;
        double decode_blocks = (double)sb_kv_shadow_active_blocks(active, i) +
                               sb_kv_shadow_new_active_blocks(active, i, r->engine_hashes, r->n_engine_hashes) +
                               partial;
        double logit = OVERLAP_SCORE_WEIGHT * prefill_blocks + decode_blocks;
        uint32_t tree = sb_kv_shadow_cached_total(cache, i);
        if (nt == 0 || logit < best || (logit == best && tree < best_tree)) {
            best = logit;
            best_tree = tree;
            nt = 0;
        }
        if (logit == best && tree == best_tree)
            s->ties[nt++] = i;
    }
    return (int)s->ties[nt == 1 ? 0 : sb_rand_next(f->rng) % nt];
}

static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    sb_kv_view_record(((state *)st)->view, f->now, replica, r);
}

static void on_finish(void *st, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica, bool ok)
{
    (void)replica;
    (void)ok;
    sb_kv_view_finish(((state *)st)->view, f->now, id);
}

static const sb_replay_custom_ops ops = {
    .create = create, .destroy = destroy, .pick = pick, .on_dispatch = on_dispatch, .on_finish = on_finish};

const sb_replay_policy_def sb_policy_dynamo_kv = {
    .name = "dynamo-kv",
    .summary = "NVIDIA Dynamo KV router: min of 1.0 x prefill blocks + decode blocks, temperature 0, cache from KV "
               "events (shadow of the engines, --event-lag-ms late) (dynamo lib/llm/src/kv_router/scheduler.rs, "
               "kv_router.rs)",
    .custom = &ops,
};
