/* Tests core/tok_cache: exact hits, contexts kept apart, prefixes proven by two answers (less
 * the margin), shrunk by a disagreeing one, never made for prompts that opt out, the byte bound
 * and LRU order, and a randomized check with a toy tokenizer whose ids at a prompt's end
 * depend on what follows: a prefix hit is always a prefix of the looked-up prompt's real ids. */
#include "sb_test.h"

#include "base/alloc.h"
#include "core/tok_cache.h"

static sb_tok_cache *new_cache(size_t max, uint32_t margin, bool exact_only)
{
    sb_tok_cache_config cfg = {.max_bytes = max, .margin_tokens = margin, .exact_only = exact_only, .hash_secret = 7};
    sb_tok_cache *c = sb_tok_cache_new(&cfg);
    assert_non_null(c);
    return c;
}

/* A chain of n blocks: the first `shared` from family 1, the rest from family f. */
static void chain(uint64_t *out, size_t n, size_t shared, uint64_t f)
{
    for (size_t j = 0; j < n; j++)
        out[j] = (j < shared ? 1 : f) * 0x9E3779B97F4A7C15ULL + j * 0xC2B2AE3D27D4EB4FULL;
}

static void ids(uint32_t *out, size_t n, size_t shared, uint32_t f)
{
    for (size_t i = 0; i < n; i++)
        out[i] = i < shared ? (uint32_t)(1000 + i) : f * 100000 + (uint32_t)i;
}

static void test_exact_hits_and_contexts(void **state)
{
    (void)state;
    sb_tok_cache *c = new_cache(0, 16, false);
    uint64_t ch[4];
    uint32_t t[50];
    chain(ch, 4, 4, 1);
    ids(t, 50, 50, 0);
    sb_tok_key k = {.ctx = 11, .prompt_key = 99, .chain = ch, .n_blocks = 4};
    assert_null(sb_tok_cache_lookup(c, &k).tokens);
    assert_int_equal(sb_tok_cache_insert(c, &k, t, 50, true), 0);
    sb_tok_hit h = sb_tok_cache_lookup(c, &k);
    assert_true(h.exact);
    assert_int_equal(h.n_tokens, 50);
    assert_memory_equal(h.tokens, t, sizeof t);
    /* Another context (tools, template, model): nothing. */
    sb_tok_key other = k;
    other.ctx = 12;
    assert_null(sb_tok_cache_lookup(c, &other).tokens);
    /* A newer answer for the same prompt replaces the older. */
    t[0] = 5;
    assert_int_equal(sb_tok_cache_insert(c, &k, t, 50, true), 0);
    h = sb_tok_cache_lookup(c, &k);
    assert_int_equal(h.tokens[0], 5);
    sb_tok_cache_stats st = sb_tok_cache_get_stats(c);
    assert_int_equal(st.prompts, 1);
    assert_int_equal(st.exact_hits, 2);
    assert_int_equal(st.misses, 2);
    sb_tok_cache_free(c);
}

static void test_prefix_proven_by_two_answers(void **state)
{
    (void)state;
    sb_tok_cache *c = new_cache(0, 16, false);
    /* A shared system prompt of 10 text blocks and 300 ids; then each prompt its own turn. */
    uint64_t a[14], b[14], q[14];
    uint32_t ta[400], tb[400];
    chain(a, 14, 10, 2);
    chain(b, 14, 10, 3);
    chain(q, 14, 10, 4);
    ids(ta, 400, 300, 2);
    ids(tb, 400, 300, 3);
    sb_tok_key ka = {.ctx = 1, .prompt_key = 2, .chain = a, .n_blocks = 14};
    sb_tok_key kb = {.ctx = 1, .prompt_key = 3, .chain = b, .n_blocks = 14};
    sb_tok_key kq = {.ctx = 1, .prompt_key = 4, .chain = q, .n_blocks = 14};
    assert_int_equal(sb_tok_cache_insert(c, &ka, ta, 400, true), 0);
    /* One answer proves nothing about another prompt. */
    assert_null(sb_tok_cache_lookup(c, &kq).tokens);
    assert_int_equal(sb_tok_cache_insert(c, &kb, tb, 400, true), 0);
    /* Two agree on 300 ids: 284 are proven for any prompt sharing the 10 blocks. */
    sb_tok_hit h = sb_tok_cache_lookup(c, &kq);
    assert_non_null(h.tokens);
    assert_false(h.exact);
    assert_int_equal(h.n_tokens, 300 - 16);
    assert_int_equal(h.blocks, 10);
    assert_memory_equal(h.tokens, ta, h.n_tokens * sizeof(uint32_t));
    /* In another context the same text proves nothing. */
    sb_tok_key kq2 = kq;
    kq2.ctx = 9;
    assert_null(sb_tok_cache_lookup(c, &kq2).tokens);
    /* A prompt sharing fewer blocks does not reach the record. */
    uint64_t short_share[14];
    chain(short_share, 14, 9, 5);
    sb_tok_key ks = {.ctx = 1, .prompt_key = 5, .chain = short_share, .n_blocks = 14};
    assert_null(sb_tok_cache_lookup(c, &ks).tokens);
    /* A third answer sharing the 10 blocks but disagreeing at id 200 (a merge the first two
     * did not show): the record shrinks to 200 - 16. */
    uint32_t td[400];
    ids(td, 400, 300, 6);
    td[200] = 7;
    uint64_t d[14];
    chain(d, 14, 10, 6);
    sb_tok_key kd = {.ctx = 1, .prompt_key = 6, .chain = d, .n_blocks = 14};
    assert_int_equal(sb_tok_cache_insert(c, &kd, td, 400, true), 0);
    h = sb_tok_cache_lookup(c, &kq);
    assert_int_equal(h.n_tokens, 200 - 16);
    sb_tok_cache_stats st = sb_tok_cache_get_stats(c);
    assert_int_equal(st.prefix_records, 1);
    assert_int_equal(st.prefix_shrinks, 1);
    assert_int_equal(st.prefixes, 1);
    /* One that disagrees within the margin removes it. */
    td[10] = 8;
    kd.prompt_key = 7;
    sb_tok_cache_insert(c, &kd, td, 400, true);
    assert_null(sb_tok_cache_lookup(c, &kq).tokens);
    assert_int_equal(sb_tok_cache_get_stats(c).prefixes, 0);
    sb_tok_cache_free(c);
}

