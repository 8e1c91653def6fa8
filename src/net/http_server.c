/* http_server: the listener, connections' lifecycle and the options (see http_server_internal.h). */
#include "net/guard.h"
#include "net/http_server_internal.h"
#include "net/iobatch.h"
#include "net/sock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/openai_error.h"

/* ---- lifecycle ---- */

static void server_free(sb_http_server *s)
{
    hs_h2_server_free(s);
    SSL_CTX_free(s->tls_ctx);
    sb_free(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->handles_open > 0)
        return;
    sb_http_server *s = c->srv;
    sb_buf_free(&c->head);
    hs_body_release(c);
    sb_buf_free(&c->pending);
    sb_buf_free(&c->out);
    sb_tls_free(&c->tls);
    hs_h2_free(c);
    sb_free(c);
    if (--s->n_alive == 0 && s->stopping && s->listener_closed)
        server_free(s);
}

void hs_conn_close(conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    enum conn_state was = c->state;
    c->state = CONN_CLOSING;
    if (was == CONN_HANDLING || was == CONN_STREAMING) {
        sb_guard_enter(); /* on_abort is set and read under the lock (net/guard.h) */
        void (*cb)(sb_http_req *) = c->req.on_abort;
        c->req.on_abort = NULL;
        c->req.on_drain = NULL;
        c->req.on_cut = NULL;
        if (cb)
            cb(&c->req);
        sb_guard_leave();
    }
    hs_h2_abort_all(c); /* HTTP/2: every stream a handler holds */
    sb_http_server *s = c->srv;
    hs_body_release(c); /* the handler is done with the request: give the budget back now */
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->refused) {
        s->n_refusing--;
        s->shared->refusing--;
    } else {
        s->n_conns--;
        s->shared->conns--;
    }
    if (was == CONN_LINGERING)
        s->n_lingering--;
    hs_undirty(c);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    sb_iob_release((uv_stream_t *)&c->tcp); /* a batched answer leaves before the close, as it would have */
    sb_iob_read_forget((uv_stream_t *)&c->tcp); /* its reader's descriptor of the socket closes too */
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_timeout(conn *c)
{
    if (c->state == CONN_H2) {
        hs_h2_timeout(c);
        return;
    }
    if (c->state == CONN_LINGERING || c->close_after) {
        /* Closing after queued bytes, and the client does not read them: give up. */
        hs_conn_close(c);
        return;
    }
    if (c->state == CONN_STREAMING && c->wants_drain) {
        /* The client has stopped reading a response in progress: it is gone in effect.
         * Closing aborts the request (on_abort), which releases its upstream. */
        hs_conn_close(c);
        return;
    }
    if (c->state == CONN_READING) {
        /* A slow or stalled request head/body: say so (after any response still queued
         * ahead of it), then close. */
        hs_fail_request(c, 408, "request_timeout", "request not received in time", NULL);
        return;
    }
    if (c->state == CONN_IDLE)
        hs_conn_close(c);
}

static void on_timer(uv_timer_t *t)
{
    conn *c = t->data;
    c->timer_fires = 0;
    if (!c->timer_due)
        return; /* cleared since it was started */
    uint64_t now = uv_now(c->srv->loop);
    if (now < c->timer_due) {
        /* Pushed back since it was started (the next request on a keep-alive connection). */
        c->timer_fires = c->timer_due;
        c->srv->timer_starts++;
        uv_timer_start(&c->timer, on_timer, c->timer_due - now, 0);
        return;
    }
    c->timer_due = 0;
    on_timeout(c);
}

/* Every request set and cleared this deadline two or three times (cleared when the request is
 * complete, set to idle_ms when its answer left, header_ms while a request arrives), each a
 * uv_timer_start or _stop: a heap removal and insertion, ~270 instructions of a proxied
 * request (callgrind, bench/proxy_overhead.sh's setup). Keep-alive pushes the deadline back
 * each time, so the timer started after one answer is left running: at most one early wake
 * per idle_ms per connection, and a restart only when a deadline comes nearer (header_ms
 * after an idle_ms, a lingering close). Times are the loop's, as uv_timer_start's are, so a
 * deadline passes exactly when a timer started for it would have fired. */
