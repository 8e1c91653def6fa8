#include "net/http_server.h"

#include <http_parser.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "proto/openai_error.h"

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
/* First allocation for a body; then it doubles with the bytes that arrive (never with the
 * bytes a Content-Length promises), up to the declared length. */
#define BODY_FIRST_BYTES 4096
/* A connection past max_connections is only answered 503: it needs to get its request out
 * before it reads, so a short linger suffices (bounded further by linger_ms/linger_bytes). */
#define REFUSE_LINGER_MS 1000
#define REFUSE_LINGER_BYTES (64 * 1024)

enum conn_state {
    CONN_IDLE = 0,     /* between requests (keep-alive) */
    CONN_READING,      /* a request's head or body is arriving */
    CONN_HANDLING,     /* the handler owns the request, response not started */
    CONN_STREAMING,    /* response started, not finished */
    CONN_LINGERING,    /* answered and closing: draining the answer, then reading and discarding */
    CONN_CLOSING,
};

typedef struct hdr_off {
    size_t name_off, name_len, value_off, value_len;
} hdr_off;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
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
    sb_buf body;          /* body.cap is what this connection holds of the server's body budget */
    size_t body_cap_max;  /* declared Content-Length + 1 (the NUL), or SIZE_MAX when chunked */
    sb_buf pending;       /* bytes read past the current request (pipelining) */
    bool reading;         /* uv_read_start active */
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
    int handles_open;
    sb_buf out;           /* response bytes not yet handed to uv_write (coalescing) */
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
    char peer[64];
} conn;

struct sb_http_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    sb_http_server_opts opts;
    sb_http_handler handler;
    sb_http_head_hook on_head; /* NULL: every request goes whole to the handler */
    void *ctx;
    conn *conns;
    size_t n_conns;       /* open connections counted against max_connections (lingering included) */
    size_t n_refusing;    /* connections past the limit being answered 503 (not in n_conns) */
    size_t n_lingering;
    size_t n_alive;       /* connection structs not yet freed (closing ones included) */
    size_t body_bytes;    /* sum of the body buffers' capacity over all connections */
    uint64_t refused_total, reset_total, body_budget_refusals;
    bool stopping;
    bool listener_closed;
    uint16_t port;
    /* Writes made during one loop iteration are coalesced per connection and flushed by a
     * check handle at the end of the iteration: a response head, its body and the chunk
     * terminator leave in one write(2) instead of three, and an SSE event still leaves in the
     * iteration that produced it. */
    uv_check_t flusher;
    conn *dirty;
    int server_handles_closed;
    /* Every connection of this server reads into this one buffer: the loop is single-threaded
     * and each read is consumed (copied into head/body/pending) before the next one. Owned
     * here rather than file-scope so that servers on different loops share nothing. */
    char read_buf[READ_BUF_BYTES];
};

typedef struct wreq {
    uv_write_t w;
    conn *c;
    size_t len;
    char *data;     /* the connection's out buffer, taken over: no copy */
} wreq;

/* Defined (const) after its callbacks, before sb_http_server_start. */
static const http_parser_settings parser_settings;
static void conn_close(conn *c);
static void conn_read_start(conn *c);
static void process(conn *c, const char *data, size_t len);
static void run_pending(conn *c);
static void arm_timer(conn *c, uint32_t ms);
static void linger_drained(conn *c);
static void fail_request(conn *c, int status, const char *code, const char *message, const char *headers);

const char *sb_http_status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* ---- writing ---- */

static void on_write(uv_write_t *w, int status)
{
    wreq *r = (wreq *)w;
    conn *c = r->c;
    c->queued -= r->len;
    sb_free(r->data);
    sb_free(r);
    if (status < 0 && c->state != CONN_CLOSING) {
        conn_close(c);
        return;
    }
    if (c->state == CONN_CLOSING)
        return;
    if (c->state == CONN_LINGERING) {
        linger_drained(c);
        return;
    }
    if (c->queued == 0 && c->close_after && c->state == CONN_IDLE) {
        conn_close(c);
        return;
    }
    if (c->write_paused && c->state == CONN_IDLE) {
        arm_timer(c, c->srv->opts.idle_ms); /* it reads: not idle */
        if (c->queued + c->out.len < c->srv->opts.write_high_water / 2) {
            c->write_paused = false;
            conn_read_start(c);
            if (c->pending.len)
                run_pending(c);
        }
        return;
    }
    if (c->wants_drain && c->queued < c->srv->opts.write_high_water / 2 && c->state == CONN_STREAMING) {
        c->wants_drain = false;
        arm_timer(c, 0); /* the client reads again: no stall */
        if (c->req.on_drain)
            c->req.on_drain(&c->req);
    }
}

static void undirty(conn *c)
{
    if (!c->dirty)
        return;
    if (c->dirty_prev)
        c->dirty_prev->dirty_next = c->dirty_next;
    else
        c->srv->dirty = c->dirty_next;
    if (c->dirty_next)
        c->dirty_next->dirty_prev = c->dirty_prev;
    c->dirty_prev = c->dirty_next = NULL;
    c->dirty = false;
}

