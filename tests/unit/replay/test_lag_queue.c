/* Tests src/replay/lag_queue.c: records become visible lag_ns after they were pushed, in push
 * order; the bounds apply the oldest early rather than lose them; lag 0 applies at once.
 * A hand-driven clock: nothing sleeps. */
#include "sb_test.h"

#include <string.h>

#include "replay/lag_queue.h"

#define MS 1000000ULL

typedef struct seen {
    uint64_t ids[64];
    uint32_t kinds[64];
    char text[64][8];
    size_t n;
} seen;

static void apply(void *ctx, uint32_t kind, uint64_t id, const void *payload, size_t len)
{
    seen *s = ctx;
    assert_true(s->n < 64);
    s->ids[s->n] = id;
    s->kinds[s->n] = kind;
    memset(s->text[s->n], 0, 8);
    if (len)
        memcpy(s->text[s->n], payload, len < 7 ? len : 7);
    s->n++;
}

static void test_visible_after_the_lag_in_order(void **state)
{
    (void)state;
    seen s = {0};
    sb_lag_queue *q = sb_lag_queue_new(20 * MS, 0, 0, apply, &s);
    assert_non_null(q);
    char buf[4] = "abc";
    assert_int_equal(sb_lag_queue_push(q, 100 * MS, 1, 7, buf, 3), 0);
    buf[0] = 'x'; /* the queue kept its own copy */
    assert_int_equal(sb_lag_queue_push(q, 105 * MS, 2, 8, NULL, 0), 0);
    sb_lag_queue_advance(q, 120 * MS - 1);
    assert_int_equal(s.n, 0);
    assert_int_equal(sb_lag_queue_len(q), 2);
    sb_lag_queue_advance(q, 120 * MS);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.ids[0], 7);
    assert_int_equal(s.kinds[0], 1);
    assert_string_equal(s.text[0], "abc");
    sb_lag_queue_advance(q, 200 * MS);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ids[1], 8);
    assert_int_equal(sb_lag_queue_early(q), 0);
    sb_lag_queue_free(q);
}

static void test_bounds_apply_the_oldest_early(void **state)
{
    (void)state;
    seen s = {0};
    sb_lag_queue *q = sb_lag_queue_new(1000 * MS, 2, 0, apply, &s);
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(sb_lag_queue_push(q, i * MS, 0, i, NULL, 0), 0);
    assert_int_equal(s.n, 3); /* 0, 1, 2 went early, in order */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(s.ids[i], i);
    assert_int_equal(sb_lag_queue_early(q), 3);
    assert_int_equal(sb_lag_queue_len(q), 2);
    sb_lag_queue_free(q); /* frees what is still queued */
    /* A byte bound: 10 bytes at most waiting. */
    memset(&s, 0, sizeof(s));
    q = sb_lag_queue_new(1000 * MS, 0, 10, apply, &s);
    assert_int_equal(sb_lag_queue_push(q, 0, 0, 1, "aaaaaa", 6), 0);
    assert_int_equal(sb_lag_queue_push(q, 0, 0, 2, "bbbbbb", 6), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.ids[0], 1);
    sb_lag_queue_free(q);
}

static void test_zero_lag_applies_at_once(void **state)
{
    (void)state;
    seen s = {0};
    sb_lag_queue *q = sb_lag_queue_new(0, 0, 0, apply, &s);
    assert_int_equal(sb_lag_queue_push(q, 5, 3, 9, "z", 1), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(sb_lag_queue_len(q), 0);
    sb_lag_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_after_the_lag_in_order),
        cmocka_unit_test(test_bounds_apply_the_oldest_early),
        cmocka_unit_test(test_zero_lag_applies_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
