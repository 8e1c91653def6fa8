/* Tests core/admission (flow control's gate in front of scheduling, driven by callbacks) on a
 * hand-driven clock: the arrival decision and its refusals, release when capacity returns,
 * band order, expiry and eviction answered through the refuse op, removal of a request whose
 * client left, no nested release from inside a dispatch, a dispatch that stops the release,
 * reconfiguration of the gate, and allocation failure. The queueing policy itself is
 * test_flow.c's. */
#include "sb_test.h"

#include "base/alloc.h"
#include "core/admission.h"
#include "core/router.h"

#define T0 SB_MS(10000)
#define ID(x) ((void *)(uintptr_t)(x))

/* What the ops saw, in order. */
typedef struct seen {
    sb_admission *a;
    uintptr_t dispatched[64];
    size_t n_dispatched;
    uintptr_t refused[64];
    sb_admission_refusal refusal[64];
    size_t n_refused;
    bool release_inside; /* dispatch calls sb_admission_release, as a request that ends at once */
    size_t stop_after;   /* dispatch returns false once this many were dispatched (0: never) */
    sb_router *send_to;  /* dispatch sends the request to endpoint 0 of this router */
    int depth;           /* dispatches running: more than one is a nested release */
    sb_ns now;
} seen;

static bool on_dispatch(void *ctx, void *user)
{
    seen *s = ctx;
    assert_true(s->n_dispatched < 64);
    assert_int_equal(++s->depth, 1);
    s->dispatched[s->n_dispatched++] = (uintptr_t)user;
    if (s->send_to)
        sb_router_dispatched(s->send_to, 0, 0, 10, s->now);
    if (s->release_inside) {
        sb_admission_release(s->a, 0, s->now);
        sb_admission_tick(s->a, s->now);
    }
    s->depth--;
    return !(s->stop_after && s->n_dispatched >= s->stop_after);
}

static void on_refuse(void *ctx, void *user, const sb_admission_refusal *r)
{
    seen *s = ctx;
    assert_true(s->n_refused < 64);
    s->refused[s->n_refused] = (uintptr_t)user;
    s->refusal[s->n_refused++] = *r;
}

static const sb_admission_ops ops = {.dispatch = on_dispatch, .refuse = on_refuse};

static void report_waiting(sb_router *r, uint32_t ep, double waiting, sb_ns at)
{
    sb_endpoint_report rep = {.have_waiting = true, .waiting = waiting, .have_kv = true, .kv_usage = 0.1,
                              .requests_total = -1};
    sb_endpoint_report_set(sb_router_endpoint(r, 0, ep), &rep, SB_REPORT_SCRAPE, at);
}

static sb_router *two_endpoints(void)
{
    sb_router *r = sb_router_new(7, 0x5ec7e7);
    assert_non_null(r);
    assert_int_equal(sb_router_add_pool(r, "llama", sb_profile_builtin("default"), 2, NULL), 0);
    return r;
}

/* Gate at 1 waiting; 4 per band, 6 in all, no default waits. */
static sb_flow_config gate_config(void)
{
    sb_flow_config c;
    sb_flow_config_default(&c);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        c.band[b].max_queued = 4;
        c.band[b].max_wait_ns = 0;
    }
    c.max_queued_total = 6;
    c.gate_queue = 1;
    c.gate_kv = -1;
    return c;
}

static void saturate(sb_router *r, sb_ns at)
{
    report_waiting(r, 0, 3, at);
    report_waiting(r, 1, 3, at);
}

static void make_room(sb_router *r, sb_ns at)
{
    report_waiting(r, 0, 0, at);
    report_waiting(r, 1, 0, at);
}

/* A router of two endpoints, flow control over its pool with config c, and the ops' record. */
typedef struct fixture {
    sb_router *r;
    sb_admission *a;
    seen s;
} fixture;

/* cmocka set-up and tear-down: every test starts from gate_config (a test that wants other
 * bounds reconfigures, which is in place). */
static int open_fixture(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    sb_flow_config c = gate_config();
    fx->r = two_endpoints();
    fx->a = sb_admission_new(fx->r, 1, &c, &ops, &fx->s);
    assert_non_null(fx->a);
    fx->s.a = fx->a;
    *state = fx;
    return 0;
}

