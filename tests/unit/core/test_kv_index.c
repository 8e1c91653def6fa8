/* Tests core/kv_index: own keys (pinned against an independent computation of the documented
 * formula), stores chained across events, removals, clears, parent misses, tier moves, hashes
 * above INT64_MAX, the memory bound at max and max + 1 with its second chance, and a
 * randomized comparison of match with a brute-force model over random event streams. */
#include "sb_test.h"

#include <xxhash.h>

#include "base/alloc.h"
#include "core/kv_index.h"

#define BS 4 /* a small engine block size keeps the token arrays readable */

static sb_kv_index *new_index(uint32_t eps, size_t max, uint64_t secret)
{
    sb_kv_index_config cfg = {
        .n_endpoints = eps, .max_entries = max, .block_size = BS, .key_seed = 1337, .hash_secret = secret};
    sb_kv_index *ix = sb_kv_index_new(&cfg);
    assert_non_null(ix);
    return ix;
}

/* The formula of kv_index.h, written out independently: XXH3 of the little-endian bytes. */
static uint64_t ref_root(uint64_t seed, uint64_t extra)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(extra >> (8 * i));
    return XXH3_64bits_withSeed(b, 8, seed);
}

static uint64_t ref_block(uint64_t parent, const uint32_t *t, size_t bs)
{
    unsigned char b[4 * 64];
    for (size_t i = 0; i < bs; i++)
        for (int j = 0; j < 4; j++)
            b[4 * i + (size_t)j] = (unsigned char)(t[i] >> (8 * j));
    return XXH3_64bits_withSeed(b, 4 * bs, parent);
}

static sb_kv_status store(sb_kv_index *ix, uint32_t ep, const uint64_t *h, size_t n, const uint64_t *parent,
                          const uint32_t *tok, size_t n_tok)
{
    sb_kv_stored ev = {.engine_hashes = h,
                       .n = n,
                       .has_parent = parent != NULL,
                       .parent_engine_hash = parent ? *parent : 0,
                       .token_ids = tok,
                       .n_tokens = n_tok,
                       .block_size = BS};
    return sb_kv_index_block_stored(ix, ep, &ev);
}

static void test_keys_formula(void **state)
{
    (void)state;
    uint32_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 0xfffffffe, 10};
    uint64_t k[2], e0 = ref_block(ref_root(7, 3), tok, BS), e1 = ref_block(e0, tok + 4, BS);
    /* 10 tokens: two full blocks, the partial third has no key. */
    assert_int_equal(sb_kv_keys_from_tokens(7, tok, 10, BS, 3, k), 2);
    assert_true(k[0] == e0 && k[1] == e1);
    /* The adapter enters at the root: another adapter, another chain. */
    uint64_t other[2];
    sb_kv_keys_from_tokens(7, tok, 10, BS, 4, other);
    assert_true(other[0] != k[0] && other[1] != k[1]);
    assert_int_equal(sb_kv_keys_from_tokens(7, tok, 10, 0, 3, k), 0);
}

