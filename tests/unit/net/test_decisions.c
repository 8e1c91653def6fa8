/* decisions: the ring of recent decisions (net/decisions.h) and the records it keeps
 * (core/explain.h), driven by a real router's picks; no loop, no clock. */
#include "sb_test.h"

#include <dirent.h>

#include "core/explain.h"
#include "core/router.h"
#include "net/decisions.h"
#include "proto/config.h"
#include "proto/json.h"

static char addr_buf[8][48];

/* A pool "chat" of n endpoints (n <= 8) named 10.0.0.<i>:8000, under `default`; pool 1 "embed". */
static sb_router *make_router(size_t n)
{
    sb_router *r = sb_router_new(7, 0x5ec7e7);
    assert_non_null(r);
    assert_int_equal(sb_router_add_pool(r, "chat", sb_profile_builtin("default"), n, NULL), 0);
    assert_int_equal(sb_router_add_pool(r, "embed", sb_profile_builtin("least-request"), 1, NULL), 1);
    for (size_t i = 0; i < n; i++) {
        snprintf(addr_buf[i], sizeof addr_buf[i], "10.0.0.%zu:8000", i);
        sb_endpoint *e = sb_router_endpoint(r, 0, (uint32_t)i);
        e->address = addr_buf[i];
        sb_endpoint_report rep = {
            .have_waiting = true, .waiting = (double)i, .have_running = true, .running = 1, .requests_total = -1};
        sb_endpoint_report_set(e, &rep, SB_REPORT_SCRAPE, SB_MS(1000));
    }
    sb_router_endpoint(r, 1, 0)->address = "emb:1";
    return r;
}

static const sb_decision *pick(sb_router *r, uint32_t pool)
{
    sb_sched_request rq = {.pool = pool, .adapter = -1};
    sb_router_pick(r, &rq, SB_MS(1100));
    return sb_router_last_decision(r, pool);
}

static void assert_json(const sb_buf *b)
{
    sb_json j = {0};
    if (sb_json_parse(&j, b->data, b->len) < 1)
        fail_msg("invalid JSON: %s", b->data);
    sb_json_free(&j);
}

static void test_record_renders_names_scores_outcome(void **state)
{
    (void)state;
    sb_router *r = make_router(3);
    sb_decisions *ring = sb_decisions_new(4, 16);
    assert_non_null(ring);
    sb_decision_ref ref = sb_decisions_record(ring, pick(r, 0), "req-1", "meta/llama", 1700000000123);
    assert_ptr_equal(ref.ring, ring);
    assert_int_equal(sb_decisions_count(ring), 1);
    const sb_explain *e = sb_decisions_find(ring, "req-1", 5);
    assert_non_null(e);
    sb_buf b = {0};
    assert_int_equal(sb_explain_render(e, SB_EXPLAIN_FULL, &b), 0);
    assert_json(&b);
    const char *want[] = {"{\"id\":\"req-1\",\"at_ms\":1700000000123,\"model\":\"meta/llama\",\"pool\":\"chat\"",
                          "\"profile\":\"default\"",
                          "\"picked\":\"10.0.0.0:8000\",\"picked_index\":0",
                          "{\"endpoint\":\"10.0.0.2:8000\",\"index\":2,",
                          "\"scores\":{\"",
                          "\"outcome\":null"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(b.data, want[i]))
            fail_msg("missing %s in %s", want[i], b.data);
    /* The outcome lands in the same record, and the request's reference goes. */
    sb_decisions_finish(&ref, 200, 12.5, 2, "10.0.0.1:8000");
    assert_null(ref.ring);
    sb_buf_reset(&b);
    assert_int_equal(sb_explain_render(e, SB_EXPLAIN_FULL, &b), 0);
    assert_json(&b);
    assert_non_null(strstr(
        b.data, "\"outcome\":{\"status\":200,\"ttft_ms\":12.500,\"attempts\":2,\"served_by\":\"10.0.0.1:8000\"}"));
    /* The access log's shape: the decision alone, no id or outcome. */
    sb_buf_reset(&b);
    assert_int_equal(sb_decision_render(sb_router_last_decision(r, 0), &b), 0);
    assert_json(&b);
    assert_true(!strncmp(b.data, "{\"pool\":\"chat\",", 15));
    assert_null(strstr(b.data, "\"outcome\""));
    sb_buf_free(&b);
    sb_decisions_release(ring);
    sb_router_free(r);
}

