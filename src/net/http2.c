/* http2: HTTP/2 as a mode of the HTTP server's connection (see http_server.h and
 * http_server_internal.h).
 *
 * nghttp2 does the framing, HPACK, flow control and the protocol's checks (pseudo-headers,
 * connection-specific headers, Content-Length against DATA). This file maps each stream to an
 * sb_http_req for the same head hook and handler as HTTP/1.1, and the handler's answers back
 * (sb_http_req.ops). Its bytes share the connection's out buffer and the server's end-of-
 * iteration flush (hs_mark_dirty): nghttp2's output is pulled into it there, so a stream's
 * write leaves in the loop turn that made it, and the writes of one turn leave together.
 *
 * Bounds:
 * - Streams: h2_max_streams at once (SETTINGS_MAX_CONCURRENT_STREAMS; nghttp2 refuses a stream
 *   past the number the client has not yet acknowledged with REFUSED_STREAM, and treats one past
 *   the acknowledged number as the protocol error it is).
 * - A stream's head: h2_max_header_list_bytes (name + value + 32 per field, RFC 9113 6.5.2) and
 *   MAX_HEADERS fields, else 431 on that stream. Decoded heads are charged to the connection
 *   (h2_max_connection_header_bytes) and to the server's max_buffered_body_bytes while held; past
 *   either a new stream is refused (REFUSED_STREAM). Its body: max_body_bytes (413) and the
 *   server's max_buffered_body_bytes (503), the same budget as HTTP/1.1's.
 * - Output: nghttp2's frames are pulled after each read and at the flush, only while the
 *   connection's unsent bytes are under write_high_water; at it, with more to send, the
 *   connection stops reading until the client reads below half (as HTTP/1.1's write_paused).
 *   nghttp2's queue past a bound ends the session (ENHANCE_YOUR_CALM). A stream's answer not yet
 *   taken by nghttp2 (the client's window is shut) is held up to h2_stream_buffer_bytes, then
 *   stream_write returns 1 and on_drain follows. After idle_ms without a write completing while
 *   answers wait, the connection is closed.
 * - Floods: SETTINGS entries, queued ACKs (SETTINGS and PING), CONTINUATION frames and the rate
 *   of streams the client resets (CVE-2023-44487) are limited by nghttp2's options: past them it
 *   sends GOAWAY and the connection closes. The resets the server sends with an error code (a
 *   client making its streams invalid, CVE-2025-8671) take tokens from a bucket of the same
 *   figures: past it GOAWAY ENHANCE_YOUR_CALM; a stream nghttp2 resets is never handed on.
 * - Time: a stream whose head or body is not complete header_ms after its HEADERS is answered
 *   408; a connection without stream activity (HEADERS, DATA, a stream's close) for idle_ms
 *   gets GOAWAY and closes. */
#include "net/guard.h"
#include "net/http_server_internal.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/openai_error.h"

#define BODY_FIRST_BYTES_H2 4096
/* nghttp2's own defaults for the flood limits (lib/nghttp2_session.h), named here so that the
 * choice is visible: a SETTINGS frame of at most 32 entries, 1000 ACKs queued for a client that
 * does not read, 8 CONTINUATION frames per head. The reset limits are options (h2_reset_*). */
#define MAX_SETTINGS_ENTRIES 32
#define MAX_OUTBOUND_ACK 1000
#define MAX_CONTINUATIONS 8
/* Frames nghttp2 may hold queued (not DATA, which stays in the streams' buffers): the ACKs it
 * bounds itself, and per allowed stream a response HEADERS, a RST_STREAM and a WINDOW_UPDATE,
 * with room. Past it the client is making the server write faster than it reads (refused or
 * reset streams it keeps opening): GOAWAY ENHANCE_YOUR_CALM. */
#define OUTBOUND_FRAMES_PER_STREAM 4

enum st_state {
    ST_HEAD,      /* HEADERS arriving */
    ST_BODY,      /* DATA arriving (the head hook, if any, said go on) */
    ST_READY,     /* complete, queued for the handler */
    ST_HANDLING,  /* the handler owns it, no answer begun */
    ST_STREAMING, /* answer begun, not finished */
    ST_DONE,      /* answered (or refused): what is queued leaves, then nghttp2 closes it */
};

typedef struct h2_stream {
    sb_http_req req; /* first: the handler's pointer is the stream's */
    struct h2_conn *hc;
    struct h2_stream *prev, *next, *ready_next;
    int32_t id;
    enum st_state state;
    bool owned;       /* a handler or the head hook holds req: on_abort if the stream dies */
    bool closed;      /* nghttp2 closed the stream */
    bool remote_done; /* the client's END_STREAM arrived */
    bool ended;       /* the whole answer is in `out` */
    bool aborting;    /* reset once `out` has left */
    bool wants_drain;
    bool drain_due;
    bool discard;  /* answered before the body came: what still comes is dropped */
    bool at_head;  /* the head hook runs */
    bool doomed;   /* nghttp2 resets it (an invalid frame on it): never handed to the handler */
    bool refused;  /* over the connection's head budget: reset REFUSED_STREAM at the head's end */
    bool bodiless; /* a streamed answer without a body (HEAD): writes are dropped */
    int error;     /* a status to answer instead of handing on (431, 400, ...), 0: none */
    uint64_t begin_ms;
    sb_buf head; /* header names and values; offs indexes it */
    sb_buf offs; /* hdr_off[] */
    size_t list_bytes;
    size_t path_off, path_len, auth_off, auth_len;
    bool has_path, has_auth, has_host;
    int64_t content_length; /* declared, -1: none */
    sb_http_header *headers;
    sb_buf body; /* capacity charged to the server's body budget */
    sb_buf out;  /* the answer's body not yet taken by nghttp2, from out_off */
    size_t out_off;
} h2_stream;

