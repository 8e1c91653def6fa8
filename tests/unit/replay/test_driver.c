/* Tests src/replay/: the event queue's order, the driver on hand-checkable fleets (a cache hit
 * of exactly the shared full blocks, latencies from the step formula, network delay, shedding,
 * conversations), determinism, the policy registry and a custom policy, simulated scrapes,
 * the trace parsers on the real files and on malformed lines, and the generators' counts and
 * sharing. Virtual time only: nothing sleeps. */
#include "sb_test.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "replay/driver.h"
#include "replay/event_queue.h"
#include "replay/generators.h"
#include "replay/policy.h"
#include "replay/report.h"
#include "replay/trace.h"
#include "replay/workload.h"

#define MS 1000000ULL
#define US 1000ULL
#define EPOCH SB_NS_PER_S /* the driver's clock starts at 1 s */

/* ---- helpers -------------------------------------------------------------------------------- */

/* Round figures for hand arithmetic: a step costs 1 ms + 10 us per prefill token; decoding and
 * KV reads are free. */
static sb_replay_opts hand_opts(uint32_t replicas)
{
    sb_replay_opts o;
    sb_replay_opts_default(&o);
    o.replicas = replicas;
    o.engine.step_overhead_ns = 1e6;
    o.engine.prefill_token_ns = 1e4;
    o.engine.decode_token_ns = 0;
    o.engine.context_token_ns = 0;
    o.keep_records = true;
    return o;
}

static long add(sb_replay_workload *w, sb_ns at, const sb_replay_span *s, uint32_t n, uint32_t max_tokens)
{
    sb_replay_request r = {.arrival_ns = at, .max_tokens = max_tokens, .followup = SB_REPLAY_NO_REQUEST};
    long i = sb_replay_workload_add(w, &r, s, n);
    assert_true(i >= 0);
    return i;
}

static void resolve(const char *name, sb_replay_policy *p)
{
    assert_int_equal(sb_replay_policy_resolve(name, NULL, 0, p), 0);
}

static void run_ok(const sb_replay_workload *w, const sb_replay_policy *p, const sb_replay_opts *o, sb_replay_result *r)
{
    char err[256] = "";
    int rc = sb_replay_run(w, p, o, r, err, sizeof(err));
    if (rc != 0)
        fail_msg("run failed: %d %s", rc, err);
}

static sb_replay_span shared_span(uint64_t n, uint32_t len)
{
    return (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_SHARED, n), len};
}
static sb_replay_span unique_span(uint64_t n, uint32_t len)
{
    return (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_UNIQUE, n), len};
}

/* ---- event queue ---------------------------------------------------------------------------- */

static void test_queue_orders_by_time_then_insertion(void **state)
{
    (void)state;
    sb_replay_queue q = {0};
    uint64_t rng = 7;
    for (uint32_t i = 0; i < 2000; i++)
        assert_int_equal(sb_replay_queue_push(&q, sb_rand_next(&rng) % 50, 0, i, 0), 0);
    sb_replay_event prev = {0}, ev;
    size_t n = 0;
    while (sb_replay_queue_pop(&q, &ev)) {
        if (n++) {
            assert_true(ev.time_ns >= prev.time_ns);
            if (ev.time_ns == prev.time_ns)
                assert_true(ev.a > prev.a); /* equal times pop in push order */
        }
        prev = ev;
    }
    assert_int_equal(n, 2000);
    assert_null(sb_replay_queue_peek(&q));
    sb_replay_queue_free(&q);
}

/* ---- the driver on hand-checkable fleets ------------------------------------------------------ */

/* One replica; B shares A's first 100 tokens (6 full 16-token blocks) and arrives after A is
 * done. TTFT(A) = 1 ms + 120 x 10 us; B computes only the 24 tokens past the shared blocks. */
