/* grpc_server: the listener, connections' lifecycle, TLS through memory BIOs, reads into
 * nghttp2 and coalesced writes out of it (calls and framing: grpc_call.c). */
#include "net/grpc_server_internal.h"
#include "net/sock.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

/* A stream window of 1 MiB lets one call move a large body without waiting for a round trip
 * per 64 KiB (the HTTP/2 default); the connection window is the bound on unfinished messages
 * (see grpc_call.c), at least twice the largest message so two may be in progress at once. */
#define STREAM_WINDOW_BYTES (1024 * 1024)
#define MIN_CONN_WINDOW_BYTES (4 * 1024 * 1024)
/* How long the last bytes to a connection being closed (its GOAWAY) may take to leave. */
#define CLOSE_GRACE_MS 1000
/* Drain: how long a peer has to ack the PING sent with the shutdown notice before the final
 * GOAWAY goes anyway; a round trip is what the notice needs (RFC 9113 6.8), a second covers
 * any sane one. */
#define DRAIN_NOTICE_MS 1000

const uint8_t gs_drain_ping[8] = {'s', 'b', '-', 'd', 'r', 'a', 'i', 'n'};

/* ---- writes ---- */

typedef struct wreq {
    uv_write_t req;
    gs_conn *conn;
    size_t len;
    char data[];
} wreq;

void gs_queued_sub(gs_conn *c, size_t n)
{
    c->queued = c->queued > n ? c->queued - n : 0;
}

static void on_flush(uv_prepare_t *p);

/* The flusher runs before the loop next blocks: what any callback of this turn queued (a
 * read, a timer, another module's I/O) leaves in one write per connection. */
void gs_conn_mark_dirty(gs_conn *c)
{
    if (c->dirty || c->closing || c->srv->stopping)
        return;
    c->dirty = true;
    c->dirty_next = c->srv->dirty;
    c->srv->dirty = c;
    uv_prepare_start(&c->srv->flusher, on_flush);
}

static void read_start(gs_conn *c);

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    gs_conn *c = w->conn;
    c->writing -= w->len;
    gs_queued_sub(c, w->len);
    sb_free(w);
    if (c->closing)
        return;
    if (status < 0) {
        gs_conn_close(c);
        return;
    }
    size_t hw = c->srv->opts.write_high_water;
    if (c->queued < hw / 2)
        gs_calls_drained(c);
    if (!c->reading && !c->close_when_flushed)
        read_start(c);     /* the next read decides again */
    gs_conn_mark_dirty(c); /* more to pull from nghttp2, or a close that waited for this write */
}

static int write_out(gs_conn *c, sb_buf *b)
{
    if (b->len == 0)
        return 0;
    wreq *w = sb_malloc(sizeof(*w) + b->len);
    if (!w)
        return -1;
    w->conn = c;
    w->len = b->len;
    memcpy(w->data, b->data, b->len);
    uv_buf_t ub = uv_buf_init(w->data, (unsigned)b->len);
    c->writing += b->len;
    c->queued += b->len;
    b->len = 0;
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &ub, 1, on_write) < 0) {
        c->writing -= w->len;
        gs_queued_sub(c, w->len);
        sb_free(w);
        return -1;
    }
    return 0;
}

/* Everything nghttp2 has to send, in one write per turn, while fewer than write_high_water
 * bytes are already in flight (the rest waits in the calls' buffers and nghttp2). */
static void flush(gs_conn *c)
{
    sb_buf b = {0};
    int rc = 0;
    if (!c->tls.ssl || c->tls.ready) {
        while (c->writing + b.len < c->srv->opts.write_high_water) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->ng, &p);
            if (n < 0) {
                rc = -1;
                break;
            }
            if (n == 0)
                break;
            if (c->tls.ssl ? sb_tls_write(&c->tls, p, (size_t)n) < 0 : sb_buf_append(&b, p, (size_t)n) < 0) {
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0 && c->tls.ssl)
        rc = sb_tls_take(&c->tls, &b); /* handshake records and encrypted frames */
    if (rc == 0)
        rc = write_out(c, &b);
    sb_buf_free(&b);
    if (rc < 0) {
        gs_conn_close(c);
        return;
    }
    bool done = !nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng);
    if ((c->close_when_flushed || done) && c->writing == 0)
        gs_conn_close(c);
}

