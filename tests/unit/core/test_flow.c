/* Tests core/flow (admission, fair queueing and shedding): admission rules, strict band
 * order, round robin across tenants, count and byte bounds, shedding and eviction, deadlines
 * on a hand-driven clock, removal on disconnect, the tenant bound and its keyed slots (same
 * results under any secret, crafted tenant keys probe short), counters, Retry-After,
 * allocation failure, and a randomized run against a naive model of the same rules (arrays
 * scanned on every step). */
#include "sb_test.h"

#include <stdlib.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "core/flow.h"

#define ID(x) ((void *)(uintptr_t)(x))
#define UID(p) ((uintptr_t)(p))

/* What the drop callbacks saw, in order. */
typedef struct drops {
    uintptr_t id[4096];
    int band[4096];
    int reason[4096];
    size_t n;
} drops;

static void record(void *ctx, void *user, enum sb_band band, int reason)
{
    drops *d = ctx;
    assert_true(d->n < 4096);
    d->id[d->n] = UID(user);
    d->band[d->n] = band;
    d->reason[d->n] = reason;
    d->n++;
}

/* A config with per-band count bounds, a total, generous bytes, no default waits. */
static sb_flow_config cfg_of(uint32_t per_band, uint32_t total, uint32_t tenants)
{
    sb_flow_config c;
    sb_flow_config_default(&c);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        c.band[b].max_queued = per_band;
        c.band[b].max_bytes = 1ull << 40;
        c.band[b].max_wait_ns = 0;
    }
    c.max_queued_total = total;
    c.max_bytes_total = 1ull << 41;
    c.max_tenants = tenants;
    return c;
}

static sb_flow_handle put(sb_flow *f, enum sb_band b, uint64_t tenant, uintptr_t id, sb_ns now)
{
    sb_flow_item it = {.band = b, .tenant = tenant, .bytes = 100, .user = ID(id)};
    sb_flow_handle h = {0, 0};
    assert_int_equal(sb_flow_enqueue(f, &it, now, &h), SB_FLOW_QUEUED);
    return h;
}

static uintptr_t next_id(sb_flow *f, sb_ns now)
{
    return UID(sb_flow_next(f, now));
}

static void test_band_parse(void **state)
{
    assert_int_equal(sb_band_parse("critical", 8), SB_BAND_CRITICAL);
    assert_int_equal(sb_band_parse("Standard", 8), SB_BAND_STANDARD);
    assert_int_equal(sb_band_parse("SHEDDABLE", 9), SB_BAND_SHEDDABLE);
    assert_int_equal(sb_band_parse("standardx", 8), SB_BAND_STANDARD); /* exactly n bytes */
    assert_int_equal(sb_band_parse("standard", 7), -1);
    assert_int_equal(sb_band_parse("", 0), -1);
    assert_int_equal(sb_band_parse("urgent", 6), -1);
    assert_int_equal(sb_band_parse("critica\x0c", 8), -1);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        const char *n = sb_band_name((enum sb_band)b);
        assert_int_equal(sb_band_parse(n, strlen(n)), b);
    }
    assert_string_equal(sb_band_name((enum sb_band)7), "sheddable");
    assert_string_equal(sb_flow_result_name(SB_FLOW_FULL), "queue_full");
    assert_string_equal(sb_flow_result_name(SB_FLOW_SHED), "shed");
    assert_string_equal(sb_flow_result_name(SB_FLOW_EXPIRED), "queue_timeout");
    assert_string_equal(sb_flow_result_name(99), "unknown");
}

static void test_admit_rules(void **state)
{
    sb_flow_config c = cfg_of(8, 0, 8);
    sb_flow *f = sb_flow_new(&c);
    assert_non_null(f);
    for (int b = 0; b < SB_BAND_COUNT; b++)
        assert_int_equal(sb_flow_admit(f, false, (enum sb_band)b), SB_FLOW_DISPATCH);
    assert_int_equal(sb_flow_admit(f, true, SB_BAND_CRITICAL), SB_FLOW_WAIT);
    assert_int_equal(sb_flow_admit(f, true, SB_BAND_STANDARD), SB_FLOW_WAIT);
    assert_int_equal(sb_flow_admit(f, true, SB_BAND_SHEDDABLE), SB_FLOW_SHED);

    /* A queued standard request: a standard or sheddable newcomer must not overtake it even
     * with capacity free; a critical one may. */
    put(f, SB_BAND_STANDARD, 1, 1, 0);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_CRITICAL), SB_FLOW_DISPATCH);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_STANDARD), SB_FLOW_WAIT);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_SHEDDABLE), SB_FLOW_WAIT);
    assert_int_equal(next_id(f, 0), 1);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_SHEDDABLE), SB_FLOW_DISPATCH);

    /* Queued sheddable requests and free capacity: a new sheddable one waits behind them. */
    put(f, SB_BAND_SHEDDABLE, 1, 2, 0);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_SHEDDABLE), SB_FLOW_WAIT);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_STANDARD), SB_FLOW_DISPATCH);

    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_CRITICAL].admitted, 2);
    assert_int_equal(s.band[SB_BAND_STANDARD].admitted, 2);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].admitted, 2);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].shed, 1);
    assert_int_equal(s.total.admitted, 6);
    sb_flow_free(f);
}

static void test_strict_band_order(void **state)
{
    sb_flow_config c = cfg_of(16, 0, 8);
    sb_flow *f = sb_flow_new(&c);
    /* Interleaved arrivals; dispatch takes every critical, then standard, then sheddable. */
    for (uintptr_t i = 0; i < 12; i++) {
        uintptr_t band = 2 - i % 3;
        put(f, (enum sb_band)band, i % 2, 100 * (band + 1) + i, i); /* the id carries the band */
    }
    uintptr_t prev_band = 0;
    for (int k = 0; k < 12; k++) {
        uintptr_t band = next_id(f, 100) / 100 - 1;
        assert_true(band >= prev_band);
        prev_band = band;
    }
    assert_null(sb_flow_next(f, 100));
    /* A critical arrival overtakes a standard backlog at once. */
    put(f, SB_BAND_STANDARD, 1, 1, 200);
    put(f, SB_BAND_STANDARD, 1, 2, 200);
    put(f, SB_BAND_CRITICAL, 2, 9, 201);
    assert_int_equal(next_id(f, 300), 9);
    assert_int_equal(next_id(f, 300), 1);
    assert_int_equal(next_id(f, 300), 2);
    sb_flow_free(f);
}

static void test_round_robin_tenants(void **state)
{
    sb_flow_config c = cfg_of(64, 0, 8);
    sb_flow *f = sb_flow_new(&c);
    /* Tenant A bursts 10 (ids 1..10), then tenant B sends 2 (ids 101, 102). */
    for (uintptr_t i = 1; i <= 10; i++)
        put(f, SB_BAND_STANDARD, 0xA, i, 0);
    put(f, SB_BAND_STANDARD, 0xB, 101, 1);
    put(f, SB_BAND_STANDARD, 0xB, 102, 1);
    const uintptr_t want[] = {1, 101, 2, 102, 3, 4, 5, 6, 7, 8, 9, 10};
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
        assert_int_equal(next_id(f, 2), want[k]);
    assert_null(sb_flow_next(f, 2));
    sb_flow_free(f);
}