/* Hands the out buffer to libuv (the buffer itself: no copy). */
static int conn_flush(conn *c)
{
    undirty(c);
    if (c->out.len == 0)
        return 0;
    wreq *r = sb_malloc(sizeof(wreq));
    if (!r)
        return -1;
    r->c = c;
    r->data = sb_buf_steal(&c->out, &r->len);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)r->len);
    int rc = uv_write(&r->w, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
        sb_free(r->data);
        sb_free(r);
        return -1;
    }
    c->queued += r->len;
    return 0;
}

static void on_check(uv_check_t *h)
{
    sb_http_server *s = h->data;
    while (s->dirty) {
        conn *c = s->dirty;
        if (conn_flush(c) < 0)
            conn_close(c);
    }
    uv_check_stop(&s->flusher);
}

/* Appends to the out buffer; flushed at the end of this loop iteration. */
static int conn_append(conn *c, const uv_buf_t *bufs, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += bufs[i].len;
    if (sb_buf_reserve(&c->out, total) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        sb_buf_append(&c->out, bufs[i].base, bufs[i].len);
    if (!c->dirty) {
        c->dirty = true;
        c->dirty_prev = NULL;
        c->dirty_next = c->srv->dirty;
        if (c->srv->dirty)
            c->srv->dirty->dirty_prev = c;
        c->srv->dirty = c;
        uv_check_start(&c->srv->flusher, on_check);
    }
    return 0;
}

/* Appends and flushes now (for writes followed by a close decision). */
static int conn_writev(conn *c, const uv_buf_t *bufs, int n)
{
    if (conn_append(c, bufs, n) < 0)
        return -1;
    return conn_flush(c);
}

static int conn_write(conn *c, const char *data, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    return conn_writev(c, &b, 1);
}

/* ---- buffers of client bytes: grown with what arrives, never past their bound ---- */

/* The capacity `b` needs for `extra` more bytes (and sb_buf's NUL): 0 if it has room, else
 * double the current one (at least `first`), but never more than `cap_max` when that still
 * fits, so a buffer at its bound holds no doubling's worth of slack. */
static size_t grown_cap(const sb_buf *b, size_t extra, size_t first, size_t cap_max)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap * 2 : first;
    if (cap < need)
        cap = need;
    if (cap > cap_max && cap_max >= need)
        cap = cap_max;
    return cap;
}

static int buf_set_cap(sb_buf *b, size_t cap)
{
    char *d = sb_realloc(b->data, cap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

/* Appends to a head or pending buffer, growing it at most to cap_max. Returns 0 or -1 (ENOMEM). */
static int buf_append_capped(sb_buf *b, const char *p, size_t n, size_t cap_max)
{
    size_t cap = grown_cap(b, n, 1024, cap_max);
    if (cap && buf_set_cap(b, cap) < 0)
        return -1;
    return sb_buf_append(b, p, n);
}

/* Makes room for `extra` more body bytes. The buffer doubles from what has arrived (so the
 * memory a connection holds is at most about twice what it sent), never past the declared
 * Content-Length, and every byte of capacity is charged to max_buffered_body_bytes.
 * Returns 0, 503 when the budget is spent, or 500 when out of memory; the buffer is
 * unchanged on failure. */
static int body_grow(conn *c, size_t extra)
{
    sb_http_server *s = c->srv;
    size_t cap = grown_cap(&c->body, extra, BODY_FIRST_BYTES, c->body_cap_max);
    if (!cap)
        return 0;
    size_t budget = s->opts.max_buffered_body_bytes;
    size_t avail = s->body_bytes < budget ? budget - s->body_bytes : 0; /* a reload may have lowered it */
    if (cap - c->body.cap > avail) {
        /* The exact need before refusing: the doubling is a convenience, not a claim. */
        cap = c->body.len + extra + 1;
        if (cap - c->body.cap > avail)
            return 503;
    }
    size_t more = cap - c->body.cap;
    if (buf_set_cap(&c->body, cap) < 0)
        return 500;
    s->body_bytes += more;
    return 0;
}

/* Frees the body and gives its capacity back to the budget. */
static void body_release(conn *c)
{
    c->srv->body_bytes -= c->body.cap;
    sb_buf_free(&c->body);
}

/* ---- lifecycle ---- */

static void on_handle_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->handles_open > 0)
        return;
    sb_http_server *s = c->srv;
    sb_buf_free(&c->head);
    body_release(c);
    sb_buf_free(&c->pending);
    sb_buf_free(&c->out);
    sb_free(c);
    if (--s->n_alive == 0 && s->stopping && s->listener_closed)
        sb_free(s);
}

