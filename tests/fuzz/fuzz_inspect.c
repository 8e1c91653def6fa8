/* fuzz_inspect: libFuzzer target for src/proto/inspect.c and src/proto/prompt.c (outside
 * input: request bodies).
 *
 * Build and run with `make fuzz` (every target; FUZZ_SECONDS=60 for longer runs), or alone:
 *   make fuzz-build && build/fuzz/fuzz_inspect -max_total_time=60 build/fuzz/corpus/inspect \
 *         tests/fuzz/corpus/inspect
 * The committed corpus is the seed; it is also replayed by the unit test
 * tests/unit/proto/test_inspect.c.
 *
 * Besides crashes and sanitizer reports, it checks properties the rest of the gateway relies
 * on: the model span is a quoted string that decodes to res->model, and the chained hashes do
 * not depend on how many slots the caller gave (fewer slots give a prefix of the same chain;
 * the prompt length is counted all the same). */
#include "proto/prompt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

static void check_hashes(const sb_inspect_ctx *ctx, const char *body, const sb_inspect_result *r,
                         size_t block_bytes)
{
    uint64_t all[64], few[3];
    sb_prompt_hashes a = {.hashes = all, .cap = 64, .prefix_chars = 7};
    sb_prompt_hashes b = {.hashes = few, .cap = 3, .prefix_chars = 7};
    sb_prompt_hashes none = {.hashes = NULL, .cap = 0, .prefix_chars = 7};
    size_t blocks;

    sb_prompt_hash(ctx, body, r, 11, block_bytes, &a);
    sb_prompt_hash(ctx, body, r, 11, block_bytes, &b);
    sb_prompt_hash(ctx, body, r, 11, block_bytes, &none);
    blocks = a.prompt_bytes / block_bytes;
    CHECK(a.n == (blocks < 64 ? blocks : 64));
    CHECK(b.n == (blocks < 3 ? blocks : 3));
    CHECK(memcmp(all, few, b.n * sizeof all[0]) == 0);
    CHECK(b.prompt_bytes == a.prompt_bytes && none.prompt_bytes == a.prompt_bytes);
    CHECK(b.prefix_key == a.prefix_key && none.prefix_key == a.prefix_key);
    CHECK(none.n == 0);
}

/* libFuzzer's entry point (it declares none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum sb_api_kind kinds[] = {SB_API_CHAT, SB_API_COMPLETIONS, SB_API_EMBEDDINGS,
                                             SB_API_RESPONSES};
    static sb_inspect_ctx ctx = {.json.max_tokens = 1 << 16}; /* reused, as the data path does */
    const char *body = (const char *)data;
    char out[SB_MODEL_NAME_MAX + 1];

    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sb_inspect_result r;
        int rc = sb_inspect(&ctx, kinds[k], body, size, &r);
        long d;

        CHECK(rc <= 0 && rc >= SB_INSPECT_TOO_DEEP);
        CHECK((rc == SB_INSPECT_BAD_FIELD) == (r.error_field != NULL));
        if (rc == SB_INSPECT_BAD_JSON && k > 0)
            return 0; /* syntax does not depend on the API kind: checked once is enough */
        if (rc != SB_INSPECT_OK)
            continue;
        CHECK(r.model_len > 0 && r.model_len <= SB_MODEL_NAME_MAX && strlen(r.model) == r.model_len);
        CHECK(r.model_tok_start + 2 <= r.model_tok_end && r.model_tok_end <= size);
        CHECK(body[r.model_tok_start] == '"' && body[r.model_tok_end - 1] == '"');
        d = sb_json_unescape(body + r.model_tok_start + 1, r.model_tok_end - r.model_tok_start - 2, out,
                             sizeof out);
        CHECK(d == (long)r.model_len && memcmp(out, r.model, r.model_len) == 0);
        CHECK(strlen(r.user) == r.user_len);
        check_hashes(&ctx, body, &r, 5);     /* staged in the stack buffer */
        check_hashes(&ctx, body, &r, 4099);  /* streamed through an XXH3 state */
    }
    /* Any bytes as the inside of a string: decodes or says -1, never overruns. */
    CHECK(sb_json_unescape(body, size, out, 16) >= -1);
    return 0;
}