static void test_round_robin_join_end_of_round(void **state)
{
    sb_flow_config c = cfg_of(64, 0, 8);
    sb_flow *f = sb_flow_new(&c);
    for (uintptr_t i = 0; i < 3; i++) {
        put(f, SB_BAND_STANDARD, 1, 10 + i, 0);
        put(f, SB_BAND_STANDARD, 2, 20 + i, 0);
    }
    assert_int_equal(next_id(f, 1), 10);
    /* Tenant 3 arrives while it is tenant 2's turn: it goes after 2 and 1, not before. */
    put(f, SB_BAND_STANDARD, 3, 30, 1);
    assert_int_equal(next_id(f, 1), 20);
    assert_int_equal(next_id(f, 1), 11);
    assert_int_equal(next_id(f, 1), 30);
    assert_int_equal(next_id(f, 1), 21);
    assert_int_equal(next_id(f, 1), 12);
    /* Round robin is per band: a tenant's critical requests do not cost it a standard turn. */
    put(f, SB_BAND_CRITICAL, 2, 40, 2);
    assert_int_equal(next_id(f, 2), 40);
    assert_int_equal(next_id(f, 2), 22);
    assert_null(sb_flow_next(f, 2));
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenants, 0);
    sb_flow_free(f);
}

static void test_bounds_count(void **state)
{
    sb_flow_config c = cfg_of(3, 5, 8);
    sb_flow *f = sb_flow_new(&c);
    for (uintptr_t i = 0; i < 3; i++)
        put(f, SB_BAND_STANDARD, i, i + 1, 0);
    sb_flow_item it = {.band = SB_BAND_STANDARD, .tenant = 9, .bytes = 1, .user = ID(99)};
    sb_flow_handle h = {7, 7};
    assert_int_equal(sb_flow_enqueue(f, &it, 0, &h), SB_FLOW_FULL);
    assert_int_equal(h.slot, 7); /* untouched on refusal */
    /* Other bands have their own bounds, up to the pool's total of 5. */
    put(f, SB_BAND_CRITICAL, 1, 11, 0);
    put(f, SB_BAND_CRITICAL, 1, 12, 0);
    it.band = SB_BAND_CRITICAL;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL); /* total; nothing to evict */
    /* Room frees with a dispatch. */
    assert_int_equal(next_id(f, 1), 11);
    assert_int_equal(sb_flow_enqueue(f, &it, 1, NULL), SB_FLOW_QUEUED);
    /* A band with a bound of 0 never queues. */
    c = cfg_of(4, 0, 8);
    c.band[SB_BAND_SHEDDABLE].max_queued = 0;
    sb_flow *g = sb_flow_new(&c);
    it.band = SB_BAND_SHEDDABLE;
    assert_int_equal(sb_flow_enqueue(g, &it, 0, NULL), SB_FLOW_FULL);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_STANDARD].refused_full, 1);
    assert_int_equal(s.band[SB_BAND_CRITICAL].refused_full, 1);
    assert_int_equal(s.total.queued, 5);
    sb_flow_free(f);
    sb_flow_free(g);
}

static void test_bounds_bytes(void **state)
{
    sb_flow_config c = cfg_of(100, 0, 8);
    c.band[SB_BAND_STANDARD].max_bytes = 1000;
    c.band[SB_BAND_CRITICAL].max_bytes = 5000;
    c.max_bytes_total = 1500;
    sb_flow *f = sb_flow_new(&c);
    sb_flow_item it = {.band = SB_BAND_STANDARD, .tenant = 1, .bytes = 600, .user = ID(1)};
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_QUEUED);
    it.bytes = 401;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL); /* band: 1001 > 1000 */
    it.bytes = 400;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_QUEUED); /* exactly 1000 */
    it.band = SB_BAND_CRITICAL;
    it.bytes = 501;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL); /* total: 1501 > 1500 */
    it.bytes = 500;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_QUEUED);
    /* One request bigger than its band's bound can never queue. */
    it.bytes = 5001;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_STANDARD].bytes, 1000);
    assert_int_equal(s.total.bytes, 1500);
    assert_non_null(sb_flow_next(f, 0));
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.total.bytes, 1000);
    sb_flow_free(f);
}

static void test_sheddable_refused_when_saturated(void **state)
{
    sb_flow_config c = cfg_of(4, 6, 8);
    drops d = {0};
    c.on_evict = record;
    c.evict_ctx = &d;
    sb_flow *f = sb_flow_new(&c);
    /* Saturated: sheddable never waits, however empty the queue. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(sb_flow_admit(f, true, SB_BAND_SHEDDABLE), SB_FLOW_SHED);
    /* Not saturated but a backlog exists (capacity just freed): sheddable queues, and it
     * never evicts its own band to make room. */
    for (uintptr_t i = 0; i < 2; i++)
        put(f, SB_BAND_STANDARD, 1, 10 + i, 0);
    for (uintptr_t i = 0; i < 4; i++)
        put(f, SB_BAND_SHEDDABLE, 2, 20 + i, 0);
    sb_flow_item it = {.band = SB_BAND_SHEDDABLE, .tenant = 3, .bytes = 1, .user = ID(30)};
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL);
    assert_int_equal(d.n, 0);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].shed, 5);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].refused_full, 1);
    sb_flow_free(f);
}

static void test_sheddable_evicted_for_critical(void **state)
{
    sb_flow_config c = cfg_of(4, 6, 8);
    drops d = {0};
    c.on_evict = record;
    c.evict_ctx = &d;
    sb_flow *f = sb_flow_new(&c);
    sb_flow_handle hs[4];
    for (uintptr_t i = 0; i < 4; i++)
        hs[i] = put(f, SB_BAND_SHEDDABLE, i % 2, 20 + i, i);
    put(f, SB_BAND_STANDARD, 1, 10, 5);
    put(f, SB_BAND_STANDARD, 1, 11, 5);
    /* Pool full (6). A critical request evicts the newest sheddable one. */
    put(f, SB_BAND_CRITICAL, 7, 1, 6);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.id[0], 23);
    assert_int_equal(d.band[0], SB_BAND_SHEDDABLE);
    assert_int_equal(d.reason[0], SB_FLOW_SHED);
    assert_false(sb_flow_remove(f, hs[3])); /* its handle is dead */
    /* Standard may evict too. */
    put(f, SB_BAND_STANDARD, 2, 12, 7);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.id[1], 22);
    /* Bytes: a large critical request evicts as many as it needs, newest first. */
    sb_flow_config c2 = cfg_of(10, 0, 8);
    c2.max_bytes_total = 1000;
    c2.on_evict = record;
    c2.evict_ctx = &d;
    sb_flow *g = sb_flow_new(&c2);
    for (uintptr_t i = 0; i < 10; i++)
        put(g, SB_BAND_SHEDDABLE, i, 40 + i, 0); /* 10 x 100 bytes */
    sb_flow_item it = {.band = SB_BAND_CRITICAL, .tenant = 1, .bytes = 250, .user = ID(2)};
    assert_int_equal(sb_flow_enqueue(g, &it, 0, NULL), SB_FLOW_QUEUED);
    assert_int_equal(d.n, 5);
    assert_int_equal(d.id[2], 49);
    assert_int_equal(d.id[3], 48);
    assert_int_equal(d.id[4], 47);
    sb_flow_stats s;
    sb_flow_stats_get(g, &s);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].evicted, 3);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].queued, 7);
    assert_int_equal(s.total.bytes, 950);
    assert_int_equal(next_id(g, 1), 2);
    assert_int_equal(next_id(g, 1), 40); /* the survivors are served oldest tenant first */
    sb_flow_free(f);
    sb_flow_free(g);
}

