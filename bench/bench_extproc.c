/* bench_extproc: the cost of the ext_proc codec (src/proto/extproc.c) on the picker's hot path.
 *
 * Built by `make bench` (build/bench/bench_extproc) and run by bench/run.sh.
 *
 * In full-duplex mode every body chunk crosses the codec twice: Envoy's request_body message is
 * decoded (protobuf-c copies the chunk into its tree) and the chunk goes back as a
 * streamed_response (packed once into the output; the structs point at the caller's bytes).
 * Measured on 62,000-byte chunks (the size the llm-d picker cuts, and our default chunk_bytes)
 * and on 1 KiB ones, against a plain memcpy of the same bytes; and the per-request messages:
 * a request_headers message of 12 headers decoded, the destination answer encoded.
 * Figures only: a benchmark never decides whether a build passes. */
#include "proto/extproc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extproc.pb-c.h"

static volatile uint64_t sink;
static sb_extproc_msg msg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A ProcessingRequest {request_body {body, end_of_stream}} packed by protobuf-c. */
static uint8_t *body_message(const uint8_t *chunk, size_t n, size_t *len)
{
    Envoy__Service__ExtProc__V3__HttpBody hb = ENVOY__SERVICE__EXT_PROC__V3__HTTP_BODY__INIT;
    hb.body.data = (uint8_t *)chunk;
    hb.body.len = n;
    Envoy__Service__ExtProc__V3__ProcessingRequest r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY;
    r.request_body = &hb;
    *len = envoy__service__ext_proc__v3__processing_request__get_packed_size(&r);
    uint8_t *out = malloc(*len);
    envoy__service__ext_proc__v3__processing_request__pack(&r, out);
    return out;
}

static uint8_t *headers_message(size_t *len)
{
    static const char *kv[][2] = {
        {":method", "POST"},
        {":path", "/v1/chat/completions"},
        {":authority", "gateway.example"},
        {":scheme", "https"},
        {"content-type", "application/json"},
        {"content-length", "61234"},
        {"authorization", "Bearer sk-0123456789abcdef0123456789abcdef"},
        {"user-agent", "openai-python/1.40.0"},
        {"x-request-id", "9f1c2e4a-5b6d-4e7f-8a9b-0c1d2e3f4a5b"},
        {"accept", "application/json"},
        {"x-forwarded-for", "10.1.2.3"},
        {"x-envoy-expected-rq-timeout-ms", "300000"},
    };
    enum { N = sizeof kv / sizeof kv[0] };
    Envoy__Config__Core__V3__HeaderValue hv[N];
    Envoy__Config__Core__V3__HeaderValue *hp[N];
    for (int i = 0; i < N; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key.data = (uint8_t *)kv[i][0];
        hv[i].key.len = strlen(kv[i][0]);
        hv[i].raw_value.data = (uint8_t *)kv[i][1];
        hv[i].raw_value.len = strlen(kv[i][1]);
        hp[i] = &hv[i];
    }
    Envoy__Config__Core__V3__HeaderMap hm = ENVOY__CONFIG__CORE__V3__HEADER_MAP__INIT;
    hm.n_headers = N;
    hm.headers = hp;
    Envoy__Service__ExtProc__V3__HttpHeaders hh = ENVOY__SERVICE__EXT_PROC__V3__HTTP_HEADERS__INIT;
    hh.headers = &hm;
    Envoy__Service__ExtProc__V3__ProcessingRequest r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
    r.request_headers = &hh;
    *len = envoy__service__ext_proc__v3__processing_request__get_packed_size(&r);
    uint8_t *out = malloc(*len);
    envoy__service__ext_proc__v3__processing_request__pack(&r, out);
    return out;
}

static void chunk_row(size_t n, long iters)
{
    uint8_t *chunk = malloc(n), *copy = malloc(n);
    for (size_t i = 0; i < n; i++)
        chunk[i] = (uint8_t)("{\"role\":\"user\",\"content\":\"hello\"}"[i % 34]);
    size_t len;
    uint8_t *m = body_message(chunk, n, &len);
    const char *why;
    sb_buf out = {0};

    double t0 = now_s();
    for (long i = 0; i < iters; i++) {
        memcpy(copy, chunk, n);
        sink += copy[i % n];
    }
    double t_copy = (now_s() - t0) / (double)iters;

    t0 = now_s();
    for (long i = 0; i < iters; i++) {
        if (sb_extproc_decode(m, len, &msg, &why) != 0)
            abort();
        sink += msg.body_len;
    }
    double t_dec = (now_s() - t0) / (double)iters;

    sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_BODY, .streamed = true, .body = chunk, .body_len = n};
    t0 = now_s();
    for (long i = 0; i < iters; i++) {
        out.len = 0;
        if (sb_extproc_encode_common(&c, &out) != 0)
            abort();
        sink += out.len;
    }
    double t_enc = (now_s() - t0) / (double)iters;
    printf("%7zu B chunk: memcpy %8.0f ns | decode %8.0f ns (%5.2f GB/s, %4.1fx memcpy) | encode echo %8.0f ns "
           "(%5.2f GB/s, %4.1fx memcpy)\n",
           n, t_copy * 1e9, t_dec * 1e9, (double)n / t_dec * 1e-9, t_dec / t_copy, t_enc * 1e9,
           (double)n / t_enc * 1e-9, t_enc / t_copy);
    sb_buf_free(&out);
    free(m);
    free(chunk);
    free(copy);
}

int main(void)
{
    chunk_row(62000, 20000);
    chunk_row(1024, 400000);

    size_t len;
    uint8_t *m = headers_message(&len);
    const char *why;
    long iters = 400000;
    double t0 = now_s();
    for (long i = 0; i < iters; i++) {
        if (sb_extproc_decode(m, len, &msg, &why) != 0)
            abort();
        sink += msg.n_headers;
    }
    double t_hdr = (now_s() - t0) / (double)iters;
    free(m);

    const char *dest = "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000,10.0.0.4:8000";
    sb_extproc_kv hdrs[] = {{"x-gateway-destination-endpoint", 30, dest, strlen(dest)},
                            {"content-length", 14, "61234", 5}};
    sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_HEADERS,
                           .set_headers = hdrs,
                           .n_set_headers = 2,
                           .clear_route_cache = true,
                           .metadata_ns = "envoy.lb",
                           .metadata = hdrs,
                           .n_metadata = 1};
    sb_buf out = {0};
    t0 = now_s();
    for (long i = 0; i < iters; i++) {
        out.len = 0;
        if (sb_extproc_encode_common(&c, &out) != 0)
            abort();
        sink += out.len;
    }
    double t_dest = (now_s() - t0) / (double)iters;
    printf("request_headers, 12 headers (%zu B): decode %6.0f ns | destination answer (%zu B): encode %6.0f ns\n", len,
           t_hdr * 1e9, out.len, t_dest * 1e9);
    sb_buf_free(&out);
    sb_extproc_msg_free(&msg);
    return 0;
}