static void test_shared_prefix_hits_and_known_latencies(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span a[2] = {shared_span(1, 100), unique_span(1, 20)};
    sb_replay_span b[2] = {shared_span(1, 100), unique_span(2, 20)};
    add(&w, 0, a, 2, 2);
    add(&w, 500 * MS, b, 2, 2);
    w.rate = 2;
    sb_replay_policy p;
    resolve("round-robin", &p);
    sb_replay_opts o = hand_opts(1);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.completed, 2);
    assert_int_equal(r.shed, 0);
    const sb_replay_record *ra = &r.records[0], *rb = &r.records[1];
    assert_int_equal(ra->cached_tokens, 0);
    assert_int_equal(rb->cached_tokens, 96); /* 6 full blocks of 16 */
    assert_int_equal(ra->ttft_ns, 1 * MS + 120 * 10 * US);
    assert_int_equal(rb->ttft_ns, 1 * MS + 24 * 10 * US);
    /* The second token comes one decode step (1 ms: decoding is free here) later. */
    assert_int_equal(ra->e2e_ns, ra->ttft_ns + 1 * MS);
    assert_int_equal(ra->arrival_ns, EPOCH);
    assert_int_equal(rb->arrival_ns, EPOCH + 500 * MS);
    assert_true(r.hit_rate > 0.39999 && r.hit_rate < 0.40001); /* 96 of 240 prompt tokens */
    assert_int_equal(r.prompt_tokens, 240);
    assert_int_equal(r.cached_tokens, 96);
    assert_int_equal(r.output_tokens, 4);
    assert_true(r.ttft_p50_ms > 1.7199 && r.ttft_p50_ms < 1.7201); /* midway between 1.24 and 2.2 */
    assert_true(r.itl_p50_ms > 0.99 && r.itl_p50_ms < 1.01);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

/* Two requests at the same instant share one step (sim/engine.h: submit everything at an
 * instant before forming the step). */
static void test_same_instant_shares_a_step(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span a = unique_span(1, 50), b = unique_span(2, 30);
    add(&w, 0, &a, 1, 1);
    add(&w, 0, &b, 1, 1);
    sb_replay_policy p;
    resolve("round-robin", &p);
    sb_replay_opts o = hand_opts(1);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.records[0].ttft_ns, 1 * MS + 80 * 10 * US);
    assert_int_equal(r.records[1].ttft_ns, 1 * MS + 80 * 10 * US);
    assert_int_equal(r.engine_steps, 1);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

static void test_network_delay_adds_both_ways(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span a = unique_span(1, 100);
    add(&w, 0, &a, 1, 3);
    sb_replay_policy p;
    resolve("least-request", &p);
    sb_replay_opts o = hand_opts(2);
    o.net_delay_ns = 5 * MS;
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.records[0].ttft_ns, 1 * MS + 100 * 10 * US + 10 * MS);
    assert_int_equal(r.records[0].e2e_ns, r.records[0].ttft_ns + 2 * MS);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

static void test_too_large_is_shed_with_its_conversation(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span big = unique_span(1, 5000), small = unique_span(2, 10);
    sb_replay_request r0 = {.arrival_ns = 0, .max_tokens = 1, .followup = SB_REPLAY_NO_REQUEST};
    sb_replay_request r1 = {.max_tokens = 1, .followup = SB_REPLAY_NO_REQUEST, .is_followup = true};
    assert_int_equal(sb_replay_workload_add(&w, &r0, &big, 1), 0);
    assert_int_equal(sb_replay_workload_add(&w, &r1, &small, 1), 1);
    w.reqs[0].followup = 1;
    add(&w, 10 * MS, &small, 1, 1);
    sb_replay_policy p;
    resolve("default", &p);
    sb_replay_opts o = hand_opts(1);
    o.engine.num_gpu_blocks = 100; /* 1600 tokens */
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.requests, 3);
    assert_int_equal(r.shed, 2);
    assert_int_equal(r.completed, 1);
    assert_int_equal(r.records[0].outcome, SB_REPLAY_SHED);
    assert_int_equal(r.records[1].outcome, SB_REPLAY_SHED);
    assert_int_equal(r.records[2].outcome, SB_REPLAY_COMPLETED);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

