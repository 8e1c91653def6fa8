/* http_server: the HTTP/1.1 server side of switchboard, on libuv and http-parser.
 *
 * Accepts connections, parses requests (keep-alive, pipelining served in order, bodies by
 * Content-Length or chunked, HTTP/1.0 clients), enforces limits (header bytes, body bytes,
 * header and idle timeouts, connection count) and hands each complete request, body
 * included, to one handler. The handler answers at once (sb_http_respond) or later, possibly
 * streaming (sb_http_stream_*). Requests that break framing rules are answered here and never
 * reach the handler: both Content-Length and Transfer-Encoding, an invalid Content-Length, a
 * non-chunked Transfer-Encoding (400: no request smuggling), oversized head (431) or body
 * (413), a slow head (408), request bodies over the server's memory budget (503). An
 * optional head hook (sb_http_head_hook) answers requests from their head, before their
 * body is read: a caller the gateway refuses anyway (no API key, no such route) cannot make
 * it buffer a body or spend the body budget.
 *
 * Bounds, so that no client can stall the loop or claim its memory:
 * - Memory grows with bytes received, never with bytes promised: a body buffer starts small
 *   and doubles as bytes arrive, capped by the declared Content-Length (by max_body_bytes
 *   when chunked); the head grows up to max_header_bytes; bytes pipelined behind a request
 *   in progress are held up to 64 KiB (plus one read). Past that the connection is still
 *   read, so a client that leaves aborts its request at once, but its bytes are discarded
 *   (at most linger_bytes, else the connection is closed) and the connection closes after
 *   the current answer. Reads land in the server's 64 KiB read buffer, consumed before the
 *   next read. Answers a client does not read are bounded too: past write_high_water queued, a
 *   keep-alive connection between requests stops being read and parsed until the client
 *   reads (idle_ms without progress closes it; no request, body or upstream is held
 *   meanwhile, and a client that resets is seen by the pending write), and a stream
 *   reports backpressure.
 * - max_buffered_body_bytes bounds the capacity of all body buffers of this server at once.
 *   A body that would pass it is refused with 503 (code request_bodies_over_budget,
 *   Retry-After: 1) rather than paused: pausing would let a few slow clients holding
 *   partial bodies stall everyone else until header_ms; a 503 is immediate and clear. A body
 *   is charged from its first byte until its response is finished (it stays alive while the
 *   handler proxies it) or the connection closes.
 * - Every answer that closes the connection (the errors above, an answer from the head hook,
 *   Connection: close, HTTP/1.0) ends in a lingering close: the answer drains, the write
 *   side is shut (FIN), and what the client still sends is read and discarded for at most
 *   linger_ms and linger_bytes, so a client that writes its whole body before reading gets
 *   the answer instead of a reset.
 *   Lingering connections count against max_connections.
 * - At max_connections a new connection is accepted and answered 503 (code
 *   too_many_connections, Retry-After: 1, Connection: close), with a short linger (1 s,
 *   64 KiB at most). At most max_refusing of those are answered at once; beyond that a new
 *   connection is accepted and closed unanswered (the client sees a reset or EOF).
 *
 * TLS is optional per listener (opts.tls_ctx, net/tls.h): the same framing runs over the
 * decrypted bytes.
 *
 * HTTP/2 (net/http2.c) is a mode of a connection: a plain connection whose first bytes are the
 * client preface (h2c with prior knowledge), or a TLS one whose ALPN agreed "h2", is served by
 * nghttp2 instead of http-parser. Each stream becomes an sb_http_req handed to the same head hook
 * and handler (req.h2 set, req.ops routing the answer to the stream), so nothing above the server
 * changes. Bounds: opts.h2_max_streams concurrent streams (more are refused with REFUSED_STREAM),
 * the same head, body and body-budget limits per stream (decoded heads charged per connection and
 * to the body budget), each stream's unsent answer held up to h2_stream_buffer_bytes (then
 * stream_write reports backpressure), reading paused while write_high_water is queued, rapid
 * reset and SETTINGS/PING floods cut by nghttp2's limits and the server's own resets by a bucket
 * of the same figures (GOAWAY). 1xx answers are refused on h2. Upgrade from HTTP/1.1 (h2c
 * Upgrade) is not offered.
 *
 * Not for: routing or anything about OpenAI. Used by the gateway (net/proxy.c),
 * the admin endpoints and the simulator's replicas (sim/). One event loop owns it. Every call
 * out of the server (handler, head hook, refusal, a request's on_abort, on_drain and on_cut)
 * holds the guard (net/guard.h), so with several workers the callbacks run under the lock and
 * the framing does not. */
