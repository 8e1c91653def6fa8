/* Tests src/sim/engine.c with a hand-driven clock: step timing, batching limits, prefix caching
 * and LRU eviction, capacity and preemption, LoRA slots, abort, metrics, determinism. */
#include "sb_test.h"

#include <errno.h>

#include "base/alloc.h"
#include "sim/engine.h"

/* Default step model, in ns (engine.c's defaults; repeated so the arithmetic is visible). */
#define A 5750000ULL
#define B 17250ULL
#define C 6000ULL
#define E 40ULL

/* ---- helpers -------------------------------------------------------------------------------- */

#define MAX_EV 4096

/* Keeps the first MAX_EV events, and a digest and count of all of them. */
typedef struct recorder {
    sb_engine_event ev[MAX_EV];
    size_t n, total;
    uint64_t digest;
} recorder;

static void fold(uint64_t *d, uint64_t v)
{
    *d = (*d ^ v) * 0x100000001B3ULL;
}

static void record(void *ud, const sb_engine_event *ev)
{
    recorder *r = ud;
    if (r->n < MAX_EV)
        r->ev[r->n++] = *ev;
    r->total++;
    const sb_engine_usage *u = &ev->usage;
    uint64_t f[] = {ev->kind,     ev->id,           ev->time_ns,      ev->itl_ns,           u->arrival_ns,
                    u->queue_ns,  u->ttft_ns,       u->e2e_ns,        u->itl_sum_ns,        u->itl_max_ns,
                    u->itl_count, u->prompt_tokens, u->cached_tokens, u->completion_tokens, u->preemptions};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        fold(&r->digest, f[i]);
}

/* The last event of `kind` for `id`, or NULL. */
static const sb_engine_event *find_ev(const recorder *r, sb_engine_event_kind kind, uint64_t id)
{
    for (size_t i = r->n; i-- > 0;)
        if (r->ev[i].kind == kind && r->ev[i].id == id)
            return &r->ev[i];
    return NULL;
}

static size_t count_ev(const recorder *r, sb_engine_event_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->ev[i].kind == kind;
    return n;
}

/* Runs the engine until idle, as a discrete-event driver would. Returns the time it went idle. */
static sb_ns drain(sb_engine *e, recorder *rec)
{
    sb_ns t, last = 0;
    while ((t = sb_engine_next_event(e)) != SB_ENGINE_NEVER) {
        sb_engine_advance(e, t, record, rec);
        last = t;
    }
    return last;
}

/* Token ids 1000*seed + i: distinct seeds give distinct prompts; equal ones, equal prompts. */
static uint32_t *prompt(uint32_t seed, uint32_t n)
{
    static uint32_t buf[8][40000];
    static int slot;
    uint32_t *p = buf[slot++ % 8];
    assert_true(n <= 40000);
    for (uint32_t i = 0; i < n; i++)
        p[i] = seed * 100000u + i;
    return p;
}

static int submit(sb_engine *e, uint64_t id, const uint32_t *tokens, uint32_t n, uint32_t max_tokens, uint32_t adapter,
                  sb_ns now)
{
    sb_engine_request q = {.id = id, .tokens = tokens, .n_prompt = n, .max_tokens = max_tokens, .adapter = adapter};
    return sb_engine_submit(e, &q, now);
}

static sb_engine *small_engine(uint32_t blocks)
{
    sb_engine_params p = sb_engine_params_default();
    p.num_gpu_blocks = blocks;
    sb_engine *e = sb_engine_new(&p);
    assert_non_null(e);
    return e;
}

static recorder *new_recorder(void)
{
    recorder *r = sb_calloc(1, sizeof *r);
    assert_non_null(r);
    return r;
}

/* ---- parameters and submission -------------------------------------------------------------- */

static void test_params(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    assert_int_equal(p.max_num_seqs, 256);
    assert_int_equal(p.max_num_batched_tokens, 8192);
    assert_int_equal(p.num_gpu_blocks, 29205);
    assert_int_equal(p.block_size, 16);
    assert_int_equal(p.max_loras, 4);
    assert_int_equal(p.lora_load_ns, SB_MS(50));
    assert_int_equal(sb_engine_params_check(&p), 0);
    sb_engine_params q = p;
    q.block_size = 0;
    assert_int_equal(sb_engine_params_check(&q), -EINVAL);
    assert_null(sb_engine_new(&q));
    q = p;
    q.max_num_seqs = 9000;
    assert_int_equal(sb_engine_params_check(&q), -EINVAL);
    q = p;
    q.decode_token_ns = -1;
    assert_int_equal(sb_engine_params_check(&q), -EINVAL);
}

