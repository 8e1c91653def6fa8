/* Tests src/replay/policies/: each reference policy's decision rule on hand-built states (a
 * router with one pool whose endpoints carry hand-set accounting, prompts of known token ids,
 * and for the engine-aware references fresh engines and a hand-fed shadow), and the two helpers
 * they share (block_lru, kv_shadow). No driver, no clock: every view is built by hand. */
#include "sb_test.h"

#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "core/router.h"
#include "replay/policies/block_lru.h"
#include "replay/policies/kv_shadow.h"
#include "replay/policy.h"
#include "sim/engine.h"

#define MAX_TOKENS 8192
#define BT 16 /* router and engine block, tokens */
#define T0 SB_NS_PER_S

/* ---- fixture: a fleet of n replicas and one policy's state ---------------------------------- */

typedef struct fleet {
    uint32_t n;
    sb_router *router;
    sb_engine *engines[8];
    sb_engine_params params;
    uint64_t rng;
    const sb_replay_custom_ops *ops;
    void *st;
} fleet;

static void fleet_init_lag(fleet *f, const char *policy, uint32_t n, sb_ns lag);
static void fleet_init(fleet *f, const char *policy, uint32_t n)
{
    fleet_init_lag(f, policy, n, 0);
}

static void fleet_init_lag(fleet *f, const char *policy, uint32_t n, sb_ns lag)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    f->params = sb_engine_params_default();
    f->rng = 0x9E3779B97F4A7C15ULL;
    f->router = sb_router_new(1, 0x5ec7e7);
    assert_non_null(f->router);
    assert_int_equal(sb_router_add_pool(f->router, "t", sb_profile_builtin("default"), n, NULL), 0);
    for (uint32_t i = 0; i < n; i++)
        assert_non_null(f->engines[i] = sb_engine_new(&f->params));
    const sb_replay_policy_def *d = sb_replay_policy_find(policy);
    assert_non_null(d);
    assert_non_null(d->custom);
    f->ops = d->custom;
    sb_replay_policy_env env = {
        .n_replicas = n, .engine = &f->params, .router_block_tokens = BT, .seed = 1, .event_lag_ns = lag};
    f->st = f->ops->create ? f->ops->create(&env) : NULL;
    assert_true(!f->ops->create || f->st);
}

static void fleet_free(fleet *f)
{
    if (f->ops->destroy)
        f->ops->destroy(f->st);
    for (uint32_t i = 0; i < f->n; i++)
        sb_engine_free(f->engines[i]);
    sb_router_free(f->router);
}

static sb_endpoint *ep(fleet *f, uint32_t i)
{
    return sb_router_endpoint(f->router, 0, i);
}

static void set_loads(fleet *f, const uint32_t *in_flight)
{
    for (uint32_t i = 0; i < f->n; i++)
        ep(f, i)->in_flight = in_flight[i];
}

static sb_replay_fleet_view view(fleet *f, sb_ns now)
{
    return (sb_replay_fleet_view){
        .now = now, .n_replicas = f->n, .router = f->router, .pool = 0, .engines = f->engines, .rng = &f->rng};
}

/* ---- requests: prompts made of spans of content --------------------------------------------- */

typedef struct req {
    uint32_t tokens[MAX_TOKENS];
    uint64_t rhash[MAX_TOKENS / BT], ehash[MAX_TOKENS / BT];
    sb_sched_request sched;
    sb_replay_request_view v;
} req;

/* Token k of content c: shared content gives shared token ids, hence shared blocks. */
static uint32_t token(uint64_t c, uint32_t k)
{
    return (uint32_t)(XXH3_64bits_withSeed(&k, sizeof(k), c) & 0x7fffffff);
}

/* A prompt of `len` tokens: its first `shared` tokens from content a, the rest from content b. */
static req *make(uint64_t id, uint64_t a, uint32_t shared, uint64_t b, uint32_t len, uint32_t max_tokens)
{
    req *q = calloc(1, sizeof(*q));
    assert_non_null(q);
    assert_true(len <= MAX_TOKENS);
    for (uint32_t k = 0; k < len; k++)
        q->tokens[k] = k < shared ? token(a, k) : token(b, k);
    size_t nb = len / BT;
    uint64_t h = 0;
    for (size_t i = 0; i < nb; i++)
        q->rhash[i] = h = XXH3_64bits_withSeed(q->tokens + i * BT, BT * sizeof(uint32_t), h);
    size_t ne = sb_engine_hash_blocks(q->tokens, len, BT, 0, q->ehash);
    q->sched = (sb_sched_request){.pool = 0,
                                  .adapter = -1,
                                  .block_hashes = q->rhash,
                                  .n_blocks = nb,
                                  .prompt_bytes = (size_t)len * 4,
                                  .prompt_tokens = len};
    q->v = (sb_replay_request_view){.id = id,
                                    .sched = &q->sched,
                                    .tokens = q->tokens,
                                    .n_tokens = len,
                                    .engine_hashes = q->ehash,
                                    .n_engine_hashes = ne,
                                    .max_tokens = max_tokens};
    return q;
}