static int close_fixture(void **state)
{
    fixture *fx = *state;
    sb_admission_free(fx->a);
    sb_router_free(fx->r);
    free(fx);
    return 0;
}

static int arrive(sb_admission *a, enum sb_band band, uintptr_t id, sb_ns now, sb_flow_handle *h,
                  sb_admission_refusal *out)
{
    sb_request_desc rq = {.sched.pool = 0, .band = band, .tenant = id % 3, .body_bytes = 100};
    int r = sb_admission_admit(a, &rq, now, out);
    if (r != SB_ADMIT_WAIT)
        return r;
    return sb_admission_enqueue(a, &rq, ID(id), now, h, out);
}

/* Saturates the pool at T0 and queues standard requests 1..n there. */
static void queue_saturated(fixture *fx, uintptr_t n)
{
    sb_admission_refusal out;
    saturate(fx->r, T0);
    for (uintptr_t id = 1; id <= n; id++)
        assert_int_equal(arrive(fx->a, SB_BAND_STANDARD, id, T0, NULL, &out), SB_ADMIT_QUEUED);
}

static void test_arrival_decisions(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    sb_admission_refusal out;
    /* Room: dispatched at once, no op called. */
    make_room(r, T0);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 1, T0, NULL, &out), SB_ADMIT_DISPATCH);
    /* Saturated: standard waits, sheddable is refused with 429 "shed". */
    saturate(r, T0);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 2, T0, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_SHEDDABLE, 3, T0, NULL, &out), SB_ADMIT_REFUSED);
    assert_int_equal(out.why, SB_REFUSE_SHED);
    assert_int_equal(out.status, 429);
    assert_string_equal(out.reason, "shed");
    assert_true(out.retry_after_s >= 1);
    /* A band whose queue is full: 429 "queue_full". */
    for (uintptr_t id = 10; id < 13; id++)
        assert_int_equal(arrive(a, SB_BAND_STANDARD, id, T0, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 13, T0, NULL, &out), SB_ADMIT_REFUSED);
    assert_int_equal(out.why, SB_REFUSE_QUEUE_FULL);
    assert_int_equal(out.status, 429);
    assert_string_equal(out.reason, "queue_full");
    /* No endpoint available: 503 at once, whatever the band and the queue. */
    sb_router_endpoint(r, 0, 0)->draining = sb_router_endpoint(r, 0, 1)->draining = true;
    assert_int_equal(arrive(a, SB_BAND_CRITICAL, 14, T0, NULL, &out), SB_ADMIT_REFUSED);
    assert_int_equal(out.why, SB_REFUSE_NO_ENDPOINT);
    assert_int_equal(out.status, 503);
    assert_string_equal(out.reason, "no_healthy_endpoint");
    assert_int_equal(out.retry_after_s, 1);
    /* A pool the module does not hold is refused the same way, at admit and at enqueue. */
    sb_request_desc other = {.sched.pool = 4, .band = SB_BAND_STANDARD};
    assert_int_equal(sb_admission_admit(a, &other, T0, &out), SB_ADMIT_REFUSED);
    assert_int_equal(out.why, SB_REFUSE_NO_ENDPOINT);
    assert_int_equal(sb_admission_enqueue(a, &other, ID(15), T0, NULL, &out), SB_ADMIT_REFUSED);
    assert_int_equal(out.why, SB_REFUSE_NO_ENDPOINT);
    assert_int_equal(s->n_dispatched + s->n_refused, 0);
}

static void test_release_when_capacity_returns(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    sb_admission_refusal out;
    saturate(r, T0);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 1, T0, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_CRITICAL, 2, T0 + 1, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 3, T0 + 2, NULL, &out), SB_ADMIT_QUEUED);
    /* Still saturated: a release and a tick hand out nothing. */
    sb_admission_release(a, 0, T0 + SB_MS(1));
    sb_admission_tick(a, T0 + SB_MS(2));
    assert_int_equal(s->n_dispatched, 0);
    /* Capacity returns: everything leaves, critical first, then standard in arrival order. */
    make_room(r, T0 + SB_MS(3));
    sb_admission_tick(a, T0 + SB_MS(3));
    assert_int_equal(s->n_dispatched, 3);
    assert_int_equal(s->dispatched[0], 2);
    assert_int_equal(s->dispatched[1], 1);
    assert_int_equal(s->dispatched[2], 3);
    assert_int_equal(s->n_refused, 0);
    /* Out-of-range pools are ignored. */
    sb_admission_release(a, 5, T0);
    assert_null(sb_admission_take(a, 5, T0));
    assert_null(sb_admission_flow(a, 5));
}

