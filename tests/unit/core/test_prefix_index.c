/* Tests core/prefix_index: leading-run matches, LRU order per endpoint, tail-first insertion,
 * capacities, the global memory bound, clearing, a randomized comparison with a naive
 * model of the same rules, and keyed slots (same results under any secret, crafted
 * collisions probe short). */
#include "sb_test.h"

#include <stdlib.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "core/prefix_index.h"

static void chain(uint64_t seed, size_t n, uint64_t *out)
{
    /* Distinct, chain-like hashes: block i depends on seed and i. */
    for (size_t i = 0; i < n; i++)
        out[i] = (seed * 0x9E3779B97F4A7C15ULL) ^ ((i + 1) * 0xC2B2AE3D27D4EB4FULL);
}

static void test_match_leading_run(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(3, 1000, 100, 0x5ec7e7);
    uint64_t a[10], b[10];
    chain(1, 10, a);
    memcpy(b, a, sizeof(a));
    b[6] = 12345; /* b shares a's first 6 blocks */
    sb_prefix_index_insert(ix, 0, a, 10);
    sb_prefix_index_insert(ix, 1, a, 4);
    uint32_t m[3];
    assert_int_equal(sb_prefix_index_match(ix, b, 10, m), 6);
    assert_int_equal(m[0], 6);
    assert_int_equal(m[1], 4);
    assert_int_equal(m[2], 0);
    /* A hole in the middle ends the run even if later blocks are held. */
    uint64_t c[10];
    memcpy(c, a, sizeof(a));
    c[2] = 999;
    assert_int_equal(sb_prefix_index_match(ix, c, 10, m), 2);
    assert_int_equal(m[0], 2);
    /* Nobody holds the first block: nothing. */
    c[0] = 777;
    assert_int_equal(sb_prefix_index_match(ix, c, 10, m), 0);
    assert_int_equal(m[0] + m[1] + m[2], 0);
    assert_int_equal(sb_prefix_index_entries(ix), 14);
    sb_prefix_index_free(ix);
}

/* A membership change renumbers the endpoints: those that stay keep their blocks, their LRU
 * order and capacity under their new number; a gone one's entries are dropped; a new one
 * starts empty; the index grows to the new count. */
static void test_remap_endpoints(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(3, 1000, 100, 0x5ec7e7);
    uint64_t a[6], b[6], c[6];
    chain(1, 6, a);
    chain(2, 6, b);
    chain(3, 6, c);
    sb_prefix_index_insert(ix, 0, a, 6);
    sb_prefix_index_insert(ix, 1, b, 6);
    sb_prefix_index_insert(ix, 2, c, 4);
    sb_prefix_index_insert(ix, 2, a, 2); /* ep 2 shares a's head with ep 0 */
    sb_prefix_index_set_capacity(ix, 2, 50);
    /* ep 0 leaves; 1 stays 1; 2 becomes 0; new endpoints 2 and 3. */
    const int32_t map[3] = {-1, 1, 0};
    assert_int_equal(sb_prefix_index_remap(ix, map, 4, 77), 0);
    uint32_t m[4];
    assert_int_equal(sb_prefix_index_match(ix, a, 6, m), 2); /* only the old ep 2's head is left */
    assert_int_equal(m[0], 2);
    assert_int_equal(m[1] + m[2] + m[3], 0);
    assert_int_equal(sb_prefix_index_match(ix, b, 6, m), 6);
    assert_int_equal(m[1], 6);
    assert_int_equal(sb_prefix_index_match(ix, c, 6, m), 4);
    assert_int_equal(m[0], 4);
    assert_int_equal(sb_prefix_index_entries(ix), 12);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 6);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 3), 0);
    assert_int_equal(sb_prefix_index_capacity(ix, 0), 50);
    assert_int_equal(sb_prefix_index_capacity(ix, 3), 77);
    /* The renumbered lists still work: LRU eviction on the new number, inserts on the new one. */
    sb_prefix_index_set_capacity(ix, 0, 3);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 3);
    sb_prefix_index_insert(ix, 3, c, 6);
    assert_int_equal(sb_prefix_index_match(ix, c, 6, m), 6);
    assert_int_equal(m[3], 6);
    sb_prefix_index_free(ix);
}

