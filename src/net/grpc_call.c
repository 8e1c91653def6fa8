/* grpc_call: a gRPC call on an HTTP/2 stream: nghttp2's callbacks, the message framing in
 * both directions, the trailers, and the call API of grpc_server.h (see
 * grpc_server_internal.h for who owns what).
 *
 * Flow control: the session runs without nghttp2's automatic WINDOW_UPDATEs. A stream's window
 * is given back as soon as its bytes arrive (one message may be larger than a stream window),
 * the connection's only when a message is complete and handed over, or its bytes are dropped.
 * So the bytes of unfinished messages a connection can make the server hold are bounded by
 * the connection window (grpc_server.c sets it above twice the largest message), whatever
 * the number of streams; the price is that a peer interleaving more unfinished messages than
 * that stalls its own connection, never another.
 *
 * Over all connections, unfinished messages are charged to the server's budget
 * (max_buffered_bytes) at the capacity of their buffers, which is what they cost: a buffer
 * doubles (copies stay linear) but never grows past its message's declared length, so the
 * charge is at most twice the bytes received and never more than the message. A message whose
 * next bytes would pass the budget ends its call; the charge is released when the message is
 * handed over or dropped, or the call ends. (A buffer of at most KEEP_MSG_BUF_BYTES kept for
 * a call's next message is not charged between messages: that is per call, like its
 * headers.) */
#include "net/grpc_server_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

#define PREFIX_BYTES 5
/* A message buffer larger than this is given back after its message, not kept for the next. */
#define KEEP_MSG_BUF_BYTES (64 * 1024)

/* Makes room in the message buffer for extra more bytes, charged to the server's budget.
 * Returns 0, 1 if the charge would pass the budget (nothing changed), -1 out of memory. */
static int msg_grow(sb_grpc_call *call, size_t extra)
{
    sb_grpc_server *s = call->conn->srv;
    sb_buf *b = &call->msg;
    size_t need = b->len + extra + 1; /* sb_buf keeps a NUL after the data */
    size_t cap = b->cap;
    if (need > cap) {
        cap = cap ? cap : 256;
        while (cap < need)
            cap *= 2;
        if (cap > call->msg_len + 1)
            cap = call->msg_len + 1; /* need <= msg_len + 1: the message never grows past it */
    }
    if (s->buffered - call->charged + cap > s->opts.max_buffered_bytes)
        return 1;
    if (cap != b->cap) {
        char *d = sb_realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    s->buffered = s->buffered - call->charged + cap; /* the capacity only grows: cap >= charged */
    call->charged = cap;
    return 0;
}

/* The message buffer leaves the budget; kept (emptied) for the call's next message if small,
 * else freed. */
static void msg_release(sb_grpc_call *call, bool keep)
{
    call->conn->srv->buffered -= call->charged;
    call->charged = 0;
    if (keep && call->msg.cap <= KEEP_MSG_BUF_BYTES)
        sb_buf_reset(&call->msg);
    else
        sb_buf_free(&call->msg);
}

static sb_grpc_call *call_of(nghttp2_session *ng, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(ng, stream_id);
}

static void give_back_connection(gs_conn *c, size_t n)
{
    if (n && !c->closing)
        nghttp2_session_consume_connection(c->ng, n);
}

/* A status message longer than this is cut: it is for people, and a trailer must fit the
 * peer's header list limit (often 8 or 16 KiB) with room to spare. */
#define MAX_MESSAGE_BYTES 1024

/* gRPC's grpc-message: bytes outside printable ASCII, and '%', percent-encoded (gRPC over
 * HTTP/2, "Responses"). NULL on allocation failure. */
static char *percent_encode(const char *s)
{
    size_t n = strnlen(s, MAX_MESSAGE_BYTES), out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        out += (ch < 0x20 || ch > 0x7e || ch == '%') ? 3 : 1;
    }
    char *e = sb_malloc(out + 1), *p = e;
    if (!e)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch > 0x7e || ch == '%')
            p += sprintf(p, "%%%02X", ch);
        else
            *p++ = (char)ch;
    }
    *p = '\0';
    return e;
}