static void test_prefix_opt_out(void **state)
{
    (void)state;
    uint64_t a[4], b[4], q[4];
    uint32_t ta[100], tb[100];
    chain(a, 4, 3, 2);
    chain(b, 4, 3, 3);
    chain(q, 4, 3, 4);
    ids(ta, 100, 80, 2);
    ids(tb, 100, 80, 3);
    sb_tok_key ka = {.ctx = 1, .prompt_key = 2, .chain = a, .n_blocks = 4};
    sb_tok_key kb = {.ctx = 1, .prompt_key = 3, .chain = b, .n_blocks = 4};
    sb_tok_key kq = {.ctx = 1, .prompt_key = 4, .chain = q, .n_blocks = 4};
    /* A prompt with an image says share_prefix false: exact hits only. */
    sb_tok_cache *c = new_cache(0, 16, false);
    sb_tok_cache_insert(c, &ka, ta, 100, true);
    sb_tok_cache_insert(c, &kb, tb, 100, false);
    assert_null(sb_tok_cache_lookup(c, &kq).tokens);
    assert_true(sb_tok_cache_lookup(c, &kb).exact);
    sb_tok_cache_free(c);
    /* exact_only: never a prefix. */
    c = new_cache(0, 16, true);
    sb_tok_cache_insert(c, &ka, ta, 100, true);
    sb_tok_cache_insert(c, &kb, tb, 100, true);
    assert_null(sb_tok_cache_lookup(c, &kq).tokens);
    /* Agreement shorter than the margin proves nothing either. */
    sb_tok_cache_free(c);
    c = new_cache(0, 90, false);
    sb_tok_cache_insert(c, &ka, ta, 100, true);
    sb_tok_cache_insert(c, &kb, tb, 100, true);
    assert_null(sb_tok_cache_lookup(c, &kq).tokens);
    sb_tok_cache_free(c);
}

static void test_byte_bound_and_lru(void **state)
{
    (void)state;
    enum { MAX = 256 * 1024 };
    sb_tok_cache *c = new_cache(MAX, 16, false);
    static uint32_t t[4000];
    uint64_t ch[64];
    for (size_t i = 0; i < 4000; i++)
        t[i] = (uint32_t)i;
    /* 200 prompts of 16 KB of ids: far past the bound. Prompt 0 is looked up after every
     * insert, so it stays; the others go oldest first. */
    sb_tok_key k0 = {.ctx = 1, .prompt_key = 1000, .chain = ch, .n_blocks = 0};
    assert_int_equal(sb_tok_cache_insert(c, &k0, t, 4000, false), 0);
    for (uint64_t p = 1; p <= 200; p++) {
        chain(ch, 64, 0, p + 10);
        sb_tok_key k = {.ctx = 1, .prompt_key = p, .chain = ch, .n_blocks = 64};
        assert_int_equal(sb_tok_cache_insert(c, &k, t, 4000, true), 0);
        assert_true(sb_tok_cache_lookup(c, &k0).exact);
        assert_true(sb_tok_cache_get_stats(c).bytes <= MAX);
    }
    chain(ch, 64, 0, 11);
    sb_tok_key first = {.ctx = 1, .prompt_key = 1, .chain = ch, .n_blocks = 64};
    assert_null(sb_tok_cache_lookup(c, &first).tokens);
    chain(ch, 64, 0, 210);
    sb_tok_key last = {.ctx = 1, .prompt_key = 200, .chain = ch, .n_blocks = 64};
    assert_true(sb_tok_cache_lookup(c, &last).exact);
    sb_tok_cache_stats st = sb_tok_cache_get_stats(c);
    assert_true(st.evictions > 150);
    /* A prompt larger than a quarter of the bound is not cached. */
    static uint32_t big[MAX / 16];
    sb_tok_key kb = {.ctx = 1, .prompt_key = 5000, .chain = ch, .n_blocks = 0};
    assert_int_equal(sb_tok_cache_insert(c, &kb, big, MAX / 16, true), -1);
    assert_int_equal(sb_tok_cache_get_stats(c).refused, 1);
    sb_tok_cache_free(c);
}