static void test_store_chain_and_match(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(3, 0, 0x5ec7e7);
    uint32_t tok[16];
    for (int i = 0; i < 16; i++)
        tok[i] = (uint32_t)(100 + i);
    uint64_t keys[4];
    assert_int_equal(sb_kv_keys_from_tokens(1337, tok, 16, BS, 0, keys), 4);
    /* ep 0 hears the prompt in two events, the second chained to the first's last hash. */
    uint64_t h01[2] = {11, 12}, h23[2] = {13, 14};
    assert_int_equal(store(ix, 0, h01, 2, NULL, tok, 8), SB_KV_OK);
    assert_int_equal(store(ix, 0, h23, 2, &h01[1], tok + 8, 8), SB_KV_OK);
    /* ep 1 holds the first block only, under other engine hashes (its own seed). */
    uint64_t h1 = 0xabc;
    assert_int_equal(store(ix, 1, &h1, 1, NULL, tok, 4), SB_KV_OK);
    uint32_t m[3];
    assert_int_equal(sb_kv_index_match(ix, keys, 4, m), 4);
    assert_int_equal(m[0], 4);
    assert_int_equal(m[1], 1);
    assert_int_equal(m[2], 0);
    /* Removing block 2 on ep 0 ends its run there, though block 3 is still held. */
    assert_int_equal(sb_kv_index_block_removed(ix, 0, &h23[0], 1, false), SB_KV_OK);
    assert_int_equal(sb_kv_index_match(ix, keys, 4, m), 2);
    assert_int_equal(m[0], 2);
    /* An unknown hash, and ep 1's hash removed on ep 0: both unknown there. */
    uint64_t unknown[2] = {999, 0xabc};
    sb_kv_index_block_removed(ix, 0, unknown, 2, false);
    sb_kv_index_ep_stats st = sb_kv_index_stats(ix, 0);
    assert_int_equal(st.stored, 4);
    assert_int_equal(st.removed, 1);
    assert_int_equal(st.unknown_removes, 2);
    assert_int_equal(st.blocks, 3);
    assert_int_equal(sb_kv_index_stats(ix, 1).blocks, 1);
    /* Clear: ep 0 holds nothing, ep 1 keeps its block. */
    sb_kv_index_clear(ix, 0);
    assert_int_equal(sb_kv_index_match(ix, keys, 4, m), 1);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], 1);
    assert_int_equal(sb_kv_index_stats(ix, 0).clears, 1);
    assert_int_equal(sb_kv_index_entries(ix), 1);
    /* A chain stored after the clear, from its parent again: the parent is gone. */
    assert_int_equal(store(ix, 0, h23, 2, &h01[1], tok + 8, 8), SB_KV_PARENT_MISS);
    sb_kv_index_free(ix);
}

static void test_parent_miss_drops_chain(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(1, 0, 1);
    uint32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint64_t parent = 77, h[2] = {1, 2}, child = 3;
    assert_int_equal(store(ix, 0, h, 2, &parent, tok, 8), SB_KV_PARENT_MISS);
    /* Its child misses in turn: block 1 was never recorded. */
    assert_int_equal(store(ix, 0, &child, 1, &h[1], tok + 8, 4), SB_KV_PARENT_MISS);
    assert_int_equal(sb_kv_index_entries(ix), 0);
    /* Nothing filed from the root: the same tokens as a root prompt match nothing. */
    uint64_t keys[3];
    uint32_t m[1];
    sb_kv_keys_from_tokens(1337, tok, 12, BS, 0, keys);
    assert_int_equal(sb_kv_index_match(ix, keys, 3, m), 0);
    assert_int_equal(sb_kv_index_stats(ix, 0).parent_misses, 2);
    sb_kv_index_free(ix);
}

static void test_tier_moves_keep_gpu_presence(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(1, 0, 1);
    uint32_t tok[4] = {5, 6, 7, 8};
    uint64_t h = 42, key;
    sb_kv_keys_from_tokens(1337, tok, 4, BS, 0, &key);
    assert_int_equal(store(ix, 0, &h, 1, NULL, tok, 4), SB_KV_OK);
    /* The block is offloaded to CPU (stored without tokens, or with medium CPU) and later
     * dropped from the CPU tier: the GPU copy stays indexed. */
    assert_int_equal(store(ix, 0, &h, 1, NULL, NULL, 0), SB_KV_TIER_MOVE);
    sb_kv_stored cpu = {
        .engine_hashes = &h, .n = 1, .token_ids = tok, .n_tokens = 4, .block_size = BS, .other_medium = true};
    assert_int_equal(sb_kv_index_block_stored(ix, 0, &cpu), SB_KV_TIER_MOVE);
    assert_int_equal(sb_kv_index_block_removed(ix, 0, &h, 1, true), SB_KV_TIER_MOVE);
    uint32_t m[1];
    assert_int_equal(sb_kv_index_match(ix, &key, 1, m), 1);
    sb_kv_index_ep_stats st = sb_kv_index_stats(ix, 0);
    assert_int_equal(st.tier_moves, 3);
    assert_int_equal(st.blocks, 1);
    /* A GPU removal does remove it. */
    sb_kv_index_block_removed(ix, 0, &h, 1, false);
    assert_int_equal(sb_kv_index_match(ix, &key, 1, m), 0);
    sb_kv_index_free(ix);
}

