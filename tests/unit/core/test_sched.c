/* Tests core/sched: a decision end to end (filters, weighted scorers, picker), soft and hard
 * filters, exclusion, staleness in the reason, the JSON explanation, the burst that report
 * plus approximation must spread, and determinism. Hand-built endpoints, hand-driven clock. */
#include "sb_test.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>

#include "base/buf.h"
#include "core/explain.h"
#include "core/sched.h"

#define T0 SB_MS(10000)
#define STALE SB_MS(1000)
#define MAXN 16

static sb_endpoint eps[MAXN];
static sb_candidate cands[MAXN], live[MAXN];
static double scores[MAXN * SB_MAX_SCORERS];
static sb_decision d;
static uint64_t rng;
static sb_sched_ctx ctx;
static sb_profile prof;

static void report(size_t i, double waiting, double kv, sb_ns at)
{
    sb_endpoint_report r = {.have_waiting = true, .waiting = waiting, .have_running = true, .have_kv = true,
                            .kv_usage = kv, .requests_total = -1};
    sb_endpoint_report_set(&eps[i], &r, SB_REPORT_SCRAPE, at);
}

/* n fresh idle endpoints, a context at T0 and an empty profile (max-score picker). */
static void setup(size_t n)
{
    memset(eps, 0, sizeof(eps));
    for (size_t i = 0; i < n; i++) {
        eps[i].index = (uint32_t)i;
        report(i, 0, 0, T0);
    }
    d = (sb_decision){.cands = cands, .live = live, .scores = scores};
    sb_profile_init(&prof, "test");
    rng = 42;
    ctx = (sb_sched_ctx){.now = T0, .stale_ns = STALE, .rng = &rng, .profile = &prof};
}

static void add_filter(const char *name)
{
    prof.filters[prof.n_filters] = sb_filter_find(name);
    assert_non_null(prof.filters[prof.n_filters]);
    prof.n_filters++;
}

static void add_scorer(const char *name, double w)
{
    const sb_scorer_def *s = sb_scorer_find(name);
    assert_non_null(s);
    prof.scorers[prof.n_scorers++] = (sb_weighted_scorer){s, w};
}

static int run(const sb_sched_request *req, size_t n) { return sb_sched_run(&ctx, req, eps, n, &d); }

static const sb_sched_request base_req = {.adapter = -1};

static double score_of(size_t scorer, size_t ep)
{
    assert_true(cands[ep].slot >= 0);
    return d.scores[scorer * d.n_live + (size_t)cands[ep].slot];
}

/* ---- a minimal JSON validator: enough to say the explanation parses ---- */

static const char *json_value(const char *p);

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p != '"')
        return NULL;
    for (p++; *p && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\' && !*++p)
            return NULL;
    }
    return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p)
{
    char *end;
    if (!(*p == '-' || isdigit((unsigned char)*p)))
        return NULL;
    double v = strtod(p, &end);
    return end > p && isfinite(v) ? end : NULL;
}

static const char *json_list(const char *p, char close, bool keyed)
{
    p = ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (keyed) {
            if (!(p = json_string(ws(p))))
                return NULL;
            p = ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = json_value(p)))
            return NULL;
        p = ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *json_value(const char *p)
{
    p = ws(p);
    switch (*p) {
    case '{': return json_list(p, '}', true);
    case '[': return json_list(p, ']', false);
    case '"': return json_string(p);
    case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
    default: return json_number(p);
    }
}

static bool json_valid(const char *s)
{
    const char *end = json_value(s);
    return end && *ws(end) == 0;
}

static void test_json_validator(void **state)
{
    (void)state;
    assert_true(json_valid("{\"a\":[1,2.5,-3e2,true,false,null,\"x\\\"y\"],\"b\":{}}"));
    assert_false(json_valid("{\"a\":1,}"));
    assert_false(json_valid("{\"a\":nan}"));
    assert_false(json_valid("{\"a\":1"));
    assert_false(json_valid("[1 2]"));
}

/* ---- decisions ---- */

