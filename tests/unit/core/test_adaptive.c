/* Tests core/adaptive: the three detectors (imbalance, burst, saturation) on hand-built
 * endpoints with a hand-driven clock, smoothing over irregular ticks, hysteresis, the sigmoid
 * configurator (monotonic, bounded, total conserved, absent categories), snapshot
 * immutability and ring lifetime, publication only on change, the JSON explanation, and
 * determinism. */
#include "sb_test.h"

#include "adaptive_test.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "core/adaptive.h"

#define T0 SB_MS(10000)
#define STALE SB_MS(1000)
#define MAXN 16
#define TICK SB_MS(100)

/* Scorer definitions of our own: the configurator only reads names and categories. */
static const sb_scorer_def aff_a = {.name = "aff-a", .category = SB_AFFINITY};
static const sb_scorer_def aff_b = {.name = "aff-b", .category = SB_AFFINITY};
static const sb_scorer_def dist_a = {.name = "dist-a", .category = SB_DISTRIBUTION};
static const sb_scorer_def dist_b = {.name = "dist-b", .category = SB_DISTRIBUTION};

static sb_endpoint eps[MAXN];

static void report(size_t i, double waiting, double running, double kv, sb_ns at)
{
    sb_endpoint_report r = {.have_waiting = true,
                            .waiting = waiting,
                            .have_running = true,
                            .running = running,
                            .have_kv = true,
                            .kv_usage = kv,
                            .requests_total = -1};
    sb_endpoint_report_set(&eps[i], &r, SB_REPORT_SCRAPE, at);
}

/* n fresh idle endpoints reporting at `at`. */
static void pool_reset(size_t n, sb_ns at)
{
    memset(eps, 0, sizeof(eps));
    for (size_t i = 0; i < n; i++) {
        eps[i].index = (uint32_t)i;
        report(i, 0, 0, 0, at);
    }
}

/* Affinity 3 + 1, distribution 2 + 4: total 10, distribution share 0.6 (as the default profile's). */
static sb_profile base_profile(void)
{
    sb_profile p;
    memset(&p, 0, sizeof(p));
    strcpy(p.name, "test");
    p.queue_threshold = 5;
    p.kv_threshold = 0.8;
    p.scorers[p.n_scorers++] = (sb_weighted_scorer){&aff_a, 3};
    p.scorers[p.n_scorers++] = (sb_weighted_scorer){&dist_a, 2};
    p.scorers[p.n_scorers++] = (sb_weighted_scorer){&aff_b, 1};
    p.scorers[p.n_scorers++] = (sb_weighted_scorer){&dist_b, 4};
    return p;
}

static double weight_sum(const sb_profile *p)
{
    double s = 0;
    for (size_t i = 0; i < p->n_scorers; i++)
        s += p->scorers[i].weight;
    return s;
}

/* Makes saturation's raw signal exactly k/n and leaves imbalance at 0: the first k endpoints
 * are stale (imbalance leaves them out), the others equally idle. */
static void saturate(size_t n, size_t k, sb_ns at)
{
    for (size_t i = 0; i < n; i++)
        report(i, 0, 0, 0, i < k ? at - 2 * STALE : at);
}

/* ---- a tiny JSON validator (enough for our output: objects, arrays, strings, numbers,
 * literals) ---- */

static const char *ws(const char *s)
{
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    return s;
}

static const char *value(const char *s, int depth);

static const char *string(const char *s)
{
    if (*s != '"')
        return NULL;
    for (s++; *s && *s != '"'; s++) {
        if ((unsigned char)*s < 0x20)
            return NULL;
        if (*s == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)s[i]))
                        return NULL;
                s += 4;
            } else if (!strchr("\"\\/bfnrt", *s) || !*s) {
                return NULL;
            }
        }
    }
    return *s == '"' ? s + 1 : NULL;
}

static const char *number(const char *s)
{
    const char *st = s;
    if (*s == '-')
        s++;
    if (!isdigit((unsigned char)*s))
        return NULL;
    while (isdigit((unsigned char)*s))
        s++;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            return NULL;
        while (isdigit((unsigned char)*s))
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!isdigit((unsigned char)*s))
            return NULL;
        while (isdigit((unsigned char)*s))
            s++;
    }
    return s > st ? s : NULL;
}

static const char *container(const char *s, int depth, char close, bool keyed)
{
    s = ws(s + 1);
    if (*s == close)
        return s + 1;
    for (;;) {
        if (keyed) {
            s = string(ws(s));
            if (!s)
                return NULL;
            s = ws(s);
            if (*s != ':')
                return NULL;
            s++;
        }
        s = value(s, depth + 1);
        if (!s)
            return NULL;
        s = ws(s);
        if (*s == close)
            return s + 1;
        if (*s != ',')
            return NULL;
        s++;
    }
}

static const char *value(const char *s, int depth)
{
    if (depth > 32)
        return NULL;
    s = ws(s);
    if (*s == '{')
        return container(s, depth, '}', true);
    if (*s == '[')
        return container(s, depth, ']', false);
    if (*s == '"')
        return string(s);
    if (!strncmp(s, "true", 4))
        return s + 4;
    if (!strncmp(s, "false", 5))
        return s + 5;
    if (!strncmp(s, "null", 4))
        return s + 4;
    return number(s);
}

static bool json_valid(const char *s)
{
    const char *e = value(s, 0);
    return e && *ws(e) == '\0';
}

static void test_json_validator_itself(void **state)
{
    (void)state;
    assert_true(json_valid("{\"a\":[1,-2.5e3,true,null,\"x\\\"y\"],\"b\":{}}"));
    assert_false(json_valid("{\"a\":1,}"));
    assert_false(json_valid("{\"a\":nan}"));
    assert_false(json_valid("[1 2]"));
    assert_false(json_valid("{\"a\":1}x"));
}