/* Expiry keeps the entries inserted or refreshed since a stamp, per endpoint, pending ones
 * included, and counts apart from evictions. */
static void test_expire_by_stamp(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 1000, 100, 0x5ec7e7);
    uint64_t a[6], b[6], h;
    chain(1, 6, a);
    chain(2, 6, b);
    sb_prefix_index_set_clock(ix, 10);
    sb_prefix_index_insert(ix, 0, a, 6);
    sb_prefix_index_insert(ix, 1, a, 6);
    sb_prefix_index_set_clock(ix, 20);
    sb_prefix_index_insert(ix, 0, b, 3);
    assert_true(sb_prefix_index_insert_pending(ix, 0, b, 6, &h)); /* b[3..6) new, pending */
    sb_prefix_index_insert(ix, 0, a, 2);                          /* refreshes a[0], a[1] at 20 */
    uint32_t m[2];
    assert_int_equal(sb_prefix_index_expire(ix, 0, 10), 0); /* nothing older than 10 */
    assert_int_equal(sb_prefix_index_expire(ix, 0, 20), 4); /* a[2..6) */
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 8);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 1), 6); /* other endpoints untouched */
    assert_int_equal(sb_prefix_index_match(ix, a, 6, m), 6);
    assert_int_equal(m[0], 2);
    assert_int_equal(m[1], 6);
    assert_int_equal(sb_prefix_index_evictions(ix), 0);
    assert_int_equal(sb_prefix_index_expired(ix), 4);
    /* Everything, pending marks included; a later settle of a forgotten mark is ignored. */
    assert_int_equal(sb_prefix_index_expire(ix, 0, 21), 8);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 0), 0);
    sb_prefix_index_settle(ix, 0, h, true);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 0);
    sb_prefix_index_free(ix);
    /* Stamps compare by wrapping difference: UINT32_MAX - 1 is before 1, and 3 after it. */
    ix = sb_prefix_index_new(1, 1000, 100, 0x5ec7e7);
    sb_prefix_index_set_clock(ix, UINT32_MAX - 1);
    sb_prefix_index_insert(ix, 0, a, 6);
    sb_prefix_index_set_clock(ix, 3);
    sb_prefix_index_insert(ix, 0, b, 6);
    assert_int_equal(sb_prefix_index_expire(ix, 0, 1), 6);
    assert_int_equal(sb_prefix_index_match(ix, b, 6, m), 6);
    assert_int_equal(sb_prefix_index_match(ix, a, 6, m), 0);
    sb_prefix_index_free(ix);
}

static void test_capacity_evicts_lru_and_keeps_head(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(1, 1000, 8, 0x5ec7e7);
    uint64_t a[12];
    chain(2, 12, a);
    /* 12 blocks into 8: tail first, so the head (most recent) survives and the tail goes. */
    sb_prefix_index_insert(ix, 0, a, 12);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 8);
    uint32_t m[1];
    assert_int_equal(sb_prefix_index_match(ix, a, 12, m), 8);
    assert_int_equal(sb_prefix_index_evictions(ix), 4);
    /* LRU order: prompt b refreshed after a; inserting c evicts a's blocks first. */
    sb_prefix_index_set_capacity(ix, 0, 6);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 0), 6);
    assert_int_equal(sb_prefix_index_match(ix, a, 12, m), 6);
    uint64_t b[3], c[3];
    chain(3, 3, b);
    chain(4, 3, c);
    sb_prefix_index_insert(ix, 0, b, 3);  /* evicts a[5], a[4], a[3] */
    assert_int_equal(sb_prefix_index_match(ix, a, 12, m), 3);
    sb_prefix_index_insert(ix, 0, a, 1);  /* refresh a's head */
    sb_prefix_index_insert(ix, 0, c, 3);  /* evicts the LRU: a[2], a[1], then b[2] */
    assert_int_equal(sb_prefix_index_match(ix, a, 12, m), 1);
    assert_int_equal(sb_prefix_index_match(ix, b, 3, m), 2);
    assert_int_equal(sb_prefix_index_match(ix, c, 3, m), 3);
    /* Capacity 0: records nothing. */
    sb_prefix_index_set_capacity(ix, 0, 0);
    assert_int_equal(sb_prefix_index_entries(ix), 0);
    sb_prefix_index_insert(ix, 0, a, 12);
    assert_int_equal(sb_prefix_index_entries(ix), 0);
    sb_prefix_index_free(ix);
}

