/* extproc: ext_proc and gRPC health messages, decoded and encoded with protobuf-c over the
 * subset schema in extproc*.proto and health.proto (generated into build/gen/).
 *
 * Decoding allocates (protobuf-c builds a tree of the message: every submessage, byte string
 * and unknown field is a copy). Those allocations go through a counting allocator with a
 * budget proportional to the message's size, so a hostile message of many tiny fields cannot
 * make the decoder take far more memory than the gRPC layer's message bound already allows;
 * the tree lives in *msg until the next decode or sb_extproc_msg_free. Recursion is bounded
 * by the schema itself (extproc_struct.proto: metadata is read through a view that stops at
 * lists of strings), so no input makes the decoder descend deeper than five messages.
 *
 * Encoding builds protobuf-c structs on the stack that point at the caller's bytes (no copy of
 * a body chunk), sizes them, and packs once into the output buffer. */
#include "proto/extproc.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "extproc.pb-c.h"
#include "health.pb-c.h"

/* Names protobuf-c derives from the packages are long; these are the ones used here. */
typedef Envoy__Service__ExtProc__V3__ProcessingRequest pb_request;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse pb_response;
typedef Envoy__Config__Core__V3__HeaderMap pb_header_map;
typedef Envoy__Config__Core__V3__HeaderValue pb_header;
typedef Envoy__Config__Core__V3__HeaderValueOption pb_header_option;
typedef Google__Protobuf__StructView pb_struct_view;
typedef Google__Protobuf__ValueView pb_value_view;

/* The decoder's budget: 16 bytes of tree per byte of message, plus a floor. A legitimate
 * message expands far less (a body chunk about 1x; 256 one-letter headers about 16x, which
 * the floor covers); a message of thousands of empty submessages or unknown fields (two bytes
 * each on the wire, 24 to 80 bytes each decoded) runs into it and is refused as too many
 * fields. */
#define DECODE_BYTES_PER_BYTE 16
#define DECODE_FLOOR_BYTES (64 * 1024)

/* The picker's keys in request metadata (Gateway API Inference Extension, endpoint-picker
 * protocol: docs/proposals/004-endpoint-picker-protocol). */
#define LB_NAMESPACE "envoy.lb"
#define SUBSET_NAMESPACE "envoy.lb.subset_hint"
#define KEY_SUBSET "x-gateway-destination-endpoint-subset"
#define KEY_SERVED "x-gateway-destination-endpoint-served"

typedef struct decoder {
    ProtobufCAllocator alloc; /* allocator_data points back here */
    size_t used, budget;
    bool over_budget, out_of_memory;
    pb_request *req; /* the tree of the last decode, or NULL */
    sb_buf subset;   /* a subset list joined with ',' */
} decoder;

static void *counted_alloc(void *data, size_t n)
{
    decoder *d = data;
    if (n > d->budget - d->used) {
        d->over_budget = true;
        return NULL;
    }
    void *p = sb_malloc(n);
    if (!p) {
        d->out_of_memory = true;
        return NULL;
    }
    d->used += n;
    return p;
}

static void counted_free(void *data, void *p)
{
    (void)data;
    sb_free(p);
}

static void release_tree(decoder *d)
{
    if (d->req)
        protobuf_c_message_free_unpacked(&d->req->base, &d->alloc);
    d->req = NULL;
}

/* Resets what a decode fills; the header array is left as it is (n_headers says how much of
 * it holds), which spares clearing 8 KB for every body chunk. */
static void reset_fields(sb_extproc_msg *m)
{
    m->kind = SB_EXTPROC_NONE;
    m->n_headers = 0;
    m->end_of_stream = false;
    m->body = NULL;
    m->body_len = 0;
    m->has_subset = false;
    m->subset = NULL;
    m->subset_len = 0;
    m->served = NULL;
    m->served_len = 0;
    m->has_protocol_config = false;
    m->request_body_mode = m->response_body_mode = SB_EXTPROC_BODY_NONE;
    m->observability_mode = false;
}

static bool bytes_eq(ProtobufCBinaryData b, const char *s)
{
    size_t n = strlen(s);
    return b.len == n && memcmp(b.data, s, n) == 0;
}