/* ---- parameters ---- */

static void test_defaults_valid_and_check_rejects(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    assert_null(sb_adaptive_params_check(&p));
    sb_adaptive_params q = p;
    q.detector[SB_DETECT_BURST].exit = q.detector[SB_DETECT_BURST].enter; /* no hysteresis band */
    assert_non_null(sb_adaptive_params_check(&q));
    q = p;
    q.k = 0;
    assert_non_null(sb_adaptive_params_check(&q));
    q = p;
    q.snapshots = 1;
    assert_non_null(sb_adaptive_params_check(&q));
    q = p;
    q.burst_long_ns = q.burst_short_ns;
    assert_non_null(sb_adaptive_params_check(&q));
    q = p;
    q.queue_ref = NAN;
    assert_non_null(sb_adaptive_params_check(&q));
    sb_profile b = base_profile();
    assert_null(sb_adaptive_new(&q, &b));
}

/* ---- detectors ---- */

static void test_hysteresis_holds(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    p.detector[SB_DETECT_SATURATION] = (sb_detector_params){.tau_ns = 0, .enter = 0.9, .exit = 0.6};
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    assert_non_null(a);
    const size_t n = 10;
    sb_ns t = T0;
    /* Between the thresholds from below: never enters. */
    const size_t below[] = {5, 7, 8, 6, 8, 7, 8};
    for (size_t i = 0; i < sizeof(below) / sizeof(below[0]); i++, t += TICK) {
        saturate(n, below[i], t);
        assert_int_equal(sb_adaptive_tick(a, eps, n, STALE, t) & (1u << SB_DETECT_SATURATION), 0);
        assert_false(sb_adaptive_regime(a, SB_DETECT_SATURATION));
    }
    saturate(n, 9, t);
    assert_true(sb_adaptive_tick(a, eps, n, STALE, t) & (1u << SB_DETECT_SATURATION));
    assert_true(sb_adaptive_regime(a, SB_DETECT_SATURATION));
    t += TICK;
    /* Between the thresholds from above: never leaves. */
    const size_t between[] = {7, 8, 7, 8, 7, 8, 7};
    for (size_t i = 0; i < sizeof(between) / sizeof(between[0]); i++, t += TICK) {
        saturate(n, between[i], t);
        assert_int_equal(sb_adaptive_tick(a, eps, n, STALE, t) & (1u << SB_DETECT_SATURATION), 0);
        assert_true(sb_adaptive_regime(a, SB_DETECT_SATURATION));
    }
    saturate(n, 6, t); /* at exit: leaves */
    assert_true(sb_adaptive_tick(a, eps, n, STALE, t) & (1u << SB_DETECT_SATURATION));
    assert_false(sb_adaptive_regime(a, SB_DETECT_SATURATION));
    assert_int_equal(sb_adaptive_regime_changes(a, SB_DETECT_SATURATION), 2);
    /* The change log, newest first. */
    const sb_adaptive_change *c = sb_adaptive_change_at(a, 0);
    assert_non_null(c);
    assert_false(c->entered);
    assert_int_equal(c->detector, SB_DETECT_SATURATION);
    assert_float_equal(c->signal, 0.6, 1e-9);
    c = sb_adaptive_change_at(a, 1);
    assert_true(c->entered);
    assert_float_equal(c->signal, 0.9, 1e-9);
    assert_null(sb_adaptive_change_at(a, 2));
    sb_adaptive_free(a);
}

/* The smoothed signal after a step depends on elapsed time only, not on how it was ticked. */
static void test_ema_irregular_ticks(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    p.detector[SB_DETECT_SATURATION].tau_ns = SB_MS(1000);
    sb_profile b = base_profile();
    sb_adaptive *x = sb_adaptive_new(&p, &b), *y = sb_adaptive_new(&p, &b);
    const size_t n = 4;
    saturate(n, 0, T0);
    sb_adaptive_tick(x, eps, n, STALE, T0);
    sb_adaptive_tick(y, eps, n, STALE, T0);
    assert_float_equal(sb_adaptive_signal(x, SB_DETECT_SATURATION), 0, 1e-12);
    /* Step to 1 at T0; x ticks at irregular times, y once after a second. */
    const sb_ns offsets_ms[] = {10, 250, 260, 700, 1000};
    for (size_t i = 0; i < sizeof(offsets_ms) / sizeof(offsets_ms[0]); i++) {
        sb_ns t = T0 + SB_MS(offsets_ms[i]);
        saturate(n, n, t);
        sb_adaptive_tick(x, eps, n, STALE, t);
    }
    sb_adaptive_tick(y, eps, n, STALE, T0 + SB_MS(1000));
    double sx = sb_adaptive_signal(x, SB_DETECT_SATURATION), sy = sb_adaptive_signal(y, SB_DETECT_SATURATION);
    assert_float_equal(sx, 1 - exp(-1.0), 1e-9);
    assert_float_equal(sx, sy, 1e-9);
    assert_float_equal(sb_adaptive_raw(x, SB_DETECT_SATURATION), 1, 1e-12);
    /* A tick at the same time (or earlier) moves nothing. */
    sb_adaptive_tick(x, eps, n, STALE, T0 + SB_MS(1000));
    sb_adaptive_tick(x, eps, n, STALE, T0 + SB_MS(900));
    assert_float_equal(sb_adaptive_signal(x, SB_DETECT_SATURATION), sx, 1e-12);
    sb_adaptive_free(x);
    sb_adaptive_free(y);
}

