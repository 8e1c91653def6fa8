/* fuzz_tokenize: libFuzzer target for src/proto/tokenize.c's answer parser (outside input:
 * engines' /tokenize answers).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); the committed corpus
 * (tests/fuzz/corpus/tokenize) is also replayed by tests/unit/proto/test_tokenize.c.
 *
 * Besides crashes and sanitizer reports, it checks: an accepted answer's tokens fit the room
 * given; parsing with less room than that is TOO_MANY, never a partial success; and the
 * parse is deterministic (twice, same result and same ids). The same input read as a client's
 * request: the /tokenize body built from it is one JSON object, and its length is the same
 * whatever the room. */
#include "proto/tokenize.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

enum { CAP = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint32_t a[CAP], b[CAP];
    sb_json j = {.max_depth = 16, .max_tokens = 65536};
    size_t na = 0, nb = 0;
    int ra = sb_tokenize_parse_answer(&j, (const char *)data, size, a, CAP, &na);
    int rb = sb_tokenize_parse_answer(&j, (const char *)data, size, b, CAP, &nb);
    CHECK(ra == rb);
    if (ra == SB_TOKENIZE_OK) {
        CHECK(na == nb && na <= CAP && memcmp(a, b, na * sizeof(uint32_t)) == 0);
        if (na > 0) {
            size_t nc = 0;
            CHECK(sb_tokenize_parse_answer(&j, (const char *)data, size, b, na - 1, &nc) == SB_TOKENIZE_TOO_MANY);
        }
    }
    int n = sb_json_parse(&j, (const char *)data, size);
    if (n > 0) {
        static char body[1 << 16];
        long len = sb_tokenize_build_body((const char *)data, j.tokens, n, "m\"x", 3, body, sizeof body);
        CHECK(len == SB_TOKENIZE_NO_PROMPT || len > 0);
        CHECK(sb_tokenize_build_body((const char *)data, j.tokens, n, "m\"x", 3, NULL, 0) == len);
        (void)sb_tokenize_context_key((const char *)data, j.tokens, n, "m", 1);
        if (len > 0 && (size_t)len <= sizeof body) {
            sb_json k = {.max_depth = 1024};
            int m = sb_json_parse(&k, body, (size_t)len);
            CHECK(m > 0 && k.tokens[0].type == SB_JSON_OBJECT);
            sb_json_free(&k);
        }
    }
    sb_json_free(&j);
    return 0;
}