static const char *chars(ProtobufCBinaryData b)
{
    return b.len ? (const char *)b.data : "";
}

static int read_headers(const pb_header_map *hm, sb_extproc_msg *m, const char **why)
{
    if (!hm)
        return 0;
    if (hm->n_headers > SB_EXTPROC_MAX_HEADERS) {
        *why = "more headers than the picker keeps";
        return SB_EXTPROC_ETOOMANY;
    }
    for (size_t i = 0; i < hm->n_headers; i++) {
        const pb_header *h = hm->headers[i];
        if (h->key.len == 0) {
            *why = "header with an empty name";
            return SB_EXTPROC_EMALFORMED;
        }
        sb_extproc_header *out = &m->headers[i];
        out->key = chars(h->key);
        out->key_len = h->key.len;
        /* Envoy sets one of the two ("only one of value or raw_value can be set", base.proto);
         * since 1.29 it fills raw_value. */
        ProtobufCBinaryData v = h->value.len ? h->value : h->raw_value;
        out->value = chars(v);
        out->value_len = v.len;
    }
    m->n_headers = hm->n_headers;
    return 0;
}

/* The last entry of a Struct view under key, or NULL (a repeated key in a map: the last one
 * wins, as protobuf's own decoders do). */
static const pb_value_view *struct_get(const pb_struct_view *s, const char *key)
{
    const pb_value_view *v = NULL;
    for (size_t i = 0; s && i < s->n_fields; i++)
        if (bytes_eq(s->fields[i]->key, key) && s->fields[i]->value)
            v = s->fields[i]->value;
    return v;
}

/* The endpoint subset: a string "a,b" as it is, or a list of strings joined with ','. Any
 * other shape is refused rather than ignored: ignoring it would widen the candidates to the
 * whole pool, which is the opposite of what the proxy asked. */
static int read_subset(decoder *d, const pb_value_view *v, sb_extproc_msg *m, const char **why)
{
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE_VIEW__KIND_STRING_VALUE) {
        m->subset = chars(v->string_value);
        m->subset_len = v->string_value.len;
    } else if (v->kind_case == GOOGLE__PROTOBUF__VALUE_VIEW__KIND_LIST_VALUE) {
        const Google__Protobuf__ListValueView *l = v->list_value;
        d->subset.len = 0;
        for (size_t i = 0; l && i < l->n_values; i++) {
            const Google__Protobuf__ListItemView *it = l->values[i];
            if (it->kind_case != GOOGLE__PROTOBUF__LIST_ITEM_VIEW__KIND_STRING_VALUE) {
                *why = KEY_SUBSET " lists something other than strings";
                return SB_EXTPROC_EMALFORMED;
            }
            if ((i && sb_buf_append(&d->subset, ",", 1) < 0) ||
                sb_buf_append(&d->subset, it->string_value.data, it->string_value.len) < 0) {
                *why = "out of memory";
                return SB_EXTPROC_ENOMEM;
            }
        }
        m->subset = d->subset.len ? d->subset.data : "";
        m->subset_len = d->subset.len;
    } else {
        *why = KEY_SUBSET " is neither a string nor a list";
        return SB_EXTPROC_EMALFORMED;
    }
    m->has_subset = true;
    return 0;
}

/* The served endpoint: a string, or the first string of a list. Anything else is taken as
 * absent: the accounting then stays on the endpoint the picker chose, which is the best
 * guess, and a response already under way is not cut for a metadata shape. */
static void read_served(const pb_value_view *v, sb_extproc_msg *m)
{
    ProtobufCBinaryData s = {0, NULL};
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE_VIEW__KIND_STRING_VALUE)
        s = v->string_value;
    else if (v->kind_case == GOOGLE__PROTOBUF__VALUE_VIEW__KIND_LIST_VALUE && v->list_value &&
             v->list_value->n_values > 0 &&
             v->list_value->values[0]->kind_case == GOOGLE__PROTOBUF__LIST_ITEM_VIEW__KIND_STRING_VALUE)
        s = v->list_value->values[0]->string_value;
    if (s.len) {
        m->served = (const char *)s.data;
        m->served_len = s.len;
    }
}