static void on_flush(uv_prepare_t *p)
{
    sb_grpc_server *s = p->data;
    /* A flush may call the application (a stream closed by what went out), which may dirty a
     * connection again: it goes back on the list and is flushed in this same pass. */
    while (s->dirty) {
        gs_conn *c = s->dirty;
        s->dirty = c->dirty_next;
        c->dirty = false;
        flush(c);
    }
    uv_prepare_stop(p);
}

/* ---- lifecycle ---- */

static void maybe_free_server(sb_grpc_server *s)
{
    if (!s->stopping || s->handles_open > 0 || s->n_alive > 0)
        return;
    if (s->ssl_ctx)
        SSL_CTX_free(s->ssl_ctx);
    nghttp2_session_callbacks_del(s->cbs);
    nghttp2_option_del(s->ng_opts);
    sb_free(s);
}

/* ---- connections that have opened no stream yet ---- */

static void fresh_append(gs_conn *c)
{
    sb_grpc_server *s = c->srv;
    c->fresh_prev = s->fresh_tail;
    c->fresh_next = NULL;
    if (s->fresh_tail)
        s->fresh_tail->fresh_next = c;
    else
        s->fresh_head = c;
    s->fresh_tail = c;
}

static void fresh_remove(gs_conn *c)
{
    sb_grpc_server *s = c->srv;
    if (c->fresh_prev)
        c->fresh_prev->fresh_next = c->fresh_next;
    else
        s->fresh_head = c->fresh_next;
    if (c->fresh_next)
        c->fresh_next->fresh_prev = c->fresh_prev;
    else
        s->fresh_tail = c->fresh_prev;
    c->fresh_prev = c->fresh_next = NULL;
}

void gs_conn_opened(gs_conn *c)
{
    if (c->opened)
        return;
    c->opened = true;
    fresh_remove(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    gs_conn *c = h->data;
    if (--c->handles_open > 0)
        return;
    sb_grpc_server *s = c->srv;
    s->n_alive--;
    sb_free(c);
    maybe_free_server(s);
}

void gs_conn_close(gs_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    sb_grpc_server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    if (!c->opened)
        fresh_remove(c);
    if (c->dirty) { /* O(dirty connections): a close is rare next to a turn */
        for (gs_conn **pp = &s->dirty; *pp; pp = &(*pp)->dirty_next)
            if (*pp == c) {
                *pp = c->dirty_next;
                break;
            }
        c->dirty = false;
    }
    gs_calls_cancel_all(c); /* closing is set: their sends and finishes return -1 */
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    sb_tls_free(&c->tls);
    uv_timer_stop(&c->idle);
    uv_close((uv_handle_t *)&c->idle, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void protocol_error(gs_conn *c)
{
    if (!c->proto_error) {
        c->proto_error = true;
        c->srv->protocol_errors++;
    }
}

static void on_idle(uv_timer_t *t);

/* The connection ends once what is queued (a GOAWAY) has left; nothing more is read. A peer
 * that does not take those last bytes within CLOSE_GRACE_MS is closed regardless. */
static void close_after_flush(gs_conn *c)
{
    if (c->close_when_flushed)
        return;
    c->close_when_flushed = true;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    uv_timer_start(&c->idle, on_idle, CLOSE_GRACE_MS, 0);
    gs_conn_mark_dirty(c);
}

/* One timer per connection, three uses in turn: the handshake deadline (from accept to the
 * first stream), idle_ms with no stream open, and the grace of a close. */
static void on_idle(uv_timer_t *t)
{
    gs_conn *c = t->data;
    if (c->close_when_flushed) {
        gs_conn_close(c);
        return;
    }
    if (!c->opened) {
        c->srv->handshake_timeouts++;
        SB_DEBUG("grpc: %s opened no stream in time: closed", c->peer);
    }
    /* GOAWAY, then nothing (before TLS is up nothing goes: the close follows at once). */
    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
    close_after_flush(c);
}

void gs_conn_idle_update(gs_conn *c)
{
    if (c->closing || c->close_when_flushed)
        return;
    if (c->n_calls > 0) {
        uv_timer_stop(&c->idle);
        return;
    }
    if (c->srv->draining) {
        /* Until the final GOAWAY is out, a stream may still come in (it was in flight when
         * the notice left): the PING ack or the drain timer sends it. */
        if (c->drain_final)
            close_after_flush(c);
        return;
    }
    if (c->opened)
        uv_timer_start(&c->idle, on_idle, c->srv->opts.idle_ms, 0);
    /* else the handshake deadline, started at accept, runs on */
}

void gs_conn_drain_final(gs_conn *c)
{
    if (!c->srv->draining || c->drain_final || c->closing) /* an unasked-for ack changes nothing */
        return;
    c->drain_final = true;
    if (!c->close_when_flushed) /* else a GOAWAY is out already */
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->ng),
                              NGHTTP2_NO_ERROR, NULL, 0);
    gs_conn_idle_update(c);
    gs_conn_mark_dirty(c);
}

/* ---- reads ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    gs_conn *c = h->data;
    *buf = uv_buf_init((char *)c->srv->rbuf, sizeof(c->srv->rbuf));
}

static int feed(gs_conn *c, const uint8_t *p, size_t n)
{
    ssize_t rv = nghttp2_session_mem_recv(c->ng, p, n);
    if (rv >= 0)
        return 0;
    protocol_error(c);
    if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) /* not HTTP/2 at all (an HTTP/1 request, garbage) */
        return -1;
    close_after_flush(c); /* a flood, or a callback's failure: nghttp2 has queued its GOAWAY */
    return 0;
}