static int pick(fleet *f, const req *q, sb_ns now)
{
    sb_replay_fleet_view v = view(f, now);
    int r = f->ops->pick(f->st, &v, &q->v);
    assert_true(r >= 0 && r < (int)f->n);
    return r;
}

static void dispatch(fleet *f, const req *q, uint32_t replica, sb_ns now)
{
    sb_replay_fleet_view v = view(f, now);
    if (f->ops->on_dispatch)
        f->ops->on_dispatch(f->st, &v, &q->v, replica);
}

static void finish(fleet *f, const req *q, uint32_t replica, sb_ns now)
{
    sb_replay_fleet_view v = view(f, now);
    if (f->ops->on_finish)
        f->ops->on_finish(f->st, &v, q->v.id, replica, true);
}

/* Bitmask of the replicas picked over `times` picks of the same state. */
static uint32_t picks_seen(fleet *f, const req *q, sb_ns now, int times)
{
    uint32_t seen = 0;
    for (int i = 0; i < times; i++)
        seen |= 1u << pick(f, q, now);
    return seen;
}

/* ---- registry ------------------------------------------------------------------------------- */

static void test_registry_lists_the_references(void **state)
{
    (void)state;
    const char *names[] = {"session-hash",       "kubeai-chwbl",
                           "sglang-cache-aware", "sglang-cache-aware-rust",
                           "gie-default",        "production-stack-prefix",
                           "aibrix-prefix",      "dynamo-kv",
                           "min-predicted-ttft", "llm-d-sticky",
                           "llm-d-precise"};
    assert_null(sb_replay_policy_find("oracle")); /* renamed: it was never a bound */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const sb_replay_policy_def *d = sb_replay_policy_find(names[i]);
        assert_non_null(d);
        assert_non_null(d->summary);
        assert_int_equal(!!d->profile + !!d->build + !!d->custom, 1);
        sb_replay_policy p;
        assert_int_equal(sb_replay_policy_resolve(names[i], NULL, 0, &p), 0);
    }
    /* session-hash is the core's profile; gie-default is assembled with GIE's weights. */
    sb_replay_policy p;
    assert_int_equal(sb_replay_policy_resolve("session-hash", NULL, 0, &p), 0);
    assert_ptr_equal(p.profile, sb_profile_builtin("session-hash"));
    assert_int_equal(sb_replay_policy_resolve("gie-default", NULL, 0, &p), 0);
    assert_int_equal(p.profile->n_scorers, 3);
    assert_string_equal(p.profile->scorers[0].def->name, "prefix");
    assert_true(p.profile->scorers[0].weight == 3.0);
    assert_string_equal(p.profile->scorers[1].def->name, "queue");
    assert_true(p.profile->scorers[1].weight == 2.0);
    assert_string_equal(p.profile->scorers[2].def->name, "kv-cache");
    assert_true(p.profile->scorers[2].weight == 2.0);
    assert_string_equal(p.profile->picker->name, "max-score");
}

/* ---- session-hash (core profile through sb_router_pick) --------------------------------------- */

static void test_session_hash_keeps_a_session_on_one_replica(void **state)
{
    (void)state;
    sb_router *r = sb_router_new(1, 0x5ec7e7);
    assert_int_equal(sb_router_add_pool(r, "t", sb_profile_builtin("session-hash"), 8, NULL), 0);
    assert_int_equal(sb_router_build_ring(r, 0), 0);
    uint32_t seen = 0;
    for (uint64_t key = 1; key <= 32; key++) {
        sb_sched_request q = {.pool = 0, .adapter = -1, .session_key = key * 0x9E3779B97F4A7C15ULL};
        int first = sb_router_pick(r, &q, T0);
        assert_true(first >= 0);
        for (int k = 0; k < 3; k++)
            assert_int_equal(sb_router_pick(r, &q, T0), first);
        seen |= 1u << first;
    }
    assert_true(__builtin_popcount(seen) > 1); /* keys spread over the ring */
    sb_router_free(r);
}

