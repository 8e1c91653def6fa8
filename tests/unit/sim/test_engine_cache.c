/* Tests src/sim/engine_cache.c and the cache side of src/sim/engine.c with a hand-driven clock:
 * the KV-event record (store / evict / reset sequences, parents, duplicates, token ids), the
 * caching of generated tokens' blocks (a follow-up hits the previous answer), and KV usage
 * counted as vLLM's BlockPool.get_usage() does. */
#include "sb_test.h"

#include <errno.h>

#include "base/alloc.h"
#include "sim/answer.h"
#include "sim/engine.h"
#include "sim/tokenizer.h"

#define BS 16

/* ---- helpers -------------------------------------------------------------------------------- */

static void ignore(void *ud, const sb_engine_event *ev)
{
    (void)ud;
    (void)ev;
}

/* Cached tokens of the last FINISHED event seen. */
static void last_cached(void *ud, const sb_engine_event *ev)
{
    if (ev->kind == SB_ENGINE_EV_FINISHED)
        *(uint32_t *)ud = ev->usage.cached_tokens;
}

static sb_ns run(sb_engine *e, sb_engine_event_cb cb, void *ud)
{
    sb_ns t, last = 0;
    while ((t = sb_engine_next_event(e)) != SB_ENGINE_NEVER) {
        sb_engine_advance(e, t, cb, ud);
        last = t;
    }
    return last;
}

static sb_engine *engine(uint32_t blocks, bool events)
{
    sb_engine_params p = sb_engine_params_default();
    p.num_gpu_blocks = blocks;
    p.kv_events = events;
    sb_engine *e = sb_engine_new(&p);
    assert_non_null(e);
    return e;
}

static uint32_t *prompt(uint32_t seed, uint32_t n)
{
    static uint32_t buf[4][4096];
    static int slot;
    uint32_t *p = buf[slot++ % 4];
    assert_true(n <= 4096);
    for (uint32_t i = 0; i < n; i++)
        p[i] = seed * 100000u + i;
    return p;
}

/* Submits and runs one request alone from *now; returns its cached tokens. */
static uint32_t serve(sb_engine *e, uint64_t id, const uint32_t *t, uint32_t n, uint32_t max_tokens, sb_ns *now)
{
    sb_engine_request q = {.id = id, .tokens = t, .n_prompt = n, .max_tokens = max_tokens};
    assert_int_equal(sb_engine_submit(e, &q, *now), 0);
    uint32_t cached = UINT32_MAX;
    *now = run(e, last_cached, &cached) + 1;
    return cached;
}

/* A copy of the recorded events (the engine's arrays live until the next drain). */
typedef struct rec {
    sb_engine_kv_event ev[64];
    uint64_t hashes[64][16];
    uint32_t tokens[64][256];
    size_t n;
} rec;

static void take(sb_engine *e, rec *r)
{
    size_t n = sb_engine_kv_count(e);
    for (size_t i = 0; i < n && r->n < 64; i++, r->n++) {
        sb_engine_kv_event *ev = &r->ev[r->n];
        sb_engine_kv_event_at(e, i, ev);
        assert_true(ev->n_blocks <= 16);
        if (ev->n_blocks)
            memcpy(r->hashes[r->n], ev->block_hashes, ev->n_blocks * sizeof(uint64_t));
        ev->block_hashes = r->hashes[r->n];
        if (ev->token_ids) {
            assert_true(ev->n_blocks * ev->block_size <= 256);
            memcpy(r->tokens[r->n], ev->token_ids, ev->n_blocks * ev->block_size * sizeof(uint32_t));
            ev->token_ids = r->tokens[r->n];
        }
    }
    sb_engine_kv_drain(e);
    assert_int_equal(sb_engine_kv_count(e), 0);
}

static size_t count_kind(const rec *r, sb_engine_kv_kind k)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->ev[i].kind == k;
    return n;
}

/* ---- events --------------------------------------------------------------------------------- */

/* Without kv_events nothing is recorded. */
static void test_events_off(void **state)
{
    (void)state;
    sb_engine *e = engine(64, false);
    sb_ns now = 0;
    serve(e, 1, prompt(1, 40), 40, 1, &now);
    assert_int_equal(sb_engine_kv_count(e), 0);
    sb_engine_free(e);
}

/* Stored runs carry the chain, its parent and the token ids; a longer prompt sharing the
 * prefix stores only its new blocks, parented on the shared one. */
