/* http_server_internal: what the files of the HTTP/1.1 server share, and nothing else.
 * Private to src/net/http_server.c, http_parse.c and http_respond.c; the public contract is
 * net/http_server.h.
 *
 * One server is split by concept: http_server.c holds the listener, accepting and refusing
 * connections, a connection's lifecycle (timers, closing, lingering close, the error answers
 * the server gives itself) and the options; http_parse.c reads client bytes and frames
 * requests (http-parser callbacks, header and body limits, the body budget, pipelining);
 * http_respond.c writes answers (coalesced writes flushed once per loop iteration, the
 * handler's stream and respond calls, back to keep-alive or closing once an answer is done).
 * All of it runs on the server's loop thread; nothing here is thread-safe. */
#ifndef SB_NET_HTTP_SERVER_INTERNAL_H
#define SB_NET_HTTP_SERVER_INTERNAL_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "net/http_server.h"
#include "net/tls.h"

#define MAX_HEADERS 128
#define READ_BUF_BYTES 65536
/* Bytes a pipelining client may send ahead while a response is in progress. Past it the
 * connection keeps being read (so a client that leaves is seen at once) but what it sends is
 * discarded, and the connection closes after the current answer (see on_read). The parser's
 * leftover of one read may overshoot it by at most READ_BUF_BYTES, so a connection never holds
 * more than 128 KiB of bytes read ahead. */
#define MAX_PENDING_BYTES (64 * 1024)
#define PENDING_CAP (MAX_PENDING_BYTES + READ_BUF_BYTES + 1)
/* A head buffer up to this size is kept for the connection's next request; a larger one
 * (a client that once sent a big head) is freed when its response is done. */
#define HEAD_KEEP_BYTES 4096
/* An out buffer up to this capacity is kept after an answer left at once (the next answer
 * reuses it); a larger one is freed. */
#define OUT_KEEP_BYTES (16 * 1024)
/* First allocation for a body; then it doubles with the bytes that arrive (never with the
 * bytes a Content-Length promises), up to the declared length. */
#define BODY_FIRST_BYTES 4096
/* A connection past max_connections is only answered 503: it needs to get its request out
 * before it reads, so a short linger suffices (bounded further by linger_ms/linger_bytes). */
#define REFUSE_LINGER_MS 1000
#define REFUSE_LINGER_BYTES (64 * 1024)

enum conn_state {
    CONN_IDLE = 0,  /* between requests (keep-alive) */
    CONN_READING,   /* a request's head or body is arriving */
    CONN_HANDLING,  /* the handler owns the request, response not started */
    CONN_STREAMING, /* response started, not finished */
    CONN_LINGERING, /* answered and closing: draining the answer, then reading and discarding */
    CONN_H2,        /* an HTTP/2 connection: its streams carry the requests (net/http2.c) */
    CONN_CLOSING,
};

typedef struct hdr_off {
    size_t name_off, name_len, value_off, value_len;
} hdr_off;