static void test_conversation_turns_follow_answers(void **state)
{
    (void)state;
    const sb_replay_generator *g = sb_replay_generator_find("multi-turn");
    assert_non_null(g);
    const char *kv[] = {"turns=3", "system=64", "user=32", "output=8", "think_ms=100"};
    sb_replay_gen_opts go = {.rate = 5, .requests = 30, .seed = 3};
    sb_replay_workload w;
    char err[200];
    assert_int_equal(sb_replay_generate(g, kv, 5, &go, &w, err, sizeof(err)), 0);
    sb_replay_policy p;
    resolve("p2c", &p);
    sb_replay_opts o = hand_opts(2);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.completed, 30);
    for (size_t i = 0; i < w.n; i++) {
        uint32_t next = w.reqs[i].followup;
        if (next == SB_REPLAY_NO_REQUEST)
            continue;
        const sb_replay_record *a = &r.records[i], *b = &r.records[next];
        assert_int_equal(b->arrival_ns, a->arrival_ns + a->e2e_ns + w.reqs[next].think_ns);
    }
    assert_true(r.hit_rate > 0.3); /* each turn re-reads its history */
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

static bool same_result(const sb_replay_result *a, const sb_replay_result *b)
{
    return a->requests == b->requests && a->completed == b->completed && a->shed == b->shed &&
           a->ttft_p50_ms == b->ttft_p50_ms && a->ttft_p90_ms == b->ttft_p90_ms && a->ttft_p99_ms == b->ttft_p99_ms &&
           a->e2e_p50_ms == b->e2e_p50_ms && a->e2e_p99_ms == b->e2e_p99_ms && a->itl_p50_ms == b->itl_p50_ms &&
           a->output_tok_s == b->output_tok_s && a->hit_rate == b->hit_rate && a->imbalance_cv == b->imbalance_cv &&
           a->events == b->events && a->engine_steps == b->engine_steps && a->n_ttft == b->n_ttft &&
           !memcmp(a->ttft_sorted, b->ttft_sorted, a->n_ttft * sizeof(sb_ns)) &&
           !memcmp(a->per_replica, b->per_replica, a->n_replicas * sizeof(uint64_t)) &&
           !memcmp(a->records, b->records, a->n_records * sizeof(sb_replay_record));
}

static void test_deterministic(void **state)
{
    (void)state;
    const sb_replay_generator *g = sb_replay_generator_find("shared-prefix");
    const char *kv[] = {"groups=6", "prefix=512", "users=3", "question=64", "output=16"};
    sb_replay_gen_opts go = {.rate = 200, .requests = 400, .seed = 11};
    char err[200];
    for (const char *const *name = (const char *const[]){"random", "default", "p2c", NULL}; *name; name++) {
        sb_replay_workload w1, w2;
        assert_int_equal(sb_replay_generate(g, kv, 5, &go, &w1, err, sizeof(err)), 0);
        assert_int_equal(sb_replay_generate(g, kv, 5, &go, &w2, err, sizeof(err)), 0);
        assert_int_equal(w1.n, w2.n);
        assert_memory_equal(w1.reqs, w2.reqs, w1.n * sizeof(*w1.reqs));
        sb_replay_policy p;
        resolve(*name, &p);
        sb_replay_opts o = hand_opts(4);
        o.net_delay_ns = 1 * MS;
        sb_replay_result a, b;
        run_ok(&w1, &p, &o, &a);
        run_ok(&w2, &p, &o, &b);
        assert_true(same_result(&a, &b));
        assert_int_equal(a.completed, 400);
        sb_replay_result_free(&a);
        sb_replay_result_free(&b);
        sb_replay_workload_free(&w1);
        sb_replay_workload_free(&w2);
    }
}