static void test_submit_errors(void **state)
{
    (void)state;
    sb_engine *e = small_engine(4); /* 64 tokens of cache */
    uint32_t *t = prompt(1, 64);
    assert_int_equal(submit(e, 1, t, 0, 1, 0, 0), -EINVAL);
    assert_int_equal(submit(e, 1, t, 10, 0, 0, 0), -EINVAL);
    assert_int_equal(submit(e, 1, NULL, 10, 1, 0, 0), -EINVAL);
    assert_int_equal(submit(e, 1, t, 60, 5, 0, 0), -E2BIG);
    assert_int_equal(submit(e, 1, t, 60, 4, 0, 0), 0);
    assert_int_equal(submit(e, 1, t, 10, 1, 0, 0), -EEXIST);
    assert_int_equal(sb_engine_abort(e, 2, 0), -ENOENT);
    sb_engine_free(e);

    sb_engine_params p = sb_engine_params_default();
    p.max_loras = 0;
    e = sb_engine_new(&p);
    assert_int_equal(submit(e, 1, t, 10, 1, 7, 0), -EINVAL);
    sb_engine_free(e);
}

/* ---- step timing ---------------------------------------------------------------------------- */

static void test_step_timing(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    const sb_ns t0 = 1000;
    assert_int_equal(sb_engine_next_event(e), SB_ENGINE_NEVER);
    assert_int_equal(submit(e, 1, prompt(1, 100), 100, 3, 0, t0), 0);

    /* Step 1: the whole prompt. */
    sb_ns end1 = t0 + A + B * 100;
    assert_int_equal(sb_engine_next_event(e), end1);
    sb_engine_step st;
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.start_ns, t0);
    assert_int_equal(st.prefill_tokens, 100);
    assert_int_equal(st.decode_tokens, 0);
    /* Nothing happens before the step ends. */
    assert_int_equal(sb_engine_advance(e, end1 - 1, record, rec), 0);
    assert_int_equal(rec->n, 0);
    assert_int_equal(sb_engine_advance(e, end1, record, rec), 1);
    assert_int_equal(rec->n, 1);
    assert_int_equal(rec->ev[0].kind, SB_ENGINE_EV_FIRST_TOKEN);
    assert_int_equal(rec->ev[0].time_ns, end1);
    assert_int_equal(rec->ev[0].usage.ttft_ns, A + B * 100);
    assert_int_equal(rec->ev[0].usage.queue_ns, 0);

    /* Step 2 decodes token 101 reading 100 KV tokens; step 3 reads 101. */
    sb_ns end2 = end1 + A + C + E * 100, end3 = end2 + A + C + E * 101;
    assert_int_equal(sb_engine_next_event(e), end2);
    /* One advance may complete several steps, back to back. */
    assert_int_equal(sb_engine_advance(e, end3 + 5, record, rec), 2);
    assert_int_equal(rec->n, 4);
    assert_int_equal(rec->ev[1].kind, SB_ENGINE_EV_TOKEN);
    assert_int_equal(rec->ev[1].itl_ns, end2 - end1);
    assert_int_equal(rec->ev[2].kind, SB_ENGINE_EV_TOKEN);
    assert_int_equal(rec->ev[2].time_ns, end3);
    const sb_engine_event *f = &rec->ev[3];
    assert_int_equal(f->kind, SB_ENGINE_EV_FINISHED);
    assert_int_equal(f->usage.e2e_ns, end3 - t0);
    assert_int_equal(f->usage.itl_count, 2);
    assert_int_equal(f->usage.itl_sum_ns, end3 - end1);
    assert_int_equal(f->usage.itl_max_ns, end3 - end2);
    assert_int_equal(f->usage.prompt_tokens, 100);
    assert_int_equal(f->usage.completion_tokens, 3);
    assert_int_equal(f->usage.cached_tokens, 0);
    assert_int_equal(sb_engine_next_event(e), SB_ENGINE_NEVER);
    sb_free(rec);
    sb_engine_free(e);
}

