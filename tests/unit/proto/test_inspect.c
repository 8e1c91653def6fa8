/* Tests for src/proto/inspect.c: body inspection, JSON unescaping, canonical prompt and
 * chained block hashes. Expected hashes are computed independently: the test writes the
 * canonical prompt out by hand and hashes it with XXH3 block by block. */
#include "sb_test.h"

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/inspect.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

/* The real jsmn (strict, parent links), as the reference for inspect.c's own tokenizer. */
#define JSMN_STATIC
#define JSMN_PARENT_LINKS
#define JSMN_STRICT
#include <jsmn.h>

/* Canonical prompt markers (inspect.h). Kept as separate literals so that a following digit
 * is never read as part of an octal escape. */
#define F "\0\2"   /* end of role / opaque field */
#define M "\0\3"   /* end of message / prompt part */
#define P "\0\4"   /* end of content part */
#define O "\0\5"   /* opens a non-text part */
#define NUL "\0\1" /* an escaped NUL byte */

#define LIT(s) s, sizeof(s) - 1

static sb_inspect_ctx ctx;

static int setup(void **state)
{
    (void)state;
    memset(&ctx, 0, sizeof ctx);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sb_inspect_ctx_free(&ctx);
    sb_alloc_fail_after(-1);
    return 0;
}

/* Runs sb_inspect on a heap copy of exactly len bytes, so ASan sees any read past the end. */
static int inspect_n(enum sb_api_kind kind, const char *body, size_t len, sb_inspect_result *r)
{
    char *copy = malloc(len ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, body, len);
    rc = sb_inspect(&ctx, kind, copy, len, r);
    free(copy);
    return rc;
}

static int inspect(enum sb_api_kind kind, const char *body, sb_inspect_result *r)
{
    return inspect_n(kind, body, strlen(body), r);
}

/* Reference: chained block hashes of an explicit canonical prompt. */
static size_t ref_hashes(const char *canon, size_t len, uint64_t seed, size_t bb, uint64_t *out, size_t cap)
{
    size_t n = 0;
    uint64_t prev = seed;

    for (size_t off = 0; off + bb <= len && n < cap; off += bb)
        out[n++] = prev = XXH3_64bits_withSeed(canon + off, bb, prev);
    return n;
}

#define MAXH 4096
static uint64_t got[MAXH], want[MAXH];

/* Inspects and hashes body; the result is in got[0..out->n). */
static void hash_body(enum sb_api_kind kind, const char *body, size_t len, uint64_t seed, size_t bb,
                      size_t cap, sb_prompt_hashes *out)
{
    sb_inspect_result r;

    assert_int_equal(sb_inspect(&ctx, kind, body, len, &r), SB_INSPECT_OK);
    memset(out, 0, sizeof *out);
    out->hashes = got;
    out->cap = cap;
    sb_prompt_hash(&ctx, body, &r, seed, bb, out);
}

/* Asserts body's canonical prompt is exactly canon[0..len), at several block sizes. */
static void check_canon(enum sb_api_kind kind, const char *body, const char *canon, size_t len)
{
    static const size_t sizes[] = {1, 2, 3, 5, 7, 16, 64};
    sb_prompt_hashes out;

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = ref_hashes(canon, len, 42, sizes[i], want, MAXH);
        hash_body(kind, body, strlen(body), 42, sizes[i], MAXH, &out);
        assert_int_equal(out.prompt_bytes, len);
        assert_int_equal(out.n, n);
        assert_memory_equal(got, want, n * sizeof got[0]);
    }
}

#define CHECK_CANON(kind, body, canon) check_canon(kind, body, LIT(canon))

/* ---- sb_json_unescape ---- */

static void test_unescape_simple(void **state)
{
    char out[64];
    const char *in = "a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti";
    long n = sb_json_unescape(in, strlen(in), out, sizeof out);

    assert_int_equal(n, 17);
    assert_memory_equal(out, "a\"b\\c/d\be\ff\ng\rh\ti", 17);
    assert_int_equal(sb_json_unescape("plain", 5, out, sizeof out), 5);
    assert_int_equal(sb_json_unescape("", 0, out, sizeof out), 0);
}

static void test_unescape_unicode(void **state)
{
    static const struct {
        const char *in;
        const char *out;
        long len;
    } cases[] = {
        {"\\u0041", "A", 1},
        {"\\u00e9", "\xc3\xa9", 2},
        {"\\u20AC", "\xe2\x82\xac", 3},
        {"\\ud83d\\ude00", "\xf0\x9f\x98\x80", 4},
        {"\\uD83D\\uDE00!", "\xf0\x9f\x98\x80!", 5},
        {"\\udbff\\udfff", "\xf4\x8f\xbf\xbf", 4},          /* U+10FFFF */
        {"\\ud83dx", "\xef\xbf\xbdx", 4},                    /* lone high surrogate */
        {"\\ud83d", "\xef\xbf\xbd", 3},                      /* lone high at the end */
        {"\\ud83d\\u0041", "\xef\xbf\xbd" "A", 4},           /* high then a non-surrogate */
        {"\\ud83d\\ud83d\\ude00", "\xef\xbf\xbd\xf0\x9f\x98\x80", 7}, /* high, then a pair */
        {"\\ude00", "\xef\xbf\xbd", 3},                      /* lone low surrogate */
        {"\\u0000", "\0", 1},
        {"\\u007f\\u0080\\u07ff\\u0800\\uffff", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf", 11},
    };
    char out[32];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long n = sb_json_unescape(cases[i].in, strlen(cases[i].in), out, sizeof out);
        assert_int_equal(n, cases[i].len);
        assert_memory_equal(out, cases[i].out, (size_t)n);
    }
}

static void test_unescape_invalid(void **state)
{
    static const char *bad[] = {"\\x", "a\\u12G4", "abc\\", "\\u12", "\\ud83d\\u12", "\\U0041", "\\'"};
    char out[16];

    /* Exact-size heap copies: ASan catches a read past an escape cut by the end. */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = strlen(bad[i]);
        char *copy = malloc(n);
        assert_non_null(copy);
        memcpy(copy, bad[i], n);
        assert_int_equal(sb_json_unescape(copy, n, out, sizeof out), -1);
        free(copy);
    }
}

static void test_unescape_truncates(void **state)
{
    char out[4] = "zzzz";

    assert_int_equal(sb_json_unescape("ab\\u00e9cd", 10, out, 3), 6);
    assert_memory_equal(out, "ab\xc3z", 4); /* 3 bytes written, the 4th untouched */
    assert_int_equal(sb_json_unescape("abc", 3, NULL, 0), 3);
}

/* ---- sb_inspect: fields ---- */

