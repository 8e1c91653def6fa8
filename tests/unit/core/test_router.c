/* Tests core/router: model resolution, round robin, least request, exclusion, accounting, and
 * that the hash secret changes no result. */
#include "sb_test.h"

#include <math.h>

#include "core/explain.h"
#include "core/kv_index.h"
#include "core/prefix_index.h"
#include "core/router.h"

#define RR sb_profile_builtin("round-robin")
#define LR sb_profile_builtin("least-request")

static sb_router *make_router(const sb_profile *policy, size_t n)
{
    sb_router *r = sb_router_new(42, 0x5ec7e7);
    assert_non_null(r);
    assert_int_equal(sb_router_add_pool(r, "llama", policy, n, NULL), 0);
    assert_int_equal(sb_router_add_pool(r, "qwen", policy, 1, NULL), 1);
    assert_int_equal(sb_router_add_model(r, 0, "meta/llama", SB_MODEL_SERVED), 0);
    assert_int_equal(sb_router_add_model(r, 0, "llama", SB_MODEL_ALIAS), 0);
    assert_int_equal(sb_router_add_model(r, 0, "sql-lora", SB_MODEL_ADAPTER), 0);
    assert_int_equal(sb_router_add_model(r, 0, "chat-lora", SB_MODEL_ADAPTER), 0);
    assert_int_equal(sb_router_add_model(r, 1, "qwen", SB_MODEL_SERVED), 0);
    return r;
}

static void test_resolve(void **state)
{
    (void)state;
    sb_router *r = make_router(RR, 3);
    sb_model_match m;
    assert_int_equal(sb_router_resolve(r, "llama", 5, &m), 0);
    assert_int_equal(m.pool, 0);
    assert_true(m.is_alias);
    assert_int_equal(m.adapter, -1);
    assert_memory_equal(m.served, "meta/llama", m.served_len);
    assert_int_equal(sb_router_resolve(r, "chat-lora", 9, &m), 0);
    assert_int_equal(m.adapter, 1);
    assert_false(m.is_alias);
    assert_int_equal(sb_router_resolve(r, "qwen", 4, &m), 0);
    assert_int_equal(m.pool, 1);
    assert_int_equal(sb_router_resolve(r, "qwe", 3, &m), -1);
    assert_int_equal(sb_router_resolve(r, "llamas", 6, &m), -1);
    /* A name resolves to exactly one pool. */
    assert_int_equal(sb_router_add_model(r, 1, "llama", SB_MODEL_ALIAS), -2);
    sb_router_free(r);
}

static void test_many_models_grow_table(void **state)
{
    (void)state;
    sb_router *r = make_router(RR, 1);
    char name[32];
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof(name), "adapter-%d", i);
        assert_int_equal(sb_router_add_model(r, (uint32_t)(i % 2), name, SB_MODEL_ADAPTER), 0);
    }
    for (int i = 0; i < 500; i++) {
        sb_model_match m;
        snprintf(name, sizeof(name), "adapter-%d", i);
        assert_int_equal(sb_router_resolve(r, name, strlen(name), &m), 0);
        assert_int_equal(m.pool, (uint32_t)(i % 2));
    }
    sb_router_free(r);
}

static void test_round_robin_cycles_and_skips_excluded(void **state)
{
    (void)state;
    sb_router *r = make_router(RR, 3);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    int seq[6];
    for (int i = 0; i < 6; i++)
        seq[i] = sb_router_pick(r, &rq, 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(seq[i], i % 3);
    uint32_t ex[2] = {1, 2};
    rq.exclude = ex;
    rq.n_exclude = 2;
    assert_int_equal(sb_router_pick(r, &rq, 0), 0);
    assert_int_equal(sb_router_pick(r, &rq, 0), 0);
    uint32_t all[3] = {0, 1, 2};
    rq.exclude = all;
    rq.n_exclude = 3;
    assert_int_equal(sb_router_pick(r, &rq, 0), -1);
    sb_router_free(r);
}

static void test_least_request_follows_in_flight(void **state)
{
    (void)state;
    sb_router *r = make_router(LR, 3);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    /* Three picks with dispatch in between spread over all three endpoints. */
    int seen[3] = {0};
    sb_ticket tk[3];
    for (int i = 0; i < 3; i++) {
        int ep = sb_router_pick(r, &rq, 0);
        assert_in_range(ep, 0, 2);
        seen[ep]++;
        tk[ep] = sb_router_dispatched(r, 0, (uint32_t)ep, 100, 0);
    }
    assert_int_equal(seen[0] * seen[1] * seen[2], 1);
    /* Endpoint 1 finishes: it is now the only least-loaded one. */
    sb_router_finished(r, 0, 1, &tk[1], true, true, 10);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sb_router_pick(r, &rq, 0), 1);
    sb_router_finished(r, 0, 2, &tk[2], false, true, 20);
    const sb_endpoint *s = sb_router_endpoint(r, 0, 2);
    assert_int_equal(s->in_flight, 0);
    assert_int_equal(s->failed, 1);
    assert_int_equal(sb_router_endpoint(r, 0, 1)->completed, 1);
    /* The decision is explained: least-request's one scorer, ep 1 scored best. */
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_non_null(d);
    assert_int_equal(d->picked, 1);
    assert_string_equal(d->profile->name, "least-request");
    sb_router_free(r);
}

static void test_least_request_ties_spread_evenly(void **state)
{
    (void)state;
    sb_router *r = make_router(LR, 4);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    int counts[4] = {0};
    for (int i = 0; i < 4000; i++)
        counts[sb_router_pick(r, &rq, 0)]++;
    for (int i = 0; i < 4; i++)
        assert_in_range(counts[i], 850, 1150);
    sb_router_free(r);
}

static void test_accounting_never_underflows(void **state)
{
    (void)state;
    sb_router *r = make_router(LR, 2);
    sb_ticket t = {0};
    sb_router_finished(r, 0, 0, &t, true, true, 0);
    sb_router_finished(r, 0, 0, &t, false, false, 0);
    assert_int_equal(sb_router_endpoint(r, 0, 0)->in_flight, 0);
    assert_int_equal(sb_router_endpoint(r, 0, 0)->sent_since_report, 0);
    /* Out-of-range reports are ignored, not crashes. */
    sb_router_dispatched(r, 7, 0, 1, 0);
    sb_router_dispatched(r, 0, 9, 1, 0);
    assert_null(sb_router_endpoint(r, 0, 9));
    sb_router_free(r);
}

static void report_waiting(sb_router *r, uint32_t ep, double waiting, sb_ns at)
{
    sb_endpoint_report rep = {
        .have_waiting = true, .waiting = waiting, .have_kv = true, .kv_usage = 0.1, .requests_total = -1};
    sb_endpoint_report_set(sb_router_endpoint(r, 0, ep), &rep, SB_REPORT_SCRAPE, at);
}