static void test_weighted_total(void **state)
{
    (void)state;
    setup(3);
    add_scorer("queue", 3);
    add_scorer("in-flight", 1);
    report(0, 0, 0, T0), report(1, 4, 0, T0), report(2, 8, 0, T0);
    /* in-flight: endpoint 0 busiest, 2 idle */
    for (int i = 0; i < 2; i++)
        sb_endpoint_dispatch(&eps[0], 0, T0);
    sb_endpoint_dispatch(&eps[1], 0, T0);
    /* after dispatch: waiting 2, 5, 8 -> queue 1, 0.5, 0 (range 6);
     * in-flight 2, 1, 0 -> under the minimum range 4: 0.5, 0.75, 1 */
    int k = run(&base_req, 3);
    assert_true(k >= 0);
    const double q[] = {1, 0.5, 0}, f[] = {0.5, 0.75, 1};
    for (size_t i = 0; i < 3; i++) {
        assert_true(fabs(score_of(0, i) - q[i]) < 1e-12);
        assert_true(fabs(score_of(1, i) - f[i]) < 1e-12);
        assert_true(fabs(cands[i].total - (3 * q[i] + f[i]) / 4) < 1e-12);
    }
    assert_int_equal(k, 0);
    assert_int_equal(d.picked, 0);
    assert_string_equal(d.reason, "max-score");
    assert_int_equal(d.n_live, 3);
    assert_int_equal(d.n, 3);
    assert_ptr_equal(d.profile, &prof);
    /* Weights move the decision: in-flight now dominates. */
    prof.scorers[1].weight = 10;
    assert_int_equal(run(&base_req, 3), 2);
    /* No scorer: every total 0, the picker still chooses. */
    setup(2);
    assert_true(run(&base_req, 2) >= 0);
    assert_true(cands[0].total == 0 && cands[1].total == 0);
}

static void test_retry_excluded(void **state)
{
    (void)state;
    setup(3);
    add_filter("healthy");
    add_scorer("queue", 1);
    report(1, 0, 0, T0);
    report(0, 3, 0, T0);
    report(2, 3, 0, T0);
    const uint32_t ex[] = {1};
    sb_sched_request req = {.adapter = -1, .exclude = ex, .n_exclude = 1};
    for (int i = 0; i < 50; i++) {
        int k = run(&req, 3);
        assert_true(k == 0 || k == 2);
        assert_string_equal(cands[1].removed_by, "retry-excluded");
        assert_int_equal(cands[1].slot, -1);
        assert_int_equal(d.n_live, 2);
    }
    /* Everything excluded: -1, with a reason. */
    const uint32_t all[] = {0, 1, 2};
    req.exclude = all, req.n_exclude = 3;
    assert_int_equal(run(&req, 3), -1);
    assert_int_equal(d.picked, -1);
    assert_non_null(d.reason);
    assert_int_equal(d.n_live, 0);
}

static void test_soft_filters_never_empty(void **state)
{
    (void)state;
    /* Every endpoint saturated: the saturation filter removes none. */
    setup(3);
    add_filter("healthy");
    add_filter("saturation");
    add_scorer("queue", 1);
    report(0, 9, 0, T0), report(1, 7, 0, T0), report(2, 8, 0.95, T0);
    assert_int_equal(run(&base_req, 3), 1);
    for (size_t i = 0; i < 3; i++)
        assert_null(cands[i].removed_by);
    /* One unsaturated: only it remains. */
    report(2, 1, 0.2, T0);
    assert_int_equal(run(&base_req, 3), 2);
    assert_string_equal(cands[0].removed_by, "saturation");
    assert_string_equal(cands[1].removed_by, "saturation");
    /* A soft filter undoes only its own removals: a hard one's stand. */
    report(2, 9, 0, T0);
    eps[0].draining = true;
    assert_int_equal(run(&base_req, 3), 1);
    assert_string_equal(cands[0].removed_by, "healthy");
    assert_null(cands[2].removed_by);

    /* No endpoint can take the adapter: the LoRA filter removes none. */
    setup(3);
    add_filter("lora");
    add_scorer("lora-affinity", 1);
    for (size_t i = 0; i < 3; i++) {
        eps[i].report.have_lora = true;
        eps[i].report.max_lora = 1;
        eps[i].report.lora_running_count = 1;
        eps[i].report.lora_running_mask = 1; /* adapter 0 */
    }
    eps[2].report.lora_waiting_mask = 1u << 4;
    sb_sched_request req = {.adapter = 4};
    assert_int_equal(run(&req, 3), 2); /* 0.6 for the one where requests wait for it */
    for (size_t i = 0; i < 3; i++)
        assert_null(cands[i].removed_by);
    /* One has room: only it qualifies. */
    eps[1].report.max_lora = 2;
    assert_int_equal(run(&req, 3), 1);
    assert_string_equal(cands[0].removed_by, "lora");
    assert_string_equal(cands[2].removed_by, "lora");
}