static void test_fields(void **state)
{
    const char *body = "{\"stream\":true,\"model\" : \"org\\/m\\u00e9\",\"user\":\"u\\n1\","
                       "\"stream_options\":{\"x\":[1],\"include_usage\":true},\"messages\":[]}";
    sb_inspect_result r;

    assert_int_equal(inspect(SB_API_CHAT, body, &r), SB_INSPECT_OK);
    assert_string_equal(r.model, "org/m\xc3\xa9");
    assert_int_equal(r.model_len, 7);
    assert_int_equal(body[r.model_tok_start], '"');
    assert_int_equal(body[r.model_tok_end - 1], '"');
    assert_int_equal(r.model_tok_end - r.model_tok_start, strlen("\"org\\/m\\u00e9\""));
    assert_memory_equal(body + r.model_tok_start, "\"org\\/m\\u00e9\"", r.model_tok_end - r.model_tok_start);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_string_equal(r.user, "u\n1");
    assert_int_equal(r.user_len, 3);
    assert_int_equal(r.n_messages, 0);
    assert_true(r.prompt_tok > 0);
    assert_int_equal(r.instructions_tok, -1);
    assert_int_equal(r.kind, SB_API_CHAT);

    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"stream\":false,"
                                          "\"stream_options\":{\"include_usage\":false}}", &r), SB_INSPECT_OK);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.include_usage, 0);
    assert_int_equal(r.user_len, 0);
    assert_string_equal(r.user, "");
    assert_int_equal(r.prompt_tok, -1);
}

static void test_duplicate_keys_last_wins(void **state)
{
    const char *body = "{\"model\":\"a\",\"stream\":true,\"model\":\"bb\",\"stream\":false}";
    sb_inspect_result r;

    assert_int_equal(inspect(SB_API_CHAT, body, &r), SB_INSPECT_OK);
    assert_string_equal(r.model, "bb");
    assert_memory_equal(body + r.model_tok_start, "\"bb\"", 4);
    assert_int_equal(r.model_tok_end, r.model_tok_start + 4);
    assert_int_equal(r.stream, 0);
}

static void test_escaped_keys(void **state)
{
    sb_inspect_result r;

    /* A server decodes keys, so "mod\u0065l" is the model it acts on: routing must agree. */
    assert_int_equal(inspect(SB_API_CHAT, "{\"mod\\u0065l\":\"x\"}", &r), SB_INSPECT_OK);
    assert_string_equal(r.model, "x");
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"a\",\"\\u006d\\u006f\\u0064\\u0065\\u006c\":\"b\"}", &r),
                     SB_INSPECT_OK);
    assert_string_equal(r.model, "b");
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"a\",\"st\\u0072eam\":\"yes\"}", &r), SB_INSPECT_BAD_FIELD);
    assert_string_equal(r.error_field, "stream");
    /* Not the key: "model " and "mode". */
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\\u0020\":\"a\",\"mode\":\"b\"}", &r), SB_INSPECT_NO_MODEL);
}

static void test_missing_model(void **state)
{
    static const char *bodies[] = {
        "{}", "{\"model\":1}", "{\"model\":null}", "{\"model\":\"\"}", "{\"model\":[\"m\"]}",
        "{\"model\":{\"name\":\"m\"}}", "{\"messages\":[],\"x\":{\"model\":\"m\"}}", "{\"model\":true}",
    };
    sb_inspect_result r;

    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        assert_int_equal(inspect(SB_API_CHAT, bodies[i], &r), SB_INSPECT_NO_MODEL);
}

static void test_model_limits(void **state)
{
    char body[600];
    char name[SB_MODEL_NAME_MAX + 2];
    sb_inspect_result r;

    memset(name, 'm', sizeof name);
    name[SB_MODEL_NAME_MAX] = '\0';
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", name);
    assert_int_equal(inspect(SB_API_CHAT, body, &r), SB_INSPECT_OK);
    assert_int_equal(r.model_len, SB_MODEL_NAME_MAX);
    assert_int_equal(strlen(r.model), SB_MODEL_NAME_MAX);

    name[SB_MODEL_NAME_MAX] = 'm';
    name[SB_MODEL_NAME_MAX + 1] = '\0';
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", name);
    assert_int_equal(inspect(SB_API_CHAT, body, &r), SB_INSPECT_BAD_FIELD);
    assert_string_equal(r.error_field, "model");

    /* A NUL inside would make "gpt\0x" compare equal to "gpt" as a C string. */
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"gpt\\u0000x\"}", &r), SB_INSPECT_BAD_FIELD);
    assert_string_equal(r.error_field, "model");

    memset(name, 'u', sizeof name);
    name[SB_USER_MAX + 1] = '\0';
    snprintf(body, sizeof body, "{\"model\":\"m\",\"user\":\"%s\"}", name);
    assert_int_equal(inspect(SB_API_CHAT, body, &r), SB_INSPECT_BAD_FIELD);
    assert_string_equal(r.error_field, "user");
}

static void test_wrong_types(void **state)
{
    static const struct {
        enum sb_api_kind kind;
        const char *body;
        const char *field;
    } cases[] = {
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":\"true\"}", "stream"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":1}", "stream"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream_options\":true}", "stream_options"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage"},
        {SB_API_CHAT, "{\"model\":\"m\",\"user\":5}", "user"},
        {SB_API_CHAT, "{\"model\":\"m\",\"user\":\"a\\u0000\"}", "user"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":\"hi\"}", "messages"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[\"hi\"]}", "messages"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"hi\"}]}", "messages.role"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":null,\"content\":\"hi\"}]}", "messages.role"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":1,\"content\":\"hi\"}]}", "messages.role"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages.content"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":{}}]}", "messages.content"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages.content"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":1}]}]}",
         "messages.content"},
        {SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":[],\"text\":\"a\"}]}]}",
         "messages.content"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":5}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":{}}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[true]}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",1]}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",[1,\"b\"]]}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[[1]]]}", "prompt"},
        {SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[null]}", "prompt"},
        {SB_API_EMBEDDINGS, "{\"model\":\"m\",\"input\":{\"a\":1}}", "input"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"input\":5}", "input"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"input\":[5]}", "input"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"input\":[{\"role\":2}]}", "input.role"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":3}]}", "input.content"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"input\":[{\"type\":3}]}", "input"},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"instructions\":[\"a\"]}", "instructions"},
        /* Checked in a fixed order whatever the key order: stream before messages. */
        {SB_API_CHAT, "{\"messages\":5,\"model\":\"m\",\"stream\":0}", "stream"},
    };
    sb_inspect_result r;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = inspect(cases[i].kind, cases[i].body, &r);
        if (rc != SB_INSPECT_BAD_FIELD || strcmp(r.error_field, cases[i].field) != 0)
            fail_msg("case %zu (%s): rc %d field %s", i, cases[i].body, rc, r.error_field ? r.error_field : "-");
    }
    /* Fields of other APIs are not ours to check. */
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"prompt\":5,\"input\":5,\"instructions\":5}", &r),
                     SB_INSPECT_OK);
    assert_int_equal(inspect(SB_API_COMPLETIONS, "{\"model\":\"m\",\"messages\":5}", &r), SB_INSPECT_OK);
}

