/* grpc_server: a gRPC server over HTTP/2 (nghttp2) on libuv, plain (h2c, prior knowledge) or
 * TLS (OpenSSL, ALPN "h2"). What the endpoint picker (net/picker.c) serves Envoy's
 * external-processing stream and the gRPC health service on.
 *
 * A call is one HTTP/2 stream: POST /<service>/<method>, content-type application/grpc. The
 * server frames and unframes messages (the 5-byte prefix: compressed flag, 4-byte big-endian
 * length; compressed messages are refused with UNIMPLEMENTED, since the server announces no
 * grpc-encoding), and ends each call with trailers (grpc-status, grpc-message percent-encoded).
 * Messages are handed over whole, one callback each, in order; the application encodes and
 * decodes them (proto/extproc.h). Bidirectional streaming: the application may send any number
 * of messages at any time until it finishes the call.
 *
 * Bounds (from config, safe defaults): one message at most max_message_bytes (a longer prefix
 * ends that call RESOURCE_EXHAUSTED, never the connection); max_concurrent_streams per
 * connection (SETTINGS_MAX_CONCURRENT_STREAMS; a peer that opens more gets RST_STREAM
 * REFUSED_STREAM from nghttp2); max_connections (past it a new connection is closed at once);
 * request headers at most max_header_bytes per stream; a connection with no stream open for
 * idle_ms is closed with GOAWAY; bytes queued to a peer that does not read are bounded by the
 * HTTP/2 flow-control windows and write_high_water (sb_grpc_send reports backpressure; past twice
 * the mark the connection is not read while its socket is not taking bytes). A protocol error from a peer closes that
 * connection with GOAWAY (nghttp2's verdict); a malformed gRPC frame (bad prefix, wrong
 * content-type, not POST) ends that call with a gRPC status; neither stops the server.
 * A request that is not gRPC at all is answered with the HTTP status gRPC over HTTP/2 names
 * (415 for another content-type, 405 for another method) and a grpc-status beside it, which
 * gRPC clients read first. The window of a connection is given back only as whole messages
 * are handed over, so unfinished messages hold at most the connection window (at least twice
 * max_message_bytes) per connection; a peer that interleaves more than that stalls only itself.
 * Over all connections, unfinished messages hold at most max_buffered_bytes, counted as the
 * capacity of their buffers (which grow geometrically, never past the message's declared
 * length): a message whose next bytes would pass it ends its call RESOURCE_EXHAUSTED (the
 * connection and its other calls go on). A connection must have finished TLS (if any), sent
 * the HTTP/2 preface and opened its first stream within handshake_ms (or idle_ms if shorter),
 * or it is closed; at max_connections, the oldest connection that has opened no stream yet is
 * closed to make room for the new one (only when there is none is the new one refused).
 * grpc-timeout is not enforced here (the application has its own deadlines).
 *
 * Callbacks may call sb_grpc_send and sb_grpc_finish on any call, sb_grpc_server_set_ctx and
 * sb_grpc_server_drain; they must not call sb_grpc_server_stop (a timer or another handle
 * may). After stop returns, the application hears nothing more.
 *
 * Not for: compression, unary-call sugar, client side. One event loop owns it; not thread-safe. */
#ifndef SB_NET_GRPC_SERVER_H
#define SB_NET_GRPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sb_grpc_server sb_grpc_server;
typedef struct sb_grpc_call sb_grpc_call;

/* gRPC status codes used here (grpc/doc/statuscodes.md). */
enum sb_grpc_status {
    SB_GRPC_OK = 0,
    SB_GRPC_CANCELLED = 1,
    SB_GRPC_UNKNOWN = 2,
    SB_GRPC_INVALID_ARGUMENT = 3,
    SB_GRPC_DEADLINE_EXCEEDED = 4,
    SB_GRPC_NOT_FOUND = 5,
    SB_GRPC_RESOURCE_EXHAUSTED = 8,
    SB_GRPC_FAILED_PRECONDITION = 9,
    SB_GRPC_UNIMPLEMENTED = 12,
    SB_GRPC_INTERNAL = 13,
    SB_GRPC_UNAVAILABLE = 14,
    SB_GRPC_UNAUTHENTICATED = 16,
};

/* Zero fields take the default. */
typedef struct sb_grpc_server_opts {
    size_t max_message_bytes;        /* one message, without its prefix; default 4 MiB + 64 KiB */
    uint32_t max_concurrent_streams; /* per connection; default 1024 */
    size_t max_connections;          /* default 1024 */
    size_t max_header_bytes;         /* a stream's request headers; default 16 KiB */
    uint32_t idle_ms;                /* no stream open this long: GOAWAY and close; default 300 s */
    size_t write_high_water;         /* bytes queued to one connection before backpressure; default 1 MiB */
    size_t max_buffered_bytes;       /* unfinished messages, all connections; default 256 MiB */
    uint32_t handshake_ms;           /* TLS, preface and first stream by then, or closed; default 10 s */
    const char *tls_cert_file;       /* PEM chain; NULL: plain h2c (prior knowledge) */
    const char *tls_key_file;        /* PEM private key; required with a certificate */
} sb_grpc_server_opts;