static void test_hashes_above_int64_max(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(2, 0, 9);
    uint32_t tok[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    uint64_t keys[2];
    sb_kv_keys_from_tokens(1337, tok, 8, BS, 0, keys);
    uint64_t h0 = 0xffffffffffffffffULL, h1 = 0x8000000000000000ULL;
    assert_int_equal(store(ix, 0, &h0, 1, NULL, tok, 4), SB_KV_OK);
    assert_int_equal(store(ix, 0, &h1, 1, &h0, tok + 4, 4), SB_KV_OK);
    /* The same engine hashes on another endpoint (engines sharing a hash seed) are its own. */
    assert_int_equal(store(ix, 1, &h0, 1, NULL, tok, 4), SB_KV_OK);
    uint32_t m[2];
    assert_int_equal(sb_kv_index_match(ix, keys, 2, m), 2);
    assert_int_equal(m[0], 2);
    assert_int_equal(m[1], 1);
    sb_kv_index_block_removed(ix, 0, &h1, 1, false);
    sb_kv_index_block_removed(ix, 1, &h0, 1, false);
    assert_int_equal(sb_kv_index_match(ix, keys, 2, m), 1);
    assert_int_equal(m[0], 1);
    assert_int_equal(m[1], 0);
    assert_int_equal(sb_kv_index_stats(ix, 0).unknown_removes, 0);
    sb_kv_index_free(ix);
}

static void test_refused_events_counted(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(1, 0, 1);
    uint32_t tok[8] = {0};
    uint64_t h[2] = {1, 2};
    /* 7 tokens for 2 blocks of 4; 8 tokens for 1 block; 0 blocks. */
    assert_int_equal(store(ix, 0, h, 2, NULL, tok, 7), SB_KV_MALFORMED);
    assert_int_equal(store(ix, 0, h, 1, NULL, tok, 8), SB_KV_MALFORMED);
    assert_int_equal(store(ix, 0, h, 0, NULL, tok, 0), SB_KV_MALFORMED);
    sb_kv_stored big = {.engine_hashes = h, .n = 1, .token_ids = tok, .n_tokens = 8, .block_size = 8};
    assert_int_equal(sb_kv_index_block_stored(ix, 0, &big), SB_KV_BLOCK_SIZE_MISMATCH);
    assert_int_equal(sb_kv_index_block_stored(ix, 5, &big), SB_KV_BAD_ENDPOINT);
    sb_kv_index_ep_stats st = sb_kv_index_stats(ix, 0);
    assert_int_equal(st.malformed, 3);
    assert_int_equal(st.block_size_mismatches, 1);
    assert_int_equal(sb_kv_index_entries(ix), 0);
    sb_kv_index_free(ix);
}

static void test_restore_refreshes_and_rekeys(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(1, 0, 1);
    uint32_t a[4] = {1, 2, 3, 4}, b[4] = {9, 9, 9, 9};
    uint64_t ka, kb, h = 5;
    sb_kv_keys_from_tokens(1337, a, 4, BS, 0, &ka);
    sb_kv_keys_from_tokens(1337, b, 4, BS, 0, &kb);
    store(ix, 0, &h, 1, NULL, a, 4);
    store(ix, 0, &h, 1, NULL, a, 4);
    assert_int_equal(sb_kv_index_entries(ix), 1);
    /* The same engine hash now reported for other tokens: the newer report wins. */
    store(ix, 0, &h, 1, NULL, b, 4);
    uint32_t m[1];
    assert_int_equal(sb_kv_index_match(ix, &ka, 1, m), 0);
    assert_int_equal(sb_kv_index_match(ix, &kb, 1, m), 1);
    /* Two engine hashes for one own key (a cache salt the index cannot see): held until the
     * last goes. */
    uint64_t h2 = 6;
    store(ix, 0, &h2, 1, NULL, b, 4);
    sb_kv_index_block_removed(ix, 0, &h, 1, false);
    assert_int_equal(sb_kv_index_match(ix, &kb, 1, m), 1);
    sb_kv_index_block_removed(ix, 0, &h2, 1, false);
    assert_int_equal(sb_kv_index_match(ix, &kb, 1, m), 0);
    sb_kv_index_free(ix);
}

static void test_bound_at_max_and_max_plus_one(void **state)
{
    (void)state;
    enum { MAX = 8 };
    sb_kv_index *ix = new_index(1, MAX, 3);
    uint32_t tok[(MAX + 1) * BS];
    for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++)
        tok[i] = (uint32_t)i;
    uint64_t h[MAX + 1], keys[MAX + 1];
    for (int i = 0; i <= MAX; i++)
        h[i] = 1000 + (uint64_t)i;
    sb_kv_keys_from_tokens(1337, tok, (MAX + 1) * BS, BS, 0, keys);
    /* Exactly max entries: all held, nothing evicted. */
    for (int i = 0; i < MAX; i++)
        assert_int_equal(store(ix, 0, &h[i], 1, i ? &h[i - 1] : NULL, tok + i * BS, BS), SB_KV_OK);
    uint32_t m[1];
    assert_int_equal(sb_kv_index_entries(ix), MAX);
    assert_int_equal(sb_kv_index_stats(ix, 0).evictions, 0);
    assert_int_equal(sb_kv_index_match(ix, keys, MAX, m), MAX);
    /* The match used every entry, so they all get a second chance; nothing distinguishes
     * them afterwards, and the least recently stored (block 0) goes at max + 1. */
    assert_int_equal(store(ix, 0, &h[MAX], 1, &h[MAX - 1], tok + MAX * BS, BS), SB_KV_OK);
    assert_int_equal(sb_kv_index_entries(ix), MAX);
    assert_int_equal(sb_kv_index_stats(ix, 0).evictions, 1);
    assert_true(sb_kv_index_bytes(ix) > MAX * 32);
    sb_kv_index_free(ix);
}