static void test_null_is_absent(void **state)
{
    sb_inspect_result r;

    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"stream\":null,\"user\":null,"
                                          "\"stream_options\":null,\"messages\":null}", &r), SB_INSPECT_OK);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.prompt_tok, -1);
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"stream_options\":{\"include_usage\":null},"
                                          "\"messages\":[{\"role\":\"assistant\",\"content\":null}]}", &r),
                     SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(inspect(SB_API_RESPONSES, "{\"model\":\"m\",\"instructions\":null,\"input\":null}", &r),
                     SB_INSPECT_OK);
    assert_int_equal(r.instructions_tok, -1);
    assert_int_equal(r.prompt_tok, -1);
    assert_int_equal(r.n_messages, 0);
}

static void test_bad_json(void **state)
{
    static const char *bad[] = {
        "", " ", "[]", "\"x\"", "1", "null", "{", "}", "{\"model\":\"x\"", "{\"model\":\"x\",}",
        "{\"model\" \"x\"}", "{\"model\":\"x\" \"a\":1}", "{\"model\":\"x\"}{}", "{\"model\":\"x\"} x",
        "{\"model\":\"x\"}}", "{\"model\":\"x\"}]", "{\"model\":\"x\",\"a\":tru}", "{\"model\":\"x\",\"a\":01}",
        "{\"model\":\"x\",\"a\":1.}", "{\"model\":\"x\",\"a\":-}", "{\"model\":\"x\",\"a\":1e}",
        "{\"model\":\"x\",\"a\":.5}", "{\"model\":\"x\",\"a\":+1}", "{\"model\":\"x\",\"a\":[1 2]}",
        "{\"model\":\"x\",\"a\":[1,]}", "{\"model\":\"x\",\"a\":[,1]}", "{,}", "{\"model\":\"x\",,\"b\":2}",
        "{\"a\"}", "{\"model\":\"x\",\"a\"}", "{\"a\":\"b\":1}", "{\"a\":[\"a\":1]}", "{\"a\":nulll}",
        "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":[}", "{\"a\":1]}", "{\"a\"::1}", "{:1}",
        "{\"a\":1:2}", "{1:2}", "{\"a\":{}:1}", "{\"a\":truex}", "{\"a\":'x'}", "{\"a\":\"x}",
        "{\"model\":\"x\"}\"", "\xef\xbb\xbf{\"model\":\"x\"}", "{\"a\":\"\\\"}", "{\"a\":[\"b\",]}",
        "{\"a\":-01}", "{\"a\":1.5e+}", "{\"a\":Infinity}", "{\"a\":NaN}", "{\"a\" : }", "{\"a\":1,}",
    };
    static const char *good[] = {
        " \t\r\n{ \"model\" : \"x\" , \"a\" : [ 1 , -0.5e+10 , 0 , 1E3 , true , false , null , { } , [ ] ] } \n",
        "{\"model\":\"x\",\"a\":{\"b\":{\"c\":[[[[]]]]}},\"z\":\"\\u0000\"}",
        "{\"model\":\"x\",\"a\":-0,\"b\":0.0,\"c\":123456789012345678901234567890}",
    };
    sb_inspect_result r;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = inspect(SB_API_CHAT, bad[i], &r);
        if (rc != SB_INSPECT_BAD_JSON)
            fail_msg("bad[%zu] %s: rc %d", i, bad[i], rc);
        assert_int_equal(ctx.n_tokens, 0);
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (inspect(SB_API_CHAT, good[i], &r) != SB_INSPECT_OK)
            fail_msg("good[%zu] %s", i, good[i]);

    /* Raw NUL bytes are never valid JSON, inside a string or after the root. */
    assert_int_equal(inspect_n(SB_API_CHAT, "{\"model\":\"x\0y\"}", 15, &r), SB_INSPECT_BAD_JSON);
    assert_int_equal(inspect_n(SB_API_CHAT, "{\"model\":\"x\"}\0", 14, &r), SB_INSPECT_BAD_JSON);
    assert_int_equal(inspect_n(SB_API_CHAT, "{\"model\":\"x\"}", 13, &r), SB_INSPECT_OK);
}

static const char realistic_chat[] =
    "{\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true},\"temperature\":0.7,\"max_tokens\":-1e2,"
    "\"messages\":[{\"role\":\"system\",\"content\":\"You are helpful.\\nBe brief \\u00e9\\ud83d\\ude00.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is \\\"this\\\"?\"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"https:\\/\\/x.org\\/a.png\",\"detail\":\"low\"}}]},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],\"user\":\"u-1\",\"n\":1,\"stop\":[\"\\n\"]}";

static void test_truncated_every_offset(void **state)
{
    size_t len = sizeof realistic_chat - 1;
    sb_inspect_result r;
    sb_prompt_hashes out;

    for (size_t cut = 0; cut < len; cut++) {
        int rc = inspect_n(SB_API_CHAT, realistic_chat, cut, &r);
        if (rc != SB_INSPECT_BAD_JSON)
            fail_msg("cut at %zu: rc %d", cut, rc);
        memset(&out, 0, sizeof out);
        out.hashes = got;
        out.cap = MAXH;
        sb_prompt_hash(&ctx, realistic_chat, &r, 1, 4, &out); /* a failed inspect: empty prompt */
        assert_int_equal(out.prompt_bytes, 0);
        assert_int_equal(out.n, 0);
    }
    assert_int_equal(inspect_n(SB_API_CHAT, realistic_chat, len, &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 4);
    assert_string_equal(r.model, "meta-llama/Llama-3.1-8B-Instruct");
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_string_equal(r.user, "u-1");
}

static void test_realistic_canon(void **state)
{
    CHECK_CANON(SB_API_CHAT, realistic_chat,
                "system" F "You are helpful.\nBe brief \xc3\xa9\xf0\x9f\x98\x80." P M
                "user" F "What is \"this\"?" P O "image_url" F "https://x.org/a.png" F "low" F P M
                "assistant" F O "tool_calls" F "c1" F "function" F "f" F "{\"a\":1}" F P M
                "tool" F "42" P M);
}

static void test_too_complex(void **state)
{
    sb_inspect_result r;
    sb_buf b = {0};

    /* {"model":"m","a":[1,2]} is 7 tokens. */
    ctx.json.max_tokens = 7;
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"a\":[1,2]}", &r), SB_INSPECT_OK);
    assert_int_equal(ctx.n_tokens, 7);
    assert_int_equal(inspect(SB_API_CHAT, "{\"model\":\"m\",\"a\":[1,2,3]}", &r), SB_INSPECT_TOO_COMPLEX);
    assert_int_equal(ctx.n_tokens, 0);

    /* Growth from empty across several doublings, then reuse with no allocation. */
    sb_inspect_ctx_free(&ctx);
    ctx.json.max_tokens = 0;
    assert_int_equal(sb_buf_puts(&b, "{\"model\":\"m\",\"messages\":["), 0);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(sb_buf_printf(&b, "%s{\"role\":\"user\",\"content\":\"m%d\"}", i ? "," : "", i), 0);
    assert_int_equal(sb_buf_puts(&b, "]}"), 0);
    assert_int_equal(sb_inspect(&ctx, SB_API_CHAT, b.data, b.len, &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 3000);
    assert_int_equal(ctx.n_tokens, 5 + 3000 * 5);
    sb_alloc_fail_after(0);
    assert_int_equal(sb_inspect(&ctx, SB_API_CHAT, b.data, b.len, &r), SB_INSPECT_OK);
    sb_alloc_fail_after(-1);
    sb_buf_free(&b);
}

/* Nesting past json.max_depth is refused with its own status, at the first container past the
 * bound; at the bound it is read as before. */
static void test_too_deep(void **state)
{
    sb_inspect_result r;
    sb_buf b = {0};

    /* The root object is level 1: "x" may nest 127 more by default. */
    for (int depth = 127; depth <= 128; depth++) {
        b.len = 0;
        assert_int_equal(sb_buf_puts(&b, "{\"model\":\"m1\",\"x\":"), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "["), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "]"), 0);
        assert_int_equal(sb_buf_puts(&b, ",\"messages\":[]}"), 0);
        assert_int_equal(sb_inspect(&ctx, SB_API_CHAT, b.data, b.len, &r),
                         depth == 127 ? SB_INSPECT_OK : SB_INSPECT_TOO_DEEP);
        assert_int_equal(ctx.n_tokens, depth == 127 ? 6 + depth : 0);
    }
    /* A bound set by the caller; deep content parts count like anything else. */
    ctx.json.max_depth = 6;
    assert_int_equal(inspect(SB_API_CHAT,
                             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                             "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}]}]}", &r),
                     SB_INSPECT_OK);
    assert_int_equal(inspect(SB_API_CHAT,
                             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                             "[{\"type\":\"image_url\",\"image_url\":{\"url\":[\"u\"]}}]}]}", &r),
                     SB_INSPECT_TOO_DEEP);
    /* The body: 100,000 nested arrays, refused after reading the first levels only. */
    ctx.json.max_depth = 0;
    b.len = 0;
    assert_int_equal(sb_buf_puts(&b, "{\"model\":\"m1\",\"x\":"), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(sb_buf_puts(&b, "["), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(sb_buf_puts(&b, "]"), 0);
    assert_int_equal(sb_buf_puts(&b, ",\"messages\":[]}"), 0);
    assert_int_equal(sb_inspect(&ctx, SB_API_CHAT, b.data, b.len, &r), SB_INSPECT_TOO_DEEP);
    assert_true(ctx.json.steps < 200);
    /* With the bound lifted, read in full, in work linear in its size. */
    ctx.json.max_depth = 1000000;
    assert_int_equal(sb_inspect(&ctx, SB_API_CHAT, b.data, b.len, &r), SB_INSPECT_OK);
    assert_true(ctx.json.steps <= 4 * (uint64_t)b.len);
    sb_buf_free(&b);
}

static void test_nomem(void **state)
{
    sb_inspect_result r;

    sb_alloc_fail_after(0);
    assert_int_equal(inspect(SB_API_CHAT, realistic_chat, &r), SB_INSPECT_NOMEM);
    sb_alloc_fail_after(-1);
    assert_int_equal(inspect(SB_API_CHAT, realistic_chat, &r), SB_INSPECT_OK);
}

/* ---- canonical prompt ---- */

static void test_canon_chat(void **state)
{
    CHECK_CANON(SB_API_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be nice.\"},"
                "{\"content\":\"Hi!\",\"role\":\"user\",\"name\":\"bob\"}]}",
                "system" F "Be nice." P M "user" F "Hi!" P M);
    /* Parts: text parts by their text whatever their type; others opaque, image URLs kept. */
    CHECK_CANON(SB_API_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
                "{\"type\":\"text\",\"text\":\"Look:\"},"
                "{\"image_url\":{\"detail\":\"auto\",\"url\":\"data:image/png;base64,AAAA\"},\"type\":\"image_url\"},"
                "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklG\",\"format\":\"wav\"}},"
                "{\"type\":\"text\",\"text\":\"\"},{\"text\":\"untyped\"},{},"
                "{\"type\":\"weird\",\"n\":[1,true,null,{\"k\":2.5}]}]},"
                "{\"role\":\"assistant\",\"content\":[]},{\"role\":\"assistant\"}]}",
                "user" F "Look:" P O "image_url" F "auto" F "data:image/png;base64,AAAA" F P
                O "input_audio" F "UklG" F "wav" F P "" P "untyped" P O F P O "weird" F "1" F "true" F "null" F "2.5" F P M
                "assistant" F M "assistant" F M);
    CHECK_CANON(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[]}", "");
    CHECK_CANON(SB_API_CHAT, "{\"model\":\"m\"}", "");
}

static void test_canon_completions(void **state)
{
    CHECK_CANON(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"Once upon\\ta time\"}", "Once upon\ta time" M);
    CHECK_CANON(SB_API_COMPLETIONS, "{\"prompt\":[\"ab\",\"\",\"c\"],\"model\":\"m\"}", "ab" M M "c" M);
    CHECK_CANON(SB_API_COMPLETIONS, "{\"prompt\":[101, 2023,-1, 1e3],\"model\":\"m\"}", O "101,2023,-1,1e3," M);
    CHECK_CANON(SB_API_COMPLETIONS, "{\"prompt\":[[1,2],[],\"x\",[3]],\"model\":\"m\"}",
                O "1,2," M O M "x" M O "3," M);
    CHECK_CANON(SB_API_COMPLETIONS, "{\"prompt\":[],\"model\":\"m\"}", "");
    CHECK_CANON(SB_API_EMBEDDINGS, "{\"model\":\"m\",\"input\":\"emb\"}", "emb" M);
    CHECK_CANON(SB_API_EMBEDDINGS, "{\"model\":\"m\",\"input\":[\"a\",\"b\"],\"prompt\":\"no\"}", "a" M "b" M);
}

static void test_canon_responses(void **state)
{
    CHECK_CANON(SB_API_RESPONSES, "{\"model\":\"m\",\"input\":\"Tell me\",\"instructions\":\"Be terse\"}",
                "system" F "Be terse" P M "user" F "Tell me" P M);
    CHECK_CANON(SB_API_RESPONSES, "{\"model\":\"m\",\"input\":\"Tell me\"}", "user" F "Tell me" P M);
    CHECK_CANON(SB_API_RESPONSES,
                "{\"model\":\"m\",\"instructions\":\"I\",\"input\":["
                "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"},"
                "{\"type\":\"input_image\",\"image_url\":\"https:\\/\\/i\\/1.png\"}]},"
                "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
                "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"ok\"}]}",
                "system" F "I" P M "user" F "hi" P O "input_image" F "https://i/1.png" F P M
                F O "function_call" F "c" F "f" F "{}" F P M "assistant" F "ok" P M);
}