/* ---- kubeai-chwbl ----------------------------------------------------------------------------- */

static void test_kubeai_same_key_same_replica_until_the_bound(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "kubeai-chwbl", 4);
    req *a = make(0, 1, 25, 2, 400, 10);
    req *b = make(1, 1, 25, 3, 900, 10); /* same first 25 tokens: same key */
    int owner = pick(&f, a, T0);
    assert_int_equal(pick(&f, a, T0), owner);
    assert_int_equal(pick(&f, b, T0), owner);
    /* Low load: (total + 1) x 1.25 / 4 < 1, nobody passes KubeAI's bound, the owner takes it. */
    uint32_t low[4] = {0};
    low[owner] = 1;
    set_loads(&f, low);
    assert_int_equal(pick(&f, a, T0), owner);
    /* The owner over the bound: 11 > (16 + 1) / 4 x 1.25; the next on the ring (load 3) passes. */
    uint32_t high[4] = {2, 2, 2, 2};
    high[owner] = 10;
    set_loads(&f, high);
    int next = pick(&f, a, T0);
    assert_int_not_equal(next, owner);
    assert_int_equal(pick(&f, b, T0), next); /* the same walk for the same key */
    high[next] = 10;                         /* 24 in all: bound 7.8, both over it */
    set_loads(&f, high);
    int third = pick(&f, a, T0);
    assert_int_not_equal(third, owner);
    assert_int_not_equal(third, next);
    free(a);
    free(b);
    fleet_free(&f);
}

/* ---- sglang-cache-aware (CLI defaults) and -rust (library defaults) --------------------------- */

/* Gives replica i a tree of blocks[i] blocks of unrelated content. */
static void grow_trees(fleet *f, const uint32_t *blocks)
{
    for (uint32_t i = 0; i < f->n; i++)
        if (blocks[i]) {
            req *q = make(100 + i, 1000 + i, 0, 1000 + i, blocks[i] * BT, 10);
            dispatch(f, q, i, T0);
            free(q);
        }
}

static void test_sglang_best_match_above_threshold(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "sglang-cache-aware", 4);
    req *a = make(0, 1, 2000, 1, 2000, 10);
    int ra = pick(&f, a, T0); /* empty trees: a smallest one */
    dispatch(&f, a, (uint32_t)ra, T0);
    req *b = make(1, 1, 1600, 2, 2000, 10); /* 1600 of 2000 tokens match: 0.8 > 0.3 */
    assert_int_equal(picks_seen(&f, b, T0, 10), 1u << ra);
    free(a);
    free(b);
    fleet_free(&f);
}

static void test_sglang_smallest_tree_below_threshold(void **state)
{
    (void)state;
    const char *names[2] = {"sglang-cache-aware", "sglang-cache-aware-rust"};
    for (int k = 0; k < 2; k++) {
        fleet f;
        fleet_init(&f, names[k], 4);
        uint32_t sizes[4] = {100, 50, 10, 30};
        grow_trees(&f, sizes);
        req *fresh = make(0, 7, 0, 7, 800, 10);
        assert_int_equal(pick(&f, fresh, T0), 2); /* nothing matches: the smallest tree */
        /* 40% of replica 0's prompt: above the CLI's 0.3, below the library's 0.5. */
        req *part = make(1, 1000, 640, 8, 1600, 10);
        assert_int_equal(pick(&f, part, T0), k == 0 ? 0 : 2);
        free(fresh);
        free(part);
        fleet_free(&f);
    }
}

static void test_sglang_shortest_queue_when_imbalanced(void **state)
{
    (void)state;
    const char *names[2] = {"sglang-cache-aware", "sglang-cache-aware-rust"};
    for (int k = 0; k < 2; k++) {
        fleet f;
        fleet_init(&f, names[k], 4);
        req *a = make(0, 1, 2000, 1, 2000, 10);
        dispatch(&f, a, 0, T0);
        req *b = make(1, 1, 1600, 2, 2000, 10);
        /* 50 - 10 = 40: over the library's 32 (and 50 > 10 x 1.1), not over the CLI's 64. */
        uint32_t loads[4] = {50, 12, 10, 11};
        set_loads(&f, loads);
        assert_int_equal(pick(&f, b, T0), k == 0 ? 0 : 2);
        /* 100 - 10 > 64 and 100 > 10 x 1.5: both go to the shortest queue. */
        loads[0] = 100;
        set_loads(&f, loads);
        assert_int_equal(pick(&f, b, T0), 2);
        /* A gap of 40 at 100 requests: the CLI (64, 1.5) stays with the cache; the library
         * (32, 1.1) balances, to the first of the least loaded. */
        uint32_t busy[4] = {140, 100, 100, 100};
        set_loads(&f, busy);
        assert_int_equal(pick(&f, b, T0), k == 0 ? 0 : 1);
        free(a);
        free(b);
        fleet_free(&f);
    }
}