#ifndef SB_NET_HTTP_SERVER_H
#define SB_NET_HTTP_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sb_http_server sb_http_server;
typedef struct sb_http_req sb_http_req;

/* Longest request id a request carries (sb_http_req.id). */
#define SB_HTTP_REQ_ID_MAX 128

typedef struct sb_http_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sb_http_header;

/* One request. Fields are valid from the handler call until the response is finished
 * (respond, stream_end, stream_abort) or on_abort was called, whichever comes first. */
struct sb_http_req {
    /* public, read-only */
    int method;                  /* enum http_method (http_parser.h) */
    const char *path;            /* URL path, without query; not NUL-terminated */
    size_t path_len;
    const char *url;             /* whole request target */
    size_t url_len;
    const sb_http_header *headers;
    size_t n_headers;
    const char *body;            /* de-chunked body, contiguous */
    size_t body_len;
    int http_minor;              /* 0 for HTTP/1.0 clients */
    bool keep_alive;             /* the client wants the connection kept */
    bool has_body;               /* the head declares a body (Content-Length above 0, or chunked) */
    bool h2;                     /* came on an HTTP/2 stream (the access log's proto) */
    const char *peer;            /* client address "ip:port", NUL-terminated */
    uint64_t start_ns;           /* uv_hrtime when the head began arriving */
    /* public, set by the handler */
    void *user;
    /* The request's id (NUL-terminated; "" for none), set by the head hook or the handler:
     * every answer to this request carries it as `x-request-id`, the server's own answers
     * given after the hook ran included. */
    char id[SB_HTTP_REQ_ID_MAX + 1];
    /* Called once if the client disconnects (or the connection fails) while the handler
     * owns this request. After it returns, the handler must not touch the request. */
    void (*on_abort)(sb_http_req *req);
    /* Called when queued response bytes drop below the low watermark after
     * sb_http_stream_write reported backpressure (returned 1). */
    void (*on_drain)(sb_http_req *req);
    /* Optional: called by sb_http_server_cut, instead of on_abort, while no response has
     * started: the handler answers now (e.g. 503) and the answer leaves before the connection
     * closes. A handler that does not answer from it gets on_abort as before. */
    void (*on_cut)(sb_http_req *req);
    /* Set by sb_http_server_cut before on_abort: the server closed the request, not the client
     * (read it in on_abort). */
    bool cut;
    /* NULL for a request this server read. Non-NULL: a request that came another way (the
     * endpoint picker's, net/picker.c: Envoy's ext_proc stream), handled by the same handler;
     * sb_http_respond and sb_http_stream_abort hand its answer to ops instead, and the other
     * stream calls refuse it (-1). */
    const struct sb_http_req_ops *ops;
    /* The loop of the server that read the request (the thread that owns it, net/guard.h);
     * NULL for a request that came another way (ops set: the main loop's). */
    uv_loop_t *loop;
};

/* Where a request from elsewhere sends its answer (sb_http_req.ops). */
typedef struct sb_http_req_ops {
    /* The complete answer, as sb_http_respond gives it. 0, or -1 if already answered or gone. */
    int (*respond)(sb_http_req *req, int status, const char *content_type, const char *headers, const char *body,
                   size_t body_len);
    /* The answer could not be built (out of memory): end the request abnormally. */
    void (*abort)(sb_http_req *req);
    /* Optional (NULL: the sb_http_stream_* call returns -1): a streamed answer, with the
     * contracts of sb_http_stream_begin, _write and _end. */
    int (*stream_begin)(sb_http_req *req, int status, const char *headers, size_t headers_len, int64_t content_length);
    int (*stream_write)(sb_http_req *req, const char *data, size_t len);
    int (*stream_end)(sb_http_req *req);
    /* The request asks where it would go rather than to be forwarded (the endpoint picker's,
     * net/picker.c): scheduling hands it to the picker, not the proxy. */
    bool pick;
} sb_http_req_ops;