static void test_mixed_batch_timing(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    assert_int_equal(submit(e, 1, prompt(1, 50), 50, 10, 0, 0), 0);
    sb_ns end1 = sb_engine_next_event(e);
    assert_int_equal(end1, A + B * 50);
    /* Arrives mid-step: waits for the next step, which also decodes request 1. */
    assert_int_equal(submit(e, 2, prompt(2, 200), 200, 10, 0, SB_MS(1)), 0);
    sb_engine_advance(e, end1, record, rec);
    sb_ns end2 = sb_engine_next_event(e);
    assert_int_equal(end2, end1 + A + B * 200 + C * 1 + E * 50);
    sb_engine_step st;
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.num_seqs, 2);
    assert_int_equal(st.prefill_tokens, 200);
    assert_int_equal(st.decode_tokens, 1);
    assert_int_equal(st.context_tokens, 50);
    sb_engine_advance(e, end2, record, rec);
    const sb_engine_event *ft = find_ev(rec, SB_ENGINE_EV_FIRST_TOKEN, 2);
    assert_non_null(ft);
    assert_int_equal(ft->usage.queue_ns, end1 - SB_MS(1));
    assert_int_equal(ft->usage.ttft_ns, end2 - SB_MS(1));
    drain(e, rec);
    assert_int_equal(count_ev(rec, SB_ENGINE_EV_FINISHED), 2);
    sb_free(rec);
    sb_engine_free(e);
}

/* Requests submitted at one instant share the step formed when the driver asks. */
static void test_same_instant_batches(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    assert_int_equal(submit(e, 1, prompt(1, 30), 30, 1, 0, 7), 0);
    assert_int_equal(submit(e, 2, prompt(2, 40), 40, 1, 0, 7), 0);
    assert_int_equal(sb_engine_next_event(e), 7 + A + B * 70);
    sb_engine_free(e);
}

/* ---- batching limits ------------------------------------------------------------------------ */

static void test_chunked_prefill(void **state)
{
    (void)state;
    sb_engine *e = small_engine(29205);
    recorder *rec = new_recorder();
    assert_int_equal(submit(e, 1, prompt(1, 20000), 20000, 1, 0, 0), 0);
    sb_engine_step st;
    uint32_t chunks[] = {8192, 8192, 3616};
    for (int i = 0; i < 3; i++) {
        sb_ns t = sb_engine_next_event(e);
        assert_true(sb_engine_current_step(e, &st));
        assert_int_equal(st.prefill_tokens, chunks[i]);
        assert_int_equal(rec->n, 0);
        sb_engine_advance(e, t, record, rec);
    }
    const sb_engine_event *f = find_ev(rec, SB_ENGINE_EV_FINISHED, 1);
    assert_non_null(f);
    assert_int_equal(f->usage.ttft_ns, 3 * A + B * 20000);
    sb_free(rec);
    sb_engine_free(e);
}

static void test_max_num_seqs_and_budget(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    p.max_num_seqs = 4;
    p.max_num_batched_tokens = 64;
    sb_engine *e = sb_engine_new(&p);
    recorder *rec = new_recorder();
    for (uint32_t i = 1; i <= 6; i++)
        assert_int_equal(submit(e, i, prompt(i, 40), 40, 5, 0, 0), 0);

    /* Step 1: request 1 whole, request 2 chunked to the budget's remaining 24 tokens. */
    sb_ns t = sb_engine_next_event(e);
    sb_engine_step st;
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.num_seqs, 2);
    assert_int_equal(st.prefill_tokens, 64);
    size_t steps = 0;
    for (; t != SB_ENGINE_NEVER; t = sb_engine_next_event(e)) {
        assert_true(sb_engine_current_step(e, &st));
        assert_true(st.prefill_tokens + st.decode_tokens <= 64);
        assert_true(st.num_seqs <= 4);
        sb_engine_metrics m;
        sb_engine_metrics_get(e, &m);
        assert_true(m.num_requests_running <= 4);
        sb_engine_advance(e, t, record, rec);
        steps++;
    }
    assert_int_equal(count_ev(rec, SB_ENGINE_EV_FINISHED), 6);
    assert_true(steps > 6);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- prefix cache --------------------------------------------------------------------------- */