static void test_sglang_rust_evicts_trees_at_the_interval(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "sglang-cache-aware-rust", 4);
    uint32_t sizes[4] = {0, 100, 100, 100};
    grow_trees(&f, sizes);
    req *a = make(0, 1, 6400, 1, 6400, 10); /* 400 blocks */
    dispatch(&f, a, 0, T0);
    assert_int_equal(pick(&f, a, T0), 0); /* full match; the eviction clock starts here */
    assert_int_equal(pick(&f, a, T0 + 29 * SB_NS_PER_S), 0);
    /* 30 s on: replica 0's tree is cut to 10,000 characters (156 blocks, its head kept), so
     * the match rate is 156/400 < 0.5, and its tree is no longer the smallest. */
    int after = pick(&f, a, T0 + 31 * SB_NS_PER_S);
    assert_int_not_equal(after, 0);
    free(a);
    fleet_free(&f);
}

/* ---- production-stack-prefix ------------------------------------------------------------------ */

static void test_production_stack_longest_chunk_match_else_random(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "production-stack-prefix", 4);
    req *a = make(0, 1, 256, 1, 256, 10);
    dispatch(&f, a, 2, T0);
    req *b = make(1, 1, 64, 2, 256, 10); /* two whole 32-token chunks match: only replica 2 */
    assert_int_equal(picks_seen(&f, b, T0, 20), 1u << 2);
    req *c = make(2, 1, 20, 3, 256, 10); /* shares less than one chunk: random among all */
    assert_true(__builtin_popcount(picks_seen(&f, c, T0, 40)) > 1);
    /* Two holders of the longest match: random between them, nobody else. */
    dispatch(&f, a, 3, T0);
    assert_int_equal(picks_seen(&f, b, T0, 40), (1u << 2) | (1u << 3));
    free(a);
    free(b);
    free(c);
    fleet_free(&f);
}

/* ---- aibrix-prefix ---------------------------------------------------------------------------- */

static void test_aibrix_imbalance_bound(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "aibrix-prefix", 4);
    req *a = make(0, 1, 1600, 1, 1600, 10);
    dispatch(&f, a, 0, T0);
    dispatch(&f, a, 1, T0);
    req *b = make(1, 1, 1280, 2, 1600, 10);
    assert_int_equal(picks_seen(&f, b, T0, 20) & ~3u, 0); /* balanced: a holder */
    /* max - min = 8: not imbalanced; both holders at mean + sigma (4 + 4) qualify. */
    uint32_t eight[4] = {8, 8, 0, 0};
    set_loads(&f, eight);
    assert_int_equal(picks_seen(&f, b, T0, 20) & ~3u, 0);
    /* max - min = 9 > 8: least request (2 or 3), prefix ignored. */
    uint32_t nine[4] = {9, 9, 0, 0};
    set_loads(&f, nine);
    assert_int_equal(picks_seen(&f, b, T0, 20) & 3u, 0);
    free(a);
    free(b);
    fleet_free(&f);
}

static void test_aibrix_mean_plus_one_sigma(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "aibrix-prefix", 4);
    req *a = make(0, 1, 1600, 1, 1600, 10);
    dispatch(&f, a, 0, T0);
    req *b = make(1, 1, 1280, 2, 1600, 10);
    /* Loads 2, 2, 0, 0: mean 1, sigma 1; the holder's 2 <= 2: it takes the request. */
    uint32_t ok[4] = {2, 2, 0, 0};
    set_loads(&f, ok);
    assert_int_equal(pick(&f, b, T0), 0);
    /* Loads 3, 2, 0, 0: mean 1.25, sigma 1.30; 3 > 2.55: least request instead. */
    uint32_t over[4] = {3, 2, 0, 0};
    set_loads(&f, over);
    uint32_t seen = picks_seen(&f, b, T0, 20);
    assert_int_equal(seen & 3u, 0);
    free(a);
    free(b);
    fleet_free(&f);
}

