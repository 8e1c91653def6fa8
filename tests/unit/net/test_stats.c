/* stats is a leaf: an sb_stats filled in by hand (no gateway, no loop) records finished
 * requests into its arrays and its access log. */
#include "sb_test.h"

#include <stdio.h>

#include "net/stats.h"

typedef struct fixture {
    sb_config cfg;
    sb_pool_config pools[2];
    sb_endpoint_config eps[3];
    char *models_a[2], *models_b[1], *adapters_a[3];
    sb_model_metrics *pm; /* per pool and model slot */
    sb_pool_metrics *qm;  /* per pool */
    sb_ep_metrics *em;
    uint64_t rejected;
    sb_stats st;
    char *log_text;
    size_t log_len;
} fixture;

/* Two pools: "a" (model ma and its alias ma-alias) with endpoints a0, a1, and "b" (model mb)
 * with b0. `adapters` gives pool a the adapters la, lb, lc; without, every pool has one model
 * slot, so pm[p] is pool p's metrics and em[i] the i-th endpoint's, pool-major (b0 is em[2]). */
static void setup_fixture_models(fixture *f, bool access_log, bool adapters, size_t max_models)
{
    memset(f, 0, sizeof(*f));
    f->eps[0].address = "a0:1";
    f->eps[1].address = "a1:1";
    f->eps[2].address = "b0:1";
    f->models_a[0] = "ma";
    f->models_a[1] = "ma-alias";
    f->adapters_a[0] = "la";
    f->adapters_a[1] = "lb";
    f->adapters_a[2] = "lc";
    f->models_b[0] = "mb";
    f->pools[0] = (sb_pool_config){.name = "a",
                                   .models = f->models_a,
                                   .n_models = 2,
                                   .adapters = adapters ? f->adapters_a : NULL,
                                   .n_adapters = adapters ? 3 : 0,
                                   .endpoints = &f->eps[0],
                                   .n_endpoints = 2};
    f->pools[1] =
        (sb_pool_config){.name = "b", .models = f->models_b, .n_models = 1, .endpoints = &f->eps[2], .n_endpoints = 1};
    f->cfg.pools = f->pools;
    f->cfg.n_pools = 2;
    f->cfg.metrics_max_models = max_models;
    assert_int_equal(sb_stats_init(&f->st, &f->cfg), 0);
    f->st.rejected = &f->rejected;
    f->pm = f->st.model_metrics;
    f->qm = f->st.pool_metrics;
    f->em = f->st.ep_metrics;
    if (access_log) {
        f->st.access_log = open_memstream(&f->log_text, &f->log_len);
        assert_non_null(f->st.access_log);
    }
}

static void setup_fixture(fixture *f, bool access_log)
{
    setup_fixture_models(f, access_log, false, 32);
}

static void teardown_fixture(fixture *f)
{
    if (f->st.access_log)
        fclose(f->st.access_log);
    free(f->log_text);
    sb_stats_free(&f->st);
}

static sb_exchange_log a_log(int pool, int ep, int status)
{
    sb_exchange_log log = {.pool = pool,
                           .ep = ep,
                           .adapter = -1,
                           .status = status,
                           .outcome = "ok",
                           .model = "m\"q",
                           .t_start = 1000000000,
                           .t_first_byte = 1003000000, /* 3 ms */
                           .t_end = 1200000000};       /* 200 ms */
    log.usage.prompt_tokens = 10;
    log.usage.cached_tokens = 4;
    log.usage.completion_tokens = 7;
    return log;
}

static void test_record_lands_in_its_pool_and_endpoint(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, false);
    sb_exchange_log log = a_log(1, 0, 200);
    sb_stats_record(&f->st, &log);
    log = a_log(1, 0, 503);
    sb_stats_record(&f->st, &log);
    /* pool b's endpoint 0 is em[2]: pool a has two endpoints of one model slot each */
    assert_int_equal(f->em[2].by_class[2], 1);
    assert_int_equal(f->em[2].by_class[5], 1);
    assert_int_equal(f->em[0].by_class[2] + f->em[1].by_class[2], 0);
    assert_int_equal(f->pm[1].duration.n, 2);
    assert_int_equal(f->pm[0].duration.n, 0);
    /* 200 ms falls in the 0.25 s bucket (index 5), 3 ms in the first */
    assert_int_equal(f->pm[1].duration.counts[5], 2);
    assert_int_equal(f->pm[1].ttfb.counts[0], 2);
    assert_int_equal(f->pm[1].prompt_tokens, 20);
    assert_int_equal(f->pm[1].cached_tokens, 8);
    assert_int_equal(f->pm[1].completion_tokens, 14);
    teardown_fixture(f);
    free(f);
}

