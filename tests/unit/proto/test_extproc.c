/* Tests for src/proto/extproc.c: Envoy's real encodings decoded (tests/fixtures/extproc/requests,
 * made by extproc_vectors.js from Envoy's .proto files), our encodings kept byte-identical to
 * the ones the real definitions were checked to read as intended (fixtures/extproc/responses),
 * hostile input (truncation, garbage, deep nesting, field floods), allocation failure. */
#include "sb_test.h"

#include <dirent.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "extproc.pb-c.h"
#include "proto/extproc.h"

#define REQ(name) "tests/fixtures/extproc/requests/" name ".bin"
#define RESP_DIR "tests/fixtures/extproc/responses/"

static sb_extproc_msg msg; /* 8 KB of headers: not on the stack */

static int decode_file(const char *path, const char **why)
{
    size_t len;
    char *data = sb_test_read_file(path, &len);
    /* A copy the exact size of the message, so ASan sees any read past its end. */
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, data, len);
    free(data);
    int rc = sb_extproc_decode(exact, len, &msg, why);
    /* Pointers into the tree stay valid after the input goes: protobuf-c copied what we keep.
     * Freeing the input now makes ASan catch any pointer that still points into it. */
    free(exact);
    return rc;
}

static void assert_bytes(const char *p, size_t n, const char *want)
{
    assert_non_null(p);
    if (n != strlen(want) || memcmp(p, want, n) != 0)
        fail_msg("got \"%.*s\" (%zu bytes), want \"%s\"", (int)n, p, n, want);
}

static void assert_header(size_t i, const char *key, const char *value)
{
    assert_true(i < msg.n_headers);
    assert_bytes(msg.headers[i].key, msg.headers[i].key_len, key);
    assert_bytes(msg.headers[i].value, msg.headers[i].value_len, value);
}

static void teardown_msg(void)
{
    sb_extproc_msg_free(&msg);
}

/* ---- Envoy's encodings ---- */

