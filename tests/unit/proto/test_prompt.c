/* Tests for src/proto/prompt.c: the canonical prompt and its chained block hashes, the
 * prefix key and the seed. Expected hashes are computed independently: the test writes the
 * canonical prompt out by hand and hashes it with XXH3 block by block. */
#include "sb_test.h"

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/prompt.h"

#include <stdio.h>
#include <xxhash.h>

#include "inspect_fixture.h"

/* Canonical prompt markers (prompt.h). Kept as separate literals so that a following digit
 * is never read as part of an octal escape. */
#define F "\0\2"   /* end of role / opaque field */
#define M "\0\3"   /* end of message / prompt part */
#define P "\0\4"   /* end of content part */
#define O "\0\5"   /* opens a non-text part */
#define NUL "\0\1" /* an escaped NUL byte */

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
static void hash_body(enum sb_api_kind kind, const char *body, size_t len, uint64_t seed, size_t bb, size_t cap,
                      sb_prompt_hashes *out)
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

/* The expected canonical prompts below are laid out a message per line, which a formatter
 * would reflow into one run: */
/* clang-format off */
static void test_realistic_canon(void **state)
{
    CHECK_CANON(SB_API_CHAT, realistic_chat,
                "system" F "You are helpful.\nBe brief \xc3\xa9\xf0\x9f\x98\x80." P M
                "user" F "What is \"this\"?" P O "image_url" F "https://x.org/a.png" F "low" F P M
                "assistant" F O "tool_calls" F "c1" F "function" F "f" F "{\"a\":1}" F P M
                "tool" F "42" P M);
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
/* clang-format on */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_realistic_canon, setup, teardown),
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
        cmocka_unit_test_setup_teardown(test_escape_dense_text, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
