/* fuzz_decisions_query: libFuzzer target for sb_decisions_query_parse (src/net/decisions.c), the
 * parser of GET /debug/decisions's query string (outside input: whoever reaches the admin
 * listener, with the token when one is set).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); the committed corpus
 * (tests/fuzz/corpus/decisions_query) is also replayed by tests/unit/net/test_decisions.c.
 *
 * Besides crashes and sanitizer reports (the input is an exact-size copy: nothing past it is
 * read), it checks what the admin page relies on:
 *   - accepted: the limit is within 1..max_limit, the id and pool are NUL-terminated within
 *     their fields and hold no NUL, and an id comes alone;
 *   - refused: the message is a non-empty, NUL-terminated string within its buffer;
 *   - the same input parses the same way twice (no hidden state). */
#include "net/decisions.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *q = malloc(size ? size : 1);
    if (!q)
        return 0;
    memcpy(q, data, size);
    size_t max_limit = size ? (size_t)data[0] + 1 : 512;
    sb_decisions_query a, b;
    char err[160], err2[160];
    memset(err, 'x', sizeof err);
    int rc = sb_decisions_query_parse(q, size, max_limit, &a, err, sizeof err);
    int rc2 = sb_decisions_query_parse(q, size, max_limit, &b, err2, sizeof err2);
    CHECK(rc == rc2);
    if (rc == 0) {
        CHECK(a.limit >= 1 && a.limit <= max_limit);
        CHECK(a.id_len <= SB_EXPLAIN_ID_MAX && strlen(a.id) == a.id_len);
        CHECK(memchr(a.pool, '\0', sizeof a.pool) != NULL);
        CHECK(!a.id_len ||
              (!a.has_pool &&
               a.limit == (max_limit < SB_DECISIONS_DEFAULT_LIMIT ? max_limit : SB_DECISIONS_DEFAULT_LIMIT)));
        CHECK(a.id_len == b.id_len && !memcmp(a.id, b.id, a.id_len) && a.limit == b.limit);
    } else {
        CHECK(rc == -1);
        CHECK(memchr(err, '\0', sizeof err) != NULL && err[0]);
        CHECK(!strcmp(err, err2));
    }
    free(q);
    return 0;
}