static void test_prefix_cache_repeat(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    uint32_t *t = prompt(1, 100);
    assert_int_equal(submit(e, 1, t, 100, 2, 0, 0), 0);
    sb_ns idle = drain(e, rec);
    assert_int_equal(find_ev(rec, SB_ENGINE_EV_FINISHED, 1)->usage.cached_tokens, 0);

    /* The same prompt again: its 6 full blocks (96 tokens) are cached, 4 tokens computed. */
    assert_int_equal(submit(e, 2, t, 100, 2, 0, idle + 10), 0);
    assert_int_equal(sb_engine_next_event(e), idle + 10 + A + B * 4);
    drain(e, rec);
    const sb_engine_event *f = find_ev(rec, SB_ENGINE_EV_FINISHED, 2);
    assert_int_equal(f->usage.cached_tokens, 96);
    assert_int_equal(f->usage.ttft_ns, A + B * 4);

    /* A block-aligned prompt still computes its last token, so its last block is recomputed. */
    uint32_t *u = prompt(2, 64);
    assert_int_equal(submit(e, 3, u, 64, 1, 0, SB_MS(500)), 0);
    drain(e, rec);
    assert_int_equal(submit(e, 4, u, 64, 1, 0, SB_MS(600)), 0);
    drain(e, rec);
    assert_int_equal(find_ev(rec, SB_ENGINE_EV_FINISHED, 4)->usage.cached_tokens, 48);

    /* Same tokens under another adapter: nothing shared. */
    assert_int_equal(submit(e, 5, t, 100, 1, 3, SB_MS(700)), 0);
    drain(e, rec);
    assert_int_equal(find_ev(rec, SB_ENGINE_EV_FINISHED, 5)->usage.cached_tokens, 0);

    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.prefix_cache_queries_total, 100 + 100 + 64 + 64 + 100);
    assert_int_equal(m.prefix_cache_hits_total, 96 + 48);
    sb_free(rec);
    sb_engine_free(e);
}

/* Hashes given by the caller (replay's path) match hashes the engine computes from tokens. */
static void test_block_hashes_path(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    uint32_t *t = prompt(9, 80);
    uint64_t h[5], h2[5];
    assert_int_equal(sb_engine_hash_blocks(t, 80, 16, 0, h), 5);
    assert_int_equal(sb_engine_hash_blocks(t, 80, 16, 1, h2), 5);
    assert_true(h[0] != h2[0] && h[4] != h2[4]);
    sb_engine_request q = {.id = 1, .block_hashes = h, .n_prompt = 80, .max_tokens = 1};
    assert_int_equal(sb_engine_submit(e, &q, 0), 0);
    drain(e, rec);
    assert_int_equal(submit(e, 2, t, 80, 1, 0, SB_NS_PER_S), 0);
    drain(e, rec);
    assert_int_equal(find_ev(rec, SB_ENGINE_EV_FINISHED, 2)->usage.cached_tokens, 64);
    sb_free(rec);
    sb_engine_free(e);
}

/* Runs one request alone to completion and returns its cached tokens. */
static uint32_t run_alone(sb_engine *e, recorder *rec, uint64_t id, uint32_t seed, sb_ns *now)
{
    assert_int_equal(submit(e, id, prompt(seed, 40), 40, 1, 0, *now), 0);
    *now = drain(e, rec) + 1;
    return find_ev(rec, SB_ENGINE_EV_FINISHED, id)->usage.cached_tokens;
}