static void conn_close(conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    enum conn_state was = c->state;
    c->state = CONN_CLOSING;
    if ((was == CONN_HANDLING || was == CONN_STREAMING) && c->req.on_abort) {
        void (*cb)(sb_http_req *) = c->req.on_abort;
        c->req.on_abort = NULL;
        c->req.on_drain = NULL;
        cb(&c->req);
    }
    sb_http_server *s = c->srv;
    body_release(c); /* the handler is done with the request: give the budget back now */
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->refused)
        s->n_refusing--;
    else
        s->n_conns--;
    if (was == CONN_LINGERING)
        s->n_lingering--;
    undirty(c);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_timeout(uv_timer_t *t)
{
    conn *c = t->data;
    if (c->state == CONN_LINGERING || c->close_after) {
        /* Closing after queued bytes, and the client does not read them: give up. */
        conn_close(c);
        return;
    }
    if (c->state == CONN_STREAMING && c->wants_drain) {
        /* The client has stopped reading a response in progress: it is gone in effect.
         * Closing aborts the request (on_abort), which releases its upstream. */
        conn_close(c);
        return;
    }
    if (c->state == CONN_READING) {
        /* A slow or stalled request head/body: say so (after any response still queued
         * ahead of it), then close. */
        fail_request(c, 408, "request_timeout", "request not received in time", NULL);
        return;
    }
    if (c->state == CONN_IDLE)
        conn_close(c);
}

static void arm_timer(conn *c, uint32_t ms)
{
    if (ms)
        uv_timer_start(&c->timer, on_timeout, ms, 0);
    else
        uv_timer_stop(&c->timer);
}

static void reset_request(conn *c)
{
    sb_buf_reset(&c->head);
    body_release(c);
    c->body_cap_max = SIZE_MAX;
    c->n_headers = 0;
    c->url_off = c->url_len = 0;
    c->last_was_value = false;
    c->saw_cl = c->saw_te = c->expect_continue = false;
    c->head_done = false;
    c->body_follows = false;
    c->error_status = 0;
    c->chunked = false;
    c->resp_left = -1;
    c->wants_drain = false;
    memset(&c->req, 0, sizeof(c->req));
    c->req.peer = c->peer;
}

static void on_shutdown(uv_shutdown_t *r, int status)
{
    conn *c = r->data;
    /* ECANCELED: the connection is being closed already. */
    if (status < 0 && c->state != CONN_CLOSING)
        conn_close(c);
}

/* The answer has left: half-close (the client reads it, then EOF) and keep discarding what
 * the client still sends for linger_ms; or close now if the client is done sending. */
static void linger_drained(conn *c)
{
    if (c->shut || c->queued || c->out.len)
        return;
    if (c->peer_eof || !c->linger_ms || !c->linger_bytes) {
        conn_close(c);
        return;
    }
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
        conn_close(c);
        return;
    }
    c->shut = true;
    arm_timer(c, c->linger_ms);
}

/* Closes the connection after an answer with Connection: close, without losing the answer.
 * Closing a socket whose receive queue holds unread bytes makes the kernel send a reset,
 * and the reset destroys the answer before the client reads it: a client that writes its
 * whole body before reading (Python's http.client, the OpenAI SDKs) would see
 * ECONNRESET instead of its 413, and retry. So: stop parsing, free the request's buffers,
 * let the answer drain (at most drain_ms), half-close, then read and discard until the
 * client closes, linger_ms pass or linger_bytes arrive, whichever is first. A lingering
 * connection still counts against max_connections, so lingerers cannot pile up. */
static void conn_linger(conn *c, uint32_t drain_ms)
{
    if (c->state == CONN_CLOSING || c->state == CONN_LINGERING)
        return;
    sb_http_server *s = c->srv;
    c->state = CONN_LINGERING;
    s->n_lingering++;
    if (!c->refused) {
        c->linger_ms = s->opts.linger_ms == SB_HTTP_LINGER_OFF ? 0 : s->opts.linger_ms;
        c->linger_bytes = s->opts.linger_bytes;
    }
    if (!drain_ms)
        drain_ms = c->linger_ms ? c->linger_ms : s->opts.idle_ms;
    c->req.on_abort = NULL;
    c->req.on_drain = NULL;
    body_release(c);
    sb_buf_free(&c->pending);
    sb_buf_free(&c->head);
    c->resume = false;
    c->linger_seen = 0;
    if (conn_flush(c) < 0) {
        conn_close(c);
        return;
    }
    if (c->linger_ms && c->linger_bytes && !c->peer_eof) {
        conn_read_start(c);
    } else if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    arm_timer(c, drain_ms); /* a client that never reads the answer is closed */
    linger_drained(c);
}

/* Answers an error the server found itself (framing, limits, time, memory) with an
 * OpenAI-shaped body and Connection: close, then lingers: the rest of the input cannot be
 * trusted, or is not wanted. `headers` is NULL or extra "Name: value\r\n" lines. */
static void fail_request(conn *c, int status, const char *code, const char *message, const char *headers)
{
    sb_buf b = {0};
    sb_buf json = {0};
    const char *type = status == 503 ? "service_unavailable" : status >= 500 ? "server_error" : "invalid_request_error";
    if (sb_openai_error(&json, message, type, NULL, code) < 0 ||
        sb_buf_printf(&b,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "%sConnection: close\r\n\r\n",
                      status, sb_http_status_text(status), json.len, headers ? headers : "") < 0 ||
        sb_buf_append(&b, json.data, json.len) < 0 || conn_write(c, b.data, b.len) < 0) {
        sb_buf_free(&b);
        sb_buf_free(&json);
        conn_close(c);
        return;
    }
    sb_buf_free(&b);
    sb_buf_free(&json);
    conn_linger(c, 0);
}

