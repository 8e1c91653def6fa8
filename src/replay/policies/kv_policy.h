/* kv_policy: the part shared by the reference policies that read the engines' caches through
 * kv_shadow.h (dynamo-kv, llm-d-precise, min-predicted-ttft): the replica count, the
 * sb_kv_view of the caches and of the policy's own requests in flight, the hooks that keep
 * that view current, and the pick's rule for ties. Not for the policies that keep their own
 * approximate index (aibrix-prefix, production-stack-prefix...): they see no engine state.
 *
 * A policy's state starts with an sb_kv_policy (its first member), made by sb_kv_policy_new,
 * so that the shared hooks take the policy's state as theirs and stand in its
 * sb_replay_custom_ops directly (SB_KV_POLICY_OPS when they are all it needs).
 *
 * The pick: sb_kv_policy_pick_begin, sb_kv_policy_offer for every candidate, then
 * sb_kv_policy_pick_end. The lowest cost wins, then the lowest tie-break, then a draw among
 * those still equal; no random number is drawn when one is left (a replay's figures depend
 * on how many the policy draws). Pure, single owner. */
#ifndef SB_REPLAY_POLICIES_KV_POLICY_H
#define SB_REPLAY_POLICIES_KV_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "replay/policies/kv_shadow.h"
#include "replay/policy.h"

/* Caller-embedded. Public, read-only: n, view. Private: the rest. */
typedef struct sb_kv_policy {
    uint32_t n;       /* replicas */
    sb_kv_view *view; /* the caches as heard lag_ns late; the policy's own requests at once */
    uint32_t *ties;   /* n entries: the candidates equal best so far */
    uint32_t n_ties;
    double best_cost;
    uint32_t best_tiebreak;
} sb_kv_policy;

/* A policy's state of state_size bytes (at least sizeof(sb_kv_policy), which it starts with),
 * zeroed but for its sb_kv_policy: set up for env's replicas, the caches seen lag_ns late (0:
 * at once). NULL on ENOMEM (nothing left allocated). */
void *sb_kv_policy_new(size_t state_size, const sb_replay_policy_env *env, sb_ns lag_ns);
/* Frees the state and what sb_kv_policy_new made; NULL is ignored. A policy that owns more
 * frees that first. */
void sb_kv_policy_free(void *state);

/* The on_dispatch and on_finish hooks of a policy whose state starts with an sb_kv_policy:
 * record the request in the view, and its end (sb_kv_view_record, sb_kv_view_finish). */
void sb_kv_policy_on_dispatch(void *state, const sb_replay_fleet_view *f, const sb_replay_request_view *r,
                              uint32_t replica);
void sb_kv_policy_on_finish(void *state, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica, bool ok);

/* A pick among candidates (see above). pick_end takes at least one offer since pick_begin
 * and returns the chosen replica, drawing from rng (sb_rand_next) only if several tie. */
void sb_kv_policy_pick_begin(sb_kv_policy *b);
void sb_kv_policy_offer(sb_kv_policy *b, uint32_t replica, double cost, uint32_t tiebreak);
uint32_t sb_kv_policy_pick_end(sb_kv_policy *b, uint64_t *rng);

/* The sb_replay_custom_ops of a policy whose state owns nothing beyond its sb_kv_policy. */
#define SB_KV_POLICY_OPS(create_fn, pick_fn)                                                                           \
    {                                                                                                                  \
        .create = (create_fn), .destroy = sb_kv_policy_free, .pick = (pick_fn),                                        \
        .on_dispatch = sb_kv_policy_on_dispatch, .on_finish = sb_kv_policy_on_finish                                   \
    }

#endif
