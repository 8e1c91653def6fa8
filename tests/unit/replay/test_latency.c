/* Tests replay/latency: percentiles interpolate between sorted samples, the inter-token
 * histogram's buckets are ordered and their midpoints close to the values they hold, the
 * summary sorts and reads the median gap, and the imbalance figure. */
#include "sb_test.h"

#include <math.h>

#include "replay/driver.h"
#include "replay/latency.h"

static void test_percentile(void **state)
{
    (void)state;
    const sb_ns v[5] = {10, 20, 30, 40, 50};
    assert_true(sb_replay_percentile(v, 0, 0.5) == 0);
    assert_true(sb_replay_percentile(v, 5, 0.5) == 30);
    assert_true(sb_replay_percentile(v, 5, 0.99) == 49.6);
    assert_true(sb_replay_percentile(v, 5, 1.0) == 50);
    assert_true(sb_replay_percentile(v, 1, 0.9) == 10);
}

static void test_itl_buckets(void **state)
{
    (void)state;
    size_t prev = 0;
    for (sb_ns x = 0; x < 300; x++) {
        size_t b = sb_replay_itl_bucket(x);
        assert_true(b >= prev);
        prev = b;
    }
    assert_int_equal(sb_replay_itl_bucket(255), 255); /* exact below 256 ns */
    for (sb_ns x = 256; x < (sb_ns)1 << 62; x = x * 3 + 7) {
        assert_true(sb_replay_itl_bucket(x) < SB_REPLAY_ITL_BUCKETS);
        assert_true(sb_replay_itl_bucket(x) >= sb_replay_itl_bucket(x / 2));
    }
    assert_true(sb_replay_itl_bucket(UINT64_MAX) < SB_REPLAY_ITL_BUCKETS);
}

static void test_summary(void **state)
{
    (void)state;
    sb_ns ttft[4] = {SB_MS(4), SB_MS(1), SB_MS(3), SB_MS(2)}, e2e[4] = {SB_MS(40), SB_MS(10), SB_MS(30), SB_MS(20)};
    uint64_t *hist = calloc(SB_REPLAY_ITL_BUCKETS, sizeof(uint64_t));
    assert_non_null(hist);
    for (int i = 0; i < 9; i++)
        hist[sb_replay_itl_bucket(SB_MS(5))]++;
    hist[sb_replay_itl_bucket(SB_MS(50))] += 4;
    sb_replay_result r = {0};
    sb_replay_latency_summary(&r, ttft, e2e, 4, hist);
    assert_true(ttft[0] == SB_MS(1) && ttft[3] == SB_MS(4)); /* sorted in place */
    assert_true(fabs(r.ttft_p50_ms - 2.5) < 1e-9);
    assert_true(fabs(r.ttft_mean_ms - 2.5) < 1e-9);
    assert_true(fabs(r.e2e_p50_ms - 25) < 1e-9);
    assert_true(fabs(r.itl_p50_ms - 5) < 5 * 0.004); /* a midpoint within 0.4% */
    free(hist);
}

static void test_imbalance(void **state)
{
    (void)state;
    uint64_t even[4] = {5, 5, 5, 5}, skew[2] = {0, 10}, none[3] = {0, 0, 0};
    sb_replay_result r = {.per_replica = even};
    assert_true(sb_replay_imbalance_cv(&r, 4) == 0);
    r.per_replica = skew;
    assert_true(fabs(sb_replay_imbalance_cv(&r, 2) - 1) < 1e-12);
    r.per_replica = none;
    assert_true(sb_replay_imbalance_cv(&r, 3) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile),
        cmocka_unit_test(test_itl_buckets),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_imbalance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
