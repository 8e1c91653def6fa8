/* inspect_fixture: what test_inspect.c and test_prompt.c share: one reusable inspect
 * context with its setup and teardown, inspection of an exact-length heap copy, a realistic
 * chat body, and a small deterministic random source. */
#ifndef SB_TEST_INSPECT_FIXTURE_H
#define SB_TEST_INSPECT_FIXTURE_H

#include "proto/inspect.h"

#include <stdlib.h>
#include <string.h>

#define LIT(s) s, sizeof(s) - 1

static sb_inspect_ctx ctx;

static inline int setup(void **state)
{
    (void)state;
    memset(&ctx, 0, sizeof ctx);
    return 0;
}

static inline int teardown(void **state)
{
    (void)state;
    sb_inspect_ctx_free(&ctx);
    sb_alloc_fail_after(-1);
    return 0;
}

/* Runs sb_inspect on a heap copy of exactly len bytes, so ASan sees any read past the end. */
static inline int inspect_n(enum sb_api_kind kind, const char *body, size_t len, sb_inspect_result *r)
{
    char *copy = malloc(len ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, body, len);
    rc = sb_inspect(&ctx, kind, copy, len, r);
    free(copy);
    return rc;
}

static inline int inspect(enum sb_api_kind kind, const char *body, sb_inspect_result *r)
{
    return inspect_n(kind, body, strlen(body), r);
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

static uint64_t mut_state = 0x9E3779B97F4A7C15ULL;

static inline uint64_t mut_rand(void)
{
    mut_state ^= mut_state << 13;
    mut_state ^= mut_state >> 7;
    mut_state ^= mut_state << 17;
    return mut_state;
}

#endif
