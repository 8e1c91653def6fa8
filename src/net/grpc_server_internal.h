/* grpc_server_internal: what grpc_server.c (listener, connections, TLS, reads and writes) and
 * grpc_call.c (HTTP/2 callbacks, gRPC framing, the call API) share. Private to those two
 * files; the public contract is grpc_server.h.
 *
 * Ownership: the server owns its connections (a list); a connection owns its nghttp2 session,
 * its TLS state and its calls (a list). A call lives from its stream's first HEADERS to the
 * stream's close (or the connection's); the application "holds" it from on_call returning OK
 * until it finishes it or is told on_cancel, and only while it holds it does it hear of it. */
#ifndef SB_NET_GRPC_SERVER_INTERNAL_H
#define SB_NET_GRPC_SERVER_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "base/buf.h"
#include "net/grpc_server.h"
#include "net/tls.h"

typedef struct gs_conn gs_conn;

struct sb_grpc_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_prepare_t flusher;   /* writes what the turn's callbacks queued, before the loop blocks */
    uv_timer_t drain_timer; /* drain: the final GOAWAY to peers that have not acked the PING */
    sb_grpc_server_opts opts;
    sb_grpc_handler h;
    void *ctx;
    SSL_CTX *ssl_ctx; /* NULL: h2c */
    nghttp2_session_callbacks *cbs;
    nghttp2_option *ng_opts;
    gs_conn *conns; /* every connection not yet closing */
    gs_conn *dirty; /* connections with output to flush (singly linked via dirty_next) */
    /* Connections that have opened no stream yet, oldest first (fresh_prev/fresh_next): the
     * ones closed to make room at max_connections. */
    gs_conn *fresh_head, *fresh_tail;
    size_t n_conns; /* open, counted against max_connections */
    size_t n_alive; /* connection structs not yet freed (closing ones included) */
    size_t n_calls;
    uint16_t port;
    bool draining, stopping;
    int handles_open; /* listener + flusher + drain_timer */
    uint64_t calls_total, calls_refused, connections_refused, protocol_errors;
    uint64_t handshake_timeouts, connections_evicted, calls_over_budget;
    size_t buffered;           /* capacity charged by unfinished messages, all connections */
    uint8_t rbuf[64 * 1024];   /* one read at a time: the loop hands each read over whole */
    uint8_t tlsbuf[16 * 1024]; /* decrypted bytes, handed to nghttp2 at once */
};

struct gs_conn {
    sb_grpc_server *srv;
    uv_tcp_t tcp;
    uv_timer_t idle; /* handshake deadline, then idle close, then close grace */
    int handles_open;
    nghttp2_session *ng;
    sb_tls tls; /* tls.ssl NULL: h2c; tls.ready: handshake done, ALPN h2 agreed */
    sb_grpc_call *calls;
    size_t n_calls;
    size_t queued;  /* bytes accepted from the application or nghttp2 and not yet written */
    size_t writing; /* of which in uv_write requests */
    bool reading, closing, dirty, close_when_flushed, proto_error;
    bool opened;      /* a stream has begun (until then: on the fresh list, handshake deadline) */
    bool drain_final; /* the final GOAWAY of a drain is queued */
    bool tls_feed_failed; /* decrypted bytes nghttp2 refused (feed_tls) */
    gs_conn *prev, *next, *dirty_next, *fresh_prev, *fresh_next;
    char peer[64];
};

enum gs_call_state {
    GS_NEW,   /* headers arriving */
    GS_HELD,  /* the application holds it */
    GS_ENDED, /* finished (by the application or the server); trailers queued or sent */
};

struct sb_grpc_call {
    gs_conn *conn;
    int32_t stream_id;
    enum gs_call_state state;
    void *ctx, *user;
    /* Request headers, "name\0value\0" pairs, at most max_header_bytes. */
    sb_buf hdrs;
    bool hdrs_over, remote_closed, deferred, headers_sent, wants_drain, finishing;
    /* Inbound framing: the 5-byte prefix, then msg_len bytes into msg. */
    uint8_t prefix[5];
    size_t prefix_got;
    size_t msg_len;
    sb_buf msg;
    size_t unconsumed; /* connection-window bytes held back until the message is complete */
    size_t charged;    /* msg's capacity counted in the server's buffered bytes */
    bool delivering;   /* inside on_message: msg must stay where it is */
    /* Outbound: framed messages waiting for nghttp2 to pull them (out_off already pulled). */
    sb_buf out;
    size_t out_off;
    int status;
    char *message; /* grpc-message, percent-encoded */
    sb_grpc_call *prev, *next;
};

/* grpc_server.c */
void gs_conn_mark_dirty(gs_conn *c);
void gs_conn_close(gs_conn *c);
void gs_conn_idle_update(gs_conn *c);
void gs_queued_sub(gs_conn *c, size_t n);
/* The connection's first stream began: it leaves the fresh list and its handshake deadline. */
void gs_conn_opened(gs_conn *c);
/* Drain: the peer has seen the shutdown notice (its PING ack came): the final GOAWAY. */
void gs_conn_drain_final(gs_conn *c);

/* grpc_call.c */
int gs_callbacks_new(nghttp2_session_callbacks **out);
/* Frees every call of a closing connection; those the application holds get on_cancel. */
void gs_calls_cancel_all(gs_conn *c);
/* Calls whose sender waits for on_drain hear it (the queue fell below half the mark). */
void gs_calls_drained(gs_conn *c);
/* The opaque data of the drain's PING, to know its ack. */
extern const uint8_t gs_drain_ping[8];

#endif