static void test_lru_eviction_order(void **state)
{
    (void)state;
    /* 8 blocks; each 40-token request holds 2 full (hashed) blocks and 1 partial one. */
    sb_engine *e = small_engine(8);
    recorder *rec = new_recorder();
    sb_ns now = 0;
    enum { PA = 1, PB, PC, PD, PE };
    assert_int_equal(run_alone(e, rec, 1, PA, &now), 0);
    assert_int_equal(run_alone(e, rec, 2, PB, &now), 0);
    assert_int_equal(run_alone(e, rec, 3, PC, &now), 0);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_used, 0);
    assert_int_equal(m.num_blocks_cached, 6);
    /* Free queue, least recent first: A1 A0 B1 B0 C1 C0. Using A again moves it to the end:
     * B1 B0 C1 C0 A1 A0. */
    assert_int_equal(run_alone(e, rec, 4, PA, &now), 32);
    /* Unhashed (partial) blocks are reused first, then never-used ones, then the LRU head. D
     * takes A's partial block, the last never-used block and B1 (B's tail block goes before its
     * head); E takes D's partial block, B0 and C1. */
    assert_int_equal(run_alone(e, rec, 5, PD, &now), 0); /* evicts B1 */
    assert_int_equal(run_alone(e, rec, 6, PE, &now), 0); /* evicts B0, C1 */
    /* A, used most recently among the old ones, survives whole; C lost its tail block only;
     * B, the least recently used, is gone. */
    assert_int_equal(run_alone(e, rec, 7, PA, &now), 32);
    assert_int_equal(run_alone(e, rec, 8, PC, &now), 16);
    assert_int_equal(run_alone(e, rec, 9, PB, &now), 0);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- capacity and preemption ---------------------------------------------------------------- */

static void test_admission_waits_for_blocks(void **state)
{
    (void)state;
    sb_engine *e = small_engine(10);
    recorder *rec = new_recorder();
    assert_int_equal(submit(e, 1, prompt(1, 100), 100, 20, 0, 0), 0); /* 7 blocks, then 8 */
    assert_int_equal(submit(e, 2, prompt(2, 64), 64, 1, 0, 0), 0);    /* needs 4 */
    sb_engine_next_event(e);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_requests_running, 1);
    assert_int_equal(m.num_requests_waiting, 1);
    assert_int_equal(m.num_blocks_used, 7);
    assert_true(m.kv_cache_usage > 0.69 && m.kv_cache_usage < 0.71);
    drain(e, rec);
    const sb_engine_event *f1 = find_ev(rec, SB_ENGINE_EV_FINISHED, 1);
    const sb_engine_event *f2 = find_ev(rec, SB_ENGINE_EV_FINISHED, 2);
    assert_non_null(f1);
    assert_non_null(f2);
    /* Request 2 was admitted by the step that started when request 1 finished. */
    assert_int_equal(f2->usage.queue_ns, f1->time_ns);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_preemptions_total, 0);
    assert_int_equal(m.num_blocks_used, 0);
    sb_free(rec);
    sb_engine_free(e);
}

static void test_preemption_newest_first(void **state)
{
    (void)state;
    sb_engine *e = small_engine(8);
    recorder *rec = new_recorder();
    /* Both fit at first (3 blocks each), then grow one block per 16 tokens until request 1
     * needs a fifth block and none is free. */
    assert_int_equal(submit(e, 1, prompt(1, 48), 48, 40, 0, 0), 0);
    assert_int_equal(submit(e, 2, prompt(2, 48), 48, 40, 0, 0), 0);
    drain(e, rec);
    const sb_engine_event *p = find_ev(rec, SB_ENGINE_EV_PREEMPTED, 2);
    assert_non_null(p);
    assert_null(find_ev(rec, SB_ENGINE_EV_PREEMPTED, 1));
    assert_int_equal(p->usage.completion_tokens, 17);
    const sb_engine_event *f1 = find_ev(rec, SB_ENGINE_EV_FINISHED, 1);
    const sb_engine_event *f2 = find_ev(rec, SB_ENGINE_EV_FINISHED, 2);
    assert_non_null(f1);
    assert_non_null(f2);
    assert_true(f2->time_ns > f1->time_ns);
    assert_int_equal(f2->usage.completion_tokens, 40);
    assert_int_equal(f2->usage.preemptions, 1);
    assert_int_equal(f2->usage.itl_count, 39);
    /* The gap across the preemption is the longest. */
    assert_true(f2->usage.itl_max_ns > f1->usage.itl_max_ns * 3);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_preemptions_total, 1);
    assert_int_equal(m.request_success_total, 2);
    assert_int_equal(m.generation_tokens_total, 80);
    assert_int_equal(m.num_blocks_used, 0);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- LoRA ----------------------------------------------------------------------------------- */