static void test_clear_endpoint(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 1000, 100, 0x5ec7e7);
    uint64_t a[20];
    chain(5, 20, a);
    sb_prefix_index_insert(ix, 0, a, 20);
    sb_prefix_index_insert(ix, 1, a, 20);
    sb_prefix_index_clear_endpoint(ix, 0);
    uint32_t m[2];
    assert_int_equal(sb_prefix_index_match(ix, a, 20, m), 20);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], 20);
    assert_int_equal(sb_prefix_index_entries(ix), 20);
    sb_prefix_index_clear_endpoint(ix, 1);
    assert_int_equal(sb_prefix_index_entries(ix), 0);
    assert_int_equal(sb_prefix_index_match(ix, a, 20, m), 0);
    /* Reusable after clearing (free list and table deletions are sound). */
    sb_prefix_index_insert(ix, 1, a, 20);
    assert_int_equal(sb_prefix_index_match(ix, a, 20, m), 20);
    sb_prefix_index_free(ix);
}

static void test_memory_bound(void **state)
{
    (void)state;
    /* Capacities allow far more than the global bound: the bound wins. */
    sb_prefix_index *ix = sb_prefix_index_new(4, 5000, 1u << 20, 0x5ec7e7);
    uint64_t a[1000];
    for (uint64_t r = 0; r < 40; r++) {
        chain(100 + r, 1000, a);
        sb_prefix_index_insert(ix, (uint32_t)(r % 4), a, 1000);
        assert_true(sb_prefix_index_entries(ix) <= 5000);
    }
    assert_int_equal(sb_prefix_index_entries(ix), 5000);
    size_t bytes = sb_prefix_index_bytes(ix);
    /* 32 B per entry plus a table of 12 B slots at most half full (a power of two): under
     * 80 B per entry. */
    assert_true(bytes / 5000 < 80);
    sb_prefix_index_free(ix);
}

/* A naive model: per endpoint, an array ordered MRU first. */
#define NE 3
#define CAP 40
typedef struct model {
    uint64_t h[NE][CAP];
    size_t n[NE];
} model;

static void model_insert(model *md, uint32_t e, const uint64_t *hs, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        size_t j, k = md->n[e];
        for (j = 0; j < k && md->h[e][j] != hs[i]; j++)
            ;
        if (j == k) {
            if (k == CAP)
                k--, md->n[e]--;
            j = k;
            md->n[e]++;
        }
        memmove(&md->h[e][1], &md->h[e][0], j * sizeof(uint64_t));
        md->h[e][0] = hs[i];
    }
}

static uint32_t model_match(const model *md, uint32_t e, const uint64_t *hs, size_t n)
{
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (size_t j = 0; j < md->n[e] && !found; j++)
            found = md->h[e][j] == hs[i];
        if (!found)
            break;
        c++;
    }
    return c;
}

