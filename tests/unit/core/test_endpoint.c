/* Tests core/endpoint: fusion of reports and own accounting, staleness, restart detection,
 * outlier ejection with doubling backoff, half-open trials, active checks, draining.
 * Hand-driven clock: `now` is a plain number. */
#include "sb_test.h"

#include <math.h>

#include "core/endpoint.h"

#define T0 SB_MS(10000)

static sb_endpoint_report waiting_report(double waiting)
{
    return (sb_endpoint_report){.have_waiting = true, .waiting = waiting, .have_running = true, .running = 1,
                                .requests_total = -1};
}

static sb_health_params hp3(void)
{
    return (sb_health_params){.max_failures = 3, .base_eject_ns = SB_MS(1000), .max_eject_ns = SB_MS(5000)};
}

static void test_defaults(void **state)
{
    (void)state;
    sb_health_params hp = sb_health_params_default();
    assert_int_equal(hp.max_failures, 3);
    assert_true(hp.base_eject_ns > 0 && hp.base_eject_ns <= hp.max_eject_ns);
    assert_string_equal(sb_health_name(SB_HEALTH_HEALTHY), "healthy");
    assert_string_equal(sb_health_name(SB_HEALTH_HALF_OPEN), "half-open");
    assert_string_equal(sb_health_name(SB_HEALTH_DRAINING), "draining");
    assert_string_equal(sb_health_name((enum sb_health)99), "unknown");
}

static void test_waiting_is_report_plus_sent_since(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_report r = waiting_report(3);
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0));
    assert_true(sb_endpoint_waiting(&ep) == 3.0);
    sb_endpoint_dispatch(&ep, 0, T0 + 1);
    sb_endpoint_dispatch(&ep, 0, T0 + 2);
    assert_true(sb_endpoint_waiting(&ep) == 5.0);
    assert_int_equal(ep.in_flight, 2);
    /* A newer report shows them (as waiting or running): the correction starts over. */
    r = waiting_report(1);
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 10);
    assert_int_equal(ep.sent_since_report, 0);
    assert_true(sb_endpoint_waiting(&ep) == 1.0);
    assert_int_equal(ep.in_flight, 2);
    /* No report at all: the router's own dispatches are all it knows. */
    sb_endpoint fresh = {0};
    sb_endpoint_dispatch(&fresh, 0, T0);
    assert_true(sb_endpoint_waiting(&fresh) == 1.0);
    assert_true(sb_endpoint_running(&fresh) == 1.0);
}

static void test_finish_before_and_after_report(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    sb_endpoint_report r = waiting_report(0);
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0);
    sb_ticket old = sb_endpoint_dispatch(&ep, 0, T0 + 1);
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 2);
    sb_ticket a = sb_endpoint_dispatch(&ep, 0, T0 + 3);
    sb_ticket b = sb_endpoint_dispatch(&ep, 0, T0 + 4);
    assert_int_equal(ep.sent_since_report, 2);
    /* Dispatched before the newest report: the report accounts for it, not the correction. */
    sb_endpoint_finish(&ep, &old, true, true, &hp, true, T0 + 5);
    assert_int_equal(ep.sent_since_report, 2);
    assert_int_equal(ep.in_flight, 2);
    /* Dispatched after it: no longer waiting anywhere. */
    sb_endpoint_finish(&ep, &a, true, true, &hp, true, T0 + 6);
    assert_int_equal(ep.sent_since_report, 1);
    assert_true(sb_endpoint_waiting(&ep) == 1.0);
    sb_endpoint_finish(&ep, &b, false, false, &hp, true, T0 + 7);
    assert_int_equal(ep.sent_since_report, 0);
    assert_int_equal(ep.in_flight, 0);
    assert_int_equal(ep.completed, 2);
    assert_int_equal(ep.failed, 1);
    assert_int_equal(ep.dispatched, 3);
}

/* One report every 100 ms, `reports` times, the engine serving `engine_per` requests between
 * two, this router `own_per` of them (completed here). */
static void share_reports(sb_endpoint *ep, double *total, sb_ns *now, int reports, int engine_per, int own_per)
{
    sb_health_params hp = hp3();
    for (int i = 0; i < reports; i++) {
        for (int k = 0; k < own_per; k++) {
            sb_ticket t = sb_endpoint_dispatch(ep, 10, *now);
            sb_endpoint_finish(ep, &t, true, true, &hp, true, *now);
        }
        *total += engine_per;
        *now += SB_MS(100);
        sb_endpoint_report r = waiting_report(0);
        r.requests_total = *total;
        sb_endpoint_report_set(ep, &r, SB_REPORT_SCRAPE, *now);
    }
}

