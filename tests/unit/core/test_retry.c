/* Tests core/retry: which failures are retried, the retry budget, the jittered backoff. */
#include "sb_test.h"

#include "core/retry.h"

static void test_defaults_retry_what_never_reached_an_answer(void **state)
{
    (void)state;
    sb_retry_policy p = sb_retry_policy_default();
    assert_true(sb_retry_on(&p, SB_RETRY_CONNECT, 0));
    assert_true(sb_retry_on(&p, SB_RETRY_RESET, 0));
    /* A timed-out request may be running: not retried unless asked. */
    assert_false(sb_retry_on(&p, SB_RETRY_TIMEOUT, 0));
    assert_true(sb_retry_on(&p, SB_RETRY_STATUS, 500));
    assert_true(sb_retry_on(&p, SB_RETRY_STATUS, 502));
    assert_true(sb_retry_on(&p, SB_RETRY_STATUS, 503));
    assert_true(sb_retry_on(&p, SB_RETRY_STATUS, 504));
    assert_false(sb_retry_on(&p, SB_RETRY_STATUS, 501));
    assert_false(sb_retry_on(&p, SB_RETRY_STATUS, 429));
    assert_false(sb_retry_on(&p, SB_RETRY_STATUS, 700));
    assert_int_equal(p.attempts, 3);
    assert_int_equal(sb_retry_reason_find("reset"), SB_RETRY_RESET);
    assert_int_equal(sb_retry_reason_find("status"), -1);
    assert_string_equal(sb_retry_reason_name(SB_RETRY_CONNECT), "connect-failure");
}

static void test_budget_is_a_share_with_a_floor(void **state)
{
    (void)state;
    sb_retry_policy p = sb_retry_policy_default(); /* 0.2, floor 3 */
    /* A lone request may retry, and so may up to the floor. */
    assert_true(sb_retry_budget_allows(&p, 0, 1));
    assert_true(sb_retry_budget_allows(&p, 2, 3));
    assert_false(sb_retry_budget_allows(&p, 3, 3));
    /* Past the floor, a fifth of the requests in flight. */
    assert_true(sb_retry_budget_allows(&p, 19, 100));
    assert_false(sb_retry_budget_allows(&p, 20, 100));
    p.min_retries = 0;
    assert_false(sb_retry_budget_allows(&p, 0, 1));
    p.budget_ratio = 1;
    assert_true(sb_retry_budget_allows(&p, 0, 1));
}

static void test_backoff_doubles_capped_and_jittered(void **state)
{
    (void)state;
    sb_retry_policy p = sb_retry_policy_default(); /* 25 ms doubling, at most 250 */
    uint32_t lo[5] = {13, 25, 50, 100, 125}, hi[5] = {25, 50, 100, 200, 250};
    for (uint32_t r = 1; r <= 5; r++) {
        uint32_t seen_lo = UINT32_MAX, seen_hi = 0;
        for (uint64_t rnd = 0; rnd < 1000; rnd++) {
            uint32_t ms = sb_retry_backoff_ms(&p, r, rnd * 0x9e3779b97f4a7c15ull);
            seen_lo = ms < seen_lo ? ms : seen_lo;
            seen_hi = ms > seen_hi ? ms : seen_hi;
        }
        assert_true(seen_lo >= lo[r - 1] && seen_hi <= hi[r - 1]);
        assert_true(seen_lo < seen_hi); /* jittered: not all in step */
    }
    p.backoff_ms = 0;
    assert_int_equal(sb_retry_backoff_ms(&p, 1, 12345), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_retry_what_never_reached_an_answer),
        cmocka_unit_test(test_budget_is_a_share_with_a_floor),
        cmocka_unit_test(test_backoff_doubles_capped_and_jittered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