static void test_aibrix_table_forgets_beyond_its_capacity(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "aibrix-prefix", 4);
    req *a = make(0, 1, 1600, 1, 1600, 10);
    dispatch(&f, a, 0, T0);
    assert_int_equal(picks_seen(&f, a, T0, 10), 1u << 0);
    /* 12,500 router blocks (200,000 four-byte blocks) of other prompts push it out. */
    for (uint32_t k = 0; k < 126; k++) {
        req *o = make(10 + k, 500 + k, 0, 500 + k, 1600, 10);
        dispatch(&f, o, 1 + k % 3, T0);
        free(o);
    }
    assert_true(__builtin_popcount(picks_seen(&f, a, T0, 40)) > 1); /* least request, random */
    free(a);
    fleet_free(&f);
}

/* ---- dynamo-kv -------------------------------------------------------------------------------- */

static void test_dynamo_min_cost(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "dynamo-kv", 4);
    req *a = make(0, 1, 1000, 1, 1000, 10);
    dispatch(&f, a, 0, T0);
    finish(&f, a, 0, T0);
    /* B shares 992 tokens (62 blocks) with A, cached on 0 and idle: cost there
     * 1.0 x 8/16 + (62 + 1 new blocks) = 63.5 against 62.5 + 63 elsewhere. */
    req *b = make(1, 1, 992, 2, 1000, 10);
    assert_int_equal(picks_seen(&f, b, T0, 10), 1u << 0);
    /* Replica 1 runs a 320-token request (20 active blocks, past prefill): 62.5 + 20 + 63.
     * Replica 0 gets two 1000-token requests still in prefill: (2000 + 8)/16 + 124 + 63. */
    req *z = make(2, 9, 320, 9, 320, 10);
    dispatch(&f, z, 1, T0);
    req *x = make(3, 3, 1000, 3, 1000, 10), *y = make(4, 4, 1000, 4, 1000, 10);
    dispatch(&f, x, 0, T0);
    dispatch(&f, y, 0, T0);
    ep(&f, 0)->pending_prefill_tokens = 2000;
    assert_int_equal(picks_seen(&f, b, T0, 20), (1u << 2) | (1u << 3));
    free(a);
    free(b);
    free(x);
    free(y);
    free(z);
    fleet_free(&f);
}

/* ---- min-predicted-ttft ----------------------------------------------------------------------------------- */

static void test_min_predicted_ttft_cached_unless_the_queue_costs_more(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "min-predicted-ttft", 4);
    req *a = make(0, 1, 1000, 1, 1000, 10);
    dispatch(&f, a, 0, T0);
    finish(&f, a, 0, T0);
    req *b = make(1, 1, 992, 2, 1000, 10); /* 8 tokens to compute on 0, 1000 elsewhere */
    assert_int_equal(picks_seen(&f, b, T0, 10), 1u << 0);
    /* 2000 uncached tokens queued on 0: 2008 to prefill there against 1000 elsewhere. */
    req *x = make(3, 3, 1000, 3, 1000, 10), *y = make(4, 4, 1000, 4, 1000, 10);
    dispatch(&f, x, 0, T0);
    dispatch(&f, y, 0, T0);
    ep(&f, 0)->pending_prefill_tokens = 2000;
    assert_int_equal(picks_seen(&f, b, T0, 20) & 1u, 0);
    /* Their first tokens came (nothing queued) and one 500-token request waits: 508 < 1000. */
    finish(&f, x, 0, T0);
    finish(&f, y, 0, T0);
    req *w = make(5, 5, 500, 5, 500, 10);
    dispatch(&f, w, 0, T0);
    ep(&f, 0)->pending_prefill_tokens = 500;
    assert_int_equal(pick(&f, b, T0), 0);
    free(a);
    free(b);
    free(w);
    free(x);
    free(y);
    fleet_free(&f);
}

/* ---- llm-d-sticky ----------------------------------------------------------------------------- */

static void first_token(fleet *f, const req *q, uint32_t replica, sb_ns now)
{
    sb_replay_fleet_view v = view(f, now);
    if (f->ops->on_first_token)
        f->ops->on_first_token(f->st, &v, q->v.id, replica);
}

