/* Tests src/sim/sim_request.c: fields, defaults, the prompt template, and refusals. */
#include "sb_test.h"

#include <errno.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "sim/sim_request.h"

static int parse(const char *body, sb_sim_api api, sb_sim_request *r, sb_buf *prompt)
{
    sb_buf_reset(prompt);
    return sb_sim_request_parse(body, strlen(body), api, r, prompt);
}

static void test_chat_fields_and_template(void **state)
{
    (void)state;
    sb_sim_request r;
    sb_buf p = {0};
    const char *body =
        "{\"model\":\"org/m\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"Be \\\"terse\\\".\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},{\"type\":\"text\",\"text\":\" there\"}]},"
        "{\"role\":\"assistant\",\"content\":null}],\"temperature\":0.2}";
    assert_int_equal(parse(body, SB_SIM_API_CHAT, &r, &p), 0);
    assert_string_equal(r.model, "org/m");
    assert_int_equal(r.model_len, 5);
    assert_true(r.stream);
    assert_true(r.include_usage);
    assert_true(r.from_messages);
    assert_int_equal(r.max_tokens, 5);
    assert_string_equal(p.data, "<|system|>\nBe \"terse\".\n<|user|>\nHi there\n<|assistant|>\n\n<|assistant|>\n");
    sb_buf_free(&p);
}

static void test_completion_prompt_and_defaults(void **state)
{
    (void)state;
    sb_sim_request r;
    sb_buf p = {0};
    assert_int_equal(parse("{\"model\":\"m\",\"prompt\":\"abc\\n\"}", SB_SIM_API_COMPLETIONS, &r, &p), 0);
    assert_false(r.stream);
    assert_false(r.include_usage);
    assert_false(r.from_messages);
    assert_int_equal(r.max_tokens, SB_SIM_DEFAULT_MAX_TOKENS);
    assert_string_equal(p.data, "abc\n");
    assert_int_equal(parse("{\"model\":\"m\",\"prompt\":[\"ab\",\"cd\"],\"max_tokens\":null,"
                           "\"max_completion_tokens\":7,\"stream\":null}",
                           SB_SIM_API_COMPLETIONS, &r, &p),
                     0);
    assert_string_equal(p.data, "abcd");
    assert_int_equal(r.max_tokens, 7);
    /* max_completion_tokens wins over max_tokens, whatever the order. */
    assert_int_equal(
        parse("{\"max_completion_tokens\":3,\"max_tokens\":9,\"prompt\":\"x\"}", SB_SIM_API_COMPLETIONS, &r, &p), 0);
    assert_int_equal(r.max_tokens, 3);
    assert_int_equal(r.model_len, 0);
    sb_buf_free(&p);
}

static void test_tokenize_takes_either(void **state)
{
    (void)state;
    sb_sim_request r;
    sb_buf p = {0};
    assert_int_equal(parse("{\"prompt\":\"hello\"}", SB_SIM_API_TOKENIZE, &r, &p), 0);
    assert_string_equal(p.data, "hello");
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", SB_SIM_API_TOKENIZE, &r, &p),
                     0);
    assert_string_equal(p.data, "<|user|>\nhello\n<|assistant|>\n");
    assert_int_equal(parse("{}", SB_SIM_API_TOKENIZE, &r, &p), -EINVAL);
    sb_buf_free(&p);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        sb_sim_api api;
    } bad[] = {
        {"", SB_SIM_API_CHAT},
        {"{", SB_SIM_API_CHAT},
        {"[]", SB_SIM_API_CHAT},
        {"{} x", SB_SIM_API_CHAT},
        {"{\"model\":\"m\"}", SB_SIM_API_CHAT},
        {"{\"model\":\"m\",\"messages\":[]}", SB_SIM_API_CHAT},
        {"{\"model\":\"m\",\"messages\":\"hi\"}", SB_SIM_API_CHAT},
        {"{\"model\":\"m\",\"messages\":[{\"content\":\"hi\"}]}", SB_SIM_API_CHAT},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", SB_SIM_API_CHAT},
        {"{\"model\":1,\"prompt\":\"x\"}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":[1,2,3]}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":0}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":-3}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1.5}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":99999999999}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":\"yes\"}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\",\"prompt\":\"bad \\q escape\"}", SB_SIM_API_COMPLETIONS},
        {"{\"model\":\"m\"}", SB_SIM_API_COMPLETIONS},
    };
    sb_buf p = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sb_sim_request r;
        int rc = parse(bad[i].body, bad[i].api, &r, &p);
        if (rc != -EINVAL)
            fprintf(stderr, "accepted: %s\n", bad[i].body);
        assert_int_equal(rc, -EINVAL);
        assert_non_null(r.error);
    }
    sb_buf_free(&p);
}

static void test_long_model_name(void **state)
{
    (void)state;
    char body[SB_SIM_MODEL_MAX + 64];
    char name[SB_SIM_MODEL_MAX + 11];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"x\"}", name);
    sb_sim_request r;
    sb_buf p = {0};
    assert_int_equal(parse(body, SB_SIM_API_COMPLETIONS, &r, &p), 0);
    assert_int_equal(r.model_len, SB_SIM_MODEL_MAX + 10); /* the caller sees it cannot match */
    assert_int_equal(strlen(r.model), SB_SIM_MODEL_MAX);
    sb_buf_free(&p);
}

static void test_allocation_failure(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a fairly long message\"}]}";
    for (long n = 0; n < 8; n++) {
        sb_sim_request r;
        sb_buf p = {0};
        sb_alloc_fail_after(n);
        int rc = sb_sim_request_parse(body, strlen(body), SB_SIM_API_CHAT, &r, &p);
        sb_alloc_fail_after(-1);
        assert_true(rc == 0 || rc == -ENOMEM);
        sb_buf_free(&p);
    }
}

/* Nesting: 128 levels read, 129 refused with a reason, and the 100,000 levels refused
 * after reading the first levels only (jsmn read them all, twice, with a walk per bracket). */
static void test_nesting_bound(void **state)
{
    (void)state;
    sb_sim_request r;
    sb_buf p = {0}, b = {0};

    for (int depth = 127; depth <= 128; depth++) {
        b.len = 0;
        assert_int_equal(sb_buf_puts(&b, "{\"model\":\"m\",\"x\":"), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "["), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "]"), 0);
        assert_int_equal(sb_buf_puts(&b, ",\"prompt\":\"hi\"}"), 0);
        sb_buf_reset(&p);
        assert_int_equal(sb_sim_request_parse(b.data, b.len, SB_SIM_API_COMPLETIONS, &r, &p), depth == 127 ? 0 : -EINVAL);
        if (depth == 128)
            assert_non_null(strstr(r.error, "too deep"));
    }
    b.len = 0;
    assert_int_equal(sb_buf_puts(&b, "{\"model\":\"m\",\"x\":"), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(sb_buf_puts(&b, "["), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(sb_buf_puts(&b, "]"), 0);
    assert_int_equal(sb_buf_puts(&b, ",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"), 0);
    sb_buf_reset(&p);
    assert_int_equal(sb_sim_request_parse(b.data, b.len, SB_SIM_API_CHAT, &r, &p), -EINVAL);
    assert_non_null(strstr(r.error, "too deep"));
    sb_buf_free(&b);
    sb_buf_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields_and_template),
        cmocka_unit_test(test_nesting_bound),
        cmocka_unit_test(test_completion_prompt_and_defaults),
        cmocka_unit_test(test_tokenize_takes_either),    cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_long_model_name),          cmocka_unit_test(test_allocation_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
