/* Tests proto/agent_report: the agent's report body, well formed and hostile. */
#include "sb_test.h"

#include <dirent.h>

#include "base/buf.h"

#include "proto/agent_report.h"

static _Alignas(int) char scratch[SB_AGENT_SCRATCH_BYTES];
static char err[256];

static int parse(const char *s, sb_agent_report *r)
{
    return sb_agent_report_parse(s, strlen(s), scratch, sizeof scratch, r, err, sizeof err);
}

static void test_full_report(void **state)
{
    (void)state;
    static sb_agent_report r;
    assert_int_equal(parse("{\"agent\":\"a1\",\"address\":\"127.0.0.1:8000\",\"engine\":\"llama.cpp\","
                           "\"models\":[\"m1\",\"m\\u0032\"],\"slots\":{\"total\":4,\"idle\":1},\"queue\":2,"
                           "\"running\":3,\"kv_usage\":0.25,\"seq\":17,\"interval_ms\":500,\"future\":{\"x\":[1]}}",
                           &r),
                     0);
    assert_string_equal(r.agent, "a1");
    assert_string_equal(r.address, "127.0.0.1:8000");
    assert_string_equal(r.engine, "llama.cpp");
    assert_int_equal(r.n_models, 2);
    assert_string_equal(r.models[1], "m2");
    assert_true(r.have_slots && r.slots_total == 4 && r.slots_idle == 1);
    assert_true(r.have_queue && r.queue == 2 && r.have_running && r.running == 3);
    assert_true(r.have_kv && r.kv_usage == 0.25);
    assert_true(r.have_seq && r.seq == 17);
    assert_int_equal(r.interval_ms, 500);
}

static void test_minimal_and_nulls(void **state)
{
    (void)state;
    static sb_agent_report r;
    assert_int_equal(parse("{\"address\":\"h:1\",\"slots\":null,\"queue\":null}", &r), 0);
    assert_false(r.have_slots || r.have_queue || r.have_running || r.have_kv || r.have_seq);
    assert_int_equal(r.n_models, 0);
    assert_string_equal(r.agent, "");
    /* The last duplicate wins. */
    assert_int_equal(parse("{\"address\":\"a:1\",\"address\":\"b:2\"}", &r), 0);
    assert_string_equal(r.address, "b:2");
}

/* Each hostile body is refused with a sentence, never a crash or a silent truncation. */
static void test_hostile(void **state)
{
    (void)state;
    static sb_agent_report r;
    static const char *const bad[] = {
        "",
        "[]",
        "\"x\"",
        "{\"address\":\"h:1\"",
        "{}",
        "{\"address\":\"\"}",
        "{\"address\":7}",
        "{\"address\":\"h\\u0000:1\"}",
        "{\"address\":\"h\\n:1\"}",
        "{\"address\":\"h:1\",\"slots\":{\"total\":2,\"idle\":3}}",
        "{\"address\":\"h:1\",\"slots\":{\"total\":2}}",
        "{\"address\":\"h:1\",\"slots\":[2,1]}",
        "{\"address\":\"h:1\",\"slots\":{\"total\":-1,\"idle\":0}}",
        "{\"address\":\"h:1\",\"slots\":{\"total\":1.5,\"idle\":0}}",
        "{\"address\":\"h:1\",\"slots\":{\"total\":1e300,\"idle\":0}}",
        "{\"address\":\"h:1\",\"queue\":true}",
        "{\"address\":\"h:1\",\"queue\":\"3\"}",
        "{\"address\":\"h:1\",\"kv_usage\":1.5}",
        "{\"address\":\"h:1\",\"kv_usage\":-0.1}",
        "{\"address\":\"h:1\",\"seq\":-1}",
        "{\"address\":\"h:1\",\"interval_ms\":99999999}",
        "{\"address\":\"h:1\",\"models\":\"m\"}",
        "{\"address\":\"h:1\",\"models\":[1]}",
        "{\"address\":\"h:1\",\"models\":[\"\"]}",
        "{\"address\":\"h:1\",\"x\":[[[[1]]]]}",
        "{\"address\":\"h:1\"} {}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (parse(bad[i], &r) != SB_AGENT_REPORT_BAD)
            fail_msg("accepted: %s", bad[i]);
        assert_true(err[0] != '\0');
    }
}

