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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_form),
        cmocka_unit_test(test_json_form),
        cmocka_unit_test(test_malformed_and_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