static void test_imbalance_signal(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    const size_t n = 4;
    pool_reset(n, T0);
    /* Equal loads, idle or busy: 0. */
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0), 0, 1e-12);
    for (size_t i = 0; i < n; i++)
        report(i, 3, 20, 0.5, T0);
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0), 0, 1e-12);
    /* Growing skew on endpoint 0: strictly growing signal, always in [0,1]. */
    double prev = 0;
    for (int q = 4; q <= 64; q *= 2) {
        report(0, q, 20, 0.5, T0);
        double s = sb_adaptive_imbalance_of(&p, eps, n, STALE, T0);
        assert_true(s > prev);
        assert_true(s >= 0 && s <= 1);
        prev = s;
    }
    /* Everything on one endpoint: the maximum, 1, whatever n. */
    for (size_t m = 2; m <= 8; m++) {
        pool_reset(m, T0);
        report(0, 10, 30, 0.9, T0);
        eps[0].in_flight = 40;
        assert_float_equal(sb_adaptive_imbalance_of(&p, eps, m, STALE, T0), 1, 1e-9);
    }
    /* The hot-prefix case in the defaults' comment: a queue of 10 against 1 reads ~0.69. */
    pool_reset(n, T0);
    report(0, 10, 0, 0, T0);
    for (size_t i = 1; i < n; i++)
        report(i, 1, 0, 0, T0);
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0), 0.6928, 1e-3);
    /* An idle pool with one request somewhere is not an imbalance worth acting on. */
    pool_reset(n, T0);
    report(0, 0, 1, 0.01, T0);
    eps[0].in_flight = 1;
    assert_true(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0) < 0.1);
    /* ...thanks to the spread floor: without it the mean floor alone reads it above 0.1. */
    sb_adaptive_params nofloor = p;
    nofloor.spread_floor = 0;
    assert_true(sb_adaptive_imbalance_of(&nofloor, eps, n, STALE, T0) > 0.1);
    /* A lightly loaded pool whose load sits on one endpoint does read as imbalanced: 13
     * running there (a hot prefix's holder at 10 requests/s), nothing elsewhere. */
    pool_reset(n, T0);
    report(0, 0, 13, 0.2, T0);
    eps[0].in_flight = 13;
    assert_true(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0) > 0.5);
    /* Stale and unavailable endpoints are left out; fewer than two left: 0. */
    pool_reset(n, T0);
    report(0, 50, 0, 0, T0 - SB_MS(5000)); /* stale and hot */
    eps[1].draining = true;
    eps[1].report.waiting = 50;
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0), 0, 1e-12);
    eps[3].active_down = true;
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, n, STALE, T0), 0, 1e-12);
    assert_float_equal(sb_adaptive_imbalance_of(&p, eps, 0, STALE, T0), 0, 1e-12);
}

static void test_saturation_signal(void **state)
{
    (void)state;
    const size_t n = 4;
    pool_reset(n, T0);
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 0, 1e-12);
    report(0, 6, 0, 0, T0);    /* queue over 5 */
    report(1, 0, 0, 0.85, T0); /* KV over 0.8 */
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 0.5, 1e-12);
    /* The router's own accounting counts: requests sent since the report queue up. */
    eps[2].sent_since_report = 6;
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 0.75, 1e-12);
    /* Stale counts as saturated, however idle its last report. */
    pool_reset(n, T0);
    report(3, 0, 0, 0, T0 - SB_MS(2000));
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 0.25, 1e-12);
    eps[2].report_ns = 0; /* never reported: stale */
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 0.5, 1e-12);
    /* Ejected counts as saturated; draining is out of the count altogether. */
    pool_reset(n, T0);
    eps[0].health = SB_HEALTH_EJECTED;
    eps[0].ejected_until = T0 + SB_MS(1000);
    eps[1].draining = true;
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 1.0 / 3, 1e-12);
    /* Nowhere to send: full saturation. */
    assert_float_equal(sb_adaptive_saturation_of(eps, 0, 5, 0.8, STALE, T0), 1, 1e-12);
    for (size_t i = 0; i < n; i++)
        eps[i].draining = true;
    assert_float_equal(sb_adaptive_saturation_of(eps, n, 5, 0.8, STALE, T0), 1, 1e-12);
}

/* The adaptive object takes its saturation thresholds from the base profile by default. */
static void test_saturation_thresholds_from_profile(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    p.detector[SB_DETECT_SATURATION].tau_ns = 0;
    sb_profile b = base_profile();
    b.queue_threshold = 20;
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    pool_reset(2, T0);
    report(0, 10, 0, 0, T0);
    sb_adaptive_tick(a, eps, 2, STALE, T0);
    assert_float_equal(sb_adaptive_raw(a, SB_DETECT_SATURATION), 0, 1e-12);
    sb_adaptive_free(a);
    p.queue_threshold = 5;
    a = sb_adaptive_new(&p, &b);
    sb_adaptive_tick(a, eps, 2, STALE, T0);
    assert_float_equal(sb_adaptive_raw(a, SB_DETECT_SATURATION), 0.5, 1e-12);
    sb_adaptive_free(a);
}

/* Ticks for `secs` seconds at `rate` arrivals per second (100 ms ticks, whole arrivals). */
static sb_ns run_rate(sb_adaptive *a, sb_ns t, double secs, double rate, bool *entered, bool *left)
{
    double owed = 0;
    for (int i = 0; i < (int)(secs * 10 + 0.5); i++) {
        owed += rate / 10;
        uint32_t k = (uint32_t)owed;
        owed -= k;
        sb_adaptive_arrivals(a, k);
        t += TICK;
        unsigned ch = sb_adaptive_tick(a, eps, 4, STALE, t);
        if (ch & (1u << SB_DETECT_BURST)) {
            if (sb_adaptive_regime(a, SB_DETECT_BURST))
                *entered = true;
            else
                *left = true;
        }
    }
    return t;
}