static void test_hard_filter_empties(void **state)
{
    (void)state;
    setup(2);
    add_filter("labels");
    add_scorer("queue", 1);
    prof.label_keys[0] = "zone";
    prof.label_values[0] = "a";
    prof.n_labels = 1;
    eps[0].label_keys[0] = "zone", eps[0].label_values[0] = "b", eps[0].n_labels = 1;
    assert_int_equal(run(&base_req, 2), -1);
    assert_string_equal(cands[0].removed_by, "labels");
    assert_string_equal(cands[1].removed_by, "labels");
    assert_string_equal(d.reason, "no candidate left after filters");
    /* The explanation renders without scores. */
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(&d, &b), 0);
    assert_true(json_valid(b.data));
    assert_non_null(strstr(b.data, "\"picked\":null"));
    assert_null(strstr(b.data, "\"scores\""));
    sb_buf_free(&b);

    /* Every endpoint down: panic routing keeps them all rather than none. */
    setup(2);
    add_filter("healthy");
    eps[0].active_down = eps[1].active_down = true;
    assert_true(run(&base_req, 2) >= 0);
    assert_true(d.panic && cands[0].panic && cands[1].panic);
    /* Draining ones never come back: the healthy filter empties the pool. */
    setup(2);
    add_filter("healthy");
    eps[0].draining = eps[1].draining = true;
    assert_int_equal(run(&base_req, 2), -1);
    assert_string_equal(cands[0].removed_by, "healthy");
    assert_false(d.panic);
}

static void test_all_stale_reason(void **state)
{
    (void)state;
    setup(3);
    add_filter("healthy");
    add_filter("saturation");
    add_scorer("queue", 1);
    add_scorer("in-flight", 1);
    ctx.now = T0 + STALE + 1;
    sb_endpoint_dispatch(&eps[0], 0, T0);
    int k = run(&base_req, 3);
    assert_true(k == 1 || k == 2);      /* own accounting still ranks them */
    assert_int_equal(d.n_stale, 3);
    assert_non_null(strstr(d.reason, "all candidates stale"));
    for (size_t i = 0; i < 3; i++) {
        assert_true(cands[i].stale);
        assert_null(cands[i].removed_by); /* saturation is soft */
        assert_true(score_of(0, i) == 0.0);
    }
    /* One fresh: the reason is the picker's, and the fresh one is preferred. */
    report(2, 3, 0, ctx.now);
    sb_endpoint_dispatch(&eps[2], 0, ctx.now);
    assert_int_equal(run(&base_req, 3), 2);
    assert_string_equal(d.reason, "max-score");
    assert_int_equal(d.n_live, 1);
    assert_int_equal(d.n_stale, 0);
    /* A stale endpoint excluded by a filter does not count toward "all stale". */
    setup(2);
    add_scorer("queue", 1);
    eps[0].report_ns = 0; /* never reported */
    eps[0].report_seq = 0;
    assert_int_equal(run(&base_req, 2), 1);
    assert_int_equal(d.n_stale, 1);
    assert_string_equal(d.reason, "max-score");
}

