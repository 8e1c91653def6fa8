/* proto/members: the life cycle of dynamic endpoints, on a hand-driven clock. */
#include "sb_test.h"

#include "proto/members.h"

static sb_registration reg(const char *pool, const char *host, uint16_t port, uint64_t ttl_ms)
{
    return (sb_registration){.pool = pool, .host = host, .port = port, .ttl_ms = ttl_ms};
}

static void test_register_refresh_and_labels(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 4};
    bool changed;
    sb_registration r = reg("p", "10.0.0.1", 8000, 0);
    assert_int_equal(sb_members_register(&m, &r, 0, &changed), SB_MEMBERS_ADDED);
    assert_true(changed);
    assert_int_equal(m.n, 1);
    assert_string_equal(m.items[0].address, "10.0.0.1:8000");
    assert_int_equal(m.items[0].source, SB_EP_API);
    /* A heartbeat that changes nothing routing sees: no rebuild. */
    assert_int_equal(sb_members_register(&m, &r, SB_MS(10), &changed), SB_MEMBERS_REFRESHED);
    assert_false(changed);
    const char *k[] = {"zone"}, *v[] = {"a"};
    r.label_keys = k;
    r.label_values = v;
    r.n_labels = 1;
    r.engine = "llama.cpp";
    assert_int_equal(sb_members_register(&m, &r, SB_MS(20), &changed), SB_MEMBERS_REFRESHED);
    assert_true(changed);
    assert_string_equal(m.items[0].label_values[0], "a");
    assert_string_equal(m.items[0].engine, "llama.cpp");
    /* IPv6 hosts are spelled with brackets; the same host in another pool is another member. */
    sb_registration r6 = reg("p", "::1", 9000, 0);
    assert_int_equal(sb_members_register(&m, &r6, 0, &changed), SB_MEMBERS_ADDED);
    assert_non_null(sb_members_find(&m, "p", "[::1]:9000"));
    sb_registration rq = reg("q", "10.0.0.1", 8000, 0);
    assert_int_equal(sb_members_register(&m, &rq, 0, &changed), SB_MEMBERS_ADDED);
    assert_int_equal(m.n, 3);
    sb_members_free(&m);
}

static void test_bounded_per_pool(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 2};
    bool changed;
    sb_registration a = reg("p", "h1", 1, 0), b = reg("p", "h2", 1, 0), c = reg("p", "h3", 1, 0),
                    d = reg("q", "h3", 1, 0);
    assert_int_equal(sb_members_register(&m, &a, 0, &changed), SB_MEMBERS_ADDED);
    assert_int_equal(sb_members_register(&m, &b, 0, &changed), SB_MEMBERS_ADDED);
    assert_int_equal(sb_members_register(&m, &c, 0, &changed), SB_MEMBERS_FULL);
    assert_int_equal(sb_members_register(&m, &b, 0, &changed), SB_MEMBERS_REFRESHED); /* a refresh still works */
    assert_int_equal(sb_members_register(&m, &d, 0, &changed), SB_MEMBERS_ADDED);     /* another pool's budget */
    const char *hosts[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
    size_t dropped;
    assert_false(sb_members_sync_dns(&m, "p", hosts, 3, 80, 0, &dropped));
    assert_int_equal(dropped, 3);
    sb_members_free(&m);
}

static bool never_idle(void *arg, const char *pool, const char *address)
{
    (void)pool;
    (void)address;
    (*(int *)arg)++;
    return false;
}

static bool always_idle(void *arg, const char *pool, const char *address)
{
    (void)arg;
    (void)pool;
    (void)address;
    return true;
}

static void test_ttl_drains_then_removes(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 8};
    bool changed;
    sb_registration r = reg("p", "h", 1, 500);
    sb_members_register(&m, &r, SB_MS(1000), &changed);
    assert_int_equal(m.items[0].deadline_ns, SB_MS(1500));
    int asked = 0;
    assert_false(sb_members_tick(&m, SB_MS(1499), SB_MS(100), never_idle, &asked));
    /* A refresh moves the deadline. */
    sb_members_register(&m, &r, SB_MS(1400), &changed);
    assert_false(sb_members_tick(&m, SB_MS(1899), SB_MS(100), never_idle, &asked));
    assert_true(sb_members_tick(&m, SB_MS(1900), SB_MS(100), never_idle, &asked));
    assert_true(m.items[0].draining);
    assert_string_equal(m.items[0].drain_reason, "ttl expired");
    /* Busy: kept until drain_ns has passed. */
    assert_false(sb_members_tick(&m, SB_MS(1950), SB_MS(100), never_idle, &asked));
    assert_true(asked > 0);
    assert_int_equal(m.n, 1);
    /* A registration while it drains brings it back. */
    assert_int_equal(sb_members_register(&m, &r, SB_MS(1960), &changed), SB_MEMBERS_REFRESHED);
    assert_true(changed);
    assert_false(m.items[0].draining);
    assert_true(sb_members_tick(&m, SB_MS(2460), SB_MS(100), never_idle, &asked)); /* expired again */
    assert_true(sb_members_tick(&m, SB_MS(2560), SB_MS(100), never_idle, &asked)); /* bound passed */
    assert_int_equal(m.n, 0);
    sb_members_free(&m);
}