static void test_pool_saturated_needs_evidence(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("default"), 2);
    const sb_ns t = SB_MS(10000), stale = sb_pool_params_default().stale_ns;
    /* Nobody ever reported: no evidence, never gated. */
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, t));
    report_waiting(r, 0, 9, t);
    report_waiting(r, 1, 2, t);
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, t)); /* endpoint 1 has room */
    report_waiting(r, 1, 6, t);
    assert_true(sb_router_pool_saturated(r, 0, -1, -1, t));
    /* Requests sent since the report count as waiting. */
    report_waiting(r, 1, 3, t);
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, t));
    for (int i = 0; i < 3; i++)
        sb_router_dispatched(r, 0, 1, 10, t);
    assert_true(sb_router_pool_saturated(r, 0, -1, -1, t));
    /* A stale endpoint is skipped; all stale: no evidence. */
    report_waiting(r, 1, 0, t - stale - 1);
    assert_true(sb_router_pool_saturated(r, 0, -1, -1, t));
    report_waiting(r, 0, 9, t - stale - 1);
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, t));
    /* Draining endpoints are not available. */
    assert_true(sb_router_pool_available(r, 0, t));
    sb_router_endpoint(r, 0, 0)->draining = sb_router_endpoint(r, 0, 1)->draining = true;
    assert_false(sb_router_pool_available(r, 0, t));
    sb_router_free(r);
    /* The gate's own thresholds override the profile's (5 waiting, KV 0.8). */
    r = make_router(sb_profile_builtin("default"), 2);
    report_waiting(r, 0, 2, t);
    report_waiting(r, 1, 3, t);
    assert_false(sb_router_pool_saturated(r, 0, -1, -1, t));
    assert_true(sb_router_pool_saturated(r, 0, 1, -1, t));
    assert_false(sb_router_pool_saturated(r, 0, 2, -1, t)); /* endpoint 0 is at 2, not over */
    sb_router_free(r);
}

/* A membership change moves the pool's index renumbered to the new router; the old router
 * keeps picking until it retires (queued requests), on an empty index of its own size (under
 * ASan, a new pool's index handed back would overflow the old pool's match array). */
static void test_remap_prefix_index_between_routers(void **state)
{
    (void)state;
    sb_router *old = make_router(sb_profile_builtin("prefix-only"), 2);
    sb_router *neu = make_router(sb_profile_builtin("prefix-only"), 40);
    uint64_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = 0xabcdef1ULL * (uint64_t)(i + 1);
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 8, .prompt_tokens = 128};
    int a = sb_router_pick(old, &rq, 0);
    assert_true(a >= 0);
    sb_ticket t = sb_router_dispatched(old, 0, (uint32_t)a, 128, 0);
    sb_router_first_byte(old, 0, (uint32_t)a, &t, 1);
    sb_router_first_token(old, 0, (uint32_t)a, &t); /* computed: the blocks count from now */
    sb_router_finished(old, 0, (uint32_t)a, &t, true, true, 2);
    /* A last pick never dispatched: its pending mark must not move as computed. */
    int b = sb_router_pick(
        old, &(sb_sched_request){.pool = 0, .adapter = -1, .block_hashes = h + 0, .n_blocks = 8, .prompt_tokens = 128},
        3);
    assert_true(b >= 0);
    /* Old endpoint a becomes new 17; the other one leaves. */
    int32_t map[2] = {-1, -1};
    map[a] = 17;
    sb_router_remap_prefix_index(neu, 0, old, 0, map);
    /* The new router finds the prefix on endpoint 17. */
    assert_int_equal(sb_router_pick(neu, &rq, 4), 17);
    /* The old router picks on, over an index of its own size. */
    assert_true(sb_router_pick(old, &rq, 5) >= 0);
    sb_router_free(old);
    sb_router_free(neu);
}

/* A picked prefix counts for its endpoint only once the request's first token came back: the
 * engine cannot reuse blocks it is still computing, so requests meanwhile are spread by
 * other scores, not stacked behind the first (a hot prefix's opening burst). */
static void test_prefix_pending_until_first_token(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 4);
    uint64_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = 0x1234567ULL * (uint64_t)(i + 1);
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 8, .prompt_tokens = 128};
    int a = sb_router_pick(r, &rq, 0);
    assert_true(a >= 0);
    sb_ticket t = sb_router_dispatched(r, 0, (uint32_t)a, 128, 0);
    assert_true(t.has_prefix_pending);
    /* Pending: every candidate scores alike. */
    for (int k = 0; k < 3; k++) {
        sb_router_pick(r, &rq, 0);
        const sb_decision *d = sb_router_last_decision(r, 0);
        for (size_t i = 0; i < d->n; i++)
            assert_true(d->cands[i].total == d->cands[0].total);
    }
    /* Headers alone do not settle it; the first token does. */
    sb_router_first_byte(r, 0, (uint32_t)a, &t, 1);
    sb_router_pick(r, &rq, 1);
    assert_true(sb_router_last_decision(r, 0)->cands[a].total ==
                sb_router_last_decision(r, 0)->cands[(a + 1) % 4].total);
    sb_router_first_token(r, 0, (uint32_t)a, &t);
    assert_false(t.has_prefix_pending);
    for (int k = 0; k < 5; k++)
        assert_int_equal(sb_router_pick(r, &rq, 2), a);
    sb_router_finished(r, 0, (uint32_t)a, &t, true, true, 3);
    /* A longer prompt sent to b that fails before any token: b never counts as a holder. */
    uint64_t g[8];
    for (int i = 0; i < 8; i++)
        g[i] = 0xabcdefULL * (uint64_t)(i + 3);
    sb_sched_request rg = {.pool = 0, .adapter = -1, .block_hashes = g, .n_blocks = 8, .prompt_tokens = 128};
    int b = sb_router_pick(r, &rg, 4);
    sb_ticket tb = sb_router_dispatched(r, 0, (uint32_t)b, 128, 4);
    sb_router_finished(r, 0, (uint32_t)b, &tb, false, true, 5);
    sb_router_pick(r, &rg, 6);
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_true(d->cands[b].total == d->cands[(b + 1) % 4].total);
    /* A dispatch to another endpoint than the pick (the caller chose itself) carries nothing,
     * and the picked endpoint's mark is forgotten (its lowest new block goes). */
    const struct sb_prefix_index *ix = sb_router_prefix_index(r, 0);
    int c = sb_router_pick(r, &rg, 7);
    size_t held = sb_prefix_index_endpoint_entries(ix, (uint32_t)c);
    sb_ticket tc = sb_router_dispatched(r, 0, (uint32_t)(c + 1) % 4, 128, 7);
    assert_false(tc.has_prefix_pending);
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, (uint32_t)c), held - 1);
    /* A pick that no dispatch follows: the next pick forgets its mark too. */
    uint64_t f[8];
    for (int i = 0; i < 8; i++)
        f[i] = 0x77ULL * (uint64_t)(i + 11);
    sb_sched_request rf = {.pool = 0, .adapter = -1, .block_hashes = f, .n_blocks = 8, .prompt_tokens = 128};
    int e = sb_router_pick(r, &rf, 8);
    held = sb_prefix_index_endpoint_entries(ix, (uint32_t)e);
    sb_router_pick(r, &rq, 9); /* the first prompt: nothing new anywhere it is held */
    assert_int_equal(sb_prefix_index_endpoint_entries(ix, (uint32_t)e), held - 1);
    sb_router_free(r);
}

/* Fusion of the engines' reports (precise index) with the router's own marks: a report
 * scores an endpoint the router never sent the prompt to; on an endpoint whose stream is
 * heard the marks count only within the cover window; elsewhere they stand; the explanation
 * names the source. */