static void test_events_store_chain(void **state)
{
    (void)state;
    sb_engine *e = engine(64, true);
    rec *r = sb_calloc(1, sizeof *r);
    sb_ns now = 0;
    uint32_t *t = prompt(1, 64);
    assert_int_equal(serve(e, 1, t, 40, 1, &now), 0); /* 40 tokens: 2 full blocks computed */
    take(e, r);
    assert_int_equal(r->n, 1);
    const sb_engine_kv_event *s1 = &r->ev[0];
    assert_int_equal(s1->kind, SB_ENGINE_KV_STORED);
    assert_int_equal(s1->n_blocks, 2);
    assert_false(s1->has_parent);
    assert_int_equal(s1->block_size, BS);
    assert_int_equal(s1->step, 0);
    assert_non_null(s1->token_ids);
    assert_memory_equal(s1->token_ids, t, 32 * sizeof(uint32_t));
    assert_true(s1->block_hashes[0] != s1->block_hashes[1]);

    assert_int_equal(serve(e, 2, t, 64, 1, &now), 32); /* hits 2, computes 4 full */
    take(e, r);
    assert_int_equal(r->n, 2);
    const sb_engine_kv_event *s2 = &r->ev[1];
    assert_int_equal(s2->kind, SB_ENGINE_KV_STORED);
    assert_int_equal(s2->n_blocks, 2);
    assert_true(s2->has_parent);
    assert_true(s2->parent_hash == r->hashes[0][1]);
    assert_memory_equal(s2->token_ids, t + 32, 32 * sizeof(uint32_t));
    sb_free(r);
    sb_engine_free(e);
}

/* Eviction reports the hash that was stored, once per block; reset reports CLEARED and really
 * forgets; a reset is refused while a request holds blocks. */
static void test_events_evict_and_reset(void **state)
{
    (void)state;
    /* 8 blocks; each 40-token request holds 2 hashed blocks and a partial one (as in
     * test_engine's LRU test). After A, B and C the free queue is, least recent first:
     * C's partial block, A1 A0 B1 B0 C1 C0, and one never-used block. D takes the partial and
     * the fresh block, then evicts A1; E takes D's partial block and evicts A0 and B1. */
    sb_engine *e = engine(8, true);
    rec *r = sb_calloc(1, sizeof *r);
    sb_ns now = 0;
    for (uint32_t s = 1; s <= 3; s++)
        serve(e, s, prompt(s, 40), 40, 1, &now);
    take(e, r);
    assert_int_equal(count_kind(r, SB_ENGINE_KV_STORED), 3);
    uint64_t a0 = r->hashes[0][0], a1 = r->hashes[0][1], b1 = r->hashes[1][1];
    serve(e, 4, prompt(4, 40), 40, 1, &now);
    take(e, r);
    assert_int_equal(r->n, 5);
    assert_int_equal(r->ev[3].kind, SB_ENGINE_KV_REMOVED);
    assert_int_equal(r->ev[3].n_blocks, 1);
    assert_true(r->ev[3].block_hashes[0] == a1);
    assert_int_equal(r->ev[4].kind, SB_ENGINE_KV_STORED);
    /* The removal belongs to the step that reused the block: the one that stores D. */
    assert_int_equal(r->ev[3].step, r->ev[4].step);
    assert_true(r->ev[3].time_ns < r->ev[4].time_ns);
    serve(e, 5, prompt(5, 40), 40, 1, &now);
    take(e, r);
    assert_int_equal(count_kind(r, SB_ENGINE_KV_REMOVED), 3);
    uint64_t removed[2] = {r->ev[5].block_hashes[0], r->ev[6].block_hashes[0]};
    assert_true(removed[0] == a0 && removed[1] == b1);

    /* Busy: request 6 holds blocks while it runs. */
    sb_engine_request q = {.id = 6, .tokens = prompt(6, 40), .n_prompt = 40, .max_tokens = 50};
    assert_int_equal(sb_engine_submit(e, &q, now), 0);
    sb_engine_next_event(e);
    assert_int_equal(sb_engine_reset_prefix_cache(e, now), -EBUSY);
    now = run(e, ignore, NULL) + 1;
    take(e, r);
    size_t before = r->n;
    assert_int_equal(sb_engine_reset_prefix_cache(e, now), 0);
    take(e, r);
    assert_int_equal(r->n, before + 1);
    assert_int_equal(r->ev[before].kind, SB_ENGINE_KV_CLEARED);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_cached, 0);
    /* A, cached before the reset, is a miss now; the freed blocks are reused without REMOVED. */
    assert_int_equal(serve(e, 7, prompt(1, 40), 40, 1, &now), 0);
    take(e, r);
    assert_int_equal(r->n, before + 2);
    assert_int_equal(r->ev[before + 1].kind, SB_ENGINE_KV_STORED);
    sb_free(r);
    sb_engine_free(e);
}

