/* extproc: the messages of Envoy's external-processing protocol (envoy.service.ext_proc.v3)
 * and of the gRPC health service (grpc.health.v1), as an endpoint picker reads and writes
 * them. Field numbers and meanings: ../shared/notes/ext-proc.md and the cited .proto files;
 * the subset this codec knows is src/proto/extproc.proto (written here, same packages,
 * names and field numbers as Envoy's; every field we do not read is skipped on decode).
 *
 * Pure: no I/O, no clock. Decoding is linear in the message and bounded: at most
 * SB_EXTPROC_MAX_HEADERS headers are kept (more is an error, not a silent cut), metadata is
 * read only where the picker looks (envoy.lb's keys), nesting is bounded by the schema (the
 * metadata Structs are read through a non-recursive view: no input makes the decoder descend
 * more than five messages), and the decoder's memory is bounded by a budget of 16 bytes per
 * message byte plus 64 KiB (a flood of tiny fields is refused as SB_EXTPROC_ETOOMANY). The size
 * of one message is the gRPC layer's bound; a single header value is bounded only by it.
 * Every decode error is a return code with a short reason, never a crash.
 *
 * Generated code: protoc-c builds the .proto files into build/gen/ (Makefile); only this
 * module and its tests include the generated headers. */
#ifndef SB_PROTO_EXTPROC_H
#define SB_PROTO_EXTPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define SB_EXTPROC_MAX_HEADERS 256

/* Which phase a ProcessingRequest carries (its oneof), and which phase a response answers. */
enum sb_extproc_kind {
    SB_EXTPROC_NONE = 0, /* no phase set (malformed) */
    SB_EXTPROC_REQUEST_HEADERS,
    SB_EXTPROC_REQUEST_BODY,
    SB_EXTPROC_REQUEST_TRAILERS,
    SB_EXTPROC_RESPONSE_HEADERS,
    SB_EXTPROC_RESPONSE_BODY,
    SB_EXTPROC_RESPONSE_TRAILERS,
};

/* envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode */
enum sb_extproc_body_mode {
    SB_EXTPROC_BODY_NONE = 0,
    SB_EXTPROC_BODY_STREAMED = 1,
    SB_EXTPROC_BODY_BUFFERED = 2,
    SB_EXTPROC_BODY_BUFFERED_PARTIAL = 3,
    SB_EXTPROC_BODY_FULL_DUPLEX_STREAMED = 4,
    SB_EXTPROC_BODY_GRPC = 5,
};

typedef struct sb_extproc_header {
    const char *key; /* lower-case as Envoy sends it; not NUL-terminated */
    size_t key_len;
    const char *value; /* value, or raw_value when value is empty (Envoy fills raw_value) */
    size_t value_len;
} sb_extproc_header;

/* A decoded ProcessingRequest. Pointers point into storage owned by *msg (the decoder's
 * copies: the buffer given to sb_extproc_decode may go at once); valid until
 * sb_extproc_msg_free (or the next decode into the same msg, which frees first). */
typedef struct sb_extproc_msg {
    enum sb_extproc_kind kind;
    /* headers and trailers phases */
    sb_extproc_header headers[SB_EXTPROC_MAX_HEADERS];
    size_t n_headers;
    bool end_of_stream; /* headers' or body's */
    /* body phases */
    const uint8_t *body;
    size_t body_len;
    /* metadata_context.filter_metadata: the endpoints the proxy allows
     * (["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]: a string "a,b" or a
     * list of strings, joined with ',' here) and the endpoint that served
     * (["envoy.lb"]["x-gateway-destination-endpoint-served"]). */
    bool has_subset;
    const char *subset; /* "ip:port,ip:port"; "" when the list is empty (answer 503) */
    size_t subset_len;
    const char *served;
    size_t served_len;
    /* protocol_config (sent on the stream's first message by newer Envoys): the modes in use. */
    bool has_protocol_config;
    enum sb_extproc_body_mode request_body_mode, response_body_mode;
    bool observability_mode; /* Envoy ignores our answers: no response is expected */
    void *priv_;             /* decoder's storage */
} sb_extproc_msg;

/* Error codes (negative): what the picker answers as a gRPC status INVALID_ARGUMENT. */
#define SB_EXTPROC_EMALFORMED (-1) /* not a valid ProcessingRequest */
#define SB_EXTPROC_ETOOMANY (-2)   /* more than SB_EXTPROC_MAX_HEADERS headers */
#define SB_EXTPROC_ENOMEM (-3)

/* Decodes buf[0..len) into *msg (which must be zeroed before its first use). Returns 0, or an
 * error code with *why set to a static reason (why may be NULL). On error *msg holds nothing
 * (kind SB_EXTPROC_NONE, no headers). A message with no phase set is SB_EXTPROC_EMALFORMED, so
 * a decoded message's kind is never NONE. The decoded strings and bodies are copies owned by
 * *msg (buf may be freed at once); they stay valid until the next decode or the free.
 * Trailers set end_of_stream (they end their direction). The subset: a list holding anything
 * but strings, or a value neither string nor list, is EMALFORMED (ignoring it would widen the
 * candidates); the served endpoint in another shape is taken as absent. protocol_config
 * naming a body mode outside BodySendMode's is EMALFORMED. Unknown fields are skipped. */