/* The router's share of an endpoint's traffic: its own completions against the engine's
 * counter, decayed; 1 until the counter has shown enough; a restart starts it over. */
static void test_traffic_share(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    double total = 500; /* the engine served requests before this router saw it */
    sb_ns now = T0;
    assert_true(sb_endpoint_traffic_share(&ep) == 1.0);
    share_reports(&ep, &total, &now, 1, 3, 1); /* the first report only sets the marks */
    assert_true(sb_endpoint_traffic_share(&ep) == 1.0);
    share_reports(&ep, &total, &now, 2, 3, 1); /* 6 engine requests: not enough to tell */
    assert_true(sb_endpoint_traffic_share(&ep) == 1.0);
    share_reports(&ep, &total, &now, 40, 3, 1);
    assert_true(fabs(sb_endpoint_traffic_share(&ep) - 1.0 / 3) < 1e-9);
    /* Alone now: the share moves toward 1 as the old traffic decays (30 s time constant). */
    share_reports(&ep, &total, &now, 900, 3, 3);
    double s = sb_endpoint_traffic_share(&ep);
    assert_true(s > 0.9 && s < 1.0);
    /* A restart (the counter went back): the sums start over, and say 1 until they can tell. */
    total = 0;
    share_reports(&ep, &total, &now, 1, 2, 1);
    share_reports(&ep, &total, &now, 2, 2, 1);
    assert_true(sb_endpoint_traffic_share(&ep) == 1.0);
    share_reports(&ep, &total, &now, 10, 2, 1);
    assert_true(fabs(sb_endpoint_traffic_share(&ep) - 0.5) < 1e-9);
    /* A restart seen across a report without the counter (the counter went back all the
     * same): the sums start over. */
    {
        sb_endpoint_report r = waiting_report(0);
        now += SB_MS(100);
        sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, now); /* no counter */
        total = 3;
        share_reports(&ep, &total, &now, 1, 0, 0);
        share_reports(&ep, &total, &now, 2, 2, 2);
        assert_true(sb_endpoint_traffic_share(&ep) == 1.0); /* 4 requests since: not enough */
    }
    /* Without a counter (ORCA, an agent), own completions or not: 1. */
    sb_endpoint other = {0};
    sb_health_params hp = hp3();
    for (int i = 0; i < 50; i++) {
        sb_ticket t = sb_endpoint_dispatch(&other, 10, T0 + SB_MS(100) * i);
        sb_endpoint_finish(&other, &t, true, true, &hp, true, T0 + SB_MS(100) * i);
        sb_endpoint_report r = waiting_report(0);
        sb_endpoint_report_set(&other, &r, SB_REPORT_SCRAPE, T0 + SB_MS(100) * i);
    }
    assert_true(sb_endpoint_traffic_share(&other) == 1.0);
}

/* A reload that rebuilds the router carries what it learned of an endpoint's cache with the
 * endpoint (its prefix index moves along): the calibration and the traffic share. */
static void test_adopt_carries_cache_learning(void **state)
{
    (void)state;
    sb_endpoint old = {0}, fresh = {0};
    double total = 100;
    sb_ns now = T0;
    share_reports(&old, &total, &now, 40, 4, 1);
    old.index_shrink = 0.4;
    sb_endpoint_adopt(&fresh, &old);
    assert_true(fresh.index_shrink == 0.4);
    assert_true(fabs(sb_endpoint_traffic_share(&fresh) - 0.25) < 1e-9);
    /* ...and goes on from there: the next report adds to the same sums. */
    share_reports(&fresh, &total, &now, 1, 4, 1);
    assert_true(fabs(sb_endpoint_traffic_share(&fresh) - 0.25) < 1e-9);
}

/* What the router knows the endpoint holds lowers the work pending there, never raises it,
 * and goes with the first byte as the rest does. */
static void test_pending_uncached(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    sb_ticket a = sb_endpoint_dispatch(&ep, 1000, T0);
    sb_ticket b = sb_endpoint_dispatch(&ep, 300, T0);
    assert_int_equal(ep.pending_uncached_tokens, 1300); /* unknown: the whole prompt */
    sb_endpoint_dispatch_uncached(&ep, &a, 200);
    assert_int_equal(ep.pending_uncached_tokens, 500);
    assert_int_equal(ep.pending_prefill_tokens, 1300);
    sb_endpoint_dispatch_uncached(&ep, &a, 900); /* never raised */
    assert_int_equal(a.uncached_tokens, 200);
    assert_int_equal(ep.pending_uncached_tokens, 500);
    sb_endpoint_first_byte(&ep, &a, T0 + 1);
    assert_int_equal(ep.pending_uncached_tokens, 300);
    sb_endpoint_dispatch_uncached(&ep, &a, 0); /* after the first byte: nothing pending to lower */
    assert_int_equal(ep.pending_uncached_tokens, 300);
    sb_endpoint_finish(&ep, &b, false, true, &hp, true, T0 + 2);
    assert_int_equal(ep.pending_uncached_tokens, 0);
    assert_int_equal(ep.pending_prefill_tokens, 0);
}

