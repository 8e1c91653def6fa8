/* Tests core/decide (the routing decision as one call): the pick is sb_router_pick's with the
 * same random draws and the same explanation, under every built-in profile and random pickers;
 * fallbacks are ranked by total, ties in pool order after the pick, never a filtered-out or
 * excluded endpoint, bounded; no endpoint and no pool; the addresses for Envoy's header. */
#include "sb_test.h"

#include "core/decide.h"
#include "core/router.h"

#define T0 SB_MS(10000)

static sb_router *router_of(const sb_profile *prof, size_t n, uint64_t seed)
{
    sb_router *r = sb_router_new(seed, 0x5ec7e7);
    assert_non_null(r);
    assert_int_equal(sb_router_add_pool(r, "llama", prof, n, NULL), 0);
    return r;
}

static void report(sb_router *r, uint32_t ep, double waiting, double kv, sb_ns at)
{
    sb_endpoint_report rep = {.have_waiting = true, .waiting = waiting, .have_kv = true, .kv_usage = kv,
                              .requests_total = -1};
    sb_endpoint_report_set(sb_router_endpoint(r, 0, ep), &rep, SB_REPORT_SCRAPE, at);
}

/* Two routers fed alike, one picked through sb_router_pick and one through sb_decide with
 * fallbacks: every pick, every candidate's total and every later random draw agree. */
static void same_picks(const sb_profile *prof)
{
    enum { E = 6, N = 300 };
    sb_router *a = router_of(prof, E, 99), *b = router_of(prof, E, 99);
    uint64_t rng = 12345, h[4];
    for (int i = 0; i < N; i++) {
        sb_ns now = T0 + (sb_ns)i * SB_MS(1);
        if (i % 25 == 0)
            for (uint32_t e = 0; e < E; e++) {
                double w = (double)(sb_rand_next(&rng) % 8), kv = (double)(sb_rand_next(&rng) % 100) / 100;
                report(a, e, w, kv, now);
                report(b, e, w, kv, now);
            }
        for (int k = 0; k < 4; k++)
            h[k] = 0x9e3779b97f4a7c15ULL * (uint64_t)(i % 7 + 1) + (uint64_t)k;
        sb_request_desc rq = {.sched = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 4,
                                        .prompt_tokens = 64, .session_key = (uint64_t)(i % 5) + 1,
                                        .prefix_key = (uint64_t)(i % 3) + 1}};
        int pa = sb_router_pick(a, &rq.sched, now);
        sb_ranking rk;
        int pb = sb_decide(b, &rq, SB_DECIDE_MAX_RANKED, now, &rk);
        assert_int_equal(pa, pb);
        const sb_decision *da = sb_router_last_decision(a, 0);
        assert_ptr_equal(rk.why, sb_router_last_decision(b, 0));
        for (size_t c = 0; c < E; c++)
            assert_true(da->cands[c].total == rk.why->cands[c].total);
        if (pa >= 0) {
            assert_int_equal(rk.ep[0], (uint32_t)pa);
            sb_router_dispatched(a, 0, (uint32_t)pa, 64, now);
            sb_router_dispatched(b, 0, (uint32_t)pb, 64, now);
        }
    }
    sb_router_free(a);
    sb_router_free(b);
}

static void test_pick_is_the_routers(void **state)
{
    (void)state;
    for (const char *const *n = sb_profile_builtin_names(); *n; n++)
        same_picks(sb_profile_builtin(*n));
    /* Random pickers draw from the router's generator: fallbacks must not draw. */
    const char *pickers[] = {"weighted-random", "softmax", "p2c"};
    for (size_t i = 0; i < 3; i++) {
        sb_profile p = *sb_profile_builtin("default");
        p.picker = sb_picker_find(pickers[i]);
        assert_non_null(p.picker);
        same_picks(&p);
    }
}