static void test_headers_raw_value(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(decode_file(REQ("headers_raw"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_HEADERS);
    assert_int_equal(msg.n_headers, 6);
    assert_header(0, ":method", "POST");
    assert_header(1, ":path", "/v1/chat/completions");
    assert_header(2, ":authority", "gw.example");
    assert_header(3, "content-type", "application/json");
    assert_header(4, "x-request-id", "req-1");
    assert_header(5, "x-empty", "");
    assert_false(msg.end_of_stream);
    assert_true(msg.has_subset);
    assert_bytes(msg.subset, msg.subset_len, "10.0.0.1:8000,10.0.0.2:8000");
    assert_null(msg.served);
    assert_true(msg.has_protocol_config);
    assert_int_equal(msg.request_body_mode, SB_EXTPROC_BODY_FULL_DUPLEX_STREAMED);
    assert_int_equal(msg.response_body_mode, SB_EXTPROC_BODY_FULL_DUPLEX_STREAMED);
    assert_false(msg.observability_mode);
    const sb_extproc_header *h = sb_extproc_header_find(&msg, "x-request-id");
    assert_non_null(h);
    assert_bytes(h->value, h->value_len, "req-1");
    assert_ptr_equal(sb_extproc_header_find(&msg, "Content-Type"), &msg.headers[3]);
    assert_null(sb_extproc_header_find(&msg, "x-request"));
    teardown_msg();
}

static void test_headers_value_and_both(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(decode_file(REQ("headers_value_eos"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_HEADERS);
    assert_int_equal(msg.n_headers, 3);
    assert_header(0, ":method", "GET");
    assert_header(1, ":path", "/v1/models");
    assert_header(2, "accept", "*/*");
    assert_true(msg.end_of_stream);
    assert_false(msg.has_subset);
    assert_false(msg.has_protocol_config);
    /* A second decode into the same msg frees the first and starts clean. */
    assert_int_equal(decode_file(REQ("headers_both"), &why), 0);
    assert_int_equal(msg.n_headers, 1);
    assert_header(0, "x-both", "from-value");
    assert_false(msg.end_of_stream);
    teardown_msg();
}

static void test_header_bound(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(decode_file(REQ("headers_256"), &why), 0);
    assert_int_equal(msg.n_headers, SB_EXTPROC_MAX_HEADERS);
    assert_header(255, "x-h255", "v255");
    why = NULL;
    assert_int_equal(decode_file(REQ("headers_257"), &why), SB_EXTPROC_ETOOMANY);
    assert_non_null(why);
    assert_int_equal(msg.n_headers, 0); /* nothing half-read is left for the caller */
    assert_int_equal(msg.kind, SB_EXTPROC_NONE);
    teardown_msg();
}

static void test_bodies(void **state)
{
    (void)state;
    const char *why = NULL;
    const char *body = "{\"model\":\"llama\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}";
    assert_int_equal(decode_file(REQ("body_chunk"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_BODY);
    assert_int_equal(msg.body_len, 20);
    assert_memory_equal(msg.body, body, 20);
    assert_false(msg.end_of_stream);
    assert_int_equal(decode_file(REQ("body_eos"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_BODY);
    assert_bytes((const char *)msg.body, msg.body_len, body);
    assert_true(msg.end_of_stream);
    assert_int_equal(decode_file(REQ("body_empty_eos"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_BODY);
    assert_non_null(msg.body);
    assert_int_equal(msg.body_len, 0);
    assert_true(msg.end_of_stream);
    assert_int_equal(decode_file(REQ("response_body_eos"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_RESPONSE_BODY);
    assert_bytes((const char *)msg.body, msg.body_len, "data: [DONE]\n\n");
    assert_true(msg.end_of_stream);
    assert_int_equal(decode_file(REQ("observability"), &why), 0);
    assert_true(msg.observability_mode);
    assert_bytes((const char *)msg.body, msg.body_len, "{}");
    teardown_msg();
}

static void test_subset_shapes(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(decode_file(REQ("subset_string"), &why), 0);
    assert_true(msg.has_subset);
    assert_bytes(msg.subset, msg.subset_len, "10.0.0.3:8000,10.0.0.4:8000");
    assert_int_equal(decode_file(REQ("subset_empty"), &why), 0);
    assert_true(msg.has_subset);
    assert_non_null(msg.subset);
    assert_int_equal(msg.subset_len, 0);
    /* A list with a number in it: refused, never read as a narrower or a wider subset. */
    why = NULL;
    assert_int_equal(decode_file(REQ("subset_number"), &why), SB_EXTPROC_EMALFORMED);
    assert_non_null(why);
    assert_false(msg.has_subset);
    teardown_msg();
}

static void test_served_and_phases(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(decode_file(REQ("served_string"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_RESPONSE_HEADERS);
    assert_bytes(msg.served, msg.served_len, "10.0.0.2:8000");
    assert_false(msg.has_subset);
    assert_header(0, ":status", "200");
    assert_header(2, "endpoint-load-metrics", "TEXT cpu_utilization=0.3");
    assert_int_equal(decode_file(REQ("served_list"), &why), 0);
    assert_bytes(msg.served, msg.served_len, "10.0.0.5:8000");
    assert_int_equal(decode_file(REQ("request_trailers"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_TRAILERS);
    assert_header(0, "x-trailer", "t");
    assert_int_equal(decode_file(REQ("response_trailers"), &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_RESPONSE_TRAILERS);
    assert_header(0, "grpc-status", "0");
    assert_int_equal(decode_file(REQ("protocol_buffered"), &why), 0);
    assert_true(msg.has_protocol_config);
    assert_int_equal(msg.request_body_mode, SB_EXTPROC_BODY_BUFFERED);
    assert_int_equal(msg.response_body_mode, SB_EXTPROC_BODY_NONE);
    teardown_msg();
}

/* ---- hostile input, built by hand ---- */

/* Protobuf bytes built back to front, so that wrapping a message in N levels is linear. */
typedef struct rev {
    uint8_t *buf;
    size_t cap, pos;
} rev;

static void rev_init(rev *r, size_t cap)
{
    r->buf = malloc(cap);
    assert_non_null(r->buf);
    r->cap = r->pos = cap;
}

static size_t rev_len(const rev *r)
{
    return r->cap - r->pos;
}
static const uint8_t *rev_data(const rev *r)
{
    return r->buf + r->pos;
}

static void rev_bytes(rev *r, const void *p, size_t n)
{
    assert_true(n <= r->pos);
    r->pos -= n;
    memcpy(r->buf + r->pos, p, n);
}

static void rev_varint(rev *r, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    rev_bytes(r, tmp, n);
}

/* Wraps everything written so far (since `mark` bytes were there) as field `field`. */
static void rev_wrap(rev *r, unsigned field, size_t mark)
{
    rev_varint(r, rev_len(r) - mark);
    rev_varint(r, (uint64_t)field << 3 | 2);
}

static void rev_field(rev *r, unsigned field, const char *s, size_t n)
{
    size_t mark = rev_len(r);
    rev_bytes(r, s, n);
    rev_wrap(r, field, mark);
}

static void rev_string(rev *r, unsigned field, const char *s)
{
    rev_field(r, field, s, strlen(s));
}

/* A ProcessingRequest {request_body {} , metadata_context {filter_metadata {ns:
 * {fields {key: value}}}}}, where the caller has already written the Value's contents; ns is
 * envoy.lb.subset_hint for the subset key, envoy.lb otherwise. */
static void rev_envoy_lb(rev *r, const char *key)
{
    const char *ns = strstr(key, "-subset") ? "envoy.lb.subset_hint" : "envoy.lb";
    rev_wrap(r, 2, 0);                   /* FieldsEntry.value = Value */
    rev_string(r, 1, key);               /* FieldsEntry.key */
    rev_wrap(r, 1, 0);                   /* Struct.fields */
    rev_wrap(r, 2, 0);                   /* FilterMetadataEntry.value = Struct */
    rev_string(r, 1, ns);                /* FilterMetadataEntry.key */
    rev_wrap(r, 1, 0);                   /* Metadata.filter_metadata */
    rev_wrap(r, 8, 0);                   /* ProcessingRequest.metadata_context */
    rev_bytes(r, "\x22\x02\x10\x01", 4); /* request_body {end_of_stream: true} */
}

/* A value nested `depth` lists deep ({list_value {values {list_value ...}}}) around "a". */
static void rev_deep_list(rev *r, int depth)
{
    rev_string(r, 3, "a");
    for (int i = 0; i < depth; i++) {
        rev_wrap(r, 1, 0); /* ListValue.values */
        rev_wrap(r, 6, 0); /* Value.list_value */
    }
}

static void test_deep_nesting_bounded(void **state)
{
    (void)state;
    const char *why = NULL;
    /* 200,000 levels: a decoder that recursed once per level would need far more stack than a
     * thread has; through the view the decoder goes five messages deep and keeps the rest as
     * one unknown field. Under a key the picker does not read: accepted. */
    rev r;
    rev_init(&r, 4 << 20);
    rev_deep_list(&r, 200000);
    rev_envoy_lb(&r, "x-unrelated");
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_BODY);
    assert_false(msg.has_subset);
    free(r.buf);
    /* Under the subset key: a list of lists is not a list of strings, refused. */
    rev_init(&r, 4 << 20);
    rev_deep_list(&r, 200000);
    rev_envoy_lb(&r, "x-gateway-destination-endpoint-subset");
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), SB_EXTPROC_EMALFORMED);
    free(r.buf);
    /* Under the served key: not a string, taken as absent. */
    rev_init(&r, 4 << 20);
    rev_deep_list(&r, 200000);
    rev_envoy_lb(&r, "x-gateway-destination-endpoint-served");
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), 0);
    assert_null(msg.served);
    free(r.buf);
    teardown_msg();
}

/* Thousands of empty submessages cost two bytes each on the wire and tens of bytes each
 * decoded: the decoder's budget refuses the flood before it takes the memory. */
static void test_field_flood_budget(void **state)
{
    (void)state;
    const char *why = NULL;
    rev r;
    rev_init(&r, 1 << 20);
    for (int i = 0; i < 200000; i++)
        rev_bytes(&r, "\x0a\x00", 2); /* Metadata.filter_metadata {} */
    rev_wrap(&r, 8, 0);
    rev_bytes(&r, "\x22\x00", 2);
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), SB_EXTPROC_ETOOMANY);
    assert_non_null(why);
    free(r.buf);
    /* The same shape at a legitimate size decodes. */
    rev_init(&r, 1 << 10);
    for (int i = 0; i < 16; i++)
        rev_bytes(&r, "\x0a\x00", 2);
    rev_wrap(&r, 8, 0);
    rev_bytes(&r, "\x22\x00", 2);
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), 0);
    free(r.buf);
    teardown_msg();
}

/* Keys are compared with their exact length: a namespace "envoy.lb.subset_hint\0x" (a NUL
 * inside) is not envoy.lb.subset_hint, as a NUL-terminated copy compared with strcmp would
 * have it. */
static void test_exact_keys(void **state)
{
    (void)state;
    const char *why = NULL;
    rev r;
    rev_init(&r, 1 << 10);
    rev_string(&r, 3, "10.9.9.9:80");                           /* Value.string_value */
    rev_wrap(&r, 2, 0);                                         /* FieldsEntry.value */
    rev_string(&r, 1, "x-gateway-destination-endpoint-subset"); /* FieldsEntry.key */
    rev_wrap(&r, 1, 0);                                         /* Struct.fields */
    rev_wrap(&r, 2, 0);                                         /* FilterMetadataEntry.value */
    rev_field(&r, 1, "envoy.lb.subset_hint\0x", 22);            /* FilterMetadataEntry.key */
    rev_wrap(&r, 1, 0);
    rev_wrap(&r, 8, 0);
    rev_bytes(&r, "\x22\x00", 2);
    assert_int_equal(sb_extproc_decode(rev_data(&r), rev_len(&r), &msg, &why), 0);
    assert_false(msg.has_subset);
    free(r.buf);
    /* A header name with a NUL keeps its whole length. */
    /* request_headers {headers {headers {key "a\0b", raw_value "vv"}}} */
    static const uint8_t nul_key[] = {0x12, 0x0d, 0x0a, 0x0b, 0x0a, 0x09, 0x0a, 0x03,
                                      'a',  0,    'b',  0x1a, 0x02, 'v',  'v'};
    assert_int_equal(sb_extproc_decode(nul_key, sizeof nul_key, &msg, &why), 0);
    assert_int_equal(msg.n_headers, 1);
    assert_int_equal(msg.headers[0].key_len, 3);
    assert_null(sb_extproc_header_find(&msg, "a"));
    teardown_msg();
}

static void test_malformed(void **state)
{
    (void)state;
    const char *why = NULL;
    size_t len;
    char *good = sb_test_read_file(REQ("headers_raw"), &len);
    /* Every truncation of a real message: an error or a shorter valid message, never a crash
     * or a read past the end (each prefix is its own exact-size allocation). */
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, good, n);
        int rc = sb_extproc_decode(cut, n, &msg, &why);
        assert_true(rc == 0 || rc == SB_EXTPROC_EMALFORMED);
        assert_true(msg.n_headers <= 6);
        free(cut);
    }
    free(good);
    /* No phase at all. */
    assert_int_equal(sb_extproc_decode((const uint8_t *)"", 0, &msg, &why), SB_EXTPROC_EMALFORMED);
    assert_int_equal(sb_extproc_decode((const uint8_t *)"\x50\x01", 2, &msg, &why), SB_EXTPROC_EMALFORMED);
    /* Garbage: a length past the end, a wire type that does not exist, a varint that never ends. */
    assert_int_equal(sb_extproc_decode((const uint8_t *)"\x12\x7f\x0a", 3, &msg, &why), SB_EXTPROC_EMALFORMED);
    assert_int_equal(sb_extproc_decode((const uint8_t *)"\x17\x00", 2, &msg, &why), SB_EXTPROC_EMALFORMED);
    assert_int_equal(
        sb_extproc_decode((const uint8_t *)"\x50\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, &msg, &why),
        SB_EXTPROC_EMALFORMED);
    /* A header with no name. */
    assert_int_equal(sb_extproc_decode((const uint8_t *)"\x12\x06\x0a\x04\x0a\x02\x1a\x00", 8, &msg, &why),
                     SB_EXTPROC_EMALFORMED);
    /* protocol_config with a body mode Envoy does not define (99). */
    assert_int_equal(sb_extproc_decode((const uint8_t *)"\x22\x00\x5a\x02\x08\x63", 6, &msg, &why),
                     SB_EXTPROC_EMALFORMED);
    assert_non_null(strstr(why, "body mode"));
    /* Unknown fields of every wire type around a valid phase are skipped. */
    static const uint8_t unknown[] = {0x78, 0x05, 0x81, 0x01, 1, 2,    3,    4,    5,    6,    7,    8,    0x8d,
                                      0x01, 1,    2,    3,    4, 0x92, 0x01, 0x01, 0xff, 0x22, 0x02, 0x10, 0x01};
    assert_int_equal(sb_extproc_decode(unknown, sizeof unknown, &msg, &why), 0);
    assert_int_equal(msg.kind, SB_EXTPROC_REQUEST_BODY);
    assert_true(msg.end_of_stream);
    teardown_msg();
}

static void test_alloc_failure(void **state)
{
    (void)state;
    const char *why = NULL;
    size_t len;
    char *good = sb_test_read_file(REQ("headers_raw"), &len);
    /* Fail the n-th allocation for every n: each ends in ENOMEM, nothing leaks (ASan). */
    for (long n = 0;; n++) {
        sb_alloc_fail_after(n);
        int rc = sb_extproc_decode((const uint8_t *)good, len, &msg, &why);
        sb_alloc_fail_after(-1);
        if (rc == 0)
            break;
        assert_int_equal(rc, SB_EXTPROC_ENOMEM);
        assert_true(n < 1000);
    }
    assert_int_equal(msg.n_headers, 6);
    teardown_msg();
    free(good);
}

/* ---- our encodings ---- */

static const char *DEST = "10.0.0.1:8000,10.0.0.2:8000";

/* Compares an encoding with its committed fixture, or writes the fixture when
 * SB_EXTPROC_WRITE_VECTORS is set (then extproc_vectors.js check reads it with Envoy's
 * definitions). */
static void check_vector(const char *name, const sb_buf *b)
{
    char path[256];
    snprintf(path, sizeof path, RESP_DIR "%s.bin", name);
    if (getenv("SB_EXTPROC_WRITE_VECTORS")) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
        fclose(f);
        return;
    }
    size_t len;
    char *want = sb_test_read_file(path, &len);
    if (len != b->len || memcmp(want, b->data, len) != 0)
        fail_msg("%s: our encoding (%zu bytes) differs from the checked fixture (%zu bytes)", name, b->len, len);
    free(want);
}

static Envoy__Service__ExtProc__V3__ProcessingResponse *unpack(const sb_buf *b)
{
    Envoy__Service__ExtProc__V3__ProcessingResponse *r =
        envoy__service__ext_proc__v3__processing_response__unpack(NULL, b->len, (const uint8_t *)b->data);
    assert_non_null(r);
    return r;
}

static void assert_set_header(const Envoy__Service__ExtProc__V3__HeaderMutation *m, size_t i, const char *key,
                              const char *value)
{
    assert_non_null(m);
    assert_true(i < m->n_set_headers);
    const Envoy__Config__Core__V3__HeaderValueOption *o = m->set_headers[i];
    assert_bytes((const char *)o->header->key.data, o->header->key.len, key);
    assert_bytes((const char *)o->header->raw_value.data, o->header->raw_value.len, value);
    assert_int_equal(o->header->value.len, 0);
    assert_int_equal(o->append_action,
                     ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD);
}

static void assert_lb_metadata(const Envoy__Service__ExtProc__V3__ProcessingResponse *r)
{
    const Google__Protobuf__Struct *md = r->dynamic_metadata;
    assert_non_null(md);
    assert_int_equal(md->n_fields, 1);
    assert_bytes((const char *)md->fields[0]->key.data, md->fields[0]->key.len, "envoy.lb");
    const Google__Protobuf__Value *v = md->fields[0]->value;
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
    assert_int_equal(v->struct_value->n_fields, 1);
    const Google__Protobuf__Struct__FieldsEntry *e = v->struct_value->fields[0];
    assert_bytes((const char *)e->key.data, e->key.len, "x-gateway-destination-endpoint");
    assert_int_equal(e->value->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    assert_bytes((const char *)e->value->string_value.data, e->value->string_value.len, DEST);
}

static void test_encode_destination(void **state)
{
    (void)state;
    sb_buf b = {0};
    sb_extproc_kv hdrs[] = {{"x-gateway-destination-endpoint", 30, DEST, strlen(DEST)},
                            {"content-length", 14, "74", 2}};
    sb_extproc_kv md[] = {{"x-gateway-destination-endpoint", 30, DEST, strlen(DEST)}};
    sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_HEADERS,
                           .set_headers = hdrs,
                           .n_set_headers = 2,
                           .clear_route_cache = true,
                           .metadata_ns = "envoy.lb",
                           .metadata = md,
                           .n_metadata = 1};
    assert_int_equal(sb_extproc_encode_common(&c, &b), 0);
    check_vector("headers_destination", &b);
    Envoy__Service__ExtProc__V3__ProcessingResponse *r = unpack(&b);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS);
    const Envoy__Service__ExtProc__V3__CommonResponse *cr = r->request_headers->response;
    assert_true(cr->clear_route_cache);
    assert_null(cr->body_mutation);
    assert_int_equal(cr->header_mutation->n_set_headers, 2);
    assert_set_header(cr->header_mutation, 0, "x-gateway-destination-endpoint", DEST);
    assert_set_header(cr->header_mutation, 1, "content-length", "74");
    assert_lb_metadata(r);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    sb_buf_free(&b);
}

static void test_encode_bodies(void **state)
{
    (void)state;
    sb_buf b = {0};
    const char *served = "{\"model\":\"served\"}";
    /* Full duplex: a streamed chunk, the last. */
    sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_BODY,
                           .streamed = true,
                           .body = (const uint8_t *)served,
                           .body_len = strlen(served),
                           .end_of_stream = true};
    assert_int_equal(sb_extproc_encode_common(&c, &b), 0);
    check_vector("body_streamed", &b);
    Envoy__Service__ExtProc__V3__ProcessingResponse *r = unpack(&b);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY);
    const Envoy__Service__ExtProc__V3__BodyMutation *bm = r->request_body->response->body_mutation;
    assert_int_equal(bm->mutation_case, ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE);
    assert_bytes((const char *)bm->streamed_response->body.data, bm->streamed_response->body.len, served);
    assert_true(bm->streamed_response->end_of_stream);
    assert_null(r->dynamic_metadata);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    /* Buffered: destination, route cache, the whole rewritten body, metadata in one answer. */
    sb_buf_reset(&b);
    sb_extproc_kv hdrs[] = {{"x-gateway-destination-endpoint", 30, DEST, strlen(DEST)}};
    sb_extproc_common bc = {.kind = SB_EXTPROC_REQUEST_BODY,
                            .set_headers = hdrs,
                            .n_set_headers = 1,
                            .clear_route_cache = true,
                            .replace_body = true,
                            .body = (const uint8_t *)served,
                            .body_len = strlen(served),
                            .metadata_ns = "envoy.lb",
                            .metadata = hdrs,
                            .n_metadata = 1};
    assert_int_equal(sb_extproc_encode_common(&bc, &b), 0);
    check_vector("body_buffered", &b);
    r = unpack(&b);
    const Envoy__Service__ExtProc__V3__CommonResponse *cr = r->request_body->response;
    assert_true(cr->clear_route_cache);
    assert_set_header(cr->header_mutation, 0, "x-gateway-destination-endpoint", DEST);
    assert_int_equal(cr->body_mutation->mutation_case, ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY);
    assert_bytes((const char *)cr->body_mutation->body.data, cr->body_mutation->body.len, served);
    assert_lb_metadata(r);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    /* Response phase: headers CONTINUE (no common response at all), a chunk echoed. */
    sb_buf_reset(&b);
    sb_extproc_common rh = {.kind = SB_EXTPROC_RESPONSE_HEADERS};
    assert_int_equal(sb_extproc_encode_common(&rh, &b), 0);
    check_vector("response_headers_continue", &b);
    r = unpack(&b);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS);
    assert_null(r->response_headers->response);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    sb_buf_reset(&b);
    const char *chunk = "data: {\"x\":1}\n\n";
    sb_extproc_common rb = {
        .kind = SB_EXTPROC_RESPONSE_BODY, .streamed = true, .body = (const uint8_t *)chunk, .body_len = strlen(chunk)};
    assert_int_equal(sb_extproc_encode_common(&rb, &b), 0);
    check_vector("response_body_echo", &b);
    r = unpack(&b);
    bm = r->response_body->response->body_mutation;
    assert_bytes((const char *)bm->streamed_response->body.data, bm->streamed_response->body.len, chunk);
    assert_false(bm->streamed_response->end_of_stream);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    /* A streamed last chunk with no bytes still says end_of_stream. */
    sb_buf_reset(&b);
    sb_extproc_common last = {.kind = SB_EXTPROC_REQUEST_BODY, .streamed = true, .end_of_stream = true};
    assert_int_equal(sb_extproc_encode_common(&last, &b), 0);
    r = unpack(&b);
    bm = r->request_body->response->body_mutation;
    assert_int_equal(bm->mutation_case, ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE);
    assert_int_equal(bm->streamed_response->body.len, 0);
    assert_true(bm->streamed_response->end_of_stream);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    /* Misuse is refused, and leaves the buffer as it was. */
    size_t before = b.len;
    sb_extproc_common bad = {.kind = SB_EXTPROC_REQUEST_HEADERS, .streamed = true};
    assert_int_equal(sb_extproc_encode_common(&bad, &b), -1);
    sb_extproc_common both = {.kind = SB_EXTPROC_REQUEST_BODY, .streamed = true, .replace_body = true};
    assert_int_equal(sb_extproc_encode_common(&both, &b), -1);
    sb_extproc_common trailers = {.kind = SB_EXTPROC_REQUEST_TRAILERS};
    assert_int_equal(sb_extproc_encode_common(&trailers, &b), -1);
    assert_int_equal(b.len, before);
    sb_buf_free(&b);
}

static void test_encode_trailers_and_immediate(void **state)
{
    (void)state;
    sb_buf b = {0};
    assert_int_equal(sb_extproc_encode_trailers(SB_EXTPROC_REQUEST_TRAILERS, &b), 0);
    check_vector("request_trailers", &b);
    sb_buf_reset(&b);
    assert_int_equal(sb_extproc_encode_trailers(SB_EXTPROC_RESPONSE_TRAILERS, &b), 0);
    check_vector("response_trailers", &b);
    assert_int_equal(sb_extproc_encode_trailers(SB_EXTPROC_REQUEST_BODY, &b), -1);

    sb_buf_reset(&b);
    const char *body = "{\"error\":{\"message\":\"queue full\",\"type\":\"rate_limit_exceeded\",\"param\":null,"
                       "\"code\":\"queue_full\"}}";
    sb_extproc_kv hdrs[] = {{"content-type", 12, "application/json", 16},
                            {"x-request-id", 12, "req-1", 5},
                            {"retry-after", 11, "1", 1},
                            {"x-switchboard-refusal", 21, "queue_full", 10}};
    assert_int_equal(sb_extproc_encode_immediate(429, hdrs, 4, body, strlen(body), "shed", &b), 0);
    check_vector("immediate_429", &b);
    Envoy__Service__ExtProc__V3__ProcessingResponse *r = unpack(&b);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    const Envoy__Service__ExtProc__V3__ImmediateResponse *ir = r->immediate_response;
    assert_int_equal(ir->status->code, 429);
    assert_int_equal(ir->headers->n_set_headers, 4);
    assert_set_header(ir->headers, 3, "x-switchboard-refusal", "queue_full");
    assert_bytes((const char *)ir->body.data, ir->body.len, body);
    assert_bytes((const char *)ir->details.data, ir->details.len, "shed");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    sb_buf_reset(&b);
    assert_int_equal(sb_extproc_encode_immediate(503, NULL, 0, NULL, 0, NULL, &b), 0);
    check_vector("immediate_503", &b);
    r = unpack(&b);
    assert_int_equal(r->immediate_response->status->code, 503);
    assert_null(r->immediate_response->headers);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);

    /* Allocation failure while encoding: -1, nothing appended, nothing leaked. */
    sb_buf_reset(&b);
    sb_alloc_fail_after(0);
    assert_int_equal(sb_extproc_encode_immediate(429, hdrs, 4, body, strlen(body), "shed", &b), -1);
    sb_alloc_fail_after(-1);
    assert_int_equal(b.len, 0);
    sb_buf_free(&b);
}

/* Encoding appends: several messages in one buffer stay whole and in order. */
static void test_encode_appends(void **state)
{
    (void)state;
    sb_buf b = {0};
    assert_int_equal(sb_buf_append(&b, "XY", 2), 0);
    assert_int_equal(sb_extproc_encode_trailers(SB_EXTPROC_RESPONSE_TRAILERS, &b), 0);
    size_t first = b.len;
    assert_int_equal(sb_health_encode_response(SB_HEALTH_SERVING, &b), 0);
    assert_memory_equal(b.data, "XY", 2);
    assert_memory_equal(b.data + 2, "\x32\x00", 2); /* response_trailers {} */
    assert_int_equal(first, 4);
    assert_memory_equal(b.data + first, "\x08\x01", 2);
    sb_buf_free(&b);
}

/* ---- grpc.health.v1 ---- */

static void test_health(void **state)
{
    (void)state;
    const char *svc;
    size_t svc_len;
    size_t len;
    char *data = sb_test_read_file(REQ("health_named"), &len);
    assert_int_equal(sb_health_decode_request((const uint8_t *)data, len, &svc, &svc_len), 0);
    assert_bytes(svc, svc_len, "envoy.service.ext_proc.v3.ExternalProcessor");
    assert_true(svc >= data && svc + svc_len <= data + len); /* points into the message */
    free(data);
    data = sb_test_read_file(REQ("health_empty"), &len);
    assert_int_equal(len, 0);
    assert_int_equal(sb_health_decode_request((const uint8_t *)data, len, &svc, &svc_len), 0);
    assert_int_equal(svc_len, 0);
    free(data);
    /* Unknown fields skipped; truncation and garbage refused. */
    assert_int_equal(
        sb_health_decode_request((const uint8_t *)"\x10\x05\x0a\x01x\x1d\x01\x02\x03\x04", 10, &svc, &svc_len), 0);
    assert_bytes(svc, svc_len, "x");
    assert_int_equal(sb_health_decode_request((const uint8_t *)"\x0a\x05xy", 4, &svc, &svc_len), SB_EXTPROC_EMALFORMED);
    assert_int_equal(sb_health_decode_request((const uint8_t *)"\x0b", 1, &svc, &svc_len), SB_EXTPROC_EMALFORMED);
    assert_int_equal(sb_health_decode_request((const uint8_t *)"\x00\x00", 2, &svc, &svc_len), SB_EXTPROC_EMALFORMED);
    assert_int_equal(
        sb_health_decode_request((const uint8_t *)"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11, &svc, &svc_len),
        SB_EXTPROC_EMALFORMED);
    assert_int_equal(sb_health_decode_request((const uint8_t *)"\x09\x01", 2, &svc, &svc_len), SB_EXTPROC_EMALFORMED);

    sb_buf b = {0};
    assert_int_equal(sb_health_encode_response(SB_HEALTH_SERVING, &b), 0);
    check_vector("health_serving", &b);
    sb_buf_reset(&b);
    assert_int_equal(sb_health_encode_response(SB_HEALTH_NOT_SERVING, &b), 0);
    check_vector("health_not_serving", &b);
    sb_buf_reset(&b);
    assert_int_equal(sb_health_encode_response(SB_HEALTH_SERVICE_UNKNOWN, &b), 0);
    assert_int_equal(b.len, 2);
    assert_memory_equal(b.data, "\x08\x03", 2);
    sb_buf_reset(&b);
    assert_int_equal(sb_health_encode_response(SB_HEALTH_UNKNOWN, &b), 0);
    assert_int_equal(b.len, 0); /* proto3: the default is not written */
    sb_buf_free(&b);
}

/* The fuzz corpus, replayed: no crash, bounds kept. */
static void test_corpus(void **state)
{
    (void)state;
    const char *why;
    char path[1024];
    int files = 0;
    DIR *dir = opendir("tests/fuzz/corpus/extproc");
    if (!dir)
        fail_msg("cannot open tests/fuzz/corpus/extproc (run from the repository root)");
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "tests/fuzz/corpus/extproc/%s", e->d_name);
        int rc = decode_file(path, &why);
        assert_true(rc == 0 || rc == SB_EXTPROC_EMALFORMED || rc == SB_EXTPROC_ETOOMANY);
        assert_true(msg.n_headers <= SB_EXTPROC_MAX_HEADERS);
        files++;
    }
    closedir(dir);
    teardown_msg();
    assert_true(files >= 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_raw_value),
        cmocka_unit_test(test_headers_value_and_both),
        cmocka_unit_test(test_header_bound),
        cmocka_unit_test(test_bodies),
        cmocka_unit_test(test_subset_shapes),
        cmocka_unit_test(test_served_and_phases),
        cmocka_unit_test(test_deep_nesting_bounded),
        cmocka_unit_test(test_field_flood_budget),
        cmocka_unit_test(test_exact_keys),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_encode_destination),
        cmocka_unit_test(test_encode_bodies),
        cmocka_unit_test(test_encode_trailers_and_immediate),
        cmocka_unit_test(test_encode_appends),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