static void test_pending_prefill(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    sb_ticket a = sb_endpoint_dispatch(&ep, 100, T0);
    sb_ticket b = sb_endpoint_dispatch(&ep, 30, T0);
    assert_int_equal(ep.pending_prefill_tokens, 130);
    /* Released at the first byte, once. */
    sb_endpoint_first_byte(&ep, &a, T0 + 1);
    assert_int_equal(ep.pending_prefill_tokens, 30);
    sb_endpoint_first_byte(&ep, &a, T0 + 2);
    assert_int_equal(ep.pending_prefill_tokens, 30);
    sb_endpoint_finish(&ep, &a, true, true, &hp, true, T0 + 3);
    assert_int_equal(ep.pending_prefill_tokens, 30);
    /* Released at finish when no first byte ever came (connect failure, 5xx). */
    sb_endpoint_finish(&ep, &b, false, true, &hp, true, T0 + 4);
    assert_int_equal(ep.pending_prefill_tokens, 0);
}

/* sent-tokens: tokens add at once and decay by e per time constant; a clock read out of order
 * neither grows nor moves the stamp back. */
static void test_sent_tokens_decay(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_sent_tokens_add(&ep, 1000, T0);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, T0), 1000.0, 1e-9);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, T0 + SB_SENT_TOKENS_TAU_NS), 1000.0 / M_E, 1e-6);
    sb_endpoint_sent_tokens_add(&ep, 500, T0 + SB_SENT_TOKENS_TAU_NS);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, T0 + SB_SENT_TOKENS_TAU_NS), 1000.0 / M_E + 500.0, 1e-6);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, T0), 1000.0 / M_E + 500.0, 1e-6);
    sb_endpoint_sent_tokens_add(&ep, 1, T0);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, T0 + SB_SENT_TOKENS_TAU_NS), 1000.0 / M_E + 501.0, 1e-6);
    /* Long idle: it fades to nothing. */
    assert_true(sb_endpoint_sent_tokens(&ep, T0 + 100 * SB_SENT_TOKENS_TAU_NS) < 1e-30);
}

/* The sum is kept scaled to an epoch that moves forward every SB_SENT_EPOCH_NS: crossing one
 * changes nothing of the value, a withdrawal of tokens added in an older epoch takes back what
 * is left of them, and a long idle gap (many epochs) starts from nothing without overflow. */
static void test_sent_tokens_epochs(void **state)
{
    (void)state;
    const sb_ns tau = SB_SENT_TOKENS_TAU_NS;
    sb_ns t = 3 * SB_SENT_EPOCH_NS - tau; /* one time constant before an epoch boundary */
    sb_endpoint ep = {0};
    sb_endpoint_sent_tokens_add(&ep, 1000, t);
    sb_ns epoch0 = ep.sent_epoch_ns;
    assert_float_equal(sb_endpoint_sent_tokens(&ep, t + 2 * tau), 1000.0 * exp(-2.0), 1e-6);
    sb_endpoint_sent_tokens_add(&ep, 500, t + 2 * tau);
    assert_true(ep.sent_epoch_ns > epoch0); /* moved to the new window */
    assert_float_equal(sb_endpoint_sent_tokens(&ep, t + 2 * tau), 1000.0 * exp(-2.0) + 500.0, 1e-6);
    sb_endpoint_sent_tokens_withdraw(&ep, 1000, t, t + 3 * tau);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, t + 3 * tau), 500.0 * exp(-1.0), 1e-6);
    /* A thousand epochs later: the old sum is gone, the new one exact. */
    sb_ns later = t + 1000 * SB_SENT_EPOCH_NS;
    sb_endpoint_sent_tokens_add(&ep, 7, later);
    assert_float_equal(sb_endpoint_sent_tokens(&ep, later), 7.0, 1e-9);
    assert_true(isfinite(ep.sent_scaled));
}

static void test_kv_usage_correction(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_report r = {.have_kv = true, .kv_usage = 0.25, .requests_total = -1};
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0);
    sb_endpoint_dispatch(&ep, 1000, T0);
    /* Without capacity the pending tokens cannot be converted to a fraction. */
    assert_true(sb_endpoint_kv_usage(&ep) == 0.25);
    r.have_capacity = true;
    r.block_size = 16;
    r.num_gpu_blocks = 250; /* 4000 tokens */
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 1);
    assert_true(fabs(sb_endpoint_kv_usage(&ep) - 0.5) < 1e-9);
    /* Clamped to 1. */
    sb_endpoint_dispatch(&ep, 100000, T0 + 2);
    assert_true(sb_endpoint_kv_usage(&ep) == 1.0);
    /* No report at all: 0. */
    sb_endpoint none = {0};
    assert_true(sb_endpoint_kv_usage(&none) == 0.0);
}