/* Two requests computing one prefix in the same steps: the second's copy is not cached, so it
 * is never announced (a consumer would otherwise count the block twice). */
static void test_events_duplicates_not_stored(void **state)
{
    (void)state;
    sb_engine *e = engine(64, true);
    rec *r = sb_calloc(1, sizeof *r);
    uint32_t *t = prompt(3, 48);
    sb_engine_request a = {.id = 1, .tokens = t, .n_prompt = 48, .max_tokens = 1};
    sb_engine_request b = {.id = 2, .tokens = t, .n_prompt = 48, .max_tokens = 1};
    assert_int_equal(sb_engine_submit(e, &a, 0), 0);
    assert_int_equal(sb_engine_submit(e, &b, 0), 0);
    run(e, ignore, NULL);
    take(e, r);
    uint32_t blocks = 0;
    for (size_t i = 0; i < r->n; i++)
        blocks += r->ev[i].kind == SB_ENGINE_KV_STORED ? r->ev[i].n_blocks : 0;
    assert_int_equal(blocks, 3);
    sb_free(r);
    sb_engine_free(e);
}

/* Hashes without tokens (replay's path): events carry no token ids. */
static void test_events_hash_path_no_tokens(void **state)
{
    (void)state;
    sb_engine *e = engine(64, true);
    rec *r = sb_calloc(1, sizeof *r);
    uint64_t h[2];
    sb_engine_hash_blocks(prompt(4, 32), 32, BS, 0, h);
    sb_engine_request q = {.id = 1, .block_hashes = h, .n_prompt = 33, .max_tokens = 1};
    assert_int_equal(sb_engine_submit(e, &q, 0), 0);
    run(e, ignore, NULL);
    take(e, r);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->ev[0].n_blocks, 2);
    assert_null(r->ev[0].token_ids);
    sb_free(r);
    sb_engine_free(e);
}

/* An event that cannot be recorded (memory) is counted as lost; recording goes on after. */
static void test_events_lost_to_memory(void **state)
{
    (void)state;
    sb_engine *e = engine(64, true);
    sb_engine_request q = {.id = 1, .tokens = prompt(8, 40), .n_prompt = 40, .max_tokens = 1};
    assert_int_equal(sb_engine_submit(e, &q, 0), 0);
    sb_ns t = sb_engine_next_event(e);
    sb_alloc_fail_after(0);
    sb_engine_advance(e, t, ignore, NULL);
    sb_alloc_fail_after(-1);
    assert_int_equal(sb_engine_kv_count(e), 0);
    assert_int_equal(sb_engine_kv_lost(e), 1);
    sb_ns now = run(e, ignore, NULL) + 1;
    serve(e, 2, prompt(9, 40), 40, 1, &now);
    assert_int_equal(sb_engine_kv_count(e), 1);
    assert_int_equal(sb_engine_kv_lost(e), 1);
    sb_engine_free(e);
}

/* ---- generated tokens ----------------------------------------------------------------------- */

/* The full blocks of prompt + answer are cached (the last token is never computed), with the
 * answer's ids in the STORED events; a follow-up whose prompt holds the answer hits them.
 * (Before generated blocks were cached, the follow-up hit the prompt's one full block: 16.) */
static void test_generated_blocks_cached(void **state)
{
    (void)state;
    sb_engine *e = engine(256, true);
    rec *r = sb_calloc(1, sizeof *r);
    sb_ns now = 0;
    uint32_t turn2[80];
    memcpy(turn2, prompt(5, 20), 20 * sizeof(uint32_t));
    for (uint32_t i = 0; i < 30; i++)
        turn2[20 + i] = sb_sim_answer_token(i);
    for (uint32_t i = 50; i < 80; i++)
        turn2[i] = 777000 + i;
    assert_int_equal(serve(e, 1, turn2, 20, 30, &now), 0); /* 50 tokens, 49 computed: 3 blocks */
    take(e, r);
    uint32_t stored = 0;
    for (size_t i = 0; i < r->n; i++) {
        const sb_engine_kv_event *ev = &r->ev[i];
        assert_int_equal(ev->kind, SB_ENGINE_KV_STORED);
        assert_memory_equal(ev->token_ids, turn2 + stored * BS, ev->n_blocks * BS * sizeof(uint32_t));
        stored += ev->n_blocks;
    }
    assert_int_equal(stored, 3);
    assert_int_equal(serve(e, 2, turn2, 80, 1, &now), 48);
    sb_free(r);
    sb_engine_free(e);
}

