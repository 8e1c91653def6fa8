/* Tests replay/policies/kv_policy: the pick rule dynamo-kv, llm-d-precise and
 * min-predicted-ttft share (lowest cost, then lowest tie-break, then a draw, and no draw when
 * one is left: a replay's figures depend on how many random numbers a policy takes), and the
 * shared hooks reaching the view through a policy's own state. */
#include "sb_test.h"

#include "core/sched.h"
#include "replay/policies/kv_policy.h"

typedef struct policy_state {
    sb_kv_policy kv; /* first, as the policies have it */
    int other;
} policy_state;

/* A policy's state made the way the policies make theirs. */
static policy_state *make(uint32_t n, sb_ns lag)
{
    sb_engine_params p = sb_engine_params_default();
    sb_replay_policy_env env = {.n_replicas = n, .engine = &p, .event_lag_ns = lag};
    policy_state *s = sb_kv_policy_new(sizeof(*s), &env, lag);
    assert_non_null(s);
    assert_int_equal(s->kv.n, n);
    assert_int_equal(s->other, 0); /* the policy's own part comes zeroed */
    return s;
}

static void test_lowest_cost_then_tiebreak(void **state)
{
    (void)state;
    policy_state *s = make(4, 0);
    sb_kv_policy *b = &s->kv;
    uint64_t rng = 42, before = rng;
    sb_kv_policy_pick_begin(b);
    sb_kv_policy_offer(b, 0, 5.0, 0);
    sb_kv_policy_offer(b, 1, 2.0, 9);
    sb_kv_policy_offer(b, 2, 2.0, 3); /* same cost, lower tie-break */
    sb_kv_policy_offer(b, 3, 7.0, 0);
    assert_int_equal(sb_kv_policy_pick_end(b, &rng), 2);
    assert_int_equal(rng, before); /* one left: nothing drawn */

    /* A fresh pick forgets the last: the first offer stands whatever its cost. */
    sb_kv_policy_pick_begin(b);
    sb_kv_policy_offer(b, 3, 1e9, 100);
    assert_int_equal(sb_kv_policy_pick_end(b, &rng), 3);
    assert_int_equal(rng, before);
    sb_kv_policy_free(s);
    sb_kv_policy_free(NULL);
}

static void test_ties_are_drawn_once(void **state)
{
    (void)state;
    policy_state *s = make(4, 0);
    sb_kv_policy *b = &s->kv;
    uint64_t rng = 42, want_rng = 42;
    uint64_t draw = sb_rand_next(&want_rng);
    sb_kv_policy_pick_begin(b);
    sb_kv_policy_offer(b, 0, 3.0, 1);
    sb_kv_policy_offer(b, 1, 1.0, 1);
    sb_kv_policy_offer(b, 2, 3.0, 0);
    sb_kv_policy_offer(b, 3, 1.0, 1);
    uint32_t tied[] = {1, 3};
    assert_int_equal(sb_kv_policy_pick_end(b, &rng), tied[draw % 2]);
    assert_int_equal(rng, want_rng); /* exactly one number drawn */
    sb_kv_policy_free(s);
}

/* The hooks take the policy's state, whose first member is the sb_kv_policy: a dispatch shows
 * in the view's active requests and, with a lag, in its caches only once the lag has passed. */
static void test_hooks_feed_the_view(void **state_)
{
    (void)state_;
    const sb_ns lag = 5 * 1000000ULL, t0 = SB_NS_PER_S;
    policy_state *s = make(2, lag);
    s->other = 7;
    uint32_t tokens[3 * 16] = {0};
    uint64_t hashes[3] = {11, 22, 33};
    sb_replay_request_view r = {
        .id = 9, .tokens = tokens, .n_tokens = 3 * 16, .engine_hashes = hashes, .n_engine_hashes = 3, .max_tokens = 10};
    sb_replay_fleet_view f = {.now = t0, .n_replicas = 2};
    sb_kv_policy_on_dispatch(s, &f, &r, 1);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_active(s->kv.view), 1), 3);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_active(s->kv.view), 0), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(s->kv.view, t0), 1, hashes, 3), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(s->kv.view, t0 + lag), 1, hashes, 3), 3);
    f.now = t0 + 2 * lag;
    sb_kv_policy_on_finish(s, &f, 9, 1, true);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_active(s->kv.view), 1), 0);
    assert_int_equal(s->other, 7);
    sb_kv_policy_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lowest_cost_then_tiebreak),
        cmocka_unit_test(test_ties_are_drawn_once),
        cmocka_unit_test(test_hooks_feed_the_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