static void test_kv_fusion(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 4);
    sb_kv_index_config kc = {.block_size = 16, .key_seed = 7, .hash_secret = 0x5ec7e7};
    assert_int_equal(sb_router_kv_enable(r, 0, &kc, SB_MS(1000)), 0);
    sb_kv_index *kv = sb_router_kv_index(r, 0);
    assert_non_null(kv);
    /* 8 text blocks of 16 estimated tokens = 128 tokens = 8 engine blocks. */
    uint64_t h[8], keys[8], eh[8];
    uint32_t tok[128];
    for (int i = 0; i < 8; i++)
        h[i] = 0x1234567ULL * (uint64_t)(i + 1);
    for (int i = 0; i < 128; i++)
        tok[i] = (uint32_t)(1000 + i);
    assert_int_equal(sb_kv_keys_from_tokens(7, tok, 128, 16, 0, keys), 8);
    sb_sched_request rq = {.pool = 0,
                           .adapter = -1,
                           .block_hashes = h,
                           .n_blocks = 8,
                           .prompt_tokens = 128,
                           .kv_keys = keys,
                           .n_kv_keys = 8};
    /* Endpoint 3's engine reports the first 6 blocks (say another gateway's traffic). */
    for (int i = 0; i < 8; i++)
        eh[i] = 0xE000 + (uint64_t)i;
    sb_kv_stored ev = {.engine_hashes = eh, .n = 6, .token_ids = tok, .n_tokens = 96, .block_size = 16};
    assert_int_equal(sb_kv_index_block_stored(kv, 3, &ev), SB_KV_OK);
    sb_router_kv_live(r, 0, 3, true);
    assert_int_equal(sb_router_pick(r, &rq, 0), 3);
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_int_equal(d->cands[3].prefix_blocks, 6);
    assert_int_equal(d->cands[3].prefix_source, SB_PREFIX_REPORTED);
    assert_int_equal(d->cands[0].prefix_source, SB_PREFIX_NONE);
    /* Without the request's keys the reports cannot be read: nobody matches. */
    sb_sched_request bare = rq;
    bare.kv_keys = NULL;
    bare.n_kv_keys = 0;
    sb_router_pick(r, &bare, 1);
    assert_int_equal(sb_router_last_decision(r, 0)->cands[3].prefix_blocks, 0);
    /* The router sends the whole prompt to endpoint 1 (live stream) and 2 (no stream); their
     * first tokens settle the marks: 8 routed blocks beat 6 reported ones. */
    sb_router_kv_live(r, 0, 1, true);
    for (uint32_t e = 1; e <= 2; e++) {
        uint32_t others[3], k = 0;
        for (uint32_t o = 0; o < 4; o++)
            if (o != e)
                others[k++] = o;
        sb_sched_request only = rq;
        only.exclude = others;
        only.n_exclude = 3;
        assert_int_equal(sb_router_pick(r, &only, 2), (int)e);
        sb_ticket t = sb_router_dispatched(r, 0, e, 128, 2);
        sb_router_first_token(r, 0, e, &t);
        sb_router_finished(r, 0, e, &t, true, true, 3);
    }
    sb_router_pick(r, &rq, SB_MS(500));
    d = sb_router_last_decision(r, 0);
    assert_int_equal(d->cands[1].prefix_blocks, 8);
    assert_int_equal(d->cands[1].prefix_source, SB_PREFIX_ROUTED);
    assert_int_equal(d->cands[2].prefix_blocks, 8);
    assert_int_equal(d->cands[3].prefix_source, SB_PREFIX_REPORTED);
    /* Past the cover window, endpoint 1's marks are gone (its engine never reported them:
     * evicted, say); endpoint 2's stand; endpoint 3's report stands. */
    sb_router_pick(r, &rq, SB_MS(1600));
    d = sb_router_last_decision(r, 0);
    assert_int_equal(d->cands[1].prefix_blocks, 0);
    assert_int_equal(d->cands[2].prefix_blocks, 8);
    assert_int_equal(d->cands[2].prefix_source, SB_PREFIX_ROUTED);
    assert_int_equal(d->cands[3].prefix_blocks, 6);
    /* A report as long as the marks is named as the source. */
    ev.n = 8;
    ev.n_tokens = 128;
    assert_int_equal(sb_kv_index_block_stored(kv, 2, &ev), SB_KV_OK);
    sb_router_pick(r, &rq, SB_MS(1700));
    assert_int_equal(sb_router_last_decision(r, 0)->cands[2].prefix_source, SB_PREFIX_REPORTED);
    /* The explanation carries it. */
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(sb_router_last_decision(r, 0), &b), 0);
    assert_non_null(strstr(b.data, "\"prefix\":{\"blocks\":8,\"source\":\"reported\"}"));
    sb_buf_free(&b);
    sb_router_free(r);
}

/* Request i's 12 block hashes: 8 every request shares (a system prompt), then 4 of its own. */
static void shared_then_own(uint64_t h[12], int i)
{
    for (int j = 0; j < 12; j++)
        h[j] = j < 8 ? 0xC0FFEE00ULL + (uint64_t)j : 0xA0000000ULL + (uint64_t)i * 16 + (uint64_t)j;
}

/* A prefix every request shares becomes hot (profile hot_prefix, core/hot_prefix.h) once the
 * pool is busy enough, and the decision says so: its run (8 shared blocks of 12; the ladder's 8) and
 * the holders it needs (every request shares it: all 4). Both defaults spread it; a profile
 * without hot_prefix never counts. */
static void test_hot_prefix_in_the_decision(void **state)
{
    (void)state;
    const sb_profile *profiles[] = {sb_profile_builtin("default-events"), sb_profile_builtin("default"),
                                    sb_profile_builtin("prefix-only")};
    for (int k = 0; k < 3; k++) {
        sb_router *r = make_router(profiles[k], 4);
        uint64_t h[12];
        sb_buf b = {0};
        for (int i = 0; i < 40; i++) {
            shared_then_own(h, i);
            sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 12, .prompt_tokens = 192};
            assert_true(sb_router_pick(r, &rq, SB_MS(33 * i)) >= 0);
            const sb_decision *d = sb_router_last_decision(r, 0);
            /* Hot once the pool has seen 4 requests per endpoint (decayed: the 17th request),
             * with the hot_prefix profiles only. */
            if (k == 2 || i < 15)
                assert_int_equal(d->hot_blocks, 0);
            else if (i >= 17)
                assert_int_equal(d->hot_blocks, 8);
        }
        assert_int_equal(sb_decision_render(sb_router_last_decision(r, 0), &b), 0);
        if (k < 2)
            assert_non_null(strstr(b.data, "\"hot_prefix\":{\"blocks\":8,\"needed\":4.00}"));
        else
            assert_null(strstr(b.data, "hot_prefix"));
        sb_buf_free(&b);
        sb_router_free(r);
    }
}

/* The engines' counters say how much of their traffic this router sends (several gateway
 * replicas, or traffic around them): routed on the approximate index, which knows only the
 * holders it made, the router plans holders for its share of the demand (here a third: needed
 * 4 -> 4/3); scored by the precise index, which hears every holder, for all of it. A pool with
 * KV events whose request has no token keys is routed on the approximate index: its share. */
static void test_hot_prefix_needed_is_this_routers_share(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++) { /* approximate, precise, events but no keys */
        sb_router *r = make_router(sb_profile_builtin("default"), 4);
        if (mode) {
            sb_kv_index_config kc = {.block_size = 16, .key_seed = 7, .hash_secret = 0x5ec7e7};
            assert_int_equal(sb_router_kv_enable(r, 0, &kc, 0), 0);
        }
        uint64_t h[12], keys[12];
        for (int i = 0; i < 40; i++) {
            shared_then_own(h, i);
            for (int j = 0; j < 12; j++)
                keys[j] = h[j] ^ 0x5a5a;
            sb_ns now = SB_MS(33 * i);
            sb_sched_request rq = {.pool = 0,
                                   .adapter = -1,
                                   .block_hashes = h,
                                   .n_blocks = 12,
                                   .prompt_tokens = 192,
                                   .kv_keys = mode == 1 ? keys : NULL,
                                   .n_kv_keys = mode == 1 ? 12 : 0};
            int ep = sb_router_pick(r, &rq, now);
            assert_true(ep >= 0);
            sb_ticket t = sb_router_dispatched(r, 0, (uint32_t)ep, 192, now);
            sb_router_finished(r, 0, (uint32_t)ep, &t, true, true, now + 1);
            /* Every endpoint reports its engine's counter: three requests for each of ours. */
            for (uint32_t e = 0; e < 4; e++) {
                sb_endpoint *x = sb_router_endpoint(r, 0, e);
                sb_endpoint_report rep = {.requests_total = 3.0 * (double)x->completed};
                sb_endpoint_report_set(x, &rep, SB_REPORT_SCRAPE, now + 2);
            }
        }
        const sb_decision *d = sb_router_last_decision(r, 0);
        assert_int_equal(d->hot_blocks, 8);
        assert_true(fabs(d->hot_needed - (mode == 1 ? 4.0 : 4.0 / 3)) < 0.1);
        sb_router_free(r);
    }
}