typedef void (*sb_http_handler)(sb_http_req *req, void *ctx);
/* What the server answered on its own, before or instead of the handler (a malformed or
 * oversized request, a head or body not received in time, the connection limit): for the
 * owner's access log. req holds what was parsed (path NULL when the head was not), status the
 * answer's, code its error code; ctx is the handler's (sb_http_server_set_handler). */
typedef void (*sb_http_refused_fn)(const sb_http_req *req, int status, const char *code, void *ctx);

/* Decides a request from its head alone, before its body is read. Called once per request
 * that has a body to come (Content-Length above 0, chunked) or asks for 100 Continue, when
 * the head is complete and framing checks passed: before 100 Continue is sent, before any
 * body byte is buffered or charged to max_buffered_body_bytes, and before the body-size
 * check (a refused client learns nothing of the limits). `req` shows method, path, url,
 * headers, http_minor, keep_alive, has_body and peer; body is empty. `ctx` is the handler's ctx
 * (sb_http_server_set_handler changes both).
 * Returns true to go on: the body is read and the handler gets the request as usual (the
 * handler sees the same head; it must derive anything it needs again, since a reload may
 * swap the handler between the two calls). Or the hook answers the request itself with
 * sb_http_respond (complete; a started stream is aborted) and returns false: the answer
 * carries Connection: close, the connection is not reused, and the body still on the wire
 * is read and discarded in a lingering close (linger_ms, linger_bytes), so a client that
 * writes its whole body before reading still reads the answer. Returning false without
 * answering closes the connection unanswered.
 * The hook must not keep `req` or any pointer into it: the head is freed when the answer is
 * given (and moves to the handler otherwise). A request without a body skips the hook: the
 * handler answers it at the same cost, and the connection stays alive. */
typedef bool (*sb_http_head_hook)(sb_http_req *req, void *ctx);

/* Budgets several servers share (the workers' client listeners, net/workers.h): the counts that
 * max_connections, max_refusing and max_buffered_body_bytes bound, for all of them together.
 * Atomic: each server charges its own from its thread. A charge checks then adds, so servers
 * racing at the bound may pass it by at most one connection, or one read's growth, each. */
typedef struct sb_http_shared {
    _Atomic size_t conns, refusing, body_bytes;
} sb_http_shared;

/* linger_ms value that turns lingering off: close as soon as the answer has left. */
#define SB_HTTP_LINGER_OFF UINT32_MAX