static void test_no_eviction_when_it_cannot_make_room(void **state)
{
    sb_flow_config c = cfg_of(4, 4, 8);
    c.max_bytes_total = 1000;
    drops d = {0};
    c.on_evict = record;
    c.evict_ctx = &d;
    sb_flow *f = sb_flow_new(&c);
    put(f, SB_BAND_SHEDDABLE, 1, 20, 0);
    put(f, SB_BAND_STANDARD, 1, 10, 0);
    put(f, SB_BAND_STANDARD, 1, 11, 0);
    put(f, SB_BAND_STANDARD, 1, 12, 0);
    /* 701 bytes would need 101 freed; the one sheddable request holds 100: refuse, and keep
     * the sheddable request rather than drop it for nothing. */
    sb_flow_item it = {.band = SB_BAND_CRITICAL, .tenant = 1, .bytes = 701, .user = ID(1)};
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL);
    assert_int_equal(d.n, 0);
    it.bytes = 100;
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_QUEUED);
    assert_int_equal(d.n, 1);
    sb_flow_free(f);

    /* Without on_evict, eviction is off. */
    c.on_evict = NULL;
    f = sb_flow_new(&c);
    put(f, SB_BAND_SHEDDABLE, 1, 20, 0);
    for (uintptr_t i = 0; i < 3; i++)
        put(f, SB_BAND_STANDARD, 1, 10 + i, 0);
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_FULL);
    sb_flow_free(f);
}

static void test_deadlines_expire_in_order(void **state)
{
    sb_flow_config c = cfg_of(16, 0, 8);
    c.band[SB_BAND_CRITICAL].max_wait_ns = SB_MS(3000);
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(1000);
    c.band[SB_BAND_SHEDDABLE].max_wait_ns = SB_MS(200);
    sb_flow *f = sb_flow_new(&c);
    drops d = {0};
    sb_ns t0 = SB_MS(10000);
    sb_ns dl;
    assert_false(sb_flow_next_deadline(f, &dl));
    put(f, SB_BAND_STANDARD, 1, 1, t0);               /* t0 + 1000 */
    put(f, SB_BAND_CRITICAL, 1, 2, t0);               /* t0 + 3000 */
    put(f, SB_BAND_SHEDDABLE, 2, 3, t0 + SB_MS(100)); /* t0 + 300 */
    sb_flow_item it = {.band = SB_BAND_CRITICAL, .tenant = 3, .bytes = 1, .deadline = t0 + SB_MS(500), .user = ID(4)};
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_QUEUED); /* its own, earlier */
    it.deadline = t0 + SB_MS(9000);                                      /* band caps it at 3000 */
    it.user = ID(5);
    assert_int_equal(sb_flow_enqueue(f, &it, t0 + SB_MS(1), NULL), SB_FLOW_QUEUED);
    put(f, SB_BAND_STANDARD, 4, 6, t0); /* t0 + 1000, ties with 1: after it */

    assert_true(sb_flow_next_deadline(f, &dl));
    assert_int_equal(dl, t0 + SB_MS(300));
    assert_int_equal(sb_flow_expire(f, t0 + SB_MS(299), record, &d), 0);
    assert_int_equal(sb_flow_expire(f, t0 + SB_MS(300), record, &d), 1); /* at the deadline */
    assert_int_equal(d.id[0], 3);
    assert_int_equal(d.reason[0], SB_FLOW_EXPIRED);
    assert_int_equal(d.band[0], SB_BAND_SHEDDABLE);
    assert_int_equal(sb_flow_expire(f, t0 + SB_MS(2000), record, &d), 3);
    assert_int_equal(d.id[1], 4);
    assert_int_equal(d.id[2], 1);
    assert_int_equal(d.id[3], 6);
    assert_true(sb_flow_next_deadline(f, &dl));
    assert_int_equal(dl, t0 + SB_MS(3000));
    assert_int_equal(sb_flow_expire(f, t0 + SB_MS(3001), record, &d), 2);
    assert_int_equal(d.id[4], 2);
    assert_int_equal(d.id[5], 5);
    assert_null(sb_flow_next(f, t0));
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.total.expired, 6);
    assert_int_equal(s.band[SB_BAND_CRITICAL].expired, 3);
    assert_int_equal(s.total.queued, 0);
    assert_int_equal(s.tenants, 0);

    /* No band bound and no deadline: never expires, until a shutdown expires everything. */
    c.band[SB_BAND_STANDARD].max_wait_ns = 0;
    sb_flow *g = sb_flow_new(&c);
    put(g, SB_BAND_STANDARD, 1, 7, 0);
    put(g, SB_BAND_SHEDDABLE, 1, 8, 0);
    assert_true(sb_flow_next_deadline(g, &dl));
    assert_int_equal(dl, SB_MS(200));
    assert_int_equal(sb_flow_expire(g, UINT64_MAX - 1, record, &d), 1);
    assert_true(sb_flow_next_deadline(g, &dl));
    assert_true(dl == UINT64_MAX);
    assert_int_equal(sb_flow_expire(g, UINT64_MAX, record, &d), 1);
    assert_int_equal(d.id[7], 7);
    sb_flow_free(f);
    sb_flow_free(g);
}

static void test_remove_disconnect(void **state)
{
    sb_flow_config c = cfg_of(8, 0, 8);
    sb_flow *f = sb_flow_new(&c);
    sb_flow_handle h1 = put(f, SB_BAND_STANDARD, 1, 1, 0);
    sb_flow_handle h2 = put(f, SB_BAND_STANDARD, 1, 2, 0);
    sb_flow_handle h3 = put(f, SB_BAND_STANDARD, 2, 3, 0);
    assert_true(sb_flow_remove(f, h2));
    assert_false(sb_flow_remove(f, h2)); /* twice: the second matches nothing */
    assert_true(sb_flow_remove(f, h3));  /* tenant 2 leaves the ring with its only request */
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_STANDARD].tenants, 1);
    assert_int_equal(s.tenants, 1);
    assert_int_equal(next_id(f, 0), 1);
    assert_null(sb_flow_next(f, 0));
    assert_false(sb_flow_remove(f, h1)); /* already dispatched */
    /* The slot is reused; the old handle still misses and the new one hits. */
    sb_flow_handle h4 = put(f, SB_BAND_STANDARD, 1, 4, 0);
    assert_false(sb_flow_remove(f, h1));
    assert_false(sb_flow_remove(f, h2));
    sb_flow_handle zero = {0, 0}, wild = {1u << 30, 1};
    assert_false(sb_flow_remove(f, zero));
    assert_false(sb_flow_remove(f, wild));
    assert_true(sb_flow_remove(f, h4));
    assert_null(sb_flow_next(f, 0));
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.total.removed, 3);
    assert_int_equal(s.total.dispatched, 1);
    assert_int_equal(s.total.enqueued, 4);
    sb_flow_free(f);
}

