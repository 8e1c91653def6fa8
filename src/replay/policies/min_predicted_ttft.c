/* min-predicted-ttft (formerly `oracle`): the replica with the smallest predicted time to first
 * token, from every engine's exact cache and queue and the engines' own step-time model
 * (sim/engine.h). A reference point, not a peer: no gateway can see this much. It is not a
 * bound either (hence the rename, issue 13): it minimises each request's TTFT greedily, so
 * under cache pressure it scatters a shared prefix wherever the queue is shortest and evicts
 * what a sticky rule would have kept (gie-default beat it, p90 88 against 414 ms); it does not
 * plan ahead nor weigh what its choice costs the requests already there (their ITL). It reads
 * the caches at once (no event lag): a definition, not a deployment.
 *
 * For replica i and a prompt of n tokens (engine parameters: a = step overhead, b = per prefill
 * token, c = per decode token, e = per KV token read, B = max_num_batched_tokens):
 *   u      = n - cached(i): cached = the leading blocks i holds, at most n - 1 tokens' worth
 *            (the engine always computes one token);
 *   Q      = the uncached prompt tokens of the requests on i still waiting for their first token;
 *   D      = i's decoding sequences: running + waiting - those still in prefill;
 *   ctx    = KV tokens in use on i (blocks used x block size), read by the decode steps;
 *   r      = what is left of the step in flight (a new request never joins it);
 *   steps  = ceil((Q + u) / max(1, B - D))   (prefill shares each step's budget with decode);
 *   TTFT   = r + steps x (a + c x D + e x ctx) + b x (Q + u).
 * Ties (equal to the nanosecond): fewer requests on the engine, then at random.
 *
 * Exact where the engine says so: running, waiting, blocks in use and the step in flight come
 * from sb_engine_metrics_get / sb_engine_current_step. The cached prefix and each queued
 * request's uncached size come from kv_shadow.h (the engine offers no read-only look-up of its
 * hashes; see there for where the shadow departs from it); which requests are still before
 * their first token comes from the router's first-byte accounting (exact at zero network
 * delay), taking the newest ones (engines admit first come first served). Not modelled:
 * admission blocked by max_num_seqs or a full cache, chunked prefill progress already made on
 * the oldest queued request, decode sequences finishing while the request waits. */
#include <math.h>

#include "replay/policies/kv_policy.h"

typedef struct state {
    sb_kv_policy kv; /* first: its hooks are this policy's. No lag: the caches at once */
    sb_engine_params p;
} state;

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_kv_policy_new(sizeof(*s), env, 0);
    if (s)
        s->p = *env->engine;
    return s;
}

/* The predicted TTFT on replica i, in nanoseconds; *load = requests on its engine. */
static double predict(const state *s, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t i,
                      uint32_t *load)
{
    const sb_engine_params *p = &s->p;
    const sb_kv_shadow *shadow = sb_kv_view_active(s->kv.view); /* the caches too, at lag 0 */
    sb_engine_metrics m;
    sb_engine_metrics_get(f->engines[i], &m);
    uint32_t cached_blocks = sb_kv_shadow_cached_blocks(shadow, i, r->engine_hashes, r->n_engine_hashes);
    double u = (double)(r->n_tokens - sb_kv_shadow_cached_tokens(shadow, cached_blocks, r->n_tokens));
    const sb_endpoint *ep = sb_router_endpoint(f->router, f->pool, i);
    uint32_t prefilling = 0;
    double q = (double)sb_kv_shadow_pending_uncached(shadow, i, ep->pending_prefill_tokens, &prefilling);
    uint32_t live = m.num_requests_running + m.num_requests_waiting;
    double d = live > prefilling ? (double)(live - prefilling) : 0.0;
    double ctx = (double)m.num_blocks_used * m.block_size;
    double rest = 0;
    sb_engine_step step;
    if (sb_engine_current_step(f->engines[i], &step) && step.end_ns > f->now)
        rest = (double)(step.end_ns - f->now);
    double budget = (double)p->max_num_batched_tokens - d;
    double steps = ceil((q + u) / (budget < 1 ? 1 : budget));
    *load = live;
    return rest + steps * (p->step_overhead_ns + p->decode_token_ns * d + p->context_token_ns * ctx) +
           p->prefill_token_ns * (q + u);
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    sb_kv_policy_pick_begin(&s->kv);
    for (uint32_t i = 0; i < s->kv.n; i++) {
        uint32_t load;
        double t = predict(s, f, r, i, &load);
        sb_kv_policy_offer(&s->kv, i, t, load);
    }
    return (int)sb_kv_policy_pick_end(&s->kv, f->rng);
}

static const sb_replay_custom_ops ops = SB_KV_POLICY_OPS(create, pick);

const sb_replay_policy_def sb_policy_min_predicted_ttft = {
    .name = "min-predicted-ttft",
    .summary = "greedy min predicted TTFT from exact cache, queue and the engines' step model (a reference, not "
               "a bound; formerly oracle; replay/policies/min_predicted_ttft.c documents the formula)",
    .custom = &ops,
};
