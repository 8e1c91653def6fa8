/* Tests core/control (the adaptive loop's glue to the router, shared by the gateway's timer and
 * replay's tick): a pool routes by the configurator's snapshots only when it is adaptive and
 * its base has weight to move; a tick's publication reaches the router under the same rule;
 * the tick reads the pool's own endpoints. */
#include "sb_test.h"

#include "adaptive_test.h"

#include "core/control.h"
#include "core/router.h"

#define T0 SB_MS(10000)
#define TICK SB_MS(100)


static sb_router *router_of(const sb_profile *prof)
{
    sb_router *r = sb_router_new(3, 0x5ec7e7);
    assert_non_null(r);
    assert_int_equal(sb_router_add_pool(r, "llama", prof, 4, NULL), 0);
    return r;
}

/* Endpoint 0 carries a queue of q0, the others 1: a skew the imbalance detector sees. */
static void skew(sb_router *r, double q0, sb_ns at)
{
    for (uint32_t e = 0; e < 4; e++) {
        sb_endpoint_report rep = {.have_waiting = true, .waiting = e ? 1 : q0, .have_running = true,
                                  .have_kv = true, .requests_total = -1};
        sb_endpoint_report_set(sb_router_endpoint(r, 0, e), &rep, SB_REPORT_SCRAPE, at);
    }
}

/* n ticks from t0, alternating skews (each moves the weights); after each, the pool's profile
 * must be `expect` (NULL: the configurator's current snapshot). Returns how many published. */
static unsigned tick_skews(sb_router *r, sb_adaptive *a, const sb_profile *base, bool adaptive, int n, sb_ns t0,
                           const sb_profile *expect)
{
    unsigned published = 0;
    for (int i = 0; i < n; i++) {
        sb_ns t = t0 + (sb_ns)i * TICK;
        skew(r, i % 2 ? 40 : 1, t);
        published += (sb_control_tick(r, 0, a, base, adaptive, t) & SB_ADAPTIVE_PUBLISHED) != 0;
        assert_ptr_equal(sb_router_pool_profile(r, 0), expect ? expect : sb_adaptive_profile(a));
    }
    return published;
}

static void test_movable_adaptive_pool_routes_by_snapshots(void **state)
{
    (void)state;
    const sb_profile *base = sb_profile_builtin("default");
    assert_true(sb_adaptive_movable(base));
    sb_router *r = router_of(base);
    sb_adaptive_params p = sb_test_adaptive_unsmoothed();
    sb_adaptive *a = sb_adaptive_new(&p, base);
    assert_true(sb_control_publish(r, 0, a, base, true));
    assert_ptr_equal(sb_router_pool_profile(r, 0), sb_adaptive_profile(a));
    /* Alternating skews publish new weights; each reaches the router. */
    assert_true(tick_skews(r, a, base, true, 6, T0, NULL) > 0);
    assert_true(sb_adaptive_generation(a) > 1);
    sb_adaptive_free(a);
    sb_router_free(r);
}

/* A pool not configured adaptive keeps its base: the detectors tick (metrics), nothing else. */
static void test_static_pool_keeps_its_base(void **state)
{
    (void)state;
    const sb_profile *base = sb_profile_builtin("default");
    sb_router *r = router_of(base);
    sb_adaptive_params p = sb_test_adaptive_unsmoothed();
    sb_adaptive *a = sb_adaptive_new(&p, base);
    assert_false(sb_control_publish(r, 0, a, base, false));
    assert_true(tick_skews(r, a, base, false, 6, T0, base) > 0);
    sb_adaptive_free(a);
    sb_router_free(r);
}

/* A base with one category only (least request: distribution alone) has nothing to move: the
 * pool routes by the base itself even when adaptive, so its decisions carry the base's name.
 * (Replay used to route such a pool by the configurator's copies of the same weights, named
 * "<base>~adaptive.N"; the gateway never did.) */
static void test_unmovable_base_routes_as_it_is(void **state)
{
    (void)state;
    const sb_profile *base = sb_profile_builtin("least-request");
    assert_false(sb_adaptive_movable(base));
    assert_false(sb_adaptive_movable(NULL));
    sb_router *r = router_of(base);
    sb_adaptive_params p = sb_test_adaptive_unsmoothed();
    sb_adaptive *a = sb_adaptive_new(&p, base);
    assert_false(sb_control_publish(r, 0, a, base, true));
    tick_skews(r, a, base, true, 4, T0, base);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    assert_true(sb_router_pick(r, &rq, T0 + 4 * TICK) >= 0);
    assert_string_equal(sb_router_last_decision(r, 0)->profile->name, "least-request");
    sb_adaptive_free(a);
    sb_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_movable_adaptive_pool_routes_by_snapshots),
        cmocka_unit_test(test_static_pool_keeps_its_base),
        cmocka_unit_test(test_unmovable_base_routes_as_it_is),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