static void test_second_chance_keeps_matched_head(void **state)
{
    (void)state;
    enum { MAX = 8 };
    sb_kv_index *ix = new_index(1, MAX, 3);
    /* A shared head of 2 blocks, stored first and then used by matches, and unrelated
     * prompts stored after it: at the bound, the unused ones go before the head. */
    uint32_t head[2 * BS] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t hh[2] = {1, 2}, hk[2];
    sb_kv_keys_from_tokens(1337, head, 2 * BS, BS, 0, hk);
    store(ix, 0, hh, 2, NULL, head, 2 * BS);
    for (uint32_t i = 0; i < 20; i++) {
        uint32_t t[BS] = {100 + i, 0, 0, 0};
        uint64_t h = 500 + i;
        uint32_t m[1];
        assert_int_equal(sb_kv_index_match(ix, hk, 2, m), 2);
        store(ix, 0, &h, 1, NULL, t, BS);
        assert_true(sb_kv_index_entries(ix) <= MAX);
    }
    uint32_t m[1];
    assert_int_equal(sb_kv_index_match(ix, hk, 2, m), 2);
    assert_int_equal(sb_kv_index_stats(ix, 0).evictions, 20 + 2 - MAX);
    sb_kv_index_free(ix);
}

static void test_bound_shares_between_endpoints(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(2, 16, 3);
    /* ep 0 fills the index; ep 1's stores then take from ep 0 (above its fair share of 8),
     * not from ep 1's own few. */
    for (uint32_t i = 0; i < 16; i++) {
        uint32_t t[BS] = {i, 0, 0, 0};
        uint64_t h = i;
        store(ix, 0, &h, 1, NULL, t, BS);
    }
    for (uint32_t i = 0; i < 6; i++) {
        uint32_t t[BS] = {i, 1, 0, 0};
        uint64_t h = 100 + i;
        store(ix, 1, &h, 1, NULL, t, BS);
    }
    assert_int_equal(sb_kv_index_stats(ix, 1).blocks, 6);
    assert_int_equal(sb_kv_index_stats(ix, 0).blocks, 10);
    assert_int_equal(sb_kv_index_stats(ix, 0).evictions, 6);
    sb_kv_index_free(ix);
}