/* ---- parsing callbacks ---- */

static int on_message_begin(http_parser *p)
{
    conn *c = p->data;
    reset_request(c);
    c->state = CONN_READING;
    c->req.start_ns = uv_hrtime();
    arm_timer(c, c->srv->opts.header_ms);
    return 0;
}

static int head_append(conn *c, const char *at, size_t len)
{
    if (c->head.len + len > c->srv->opts.max_header_bytes) {
        c->error_status = 431;
        return -1;
    }
    if (buf_append_capped(&c->head, at, len, c->srv->opts.max_header_bytes + 1) < 0) {
        c->error_status = 500;
        return -1;
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->url_len == 0)
        c->url_off = c->head.len;
    c->url_len += len;
    return head_append(c, at, len);
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->head_done)
        return 0; /* chunked trailers: never merged into the request's headers */
    if (c->last_was_value || c->n_headers == 0) {
        if (c->n_headers == MAX_HEADERS) {
            c->error_status = 431;
            return -1;
        }
        hdr_off *h = &c->hoffs[c->n_headers++];
        h->name_off = c->head.len;
        h->name_len = 0;
        h->value_off = 0;
        h->value_len = 0;
        c->last_was_value = false;
    }
    c->hoffs[c->n_headers - 1].name_len += len;
    return head_append(c, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->head_done)
        return 0;
    if (c->n_headers == 0)
        return -1;
    hdr_off *h = &c->hoffs[c->n_headers - 1];
    if (!c->last_was_value) {
        h->value_off = c->head.len;
        c->last_was_value = true;
    }
    h->value_len += len;
    return head_append(c, at, len);
}

static bool name_is(const sb_buf *b, const hdr_off *h, const char *name)
{
    size_t n = strlen(name);
    return h->name_len == n && strncasecmp(b->data + h->name_off, name, n) == 0;
}

/* The request view of a parsed head (body empty until on_message_complete). The head
 * buffer no longer moves once the head is complete (chunked trailers are not kept), so the
 * same pointers hold from the head hook to the end of the response. */
static void fill_req(conn *c, http_parser *p)
{
    sb_http_req *r = &c->req;
    for (size_t i = 0; i < c->n_headers; i++) {
        hdr_off *h = &c->hoffs[i];
        c->headers[i] =
            (sb_http_header){c->head.data + h->name_off, h->name_len, c->head.data + h->value_off, h->value_len};
    }
    r->method = p->method;
    r->url = c->head.data ? c->head.data + c->url_off : "";
    r->url_len = c->url_len;
    r->path = r->url;
    const char *q = memchr(r->url, '?', r->url_len);
    r->path_len = q ? (size_t)(q - r->url) : r->url_len;
    r->headers = c->headers;
    r->n_headers = c->n_headers;
    r->body = "";
    r->body_len = 0;
    r->http_minor = p->http_minor;
    r->keep_alive = http_should_keep_alive(p) != 0;
    r->has_body = c->body_follows;
}

/* Runs the head hook. Returns true to read the body; false when the hook answered (the
 * connection lingers) or refused to (the connection is closed): parsing stops either way. */