/* 100k requests removed in random order, mixed with dispatches: a removal that scanned the
 * queue would make this quadratic (minutes under ASan); it runs in well under a second. */
static void test_remove_is_constant_time(void **state)
{
    enum { N = 100000 };
    sb_flow_config c = cfg_of(N, 0, 16);
    sb_flow *f = sb_flow_new(&c);
    assert_non_null(f);
    sb_flow_handle *h = malloc(N * sizeof(*h));
    uint32_t *order = malloc(N * sizeof(*order));
    for (uint32_t i = 0; i < N; i++) {
        sb_flow_item it = {.band = SB_BAND_STANDARD,
                           .tenant = i % 3,
                           .bytes = 1,
                           .deadline = (sb_ns)(N - i) * 1000,
                           .user = ID(i + 1)};
        assert_int_equal(sb_flow_enqueue(f, &it, 0, &h[i]), SB_FLOW_QUEUED);
        order[i] = i;
    }
    uint64_t s = 42;
    for (uint32_t i = N - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t j = (uint32_t)(s % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    bool *gone = calloc(N, 1);
    for (uint32_t k = 0; k < N / 2; k++) {
        assert_true(sb_flow_remove(f, h[order[k]]));
        gone[order[k]] = true;
    }
    uintptr_t id;
    size_t served = 0;
    while ((id = next_id(f, 1)) != 0) {
        assert_false(gone[id - 1]); /* a removed request is never dispatched */
        gone[id - 1] = true;
        served++;
    }
    assert_int_equal(served, N - N / 2);
    free(gone);
    free(order);
    free(h);
    sb_flow_free(f);
}

static void test_tenant_table_bound(void **state)
{
    sb_flow_config c = cfg_of(64, 0, 2);
    sb_flow *f = sb_flow_new(&c);
    /* Tenants 1 and 2 are tracked; 3, 4 and 5 share the overflow tenant. */
    for (uintptr_t i = 0; i < 3; i++)
        put(f, SB_BAND_STANDARD, 1, 10 + i, 0);
    put(f, SB_BAND_STANDARD, 2, 20, 0);
    put(f, SB_BAND_STANDARD, 3, 30, 0);
    put(f, SB_BAND_STANDARD, 4, 40, 0);
    put(f, SB_BAND_STANDARD, 5, 50, 0);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenants, 2);
    assert_int_equal(s.tenant_overflow, 3);
    assert_int_equal(s.band[SB_BAND_STANDARD].tenants, 3);
    /* The overflow tenant takes one turn per round, its members FIFO among themselves. */
    const uintptr_t want[] = {10, 20, 30, 11, 40, 12, 50};
    for (size_t k = 0; k < 7; k++)
        assert_int_equal(next_id(f, 1), want[k]);
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenants, 0);
    /* Emptied tenants free their slots: new keys are tracked again. */
    put(f, SB_BAND_STANDARD, 6, 60, 2);
    put(f, SB_BAND_STANDARD, 7, 70, 2);
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenants, 2);
    assert_int_equal(s.tenant_overflow, 3);
    sb_flow_free(f);

    /* Many tenants coming and going through a small table (probe runs, backward shifts). */
    c = cfg_of(4096, 0, 64);
    f = sb_flow_new(&c);
    uint64_t key = 7;
    sb_flow_handle hs[64];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) {
            key = key * 6364136223846793005ull + 1442695040888963407ull;
            hs[i] = put(f, SB_BAND_STANDARD, key >> (round % 50), (uintptr_t)i + 1, 0);
        }
        sb_flow_stats_get(f, &s);
        assert_true(s.tenants <= 64);
        for (int i = 0; i < 64; i += 2)
            assert_true(sb_flow_remove(f, hs[i]));
        while (sb_flow_next(f, 0))
            ;
        sb_flow_stats_get(f, &s);
        assert_int_equal(s.tenants, 0);
    }
    assert_int_equal(s.tenant_overflow, 0);
    sb_flow_free(f);
}

/* Only slot placement depends on the secret: the same operations on flows with different
 * secrets dispatch, expire, refuse and count alike (tenants coming and going through a small
 * table, the overflow tenant, removals, deadlines). */
static void test_secret_changes_placement_only(void **state)
{
    enum { K = 3 };
    const uint64_t secrets[K] = {1, 2, 0xfeedfacecafebeefULL};
    sb_flow *f[K];
    drops *d = calloc(K, sizeof(drops));
    assert_non_null(d);
    for (int k = 0; k < K; k++) {
        sb_flow_config c = cfg_of(64, 150, 24);
        c.band[SB_BAND_SHEDDABLE].max_wait_ns = 50;
        c.hash_secret = secrets[k];
        c.on_evict = record;
        c.evict_ctx = &d[k];
        assert_non_null(f[k] = sb_flow_new(&c));
    }
    sb_flow_handle hs[K][64];
    memset(hs, 0, sizeof(hs));
    uint64_t x = 5;
    for (sb_ns now = 1; now < 8000; now++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t op = (uint32_t)(x >> 61);
        int r[K];
        uintptr_t got[K];
        for (int k = 0; k < K; k++) {
            r[k] = 0;
            got[k] = 0;
            if (op < 4) {
                /* 40 tenants through a 24-tenant table: some overflow. */
                sb_flow_item it = {.band = (enum sb_band)((x >> 20) % 3), .tenant = (x >> 30) % 40 * 0x1000193,
                                   .bytes = 10, .user = ID(now)};
                r[k] = sb_flow_enqueue(f[k], &it, now, &hs[k][now % 64]);
            } else if (op < 6) {
                got[k] = next_id(f[k], now);
            } else if (op == 6) {
                r[k] = sb_flow_remove(f[k], hs[k][(x >> 8) % 64]);
            } else {
                r[k] = (int)sb_flow_expire(f[k], now, record, &d[k]);
            }
        }
        for (int k = 1; k < K; k++) {
            assert_int_equal(r[k], r[0]);
            assert_int_equal(got[k], got[0]);
            assert_int_equal(hs[k][now % 64].slot, hs[0][now % 64].slot);
            assert_int_equal(hs[k][now % 64].gen, hs[0][now % 64].gen);
            sb_flow_stats a, b;
            sb_flow_stats_get(f[0], &a);
            sb_flow_stats_get(f[k], &b);
            assert_memory_equal(&a, &b, offsetof(sb_flow_stats, tenant_probes));
        }
    }
    for (int k = 1; k < K; k++) {
        assert_int_equal(d[k].n, d[0].n);
        assert_memory_equal(d[k].id, d[0].id, d[0].n * sizeof(d[0].id[0]));
    }
    sb_flow_stats s;
    sb_flow_stats_get(f[0], &s);
    assert_true(s.tenant_overflow > 0 && s.total.dispatched > 100 && s.total.expired > 0 && d[0].n > 0);
    for (int k = 0; k < K; k++)
        sb_flow_free(f[k]);
    free(d);
}

/* The tenant table's slot before keying: splitmix64's finaliser, public. */
static size_t old_home(uint64_t key, size_t mask)
{
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (size_t)key & mask;
}