/* The record is a copy: the router's scratch and the endpoints' strings may change or go. */
static void test_record_outlives_router(void **state)
{
    (void)state;
    sb_router *r = make_router(2);
    sb_decisions *ring = sb_decisions_new(2, 16);
    sb_decision_ref ref = sb_decisions_record(ring, pick(r, 0), "a", "m", 1);
    strcpy(addr_buf[0], "changed:1");
    pick(r, 1); /* another pool's pick, then the router goes */
    sb_router_free(r);
    const sb_explain *e = sb_decisions_newest(ring, 0);
    sb_buf b = {0};
    assert_int_equal(sb_explain_render(e, SB_EXPLAIN_FULL, &b), 0);
    assert_non_null(strstr(b.data, "\"endpoint\":\"10.0.0.0:8000\""));
    assert_null(strstr(b.data, "changed"));
    sb_buf_free(&b);
    sb_decisions_finish(&ref, 200, -1, 1, NULL);
    sb_buf b2 = {0};
    sb_explain_render(e, SB_EXPLAIN_FULL, &b2);
    assert_non_null(strstr(b2.data, "\"ttft_ms\":null,\"attempts\":1,\"served_by\":null"));
    sb_buf_free(&b2);
    sb_decisions_release(ring);
}

/* The longest names the configuration accepts are kept whole (issue 16: a 253-byte host name
 * was cut at 95 bytes, a pool name at 63 when the configuration did not bound it). */
static void test_longest_names_kept_whole(void **state)
{
    (void)state;
    char pool[SB_POOL_NAME_MAX], addr[253 + 7], served[253 + 7];
    memset(pool, 'p', sizeof pool - 1);
    pool[sizeof pool - 1] = '\0';
    memset(addr, 'h', 253);
    strcpy(addr + 253, ":65535");
    memcpy(served, addr, sizeof addr);
    served[0] = 's';
    sb_router *r = sb_router_new(7, 1);
    assert_int_equal(sb_router_add_pool(r, pool, sb_profile_builtin("round-robin"), 1, NULL), 0);
    sb_router_endpoint(r, 0, 0)->address = addr;
    sb_decisions *ring = sb_decisions_new(2, 4);
    sb_decision_ref ref = sb_decisions_record(ring, pick(r, 0), "long", "m", 1);
    sb_decisions_finish(&ref, 200, 1, 1, served);
    const sb_explain *e = sb_decisions_newest(ring, 0);
    assert_string_equal(e->pool, pool);
    assert_string_equal(e->cands[0].endpoint, addr);
    assert_string_equal(e->outcome.served_by, served);
    sb_decisions_release(ring);
    sb_router_free(r);
}

/* Past capacity the oldest goes: newest first, the evicted one unknown; a late outcome for an
 * evicted record is dropped, never written into the record that took its slot. */
static void test_wrap_and_generation_guard(void **state)
{
    (void)state;
    sb_router *r = make_router(2);
    sb_decisions *ring = sb_decisions_new(3, 16);
    sb_decision_ref refs[5];
    char id[16];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "r%d", i);
        refs[i] = sb_decisions_record(ring, pick(r, 0), id, "m", i);
    }
    assert_int_equal(sb_decisions_count(ring), 3);
    assert_string_equal(sb_decisions_newest(ring, 0)->id, "r4");
    assert_string_equal(sb_decisions_newest(ring, 2)->id, "r2");
    assert_null(sb_decisions_newest(ring, 3));
    assert_null(sb_decisions_find(ring, "r0", 2));
    assert_null(sb_decisions_find(ring, "r1", 2));
    assert_non_null(sb_decisions_find(ring, "r2", 2));
    /* r0's slot now holds r3: r0's outcome must not land there. */
    assert_int_equal(refs[0].slot, refs[3].slot);
    sb_decisions_finish(&refs[0], 503, 1, 1, "x:1");
    assert_false(sb_decisions_find(ring, "r3", 2)->outcome.set);
    sb_decisions_finish(&refs[3], 200, 1, 1, "y:1");
    assert_true(sb_decisions_find(ring, "r3", 2)->outcome.set);
    assert_int_equal(sb_decisions_find(ring, "r3", 2)->outcome.status, 200);
    for (int i = 1; i < 5; i++)
        if (i != 3)
            sb_decisions_drop(&refs[i]);
    sb_decisions_release(ring);
    sb_router_free(r);
}

/* A fallback's decision says where the request came from and why; a record whose slot was
 * reused is not marked (the mark follows the generation, like an outcome); a new record of
 * the slot starts unmarked. */