static void test_lora_slots(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    /* Adapters 1..5, one request each (adapter 2's is short), and a second one for adapter 1. */
    for (uint32_t a = 1; a <= 5; a++)
        assert_int_equal(submit(e, a, prompt(a, 16), 16, a == 2 ? 2 : 50, a, 0), 0);
    assert_int_equal(submit(e, 6, prompt(6, 16), 16, 50, 1, 0), 0);

    sb_ns t = sb_engine_next_event(e);
    sb_engine_step st;
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.lora_loads, 4); /* adapter 1 loaded once for two requests */
    assert_int_equal(st.num_seqs, 5);
    assert_int_equal(t, A + B * 80 + 4 * SB_MS(50));
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_requests_running, 5);
    assert_int_equal(m.num_requests_waiting, 1);
    assert_int_equal(m.num_running_adapters, 4);
    assert_int_equal(m.num_waiting_adapters, 1);
    sb_engine_adapter ad[8];
    assert_int_equal(sb_engine_adapters(e, ad, 8), 5);
    assert_int_equal(ad[4].id, 5);
    assert_false(ad[4].resident);
    assert_int_equal(ad[4].waiting, 1);
    assert_int_equal(ad[0].running, 2);

    /* Adapter 2's request finishes after its second token; the next step evicts adapter 2 and
     * loads adapter 5, paying the load once. */
    sb_engine_advance(e, t, record, rec);
    t = sb_engine_next_event(e);
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.lora_loads, 0);
    sb_engine_advance(e, t, record, rec);
    assert_non_null(find_ev(rec, SB_ENGINE_EV_FINISHED, 2));
    t = sb_engine_next_event(e);
    assert_true(sb_engine_current_step(e, &st));
    assert_int_equal(st.lora_loads, 1);
    assert_int_equal(st.prefill_tokens, 16);
    assert_int_equal(st.decode_tokens, 4);
    assert_int_equal(sb_engine_adapters(e, ad, 8), 4); /* adapter 2 forgotten */
    for (int i = 0; i < 4; i++)
        assert_true(ad[i].resident && ad[i].id != 2);
    drain(e, rec);
    assert_int_equal(count_ev(rec, SB_ENGINE_EV_FINISHED), 6);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_running_adapters, 0);
    assert_int_equal(m.num_waiting_adapters, 0);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- abort ---------------------------------------------------------------------------------- */

static void test_abort_frees_blocks(void **state)
{
    (void)state;
    sb_engine *e = small_engine(100);
    recorder *rec = new_recorder();
    assert_int_equal(submit(e, 1, prompt(1, 200), 200, 100, 0, 0), 0);
    assert_int_equal(submit(e, 2, prompt(2, 30), 30, 100, 0, 0), 0);
    sb_ns t = sb_engine_next_event(e);
    sb_engine_advance(e, t, record, rec);
    t = sb_engine_next_event(e); /* a decode step in flight */
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_used, 13 + 2);
    /* Aborted mid-step: its blocks free now, no event for it at the step's end. */
    assert_int_equal(sb_engine_abort(e, 1, t - 10), 0);
    assert_int_equal(sb_engine_abort(e, 1, t - 10), -ENOENT);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_used, 2);
    assert_int_equal(m.num_blocks_cached, 12); /* its full prompt blocks stay reusable */
    assert_int_equal(m.num_requests_running, 1);
    size_t before = rec->n;
    sb_engine_advance(e, t, record, rec);
    assert_int_equal(rec->n, before + 1);
    assert_int_equal(rec->ev[before].id, 2);
    /* A waiting request can be aborted too. */
    assert_int_equal(submit(e, 3, prompt(3, 30), 30, 1, 0, t), 0);
    assert_int_equal(sb_engine_abort(e, 3, t), 0);
    assert_int_equal(sb_engine_abort(e, 2, t), 0);
    assert_int_equal(sb_engine_next_event(e), SB_ENGINE_NEVER);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_blocks_used, 0);
    assert_int_equal(m.request_aborted_total, 3);
    assert_int_equal(m.num_requests_waiting + m.num_requests_running, 0);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- metrics -------------------------------------------------------------------------------- */

