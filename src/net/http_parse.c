/* http_parse: reading client bytes and framing requests (see http_server_internal.h). */
#include "net/guard.h"
#include "net/http_server_internal.h"
#include "net/iobatch.h"

#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/h1.h"

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
    size_t avail = hs_body_avail(s); /* 0 when a reload lowered the budget below what is held */
    if (cap - c->body.cap > avail) {
        /* The exact need before refusing: the doubling is a convenience, not a claim. */
        cap = c->body.len + extra + 1;
        if (cap - c->body.cap > avail)
            return 503;
    }
    size_t more = cap - c->body.cap;
    if (buf_set_cap(&c->body, cap) < 0)
        return 500;
    hs_body_charge(s, more);
    return 0;
}

/* Frees the body and gives its capacity back to the budget. */
void hs_body_release(conn *c)
{
    hs_body_refund(c->srv, c->body.cap);
    sb_buf_free(&c->body);
}

/* ---- parsing callbacks ---- */

/* A request begins (either parser). */
static void begin_request(conn *c)
{
    hs_reset_request(c);
    c->state = CONN_READING;
    c->req.start_ns = uv_hrtime();
    /* header_ms is armed when process() returns with this request unfinished (arm_head_timer),
     * not here: a pipelined request whose bytes are all here needs no deadline, and a long run
     * of them in one loop turn would otherwise arm it against the loop's cached time, long
     * past, and time out a request whose bytes arrived seconds ago. */
}

static int on_message_begin(http_parser *p)
{
    begin_request(p->data);
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
static void fill_req(conn *c)
{
    sb_http_req *r = &c->req;
    for (size_t i = 0; i < c->n_headers; i++) {
        hdr_off *h = &c->hoffs[i];
        c->headers[i] =
            (sb_http_header){c->head.data + h->name_off, h->name_len, c->head.data + h->value_off, h->value_len};
    }
    r->method = c->method;
    r->url = c->head.data ? c->head.data + c->url_off : "";
    r->url_len = c->url_len;
    r->path = r->url;
    const char *q = memchr(r->url, '?', r->url_len);
    r->path_len = q ? (size_t)(q - r->url) : r->url_len;
    r->headers = c->headers;
    r->n_headers = c->n_headers;
    r->body = "";
    r->body_len = 0;
    r->http_minor = c->http_minor;
    r->keep_alive = c->keep_alive_req;
    r->has_body = c->body_follows;
}

/* Runs the head hook. Returns true to read the body; false when the hook answered (the
 * connection lingers) or refused to (the connection is closed): parsing stops either way. */
static bool run_head_hook(conn *c)
{
    sb_http_server *s = c->srv;
    fill_req(c);
    c->state = CONN_HANDLING; /* what sb_http_respond expects */
    c->at_head = true;
    sb_guard_enter();
    bool go_on = s->on_head(&c->req, s->ctx);
    sb_guard_leave();
    c->at_head = false;
    if (c->state == CONN_HANDLING && go_on) {
        c->state = CONN_READING;
        return true;
    }
    /* Unanswered, a stream begun and left open (the contract asks for sb_http_respond) or
     * aborted: no complete answer can follow, so close. */
    if (c->state != CONN_LINGERING && c->state != CONN_CLOSING)
        hs_conn_close(c);
    return false;
}

/* The head is read (either parser): checks its framing, runs the head hook for a request with
 * a body (or Expect), bounds the body. 0 to read on, else stop (error_status says why, or the
 * hook answered). */
static int headers_done(conn *c, bool chunked, uint64_t cl)
{
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
        return -1;
    }
    if (c->saw_te && !chunked) {
        c->error_status = 400;
        return -1;
    }
    /* Before the size check, 100 Continue and any body byte: a request the hook refuses
     * costs its head only, and its sender learns nothing of the limits. */
    c->body_follows = chunked || (c->saw_cl && cl > 0);
    if (c->srv->on_head && (c->body_follows || c->expect_continue) && !run_head_hook(c))
        return -1; /* stops the parser; process() sees the connection lingering or closing */
    if (c->saw_cl && cl > c->srv->opts.max_body_bytes) {
        c->error_status = 413;
        return -1;
    }
    /* Nothing is reserved for the declared length: a promise costs nothing until bytes
     * come (body_grow). The length only caps the growth, so the last doubling fits; a
     * chunked body is capped by max_body_bytes (on_body refuses more), else its last
     * doubling would hold and charge up to twice that. */
    c->body_cap_max = c->saw_cl ? (size_t)cl + 1 : c->srv->opts.max_body_bytes + 1;
    if (c->expect_continue && c->http_minor >= 1) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        hs_conn_write(c, cont, sizeof(cont) - 1);
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    c->method = p->method;
    c->http_minor = p->http_minor;
    c->keep_alive_req = http_should_keep_alive(p) != 0;
    /* Any value but 0/1/2 makes http_parser fail the message. */
    return headers_done(c, (p->flags & F_CHUNKED) != 0, p->content_length) ? 3 : 0;
}