void hs_arm_timer(conn *c, uint32_t ms)
{
    if (!ms) {
        c->timer_due = 0;
        return;
    }
    uint64_t due = uv_now(c->srv->loop) + ms;
    c->timer_due = due;
    if (c->timer_fires && c->timer_fires <= due)
        return;
    c->timer_fires = due;
    c->srv->timer_starts++;
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

void hs_reset_request(conn *c)
{
    sb_buf_reset(&c->head);
    hs_body_release(c);
    c->body_cap_max = SIZE_MAX;
    c->n_headers = 0;
    c->url_off = c->url_len = 0;
    c->last_was_value = false;
    c->saw_cl = c->saw_te = c->expect_continue = false;
    c->head_done = false;
    c->fast_left = -1;
    c->body_follows = false;
    c->request_timed = false;
    c->error_status = 0;
    c->chunked = false;
    c->resp_left = -1;
    c->wants_drain = false;
    memset(&c->req, 0, sizeof(c->req));
    c->req.peer = c->peer;
    c->req.loop = c->srv->loop;
}

static void on_shutdown(uv_shutdown_t *r, int status)
{
    conn *c = r->data;
    /* ECANCELED: the connection is being closed already. */
    if (status < 0 && c->state != CONN_CLOSING)
        hs_conn_close(c);
}

/* The answer has left: half-close (the client reads it, then EOF) and keep discarding what
 * the client still sends for linger_ms; or close now if the client is done sending. */
void hs_linger_drained(conn *c)
{
    if (c->shut || c->queued || c->out.len)
        return;
    if (c->tls.ssl && c->tls.ready && !c->tls.notified) {
        /* TLS ends with close_notify before the FIN, so the client tells a complete answer
         * from a truncated one; its write comes back here once it has left. */
        sb_tls_close_notify(&c->tls);
        if (hs_conn_flush(c) < 0)
            hs_conn_close(c);
        else if (!c->queued)
            hs_linger_drained(c);
        return;
    }
    if (c->peer_eof || !c->linger_ms || !c->linger_bytes) {
        hs_conn_close(c);
        return;
    }
    c->shutdown_req.data = c;
    sb_iob_release((uv_stream_t *)&c->tcp); /* none while queued is 0; libuv's order if any */
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
        hs_conn_close(c);
        return;
    }
    c->shut = true;
    hs_arm_timer(c, c->linger_ms);
}

/* Closes the connection after an answer with Connection: close, without losing the answer.
 * Closing a socket whose receive queue holds unread bytes makes the kernel send a reset,
 * and the reset destroys the answer before the client reads it: a client that writes its
 * whole body before reading (Python's http.client, the OpenAI SDKs) would see
 * ECONNRESET instead of its 413, and retry. So: stop parsing, free the request's buffers,
 * let the answer drain (at most drain_ms), half-close, then read and discard until the
 * client closes, linger_ms pass or linger_bytes arrive, whichever is first. A lingering
 * connection still counts against max_connections, so lingerers cannot pile up. */
void hs_conn_linger(conn *c, uint32_t drain_ms)
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
    c->req.on_cut = NULL;
    hs_body_release(c);
    sb_buf_free(&c->pending);
    sb_buf_free(&c->head);
    c->resume = false;
    c->linger_seen = 0;
    if (hs_conn_flush(c) < 0) {
        hs_conn_close(c);
        return;
    }
    if (c->linger_ms && c->linger_bytes && !c->peer_eof) {
        hs_conn_read_start(c);
    } else {
        hs_conn_read_stop(c);
    }
    hs_arm_timer(c, drain_ms); /* a client that never reads the answer is closed */
    hs_linger_drained(c);
}

/* Answers an error the server found itself (framing, limits, time, memory) with an
 * OpenAI-shaped body and Connection: close, then lingers: the rest of the input cannot be
 * trusted, or is not wanted. `headers` is NULL or extra "Name: value\r\n" lines. */
void hs_fail_request(conn *c, int status, const char *code, const char *message, const char *headers)
{
    if (c->srv->on_refused) {
        sb_guard_enter();
        c->srv->on_refused(&c->req, status, code, c->srv->ctx);
        sb_guard_leave();
    }
    sb_buf b = {0};
    sb_buf json = {0};
    const char *type = status == 503 ? "service_unavailable" : status >= 500 ? "server_error" : "invalid_request_error";
    /* A request the head hook gave an id (then refused by the body's limits) keeps it. */
    if (sb_openai_error(&json, message, type, NULL, code) < 0 ||
        sb_buf_printf(&b,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "%s%s%s%sConnection: close\r\n\r\n",
                      status, sb_http_status_text(status), json.len, headers ? headers : "",
                      c->req.id[0] ? "x-request-id: " : "", c->req.id, c->req.id[0] ? "\r\n" : "") < 0 ||
        sb_buf_append(&b, json.data, json.len) < 0 || hs_conn_write(c, b.data, b.len) < 0) {
        sb_buf_free(&b);
        sb_buf_free(&json);
        hs_conn_close(c);
        return;
    }
    sb_buf_free(&b);
    sb_buf_free(&json);
    hs_conn_linger(c, 0);
}

