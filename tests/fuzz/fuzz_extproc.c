/* fuzz_extproc: libFuzzer target for src/proto/extproc.c (outside input: every message Envoy
 * sends on an ext_proc stream, and gRPC health requests).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each). The committed corpus
 * (tests/fuzz/corpus/extproc: Envoy's real encodings from tests/fixtures/extproc) is also
 * replayed by tests/unit/proto/test_extproc.c.
 *
 * Besides crashes, leaks and sanitizer reports, it checks: a decoded message keeps its bounds
 * (header count, every pointer inside the input or the decoder's storage, readable for its
 * length), the subset is set exactly when has_subset says, and the echo of a decoded body chunk
 * encodes and decodes back as what Envoy would read. */
#include "proto/extproc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extproc.pb-c.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

static sb_extproc_msg msg;
static volatile uint8_t sink;

/* Touches every byte so ASan checks the span. */
static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        sink ^= b[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = NULL;
    const char *svc;
    size_t svc_len;
    if (sb_health_decode_request(data, size, &svc, &svc_len) == 0)
        CHECK(svc_len <= size &&
              (svc_len == 0 || (svc >= (const char *)data && svc + svc_len <= (const char *)data + size)));

    int rc = sb_extproc_decode(data, size, &msg, &why);
    if (rc != 0) {
        CHECK(why != NULL && msg.n_headers == 0 && msg.kind == SB_EXTPROC_NONE);
        CHECK(rc == SB_EXTPROC_EMALFORMED || rc == SB_EXTPROC_ETOOMANY || rc == SB_EXTPROC_ENOMEM);
        sb_extproc_msg_free(&msg);
        return 0;
    }
    CHECK(msg.kind != SB_EXTPROC_NONE && msg.n_headers <= SB_EXTPROC_MAX_HEADERS);
    for (size_t i = 0; i < msg.n_headers; i++) {
        CHECK(msg.headers[i].key_len > 0);
        touch(msg.headers[i].key, msg.headers[i].key_len);
        touch(msg.headers[i].value, msg.headers[i].value_len);
    }
    CHECK(msg.has_subset == (msg.subset != NULL));
    if (msg.has_subset)
        touch(msg.subset, msg.subset_len);
    if (msg.served)
        touch(msg.served, msg.served_len);
    if (msg.kind == SB_EXTPROC_REQUEST_BODY || msg.kind == SB_EXTPROC_RESPONSE_BODY) {
        CHECK(msg.body != NULL);
        touch(msg.body, msg.body_len);
        /* The echo of this chunk, as the picker sends it back in full-duplex mode. */
        sb_buf b = {0};
        sb_extproc_common c = {.kind = msg.kind,
                               .streamed = true,
                               .body = msg.body,
                               .body_len = msg.body_len,
                               .end_of_stream = msg.end_of_stream};
        CHECK(sb_extproc_encode_common(&c, &b) == 0);
        Envoy__Service__ExtProc__V3__ProcessingResponse *r =
            envoy__service__ext_proc__v3__processing_response__unpack(NULL, b.len, (const uint8_t *)b.data);
        CHECK(r != NULL);
        const Envoy__Service__ExtProc__V3__BodyResponse *br =
            msg.kind == SB_EXTPROC_REQUEST_BODY ? r->request_body : r->response_body;
        CHECK(br && br->response && br->response->body_mutation);
        const Envoy__Service__ExtProc__V3__StreamedBodyResponse *s = br->response->body_mutation->streamed_response;
        CHECK(s && s->body.len == msg.body_len && (!s->body.len || !memcmp(s->body.data, msg.body, msg.body_len)));
        CHECK(s->end_of_stream == msg.end_of_stream);
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
        sb_buf_free(&b);
    }
    sb_extproc_msg_free(&msg);
    return 0;
}
