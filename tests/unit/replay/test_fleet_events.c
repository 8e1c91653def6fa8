/* Tests the fleet events of src/replay/driver.c (issue 13): several gateway replicas, traffic
 * that bypasses them, replica restarts; and their report (fleet_report.c). A spy policy sees
 * what each gateway's router sees. Virtual time only: nothing sleeps. */
#include "sb_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "replay/driver.h"
#include "replay/fleet_report.h"
#include "replay/generators.h"
#include "replay/policy.h"
#include "replay/workload.h"

#define MS 1000000ULL
#define EPOCH SB_NS_PER_S

/* ---- a spy: round robin that records what its gateway's router says ---------------------------- */

typedef struct spy {
    uint32_t n;
    uint64_t picks, finished_ok, finished_failed;
    const void *router;  /* the router this state's picks saw: one per gateway */
    bool other_router;   /* a pick saw a different one */
    bool accounting_off; /* the router counted a dispatch it never picked */
} spy;

static spy *spies[8];
static size_t n_spies;

static void *spy_create(const sb_replay_policy_env *env)
{
    spy *s = calloc(1, sizeof(*s));
    s->n = env->n_replicas;
    spies[n_spies++] = s;
    return s;
}

static void spy_destroy(void *st)
{
    (void)st; /* read after the run; freed by the test */
}

static int spy_pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    spy *s = st;
    (void)r;
    if (!s->router)
        s->router = f->router;
    s->other_router |= s->router != f->router;
    uint64_t dispatched = 0;
    for (uint32_t i = 0; i < s->n; i++)
        dispatched += sb_router_endpoint(f->router, f->pool, i)->dispatched;
    s->accounting_off |= dispatched != s->picks;
    return (int)(s->picks++ % s->n);
}

static void spy_finish(void *st, const sb_replay_fleet_view *f, uint64_t id, uint32_t replica, bool ok)
{
    spy *s = st;
    (void)f;
    (void)id;
    (void)replica;
    if (ok)
        s->finished_ok++;
    else
        s->finished_failed++;
}

static const sb_replay_custom_ops spy_ops = {
    .create = spy_create, .destroy = spy_destroy, .pick = spy_pick, .on_finish = spy_finish};

static void spies_free(void)
{
    for (size_t i = 0; i < n_spies; i++)
        free(spies[i]);
    n_spies = 0;
}

static sb_replay_policy spy_policy(void)
{
    sb_replay_policy p = {.name = "spy", .custom = &spy_ops};
    return p;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static sb_replay_opts hand_opts(uint32_t replicas)
{
    sb_replay_opts o;
    sb_replay_opts_default(&o);
    o.replicas = replicas;
    o.engine.step_overhead_ns = 1e6;
    o.engine.prefill_token_ns = 1e4;
    o.engine.decode_token_ns = 0;
    o.engine.context_token_ns = 0;
    o.keep_records = true;
    return o;
}

static void run_ok(const sb_replay_workload *w, const sb_replay_policy *p, const sb_replay_opts *o, sb_replay_result *r)
{
    char err[256] = "";
    int rc = sb_replay_run(w, p, o, r, err, sizeof(err));
    if (rc != 0)
        fail_msg("run failed: %d %s", rc, err);
}

/* n single requests 10 ms apart, each sharing a 160-token head, no session. */
static void independent(sb_replay_workload *w, uint32_t n)
{
    memset(w, 0, sizeof(*w));
    for (uint32_t i = 0; i < n; i++) {
        sb_replay_span s[2] = {{sb_replay_span_id(SB_REPLAY_NS_SHARED, 1), 160},
                               {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, i), 40}};
        sb_replay_request r = {.arrival_ns = (sb_ns)i * 10 * MS, .max_tokens = 4, .followup = SB_REPLAY_NO_REQUEST};
        assert_true(sb_replay_workload_add(w, &r, s, 2) >= 0);
    }
    w->rate = 100;
}

/* ---- gateways ------------------------------------------------------------------------------- */

/* Two gateways: each has its own policy state and router, each sees about half of the
 * requests, and its router counts exactly what it dispatched. */