struct conn;
typedef struct wreq {
    uv_write_t w;
    struct conn *c;
    size_t len;
    char *data;     /* the connection's out buffer, taken over: no copy */
    size_t cap;     /* its capacity (the batched write gives it back) */
} wreq;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    /* The deadline hs_arm_timer set (loop ms; 0: none), and when the timer is due to fire
     * (0: not started). The timer is moved only for an earlier deadline (see hs_arm_timer). */
    uint64_t timer_due, timer_fires;
    sb_http_server *srv;
    struct conn *prev, *next;
    http_parser parser;
    enum conn_state state;
    sb_buf head;          /* url then header names and values, copied out of read buffers */
    hdr_off hoffs[MAX_HEADERS];
    sb_http_header headers[MAX_HEADERS];
    size_t n_headers;
    size_t url_off, url_len;
    bool last_was_value;
    bool saw_cl, saw_te, expect_continue;
    bool head_done;
    /* The request's line as either parser read it (fill_req). */
    int method; /* enum http_method */
    unsigned short http_minor;
    bool keep_alive_req; /* http_should_keep_alive's verdict */
    /* Body bytes still due for a request whose head the fast path read (proto/h1.h): those
     * bytes go to the body without http-parser; -1 when http-parser reads the request. */
    int64_t fast_left;
    sb_buf body;          /* body.cap is what this connection holds of the server's body budget */
    size_t body_cap_max;  /* declared Content-Length + 1 (the NUL), or SIZE_MAX when chunked */
    sb_buf pending;       /* bytes read past the current request (pipelining) */
    bool reading;         /* uv_read_start active */
    bool reads_batched;   /* reads through the loop's batcher (net/iobatch.h), from its second request on */
    int error_status;     /* set by callbacks to answer with an error */
    /* response state */
    bool chunked, close_after, keep_alive_resp;
    int64_t resp_left;    /* for length-framed streams: bytes still expected, -1 otherwise */
    size_t queued;        /* bytes handed to uv_write not yet completed */
    bool wants_drain;
    bool processing;      /* process() is on the stack for this connection */
    bool head_only;       /* the response has no body (HEAD request, 1xx/204/304 status) */
    bool at_head;         /* the head hook runs: an answer it gives closes the connection */
    bool resume;          /* pipelined bytes to parse once the outermost process() returns */
    bool write_paused;    /* reading and parsing paused until the client reads its answers */
    bool discarding;      /* read ahead past MAX_PENDING_BYTES: input dropped, close after the answer */
    size_t discarded;     /* bytes dropped so far; past linger_bytes the connection is closed */
    bool body_follows;    /* the head declares a body (Content-Length above 0, or chunked) */
    bool request_timed;   /* header_ms runs for the request being read (armed once, at process()'s end) */
    int handles_open;
    sb_buf out;           /* response bytes not yet handed to uv_write (coalescing) */
    /* The write of a whole answer batched with the loop turn's others (net/iobatch.h): one at
     * a time (only when nothing else is queued), its buffer given back to out afterwards.
     * In flight while its data is set. */
    wreq batched;
    struct conn *dirty_prev, *dirty_next;
    bool dirty;
    /* lingering close (conn_linger) */
    bool refused;         /* over max_connections: answered 503, counted in n_refusing */
    bool shut;            /* our write side is shut down (FIN sent) */
    bool peer_eof;        /* the client has finished sending */
    uint32_t linger_ms;
    size_t linger_bytes;  /* discarded bytes allowed before giving up */
    size_t linger_seen;
    uv_shutdown_t shutdown_req;
    sb_http_req req;
    sb_tls tls; /* tls.ssl NULL: a plain connection */
    char peer[64];
    /* HTTP/2: NULL for HTTP/1.1. Chosen once, by the connection's first bytes (the client
     * preface, while preface_seen of them matched) or by ALPN. */
    struct h2_conn *h2;
    bool sniffed;         /* the protocol is decided */
    uint8_t preface_seen; /* bytes of a possible preface held in preface_buf */
    char preface_buf[24];
} conn;

struct sb_http_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    sb_http_server_opts opts;
    sb_http_handler handler;
    sb_http_head_hook on_head; /* NULL: every request goes whole to the handler */
    void *ctx;
    sb_http_refused_fn on_refused; /* NULL: nobody hears of the server's own refusals */
    conn *conns;
    /* The statistics below are atomic: sb_http_server_get_stats may read them from another
     * thread (the workers' servers, net/workers.h). Each changes a few times per connection. */
    _Atomic size_t n_conns;    /* open connections counted against max_connections (lingering included) */
    _Atomic size_t n_refusing; /* connections past the limit being answered 503 (not in n_conns) */
    _Atomic size_t n_lingering;
    size_t n_alive;       /* connection structs not yet freed (closing ones included) */
    _Atomic size_t body_bytes; /* sum of the body buffers' capacity over all connections */
    _Atomic uint64_t accepted_total, refused_total, reset_total, body_budget_refusals;
    bool stopping;
    bool draining; /* listener closed, answers close their connection (sb_http_server_drain) */
    bool listener_closed;
    uint16_t port;
    /* Writes made during one loop iteration are coalesced per connection and flushed by a
     * check handle at the end of the iteration: a response head, its body and the chunk
     * terminator leave in one write(2) instead of three, and an SSE event still leaves in the
     * iteration that produced it. Check handles run after the poll, which blocks until the
     * next timer or I/O: a write made before it (from a timer, as the simulator writes each
     * token, or a queued request answered at its deadline) would wait that long (measured: one
     * decode step, ~6 ms, on every streamed first token). So while writes are pending an idle
     * handle, `kick`, is active too, which makes that poll return at once. */
    uv_check_t flusher;
    uv_idle_t kick;
    conn *dirty;
    int server_handles_closed;
    /* Every connection of this server reads into this one buffer: the loop is single-threaded
     * and each read is consumed (copied into head/body/pending) before the next one. Owned
     * here rather than file-scope so that servers on different loops share nothing. */
    char read_buf[READ_BUF_BYTES];
    /* TLS: the context new connections get (NULL: plain), and where plaintext is decrypted to
     * (one record at a time, consumed before the next, as read_buf). */
    SSL_CTX *tls_ctx;
    _Atomic uint64_t tls_handshakes, tls_failures;
    char tls_buf[16 * 1024];
    /* HTTP/2: nghttp2's callbacks and options, shared by this server's connections (NULL until
     * the first h2 connection), and counters. */
    struct nghttp2_session_callbacks *h2_cbs;
    struct nghttp2_option *h2_opts;
    _Atomic uint64_t h2_connections, h2_streams, h2_refused_streams;
    _Atomic uint64_t h2_goaway[SB_H2_GOAWAY_REASONS];
    _Atomic uint64_t timer_starts; /* sb_http_server_stats.timer_starts */
    /* The budgets the limits are checked against: own, or opts.shared (n_conns, n_refusing and
     * body_bytes above stay this server's, for its statistics). */
    sb_http_shared *shared;
    sb_http_shared own;
};