static void test_staleness_boundary(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_ns stale = SB_MS(500);
    /* Never reported: stale, whatever the clock says. */
    assert_true(sb_endpoint_is_stale(&ep, stale, 0));
    assert_true(sb_endpoint_is_stale(&ep, stale, T0));
    sb_endpoint_report r = waiting_report(0);
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0);
    assert_false(sb_endpoint_is_stale(&ep, stale, T0));
    assert_false(sb_endpoint_is_stale(&ep, stale, T0 + stale));
    assert_true(sb_endpoint_is_stale(&ep, stale, T0 + stale + 1));
    /* A clock reading before the report (another thread's now) is not stale. */
    assert_false(sb_endpoint_is_stale(&ep, stale, T0 - 5));
    /* An ORCA merge without a queue figure does not vouch for the queue: still stale. */
    sb_endpoint_report part = {.have_kv = true, .kv_usage = 0.1};
    sb_endpoint_report_merge(&ep, &part, SB_REPORT_ORCA, T0 + stale + 1);
    assert_true(sb_endpoint_is_stale(&ep, stale, T0 + stale + 1));
    /* One with the queue refreshes it. */
    part.have_waiting = true;
    sb_endpoint_report_merge(&ep, &part, SB_REPORT_ORCA, T0 + stale + 1);
    assert_false(sb_endpoint_is_stale(&ep, stale, T0 + stale + 1));
    assert_int_equal(ep.report_source, SB_REPORT_ORCA);
}

static void test_restart_detection(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_report r = waiting_report(0);
    r.requests_total = 100;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0));
    r.requests_total = 150;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 1));
    r.requests_total = 150;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 2));
    r.requests_total = 3; /* went backwards: the engine restarted */
    assert_true(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 3));
    r.requests_total = 5;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 4));
    /* Unknown counters never claim a restart. */
    r.requests_total = -1;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 5));
    r.requests_total = 0;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 6));
    assert_int_equal(ep.report_seq, 7);
}

static void test_merge_keeps_other_fields(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_report r = {.have_running = true, .running = 4, .have_waiting = true, .waiting = 2,
                            .have_kv = true, .kv_usage = 0.3, .have_lora = true, .max_lora = 2,
                            .lora_running_mask = 1, .lora_running_count = 1, .requests_total = 77};
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0);
    sb_endpoint_dispatch(&ep, 0, T0 + 1);
    uint64_t seq = ep.report_seq;
    sb_endpoint_report part = {.have_kv = true, .kv_usage = 0.6, .running = 99, .waiting = 99};
    sb_endpoint_report_merge(&ep, &part, SB_REPORT_ORCA, T0 + 2);
    assert_true(ep.report.kv_usage == 0.6);
    assert_true(ep.report.running == 4);  /* have_running was not set in the partial report */
    assert_true(ep.report.waiting == 2);
    assert_true(ep.report.have_lora);
    assert_int_equal(ep.report.lora_running_mask, 1);
    assert_true(ep.report.requests_total == 77);
    /* KV alone: the request sent since the scrape still counts as waiting. */
    assert_int_equal(ep.report_seq, seq);
    assert_int_equal(ep.report_ns, T0);
    assert_int_equal(ep.sent_since_report, 1);
    assert_true(sb_endpoint_waiting(&ep) == 3);
    part = (sb_endpoint_report){.have_waiting = true, .waiting = 7, .have_running = true, .running = 1};
    sb_endpoint_report_merge(&ep, &part, SB_REPORT_ORCA, T0 + 3);
    assert_int_equal(ep.report_seq, seq + 1);
    assert_int_equal(ep.report_ns, T0 + 3);
    assert_int_equal(ep.sent_since_report, 0);
    assert_true(sb_endpoint_waiting(&ep) == 7);
    assert_true(sb_endpoint_running(&ep) == 1);
    assert_true(ep.report.kv_usage == 0.6);
}