static void test_round_robin_is_balanced(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    for (uint32_t i = 0; i < 8; i++) {
        sb_replay_span s = unique_span(i, 40);
        add(&w, i * MS, &s, 1, 4);
    }
    sb_replay_policy p;
    resolve("round-robin", &p);
    sb_replay_opts o = hand_opts(4);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(r.per_replica[i], 2);
    assert_true(r.imbalance_cv == 0.0);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

/* ---- policies ------------------------------------------------------------------------------- */

static void test_registry_names(void **state)
{
    (void)state;
    /* The stable names issue 6 fixes; the registry may hold more. */
    const char *names[] = {"round-robin",
                           "random",
                           "least-request",
                           "p2c",
                           "default",
                           "load-only",
                           "session-hash",
                           "kubeai-chwbl",
                           "sglang-cache-aware",
                           "sglang-cache-aware-rust",
                           "gie-default",
                           "production-stack-prefix",
                           "aibrix-prefix",
                           "dynamo-kv",
                           "min-predicted-ttft"};
    const size_t n_names = sizeof(names) / sizeof(names[0]);
    size_t n = 0;
    for (const sb_replay_policy_def *const *d = sb_replay_policies_all(); *d; d++, n++) {
        assert_non_null((*d)->summary);
        assert_int_equal(!!(*d)->profile + !!(*d)->build + !!(*d)->custom, 1);
    }
    assert_true(n >= 6);
    for (size_t i = 0; i < n_names; i++) {
        sb_replay_policy p;
        resolve(names[i], &p);
        assert_true(p.profile || p.custom);
    }
    sb_replay_policy p;
    assert_int_equal(sb_replay_policy_resolve("no-such-policy", NULL, 0, &p), -ENOENT);
    resolve("p2c", &p);
    assert_string_equal(p.profile->picker->name, "p2c");
    /* The core's other built-in profiles resolve too, and `all` lists each name once. */
    resolve("prefix-only", &p);
    assert_ptr_equal(p.profile, sb_profile_builtin("prefix-only"));
    const char *all[64];
    sb_profile extra;
    sb_profile_init(&extra, "extra");
    size_t n_all = sb_replay_policy_names(&extra, 1, all, 64);
    assert_true(n_all >= 8 && n_all <= 64);
    assert_string_equal(all[0], "round-robin");
    assert_string_equal(all[n_all - 1], "extra");
    for (size_t i = 0; i < n_all; i++)
        for (size_t k = i + 1; k < n_all; k++)
            assert_string_not_equal(all[i], all[k]);
    /* A user profile (from --config) resolves when the registry has no such name. */
    sb_profile mine;
    sb_profile_init(&mine, "mine");
    assert_int_equal(sb_replay_policy_resolve("mine", &mine, 1, &p), 0);
    assert_ptr_equal(p.profile, &mine);
}

/* A custom policy, as a peer's reference policy plugs in: it sees the request's routing
 * descriptor and tokens and the scraped reports, and keeps its own state. */
typedef struct probe_state {
    size_t picks, dispatched, finished, fresh_reports;
    uint32_t last_tokens;
} probe_state;

static probe_state the_state;

static void *probe_create(const sb_replay_policy_env *env)
{
    assert_int_equal(env->n_replicas, 3);
    assert_int_equal(env->router_block_tokens, 16);
    memset(&the_state, 0, sizeof(the_state));
    return &the_state;
}

static int probe_pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    probe_state *s = st;
    s->picks++;
    assert_int_equal(r->n_tokens, r->sched->prompt_tokens);
    assert_int_equal(r->sched->n_blocks, r->n_tokens / 16);
    assert_int_equal(r->n_engine_hashes, r->n_tokens / 16);
    s->last_tokens = r->n_tokens;
    for (uint32_t i = 0; i < f->n_replicas; i++) {
        const sb_endpoint *ep = sb_router_endpoint(f->router, f->pool, i);
        if (ep->report_source == SB_REPORT_SCRAPE && ep->report.have_capacity && f->now - ep->report_ns <= 100 * MS)
            s->fresh_reports++;
    }
    return r->id % 4 == 3 ? -1 : 1; /* every fourth request shed, the rest to replica 1 */
}

static void probe_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t rep)
{
    ((probe_state *)st)->dispatched++;
    assert_int_equal(rep, 1);
}

static void probe_finish(void *st, const sb_replay_fleet_view *f, uint64_t id, uint32_t rep, bool ok)
{
    ((probe_state *)st)->finished++;
    assert_true(ok);
}

static void test_custom_policy_plugs_in(void **state)
{
    (void)state;
    static const sb_replay_custom_ops ops = {
        .create = probe_create, .pick = probe_pick, .on_dispatch = probe_dispatch, .on_finish = probe_finish};
    sb_replay_policy p = {.name = "probe", .custom = &ops};
    sb_replay_workload w = {0};
    for (uint32_t i = 0; i < 40; i++) {
        sb_replay_span s[2] = {shared_span(9, 64), unique_span(i, 37)};
        add(&w, i * 20 * MS, s, 2, 3);
    }
    sb_replay_opts o = hand_opts(3);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(the_state.picks, 40);
    assert_int_equal(the_state.dispatched, 30);
    assert_int_equal(the_state.finished, 30);
    assert_int_equal(the_state.fresh_reports, 40 * 3); /* every replica scraped within 100 ms */
    assert_int_equal(r.shed, 10);
    assert_int_equal(r.per_replica[1], 30);
    assert_int_equal(r.per_replica[0] + r.per_replica[2], 0);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

static int bad_pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    return 7;
}