static void test_canon_escapes_and_nul(void **state)
{
    CHECK_CANON(SB_API_COMPLETIONS,
                "{\"model\":\"m\",\"prompt\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\\ud800x\\udc00\"}",
                "\"\\/\b\f\n\r\t" "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbdx\xef\xbf\xbd" M);
    /* NUL is escaped, so text cannot fake a marker: "a\u0000\u0003" is not "a" + end of part. */
    CHECK_CANON(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\\u0000\\u0003b\",\"\\u0000\"]}",
                "a" NUL "\3b" M NUL M);
    CHECK_CANON(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"us\\u0000er\",\"content\":\"\\u0000\"}]}",
                "us" NUL "er" F NUL P M);
    /* Escape runs longer than the decoder's scratch buffer. */
    {
        sb_buf body = {0}, canon = {0};
        assert_int_equal(sb_buf_puts(&body, "{\"model\":\"m\",\"prompt\":\""), 0);
        for (int i = 0; i < 100; i++) {
            assert_int_equal(sb_buf_puts(&body, "\\u0000\\ud83d\\ude00\\n"), 0);
            assert_int_equal(sb_buf_append(&canon, LIT(NUL "\xf0\x9f\x98\x80\n")), 0);
        }
        assert_int_equal(sb_buf_puts(&body, "\"}"), 0);
        assert_int_equal(sb_buf_append(&canon, LIT(M)), 0);
        check_canon(SB_API_COMPLETIONS, body.data, canon.data, canon.len);
        sb_buf_free(&body);
        sb_buf_free(&canon);
    }
}