static void test_clear_is_lazy(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(2, 0, 5);
    enum { N = 5000 };
    static uint32_t tok[N * BS];
    static uint64_t h[N], keys[N];
    for (size_t i = 0; i < N * BS; i++)
        tok[i] = (uint32_t)i;
    for (size_t i = 0; i < N; i++)
        h[i] = 0xf000000000000000ULL + i;
    sb_kv_keys_from_tokens(1337, tok, N * BS, BS, 0, keys);
    assert_int_equal(store(ix, 0, h, N, NULL, tok, N * BS), SB_KV_OK);
    /* The clear frees 1024 at once and leaves the rest stale: not held, not matched. */
    sb_kv_index_clear(ix, 0);
    sb_kv_index_ep_stats st = sb_kv_index_stats(ix, 0);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.stale, N - 1024);
    assert_int_equal(sb_kv_index_entries(ix), N - 1024);
    uint32_t m[2];
    assert_int_equal(sb_kv_index_match(ix, keys, N, m), 0);
    /* A stale block is no parent, and its removal is news. */
    assert_int_equal(store(ix, 0, &h[N - 1], 1, &h[N - 2], tok, BS), SB_KV_PARENT_MISS);
    sb_kv_index_block_removed(ix, 0, &h[N - 3], 1, false);
    assert_int_equal(sb_kv_index_stats(ix, 0).unknown_removes, 1);
    /* Re-stored after the clear, a block is held again (its stale entry replaced). */
    uint64_t before = sb_kv_index_stats(ix, 0).stale;
    assert_int_equal(store(ix, 0, &h[N - 4], 1, NULL, tok, BS), SB_KV_OK);
    /* Its stale entry is gone, and the store freed two more (two per stored block). */
    assert_int_equal(sb_kv_index_stats(ix, 0).stale, before - 3);
    assert_int_equal(sb_kv_index_match(ix, keys, N, m), 1);
    assert_int_equal(m[0], 1);
    /* Stores on another endpoint free two stale entries per block. */
    static uint32_t t1[2000 * BS];
    static uint64_t h1[2000];
    for (size_t i = 0; i < 2000 * BS; i++)
        t1[i] = (uint32_t)(i + 7);
    for (size_t i = 0; i < 2000; i++)
        h1[i] = i;
    assert_int_equal(store(ix, 1, h1, 2000, NULL, t1, 2000 * BS), SB_KV_OK);
    assert_int_equal(sb_kv_index_stats(ix, 0).stale, 0);
    assert_int_equal(sb_kv_index_entries(ix), 2001);
    assert_int_equal(sb_kv_index_stats(ix, 0).blocks, 1);
    sb_kv_index_free(ix);
}

/* ---- random event streams against a brute-force model ---- */

#define R_EPS 4
#define R_MAXH 256

typedef struct model_ep {
    uint64_t engine[R_MAXH], own[R_MAXH];
    size_t n;
} model_ep;

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int model_find(const model_ep *m, uint64_t engine)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->engine[i] == engine)
            return (int)i;
    return -1;
}