static void test_bad_options_and_picks_fail_cleanly(void **state)
{
    (void)state;
    sb_replay_workload w = {0};
    sb_replay_span s = unique_span(1, 10);
    add(&w, 0, &s, 1, 1);
    static const sb_replay_custom_ops ops = {.pick = bad_pick};
    sb_replay_policy p = {.name = "bad", .custom = &ops};
    sb_replay_opts o = hand_opts(2);
    sb_replay_result r;
    char err[200];
    assert_int_equal(sb_replay_run(&w, &p, &o, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "out of range"));
    resolve("default", &p);
    o.replicas = 0;
    assert_int_equal(sb_replay_run(&w, &p, &o, &r, err, sizeof(err)), -EINVAL);
    o = hand_opts(1);
    o.engine.max_loras = 0;
    w.n_adapters = 1;
    w.reqs[0].adapter = 1;
    assert_int_equal(sb_replay_run(&w, &p, &o, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "max_loras"));
    sb_replay_workload_free(&w);
}

static void test_lora_mix_runs_with_adapters(void **state)
{
    (void)state;
    const sb_replay_generator *g = sb_replay_generator_find("lora-mix");
    const char *kv[] = {"adapters=6", "system=32", "question=40", "output=4"};
    sb_replay_gen_opts go = {.rate = 50, .requests = 300, .seed = 5};
    sb_replay_workload w;
    char err[200];
    assert_int_equal(sb_replay_generate(g, kv, 4, &go, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n_adapters, 6);
    size_t per[7] = {0};
    for (size_t i = 0; i < w.n; i++) {
        assert_true(w.reqs[i].adapter >= 1 && w.reqs[i].adapter <= 6);
        per[w.reqs[i].adapter]++;
    }
    assert_true(per[1] > per[6]); /* Zipf: the first adapter is the most popular */
    sb_replay_policy p;
    resolve("default", &p);
    sb_replay_opts o = hand_opts(2);
    sb_replay_result r;
    run_ok(&w, &p, &o, &r);
    assert_int_equal(r.completed, 300);
    sb_replay_result_free(&r);
    sb_replay_workload_free(&w);
}

/* ---- traces --------------------------------------------------------------------------------- */

static char *read_trace(const char *rel, size_t *len)
{
    /* The traces are in the repository (tests/data/traces, with their licences). */
    const char *dirs[] = {getenv("SB_TRACES_DIR"), "tests/data/traces"};
    for (size_t i = 0; i < 2; i++) {
        if (!dirs[i])
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dirs[i], rel);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        char *buf = malloc(1 << 16);
        *len = fread(buf, 1, (1 << 16) - 1, f);
        fclose(f);
        /* Keep whole lines only: the test reads the head of the file. */
        while (*len && buf[*len - 1] != '\n')
            (*len)--;
        return buf;
    }
    return NULL;
}

static void test_mooncake_real_head(void **state)
{
    (void)state;
    size_t len;
    char *text = read_trace("mooncake/conversation_trace.jsonl", &len);
    assert_non_null(text); /* run from the repository root, as make test does */
    sb_replay_workload w;
    sb_replay_trace_error err;
    assert_int_equal(sb_replay_trace_parse(text, len, 10, &w, &err), 0);
    assert_int_equal(w.n, 10);
    /* {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ..., 13]} */
    const sb_replay_request *r = &w.reqs[0];
    assert_int_equal(r->arrival_ns, 0);
    assert_int_equal(r->n_prompt, 6758);
    assert_int_equal(r->max_tokens, 500);
    assert_int_equal(r->n_spans, 14);
    assert_int_equal(w.spans[r->first_span + 13].len, 6758 - 13 * 512);
    assert_int_equal(w.spans[r->first_span].id, sb_replay_span_id(SB_REPLAY_NS_TRACE_BLOCK, 0));
    /* The second request shares block 0, and only it. */
    const sb_replay_request *q = &w.reqs[1];
    assert_int_equal(q->n_prompt, 7322);
    assert_int_equal(w.spans[q->first_span].id, w.spans[r->first_span].id);
    assert_int_not_equal(w.spans[q->first_span + 1].id, w.spans[r->first_span + 1].id);
    /* So their token ids agree on exactly the first 512 tokens. */
    uint32_t *ta = sb_malloc(r->n_prompt * sizeof(uint32_t)), *tb = sb_malloc(q->n_prompt * sizeof(uint32_t));
    sb_replay_prompt_tokens(&w, r, ta);
    sb_replay_prompt_tokens(&w, q, tb);
    assert_memory_equal(ta, tb, 512 * sizeof(uint32_t));
    assert_memory_not_equal(ta + 512, tb + 512, 16 * sizeof(uint32_t));
    sb_free(ta);
    sb_free(tb);
    sb_replay_workload_free(&w);
    free(text);
}