/* One request per tenant key, then all dispatched: the tenant table's probe figures. */
static sb_table_probes tenant_probe_cost(uint64_t secret, const uint64_t *keys, size_t n)
{
    sb_flow_config c = cfg_of(4096, 0, 1024);
    c.hash_secret = secret;
    sb_flow *f = sb_flow_new(&c);
    for (size_t i = 0; i < n; i++)
        put(f, SB_BAND_STANDARD, keys[i], i + 1, 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(next_id(f, 1), i + 1);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenant_overflow, 0);
    sb_flow_free(f);
    return s.tenant_probes;
}

/* Tenant keys are hashes of x-tenant or Authorization values a client writes: crafted to share
 * a home slot under the old public function, or under a secret the attacker learned, they
 * probe like random keys under the flow's own secret. */
static void test_crafted_tenants_probe_short(void **state)
{
    enum { N = 1000, MASK = 2047 }; /* 1024 tenants: a 2048-slot table */
    static uint64_t old_set[N], known_set[N];
    const uint64_t A = 0xA11CE, B = 0xB0B;
    sb_hash_key ka = sb_hash_key_from_secret(A);
    uint64_t x = 1;
    for (size_t n = 0; n < N; x++)
        if (old_home(x, MASK) == 0)
            old_set[n++] = x;
    for (size_t n = 0; n < N; x++)
        if ((sb_hash_u64(&ka, x) & MASK) == 0)
            known_set[n++] = x;
    sb_table_probes old = tenant_probe_cost(B, old_set, N), known = tenant_probe_cost(B, known_set, N);
    sb_table_probes attack = tenant_probe_cost(A, known_set, N);
    print_message("tenant probes per search: under B: old-function set %.2f (longest %llu), A set %.2f (%llu); "
                  "A set under A %.1f (%llu)\n",
                  (double)old.probes / old.searches, (unsigned long long)old.longest,
                  (double)known.probes / known.searches, (unsigned long long)known.longest,
                  (double)attack.probes / attack.searches, (unsigned long long)attack.longest);
    assert_int_equal(old.searches, 2 * N); /* one on enqueue, one on release */
    assert_true((double)old.probes / old.searches < 2.0 && old.longest < 64);
    assert_true((double)known.probes / known.searches < 2.0 && known.longest < 64);
    /* Known secret: each enqueue walks the run (releases in FIFO order find theirs at home
     * once the run shifted back), ~N/4 per search. */
    assert_true(attack.probes / attack.searches > N / 8);
}

static void test_counters_and_waits(void **state)
{
    sb_flow_config c = cfg_of(2, 4, 8);
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(100);
    drops d = {0};
    c.on_evict = record;
    c.evict_ctx = &d;
    sb_flow *f = sb_flow_new(&c);
    sb_ns now = SB_MS(1000);
    assert_int_equal(sb_flow_admit(f, false, SB_BAND_STANDARD), SB_FLOW_DISPATCH);
    assert_int_equal(sb_flow_admit(f, true, SB_BAND_SHEDDABLE), SB_FLOW_SHED);
    put(f, SB_BAND_STANDARD, 1, 1, now);
    put(f, SB_BAND_STANDARD, 2, 2, now + SB_MS(10));
    sb_flow_item it = {.band = SB_BAND_STANDARD, .tenant = 3, .bytes = 5, .user = ID(3)};
    assert_int_equal(sb_flow_enqueue(f, &it, now, NULL), SB_FLOW_FULL);
    put(f, SB_BAND_SHEDDABLE, 1, 4, now);
    sb_flow_handle h = put(f, SB_BAND_SHEDDABLE, 1, 5, now);
    put(f, SB_BAND_CRITICAL, 1, 6, now + SB_MS(5)); /* evicts 5 */
    assert_false(sb_flow_remove(f, h));
    put(f, SB_BAND_CRITICAL, 1, 7, now + SB_MS(5)); /* evicts 4 */
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_CRITICAL].queued, 2);
    assert_int_equal(s.band[SB_BAND_CRITICAL].bytes, 200);
    assert_int_equal(s.band[SB_BAND_CRITICAL].tenants, 1);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].queued, 0);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].tenants, 0);
    assert_int_equal(next_id(f, now + SB_MS(25)), 6);                     /* waited 20 ms */
    assert_int_equal(next_id(f, now + SB_MS(45)), 7);                     /* waited 40 ms */
    assert_int_equal(next_id(f, now + SB_MS(50)), 1);                     /* waited 50 ms */
    assert_int_equal(sb_flow_expire(f, now + SB_MS(200), record, &d), 1); /* 2 */
    sb_flow_stats_get(f, &s);
    const sb_flow_band_stats *t = &s.total;
    assert_int_equal(t->admitted, 1);
    assert_int_equal(t->shed, 1);
    assert_int_equal(t->enqueued, 6);
    assert_int_equal(t->refused_full, 1);
    assert_int_equal(t->dispatched, 3);
    assert_int_equal(t->evicted, 2);
    assert_int_equal(t->expired, 1);
    assert_int_equal(t->removed, 0);
    assert_int_equal(t->queued, 0);
    assert_int_equal(t->enqueued, t->dispatched + t->evicted + t->expired + t->removed + t->queued);
    assert_int_equal(s.band[SB_BAND_CRITICAL].wait_sum_ns, SB_MS(60));
    assert_int_equal(s.band[SB_BAND_CRITICAL].wait_max_ns, SB_MS(40));
    assert_int_equal(s.band[SB_BAND_STANDARD].wait_sum_ns, SB_MS(50));
    assert_int_equal(t->wait_max_ns, SB_MS(50));
    assert_int_equal(t->wait_sum_ns, SB_MS(110));
    sb_flow_free(f);
}

static void test_retry_after(void **state)
{
    sb_flow_config c = cfg_of(1000, 0, 8);
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(10000);
    c.band[SB_BAND_SHEDDABLE].max_wait_ns = SB_MS(2500);
    c.max_retry_after_s = 30;
    sb_flow *f = sb_flow_new(&c);
    /* No history: 1 s with nothing ahead, else the band's max wait (rounded up). */
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_STANDARD, 0), 1);
    put(f, SB_BAND_STANDARD, 1, 1, 0);
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_STANDARD, 0), 10);
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_SHEDDABLE, 0), 3);
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_CRITICAL, 0), 1); /* nothing ahead of it */
    assert_non_null(sb_flow_next(f, 0));
    /* Drain 10 per second: 40 requests in 4 s. */
    sb_ns now = SB_MS(1000);
    for (int i = 0; i < 40; i++)
        put(f, SB_BAND_STANDARD, (uint64_t)i % 4, 100 + (uintptr_t)i, now);
    for (int i = 0; i < 40; i++)
        assert_non_null(sb_flow_next(f, now + SB_MS(100) * (sb_ns)(i + 1)));
    now += SB_MS(4000);
    /* The last 32 dispatches span 3.1 s up to now: about 10.3 per second. */
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_STANDARD, now), 1);
    for (int i = 0; i < 50; i++)
        put(f, SB_BAND_STANDARD, (uint64_t)i % 4, 200 + (uintptr_t)i, now);
    for (int i = 0; i < 30; i++)
        put(f, SB_BAND_CRITICAL, (uint64_t)i % 4, 300 + (uintptr_t)i, now);
    /* Standard newcomer: 80 ahead + itself over ~10.3/s -> 8 s; sheddable sees the same 80;
     * critical sees 30 -> 31 / 10.3 -> 4 s. */
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_STANDARD, now), 8);
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_SHEDDABLE, now), 8);
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_CRITICAL, now), 4);
    /* A stall: 60 s later without a dispatch the rate decays and the cap holds. */
    assert_int_equal(sb_flow_retry_after_s(f, SB_BAND_STANDARD, now + SB_MS(60000)), 30);
    /* A burst of dispatches at one instant does not divide by zero. */
    while (sb_flow_next(f, now))
        ;
    put(f, SB_BAND_STANDARD, 1, 1, now);
    uint32_t r = sb_flow_retry_after_s(f, SB_BAND_STANDARD, now);
    assert_true(r >= 1 && r <= 30);
    sb_flow_free(f);
}