static int read_metadata(decoder *d, const Envoy__Config__Core__V3__Metadata *md, sb_extproc_msg *m, const char **why)
{
    /* The subset lives in its own namespace (envoy.lb.subset_hint, as the Inference
     * Extension's SubsetFilter and the proxies that fill it name it); the served endpoint in
     * envoy.lb. */
    const pb_struct_view *lb = NULL, *hint = NULL;
    for (size_t i = 0; md && i < md->n_filter_metadata; i++) {
        if (bytes_eq(md->filter_metadata[i]->key, LB_NAMESPACE))
            lb = md->filter_metadata[i]->value;
        else if (bytes_eq(md->filter_metadata[i]->key, SUBSET_NAMESPACE))
            hint = md->filter_metadata[i]->value;
    }
    const pb_value_view *v = hint ? struct_get(hint, KEY_SUBSET) : NULL;
    if (v) {
        int rc = read_subset(d, v, m, why);
        if (rc)
            return rc;
    }
    v = lb ? struct_get(lb, KEY_SERVED) : NULL;
    if (v)
        read_served(v, m);
    return 0;
}

static bool body_mode(int v, enum sb_extproc_body_mode *out)
{
    if (v < SB_EXTPROC_BODY_NONE || v > SB_EXTPROC_BODY_GRPC)
        return false;
    *out = (enum sb_extproc_body_mode)v;
    return true;
}

static int read_request(decoder *d, const pb_request *r, sb_extproc_msg *m, const char **why)
{
    const Envoy__Service__ExtProc__V3__HttpHeaders *hh = NULL;
    const Envoy__Service__ExtProc__V3__HttpBody *hb = NULL;
    const Envoy__Service__ExtProc__V3__HttpTrailers *ht = NULL;
    switch (r->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
        m->kind = SB_EXTPROC_REQUEST_HEADERS;
        hh = r->request_headers;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        m->kind = SB_EXTPROC_RESPONSE_HEADERS;
        hh = r->response_headers;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
        m->kind = SB_EXTPROC_REQUEST_BODY;
        hb = r->request_body;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        m->kind = SB_EXTPROC_RESPONSE_BODY;
        hb = r->response_body;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
        m->kind = SB_EXTPROC_REQUEST_TRAILERS;
        ht = r->request_trailers;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        m->kind = SB_EXTPROC_RESPONSE_TRAILERS;
        ht = r->response_trailers;
        break;
    default: *why = "no phase set in the ProcessingRequest"; return SB_EXTPROC_EMALFORMED;
    }
    int rc = 0;
    if (hh) {
        rc = read_headers(hh->headers, m, why);
        m->end_of_stream = hh->end_of_stream;
    } else if (hb) {
        m->body = hb->body.len ? hb->body.data : (const uint8_t *)"";
        m->body_len = hb->body.len;
        m->end_of_stream = hb->end_of_stream;
    } else if (ht) {
        rc = read_headers(ht->trailers, m, why);
        m->end_of_stream = true; /* trailers end their direction */
    }
    if (rc)
        return rc;
    if (r->protocol_config) {
        if (!body_mode(r->protocol_config->request_body_mode, &m->request_body_mode) ||
            !body_mode(r->protocol_config->response_body_mode, &m->response_body_mode)) {
            *why = "unknown body mode in protocol_config";
            return SB_EXTPROC_EMALFORMED;
        }
        m->has_protocol_config = true;
    }
    m->observability_mode = r->observability_mode;
    return read_metadata(d, r->metadata_context, m, why);
}