static void test_azure_real_head(void **state)
{
    (void)state;
    size_t len;
    char *text = read_trace("azure/AzureLLMInferenceTrace_code.csv", &len);
    assert_non_null(text);
    sb_replay_workload w;
    sb_replay_trace_error err;
    assert_int_equal(sb_replay_trace_parse(text, len, 5, &w, &err), 0);
    assert_int_equal(w.n, 5);
    /* 2023-11-16 18:17:03.9799600,4808,10 then 18:17:04.0319600,3180,8 */
    assert_int_equal(w.reqs[0].arrival_ns, 0);
    assert_int_equal(w.reqs[0].n_prompt, 4808);
    assert_int_equal(w.reqs[0].max_tokens, 10);
    assert_int_equal(w.reqs[1].arrival_ns, 52 * MS);
    assert_int_equal(w.reqs[1].n_prompt, 3180);
    assert_int_not_equal(w.spans[w.reqs[0].first_span].id, w.spans[w.reqs[1].first_span].id);
    sb_replay_workload_free(&w);
    free(text);
}

static void expect_error(int (*parse)(const char *, size_t, size_t, sb_replay_workload *, sb_replay_trace_error *),
                         const char *text, size_t line, const char *needle)
{
    sb_replay_workload w;
    sb_replay_trace_error err;
    assert_int_equal(parse(text, strlen(text), 0, &w, &err), -EINVAL);
    if (err.line != line || !strstr(err.message, needle)) {
        print_error("expected line %zu with '%s', got line %zu: %s\n", line, needle, err.line, err.message);
        fail();
    }
    assert_int_equal(w.n, 0);
}

static void test_malformed_lines_name_their_line(void **state)
{
    (void)state;
    const char *ok = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s\n%s{\"timestamp\": 5, \"input_length\": 10, \"hash_ids\": [2]}\n", ok, ok);
    expect_error(sb_replay_trace_mooncake, buf, 4, "output_length");
    snprintf(buf, sizeof(buf),
             "%s%s{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [2,]}\n", ok, ok);
    expect_error(sb_replay_trace_mooncake, buf, 3, "hash_ids");
    snprintf(buf, sizeof(buf),
             "%s{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, 2]}\n", ok);
    expect_error(sb_replay_trace_mooncake, buf, 2, "more than");
    snprintf(buf, sizeof(buf), "%s{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\n",
             ok);
    expect_error(sb_replay_trace_mooncake, buf, 2, "timestamp");
    expect_error(sb_replay_trace_mooncake, "{\"timestamp\": 1, \"input_length\": 10", 1, "");
    expect_error(sb_replay_trace_mooncake, "", 0, "no requests");

    const char *head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    snprintf(buf, sizeof(buf), "%s2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:04.00,11,3\n2023-11-16 18:17,5,5\n",
             head);
    expect_error(sb_replay_trace_azure, buf, 4, "TIMESTAMP");
    snprintf(buf, sizeof(buf), "%s2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:04.00,x,3\n", head);
    expect_error(sb_replay_trace_azure, buf, 3, "ContextTokens");
    snprintf(buf, sizeof(buf), "%s2023-11-16 18:17:03.97,10,2,7\n", head);
    expect_error(sb_replay_trace_azure, buf, 2, "3 columns");
    expect_error(sb_replay_trace_azure, "time,in,out\n", 1, "header");

    /* Unknown keys are skipped; unsorted timestamps are sorted; output 0 becomes 1. */
    const char *odd = "{\"timestamp\": 9, \"extra\": {\"a\": [1, \"x\"]}, \"input_length\": 20, \"output_length\": 0, "
                      "\"hash_ids\": [4]}\n{\"timestamp\": 3, \"input_length\": 30, \"output_length\": 2, "
                      "\"hash_ids\": [5]}\n";
    sb_replay_workload w;
    sb_replay_trace_error err;
    assert_int_equal(sb_replay_trace_mooncake(odd, strlen(odd), 0, &w, &err), 0);
    assert_int_equal(w.n, 2);
    assert_int_equal(w.reqs[0].n_prompt, 30);
    assert_int_equal(w.reqs[1].arrival_ns, 6 * MS);
    assert_int_equal(w.reqs[1].max_tokens, 1);
    sb_replay_workload_free(&w);
}