/* Sticky at an affinity of 0.8 (20 of 25 blocks of 64 tokens), not at 0.76 (19 of 25); the
 * stickiness holds while the warm endpoint's in-flight prefill lead stays within 18 s at the
 * calibrated peak rate (8192 / 147.06 ms = 55,705 tokens/s: 1,002,690 tokens) and breaks past
 * it; first tokens release the load. */
static void test_llm_d_sticky_until_saturated(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "llm-d-sticky", 4);
    req *a = make(0, 1, 1600, 1, 1600, 10);
    dispatch(&f, a, 2, T0);
    first_token(&f, a, 2, T0);
    req *sticky = make(1, 1, 1280, 2, 1600, 10); /* 20 of 25 blocks on 2 */
    req *loose = make(2, 1, 1216, 3, 1600, 10);  /* 19 of 25 */
    assert_int_equal(picks_seen(&f, sticky, T0, 10), 1u << 2);
    assert_int_equal(picks_seen(&f, loose, T0, 10), 1u << 2); /* least token load: 384 uncached */
    /* 2048 uncached tokens in flight on 2: the loose request goes by load (1600 elsewhere), the
     * sticky one stays. */
    req *busy = make(3, 7, 2048, 7, 2048, 10);
    dispatch(&f, busy, 2, T0);
    assert_int_equal(picks_seen(&f, loose, T0, 20) & (1u << 2), 0);
    assert_int_equal(picks_seen(&f, sticky, T0, 10), 1u << 2);
    first_token(&f, busy, 2, T0);
    /* 120 unique 8192-token prompts in flight on 2 (983,040 tokens, 17.6 s): still sticky. */
    req *load[123];
    for (int k = 0; k < 123; k++)
        load[k] = make(100 + (uint64_t)k, 1000 + (uint64_t)k, 8192, 1000 + (uint64_t)k, 8192, 10);
    /* Each load prompt's blocks enter 2's index (7,301 blocks: the engine's cache / 64); a's
     * prompt is sent there again between them (fully cached: no load) so it stays indexed. */
    for (int k = 0; k < 120; k++) {
        dispatch(&f, load[k], 2, T0);
        dispatch(&f, a, 2, T0);
    }
    assert_int_equal(picks_seen(&f, sticky, T0, 10), 1u << 2);
    /* Three more (1,007,616 tokens, 18.09 s): saturated, the filter lets every endpoint in and
     * the token load sends it elsewhere. */
    for (int k = 120; k < 123; k++) {
        dispatch(&f, load[k], 2, T0);
        dispatch(&f, a, 2, T0);
    }
    assert_int_equal(picks_seen(&f, sticky, T0, 20) & (1u << 2), 0);
    /* Their first tokens came back: sticky again. */
    for (int k = 0; k < 123; k++)
        first_token(&f, load[k], 2, T0);
    assert_int_equal(picks_seen(&f, sticky, T0, 10), 1u << 2);
    for (int k = 0; k < 123; k++)
        free(load[k]);
    free(a);
    free(sticky);
    free(loose);
    free(busy);
    fleet_free(&f);
}

/* ---- llm-d-precise ---------------------------------------------------------------------------- */

/* Cold requests go round by no-hit-lru (never-used endpoints first, in order, then the least
 * recent); a warm one follows its cached prefix. */
static void test_llm_d_precise_no_hit_lru_and_prefix(void **state)
{
    (void)state;
    fleet f;
    fleet_init(&f, "llm-d-precise", 4);
    req *cold[5];
    for (int k = 0; k < 5; k++) {
        cold[k] = make((uint64_t)k, 10 + (uint64_t)k, 320, 10 + (uint64_t)k, 320, 10);
        int r = pick(&f, cold[k], T0);
        assert_int_equal(r, k % 4);
        dispatch(&f, cold[k], (uint32_t)r, T0);
    }
    req *warm = make(9, 12, 320, 99, 400, 10); /* cold[2]'s prompt, then more */
    assert_int_equal(picks_seen(&f, warm, T0, 10), 1u << 2);
    for (int k = 0; k < 5; k++)
        free(cold[k]);
    free(warm);
    fleet_free(&f);
}

/* With events 10 s late, the pick's speculative mark (2 s) covers the lag, then expires: the
 * same prompt is cold again until the events arrive. */