static void test_randomized_against_model(void **state)
{
    (void)state;
    srand(7);
    sb_prefix_index *ix = sb_prefix_index_new(NE, 100000, CAP, 0x5ec7e7);
    model md = {0};
    uint64_t hs[30];
    for (int step = 0; step < 4000; step++) {
        /* Prompts from a few prefix families so sharing and eviction both happen. */
        uint64_t fam = (uint64_t)(rand() % 6);
        size_t n = 1 + (size_t)(rand() % 30);
        chain(fam, n, hs);
        if (rand() % 3 == 0)
            hs[rand() % n] ^= (uint64_t)rand();
        if (rand() % 2) {
            uint32_t e = (uint32_t)(rand() % NE);
            sb_prefix_index_insert(ix, e, hs, n);
            model_insert(&md, e, hs, n);
        } else {
            uint32_t m[NE];
            size_t best = sb_prefix_index_match(ix, hs, n, m), mb = 0;
            for (uint32_t e = 0; e < NE; e++) {
                uint32_t want = model_match(&md, e, hs, n);
                assert_int_equal(m[e], want);
                mb = want > mb ? want : mb;
            }
            assert_int_equal(best, mb);
        }
        if (step % 997 == 0) {
            uint32_t e = (uint32_t)(rand() % NE);
            sb_prefix_index_clear_endpoint(ix, e);
            md.n[e] = 0;
        }
        for (uint32_t e = 0; e < NE; e++)
            assert_int_equal(sb_prefix_index_endpoint_entries(ix, e), md.n[e]);
    }
    sb_prefix_index_free(ix);
}

/* A request's new blocks are pending until its first token: they do not match meanwhile (the
 * engine has not computed them), the blocks that were there already still do, and settling
 * either makes them match (computed) or forgets them (the request failed). */
static void test_pending_until_settled(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 1000, 100, 0x5ec7e7);
    uint64_t a[10];
    chain(3, 10, a);
    uint32_t m[2];
    uint64_t h = 0;
    assert_true(sb_prefix_index_insert_pending(ix, 0, a, 4, &h));
    assert_true(h == a[0]); /* the lowest new block carries the mark */
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 0), 1);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 0);
    assert_int_equal(m[0], 0);
    sb_prefix_index_settle(ix, 0, h, true);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 0), 0);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 4);
    assert_int_equal(m[0], 4);
    /* A longer prompt on the same endpoint: blocks 0-3 keep matching, 4-9 wait. */
    assert_true(sb_prefix_index_insert_pending(ix, 0, a, 10, &h));
    assert_true(h == a[4]);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 4);
    /* Nothing new: nothing pending, and the pending mark above is kept. */
    uint64_t h2 = 0;
    assert_false(sb_prefix_index_insert_pending(ix, 0, a, 10, &h2));
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 4);
    /* The same blocks pending on endpoint 1 do not stop endpoint 0's run, nor make 1 match. */
    uint64_t h1 = 0;
    assert_true(sb_prefix_index_insert_pending(ix, 1, a, 10, &h1));
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 4);
    assert_int_equal(m[1], 0);
    /* Failed: endpoint 1 forgets the block, so its later blocks are unreachable. */
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 1);
    sb_prefix_index_settle(ix, 1, h1, false);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 0);
    sb_prefix_index_match(ix, a, 10, m);
    assert_int_equal(m[1], 0);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, 1), 9);
    /* Computed on endpoint 0: the whole prompt matches; settling again is a no-op. */
    sb_prefix_index_settle(ix, 0, h, true);
    sb_prefix_index_settle(ix, 0, h, false);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 10);
    assert_int_equal(m[0], 10);
    /* settle_all: endpoint 1 re-sent, its request lost track (a reload): counted computed. */
    assert_true(sb_prefix_index_insert_pending(ix, 1, a, 10, &h1));
    sb_prefix_index_match(ix, a, 10, m);
    assert_int_equal(m[1], 0);
    sb_prefix_index_settle_all(ix);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 0);
    sb_prefix_index_match(ix, a, 10, m);
    assert_int_equal(m[1], 10);
    /* A pending entry that is evicted or cleared takes its count with it. */
    uint64_t b2[3];
    chain(9, 3, b2);
    assert_true(sb_prefix_index_insert_pending(ix, 1, b2, 3, &h1));
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 1);
    sb_prefix_index_clear_endpoint(ix, 1);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 0);
    assert_true(sb_prefix_index_insert_pending(ix, 1, b2, 3, &h1));
    sb_prefix_index_set_capacity(ix, 1, 2); /* the mark is the most recent: the tail goes */
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 1);
    sb_prefix_index_set_capacity(ix, 1, 0);
    assert_int_equal(sb_prefix_index_endpoint_pending(ix, 1), 0);
    /* A hash that was never inserted, or an endpoint out of range: ignored. */
    sb_prefix_index_settle(ix, 0, 424242, false);
    sb_prefix_index_settle(ix, 7, a[0], false);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 10);
    sb_prefix_index_free(ix);
}

