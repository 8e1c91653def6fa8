/* Tests base/table: random operations against a naive model (with the probe-run invariant
 * checked throughout), backward-shift deletion across the wrap-around, growth, equal tags
 * told apart by the equality callback, keys crafted to collide under one secret probing short
 * under another, allocation failure leaving the table unchanged, and the zeroed table. */
#include "sb_test.h"

#include "base/alloc.h"
#include "base/table.h"

/* The caller's side: entries with 64-bit keys, the table holding their indices. */
typedef struct store {
    sb_table t;
    uint64_t *keys;
    size_t n;
} store;

/* The keys array is the entry array: stride 8, key at offset 0. */
static sb_table_key64 key_of(const store *s, uint64_t key) { return (sb_table_key64){s->keys, sizeof(uint64_t), 0, key}; }

static size_t store_slot(store *s, uint64_t key)
{
    sb_table_key64 q = key_of(s, key);
    return sb_table_find(&s->t, sb_table_tag_u64(&s->t, key), sb_table_key64_eq, &q);
}

/* Every entry can be reached from its home slot without crossing an empty slot, no tag or
 * value appears twice, and the count is right: what backward shifts must preserve. */
static void check_invariant(const sb_table *t)
{
    size_t mask = t->cap - 1, used = 0;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->vals[i])
            continue;
        used++;
        for (size_t j = (size_t)t->tags[i] & mask; j != i; j = (j + 1) & mask)
            assert_true(t->vals[j] != 0);
    }
    assert_int_equal(used, t->used);
    assert_true(t->used * 2 <= t->cap);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_random_against_model(void **state)
{
    (void)state;
    enum { KEYS = 700, OPS = 40000 };
    /* Model: present[k] says whether key k is in, val[k] the value it was put with. Keys are
     * spread over 64 bits but drawn from a small set, so inserts, hits and deletes all occur. */
    static uint64_t universe[KEYS];
    static bool present[KEYS];
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (size_t k = 0; k < KEYS; k++)
        universe[k] = rng_next(&seed);
    store s = {.keys = universe, .n = KEYS};
    sb_table_init(&s.t, 77);
    assert_int_equal(sb_table_reserve(&s.t, 1), 0);
    size_t in = 0;
    for (int op = 0; op < OPS; op++) {
        size_t k = rng_next(&seed) % KEYS;
        unsigned what = (unsigned)(rng_next(&seed) % 3);
        if (what == 0 && !present[k]) {
            assert_int_equal(sb_table_reserve(&s.t, sb_table_count(&s.t) + 1), 0);
            size_t i = store_slot(&s, universe[k]);
            assert_false(sb_table_occupied(&s.t, i));
            sb_table_put(&s.t, i, sb_table_tag_u64(&s.t, universe[k]), (uint32_t)k);
            present[k] = true;
            in++;
        } else if (what == 1 && present[k]) {
            size_t i = store_slot(&s, universe[k]);
            assert_true(sb_table_occupied(&s.t, i));
            sb_table_delete(&s.t, i);
            present[k] = false;
            in--;
        } else {
            size_t i = store_slot(&s, universe[k]);
            assert_int_equal(i != SIZE_MAX && sb_table_occupied(&s.t, i), present[k]);
            if (present[k])
                assert_int_equal(sb_table_val(&s.t, i), k);
        }
        assert_int_equal(sb_table_count(&s.t), in);
        if (op % 1000 == 0)
            check_invariant(&s.t);
    }
    check_invariant(&s.t);
    for (size_t k = 0; k < KEYS; k++) {
        size_t i = store_slot(&s, universe[k]);
        assert_int_equal(sb_table_occupied(&s.t, i), present[k]);
    }
    assert_int_equal(s.t.probes.searches, OPS + KEYS);
    sb_table_free(&s.t);
}

/* Caller-chosen tags place entries exactly: a run that wraps from the last slot to the first,
 * then deletions in its middle must pull the right entries back and leave the others. */