/* The gate closes again as released requests land: the release stops with the pool full, and
 * the rest waits. The gate counts requests sent since the last report. */
static void test_release_stops_when_gate_closes(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    queue_saturated(fx, 4);
    /* One endpoint reports an empty queue: with the gate at "more than 1 waiting", it takes
     * two before it is full again (what was sent since its report counts as waiting). */
    report_waiting(r, 0, 0, T0 + SB_MS(5));
    s->send_to = r;
    s->now = T0 + SB_MS(5);
    sb_admission_release(a, 0, T0 + SB_MS(5));
    assert_int_equal(s->n_dispatched, 2);
    sb_admission_tick(a, T0 + SB_MS(6));
    assert_int_equal(s->n_dispatched, 2);
    /* Its next report says it drained them: the other two leave. */
    report_waiting(r, 0, 0, T0 + SB_MS(7));
    s->now = T0 + SB_MS(7);
    sb_admission_tick(a, T0 + SB_MS(7));
    assert_int_equal(s->n_dispatched, 4);
}

static void test_expiry_and_eviction_go_through_refuse(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    sb_flow_config c = gate_config();
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(100);
    c.max_queued_total = 3;
    assert_int_equal(sb_admission_reconfigure(a, &c), 0);
    sb_admission_refusal out;
    saturate(r, T0);
    /* Sheddable requests queue only through the gate's WAIT: admit them while unsaturated is
     * DISPATCH, saturated is SHED; so enqueue them directly, as a caller holding them would. */
    sb_request_desc sh = {.sched.pool = 0, .band = SB_BAND_SHEDDABLE, .tenant = 9, .body_bytes = 10};
    assert_int_equal(sb_admission_enqueue(a, &sh, ID(50), T0, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 1, T0, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 2, T0, NULL, &out), SB_ADMIT_QUEUED);
    /* The total is full: a critical request evicts the sheddable one, answered 429 "shed". */
    assert_int_equal(arrive(a, SB_BAND_CRITICAL, 3, T0 + 1, NULL, &out), SB_ADMIT_QUEUED);
    assert_int_equal(s->n_refused, 1);
    assert_int_equal(s->refused[0], 50);
    assert_int_equal(s->refusal[0].why, SB_REFUSE_EVICTED);
    assert_int_equal(s->refusal[0].status, 429);
    assert_string_equal(s->refusal[0].reason, "shed");
    /* Standard waits at most 100 ms: past it, the tick answers both 503 "queue_timeout". */
    sb_admission_tick(a, T0 + SB_MS(99));
    assert_int_equal(s->n_refused, 1);
    sb_admission_tick(a, T0 + SB_MS(100));
    assert_int_equal(s->n_refused, 3);
    for (size_t i = 1; i < 3; i++) {
        assert_int_equal(s->refusal[i].why, SB_REFUSE_QUEUE_TIMEOUT);
        assert_int_equal(s->refusal[i].status, 503);
        assert_string_equal(s->refusal[i].reason, "queue_timeout");
        assert_true(s->refusal[i].retry_after_s >= 1);
    }
    assert_int_equal(s->n_dispatched, 0);
    /* The critical one has no deadline: it leaves when capacity returns. */
    make_room(r, T0 + SB_MS(200));
    sb_admission_release(a, 0, T0 + SB_MS(200));
    assert_int_equal(s->n_dispatched, 1);
    assert_int_equal(s->dispatched[0], 3);
}

static void test_removed_request_is_never_dispatched(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    sb_admission_refusal out;
    sb_flow_handle h1, h2;
    saturate(r, T0);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 1, T0, &h1, &out), SB_ADMIT_QUEUED);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 2, T0, &h2, &out), SB_ADMIT_QUEUED);
    assert_true(sb_admission_remove(a, 0, h1));
    assert_false(sb_admission_remove(a, 0, h1)); /* already gone */
    assert_false(sb_admission_remove(a, 3, h2)); /* no such pool */
    make_room(r, T0 + 1);
    sb_admission_tick(a, T0 + 1);
    assert_int_equal(s->n_dispatched, 1);
    assert_int_equal(s->dispatched[0], 2);
    assert_int_equal(s->n_refused, 0);
}