/* The handshake is done: gRPC needs HTTP/2 (the context refuses clients without h2; this
 * also refuses one that sent no ALPN at all). */
static int tls_ready(void *arg, const sb_tls *t)
{
    gs_conn *c = arg;
    size_t len;
    const char *p = sb_tls_alpn_selected(t, &len);
    if (len == 2 && memcmp(p, "h2", 2) == 0)
        return 0;
    SB_DEBUG("grpc: %s did not agree on ALPN h2", c->peer);
    return -1;
}

/* Decrypted bytes to nghttp2: 0 to go on; nonzero stops (a feed that failed, or closing). */
static int tls_plain(void *arg, const char *p, size_t n)
{
    gs_conn *c = arg;
    if (feed(c, (const uint8_t *)p, n) < 0) {
        c->tls_feed_failed = true;
        return 1;
    }
    return c->closing || c->close_when_flushed;
}

static int feed_tls(gs_conn *c, const uint8_t *p, size_t n)
{
    c->tls_feed_failed = false;
    bool was_ready = c->tls.ready;
    int rc = sb_tls_feed(&c->tls, (const char *)p, n, (char *)c->srv->tlsbuf, sizeof(c->srv->tlsbuf), tls_ready,
                         tls_plain, c);
    if (sb_tls_pending(&c->tls) || (!was_ready && c->tls.ready))
        gs_conn_mark_dirty(c); /* handshake records or alerts to send; once ready, our SETTINGS */
    if (rc < 0 && !c->tls.ready)
        SB_DEBUG("grpc: TLS handshake with %s failed", c->peer);
    return rc < 0 || c->tls_feed_failed ? -1 : 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    gs_conn *c = st->data;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        gs_conn_close(c); /* the peer went away: every call still held hears on_cancel */
        return;
    }
    int rc = c->tls.ssl ? feed_tls(c, (const uint8_t *)buf->base, (size_t)n)
                        : feed(c, (const uint8_t *)buf->base, (size_t)n);
    if (c->closing)
        return;
    if (rc < 0) {
        protocol_error(c);
        gs_conn_close(c);
        return;
    }
    gs_conn_mark_dirty(c); /* WINDOW_UPDATEs, SETTINGS and PING acks, answers */
    if (c->queued > 2 * c->srv->opts.write_high_water && c->writing > 0 && c->reading) {
        /* The peer sends but does not read: stop taking its input until a write completes.
         * Only while a write is in flight: a queue held by the peer's HTTP/2 window (not
         * its socket) must go on being read, or its WINDOW_UPDATE would never be seen. */
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void read_start(gs_conn *c)
{
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = true;
}

/* ---- accepting ---- */

/* Past max_connections with none to evict: closed at once. */
static void drop_connection(sb_grpc_server *s, uv_stream_t *server)
{
    s->connections_refused++;
    sb_sock_accept_and_close(s->loop, server);
}

/* The server's SETTINGS (queued now, sent with the first flush: the server's preface) and
 * the connection window. */
static int session_start(gs_conn *c)
{
    sb_grpc_server *s = c->srv;
    if (nghttp2_session_server_new2(&c->ng, s->cbs, c, s->ng_opts) != 0)
        return -1;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->opts.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW_BYTES},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)s->opts.max_header_bytes},
    };
    size_t win = 2 * (s->opts.max_message_bytes + 5);
    if (win < MIN_CONN_WINDOW_BYTES)
        win = MIN_CONN_WINDOW_BYTES;
    if (win > INT32_MAX)
        win = INT32_MAX;
    if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0 ||
        nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, (int32_t)win) != 0)
        return -1;
    if (s->ssl_ctx && sb_tls_init(&c->tls, s->ssl_ctx) < 0)
        return -1;
    return 0;
}