static void test_burst_step_and_decay(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    pool_reset(4, T0);
    bool entered = false, left = false;
    /* Start-up at a high steady rate is not a burst. */
    sb_ns t = T0;
    sb_adaptive_arrivals(a, 1000); /* before the first tick: no interval, discarded */
    sb_adaptive_tick(a, eps, 4, STALE, t);
    t = run_rate(a, t, 120, 20, &entered, &left);
    assert_false(entered);
    assert_true(sb_adaptive_signal(a, SB_DETECT_BURST) < 0.05);
    /* Step to 4x: a burst within a few seconds, raw signal saturating. */
    t = run_rate(a, t, 3, 80, &entered, &left);
    assert_true(entered);
    assert_true(sb_adaptive_regime(a, SB_DETECT_BURST));
    assert_true(sb_adaptive_raw(a, SB_DETECT_BURST) > 0.9);
    /* Staying at the new rate, the long-run average catches up and the burst ends. */
    t = run_rate(a, t, 240, 80, &entered, &left);
    assert_true(left);
    assert_false(sb_adaptive_regime(a, SB_DETECT_BURST));
    assert_true(sb_adaptive_signal(a, SB_DETECT_BURST) < 0.2);
    /* Irregular ticks see the same steady rate: no burst from the tick pattern itself. */
    entered = left = false;
    for (int i = 0; i < 100; i++) {
        sb_ns dt = SB_MS(i % 3 == 0 ? 50 : 250);
        sb_adaptive_arrivals(a, (uint32_t)(80 * (double)dt / SB_NS_PER_S));
        t += dt;
        sb_adaptive_tick(a, eps, 4, STALE, t);
    }
    assert_false(sb_adaptive_regime(a, SB_DETECT_BURST));
    assert_true(sb_adaptive_signal(a, SB_DETECT_BURST) < 0.05);
    /* A quiet pool waking up (0.2/s -> 1.5/s) is measured against the 1/s floor, not 0.2/s:
     * half of a full burst's ratio, not seven times it... */
    sb_adaptive_free(a);
    a = sb_adaptive_new(&p, &b);
    t = T0;
    sb_adaptive_tick(a, eps, 4, STALE, t);
    entered = left = false;
    t = run_rate(a, t, 120, 0.2, &entered, &left);
    t = run_rate(a, t, 5, 1.5, &entered, &left);
    assert_false(entered);
    /* ...but 0.2/s -> 10/s is. */
    t = run_rate(a, t, 5, 10, &entered, &left);
    assert_true(entered);
    sb_adaptive_free(a);
}

static void test_arrivals_kept_over_zero_interval(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    p.detector[SB_DETECT_BURST].tau_ns = 0;
    sb_profile b = base_profile();
    sb_adaptive *x = sb_adaptive_new(&p, &b), *y = sb_adaptive_new(&p, &b);
    pool_reset(4, T0);
    sb_ns t = T0;
    sb_adaptive_tick(x, eps, 4, STALE, t);
    sb_adaptive_tick(y, eps, 4, STALE, t);
    for (int i = 0; i < 50; i++) {
        t += TICK;
        sb_adaptive_arrivals(x, 1);
        sb_adaptive_arrivals(y, 1);
        sb_adaptive_tick(x, eps, 4, STALE, t);
        sb_adaptive_tick(y, eps, 4, STALE, t);
    }
    /* x gets 30 arrivals in two batches with a zero-length tick between; y in one. */
    t += TICK;
    sb_adaptive_arrivals(x, 10);
    sb_adaptive_tick(x, eps, 4, STALE, t - TICK);
    sb_adaptive_arrivals(x, 20);
    sb_adaptive_arrivals(y, 30);
    sb_adaptive_tick(x, eps, 4, STALE, t);
    sb_adaptive_tick(y, eps, 4, STALE, t);
    assert_true(sb_adaptive_raw(x, SB_DETECT_BURST) > 0);
    assert_float_equal(sb_adaptive_raw(x, SB_DETECT_BURST), sb_adaptive_raw(y, SB_DETECT_BURST), 1e-12);
    sb_adaptive_free(x);
    sb_adaptive_free(y);
}

/* ---- configurator ---- */

static void test_sigmoid_monotonic_and_bounded(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    const double nus[] = {0.5, 1, 2};
    const double los[] = {0, 0.3, 0.6};
    for (size_t a = 0; a < 3; a++) {
        for (size_t l = 0; l < 3; l++) {
            p.nu = nus[a];
            double lo = los[l], prev = -1;
            assert_float_equal(sb_adaptive_share_at(&p, lo, 0), lo, 1e-12);
            assert_float_equal(sb_adaptive_share_at(&p, lo, 1), p.share_hi, 1e-12);
            for (int i = 0; i <= 1000; i++) {
                double s = sb_adaptive_share_at(&p, lo, i / 1000.0);
                assert_true(s >= prev);
                assert_true(s >= lo - 1e-12 && s <= p.share_hi + 1e-12);
                prev = s;
            }
        }
    }
    p = sb_adaptive_params_default();
    /* The midpoint is where half the move is done (nu = 1): exactly for a midpoint of 0.5,
     * where the rescaling to [0,1] is symmetric. */
    p.x0 = 0.5;
    assert_float_equal(sb_adaptive_share_at(&p, 0.6, 0.5), 0.6 + 0.3 * 0.5, 1e-9);
    /* The default midpoint sits low (a mild imbalance moves weight): by x = 0.3 most of the
     * move is done. */
    p = sb_adaptive_params_default();
    assert_true(sb_adaptive_share_at(&p, 0.6, 0.3) > 0.6 + 0.3 * 0.8);
    assert_true(sb_adaptive_share_at(&p, 0.6, 0.02) < 0.6 + 0.3 * 0.2);
    /* x outside [0,1] is clamped; NaN reads as 0. */
    assert_float_equal(sb_adaptive_share_at(&p, 0.6, -3), 0.6, 1e-12);
    assert_float_equal(sb_adaptive_share_at(&p, 0.6, 7), 0.9, 1e-12);
    assert_float_equal(sb_adaptive_share_at(&p, 0.6, NAN), 0.6, 1e-12);
    /* lo above hi: weight never moves toward affinity with imbalance; it stays at lo. */
    assert_float_equal(sb_adaptive_share_at(&p, 0.95, 0), 0.95, 1e-12);
    assert_float_equal(sb_adaptive_share_at(&p, 0.95, 1), 0.95, 1e-12);
}