#define NV(n, v)                                                                                                       \
    {                                                                                                                  \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE                                 \
    }

static int submit_trailers(sb_grpc_call *call)
{
    char status[12];
    snprintf(status, sizeof(status), "%d", call->status);
    nghttp2_nv nv[] = {NV("grpc-status", status), NV("grpc-message", call->message ? call->message : "")};
    return nghttp2_submit_trailer(call->conn->ng, call->stream_id, nv, call->message ? 2 : 1);
}

/* HEADERS only, with END_STREAM: the answer of a call that sends no message (gRPC's
 * "Trailers-Only"). http_status is 200 but for requests that are not gRPC at all. */
static void submit_trailers_only(sb_grpc_call *call, const char *http_status)
{
    char status[12];
    snprintf(status, sizeof(status), "%d", call->status);
    nghttp2_nv nv[] = {NV(":status", http_status), NV("content-type", "application/grpc"), NV("grpc-status", status),
                       NV("grpc-message", call->message ? call->message : "")};
    call->headers_sent = true;
    if (nghttp2_submit_response(call->conn->ng, call->stream_id, nv, call->message ? 4 : 3, NULL) != 0)
        nghttp2_submit_rst_stream(call->conn->ng, NGHTTP2_FLAG_NONE, call->stream_id, NGHTTP2_INTERNAL_ERROR);
    gs_conn_mark_dirty(call->conn);
}

/* DATA frames come from the call's outbound buffer; an empty one defers the stream until
 * the next send (or the finish, which ends the DATA and queues the trailers). */