static void test_refused_before_a_pool_touches_no_metrics(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, true);
    sb_exchange_log log = a_log(-1, -1, 429);
    log.outcome = "rejected";
    sb_stats_record(&f->st, &log);
    for (int p = 0; p < 2; p++)
        assert_int_equal(f->pm[p].duration.n, 0);
    fflush(f->st.access_log);
    assert_non_null(strstr(f->log_text, "\"pool\":\"\",\"endpoint\":\"\",\"status\":429,\"upstream_status\":0,"
                                        "\"outcome\":\"rejected\",\"reason\":\"\""));
    /* Who asked is unknown here: empty strings, never a missing field. */
    assert_non_null(strstr(f->log_text, "\"request_id\":\"\",\"client\":\"\",\"method\":\"\",\"path\":\"\""));
    teardown_fixture(f);
    free(f);
}

static void test_access_log_line_names_pool_and_endpoint(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, true);
    sb_exchange_log log = a_log(0, 1, 200);
    log.band = "critical";
    log.tenant = "t1";
    log.upstream_status = 200;
    log.retries = 2;
    sb_request_ident id = {
        .id = "r-1", .peer = "10.0.0.2:5555", .path = "/v1/chat/\"x", .method = 3 /* POST */, .proto = "h2"};
    log.ident = &id;
    sb_stats_record(&f->st, &log);
    fflush(f->st.access_log);
    const char *l = f->log_text;
    assert_non_null(strstr(l, "\"request_id\":\"r-1\",\"client\":\"10.0.0.2:5555\",\"method\":\"POST\","
                              "\"path\":\"/v1/chat/\\\"x\",\"proto\":\"h2\",\"model\":\"m\\\"q\""));
    assert_non_null(strstr(l, "\"pool\":\"a\",\"endpoint\":\"a1:1\",\"status\":200,\"upstream_status\":200,"
                              "\"outcome\":\"ok\",\"reason\":\"\""));
    assert_non_null(strstr(l, "\"retries\":2,"));
    assert_non_null(strstr(l, "\"ttfb_ms\":3.000,\"ttft_ms\":-1.000,\"itl_ms\":-1.000,\"total_ms\":200.000"));
    assert_non_null(strstr(l, "\"band\":\"critical\",\"tenant\":\"t1\"}\n"));
    assert_int_equal(l[f->log_len - 1], '\n');
    teardown_fixture(f);
    free(f);
}

/* A response that began and was cut is its own class, never the 2xx its status line said; an
 * answer the gateway gave itself touches no pool or endpoint metrics even when it names a pool. */
static void test_cut_responses_and_gateway_answers(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, true);
    sb_exchange_log log = a_log(0, 0, 200);
    log.outcome = "midstream_error";
    log.reason = "upstream_closed";
    log.upstream_status = 200;
    sb_stats_record(&f->st, &log);
    log.outcome = "drain_cut";
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->em[0].by_class[2], 0);
    assert_int_equal(f->em[0].by_class[SB_CLASS_CUT], 2);
    /* Cut by the drain before any response head: a 503, not a cut response. */
    log = a_log(0, 0, 503);
    log.outcome = "drain_cut";
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->em[0].by_class[5], 1);
    log = a_log(1, -1, 429);
    log.outcome = "refused";
    log.reason = "shed";
    log.gateway_answer = true;
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->pm[1].duration.n, 0);
    fflush(f->st.access_log);
    assert_non_null(strstr(f->log_text, "\"pool\":\"b\",\"endpoint\":\"\",\"status\":429,\"upstream_status\":0,"
                                        "\"outcome\":\"refused\",\"reason\":\"shed\""));
    teardown_fixture(f);
    free(f);
}

static void feed(sb_token_clock *tc, const char *s, sb_ns now)
{
    sb_token_clock_feed(tc, s, strlen(s), now);
}