int sb_extproc_decode(const uint8_t *buf, size_t len, sb_extproc_msg *msg, const char **why)
{
    static const char *unused;
    if (!why)
        why = &unused;
    decoder *d = msg->priv_;
    if (!d) {
        d = sb_calloc(1, sizeof *d);
        if (!d) {
            *why = "out of memory";
            return SB_EXTPROC_ENOMEM;
        }
        d->alloc.alloc = counted_alloc;
        d->alloc.free = counted_free;
        d->alloc.allocator_data = d;
        msg->priv_ = d;
    }
    release_tree(d);
    reset_fields(msg);
    d->used = 0;
    d->budget = len > (SIZE_MAX - DECODE_FLOOR_BYTES) / DECODE_BYTES_PER_BYTE
                    ? SIZE_MAX
                    : len * DECODE_BYTES_PER_BYTE + DECODE_FLOOR_BYTES;
    d->over_budget = d->out_of_memory = false;
    d->req = envoy__service__ext_proc__v3__processing_request__unpack(&d->alloc, len, buf);
    if (!d->req) {
        if (d->out_of_memory) {
            *why = "out of memory";
            return SB_EXTPROC_ENOMEM;
        }
        if (d->over_budget) {
            *why = "too many fields for the message's size";
            return SB_EXTPROC_ETOOMANY;
        }
        *why = "not a ProcessingRequest";
        return SB_EXTPROC_EMALFORMED;
    }
    int rc = read_request(d, d->req, msg, why);
    if (rc)
        reset_fields(msg);
    return rc;
}

void sb_extproc_msg_free(sb_extproc_msg *msg)
{
    decoder *d = msg->priv_;
    if (d) {
        release_tree(d);
        sb_buf_free(&d->subset);
        sb_free(d);
    }
    msg->priv_ = NULL;
    reset_fields(msg);
}

const sb_extproc_header *sb_extproc_header_find(const sb_extproc_msg *msg, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < msg->n_headers; i++) {
        const sb_extproc_header *h = &msg->headers[i];
        if (h->key_len == n && strncasecmp(h->key, name, n) == 0)
            return h;
    }
    return NULL;
}

/* ---- encoding ---- */

/* protobuf-c's structs take non-const pointers; packing only reads them. */
static ProtobufCBinaryData bin(const void *p, size_t n)
{
    ProtobufCBinaryData b = {n, (uint8_t *)(uintptr_t)p};
    return b;
}

static int pack(const ProtobufCMessage *m, sb_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (sb_buf_reserve(out, n) < 0)
        return -1;
    out->len += protobuf_c_message_pack(m, (uint8_t *)out->data + out->len);
    out->data[out->len] = '\0';
    return 0;
}

/* The storage of a header mutation and a metadata Struct, one allocation per message that
 * has either (none for the body chunks echoed on the hot path). */
typedef struct header_slot {
    pb_header_option opt;
    pb_header hv;
} header_slot;

typedef struct field_slot {
    Google__Protobuf__Struct__FieldsEntry entry;
    Google__Protobuf__Value value;
} field_slot;

typedef struct scratch {
    void *block;
    Envoy__Service__ExtProc__V3__HeaderMutation mutation;
    /* dynamic_metadata: outer {ns: Value{struct_value: inner {key: Value{string}}}} */
    Google__Protobuf__Struct outer, inner;
    Google__Protobuf__Struct__FieldsEntry ns_entry, *ns_entries[1];
    Google__Protobuf__Value ns_value;
} scratch;

