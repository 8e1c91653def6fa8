/* http_respond: writing answers (see http_server_internal.h). */
#include "net/guard.h"
#include "net/iobatch.h"
#include "net/http_server_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"

const char *sb_http_status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 304: return "Not Modified";
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
    if (r == &c->batched) {
        if (!c->out.data && r->cap <= OUT_KEEP_BYTES) /* the next answer reuses it */
            c->out = (sb_buf){.data = r->data, .cap = r->cap};
        else
            sb_free(r->data);
        r->data = NULL;
    } else {
        sb_free(r->data);
        sb_free(r);
    }
    if (status < 0 && c->state != CONN_CLOSING) {
        hs_conn_close(c);
        return;
    }
    if (c->state == CONN_CLOSING)
        return;
    if (c->state == CONN_LINGERING) {
        hs_linger_drained(c);
        return;
    }
    if (c->state == CONN_H2) {
        hs_h2_written(c);
        return;
    }
    if (c->queued == 0 && c->close_after && c->state == CONN_IDLE) {
        hs_conn_close(c);
        return;
    }
    if (c->write_paused && c->state == CONN_IDLE) {
        hs_arm_timer(c, c->srv->opts.idle_ms); /* it reads: not idle */
        if (c->queued + c->out.len < c->srv->opts.write_high_water / 2) {
            c->write_paused = false;
            hs_conn_read_start(c);
            if (c->pending.len)
                hs_run_pending(c);
        }
        return;
    }
    if (c->wants_drain && c->queued < c->srv->opts.write_high_water / 2 && c->state == CONN_STREAMING) {
        c->wants_drain = false;
        hs_arm_timer(c, 0); /* the client reads again: no stall */
        sb_guard_enter();
        if (c->req.on_drain)
            c->req.on_drain(&c->req);
        sb_guard_leave();
    }
}

void hs_undirty(conn *c)
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

/* Hands the out buffer to libuv (the buffer itself: no copy). Over TLS, what leaves is the
 * ciphertext of the out buffer, after any handshake records waiting. */
static int flush_out(conn *c);

/* Workers: the flush leaves the lock (net/guard.h sb_guard_io_begin): HTTP/2 framing, TLS
 * encryption and the write work on the connection alone; a callback they reach (a stream's end)
 * takes the lock itself. */
int hs_conn_flush(conn *c)
{
    int held = sb_guard_io_begin();
    int rc = flush_out(c);
    sb_guard_io_end(held);
    return rc;
}