typedef struct h2_conn {
    conn *c;
    nghttp2_session *ng;
    h2_stream *streams;
    h2_stream *ready, **ready_tail;
    size_t n_streams;
    bool goaway;       /* drain: GOAWAY sent; the connection closes when no stream is left */
    bool drain_due;    /* some stream's on_drain is due */
    bool read_paused;  /* reading stopped: the client does not read what is queued for it */
    bool calm;         /* past a flood limit: GOAWAY ENHANCE_YOUR_CALM is due, nothing more is served */
    bool idled;        /* the GOAWAY NO_ERROR due is idle_ms's (else a drain's) */
    size_t head_bytes; /* decoded heads held by the streams (h2_max_connection_header_bytes) */
    /* Token bucket of the resets the server sends with an error code (CVE-2025-8671): a client
     * that makes its streams invalid has them reset by nghttp2, outside the client-reset limit. */
    uint32_t rst_tokens;
    uint64_t rst_refill_ms;
    /* Stream activity (HEADERS, DATA, a stream's close): a connection without streams idles out
     * idle_ms after it, whatever cheap frames (PING, WINDOW_UPDATE) the client keeps sending. */
    uint64_t last_io_ms;
    /* Since when answers have been waiting for the client without a write completing (0: none
     * waiting): past idle_ms the client is taken as gone. */
    uint64_t waiting_since_ms;
} h2_conn;

static const sb_http_req_ops h2_ops;
static void arm(conn *c);

static h2_stream *stream_of(sb_http_req *req)
{
    return (h2_stream *)req;
}

static sb_http_server *srv_of(const h2_conn *hc)
{
    return hc->c->srv;
}

static size_t stream_high_water(const h2_conn *hc)
{
    size_t hw = srv_of(hc)->opts.write_high_water, sb = srv_of(hc)->opts.h2_stream_buffer_bytes;
    return hw < sb ? hw : sb;
}

/* Answers now wait on the client: starts the stall clock unless it runs already. */
static void note_waiting(h2_conn *hc)
{
    if (!hc->waiting_since_ms) {
        hc->waiting_since_ms = uv_now(hc->c->srv->loop);
        arm(hc->c);
    }
}

/* Whether some answer is still to reach the client: bytes handed to libuv or in the out buffer,
 * frames nghttp2 holds, or a stream's body not yet taken (its window shut). O(streams). */
static bool output_waiting(const h2_conn *hc)
{
    const conn *c = hc->c;
    if (c->queued || c->out.len || nghttp2_session_want_write(hc->ng))
        return true;
    for (const h2_stream *st = hc->streams; st; st = st->next)
        if ((st->state == ST_STREAMING || st->state == ST_DONE) && st->out.len > st->out_off)
            return true;
    return false;
}

/* ---- streams ---- */

static void body_release(h2_stream *st)
{
    hs_body_refund(srv_of(st->hc), st->body.cap);
    sb_buf_free(&st->body);
}

/* Gives the decoded head's charge back (connection and server budgets). */
static void head_release(h2_stream *st)
{
    st->hc->head_bytes -= st->list_bytes;
    hs_body_refund(srv_of(st->hc), st->list_bytes);
    st->list_bytes = 0;
}

static void stream_free(h2_stream *st)
{
    h2_conn *hc = st->hc;
    if (st->prev)
        st->prev->next = st->next;
    else
        hc->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    hc->n_streams--;
    head_release(st);
    body_release(st);
    sb_buf_free(&st->head);
    sb_buf_free(&st->offs);
    sb_buf_free(&st->out);
    sb_free(st->headers);
    sb_free(st);
}

/* The handler lets go of the request (answered, or told on_abort). */
static void disown(h2_stream *st)
{
    st->owned = false;
    st->req.on_abort = NULL;
    st->req.on_drain = NULL;
    st->req.on_cut = NULL;
    body_release(st); /* the request is over: its body leaves the budget */
}

/* Tells the handler its request is gone (a reset, the connection's end). */
static void abort_owner(h2_stream *st)
{
    if (!st->owned)
        return;
    sb_guard_enter(); /* on_abort is set and read under the lock (net/guard.h) */
    void (*cb)(sb_http_req *) = st->req.on_abort;
    disown(st);
    st->state = ST_DONE;
    if (cb)
        cb(&st->req);
    sb_guard_leave();
}

/* Appends to the stream's body within max_body_bytes, the declared length and the server's
 * body budget, growing as bytes arrive (as http_parse.c's body_grow). 0, 413, 503 or 500. */
static int body_add(h2_stream *st, const uint8_t *p, size_t n)
{
    sb_http_server *s = srv_of(st->hc);
    if (st->body.len + n > s->opts.max_body_bytes)
        return 413;
    size_t need = st->body.len + n + 1;
    if (need > st->body.cap) {
        size_t cap_max = st->content_length >= 0 ? (size_t)st->content_length + 1 : s->opts.max_body_bytes + 1;
        size_t cap = st->body.cap ? st->body.cap * 2 : BODY_FIRST_BYTES_H2;
        if (cap < need)
            cap = need;
        if (cap > cap_max && cap_max >= need)
            cap = cap_max;
        size_t avail = hs_body_avail(s);
        if (cap - st->body.cap > avail) {
            cap = need;
            if (cap - st->body.cap > avail)
                return 503;
        }
        char *d = sb_realloc(st->body.data, cap);
        if (!d)
            return 500;
        hs_body_charge(s, cap - st->body.cap);
        st->body.data = d;
        st->body.cap = cap;
    }
    sb_buf_append(&st->body, p, n); /* the room is there */
    return 0;
}

/* ---- answers (sb_http_req_ops) ---- */

static bool hop_by_hop(const char *n, size_t len)
{
    static const char *const names[] = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                                        "upgrade",    "te",         "content-length",   NULL};
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && strncasecmp(n, names[i], len) == 0)
            return true;
    return false;
}

static ssize_t read_out(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                        nghttp2_data_source *src, void *user);

/* Submits the response head. `lines` are "Name: value\r\n" (names lowercased here, hop-by-hop
 * ones dropped: HTTP/2 forbids them); content_length >= 0 is sent as content-length. With
 * body false the HEADERS frame ends the stream. 0 or -1. */