static void on_connection(uv_stream_t *server, int status)
{
    sb_grpc_server *s = server->data;
    if (status < 0)
        return;
    if (s->draining) {
        drop_connection(s, server);
        return;
    }
    if (s->n_conns >= s->opts.max_connections) {
        /* Full: the oldest connection that has not opened a stream makes room. Peers that
         * connect and say nothing then have to refill every slot faster than a real client
         * opens its first stream to lock it out, rather than once per handshake_ms; the price,
         * a client slow to open its first stream can lose its connection when the server is
         * full (it reconnects, as after any refusal). Only without one is the new refused. */
        if (!s->fresh_head) {
            drop_connection(s, server);
            return;
        }
        s->connections_evicted++;
        SB_DEBUG("grpc: at max_connections: %s (no stream yet) closed for a new connection", s->fresh_head->peer);
        gs_conn_close(s->fresh_head);
    }
    gs_conn *c = sb_calloc(1, sizeof(*c));
    if (!c) {
        drop_connection(s, server);
        return;
    }
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->idle);
    c->tcp.data = c->idle.data = c;
    c->handles_open = 2;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    s->n_alive++;
    fresh_append(c);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || session_start(c) < 0) {
        gs_conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    sb_sock_peer_name(&c->tcp, c->peer, sizeof(c->peer));
    /* The handshake deadline: TLS, the preface and the first stream, or the slot is freed
     * (idle_ms would let a silent socket hold it for minutes). */
    uint32_t deadline = s->opts.handshake_ms < s->opts.idle_ms ? s->opts.handshake_ms : s->opts.idle_ms;
    uv_timer_start(&c->idle, on_idle, deadline, 0);
    read_start(c);
    gs_conn_mark_dirty(c);
}

/* ---- the server ---- */

static SSL_CTX *tls_context(const sb_grpc_server_opts *o)
{
    /* gRPC needs HTTP/2: no fallback to offer a client without h2. */
    static const sb_tls_alpn alpn = {SB_TLS_ALPN_H2, sizeof SB_TLS_ALPN_H2 - 1, true};
    char err[256];
    SSL_CTX *ctx = sb_tls_server_ctx(o->tls_cert_file, o->tls_key_file, &alpn, err, sizeof err);
    if (!ctx)
        SB_ERROR("grpc: TLS certificate %s / key %s: %s", o->tls_cert_file, o->tls_key_file, err);
    return ctx;
}

static void on_server_handle_closed(uv_handle_t *h)
{
    sb_grpc_server *s = h->data;
    s->handles_open--;
    maybe_free_server(s);
}

static void set_defaults(sb_grpc_server_opts *o)
{
    if (!o->max_message_bytes)
        o->max_message_bytes = 4 * 1024 * 1024 + 64 * 1024;
    if (!o->max_concurrent_streams)
        o->max_concurrent_streams = 1024;
    if (!o->max_connections)
        o->max_connections = 1024;
    if (!o->max_header_bytes)
        o->max_header_bytes = 16 * 1024;
    if (!o->idle_ms)
        o->idle_ms = 300000;
    if (!o->write_high_water)
        o->write_high_water = 1024 * 1024;
    if (!o->max_buffered_bytes)
        o->max_buffered_bytes = 256u * 1024 * 1024; /* limits.max_buffered_body_bytes' default */
    if (!o->handshake_ms)
        o->handshake_ms = 10000; /* timeouts.header_ms' default */
}