static void test_config_limits(void **state)
{
    sb_flow_config c = cfg_of(8, 0, 8);
    c.max_queued_total = SB_FLOW_MAX_QUEUED + 1;
    assert_null(sb_flow_new(&c));
    c = cfg_of(SB_FLOW_MAX_QUEUED, 0, 8); /* the sum of the bands is over the limit */
    assert_null(sb_flow_new(&c));
    c = cfg_of(8, 0, SB_FLOW_MAX_TENANTS + 1);
    assert_null(sb_flow_new(&c));
    /* Zero tenants: everyone shares the overflow tenant, FIFO. */
    c = cfg_of(8, 0, 0);
    sb_flow *f = sb_flow_new(&c);
    assert_non_null(f);
    put(f, SB_BAND_STANDARD, 1, 1, 0);
    put(f, SB_BAND_STANDARD, 2, 2, 0);
    put(f, SB_BAND_STANDARD, 1, 3, 0);
    assert_int_equal(next_id(f, 0), 1);
    assert_int_equal(next_id(f, 0), 2);
    assert_int_equal(next_id(f, 0), 3);
    sb_flow_free(f);
    /* The defaults build, and a band out of range counts as sheddable. */
    sb_flow_config_default(&c);
    assert_int_equal(c.band[SB_BAND_CRITICAL].max_wait_ns, 30 * SB_NS_PER_S);
    assert_int_equal(c.band[SB_BAND_SHEDDABLE].max_wait_ns, 2 * SB_NS_PER_S);
    f = sb_flow_new(&c);
    assert_non_null(f);
    assert_int_equal(sb_flow_admit(f, true, (enum sb_band)9), SB_FLOW_SHED);
    sb_flow_item it = {.band = (enum sb_band)9, .tenant = 1, .bytes = 1, .user = ID(1)};
    assert_int_equal(sb_flow_enqueue(f, &it, 0, NULL), SB_FLOW_QUEUED);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.band[SB_BAND_SHEDDABLE].queued, 1);
    sb_flow_free(f);
    sb_flow_free(NULL);
}

static void test_alloc_failure(void **state)
{
    sb_flow_config c = cfg_of(8, 0, 8);
    int built = 0;
    for (long n = 0; n < 16; n++) {
        sb_alloc_fail_after(n);
        sb_flow *f = sb_flow_new(&c);
        /* Everything after construction runs with allocation still failing. */
        if (f) {
            built++;
            put(f, SB_BAND_STANDARD, 1, 1, 0);
            put(f, SB_BAND_STANDARD, 2, 2, 0);
            assert_true(sb_flow_remove(f, put(f, SB_BAND_CRITICAL, 3, 3, 0)));
            assert_int_equal(next_id(f, 1), 1);
            sb_flow_free(f);
        }
    }
    sb_alloc_fail_after(-1);
    assert_true(built > 0 && built < 16);
}

/* --- the randomized test: the same rules over plain arrays, scanned every time --- */

#define M_ITEMS 20000
#define M_TENANTS 16
#define OVERFLOW UINT64_MAX

typedef struct mitem {
    bool alive;
    int band;
    uint64_t tenant; /* effective: the key, or OVERFLOW */
    uint64_t bytes, seq;
    sb_ns deadline;
    sb_flow_handle h;
} mitem;

typedef struct model {
    sb_flow_config cfg;
    mitem it[M_ITEMS];
    size_t n;
    uint32_t live[64]; /* indices of the queued items, in enqueue order */
    size_t n_live;
    uint64_t ring[SB_BAND_COUNT][M_TENANTS + 1];
    size_t ring_len[SB_BAND_COUNT], cur[SB_BAND_COUNT];
    uint64_t evicted[SB_BAND_COUNT], expired, removed, dispatched, full, queued_ct, shed, admitted;
} model;

/* Queued items of band (any if < 0) and tenant (any if any_tenant); their bytes in *bytes. */
static size_t m_count(const model *m, int band, uint64_t tenant, bool any_tenant, uint64_t *bytes)
{
    size_t c = 0;
    uint64_t b = 0;
    for (size_t k = 0; k < m->n_live; k++) {
        const mitem *x = &m->it[m->live[k]];
        if ((band < 0 || x->band == band) && (any_tenant || x->tenant == tenant)) {
            c++;
            b += x->bytes;
        }
    }
    if (bytes)
        *bytes = b;
    return c;
}

static void m_ring_remove(model *m, int b, uint64_t t)
{
    size_t i = 0;
    while (m->ring[b][i] != t)
        i++;
    memmove(&m->ring[b][i], &m->ring[b][i + 1], (m->ring_len[b] - i - 1) * sizeof(uint64_t));
    m->ring_len[b]--;
    if (i < m->cur[b])
        m->cur[b]--;
    if (m->cur[b] >= m->ring_len[b])
        m->cur[b] = 0;
}

static void m_kill(model *m, size_t i)
{
    size_t k = 0;
    while (m->live[k] != i)
        k++;
    memmove(&m->live[k], &m->live[k + 1], (m->n_live - k - 1) * sizeof(m->live[0]));
    m->n_live--;
    m->it[i].alive = false;
    if (m_count(m, m->it[i].band, m->it[i].tenant, false, NULL) == 0)
        m_ring_remove(m, m->it[i].band, m->it[i].tenant);
}

/* Distinct tracked (not overflow) tenants with something queued. */
static size_t m_tracked(const model *m)
{
    uint64_t seen[64];
    size_t n = 0;
    for (size_t k = 0; k < m->n_live; k++) {
        uint64_t t = m->it[m->live[k]].tenant;
        size_t j = 0;
        while (j < n && seen[j] != t)
            j++;
        if (t != OVERFLOW && j == n)
            seen[n++] = t;
    }
    return n;
}