/* The token clock fed a stream in pieces, as the proxy's r_on_body does: TTFT from the first
 * data event (not the head, not a comment before it), one ITL observation, the mean gap. */
static void test_stream_ttft_and_mean_gap(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, true);
    sb_token_clock tc = {0};
    const sb_ns t0 = 1000000000;
    feed(&tc, ": ping\n\nda", t0 + 40000000);     /* 40 ms: no event yet */
    feed(&tc, "ta: {\"a\"}\n\n", t0 + 120000000); /* 120 ms: the first token */
    feed(&tc, "data: {\"b\"}\n\ndata: {\"c\"}\n\n", t0 + 160000000);
    feed(&tc, "data: {\"d\"}\n\ndata: [DONE]\n\n", t0 + 180000000);
    sb_exchange_log log = a_log(0, 0, 200);
    log.upstream_status = 200;
    log.stream = true;
    sb_token_clock_log(&tc, &log);
    assert_int_equal(log.token_events, 4);
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->pm[0].ttft.n, 1);
    assert_true(f->pm[0].ttft.sum > 0.1199 && f->pm[0].ttft.sum < 0.1201);
    assert_int_equal(f->pm[0].ttft.counts[8], 1); /* (0.1, 0.15] */
    /* (180 - 120) ms over 3 gaps */
    assert_int_equal(f->pm[0].itl.n, 1);
    assert_true(f->pm[0].itl.sum > 0.0199 && f->pm[0].itl.sum < 0.0201);
    fflush(f->st.access_log);
    assert_non_null(strstr(f->log_text, "\"ttfb_ms\":3.000,\"ttft_ms\":120.000,\"itl_ms\":20.000,"));
    teardown_fixture(f);
    free(f);
}

/* An unstreamed answer's first token is its first body byte, with no gap to observe; an error
 * body, a cut stream, a gateway answer observe nothing. */
static void test_unstreamed_and_failed_answers(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, false);
    const sb_ns t0 = 1000000000;
    sb_token_clock tc = {0};
    feed(&tc, "{\"choices\":[", t0 + 50000000);
    feed(&tc, "]}", t0 + 60000000);
    sb_exchange_log log = a_log(0, 0, 200);
    log.upstream_status = 200;
    sb_token_clock_log(&tc, &log);
    assert_int_equal(log.token_events, 0);
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->pm[0].ttft.n, 1);
    assert_true(f->pm[0].ttft.sum > 0.0499 && f->pm[0].ttft.sum < 0.0501);
    assert_int_equal(f->pm[0].itl.n, 0);

    log.upstream_status = log.status = 400;
    log.outcome = "upstream_4xx";
    sb_stats_record(&f->st, &log);
    log.upstream_status = log.status = 200;
    log.outcome = "midstream_error";
    sb_stats_record(&f->st, &log);
    assert_int_equal(f->pm[0].ttft.n, 1);
    assert_int_equal(f->pm[0].duration.n, 3);
    teardown_fixture(f);
    free(f);
}

static void test_queue_wait(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, false);
    sb_stats_queue_wait(&f->st, 1, 0);
    sb_stats_queue_wait(&f->st, 1, 3000000000); /* 3 s: the (2.5, 5] bucket, index 10 */
    sb_stats_queue_wait(&f->st, 2, 1);          /* a pool a reload removed: ignored */
    assert_int_equal(f->qm[1].queue_wait.n, 2);
    assert_int_equal(f->qm[1].queue_wait.counts[0], 1);
    assert_int_equal(f->qm[1].queue_wait.counts[10], 1);
    assert_int_equal(f->qm[0].queue_wait.n, 0);
    teardown_fixture(f);
    free(f);
}

/* The model label: an alias counts as its served name, each adapter as itself up to
 * max_models names per pool, the rest as "other"; per endpoint too. */