/* Drives the imbalance signal (no smoothing) to a skew on endpoint 0 and ticks. */
static unsigned skew_tick(sb_adaptive *a, double q0, sb_ns t)
{
    pool_reset(4, t);
    report(0, q0, 0, 0, t);
    for (size_t i = 1; i < 4; i++)
        report(i, 1, 0, 0, t);
    return sb_adaptive_tick(a, eps, 4, STALE, t);
}

static sb_adaptive_params no_smoothing(void) { return sb_test_adaptive_unsmoothed(); }

static void test_weights_conserve_total_and_ratios(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    /* Generation 1, balanced pool: the base's own weights. */
    const sb_profile *g1 = sb_adaptive_profile(a);
    assert_int_equal(sb_adaptive_generation(a), 1);
    assert_string_equal(g1->name, "test~adaptive.1");
    for (size_t i = 0; i < b.n_scorers; i++)
        assert_float_equal(g1->scorers[i].weight, b.scorers[i].weight, 1e-12);
    assert_float_equal(sb_adaptive_share(a), 0.6, 1e-12);
    sb_ns t = T0;
    double prev_share = 0;
    for (double q = 1; q <= 40; q += 1.5, t += TICK) {
        skew_tick(a, q, t);
        const sb_profile *cur = sb_adaptive_profile(a);
        double share = sb_adaptive_share(a);
        assert_true(share >= prev_share - 1e-12); /* more skew, more distribution */
        prev_share = share;
        assert_float_equal(weight_sum(cur), 10, 1e-9);
        assert_float_equal(sb_adaptive_category_weight(a, SB_DISTRIBUTION), 10 * share, 1e-9);
        assert_float_equal(sb_adaptive_category_weight(a, SB_AFFINITY), 10 * (1 - share), 1e-9);
        /* Ratios within a category are the base's: 3:1 and 2:4. */
        assert_float_equal(cur->scorers[0].weight, 3 * cur->scorers[2].weight, 1e-9);
        assert_float_equal(2 * cur->scorers[3].weight, 4 * cur->scorers[1].weight, 1e-9);
        /* Everything else is the base's. */
        assert_int_equal(cur->n_scorers, b.n_scorers);
        assert_float_equal(cur->queue_threshold, b.queue_threshold, 0);
    }
    assert_true(prev_share > 0.85); /* heavy skew: near hi */
    assert_true(sb_adaptive_regime(a, SB_DETECT_IMBALANCE));
    /* Balance returns: so do the base weights. */
    skew_tick(a, 1, t);
    for (size_t i = 0; i < b.n_scorers; i++)
        assert_float_equal(sb_adaptive_profile(a)->scorers[i].weight, b.scorers[i].weight, 1e-9);
    assert_false(sb_adaptive_regime(a, SB_DETECT_IMBALANCE));
    sb_adaptive_free(a);
}

static void test_absent_category_stays_absent(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    sb_profile b = base_profile();
    b.n_scorers = 0;
    b.scorers[b.n_scorers++] = (sb_weighted_scorer){&dist_a, 2};
    b.scorers[b.n_scorers++] = (sb_weighted_scorer){&dist_b, 1};
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    for (double q = 1; q <= 40; q += 3) {
        assert_int_equal(skew_tick(a, q, T0 + (sb_ns)q * TICK) & SB_ADAPTIVE_PUBLISHED, 0);
        assert_float_equal(sb_adaptive_category_weight(a, SB_AFFINITY), 0, 0);
        assert_float_equal(sb_adaptive_category_weight(a, SB_DISTRIBUTION), 3, 1e-12);
    }
    assert_true(sb_adaptive_signal(a, SB_DETECT_IMBALANCE) > 0.5);
    assert_int_equal(sb_adaptive_generation(a), 1);
    assert_float_equal(sb_adaptive_share(a), 1, 1e-12);
    sb_adaptive_free(a);
    /* Affinity only: likewise; and no scorer at all. */
    b.n_scorers = 0;
    b.scorers[b.n_scorers++] = (sb_weighted_scorer){&aff_a, 1};
    a = sb_adaptive_new(&p, &b);
    skew_tick(a, 40, T0);
    assert_float_equal(sb_adaptive_profile(a)->scorers[0].weight, 1, 0);
    assert_float_equal(sb_adaptive_share(a), 0, 0);
    sb_adaptive_free(a);
    b.n_scorers = 0;
    a = sb_adaptive_new(&p, &b);
    assert_int_equal(skew_tick(a, 40, T0) & SB_ADAPTIVE_PUBLISHED, 0);
    sb_adaptive_free(a);
}

static void test_explicit_lo(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    p.share_lo = 0.2;
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    assert_float_equal(sb_adaptive_category_weight(a, SB_DISTRIBUTION), 2, 1e-9);
    assert_float_equal(sb_adaptive_category_weight(a, SB_AFFINITY), 8, 1e-9);
    sb_adaptive_free(a);
}