/* A released request can end at once (the gateway: a refused connection), and its end asks
 * for a release: that must not nest; the outer release goes on, each request once. */
static void test_no_nested_release(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    s->release_inside = true;
    queue_saturated(fx, 4);
    make_room(r, T0 + 1);
    s->now = T0 + 1;
    sb_admission_release(a, 0, T0 + 1);
    assert_int_equal(s->n_dispatched, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(s->dispatched[i], i + 1);
}

/* A dispatch that fails beyond repair stops the release; the rest stays queued. */
static void test_dispatch_can_stop_release(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    s->stop_after = 2;
    queue_saturated(fx, 4);
    make_room(r, T0 + 1);
    sb_admission_release(a, 0, T0 + 1);
    assert_int_equal(s->n_dispatched, 2);
    /* What is left can be taken regardless of capacity (a shutdown); it counts as dispatched
     * after the wait it really had. */
    sb_flow_stats before, after;
    sb_flow_stats_get(sb_admission_flow(a, 0), &before);
    assert_ptr_equal(sb_admission_take(a, 0, T0 + 5), ID(3));
    assert_ptr_equal(sb_admission_take(a, 0, T0 + 5), ID(4));
    assert_null(sb_admission_take(a, 0, T0 + 5));
    sb_flow_stats_get(sb_admission_flow(a, 0), &after);
    assert_int_equal(after.total.dispatched, before.total.dispatched + 2);
    assert_true(after.total.wait_max_ns <= 5);
    assert_true(after.total.wait_sum_ns - before.total.wait_sum_ns <= 10);
}

/* A reload moves the gate: a pool the old gate found saturated has room under the new one. */
static void test_reconfigure_moves_the_gate(void **state)
{
    fixture *fx = *state;
    sb_router *r = fx->r;
    sb_admission *a = fx->a;
    seen *s = &fx->s;
    sb_admission_refusal out;
    saturate(r, T0); /* 3 waiting each: over a gate of 1 */
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 1, T0, NULL, &out), SB_ADMIT_QUEUED);
    sb_flow_config c = gate_config();
    c.gate_queue = 4;
    assert_int_equal(sb_admission_reconfigure(a, &c), 0);
    sb_admission_tick(a, T0 + 1);
    assert_int_equal(s->n_dispatched, 1);
    assert_int_equal(arrive(a, SB_BAND_STANDARD, 2, T0 + 2, NULL, &out), SB_ADMIT_DISPATCH);
    /* A bound the flow refuses leaves that pool as it was. */
    c.max_queued_total = SB_FLOW_MAX_QUEUED + 1;
    assert_int_equal(sb_admission_reconfigure(a, &c), -1);
    assert_int_equal(sb_admission_pool_count(a), 1);
}

static void test_refusal_table(void **state)
{
    (void)state;
    sb_admission_refusal r = sb_admission_refusal_of(SB_REFUSE_QUEUE_TIMEOUT, 0);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.retry_after_s, 1); /* never 0 */
    assert_non_null(r.message);
    r = sb_admission_refusal_of(SB_REFUSE_EVICTED, 7);
    assert_int_equal(r.retry_after_s, 7);
    assert_string_equal(r.reason, "shed");
}

/* Fallbacks: the first listed pool that would dispatch at once takes the request; a pool that
 * is saturated (it would queue or shed), has no endpoint available, or is skipped by the
 * caller is passed over, and the cursor moves past each pool asked, so none is asked twice. */