static void test_bounds(void **state)
{
    (void)state;
    static sb_agent_report r;
    static char body[8192];
    /* An address one byte too long is refused, not cut. */
    char addr[SB_AGENT_ADDRESS_MAX + 1];
    memset(addr, 'a', SB_AGENT_ADDRESS_MAX);
    addr[SB_AGENT_ADDRESS_MAX] = '\0';
    snprintf(body, sizeof body, "{\"address\":\"%s\"}", addr);
    assert_int_equal(parse(body, &r), SB_AGENT_REPORT_BAD);
    addr[SB_AGENT_ADDRESS_MAX - 1] = '\0';
    snprintf(body, sizeof body, "{\"address\":\"%s\"}", addr);
    assert_int_equal(parse(body, &r), 0);
    /* More models than the bound. */
    size_t n = (size_t)snprintf(body, sizeof body, "{\"address\":\"h:1\",\"models\":[");
    for (int i = 0; i <= SB_AGENT_MAX_MODELS; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"m%d\"", i ? "," : "", i);
    snprintf(body + n, sizeof body - n, "]}");
    assert_int_equal(parse(body, &r), SB_AGENT_REPORT_BAD);
    /* More JSON values than the token bound: refused whatever their shape. */
    n = (size_t)snprintf(body, sizeof body, "{\"address\":\"h:1\",\"x\":[");
    for (int i = 0; i < SB_AGENT_MAX_TOKENS; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s1", i ? "," : "");
    snprintf(body + n, sizeof body - n, "]}");
    assert_int_equal(parse(body, &r), SB_AGENT_REPORT_BAD);
    assert_non_null(strstr(err, "more than"));
}

/* Rendered reports parse back to the same fields (the agent writes what the gateway reads). */
static void test_render_round_trip(void **state)
{
    (void)state;
    static sb_agent_report r, back;
    assert_int_equal(parse("{\"agent\":\"a \\\"q\\\"\",\"address\":\"[::1]:8000\",\"models\":[\"m\\u00e9\"],"
                           "\"slots\":{\"total\":8,\"idle\":8},\"kv_usage\":0.5,\"seq\":3}",
                           &r),
                     0);
    sb_buf b = {0};
    assert_int_equal(sb_agent_report_render(&r, &b), 0);
    assert_int_equal(sb_agent_report_parse(b.data, b.len, scratch, sizeof scratch, &back, err, sizeof err), 0);
    assert_string_equal(back.agent, "a \"q\"");
    assert_string_equal(back.models[0], "m\xc3\xa9");
    assert_true(back.have_slots && back.slots_idle == 8 && back.kv_usage == 0.5 && back.seq == 3);
    assert_false(back.have_queue);
    sb_buf_free(&b);
}

static void test_models_list(void **state)
{
    (void)state;
    static sb_agent_report r;
    const char *body = "{\"object\":\"list\",\"data\":[{\"id\":\"a\"},7,{\"id\":\"\"},{\"id\":\"b\"}]}";
    assert_int_equal(sb_agent_models_parse(body, strlen(body), scratch, sizeof scratch, &r), 2);
    assert_string_equal(r.models[0], "a");
    assert_string_equal(r.models[1], "b");
    assert_int_equal(sb_agent_models_parse("{\"data\":{}}", 11, scratch, sizeof scratch, &r), SB_AGENT_REPORT_BAD);
    assert_int_equal(sb_agent_models_parse("nope", 4, scratch, sizeof scratch, &r), SB_AGENT_REPORT_BAD);
}

/* The fuzz corpus, replayed: no crash, and what is accepted keeps its bounds. */
static void test_corpus(void **state)
{
    (void)state;
    static sb_agent_report r;
    static char data[8192];
    char path[1024];
    int files = 0;
    DIR *dir = opendir("tests/fuzz/corpus/agent_report");
    if (!dir)
        fail_msg("cannot open tests/fuzz/corpus/agent_report (run from the repository root)");
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "tests/fuzz/corpus/agent_report/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        size_t len = fread(data, 1, sizeof data, f);
        fclose(f);
        files++;
        sb_agent_models_parse(data, len, scratch, sizeof scratch, &r);
        assert_true(r.n_models <= SB_AGENT_MAX_MODELS);
        if (sb_agent_report_parse(data, len, scratch, sizeof scratch, &r, err, sizeof err) == 0)
            assert_true(!r.have_slots || r.slots_idle <= r.slots_total);
    }
    closedir(dir);
    assert_true(files >= 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_report),
        cmocka_unit_test(test_minimal_and_nulls),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_render_round_trip),
        cmocka_unit_test(test_models_list),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