static bool run_head_hook(conn *c, http_parser *p)
{
    sb_http_server *s = c->srv;
    fill_req(c, p);
    c->state = CONN_HANDLING; /* what sb_http_respond expects */
    c->at_head = true;
    bool go_on = s->on_head(&c->req, s->ctx);
    c->at_head = false;
    if (c->state == CONN_HANDLING && go_on) {
        c->state = CONN_READING;
        return true;
    }
    /* Unanswered, a stream begun and left open (the contract asks for sb_http_respond) or
     * aborted: no complete answer can follow, so close. */
    if (c->state != CONN_LINGERING && c->state != CONN_CLOSING)
        conn_close(c);
    return false;
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    c->head_done = true;
    for (size_t i = 0; i < c->n_headers; i++) {
        hdr_off *h = &c->hoffs[i];
        if (name_is(&c->head, h, "content-length"))
            c->saw_cl = true;
        else if (name_is(&c->head, h, "transfer-encoding"))
            c->saw_te = true;
        else if (name_is(&c->head, h, "expect") && h->value_len == 12 &&
                 strncasecmp(c->head.data + h->value_off, "100-continue", 12) == 0)
            c->expect_continue = true;
    }
    if (c->saw_cl && c->saw_te) {
        c->error_status = 400;
        return 3; /* any value but 0/1/2 makes http_parser fail the message */
    }
    if (c->saw_te && !(p->flags & F_CHUNKED)) {
        c->error_status = 400;
        return 3;
    }
    /* Before the size check, 100 Continue and any body byte: a request the hook refuses
     * costs its head only, and its sender learns nothing of the limits. */
    c->body_follows = (p->flags & F_CHUNKED) || (c->saw_cl && p->content_length > 0);
    if (c->srv->on_head && (c->body_follows || c->expect_continue) && !run_head_hook(c, p))
        return 3; /* stops the parser; process() sees the connection lingering or closing */
    if (c->saw_cl && p->content_length > c->srv->opts.max_body_bytes) {
        c->error_status = 413;
        return 3;
    }
    /* Nothing is reserved for the declared length: a promise costs nothing until bytes
     * come (body_grow). The length only caps the growth, so the last doubling fits; a
     * chunked body is capped by max_body_bytes (on_body refuses more), else its last
     * doubling would hold and charge up to twice that. */
    c->body_cap_max = c->saw_cl ? (size_t)p->content_length + 1 : c->srv->opts.max_body_bytes + 1;
    if (c->expect_continue && p->http_minor >= 1) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        conn_write(c, cont, sizeof(cont) - 1);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->body.len + len > c->srv->opts.max_body_bytes) {
        c->error_status = 413;
        return -1;
    }
    int rc = body_grow(c, len);
    if (rc) {
        c->error_status = rc;
        return -1;
    }
    sb_buf_append(&c->body, at, len); /* cannot fail: the room is there */
    return 0;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    sb_http_req *r = &c->req;
    fill_req(c, p);
    r->body = c->body.data ? c->body.data : "";
    r->body_len = c->body.len;
    c->state = CONN_HANDLING;
    arm_timer(c, 0);
    /* Stop parsing here: pipelined bytes wait in `pending` until this response is done. */
    http_parser_pause(p, 1);
    return 0;
}

/* Runs the parser over data; dispatches a completed request to the handler. */
static void process(conn *c, const char *data, size_t len)
{
    size_t n = http_parser_execute(&c->parser, &parser_settings, data, len);
    enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
    if (err == HPE_PAUSED) {
        if (n < len && buf_append_capped(&c->pending, data + n, len - n, PENDING_CAP) < 0) {
            conn_close(c);
            return;
        }
        sb_http_server *s = c->srv;
        s->handler(&c->req, s->ctx);
        return;
    }
    if (c->state == CONN_LINGERING || c->state == CONN_CLOSING)
        return; /* the head hook answered (or closed): the rest of the input is discarded */
    if (err != HPE_OK) {
        /* http-parser's own head bound (HTTP_MAX_HEADER_SIZE, 80 KiB) is a 431 too. */
        int status = c->error_status ? c->error_status : err == HPE_HEADER_OVERFLOW ? 431 : 400;
        const char *code = "invalid_http_request", *msg = http_errno_description(err), *hdrs = NULL;
        switch (status) {
        case 413: code = "request_too_large", msg = "request body too large"; break;
        case 431: code = "request_header_too_large", msg = "request header too large"; break;
        case 500: code = "out_of_memory", msg = "out of memory"; break;
        case 503:
            code = "request_bodies_over_budget";
            msg = "the gateway holds too many request bytes at once (limits.max_buffered_body_bytes); retry";
            hdrs = "Retry-After: 1\r\n";
            c->srv->body_budget_refusals++;
            break;
        default:
            if ((c->saw_cl && c->saw_te) || err == HPE_UNEXPECTED_CONTENT_LENGTH) {
                code = "request_smuggling";
                msg = "both Content-Length and Transfer-Encoding (request smuggling refused)";
            }
        }
        if (c->state == CONN_READING || c->state == CONN_IDLE)
            fail_request(c, status, code, msg, hdrs);
        else
            conn_close(c);
        return;
    }
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->srv->read_buf, sizeof(c->srv->read_buf));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = stream->data;
    if (nread == 0)
        return;
    if (c->state == CONN_LINGERING) {
        if (nread == UV_EOF && !c->shut) {
            /* The client is done sending; close once the answer has left. */
            c->peer_eof = true;
            uv_read_stop(stream);
            c->reading = false;
        } else if (nread < 0 || (c->linger_seen += (size_t)nread) > c->linger_bytes) {
            conn_close(c);
        }
        return;
    }
    if (nread < 0) {
        /* EOF or error: the client is gone. A half-read request is dropped; an in-flight one
         * is aborted, which closes its upstream so the model server stops generating. */
        conn_close(c);
        return;
    }
    if (c->close_after)
        return;
    if (c->state == CONN_HANDLING || c->state == CONN_STREAMING) {
        /* A request is in flight. Reading goes on whatever the client sends, so that its EOF
         * or reset aborts the request at once (stopping would hide it until the response
         * ends, response_ms at worst, with the body budget and the upstream held). Past the
         * read-ahead bound the input is dropped: pipelined requests cannot all be kept, and
         * once some are lost the stream cannot be framed again, so the connection closes
         * after this answer (a lingering close). Dropping is bounded by linger_bytes too: a
         * client streaming junk behind its request loses the request. */
        if (!c->discarding && c->pending.len + (size_t)nread <= MAX_PENDING_BYTES) {
            if (buf_append_capped(&c->pending, buf->base, (size_t)nread, PENDING_CAP) < 0)
                conn_close(c);
            return;
        }
        if (!c->discarding) {
            c->discarding = true;
            sb_buf_free(&c->pending);
        }
        if ((c->discarded += (size_t)nread) > c->srv->opts.linger_bytes)
            conn_close(c);
        return;
    }
    c->processing = true;
    process(c, buf->base, (size_t)nread);
    c->processing = false;
    if (c->resume && c->state == CONN_IDLE && c->pending.len)
        run_pending(c);
}