static void model_del(model_ep *m, int i)
{
    m->engine[i] = m->engine[m->n - 1];
    m->own[i] = m->own[m->n - 1];
    m->n--;
}

static bool model_holds(const model_ep *m, uint64_t own)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->own[i] == own)
            return true;
    return false;
}

/* n blocks of tokens: half the time a prefix of one of four fixed prompts (so stores and
 * matches meet deep in a chain), else over a 3-letter alphabet. */
static void random_tokens(uint32_t *tok, size_t n)
{
    uint64_t base = rnd() % 8;
    for (size_t i = 0; i < n * BS; i++)
        tok[i] = base < 4 ? (uint32_t)(base * 1000 + i) : (uint32_t)(rnd() % 3);
}

static void random_stream(uint64_t seed, uint64_t secret)
{
    rng_state = seed;
    sb_kv_index *ix = new_index(R_EPS, 1 << 16, secret);
    static model_ep model[R_EPS];
    memset(model, 0, sizeof model);
    for (int step = 0; step < 3000; step++) {
        uint32_t ep = (uint32_t)(rnd() % R_EPS);
        model_ep *m = &model[ep];
        uint64_t r = rnd() % 100;
        if (r < 60 && m->n + 4 <= R_MAXH) {
            /* Store 1..4 blocks (chains repeat across endpoints), from the root, from a held
             * parent, or from an unknown one. */
            size_t n = 1 + rnd() % 4;
            uint32_t tok[4 * BS];
            random_tokens(tok, n);
            uint64_t h[4];
            for (size_t i = 0; i < n; i++)
                h[i] = rnd() % 512 | (rnd() & 1) << 63; /* small space: re-stores and collisions */
            uint64_t parent = 0, pown;
            bool has_parent = m->n && rnd() % 3;
            int miss = 0;
            if (has_parent) {
                if (rnd() % 10 == 0) {
                    parent = 0x7777;
                    miss = model_find(m, parent) < 0;
                    pown = miss ? 0 : m->own[model_find(m, parent)];
                } else {
                    int pi = (int)(rnd() % m->n);
                    parent = m->engine[pi];
                    pown = m->own[pi];
                }
            } else {
                pown = ref_root(1337, 0);
            }
            sb_kv_status st = store(ix, ep, h, n, has_parent ? &parent : NULL, tok, n * BS);
            assert_int_equal(st, miss ? SB_KV_PARENT_MISS : SB_KV_OK);
            if (miss)
                continue;
            for (size_t i = 0; i < n; i++) {
                pown = ref_block(pown, tok + i * BS, BS);
                int at = model_find(m, h[i]);
                if (at >= 0)
                    model_del(m, at);
                m->engine[m->n] = h[i];
                m->own[m->n++] = pown;
            }
        } else if (r < 90) {
            uint64_t h = m->n && rnd() % 4 ? m->engine[rnd() % m->n] : rnd() % 512;
            int at = model_find(m, h);
            sb_kv_index_block_removed(ix, ep, &h, 1, false);
            if (at >= 0)
                model_del(m, at);
        } else if (r < 92) {
            sb_kv_index_clear(ix, ep);
            m->n = 0;
        } else {
            /* Match a request made the way stored tokens are. */
            size_t n = 1 + rnd() % 4;
            uint32_t tok[4 * BS];
            random_tokens(tok, n);
            uint64_t keys[4];
            sb_kv_keys_from_tokens(1337, tok, n * BS, BS, 0, keys);
            uint32_t got[R_EPS];
            size_t best = sb_kv_index_match(ix, keys, n, got), want_best = 0;
            for (uint32_t e = 0; e < R_EPS; e++) {
                size_t k = 0;
                while (k < n && model_holds(&model[e], keys[k]))
                    k++;
                assert_int_equal(got[e], k);
                if (k > want_best)
                    want_best = k;
            }
            assert_int_equal(best, want_best);
        }
        if (step % 100 == 0)
            for (uint32_t e = 0; e < R_EPS; e++)
                assert_int_equal(sb_kv_index_stats(ix, e).blocks, model[e].n);
    }
    sb_kv_index_free(ix);
}