/* An endpoint whose reports stopped (down, unreachable) fades out of the share instead of
 * keeping what it last showed: endpoint 0 reported an engine serving 9 of ours in 10 (another
 * gateway sent little), then went silent for five minutes while the other three kept reporting
 * a third; the share is theirs. Without the decay to now, endpoint 0's sums, four times the
 * others', would hold the share near a half. */
static void test_hot_prefix_share_forgets_a_silent_endpoint(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("default"), 4);
    uint64_t h[12];
    sb_ns now = 0;
    for (int i = 0; i < 200; i++) {
        shared_then_own(h, i);
        bool late = i >= 100; /* five minutes on, endpoint 0 is silent and gets nothing */
        now = (late ? SB_MS(300000) : 0) + SB_MS(33 * i);
        sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 12, .prompt_tokens = 192};
        assert_true(sb_router_pick(r, &rq, now) >= 0);
        uint32_t ep = late ? 1 + (uint32_t)i % 3 : 0;
        sb_ticket t = sb_router_dispatched(r, 0, ep, 192, now);
        sb_router_finished(r, 0, ep, &t, true, true, now + 1);
        sb_endpoint *x = sb_router_endpoint(r, 0, ep);
        sb_endpoint_report rep = {.requests_total = (late ? 3.0 : 10.0 / 9) * (double)x->completed};
        sb_endpoint_report_set(x, &rep, SB_REPORT_SCRAPE, now + 2);
    }
    shared_then_own(h, 200);
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 12, .prompt_tokens = 192};
    assert_true(sb_router_pick(r, &rq, now + 3) >= 0);
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_true(d->hot_blocks > 0);
    /* needed = 4 x share: a third of the traffic, not a half or more. */
    assert_true(d->hot_needed < 4.0 * 0.4);
    sb_router_free(r);
}

/* A request decided again (the decision after a synchronous probe: `repeat`) is one
 * request's demand: deciding each request twice, the second time as a repeat, gives the hot run
 * and the holders it needs that deciding it once does. Counted twice, the shared run would turn
 * hot at the 9th request (the pool's 4 per endpoint reached twice as fast). */
static void test_hot_prefix_counts_a_repeat_once(void **state)
{
    (void)state;
    sb_router *once = make_router(sb_profile_builtin("default-events"), 4);
    sb_router *twice = make_router(sb_profile_builtin("default-events"), 4);
    uint64_t h[12];
    for (int i = 0; i < 40; i++) {
        shared_then_own(h, i);
        sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 12, .prompt_tokens = 192};
        assert_true(sb_router_pick(once, &rq, SB_MS(33 * i)) >= 0);
        assert_true(sb_router_pick(twice, &rq, SB_MS(33 * i)) >= 0);
        rq.repeat = true;
        assert_true(sb_router_pick(twice, &rq, SB_MS(33 * i + 5)) >= 0);
        const sb_decision *a = sb_router_last_decision(once, 0), *b = sb_router_last_decision(twice, 0);
        assert_int_equal(a->hot_blocks, b->hot_blocks);
        assert_true(fabs(a->hot_needed - b->hot_needed) < 0.05);
        if (i < 15)
            assert_int_equal(b->hot_blocks, 0);
    }
    assert_int_equal(sb_router_last_decision(twice, 0)->hot_blocks, 8);
    sb_router_free(once);
    sb_router_free(twice);
}

/* A restart the prober notices (sb_router_prefix_clear, given the time of the report before
 * the one that showed it) drops the endpoint's reported blocks, unless its stream cleared them
 * itself since (sb_router_kv_cleared: it saw the same restart, and what it reported after is
 * the new engine's). Both endpoints' streams are heard, as in production. */
static void test_restart_clears_reports_unless_stream_did(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 2);
    sb_kv_index_config kc = {.block_size = 16, .key_seed = 7, .hash_secret = 0x5ec7e7};
    assert_int_equal(sb_router_kv_enable(r, 0, &kc, SB_MS(1000)), 0);
    sb_kv_index *kv = sb_router_kv_index(r, 0);
    uint32_t tok[64];
    uint64_t eh[4];
    for (int i = 0; i < 64; i++)
        tok[i] = (uint32_t)(7 + i);
    for (int i = 0; i < 4; i++)
        eh[i] = 0xA000 + (uint64_t)i;
    sb_kv_stored ev = {.engine_hashes = eh, .n = 4, .token_ids = tok, .n_tokens = 64, .block_size = 16};
    for (uint32_t e = 0; e < 2; e++) {
        assert_int_equal(sb_kv_index_block_stored(kv, e, &ev), SB_KV_OK);
        sb_router_kv_live(r, 0, e, true);
    }
    /* Endpoint 1's stream saw its restart at t=150 ms and heard the new engine store blocks;
     * endpoint 0's engine restarted idle (its stream says nothing). The scrape at 200 ms (the
     * one before at 100 ms) shows both restarts. */
    sb_router_kv_cleared(r, 0, 1, SB_MS(150));
    assert_int_equal(sb_kv_index_stats(kv, 1).blocks, 0);
    assert_int_equal(sb_kv_index_block_stored(kv, 1, &ev), SB_KV_OK);
    sb_router_prefix_clear(r, 0, 0, SB_MS(100));
    sb_router_prefix_clear(r, 0, 1, SB_MS(100));
    assert_int_equal(sb_kv_index_stats(kv, 0).blocks, 0);
    assert_int_equal(sb_kv_index_stats(kv, 1).blocks, 4);
    /* A later restart of endpoint 1 the stream has not seen (its clear is older than the
     * previous report) drops its reports. */
    sb_router_prefix_clear(r, 0, 1, SB_MS(300));
    assert_int_equal(sb_kv_index_stats(kv, 1).blocks, 0);
    sb_router_free(r);
}

/* The router's sent-tokens accounting: a dispatch to the endpoint the pick chose counts only
 * the prompt tokens its index does not already hold there; elsewhere, the whole prompt. */