static int scratch_init(scratch *s, const sb_extproc_kv *hdrs, size_t n_hdrs, const char *ns, const sb_extproc_kv *md,
                        size_t n_md)
{
    Envoy__Service__ExtProc__V3__HeaderMutation mut = ENVOY__SERVICE__EXT_PROC__V3__HEADER_MUTATION__INIT;
    s->mutation = mut;
    s->block = NULL;
    if (!ns)
        n_md = 0;
    if (n_hdrs + n_md == 0)
        return 0;
    if (n_hdrs > SIZE_MAX / 1024 || n_md > SIZE_MAX / 1024) /* the sizes below cannot overflow */
        return -1;
    size_t hdr_bytes = n_hdrs * (sizeof(header_slot) + sizeof(pb_header_option *));
    size_t md_bytes = n_md * (sizeof(field_slot) + sizeof(Google__Protobuf__Struct__FieldsEntry *));
    char *p = sb_malloc(hdr_bytes + md_bytes);
    if (!p)
        return -1;
    s->block = p;
    /* Slots first (pointer-aligned structs), then the pointer arrays. */
    header_slot *hs = (header_slot *)(void *)p;
    field_slot *fs = (field_slot *)(void *)(hs + n_hdrs);
    pb_header_option **hp = (pb_header_option **)(void *)(fs + n_md);
    Google__Protobuf__Struct__FieldsEntry **fp = (Google__Protobuf__Struct__FieldsEntry **)(void *)(hp + n_hdrs);
    for (size_t i = 0; i < n_hdrs; i++) {
        pb_header_option o = ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__INIT;
        pb_header h = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
        hs[i].opt = o;
        hs[i].hv = h;
        hs[i].hv.key = bin(hdrs[i].key, hdrs[i].key_len);
        hs[i].hv.raw_value = bin(hdrs[i].value, hdrs[i].value_len);
        hs[i].opt.header = &hs[i].hv;
        /* Ours replaces whatever the client sent under that name (see extproc.h). */
        hs[i].opt.append_action =
            ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD;
        hp[i] = &hs[i].opt;
    }
    s->mutation.n_set_headers = n_hdrs;
    s->mutation.set_headers = hp;
    if (n_md) {
        for (size_t i = 0; i < n_md; i++) {
            Google__Protobuf__Struct__FieldsEntry e = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT;
            fs[i].entry = e;
            google__protobuf__value__init(&fs[i].value);
            fs[i].value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
            fs[i].value.string_value = bin(md[i].value, md[i].value_len);
            fs[i].entry.key = bin(md[i].key, md[i].key_len);
            fs[i].entry.value = &fs[i].value;
            fp[i] = &fs[i].entry;
        }
        Google__Protobuf__Struct st = GOOGLE__PROTOBUF__STRUCT__INIT;
        Google__Protobuf__Struct__FieldsEntry e = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT;
        s->inner = st;
        s->inner.n_fields = n_md;
        s->inner.fields = fp;
        google__protobuf__value__init(&s->ns_value);
        s->ns_value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
        s->ns_value.struct_value = &s->inner;
        s->ns_entry = e;
        s->ns_entry.key = bin(ns, strlen(ns));
        s->ns_entry.value = &s->ns_value;
        s->ns_entries[0] = &s->ns_entry;
        s->outer = st;
        s->outer.n_fields = 1;
        s->outer.fields = s->ns_entries;
    }
    return 0;
}

int sb_extproc_encode_common(const sb_extproc_common *c, sb_buf *out)
{
    bool body_kind = c->kind == SB_EXTPROC_REQUEST_BODY || c->kind == SB_EXTPROC_RESPONSE_BODY;
    bool head_kind = c->kind == SB_EXTPROC_REQUEST_HEADERS || c->kind == SB_EXTPROC_RESPONSE_HEADERS;
    if ((!body_kind && !head_kind) || ((c->streamed || c->replace_body) && !body_kind) ||
        (c->streamed && c->replace_body))
        return -1;
    scratch s;
    if (scratch_init(&s, c->set_headers, c->n_set_headers, c->metadata_ns, c->metadata, c->n_metadata) < 0)
        return -1;

    Envoy__Service__ExtProc__V3__CommonResponse cr = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__BodyMutation bm;
    envoy__service__ext_proc__v3__body_mutation__init(&bm); /* its __INIT trips -Wmissing-braces */
    Envoy__Service__ExtProc__V3__StreamedBodyResponse sr = ENVOY__SERVICE__EXT_PROC__V3__STREAMED_BODY_RESPONSE__INIT;
    if (c->n_set_headers)
        cr.header_mutation = &s.mutation;
    cr.clear_route_cache = c->clear_route_cache;
    if (c->streamed) {
        sr.body = bin(c->body, c->body_len);
        sr.end_of_stream = c->end_of_stream;
        bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE;
        bm.streamed_response = &sr;
        cr.body_mutation = &bm;
    } else if (c->replace_body) {
        bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY;
        bm.body = bin(c->body, c->body_len);
        cr.body_mutation = &bm;
    }
    /* An answer that changes nothing is an empty HeadersResponse/BodyResponse: CONTINUE. */
    bool has_common = cr.header_mutation || cr.clear_route_cache || cr.body_mutation;

    Envoy__Service__ExtProc__V3__HeadersResponse hr = ENVOY__SERVICE__EXT_PROC__V3__HEADERS_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__BodyResponse br = ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
    hr.response = br.response = has_common ? &cr : NULL;
    pb_response pr = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    switch (c->kind) {
    case SB_EXTPROC_REQUEST_HEADERS:
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS;
        pr.request_headers = &hr;
        break;
    case SB_EXTPROC_RESPONSE_HEADERS:
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS;
        pr.response_headers = &hr;
        break;
    case SB_EXTPROC_REQUEST_BODY:
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY;
        pr.request_body = &br;
        break;
    default:
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
        pr.response_body = &br;
        break;
    }
    if (c->metadata_ns && c->n_metadata)
        pr.dynamic_metadata = &s.outer;
    int rc = pack(&pr.base, out);
    sb_free(s.block);
    return rc;
}