/* Zero fields take the default (at start) or keep the current value (set_opts). */
typedef struct sb_http_server_opts {
    size_t max_header_bytes;        /* request line + headers; default 64 KiB */
    size_t max_body_bytes;          /* default 16 MiB */
    size_t max_connections;         /* counted: open and lingering connections; default 10000 */
    size_t max_refusing;            /* connections past max_connections answered 503 at once; default 64 */
    size_t max_buffered_body_bytes; /* body buffer capacity over all connections; default 256 MiB */
    uint32_t header_ms;             /* whole request (head and body) must arrive within; default 10 s */
    uint32_t idle_ms;               /* keep-alive idle; default 60 s */
    uint32_t linger_ms;             /* lingering close, after the answer left; default 5 s; or SB_HTTP_LINGER_OFF */
    size_t linger_bytes;            /* bytes discarded while lingering before giving up; default 64 MiB */
    size_t write_high_water;        /* backpressure threshold, bytes queued; default 1 MiB */
    /* TLS (net/tls.h) on every connection accepted from now on, or NULL: plain at start, the
     * current context kept by set_opts. The server takes its own reference (the caller frees
     * its own); connections hold theirs, so a replaced context lives until its last one closes.
     * A server started plain stays plain, and one with TLS keeps TLS. */
    struct ssl_ctx_st *tls_ctx;
    /* set_opts: the new context already has the old one's session-ticket keys (copied once by
     * whoever hands one context to several servers, net/workers.c). */
    bool tls_tickets_kept;
    /* HTTP/2 (copied as is by set_opts, unlike the zero-means-keep fields above). */
    bool h2_off; /* no h2c preface detection (TLS ALPN is the context's) */
    /* The numbers below: zero takes the default (start) or keeps the value (set_opts); a
     * change reaches connections opened afterwards. */
    uint32_t h2_max_streams;         /* SETTINGS_MAX_CONCURRENT_STREAMS; default 100 */
    uint32_t h2_window_bytes;        /* SETTINGS_INITIAL_WINDOW_SIZE (upload per stream); default 256 KiB */
    size_t h2_max_header_list_bytes; /* one stream's head (RFC 9113 6.5.2 accounting); default max_header_bytes */
    /* The decoded heads one connection's streams hold at once (HPACK lets a few bytes on the wire
     * stand for a large head): a new stream past it is refused (REFUSED_STREAM). Heads are also
     * charged to max_buffered_body_bytes while held. Default 4 x h2_max_header_list_bytes. */
    size_t h2_max_connection_header_bytes;
    uint32_t h2_connection_window_bytes; /* connection-level receive window (stream 0); default 4 x h2_window_bytes */
    size_t h2_stream_buffer_bytes;       /* a stream's answer held before nghttp2 takes it; default 64 KiB */
    /* Resets per connection, client's (RST_STREAM, CVE-2023-44487) and the server's with an error
     * code (CVE-2025-8671): a burst, refilled at rate per second; past it GOAWAY. Default 1000, 33. */
    uint32_t h2_reset_burst;
    uint32_t h2_reset_rate;
    /* SO_REUSEPORT on the listener (start only): several servers, each on its own loop, listen
     * on one address and the kernel spreads connections over them (net/workers.h). */
    bool reuse_port;
    /* The budgets this server shares with others (start only; it must outlive the server), or
     * NULL: its own. */
    sb_http_shared *shared;
} sb_http_server_opts;

/* A server's gauges and counters, for metrics. */
/* Why the server sent an HTTP/2 client a GOAWAY: the connection idled out (NO_ERROR, no
 * stream open past idle_ms), a drain (NO_ERROR: a reload's or a stop's, and its window ending),
 * a flood of ours or nghttp2's (ENHANCE_YOUR_CALM), nghttp2's own verdicts (INTERNAL_ERROR: its
 * rapid-reset bound among them; PROTOCOL_ERROR), any other code. */
enum sb_h2_goaway_reason {
    SB_H2_GOAWAY_IDLE,
    SB_H2_GOAWAY_DRAIN,
    SB_H2_GOAWAY_CALM,
    SB_H2_GOAWAY_INTERNAL,
    SB_H2_GOAWAY_PROTOCOL,
    SB_H2_GOAWAY_OTHER,
    SB_H2_GOAWAY_REASONS
};
/* The reasons' names in /metrics (reason="..."). */
extern const char *const sb_h2_goaway_reason_names[SB_H2_GOAWAY_REASONS];

typedef struct sb_http_server_stats {
    size_t open_connections;       /* counted against max_connections, lingering ones included */
    size_t lingering_connections;  /* answered and closing (refused ones included) */
    size_t refusing_connections;   /* past max_connections, being answered 503 */
    size_t body_bytes;             /* body buffer capacity held now (max_buffered_body_bytes) */
    uint64_t accepted_total;       /* connections taken from the kernel (refused and dropped ones included) */
    uint64_t refused_total;        /* connections answered 503 at max_connections */
    uint64_t reset_total;          /* connections closed unanswered (max_refusing reached) */
    uint64_t body_budget_refusals; /* requests answered 503: body budget spent */
    uint64_t tls_handshakes;       /* TLS handshakes completed */
    uint64_t tls_failures;         /* connections closed for a failed handshake or a TLS error */
    uint64_t h2_connections;       /* connections served as HTTP/2 */
    uint64_t h2_streams;           /* HTTP/2 requests handed on (to the head hook or the handler) */
    uint64_t h2_refused_streams;   /* streams the server reset with an error (REFUSED_STREAM past the
                                    * limit, INTERNAL_ERROR for an aborted answer, ...) */
    uint64_t timer_starts;         /* connection timers (re)started: a deadline came nearer than
                                    * the running timer, or one fired early (hs_arm_timer) */
    uint64_t h2_goaway[SB_H2_GOAWAY_REASONS]; /* GOAWAY frames sent, by reason */
} sb_http_server_stats;