/* Only slot placement depends on the secret: the same operations on indexes with different
 * secrets give the same answers, evictions and figures (tail-first inserts, pending marks,
 * settles, capacity changes, clears, and the global bound evicting across endpoints). */
static void test_secret_changes_placement_only(void **state)
{
    (void)state;
    enum { E = 4, K = 3 };
    const uint64_t secrets[K] = {1, 2, 0xdeadbeefcafef00dULL};
    sb_prefix_index *ix[K];
    for (int k = 0; k < K; k++)
        ix[k] = sb_prefix_index_new(E, 3000, 900, secrets[k]);
    uint64_t x = 99, hs[64], pend[E][8] = {{0}};
    for (int step = 0; step < 6000; step++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t op = (uint32_t)(x >> 60), e = (uint32_t)(x >> 40) % E;
        size_t n = 1 + (size_t)((x >> 20) % 64);
        chain((x >> 8) % 40, n, hs);
        uint32_t m[K][E];
        size_t best[K];
        bool got[K];
        uint64_t ph[K];
        for (int k = 0; k < K; k++) {
            got[k] = false;
            ph[k] = 0;
            best[k] = 0;
            memset(m[k], 0, sizeof(m[k]));
            if (op < 5) {
                sb_prefix_index_insert(ix[k], e, hs, n);
            } else if (op < 9) {
                got[k] = sb_prefix_index_insert_pending(ix[k], e, hs, n, &ph[k]);
            } else if (op < 11) {
                sb_prefix_index_settle(ix[k], e, pend[e][(x >> 4) & 7], (x >> 3) & 1);
            } else if (op == 11 && step % 50 == 0) {
                sb_prefix_index_set_capacity(ix[k], e, (uint32_t)(100 + (x >> 30) % 1000));
            } else if (op == 12 && step % 400 == 0) {
                sb_prefix_index_clear_endpoint(ix[k], e);
            } else if (op == 13 && step % 1000 == 0) {
                sb_prefix_index_settle_all(ix[k]);
            } else {
                best[k] = sb_prefix_index_match(ix[k], hs, n, m[k]);
            }
        }
        if (got[0])
            pend[e][(x >> 4) & 7] = ph[0];
        for (int k = 1; k < K; k++) {
            assert_int_equal(got[k], got[0]);
            assert_int_equal(ph[k], ph[0]);
            assert_int_equal(best[k], best[0]);
            assert_memory_equal(m[k], m[0], sizeof(m[0]));
            assert_int_equal(sb_prefix_index_entries(ix[k]), sb_prefix_index_entries(ix[0]));
            assert_int_equal(sb_prefix_index_evictions(ix[k]), sb_prefix_index_evictions(ix[0]));
            assert_int_equal(sb_prefix_index_bytes(ix[k]), sb_prefix_index_bytes(ix[0]));
            for (uint32_t ep = 0; ep < E; ep++) {
                assert_int_equal(sb_prefix_index_endpoint_entries(ix[k], ep), sb_prefix_index_endpoint_entries(ix[0], ep));
                assert_int_equal(sb_prefix_index_endpoint_pending(ix[k], ep), sb_prefix_index_endpoint_pending(ix[0], ep));
                assert_int_equal(sb_prefix_index_capacity(ix[k], ep), sb_prefix_index_capacity(ix[0], ep));
            }
        }
    }
    /* The operations did reach the bound and the capacities. */
    assert_true(sb_prefix_index_evictions(ix[0]) > 1000);
    for (int k = 0; k < K; k++)
        sb_prefix_index_free(ix[k]);
}

/* A pick inserts the prompt it just matched, and the index reuses the keyed hashes the match
 * computed: only for blocks that are still the same. A caller that changed its array in
 * between (the gateway reuses one scratch array for every request) gets fresh ones. */