static void test_delete_shifts_across_wrap(void **state)
{
    (void)state;
    sb_table t;
    sb_table_init(&t, 1);
    assert_int_equal(sb_table_reserve(&t, 8), 0);
    assert_int_equal(t.cap, 16);
    /* Homes 14, 14, 15, 14, 0, 1: they fill 14, 15, 0, 1, 2, 3. Tag bits above the mask make
     * every tag distinct. */
    const uint64_t tags[] = {14 | 1u << 8, 14 | 2u << 8, 15 | 3u << 8, 14 | 4u << 8, 0 | 5u << 8, 1 | 6u << 8};
    for (uint32_t v = 0; v < 6; v++) {
        size_t i = sb_table_find(&t, tags[v], NULL, NULL);
        assert_false(sb_table_occupied(&t, i));
        sb_table_put(&t, i, tags[v], v);
    }
    assert_int_equal(sb_table_find(&t, tags[3], NULL, NULL), 1);
    assert_int_equal(sb_table_find(&t, tags[5], NULL, NULL), 3);
    /* Delete the entry in slot 15 (home 14): everything after it that may move does. */
    sb_table_delete(&t, sb_table_find(&t, tags[1], NULL, NULL));
    check_invariant(&t);
    assert_int_equal(sb_table_find(&t, tags[2], NULL, NULL), 15); /* home 15: moved back to it */
    assert_int_equal(sb_table_find(&t, tags[3], NULL, NULL), 0);  /* home 14: moved back one */
    assert_int_equal(sb_table_find(&t, tags[4], NULL, NULL), 1);  /* home 0: moved to slot 1 */
    assert_int_equal(sb_table_find(&t, tags[5], NULL, NULL), 2);
    assert_false(sb_table_occupied(&t, 3));
    /* Delete the head of the run: the rest stays findable, nothing lands before its home. */
    sb_table_delete(&t, sb_table_find(&t, tags[0], NULL, NULL));
    check_invariant(&t);
    for (uint32_t v = 2; v < 6; v++) {
        size_t i = sb_table_find(&t, tags[v], NULL, NULL);
        assert_true(sb_table_occupied(&t, i));
        assert_int_equal(sb_table_val(&t, i), v);
    }
    assert_false(sb_table_occupied(&t, sb_table_find(&t, tags[0], NULL, NULL)));
    assert_false(sb_table_occupied(&t, sb_table_find(&t, tags[1], NULL, NULL)));
    assert_int_equal(sb_table_count(&t), 4);
    sb_table_free(&t);
}

static void test_growth(void **state)
{
    (void)state;
    enum { N = 20000 };
    static uint64_t keys[N];
    store s = {.keys = keys, .n = N};
    sb_table_init(&s.t, 5);
    assert_int_equal(s.t.cap, 0);
    for (uint32_t k = 0; k < N; k++) {
        keys[k] = (uint64_t)k * 4096; /* structured keys: the keyed tags spread them anyway */
        assert_int_equal(sb_table_reserve(&s.t, sb_table_count(&s.t) + 1), 0);
        size_t i = store_slot(&s, keys[k]);
        sb_table_put(&s.t, i, sb_table_tag_u64(&s.t, keys[k]), k);
        assert_true(s.t.used * 2 <= s.t.cap);
    }
    assert_int_equal(s.t.cap, 65536); /* the smallest power of two at most half full */
    check_invariant(&s.t);
    for (uint32_t k = 0; k < N; k++) {
        size_t i = store_slot(&s, keys[k]);
        assert_true(sb_table_occupied(&s.t, i));
        assert_int_equal(sb_table_val(&s.t, i), k);
    }
    /* Room already there: reserve neither allocates nor moves anything. */
    sb_alloc_fail_after(0);
    assert_int_equal(sb_table_reserve(&s.t, N), 0);
    sb_alloc_fail_after(-1);
    assert_int_equal(sb_table_bytes(&s.t), 65536 * 12);
    sb_table_free(&s.t);
    assert_int_equal(s.t.cap, 0);
    assert_int_equal(sb_table_count(&s.t), 0);
}

/* Two different keys with the same tag: the equality callback tells them apart, and deleting
 * one leaves the other. */
static void test_equal_tags_need_eq(void **state)
{
    (void)state;
    uint64_t keys[2] = {111, 222};
    store s = {.keys = keys, .n = 2};
    sb_table_init(&s.t, 9);
    assert_int_equal(sb_table_reserve(&s.t, 2), 0);
    const uint64_t tag = 0x1234;
    for (uint32_t v = 0; v < 2; v++) {
        sb_table_key64 q = key_of(&s, keys[v]);
        size_t i = sb_table_find(&s.t, tag, sb_table_key64_eq, &q);
        assert_false(sb_table_occupied(&s.t, i));
        sb_table_put(&s.t, i, tag, v);
    }
    for (uint32_t v = 0; v < 2; v++) {
        sb_table_key64 q = key_of(&s, keys[v]);
        assert_int_equal(sb_table_val(&s.t, sb_table_find(&s.t, tag, sb_table_key64_eq, &q)), v);
    }
    sb_table_key64 q0 = key_of(&s, keys[0]), q1 = key_of(&s, keys[1]);
    sb_table_delete(&s.t, sb_table_find(&s.t, tag, sb_table_key64_eq, &q0));
    assert_false(sb_table_occupied(&s.t, sb_table_find(&s.t, tag, sb_table_key64_eq, &q0)));
    assert_int_equal(sb_table_val(&s.t, sb_table_find(&s.t, tag, sb_table_key64_eq, &q1)), 1);
    /* Without a callback, the tag alone decides: the first entry with it. */
    assert_int_equal(sb_table_val(&s.t, sb_table_find(&s.t, tag, NULL, NULL)), 1);
    sb_table_free(&s.t);
}

/* Keys ground offline to share a home slot under secret A crowd one run in a table keyed by
 * A, and spread in a table keyed by any other secret: the point of keyed tags. */