static int submit_head(h2_stream *st, int status, const char *ctype, const char *lines, size_t lines_len,
                       int64_t content_length, bool body)
{
    h2_conn *hc = st->hc;
    char status_s[8], cl_s[24];
    snprintf(status_s, sizeof status_s, "%d", status < 100 || status > 999 ? 500 : status);
    snprintf(cl_s, sizeof cl_s, "%lld", (long long)content_length);
    size_t nv_max = 4;
    for (const char *q = lines; q && q < lines + lines_len; q++)
        nv_max += *q == '\n';
    if (lines_len && lines[lines_len - 1] != '\n')
        nv_max++;
    nghttp2_nv *nv = sb_malloc(nv_max * sizeof(nghttp2_nv));
    if (!nv)
        return -1;
    size_t n = 0;
#define NV(name, nlen, value, vlen)                                                                                    \
    nv[n++] = (nghttp2_nv){(uint8_t *)(name), (uint8_t *)(value), (nlen), (vlen), NGHTTP2_NV_FLAG_NONE}
    NV(":status", 7, status_s, strlen(status_s));
    if (ctype)
        NV("content-type", 12, ctype, strlen(ctype));
    if (content_length >= 0)
        NV("content-length", 14, cl_s, strlen(cl_s));
    if (st->req.id[0])
        NV("x-request-id", 12, st->req.id, strlen(st->req.id));
    /* Lowercased copy of the names (nghttp2 copies the list when it is submitted). */
    sb_buf low = {0};
    if (lines_len && sb_buf_reserve(&low, lines_len) < 0) {
        sb_free(nv);
        return -1;
    }
    const char *p = lines ? lines : "", *end = p + lines_len; /* no lines: NULL, 0 */
    while (p < end && n < nv_max) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        if (colon && colon > p) {
            size_t nlen = (size_t)(colon - p);
            const char *v = colon + 1, *ve = line_end;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            if (!hop_by_hop(p, nlen)) {
                char *name = low.data + low.len;
                for (size_t i = 0; i < nlen; i++) {
                    char ch = p[i];
                    name[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
                }
                low.len += nlen;
                NV(name, nlen, v, (size_t)(ve - v));
            }
        }
        p = eol ? eol + 1 : end;
    }
#undef NV
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_out};
    int rc = nghttp2_submit_response(hc->ng, st->id, nv, n, body ? &prd : NULL);
    sb_buf_free(&low);
    sb_free(nv);
    if (rc == 0) {
        hs_mark_dirty(hc->c);
        note_waiting(hc);
    }
    return rc == 0 ? 0 : -1;
}

/* Whether the handler may still answer on this stream. */
static bool answerable(const h2_stream *st)
{
    return st->owned && !st->closed && st->hc->c->state == CONN_H2;
}

static bool head_only(const h2_stream *st, int status)
{
    return st->req.method == HTTP_HEAD || status < 200 || status == 204 || status == 304;
}

static int h2_respond(sb_http_req *req, int status, const char *content_type, const char *headers, const char *body,
                      size_t body_len)
{
    h2_stream *st = stream_of(req);
    /* An interim answer (1xx) is not one an sb_http_req gives: on h2 it would end the stream. */
    if (!answerable(st) || st->state == ST_STREAMING || status < 200)
        return -1;
    bool bodiless = head_only(st, status);
    if (!bodiless && body_len && sb_buf_append(&st->out, body, body_len) < 0)
        return -1;
    if (st->at_head || st->state == ST_HEAD || st->state == ST_BODY)
        st->discard = true; /* answered from its head: the body is not wanted */
    st->ended = true;
    st->state = ST_DONE;
    disown(st);
    /* A HEAD answer keeps the GET answer's length and type; 204 and 304 have neither. */
    bool no_content = status == 204 || status == 304;
    int64_t cl = no_content ? -1 : (int64_t)body_len;
    const char *type = content_type ? content_type : "application/json";
    if (submit_head(st, status, no_content ? NULL : type, headers, headers ? strlen(headers) : 0, cl,
                    !bodiless && body_len) < 0) {
        nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        hs_mark_dirty(st->hc->c);
    }
    return 0;
}

static int h2_stream_begin(sb_http_req *req, int status, const char *headers, size_t headers_len,
                           int64_t content_length)
{
    h2_stream *st = stream_of(req);
    if (!answerable(st) || st->state != ST_HANDLING || status < 200)
        return -1;
    /* Without a body (HEAD, 204, 304) the HEADERS frame ends the stream; the handler still
     * streams as it would on HTTP/1.1: its writes are dropped and its end succeeds. */
    st->bodiless = head_only(st, status);
    st->state = ST_STREAMING;
    if (submit_head(st, status, NULL, headers, headers_len, content_length, !st->bodiless) < 0) {
        abort_owner(st);
        nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        return -1;
    }
    return 0;
}

/* Lets go of a bodiless stream the handler ends or abandons: freed here if nghttp2 has closed
 * it already (on_stream_close kept it for the handler). */
static void bodiless_done(h2_stream *st)
{
    st->ended = true;
    st->state = ST_DONE;
    disown(st);
    if (st->closed)
        stream_free(st);
}

static int h2_stream_write(sb_http_req *req, const char *data, size_t len)
{
    h2_stream *st = stream_of(req);
    if (st->bodiless && st->owned && st->state == ST_STREAMING)
        return 0;
    if (!answerable(st) || st->state != ST_STREAMING)
        return -1;
    if (len == 0)
        return 0;
    if (st->out_off && st->out_off >= st->out.len / 2) {
        /* What nghttp2 took is dropped before the buffer grows: it stays one window's worth. */
        memmove(st->out.data, st->out.data + st->out_off, st->out.len - st->out_off);
        st->out.len -= st->out_off;
        st->out_off = 0;
    }
    if (sb_buf_append(&st->out, data, len) < 0)
        return -1;
    nghttp2_session_resume_data(st->hc->ng, st->id);
    hs_mark_dirty(st->hc->c);
    note_waiting(st->hc);
    if (st->out.len - st->out_off > stream_high_water(st->hc)) {
        st->wants_drain = true;
        return 1;
    }
    return 0;
}