static void test_match_memo_checks_blocks(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 1000, 100, 0x5ec7e7);
    uint64_t a[10], orig[10];
    chain(21, 10, a);
    memcpy(orig, a, sizeof(a));
    uint32_t m[2];
    sb_prefix_index_insert(ix, 1, a, 10);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 10);
    a[2] ^= 0xff; /* the same array, another prompt from block 2 on */
    uint64_t ph = 0;
    assert_true(sb_prefix_index_insert_pending(ix, 0, a, 10, &ph));
    assert_true(ph == a[0]);
    sb_prefix_index_settle(ix, 0, ph, true);
    assert_int_equal(sb_prefix_index_match(ix, a, 10, m), 10);
    assert_int_equal(m[0], 10);
    assert_int_equal(m[1], 2);
    assert_int_equal(sb_prefix_index_match(ix, orig, 10, m), 10);
    assert_int_equal(m[0], 2);
    assert_int_equal(m[1], 10);
    sb_prefix_index_free(ix);
}

/* The memo of keyed hashes outlives a match: a prompt whose leading blocks the previous match
 * saw at the same positions is not hashed again (a repeated prompt: not at all), and a
 * position that saw another block is hashed and answers for the new block. */
static void test_memo_across_matches(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 1000, 100, 0x5ec7e7);
    uint64_t a[64], b[64];
    chain(5, 64, a);
    memcpy(b, a, sizeof(a));
    for (size_t i = 10; i < 64; i++)
        b[i] ^= 1; /* b shares a's first 10 blocks */
    uint32_t m[2];
    assert_int_equal(sb_prefix_index_match(ix, a, 64, m), 0);
    sb_prefix_index_insert(ix, 0, a, 64);
    assert_int_equal(sb_prefix_index_match(ix, a, 64, m), 64);
    uint64_t h = sb_prefix_index_hashes(ix);
    assert_true(h >= 64);
    /* The same prompt again, match then insert: every keyed hash is remembered. */
    assert_int_equal(sb_prefix_index_match(ix, a, 64, m), 64);
    sb_prefix_index_insert(ix, 0, a, 64);
    assert_int_equal(sb_prefix_index_match(ix, a, 64, m), 64);
    assert_int_equal(sb_prefix_index_hashes(ix), h);
    /* b: its shared head is remembered; the walk stops at block 10, having looked ahead to 15. */
    assert_int_equal(sb_prefix_index_match(ix, b, 64, m), 10);
    assert_int_equal(m[0], 10);
    assert_int_equal(m[1], 0);
    assert_int_equal(sb_prefix_index_hashes(ix), h + 6);
    sb_prefix_index_insert(ix, 1, b, 64);
    assert_int_equal(sb_prefix_index_match(ix, b, 64, m), 64);
    assert_int_equal(m[0], 10);
    assert_int_equal(m[1], 64);
    /* a again: positions 10.. now remember b's blocks, so they miss, and answer for a's. */
    h = sb_prefix_index_hashes(ix);
    assert_int_equal(sb_prefix_index_match(ix, a, 64, m), 64);
    assert_int_equal(m[0], 64);
    assert_int_equal(m[1], 10);
    assert_int_equal(sb_prefix_index_hashes(ix), h + 54);
    sb_prefix_index_free(ix);
}

/* Inserts keys one per prompt on endpoint 0, then looks each up: the probe figures. */
static sb_table_probes probe_cost(uint64_t secret, const uint64_t *keys, size_t n)
{
    sb_prefix_index *ix = sb_prefix_index_new(1, 1u << 20, 1u << 20, secret);
    uint32_t m[1];
    for (size_t i = 0; i < n; i++)
        sb_prefix_index_insert(ix, 0, &keys[i], 1);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(sb_prefix_index_match(ix, &keys[i], 1, m), 1);
    sb_table_probes p = sb_prefix_index_probes(ix);
    sb_prefix_index_free(ix);
    return p;
}