static void probe_crafted(uint64_t secret, const uint64_t *keys, size_t n, sb_table_probes *out)
{
    store s = {.keys = (uint64_t *)keys, .n = n};
    sb_table_init(&s.t, secret);
    assert_int_equal(sb_table_reserve(&s.t, n), 0);
    for (uint32_t k = 0; k < n; k++) {
        size_t i = store_slot(&s, keys[k]);
        sb_table_put(&s.t, i, sb_table_tag_u64(&s.t, keys[k]), k);
    }
    for (uint32_t k = 0; k < n; k++)
        assert_int_equal(sb_table_val(&s.t, store_slot(&s, keys[k])), k);
    *out = s.t.probes;
    sb_table_free(&s.t);
}

static void test_crafted_collisions_probe_short(void **state)
{
    (void)state;
    enum { N = 1000 }; /* a 2048-slot table */
    static uint64_t crafted[N];
    const uint64_t A = 0xA11CE;
    sb_table probe_key;
    sb_table_init(&probe_key, A);
    uint64_t x = 1;
    for (size_t n = 0; n < N; x++)
        if ((sb_table_tag_u64(&probe_key, x) & 2047) == 0)
            crafted[n++] = x;
    sb_table_probes under_a, under_b;
    probe_crafted(A, crafted, N, &under_a);
    probe_crafted(0xB0B, crafted, N, &under_b);
    /* Under A the attack works (n^2/2 probes per pass), which shows the keys are crafted. */
    assert_true(under_a.longest >= N - 1);
    assert_true(under_a.probes / under_a.searches > 100);
    /* Under B they behave like random keys at load 1/2: ~0.5-1.5 probes on average. */
    assert_true(under_b.probes <= 3 * under_b.searches);
    assert_true(under_b.longest < 64);
}

/* Growth that cannot allocate reports it and leaves the table as it was; lookups never
 * allocate. */
static void test_allocation_failure(void **state)
{
    (void)state;
    uint64_t keys[64];
    store s = {.keys = keys, .n = 64};
    sb_table_init(&s.t, 3);
    sb_alloc_fail_after(0);
    assert_int_equal(sb_table_reserve(&s.t, 1), -1);
    sb_alloc_fail_after(-1);
    assert_int_equal(s.t.cap, 0);
    assert_int_equal(sb_table_find(&s.t, 42, NULL, NULL), SIZE_MAX);
    assert_false(sb_table_occupied(&s.t, SIZE_MAX));

    for (uint32_t k = 0; k < 8; k++) {
        keys[k] = 1000 + k;
        assert_int_equal(sb_table_reserve(&s.t, k + 1), 0);
        sb_table_put(&s.t, store_slot(&s, keys[k]), sb_table_tag_u64(&s.t, keys[k]), k);
    }
    assert_int_equal(s.t.cap, 16);
    /* The second of the two arrays fails, then the first. */
    for (long after = 1; after >= 0; after--) {
        sb_alloc_fail_after(after);
        assert_int_equal(sb_table_reserve(&s.t, 9), -1);
        sb_alloc_fail_after(-1);
        assert_int_equal(s.t.cap, 16);
        assert_int_equal(sb_table_count(&s.t), 8);
    }
    sb_alloc_fail_after(0);
    for (uint32_t k = 0; k < 8; k++)
        assert_int_equal(sb_table_val(&s.t, store_slot(&s, keys[k])), k);
    sb_table_delete(&s.t, store_slot(&s, keys[3]));
    sb_alloc_fail_after(-1);
    check_invariant(&s.t);
    assert_int_equal(sb_table_reserve(&s.t, 9), 0);
    assert_int_equal(s.t.cap, 32);
    for (uint32_t k = 0; k < 8; k++)
        assert_int_equal(sb_table_occupied(&s.t, store_slot(&s, keys[k])), k != 3);
    sb_table_free(&s.t);
}

/* A zeroed table (proto/auth.h embeds one in a zero-initialised struct) is empty and usable;
 * a wiping table grows and frees like any other. */
static void test_zeroed_and_wiping_tables(void **state)
{
    (void)state;
    sb_table t = {0};
    assert_int_equal(sb_table_count(&t), 0);
    assert_false(sb_table_occupied(&t, sb_table_find(&t, 7, NULL, NULL)));
    sb_table_wipe_tags(&t);
    for (uint32_t v = 0; v < 100; v++) {
        assert_int_equal(sb_table_reserve(&t, v + 1), 0);
        uint64_t tag = (uint64_t)v * 0x9E3779B97F4A7C15ULL;
        sb_table_put(&t, sb_table_find(&t, tag, NULL, NULL), tag, v);
    }
    check_invariant(&t);
    sb_table_free(&t);
    sb_table_free(&t); /* freeing an empty table is allowed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_delete_shifts_across_wrap),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_equal_tags_need_eq),
        cmocka_unit_test(test_crafted_collisions_probe_short),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_zeroed_and_wiping_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