static int h2_stream_end(sb_http_req *req)
{
    h2_stream *st = stream_of(req);
    if (st->bodiless && st->owned && st->state == ST_STREAMING) {
        bodiless_done(st);
        return 0;
    }
    if (!answerable(st) || st->state != ST_STREAMING)
        return -1;
    st->ended = true;
    st->state = ST_DONE;
    disown(st);
    nghttp2_session_resume_data(st->hc->ng, st->id);
    hs_mark_dirty(st->hc->c);
    return 0;
}

static void h2_abort(sb_http_req *req)
{
    h2_stream *st = stream_of(req);
    if (st->bodiless && st->owned && st->state == ST_STREAMING) {
        bodiless_done(st); /* its answer is complete already */
        return;
    }
    if (!answerable(st))
        return;
    bool begun = st->state == ST_STREAMING;
    st->state = ST_DONE;
    disown(st);
    if (begun) {
        /* What is queued (a final SSE error event) leaves first; then the reset tells the
         * client the answer is cut, never silently truncated. */
        st->aborting = true;
        nghttp2_session_resume_data(st->hc->ng, st->id);
    } else {
        nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    }
    hs_mark_dirty(st->hc->c);
}

static const sb_http_req_ops h2_ops = {
    .respond = h2_respond,
    .abort = h2_abort,
    .stream_begin = h2_stream_begin,
    .stream_write = h2_stream_write,
    .stream_end = h2_stream_end,
};