static void test_render_json(void **state)
{
    (void)state;
    setup(3);
    add_filter("healthy");
    add_scorer("queue", 2);
    add_scorer("kv-cache", 1);
    eps[0].address = "10.0.0.1:8000";
    eps[1].address = "10.0.0.2:8000";
    eps[2].address = "10.0.0.3:8000";
    report(0, 1, 0.5, T0), report(1, 3, 0.25, T0);
    eps[2].draining = true;
    assert_int_equal(run(&base_req, 3), 0);
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(&d, &b), 0);
    assert_true(json_valid(b.data));
    const char *want[] = {"\"pool\":\"\"",
                          "\"profile\":\"test\"",
                          "\"picker\":\"max-score\"",
                          "\"reason\":\"max-score\"",
                          "\"picked\":\"10.0.0.1:8000\",\"picked_index\":0",
                          ("{\"endpoint\":\"10.0.0.3:8000\",\"index\":2,\"stale\":false,"
                           "\"removed_by\":\"healthy\"}"),
                          "\"scores\":{\"queue\":1.0000,\"kv-cache\":0.5000}",
                          "\"scores\":{\"queue\":0.5000,\"kv-cache\":0.7500}",
                          "\"total\":0.8333",
                          "\"total\":0.5833"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!strstr(b.data, want[i]))
            fail_msg("missing %s in %s", want[i], b.data);
    }
    /* Appends: two renders are two documents back to back. */
    size_t len = b.len;
    assert_int_equal(sb_decision_render(&d, &b), 0);
    assert_int_equal(b.len, 2 * len);
    sb_buf_free(&b);
}

static void test_render_odd_values(void **state)
{
    (void)state;
    /* Addresses and profile names are configuration; a quote must not break the JSON. */
    setup(2);
    add_scorer("queue", 1);
    strcpy(prof.name, "we\"ird\\name");
    eps[0].address = "host\"with\"quotes";
    assert_true(run(&base_req, 2) >= 0);
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(&d, &b), 0);
    if (!json_valid(b.data))
        fail_msg("invalid JSON: %s", b.data);
    sb_buf_free(&b);
    /* A report carrying NaN (the metrics parser accepts it) must not poison the decision. */
    setup(3);
    add_scorer("queue", 1);
    add_scorer("kv-cache", 1);
    report(0, NAN, NAN, T0);
    report(1, 2, 0.5, T0);
    report(2, 4, 0.9, T0);
    int k = run(&base_req, 3);
    assert_true(k >= 0);
    for (size_t i = 0; i < 3; i++)
        assert_true(isfinite(cands[i].total) && cands[i].total >= 0 && cands[i].total <= 1);
    assert_int_equal(sb_decision_render(&d, &b), 0);
    if (!json_valid(b.data))
        fail_msg("invalid JSON: %s", b.data);
    sb_buf_free(&b);
}

static void test_positions_not_index_fields(void **state)
{
    (void)state;
    /* A caller may pass a slice of a larger table: the decision is about positions in the
     * array given, whatever the endpoints' index fields say. */
    setup(6);
    add_scorer("queue", 1);
    report(2, 5, 0, T0), report(3, 0, 0, T0), report(4, 5, 0, T0), report(5, 5, 0, T0);
    int k = sb_sched_run(&ctx, &base_req, eps + 2, 4, &d);
    assert_int_equal(k, 1);
    assert_ptr_equal(cands[1].ep, &eps[3]);
    assert_true(cands[1].total == 1.0);
    assert_true(cands[0].total == 0.0 && cands[3].total == 0.0);
}

/* ---- the burst: report plus approximation ---- */

/* Picks and dispatches `burst` requests with no report in between; counts picks per endpoint.
 * own_accounting = false forgets each dispatch as a report would not see it. */
static void burst(const sb_profile *p, size_t n, int burst_len, bool own_accounting, uint64_t seed, int *count)
{
    memset(eps, 0, sizeof(eps));
    for (size_t i = 0; i < n; i++) {
        eps[i].index = (uint32_t)i;
        report(i, 0, 0.1, T0);
        count[i] = 0;
    }
    rng = seed;
    ctx = (sb_sched_ctx){.now = T0, .stale_ns = STALE, .rng = &rng, .profile = p};
    for (int r = 0; r < burst_len; r++) {
        ctx.now = T0 + SB_MS(1) * (sb_ns)r;
        int k = sb_sched_run(&ctx, &base_req, eps, n, &d);
        assert_true(k >= 0);
        count[k]++;
        sb_endpoint_dispatch(&eps[k], 200, ctx.now);
        if (!own_accounting) {
            eps[k].sent_since_report = 0;
            eps[k].in_flight = 0;
            eps[k].pending_prefill_tokens = 0;
            eps[k].pending_uncached_tokens = 0;
        }
    }
}

