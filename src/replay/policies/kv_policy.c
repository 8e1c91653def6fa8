/* kv_policy: see kv_policy.h. */
#include "replay/policies/kv_policy.h"

#include "base/alloc.h"
#include "core/sched.h"

void *sb_kv_policy_new(size_t state_size, const sb_replay_policy_env *env, sb_ns lag_ns)
{
    sb_kv_policy *b = sb_calloc(1, state_size < sizeof(*b) ? sizeof(*b) : state_size);
    if (!b)
        return NULL;
    b->n = env->n_replicas;
    b->view = sb_kv_view_new(b->n, env->engine, lag_ns);
    b->ties = sb_calloc(b->n ? b->n : 1, sizeof(uint32_t));
    if (!b->view || !b->ties) {
        sb_kv_policy_free(b);
        return NULL;
    }
    return b;
}

void sb_kv_policy_free(void *state)
{
    sb_kv_policy *b = state;
    if (!b)
        return;
    sb_kv_view_free(b->view);
    sb_free(b->ties);
    sb_free(b);
}

void sb_kv_policy_on_dispatch(void *state, const sb_replay_fleet_view *f, const sb_replay_request_view *r,
                              uint32_t replica)
{
    sb_kv_view_record(((sb_kv_policy *)state)->view, f->now, replica, r);
}

void sb_kv_policy_on_finish(void *state, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica, bool ok)
{
    (void)replica;
    (void)ok;
    sb_kv_view_finish(((sb_kv_policy *)state)->view, f->now, id);
}

void sb_kv_policy_pick_begin(sb_kv_policy *b)
{
    b->n_ties = 0;
}

void sb_kv_policy_offer(sb_kv_policy *b, uint32_t replica, double cost, uint32_t tiebreak)
{
    if (b->n_ties == 0 || cost < b->best_cost || (cost == b->best_cost && tiebreak < b->best_tiebreak)) {
        b->best_cost = cost;
        b->best_tiebreak = tiebreak;
        b->n_ties = 0;
    }
    if (cost == b->best_cost && tiebreak == b->best_tiebreak && b->n_ties < b->n)
        b->ties[b->n_ties++] = replica;
}

uint32_t sb_kv_policy_pick_end(sb_kv_policy *b, uint64_t *rng)
{
    return b->ties[b->n_ties == 1 ? 0 : sb_rand_next(rng) % b->n_ties];
}