/* Creates a server listening on host:port (IPv4 or IPv6 literal; port 0 picks one).
 * Returns 0 and sets *out, or a negative libuv error code (nothing is left open). */
int sb_http_server_start(uv_loop_t *loop, const char *host, uint16_t port, const sb_http_server_opts *opts,
                         sb_http_handler handler, void *ctx, sb_http_server **out);
/* Sends requests that begin from now on to another handler (a reload that replaced the
 * gateway); requests already handed out stay with the old one. */
void sb_http_server_set_handler(sb_http_server *s, sb_http_handler handler, void *ctx);
/* Installs (or with NULL removes) the head hook for requests that begin from now on. */
void sb_http_server_set_head_hook(sb_http_server *s, sb_http_head_hook on_head);
/* Replaces limits and timeouts (a reload); connections pick them up from their next request. */
void sb_http_server_set_opts(sb_http_server *s, const sb_http_server_opts *opts);
/* The port actually bound. */
uint16_t sb_http_server_port(const sb_http_server *s);
/* Stops listening and closes every connection (in-flight requests get on_abort). The
 * server is freed once libuv has closed all handles. */
void sb_http_server_stop(sb_http_server *s);
/* Tells fn of every answer the server gives on its own (sb_http_refused_fn). */
void sb_http_server_set_refused(sb_http_server *s, sb_http_refused_fn fn);
/* Begins a graceful shutdown: closes the listening socket (new connections are refused by the
 * kernel), closes at once every keep-alive connection waiting for a request, and from now on
 * every answer carries Connection: close and closes its connection once it has left (a
 * lingering close), pipelined requests behind it unread. Requests in progress go on. The
 * caller watches sb_http_server_connections fall to 0, then stops the server. Idempotent. */
void sb_http_server_drain(sb_http_server *s);
/* Closes every connection but those lingering after a complete answer: requests in progress
 * get on_abort, streams end without their terminator (the end of a drain window). A request
 * whose response has not started and that set on_cut is asked to answer first; its answer
 * then lingers out like any other. */
void sb_http_server_cut(sb_http_server *s);
/* Open connections (lingering ones included, refused ones not). Any thread. */
size_t sb_http_server_connections(const sb_http_server *s);
/* Fills *out with the server's current gauges and counters. Any thread (they are atomic). */
void sb_http_server_get_stats(const sb_http_server *s, sb_http_server_stats *out);

/* Finds a request header by case-insensitive name; NULL if absent. */
const sb_http_header *sb_http_req_header(const sb_http_req *req, const char *name);

/* Answers with a complete response; `headers` is NULL or extra "Name: value\r\n" lines.
 * Returns 0, or -1 if the request was already answered or aborted. */
int sb_http_respond(sb_http_req *req, int status, const char *content_type, const char *headers,
                    const char *body, size_t body_len);

/* Starts a streamed response. `headers` holds "Name: value\r\n" lines without framing or
 * Connection headers; content_length >= 0 frames by length, -1 chunks (HTTP/1.1) or
 * delimits by close (HTTP/1.0). On HTTP/2 the names are sent lowercase, hop-by-hop ones
 * dropped, and the body goes as DATA frames. */
int sb_http_stream_begin(sb_http_req *req, int status, const char *headers, size_t headers_len,
                         int64_t content_length);
/* Queues body bytes (copied). Returns 0, 1 if the queue is above the high watermark (the
 * caller should stop producing until on_drain), or -1 if the stream is gone. */
int sb_http_stream_write(sb_http_req *req, const char *data, size_t len);
/* Finishes the response (terminating chunk if chunked). */
int sb_http_stream_end(sb_http_req *req);
/* Ends the response abnormally: the connection is closed without a terminator, so the
 * client sees an aborted transfer, never a silent truncation (on HTTP/2 the stream is
 * reset, INTERNAL_ERROR, after what was queued; the connection lives on). */
void sb_http_stream_abort(sb_http_req *req);

const char *sb_http_status_text(int status);

#endif