int sb_grpc_server_start(uv_loop_t *loop, const char *host, uint16_t port, const sb_grpc_server_opts *opts,
                         const sb_grpc_handler *handler, void *ctx, sb_grpc_server **out)
{
    struct sockaddr_storage addr;
    int rc = strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc < 0)
        return rc;
    if (opts && (!opts->tls_cert_file) != (!opts->tls_key_file)) {
        SB_ERROR("grpc: a TLS certificate needs its key and a key its certificate");
        return -1;
    }
    sb_grpc_server *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return UV_ENOMEM;
    s->loop = loop;
    s->h = *handler;
    s->ctx = ctx;
    s->opts = opts ? *opts : (sb_grpc_server_opts){0};
    set_defaults(&s->opts);
    if (s->opts.tls_cert_file && !(s->ssl_ctx = tls_context(&s->opts))) {
        sb_free(s);
        return -1;
    }
    if (gs_callbacks_new(&s->cbs) != 0 || nghttp2_option_new(&s->ng_opts) != 0) {
        if (s->cbs)
            nghttp2_session_callbacks_del(s->cbs);
        if (s->ssl_ctx)
            SSL_CTX_free(s->ssl_ctx);
        sb_free(s);
        return UV_ENOMEM;
    }
    /* Windows are given back as messages are taken (grpc_call.c). nghttp2's own guards stay
     * on at their defaults: SETTINGS entries per frame, queued outbound ACKs (PING/SETTINGS
     * floods), the RST_STREAM rate ("rapid reset"), CONTINUATION frames per header block. */
    nghttp2_option_set_no_auto_window_update(s->ng_opts, 1);
    uv_tcp_init(loop, &s->listener);
    uv_prepare_init(loop, &s->flusher);
    uv_timer_init(loop, &s->drain_timer);
    s->listener.data = s->flusher.data = s->drain_timer.data = s;
    s->handles_open = 3;
    if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection)) < 0) {
        s->stopping = true;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->drain_timer, on_server_handle_closed);
        return rc;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    *out = s;
    return 0;
}

uint16_t sb_grpc_server_port(const sb_grpc_server *s)
{
    return s->port;
}

void sb_grpc_server_set_ctx(sb_grpc_server *s, void *ctx)
{
    s->ctx = ctx;
}

static void close_listener(sb_grpc_server *s)
{
    if (!uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
}

static void on_drain_timer(uv_timer_t *t)
{
    sb_grpc_server *s = t->data;
    for (gs_conn *c = s->conns; c; c = c->next) /* a final GOAWAY never closes synchronously */
        gs_conn_drain_final(c);
}

void sb_grpc_server_drain(sb_grpc_server *s)
{
    if (s->draining || s->stopping)
        return;
    s->draining = true;
    close_listener(s);
    for (gs_conn *c = s->conns; c; c = c->next) {
        /* RFC 9113 6.8: a GOAWAY naming the last stream processed refuses the streams the
         * peer opened while it was on its way. The notice (a GOAWAY naming the largest id)
         * stops new streams without refusing those; the PING's ack, sent after the peer has
         * read the notice, means they have all arrived, and the final GOAWAY follows
         * (gs_conn_drain_final: on the ack in grpc_call.c, or from the drain timer). */
        if (c->close_when_flushed || nghttp2_submit_shutdown_notice(c->ng) != 0 ||
            nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, gs_drain_ping) != 0) {
            gs_conn_drain_final(c);
            continue;
        }
        gs_conn_idle_update(c);
        gs_conn_mark_dirty(c);
    }
    uv_timer_start(&s->drain_timer, on_drain_timer, DRAIN_NOTICE_MS, 0);
}

void sb_grpc_server_stop(sb_grpc_server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    close_listener(s);
    uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->drain_timer, on_server_handle_closed);
    while (s->conns)
        gs_conn_close(s->conns);
    s->dirty = NULL;
}

size_t sb_grpc_server_connections(const sb_grpc_server *s)
{
    return s->n_conns;
}

void sb_grpc_server_get_stats(const sb_grpc_server *s, sb_grpc_server_stats *out)
{
    *out = (sb_grpc_server_stats){
        .open_connections = s->n_conns,
        .open_calls = s->n_calls,
        .calls_total = s->calls_total,
        .calls_refused = s->calls_refused,
        .connections_refused = s->connections_refused,
        .protocol_errors = s->protocol_errors,
        .handshake_timeouts = s->handshake_timeouts,
        .connections_evicted = s->connections_evicted,
        .calls_over_budget = s->calls_over_budget,
        .buffered_bytes = s->buffered,
    };
}