static void test_sent_tokens_count_uncached(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 2);
    uint64_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = 0x9999ULL * (uint64_t)(i + 1);
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 8, .prompt_tokens = 128};
    int a = sb_router_pick(r, &rq, 0);
    assert_true(a >= 0);
    sb_ticket t = sb_router_dispatched(r, 0, (uint32_t)a, 128, 0);
    sb_router_first_token(r, 0, (uint32_t)a, &t);
    sb_router_finished(r, 0, (uint32_t)a, &t, true, true, 0);
    sb_endpoint *ea = sb_router_endpoint(r, 0, (uint32_t)a), *eb = sb_router_endpoint(r, 0, (uint32_t)(1 - a));
    assert_true(sb_endpoint_sent_tokens(ea, 0) == 128.0);
    /* The same prompt again, longer by 32 tokens: the holder is picked and only the new tokens
     * count (8 blocks of 16 estimated tokens held). */
    rq.prompt_tokens = 160;
    assert_int_equal(sb_router_pick(r, &rq, 0), a);
    t = sb_router_dispatched(r, 0, (uint32_t)a, 160, 0);
    assert_true(sb_endpoint_sent_tokens(ea, 0) == 128.0 + 32.0);
    /* Pending prefill likewise: the whole prompt is pending (for the KV estimate), 32 tokens of
     * it are work to do (the pending-prefill scorer's signal). */
    assert_int_equal(ea->pending_prefill_tokens, 160);
    assert_int_equal(ea->pending_uncached_tokens, 32);
    /* The same request again on a fresh connection (no new pick): in flight again, charged once. */
    uint32_t before = ea->in_flight;
    sb_ticket again = sb_router_redispatched(r, 0, (uint32_t)a, &t, 0);
    assert_int_equal(ea->in_flight, before + 1);
    assert_int_equal(again.sent_tokens, 32);
    assert_int_equal(again.uncached_tokens, 32);
    assert_int_equal(ea->pending_uncached_tokens, 64);
    assert_true(sb_endpoint_sent_tokens(ea, 0) == 128.0 + 32.0);
    sb_router_first_byte(r, 0, (uint32_t)a, &t, 0);
    sb_router_first_byte(r, 0, (uint32_t)a, &again, 0);
    assert_int_equal(ea->pending_uncached_tokens, 0);
    assert_int_equal(ea->pending_prefill_tokens, 0);
    /* Picked a, sent to b (the caller chose): b takes the whole prompt; if it never reached b
     * (a connect failure), the charge goes back, what is left of it after a time constant. */
    sb_router_pick(r, &rq, 0);
    sb_ticket tb = sb_router_dispatched(r, 0, (uint32_t)(1 - a), 160, 0);
    assert_true(sb_endpoint_sent_tokens(eb, 0) == 160.0);
    sb_router_withdraw_sent(r, 0, (uint32_t)(1 - a), &tb, SB_SENT_TOKENS_TAU_NS);
    assert_true(fabs(sb_endpoint_sent_tokens(eb, SB_SENT_TOKENS_TAU_NS)) < 1e-9);
    assert_int_equal(tb.sent_tokens, 0);
    sb_router_withdraw_sent(r, 0, (uint32_t)(1 - a), &tb, SB_SENT_TOKENS_TAU_NS); /* once only */
    assert_true(sb_endpoint_sent_tokens(eb, SB_SENT_TOKENS_TAU_NS) == 0.0);
    /* A request sent without a pick of its own (Envoy served it elsewhere) neither reads nor
     * spends the pool's last pick, another request's still waiting to be dispatched: that one
     * then gets its own prediction (32 tokens to compute, not its whole prompt). */
    assert_int_equal(sb_router_pick(r, &rq, 0), a);
    sb_ticket other = sb_router_dispatched_unpicked(r, 0, (uint32_t)a, 500, 0);
    assert_int_equal(other.uncached_tokens, 500);
    assert_false(other.has_prefix_pending);
    sb_ticket mine = sb_router_dispatched(r, 0, (uint32_t)a, 160, 0);
    assert_int_equal(mine.uncached_tokens, 32);
    sb_router_free(r);
}

/* Gateway sync: a request another gateway sent to an endpoint puts its blocks in this
 * router's index as that endpoint's and counts its load as this router's own (in flight, the
 * prefill of what this index says the endpoint lacks) until its first byte and its end; its
 * sent tokens are not counted. Without hashes, load only. */
static void test_peer_dispatched(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 3);
    uint64_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = 0x51dec0deULL * (uint64_t)(i + 3);
    sb_endpoint *e2 = sb_router_endpoint(r, 0, 2);
    sb_ticket t = sb_router_peer_dispatched(r, 0, 2, h, 8, 160, SB_MS(1));
    assert_int_equal(e2->in_flight, 1);
    assert_int_equal(e2->pending_prefill_tokens, 160);
    assert_int_equal(e2->pending_uncached_tokens, 160); /* nothing of it was known on 2 */
    assert_true(sb_endpoint_sent_tokens(e2, SB_MS(1)) == 0.0);
    /* Pending until the peer's first byte (nothing computed yet): an empty endpoint wins;
     * then this router sends the prefix where the peer did. */
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = 8, .prompt_tokens = 160};
    assert_true(t.has_prefix_pending);
    uint32_t match[3];
    sb_prefix_index *ix = (sb_prefix_index *)sb_router_prefix_index(r, 0);
    assert_int_equal(sb_prefix_index_match(ix, h, 8, match), 0);
    sb_router_first_byte(r, 0, 2, &t, SB_MS(2));
    sb_router_first_token(r, 0, 2, &t);
    assert_int_equal(sb_prefix_index_match(ix, h, 8, match), 8);
    assert_int_equal(match[2], 8);
    assert_int_equal(sb_router_pick(r, &rq, SB_MS(2)), 2);
    /* The same prompt again from the peer: 8 blocks of 16 tokens are held, 32 tokens to do. */
    sb_ticket t2 = sb_router_peer_dispatched(r, 0, 2, h, 8, 160, SB_MS(3));
    assert_int_equal(t2.uncached_tokens, 32);
    assert_int_equal(e2->in_flight, 2);
    assert_int_equal(e2->pending_uncached_tokens, 32); /* the first one's came back */
    sb_router_first_byte(r, 0, 2, &t2, SB_MS(4));
    assert_int_equal(e2->pending_uncached_tokens, 0);
    assert_int_equal(e2->pending_prefill_tokens, 0);
    sb_router_finished(r, 0, 2, &t, true, true, SB_MS(5));
    sb_router_finished(r, 0, 2, &t2, true, true, SB_MS(5));
    assert_int_equal(e2->in_flight, 0);
    /* Load only, and an endpoint that is not there. */
    sb_endpoint *e0 = sb_router_endpoint(r, 0, 0);
    sb_ticket t3 = sb_router_peer_dispatched(r, 0, 0, NULL, 0, 50, SB_MS(6));
    assert_int_equal(e0->in_flight, 1);
    assert_int_equal(e0->pending_uncached_tokens, 50);
    sb_router_finished(r, 0, 0, &t3, true, true, SB_MS(7));
    sb_ticket none = sb_router_peer_dispatched(r, 0, 3, h, 8, 160, SB_MS(8));
    assert_int_equal(none.uncached_tokens, 0);
    assert_int_equal(sb_router_pick(r, &rq, SB_MS(9)), 2);
    sb_router_free(r);
}

/* With prefix_share, the approximate index keeps per endpoint the share of its cache this
 * router's traffic fills: with a third of what the engine serves (two other gateway replicas),
 * a third of the reported capacity; alone, all of it. Without it, the whole capacity. */
static void test_prefix_capacity_follows_traffic_share(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        sb_router *r = make_router(sb_profile_builtin("prefix-only"), 2);
        sb_pool_params pp = sb_pool_params_default();
        pp.prefix_share = on;
        sb_router_set_pool_params(r, 0, &pp);
        double total[2] = {100, 100};
        sb_ns now = SB_MS(1000);
        for (int i = 0; i < 40; i++) {
            for (uint32_t ep = 0; ep < 2; ep++) {
                sb_ticket t = sb_router_dispatched(r, 0, ep, 10, now);
                sb_router_finished(r, 0, ep, &t, true, true, now);
                total[ep] += ep == 0 ? 3 : 1; /* endpoint 0 serves two requests from elsewhere */
                sb_endpoint_report rep = {.have_waiting = true, .requests_total = total[ep]};
                sb_endpoint_report_set(sb_router_endpoint(r, 0, ep), &rep, SB_REPORT_SCRAPE, now);
                sb_router_prefix_capacity(r, 0, ep, 16000); /* 1,000 blocks of 16 tokens */
            }
            now += SB_MS(100);
        }
        const sb_prefix_index *ix = sb_router_prefix_index(r, 0);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 333 : 1000);
        assert_int_equal(sb_prefix_index_capacity(ix, 1), 1000);
        sb_router_free(r);
    }
}

/* prefix_calibrate (on by default): an answer that found less cached than the pick's index
 * predicted shrinks the endpoint's index capacity by 15%; a confirmed prediction lets it grow
 * back by 5% of what is missing; a prediction of nothing teaches nothing. Off: no change. */
