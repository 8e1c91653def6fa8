/* proto/config_members: the effective configuration (the file's plus the dynamic endpoints). */
#include "sb_test.h"

#include "base/alloc.h"
#include "proto/config.h"

static const char yaml[] = "pools:\n"
                           "  - name: a\n"
                           "    models: [m1]\n"
                           "    endpoints: [\"127.0.0.1:9000\", {address: \"node:9001\", labels: {zone: z}}]\n"
                           "  - name: b\n"
                           "    models: [m2]\n"
                           "    endpoints: []\n";

static sb_config *parse(void)
{
    sb_config *cfg = NULL;
    assert_int_equal(sb_config_parse(yaml, strlen(yaml), &cfg, NULL), 0);
    return cfg;
}

static void test_members_appended_in_order(void **state)
{
    (void)state;
    sb_config *base = parse();
    const char *k[] = {"zone"}, *v[] = {"y"};
    sb_member m[] = {
        {.pool = 1,
         .source = SB_EP_API,
         .host = "::1",
         .port = 7000,
         .label_keys = k,
         .label_values = v,
         .n_labels = 1},
        {.pool = 0, .source = SB_EP_DNS, .host = "10.1.0.5", .port = 9000, .draining = true},
        {.pool = 0, .source = SB_EP_API, .host = "127.0.0.1", .port = 9000}, /* the file's: skipped */
        {.pool = 1, .source = SB_EP_API, .host = "::1", .port = 7000},       /* a repeat: skipped */
        {.pool = 5, .source = SB_EP_API, .host = "x", .port = 1},            /* no such pool: skipped */
    };
    sb_config *eff = sb_config_with_members(base, m, 5);
    assert_non_null(eff);
    assert_ptr_equal(sb_config_base(eff), base);
    assert_ptr_equal(sb_config_base(base), base);
    assert_int_equal(eff->pools[0].n_endpoints, 3);
    assert_string_equal(eff->pools[0].endpoints[0].address, "127.0.0.1:9000");
    assert_int_equal(eff->pools[0].endpoints[0].source, SB_EP_CONFIG);
    assert_string_equal(eff->pools[0].endpoints[1].label_values[0], "z");
    assert_string_equal(eff->pools[0].endpoints[2].address, "10.1.0.5:9000");
    assert_int_equal(eff->pools[0].endpoints[2].source, SB_EP_DNS);
    assert_true(eff->pools[0].endpoints[2].draining);
    assert_int_equal(eff->pools[1].n_endpoints, 1);
    assert_string_equal(eff->pools[1].endpoints[0].address, "[::1]:7000");
    assert_string_equal(eff->pools[1].endpoints[0].host, "::1");
    assert_string_equal(eff->pools[1].endpoints[0].label_keys[0], "zone");
    /* Everything else is the file's. */
    assert_ptr_equal(eff->pools[0].name, base->pools[0].name);
    assert_int_equal(base->pools[0].n_endpoints, 2);
    assert_int_equal(base->pools[1].n_endpoints, 0);
    /* The file's config is freed by whichever goes last (ASan checks both orders). */
    sb_config_free(base);
    assert_string_equal(eff->pools[1].models[0], "m2");
    sb_config_free(eff);
    base = parse();
    eff = sb_config_with_members(base, m, 1);
    sb_config *eff2 = sb_config_with_members(eff, m + 1, 1); /* built over an effective one: its base */
    assert_ptr_equal(sb_config_base(eff2), base);
    assert_int_equal(eff2->pools[1].n_endpoints, 0);
    sb_config_free(eff);
    sb_config_free(eff2);
    sb_config_free(base);
}

static void test_out_of_memory_leaks_nothing(void **state)
{
    (void)state;
    sb_member m[] = {{.pool = 1, .source = SB_EP_API, .host = "h", .port = 1}};
    for (long n = 0; n < 40; n++) {
        sb_config *base = parse();
        sb_alloc_fail_after(n);
        sb_config *eff = sb_config_with_members(base, m, 1);
        sb_alloc_fail_after(-1);
        if (eff)
            assert_int_equal(eff->pools[1].n_endpoints, 1);
        sb_config_free(eff);
        sb_config_free(base);
    }
}

static void test_format_and_split_address(void **state)
{
    (void)state;
    char buf[64], host[64];
    uint16_t port;
    assert_true(sb_config_format_address("fd00::1", 80, buf, sizeof buf));
    assert_string_equal(buf, "[fd00::1]:80");
    assert_false(sb_config_format_address("a-long-name", 80, buf, 8));
    assert_null(sb_config_split_address("[fd00::1]:80", host, sizeof host, &port));
    assert_string_equal(host, "fd00::1");
    assert_int_equal(port, 80);
    assert_non_null(sb_config_split_address("fd00::1:80", host, sizeof host, &port));
    assert_non_null(sb_config_split_address("h:0", host, sizeof host, &port));
    assert_non_null(sb_config_split_address("bad host:1", host, sizeof host, &port));
    assert_string_equal(sb_config_split_address("abcdefgh:1", host, 4, &port), "host too long");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_appended_in_order),
        cmocka_unit_test(test_out_of_memory_leaks_nothing),
        cmocka_unit_test(test_format_and_split_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