/* Returns the result; appends evicted ids to ev. */
static int m_enqueue(model *m, int b, uint64_t key, uint64_t bytes, sb_ns deadline, sb_ns now, uintptr_t *ev,
                     size_t *n_ev)
{
    const sb_flow_config *c = &m->cfg;
    uint64_t band_bytes, all_bytes, shed_bytes;
    size_t band_n = m_count(m, b, 0, true, &band_bytes);
    size_t all_n = m_count(m, -1, 0, true, &all_bytes);
    size_t shed_n = m_count(m, SB_BAND_SHEDDABLE, 0, true, &shed_bytes);
    if (band_n + 1 > c->band[b].max_queued || band_bytes + bytes > c->band[b].max_bytes) {
        m->full++;
        return SB_FLOW_FULL;
    }
    if (all_n + 1 > c->max_queued_total || all_bytes + bytes > c->max_bytes_total) {
        bool can = b != SB_BAND_SHEDDABLE && c->on_evict && shed_n > 0 && all_n - shed_n + 1 <= c->max_queued_total &&
                   all_bytes - shed_bytes + bytes <= c->max_bytes_total;
        if (!can) {
            m->full++;
            return SB_FLOW_FULL;
        }
        while (all_n + 1 > c->max_queued_total || all_bytes + bytes > c->max_bytes_total) {
            size_t newest = SIZE_MAX;
            for (size_t k = 0; k < m->n_live; k++)
                if (m->it[m->live[k]].band == SB_BAND_SHEDDABLE)
                    newest = m->live[k];
            ev[(*n_ev)++] = newest + 1;
            all_n--;
            all_bytes -= m->it[newest].bytes;
            m->evicted[SB_BAND_SHEDDABLE]++;
            m_kill(m, newest);
        }
    }
    uint64_t eff = key;
    if (m_count(m, -1, key, false, NULL) == 0 && m_tracked(m) >= c->max_tenants)
        eff = OVERFLOW;
    if (m_count(m, b, eff, false, NULL) == 0) {
        /* joins just before the tenant whose turn it is */
        size_t p = m->cur[b];
        memmove(&m->ring[b][p + 1], &m->ring[b][p], (m->ring_len[b] - p) * sizeof(uint64_t));
        m->ring[b][p] = eff;
        m->ring_len[b]++;
        m->cur[b] = m->ring_len[b] == 1 ? 0 : p + 1;
    }
    sb_ns dl = deadline ? deadline : UINT64_MAX;
    if (c->band[b].max_wait_ns && now + c->band[b].max_wait_ns < dl)
        dl = now + c->band[b].max_wait_ns;
    m->it[m->n] = (mitem){.alive = true, .band = b, .tenant = eff, .bytes = bytes, .seq = m->n, .deadline = dl};
    m->live[m->n_live++] = (uint32_t)m->n;
    m->n++;
    m->queued_ct++;
    return SB_FLOW_QUEUED;
}

static uintptr_t m_next(model *m)
{
    int b = 0;
    while (b < SB_BAND_COUNT && m_count(m, b, 0, true, NULL) == 0)
        b++;
    if (b == SB_BAND_COUNT)
        return 0;
    uint64_t t = m->ring[b][m->cur[b]];
    size_t k = 0;
    while (!(m->it[m->live[k]].band == b && m->it[m->live[k]].tenant == t))
        k++;
    size_t i = m->live[k];
    m->cur[b] = (m->cur[b] + 1) % m->ring_len[b];
    m_kill(m, i);
    m->dispatched++;
    return i + 1;
}

static size_t m_expire(model *m, sb_ns now, uintptr_t *out)
{
    size_t n = 0;
    for (;;) {
        size_t best = SIZE_MAX;
        for (size_t k = 0; k < m->n_live; k++) {
            size_t i = m->live[k];
            if (m->it[i].deadline <= now && (best == SIZE_MAX || m->it[i].deadline < m->it[best].deadline))
                best = i;
        }
        if (best == SIZE_MAX)
            return n;
        out[n++] = best + 1;
        m->expired++;
        m_kill(m, best);
    }
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void check_stats(sb_flow *f, model *m)
{
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        uint64_t bytes;
        assert_int_equal(s.band[b].queued, m_count(m, b, 0, true, &bytes));
        assert_int_equal(s.band[b].bytes, bytes);
        assert_int_equal(s.band[b].tenants, m->ring_len[b]);
        assert_int_equal(s.band[b].evicted, m->evicted[b]);
    }
    assert_int_equal(s.tenants, m_tracked(m));
    assert_int_equal(s.total.expired, m->expired);
    assert_int_equal(s.total.removed, m->removed);
    assert_int_equal(s.total.dispatched, m->dispatched);
    assert_int_equal(s.total.refused_full, m->full);
    assert_int_equal(s.total.enqueued, m->queued_ct);
    assert_int_equal(s.total.shed, m->shed);
    assert_int_equal(s.total.admitted, m->admitted);
}

static void run_model(uint64_t seed, bool evict)
{
    static model m;
    memset(&m, 0, sizeof(m));
    drops ev_real = {0}, ex_real;
    sb_flow_config c;
    sb_flow_config_default(&c);
    const sb_ns waits[SB_BAND_COUNT] = {SB_MS(900), SB_MS(400), SB_MS(150)};
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        c.band[b].max_queued = 6;
        c.band[b].max_bytes = 700;
        c.band[b].max_wait_ns = b == 1 && seed % 2 ? 0 : waits[b];
    }
    c.max_queued_total = 12;
    c.max_bytes_total = 1200;
    c.max_tenants = 4;
    c.on_evict = evict ? record : NULL;
    c.evict_ctx = &ev_real;
    m.cfg = c;
    sb_flow *f = sb_flow_new(&c);
    assert_non_null(f);

    uint64_t s = seed;
    sb_ns now = SB_MS(1000);
    uintptr_t ev_model[64], ex_model[64];
    while (m.n < M_ITEMS - 1) {
        uint64_t r = rnd(&s);
        int op = (int)(r % 12);
        now += (r >> 8) % SB_MS(20);
        if (op < 6) {
            int b = (int)((r >> 32) % SB_BAND_COUNT);
            bool saturated = (r >> 36) % 3 != 0;
            uint32_t ahead = 0;
            for (int i = 0; i <= b; i++)
                ahead += (uint32_t)m_count(&m, i, 0, true, NULL);
            int want = SB_FLOW_WAIT;
            if (!saturated && ahead == 0)
                want = SB_FLOW_DISPATCH;
            else if (saturated && b == SB_BAND_SHEDDABLE)
                want = SB_FLOW_SHED;
            assert_int_equal(sb_flow_admit(f, saturated, (enum sb_band)b), want);
            m.admitted += want == SB_FLOW_DISPATCH;
            m.shed += want == SB_FLOW_SHED;
            /* Enqueue on WAIT, and also on half the DISPATCH and all the SHED answers: the
             * bounds and eviction rules must hold whatever the caller did before. */
            if (want == SB_FLOW_DISPATCH && (r >> 40) % 2)
                continue;
            uint64_t key = (r >> 42) % 7;
            uint64_t bytes = 1 + (r >> 45) % 250;
            sb_ns deadline = (r >> 53) % 3 == 0 ? 0 : now + ((r >> 20) % SB_MS(600));
            size_t n_ev = 0;
            ev_real.n = 0;
            int wm = m_enqueue(&m, b, key, bytes, deadline, now, ev_model, &n_ev);
            sb_flow_item it = {.band = (enum sb_band)b,
                               .tenant = key,
                               .bytes = bytes,
                               .deadline = deadline,
                               .user = ID(m.n + (wm == SB_FLOW_QUEUED ? 0 : 1))};
            sb_flow_handle h = {0, 0};
            int wr = sb_flow_enqueue(f, &it, now, &h);
            assert_int_equal(wr, wm);
            if (wr == SB_FLOW_QUEUED)
                m.it[m.n - 1].h = h;
            assert_int_equal(ev_real.n, n_ev);
            for (size_t k = 0; k < n_ev; k++)
                assert_int_equal(ev_real.id[k], ev_model[k]);
        } else if (op < 9) {
            assert_int_equal(next_id(f, now), m_next(&m));
        } else if (op < 10) {
            ex_real.n = 0;
            size_t k = m_expire(&m, now, ex_model);
            assert_int_equal(sb_flow_expire(f, now, record, &ex_real), k);
            for (size_t i = 0; i < k; i++)
                assert_int_equal(ex_real.id[i], ex_model[i]);
        } else if (m.n > 0) {
            /* Disconnect: any request ever queued, alive or long gone. */
            size_t i = m.n - 1 - (size_t)((r >> 24) % (m.n < 40 ? m.n : 40));
            bool alive = m.it[i].alive;
            assert_int_equal(sb_flow_remove(f, m.it[i].h), alive);
            if (alive) {
                m.removed++;
                m_kill(&m, i);
            }
        }
        sb_ns dl;
        bool any = sb_flow_next_deadline(f, &dl);
        assert_int_equal(any, m_count(&m, -1, 0, true, NULL) > 0);
        if (any) {
            sb_ns best = UINT64_MAX;
            for (size_t k = 0; k < m.n_live; k++)
                if (m.it[m.live[k]].deadline < best)
                    best = m.it[m.live[k]].deadline;
            assert_true(dl == best);
        }
        check_stats(f, &m);
    }
    check_stats(f, &m);
    sb_flow_free(f);
}