static void test_prefix_calibrate(void **state)
{
    (void)state;
    for (int on = 1; on >= 0; on--) {
        sb_router *r = make_router(sb_profile_builtin("prefix-only"), 2);
        assert_true(sb_router_pool_params(r, 0)->prefix_calibrate);
        if (!on) {
            sb_pool_params pp = sb_pool_params_default();
            pp.prefix_calibrate = false;
            sb_router_set_pool_params(r, 0, &pp);
        }
        sb_endpoint_report rep = {.have_waiting = true,
                                  .have_capacity = true,
                                  .num_gpu_blocks = 1000,
                                  .block_size = 16,
                                  .requests_total = -1};
        sb_endpoint_report_set(sb_router_endpoint(r, 0, 0), &rep, SB_REPORT_SCRAPE, 1);
        sb_router_prefix_capacity(r, 0, 0, 16000); /* 1,000 index blocks of 16 tokens */
        const sb_prefix_index *ix = sb_router_prefix_index(r, 0);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), 1000);
        sb_ticket nothing = {.prefill_tokens = 128, .uncached_tokens = 128};
        sb_router_observe_cached(r, 0, 0, &nothing, 128, 0);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), 1000);
        sb_ticket all = {.prefill_tokens = 128, .uncached_tokens = 0}; /* predicted whole */
        sb_router_observe_cached(r, 0, 0, &all, 130, 0);               /* the engine had evicted it */
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 850 : 1000);
        sb_router_observe_cached(r, 0, 0, &all, 130, 64);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 722 : 1000);
        sb_router_observe_cached(r, 0, 0, &nothing, 128, 0); /* a prediction of nothing: no change */
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 722 : 1000);
        sb_router_observe_cached(r, 0, 0, &all, 130, 120); /* within two blocks: confirmed */
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 736 : 1000);
        /* A short prompt found whole but for its last blocks (whole blocks cached, the last token
         * computed again) confirms too: 48 of 64 tokens is two blocks short, not a miss. */
        sb_router_observe_cached(r, 0, 0, &all, 64, 48);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 749 : 1000);
        /* A later report keeps what was learned. */
        sb_router_prefix_capacity(r, 0, 0, 16000);
        assert_int_equal(sb_prefix_index_capacity(ix, 0), on ? 749 : 1000);
        assert_int_equal(sb_prefix_index_capacity(ix, 1), 16384); /* untouched: its default */
        sb_router_free(r);
    }
}

/* Calibration and the traffic share together: the share bounds the index only once answers
 * showed the marks outliving the engine's cache (a shrink past a tenth). */
static void test_prefix_calibrate_then_share(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("prefix-only"), 2);
    double total = 100;
    sb_ns now = SB_MS(1000);
    for (int i = 0; i < 40; i++) { /* this router: a third of what the engine serves */
        sb_ticket t = sb_router_dispatched(r, 0, 0, 10, now);
        sb_router_finished(r, 0, 0, &t, true, true, now);
        total += 3;
        sb_endpoint_report rep = {.have_waiting = true,
                                  .have_capacity = true,
                                  .num_gpu_blocks = 1000,
                                  .block_size = 16,
                                  .requests_total = total};
        sb_endpoint_report_set(sb_router_endpoint(r, 0, 0), &rep, SB_REPORT_SCRAPE, now);
        sb_router_prefix_capacity(r, 0, 0, 16000);
        now += SB_MS(100);
    }
    const sb_prefix_index *ix = sb_router_prefix_index(r, 0);
    assert_int_equal(sb_prefix_index_capacity(ix, 0), 1000); /* no evidence yet: the whole cache */
    sb_ticket all = {.prefill_tokens = 128, .uncached_tokens = 0};
    sb_router_observe_cached(r, 0, 0, &all, 130, 0);
    assert_int_equal(sb_prefix_index_capacity(ix, 0), 333); /* min(0.85, the share 1/3) */
    for (int i = 0; i < 8; i++)                             /* confirmed predictions: the shrink decays below a tenth */
        sb_router_observe_cached(r, 0, 0, &all, 130, 130);
    assert_int_equal(sb_prefix_index_capacity(ix, 0), 900); /* 1 - 0.15 x 0.95^8 */
    sb_router_free(r);
}

/* A request released by flow control's gate is filtered with the gate's (tighter) threshold:
 * it goes where the gate saw room, not behind a queue the profile would tolerate. */
static void test_gated_request_uses_gate_threshold(void **state)
{
    (void)state;
    sb_router *r = make_router(sb_profile_builtin("default"), 3);
    const sb_ns t = SB_MS(10000);
    report_waiting(r, 0, 0, t);
    report_waiting(r, 1, 3, t);
    report_waiting(r, 2, 3, t);
    sb_sched_request rq = {.pool = 0, .adapter = -1, .prompt_tokens = 100};
    report_waiting(r, 1, 7, t);
    sb_router_pick(r, &rq, t);
    const sb_decision *d = sb_router_last_decision(r, 0);
    /* Not gated: the default profile's gate filter lets everything through, past the profile's
     * queue threshold (5) too: the scorers decide. */
    assert_null(d->cands[1].removed_by);
    assert_null(d->cands[2].removed_by);
    /* ... except a stale endpoint, for every request. */
    report_waiting(r, 2, 0, t - 2 * sb_pool_params_default().stale_ns);
    sb_router_pick(r, &rq, t);
    assert_string_equal(sb_router_last_decision(r, 0)->cands[2].removed_by, "gate");
    report_waiting(r, 2, 3, t);
    report_waiting(r, 1, 3, t);
    rq.gated = true;
    rq.gate_queue = 1;
    rq.gate_kv = -1;
    assert_int_equal(sb_router_pick(r, &rq, t), 0);
    d = sb_router_last_decision(r, 0);
    assert_string_equal(d->cands[1].removed_by, "gate");
    assert_string_equal(d->cands[2].removed_by, "gate");
    /* A gate looser than the profile does not loosen the filter. */
    report_waiting(r, 1, 7, t);
    rq.gate_queue = 10;
    sb_router_pick(r, &rq, t);
    assert_string_equal(sb_router_last_decision(r, 0)->cands[1].removed_by, "gate");
    sb_router_free(r);
}

/* A non-streamed answer's first token is never seen on its own: its pending blocks count as
 * computed once its predicted prefill is over (its prompt times the requests waiting there, at
 * 10,000 tokens/s before the endpoint has taught its speed), as the picks at or after that
 * time find. */