static void test_two_gateways_split_the_traffic(void **state)
{
    (void)state;
    sb_replay_workload w;
    independent(&w, 400);
    sb_replay_policy p = spy_policy();
    sb_replay_opts o = hand_opts(4);
    o.gateways = 2;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(n_spies, 2);
    assert_ptr_not_equal(spies[0]->router, spies[1]->router);
    assert_int_equal(r.n_gateways, 2);
    assert_int_equal(r.per_gateway[0] + r.per_gateway[1], 400);
    for (int g = 0; g < 2; g++) {
        assert_false(spies[g]->other_router);
        assert_false(spies[g]->accounting_off);
        assert_int_equal(spies[g]->picks, r.per_gateway[g]);
        assert_true(r.per_gateway[g] > 160 && r.per_gateway[g] < 240); /* half, within sampling */
    }
    size_t on_gw1 = 0;
    for (size_t i = 0; i < w.n; i++)
        on_gw1 += r.records[i].gateway == 1;
    assert_int_equal(on_gw1, r.per_gateway[1]);
    assert_true(sb_replay_any_fleet_events(&r, 1));
    sb_replay_result_free(&r);
    spies_free();
    /* One gateway: one state, everything through it, no fleet report. */
    o.gateways = 1;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(n_spies, 1);
    assert_int_equal(r.per_gateway[0], 400);
    assert_false(sb_replay_any_fleet_events(&r, 1));
    sb_replay_result_free(&r);
    spies_free();
    sb_replay_workload_free(&w);
}

/* A conversation keeps its gateway (its client's keep-alive connection). */
static void test_a_session_keeps_its_gateway(void **state)
{
    (void)state;
    const char *kv[] = {"turns=4", "system=64", "user=32", "output=8", "think_ms=100"};
    sb_replay_gen_opts go = {.rate = 20, .requests = 200, .seed = 3};
    sb_replay_workload w;
    char err[200];
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("multi-turn"), kv, 5, &go, &w, err, sizeof(err)), 0);
    sb_replay_policy p;
    assert_int_equal(sb_replay_policy_resolve("default", NULL, 0, &p), 0);
    sb_replay_opts o = hand_opts(4);
    o.gateways = 3;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.completed, 200);
    uint32_t used = 0;
    for (size_t i = 0; i < w.n; i++) {
        used |= 1u << r.records[i].gateway;
        uint32_t next = w.reqs[i].followup;
        if (next != SB_REPLAY_NO_REQUEST)
            assert_int_equal(r.records[next].gateway, r.records[i].gateway);
    }
    assert_int_equal(used, 7u); /* all three gateways got conversations */
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

/* ---- bypass --------------------------------------------------------------------------------- */

/* Bypassed requests never reach a router (picks, router counts), are served by the engines
 * (their hits count) and are reported apart. */
static void test_bypass_skips_the_routers(void **state)
{
    (void)state;
    sb_replay_workload w;
    independent(&w, 400);
    sb_replay_policy p = spy_policy();
    sb_replay_opts o = hand_opts(4);
    o.bypass = 0.25;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(n_spies, 1);
    assert_false(spies[0]->accounting_off);
    assert_int_equal(spies[0]->picks, r.requests);
    assert_int_equal(r.requests + r.bypass_requests, 400);
    assert_int_equal(r.bypass_completed, r.bypass_requests);
    assert_true(r.bypass_requests > 70 && r.bypass_requests < 130);
    assert_int_equal(r.n_ttft, r.completed); /* the gateway's figures hold its own requests only */
    assert_true(r.bypass_ttft_p50_ms > 0);
    size_t flagged = 0;
    for (size_t i = 0; i < w.n; i++)
        flagged += r.records[i].bypass;
    assert_int_equal(flagged, r.bypass_requests);
    sb_replay_result_free(&r);
    spies_free();
    /* Everything bypasses: no pick at all, the engines still serve (and hit) everything. */
    o.bypass = 1;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(spies[0]->picks, 0);
    assert_int_equal(r.requests, 0);
    assert_int_equal(r.bypass_completed, 400);
    assert_true(r.hit_rate > 0.5); /* the shared 160-token head, 10 blocks of 12 */
    sb_replay_result_free(&r);
    spies_free();
    sb_replay_workload_free(&w);
}

/* ---- restarts ------------------------------------------------------------------------------- */

/* One replica: A (long answer) is on it when it restarts at 0.5 s (one restart, midway between
 * the arrivals at 0 and 1 s): A fails, the gateway hears a failure; B, sharing A's first 160
 * tokens, arrives after and finds the cache empty. */
