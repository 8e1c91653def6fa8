/* h1: a fast path for the heads of HTTP/1.1 messages, beside http-parser.
 *
 * http-parser reads a head a byte at a time through a state machine with a callback per
 * span: ~8,700 instructions for the ~110-byte request head and ~150-byte response head of a
 * proxied chat request (callgrind, docs/benchmarks.md section 15), the largest single cost of a
 * request. This reads a whole head that is already in one buffer (the usual case: a client
 * writes its head at once, a model server too) line by line with memchr and a character table,
 * a few instructions per byte.
 *
 * It is not a second HTTP parser with its own opinions: it accepts a deliberately narrow subset
 * of HTTP/1.x, heads that are plainly well formed (CRLF line ends, origin-form targets of
 * ordinary characters, token names, values of visible ASCII without surrounding whitespace, one
 * decimal Content-Length, `Connection: keep-alive|close` only) and framed by Content-Length or
 * by nothing. Anything else, including every head http-parser would reject and every head whose
 * framing needs judgement (Transfer-Encoding, Upgrade, CONNECT, 1xx/204/304, a body read to the
 * connection's end), is answered SB_H1_DEFER and left to http-parser, which answers exactly as
 * it did before. So the fast path can make the gateway no laxer; tests/unit/proto/test_h1.c
 * checks that every head it takes, http-parser takes with the same framing, fields and
 * keep-alive verdict (tests/fuzz/fuzz_h1.c does so on arbitrary bytes).
 *
 * Pure: no I/O, no allocation; reads at most min(len, max_head) bytes; linear. */
#ifndef SB_PROTO_H1_H
#define SB_PROTO_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A header line: name and value as offsets into the buffer given to the parser. */
typedef struct sb_h1_field {
    uint32_t name_off, name_len, value_off, value_len;
} sb_h1_field;

typedef struct sb_h1_head {
    size_t head_len;                 /* bytes through the empty line that ends the head */
    int method;                      /* requests: enum http_method (http_parser.h) */
    int status;                      /* responses: 200..599 but 204 and 304 */
    int http_minor;                  /* HTTP/1.0 or HTTP/1.1 */
    uint32_t target_off, target_len; /* requests: the request target (origin-form) */
    int64_t content_length;          /* -1 when the head has none (a request without a body) */
    bool keep_alive;                 /* http_should_keep_alive's verdict for this head */
    size_t n_fields;
} sb_h1_head;

enum { SB_H1_DEFER = 0, SB_H1_OK = 1 };

/* The character classes the parser reads bytes by (exposed for its test). */
enum { SB_H1_TOKEN = 1, SB_H1_VALUE = 2, SB_H1_TARGET = 4 };
extern const unsigned char sb_h1_class[256];

/* Reads the request head at p[0..len). SB_H1_OK fills *out and f[0..out->n_fields); a head
 * that is incomplete, longer than max_head, with more than max_fields fields or outside the
 * subset is SB_H1_DEFER (out and f are then unspecified). A response's head has a
 * Content-Length always. */
int sb_h1_request(const char *p, size_t len, size_t max_head, sb_h1_field *f, size_t max_fields, sb_h1_head *out);
int sb_h1_response(const char *p, size_t len, size_t max_head, sb_h1_field *f, size_t max_fields, sb_h1_head *out);

#endif