static void test_snapshots_immutable_and_ring_lifetime(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    p.snapshots = 4;
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    const sb_profile *held[8];
    sb_profile copy[8];
    held[0] = sb_adaptive_profile(a);
    copy[0] = *held[0];
    /* Alternate skews so that every tick publishes. */
    sb_ns t = T0;
    for (int g = 1; g < 8; g++, t += TICK) {
        unsigned ch = skew_tick(a, g % 2 ? 30 : 1, t);
        assert_true(ch & SB_ADAPTIVE_PUBLISHED);
        assert_int_equal(sb_adaptive_generation(a), (uint64_t)g + 1);
        held[g] = sb_adaptive_profile(a);
        copy[g] = *held[g];
        /* Each held snapshot is intact for snapshots - 1 publications after it was replaced
         * (so, from when it was taken: the current one plus snapshots - 1 older ones). */
        for (int k = g; k >= 0 && g - k <= (int)p.snapshots - 1; k--)
            assert_memory_equal(held[k], &copy[k], sizeof(sb_profile));
        assert_ptr_not_equal(held[g], held[g - 1]);
    }
    /* Names carry the generation: a decision says which weights it ran with. */
    assert_string_equal(held[7]->name, "test~adaptive.8");
    /* The ring is exactly `snapshots` deep: generation 8 reuses generation 4's slot. */
    assert_ptr_equal(held[7], held[3]);
    /* The base profile given was copied, never written. */
    sb_profile b2 = base_profile();
    assert_memory_equal(&b, &b2, sizeof(b));
    sb_adaptive_free(a);
}

static void test_no_publication_without_change(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    pool_reset(4, T0);
    sb_ns t = T0;
    for (int i = 0; i < 200; i++, t += TICK) {
        for (size_t e = 0; e < 4; e++)
            report(e, 2, 10, 0.4, t);
        assert_int_equal(sb_adaptive_tick(a, eps, 4, STALE, t), 0);
    }
    assert_int_equal(sb_adaptive_generation(a), 1);
    /* A skew small enough to move weights by less than epsilon publishes nothing either. */
    report(0, 2.3, 10, 0.4, t);
    double before = sb_adaptive_category_weight(a, SB_DISTRIBUTION);
    assert_int_equal(sb_adaptive_tick(a, eps, 4, STALE, t) & SB_ADAPTIVE_PUBLISHED, 0);
    assert_true(sb_adaptive_sample_at(a, 0)->share * 10 > before); /* computed, not published */
    assert_int_equal(sb_adaptive_generation(a), 1);
    sb_adaptive_free(a);
}

static void test_publication_rate_limited(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    p.min_publish_ns = SB_MS(500);
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    sb_ns t = T0;
    int published = 0;
    /* Weights flip every tick for 3 s: at most one publication per 500 ms. */
    for (int i = 0; i < 30; i++, t += TICK)
        published += (skew_tick(a, i % 2 ? 30 : 1, t) & SB_ADAPTIVE_PUBLISHED) != 0;
    assert_true(published >= 5 && published <= 7);
    /* The latest weights are published once the interval has passed. */
    t += SB_MS(500);
    skew_tick(a, 30, t);
    assert_float_equal(sb_adaptive_share(a), sb_adaptive_sample_at(a, 0)->share, 1e-12);
    sb_adaptive_free(a);
}

static void test_set_base_publishes_at_once(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    const sb_profile *old = sb_adaptive_profile(a);
    sb_profile nb = base_profile();
    strcpy(nb.name, "other");
    nb.scorers[1].weight = 6; /* total 14, share 10/14 */
    sb_adaptive_set_base(a, &nb, T0);
    assert_int_equal(sb_adaptive_generation(a), 2);
    assert_string_equal(sb_adaptive_profile(a)->name, "other~adaptive.2");
    assert_float_equal(weight_sum(sb_adaptive_profile(a)), 14, 1e-9);
    assert_float_equal(old->scorers[1].weight, 2, 0); /* the old snapshot is untouched */
    sb_adaptive_free(a);
}

static void test_long_base_name_truncated(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    memset(b.name, 'x', sizeof(b.name) - 1);
    b.name[sizeof(b.name) - 1] = '\0';
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    const char *name = sb_adaptive_profile(a)->name;
    assert_true(strlen(name) < SB_PROFILE_NAME_MAX);
    assert_non_null(strstr(name, "~adaptive.1"));
    sb_adaptive_free(a);
}

/* ---- end to end, history, rendering, determinism ---- */

/* A hot endpoint builds a queue: the imbalance regime enters, distribution takes over; the
 * queue drains: weights return to the base. Default parameters throughout. */
static void test_hot_endpoint_scenario(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    sb_ns t = T0;
    int changes = 0;
    for (int i = 0; i < 50; i++, t += TICK)
        changes += (skew_tick(a, 1, t) & (1u << SB_DETECT_IMBALANCE)) != 0;
    assert_int_equal(changes, 0);
    for (int i = 0; i < 50; i++, t += TICK)
        changes += (skew_tick(a, 12, t) & (1u << SB_DETECT_IMBALANCE)) != 0;
    assert_int_equal(changes, 1);
    assert_true(sb_adaptive_regime(a, SB_DETECT_IMBALANCE));
    assert_true(sb_adaptive_share(a) > 0.85);
    uint64_t gen_hot = sb_adaptive_generation(a);
    assert_true(gen_hot > 1);
    for (int i = 0; i < 100; i++, t += TICK)
        changes += (skew_tick(a, 1, t) & (1u << SB_DETECT_IMBALANCE)) != 0;
    assert_int_equal(changes, 2);
    assert_false(sb_adaptive_regime(a, SB_DETECT_IMBALANCE));
    /* Back to the base, to within the publication threshold (epsilon: a move smaller than
     * 1% of the total weight per scorer is not published). */
    assert_float_equal(sb_adaptive_share(a), 0.6, 0.02);
    /* Smoothing and epsilon keep the publications few: a handful per transition. */
    assert_true(sb_adaptive_generation(a) < 30);
    sb_adaptive_free(a);
}