/* Same text escaped differently reads the same. */
static void test_escape_equivalence(void **state)
{
    static const char *pairs[][2] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"\\u0075ser\",\"content\":\"\\u0041\\/B \\u00e9\\ud83d\\ude00\"}]}",
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"A/B \xc3\xa9\xf0\x9f\x98\x80\"}]}"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"https:\\/\\/x\\/a.png\"}}]}]}",
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"https://x/a.png\"}}]}]}"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "{ \"messages\" : [ { \"content\" : \"x\" , \"role\" : \"user\" } ] , \"model\" : \"m\" }"},
    };
    sb_prompt_hashes a, b;
    uint64_t ha[MAXH];

    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        for (size_t bb = 1; bb <= 8; bb++) {
            hash_body(SB_API_CHAT, pairs[i][0], strlen(pairs[i][0]), 7, bb, MAXH, &a);
            memcpy(ha, got, a.n * sizeof got[0]);
            hash_body(SB_API_CHAT, pairs[i][1], strlen(pairs[i][1]), 7, bb, MAXH, &b);
            assert_int_equal(a.prompt_bytes, b.prompt_bytes);
            assert_int_equal(a.n, b.n);
            assert_true(a.n > 0);
            assert_memory_equal(ha, got, a.n * sizeof got[0]);
            assert_int_equal(a.prefix_key, b.prefix_key);
        }
    }
}

/* Hashes body a and b with block size bb; returns the index of the first differing block. */
static size_t first_diff(enum sb_api_kind kind, const char *a, const char *b, size_t bb, size_t *n_out)
{
    sb_prompt_hashes ra, rb;
    uint64_t ha[MAXH];
    size_t i;

    hash_body(kind, a, strlen(a), 3, bb, MAXH, &ra);
    memcpy(ha, got, ra.n * sizeof got[0]);
    hash_body(kind, b, strlen(b), 3, bb, MAXH, &rb);
    *n_out = ra.n < rb.n ? ra.n : rb.n;
    for (i = 0; i < *n_out && ha[i] == got[i]; i++)
        ;
    /* Chained: once two blocks differ, every later block differs too. */
    for (size_t j = i; j < *n_out; j++)
        assert_true(ha[j] != got[j]);
    return i;
}

static void test_separation(void **state)
{
    size_t n;

    /* "ab"+"c" vs "a"+"bc": canonical bytes differ at offset 1. */
    assert_int_equal(first_diff(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"ab\",\"c\"]}",
                                "{\"model\":\"m\",\"prompt\":[\"a\",\"bc\"]}", 1, &n), 1);
    assert_int_equal(n, 7);
    /* Role/content boundary shift: "us"|"er" vs "use"|"r", differing at offset 2. */
    assert_int_equal(first_diff(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"us\",\"content\":\"er\"}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"use\",\"content\":\"r\"}]}", 2, &n), 1);
    /* One part "ab" vs two parts "a","b"; a string content vs the same text as a part is equal. */
    assert_int_equal(first_diff(SB_API_CHAT,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"text\":\"ab\"}]}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"text\":\"a\"},"
                                "{\"text\":\"b\"}]}]}", 1, &n), 4);
    assert_int_equal(first_diff(SB_API_CHAT,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"text\":\"ab\"}]}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":\"ab\"}]}", 1, &n), n);
    /* Two messages vs one message with two parts. */
    assert_int_equal(first_diff(SB_API_CHAT,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"text\":\"a\"},"
                                "{\"text\":\"b\"}]}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":\"a\"},"
                                "{\"role\":\"u\",\"content\":\"b\"}]}", 1, &n), 6);
    /* An image differs from its URL sent as text, and two images differ. */
    assert_int_equal(first_diff(SB_API_CHAT,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"type\":\"image_url\","
                                "\"image_url\":{\"url\":\"A\"}}]}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"type\":\"image_url\","
                                "\"image_url\":{\"url\":\"B\"}}]}]}", 1, &n), 16);
    assert_int_equal(first_diff(SB_API_CHAT,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":[{\"type\":\"image_url\","
                                "\"image_url\":{\"url\":\"A\"}}]}]}",
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":\"image_urlA\"}]}", 1, &n), 3);
    /* Token ids [1,23] vs [12,3], and token ids vs their digits as text. */
    assert_int_equal(first_diff(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,23]}",
                                "{\"model\":\"m\",\"prompt\":[12,3]}", 1, &n), 3);
    assert_int_equal(first_diff(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2]}",
                                "{\"model\":\"m\",\"prompt\":\"1,2,\"}", 1, &n), 0);
}

