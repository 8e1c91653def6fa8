/* Tests proto/orca: ORCA endpoint-load-metrics header values, TEXT and JSON. */
#include "sb_test.h"

#include "proto/orca.h"

static int parse(const char *s, sb_endpoint_report *r) { return sb_orca_parse(s, strlen(s), r); }

static void test_text_form(void **state)
{
    (void)state;
    sb_endpoint_report r;
    assert_int_equal(parse("TEXT named_metrics.kv_cache_usage_perc=0.25, named_metrics.num_requests_waiting=3", &r), 2);
    assert_true(r.have_kv && r.have_waiting);
    assert_false(r.have_running);
    assert_true(r.kv_usage > 0.2499 && r.kv_usage < 0.2501);
    assert_true(r.waiting == 3.0);
    /* Standard ORCA fields are accepted and ignored; spacing is free. */
    assert_int_equal(parse("TEXT cpu_utilization=0.5,named_metrics.num_requests_running=7 ", &r), 1);
    assert_true(r.have_running && r.running == 7.0);
    /* A percentage is normalised to a fraction. */
    assert_int_equal(parse("TEXT named_metrics.kv_cache_usage_perc=40", &r), 1);
    assert_true(r.kv_usage > 0.399 && r.kv_usage < 0.401);
}

static void test_json_form(void **state)
{
    (void)state;
    sb_endpoint_report r;
    assert_int_equal(parse("JSON {\"cpu_utilization\": 0.3, \"named_metrics\": {\"kv_cache_usage_perc\": 0.5, "
                           "\"num_requests_waiting\": 4}}",
                           &r),
                     2);
    assert_true(r.kv_usage == 0.5 && r.waiting == 4.0);
    assert_int_equal(parse("JSON {}", &r), 0);
}

static void test_malformed_and_unsupported(void **state)
{
    (void)state;
    sb_endpoint_report r;
    const char *bad[] = {"", "BIN CgQIARAB", "TEXT named_metrics.kv_cache_usage_perc", "TEXT a=b",
                         "TEXT a=1e999999x", "JSON {\"a\":", "JSON {\"a\" 1}", "JSON [1]",
                         "JSON {\"a\":{\"b\":{\"c\":{\"d\":1}}}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse(bad[i], &r), -1);
    /* Never reads past len: a value cut mid-number parses what is there. */
    const char *s = "TEXT named_metrics.num_requests_waiting=12345";
    assert_int_equal(sb_orca_parse(s, strlen(s) - 3, &r), 1);
    assert_true(r.waiting == 12.0);
    /* NaN is ignored, not stored. */
    assert_int_equal(parse("TEXT named_metrics.num_requests_waiting=nan", &r), 0);
    assert_false(r.have_waiting);
}

/* Hostile header values (as long as the HTTP parser lets a header be): refused or read in one
 * pass. The JSON walk recurses at most three objects deep, whatever the value nests. */
static void test_hostile_values(void **state)
{
    (void)state;
    sb_endpoint_report r;
    size_t cap = 600000, n;
    char *v = malloc(cap);
    assert_non_null(v);

    n = (size_t)snprintf(v, cap, "JSON ");
    while (n + 5 < cap)
        n += (size_t)snprintf(v + n, cap - n, "{\"a\":");
    assert_int_equal(sb_orca_parse(v, n, &r), -1);

    /* A key repeated 10,000 times: the last one is the report. */
    n = (size_t)snprintf(v, cap, "JSON {");
    for (int i = 0; i < 10000; i++)
        n += (size_t)snprintf(v + n, cap - n, "\"num_requests_waiting\":%d,", i);
    n += (size_t)snprintf(v + n, cap - n, "\"named_metrics\":{\"num_requests_waiting\":7}}");
    assert_int_equal(sb_orca_parse(v, n, &r), 10001);
    assert_true(r.have_waiting && r.waiting == 7.0);

    n = (size_t)snprintf(v, cap, "TEXT ");
    for (int i = 0; i < 10000; i++)
        n += (size_t)snprintf(v + n, cap - n, "named_metrics.num_requests_running=%d, ", i);
    assert_int_equal(sb_orca_parse(v, n, &r), 10000);
    assert_true(r.running == 9999.0);

    /* A value or a key running to the end of the header. */
    memset(v, '1', cap);
    memcpy(v, "JSON {\"a\":", 11);
    assert_int_equal(sb_orca_parse(v, cap, &r), -1);
    memset(v, 'k', cap);
    memcpy(v, "JSON {\"", 7);
    assert_int_equal(sb_orca_parse(v, cap, &r), -1);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_form),
        cmocka_unit_test(test_json_form),
        cmocka_unit_test(test_malformed_and_unsupported),
        cmocka_unit_test(test_hostile_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