static bool even(const int *count, size_t n, int each)
{
    for (size_t i = 0; i < n; i++)
        if (count[i] != each)
            return false;
    return true;
}

static void test_burst_spreads(void **state)
{
    (void)state;
    int count[4];
    const sb_profile *def = sb_profile_builtin("default");
    /* queue alone (report + sent since) is enough to prevent the herd */
    sb_profile queue_only;
    sb_profile_init(&queue_only, "queue-only");
    queue_only.scorers[queue_only.n_scorers++] = (sb_weighted_scorer){sb_scorer_find("queue"), 1};
    int even_without = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        burst(def, 4, 8, true, seed, count);
        if (!even(count, 4, 2))
            fail_msg("default, seed %llu: %d/%d/%d/%d", (unsigned long long)seed, count[0], count[1], count[2],
                     count[3]);
        burst(&queue_only, 4, 8, true, seed, count);
        assert_true(even(count, 4, 2));
        burst(def, 4, 8, false, seed, count);
        even_without += even(count, 4, 2);
    }
    /* Blind to its own traffic the router only spreads by the luck of tie-breaks
     * (8!/(2!^4 4^8) = 3.8% of bursts are even). */
    assert_true(even_without < 30);
    /* With a deterministic tie-break, blindness is a herd: everything on one endpoint. */
    sb_profile blind = queue_only;
    blind.picker = sb_picker_find("p2c");
    burst(&blind, 4, 8, false, 7, count);
    int hi = 0;
    for (size_t i = 0; i < 4; i++)
        hi = count[i] > hi ? count[i] : hi;
    assert_true(hi >= 3);
}

/* lru: the least recently dispatched endpoint scores 1, the last one 0, the rest by the time
 * of their last dispatch; alone it rotates like round robin (where max-score's random
 * tie-break would pick the same endpoint twice running), and it reads only the router's own
 * dispatches, so a stale report does not zero it. */
static void test_lru_rotates(void **state)
{
    (void)state;
    setup(4);
    add_scorer("lru", 1);
    int last = -1, count[4] = {0};
    for (int r = 0; r < 12; r++) {
        ctx.now = T0 + SB_MS(r);
        int p = run(&base_req, 4);
        assert_true(p >= 0);
        assert_int_not_equal(p, last);
        count[p]++;
        sb_endpoint_dispatch(&eps[p], 100, ctx.now);
        last = p;
    }
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(count[i], 3);
    /* Last dispatches at 8, 9, 10 and 11 ms after T0: scores 1, 2/3, 1/3, 0 in that order. */
    ctx.now = T0 + SB_MS(12);
    run(&base_req, 4);
    size_t order[4];
    for (size_t i = 0; i < 4; i++)
        order[(eps[i].last_dispatch_ns - T0 - SB_MS(8)) / SB_MS(1)] = i;
    assert_true(fabs(score_of(0, order[0]) - 1.0) < 1e-9);
    assert_true(fabs(score_of(0, order[1]) - 2.0 / 3) < 1e-9);
    assert_true(fabs(score_of(0, order[2]) - 1.0 / 3) < 1e-9);
    assert_true(fabs(score_of(0, order[3])) < 1e-9);
    /* Stale reports do not matter: its signal is ours. */
    ctx.now = T0 + 2 * STALE;
    run(&base_req, 4);
    assert_true(fabs(score_of(0, order[0]) - 1.0) < 1e-9);
}

/* kv-room: 1 while the request's uncached prompt fits with 5% of the cache to spare, falling
 * to 0 where it does not fit; the prefix the endpoint holds is not needed again; capacity
 * unknown is neutral, stale is 0. Capacity 1000 blocks of 16 tokens = 16,000 tokens, so the
 * margin is 800 tokens. */