static void test_llm_d_precise_speculative_marks_cover_the_lag(void **state)
{
    (void)state;
    fleet f;
    fleet_init_lag(&f, "llm-d-precise", 4, 10 * SB_NS_PER_S);
    req *a = make(0, 5, 640, 5, 640, 10);
    int first = pick(&f, a, T0);
    dispatch(&f, a, (uint32_t)first, T0);
    finish(&f, a, (uint32_t)first, T0);
    req *again = make(1, 5, 640, 6, 700, 10);
    assert_int_equal(picks_seen(&f, again, T0 + SB_NS_PER_S, 10), 1u << first);
    /* 3 s on: the mark expired, the events have not come: cold, no-hit-lru moves it on. */
    assert_int_not_equal(pick(&f, again, T0 + 3 * SB_NS_PER_S), first);
    /* 10 s on: the events tell the cache: warm again. */
    assert_int_equal(picks_seen(&f, again, T0 + 10 * SB_NS_PER_S, 10), 1u << first);
    free(a);
    free(again);
    fleet_free(&f);
}

/* ---- the lagged view of the shadow ------------------------------------------------------------- */

/* Dispatched at T0 with a 20 ms lag: the cache view answers the old state (nothing cached)
 * before T0 + 20 ms and the new one from then on; the router's own sequences show at once. */
static void test_kv_view_lag(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    sb_kv_view *v = sb_kv_view_new(2, &p, 20 * 1000000ULL);
    assert_non_null(v);
    req *a = make(7, 3, 160, 3, 160, 10);
    sb_kv_view_record(v, T0, 1, &a->v);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_active(v), 1), 10);
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(v, T0), 1, a->ehash, 10), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(v, T0 + 19999999), 1, a->ehash, 10), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(v, T0 + 20000000), 1, a->ehash, 10), 10);
    /* The end, 5 ms later, frees the blocks in the lagged view 20 ms after it (still cached: free). */
    sb_kv_view_finish(v, T0 + 25000000, 7);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_active(v), 1), 0);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_cache(v, T0 + 44999999), 1), 10);
    assert_int_equal(sb_kv_shadow_active_blocks(sb_kv_view_cache(v, T0 + 45000000), 1), 0);
    sb_kv_view_free(v);
    /* Lag 0: one shadow, changes at once. */
    v = sb_kv_view_new(2, &p, 0);
    sb_kv_view_record(v, T0, 0, &a->v);
    assert_ptr_equal(sb_kv_view_cache(v, T0), sb_kv_view_active(v));
    assert_int_equal(sb_kv_shadow_cached_blocks(sb_kv_view_cache(v, T0), 0, a->ehash, 10), 10);
    sb_kv_view_free(v);
    free(a);
}

/* ---- helpers: block_lru and kv_shadow --------------------------------------------------------- */

static void test_block_lru_order_pinning_and_deletion(void **state)
{
    (void)state;
    sb_block_lru *t = sb_block_lru_new(1);
    assert_non_null(t);
    for (uint64_t k = 1; k <= 5000; k++) {
        uint32_t e = sb_block_lru_get(t, k * 0x9E3779B97F4A7C15ULL, NULL);
        assert_int_not_equal(e, SB_BLOCK_LRU_NONE);
        sb_block_lru_payload(t, e)[0] = k;
    }
    uint32_t pinned = sb_block_lru_find(t, 1 * 0x9E3779B97F4A7C15ULL);
    sb_block_lru_pin(t, pinned); /* the oldest, pinned: survives */
    sb_block_lru_touch(t, sb_block_lru_find(t, 2 * 0x9E3779B97F4A7C15ULL));
    for (int i = 0; i < 4000; i++)
        assert_true(sb_block_lru_evict_one(t));
    assert_int_equal(sb_block_lru_count(t), 1000);
    assert_int_not_equal(sb_block_lru_find(t, 1 * 0x9E3779B97F4A7C15ULL), SB_BLOCK_LRU_NONE);
    assert_int_not_equal(sb_block_lru_find(t, 2 * 0x9E3779B97F4A7C15ULL), SB_BLOCK_LRU_NONE);
    assert_int_equal(sb_block_lru_find(t, 3 * 0x9E3779B97F4A7C15ULL), SB_BLOCK_LRU_NONE);
    for (uint64_t k = 4003; k <= 5000; k++) { /* every survivor still found after the shifts */
        uint32_t e = sb_block_lru_find(t, k * 0x9E3779B97F4A7C15ULL);
        assert_int_not_equal(e, SB_BLOCK_LRU_NONE);
        assert_int_equal(sb_block_lru_payload(t, e)[0], k);
    }
    while (sb_block_lru_evict_one(t))
        ;
    assert_int_equal(sb_block_lru_count(t), 1); /* only the pinned one */
    sb_block_lru_unpin(t, pinned);
    assert_true(sb_block_lru_evict_one(t));
    assert_int_equal(sb_block_lru_count(t), 0);
    sb_block_lru_free(t);
}