static ssize_t read_out(nghttp2_session *ng, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *flags,
                        nghttp2_data_source *src, void *user)
{
    sb_grpc_call *call = src->ptr;
    size_t avail = call->out.len - call->out_off;
    size_t n = avail < length ? avail : length;
    if (n)
        memcpy(buf, call->out.data + call->out_off, n);
    call->out_off += n;
    gs_queued_sub(call->conn, n);
    if (call->out_off == call->out.len) {
        call->out_off = 0;
        if (call->out.cap > KEEP_MSG_BUF_BYTES)
            sb_buf_free(&call->out);
        else
            sb_buf_reset(&call->out);
        if (call->finishing) {
            *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
            if (submit_trailers(call) != 0)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
            return (ssize_t)n;
        }
        if (n == 0) {
            call->deferred = true;
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return (ssize_t)n;
}

/* Ends the call with status: trailers after whatever is queued, or trailers-only. */
static void end_call(sb_grpc_call *call, int status, const char *message, const char *http_status)
{
    call->state = GS_ENDED;
    call->status = status;
    sb_free(call->message);
    call->message = message ? percent_encode(message) : NULL;
    give_back_connection(call->conn, call->unconsumed);
    call->unconsumed = 0;
    if (!call->delivering) /* else on_message's msg stays valid; it is released on return */
        msg_release(call, false);
    if (!call->headers_sent) {
        submit_trailers_only(call, http_status);
        return;
    }
    call->finishing = true;
    if (call->deferred) {
        call->deferred = false;
        nghttp2_session_resume_data(call->conn->ng, call->stream_id);
    }
    gs_conn_mark_dirty(call->conn);
}

/* The server ends a call the application may hold (a malformed or oversized message): it
 * hears on_cancel, as the call is gone for it, and the peer gets the status. */
static void server_end(sb_grpc_call *call, int status, const char *message)
{
    sb_grpc_server *s = call->conn->srv;
    s->calls_refused++;
    bool held = call->state == GS_HELD;
    call->state = GS_ENDED;
    if (held && s->h.on_cancel)
        s->h.on_cancel(call);
    end_call(call, status, message, "200");
}

static const char *header(const sb_grpc_call *call, const char *name, size_t *len)
{
    const char *p = call->hdrs.data, *end = p + call->hdrs.len;
    while (p && p < end) {
        const char *v = p + strlen(p) + 1;
        size_t vl = strlen(v);
        if (strcmp(p, name) == 0) {
            if (len)
                *len = vl;
            return v;
        }
        p = v + vl + 1;
    }
    return NULL;
}

/* application/grpc, application/grpc+proto, application/grpc;charset=...: gRPC over HTTP/2's
 * Content-Type rule. */
static bool is_grpc_content_type(const char *ct, size_t len)
{
    static const char base[] = "application/grpc";
    size_t bl = sizeof(base) - 1;
    if (!ct || len < bl || strncasecmp(ct, base, bl) != 0)
        return false;
    return len == bl || ct[bl] == '+' || ct[bl] == ';';
}

/* The request's headers are in: check what makes it a gRPC call, then offer it to the
 * application. A request that is not gRPC at all (not POST, another content-type) is answered
 * with the HTTP status the gRPC HTTP/2 spec names (405, 415), so a plain HTTP client reads a
 * meaningful answer, and with grpc-status as well, which gRPC clients read first. */
static void begin_call(sb_grpc_call *call)
{
    gs_conn *c = call->conn;
    sb_grpc_server *s = c->srv;
    s->calls_total++;
    size_t ml = 0, ctl = 0, pl = 0;
    const char *method = header(call, ":method", &ml);
    const char *ct = header(call, "content-type", &ctl);
    const char *path = header(call, ":path", &pl);
    if (call->hdrs_over) {
        s->calls_refused++;
        end_call(call, SB_GRPC_RESOURCE_EXHAUSTED, "request headers over the limit", "200");
        return;
    }
    if (!method || strcmp(method, "POST") != 0) {
        s->calls_refused++;
        end_call(call, SB_GRPC_UNIMPLEMENTED, "gRPC calls are POST requests", "405");
        return;
    }
    if (!is_grpc_content_type(ct, ctl)) {
        s->calls_refused++;
        end_call(call, SB_GRPC_INVALID_ARGUMENT, "content-type must be application/grpc", "415");
        return;
    }
    if (!path || s->stopping) {
        s->calls_refused++;
        end_call(call, SB_GRPC_UNAVAILABLE, "server stopping", "200");
        return;
    }
    call->ctx = s->ctx;
    call->state = GS_HELD;
    int rc = s->h.on_call(call, path, pl, call->ctx);
    if (rc != SB_GRPC_OK && call->state == GS_HELD) {
        s->calls_refused++;
        end_call(call, rc, rc == SB_GRPC_UNIMPLEMENTED ? "unknown method" : NULL, "200");
    }
}

/* The peer half-closed. Bytes of an unfinished message left: the call is malformed. */
static void remote_end(sb_grpc_call *call)
{
    call->remote_closed = true;
    if (call->state != GS_HELD)
        return;
    if (call->prefix_got > 0) {
        server_end(call, SB_GRPC_INTERNAL, "stream ended inside a message");
        return;
    }
    sb_grpc_server *s = call->conn->srv;
    if (s->h.on_half_close)
        s->h.on_half_close(call);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    gs_conn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    gs_conn_opened(c);
    sb_grpc_call *call = sb_calloc(1, sizeof(*call));
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* that stream is reset, the rest go on */
    call->conn = c;
    call->stream_id = f->hd.stream_id;
    call->state = GS_NEW;
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    c->n_calls++;
    c->srv->n_calls++;
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, call);
    gs_conn_idle_update(c);
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    gs_conn *c = user;
    sb_grpc_call *call = call_of(ng, f->hd.stream_id);
    if (!call || call->state != GS_NEW || call->hdrs_over)
        return 0; /* trailers from the client carry nothing the server uses */
    if (call->hdrs.len + namelen + valuelen + 2 > c->srv->opts.max_header_bytes) {
        call->hdrs_over = true; /* answered when the headers end: the HPACK state must stay whole */
        return 0;
    }
    /* nghttp2 has refused NUL in names and values already (RFC 9113 8.2.1). */
    if (sb_buf_append(&call->hdrs, name, namelen) < 0 || sb_buf_append(&call->hdrs, "", 1) < 0 ||
        sb_buf_append(&call->hdrs, value, valuelen) < 0 || sb_buf_append(&call->hdrs, "", 1) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK) &&
        memcmp(f->ping.opaque_data, gs_drain_ping, sizeof(gs_drain_ping)) == 0) {
        gs_conn_drain_final(user); /* the peer has read the shutdown notice sent before it */
        return 0;
    }
    sb_grpc_call *call = call_of(ng, f->hd.stream_id);
    if (!call)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && call->state == GS_NEW)
        begin_call(call);
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        remote_end(call);
    return 0;
}