static int flush_out(conn *c)
{
    hs_undirty(c);
    if (c->h2 && hs_h2_pull(c) < 0) /* HTTP/2: nghttp2's frames, up to write_high_water */
        return -1;
    if (c->out.len == 0 && !(c->tls.ssl && sb_tls_pending(&c->tls)))
        return 0;
    sb_buf cipher = {0};
    if (c->tls.ssl) {
        if (sb_tls_write(&c->tls, c->out.data, c->out.len) < 0 || sb_tls_take(&c->tls, &cipher) < 0) {
            sb_buf_free(&cipher);
            return -1;
        }
        c->out.len = 0; /* kept: the next answer reuses its capacity */
        if (!cipher.len)
            return 0;
    }
    size_t sent = 0;
    if (!c->tls.ssl && !c->h2 && c->queued == 0 && !c->wants_drain) {
        /* Plain and nothing in flight: write what the socket takes now. An answer of a few
         * KiB leaves here whole: the out buffer keeps its capacity for the next one, and no
         * write request, callback or epoll_ctl (libuv's queue draining) is spent on it.
         * Callers see a write that completed at once as queued == 0, as they do for an empty
         * flush (docs/benchmarks.md, proxy overhead: two syscalls fewer per request). An
         * error (the client reset) is left to the uv_write below, which reports it from the
         * loop through on_write as before: a handler writing from its own callbacks is never
         * aborted under its feet. A handler waiting for the drain (it wrote past the high-
         * water mark) hears of it from on_write: that write goes through uv_write whole. Not
         * for HTTP/2: its on_write (hs_h2_written) pulls nghttp2's next frames, wakes the
         * streams waiting for room and closes after a final GOAWAY. */
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
        if (sb_iob_active((uv_stream_t *)&c->tcp)) {
            /* The loop batches its writes: this one leaves with the turn's others, in one
             * system call (net/iobatch.h); the callback (on_write) comes once it has. */
            wreq *r = &c->batched;
            r->c = c;
            r->cap = c->out.cap;
            r->data = sb_buf_steal(&c->out, &r->len);
            if (sb_iob_write(&r->w, (uv_stream_t *)&c->tcp, &b, 1, on_write) == 0) {
                c->queued += r->len;
                return 0;
            }
            c->out = (sb_buf){.data = r->data, .len = r->len, .cap = r->cap};
            r->data = NULL;
        }
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        sent = n > 0 ? (size_t)n : 0;
        if (sent == c->out.len) {
            /* Kept for the next answer when small; a big one (a 64 KiB stream flush, /metrics)
             * is not held for the connection's idle life (thousands of idle keep-alive
             * connections would hold ~100 KiB each). */
            if (c->out.cap > OUT_KEEP_BYTES)
                sb_buf_free(&c->out);
            else
                c->out.len = 0;
            return 0;
        }
    }
    wreq *r = sb_malloc(sizeof(wreq));
    if (!r) {
        sb_buf_free(&cipher);
        return -1;
    }
    r->c = c;
    r->data = c->tls.ssl ? sb_buf_steal(&cipher, &r->len) : sb_buf_steal(&c->out, &r->len);
    r->len -= sent;
    uv_buf_t b = uv_buf_init(r->data + sent, (unsigned)r->len);
    if (c->batched.data) /* behind the batched answer, in order */
        sb_iob_release((uv_stream_t *)&c->tcp);
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
        if (hs_conn_flush(c) < 0)
            hs_conn_close(c);
    }
    uv_check_stop(&s->flusher);
    uv_idle_stop(&s->kick);
}

/* Its being active is what counts (the poll does not block); nothing to do when it runs. */
static void on_kick(uv_idle_t *h)
{
    (void)h;
}

/* Flushed at the end of this loop iteration (TLS handshake records, or the out buffer). */
void hs_mark_dirty(conn *c)
{
    if (!c->dirty) {
        c->dirty = true;
        c->dirty_prev = NULL;
        c->dirty_next = c->srv->dirty;
        if (c->srv->dirty)
            c->srv->dirty->dirty_prev = c;
        c->srv->dirty = c;
        uv_check_start(&c->srv->flusher, on_check);
        uv_idle_start(&c->srv->kick, on_kick);
    }
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
    hs_mark_dirty(c);
    return 0;
}

/* Appends and flushes now (for writes followed by a close decision). */
static int conn_writev(conn *c, const uv_buf_t *bufs, int n)
{
    if (conn_append(c, bufs, n) < 0)
        return -1;
    return hs_conn_flush(c);
}

int hs_conn_write(conn *c, const char *data, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    return conn_writev(c, &b, 1);
}

