/* fuzz_json: libFuzzer target for src/proto/json.c (outside input: request bodies, model
 * servers' answers).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each).
 * Built and run by hand (the committed corpus is the seed; it is also replayed, against the real jsmn,
 * by the unit test tests/unit/proto/test_json.c):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc tests/fuzz/fuzz_json.c \
 *         src/proto/json.c src/base/alloc.c -o /tmp/fuzz_json
 *   /tmp/fuzz_json -max_total_time=60 /tmp/corpus tests/fuzz/corpus/json
 *
 * Besides crashes and sanitizer reports, it checks: tokens come in document order with their
 * parent before them; the work is linear (steps <= 4 x bytes + 8); parse accepts only what
 * tokenize accepts, with the same tokens; and the depth bound is exact: a document that nests
 * D levels parses with max_depth = D and is TOO_DEEP with D - 1. */
#include "proto/json.h"

#include <stdint.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

/* libFuzzer's entry point (it declares none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sb_json j = {.max_tokens = 1 << 16}; /* reused, as the callers do */
    const char *b = (const char *)data;
    int n, m;
    size_t depth = 0;

    j.max_depth = 1000000;
    n = sb_json_tokenize(&j, b, size);
    CHECK(j.steps <= size + 1);
    for (int i = 1; i < n; i++)
        CHECK(j.tokens[i].start > j.tokens[i - 1].start && j.tokens[i].parent < i);
    m = sb_json_parse(&j, b, size);
    CHECK(j.steps <= 4 * (uint64_t)size + 8);
    if (m < 0)
        return 0;
    CHECK(m == n);
    for (int i = 0; i < m; i++) {
        size_t d = 0;
        for (int p = i; p >= 0; p = j.tokens[p].parent)
            d += j.tokens[p].type == SB_JSON_OBJECT || j.tokens[p].type == SB_JSON_ARRAY;
        depth = d > depth ? d : depth;
    }
    if (depth > 0) {
        j.max_depth = depth;
        CHECK(sb_json_parse(&j, b, size) == m);
        if (depth > 1) {
            j.max_depth = depth - 1;
            CHECK(sb_json_parse(&j, b, size) == SB_JSON_TOO_DEEP);
        }
    }
    return 0;
}