/* Whole messages are handed over as their last byte arrives; bytes of a call that is over
 * (or the server's own refusal) are dropped and their window given back at once. */
static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user)
{
    gs_conn *c = user;
    sb_grpc_server *s = c->srv;
    nghttp2_session_consume_stream(ng, stream_id, len);
    sb_grpc_call *call = call_of(ng, stream_id);
    while (len > 0 && call && call->state == GS_HELD) {
        size_t take;
        if (call->prefix_got < PREFIX_BYTES) {
            take = PREFIX_BYTES - call->prefix_got < len ? PREFIX_BYTES - call->prefix_got : len;
            memcpy(call->prefix + call->prefix_got, data, take);
            call->prefix_got += take;
            call->unconsumed += take;
            data += take;
            len -= take;
            if (call->prefix_got < PREFIX_BYTES)
                break;
            uint8_t flag = call->prefix[0];
            call->msg_len = (size_t)call->prefix[1] << 24 | (size_t)call->prefix[2] << 16 |
                            (size_t)call->prefix[3] << 8 | call->prefix[4];
            if (flag & 1) {
                server_end(call, SB_GRPC_UNIMPLEMENTED, "compressed messages are not supported (no grpc-encoding)");
                break;
            }
            if (flag != 0) {
                server_end(call, SB_GRPC_INTERNAL, "bad message flags");
                break;
            }
            if (call->msg_len > s->opts.max_message_bytes) {
                char m[96];
                snprintf(m, sizeof(m), "message of %zu bytes over the limit of %zu", call->msg_len,
                         s->opts.max_message_bytes);
                server_end(call, SB_GRPC_RESOURCE_EXHAUSTED, m);
                break;
            }
        } else {
            size_t want = call->msg_len - call->msg.len;
            take = want < len ? want : len;
            int g = msg_grow(call, take);
            if (g != 0) {
                char m[96] = "out of memory";
                if (g > 0) {
                    s->calls_over_budget++;
                    snprintf(m, sizeof(m), "unfinished messages over the server's limit of %zu bytes",
                             s->opts.max_buffered_bytes);
                }
                server_end(call, SB_GRPC_RESOURCE_EXHAUSTED, m);
                break;
            }
            sb_buf_append(&call->msg, data, take); /* room made: cannot fail */
            call->unconsumed += take;
            data += take;
            len -= take;
        }
        if (call->msg.len == call->msg_len) {
            /* Whole: its connection window goes back, then the application reads it. */
            give_back_connection(c, call->unconsumed);
            call->unconsumed = 0;
            call->prefix_got = 0;
            call->delivering = true;
            s->h.on_message(call, (const uint8_t *)(call->msg.data ? call->msg.data : ""), call->msg.len);
            call->delivering = false;
            msg_release(call, call->state == GS_HELD);
        }
    }
    give_back_connection(c, len);
    return 0;
}

/* Our END_STREAM went out while the peer is still sending: RST_STREAM(NO_ERROR) tells it to
 * stop, as gRPC over HTTP/2 prescribes for a server that ends a call early. */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    gs_conn *c = user;
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR && !c->proto_error) {
        c->proto_error = true;
        c->srv->protocol_errors++;
    }
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    sb_grpc_call *call = call_of(ng, f->hd.stream_id);
    if (call && !call->remote_closed)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static void call_free(sb_grpc_call *call)
{
    gs_conn *c = call->conn;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    c->n_calls--;
    c->srv->n_calls--;
    gs_queued_sub(c, call->out.len - call->out_off);
    sb_buf_free(&call->hdrs);
    msg_release(call, false);
    sb_buf_free(&call->out);
    sb_free(call->message);
    sb_free(call);
}