static void test_metrics_counters(void **state)
{
    (void)state;
    sb_engine *e = small_engine(1000);
    recorder *rec = new_recorder();
    uint32_t *t = prompt(4, 70);
    assert_int_equal(submit(e, 1, t, 70, 5, 0, 0), 0);
    sb_engine_next_event(e);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.num_requests_running, 1);
    assert_int_equal(m.num_blocks_used, 5);
    assert_true(m.kv_cache_usage > 0.0049 && m.kv_cache_usage < 0.0051);
    assert_int_equal(m.block_size, 16);
    assert_int_equal(m.num_gpu_blocks, 1000);
    assert_int_equal(m.max_loras, 4);
    sb_ns idle = drain(e, rec);
    assert_int_equal(submit(e, 2, t, 70, 3, 0, idle), 0);
    drain(e, rec);
    sb_engine_metrics_get(e, &m);
    assert_int_equal(m.request_success_total, 2);
    assert_int_equal(m.prompt_tokens_total, 140);
    assert_int_equal(m.generation_tokens_total, 8);
    assert_int_equal(m.prefix_cache_queries_total, 140);
    assert_int_equal(m.prefix_cache_hits_total, 64);
    assert_int_equal(m.num_requests_running, 0);
    assert_int_equal(m.kv_cache_usage, 0.0);
    assert_int_equal(m.num_blocks_cached, 4);
    assert_int_equal(m.num_steps_total, 5 + 3);
    sb_free(rec);
    sb_engine_free(e);
}

/* ---- callbacks and determinism -------------------------------------------------------------- */

typedef struct chain_ctx {
    sb_engine *e;
    recorder rec;
    int submitted;
} chain_ctx;

/* A conversation's next turn, sent the moment the previous one finishes. */
static void chain_cb(void *ud, const sb_engine_event *ev)
{
    chain_ctx *c = ud;
    record(&c->rec, ev);
    if (ev->kind == SB_ENGINE_EV_FINISHED && ev->id == 1) {
        assert_int_equal(submit(c->e, 2, prompt(5, 120), 120, 1, 0, ev->time_ns), 0);
        c->submitted = 1;
    }
}