/* Hash flooding: block hashes are public functions of the prompt (chained xxh3 seeded by the
 * model name), so an attacker can grind prompts whose blocks share a home slot. Keys crafted
 * against the old unkeyed slot function, or against a secret the attacker somehow learned,
 * probe like random keys under the index's own secret. */
static void test_crafted_collisions_probe_short(void **state)
{
    (void)state;
    enum { N = 1500, TABLE = 4096 }; /* N keys end in a 4096-slot table (half full at most) */
    static uint64_t old_set[N], known_set[N], random_set[N];
    /* (h ^ h >> 29) & mask, the slot function before keying, puts all of these in slot 0 of
     * any table up to 2^16 slots. */
    for (size_t i = 0; i < N; i++)
        old_set[i] = (uint64_t)(i + 1) << 45;
    /* Ground against secret A: slot 0 of the final table. */
    const uint64_t A = 0xA11CE, B = 0xB0B;
    sb_hash_key ka = sb_hash_key_from_secret(A);
    uint64_t x = 1;
    for (size_t n = 0; n < N; x++)
        if ((sb_hash_u64(&ka, x) & (TABLE - 1)) == 0)
            known_set[n++] = x;
    for (size_t i = 0; i < N; i++)
        random_set[i] = (i + 1) * 0x9E3779B97F4A7C15ULL;

    sb_table_probes attack = probe_cost(A, known_set, N);
    sb_table_probes old = probe_cost(B, old_set, N), known = probe_cost(B, known_set, N);
    sb_table_probes rnd = probe_cost(B, random_set, N);
    print_message("probes per search: crafted for A under A %.1f (longest %llu); under B: old-function set %.2f "
                  "(%llu), A set %.2f (%llu), random %.2f (%llu)\n",
                  (double)attack.probes / attack.searches, (unsigned long long)attack.longest,
                  (double)old.probes / old.searches, (unsigned long long)old.longest,
                  (double)known.probes / known.searches, (unsigned long long)known.longest,
                  (double)rnd.probes / rnd.searches, (unsigned long long)rnd.longest);
    /* Under the index's secret both crafted sets cost what random keys cost: linear probing
     * at most half full averages under 2.5 probes for a miss, and runs stay short. (With the
     * old unkeyed function the first set walks ~N/2 slots per search.) */
    assert_true((double)old.probes / old.searches < 2.0);
    assert_true((double)known.probes / known.searches < 2.0);
    assert_true(old.longest < 64 && known.longest < 64);
    assert_true((double)rnd.probes / rnd.searches < 2.0);
    /* The attack does work when the secret is known: every search walks the run. */
    assert_true(attack.probes / attack.searches > N / 4);
}

static void test_alloc_failure_degrades(void **state)
{
    (void)state;
    sb_prefix_index *ix = sb_prefix_index_new(2, 100000, 10000, 0x5ec7e7);
    uint64_t a[5000];
    chain(9, 5000, a);
    sb_alloc_fail_after(0);
    sb_prefix_index_insert(ix, 0, a, 5000); /* cannot grow: records what fits, no crash */
    sb_alloc_fail_after(-1);
    uint32_t m[2];
    sb_prefix_index_match(ix, a, 5000, m);
    assert_true(sb_prefix_index_entries(ix) <= 5000);
    sb_prefix_index_insert(ix, 0, a, 5000);
    assert_int_equal(sb_prefix_index_match(ix, a, 5000, m), 5000);
    sb_prefix_index_free(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_leading_run),        cmocka_unit_test(test_remap_endpoints),
        cmocka_unit_test(test_expire_by_stamp),          cmocka_unit_test(test_capacity_evicts_lru_and_keeps_head),
        cmocka_unit_test(test_clear_endpoint),           cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_randomized_against_model), cmocka_unit_test(test_alloc_failure_degrades),
        cmocka_unit_test(test_pending_until_settled),    cmocka_unit_test(test_secret_changes_placement_only),
        cmocka_unit_test(test_match_memo_checks_blocks), cmocka_unit_test(test_crafted_collisions_probe_short),
        cmocka_unit_test(test_memo_across_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