static void append_msg(sb_buf *body, sb_buf *canon, const char *role, const char *text)
{
    assert_int_equal(sb_buf_printf(body, "%s{\"role\":\"%s\",\"content\":\"%s\"}",
                                   body->data[body->len - 1] == '[' ? "" : ",", role, text), 0);
    assert_int_equal(sb_buf_printf(canon, "%s", role), 0);
    assert_int_equal(sb_buf_append(canon, LIT(F)), 0);
    assert_int_equal(sb_buf_puts(canon, text), 0);
    assert_int_equal(sb_buf_append(canon, LIT(P M)), 0);
}

/* Two conversations sharing a long system prompt and the first user words: the leading
 * blocks are equal, and every block from the one holding the first differing byte differs. */
static void test_shared_prefix(void **state)
{
    char sys[301], tail[151];
    const char *users[2] = {"Summarise the following text please: alpha", "Summarise the following text please: beta"};
    sb_buf body[2] = {{0}, {0}}, canon[2] = {{0}, {0}};
    size_t diff_at, n;

    memset(sys, 's', 300);
    sys[300] = '\0';
    memset(tail, 'y', 150); /* enough blocks after the difference even at 127-byte blocks */
    tail[150] = '\0';
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sb_buf_puts(&body[i], "{\"model\":\"m\",\"messages\":["), 0);
        append_msg(&body[i], &canon[i], "system", sys);
        append_msg(&body[i], &canon[i], "user", users[i]);
        append_msg(&body[i], &canon[i], "assistant", tail);
        assert_int_equal(sb_buf_puts(&body[i], "]}"), 0);
        check_canon(SB_API_CHAT, body[i].data, canon[i].data, canon[i].len);
    }
    for (diff_at = 0; canon[0].data[diff_at] == canon[1].data[diff_at]; diff_at++)
        ;
    assert_int_equal(diff_at, strlen("system") + 2 + 300 + 4 + strlen("user") + 2 + strlen(users[0]) - 5);
    for (size_t bb = 1; bb <= 128; bb = bb * 2 + 1) {
        assert_int_equal(first_diff(SB_API_CHAT, body[0].data, body[1].data, bb, &n), diff_at / bb);
        assert_true(n > diff_at / bb);
    }
    for (int i = 0; i < 2; i++) {
        sb_buf_free(&body[i]);
        sb_buf_free(&canon[i]);
    }
}

static void test_seed(void **state)
{
    const char *body = "{\"model\":\"m\",\"prompt\":\"the same prompt for every seed\"}";
    uint64_t seeds[] = {
        sb_prompt_seed(LIT("m"), NULL, 0),   sb_prompt_seed(LIT("m2"), NULL, 0),
        sb_prompt_seed(LIT("m"), LIT("a")),  sb_prompt_seed(LIT("m"), LIT("b")),
        sb_prompt_seed(LIT("ab"), LIT("c")), sb_prompt_seed(LIT("a"), LIT("bc")),
    };
    uint64_t all[6][MAXH];
    sb_prompt_hashes out;
    char cat[] = "m\0a";

    assert_int_equal(sb_prompt_seed(LIT("m"), LIT("a")), XXH3_64bits(cat, 3));
    assert_int_equal(sb_prompt_seed(LIT("m"), "", 0), XXH3_64bits("m", 2));
    for (int i = 0; i < 6; i++) {
        hash_body(SB_API_COMPLETIONS, body, strlen(body), seeds[i], 4, MAXH, &out);
        assert_int_equal(out.n, 8);
        memcpy(all[i], got, out.n * sizeof got[0]);
    }
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            for (int k = 0; i != j && k < 8; k++)
                assert_true(all[i][k] != all[j][k]);
}

/* A 2 MiB prompt with escapes sprinkled in, hashed with fewer slots than blocks. */
static void test_huge_prompt(void **state)
{
    sb_buf body = {0}, canon = {0};
    sb_prompt_hashes out;
    static uint64_t big_want[MAXH];
    size_t n;

    assert_int_equal(sb_buf_puts(&body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""), 0);
    assert_int_equal(sb_buf_append(&canon, LIT("user" F)), 0);
    for (int i = 0; canon.len < (2u << 20); i++) {
        assert_int_equal(sb_buf_printf(&body, "line %d of a long document, with \\\"quotes\\\"\\n", i), 0);
        assert_int_equal(sb_buf_printf(&canon, "line %d of a long document, with \"quotes\"\n", i), 0);
    }
    assert_int_equal(sb_buf_puts(&body, "\"}]}"), 0);
    assert_int_equal(sb_buf_append(&canon, LIT(P M)), 0);

    hash_body(SB_API_CHAT, body.data, body.len, 9, 64, 100, &out);
    assert_int_equal(out.n, 100);
    assert_int_equal(out.prompt_bytes, canon.len);
    n = ref_hashes(canon.data, canon.len, 9, 64, want, 100);
    assert_memory_equal(got, want, n * sizeof got[0]);

    hash_body(SB_API_CHAT, body.data, body.len, 9, 64, 0, &out);
    assert_int_equal(out.n, 0);
    assert_int_equal(out.prompt_bytes, canon.len);

    /* Every block, at sizes around the staging limit (4 KiB) and above it (streamed). */
    for (size_t bb = 4095; bb <= 4097; bb++) {
        hash_body(SB_API_CHAT, body.data, body.len, 9, bb, MAXH, &out);
        n = ref_hashes(canon.data, canon.len, 9, bb, big_want, MAXH);
        assert_int_equal(out.n, n);
        assert_int_equal(out.n, canon.len / bb);
        assert_memory_equal(got, big_want, n * sizeof got[0]);
    }
    hash_body(SB_API_CHAT, body.data, body.len, 9, 100000, MAXH, &out);
    n = ref_hashes(canon.data, canon.len, 9, 100000, big_want, MAXH);
    assert_int_equal(out.n, canon.len / 100000);
    assert_memory_equal(got, big_want, n * sizeof got[0]);
    sb_buf_free(&body);
    sb_buf_free(&canon);
}

static uint64_t prefix_key(enum sb_api_kind kind, const char *body, size_t chars)
{
    sb_inspect_result r;
    sb_prompt_hashes out = {.hashes = got, .cap = MAXH, .prefix_chars = chars};

    assert_int_equal(inspect(kind, body, &r), SB_INSPECT_OK);
    sb_prompt_hash(&ctx, body, &r, 0, 16, &out);
    return out.prefix_key;
}