static void test_delete_drains_until_idle(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 8};
    bool changed;
    sb_registration r = reg("p", "h", 1, 0);
    sb_members_register(&m, &r, 0, &changed);
    assert_int_equal(sb_members_remove(&m, "p", "nope:1", 0), -1);
    assert_int_equal(sb_members_remove(&m, "q", "h:1", 0), -1);
    assert_int_equal(sb_members_remove(&m, "p", "h:1", SB_MS(5)), 0);
    assert_true(m.items[0].draining);
    assert_string_equal(m.items[0].drain_reason, "deleted");
    int asked = 0;
    assert_false(sb_members_tick(&m, SB_MS(6), SB_MS(30000), never_idle, &asked));
    assert_int_equal(asked, 1);
    assert_true(sb_members_tick(&m, SB_MS(7), SB_MS(30000), always_idle, NULL));
    assert_int_equal(m.n, 0);
    sb_members_free(&m);
}

static void test_dns_sync(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 8};
    bool changed;
    size_t dropped;
    const char *first[] = {"10.0.0.1", "fd00::2", "10.0.0.1"};
    assert_true(sb_members_sync_dns(&m, "p", first, 3, 8000, 0, &dropped));
    assert_int_equal(m.n, 2); /* the repeated address once */
    assert_non_null(sb_members_find(&m, "p", "[fd00::2]:8000"));
    assert_int_equal(sb_members_find(&m, "p", "10.0.0.1:8000")->source, SB_EP_DNS);
    assert_false(sb_members_sync_dns(&m, "p", first, 2, 8000, 0, &dropped)); /* the same answer */
    /* An API registration of another address in the pool is not DNS's to remove. */
    sb_registration r = reg("p", "10.9.9.9", 8000, 0);
    sb_members_register(&m, &r, 0, &changed);
    const char *second[] = {"10.0.0.3"};
    assert_true(sb_members_sync_dns(&m, "p", second, 1, 8000, SB_MS(1), &dropped));
    assert_true(sb_members_find(&m, "p", "10.0.0.1:8000")->draining);
    assert_string_equal(sb_members_find(&m, "p", "10.0.0.1:8000")->drain_reason, "gone from DNS");
    assert_true(sb_members_find(&m, "p", "[fd00::2]:8000")->draining);
    assert_false(sb_members_find(&m, "p", "10.9.9.9:8000")->draining);
    assert_false(sb_members_find(&m, "p", "10.0.0.3:8000")->draining);
    /* Back in the answer before it was removed: it stays. */
    const char *third[] = {"10.0.0.3", "10.0.0.1"};
    assert_true(sb_members_sync_dns(&m, "p", third, 2, 8000, SB_MS(2), &dropped));
    assert_false(sb_members_find(&m, "p", "10.0.0.1:8000")->draining);
    assert_true(sb_members_tick(&m, SB_MS(3), SB_MS(1000), always_idle, NULL));
    assert_null(sb_members_find(&m, "p", "[fd00::2]:8000"));
    assert_int_equal(m.n, 3);
    /* A pool whose endpoints_from went away: an empty answer drains its DNS members only. */
    assert_true(sb_members_sync_dns(&m, "p", NULL, 0, 0, SB_MS(4), &dropped));
    assert_true(sb_members_tick(&m, SB_MS(5), SB_MS(1000), always_idle, NULL));
    assert_int_equal(m.n, 1);
    assert_non_null(sb_members_find(&m, "p", "10.9.9.9:8000"));
    sb_members_free(&m);
}

static void test_view_maps_pool_names(void **state)
{
    (void)state;
    sb_members m = {.max_per_pool = 8};
    bool changed;
    sb_registration a = reg("second", "h", 1, 0), b = reg("gone", "h", 2, 0);
    sb_members_register(&m, &a, 0, &changed);
    sb_members_register(&m, &b, 0, &changed);
    sb_pool_config pools[2] = {{.name = "first"}, {.name = "second"}};
    sb_config cfg = {.pools = pools, .n_pools = 2};
    sb_member out[4];
    assert_int_equal(sb_members_view(&m, &cfg, out, 4), 1);
    assert_int_equal(out[0].pool, 1);
    assert_string_equal(out[0].host, "h");
    assert_int_equal(sb_members_view(&m, &cfg, out, 0), 0);
    sb_members_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_refresh_and_labels),
        cmocka_unit_test(test_bounded_per_pool),
        cmocka_unit_test(test_ttl_drains_then_removes),
        cmocka_unit_test(test_delete_drains_until_idle),
        cmocka_unit_test(test_dns_sync),
        cmocka_unit_test(test_view_maps_pool_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
