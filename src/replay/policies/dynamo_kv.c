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
#include "replay/policies/kv_policy.h"

#define OVERLAP_SCORE_WEIGHT 1.0 /* KvRouterConfig default */

typedef struct state {
    sb_kv_policy kv; /* first: its hooks are this policy's */
    uint32_t block_size;
} state;

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_kv_policy_new(sizeof(*s), env, env->event_lag_ns);
    if (s)
        s->block_size = env->engine->block_size;
    return s;
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    uint32_t partial = r->n_tokens % s->block_size ? 1 : 0;
    const sb_kv_shadow *cache = sb_kv_view_cache(s->kv.view, f->now), *active = sb_kv_view_active(s->kv.view);
    sb_kv_policy_pick_begin(&s->kv);
    for (uint32_t i = 0; i < s->kv.n; i++) {
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
        sb_kv_policy_offer(&s->kv, i, logit, sb_kv_shadow_cached_total(cache, i));
    }
    return (int)sb_kv_policy_pick_end(&s->kv, f->rng);
}

static const sb_replay_custom_ops ops = SB_KV_POLICY_OPS(create, pick);

const sb_replay_policy_def sb_policy_dynamo_kv = {
    .name = "dynamo-kv",
    .summary = "NVIDIA Dynamo KV router: min of 1.0 x prefill blocks + decode blocks, temperature 0, cache from KV "
               "events (shadow of the engines, --event-lag-ms late) (dynamo lib/llm/src/kv_router/scheduler.rs, "
               "kv_router.rs)",
    .custom = &ops,
};