/* The body budget left (max_buffered_body_bytes less what every server sharing it holds). */
static inline size_t hs_body_avail(const sb_http_server *s)
{
    size_t held = s->shared->body_bytes;
    return held < s->opts.max_buffered_body_bytes ? s->opts.max_buffered_body_bytes - held : 0;
}

static inline void hs_body_charge(sb_http_server *s, size_t n)
{
    s->body_bytes += n;
    s->shared->body_bytes += n;
}

static inline void hs_body_refund(sb_http_server *s, size_t n)
{
    s->body_bytes -= n;
    s->shared->body_bytes -= n;
}

/* http_server.c: a connection's lifecycle. */

/* Closes now: aborts a request in flight (on_abort), gives its body budget back, frees the
 * struct once both handles are closed. Idempotent. */
void hs_conn_close(conn *c);
/* Sets (ms > 0, from the loop's time) or clears (0) the connection's one deadline; what
 * happens when it passes depends on the state (on_timeout). Lazily: the libuv timer is
 * restarted only when the deadline is earlier than it is due to fire; a later deadline or a
 * cleared one leaves it running, and when it fires early it re-arms for what is left. */
void hs_arm_timer(conn *c, uint32_t ms);
/* Clears the per-request fields before the next request on the connection. */
void hs_reset_request(conn *c);
/* Lingering close after an answer with Connection: close (see the definition for why);
 * drain_ms bounds the wait for the answer to leave, 0 for the default. */
void hs_conn_linger(conn *c, uint32_t drain_ms);
/* Called when queued bytes have left a lingering connection: half-closes or closes. */
void hs_linger_drained(conn *c);
/* Answers an error the server found itself (OpenAI-shaped body, Connection: close), then
 * lingers. `headers` is NULL or extra "Name: value\r\n" lines. */
void hs_fail_request(conn *c, int status, const char *code, const char *message, const char *headers);

/* http_parse.c: reading and framing. */

/* Starts reading unless already reading or closing: libuv reads a connection's first request,
 * the loop's batcher (net/iobatch.h) the rest once hs_conn_read_batched has been called. */
void hs_conn_read_start(conn *c);
/* Stops reading if reading (through libuv or the batcher, whichever reads it). */
void hs_conn_read_stop(conn *c);
/* From now on the batcher reads the connection (it was kept alive, or speaks HTTP/2): its
 * reader's set-up (a dup, its registration, their closes) would be wasted on a connection that
 * closes after one request. Reading, it moves at once. */
void hs_conn_read_batched(conn *c);
/* Parses the pipelined bytes held in `pending`, request after request, without recursion. */
void hs_run_pending(conn *c);
/* Frees the request body and gives its capacity back to the server's body budget. */
void hs_body_release(conn *c);

/* http2.c: HTTP/2 connections (a conn in CONN_H2 with c->h2 set). */

/* The client preface, the first bytes of an h2c connection with prior knowledge. */
#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
/* Turns c into an HTTP/2 connection (CONN_H2) and sends the server's SETTINGS. 0, or -1 (out
 * of memory: the caller closes). */
int hs_h2_start(conn *c);
/* Bytes of the connection (plaintext): framing by nghttp2, requests to the handler. */
void hs_h2_input(conn *c, const char *p, size_t n);
/* Moves what nghttp2 has to send into c->out, while under write_high_water. 0, or -1. */
int hs_h2_pull(conn *c);
/* A write of the connection completed (on_write). */
void hs_h2_written(conn *c);
/* The connection's timer fired. */
void hs_h2_timeout(conn *c);
/* The connection closes: every request a handler holds gets on_abort. */
void hs_h2_abort_all(conn *c);
/* Frees the session and the streams (the handles are closed). */
void hs_h2_free(conn *c);
/* GOAWAY: streams begun go on, the connection closes once they are done. */
void hs_h2_drain(conn *c);
/* sb_http_server_cut for one h2 connection: on_cut or on_abort per stream, then close. */
void hs_h2_cut(conn *c);
/* Frees the server's nghttp2 callbacks and options. */
void hs_h2_server_free(sb_http_server *s);

/* http_respond.c: writing. */

/* Appends to the out buffer and hands it to libuv now. Returns 0 or -1. */
int hs_conn_write(conn *c, const char *data, size_t len);
/* Hands the out buffer to libuv (no copy). Returns 0 or -1 (the caller closes). */
int hs_conn_flush(conn *c);
/* Puts the connection on the server's list of connections with bytes to flush. */
void hs_mark_dirty(conn *c);
/* Takes the connection off the server's list of connections with bytes to flush. */
void hs_undirty(conn *c);

#endif