static void test_prefix_key(void **state)
{
    char text[200], body[400];

    /* The first user message, past any system message; short text: all of it. */
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                                             "{\"role\":\"user\",\"content\":\"hello\"},"
                                             "{\"role\":\"user\",\"content\":\"again\"}]}", 0),
                     XXH3_64bits("hello", 5));
    /* Text parts concatenated, other parts skipped; escapes decoded. */
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
                                             "{\"text\":\"he\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}},"
                                             "{\"text\":\"l\\u006co\"}]}]}", 0),
                     XXH3_64bits("hello", 5));
    /* The budget spans parts and escape runs. */
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
                                             "{\"text\":\"h\\u0065\"},{\"text\":\"llo\"},{\"text\":\"!!\"}]}]}", 3),
                     XXH3_64bits("hel", 3));
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}",
                                3),
                     XXH3_64bits("hel", 3));
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":null}]}", 0),
                     XXH3_64bits("", 0));
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"}]}", 0),
                     0);
    assert_int_equal(prefix_key(SB_API_CHAT, "{\"model\":\"m\"}", 0), 0);

    /* Default 100 bytes: differences past them do not change the key. */
    memset(text, 'a', 150);
    text[150] = '\0';
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
    assert_int_equal(prefix_key(SB_API_CHAT, body, 0), XXH3_64bits(text, 100));
    text[120] = 'b';
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
    assert_int_equal(prefix_key(SB_API_CHAT, body, 0), XXH3_64bits(text, 100));

    assert_int_equal(prefix_key(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"first\",\"second\"]}", 0),
                     XXH3_64bits("first", 5));
    assert_int_equal(prefix_key(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2]}", 0), XXH3_64bits("1,2,", 4));
    assert_int_equal(prefix_key(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[]}", 0), XXH3_64bits("", 0));
    assert_int_equal(prefix_key(SB_API_COMPLETIONS, "{\"model\":\"m\"}", 0), 0);
    assert_int_equal(prefix_key(SB_API_EMBEDDINGS, "{\"model\":\"m\",\"input\":\"e\"}", 0), XXH3_64bits("e", 1));
    assert_int_equal(prefix_key(SB_API_RESPONSES, "{\"model\":\"m\",\"instructions\":\"i\",\"input\":\"q\"}", 0),
                     XXH3_64bits("q", 1));
    assert_int_equal(prefix_key(SB_API_RESPONSES, "{\"model\":\"m\",\"input\":[{\"type\":\"function_call\"},"
                                                  "{\"role\":\"user\",\"content\":[{\"text\":\"q\"}]}]}", 0),
                     XXH3_64bits("q", 1));
}