static void test_fallback_mark(void **state)
{
    (void)state;
    sb_router *r = make_router(2);
    sb_decisions *ring = sb_decisions_new(1, 16);
    sb_decision_ref a = sb_decisions_record(ring, pick(r, 1), "fb-1", "m", 1);
    sb_decisions_fallback(&a, "chat", "saturated");
    sb_buf b = {0};
    assert_int_equal(sb_explain_render(sb_decisions_find(ring, "fb-1", 4), SB_EXPLAIN_FULL, &b), 0);
    assert_json(&b);
    assert_non_null(strstr(b.data, "\"pool\":\"embed\","));
    assert_non_null(strstr(b.data, ",\"fallback\":{\"from\":\"chat\",\"reason\":\"saturated\"},"));
    sb_decision_ref c = sb_decisions_record(ring, pick(r, 0), "plain", "m", 2); /* takes a's slot */
    sb_decisions_fallback(&a, "chat", "failed");
    sb_buf_reset(&b);
    assert_int_equal(sb_explain_render(sb_decisions_find(ring, "plain", 5), SB_EXPLAIN_FULL, &b), 0);
    assert_null(strstr(b.data, "\"fallback\""));
    sb_buf_free(&b);
    sb_decisions_drop(&a);
    sb_decisions_drop(&c);
    sb_decisions_release(ring);
    sb_router_free(r);
}