/* A saturated, balanced pool leans to affinity (share_saturated): every endpoint full, so
 * spreading shortens no queue while hits save prefill. Imbalance still moves weight back to
 * distribution on top of it; negative turns it off. */
static void test_saturation_leans_to_affinity(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    p.share_saturated = 0.3;
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    sb_ns t = T0;
    assert_int_equal(skew_tick(a, 1, t), 0);
    assert_float_equal(sb_adaptive_share(a), 0.6, 1e-9);
    /* Every endpoint queueing 9 (threshold 5): saturated and even. */
    pool_reset(4, t += TICK);
    for (size_t i = 0; i < 4; i++)
        report(i, 9, 0, 0, t);
    sb_adaptive_tick(a, eps, 4, STALE, t);
    assert_float_equal(sb_adaptive_signal(a, SB_DETECT_SATURATION), 1, 1e-9);
    assert_float_equal(sb_adaptive_share(a), 0.3, 1e-9);
    /* Saturated and uneven: distribution takes over again. */
    pool_reset(4, t += TICK);
    report(0, 40, 0, 0, t);
    for (size_t i = 1; i < 4; i++)
        report(i, 9, 0, 0, t);
    sb_adaptive_tick(a, eps, 4, STALE, t);
    assert_true(sb_adaptive_share(a) > 0.6);
    sb_adaptive_free(a);
    /* Off: saturation leaves the weights alone. */
    p.share_saturated = -1;
    a = sb_adaptive_new(&p, &b);
    pool_reset(4, t += TICK);
    for (size_t i = 0; i < 4; i++)
        report(i, 9, 0, 0, t);
    sb_adaptive_tick(a, eps, 4, STALE, t);
    assert_float_equal(sb_adaptive_share(a), 0.6, 1e-9);
    sb_adaptive_free(a);
    /* Out of range is refused. */
    p.share_saturated = 1.5;
    assert_non_null(sb_adaptive_params_check(&p));
}

/* A reload's new parameters apply with the base it sets: one publication, not two. */
static void test_set_params_applies_with_next_publication(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    assert_int_equal(sb_adaptive_generation(a), 1);
    assert_float_equal(sb_adaptive_share(a), 0.6, 1e-9);
    p.share_lo = 0.3;
    sb_adaptive_set_params(a, &p, T0);
    assert_int_equal(sb_adaptive_generation(a), 1);
    assert_float_equal(sb_adaptive_share(a), 0.6, 1e-9);
    sb_adaptive_set_base(a, &b, T0);
    assert_int_equal(sb_adaptive_generation(a), 2);
    assert_float_equal(sb_adaptive_share(a), 0.3, 1e-9);
    /* Parameters that fail the check are ignored. */
    sb_adaptive_params bad = p;
    bad.share_lo = 0.5;
    bad.k = -1;
    sb_adaptive_set_params(a, &bad, T0);
    sb_adaptive_set_base(a, &b, T0);
    assert_float_equal(sb_adaptive_share(a), 0.3, 1e-9);
    /* Names: every listed name sets something; unknown names and negative durations fail. */
    sb_adaptive_params q = sb_adaptive_params_default();
    assert_int_equal(sb_adaptive_param_set(&q, "x0", 0.25), 0);
    assert_float_equal(q.x0, 0.25, 0);
    assert_int_equal(sb_adaptive_param_set(&q, "saturation_tau_ms", 40), 0);
    assert_int_equal(q.detector[SB_DETECT_SATURATION].tau_ns, SB_MS(40));
    assert_int_equal(sb_adaptive_param_set(&q, "x1", 1), -1);
    assert_int_equal(sb_adaptive_param_set(&q, "min_publish_ms", -1), -2);
    char names[1024], small[16];
    size_t len = sb_adaptive_param_list(names, sizeof(names));
    assert_int_equal(len, strlen(names));
    assert_non_null(strstr(names, "share_saturated"));
    assert_non_null(strstr(names, "burst_min_rate")); /* the whole table, not a prefix */
    /* A small buffer is truncated and says how much it needed. */
    assert_int_equal(sb_adaptive_param_list(small, sizeof(small)), len);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, names, sizeof(small) - 1);
    sb_adaptive_free(a);
}

static void test_history_bounded_newest_first(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    p.history = 5;
    p.changes = 2;
    sb_profile b = base_profile();
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    assert_null(sb_adaptive_sample_at(a, 0));
    sb_ns t = T0;
    for (int i = 0; i < 12; i++, t += TICK)
        skew_tick(a, i % 2 ? 30 : 1, t);
    for (size_t i = 0; i < 5; i++) {
        const sb_adaptive_sample *s = sb_adaptive_sample_at(a, i);
        assert_non_null(s);
        assert_int_equal(s->now, t - TICK * (i + 1));
        assert_float_equal(s->affinity + s->distribution, 10, 1e-9);
    }
    assert_null(sb_adaptive_sample_at(a, 5));
    /* Newest sample: skewed (i = 11), so the imbalance regime is on and recorded. */
    assert_true(sb_adaptive_sample_at(a, 0)->regimes & (1u << SB_DETECT_IMBALANCE));
    assert_false(sb_adaptive_sample_at(a, 1)->regimes & (1u << SB_DETECT_IMBALANCE));
    assert_int_equal(sb_adaptive_sample_at(a, 0)->generation, sb_adaptive_generation(a));
    /* 11 changes happened (enter at 1, leave at 2, ...); 2 kept, all counted. */
    assert_int_equal(sb_adaptive_regime_changes(a, SB_DETECT_IMBALANCE), 11);
    assert_non_null(sb_adaptive_change_at(a, 1));
    assert_null(sb_adaptive_change_at(a, 2));
    assert_true(sb_adaptive_change_at(a, 0)->entered);
    assert_int_equal(sb_adaptive_change_at(a, 0)->now, t - TICK);
    sb_adaptive_free(a);
}