/* Caller-given output tokens (replay's answers) are what gets cached. */
static void test_generated_output_tokens(void **state)
{
    (void)state;
    sb_engine *e = engine(256, false);
    sb_ns now = 0;
    uint32_t turn2[64];
    memcpy(turn2, prompt(6, 32), 32 * sizeof(uint32_t)); /* block-aligned prompt */
    for (uint32_t i = 32; i < 64; i++)
        turn2[i] = 900000 + i;
    uint64_t h[2];
    sb_engine_hash_blocks(turn2, 32, BS, 0, h);
    /* Hashes only: the prompt is block-aligned, so the generated blocks still chain. */
    sb_engine_request q = {.id = 1, .block_hashes = h, .n_prompt = 32, .max_tokens = 20, .output_tokens = turn2 + 32};
    assert_int_equal(sb_engine_submit(e, &q, now), 0);
    now = run(e, ignore, NULL) + 1;
    assert_int_equal(serve(e, 2, turn2, 64, 1, &now), 48); /* 51 computed: 3 blocks */
    /* The answer differs from the simulator's default one: a follow-up with that misses. */
    uint32_t other[64];
    memcpy(other, turn2, 32 * sizeof(uint32_t));
    for (uint32_t i = 0; i < 32; i++)
        other[32 + i] = sb_sim_answer_token(i);
    assert_int_equal(serve(e, 3, other, 64, 1, &now), 32);
    sb_engine_free(e);
}

/* The answer's text tokenizes back to the ids the engine generated, after the chat template's
 * generation prompt (which ends in a line break), and the prompt keeps its own ids. */
static void test_answer_tokenizes_back(void **state)
{
    (void)state;
    char text[2048] = "<|user|>\nhello there\n<|assistant|>\n";
    size_t head_len = strlen(text);
    uint32_t head[64], all[512];
    size_t nh = sb_tokenize(text, head_len, head, 64);
    for (uint32_t i = 0; i < 100; i++)
        strcat(text, sb_sim_answer_word(i));
    strcat(text, "\n<|user|>\nmore\n<|assistant|>\n");
    size_t na = sb_tokenize(text, strlen(text), all, 512);
    assert_true(na > nh + 100);
    assert_memory_equal(all, head, nh * sizeof(uint32_t));
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(all[nh + i], sb_sim_answer_token(i));
}

/* ---- usage ---------------------------------------------------------------------------------- */

/* vLLM's get_usage(): blocks held by running requests; cached blocks nobody holds are free. */
static void test_usage_counts_held_blocks_only(void **state)
{
    (void)state;
    sb_engine *e = engine(100, false);
    sb_engine_request q = {.id = 1, .tokens = prompt(7, 200), .n_prompt = 200, .max_tokens = 40};
    assert_int_equal(sb_engine_submit(e, &q, 0), 0);
    sb_engine_next_event(e);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_used, 13); /* ceil(200 / 16) */
    assert_true(m.kv_cache_usage > 0.129 && m.kv_cache_usage < 0.131);
    run(e, ignore, NULL);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_cached, 14); /* 239 computed tokens: 14 full blocks */
    assert_int_equal(m.num_blocks_used, 0);
    assert_true(m.kv_cache_usage == 0.0);
    sb_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_off),
        cmocka_unit_test(test_events_store_chain),
        cmocka_unit_test(test_events_evict_and_reset),
        cmocka_unit_test(test_events_duplicates_not_stored),
        cmocka_unit_test(test_events_hash_path_no_tokens),
        cmocka_unit_test(test_events_lost_to_memory),
        cmocka_unit_test(test_generated_blocks_cached),
        cmocka_unit_test(test_generated_output_tokens),
        cmocka_unit_test(test_answer_tokenizes_back),
        cmocka_unit_test(test_usage_counts_held_blocks_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