static void test_model_slots_bound_the_label(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture_models(f, false, true, 3); /* ma, la, lb named; lc is "other" */
    const sb_stats_models *m = &f->st.models[0];
    assert_int_equal(m->named, 3);
    assert_int_equal(m->slots, 4);
    assert_int_equal(f->st.models[1].slots, 1);
    assert_string_equal(sb_stats_model_name(&f->st, 0, 0), "ma");
    assert_string_equal(sb_stats_model_name(&f->st, 0, 1), "la");
    assert_string_equal(sb_stats_model_name(&f->st, 0, 2), "lb");
    assert_string_equal(sb_stats_model_name(&f->st, 0, 3), "other");
    assert_string_equal(sb_stats_model_name(&f->st, 1, 0), "mb");
    assert_int_equal(sb_stats_model_slot(&f->st, 0, -1), 0);
    assert_int_equal(sb_stats_model_slot(&f->st, 0, 0), 1);
    assert_int_equal(sb_stats_model_slot(&f->st, 0, 2), 3);
    assert_int_equal(sb_stats_model_slot(&f->st, 1, 7), 0); /* pool b has no adapters: stays in */

    int adapters[] = {-1, -1, 0, 2, 2, 2}; /* base (or alias) twice, la once, lc three times */
    for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++) {
        sb_exchange_log log = a_log(0, 1, 200);
        log.adapter = adapters[i];
        sb_stats_record(&f->st, &log);
    }
    assert_int_equal(f->pm[m->first + 0].duration.n, 2);
    assert_int_equal(f->pm[m->first + 1].duration.n, 1);
    assert_int_equal(f->pm[m->first + 2].duration.n, 0);
    assert_int_equal(f->pm[m->first + 3].duration.n, 3);
    assert_int_equal(f->pm[m->first + 3].completion_tokens, 21);
    /* endpoint a1 (e = 1), slot s: ep_first + e * slots + s */
    assert_int_equal(f->em[m->ep_first + 1 * m->slots + 3].by_class[2], 3);
    assert_int_equal(f->em[m->ep_first + 1 * m->slots + 0].by_class[2], 2);
    assert_int_equal(f->em[m->ep_first + 0 * m->slots + 0].by_class[2], 0);
    /* pool b lies after pool a's 4 slots and 2 x 4 endpoint slots */
    assert_int_equal(f->st.models[1].first, 4);
    assert_int_equal(f->st.models[1].ep_first, 8);
    teardown_fixture(f);
    free(f);
}

/* A reload that replaces the gateway carries counts by pool, model and endpoint names, so a
 * counter never goes back; a model that lost its name (now past max_models) starts anew. */
static void test_carry_maps_by_names(void **state)
{
    fixture *old = calloc(1, sizeof(*old)), *nw = calloc(1, sizeof(*nw));
    setup_fixture_models(old, false, true, 32);
    sb_exchange_log log = a_log(0, 1, 200);
    log.adapter = 1; /* lb */
    sb_stats_record(&old->st, &log);
    log.adapter = -1;
    sb_stats_record(&old->st, &log);
    sb_stats_queue_wait(&old->st, 0, 1000000);
    old->st.rejected_by_reason[sb_stats_reason("shed", 429)][0] = 5;
    /* The new configuration: pool a's endpoints swapped, max_models 2 (ma, la; lb is "other"). */
    setup_fixture_models(nw, false, true, 2);
    nw->eps[0].address = "a1:1";
    nw->eps[1].address = "a0:1";
    sb_stats_carry(&nw->st, &old->st);
    const sb_stats_models *m = &nw->st.models[0];
    assert_int_equal(nw->pm[m->first + 0].duration.n, 1);                    /* ma kept */
    assert_int_equal(nw->em[m->ep_first + 0 * m->slots + 0].by_class[2], 1); /* a1 is now e = 0 */
    assert_int_equal(nw->pm[m->first + 2].duration.n, 0);                    /* "other" is new */
    assert_int_equal(nw->qm[0].queue_wait.n, 1);
    assert_int_equal(nw->st.rejected_by_reason[sb_stats_reason("shed", 429)][0], 5);
    teardown_fixture(old);
    teardown_fixture(nw);
    free(old);
    free(nw);
}

/* A request a fallback served: "pool" stays the pool asked for, "endpoint" is the fallback's,
 * and the metrics land in the pool that served it. */
static void test_fallback_in_the_access_log(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    setup_fixture(f, true);
    sb_exchange_log log = a_log(1, 0, 200);
    log.fell_back = true;
    log.requested_pool = 0;
    log.fallback_reason = "failed";
    sb_stats_record(&f->st, &log);
    fflush(f->st.access_log);
    assert_non_null(strstr(f->log_text, "\"pool\":\"a\",\"endpoint\":\"b0:1\","));
    assert_non_null(strstr(f->log_text, ",\"fallback\":\"b\",\"fallback_reason\":\"failed\"}\n"));
    assert_int_equal(f->pm[1].duration.n, 1);
    assert_int_equal(f->pm[0].duration.n, 0);
    teardown_fixture(f);
    free(f);
}

