/* Tests base/buf's number formatting (sb_fmt_u64, sb_fmt_hex64, sb_buf_put_u64), which the
 * request path uses instead of printf: each must write exactly what printf writes. */
#include "sb_test.h"

#include "base/buf.h"

static const uint64_t values[] = {
    0,         1, 9, 10, 99, 100, 4010, 65535, 1000000007ULL, 0xffffffffULL, 12345678901234567890ULL, UINT64_MAX - 1,
    UINT64_MAX};

static void test_decimal_as_printf(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char want[32], got[32];
        int n = snprintf(want, sizeof(want), "%llu", (unsigned long long)values[i]);
        memset(got, '#', sizeof(got));
        assert_int_equal(sb_fmt_u64(got, values[i]), (size_t)n);
        assert_memory_equal(got, want, (size_t)n);
        assert_int_equal(got[n], '#'); /* nothing written past the digits */
    }
}

static void test_hex_as_printf(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char want[32], got[17];
        snprintf(want, sizeof(want), "%016llx", (unsigned long long)values[i]);
        got[16] = '#';
        sb_fmt_hex64(got, values[i]);
        assert_memory_equal(got, want, 16);
        assert_int_equal(got[16], '#');
    }
}

static void test_put_appends(void **state)
{
    (void)state;
    sb_buf b = {0};
    assert_int_equal(sb_buf_puts(&b, "Content-Length: "), 0);
    assert_int_equal(sb_buf_put_u64(&b, 4010), 0);
    assert_int_equal(sb_buf_put_u64(&b, 0), 0);
    assert_string_equal(b.data, "Content-Length: 40100");
    assert_int_equal(b.len, strlen("Content-Length: 40100"));
    sb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decimal_as_printf),
        cmocka_unit_test(test_hex_as_printf),
        cmocka_unit_test(test_put_appends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