/* nghttp2 takes the next DATA payload of a stream. */
static ssize_t read_out(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                        nghttp2_data_source *src, void *user)
{
    (void)ng, (void)id, (void)user;
    h2_stream *st = src->ptr;
    size_t avail = st->out.len - st->out_off;
    if (avail == 0) {
        if (st->aborting)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
        if (st->ended) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        return NGHTTP2_ERR_DEFERRED; /* resumed by the next write */
    }
    size_t n = avail < length ? avail : length;
    memcpy(buf, st->out.data + st->out_off, n);
    st->out_off += n;
    if (st->out_off == st->out.len) {
        st->out.len = st->out_off = 0;
        if (st->ended && !st->aborting)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    if (st->wants_drain && st->out.len - st->out_off < stream_high_water(st->hc) / 2) {
        st->wants_drain = false;
        st->drain_due = true;
        st->hc->drain_due = true;
    }
    return (ssize_t)n;
}

/* ---- the server's own answers on a stream ---- */

static void fill_req(h2_stream *st)
{
    sb_http_req *r = &st->req;
    const hdr_off *o = (const hdr_off *)st->offs.data;
    size_t n = st->offs.len / sizeof(hdr_off);
    for (size_t i = 0; i < n && st->headers; i++)
        st->headers[i] = (sb_http_header){st->head.data + o[i].name_off, o[i].name_len, st->head.data + o[i].value_off,
                                          o[i].value_len};
    r->headers = st->headers;
    r->n_headers = st->headers ? n : 0;
    r->url = st->has_path ? st->head.data + st->path_off : "";
    r->url_len = st->has_path ? st->path_len : 0;
    r->path = r->url;
    const char *q = r->url_len ? memchr(r->url, '?', r->url_len) : NULL;
    r->path_len = q ? (size_t)(q - r->url) : r->url_len;
    r->body = st->body.data ? st->body.data : "";
    r->body_len = st->body.len;
}

/* Answers an error the server found on this stream (OpenAI-shaped), for the owner's access
 * log too; the connection goes on. */
static void stream_fail(h2_stream *st, int status, const char *code, const char *message, const char *headers)
{
    sb_http_server *s = srv_of(st->hc);
    fill_req(st);
    if (s->on_refused) {
        sb_guard_enter();
        s->on_refused(&st->req, status, code, s->ctx);
        sb_guard_leave();
    }
    sb_buf json = {0};
    const char *type = status == 503 ? "service_unavailable" : status >= 500 ? "server_error" : "invalid_request_error";
    st->owned = true; /* answered through the handler's path */
    if (sb_openai_error(&json, message, type, NULL, code) < 0 ||
        h2_respond(&st->req, status, "application/json", headers, json.data, json.len) < 0) {
        st->owned = false;
        st->state = ST_DONE;
        nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        hs_mark_dirty(st->hc->c);
    }
    sb_buf_free(&json);
}

static void fail_status(h2_stream *st, int status)
{
    switch (status) {
    case 413: stream_fail(st, 413, "request_too_large", "request body too large", NULL); break;
    case 431: stream_fail(st, 431, "request_header_too_large", "request header too large", NULL); break;
    case 408: stream_fail(st, 408, "request_timeout", "request not received in time", NULL); break;
    case 500: stream_fail(st, 500, "out_of_memory", "out of memory", NULL); break;
    case 503:
        srv_of(st->hc)->body_budget_refusals++;
        stream_fail(st, 503, "request_bodies_over_budget",
                    "the gateway holds too many request bytes at once (limits.max_buffered_body_bytes); retry",
                    "Retry-After: 1\r\n");
        break;
    default: stream_fail(st, 400, "invalid_http_request", "invalid HTTP/2 request", NULL);
    }
}

/* ---- nghttp2's callbacks (inside nghttp2_session_mem_recv / mem_send) ---- */

static h2_stream *stream_get(nghttp2_session *ng, int32_t id)
{
    return nghttp2_session_get_stream_user_data(ng, id);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    h2_conn *hc = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (hc->c->state != CONN_H2)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    h2_stream *st = sb_calloc(1, sizeof(*st));
    if (!st) {
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    st->hc = hc;
    st->id = f->hd.stream_id;
    st->state = ST_HEAD;
    st->content_length = -1;
    st->begin_ms = uv_now(hc->c->srv->loop);
    st->req.peer = hc->c->peer;
    st->req.loop = hc->c->srv->loop;
    st->req.start_ns = uv_hrtime();
    st->req.method = -1;
    st->req.http_minor = 1;
    st->req.keep_alive = true;
    st->req.h2 = true;
    st->req.ops = &h2_ops;
    st->next = hc->streams;
    if (hc->streams)
        hc->streams->prev = st;
    hc->streams = st;
    hc->n_streams++;
    nghttp2_session_set_stream_user_data(ng, st->id, st);
    return 0;
}

static int method_of(const uint8_t *v, size_t len)
{
    for (int m = 0; m < 64; m++) {
        const char *s = http_method_str((enum http_method)m);
        if (!strcmp(s, "<unknown>"))
            break;
        if (strlen(s) == len && memcmp(s, v, len) == 0)
            return m;
    }
    return -1;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    (void)flags, (void)user;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    h2_stream *st = stream_get(ng, f->hd.stream_id);
    if (!st || st->state != ST_HEAD || st->error || st->refused)
        return 0; /* trailers are not kept; an erred head is answered at its end */
    h2_conn *hc = st->hc;
    sb_http_server *s = srv_of(hc);
    size_t add = namelen + valuelen + 32;
    if (st->list_bytes + add > s->opts.h2_max_header_list_bytes) {
        st->error = 431;
        return 0;
    }
    /* The decoded head is charged as it grows: HPACK's dynamic table lets a few wire bytes
     * stand for kilobytes, so the connection's streams together, and all heads and bodies of the
     * server, are bounded here rather than by what was read. Past either bound the stream is
     * refused (REFUSED_STREAM: retried by the client once others are done). */
    if (hc->head_bytes + add > s->opts.h2_max_connection_header_bytes || add > hs_body_avail(s)) {
        st->refused = true;
        head_release(st);
        sb_buf_free(&st->head);
        sb_buf_free(&st->offs);
        return 0;
    }
    st->list_bytes += add;
    hc->head_bytes += add;
    hs_body_charge(s, add);
    if (namelen && name[0] == ':') {
        /* nghttp2 has checked the pseudo-headers (which, where, no duplicates). */
        if (namelen == 7 && !memcmp(name, ":method", 7)) {
            st->req.method = method_of(value, valuelen);
            if (st->req.method < 0)
                st->error = 400;
        } else if (namelen == 5 && !memcmp(name, ":path", 5)) {
            st->path_off = st->head.len;
            st->path_len = valuelen;
            st->has_path = true;
            if (sb_buf_append(&st->head, value, valuelen) < 0)
                st->error = 500;
        } else if (namelen == 10 && !memcmp(name, ":authority", 10)) {
            st->auth_off = st->head.len;
            st->auth_len = valuelen;
            st->has_auth = true;
            if (sb_buf_append(&st->head, value, valuelen) < 0)
                st->error = 500;
        }
        return 0;
    }
    if (st->offs.len / sizeof(hdr_off) >= MAX_HEADERS - 1) { /* one slot kept for host */
        st->error = 431;
        return 0;
    }
    if (namelen == 4 && !memcmp(name, "host", 4))
        st->has_host = true;
    if (namelen == 14 && !memcmp(name, "content-length", 14)) {
        /* nghttp2 has parsed it and will check the DATA against it. */
        int64_t cl = 0;
        for (size_t i = 0; i < valuelen && cl <= (int64_t)s->opts.max_body_bytes; i++)
            cl = cl * 10 + (value[i] - '0');
        st->content_length = cl;
    }
    hdr_off o = {
        .name_off = st->head.len, .name_len = namelen, .value_off = st->head.len + namelen, .value_len = valuelen};
    if (sb_buf_append(&st->head, name, namelen) < 0 || sb_buf_append(&st->head, value, valuelen) < 0 ||
        sb_buf_append(&st->offs, &o, sizeof o) < 0)
        st->error = 500;
    return 0;
}

static void queue_ready(h2_stream *st)
{
    h2_conn *hc = st->hc;
    st->state = ST_READY;
    st->ready_next = NULL;
    *hc->ready_tail = st;
    hc->ready_tail = &st->ready_next;
}

/* The head is complete: the request view, the head hook, the size check (as HTTP/1.1: the
 * hook first, so a refused client learns nothing of the limits). */
static void head_complete(h2_stream *st, bool end_stream)
{
    sb_http_server *s = srv_of(st->hc);
    if (st->refused) {
        st->state = ST_DONE;
        nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
        hs_mark_dirty(st->hc->c);
        return;
    }
    if (!st->error && !st->has_path)
        st->error = 400; /* CONNECT (no :path): not served */
    if (!st->error && st->has_auth && !st->has_host) {
        hdr_off o = {.name_off = st->head.len, .name_len = 4, .value_off = st->auth_off, .value_len = st->auth_len};
        if (sb_buf_append(&st->head, "host", 4) < 0 || sb_buf_append(&st->offs, &o, sizeof o) < 0)
            st->error = 500;
    }
    size_t n = st->offs.len / sizeof(hdr_off);
    if (!st->error && n && !(st->headers = sb_malloc(n * sizeof(sb_http_header))))
        st->error = 500;
    if (st->error) {
        fail_status(st, st->error);
        return;
    }
    fill_req(st);
    st->req.has_body = !end_stream;
    if (!end_stream && s->on_head) {
        s->h2_streams++;
        st->owned = true;
        st->at_head = true;
        st->state = ST_HANDLING; /* what the answer calls expect */
        sb_guard_enter();
        bool go_on = s->on_head(&st->req, s->ctx);
        sb_guard_leave();
        st->at_head = false;
        if (st->state != ST_HANDLING)
            return; /* answered (or aborted) from its head */
        if (!go_on) {
            disown(st);
            st->state = ST_DONE;
            nghttp2_submit_rst_stream(st->hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
            hs_mark_dirty(st->hc->c);
            return;
        }
        st->owned = false; /* the body is read before the handler has it */
        st->req.on_abort = st->req.on_drain = st->req.on_cut = NULL;
    } else if (!end_stream) {
        s->h2_streams++;
    }
    if (st->content_length > (int64_t)s->opts.max_body_bytes) {
        fail_status(st, 413);
        return;
    }
    if (end_stream) {
        s->h2_streams++;
        queue_ready(st);
    } else {
        st->state = ST_BODY;
    }
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    h2_conn *hc = user;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    hc->last_io_ms = uv_now(srv_of(hc)->loop); /* stream activity: not idle */
    h2_stream *st = stream_get(ng, f->hd.stream_id);
    if (!st)
        return 0;
    bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (end)
        st->remote_done = true;
    if (f->hd.type == NGHTTP2_HEADERS && st->state == ST_HEAD) {
        head_complete(st, end);
        return 0;
    }
    if (end && st->state == ST_BODY)
        queue_ready(st);
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *user)
{
    (void)flags, (void)user;
    h2_stream *st = stream_get(ng, id);
    if (!st || st->state != ST_BODY || st->discard)
        return 0; /* an answered stream's body is dropped (its window is given back by nghttp2) */
    int rc = body_add(st, data, len);
    if (rc) {
        body_release(st);
        fail_status(st, rc); /* this stream only: the connection goes on */
    }
    return 0;
}

/* A frame nghttp2 found invalid for its stream (a WINDOW_UPDATE overflowing the window, DATA
 * after END_STREAM, ...): nghttp2 resets the stream, but the reset leaves only with the next
 * write, so the stream is marked now and never handed to the handler (no routing, admission or
 * upstream work for a request its client has made void). */
static int on_invalid_frame(nghttp2_session *ng, const nghttp2_frame *f, int lib_error, void *user)
{
    (void)lib_error, (void)user;
    h2_stream *st = f->hd.stream_id ? stream_get(ng, f->hd.stream_id) : NULL;
    if (st)
        st->doomed = true;
    return 0;
}

/* Takes one token for a reset the server sends with an error code; false when none is left. */
static bool reset_token(h2_conn *hc)
{
    sb_http_server *s = srv_of(hc);
    uint64_t now = uv_now(s->loop);
    uint64_t add = (now - hc->rst_refill_ms) * s->opts.h2_reset_rate / 1000;
    if (add) {
        hc->rst_tokens =
            hc->rst_tokens + add >= s->opts.h2_reset_burst ? s->opts.h2_reset_burst : hc->rst_tokens + (uint32_t)add;
        hc->rst_refill_ms = now;
    }
    if (!hc->rst_tokens)
        return false;
    hc->rst_tokens--;
    return true;
}

const char *const sb_h2_goaway_reason_names[SB_H2_GOAWAY_REASONS] = {
    "idle", "drain", "enhance_your_calm", "internal_error", "protocol_error", "other_error"};

static enum sb_h2_goaway_reason goaway_reason(const h2_conn *hc, uint32_t code)
{
    switch (code) {
    case NGHTTP2_NO_ERROR: return hc->idled ? SB_H2_GOAWAY_IDLE : SB_H2_GOAWAY_DRAIN;
    case NGHTTP2_ENHANCE_YOUR_CALM: return SB_H2_GOAWAY_CALM;
    case NGHTTP2_INTERNAL_ERROR: return SB_H2_GOAWAY_INTERNAL;
    case NGHTTP2_PROTOCOL_ERROR: return SB_H2_GOAWAY_PROTOCOL;
    default: return SB_H2_GOAWAY_OTHER;
    }
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    h2_conn *hc = user;
    if (f->hd.type == NGHTTP2_GOAWAY)
        srv_of(hc)->h2_goaway[goaway_reason(hc, f->goaway.error_code)]++;
    if (f->hd.type == NGHTTP2_RST_STREAM && f->rst_stream.error_code != NGHTTP2_NO_ERROR) {
        srv_of(hc)->h2_refused_streams++; /* nghttp2's REFUSED_STREAM included */
        if (!reset_token(hc))
            hc->calm = true; /* GOAWAY from hs_h2_pull, outside nghttp2's send loop */
    }
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    h2_stream *st = stream_get(ng, f->hd.stream_id);
    /* Answered while the client still sends its body (a refusal from the head, 413): RFC 9113
     * 8.1 lets the server reset with NO_ERROR so that the client stops sending. */
    if (st && !st->remote_done)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *user)
{
    (void)error_code;
    h2_conn *hc = user;
    h2_stream *st = stream_get(ng, id);
    if (!st)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    st->closed = true;
    hc->last_io_ms = uv_now(srv_of(hc)->loop);
    if (st->bodiless && st->owned)
        return 0; /* a HEAD answer sent whole: freed when the handler ends its (dropped) stream */
    if (st->state == ST_READY) {
        /* Reset before the handler had it: taken off the queue when dispatching. */
        st->state = ST_DONE;
        return 0;
    }
    /* A reset from the client (RST_STREAM) while a handler holds the request: the proxy
     * aborts its upstream request on on_abort. */
    abort_owner(st);
    bool queued = false;
    for (h2_stream *r = hc->ready; r; r = r->ready_next)
        queued |= r == st;
    if (!queued)
        stream_free(st);
    return 0;
}

/* ---- the connection ---- */

static int callbacks_new(sb_http_server *s)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, on_invalid_frame);
    nghttp2_option *o;
    if (nghttp2_option_new(&o) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -1;
    }
    nghttp2_option_set_max_settings(o, MAX_SETTINGS_ENTRIES);
    nghttp2_option_set_max_outbound_ack(o, MAX_OUTBOUND_ACK);
    nghttp2_option_set_max_continuations(o, MAX_CONTINUATIONS);
    /* Closed streams are not kept for priorities: their memory would grow with a client's
     * stream churn. */
    nghttp2_option_set_no_closed_streams(o, 1);
    s->h2_cbs = cb;
    s->h2_opts = o;
    return 0;
}

void hs_h2_server_free(sb_http_server *s)
{
    if (s->h2_cbs)
        nghttp2_session_callbacks_del(s->h2_cbs);
    if (s->h2_opts)
        nghttp2_option_del(s->h2_opts);
    s->h2_cbs = NULL;
    s->h2_opts = NULL;
}

int hs_h2_start(conn *c)
{
    sb_http_server *s = c->srv;
    if (!s->h2_cbs && callbacks_new(s) < 0)
        return -1;
    h2_conn *hc = sb_calloc(1, sizeof(*hc));
    if (!hc)
        return -1;
    hc->c = c;
    hc->ready_tail = &hc->ready;
    hc->rst_tokens = s->opts.h2_reset_burst;
    hc->rst_refill_ms = uv_now(s->loop);
    /* Set per session (the option object is copied at creation): a reload's figures reach the
     * connections opened after it. */
    nghttp2_option_set_stream_reset_rate_limit(s->h2_opts, s->opts.h2_reset_burst, s->opts.h2_reset_rate);
    if (nghttp2_session_server_new2(&hc->ng, s->h2_cbs, hc, s->h2_opts) != 0) {
        sb_free(hc);
        return -1;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->opts.h2_max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, s->opts.h2_window_bytes},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         s->opts.h2_max_header_list_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)s->opts.h2_max_header_list_bytes},
    };
    /* The connection's window too (SETTINGS only sets the streams'): at 65,535 an upload of a
     * few prompts at once would wait a round trip per 64 KiB. Bodies are charged to the body
     * budget as they arrive, so a larger window adds no unbounded memory. */
    if (nghttp2_submit_settings(hc->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(hc->ng, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)s->opts.h2_connection_window_bytes) != 0) {
        nghttp2_session_del(hc->ng);
        sb_free(hc);
        return -1;
    }
    c->h2 = hc;
    c->state = CONN_H2;
    s->h2_connections++;
    hs_conn_read_batched(c); /* a connection that speaks HTTP/2 stays */
    hc->last_io_ms = uv_now(s->loop);
    sb_buf_free(&c->head);
    sb_buf_free(&c->pending);
    hs_mark_dirty(c);
    arm(c);
    return 0;
}

