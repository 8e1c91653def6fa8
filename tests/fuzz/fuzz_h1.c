/* fuzz_h1: libFuzzer target for src/proto/h1.c, the fast path for HTTP/1.x heads (outside
 * input: clients' requests and model servers' answers), checked against http-parser.
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); by hand:
 *   make fuzz-build && build/fuzz/fuzz_h1 -max_total_time=300 /tmp/corpus_h1 tests/fuzz/corpus/h1
 *
 * The first input byte picks request or response; the rest is the message. Besides crashes and
 * sanitizer reports (the input is copied to an exact-size buffer, so a read past its end is
 * caught), it checks the property the gateway relies on: every head the fast path takes,
 * http-parser takes too, with the same method or status, target, fields, keep-alive verdict
 * and Content-Length framing; and every prefix of a taken head is deferred. */
#include "proto/h1.h"

#include <http_parser.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_h1: %s (line %d)\n", #cond, __LINE__);                                               \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

#define MAXF 32

typedef struct ref {
    const char *base;
    size_t url_off, url_len;
    size_t name_off[MAXF + 1], name_len[MAXF + 1], value_off[MAXF + 1], value_len[MAXF + 1];
    int n;
    int in_value;
    size_t body_len;
    int complete;
} ref;

/* Spans are contiguous here (one execute over one buffer): offsets of the first piece. */
static int r_url(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    if (!r->url_len)
        r->url_off = (size_t)(at - r->base);
    r->url_len += len;
    return 0;
}

static int r_field(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    if (r->in_value || r->n == 0) {
        if (r->n == MAXF + 1)
            return -1;
        r->n++;
        r->name_off[r->n - 1] = (size_t)(at - r->base);
        r->name_len[r->n - 1] = r->value_len[r->n - 1] = 0;
        r->in_value = 0;
    }
    r->name_len[r->n - 1] += len;
    return 0;
}

static int r_value(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    if (r->n == 0)
        return -1;
    if (!r->in_value)
        r->value_off[r->n - 1] = (size_t)(at - r->base);
    r->in_value = 1;
    r->value_len[r->n - 1] += len;
    return 0;
}

static int r_body(http_parser *p, const char *at, size_t len)
{
    ((ref *)p->data)->body_len += len;
    return 0;
}

static int r_complete(http_parser *p)
{
    ((ref *)p->data)->complete = 1;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {.on_url = r_url,
                                              .on_header_field = r_field,
                                              .on_header_value = r_value,
                                              .on_body = r_body,
                                              .on_message_complete = r_complete};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int response = data[0] & 1;
    size_t len = size - 1;
    char *msg = malloc(len ? len : 1);
    if (!msg)
        return 0;
    memcpy(msg, data + 1, len);
    sb_h1_field f[MAXF];
    sb_h1_head h;
    int rc = response ? sb_h1_response(msg, len, 65536, f, MAXF, &h) : sb_h1_request(msg, len, 65536, f, MAXF, &h);
    if (rc == SB_H1_OK) {
        CHECK(h.head_len <= len);
        size_t end = h.head_len + (h.content_length > 0 ? (size_t)h.content_length : 0);
        /* Framing is compared only where the input holds the whole body. */
        if (end <= len) {
            http_parser p;
            ref r = {.base = msg};
            http_parser_init(&p, response ? HTTP_RESPONSE : HTTP_REQUEST);
            p.data = &r;
            size_t used = http_parser_execute(&p, &settings, msg, end);
            CHECK(r.complete && used == end);
            CHECK(p.http_major == 1 && p.http_minor == h.http_minor);
            if (response) {
                CHECK(p.status_code == h.status);
            } else {
                CHECK(p.method == h.method);
                CHECK(r.url_off == h.target_off && r.url_len == h.target_len);
            }
            CHECK(r.n == (int)h.n_fields);
            for (int i = 0; i < r.n; i++) {
                CHECK(r.name_off[i] == f[i].name_off && r.name_len[i] == f[i].name_len);
                CHECK(r.value_off[i] == f[i].value_off && r.value_len[i] == f[i].value_len);
            }
            CHECK(r.body_len == end - h.head_len);
            CHECK((http_should_keep_alive(&p) != 0) == h.keep_alive);
        }
        /* A head cut short is never taken. */
        size_t cut = h.head_len - 1 - (size % h.head_len);
        sb_h1_head h2;
        CHECK((response ? sb_h1_response(msg, cut, 65536, f, MAXF, &h2)
                        : sb_h1_request(msg, cut, 65536, f, MAXF, &h2)) == SB_H1_DEFER);
    }
    free(msg);
    return 0;
}