/* A later window of a trace: the first k requests go, times restart at the first kept one and
 * the rate is the window's; a workload with conversations, or a skip of everything, is refused
 * and left as it was. */
static void test_trace_skip_keeps_a_later_window(void **state)
{
    (void)state;
    const char *t = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
                    "{\"timestamp\": 100, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [2]}\n"
                    "{\"timestamp\": 150, \"input_length\": 30, \"output_length\": 1, \"hash_ids\": [3]}\n"
                    "{\"timestamp\": 250, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [4]}\n";
    sb_replay_workload w;
    sb_replay_trace_error err;
    assert_int_equal(sb_replay_trace_mooncake(t, strlen(t), 0, &w, &err), 0);
    uint32_t before[40], after[40];
    sb_replay_prompt_tokens(&w, &w.reqs[3], before);
    assert_int_equal(sb_replay_workload_skip(&w, 4), -EINVAL);
    assert_int_equal(w.n, 4);
    assert_int_equal(sb_replay_workload_skip(&w, 1), 0);
    assert_int_equal(w.n, 3);
    assert_int_equal(w.reqs[0].n_prompt, 20);
    assert_int_equal(w.reqs[0].arrival_ns, 0);
    assert_int_equal(w.reqs[1].arrival_ns, 50 * MS);
    assert_int_equal(w.reqs[2].arrival_ns, 150 * MS);
    assert_true(fabs(w.rate - 2.0 / 0.150) < 1e-9);
    sb_replay_prompt_tokens(&w, &w.reqs[2], after); /* the same prompt, its spans kept */
    assert_memory_equal(before, after, sizeof before);
    sb_replay_workload_free(&w);

    char e[200];
    sb_replay_gen_opts go = {.rate = 10, .requests = 20, .seed = 3};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("multi-turn"), NULL, 0, &go, &w, e, sizeof(e)), 0);
    size_t n = w.n;
    sb_ns last = w.reqs[n - 1].arrival_ns;
    assert_int_equal(sb_replay_workload_skip(&w, 1), -EINVAL);
    assert_int_equal(w.n, n);
    assert_int_equal(w.reqs[n - 1].arrival_ns, last);
    sb_replay_workload_free(&w);
}

/* ---- generators ----------------------------------------------------------------------------- */