/* Hands complete requests to the handler, outside nghttp2's callbacks (a handler may answer at
 * once, and the answer is submitted from here). */
static void dispatch_ready(conn *c)
{
    h2_conn *hc = c->h2;
    sb_http_server *s = c->srv;
    while (hc->ready && c->state == CONN_H2) {
        h2_stream *st = hc->ready;
        hc->ready = st->ready_next;
        if (!hc->ready)
            hc->ready_tail = &hc->ready;
        if (st->closed) {
            stream_free(st); /* reset by the client while queued */
            continue;
        }
        if (st->doomed || hc->calm) {
            st->state = ST_DONE; /* its reset (or the GOAWAY) is queued: freed when it closes */
            continue;
        }
        fill_req(st);
        st->state = ST_HANDLING;
        st->owned = true;
        sb_guard_enter();
        s->handler(&st->req, s->ctx);
        sb_guard_leave();
    }
}

static void run_drains(conn *c)
{
    h2_conn *hc = c->h2;
    while (hc->drain_due && c->state == CONN_H2) {
        hc->drain_due = false;
        for (h2_stream *st = hc->streams; st; st = st->next) {
            if (!st->drain_due)
                continue;
            st->drain_due = false;
            sb_guard_enter();
            void (*drain)(sb_http_req *) = st->owned ? st->req.on_drain : NULL;
            if (drain)
                drain(&st->req);
            sb_guard_leave();
            if (drain) {
                hc->drain_due = true; /* the list may have changed: start again */
                break;
            }
        }
    }
}