static char *render(const sb_adaptive *a)
{
    sb_buf b = {0};
    assert_int_equal(sb_adaptive_render(a, &b), 0);
    return b.data;
}

static void test_render_valid_json(void **state)
{
    (void)state;
    sb_adaptive_params p = no_smoothing();
    sb_profile b = base_profile();
    strcpy(b.name, "we\"ird\\name");
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    char *s = render(a); /* before any tick */
    assert_true(json_valid(s));
    assert_non_null(strstr(s, "\"history\":[]"));
    assert_non_null(strstr(s, "\"changes\":[]"));
    sb_free(s);
    sb_ns t = T0;
    for (int i = 0; i < 6; i++, t += TICK)
        skew_tick(a, i % 2 ? 30 : 1, t);
    saturate(4, 4, t);
    sb_adaptive_tick(a, eps, 4, STALE, t);
    s = render(a);
    assert_true(json_valid(s));
    assert_non_null(strstr(s, "\"base\":\"we\\\"ird\\\\name\""));
    assert_non_null(strstr(s, "\"name\":\"imbalance\""));
    assert_non_null(strstr(s, "\"name\":\"burst\""));
    assert_non_null(strstr(s, "\"name\":\"saturation\",\"raw\":1.0000,\"signal\":1.0000,\"regime\":true"));
    assert_non_null(strstr(s, "\"detector\":\"saturation\",\"event\":\"entered\""));
    assert_non_null(strstr(s, "\"detector\":\"imbalance\",\"event\":\"left\""));
    assert_non_null(strstr(s, "{\"name\":\"aff-a\",\"category\":\"affinity\",\"weight\":"));
    assert_non_null(strstr(s, "\"category\":\"distribution\""));
    assert_non_null(strstr(s, "\"regimes\":[\"saturation\"]"));
    assert_non_null(strstr(s, "\"sigmoid\":{\"x\":"));
    sb_free(s);
    sb_adaptive_free(a);
}

/* Same ticks, same everything: two instances render byte-identical explanations. */
static void test_deterministic(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    sb_adaptive *x = sb_adaptive_new(&p, &b), *y = sb_adaptive_new(&p, &b);
    sb_ns t = T0;
    uint64_t rng = 7;
    for (int i = 0; i < 300; i++) {
        t += SB_MS(50 + sb_rand_next(&rng) % 200);
        for (size_t e = 0; e < 4; e++)
            report(e, (double)(sb_rand_next(&rng) % (e == 0 ? 20 : 4)), (double)(sb_rand_next(&rng) % 30),
                   (double)(sb_rand_next(&rng) % 100) / 100, t);
        uint32_t k = (uint32_t)(sb_rand_next(&rng) % (i > 150 && i < 180 ? 40 : 5));
        sb_adaptive_arrivals(x, k);
        sb_adaptive_arrivals(y, k);
        assert_int_equal(sb_adaptive_tick(x, eps, 4, STALE, t), sb_adaptive_tick(y, eps, 4, STALE, t));
    }
    char *sx = render(x), *sy = render(y);
    assert_string_equal(sx, sy);
    assert_true(json_valid(sx));
    assert_true(sb_adaptive_generation(x) > 1);
    sb_free(sx);
    sb_free(sy);
    sb_adaptive_free(x);
    sb_adaptive_free(y);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    sb_adaptive_params p = sb_adaptive_params_default();
    sb_profile b = base_profile();
    for (long n = 0; n < 4; n++) {
        sb_alloc_fail_after(n);
        assert_null(sb_adaptive_new(&p, &b));
    }
    sb_alloc_fail_after(4);
    sb_adaptive *a = sb_adaptive_new(&p, &b);
    sb_alloc_fail_after(-1);
    assert_non_null(a);
    sb_adaptive_free(a);
    sb_adaptive_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_validator_itself),
        cmocka_unit_test(test_defaults_valid_and_check_rejects),
        cmocka_unit_test(test_hysteresis_holds),
        cmocka_unit_test(test_ema_irregular_ticks),
        cmocka_unit_test(test_imbalance_signal),
        cmocka_unit_test(test_saturation_signal),
        cmocka_unit_test(test_saturation_thresholds_from_profile),
        cmocka_unit_test(test_burst_step_and_decay),
        cmocka_unit_test(test_arrivals_kept_over_zero_interval),
        cmocka_unit_test(test_sigmoid_monotonic_and_bounded),
        cmocka_unit_test(test_weights_conserve_total_and_ratios),
        cmocka_unit_test(test_absent_category_stays_absent),
        cmocka_unit_test(test_explicit_lo),
        cmocka_unit_test(test_snapshots_immutable_and_ring_lifetime),
        cmocka_unit_test(test_no_publication_without_change),
        cmocka_unit_test(test_publication_rate_limited),
        cmocka_unit_test(test_set_base_publishes_at_once),
        cmocka_unit_test(test_long_base_name_truncated),
        cmocka_unit_test(test_hot_endpoint_scenario),
        cmocka_unit_test(test_saturation_leans_to_affinity),
        cmocka_unit_test(test_set_params_applies_with_next_publication),
        cmocka_unit_test(test_history_bounded_newest_first),
        cmocka_unit_test(test_render_valid_json),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