static void test_non_finite_fields_are_absent(void **state)
{
    (void)state;
    sb_endpoint ep = {0};
    sb_endpoint_report r = {.have_waiting = true, .waiting = NAN, .have_running = true, .running = INFINITY,
                            .have_kv = true, .kv_usage = NAN, .requests_total = NAN};
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0));
    assert_false(ep.report.have_waiting || ep.report.have_running || ep.report.have_kv);
    assert_true(ep.report.requests_total < 0);
    sb_endpoint_dispatch(&ep, 0, T0);
    assert_true(sb_endpoint_waiting(&ep) == 1.0);
    assert_true(sb_endpoint_running(&ep) == 1.0);
    assert_true(sb_endpoint_kv_usage(&ep) == 0.0);
    /* A merge of a non-finite field keeps the previous value. */
    r = (sb_endpoint_report){.have_kv = true, .kv_usage = 0.4};
    sb_endpoint_report_merge(&ep, &r, SB_REPORT_ORCA, T0 + 1);
    r.kv_usage = -INFINITY;
    sb_endpoint_report_merge(&ep, &r, SB_REPORT_ORCA, T0 + 2);
    assert_true(sb_endpoint_kv_usage(&ep) == 0.4);
    /* Nor does a non-finite counter claim a restart. */
    r = waiting_report(0);
    r.requests_total = 10;
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 3);
    r.requests_total = -NAN;
    assert_false(sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0 + 4));
}

/* Finishes one request dispatched now with the given outcome. */
static void one(sb_endpoint *ep, bool ok, const sb_health_params *hp, sb_ns now)
{
    sb_ticket t = sb_endpoint_dispatch(ep, 10, now);
    sb_endpoint_finish(ep, &t, ok, true, hp, true, now);
}

static void test_ejection_after_max_failures(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    one(&ep, false, &hp, T0);
    one(&ep, false, &hp, T0);
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_HEALTHY);
    assert_true(sb_endpoint_available(&ep, T0));
    /* A success in between resets the count. */
    one(&ep, true, &hp, T0);
    one(&ep, false, &hp, T0);
    one(&ep, false, &hp, T0);
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_HEALTHY);
    one(&ep, false, &hp, T0);
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_EJECTED);
    assert_false(sb_endpoint_available(&ep, T0));
    assert_int_equal(ep.ejected_until, T0 + SB_MS(1000));
    assert_false(sb_endpoint_available(&ep, T0 + SB_MS(1000) - 1));
    assert_true(sb_endpoint_available(&ep, T0 + SB_MS(1000)));
    assert_int_equal(sb_endpoint_health(&ep, T0 + SB_MS(1000)), SB_HEALTH_HALF_OPEN);
}

static void test_client_aborts_never_eject(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    for (int i = 0; i < 20; i++) {
        sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0);
        sb_endpoint_finish(&ep, &t, false, false, &hp, true, T0);
    }
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_HEALTHY);
    assert_int_equal(ep.consecutive_failures, 0);
    assert_int_equal(ep.failed, 20);
    /* Nor do they interrupt a run of real failures. */
    one(&ep, false, &hp, T0);
    one(&ep, false, &hp, T0);
    sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0);
    sb_endpoint_finish(&ep, &t, false, false, &hp, true, T0);
    assert_int_equal(ep.consecutive_failures, 2);
    one(&ep, false, &hp, T0);
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_EJECTED);
}

static void test_half_open_single_trial(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, T0);
    sb_ns t1 = T0 + SB_MS(1000);
    assert_true(sb_endpoint_available(&ep, t1));
    sb_ticket trial = sb_endpoint_dispatch(&ep, 10, t1);
    assert_true(trial.trial);
    /* Exactly one trial at a time. */
    assert_false(sb_endpoint_available(&ep, t1));
    assert_false(sb_endpoint_available(&ep, t1 + SB_MS(60000)));
    assert_int_equal(sb_endpoint_health(&ep, t1), SB_HEALTH_HALF_OPEN);
    /* The trial succeeds: healthy, no trial, the backoff starts over. */
    sb_endpoint_finish(&ep, &trial, true, true, &hp, true, t1 + 5);
    assert_int_equal(sb_endpoint_health(&ep, t1 + 5), SB_HEALTH_HEALTHY);
    assert_false(ep.trial_in_flight);
    assert_true(sb_endpoint_available(&ep, t1 + 5));
    sb_ticket t = sb_endpoint_dispatch(&ep, 10, t1 + 6);
    assert_false(t.trial);
    sb_endpoint_finish(&ep, &t, true, true, &hp, true, t1 + 6);
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, t1 + 10);
    assert_int_equal(ep.ejected_until, t1 + 10 + SB_MS(1000));
}