static int on_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code, void *user)
{
    gs_conn *c = user;
    sb_grpc_call *call = call_of(ng, stream_id);
    if (!call)
        return 0;
    nghttp2_session_set_stream_user_data(ng, stream_id, NULL);
    if (call->state == GS_HELD) {
        call->state = GS_ENDED;
        if (c->srv->h.on_cancel)
            c->srv->h.on_cancel(call);
    }
    give_back_connection(c, call->unconsumed);
    call_free(call);
    gs_conn_idle_update(c);
    return 0;
}

int gs_callbacks_new(nghttp2_session_callbacks **out)
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
    *out = cb;
    return 0;
}

void gs_calls_cancel_all(gs_conn *c)
{
    while (c->calls) {
        sb_grpc_call *call = c->calls;
        if (call->state == GS_HELD) {
            call->state = GS_ENDED;
            if (c->srv->h.on_cancel)
                c->srv->h.on_cancel(call);
        }
        call_free(call);
    }
}

void gs_calls_drained(gs_conn *c)
{
    /* on_drain may finish its call, which only queues trailers: no call is freed here. */
    for (sb_grpc_call *call = c->calls; call && !c->closing; call = call->next) {
        if (call->state == GS_HELD && call->wants_drain) {
            call->wants_drain = false;
            if (c->srv->h.on_drain)
                c->srv->h.on_drain(call);
        }
    }
}

/* ---- the call API ---- */

void sb_grpc_call_set_user(sb_grpc_call *c, void *user)
{
    c->user = user;
}
void *sb_grpc_call_user(const sb_grpc_call *c)
{
    return c->user;
}
const char *sb_grpc_call_peer(const sb_grpc_call *c)
{
    return c->conn->peer;
}

const char *sb_grpc_call_header(const sb_grpc_call *c, const char *name, size_t *len)
{
    return header(c, name, len);
}

int sb_grpc_send(sb_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (!call || call->state != GS_HELD || call->conn->closing || len > UINT32_MAX)
        return -1;
    gs_conn *c = call->conn;
    uint8_t prefix[PREFIX_BYTES] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    if (call->out_off > 0 && call->out_off >= call->out.len / 2) {
        /* nghttp2 pulls from the front while the application appends at the back: move the
         * rest down once half is gone (each byte moves O(1) times), or a call that is never
         * fully drained would grow its buffer with everything it ever sent. */
        memmove(call->out.data, call->out.data + call->out_off, call->out.len - call->out_off);
        call->out.len -= call->out_off;
        call->out_off = 0;
    }
    if (sb_buf_reserve(&call->out, PREFIX_BYTES + len) < 0) {
        SB_WARN("grpc: out of memory queueing a %zu-byte message to %s", len, c->peer);
        return -1;
    }
    sb_buf_append(&call->out, prefix, PREFIX_BYTES);
    sb_buf_append(&call->out, msg, len);
    c->queued += PREFIX_BYTES + len;
    if (!call->headers_sent) {
        nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
        nghttp2_data_provider prd = {.source.ptr = call, .read_callback = read_out};
        call->headers_sent = true;
        if (nghttp2_submit_response(c->ng, call->stream_id, nv, 2, &prd) != 0)
            return -1;
    } else if (call->deferred) {
        call->deferred = false;
        nghttp2_session_resume_data(c->ng, call->stream_id);
    }
    gs_conn_mark_dirty(c);
    if (c->queued > c->srv->opts.write_high_water) {
        call->wants_drain = true;
        return 1;
    }
    return 0;
}

int sb_grpc_finish(sb_grpc_call *call, int status, const char *message)
{
    if (!call || call->state != GS_HELD || call->conn->closing)
        return -1;
    end_call(call, status, message, "200");
    return 0;
}
