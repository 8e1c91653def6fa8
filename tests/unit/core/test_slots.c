/* Tests llama.cpp slots through the routing core on a hand-driven clock: the endpoint's slot
 * accounting (a report corrected by the gateway's own traffic since), the slots scorer, the
 * slots gate of flow control (sb_router_pool_saturated for a paddler pool) and the paddler
 * profile's buffer (30 queued, 10 s, 503 full, 504 expired) in core/admission. */
#include "sb_test.h"

#include "core/admission.h"
#include "core/router.h"
#include "core/sched.h"

#define T0 SB_MS(10000)
#define TTL SB_MS(3000)
#define ID(x) ((void *)(uintptr_t)(x))

static void test_endpoint_accounting(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    assert_false(sb_endpoint_slots_fresh(&ep, T0));
    sb_endpoint_slots_set(&ep, 4, 2, TTL, T0);
    assert_true(sb_endpoint_slots_fresh(&ep, T0));
    assert_int_equal(sb_endpoint_slots_idle(&ep), 2);
    /* Two sent after the report take the two idle slots. */
    sb_ticket a = sb_endpoint_dispatch(&ep, 0, T0);
    sb_ticket b = sb_endpoint_dispatch(&ep, 0, T0);
    assert_int_equal(sb_endpoint_slots_idle(&ep), 0);
    /* A third cannot go below zero. */
    sb_ticket c = sb_endpoint_dispatch(&ep, 0, T0);
    assert_int_equal(sb_endpoint_slots_idle(&ep), 0);
    sb_health_params hp = sb_health_params_default();
    sb_endpoint_finish(&ep, &c, true, true, &hp, true, T0);
    sb_endpoint_finish(&ep, &b, true, true, &hp, true, T0);
    assert_int_equal(sb_endpoint_slots_idle(&ep), 1);
    /* A new report shows a busy (a still runs): 3 idle. When a ends, the report showed its
     * slot busy, so it frees one at once, without waiting for the next report. */
    sb_endpoint_slots_set(&ep, 4, 3, TTL, T0 + SB_MS(100));
    assert_int_equal(sb_endpoint_slots_idle(&ep), 3);
    sb_endpoint_finish(&ep, &a, true, true, &hp, true, T0 + SB_MS(200));
    assert_int_equal(sb_endpoint_slots_idle(&ep), 4);
    /* Never above total. */
    sb_endpoint_slots_set(&ep, 4, 4, TTL, T0 + SB_MS(300));
    sb_ticket d = sb_endpoint_dispatch(&ep, 0, T0 + SB_MS(300));
    sb_endpoint_slots_set(&ep, 4, 4, TTL, T0 + SB_MS(400)); /* taken before d arrived */
    /* A report that lags behind a dispatch never frees the slot of a request still in flight. */
    assert_int_equal(sb_endpoint_slots_idle(&ep), 3);
    sb_endpoint_finish(&ep, &d, true, true, &hp, true, T0 + SB_MS(500));
    assert_int_equal(sb_endpoint_slots_idle(&ep), 4);
    /* Stale after its own ttl, whatever the pool's stale_ms. */
    assert_true(sb_endpoint_slots_fresh(&ep, T0 + SB_MS(400) + TTL));
    assert_false(sb_endpoint_slots_fresh(&ep, T0 + SB_MS(401) + TTL));
    /* Idle above total in a report is clamped. */
    sb_endpoint_slots_set(&ep, 2, 9, TTL, T0);
    assert_int_equal(sb_endpoint_slots_idle(&ep), 2);
}

static void test_scorer(void **state)
{
    (void)state;
    const sb_scorer_def *s = sb_scorer_find("slots");
    assert_non_null(s);
    sb_endpoint e[4] = {{0}};
    sb_endpoint_slots_set(&e[0], 4, 1, TTL, T0);
    sb_endpoint_slots_set(&e[1], 4, 3, TTL, T0);
    sb_endpoint_slots_set(&e[2], 4, 4, TTL, T0 - SB_MS(5000)); /* stale: as loaded */
    /* e[3]: never reported: as loaded */
    sb_candidate c[4];
    for (int i = 0; i < 4; i++)
        c[i] = (sb_candidate){.ep = &e[i]};
    sb_sched_ctx ctx = {.now = T0, .stale_ns = SB_MS(30000)};
    double out[4];
    s->score(&ctx, NULL, c, 4, out);
    assert_true(out[0] == 0.25 && out[1] == 0.75 && out[2] == 0 && out[3] == 0);
    /* The gateway's own traffic since the report counts. */
    sb_endpoint_dispatch(&e[1], 0, T0);
    sb_endpoint_dispatch(&e[1], 0, T0);
    s->score(&ctx, NULL, c, 4, out);
    assert_true(out[1] == 0.25);
}

static sb_router *paddler_pool(size_t n)
{
    sb_router *r = sb_router_new(7, 0x5ec7e7);
    assert_non_null(r);
    const sb_profile *p = sb_profile_builtin("paddler");
    assert_non_null(p);
    assert_true(sb_profile_slots_gate(p));
    assert_false(sb_profile_slots_gate(sb_profile_builtin("default")));
    assert_int_equal(sb_router_add_pool(r, "llama", p, n, NULL), 0);
    return r;
}