int sb_extproc_decode(const uint8_t *buf, size_t len, sb_extproc_msg *msg, const char **why);
/* Frees what the decodes into *msg hold; *msg may be decoded into again afterwards. */
void sb_extproc_msg_free(sb_extproc_msg *msg);

/* Finds a header by name (compared without regard to case; Envoy sends them lower-case);
 * the first if repeated; NULL if absent. */
const sb_extproc_header *sb_extproc_header_find(const sb_extproc_msg *msg, const char *name);

/* ---- responses: each appends one encoded ProcessingResponse to out (0, or -1 on ENOMEM or
 * a misuse named below; out is then unchanged). The messages point at the caller's bytes and
 * are packed once into out: a body chunk is not copied on the way. Header names, metadata
 * keys and values, and details must be valid UTF-8 (they are `string` in Envoy's definition,
 * and its C++ parser refuses a message with invalid UTF-8 there); header values go in
 * raw_value and bodies are bytes, so they may hold anything. ---- */

typedef struct sb_extproc_kv {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} sb_extproc_kv;

/* A HeadersResponse (kind REQUEST_HEADERS or RESPONSE_HEADERS) or a BodyResponse (kind
 * REQUEST_BODY or RESPONSE_BODY) whose CommonResponse carries: set_headers (HeaderValueOption
 * with the value in raw_value, as Envoy wants since 1.29, and append_action
 * OVERWRITE_IF_EXISTS_OR_ADD: a value the client sent itself under that name must never
 * survive beside ours, or a client could pick its own endpoint), clear_route_cache, and, for a body
 * response, either a streamed_response chunk (streamed: body + end_of_stream) or a whole-body
 * replacement (body_mutation.body, when replace_body). With dynamic metadata when
 * n_metadata > 0: Struct {ns: Struct {key: string value}}. Status CONTINUE. */
typedef struct sb_extproc_common {
    enum sb_extproc_kind kind;
    const sb_extproc_kv *set_headers;
    size_t n_set_headers;
    bool clear_route_cache;
    /* body responses only */
    bool streamed;     /* body_mutation.streamed_response {body, end_of_stream} */
    bool replace_body; /* body_mutation.body (BUFFERED mode) */
    const uint8_t *body;
    size_t body_len;
    bool end_of_stream;
    /* dynamic_metadata: metadata_ns {key: value...} */
    const char *metadata_ns;
    const sb_extproc_kv *metadata;
    size_t n_metadata;
} sb_extproc_common;

/* An answer that changes nothing (no headers, no route-cache clearing, no body mutation) is
 * sent as an empty HeadersResponse/BodyResponse, which Envoy reads as CONTINUE. A streamed
 * chunk with body_len 0 still carries end_of_stream. Misuse, -1: a kind that is not one of the
 * four, streamed or replace_body on a headers kind, both streamed and replace_body. */
int sb_extproc_encode_common(const sb_extproc_common *c, sb_buf *out);

/* A TrailersResponse (kind REQUEST_TRAILERS or RESPONSE_TRAILERS) with no mutation; another
 * kind: -1. */
int sb_extproc_encode_trailers(enum sb_extproc_kind kind, sb_buf *out);

/* An ImmediateResponse: the HTTP status, headers (set_headers, raw_value, overwrite), the body,
 * and the details string (Envoy logs it). body and details may be NULL (absent). Envoy's
 * schema accepts only the codes its envoy.type.v3.StatusCode names (the standard ones, not 0):
 * status must be one of them. */
int sb_extproc_encode_immediate(int status, const sb_extproc_kv *headers, size_t n_headers, const char *body,
                                size_t body_len, const char *details, sb_buf *out);

/* ---- grpc.health.v1 ---- */

/* HealthCheckResponse.ServingStatus. SERVICE_UNKNOWN is what Watch sends for a service the
 * server does not know (Check answers gRPC status NOT_FOUND instead). */
enum sb_health_status {
    SB_HEALTH_UNKNOWN = 0,
    SB_HEALTH_SERVING = 1,
    SB_HEALTH_NOT_SERVING = 2,
    SB_HEALTH_SERVICE_UNKNOWN = 3,
};

/* HealthCheckRequest { service 1 }: *service points into buf ("" and 0 when absent). 0, or
 * SB_EXTPROC_EMALFORMED (truncated, a field number 0, a wire type that does not exist). */
int sb_health_decode_request(const uint8_t *buf, size_t len, const char **service, size_t *service_len);
/* HealthCheckResponse { status 1 }. */
int sb_health_encode_response(enum sb_health_status status, sb_buf *out);

#endif