/* What the application is told. The ctx passed is the one given at start or by set_handler
 * when the call began: calls keep their owner across a set_handler. */
typedef struct sb_grpc_handler {
    /* A call begins: method is the :path ("/package.Service/Method"), not NUL-terminated.
     * Return SB_GRPC_OK to take it (set its user with sb_grpc_call_set_user), or a status to
     * end it at once with (UNIMPLEMENTED for a method the application does not serve). */
    int (*on_call)(sb_grpc_call *c, const char *method, size_t method_len, void *ctx);
    /* One whole message, uncompressed, without its prefix; valid during the call only. */
    void (*on_message)(sb_grpc_call *c, const uint8_t *msg, size_t len);
    /* The client half-closed (END_STREAM): no more messages come; the application may still
     * send and must finish the call. Optional. */
    void (*on_half_close)(sb_grpc_call *c);
    /* The call is gone before the application finished it: the peer reset the stream (client
     * cancelled), the connection closed, the server stopped, or the server ended the call for
     * a malformed or oversized message (the peer gets that status). Called once; the call must
     * not be used after it returns (sb_grpc_send and sb_grpc_finish from inside it return -1). */
    void (*on_cancel)(sb_grpc_call *c);
    /* The connection's queued bytes fell below half of write_high_water after sb_grpc_send
     * returned 1 for this call; once per such return. Optional. */
    void (*on_drain)(sb_grpc_call *c);
} sb_grpc_handler;

typedef struct sb_grpc_server_stats {
    size_t open_connections;
    size_t open_calls;
    uint64_t calls_total;
    uint64_t calls_refused;       /* ended at once: unknown method, malformed, over bounds */
    uint64_t connections_refused; /* closed at once: max_connections */
    uint64_t protocol_errors;     /* connections closed for an HTTP/2 or TLS error */
    uint64_t handshake_timeouts;  /* closed: no first stream within handshake_ms */
    uint64_t connections_evicted; /* closed with no stream yet, to make room at max_connections */
    uint64_t calls_over_budget;   /* of calls_refused: a message would pass max_buffered_bytes */
    size_t buffered_bytes;        /* held now by unfinished messages (buffer capacity) */
} sb_grpc_server_stats;

/* Listens on host:port (IPv4 or IPv6 literal; port 0 picks one). Returns 0 and sets *out, or
 * a negative libuv error (or -1 for a TLS set-up failure, logged). */
int sb_grpc_server_start(uv_loop_t *loop, const char *host, uint16_t port, const sb_grpc_server_opts *opts,
                         const sb_grpc_handler *handler, void *ctx, sb_grpc_server **out);
uint16_t sb_grpc_server_port(const sb_grpc_server *s);
/* Calls that begin from now on go to ctx (a reload that replaced the gateway). */
void sb_grpc_server_set_ctx(sb_grpc_server *s, void *ctx);
/* Graceful: stops accepting and tells every connection with a shutdown notice (a GOAWAY
 * naming no stream) and a PING; once the PING's ack shows the peer has seen the notice (or
 * after a second), the final GOAWAY names the last stream processed, so streams the peer
 * opened in flight are served, not refused. Calls in flight go on; each connection closes
 * when its final GOAWAY is out and its last call is done. Idempotent. */
void sb_grpc_server_drain(sb_grpc_server *s);
/* Closes everything: every call not yet finished gets on_cancel. Freed once libuv has closed
 * its handles. */
void sb_grpc_server_stop(sb_grpc_server *s);
size_t sb_grpc_server_connections(const sb_grpc_server *s);
void sb_grpc_server_get_stats(const sb_grpc_server *s, sb_grpc_server_stats *out);

void sb_grpc_call_set_user(sb_grpc_call *c, void *user);
void *sb_grpc_call_user(const sb_grpc_call *c);
/* The peer's address "ip:port" (NUL-terminated). */
const char *sb_grpc_call_peer(const sb_grpc_call *c);
/* A request header (metadata) of the call by lower-case name; NULL if absent. */
const char *sb_grpc_call_header(const sb_grpc_call *c, const char *name, size_t *len);
/* Sends one message (copied). Returns 0, 1 when the connection's queue is over
 * write_high_water (wait for on_drain before sending much more), -1 if the call is gone or
 * finished. The response headers (:status 200, content-type application/grpc) go before
 * the first message. */
int sb_grpc_send(sb_grpc_call *c, const uint8_t *msg, size_t len);
/* Ends the call with trailers grpc-status: status and grpc-message: message (may be NULL;
 * its first 1024 bytes are sent, percent-encoded).
 * The call must not be used afterwards (on_cancel is not called). Returns 0 or -1 if the
 * call was already gone. */
int sb_grpc_finish(sb_grpc_call *c, int status, const char *message);

#endif