static void test_trial_failure_doubles_backoff_capped(void **state)
{
    (void)state;
    sb_health_params hp = hp3(); /* base 1 s, cap 5 s */
    sb_endpoint ep = {0};
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, T0);
    sb_ns now = T0, expect[] = {SB_MS(1000), SB_MS(2000), SB_MS(4000), SB_MS(5000), SB_MS(5000)};
    assert_int_equal(ep.ejected_until - now, expect[0]);
    for (size_t k = 1; k < sizeof(expect) / sizeof(expect[0]); k++) {
        now = ep.ejected_until;
        assert_int_equal(sb_endpoint_health(&ep, now), SB_HEALTH_HALF_OPEN);
        sb_ticket trial = sb_endpoint_dispatch(&ep, 10, now);
        assert_true(trial.trial);
        /* One failed trial is enough: no need for max_failures again. */
        sb_endpoint_finish(&ep, &trial, false, true, &hp, true, now + 1);
        assert_int_equal(sb_endpoint_health(&ep, now + 1), SB_HEALTH_EJECTED);
        assert_false(ep.trial_in_flight);
        assert_int_equal(ep.ejected_until - (now + 1), expect[k]);
    }
    assert_int_equal(ep.ejections_total, 5);
    /* A successful trial resets the backoff exponent, not the lifetime count. */
    now = ep.ejected_until;
    sb_ticket trial = sb_endpoint_dispatch(&ep, 10, now);
    sb_endpoint_finish(&ep, &trial, true, true, &hp, true, now);
    assert_int_equal(ep.ejections, 0);
    assert_int_equal(ep.ejections_total, 5);
}

static void test_trial_client_abort_releases_trial(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, T0);
    sb_ns t1 = T0 + SB_MS(1000);
    sb_ticket trial = sb_endpoint_dispatch(&ep, 10, t1);
    sb_endpoint_finish(&ep, &trial, false, false, &hp, true, t1 + 1);
    /* Neither verdict: still half-open, and another trial may go. */
    assert_int_equal(sb_endpoint_health(&ep, t1 + 1), SB_HEALTH_HALF_OPEN);
    assert_true(sb_endpoint_available(&ep, t1 + 1));
}

static void test_old_success_does_not_end_ejection(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    /* A long stream goes out, then new requests start failing. */
    sb_ticket stream = sb_endpoint_dispatch(&ep, 10, T0);
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, T0 + 1);
    assert_int_equal(sb_endpoint_health(&ep, T0 + 2), SB_HEALTH_EJECTED);
    /* The stream that began before the ejection completes: the backoff still holds. */
    sb_endpoint_finish(&ep, &stream, true, true, &hp, true, T0 + 3);
    assert_int_equal(sb_endpoint_health(&ep, T0 + 3), SB_HEALTH_EJECTED);
    assert_false(sb_endpoint_available(&ep, T0 + 3));
    /* Half-open: only the trial decides, not a straggler from before the ejection. */
    sb_endpoint ep2 = {0};
    sb_ticket old = sb_endpoint_dispatch(&ep2, 10, T0);
    for (int i = 0; i < 3; i++)
        one(&ep2, false, &hp, T0 + 1);
    sb_ns t1 = T0 + 1 + SB_MS(1000);
    sb_ticket trial = sb_endpoint_dispatch(&ep2, 10, t1);
    sb_endpoint_finish(&ep2, &old, true, true, &hp, true, t1 + 1);
    assert_int_equal(sb_endpoint_health(&ep2, t1 + 1), SB_HEALTH_HALF_OPEN);
    sb_endpoint_finish(&ep2, &trial, false, true, &hp, true, t1 + 2);
    assert_int_equal(sb_endpoint_health(&ep2, t1 + 2), SB_HEALTH_EJECTED);
    assert_int_equal(ep2.ejected_until, t1 + 2 + SB_MS(2000));
}

static void test_active_check_and_draining(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    sb_endpoint_active_check(&ep, false, T0);
    assert_int_equal(sb_endpoint_health(&ep, T0), SB_HEALTH_DOWN);
    assert_false(sb_endpoint_available(&ep, T0));
    sb_endpoint_active_check(&ep, false, T0 + 1);
    assert_false(sb_endpoint_available(&ep, T0 + SB_MS(60000)));
    sb_endpoint_active_check(&ep, true, T0 + 2);
    assert_int_equal(sb_endpoint_health(&ep, T0 + 2), SB_HEALTH_HEALTHY);
    assert_true(sb_endpoint_available(&ep, T0 + 2));

    /* Draining: no new requests; in-flight ones finish normally. */
    sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0 + 3);
    ep.draining = true;
    assert_int_equal(sb_endpoint_health(&ep, T0 + 3), SB_HEALTH_DRAINING);
    assert_false(sb_endpoint_available(&ep, T0 + 3));
    sb_endpoint_finish(&ep, &t, true, true, &hp, true, T0 + 4);
    assert_int_equal(ep.in_flight, 0);
    assert_false(sb_endpoint_available(&ep, T0 + 4));
    ep.draining = false;
    assert_true(sb_endpoint_available(&ep, T0 + 5));

    /* Down outranks ejected; a check that recovers readmits it at once (fast readmission),
     * long before the backoff ends. */
    for (int i = 0; i < 3; i++)
        one(&ep, false, &hp, T0 + 6);
    sb_endpoint_active_check(&ep, false, T0 + 7);
    assert_int_equal(sb_endpoint_health(&ep, T0 + 7), SB_HEALTH_DOWN);
    sb_endpoint_active_check(&ep, true, T0 + 8);
    assert_int_equal(sb_endpoint_health(&ep, T0 + 8), SB_HEALTH_HEALTHY);
    assert_int_equal(ep.readmissions, 1);
}

