/* Tests for src/proto/inspect.c: body inspection (fields, their checks and bounds, JSON
 * verdicts against jsmn and an independent validator) and JSON unescaping. The canonical
 * prompt and its hashes are tested in test_prompt.c. */
#include "sb_test.h"

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/body_edit.h"
#include "proto/prompt.h" /* a failed inspect hashes as an empty prompt */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "inspect_fixture.h"

/* The real jsmn (strict, parent links), as the reference for inspect.c's own tokenizer. */
#define JSMN_STATIC
#define JSMN_PARENT_LINKS
#define JSMN_STRICT
#include <jsmn.h>

#define MAXH 64
static uint64_t got[MAXH]; /* slots for the checks that hash what sb_inspect read */

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
    /* The reported attack: 100,000 nested arrays, refused after reading the first levels only. */
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

/* A copy of body with one to three random edits: a byte replaced by a JSON-significant one,
 * a fragment inserted, a byte deleted, or the end cut off. */
static size_t mutate(const char *body, size_t len, char *out, size_t cap)
{
    static const char *const frags[] = {"\"", "\\", "\\u", "\\u00e9", "\\u0000", "\\ud83d\\ude00", "{", "}", "[",
                                  "]", ":", ",", " ", "\n", "true", "null", "-", "0", "1e5", "\\n",
                                  "\\\"", "\\\\", "\"a\":", "[1,2]", "\xc3\xa9", "\x01", "\0"};
    static const char special[] = "\"\\{}[]:,0-tfn \x01\x7f\xff";
    return json_ref_mutate(body, len, out, cap, frags, sizeof frags / sizeof frags[0], special, mut_rand);
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

/* ---- asking a stream for usage (usage_edit) ---- */

/* Applies r's usage edit to body (through sb_body_edit_pieces, as the proxy does) into out. */
static size_t apply_usage_edit(const char *body, const sb_inspect_result *r, char *out, size_t cap)
{
    sb_body_edit e = {r->usage_edit_start, r->usage_edit_end, r->usage_edit, r->usage_edit_len};
    sb_body_piece p[SB_BODY_PIECES_MAX];
    size_t total = 0, at = 0;
    int np = sb_body_edit_pieces(body, strlen(body), &e, 1, p, &total);
    assert_true(np > 0 && total < cap);
    for (int i = 0; i < np; i++) {
        memcpy(out + at, p[i].at, p[i].len);
        at += p[i].len;
    }
    out[at] = '\0';
    assert_int_equal(at, total);
    return at;
}

/* Each shape a stream's body may take gets the one splice that makes include_usage true, every
 * other byte untouched; the edited body reads back as asking for usage. */
static void test_usage_edit(void **state)
{
    (void)state;
    static const struct {
        enum sb_api_kind kind;
        const char *in, *out; /* out NULL: no edit */
    } cases[] = {
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {SB_API_COMPLETIONS, " { \"stream\" : true , \"model\":\"m\" } \n",
         " { \"stream\" : true , \"model\":\"m\" ,\"stream_options\":{\"include_usage\":true}} \n"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":null}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{}}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{ \"x\":1}}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true, \"x\":1}}"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":false}}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":null,\"y\":2}}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"y\":2}}"},
        /* duplicates: the last one is what the server reads, so the last one is changed */
        {SB_API_CHAT,
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"include_usage\":false}}",
         "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"include_usage\":true}}"},
        {SB_API_CHAT,
         "{\"model\":\"m\",\"stream_options\":{\"include_usage\":true},\"stream\":true,\"stream_options\":{}}",
         "{\"model\":\"m\",\"stream_options\":{\"include_usage\":true},\"stream\":true,\"stream_options\":{\"include_"
         "usage\":true}}"},
        /* nothing to do */
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", NULL},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":false}", NULL},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":null,\"stream_options\":{}}", NULL},
        {SB_API_CHAT, "{\"model\":\"m\"}", NULL},
        {SB_API_CHAT, "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true}}", NULL},
        {SB_API_RESPONSES, "{\"model\":\"m\",\"stream\":true,\"input\":\"x\"}", NULL},
        {SB_API_EMBEDDINGS, "{\"model\":\"m\",\"stream\":true,\"input\":\"x\"}", NULL},
    };
    char out[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_inspect_result r;
        assert_int_equal(inspect_n(cases[i].kind, cases[i].in, strlen(cases[i].in), &r), SB_INSPECT_OK);
        if (!cases[i].out) {
            assert_null(r.usage_edit);
            continue;
        }
        assert_non_null(r.usage_edit);
        size_t n = apply_usage_edit(cases[i].in, &r, out, sizeof out);
        assert_string_equal(out, cases[i].out);
        assert_int_equal(inspect_n(cases[i].kind, out, n, &r), SB_INSPECT_OK);
        assert_int_equal(r.include_usage, 1);
        assert_null(r.usage_edit);
    }
    /* A body naming no model (the default pool's name is inserted after its brace) gets both
     * edits, each in its place. */
    static const char nomodel[] = "{\"stream\":true}";
    sb_inspect_result r;
    assert_int_equal(inspect_n(SB_API_CHAT, LIT(nomodel), &r), SB_INSPECT_NO_MODEL);
    assert_non_null(r.usage_edit);
    sb_body_edit e[2] = {{r.usage_edit_start, r.usage_edit_end, r.usage_edit, r.usage_edit_len},
                         {1, 1, LIT("\"model\":\"d\",")}};
    sb_body_piece p[SB_BODY_PIECES_MAX];
    size_t total = 0, at = 0;
    int np = sb_body_edit_pieces(nomodel, strlen(nomodel), e, 2, p, &total);
    assert_int_equal(np, 5);
    for (int i = 0; i < np; i++, at += p[i - 1].len)
        memcpy(out + at, p[i].at, p[i].len);
    out[at] = '\0';
    assert_string_equal(out, "{\"model\":\"d\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    assert_int_equal(total, at);
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
        cmocka_unit_test_setup_teardown(test_too_complex, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_deep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nomem, setup, teardown),
        cmocka_unit_test_setup_teardown(test_n_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corpus_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_match_jsmn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_edit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