static void test_generators_counts_and_sharing(void **state)
{
    (void)state;
    char err[200];
    sb_replay_workload w;
    sb_replay_gen_opts go = {.rate = 100, .requests = 120, .seed = 9};

    const char *sp[] = {"groups=3", "prefix=100", "users=2", "question=30", "output=5"};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("shared-prefix"), sp, 5, &go, &w, err, sizeof(err)),
                     0);
    assert_int_equal(w.n, 120);
    uint64_t prefixes[3];
    size_t n_prefixes = 0;
    for (size_t i = 0; i < w.n; i++) {
        const sb_replay_request *r = &w.reqs[i];
        assert_int_equal(r->n_prompt, 130);
        assert_true(i == 0 || r->arrival_ns >= w.reqs[i - 1].arrival_ns);
        uint64_t id = w.spans[r->first_span].id;
        size_t k = 0;
        while (k < n_prefixes && prefixes[k] != id)
            k++;
        if (k == n_prefixes) {
            assert_true(n_prefixes < 3);
            prefixes[n_prefixes++] = id;
        }
    }
    assert_int_equal(n_prefixes, 3);
    /* Arrivals are Poisson at the rate: 120 requests take about 1.2 s. */
    assert_true(w.reqs[119].arrival_ns > 700 * MS && w.reqs[119].arrival_ns < 1800 * MS);
    sb_replay_workload_free(&w);

    const char *mt[] = {"turns=4", "system=10", "user=5", "output=3"};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("multi-turn"), mt, 4, &go, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 120);
    assert_int_equal(sb_replay_workload_roots(&w), 30);
    for (size_t i = 0; i < w.n; i++) {
        uint32_t next = w.reqs[i].followup;
        if (next == SB_REPLAY_NO_REQUEST)
            continue;
        /* The next turn's prompt extends this one's with the answer and a new message. */
        const sb_replay_request *a = &w.reqs[i], *b = &w.reqs[next];
        assert_true(b->is_followup);
        assert_int_equal(b->n_prompt, a->n_prompt + 3 + 5);
        assert_memory_equal(&w.spans[a->first_span], &w.spans[b->first_span], a->n_spans * sizeof(sb_replay_span));
    }
    sb_replay_workload_free(&w);

    const char *hp[] = {"prefix=200", "question=10", "burst=50", "burst_ms=20"};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("hot-prefix"), hp, 4, &go, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 120);
    for (size_t i = 0; i < 50; i++)
        assert_true(w.reqs[i].arrival_ns < 20 * MS);
    for (size_t i = 0; i < w.n; i++)
        assert_int_equal(w.spans[w.reqs[i].first_span].id, w.spans[w.reqs[0].first_span].id);
    sb_replay_workload_free(&w);

    const char *ns[] = {"prompt=100", "spread=0"};
    go.requests = 0;
    go.duration_ns = 2 * SB_NS_PER_S; /* about 200 requests at 100/s */
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("no-sharing"), ns, 2, &go, &w, err, sizeof(err)), 0);
    assert_true(w.n > 150 && w.n < 250);
    assert_true(w.reqs[w.n - 1].arrival_ns < 2 * SB_NS_PER_S);
    for (size_t i = 1; i < w.n; i++)
        assert_int_not_equal(w.spans[w.reqs[i].first_span].id, w.spans[w.reqs[i - 1].first_span].id);
    sb_replay_workload_free(&w);

    const char *bad[] = {"groups=0"};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("shared-prefix"), bad, 1, &go, &w, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "groups"));
    const char *unknown[] = {"colour=blue"};
    assert_int_equal(sb_replay_generate(sb_replay_generator_find("no-sharing"), unknown, 1, &go, &w, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "unknown parameter"));
}

/* ---- report --------------------------------------------------------------------------------- */

static void test_csv_columns_first(void **state)
{
    (void)state;
    sb_replay_result r = {.policy = "a,b", .rate = 2, .requests = 3};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sb_replay_write_csv(f, &r, 1);
    fclose(f);
    assert_true(!strncmp(buf, SB_REPLAY_CSV_COLUMNS ",", strlen(SB_REPLAY_CSV_COLUMNS ",")));
    assert_non_null(strstr(buf, "\n\"a,b\",2.0000,3,"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_orders_by_time_then_insertion),
        cmocka_unit_test(test_shared_prefix_hits_and_known_latencies),
        cmocka_unit_test(test_same_instant_shares_a_step),
        cmocka_unit_test(test_network_delay_adds_both_ways),
        cmocka_unit_test(test_too_large_is_shed_with_its_conversation),
        cmocka_unit_test(test_conversation_turns_follow_answers),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_round_robin_is_balanced),
        cmocka_unit_test(test_registry_names),
        cmocka_unit_test(test_custom_policy_plugs_in),
        cmocka_unit_test(test_bad_options_and_picks_fail_cleanly),
        cmocka_unit_test(test_lora_mix_runs_with_adapters),
        cmocka_unit_test(test_mooncake_real_head),
        cmocka_unit_test(test_azure_real_head),
        cmocka_unit_test(test_malformed_lines_name_their_line),
        cmocka_unit_test(test_trace_skip_keeps_a_later_window),
        cmocka_unit_test(test_generators_counts_and_sharing),
        cmocka_unit_test(test_csv_columns_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
