/* Tests proto/tokenize: the /tokenize answer parser on real answers and hostile ones (replaying
 * the fuzz corpus too), and the request body builder (messages and template fields verbatim,
 * the model escaped, the room contract). */
#include "sb_test.h"

#include <dirent.h>

#include "proto/tokenize.h"

static int parse(const char *s, uint32_t *out, size_t cap, size_t *n)
{
    sb_json j = {.max_depth = 8};
    int rc = sb_tokenize_parse_answer(&j, s, strlen(s), out, cap, n);
    sb_json_free(&j);
    return rc;
}

static void test_answer_vllm(void **state)
{
    (void)state;
    uint32_t t[8];
    size_t n = 99;
    assert_int_equal(parse("{\"count\":3,\"max_model_len\":8192,\"tokens\":[151644,0,4294967295],"
                           "\"token_strs\":[\"<|im_start|>\",\"!\",\"x\"]}",
                           t, 8, &n),
                     SB_TOKENIZE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(t[0], 151644);
    assert_int_equal(t[1], 0);
    assert_int_equal(t[2], 4294967295u);
    /* No count (SGLang, llama.cpp answer only tokens); empty; whitespace; a null count. */
    assert_int_equal(parse(" { \"tokens\" : [ 7 , 8 ] } ", t, 8, &n), SB_TOKENIZE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(parse("{\"tokens\":[]}", t, 8, &n), SB_TOKENIZE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(parse("{\"tokens\":[5],\"count\":null}", t, 8, &n), SB_TOKENIZE_OK);
    /* The last duplicate wins, as the JSON readers of the project do. */
    assert_int_equal(parse("{\"tokens\":[1],\"tokens\":[7,8]}", t, 8, &n), SB_TOKENIZE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(t[0], 7);
}

static void test_answer_hostile(void **state)
{
    (void)state;
    uint32_t t[4];
    size_t n;
    const char *bad[] = {
        "",                                   /* empty */
        "[1,2,3]",                            /* not an object */
        "{\"count\":3}",                      /* no tokens */
        "{\"tokens\":\"1,2\"}",               /* not an array */
        "{\"tokens\":[1,2],\"count\":3}",     /* count disagrees */
        "{\"tokens\":[1,2],\"count\":\"2\"}", /* count not a number */
        "{\"tokens\":[1,-2]}",                /* negative */
        "{\"tokens\":[1.5]}",                 /* fraction */
        "{\"tokens\":[1e3]}",                 /* exponent */
        "{\"tokens\":[4294967296]}",          /* past 2^32 */
        "{\"tokens\":[99999999999999999999999]}",
        "{\"tokens\":[[1],2]}", /* nested */
        "{\"tokens\":[{\"a\":1}]}",
        "{\"tokens\":[true]}",
        "{\"tokens\":[null]}",
        "{\"tokens\":[\"1\"]}",
        "{\"tokens\":[1,2",   /* truncated */
        "{\"tokens\":[1]} x", /* trailing garbage */
        "{\"tokens\":[01]}",  /* leading zero */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], t, 4, &n);
        if (rc != SB_TOKENIZE_BAD)
            fail_msg("accepted or misreported (%d): %s", rc, bad[i]);
    }
    /* More ids than room: refused, not cut (a cut prompt would give wrong keys). */
    assert_int_equal(parse("{\"tokens\":[1,2,3,4,5]}", t, 4, &n), SB_TOKENIZE_TOO_MANY);
    /* Nesting past the caller's bound: an answer is flat, so that is malformed. */
    assert_int_equal(parse("{\"tokens\":[1],\"x\":[[[[[[[[[[1]]]]]]]]]]}", t, 4, &n), SB_TOKENIZE_BAD);
    /* More JSON tokens than the caller's bound. */
    sb_json small = {.max_tokens = 4};
    const char *many = "{\"tokens\":[1,2,3,4]}";
    assert_int_equal(sb_tokenize_parse_answer(&small, many, strlen(many), t, 4, &n), SB_TOKENIZE_TOO_MANY);
    sb_json_free(&small);
    /* A NUL inside: the JSON reader refuses any input holding one. */
    sb_json j = {0};
    assert_int_equal(sb_tokenize_parse_answer(&j, "{\"tokens\":[1]}\0", 15, t, 4, &n), SB_TOKENIZE_BAD);
    sb_json_free(&j);
}

/* The fuzz corpus: no crash, and the verdicts its file names promise. */
static void test_answer_corpus(void **state)
{
    (void)state;
    DIR *d = opendir("tests/fuzz/corpus/tokenize");
    assert_non_null(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "tests/fuzz/corpus/tokenize/%s", e->d_name);
        size_t len;
        char *s = sb_test_read_file(path, &len);
        static uint32_t t[4096];
        size_t n;
        sb_json j = {.max_depth = 16};
        int rc = sb_tokenize_parse_answer(&j, s, len, t, 4096, &n);
        sb_json_free(&j);
        bool good = strncmp(e->d_name, "vllm", 4) == 0 || strcmp(e->d_name, "empty.json") == 0 ||
                    strcmp(e->d_name, "duplicate.json") == 0;
        if (good != (rc == SB_TOKENIZE_OK))
            fail_msg("%s: %d", e->d_name, rc);
        free(s);
        files++;
    }
    closedir(d);
    assert_true(files >= 10);
}

static long build(const char *req, const char *model, char *out, size_t cap)
{
    sb_json j = {0};
    int n = sb_json_parse(&j, req, strlen(req));
    assert_true(n > 0);
    long len = sb_tokenize_build_body(req, j.tokens, n, model, strlen(model), out, cap);
    sb_json_free(&j);
    if (len >= 0 && (size_t)len < cap)
        out[len] = '\0';
    return len;
}

static void test_body_chat(void **state)
{
    (void)state;
    char out[1024];
    const char *req = "{\"model\":\"alias\",\"stream\":true,\"messages\":[{\"role\":\"system\",\"content\":\"Be "
                      "\\\"brief\\\"\\u00e9\"},"
                      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"temperature\":0.2,"
                      "\"chat_template_kwargs\":{\"enable_thinking\":false},\"add_generation_prompt\":null,"
                      "\"prompt\":\"ignored\"}";
    long len = build(req, "meta/llama\"3", out, sizeof out);
    assert_true(len > 0);
    /* The served name escaped, the messages byte for byte, template fields kept, the rest
     * (sampling, stream, a null field, a stray prompt) left out. */
    assert_string_equal(
        out, "{\"model\":\"meta/llama\\\"3\",\"messages\":[{\"role\":\"system\",\"content\":\"Be "
             "\\\"brief\\\"\\u00e9\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
             "\"chat_template_kwargs\":{\"enable_thinking\":false}}");
    /* What the builder writes is JSON. */
    sb_json j = {0};
    assert_true(sb_json_parse(&j, out, (size_t)len) > 0);
    sb_json_free(&j);
}

static void test_body_prompt_and_room(void **state)
{
    (void)state;
    char out[256];
    const char *req = "{\"model\":\"m\",\"prompt\":\"Once\\nupon\",\"add_special_tokens\":false,\"max_tokens\":5}";
    long len = build(req, "m\x01", out, sizeof out);
    assert_string_equal(out, "{\"model\":\"m\\u0001\",\"prompt\":\"Once\\nupon\",\"add_special_tokens\":false}");
    /* Too little room: the full length comes back, nothing past cap is written. */
    char small[10];
    memset(small, 'Z', sizeof small);
    sb_json j = {0};
    int n = sb_json_parse(&j, req, strlen(req));
    assert_int_equal(sb_tokenize_build_body(req, j.tokens, n, "m\x01", 2, small, 8), len);
    assert_int_equal(small[8], 'Z');
    assert_int_equal(sb_tokenize_build_body(req, j.tokens, n, "m\x01", 2, NULL, 0), len);
    sb_json_free(&j);
    /* No prompt to tokenize: token ids, a batch, nothing. */
    assert_int_equal(build("{\"model\":\"m\",\"prompt\":[1,2,3]}", "m", out, sizeof out), SB_TOKENIZE_NO_PROMPT);
    assert_int_equal(build("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "m", out, sizeof out), SB_TOKENIZE_NO_PROMPT);
    assert_int_equal(build("{\"model\":\"m\",\"messages\":null}", "m", out, sizeof out), SB_TOKENIZE_NO_PROMPT);
    assert_int_equal(build("{\"model\":\"m\"}", "m", out, sizeof out), SB_TOKENIZE_NO_PROMPT);
    assert_int_equal(build("[1]", "m", out, sizeof out), SB_TOKENIZE_NO_PROMPT);
}

static uint64_t ctx_of(const char *req, const char *model)
{
    sb_json j = {0};
    int n = sb_json_parse(&j, req, strlen(req));
    assert_true(n > 0);
    uint64_t k = sb_tokenize_context_key(req, j.tokens, n, model, strlen(model));
    sb_json_free(&j);
    return k;
}

static void test_context_key(void **state)
{
    (void)state;
    const char *a =
        "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[1],\"temperature\":1}";
    const char *b = "{\"tools\":[1],\"model\":\"y\",\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}";
    const char *c = "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[2]}";
    const char *d = "{\"model\":\"x\",\"messages\":[],\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    const char *e = "{\"model\":\"x\",\"messages\":[],\"chat_template_kwargs\":null}";
    const char *f = "{\"model\":\"x\",\"messages\":[]}";
    const char *p = "{\"model\":\"x\",\"prompt\":\"a\",\"tools\":[1]}";
    const char *q = "{\"model\":\"x\",\"prompt\":\"b\"}";
    /* Messages, the client's alias, key order and sampling fields do not count... */
    assert_true(ctx_of(a, "m") == ctx_of(b, "m"));
    /* ...the served model, the tools and the template's arguments do. */
    assert_true(ctx_of(a, "m") != ctx_of(a, "m2"));
    assert_true(ctx_of(a, "m") != ctx_of(c, "m"));
    assert_true(ctx_of(d, "m") != ctx_of(f, "m"));
    assert_true(ctx_of(e, "m") == ctx_of(f, "m")); /* null is "not set" */
    /* A prompt request is its own kind; fields a prompt's body does not carry do not count. */
    assert_true(ctx_of(p, "m") == ctx_of(q, "m"));
    assert_true(ctx_of(q, "m") != ctx_of(f, "m"));
}

static int prompt_key_of(const char *req, uint64_t *k)
{
    sb_json j = {0};
    int n = sb_json_parse(&j, req, strlen(req));
    assert_true(n > 0);
    int rc = sb_tokenize_prompt_key(req, j.tokens, n, k);
    sb_json_free(&j);
    return rc;
}

/* The prompt key names what the body builder copies verbatim: the messages (or the prompt)
 * as written; the rest is the context key's. */
static void test_prompt_key(void **state)
{
    (void)state;
    uint64_t a, b, c, p, q;
    assert_int_equal(prompt_key_of("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                                   "\"max_tokens\":3}",
                                   &a),
                     SB_TOKENIZE_OK);
    assert_int_equal(prompt_key_of("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"model\":\"y\"}", &b),
                     SB_TOKENIZE_OK);
    assert_int_equal(prompt_key_of("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}", &c),
                     SB_TOKENIZE_OK);
    assert_true(a == b);
    assert_true(a != c);
    assert_int_equal(prompt_key_of("{\"model\":\"x\",\"prompt\":\"a\"}", &p), SB_TOKENIZE_OK);
    assert_int_equal(prompt_key_of("{\"model\":\"x\",\"prompt\":\"b\"}", &q), SB_TOKENIZE_OK);
    assert_true(p != q);
    assert_int_equal(prompt_key_of("{\"model\":\"x\",\"prompt\":[1,2]}", &q), SB_TOKENIZE_NO_PROMPT);
    assert_int_equal(prompt_key_of("[1]", &q), SB_TOKENIZE_NO_PROMPT);
}

int main(void)
{
    /* clang-format off: one test a line */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answer_vllm),          cmocka_unit_test(test_answer_hostile),
        cmocka_unit_test(test_answer_corpus),        cmocka_unit_test(test_body_chat),
        cmocka_unit_test(test_body_prompt_and_room), cmocka_unit_test(test_context_key),
        cmocka_unit_test(test_prompt_key),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