/* A reload's new bounds and waits apply in place: what is queued stays, in order, with its
 * deadline; a higher total grows the pool; a lower bound refuses what comes next only. */
static void test_reconfigure_in_place(void **state)
{
    (void)state;
    sb_flow_config c = cfg_of(2, 2, 8);
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(1000);
    sb_flow *f = sb_flow_new(&c);
    sb_ns t0 = SB_MS(10000);
    put(f, SB_BAND_STANDARD, 1, 1, t0);
    put(f, SB_BAND_STANDARD, 2, 2, t0);
    sb_flow_item it = {.band = SB_BAND_STANDARD, .tenant = 3, .bytes = 100, .user = ID(3)};
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_FULL);
    /* Room for five, and a longer wait for what comes next. */
    c = cfg_of(5, 5, 8);
    c.band[SB_BAND_STANDARD].max_wait_ns = SB_MS(5000);
    assert_int_equal(sb_flow_reconfigure(f, &c), 0);
    for (uintptr_t id = 3; id <= 5; id++)
        put(f, SB_BAND_STANDARD, id, id, t0);
    it.user = ID(6);
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_FULL);
    /* The first two keep the 1 s deadline they were given; the new ones have 5 s. */
    drops d = {0};
    assert_int_equal(sb_flow_expire(f, t0 + SB_MS(1000), record, &d), 2);
    assert_int_equal(d.id[0] + d.id[1], 1 + 2);
    /* Down to one: nothing queued is dropped, nothing new gets in until it drains. */
    c = cfg_of(1, 1, 8);
    assert_int_equal(sb_flow_reconfigure(f, &c), 0);
    it.user = ID(7);
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_FULL);
    assert_int_equal(next_id(f, t0), 3);
    assert_int_equal(next_id(f, t0), 4);
    assert_int_equal(next_id(f, t0), 5);
    put(f, SB_BAND_STANDARD, 9, 8, t0);
    assert_int_equal(next_id(f, t0), 8);
    /* Refused as a whole when the total is out of range. */
    c = cfg_of(1, SB_FLOW_MAX_QUEUED + 1, 8);
    assert_int_equal(sb_flow_reconfigure(f, &c), -1);
    put(f, SB_BAND_STANDARD, 9, 9, t0);
    it.user = ID(10);
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_FULL); /* still one */
    /* ...and when growing runs out of memory (either array). */
    for (int n = 0; n < 2; n++) {
        c = cfg_of(64, 64, 8);
        sb_alloc_fail_after(n);
        assert_int_equal(sb_flow_reconfigure(f, &c), -1);
        sb_alloc_fail_after(-1);
        assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_FULL);
    }
    assert_int_equal(sb_flow_reconfigure(f, &c), 0);
    assert_int_equal(sb_flow_enqueue(f, &it, t0, NULL), SB_FLOW_QUEUED);
    assert_int_equal(next_id(f, t0), 9);
    assert_int_equal(next_id(f, t0), 10);
    sb_flow_free(f);
}

/* The tenant table keeps the key it was built with: a reconfiguration carrying another
 * hash_secret (the gateway never sends one, but a caller could) must not strand the tenants
 * already queued. 64 tenants in a 128-slot table: each found again, none counted twice. */
static void test_reconfigure_keeps_table_key(void **state)
{
    (void)state;
    sb_flow_config c = cfg_of(512, 0, 64);
    c.hash_secret = 1;
    sb_flow *f = sb_flow_new(&c);
    for (uintptr_t t = 0; t < 64; t++)
        put(f, SB_BAND_STANDARD, t * 0x9E3779B97F4A7C15ull, t + 1, 0);
    c.hash_secret = 2;
    assert_int_equal(sb_flow_reconfigure(f, &c), 0);
    for (uintptr_t t = 0; t < 64; t++)
        put(f, SB_BAND_STANDARD, t * 0x9E3779B97F4A7C15ull, 100 + t, 0);
    sb_flow_stats s;
    sb_flow_stats_get(f, &s);
    assert_int_equal(s.tenants, 64);
    assert_int_equal(s.tenant_overflow, 0);
    /* Round robin: each tenant's first request, then each one's second. */
    for (uintptr_t t = 0; t < 64; t++)
        assert_int_equal(next_id(f, 1), t + 1);
    for (uintptr_t t = 0; t < 64; t++)
        assert_int_equal(next_id(f, 1), 100 + t);
    sb_flow_free(f);
}

static void test_randomized_against_model(void **state)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        run_model(seed * 0x9e3779b97f4a7c15ull, seed % 3 != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_band_parse),
        cmocka_unit_test(test_admit_rules),
        cmocka_unit_test(test_strict_band_order),
        cmocka_unit_test(test_round_robin_tenants),
        cmocka_unit_test(test_round_robin_join_end_of_round),
        cmocka_unit_test(test_bounds_count),
        cmocka_unit_test(test_bounds_bytes),
        cmocka_unit_test(test_sheddable_refused_when_saturated),
        cmocka_unit_test(test_sheddable_evicted_for_critical),
        cmocka_unit_test(test_no_eviction_when_it_cannot_make_room),
        cmocka_unit_test(test_deadlines_expire_in_order),
        cmocka_unit_test(test_remove_disconnect),
        cmocka_unit_test(test_remove_is_constant_time),
        cmocka_unit_test(test_tenant_table_bound),
        cmocka_unit_test(test_secret_changes_placement_only),
        cmocka_unit_test(test_crafted_tenants_probe_short),
        cmocka_unit_test(test_counters_and_waits),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_config_limits),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_reconfigure_in_place),
        cmocka_unit_test(test_reconfigure_keeps_table_key),
        cmocka_unit_test(test_randomized_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