/* A replica answering 500 to 30% of requests, never three in a row, is ejected by the failure
 * rate once the window holds min_requests; the consecutive rule alone never would. */
static void test_failure_rate_ejects(void **state)
{
    (void)state;
    sb_health_params hp = sb_health_params_default(); /* 3 in a row, or 25% of >= 10 in 10 s */
    sb_endpoint ep = {0};
    /* ok ok fail, repeated: 33% failures, at most one in a row. */
    enum sb_eject_reason why = SB_EJECT_NONE;
    int n = 0;
    while (why == SB_EJECT_NONE && n < 30) {
        sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0 + n);
        why = sb_endpoint_finish(&ep, &t, n % 3 != 2, true, &hp, true, T0 + n);
        n++;
    }
    assert_int_equal(why, SB_EJECT_RATE);
    assert_int_equal(n, 12); /* the first failure at or past 10 requests */
    assert_int_equal(ep.health, SB_HEALTH_EJECTED);
    assert_int_equal(ep.ejections_by[SB_EJECT_RATE], 1);
    assert_int_equal(ep.ejections_by[SB_EJECT_CONSECUTIVE], 0);
    assert_string_equal(sb_eject_reason_name(SB_EJECT_RATE), "failure_rate");

    /* Its /health passes all along: a passing check does not readmit a failure-rate ejection,
     * nor, after the backoff, the re-ejection by a failed trial (still that ejection). */
    sb_endpoint_active_check(&ep, true, T0 + 13);
    assert_int_equal(ep.health, SB_HEALTH_EJECTED);
    assert_int_equal(ep.readmissions, 0);
    sb_ns later = T0 + 12 + hp.base_eject_ns;
    assert_int_equal(sb_endpoint_health(&ep, later), SB_HEALTH_HALF_OPEN);
    sb_ticket trial = sb_endpoint_dispatch(&ep, 10, later);
    assert_int_equal(sb_endpoint_finish(&ep, &trial, false, true, &hp, true, later + 1), SB_EJECT_TRIAL);
    sb_endpoint_active_check(&ep, true, later + 2);
    assert_int_equal(ep.health, SB_HEALTH_EJECTED);
    assert_int_equal(ep.readmissions, 0);

    /* The same failures spread over longer than the window never reach the rate. */
    sb_endpoint slow = {0};
    for (int i = 0; i < 60; i++) {
        sb_ticket t = sb_endpoint_dispatch(&slow, 10, T0 + SB_MS(2000) * i);
        assert_int_equal(sb_endpoint_finish(&slow, &t, i % 3 != 2, true, &hp, true, T0 + SB_MS(2000) * i),
                         SB_EJECT_NONE);
    }
    /* Rate off: only the consecutive rule. */
    hp.failure_rate = 0;
    sb_endpoint off = {0};
    for (int i = 0; i < 60; i++) {
        sb_ticket t = sb_endpoint_dispatch(&off, 10, T0 + i);
        assert_int_equal(sb_endpoint_finish(&off, &t, i % 3 != 2, true, &hp, true, T0 + i), SB_EJECT_NONE);
    }
}

/* With the pool's bound reached (may_eject false), failures count but do not eject; a failed
 * half-open trial (already ejected) is ejected again whatever the bound. */
static void test_ejection_bound_holds_back(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    for (int i = 0; i < 5; i++) {
        sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0 + i);
        assert_int_equal(sb_endpoint_finish(&ep, &t, false, true, &hp, false, T0 + i), SB_EJECT_NONE);
    }
    assert_int_equal(ep.health, SB_HEALTH_HEALTHY);
    assert_int_equal(ep.consecutive_failures, 5);
    sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0 + 6);
    assert_int_equal(sb_endpoint_finish(&ep, &t, false, true, &hp, true, T0 + 6), SB_EJECT_CONSECUTIVE);
    sb_ticket trial = sb_endpoint_dispatch(&ep, 10, ep.ejected_until);
    assert_true(trial.trial);
    assert_int_equal(sb_endpoint_finish(&ep, &trial, false, true, &hp, false, ep.ejected_until), SB_EJECT_TRIAL);
}