/* ---- a toy tokenizer: text is a list of words, 4 words a text block; a word becomes its
 * id, except that the last word of a prompt merges with the end (a different id), as BPE
 * merges across a cut and a template renders the end of a conversation differently. ---- */

#define WPB 4
#define MAXW 64

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct prompt {
    uint32_t w[MAXW];
    size_t n;
} prompt;

static void toy_tokens(const prompt *p, uint32_t *out)
{
    for (size_t i = 0; i < p->n; i++)
        out[i] = i + 1 == p->n ? p->w[i] + 1000000 : p->w[i];
}

static size_t toy_chain(const prompt *p, uint64_t *out)
{
    uint64_t h = 0x1234;
    size_t n = p->n / WPB;
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < WPB; i++)
            h = (h ^ p->w[j * WPB + i]) * 0x100000001B3ULL;
        out[j] = h;
    }
    return n;
}

static uint64_t toy_key(const prompt *p)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ p->n;
    for (size_t i = 0; i < p->n; i++)
        h = (h ^ p->w[i]) * 0x100000001B3ULL;
    return h;
}

static void random_prompt(prompt *p)
{
    /* Prompts share one of three system prompts' beginnings, then run on with few words so
     * that they often share part of a block past the shared ones. */
    uint64_t sys = rnd() % 3;
    size_t sys_len = 8 + (size_t)sys * 8;
    p->n = sys_len + 1 + rnd() % 20;
    for (size_t i = 0; i < p->n; i++)
        p->w[i] = i < sys_len ? (uint32_t)(sys * 100 + i) : (uint32_t)(rnd() % 3);
}

static size_t prefix_soundness(uint32_t margin)
{
    sb_tok_cache *c = new_cache(1 << 20, margin, false);
    size_t wrong = 0, prefix_hits = 0;
    for (int step = 0; step < 4000; step++) {
        prompt p;
        random_prompt(&p);
        uint64_t ch[MAXW / WPB];
        uint32_t real[MAXW];
        toy_tokens(&p, real);
        sb_tok_key k = {.ctx = 3, .prompt_key = toy_key(&p), .chain = ch, .n_blocks = toy_chain(&p, ch)};
        sb_tok_hit h = sb_tok_cache_lookup(c, &k);
        if (h.tokens) {
            size_t n = h.exact ? p.n : h.n_tokens;
            if (h.exact)
                assert_int_equal(h.n_tokens, p.n);
            else
                prefix_hits++;
            if (n > p.n || memcmp(h.tokens, real, n * sizeof(uint32_t)) != 0)
                wrong++;
        }
        sb_tok_cache_insert(c, &k, real, p.n, true);
    }
    sb_tok_cache_free(c);
    assert_true(prefix_hits > 100);
    return wrong;
}

static void test_random_prefix_hits_are_sound(void **state)
{
    (void)state;
    for (uint64_t s = 1; s <= 4; s++) {
        rng_state = s * 0x9E3779B97F4A7C15ULL;
        /* A margin of a block and one more id covers what two witnesses may still share past
         * their last shared block, and the merge at the end: never a wrong id. */
        assert_int_equal(prefix_soundness(WPB + 1), 0);
    }
    /* Without the margin, ids past the shared blocks are handed out, and some are wrong: the
     * margin is what makes prefix hits sound. */
    rng_state = 5;
    assert_true(prefix_soundness(1) > 0);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    uint64_t ch[8];
    uint32_t t[64];
    chain(ch, 8, 8, 1);
    ids(t, 64, 64, 1);
    for (long n = 0; n < 16; n++) {
        sb_alloc_fail_after(n);
        sb_tok_cache_config cfg = {0};
        sb_tok_cache *c = sb_tok_cache_new(&cfg);
        if (c) {
            for (uint64_t p = 0; p < 3; p++) {
                sb_tok_key k = {.ctx = 1, .prompt_key = p, .chain = ch, .n_blocks = 8};
                int rc = sb_tok_cache_insert(c, &k, t, 64, true);
                sb_tok_hit h = sb_tok_cache_lookup(c, &k);
                assert_true(rc == 0 ? h.exact : !h.exact);
            }
            sb_tok_cache_free(c);
        }
        sb_alloc_fail_after(-1);
    }
}

int main(void)
{
    /* clang-format off: one test a line */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_hits_and_contexts),
        cmocka_unit_test(test_prefix_proven_by_two_answers),
        cmocka_unit_test(test_prefix_opt_out),
        cmocka_unit_test(test_byte_bound_and_lru),
        cmocka_unit_test(test_random_prefix_hits_are_sound),
        cmocka_unit_test(test_alloc_failure),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