/* Look-ups: exact ids only (no prefix match), newest of a repeated id, bounded lengths. */
static void test_lookup_misses(void **state)
{
    (void)state;
    sb_router *r = make_router(1);
    sb_decisions *ring = sb_decisions_new(8, 4);
    assert_null(sb_decisions_find(ring, "x", 1)); /* empty */
    sb_decision_ref a = sb_decisions_record(ring, pick(r, 0), "abc", "m", 1);
    sb_decision_ref b = sb_decisions_record(ring, pick(r, 0), "abc", "m", 2);
    assert_null(sb_decisions_find(ring, "ab", 2));
    assert_null(sb_decisions_find(ring, "abcd", 4));
    assert_int_equal(sb_decisions_find(ring, "abc", 3)->at_ms, 2);
    char longid[300];
    memset(longid, 'z', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    sb_decision_ref c = sb_decisions_record(ring, pick(r, 0), longid, longid, 3);
    const sb_explain *e = sb_decisions_newest(ring, 0);
    assert_int_equal(strlen(e->id), SB_EXPLAIN_ID_MAX);
    assert_int_equal(strlen(e->model), SB_EXPLAIN_MODEL_MAX);
    assert_null(sb_decisions_find(ring, longid, strlen(longid)));
    sb_decisions_drop(&a);
    sb_decisions_drop(&b);
    sb_decisions_drop(&c);
    /* No ring: nothing recorded, nothing to finish. */
    sb_decision_ref z = sb_decisions_record(NULL, pick(r, 0), "q", "m", 1);
    assert_null(z.ring);
    sb_decisions_finish(&z, 200, 1, 1, NULL);
    assert_null(sb_decisions_new(0, 4));
    sb_decisions_release(ring);
    sb_router_free(r);
}

/* The ring lives while a request holds it: released by its gateway, it goes with the last. */
static void test_reference_outlives_owner(void **state)
{
    (void)state;
    sb_router *r = make_router(1);
    sb_decisions *ring = sb_decisions_new(2, 4);
    sb_decision_ref ref = sb_decisions_record(ring, pick(r, 0), "late", "m", 1);
    sb_decisions_release(ring);                            /* the owner's (a reload replaced it) */
    sb_decisions_finish(&ref, 200, 3, 1, "10.0.0.0:8000"); /* ASan: no use after free, no leak */
    sb_router_free(r);
}

/* A pool larger than a record keeps the pick and the best-scored others, in pool order. */
static void test_candidates_bounded(void **state)
{
    (void)state;
    sb_router *r = make_router(8);
    const sb_decision *d = pick(r, 0);
    sb_decisions *ring = sb_decisions_new(1, 3);
    sb_decision_ref ref = sb_decisions_record(ring, d, "big", "m", 1);
    const sb_explain *e = sb_decisions_newest(ring, 0);
    assert_int_equal(e->n_cands, 3);
    assert_int_equal(e->omitted, 5);
    assert_true(e->picked >= 0);
    assert_int_equal(e->cands[e->picked].index, (uint32_t)d->picked);
    for (uint32_t k = 1; k < e->n_cands; k++)
        assert_true(e->cands[k - 1].index < e->cands[k].index);
    /* the kept others score at least as high as any left out */
    float kept_min = 2;
    for (uint32_t k = 0; k < e->n_cands; k++)
        if ((int32_t)k != e->picked && e->cands[k].total < kept_min)
            kept_min = e->cands[k].total;
    for (size_t i = 0; i < d->n; i++) {
        bool kept = false;
        for (uint32_t k = 0; k < e->n_cands; k++)
            kept |= e->cands[k].index == i;
        if (!kept && !d->cands[i].removed_by)
            assert_true((float)d->cands[i].total <= kept_min);
    }
    sb_buf b = {0};
    sb_explain_render(e, SB_EXPLAIN_FULL, &b);
    assert_json(&b);
    assert_non_null(strstr(b.data, "\"omitted\":5"));
    sb_buf_free(&b);
    sb_decisions_drop(&ref);
    sb_decisions_release(ring);
    sb_router_free(r);
}

static void expect_query_error(const char *q, const char *msg)
{
    sb_decisions_query dq;
    char err[160] = "";
    if (sb_decisions_query_parse(q, strlen(q), 512, &dq, err, sizeof err) != -1)
        fail_msg("query '%s' accepted", q);
    if (!strstr(err, msg))
        fail_msg("query '%s': '%s' lacks '%s'", q, err, msg);
}

static void test_query(void **state)
{
    (void)state;
    sb_decisions_query dq;
    char err[160];
    assert_int_equal(sb_decisions_query_parse("", 0, 512, &dq, err, sizeof err), 0);
    assert_int_equal(dq.limit, SB_DECISIONS_DEFAULT_LIMIT);
    assert_int_equal(dq.id_len, 0);
    assert_false(dq.has_pool);
    assert_int_equal(sb_decisions_query_parse("", 0, 8, &dq, err, sizeof err), 0);
    assert_int_equal(dq.limit, 8);
    const char *q = "pool=my%20pool&limit=7";
    assert_int_equal(sb_decisions_query_parse(q, strlen(q), 512, &dq, err, sizeof err), 0);
    assert_string_equal(dq.pool, "my pool");
    assert_int_equal(dq.limit, 7);
    q = "id=a%2Fb+c";
    assert_int_equal(sb_decisions_query_parse(q, strlen(q), 512, &dq, err, sizeof err), 0);
    assert_string_equal(dq.id, "a/b c");
    assert_int_equal(dq.id_len, 5);
    /* a query is parsed within its bounds: what follows len is not read */
    assert_int_equal(sb_decisions_query_parse("limit=5&junk", 7, 512, &dq, err, sizeof err), 0);
    assert_int_equal(dq.limit, 5);
    expect_query_error("verbose=1", "unknown parameter 'verbose'");
    expect_query_error("limit=1&limit=2", "given twice");
    expect_query_error("limit", "needs a value");
    expect_query_error("id=", "needs a value");
    /* past the ring: clamped (the dashboard asks for 50 whatever admin.decisions is) */
    assert_int_equal(sb_decisions_query_parse("limit=513", 9, 512, &dq, err, sizeof err), 0);
    assert_int_equal(dq.limit, 512);
    assert_int_equal(sb_decisions_query_parse("limit=50", 8, 1, &dq, err, sizeof err), 0);
    assert_int_equal(dq.limit, 1);
    expect_query_error("limit=0", "positive integer");
    expect_query_error("limit=-1", "positive integer");
    expect_query_error("limit=5x", "positive integer");
    expect_query_error("limit=abc", "positive integer");
    expect_query_error("limit=99999999999999999999999", "longer than");
    expect_query_error("id=%4", "malformed");
    expect_query_error("id=%zz", "malformed");
    expect_query_error("id=a%00b", "malformed");
    expect_query_error("id=x&limit=3", "alone");
    expect_query_error("&", "unknown parameter ''");
    char longid[200] = "id=";
    memset(longid + 3, 'a', 129);
    expect_query_error(longid, "longer than 128 bytes");
}

/* The fuzz target's corpus (tests/fuzz/fuzz_decisions_query.c), replayed: every input parses or
 * is refused with a message, within bounds. */
static void test_query_corpus_replay(void **state)
{
    (void)state;
    DIR *d = opendir("tests/fuzz/corpus/decisions_query");
    if (!d)
        fail_msg("cannot open tests/fuzz/corpus/decisions_query (run from the repository root)");
    int files = 0, accepted = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "tests/fuzz/corpus/decisions_query/%s", e->d_name);
        size_t len;
        char *data = sb_test_read_file(path, &len);
        sb_decisions_query dq;
        char err[160] = "";
        int rc = sb_decisions_query_parse(data, len, 512, &dq, err, sizeof err);
        if (rc == 0) {
            accepted++;
            assert_true(dq.limit >= 1 && dq.limit <= 512);
            assert_int_equal(strlen(dq.id), dq.id_len);
        } else {
            assert_int_equal(rc, -1);
            assert_true(err[0] != '\0');
        }
        free(data);
        files++;
    }
    closedir(d);
    assert_true(files >= 10);
    assert_true(accepted >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_renders_names_scores_outcome),
        cmocka_unit_test(test_record_outlives_router),
        cmocka_unit_test(test_longest_names_kept_whole),
        cmocka_unit_test(test_wrap_and_generation_guard),
        cmocka_unit_test(test_fallback_mark),
        cmocka_unit_test(test_lookup_misses),
        cmocka_unit_test(test_reference_outlives_owner),
        cmocka_unit_test(test_candidates_bounded),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_query_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