static void test_kv_shadow_frees_tail_first_within_the_cache(void **state)
{
    (void)state;
    sb_engine_params p = sb_engine_params_default();
    p.num_gpu_blocks = 10;
    sb_kv_shadow *s = sb_kv_shadow_new(1, &p);
    assert_non_null(s);
    req *a = make(0, 1, 64, 1, 64, 1), *b = make(1, 2, 64, 2, 64, 1), *c = make(2, 3, 64, 3, 64, 1);
    /* Each: 4 full blocks, 1 more for its output. */
    assert_int_equal(sb_kv_shadow_dispatch(s, 0, 0, a->ehash, 4, 64, 1, 64), 0);
    assert_int_equal(sb_kv_shadow_active_blocks(s, 0), 4);
    assert_int_equal(sb_kv_shadow_new_active_blocks(s, 0, a->ehash, 4), 0);
    sb_kv_shadow_finish(s, 0);
    assert_int_equal(sb_kv_shadow_active_blocks(s, 0), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(s, 0, a->ehash, 4), 4);
    assert_int_equal(sb_kv_shadow_dispatch(s, 0, 1, b->ehash, 4, 64, 1, 64), 0);
    sb_kv_shadow_finish(s, 1);
    /* C needs 5 blocks: 13 > 10, the 3 least recently used go: A's tail, its head stays. */
    assert_int_equal(sb_kv_shadow_dispatch(s, 0, 2, c->ehash, 4, 64, 1, 64), 0);
    assert_int_equal(sb_kv_shadow_cached_blocks(s, 0, a->ehash, 4), 1);
    assert_int_equal(sb_kv_shadow_cached_blocks(s, 0, b->ehash, 4), 4);
    assert_int_equal(sb_kv_shadow_cached_tokens(s, 4, 64), 48); /* one token always computed */
    /* Pending prefill: the newest requests whose prompts cover the first-byte-pending count. */
    assert_int_equal(sb_kv_shadow_dispatch(s, 0, 3, a->ehash, 4, 64, 1, 16), 0);
    uint32_t k;
    assert_int_equal(sb_kv_shadow_pending_uncached(s, 0, 64, &k), 16);
    assert_int_equal(k, 1);
    assert_int_equal(sb_kv_shadow_pending_uncached(s, 0, 128, &k), 80);
    assert_int_equal(k, 2);
    assert_int_equal(sb_kv_shadow_pending_uncached(s, 0, 0, &k), 0);
    assert_int_equal(sb_kv_shadow_dispatch(s, 0, 3, a->ehash, 4, 64, 1, 16), -EEXIST);
    free(a);
    free(b);
    free(c);
    sb_kv_shadow_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_lists_the_references),
        cmocka_unit_test(test_session_hash_keeps_a_session_on_one_replica),
        cmocka_unit_test(test_kubeai_same_key_same_replica_until_the_bound),
        cmocka_unit_test(test_sglang_best_match_above_threshold),
        cmocka_unit_test(test_sglang_smallest_tree_below_threshold),
        cmocka_unit_test(test_sglang_shortest_queue_when_imbalanced),
        cmocka_unit_test(test_sglang_rust_evicts_trees_at_the_interval),
        cmocka_unit_test(test_production_stack_longest_chunk_match_else_random),
        cmocka_unit_test(test_aibrix_imbalance_bound),
        cmocka_unit_test(test_aibrix_mean_plus_one_sigma),
        cmocka_unit_test(test_aibrix_table_forgets_beyond_its_capacity),
        cmocka_unit_test(test_dynamo_min_cost),
        cmocka_unit_test(test_min_predicted_ttft_cached_unless_the_queue_costs_more),
        cmocka_unit_test(test_llm_d_sticky_until_saturated),
        cmocka_unit_test(test_llm_d_precise_no_hit_lru_and_prefix),
        cmocka_unit_test(test_llm_d_precise_speculative_marks_cover_the_lag),
        cmocka_unit_test(test_kv_view_lag),
        cmocka_unit_test(test_block_lru_order_pinning_and_deletion),
        cmocka_unit_test(test_kv_shadow_frees_tail_first_within_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