/* Closes once nghttp2 is done with the session (it sent GOAWAY for an error, or a drain's
 * streams are over), after what is queued has left. */
static void maybe_finish(conn *c)
{
    h2_conn *hc = c->h2;
    if (c->state != CONN_H2)
        return;
    bool over = !nghttp2_session_want_read(hc->ng) && !nghttp2_session_want_write(hc->ng);
    if (hc->goaway && !hc->n_streams && !nghttp2_session_want_write(hc->ng))
        over = true;
    if (over) {
        hs_h2_abort_all(c);
        hs_conn_linger(c, 0);
    }
}

/* Past a flood limit of ours: GOAWAY ENHANCE_YOUR_CALM, the handlers' requests aborted, and
 * the connection closes once the GOAWAY has left (or idle_ms passed). */
static void calm_down(conn *c)
{
    h2_conn *hc = c->h2;
    hc->calm = true;
    nghttp2_session_terminate_session(hc->ng, NGHTTP2_ENHANCE_YOUR_CALM);
    hs_h2_abort_all(c);
    if (c->state == CONN_H2)
        hs_conn_linger(c, 0);
}

void hs_h2_input(conn *c, const char *p, size_t n)
{
    h2_conn *hc = c->h2;
    /* What the last read left queued in nghttp2 (the room was short) is taken first, so that
     * its ACKs and this read's never add up to its flood limit for a client within it. */
    if (nghttp2_session_want_write(hc->ng)) {
        hs_mark_dirty(c); /* what is pulled leaves at the iteration's end */
        if (hs_h2_pull(c) < 0) {
            hs_conn_close(c);
            return;
        }
    }
    ssize_t rv = nghttp2_session_mem_recv(hc->ng, (const uint8_t *)p, n);
    if (c->state != CONN_H2)
        return;
    if (rv >= 0 &&
        (hc->calm || nghttp2_session_get_outbound_queue_size(hc->ng) >
                         MAX_OUTBOUND_ACK + OUTBOUND_FRAMES_PER_STREAM * (size_t)c->srv->opts.h2_max_streams)) {
        calm_down(c);
        return;
    }
    if (rv < 0) {
        /* A protocol error or a flood: nghttp2 has queued GOAWAY where one is due; it leaves
         * before the connection closes. */
        if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            nghttp2_session_terminate_session(hc->ng, NGHTTP2_ENHANCE_YOUR_CALM);
        hs_h2_abort_all(c);
        hs_conn_linger(c, 0);
        return;
    }
    dispatch_ready(c);
    if (c->state != CONN_H2)
        return;
    if (nghttp2_session_want_write(hc->ng)) {
        /* Pulled now, not only at the iteration's end: libuv reads up to 32 times in a row,
         * and what each read makes nghttp2 queue (ACKs, resets) would otherwise pile up there
         * and trip its flood limits for a client that merely sends fast. Past write_high_water
         * this stops reading (hs_h2_pull). */
        hs_mark_dirty(c);
        if (hs_h2_pull(c) < 0) {
            hs_conn_close(c);
            return;
        }
    }
    maybe_finish(c);
    if (c->state == CONN_H2)
        arm(c);
}