static void test_restart_empties_the_cache_and_fails_in_flight(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span a[2] = {{sb_replay_span_id(SB_REPLAY_NS_SHARED, 1), 160},
                           {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, 1), 20}};
    sb_replay_span b[2] = {{sb_replay_span_id(SB_REPLAY_NS_SHARED, 1), 160},
                           {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, 2), 20}};
    sb_replay_request ra = {.arrival_ns = 0, .max_tokens = 5000, .followup = SB_REPLAY_NO_REQUEST};
    sb_replay_request rb = {.arrival_ns = SB_NS_PER_S, .max_tokens = 4, .followup = SB_REPLAY_NO_REQUEST};
    assert_int_equal(sb_replay_workload_add(&w, &ra, a, 2), 0);
    assert_int_equal(sb_replay_workload_add(&w, &rb, b, 2), 1);
    w.rate = 2;
    sb_replay_policy p = spy_policy();
    sb_replay_opts o = hand_opts(1);
    o.restarts = 1;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.restarts, 1);
    assert_int_equal(r.failed, 1);
    assert_int_equal(r.completed, 1);
    assert_int_equal(r.requests, 2);
    assert_int_equal(r.records[0].outcome, SB_REPLAY_FAILED);
    assert_int_equal(r.records[1].outcome, SB_REPLAY_COMPLETED);
    assert_int_equal(r.records[1].cached_tokens, 0); /* 160 without the restart */
    assert_int_equal(spies[0]->finished_failed, 1);
    assert_int_equal(spies[0]->finished_ok, 1);
    sb_replay_result_free(&r);
    spies_free();
    /* Without it, B hits A's 10 blocks. */
    o.restarts = 0;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.records[1].cached_tokens, 160);
    assert_int_equal(r.failed + r.restarts, 0);
    sb_replay_result_free(&r);
    spies_free();
    sb_replay_workload_free(&w);
}

/* The routers are not told of a restart: they learn it as the live gateway does, from the next
 * scrape's counters going backwards, and drop what their prefix index believed the replica
 * held. 12 prompts go out (prefix-only: no match anywhere, ties at random over 2 replicas), the
 * same 12 prefixes again after the restart of one replica and a scrape: a prefix the restarted
 * replica held has no match anywhere any more, so not every one of them goes back there. */
static void test_restart_reaches_the_routers_through_the_scrape(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    for (uint32_t round = 0; round < 2; round++)
        for (uint32_t k = 0; k < 12; k++) {
            sb_replay_span sp[2] = {{sb_replay_span_id(SB_REPLAY_NS_SHARED, 100 + k), 320},
                                    {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, round * 100 + k), 16}};
            sb_replay_request r = {
                .arrival_ns = round * 2 * SB_NS_PER_S + k * 10 * MS, .max_tokens = 2, .followup = SB_REPLAY_NO_REQUEST};
            assert_true(sb_replay_workload_add(&w, &r, sp, 2) >= 0);
        }
    w.rate = 6;
    sb_replay_policy p;
    assert_int_equal(sb_replay_policy_resolve("prefix-only", NULL, 0, &p), 0);
    sb_replay_opts o = hand_opts(2);
    o.restarts = 1; /* midway: about 1.06 s, after the first round is answered */
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.restarts, 1);
    assert_int_equal(r.failed, 0);
    /* Unaware, the router would send every prefix back where it sent it first (to a cache
     * that is empty for the restarted replica's). Aware, some of those go by the tie. */
    uint32_t moved = 0, kept_warm = 0;
    for (uint32_t k = 0; k < 12; k++) {
        const sb_replay_record *a = &r.records[k], *b = &r.records[12 + k];
        moved += b->replica != a->replica;
        kept_warm += b->replica == a->replica && b->cached_tokens == 320;
    }
    assert_true(moved > 0);
    assert_true(kept_warm > 0); /* the other replica's prefixes still route there, and hit */
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

/* Periodic restarts keep a run going to its end, and every request is settled once. */
static void test_restart_every_settles_everything(void **state)
{
    (void)state;
    sb_replay_workload w;
    independent(&w, 300);
    sb_replay_policy p;
    assert_int_equal(sb_replay_policy_resolve("default", NULL, 0, &p), 0);
    sb_replay_opts o = hand_opts(3);
    o.restart_every_ns = 200 * MS;
    o.net_delay_ns = 2 * MS;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_true(r.restarts >= 14);
    assert_int_equal(r.completed + r.failed + r.shed, 300);
    sb_replay_result_free(&r);
    sb_replay_opts bad = hand_opts(3);
    bad.restarts = 2;
    bad.restart_every_ns = MS;
    char err[128];
    assert_int_equal(sb_replay_run(&w, &p, &bad, &r, err, sizeof(err)), -EINVAL);
    sb_replay_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_gateways_split_the_traffic),
        cmocka_unit_test(test_a_session_keeps_its_gateway),
        cmocka_unit_test(test_bypass_skips_the_routers),
        cmocka_unit_test(test_restart_empties_the_cache_and_fails_in_flight),
        cmocka_unit_test(test_restart_reaches_the_routers_through_the_scrape),
        cmocka_unit_test(test_restart_every_settles_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