static void test_n_messages(void **state)
{
    sb_inspect_result r;

    assert_int_equal(inspect(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\",[1]]}", &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 3);
    assert_int_equal(inspect(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2,3]}", &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(inspect(SB_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"x\"}", &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(inspect(SB_API_RESPONSES, "{\"model\":\"m\",\"instructions\":\"i\",\"input\":[{\"role\":\"user\"},"
                                               "{\"type\":\"x\"}]}", &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 3);
    assert_true(r.instructions_tok > 0);
    assert_int_equal(inspect(SB_API_RESPONSES, "{\"model\":\"m\",\"input\":\"q\"}", &r), SB_INSPECT_OK);
    assert_int_equal(r.n_messages, 1);
}

/* ---- corpus replay (tests/fuzz/corpus/inspect, shared with tests/fuzz/fuzz_inspect.c) ---- */

/* The corpus path, derived from this file's path as the compiler saw it: relative to the
 * repository root under make (which runs tests from there), absolute otherwise. */
static void corpus_dir(char *out, size_t cap)
{
    const char *me = __FILE__;
    const char *cut = strstr(me, "unit/proto/test_inspect.c");

    assert_non_null(cut);
    snprintf(out, cap, "%.*sfuzz/corpus/inspect", (int)(cut - me), me);
}

static void test_corpus_replay(void **state)
{
    static const enum sb_api_kind kinds[] = {SB_API_CHAT, SB_API_COMPLETIONS, SB_API_EMBEDDINGS, SB_API_RESPONSES};
    char dir[4096], path[8192];
    struct dirent *e;
    DIR *d;
    int files = 0, ok = 0;

    corpus_dir(dir, sizeof dir);
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open corpus %s", dir);
    while ((e = readdir(d)) != NULL) {
        FILE *f;
        char *data;
        long len;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        data = malloc((size_t)len + 1);
        assert_non_null(data);
        assert_int_equal(fread(data, 1, (size_t)len, f), (size_t)len);
        fclose(f);
        files++;
        for (size_t k = 0; k < 4; k++) {
            sb_inspect_result r;
            sb_prompt_hashes out = {.hashes = got, .cap = 8};
            size_t bytes;
            if (sb_inspect(&ctx, kinds[k], data, (size_t)len, &r) != SB_INSPECT_OK)
                continue;
            ok++;
            assert_true(r.model_len > 0 && r.model_len <= SB_MODEL_NAME_MAX);
            assert_true(r.model_tok_end <= (size_t)len && data[r.model_tok_start] == '"');
            sb_prompt_hash(&ctx, data, &r, 1, 3, &out);
            assert_true(out.n <= 8);
            bytes = out.prompt_bytes;
            sb_prompt_hash(&ctx, data, &r, 1, 5000, &out);
            assert_int_equal(out.prompt_bytes, bytes);
        }
        free(data);
    }
    closedir(d);
    assert_true(files >= 10);
    assert_true(ok > 0);
}

/* ---- the tokenizer against jsmn and an independent JSON validator ---- */

/* RFC 8259 with inspect.h's two laxities (raw control bytes and invalid UTF-8 inside
 * strings), no NUL byte anywhere, an object at the root. Returns the end of the value at p,
 * or NULL. */
#define JSON_REF_MAX_DEPTH 2000
#include "json_reference.h"

static int json_valid(const char *b, size_t len)
{
    const char *e = b + len, *p = v_ws(b, e);

    if (p == e || *p != '{' || !(p = v_value(p, e, 0)))
        return 0;
    return v_ws(p, e) == e;
}

/* One body: sb_inspect says BAD_JSON exactly when the validator rejects it, jsmn accepts
 * every valid body, and inspect.c's tokens are jsmn's, field for field. */
static void check_tokens_as_jsmn(const char *body, size_t len)
{
    size_t cap = len + 2;
    jsmntok_t *ref = malloc(cap * sizeof *ref);
    char *copy = malloc(len ? len : 1); /* exactly len bytes: ASan sees a read past the end */
    sb_inspect_result r;
    jsmn_parser p;
    int valid = json_valid(body, len), rc, n;

    assert_non_null(ref);
    assert_non_null(copy);
    memcpy(copy, body, len);
    jsmn_init(&p);
    n = jsmn_parse(&p, copy, len, ref, (unsigned)cap);
    ctx.json.max_depth = 100000; /* the tokens, not the bound: test_too_deep has that */
    rc = sb_inspect(&ctx, SB_API_CHAT, copy, len, &r);
    ctx.json.max_depth = 0;
    if ((rc == SB_INSPECT_BAD_JSON) != !valid)
        fail_msg("rc %d, valid %d: %.*s", rc, valid, (int)len, body);
    if (valid) {
        if (n < 0)
            fail_msg("jsmn rejects a valid body (%d): %.*s", n, (int)len, body);
        assert_memory_equal(ctx.json.tokens, ref, (size_t)p.toknext * sizeof *ref);
    }
    free(copy);
    free(ref);
}

static uint64_t mut_state = 0x9E3779B97F4A7C15ULL;

static uint64_t mut_rand(void)
{
    mut_state ^= mut_state << 13;
    mut_state ^= mut_state >> 7;
    mut_state ^= mut_state << 17;
    return mut_state;
}

/* A copy of body with one to three random edits: a byte replaced by a JSON-significant one,
 * a fragment inserted, a byte deleted, or the end cut off. */
static size_t mutate(const char *body, size_t len, char *out, size_t cap)
{
    static const char *frags[] = {"\"", "\\", "\\u", "\\u00e9", "\\u0000", "\\ud83d\\ude00", "{", "}", "[",
                                  "]", ":", ",", " ", "\n", "true", "null", "-", "0", "1e5", "\\n",
                                  "\\\"", "\\\\", "\"a\":", "[1,2]", "\xc3\xa9", "\x01", "\0"};
    static const char special[] = "\"\\{}[]:,0-tfn \x01\x7f\xff";
    size_t n = len, edits = 1 + mut_rand() % 3;

    memcpy(out, body, len);
    for (size_t k = 0; k < edits; k++) {
        size_t at = n ? mut_rand() % n : 0;
        switch (mut_rand() % 4) {
        case 0:
            if (n)
                out[at] = special[mut_rand() % (sizeof special - 1)];
            break;
        case 1: {
            size_t f = mut_rand() % (sizeof frags / sizeof frags[0]);
            size_t fl = frags[f][0] ? strlen(frags[f]) : 1;
            if (n + fl <= cap) {
                memmove(out + at + fl, out + at, n - at);
                memcpy(out + at, frags[f], fl);
                n += fl;
            }
            break;
        }
        case 2:
            if (n) {
                memmove(out + at, out + at + 1, n - at - 1);
                n--;
            }
            break;
        default:
            n = n ? mut_rand() % n : 0;
            break;
        }
    }
    return n;
}

/* The corpus, and 40 mutations of each file (about a thousand bodies): same verdicts and
 * same tokens as jsmn. */
static void test_tokens_match_jsmn(void **state)
{
    char dir[4096], path[8192], mutated[4096];
    struct dirent *e;
    DIR *d;
    int files = 0;

    corpus_dir(dir, sizeof dir);
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open corpus %s", dir);
    while ((e = readdir(d)) != NULL) {
        char data[2048];
        size_t len;
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        f = fopen(path, "rb");
        assert_non_null(f);
        len = fread(data, 1, sizeof data, f);
        assert_true(len < sizeof data);
        fclose(f);
        files++;
        check_tokens_as_jsmn(data, len);
        for (int m = 0; m < 40; m++)
            check_tokens_as_jsmn(mutated, mutate(data, len, mutated, sizeof mutated));
    }
    closedir(d);
    assert_true(files >= 10);
    for (size_t i = 0; i <= sizeof realistic_chat - 1; i++) /* every cut, and the whole */
        check_tokens_as_jsmn(realistic_chat, i);
}

/* Long text dense with escapes (about one every 8 bytes), as clients send code and JSON:
 * the canonical prompt and its chain at block sizes around the stage's chunking, with
 * fewer slots than blocks (hashing stops mid-string, counting goes on) and the prefix key. */
static void test_escape_dense_text(void **state)
{
    static const struct {
        const char *json, *text;
    } pieces[] = {
        {"plain words ", "plain words "}, {"\\n", "\n"}, {"\\\"q\\\"", "\"q\""}, {"\\\\", "\\"},
        {"\\/", "/"}, {"\\t", "\t"}, {"\\u00e9", "\xc3\xa9"}, {"\\u0000", NUL},
        {"\\ud83d\\ude00", "\xf0\x9f\x98\x80"}, {"\\ud800", "\xef\xbf\xbd"}, {"x", "x"},
        {"a longer run of raw text that spans more than one 64-byte chunk of the input, "
         "so the stage copies it whole ",
         "a longer run of raw text that spans more than one 64-byte chunk of the input, "
         "so the stage copies it whole "},
    };
    static const size_t sizes[] = {1, 2, 3, 5, 16, 63, 64, 65, 100, 4096, 4097};
    sb_buf body = {0}, canon = {0};
    sb_prompt_hashes out;
    size_t text_at;

    assert_int_equal(sb_buf_puts(&body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""), 0);
    assert_int_equal(sb_buf_append(&canon, LIT("user" F)), 0);
    text_at = canon.len;
    while (canon.len < 40000) {
        size_t k = mut_rand() % (sizeof pieces / sizeof pieces[0]);
        const char *t = pieces[k].text;
        assert_int_equal(sb_buf_puts(&body, pieces[k].json), 0);
        assert_int_equal(sb_buf_append(&canon, t, t[0] ? strlen(t) : 2), 0); /* NUL is 00 01 */
    }
    assert_int_equal(sb_buf_puts(&body, "\"}]}"), 0);
    assert_int_equal(sb_buf_append(&canon, LIT(P M)), 0);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = ref_hashes(canon.data, canon.len, 9, sizes[i], want, MAXH);
        size_t few = n < 5 ? n : 5;
        hash_body(SB_API_CHAT, body.data, body.len, 9, sizes[i], MAXH, &out);
        assert_int_equal(out.prompt_bytes, canon.len);
        assert_int_equal(out.n, n);
        assert_memory_equal(got, want, n * sizeof got[0]);
        assert_int_equal(out.prefix_key, XXH3_64bits(canon.data + text_at, 100));
        hash_body(SB_API_CHAT, body.data, body.len, 9, sizes[i], few, &out);
        assert_int_equal(out.prompt_bytes, canon.len);
        assert_int_equal(out.n, few);
        assert_memory_equal(got, want, few * sizeof got[0]);
    }
    sb_buf_free(&body);
    sb_buf_free(&canon);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unescape_simple, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unescape_unicode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unescape_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unescape_truncates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_keys_last_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaped_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_is_absent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_every_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_realistic_canon, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_complex, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_deep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nomem, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canon_chat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canon_completions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canon_responses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canon_escapes_and_nul, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escape_equivalence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_separation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_prompt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_n_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corpus_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_match_jsmn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escape_dense_text, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