/* Stale but serving: the newest evidence (a request's end or an active check) decides, within
 * SB_SERVING_WINDOW_NS; a stale endpoint that fails is not serving. */
static void test_stale_but_serving_rule(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    assert_false(sb_endpoint_serving(&ep, T0)); /* no evidence at all */
    sb_endpoint_active_check(&ep, true, T0);
    assert_true(sb_endpoint_serving(&ep, T0 + 1));
    assert_true(sb_endpoint_serving(&ep, T0 + SB_SERVING_WINDOW_NS));
    assert_false(sb_endpoint_serving(&ep, T0 + SB_SERVING_WINDOW_NS + 1));
    one(&ep, true, &hp, T0 + 10);
    assert_true(sb_endpoint_serving(&ep, T0 + 10 + SB_SERVING_WINDOW_NS));
    one(&ep, false, &hp, T0 + 20); /* its latest request failed */
    assert_false(sb_endpoint_serving(&ep, T0 + 21));
    one(&ep, true, &hp, T0 + 30);
    assert_true(sb_endpoint_serving(&ep, T0 + 31));
    /* A client's abort is no evidence either way. */
    sb_ticket t = sb_endpoint_dispatch(&ep, 10, T0 + 40);
    sb_endpoint_finish(&ep, &t, false, false, &hp, true, T0 + 40);
    assert_true(sb_endpoint_serving(&ep, T0 + 41));
}

/* Expiring a stale report leaves the router's own accounting: running = in flight, waiting =
 * sent since; the report stays stale; tickets of before do not underflow the new count. */
static void test_expire_report_uses_own_accounting(void **state)
{
    (void)state;
    sb_health_params hp = hp3();
    sb_endpoint ep = {0};
    sb_endpoint_report r = waiting_report(7);
    r.have_kv = true;
    r.kv_usage = 0.9;
    sb_endpoint_report_set(&ep, &r, SB_REPORT_SCRAPE, T0);
    sb_ticket a = sb_endpoint_dispatch(&ep, 10, T0 + 1);
    sb_ticket b = sb_endpoint_dispatch(&ep, 10, T0 + 2);
    assert_true(sb_endpoint_waiting(&ep) == 9);
    sb_endpoint_expire_report(&ep);
    assert_true(sb_endpoint_is_stale(&ep, SB_MS(1000), T0 + SB_MS(2000)));
    assert_true(sb_endpoint_waiting(&ep) == 0);
    assert_true(sb_endpoint_running(&ep) == 2);
    assert_true(sb_endpoint_kv_usage(&ep) == 0);
    sb_ticket c = sb_endpoint_dispatch(&ep, 10, T0 + 3);
    assert_true(sb_endpoint_waiting(&ep) == 1);
    sb_endpoint_finish(&ep, &a, true, true, &hp, true, T0 + 4);
    sb_endpoint_finish(&ep, &b, true, true, &hp, true, T0 + 4);
    assert_true(sb_endpoint_waiting(&ep) == 1);
    sb_endpoint_finish(&ep, &c, true, true, &hp, true, T0 + 4);
    assert_true(sb_endpoint_waiting(&ep) == 0);
    assert_true(sb_endpoint_running(&ep) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_failure_rate_ejects),
        cmocka_unit_test(test_ejection_bound_holds_back),
        cmocka_unit_test(test_stale_but_serving_rule),
        cmocka_unit_test(test_expire_report_uses_own_accounting),
        cmocka_unit_test(test_waiting_is_report_plus_sent_since),
        cmocka_unit_test(test_finish_before_and_after_report),
        cmocka_unit_test(test_pending_prefill),
        cmocka_unit_test(test_pending_uncached),
        cmocka_unit_test(test_traffic_share),
        cmocka_unit_test(test_adopt_carries_cache_learning),
        cmocka_unit_test(test_sent_tokens_decay),
        cmocka_unit_test(test_sent_tokens_epochs),
        cmocka_unit_test(test_kv_usage_correction),
        cmocka_unit_test(test_staleness_boundary),
        cmocka_unit_test(test_restart_detection),
        cmocka_unit_test(test_merge_keeps_other_fields),
        cmocka_unit_test(test_non_finite_fields_are_absent),
        cmocka_unit_test(test_ejection_after_max_failures),
        cmocka_unit_test(test_client_aborts_never_eject),
        cmocka_unit_test(test_half_open_single_trial),
        cmocka_unit_test(test_trial_failure_doubles_backoff_capped),
        cmocka_unit_test(test_trial_client_abort_releases_trial),
        cmocka_unit_test(test_old_success_does_not_end_ejection),
        cmocka_unit_test(test_active_check_and_draining),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