static void test_fallback_takes_first_pool_with_room(void **state)
{
    (void)state;
    sb_router *r = sb_router_new(7, 0x5ec7e7);
    assert_non_null(r);
    for (int p = 0; p < 4; p++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", p);
        assert_int_equal(sb_router_add_pool(r, name, sb_profile_builtin("default"), 1, NULL), p);
        sb_endpoint_report rep = {
            .have_waiting = true, .waiting = p == 1 ? 3 : 0, .have_kv = true, .kv_usage = 0.1, .requests_total = -1};
        sb_endpoint_report_set(sb_router_endpoint(r, (uint32_t)p, 0), &rep, SB_REPORT_SCRAPE, T0);
    }
    sb_router_endpoint(r, 2, 0)->draining = true; /* p2: nothing available */
    seen s = {0};
    sb_flow_config c = gate_config();
    sb_admission *a = sb_admission_new(r, 4, &c, &ops, &s);
    assert_non_null(a);
    const uint32_t list[] = {1, 2, 3, 0};
    size_t cursor = 0;
    /* p1 saturated (it would queue: skipped, not queued), p2 unavailable: p3 takes it. */
    assert_int_equal(sb_admission_fallback(a, r, list, NULL, 4, &cursor, SB_BAND_STANDARD, T0), 2);
    assert_int_equal(cursor, 3);
    /* The next call goes on from there: p0, never p1..p3 again. */
    assert_int_equal(sb_admission_fallback(a, r, list, NULL, 4, &cursor, SB_BAND_STANDARD, T0), 3);
    assert_int_equal(sb_admission_fallback(a, r, list, NULL, 4, &cursor, SB_BAND_STANDARD, T0), -1);
    assert_int_equal(cursor, 4);
    /* The caller's skip list passes over a pool with room (p3) too. */
    const bool skip[] = {false, false, true, false};
    cursor = 0;
    assert_int_equal(sb_admission_fallback(a, r, list, skip, 4, &cursor, SB_BAND_STANDARD, T0), 3);
    /* Without flow control, availability alone decides: saturated p1 takes it, p2 never. */
    cursor = 0;
    assert_int_equal(sb_admission_fallback(NULL, r, list, NULL, 4, &cursor, SB_BAND_STANDARD, T0), 0);
    const uint32_t only_p2[] = {2};
    cursor = 0;
    assert_int_equal(sb_admission_fallback(NULL, r, only_p2, NULL, 1, &cursor, SB_BAND_STANDARD, T0), -1);
    /* Nothing was queued or answered through the ops. */
    assert_int_equal(s.n_dispatched + s.n_refused, 0);
    /* Counted in the pool that took it only: p1, saturated, was asked (sheddable, too) and
     * neither shed nor admitted it; p3 admitted the one standard request it took above. */
    cursor = 0;
    const uint32_t p1_then_p3[] = {1, 3};
    assert_int_equal(sb_admission_fallback(a, r, p1_then_p3, NULL, 2, &cursor, SB_BAND_SHEDDABLE, T0), 1);
    sb_flow_stats st1, st3;
    sb_flow_stats_get(sb_admission_flow(a, 1), &st1);
    sb_flow_stats_get(sb_admission_flow(a, 3), &st3);
    assert_int_equal(st1.total.shed + st1.total.admitted, 0);
    assert_int_equal(st3.band[SB_BAND_STANDARD].admitted, 1);
    assert_int_equal(st3.band[SB_BAND_SHEDDABLE].admitted, 1);
    sb_admission_free(a);
    sb_router_free(r);
}

static void test_allocation_failure(void **state)
{
    (void)state;
    sb_router *r = two_endpoints();
    seen s = {0};
    sb_flow_config c = gate_config();
    /* Every allocation of the constructor in turn fails; each failure is a clean NULL. */
    for (long n = 0;; n++) {
        sb_alloc_fail_after(n);
        sb_admission *a = sb_admission_new(r, 3, &c, &ops, &s);
        sb_alloc_fail_after(-1);
        if (a) {
            assert_true(n > 2);
            sb_admission_free(a);
            break;
        }
    }
    sb_admission_free(NULL);
    sb_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_arrival_decisions, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_release_when_capacity_returns, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_release_stops_when_gate_closes, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_expiry_and_eviction_go_through_refuse, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_removed_request_is_never_dispatched, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_no_nested_release, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_dispatch_can_stop_release, open_fixture, close_fixture),
        cmocka_unit_test_setup_teardown(test_reconfigure_moves_the_gate, open_fixture, close_fixture),
        cmocka_unit_test(test_refusal_table),
        cmocka_unit_test(test_fallback_takes_first_pool_with_room),
        cmocka_unit_test(test_allocation_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