/* The response is finished: go back to reading (keep-alive) or close. */
static void finish_response(conn *c)
{
    c->req.on_abort = NULL;
    c->req.on_drain = NULL;
    c->req.on_cut = NULL;
    hs_body_release(c); /* the request is over: its body leaves the budget */
    if (c->head.cap > HEAD_KEEP_BYTES)
        sb_buf_free(&c->head);
    if (hs_conn_flush(c) < 0) {
        hs_conn_close(c);
        return;
    }
    if (!c->keep_alive_resp || c->srv->stopping || c->srv->draining || c->discarding) {
        /* Bytes the client pipelined behind a Connection: close must not reset the answer.
         * The response may be long and the client slow: idle_ms to drain it, as on a stream. */
        hs_conn_linger(c, c->srv->opts.idle_ms);
        return;
    }
    c->state = CONN_IDLE;
    hs_arm_timer(c, c->srv->opts.idle_ms);
    http_parser_pause(&c->parser, 0);
    hs_conn_read_batched(c); /* kept alive after an answer */
    if (c->queued + c->out.len > c->srv->opts.write_high_water) {
        /* A client pipelining requests without reading the answers would have them pile up
         * here without bound (a 30-byte request can fetch kilobytes): stop reading and
         * parsing until it reads below the low watermark (on_write); idle_ms closes it if
         * it never does. */
        c->write_paused = true;
        hs_conn_read_stop(c);
        return;
    }
    hs_conn_read_start(c);
    if (c->pending.len) {
        /* Pipelined requests: parsed by the outermost process() on the stack, in a loop, never
         * by recursion (thousands of pipelined requests answered at once would otherwise grow
         * the stack without bound). */
        if (c->processing)
            c->resume = true;
        else
            hs_run_pending(c);
    }
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

/* Copies a string literal or a short bounded string into a header piece; returns its length. */
static size_t put_bounded(char *out, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    memcpy(out, s, n);
    return n;
}

static size_t put(char *out, const char *s)
{
    return put_bounded(out, s, 64);
}

static conn *req_conn(sb_http_req *req) { return (conn *)((char *)req - offsetof(conn, req)); }

int sb_http_stream_begin(sb_http_req *req, int status, const char *headers, size_t headers_len,
                         int64_t content_length)
{
    if (req->ops) /* a request from elsewhere: its ops stream, or it is answered whole */
        return req->ops->stream_begin ? req->ops->stream_begin(req, status, headers, headers_len, content_length) : -1;
    conn *c = req_conn(req);
    if (c->state != CONN_HANDLING)
        return -1;
    bool http11 = req->http_minor >= 1;
    /* 1xx, 204 and 304 have no body (RFC 9110 6.4.1): no framing header, no terminator. */
    bool bodiless = status < 200 || status == 204 || status == 304;
    c->head_only = req->method == HTTP_HEAD || bodiless;
    /* An answer from the head hook leaves the body unread: the connection cannot be reused. */
    c->keep_alive_resp = req->keep_alive && !c->srv->stopping && !c->srv->draining && !c->at_head && !c->discarding &&
                         (content_length >= 0 || http11 || c->head_only);
    c->chunked = content_length < 0 && http11 && !bodiless;
    c->resp_left = content_length;
    /* Pieces appended, not printf'd: three snprintf calls were ~3,000 instructions of every
     * answer (docs/benchmarks.md, proxy overhead). */
    char line[160];
    size_t n = put(line, http11 ? "HTTP/1.1 " : "HTTP/1.0 ");
    n += sb_fmt_u64(line + n, (uint64_t)(status < 0 ? 0 : status) % 1000);
    line[n++] = ' ';
    n += put_bounded(line + n, sb_http_status_text(status), sizeof(line) - n - 2);
    n += put(line + n, "\r\n");
    char framing[128];
    size_t m = 0;
    const char *conn_hdr = c->keep_alive_resp ? "" : "Connection: close\r\n";
    if (!bodiless && content_length >= 0) {
        m = put(framing, "Content-Length: ");
        m += sb_fmt_u64(framing + m, (uint64_t)content_length);
        m += put(framing + m, "\r\n");
        if (c->keep_alive_resp && !http11)
            conn_hdr = "Connection: keep-alive\r\n";
    } else if (!bodiless && c->chunked) {
        m = put(framing, "Transfer-Encoding: chunked\r\n");
    }
    m += put(framing + m, conn_hdr);
    m += put(framing + m, "\r\n");
    char rid[SB_HTTP_REQ_ID_MAX + 24];
    size_t k = 0;
    if (req->id[0]) {
        k = put(rid, "x-request-id: ");
        k += put_bounded(rid + k, req->id, SB_HTTP_REQ_ID_MAX);
        k += put(rid + k, "\r\n");
    }
    uv_buf_t bufs[4] = {uv_buf_init(line, (unsigned)n), uv_buf_init((char *)headers, (unsigned)headers_len),
                        uv_buf_init(rid, (unsigned)k), uv_buf_init(framing, (unsigned)m)};
    if (conn_append(c, bufs, 4) < 0) {
        hs_conn_close(c);
        return -1;
    }
    c->state = CONN_STREAMING;
    return 0;
}

int sb_http_stream_write(sb_http_req *req, const char *data, size_t len)
{
    if (req->ops)
        return req->ops->stream_write ? req->ops->stream_write(req, data, len) : -1;
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
        rc = hs_conn_flush(c);
    if (rc < 0) {
        hs_conn_close(c);
        return -1;
    }
    if (c->queued + c->out.len > c->srv->opts.write_high_water) {
        if (!c->wants_drain)
            hs_arm_timer(c, c->srv->opts.idle_ms); /* a client stalled this long is closed */
        c->wants_drain = true;
        return 1;
    }
    return 0;
}

int sb_http_stream_end(sb_http_req *req)
{
    if (req->ops)
        return req->ops->stream_end ? req->ops->stream_end(req) : -1;
    conn *c = req_conn(req);
    if (c->state != CONN_STREAMING)
        return -1;
    uv_buf_t t = uv_buf_init("0\r\n\r\n", 5);
    if (c->chunked && !c->head_only && conn_append(c, &t, 1) < 0) {
        hs_conn_close(c);
        return -1;
    }
    finish_response(c);
    return 0;
}

void sb_http_stream_abort(sb_http_req *req)
{
    if (req->ops) {
        req->ops->abort(req);
        return;
    }
    conn *c = req_conn(req);
    if (c->state != CONN_STREAMING && c->state != CONN_HANDLING)
        return;
    c->req.on_abort = NULL;
    c->req.on_drain = NULL;
    c->req.on_cut = NULL;
    /* Let queued bytes (e.g. a final SSE error event) go out, then close without a
     * terminating chunk, so the client sees the transfer as aborted. */
    c->keep_alive_resp = false;
    c->close_after = true;
    c->state = CONN_IDLE;
    hs_conn_read_stop(c);
    if (hs_conn_flush(c) < 0 || c->queued == 0)
        hs_conn_close(c);
    else
        hs_arm_timer(c, c->srv->opts.idle_ms); /* a client that never reads is closed */
}

int sb_http_respond(sb_http_req *req, int status, const char *content_type, const char *headers,
                    const char *body, size_t body_len)
{
    if (req->ops)
        return req->ops->respond(req, status, content_type, headers, body, body_len);
    conn *c = req_conn(req);
    if (c->state != CONN_HANDLING)
        return -1;
    char ct[160];
    int n = snprintf(ct, sizeof(ct), "Content-Type: %s\r\n", content_type ? content_type : "application/json");
    if (n < 0 || (size_t)n >= sizeof(ct)) { /* a longer type than any the gateway sends: cut, still a line */
        n = (int)sizeof(ct) - 1;
        ct[n - 2] = '\r', ct[n - 1] = '\n';
    }
    sb_buf h = {0};
    if (sb_buf_append(&h, ct, (size_t)n) < 0 || (headers && sb_buf_puts(&h, headers) < 0)) {
        sb_buf_free(&h);
        hs_conn_close(c);
        return -1;
    }
    int rc = sb_http_stream_begin(req, status, h.data, h.len, (int64_t)body_len);
    sb_buf_free(&h);
    if (rc < 0)
        return -1;
    uv_buf_t b = uv_buf_init((char *)body, (unsigned)body_len);
    /* A HEAD answer keeps the Content-Length of the GET answer, without the body. */
    if (body_len && !c->head_only && conn_append(c, &b, 1) < 0) {
        hs_conn_close(c);
        return -1;
    }
    finish_response(c);
    return 0;
}