static void test_callback_submits_next_turn(void **state)
{
    (void)state;
    chain_ctx *c = sb_calloc(1, sizeof *c);
    c->e = small_engine(1000);
    assert_int_equal(submit(c->e, 1, prompt(5, 100), 100, 2, 0, 0), 0);
    /* One advance far in the future: the second turn still starts at the first's end. */
    sb_engine_advance(c->e, 10 * SB_NS_PER_S, chain_cb, c);
    assert_true(c->submitted);
    assert_int_equal(sb_engine_next_event(c->e), SB_ENGINE_NEVER);
    const sb_engine_event *f = find_ev(&c->rec, SB_ENGINE_EV_FINISHED, 2);
    assert_non_null(f);
    assert_int_equal(f->usage.queue_ns, 0);
    assert_int_equal(f->usage.cached_tokens, 96);
    assert_int_equal(f->usage.ttft_ns, A + B * 24);
    sb_engine_free(c->e);
    sb_free(c);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* A mixed workload under memory pressure: shared prefixes, adapters, preemptions, aborts. */
static void run_workload(recorder *rec, sb_engine_metrics *m, uint64_t hash_secret)
{
    sb_engine_params p = sb_engine_params_default();
    p.hash_secret = hash_secret;
    p.num_gpu_blocks = 400;
    p.max_num_seqs = 16;
    p.max_num_batched_tokens = 512;
    p.max_loras = 2;
    sb_engine *e = sb_engine_new(&p);
    assert_non_null(e);
    uint64_t s = 42;
    sb_ns now = 0;
    static uint32_t toks[2000];
    for (uint64_t id = 1; id <= 300; id++) {
        now += lcg(&s) % SB_MS(20);
        uint32_t n = 20 + (uint32_t)(lcg(&s) % 900), group = (uint32_t)(lcg(&s) % 5);
        for (uint32_t i = 0; i < n; i++)
            toks[i] = i < 300 ? group * 1000 + i : (uint32_t)(id * 7919 + i);
        sb_ns next;
        while ((next = sb_engine_next_event(e)) <= now)
            sb_engine_advance(e, next, record, rec);
        uint32_t adapter = lcg(&s) % 4 == 0 ? 1 + (uint32_t)(lcg(&s) % 3) : 0;
        assert_int_equal(submit(e, id, toks, n, 1 + (uint32_t)(lcg(&s) % 300), adapter, now), 0);
        if (id % 37 == 0)
            sb_engine_abort(e, id - 5, now);
    }
    drain(e, rec);
    sb_engine_metrics_get(e, m);
    sb_engine_free(e);
}

static void test_determinism(void **state)
{
    (void)state;
    recorder *a = new_recorder(), *b = new_recorder();
    sb_engine_metrics ma, mb;
    run_workload(a, &ma, 0);
    /* Another block-table secret: slots move, nothing else does. */
    run_workload(b, &mb, 0x5ec7e7);
    assert_true(ma.num_preemptions_total > 0);
    assert_true(ma.prefix_cache_hits_total > 0);
    assert_int_equal(ma.request_success_total + ma.request_aborted_total, 300);
    assert_int_equal(ma.num_blocks_used, 0);
    assert_int_equal(a->total, b->total);
    assert_int_equal(a->digest, b->digest);
    assert_int_equal(ma.num_steps_total, mb.num_steps_total);
    assert_int_equal(ma.num_preemptions_total, mb.num_preemptions_total);
    assert_int_equal(ma.prefix_cache_hits_total, mb.prefix_cache_hits_total);
    assert_int_equal(ma.generation_tokens_total, mb.generation_tokens_total);
    assert_int_equal(a->total, ma.generation_tokens_total + ma.request_success_total + ma.num_preemptions_total);
    sb_free(a);
    sb_free(b);
}

/* ---- calibration and allocation failure ----------------------------------------------------- */

static void test_calibration(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    sb_engine_calibration c;
    assert_int_equal(sb_engine_calibrate(&p, &c), 0);
    assert_int_equal(c.ttft_ns[0], A + B * 1024);
    assert_int_equal(c.ttft_ns[2], 4 * A + B * 32768);
    /* Batch 1 steady state: one decode token over ~1k tokens of context. */
    assert_true(c.itl_ns[0] >= A + C + E * 1024 && c.itl_ns[0] < A + C + E * 1200);
    assert_true(c.itl_ns[0] < c.itl_ns[1] && c.itl_ns[1] < c.itl_ns[2]);
    assert_true(c.prefill_tokens_per_s > 20000 && c.prefill_tokens_per_s < 80000);
    p.block_size = 0;
    assert_int_equal(sb_engine_calibrate(&p, &c), -EINVAL);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    for (long n = 0; n < 6; n++) {
        sb_alloc_fail_after(n);
        sb_engine *e = sb_engine_new(&p);
        sb_alloc_fail_after(-1);
        if (e)
            sb_engine_free(e);
    }
    sb_engine *e = small_engine(100);
    for (long n = 0; n < 3; n++) {
        sb_alloc_fail_after(n);
        int rc = submit(e, 1, prompt(1, 20), 20, 1, 9, 0);
        sb_alloc_fail_after(-1);
        if (rc == 0)
            assert_int_equal(sb_engine_abort(e, 1, 0), 0);
        else
            assert_int_equal(rc, -ENOMEM);
        assert_int_equal(sb_engine_abort(e, 1, 0), -ENOENT);
    }
    assert_int_equal(sb_engine_adapters(e, NULL, 0), 0);
    sb_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_submit_errors),
        cmocka_unit_test(test_step_timing),
        cmocka_unit_test(test_mixed_batch_timing),
        cmocka_unit_test(test_same_instant_batches),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_max_num_seqs_and_budget),
        cmocka_unit_test(test_prefix_cache_repeat),
        cmocka_unit_test(test_block_hashes_path),
        cmocka_unit_test(test_lru_eviction_order),
        cmocka_unit_test(test_admission_waits_for_blocks),
        cmocka_unit_test(test_preemption_newest_first),
        cmocka_unit_test(test_lora_slots),
        cmocka_unit_test(test_abort_frees_blocks),
        cmocka_unit_test(test_metrics_counters),
        cmocka_unit_test(test_callback_submits_next_turn),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