static void conn_read_start(conn *c)
{
    if (!c->reading && c->state != CONN_CLOSING) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = true;
    }
}

/* The response is finished: go back to reading (keep-alive) or close. */
static void finish_response(conn *c)
{
    c->req.on_abort = NULL;
    c->req.on_drain = NULL;
    body_release(c); /* the request is over: its body leaves the budget */
    if (c->head.cap > HEAD_KEEP_BYTES)
        sb_buf_free(&c->head);
    if (conn_flush(c) < 0) {
        conn_close(c);
        return;
    }
    if (!c->keep_alive_resp || c->srv->stopping || c->discarding) {
        /* Bytes the client pipelined behind a Connection: close must not reset the answer.
         * The response may be long and the client slow: idle_ms to drain it, as on a stream. */
        conn_linger(c, c->srv->opts.idle_ms);
        return;
    }
    c->state = CONN_IDLE;
    arm_timer(c, c->srv->opts.idle_ms);
    http_parser_pause(&c->parser, 0);
    if (c->queued + c->out.len > c->srv->opts.write_high_water) {
        /* A client pipelining requests without reading the answers would have them pile up
         * here without bound (a 30-byte request can fetch kilobytes): stop reading and
         * parsing until it reads below the low watermark (on_write); idle_ms closes it if
         * it never does. */
        c->write_paused = true;
        if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
        }
        return;
    }
    conn_read_start(c);
    if (c->pending.len) {
        /* Pipelined requests: parsed by the outermost process() on the stack, in a loop, never
         * by recursion (thousands of pipelined requests answered at once would otherwise grow
         * the stack without bound). */
        if (c->processing)
            c->resume = true;
        else
            run_pending(c);
    }
}

/* Parses pipelined bytes that arrived while a response was in progress, request after
 * request, as long as each is answered at once. */
static void run_pending(conn *c)
{
    c->processing = true;
    do {
        c->resume = false;
        /* Detached first: process() may append leftovers to `pending` again. */
        sb_buf p = c->pending;
        c->pending = (sb_buf){0};
        process(c, p.data, p.len);
        sb_buf_free(&p);
    } while (c->resume && c->state == CONN_IDLE && c->pending.len);
    c->processing = false;
}

/* ---- accepting ---- */

static void on_reset_closed(uv_handle_t *h) { sb_free(h); }

/* Past max_connections and past the refusal slots too: accepted (libuv stops watching a
 * listener whose connection is left unaccepted) and closed at once, unanswered. */
static void drop_connection(sb_http_server *s, uv_stream_t *server)
{
    uv_tcp_t *t = sb_malloc(sizeof(*t));
    if (!t)
        return;
    uv_tcp_init(s->loop, t);
    uv_accept(server, (uv_stream_t *)t);
    s->reset_total++;
    uv_close((uv_handle_t *)t, on_reset_closed);
}

/* Answers a connection past max_connections with 503 and Retry-After, then a short linger
 * so the client reads it after sending its request. */
static void refuse_connection(conn *c)
{
    sb_http_server *s = c->srv;
    s->refused_total++;
    c->linger_ms = s->opts.linger_ms < REFUSE_LINGER_MS ? s->opts.linger_ms : REFUSE_LINGER_MS;
    if (s->opts.linger_ms == SB_HTTP_LINGER_OFF)
        c->linger_ms = 0;
    c->linger_bytes = s->opts.linger_bytes < REFUSE_LINGER_BYTES ? s->opts.linger_bytes : REFUSE_LINGER_BYTES;
    fail_request(c, 503, "too_many_connections",
                 "the gateway is at its connection limit (limits.max_connections); retry", "Retry-After: 1\r\n");
}

static void on_connection(uv_stream_t *server, int status)
{
    sb_http_server *s = server->data;
    if (status < 0)
        return;
    bool over = s->n_conns >= s->opts.max_connections;
    if (over && s->n_refusing >= s->opts.max_refusing) {
        drop_connection(s, server);
        return;
    }
    conn *c = sb_calloc(1, sizeof(conn));
    if (!c) {
        drop_connection(s, server);
        return;
    }
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    c->body_cap_max = SIZE_MAX;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    if (over) {
        c->refused = true;
        s->n_refusing++;
    } else {
        s->n_conns++;
    }
    s->n_alive++;
    c->state = CONN_IDLE;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (over) {
        refuse_connection(c);
        return;
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        char ip[48] = "?";
        int port = 0;
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
        snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, port);
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    reset_request(c);
    arm_timer(c, s->opts.header_ms);
    conn_read_start(c);
}