static void test_kv_room(void **state)
{
    (void)state;
    setup(5);
    double kv[5] = {0.5, 0.9, 0.97, 0.97, 0.2};
    for (size_t i = 0; i < 5; i++) {
        sb_endpoint_report r = {.have_waiting = true,
                                .have_running = true,
                                .have_kv = true,
                                .kv_usage = kv[i],
                                .have_capacity = i != 4,
                                .num_gpu_blocks = 1000,
                                .block_size = 16,
                                .requests_total = -1};
        sb_endpoint_report_set(&eps[i], &r, SB_REPORT_SCRAPE, T0);
    }
    uint32_t match[5] = {0, 0, 0, 10, 0}; /* endpoint 3 holds 10 blocks of 100 tokens */
    ctx.prefix_match = match;
    ctx.prefix_blocks = 12;
    ctx.block_tokens = 100;
    add_scorer("kv-room", 1);
    sb_sched_request req = base_req;
    req.prompt_tokens = 1200;
    assert_true(run(&req, 5) >= 0);
    assert_true(fabs(score_of(0, 0) - 1.0) < 1e-9);         /* 8000 free - 1200 >= 800 */
    assert_true(fabs(score_of(0, 1) - 400.0 / 800) < 1e-6); /* 1600 free - 1200 = 400 */
    assert_true(fabs(score_of(0, 2)) < 1e-9);               /* 480 free < 1200: does not fit */
    assert_true(fabs(score_of(0, 3) - 280.0 / 800) < 1e-6); /* holds 1000: needs 200 of 480 */
    assert_true(fabs(score_of(0, 4) - 1.0) < 1e-9);         /* capacity unknown: neutral */
    /* Prompts sent since the report take room too: 6,800 more tokens on endpoint 0 leave it
     * 1,200 free, exactly the prompt: 0. */
    sb_endpoint_dispatch(&eps[0], 6800, T0);
    run(&req, 5);
    assert_true(fabs(score_of(0, 0)) < 1e-6);
    /* Stale: 0. */
    ctx.now = T0 + 2 * STALE;
    run(&req, 5);
    for (size_t i = 0; i < 5; i++)
        if (cands[i].slot >= 0)
            assert_true(fabs(score_of(0, i)) < 1e-9);
}

/* ---- determinism ---- */

static void picks(const sb_profile *p, uint64_t seed, int *out, size_t m)
{
    memset(eps, 0, sizeof(eps));
    for (size_t i = 0; i < 8; i++) {
        eps[i].index = (uint32_t)i;
        report(i, (double)(i % 3), 0.1 * (double)(i % 4), T0);
    }
    rng = seed;
    ctx = (sb_sched_ctx){.now = T0, .stale_ns = STALE, .rng = &rng, .profile = p};
    for (size_t r = 0; r < m; r++) {
        out[r] = sb_sched_run(&ctx, &base_req, eps, 8, &d);
        sb_ticket t = sb_endpoint_dispatch(&eps[out[r]], 100, T0);
        if (r % 3 == 0)
            sb_endpoint_finish(&eps[out[r]], &t, true, true,
                               &(sb_health_params){.max_failures = 3, .base_eject_ns = 1, .max_eject_ns = 1}, true, T0);
    }
}

static void test_determinism(void **state)
{
    (void)state;
    const char *pickers[] = {"max-score", "weighted-random", "p2c", "softmax"};
    for (size_t p = 0; p < 4; p++) {
        sb_profile prof2 = *sb_profile_builtin("load-only");
        prof2.picker = sb_picker_find(pickers[p]);
        int a[200], b[200], c[200];
        picks(&prof2, 99, a, 200);
        picks(&prof2, 99, b, 200);
        assert_memory_equal(a, b, sizeof(a));
        picks(&prof2, 100, c, 200);
        if (p != 0) /* max-score mostly follows load; the random pickers must differ by seed */
            assert_true(memcmp(a, c, sizeof(a)) != 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_validator),
        cmocka_unit_test(test_weighted_total),
        cmocka_unit_test(test_retry_excluded),
        cmocka_unit_test(test_soft_filters_never_empty),
        cmocka_unit_test(test_hard_filter_empties),
        cmocka_unit_test(test_all_stale_reason),
        cmocka_unit_test(test_render_json),
        cmocka_unit_test(test_render_odd_values),
        cmocka_unit_test(test_positions_not_index_fields),
        cmocka_unit_test(test_burst_spreads),
        cmocka_unit_test(test_lru_rotates),
        cmocka_unit_test(test_kv_room),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