static void test_gate(void **state)
{
    (void)state;
    sb_router *r = paddler_pool(2);
    sb_endpoint *a = sb_router_endpoint(r, 0, 0), *b = sb_router_endpoint(r, 0, 1);
    /* No slots known: no evidence, never saturated. */
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, T0));
    sb_endpoint_slots_set(a, 1, 0, TTL, T0);
    sb_endpoint_slots_set(b, 1, 1, TTL, T0);
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, T0));
    /* The gateway fills b's slot: now nothing is free, though no report says so yet. */
    sb_ticket t = sb_router_dispatched(r, 0, 1, 10, T0);
    assert_true(sb_router_pool_saturated(r, 0, -1, -1, T0));
    /* It ends: free again at once. */
    sb_router_finished(r, 0, 1, &t, true, true, T0 + SB_MS(10));
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, T0 + SB_MS(10)));
    /* A stale full endpoint is no evidence; a fresh full one is. */
    sb_endpoint_slots_set(b, 1, 0, TTL, T0 + SB_MS(20));
    assert_true(sb_router_pool_saturated(r, 0, -1, -1, T0 + SB_MS(20)));
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, T0 + SB_MS(20) + TTL + 1));
    sb_router_free(r);
}

typedef struct seen {
    uintptr_t dispatched[64], refused[64];
    uint16_t status[64];
    size_t n_dispatched, n_refused;
    sb_router *r; /* dispatch sends the request to endpoint 0, as the gateway would */
    sb_ns now;
} seen;

static bool on_dispatch(void *ctx, void *user)
{
    seen *s = ctx;
    s->dispatched[s->n_dispatched++] = (uintptr_t)user;
    sb_router_dispatched(s->r, 0, 0, 10, s->now);
    return true;
}

static void on_refuse(void *ctx, void *user, const sb_admission_refusal *r)
{
    seen *s = ctx;
    s->status[s->n_refused] = r->status;
    s->refused[s->n_refused++] = (uintptr_t)user;
}

/* Paddler's buffer: all slots busy, the next requests wait; the 31st is refused 503; a slot
 * freeing releases the first; one waiting 10 s is refused 504. */
static void test_paddler_buffer(void **state)
{
    (void)state;
    sb_router *r = paddler_pool(1);
    sb_endpoint *ep = sb_router_endpoint(r, 0, 0);
    sb_endpoint_slots_set(ep, 1, 1, TTL, T0);
    sb_flow_config fc;
    sb_flow_config_default(&fc);
    fc.gate_queue = 1;
    fc.gate_kv = -1;
    seen s = {.r = r};
    sb_admission_ops ops = {.dispatch = on_dispatch, .refuse = on_refuse};
    sb_admission *a = sb_admission_new(r, 1, &fc, &ops, &s);
    assert_non_null(a);
    sb_request_desc d = {.band = SB_BAND_STANDARD};
    sb_admission_refusal why;
    assert_int_equal(sb_admission_admit(a, &d, T0, &why), SB_ADMIT_DISPATCH);
    sb_ticket t = sb_router_dispatched(r, 0, 0, 10, T0);
    for (uintptr_t i = 1; i <= 30; i++) {
        assert_int_equal(sb_admission_admit(a, &d, T0, &why), SB_ADMIT_WAIT);
        assert_int_equal(sb_admission_enqueue(a, &d, ID(i), T0, NULL, &why), SB_ADMIT_QUEUED);
    }
    assert_int_equal(sb_admission_admit(a, &d, T0, &why), SB_ADMIT_WAIT);
    assert_int_equal(sb_admission_enqueue(a, &d, ID(31), T0, NULL, &why), SB_ADMIT_REFUSED);
    assert_int_equal(why.status, 503);
    /* The slot frees: exactly one is released, the first queued (it takes the slot). */
    sb_router_finished(r, 0, 0, &t, true, true, T0 + SB_MS(500));
    s.now = T0 + SB_MS(500);
    sb_admission_release(a, 0, s.now);
    assert_int_equal(s.n_dispatched, 1);
    assert_int_equal(s.dispatched[0], 1);
    /* The other 29 wait their 10 s (the agent reporting the slot busy meanwhile), then are
     * refused 504, not a moment before. */
    sb_endpoint_slots_set(ep, 1, 0, TTL, T0 + SB_MS(9000));
    sb_admission_release(a, 0, T0 + SB_MS(10000) - 1);
    assert_int_equal(s.n_refused, 0);
    sb_admission_release(a, 0, T0 + SB_MS(10000));
    assert_int_equal(s.n_refused, 29);
    for (size_t i = 0; i < s.n_refused; i++)
        assert_int_equal(s.status[i], 504);
    assert_int_equal(s.n_dispatched, 1);
    sb_admission_free(a);
    sb_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_accounting),
        cmocka_unit_test(test_scorer),
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_paddler_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