/* least-request: totals fall with in-flight requests, so the ranking is their order. */
static void test_fallbacks_ranked_by_total(void **state)
{
    (void)state;
    sb_router *r = router_of(sb_profile_builtin("least-request"), 5, 1);
    const int load[5] = {3, 0, 4, 1, 2};
    for (uint32_t e = 0; e < 5; e++)
        for (int k = 0; k < load[e]; k++)
            sb_router_dispatched(r, 0, e, 10, T0);
    sb_request_desc rq = {.sched = {.pool = 0, .adapter = -1}};
    sb_ranking rk;
    assert_int_equal(sb_decide(r, &rq, 5, T0, &rk), 1);
    assert_int_equal(rk.n, 5);
    const uint32_t want[5] = {1, 3, 4, 0, 2};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(rk.ep[i], want[i]);
        if (i)
            assert_true(rk.total[i] <= rk.total[i - 1]);
    }
    /* Bounded: as many as asked for, the best first; 0 and too many are clamped. */
    assert_int_equal(sb_decide(r, &rq, 2, T0, &rk), 1);
    assert_int_equal(rk.n, 2);
    assert_int_equal(rk.ep[1], 3);
    assert_int_equal(sb_decide(r, &rq, 0, T0, &rk), 1);
    assert_int_equal(rk.n, 1);
    assert_int_equal(sb_decide(r, &rq, 1000, T0, &rk), 1);
    assert_int_equal(rk.n, 5);
    /* Excluded and unavailable endpoints are never fallbacks. */
    uint32_t ex[1] = {3};
    rq.sched.exclude = ex;
    rq.sched.n_exclude = 1;
    sb_router_endpoint(r, 0, 4)->draining = true;
    assert_int_equal(sb_decide(r, &rq, 5, T0, &rk), 1);
    assert_int_equal(rk.n, 3);
    assert_int_equal(rk.ep[1], 0);
    assert_int_equal(rk.ep[2], 2);
    sb_router_free(r);
}

/* A pool of more endpoints than the bound keeps the best of them. */
static void test_bound_keeps_the_best(void **state)
{
    (void)state;
    enum { E = 20 };
    sb_router *r = router_of(sb_profile_builtin("least-request"), E, 1);
    /* Endpoint e carries (E - e) in flight: the best are the highest indexes. */
    for (uint32_t e = 0; e < E; e++)
        for (uint32_t k = 0; k < E - e; k++)
            sb_router_dispatched(r, 0, e, 10, T0);
    sb_request_desc rq = {.sched = {.pool = 0, .adapter = -1}};
    sb_ranking rk;
    assert_int_equal(sb_decide(r, &rq, SB_DECIDE_MAX_RANKED, T0, &rk), E - 1);
    assert_int_equal(rk.n, SB_DECIDE_MAX_RANKED);
    for (size_t i = 0; i < rk.n; i++)
        assert_int_equal(rk.ep[i], E - 1 - i);
    sb_router_free(r);
}

/* Round robin scores nothing: every total ties, and fallbacks follow the pool after the pick,
 * wrapping, which is how round robin would go on. */
static void test_ties_follow_pool_order_after_pick(void **state)
{
    (void)state;
    sb_router *r = router_of(sb_profile_builtin("round-robin"), 4, 1);
    sb_request_desc rq = {.sched = {.pool = 0, .adapter = -1}};
    sb_ranking rk;
    for (int i = 0; i < 5; i++) {
        int p = sb_decide(r, &rq, 4, T0, &rk);
        assert_true(p >= 0);
        assert_int_equal(rk.n, 4);
        for (size_t k = 0; k < 4; k++)
            assert_int_equal(rk.ep[k], ((uint32_t)p + k) % 4);
    }
    sb_router_free(r);
}

static void test_no_endpoint_and_no_pool(void **state)
{
    (void)state;
    sb_router *r = router_of(sb_profile_builtin("default"), 2, 1);
    sb_router_endpoint(r, 0, 0)->draining = sb_router_endpoint(r, 0, 1)->draining = true;
    sb_request_desc rq = {.sched = {.pool = 0, .adapter = -1}};
    sb_ranking rk;
    assert_int_equal(sb_decide(r, &rq, 4, T0, &rk), -1);
    assert_int_equal(rk.n, 0);
    assert_non_null(rk.why);
    assert_int_equal(rk.why->picked, -1);
    assert_non_null(rk.why->reason);
    rq.sched.pool = 3;
    assert_int_equal(sb_decide(r, &rq, 4, T0, &rk), -1);
    assert_int_equal(rk.n, 0);
    assert_null(rk.why);
    sb_router_free(r);
}

static void test_render_endpoints(void **state)
{
    (void)state;
    sb_router *r = router_of(sb_profile_builtin("round-robin"), 3, 1);
    sb_router_endpoint(r, 0, 0)->address = "10.0.0.1:8000";
    sb_router_endpoint(r, 0, 2)->address = "10.0.0.3:8000";
    sb_ranking rk = {.ep = {2, 1, 0}, .n = 3};
    sb_buf b = {0};
    assert_int_equal(sb_decide_render_endpoints(r, 0, &rk, &b), 0);
    assert_int_equal(b.len, strlen("10.0.0.3:8000,10.0.0.1:8000"));
    assert_memory_equal(b.data, "10.0.0.3:8000,10.0.0.1:8000", b.len);
    sb_buf_free(&b);
    sb_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_is_the_routers),
        cmocka_unit_test(test_fallbacks_ranked_by_total),
        cmocka_unit_test(test_bound_keeps_the_best),
        cmocka_unit_test(test_ties_follow_pool_order_after_pick),
        cmocka_unit_test(test_no_endpoint_and_no_pool),
        cmocka_unit_test(test_render_endpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