/* switchboard_fallbacks_total follows its (pool, fallback) pair by name: across a replaced
 * gateway (carry) and a reload in place that reorders the list (renumber); a pair no longer
 * listed starts from zero. */
static void test_fallback_counts_follow_their_names(void **state)
{
    fixture *old = calloc(1, sizeof(*old)), *nw = calloc(1, sizeof(*nw));
    sb_fallback_config one[] = {{.pool_name = "b", .pool = 1}};
    sb_fallback_config two[] = {{.pool_name = "x", .pool = 1}, {.pool_name = "b", .pool = 1}};
    setup_fixture(old, false);
    old->pools[0].fallbacks = one;
    old->pools[0].n_fallbacks = 1;
    old->st.fallbacks[0][SB_FALLBACK_FAILED] = 3;
    old->st.fallbacks[0][SB_FALLBACK_SATURATED] = 2;
    setup_fixture(nw, false);
    nw->pools[0].fallbacks = two;
    nw->pools[0].n_fallbacks = 2;
    sb_stats_carry(&nw->st, &old->st);
    assert_int_equal(nw->st.fallbacks[0][SB_FALLBACK_FAILED], 0); /* x: new */
    assert_int_equal(nw->st.fallbacks[1][SB_FALLBACK_FAILED], 3);
    assert_int_equal(nw->st.fallbacks[1][SB_FALLBACK_SATURATED], 2);
    /* In place: old's configuration becomes two's shape. */
    sb_config cfg2 = old->cfg;
    sb_pool_config pools2[2] = {old->pools[0], old->pools[1]};
    pools2[0].fallbacks = two;
    pools2[0].n_fallbacks = 2;
    cfg2.pools = pools2;
    sb_stats_renumber_fallbacks(&old->st, &cfg2);
    assert_int_equal(old->st.fallbacks[0][SB_FALLBACK_FAILED], 0);
    assert_int_equal(old->st.fallbacks[1][SB_FALLBACK_FAILED], 3);
    assert_int_equal(old->st.fallbacks[1][SB_FALLBACK_SATURATED], 2);
    teardown_fixture(old);
    teardown_fixture(nw);
    free(old);
    free(nw);
}

/* Error answers' reasons: known codes by name, codeless answers by status, anything else other. */
static void test_reasons(void **state)
{
    assert_string_equal(sb_stats_reason_names[sb_stats_reason("model_not_found", 404)], "model_not_found");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason("queue_full", 429)], "queue_full");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason(NULL, 400)], "invalid_request");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason(NULL, 405)], "method_not_allowed");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason(NULL, 500)], "internal_error");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason("made_up", 400)], "other");
    assert_string_equal(sb_stats_reason_names[sb_stats_reason(NULL, 418)], "other");
    /* label-safe, distinct names */
    for (int i = 0; i < SB_REASONS; i++) {
        assert_non_null(sb_stats_reason_names[i]);
        for (const char *c = sb_stats_reason_names[i]; *c; c++)
            assert_true((*c >= 'a' && *c <= 'z') || *c == '_');
        for (int j = 0; j < i; j++)
            assert_string_not_equal(sb_stats_reason_names[i], sb_stats_reason_names[j]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_lands_in_its_pool_and_endpoint),
        cmocka_unit_test(test_refused_before_a_pool_touches_no_metrics),
        cmocka_unit_test(test_access_log_line_names_pool_and_endpoint),
        cmocka_unit_test(test_cut_responses_and_gateway_answers),
        cmocka_unit_test(test_stream_ttft_and_mean_gap),
        cmocka_unit_test(test_unstreamed_and_failed_answers),
        cmocka_unit_test(test_queue_wait),
        cmocka_unit_test(test_model_slots_bound_the_label),
        cmocka_unit_test(test_carry_maps_by_names),
        cmocka_unit_test(test_fallback_in_the_access_log),
        cmocka_unit_test(test_fallback_counts_follow_their_names),
        cmocka_unit_test(test_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