static void test_prefix_pending_settled_by_time_when_unseen(void **state)
{
    (void)state;
    sb_pool_params pp = sb_pool_params_default();
    pp.timed_settle_max = 2;
    sb_router *r = sb_router_new(7, 0x5ec7e7);
    assert_int_equal(sb_router_add_pool(r, "p", sb_profile_builtin("prefix-only"), 4, &pp), 0);
    uint64_t h[3][8];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 8; i++)
            h[k][i] = 0x51ed27ULL * (uint64_t)(k + 1) * 1000 + (uint64_t)i;
    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h[0], .n_blocks = 8, .prompt_tokens = 10000};
    int a = sb_router_pick(r, &rq, 0);
    sb_ticket t = sb_router_dispatched(r, 0, (uint32_t)a, 10000, 0);
    sb_router_first_token_unseen(r, 0, (uint32_t)a, &t, 0);
    /* 10,000 tokens at 10,000 tokens/s: pending for a second. */
    sb_router_pick(r, &rq, SB_MS(900));
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_true(d->cands[a].total == d->cands[(a + 1) % 4].total);
    assert_int_equal(sb_router_pick(r, &rq, SB_MS(1001)), a);
    assert_int_equal(sb_router_pick(r, &rq, SB_MS(1002)), a);
    sb_router_finished(r, 0, (uint32_t)a, &t, true, true, SB_MS(1500));
    /* Requests still decoding do not delay it: twenty answers streaming on every endpoint,
     * then a fresh report with nobody waiting; a 1,000-token prompt is due in 0.1 s, not 2.1. */
    {
        sb_ticket busy[4][20];
        for (uint32_t e = 0; e < 4; e++)
            for (int k = 0; k < 20; k++)
                busy[e][k] = sb_router_dispatched(r, 0, e, 1000, SB_MS(1500));
        for (uint32_t e = 0; e < 4; e++)
            report_waiting(r, e, 0, SB_MS(1600));
        uint64_t q[8];
        for (int i = 0; i < 8; i++)
            q[i] = 0xabcULL * (uint64_t)(i + 101);
        sb_sched_request rb = {.pool = 0, .adapter = -1, .block_hashes = q, .n_blocks = 8, .prompt_tokens = 1000};
        int eb = sb_router_pick(r, &rb, SB_MS(1600));
        sb_ticket tb = sb_router_dispatched(r, 0, (uint32_t)eb, 1000, SB_MS(1600));
        sb_router_first_token_unseen(r, 0, (uint32_t)eb, &tb, SB_MS(1600));
        sb_router_pick(r, &rb, SB_MS(1690));
        const sb_decision *db = sb_router_last_decision(r, 0);
        assert_true(db->cands[eb].total == db->cands[(eb + 1) % 4].total);
        assert_int_equal(sb_router_pick(r, &rb, SB_MS(1710)), eb);
        sb_router_finished(r, 0, (uint32_t)eb, &tb, true, true, SB_MS(1720));
        for (uint32_t e = 0; e < 4; e++)
            for (int k = 0; k < 20; k++)
                sb_router_finished(r, 0, e, &busy[e][k], true, true, SB_MS(1720));
    }
    /* Bounded: with two marks waiting, a third settles the earliest-due one at once. */
    sb_ticket tk[3];
    int ep[3];
    for (int k = 1; k < 3; k++) {
        rq.block_hashes = h[k];
        ep[k] = sb_router_pick(r, &rq, SB_MS(2000));
        tk[k] = sb_router_dispatched(r, 0, (uint32_t)ep[k], 10000, SB_MS(2000));
        assert_true(tk[k].has_prefix_pending);
        sb_router_first_token_unseen(r, 0, (uint32_t)ep[k], &tk[k], SB_MS(2000));
    }
    uint64_t g[8];
    for (int i = 0; i < 8; i++)
        g[i] = 0xfeedULL * (uint64_t)(i + 1);
    rq.block_hashes = g;
    int eg = sb_router_pick(r, &rq, SB_MS(2001));
    sb_ticket tg = sb_router_dispatched(r, 0, (uint32_t)eg, 10000, SB_MS(2001));
    sb_router_first_token_unseen(r, 0, (uint32_t)eg, &tg, SB_MS(2001));
    /* Long before any of them is due, one of the first two matches already. */
    int settled = 0;
    for (int k = 1; k < 3; k++) {
        rq.block_hashes = h[k];
        sb_router_pick(r, &rq, SB_MS(2002));
        d = sb_router_last_decision(r, 0);
        settled += d->cands[ep[k]].total > d->cands[(ep[k] + 1) % 4].total;
    }
    assert_int_equal(settled, 1);
    sb_router_free(r);
}

/* The hash secret keys the model table and the prefix indexes: resolution and decisions are
 * the same under any secret (the seed alone drives random choices). */
static void test_secret_changes_placement_only(void **state)
{
    (void)state;
    enum { K = 2, E = 4 };
    sb_router *r[K];
    for (int k = 0; k < K; k++) {
        r[k] = sb_router_new(42, k == 0 ? 1 : 0x9e3779b97f4a7c15ULL);
        assert_int_equal(sb_router_add_pool(r[k], "p", sb_profile_builtin("default"), E, NULL), 0);
        assert_int_equal(sb_router_add_pool(r[k], "q", RR, 2, NULL), 1);
        char name[32];
        for (int i = 0; i < 300; i++) {
            snprintf(name, sizeof(name), "model-%d", i);
            assert_int_equal(
                sb_router_add_model(r[k], (uint32_t)(i % 2), name, i < 2 ? SB_MODEL_SERVED : SB_MODEL_ALIAS), 0);
        }
    }
    char name[32];
    for (int i = 0; i < 400; i++) {
        snprintf(name, sizeof(name), "model-%d", i);
        sb_model_match m[K];
        int rc0 = sb_router_resolve(r[0], name, strlen(name), &m[0]);
        assert_int_equal(sb_router_resolve(r[1], name, strlen(name), &m[1]), rc0);
        if (rc0 == 0) {
            assert_int_equal(m[1].pool, m[0].pool);
            assert_string_equal(m[1].name, m[0].name);
            assert_memory_equal(m[1].served, m[0].served, m[0].served_len);
        }
    }
    /* Prompts from a few families: prefix hits, ties, load. */
    uint64_t x = 3, h[32];
    sb_ticket t[K][16];
    int ep[K][16];
    memset(ep, -1, sizeof(ep));
    for (sb_ns now = 1; now < 3000; now++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t n = 1 + (x >> 59);
        for (size_t i = 0; i < n; i++)
            h[i] = ((x >> 40) % 12 + 1) * 0x100000001b3ULL + i * 0x9E3779B97F4A7C15ULL;
        sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = h, .n_blocks = n, .prompt_tokens = 16 * n};
        int slot = (int)(now % 16);
        for (int k = 0; k < K; k++) {
            if (ep[k][slot] >= 0)
                sb_router_finished(r[k], 0, (uint32_t)ep[k][slot], &t[k][slot], true, true, now);
            int a = sb_router_pick(r[k], &rq, now);
            ep[k][slot] = a;
            if (a >= 0) {
                t[k][slot] = sb_router_dispatched(r[k], 0, (uint32_t)a, 16 * (uint32_t)n, now);
                if (now % 3)
                    sb_router_first_token(r[k], 0, (uint32_t)a, &t[k][slot]);
            }
        }
        assert_int_equal(ep[1][slot], ep[0][slot]);
        const sb_decision *d0 = sb_router_last_decision(r[0], 0), *d1 = sb_router_last_decision(r[1], 0);
        assert_int_equal(d1->n, d0->n);
        for (size_t i = 0; i < d0->n; i++)
            assert_true(d1->cands[i].total == d0->cands[i].total);
    }
    const struct sb_prefix_index *i0 = sb_router_prefix_index(r[0], 0), *i1 = sb_router_prefix_index(r[1], 0);
    assert_true(sb_prefix_index_entries(i0) > 0);
    assert_int_equal(sb_prefix_index_entries(i1), sb_prefix_index_entries(i0));
    for (uint32_t e = 0; e < E; e++)
        assert_int_equal(sb_prefix_index_endpoint_entries(i1, e), sb_prefix_index_endpoint_entries(i0, e));
    for (int k = 0; k < K; k++)
        sb_router_free(r[k]);
}

/* Fails one request on ep of pool 0 at now. */
static void fail_one(sb_router *r, uint32_t ep, sb_ns now)
{
    sb_ticket t = sb_router_dispatched(r, 0, ep, 10, now);
    sb_router_finished(r, 0, ep, &t, false, true, now);
}

/* max_eject_percent: in a pool of 4 at 50%, two may be ejected; a third failing endpoint
 * stays in (its requests would be retried elsewhere) until one comes back. */