/* Body bytes (either parser): 0, or the status to refuse with. */
static int body_add(conn *c, const char *at, size_t len)
{
    if (c->body.len + len > c->srv->opts.max_body_bytes)
        return 413;
    int rc = body_grow(c, len);
    if (rc)
        return rc;
    sb_buf_append(&c->body, at, len); /* cannot fail: the room is there */
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    c->error_status = body_add(c, at, len);
    return c->error_status ? -1 : 0;
}

/* The request is whole (either parser): the handler's view of it, parsing stops. */
static void complete_request(conn *c)
{
    sb_http_req *r = &c->req;
    fill_req(c);
    r->body = c->body.data ? c->body.data : "";
    r->body_len = c->body.len;
    c->state = CONN_HANDLING;
    c->fast_left = -1;
    hs_arm_timer(c, 0);
}

static int on_message_complete(http_parser *p)
{
    complete_request(p->data);
    /* Stop parsing here: pipelined bytes wait in `pending` until this response is done. */
    http_parser_pause(p, 1);
    return 0;
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

/* The request being read waits for more bytes: its header_ms deadline starts now, once per
 * request (a head dribbled over many reads does not push it back), against a fresh clock
 * (the loop's cached time lags by whatever this loop turn has spent, thousands of pipelined
 * requests under a sanitizer took seconds). */
static void process_input(conn *c, const char *data, size_t len);

static void arm_head_timer(conn *c)
{
    if (c->state != CONN_READING || c->request_timed)
        return;
    c->request_timed = true;
    uv_update_time(c->tcp.loop);
    hs_arm_timer(c, c->srv->opts.header_ms);
}

/* Runs the parser over data; dispatches a completed request to the handler. */
static void process(conn *c, const char *data, size_t len)
{
    process_input(c, data, len);
    arm_head_timer(c);
}

/* A complete request goes to the handler; bytes after it wait in `pending` until its response
 * is done. */
static void dispatch(conn *c, const char *rest, size_t rest_len)
{
    if (rest_len && buf_append_capped(&c->pending, rest, rest_len, PENDING_CAP) < 0) {
        hs_conn_close(c);
        return;
    }
    sb_http_server *s = c->srv;
    sb_guard_enter();
    s->handler(&c->req, s->ctx);
    sb_guard_leave();
}

/* The request cannot be read: answered with `status` (or http-parser's error `err`). */
static void refuse(conn *c, int status, enum http_errno err)
{
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
        hs_fail_request(c, status, code, msg, hdrs);
    else
        hs_conn_close(c);
}

/* Body bytes of a request whose head the fast path read: up to what is due; the request
 * completes with its last byte. */
static void fast_body(conn *c, const char *data, size_t len)
{
    size_t take = (uint64_t)c->fast_left < len ? (size_t)c->fast_left : len;
    if (take) {
        int status = body_add(c, data, take);
        if (status) {
            refuse(c, status, HPE_CB_body);
            return;
        }
        c->fast_left -= (int64_t)take;
    }
    if (c->fast_left == 0) {
        complete_request(c);
        dispatch(c, data + take, len - take);
    }
}

/* A new request whose whole head is in data and plainly well formed (proto/h1.h): read here,
 * a few instructions a byte, rather than by http-parser. Returns false when http-parser is to
 * read it (anything unusual, or a head still arriving), having changed nothing it would not
 * set again itself. The head is bounded by http-parser's own limit too (HTTP_MAX_HEADER_SIZE),
 * so that no head the fast path takes is one http-parser would refuse. */
static bool fast_request(conn *c, const char *data, size_t len)
{
    sb_http_server *s = c->srv;
    sb_h1_field f[MAX_HEADERS];
    sb_h1_head h;
    size_t max_head = s->opts.max_header_bytes < HTTP_MAX_HEADER_SIZE ? s->opts.max_header_bytes : HTTP_MAX_HEADER_SIZE;
    if (sb_h1_request(data, len, max_head, f, MAX_HEADERS, &h) != SB_H1_OK)
        return false;
    begin_request(c);
    /* http-parser counts every byte it reads before a body in nread, the CR/LF it skips between
     * messages too, and zeroes it only at a head it completes itself: when the heads are read
     * here, its count of those blank lines would grow over the connection's life until it
     * refused a request for a head too large (431 after ~40,000 requests each followed by a
     * CRLF, as some clients send after a body). Between messages it holds nothing else. */
    c->parser.nread = 0;
    if (buf_append_capped(&c->head, data, h.head_len, s->opts.max_header_bytes + 1) < 0) {
        c->state = CONN_IDLE;
        return false; /* http-parser meets the same shortage and answers it */
    }
    for (size_t i = 0; i < h.n_fields; i++)
        c->hoffs[i] = (hdr_off){f[i].name_off, f[i].name_len, f[i].value_off, f[i].value_len};
    c->n_headers = h.n_fields;
    c->url_off = h.target_off;
    c->url_len = h.target_len;
    c->method = h.method;
    c->http_minor = (unsigned short)h.http_minor;
    c->keep_alive_req = h.keep_alive;
    uint64_t cl = h.content_length < 0 ? 0 : (uint64_t)h.content_length;
    if (headers_done(c, false, cl)) {
        if (c->state != CONN_LINGERING && c->state != CONN_CLOSING)
            refuse(c, c->error_status ? c->error_status : 400, HPE_CB_headers_complete);
        return true;
    }
    c->fast_left = (int64_t)cl;
    fast_body(c, data + h.head_len, len - h.head_len);
    return true;
}

static void process_input(conn *c, const char *data, size_t len)
{
    if (c->fast_left >= 0 && c->state == CONN_READING) {
        fast_body(c, data, len);
        return;
    }
    if (c->state == CONN_IDLE && fast_request(c, data, len))
        return;
    size_t n = http_parser_execute(&c->parser, &parser_settings, data, len);
    enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
    if (err == HPE_PAUSED) {
        dispatch(c, data + n, len - n);
        return;
    }
    if (c->state == CONN_LINGERING || c->state == CONN_CLOSING)
        return; /* the head hook answered (or closed): the rest of the input is discarded */
    if (err != HPE_OK) {
        /* http-parser's own head bound (HTTP_MAX_HEADER_SIZE, 80 KiB) is a 431 too. */
        refuse(c, c->error_status ? c->error_status : err == HPE_HEADER_OVERFLOW ? 431 : 400, err);
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

static void plain_input(conn *c, const char *base, size_t nread);
static int on_plain(void *arg, const char *p, size_t n);

/* TLS's handshake is complete: ALPN "h2" makes the connection HTTP/2. 0, or -1 to close. */
static int on_tls_ready(void *arg, const sb_tls *t)
{
    conn *c = arg;
    size_t len;
    const char *p = sb_tls_alpn_selected(t, &len);
    if (p && len == 2 && !memcmp(p, "h2", 2)) {
        c->sniffed = true;
        return hs_h2_start(c);
    }
    if (p) /* http/1.1 agreed: no preface to look for */
        c->sniffed = true;
    return 0;
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
            hs_conn_read_stop(c);
        } else if (nread < 0 || (c->linger_seen += (size_t)nread) > c->linger_bytes) {
            hs_conn_close(c);
        }
        return;
    }
    if (nread < 0) {
        /* EOF or error: the client is gone. A half-read request is dropped; an in-flight one
         * is aborted, which closes its upstream so the model server stops generating. */
        hs_conn_close(c);
        return;
    }
    if (c->tls.ssl) {
        bool was_ready = c->tls.ready;
        int rc = sb_tls_feed(&c->tls, buf->base, (size_t)nread, c->srv->tls_buf, sizeof(c->srv->tls_buf), on_tls_ready,
                             on_plain, c);
        if (!was_ready && c->tls.ready)
            c->srv->tls_handshakes++;
        if (rc < 0) {
            /* A failed handshake, a TLS error or the client's close_notify: nothing more can
             * be read. An answer in progress is lost with the connection, as on a reset. */
            if (!c->tls.ready)
                c->srv->tls_failures++;
            hs_conn_close(c);
            return;
        }
        if (c->state != CONN_CLOSING && sb_tls_pending(&c->tls))
            hs_mark_dirty(c); /* handshake records, or alerts */
        return;
    }
    plain_input(c, buf->base, (size_t)nread);
}

/* Plaintext from TLS. 0 to go on, 1 once the connection no longer reads. */
static int on_plain(void *arg, const char *p, size_t n)
{
    conn *c = arg;
    plain_input(c, p, n);
    return c->state == CONN_CLOSING || c->state == CONN_LINGERING;
}

/* The connection's first bytes: the HTTP/2 client preface (h2c with prior knowledge) or
 * HTTP/1.1. Bytes that may still be the preface are held (at most its 24); a mismatch replays
 * them to HTTP/1.1. Returns true when the bytes were taken here. */
static bool sniff(conn *c, const char *base, size_t nread)
{
    if (c->srv->opts.h2_off || c->state != CONN_IDLE) {
        c->sniffed = true;
        return false;
    }
    size_t want = H2_PREFACE_LEN - c->preface_seen;
    size_t k = nread < want ? nread : want;
    if (memcmp(base, &H2_PREFACE[c->preface_seen], k) != 0) {
        c->sniffed = true;
        if (c->preface_seen) {
            uint8_t held = c->preface_seen;
            c->preface_seen = 0;
            plain_input(c, c->preface_buf, held);
            return c->state == CONN_CLOSING || c->state == CONN_LINGERING; /* the rest is not wanted */
        }
        return false;
    }
    memcpy(c->preface_buf + c->preface_seen, base, k);
    c->preface_seen = (uint8_t)(c->preface_seen + k);
    if (c->preface_seen < H2_PREFACE_LEN)
        return true;
    c->sniffed = true;
    if (hs_h2_start(c) < 0) {
        hs_conn_close(c);
        return true;
    }
    hs_h2_input(c, c->preface_buf, H2_PREFACE_LEN);
    if (c->state == CONN_H2 && nread > k)
        hs_h2_input(c, base + k, nread - k);
    return true;
}

/* Bytes of the request stream (read, or decrypted). */
static void plain_input(conn *c, const char *base, size_t nread)
{
    if (c->state == CONN_H2) {
        hs_h2_input(c, base, nread);
        return;
    }
    if (!c->sniffed && sniff(c, base, nread))
        return;
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
        if (!c->discarding && c->pending.len + nread <= MAX_PENDING_BYTES) {
            if (buf_append_capped(&c->pending, base, nread, PENDING_CAP) < 0)
                hs_conn_close(c);
            return;
        }
        if (!c->discarding) {
            c->discarding = true;
            sb_buf_free(&c->pending);
        }
        if ((c->discarded += nread) > c->srv->opts.linger_bytes)
            hs_conn_close(c);
        return;
    }
    if (c->state == CONN_IDLE && (c->write_paused || c->pending.len)) {
        /* Over TLS one read decrypts into several pieces, and the loop goes on after an answer
         * paused the connection (the client does not read) or left pipelined bytes waiting:
         * what follows queues behind them, in order, never parsed ahead. Plain reads stop at
         * the pause, so this is TLS's: at most the rest of one read (PENDING_CAP). */
        if (buf_append_capped(&c->pending, base, nread, PENDING_CAP) < 0) {
            hs_conn_close(c);
            return;
        }
        if (!c->write_paused && !c->processing)
            hs_run_pending(c);
        return;
    }
    c->processing = true;
    process(c, base, nread);
    c->processing = false;
    if (c->resume && c->state == CONN_IDLE && c->pending.len)
        hs_run_pending(c);
}

void hs_conn_read_start(conn *c)
{
    if (!c->reading && c->state != CONN_CLOSING) {
        int rc = c->reads_batched ? sb_iob_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)
                                  : uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc == 0)
            c->reading = true;
    }
}

void hs_conn_read_stop(conn *c)
{
    if (c->reading) {
        sb_iob_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

void hs_conn_read_batched(conn *c)
{
    if (c->reads_batched)
        return;
    c->reads_batched = true;
    if (c->reading) { /* libuv holds no bytes between reads: the switch loses none */
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
        hs_conn_read_start(c);
    }
}

/* Parses pipelined bytes that arrived while a response was in progress, request after
 * request, as long as each is answered at once. */
void hs_run_pending(conn *c)
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