/* ---- accepting ---- */

/* Past max_connections and past the refusal slots too: closed at once, unanswered. */
static void drop_connection(sb_http_server *s, uv_stream_t *server)
{
    s->reset_total++;
    sb_sock_accept_and_close(s->loop, server);
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
    hs_fail_request(c, 503, "too_many_connections",
                 "the gateway is at its connection limit (limits.max_connections); retry", "Retry-After: 1\r\n");
}

static void on_connection(uv_stream_t *server, int status)
{
    sb_http_server *s = server->data;
    if (status < 0)
        return;
    s->accepted_total++; /* every connection taken from the kernel, those closed unanswered too */
    bool over = s->shared->conns >= s->opts.max_connections;
    if (over && s->shared->refusing >= s->opts.max_refusing) {
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
        s->shared->refusing++;
    } else {
        s->n_conns++;
        s->shared->conns++;
    }
    s->n_alive++;
    c->state = CONN_IDLE;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        hs_conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    /* A refused connection over TLS is closed unanswered: a 503 would need a handshake first,
     * the work the limit is there to avoid. */
    if (s->tls_ctx && (over || sb_tls_init(&c->tls, s->tls_ctx) < 0)) {
        if (over)
            s->reset_total++;
        hs_conn_close(c);
        return;
    }
    if (over) {
        refuse_connection(c);
        return;
    }
    sb_sock_peer_name(&c->tcp, c->peer, sizeof(c->peer));
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    hs_reset_request(c);
    hs_arm_timer(c, s->opts.header_ms);
    hs_conn_read_start(c);
}

/* The listener, the flusher and its kick: the server is freed when all three are closed and
 * no connection struct is left. */
static void on_server_handle_closed(uv_handle_t *h)
{
    sb_http_server *s = h->data;
    if (++s->server_handles_closed == 3) {
        s->listener_closed = true;
        if (s->n_alive == 0)
            server_free(s);
    }
}

/* HTTP/2's derived and fixed defaults, once the window and the list size are known. Set on
 * every set_opts too (not kept from before): a derived value follows what it derives from. */
static void h2_defaults(sb_http_server_opts *o)
{
    if (!o->h2_max_connection_header_bytes)
        o->h2_max_connection_header_bytes = 4 * o->h2_max_header_list_bytes;
    if (!o->h2_connection_window_bytes) {
        uint64_t w = 4 * (uint64_t)o->h2_window_bytes;
        o->h2_connection_window_bytes = w > INT32_MAX ? INT32_MAX : (uint32_t)w;
    }
    if (!o->h2_stream_buffer_bytes)
        o->h2_stream_buffer_bytes = 64 * 1024;
    /* nghttp2's own defaults for the client-reset limit (lib/nghttp2_session.h). */
    if (!o->h2_reset_burst)
        o->h2_reset_burst = 1000;
    if (!o->h2_reset_rate)
        o->h2_reset_rate = 33;
}

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
    s->shared = s->opts.shared ? s->opts.shared : &s->own;
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
    /* HTTP/2: nghttp2's stream limit default (and RFC 9113's advice of at least 100), a window
     * that lets an upload of a few prompts go without waiting for WINDOW_UPDATE. */
    if (!s->opts.h2_max_streams)
        s->opts.h2_max_streams = 100;
    if (!s->opts.h2_window_bytes)
        s->opts.h2_window_bytes = 256 * 1024;
    if (!s->opts.h2_max_header_list_bytes)
        s->opts.h2_max_header_list_bytes = s->opts.max_header_bytes;
    h2_defaults(&s->opts);
    if (s->opts.tls_ctx) {
        SSL_CTX_up_ref(s->opts.tls_ctx);
        s->tls_ctx = s->opts.tls_ctx;
        s->opts.tls_ctx = NULL;
    }
    /* SO_REUSEPORT: libuv 1.44 (Debian 12) has no UV_TCP_REUSEPORT, so the socket is made
     * at init and the option set before the bind. */
    rc = s->opts.reuse_port ? uv_tcp_init_ex(loop, &s->listener, addr.ss_family) : uv_tcp_init(loop, &s->listener);
    if (rc < 0) {
        SSL_CTX_free(s->tls_ctx);
        sb_free(s);
        return rc;
    }
    s->listener.data = s;
    uv_check_init(loop, &s->flusher);
    s->flusher.data = s;
    uv_idle_init(loop, &s->kick);
    s->kick.data = s;
    uv_os_fd_t fd;
    int one = 1;
    if (s->opts.reuse_port && (rc = uv_fileno((uv_handle_t *)&s->listener, &fd)) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        rc = uv_translate_sys_error(errno);
    if (rc < 0 || (rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection)) < 0) {
        /* The handles close on the loop's next turn, which frees the server. */
        s->stopping = true;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->kick, on_server_handle_closed);
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