static void test_random_streams_match_model(void **state)
{
    (void)state;
    for (uint64_t s = 1; s <= 8; s++)
        random_stream(s * 0x9E3779B97F4A7C15ULL, s);
}

/* Hashes an outsider can shape (engine hashes of chosen prompts, own keys of chosen token
 * ids) do not build probe runs: the same engine hash on 64 endpoints, and 4096 hashes equal in
 * their low 32 bits, all probe short because slots are keyed. */
static void test_keyed_slots_probe_short(void **state)
{
    (void)state;
    sb_kv_index *ix = new_index(64, 0, 0xfeed);
    uint32_t tok[BS] = {1, 2, 3, 4};
    uint64_t same = 0x1234567800000000ULL;
    for (uint32_t ep = 0; ep < 64; ep++)
        assert_int_equal(store(ix, ep, &same, 1, NULL, tok, BS), SB_KV_OK);
    for (uint64_t i = 1; i <= 4096; i++) {
        uint64_t h = i << 32;
        uint32_t t[BS] = {(uint32_t)i, 0, 0, 0};
        assert_int_equal(store(ix, 0, &h, 1, NULL, t, BS), SB_KV_OK);
    }
    uint64_t key;
    uint32_t m[64];
    sb_kv_keys_from_tokens(1337, tok, BS, BS, 0, &key);
    assert_int_equal(sb_kv_index_match(ix, &key, 1, m), 1);
    for (uint32_t ep = 0; ep < 64; ep++)
        assert_int_equal(m[ep], 1);
    sb_table_probes p = sb_kv_index_probes(ix);
    assert_true(p.searches > 4096);
    assert_true(p.longest < 48);
    assert_true(p.probes < 4 * p.searches);
    sb_kv_index_free(ix);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    for (long n = 0; n < 12; n++) {
        sb_alloc_fail_after(n);
        sb_kv_index_config cfg = {.n_endpoints = 2, .max_entries = 4096};
        sb_kv_index *ix = sb_kv_index_new(&cfg);
        if (ix) {
            uint32_t tok[64] = {0};
            uint64_t h[4] = {1, 2, 3, 4};
            sb_kv_stored ev = {.engine_hashes = h, .n = 4, .token_ids = tok, .n_tokens = 64, .block_size = 16};
            (void)sb_kv_index_block_stored(ix, 0, &ev);
            sb_kv_index_ep_stats st = sb_kv_index_stats(ix, 0);
            assert_int_equal(st.stored + st.evictions, 4);
            assert_int_equal(st.blocks, sb_kv_index_entries(ix));
            sb_kv_index_free(ix);
        }
        sb_alloc_fail_after(-1);
    }
}

int main(void)
{
    /* clang-format off: one test a line */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_formula),
        cmocka_unit_test(test_store_chain_and_match),
        cmocka_unit_test(test_parent_miss_drops_chain),
        cmocka_unit_test(test_tier_moves_keep_gpu_presence),
        cmocka_unit_test(test_hashes_above_int64_max),
        cmocka_unit_test(test_refused_events_counted),
        cmocka_unit_test(test_restore_refreshes_and_rekeys),
        cmocka_unit_test(test_bound_at_max_and_max_plus_one),
        cmocka_unit_test(test_second_chance_keeps_matched_head),
        cmocka_unit_test(test_bound_shares_between_endpoints),
        cmocka_unit_test(test_clear_is_lazy),
        cmocka_unit_test(test_random_streams_match_model),
        cmocka_unit_test(test_keyed_slots_probe_short),
        cmocka_unit_test(test_alloc_failure),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