static void test_ejection_bound_per_pool(void **state)
{
    (void)state;
    sb_router *r = make_router(RR, 4); /* default params: 3 in a row, at most 50% */
    for (uint32_t ep = 0; ep < 3; ep++)
        for (int i = 0; i < 3; i++)
            fail_one(r, ep, 100);
    assert_true(sb_endpoint_outlier_ejected(sb_router_endpoint(r, 0, 0)));
    assert_true(sb_endpoint_outlier_ejected(sb_router_endpoint(r, 0, 1)));
    assert_false(sb_endpoint_outlier_ejected(sb_router_endpoint(r, 0, 2)));
    assert_int_equal(sb_router_endpoint(r, 0, 2)->consecutive_failures, 3);
    /* One readmitted by its health check: room for the next. */
    sb_endpoint_active_check(sb_router_endpoint(r, 0, 0), true, 200);
    fail_one(r, 2, 300);
    assert_true(sb_endpoint_outlier_ejected(sb_router_endpoint(r, 0, 2)));
    /* A pool of one may always eject its one endpoint. */
    for (int i = 0; i < 3; i++) {
        sb_ticket t = sb_router_dispatched(r, 1, 0, 10, 100);
        sb_router_finished(r, 1, 0, &t, false, true, 100);
    }
    assert_true(sb_endpoint_outlier_ejected(sb_router_endpoint(r, 1, 0)));
    sb_router_free(r);
}

/* Panic routing: when every endpoint is ejected or down the pick goes over all of them (and
 * says so, and counts it) instead of none; draining endpoints never take a request. */
static void test_panic_routing(void **state)
{
    (void)state;
    sb_router *r = make_router(RR, 3);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    for (uint32_t ep = 0; ep < 3; ep++)
        sb_endpoint_active_check(sb_router_endpoint(r, 0, ep), false, 100);
    assert_true(sb_router_pool_available(r, 0, 100));
    int ep = sb_router_pick(r, &rq, 100);
    assert_in_range(ep, 0, 2);
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_true(d->panic);
    assert_non_null(strstr(d->reason, "panic"));
    assert_true(d->cands[ep].panic);
    assert_int_equal(sb_router_pool_panics(r, 0), 1);
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(d, &b), 0);
    assert_non_null(strstr(b.data, "\"panic\":true"));
    sb_buf_free(&b);
    /* Excluding the tried ones, the panic goes over the rest. */
    uint32_t ex[2] = {0, 1};
    rq.exclude = ex;
    rq.n_exclude = 2;
    assert_int_equal(sb_router_pick(r, &rq, 100), 2);
    rq.n_exclude = 0;
    /* One healthy endpoint: no panic, it takes everything. */
    sb_endpoint_active_check(sb_router_endpoint(r, 0, 1), true, 200);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sb_router_pick(r, &rq, 200), 1);
    assert_false(sb_router_last_decision(r, 0)->panic);
    assert_int_equal(sb_router_pool_panics(r, 0), 2);
    /* Draining is the operator's word: never routed to, even in panic. */
    for (uint32_t e = 0; e < 3; e++)
        sb_router_endpoint(r, 0, e)->draining = true;
    assert_false(sb_router_pool_available(r, 0, 300));
    assert_int_equal(sb_router_pick(r, &rq, 300), -1);
    sb_router_endpoint(r, 0, 0)->draining = false; /* down, not draining */
    assert_int_equal(sb_router_pick(r, &rq, 300), 0);
    sb_router_free(r);
}

/* Stale but serving: under the default profile (the gate filter drops stale endpoints), an
 * endpoint whose reports stopped but whose requests succeed is kept and scored from its own
 * in-flight count; one stale and failing is dropped. */
static void test_stale_but_serving_keeps_share(void **state)
{
    (void)state;
    const sb_ns now = SB_MS(60000);
    sb_router *r = make_router(sb_profile_builtin("default"), 3);
    sb_sched_request rq = {.pool = 0, .adapter = -1};
    sb_endpoint_report rep = {
        .have_waiting = true, .waiting = 0, .have_running = true, .running = 0, .requests_total = -1};
    /* 0 and 1 report freshly; 2 reported long ago (its /metrics hangs) but answers. */
    sb_endpoint_report_set(sb_router_endpoint(r, 0, 0), &rep, SB_REPORT_SCRAPE, now);
    sb_endpoint_report_set(sb_router_endpoint(r, 0, 1), &rep, SB_REPORT_SCRAPE, now);
    rep.waiting = 50; /* its last report said it was loaded: no longer believed */
    sb_endpoint_report_set(sb_router_endpoint(r, 0, 2), &rep, SB_REPORT_SCRAPE, SB_MS(1000));
    sb_ticket t = sb_router_dispatched(r, 0, 2, 10, now - SB_MS(500));
    sb_router_finished(r, 0, 2, &t, true, true, now - SB_MS(400));
    int seen[3] = {0};
    sb_ticket tk[30];
    int eps[30];
    for (int i = 0; i < 30; i++) {
        eps[i] = sb_router_pick(r, &rq, now);
        assert_in_range(eps[i], 0, 2);
        seen[eps[i]]++;
        tk[i] = sb_router_dispatched(r, 0, (uint32_t)eps[i], 10, now);
    }
    assert_true(seen[2] >= 5); /* a share, from its own in-flight count */
    const sb_decision *d = sb_router_last_decision(r, 0);
    assert_true(d->cands[2].serving);
    assert_null(d->cands[2].removed_by);
    sb_buf b = {0};
    assert_int_equal(sb_decision_render(d, &b), 0);
    assert_non_null(strstr(b.data, "\"serving\":true"));
    sb_buf_free(&b);
    for (int i = 0; i < 30; i++)
        sb_router_finished(r, 0, (uint32_t)eps[i], &tk[i], true, true, now + 1);
    /* Its latest request fails: stale and failing, it is dropped. */
    t = sb_router_dispatched(r, 0, 2, 10, now + 2);
    sb_router_finished(r, 0, 2, &t, false, true, now + 3);
    for (int i = 0; i < 10; i++) {
        assert_int_not_equal(sb_router_pick(r, &rq, now + 4), 2);
        assert_string_equal(sb_router_last_decision(r, 0)->cands[2].removed_by, "gate");
    }
    sb_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_remap_prefix_index_between_routers),
        cmocka_unit_test(test_ejection_bound_per_pool),
        cmocka_unit_test(test_panic_routing),
        cmocka_unit_test(test_stale_but_serving_keeps_share),
        cmocka_unit_test(test_prefix_pending_until_first_token),
        cmocka_unit_test(test_kv_fusion),
        cmocka_unit_test(test_hot_prefix_in_the_decision),
        cmocka_unit_test(test_hot_prefix_counts_a_repeat_once),
        cmocka_unit_test(test_hot_prefix_needed_is_this_routers_share),
        cmocka_unit_test(test_hot_prefix_share_forgets_a_silent_endpoint),
        cmocka_unit_test(test_restart_clears_reports_unless_stream_did),
        cmocka_unit_test(test_sent_tokens_count_uncached),
        cmocka_unit_test(test_prefix_capacity_follows_traffic_share),
        cmocka_unit_test(test_prefix_calibrate),
        cmocka_unit_test(test_prefix_calibrate_then_share),
        cmocka_unit_test(test_prefix_pending_settled_by_time_when_unseen),
        cmocka_unit_test(test_many_models_grow_table),
        cmocka_unit_test(test_secret_changes_placement_only),
        cmocka_unit_test(test_round_robin_cycles_and_skips_excluded),
        cmocka_unit_test(test_least_request_follows_in_flight),
        cmocka_unit_test(test_least_request_ties_spread_evenly),
        cmocka_unit_test(test_accounting_never_underflows),
        cmocka_unit_test(test_peer_dispatched),
        cmocka_unit_test(test_pool_saturated_needs_evidence),
        cmocka_unit_test(test_gated_request_uses_gate_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