/* The listener and the flusher: the server is freed when both are closed and no
 * connection struct is left. */
static void on_server_handle_closed(uv_handle_t *h)
{
    sb_http_server *s = h->data;
    if (++s->server_handles_closed == 2) {
        s->listener_closed = true;
        if (s->n_alive == 0)
            sb_free(s);
    }
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

int sb_http_server_start(uv_loop_t *loop, const char *host, uint16_t port, const sb_http_server_opts *opts,
                         sb_http_handler handler, void *ctx, sb_http_server **out)
{
    struct sockaddr_storage addr;
    int rc = strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc < 0)
        return rc;
    sb_http_server *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return UV_ENOMEM;
    s->loop = loop;
    s->handler = handler;
    s->ctx = ctx;
    s->opts = opts ? *opts : (sb_http_server_opts){0};
    if (!s->opts.max_header_bytes)
        s->opts.max_header_bytes = 64 * 1024;
    if (!s->opts.max_body_bytes)
        s->opts.max_body_bytes = 16 * 1024 * 1024;
    if (!s->opts.max_connections)
        s->opts.max_connections = 10000;
    if (!s->opts.header_ms)
        s->opts.header_ms = 10000;
    if (!s->opts.idle_ms)
        s->opts.idle_ms = 60000;
    if (!s->opts.write_high_water)
        s->opts.write_high_water = 1024 * 1024;
    if (!s->opts.max_refusing)
        s->opts.max_refusing = 64;
    if (!s->opts.max_buffered_body_bytes)
        s->opts.max_buffered_body_bytes = (size_t)256 << 20;
    if (!s->opts.linger_ms)
        s->opts.linger_ms = 5000;
    if (!s->opts.linger_bytes)
        s->opts.linger_bytes = (size_t)64 << 20;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    uv_check_init(loop, &s->flusher);
    s->flusher.data = s;
    if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection)) < 0) {
        /* The handles close on the loop's next turn, which frees the server. */
        s->stopping = true;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
        return rc;
    }
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    *out = s;
    return 0;
}

uint16_t sb_http_server_port(const sb_http_server *s) { return s->port; }

void sb_http_server_set_handler(sb_http_server *s, sb_http_handler handler, void *ctx)
{
    s->handler = handler;
    s->ctx = ctx;
}

void sb_http_server_set_head_hook(sb_http_server *s, sb_http_head_hook on_head)
{
    s->on_head = on_head;
}

void sb_http_server_set_opts(sb_http_server *s, const sb_http_server_opts *opts)
{
    sb_http_server_opts o = *opts;
    if (!o.max_header_bytes)
        o.max_header_bytes = s->opts.max_header_bytes;
    if (!o.max_body_bytes)
        o.max_body_bytes = s->opts.max_body_bytes;
    if (!o.max_connections)
        o.max_connections = s->opts.max_connections;
    if (!o.header_ms)
        o.header_ms = s->opts.header_ms;
    if (!o.idle_ms)
        o.idle_ms = s->opts.idle_ms;
    if (!o.write_high_water)
        o.write_high_water = s->opts.write_high_water;
    if (!o.max_refusing)
        o.max_refusing = s->opts.max_refusing;
    if (!o.max_buffered_body_bytes)
        o.max_buffered_body_bytes = s->opts.max_buffered_body_bytes;
    if (!o.linger_ms)
        o.linger_ms = s->opts.linger_ms;
    if (!o.linger_bytes)
        o.linger_bytes = s->opts.linger_bytes;
    s->opts = o;
}

size_t sb_http_server_connections(const sb_http_server *s) { return s->n_conns; }

void sb_http_server_get_stats(const sb_http_server *s, sb_http_server_stats *out)
{
    *out = (sb_http_server_stats){
        .open_connections = s->n_conns,
        .lingering_connections = s->n_lingering,
        .refusing_connections = s->n_refusing,
        .body_bytes = s->body_bytes,
        .refused_total = s->refused_total,
        .reset_total = s->reset_total,
        .body_budget_refusals = s->body_budget_refusals,
    };
}


void sb_http_server_stop(sb_http_server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    while (s->conns)
        conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
}

/* ---- the handler's side ---- */

const sb_http_header *sb_http_req_header(const sb_http_req *req, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < req->n_headers; i++) {
        const sb_http_header *h = &req->headers[i];
        if (h->name_len == n && strncasecmp(h->name, name, n) == 0)
            return h;
    }
    return NULL;
}

static conn *req_conn(sb_http_req *req) { return (conn *)((char *)req - offsetof(conn, req)); }