int hs_h2_pull(conn *c)
{
    h2_conn *hc = c->h2;
    sb_http_server *s = c->srv;
    bool was_calm = hc->calm;
    while (c->queued + c->out.len < s->opts.write_high_water) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(hc->ng, &p);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if (sb_buf_append(&c->out, p, (size_t)n) < 0)
            return -1;
        if (hc->calm && !was_calm) {
            /* Too many resets sent (on_frame_send): the GOAWAY goes next in this same loop.
             * The handlers hear of it when the connection closes. */
            was_calm = true;
            nghttp2_session_terminate_session(hc->ng, NGHTTP2_ENHANCE_YOUR_CALM);
        }
    }
    if (c->state == CONN_H2 && !hc->read_paused && c->queued + c->out.len >= s->opts.write_high_water &&
        nghttp2_session_want_write(hc->ng)) {
        /* The client does not read what it asks for: stop reading it, as HTTP/1.1's
         * write_paused, or every frame it sends (a stream to refuse, a PING) would queue an
         * answer without bound. idle_ms without a write completing closes it (note_waiting). */
        hc->read_paused = true;
        hs_conn_read_stop(c);
        note_waiting(hc);
    }
    return 0;
}

void hs_h2_written(conn *c)
{
    h2_conn *hc = c->h2;
    /* The client reads: the stall clock restarts, or stops if nothing is left to send. */
    hc->waiting_since_ms = output_waiting(hc) ? uv_now(c->srv->loop) : 0;
    if (hc->read_paused && c->queued + c->out.len < c->srv->opts.write_high_water / 2) {
        hc->read_paused = false;
        hs_conn_read_start(c);
    }
    run_drains(c);
    if (c->state != CONN_H2)
        return;
    if (nghttp2_session_want_write(hc->ng))
        hs_mark_dirty(c);
    else
        maybe_finish(c);
    if (c->state == CONN_H2)
        arm(c);
}

/* The next deadline: a stream's head or body late (header_ms from its HEADERS), a client that
 * reads none of the answers waiting for it (idle_ms without a write completing), or no stream
 * at all (idle_ms without input or output). O(streams), bounded by h2_max_streams. */
static uint64_t next_due(conn *c, bool *idle)
{
    h2_conn *hc = c->h2;
    sb_http_server *s = c->srv;
    uint64_t due = UINT64_MAX;
    *idle = !hc->n_streams;
    if (*idle)
        due = hc->last_io_ms + s->opts.idle_ms;
    if (hc->waiting_since_ms && hc->waiting_since_ms + s->opts.idle_ms < due)
        due = hc->waiting_since_ms + s->opts.idle_ms;
    for (h2_stream *st = hc->streams; st; st = st->next)
        if ((st->state == ST_HEAD || st->state == ST_BODY) && st->begin_ms + s->opts.header_ms < due)
            due = st->begin_ms + s->opts.header_ms;
    return due;
}

static void arm(conn *c)
{
    bool idle;
    uint64_t due = next_due(c, &idle);
    if (due == UINT64_MAX) {
        hs_arm_timer(c, 0);
        return;
    }
    uint64_t now = uv_now(c->srv->loop);
    uint64_t ms = due > now ? due - now : 1;
    hs_arm_timer(c, ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms);
}

void hs_h2_timeout(conn *c)
{
    h2_conn *hc = c->h2;
    sb_http_server *s = c->srv;
    uint64_t now = uv_now(s->loop);
    if (!hc->n_streams) {
        if (now >= hc->last_io_ms + s->opts.idle_ms) {
            hc->goaway = true;
            hc->idled = true;
            nghttp2_session_terminate_session(hc->ng, NGHTTP2_NO_ERROR);
            hs_conn_linger(c, 0);
            return;
        }
        arm(c);
        return;
    }
    if (hc->waiting_since_ms && now >= hc->waiting_since_ms + s->opts.idle_ms) {
        if (output_waiting(hc)) {
            /* The client has read nothing of its answers for idle_ms: gone in effect. Closing
             * aborts its requests, which releases their upstreams. */
            hs_conn_close(c);
            return;
        }
        hc->waiting_since_ms = 0;
    }
    for (h2_stream *st = hc->streams; st; st = st->next)
        if ((st->state == ST_HEAD || st->state == ST_BODY) && now >= st->begin_ms + s->opts.header_ms) {
            body_release(st);
            fail_status(st, 408);
        }
    arm(c);
}

void hs_h2_abort_all(conn *c)
{
    h2_conn *hc = c->h2;
    if (!hc)
        return;
    for (h2_stream *st = hc->streams; st; st = st->next)
        abort_owner(st);
}

void hs_h2_free(conn *c)
{
    h2_conn *hc = c->h2;
    if (!hc)
        return;
    nghttp2_session_del(hc->ng);
    while (hc->streams)
        stream_free(hc->streams);
    sb_free(hc);
    c->h2 = NULL;
}

void hs_h2_drain(conn *c)
{
    h2_conn *hc = c->h2;
    if (hc->goaway || c->state != CONN_H2)
        return;
    hc->goaway = true;
    nghttp2_submit_goaway(hc->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(hc->ng), NGHTTP2_NO_ERROR,
                          NULL, 0);
    hs_mark_dirty(c);
}

void hs_h2_cut(conn *c)
{
    h2_conn *hc = c->h2;
    if (c->state != CONN_H2)
        return;
    for (h2_stream *st = hc->streams; st; st = st->next) {
        if (!st->owned)
            continue;
        sb_guard_enter();
        void (*cb)(sb_http_req *) = st->state == ST_HANDLING ? st->req.on_cut : NULL;
        st->req.on_cut = NULL;
        if (cb)
            cb(&st->req); /* answers: the answer leaves before the connection closes */
        sb_guard_leave();
        if (cb && c->state != CONN_H2)
            return;
        if (st->owned) {
            st->req.cut = true;
            abort_owner(st);
            nghttp2_submit_rst_stream(hc->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
        }
    }
    hc->goaway = true;
    nghttp2_submit_goaway(hc->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(hc->ng), NGHTTP2_NO_ERROR,
                          NULL, 0);
    hs_conn_linger(c, 0);
}