int sb_extproc_encode_trailers(enum sb_extproc_kind kind, sb_buf *out)
{
    Envoy__Service__ExtProc__V3__TrailersResponse tr = ENVOY__SERVICE__EXT_PROC__V3__TRAILERS_RESPONSE__INIT;
    pb_response pr = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    if (kind == SB_EXTPROC_REQUEST_TRAILERS) {
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS;
        pr.request_trailers = &tr;
    } else if (kind == SB_EXTPROC_RESPONSE_TRAILERS) {
        pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_TRAILERS;
        pr.response_trailers = &tr;
    } else {
        return -1;
    }
    return pack(&pr.base, out);
}

int sb_extproc_encode_immediate(int status, const sb_extproc_kv *headers, size_t n_headers, const char *body,
                                size_t body_len, const char *details, sb_buf *out)
{
    scratch s;
    if (scratch_init(&s, headers, n_headers, NULL, NULL, 0) < 0)
        return -1;
    Envoy__Type__V3__HttpStatus st = ENVOY__TYPE__V3__HTTP_STATUS__INIT;
    st.code = (Envoy__Type__V3__StatusCode)status;
    Envoy__Service__ExtProc__V3__ImmediateResponse ir = ENVOY__SERVICE__EXT_PROC__V3__IMMEDIATE_RESPONSE__INIT;
    ir.status = &st;
    if (n_headers)
        ir.headers = &s.mutation;
    ir.body = bin(body, body ? body_len : 0);
    ir.details = bin(details, details ? strlen(details) : 0);
    pb_response pr = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    pr.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
    pr.immediate_response = &ir;
    int rc = pack(&pr.base, out);
    sb_free(s.block);
    return rc;
}

/* ---- grpc.health.v1 ---- */

/* A base-128 varint of at most ten bytes; false if truncated or longer. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Read by hand rather than through protobuf-c: the request has one field, and the contract
 * hands back a pointer into buf, which protobuf-c (it copies strings) could not. */
int sb_health_decode_request(const uint8_t *buf, size_t len, const char **service, size_t *service_len)
{
    const uint8_t *p = buf, *end = buf + len;
    *service = "";
    *service_len = 0;
    while (p < end) {
        uint64_t tag, v;
        if (!read_varint(&p, end, &tag) || (tag >> 3) == 0)
            return SB_EXTPROC_EMALFORMED;
        switch (tag & 7) {
        case 0:
            if (!read_varint(&p, end, &v))
                return SB_EXTPROC_EMALFORMED;
            break;
        case 1:
            if (end - p < 8)
                return SB_EXTPROC_EMALFORMED;
            p += 8;
            break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return SB_EXTPROC_EMALFORMED;
            if ((tag >> 3) == 1) { /* service; a repeated field: the last one wins */
                *service = (const char *)p;
                *service_len = (size_t)v;
            }
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return SB_EXTPROC_EMALFORMED;
            p += 4;
            break;
        default: /* groups (3, 4) are proto2 only; 6 and 7 do not exist */ return SB_EXTPROC_EMALFORMED;
        }
    }
    return 0;
}

int sb_health_encode_response(enum sb_health_status status, sb_buf *out)
{
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    return pack(&r.base, out);
}