int sb_http_stream_begin(sb_http_req *req, int status, const char *headers, size_t headers_len,
                         int64_t content_length)
{
    conn *c = req_conn(req);
    if (c->state != CONN_HANDLING)
        return -1;
    bool http11 = req->http_minor >= 1;
    /* 1xx, 204 and 304 have no body (RFC 9110 6.4.1): no framing header, no terminator. */
    bool bodiless = status < 200 || status == 204 || status == 304;
    c->head_only = req->method == HTTP_HEAD || bodiless;
    /* An answer from the head hook leaves the body unread: the connection cannot be reused. */
    c->keep_alive_resp = req->keep_alive && !c->srv->stopping && !c->at_head && !c->discarding &&
                         (content_length >= 0 || http11 || c->head_only);
    c->chunked = content_length < 0 && http11 && !bodiless;
    c->resp_left = content_length;
    char line[160];
    int n = snprintf(line, sizeof(line), "HTTP/1.%d %d %s\r\n", http11 ? 1 : 0, status, sb_http_status_text(status));
    char framing[128];
    int m;
    if (bodiless)
        m = snprintf(framing, sizeof(framing), "%s\r\n", c->keep_alive_resp ? "" : "Connection: close\r\n");
    else if (content_length >= 0)
        m = snprintf(framing, sizeof(framing), "Content-Length: %lld\r\n%s\r\n", (long long)content_length,
                     c->keep_alive_resp ? (http11 ? "" : "Connection: keep-alive\r\n") : "Connection: close\r\n");
    else
        m = snprintf(framing, sizeof(framing), "%s%s\r\n", c->chunked ? "Transfer-Encoding: chunked\r\n" : "",
                     c->keep_alive_resp ? "" : "Connection: close\r\n");
    uv_buf_t bufs[3] = {uv_buf_init(line, (unsigned)n), uv_buf_init((char *)headers, (unsigned)headers_len),
                        uv_buf_init(framing, (unsigned)m)};
    if (conn_append(c, bufs, 3) < 0) {
        conn_close(c);
        return -1;
    }
    c->state = CONN_STREAMING;
    return 0;
}

int sb_http_stream_write(sb_http_req *req, const char *data, size_t len)
{
    conn *c = req_conn(req);
    if (c->state != CONN_STREAMING)
        return -1;
    if (len == 0 || c->head_only)
        return 0;
    int rc;
    if (c->chunked) {
        char hdr[24];
        int n = snprintf(hdr, sizeof(hdr), "%zx\r\n", len);
        uv_buf_t bufs[3] = {uv_buf_init(hdr, (unsigned)n), uv_buf_init((char *)data, (unsigned)len),
                            uv_buf_init("\r\n", 2)};
        rc = conn_append(c, bufs, 3);
    } else {
        uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
        rc = conn_append(c, &b, 1);
    }
    /* Large bodies go out as they come rather than piling up until the iteration ends. */
    if (rc == 0 && c->out.len >= 65536)
        rc = conn_flush(c);
    if (rc < 0) {
        conn_close(c);
        return -1;
    }
    if (c->queued + c->out.len > c->srv->opts.write_high_water) {
        if (!c->wants_drain)
            arm_timer(c, c->srv->opts.idle_ms); /* a client stalled this long is closed */
        c->wants_drain = true;
        return 1;
    }
    return 0;
}

int sb_http_stream_end(sb_http_req *req)
{
    conn *c = req_conn(req);
    if (c->state != CONN_STREAMING)
        return -1;
    uv_buf_t t = uv_buf_init("0\r\n\r\n", 5);
    if (c->chunked && !c->head_only && conn_append(c, &t, 1) < 0) {
        conn_close(c);
        return -1;
    }
    finish_response(c);
    return 0;
}

void sb_http_stream_abort(sb_http_req *req)
{
    conn *c = req_conn(req);
    if (c->state != CONN_STREAMING && c->state != CONN_HANDLING)
        return;
    c->req.on_abort = NULL;
    c->req.on_drain = NULL;
    /* Let queued bytes (e.g. a final SSE error event) go out, then close without a
     * terminating chunk, so the client sees the transfer as aborted. */
    c->keep_alive_resp = false;
    c->close_after = true;
    c->state = CONN_IDLE;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (conn_flush(c) < 0 || c->queued == 0)
        conn_close(c);
    else
        arm_timer(c, c->srv->opts.idle_ms); /* a client that never reads is closed */
}

int sb_http_respond(sb_http_req *req, int status, const char *content_type, const char *headers,
                    const char *body, size_t body_len)
{
    conn *c = req_conn(req);
    if (c->state != CONN_HANDLING)
        return -1;
    char ct[160];
    int n = snprintf(ct, sizeof(ct), "Content-Type: %s\r\n", content_type ? content_type : "application/json");
    sb_buf h = {0};
    if (sb_buf_append(&h, ct, (size_t)n) < 0 || (headers && sb_buf_puts(&h, headers) < 0)) {
        sb_buf_free(&h);
        conn_close(c);
        return -1;
    }
    int rc = sb_http_stream_begin(req, status, h.data, h.len, (int64_t)body_len);
    sb_buf_free(&h);
    if (rc < 0)
        return -1;
    uv_buf_t b = uv_buf_init((char *)body, (unsigned)body_len);
    /* A HEAD answer keeps the Content-Length of the GET answer, without the body. */
    if (body_len && !c->head_only && conn_append(c, &b, 1) < 0) {
        conn_close(c);
        return -1;
    }
    finish_response(c);
    return 0;
}