void sb_http_server_set_refused(sb_http_server *s, sb_http_refused_fn fn)
{
    s->on_refused = fn;
}

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
    if (!o.h2_max_streams)
        o.h2_max_streams = s->opts.h2_max_streams;
    if (!o.h2_window_bytes)
        o.h2_window_bytes = s->opts.h2_window_bytes;
    if (!o.h2_max_header_list_bytes)
        o.h2_max_header_list_bytes = s->opts.h2_max_header_list_bytes;
    h2_defaults(&o);
    if (o.tls_ctx && s->tls_ctx && o.tls_ctx != s->tls_ctx) {
        if (!o.tls_tickets_kept)
            sb_tls_keep_tickets(o.tls_ctx, s->tls_ctx); /* sessions resume across the reload */
        SSL_CTX_up_ref(o.tls_ctx);
        SSL_CTX_free(s->tls_ctx); /* each connection holds its own reference */
        s->tls_ctx = o.tls_ctx;
    }
    o.tls_ctx = NULL; /* s->tls_ctx is the one in use */
    s->opts = o;
}

size_t sb_http_server_connections(const sb_http_server *s) { return s->n_conns; }

void sb_http_server_get_stats(const sb_http_server *s, sb_http_server_stats *out)
{
    *out = (sb_http_server_stats){
        .open_connections = s->n_conns,
        .accepted_total = s->accepted_total,
        .lingering_connections = s->n_lingering,
        .refusing_connections = s->n_refusing,
        .body_bytes = s->body_bytes,
        .refused_total = s->refused_total,
        .reset_total = s->reset_total,
        .body_budget_refusals = s->body_budget_refusals,
        .tls_handshakes = s->tls_handshakes,
        .tls_failures = s->tls_failures,
        .h2_connections = s->h2_connections,
        .h2_streams = s->h2_streams,
        .h2_refused_streams = s->h2_refused_streams,
        .timer_starts = s->timer_starts,
    };
    for (int r = 0; r < SB_H2_GOAWAY_REASONS; r++)
        out->h2_goaway[r] = s->h2_goaway[r];
}


void sb_http_server_stop(sb_http_server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    while (s->conns)
        hs_conn_close(s->conns);
    if (!s->draining) /* a drain closed the listener already */
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->flusher, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->kick, on_server_handle_closed);
}

/* Whether c waits for a request with nothing of its own in progress: no request bytes read, no
 * answer still leaving. Closing it loses nothing. */
static bool conn_idle(const conn *c)
{
    return c->state == CONN_IDLE && !c->close_after && !c->queued && !c->out.len && !c->write_paused && !c->pending.len;
}

void sb_http_server_drain(sb_http_server *s)
{
    if (s->stopping || s->draining)
        return;
    s->draining = true;
    /* Closed, not paused: the kernel then refuses new connections at once, so a client or
     * load balancer tries another gateway instead of waiting in an accept queue. */
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    for (conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_H2)
            hs_h2_drain(c); /* GOAWAY: its streams finish, then it closes */
        else if (conn_idle(c))
            hs_conn_close(c);
    }
}

void sb_http_server_cut(sb_http_server *s)
{
    for (conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_H2) {
            hs_h2_cut(c);
            continue;
        }
        sb_guard_enter();
        void (*cut)(sb_http_req *) = c->state == CONN_HANDLING ? c->req.on_cut : NULL;
        c->req.on_cut = NULL;
        if (cut)
            cut(&c->req); /* answers: the connection lingers out (draining) */
        sb_guard_leave();
        if (cut) {
            /* Closing frees c only in the close callback, on a later loop turn. */
            if (c->state == CONN_HANDLING) { /* it did not answer */
                c->req.cut = true;
                hs_conn_close(c);
            }
            continue;
        }
        if (c->state != CONN_LINGERING) {
            c->req.cut = true;
            hs_conn_close(c);
        }
    }
}
