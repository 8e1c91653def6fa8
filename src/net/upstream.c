#include "net/upstream.h"
#include "net/guard.h"
#include "net/iobatch.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"

/* UC_HANDSHAKE: connected, the TLS handshake under way (the connect timer still runs). */
enum { UC_CONNECTING = 1, UC_WAITING, UC_HANDSHAKE, UC_OWNED, UC_IDLE, UC_CLOSING };
enum { READ_BUF_BYTES = 65536 };

struct sb_upstream {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    char address[280];
    char *host; /* a name to resolve; NULL for a literal */
    uint16_t port;
    int resolve_status; /* sb_upstream_resolve_status */
    bool resolving;     /* a uv_getaddrinfo is out (gai owns a reference: n_open) */
    uint32_t retry_ms;  /* next retry delay */
    uv_getaddrinfo_t gai;
    uv_timer_t retry_timer;    /* names only; open for the pool's life (a reference: n_open) */
    sb_upstream_conn *waiting; /* connections waiting for the address (linked by next_idle) */
    sb_upstream_opts opts;
    sb_upstream_conn *idle;  /* most recently released first */
    size_t n_idle;
    size_t n_open;
    uint64_t connects;
    bool freeing;
    /* Read buffer of every connection of this pool: the loop is single-threaded and each read
     * is consumed by its owner before the callback returns. Per pool rather than file-scope
     * so that pools on different loops share nothing; embedded, so it costs no allocation. */
    char read_buf[READ_BUF_BYTES];
    char *server_name;       /* TLS: SNI and the name verified (a copy) */
    /* TLS: the last resumable session the endpoint granted, offered by the next connection
     * (an abbreviated handshake: one round trip and no certificate check); one per endpoint. */
    SSL_SESSION *session;
    char tls_buf[16 * 1024]; /* TLS: decrypted bytes, handed to the owner at once */
};

static void uc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void uc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_deadline(uv_timer_t *t);
static void on_retry_timer(uv_timer_t *t);
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res);
static void on_tls_written(uv_write_t *w, int status);

static void maybe_free_pool(sb_upstream *u)
{
    if (u->freeing && u->n_open == 0) {
        SSL_SESSION_free(u->session);
        SSL_CTX_free(u->opts.tls_ctx);
        sb_free(u->server_name);
        sb_free(u->host);
        sb_free(u);
    }
}

static void on_closed(uv_handle_t *h)
{
    sb_upstream_conn *uc = h->data;
    if (--uc->handles_open > 0)
        return;
    sb_upstream *u = uc->up;
    u->n_open--;
    sb_tls_free(&uc->tls);
    sb_free(uc);
    maybe_free_pool(u);
}

/* Off its list (idle, or waiting for the address: both use the next_idle/prev_idle links). */
static void unlink_from(sb_upstream_conn **head, sb_upstream_conn *uc)
{
    if (uc->prev_idle)
        uc->prev_idle->next_idle = uc->next_idle;
    else
        *head = uc->next_idle;
    if (uc->next_idle)
        uc->next_idle->prev_idle = uc->prev_idle;
    uc->next_idle = uc->prev_idle = NULL;
}

static void unlink_idle(sb_upstream_conn *uc)
{
    unlink_from(&uc->up->idle, uc);
    uc->up->n_idle--;
}

void sb_upstream_close(sb_upstream_conn *uc)
{
    if (uc->state == UC_CLOSING)
        return;
    if (uc->state == UC_IDLE)
        unlink_idle(uc);
    if (uc->state == UC_WAITING)
        unlink_from(&uc->up->waiting, uc);
    uc->state = UC_CLOSING;
    uc->connect_cb = NULL;
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uv_timer_stop(&uc->timer);
    uv_close((uv_handle_t *)&uc->timer, on_closed);
    sb_iob_release((uv_stream_t *)&uc->tcp); /* a batched request leaves as it would have, then the close */
    sb_iob_read_forget((uv_stream_t *)&uc->tcp); /* its reader's descriptor of the socket closes too */
    uv_close((uv_handle_t *)&uc->tcp, on_closed);
}

static void on_connect(uv_connect_t *req, int status);
static void on_connect_timeout(sb_upstream_conn *uc);
static void start_resolve(sb_upstream *u);

/* The retry timer's and the resolver's references (n_open) end here. */
static void on_retry_timer_closed(uv_handle_t *h)
{
    sb_upstream *u = h->data;
    u->n_open--;
    maybe_free_pool(u);
}

static void on_retry_timer_locked(uv_timer_t *t)
{
    start_resolve(t->data);
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void on_retry_timer(uv_timer_t *t)
{
    sb_guard_enter();
    on_retry_timer_locked(t);
    sb_guard_leave();
}

/* Connections that waited for the address: connect them now, or fail them with the resolver's
 * error (each callback may acquire again: the list is detached first). */
static void flush_waiting(sb_upstream *u, int status)
{
    sb_upstream_conn *uc = u->waiting;
    u->waiting = NULL;
    while (uc) {
        sb_upstream_conn *next = uc->next_idle;
        uc->next_idle = uc->prev_idle = NULL;
        int rc = status;
        if (rc == 0) {
            uc->state = UC_CONNECTING;
            rc = uv_tcp_connect(&uc->connect_req, &uc->tcp, (struct sockaddr *)&u->addr, on_connect);
        }
        if (rc < 0) {
            void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
            void *arg = uc->connect_arg;
            sb_upstream_close(uc);
            if (cb)
                cb(uc, rc, arg);
        }
        uc = next;
    }
}

static void on_resolved_locked(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    sb_upstream *u = req->data;
    u->resolving = false;
    u->n_open--;
    if (u->freeing) {
        if (res)
            uv_freeaddrinfo(res);
        maybe_free_pool(u);
        return;
    }
    if (status == 0 && res && res->ai_addrlen <= sizeof(u->addr)) {
        memcpy(&u->addr, res->ai_addr, res->ai_addrlen);
        u->resolve_status = 0;
        u->retry_ms = u->opts.retry_ms;
    } else if (u->resolve_status == 0) {
        /* A lookup failed but an address is known (taken over from the gateway this one
         * replaced): keep serving it rather than mark a working endpoint down on a transient
         * resolver error. Names whose addresses change belong in endpoints_from. */
        SB_WARN("upstream %s: lookup failed (%s); keeping the known address", u->address,
                uv_strerror(status < 0 ? status : UV_EAI_NONAME));
    } else {
        u->resolve_status = status < 0 ? status : UV_EAI_NONAME;
        uv_timer_start(&u->retry_timer, on_retry_timer, u->retry_ms, 0);
        u->retry_ms = u->retry_ms > u->opts.retry_max_ms / 2 ? u->opts.retry_max_ms : u->retry_ms * 2;
    }
    if (res)
        uv_freeaddrinfo(res);
    /* The owner hears first: failing the waiting connections may end the last exchange of a
     * retired gateway and free it, and the callback's argument with it. */
    if (u->opts.on_resolved)
        u->opts.on_resolved(u, u->resolve_status, u->opts.resolved_arg);
    flush_waiting(u, u->resolve_status);
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    sb_guard_enter();
    on_resolved_locked(req, status, res);
    sb_guard_leave();
}

static void start_resolve(sb_upstream *u)
{
    if (u->resolving || u->freeing)
        return;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", u->port);
    u->gai.data = u;
    int rc = uv_getaddrinfo(u->loop, &u->gai, on_resolved, u->host, portstr, &hints);
    if (rc < 0) { /* could not even start: counts as a failed resolution, retried the same way */
        if (u->resolve_status == 1)
            u->resolve_status = rc;
        uv_timer_start(&u->retry_timer, on_retry_timer, u->retry_ms, 0);
        return;
    }
    u->resolving = true;
    u->n_open++;
}

int sb_upstream_new(uv_loop_t *loop, const char *host, uint16_t port, const sb_upstream_opts *opts,
                    sb_upstream **out)
{
    sb_upstream *u = sb_calloc(1, sizeof(*u));
    if (!u)
        return UV_ENOMEM;
    u->loop = loop;
    u->opts = opts ? *opts : (sb_upstream_opts){0};
    if (!u->opts.connect_ms)
        u->opts.connect_ms = 1000;
    if (!u->opts.idle_ms)
        u->opts.idle_ms = 30000;
    if (!u->opts.retry_ms)
        u->opts.retry_ms = 1000;
    if (u->opts.retry_max_ms < u->opts.retry_ms)
        u->opts.retry_max_ms = u->opts.retry_ms > 30000 ? u->opts.retry_ms : 30000;
    u->retry_ms = u->opts.retry_ms;
    u->port = port;
    if (u->opts.tls_ctx) {
        if (!(u->server_name = sb_strdup(u->opts.tls_server_name ? u->opts.tls_server_name : host))) {
            sb_free(u);
            return UV_ENOMEM;
        }
        SSL_CTX_up_ref(u->opts.tls_ctx);
    }
    u->opts.tls_server_name = NULL; /* u->server_name is the copy */
    snprintf(u->address, sizeof(u->address), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&u->addr) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&u->addr) == 0) {
        *out = u;
        return 0;
    }
    /* A name: resolved off the loop, and again with backoff while it does not resolve. */
    if (!(u->host = sb_strdup(host))) {
        SSL_CTX_free(u->opts.tls_ctx);
        sb_free(u->server_name);
        sb_free(u);
        return UV_ENOMEM;
    }
    u->resolve_status = 1;
    uv_timer_init(loop, &u->retry_timer);
    u->retry_timer.data = u;
    u->n_open++;
    start_resolve(u);
    *out = u;
    return 0;
}

int sb_upstream_resolve_status(const sb_upstream *u)
{
    return u->resolve_status;
}

int sb_upstream_adopt_address(sb_upstream *u, const sb_upstream *src)
{
    if (!u->host || !src->host || u->port != src->port || strcmp(u->host, src->host) || src->resolve_status != 0 ||
        u->resolve_status == 0)
        return -1;
    memcpy(&u->addr, &src->addr, sizeof(u->addr));
    u->resolve_status = 0;
    return 0;
}

void sb_upstream_free(sb_upstream *u)
{
    u->freeing = true;
    while (u->idle)
        sb_upstream_close(u->idle);
    if (u->host) {
        if (u->resolving)
            uv_cancel((uv_req_t *)&u->gai); /* its callback still runs, and drops the reference */
        uv_timer_stop(&u->retry_timer);
        uv_close((uv_handle_t *)&u->retry_timer, on_retry_timer_closed);
    }
    maybe_free_pool(u);
}

const char *sb_upstream_address(const sb_upstream *u) { return u->address; }
size_t sb_upstream_idle_count(const sb_upstream *u) { return u->n_idle; }
uint64_t sb_upstream_connects(const sb_upstream *u) { return u->connects; }

static void on_deadline_locked(uv_timer_t *t)
{
    sb_upstream_conn *uc = t->data;
    uc->deadline_fires = 0;
    if (!uc->deadline_due)
        return; /* cleared since the timer started */
    uint64_t now = uv_now(t->loop);
    if (now < uc->deadline_due) {
        /* Pushed back since the timer started: wait for what is left. */
        uc->deadline_fires = uc->deadline_due;
        uv_timer_start(t, on_deadline, uc->deadline_due - now, 0);
        return;
    }
    uc->deadline_due = 0;
    uc->deadline_cb(uc);
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void on_deadline(uv_timer_t *t)
{
    sb_guard_enter();
    on_deadline_locked(t);
    sb_guard_leave();
}

/* A proxied request set or cleared this deadline five times (idle cleared at acquire,
 * response timeout set at send and pushed back at each read, cleared at the end, idle set at
 * release), each a timer heap removal and insertion: ~380 instructions of a request
 * (callgrind, bench/proxy_overhead.sh's setup). Loop times, as uv_timer_start's, so a
 * deadline passes exactly when a timer started for it would have fired. */
void sb_upstream_deadline(sb_upstream_conn *uc, uint32_t ms, void (*cb)(sb_upstream_conn *uc))
{
    if (!ms) {
        uc->deadline_due = 0;
        return;
    }
    uint64_t due = uv_now(uc->timer.loop) + ms;
    uc->deadline_due = due;
    uc->deadline_cb = cb;
    if (uc->deadline_fires && uc->deadline_fires <= due)
        return;
    uc->deadline_fires = due;
    uv_timer_start(&uc->timer, on_deadline, ms, 0);
}

static void on_connect_timeout(sb_upstream_conn *uc)
{
    void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
    void *arg = uc->connect_arg;
    sb_upstream_close(uc);
    if (cb)
        cb(uc, UV_ETIMEDOUT, arg);
}

/* Ciphertext the session has produced (handshake records, alerts): written by the pool itself.
 * 0, or -1 (out of memory, or the write could not start). */
static int tls_flush(sb_upstream_conn *uc);

/* A session the endpoint granted on one of this pool's connections replaces the one kept. A
 * copy is kept: the granted object stays the connection's own, and OpenSSL marks that one
 * unresumable when the connection is freed without a close_notify of ours (a close-delimited
 * answer, an idle close), which would leave nothing to offer. */
static void keep_session(void *arg, SSL_SESSION *session)
{
    sb_upstream *u = arg;
    SSL_SESSION *copy = SSL_SESSION_dup(session);
    SSL_SESSION_free(session);
    if (!copy)
        return; /* no memory: the one kept stays */
    SSL_SESSION_free(u->session);
    u->session = copy;
}

/* The TLS handshake after the TCP connect, within the same connect timer. */
static void start_tls(sb_upstream_conn *uc)
{
    void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
    void *arg = uc->connect_arg;
    sb_upstream *u = uc->up;
    uv_tcp_nodelay(&uc->tcp, 1);
    uc->state = UC_HANDSHAKE;
    bool ok = sb_tls_init_client(&uc->tls, u->opts.tls_ctx, u->server_name) == 0;
    if (ok) {
        uc->tls.on_session = keep_session;
        uc->tls.session_arg = u;
        sb_tls_offer_session(&uc->tls, u->session);
    }
    if (!ok || sb_tls_start(&uc->tls) < 0 || tls_flush(uc) < 0 ||
        sb_iob_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read) < 0) {
        uc->connect_cb = NULL;
        sb_upstream_close(uc);
        cb(uc, UV_EPROTO, arg);
    }
}

static void on_connect_locked(uv_connect_t *req, int status)
{
    sb_upstream_conn *uc = req->data;
    if (uc->state != UC_CONNECTING)
        return; /* closed meanwhile (timeout or owner gave up): nobody to tell */
    if (status == 0 && uc->up->opts.tls_ctx) {
        start_tls(uc);
        return;
    }
    sb_upstream_deadline(uc, 0, NULL);
    void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
    void *arg = uc->connect_arg;
    uc->connect_cb = NULL;
    if (status < 0) {
        sb_upstream_close(uc);
        cb(uc, status, arg);
        return;
    }
    uv_tcp_nodelay(&uc->tcp, 1);
    uc->state = UC_OWNED;
    if (sb_iob_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read) < 0) {
        sb_upstream_close(uc);
        cb(uc, UV_ECONNRESET, arg);
        return;
    }
    cb(uc, 0, arg);
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void on_connect(uv_connect_t *req, int status)
{
    sb_guard_enter();
    on_connect_locked(req, status);
    sb_guard_leave();
}

int sb_upstream_acquire(sb_upstream *u, void (*cb)(sb_upstream_conn *, int, void *), void *arg,
                        sb_upstream_conn **out)
{
    if (u->idle) {
        sb_upstream_conn *uc = u->idle;
        unlink_idle(uc);
        sb_upstream_deadline(uc, 0, NULL);
        uc->on_read = NULL;
        uc->state = UC_OWNED;
        uc->reused = true;
        uc->requests++;
        *out = uc;
        return 1;
    }
    if (u->resolve_status < 0)
        return u->resolve_status; /* the name does not resolve (retried in the background) */
    sb_upstream_conn *uc = sb_calloc(1, sizeof(*uc));
    if (!uc)
        return UV_ENOMEM;
    uc->up = u;
    uv_tcp_init(u->loop, &uc->tcp);
    uv_timer_init(u->loop, &uc->timer);
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uc->handles_open = 2;
    uc->state = UC_CONNECTING;
    uc->connect_cb = cb;
    uc->connect_arg = arg;
    uc->connect_req.data = uc;
    uc->requests = 1;
    u->n_open++;
    u->connects++;
    int rc = 0;
    if (u->resolve_status == 1) {
        /* The first answer is not in yet: wait for it, within the connect timeout. */
        uc->state = UC_WAITING;
        uc->next_idle = u->waiting;
        if (u->waiting)
            u->waiting->prev_idle = uc;
        u->waiting = uc;
    } else {
        rc = uv_tcp_connect(&uc->connect_req, &uc->tcp, (struct sockaddr *)&u->addr, on_connect);
    }
    if (rc < 0) {
        uc->connect_cb = NULL;
        sb_upstream_close(uc);
        return rc;
    }
    sb_upstream_deadline(uc, u->opts.connect_ms, on_connect_timeout);
    *out = uc;
    return 0;
}

static void uc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sb_upstream_conn *uc = (sb_upstream_conn *)h; /* tcp is its first member */
    (void)suggested;
    *buf = uv_buf_init(uc->up->read_buf, sizeof(uc->up->read_buf));
}

/* Every read of a pooled connection comes here. An idle connection must stay silent: EOF,
 * an error or unsolicited bytes all mean it can no longer carry a request. */
/* Plaintext from TLS: to the owner; on an idle connection it is unsolicited (closed). 0 to
 * go on, 1 once the connection is no longer the owner's (released, closed). */
static int tls_plain(void *arg, const char *p, size_t n)
{
    sb_upstream_conn *uc = arg;
    if (uc->state == UC_OWNED && uc->on_read) {
        uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
        uc->on_read(uc, (ssize_t)n, &b);
        /* Released by its owner in that call: the feed goes on, so that bytes after the
         * response (another record of the same read) reach the idle branch below and close the
         * connection instead of waiting in OpenSSL for the next request's owner. */
        return uc->state == UC_CLOSING;
    }
    if (uc->state == UC_HANDSHAKE) {
        /* HTTP/1.1 servers speak after the request: data in the handshake's flight (0.5-RTT) is
         * not ours to read. tls_read fails the connect (the acquirer hears of it). */
        uc->tls_early_data = true;
        return 1;
    }
    sb_upstream_close(uc); /* idle: unsolicited bytes, the connection cannot carry a request */
    return 1;
}

/* A handshake that finished: the connection is the acquirer's. */
static void tls_established(sb_upstream_conn *uc)
{
    void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
    void *arg = uc->connect_arg;
    uc->connect_cb = NULL;
    sb_upstream_deadline(uc, 0, NULL);
    uc->state = UC_OWNED;
    sb_upstream *u = uc->up;
    uint64_t *n = sb_tls_resumed(&uc->tls) ? u->opts.tls_resumed : u->opts.tls_full;
    if (n && !u->freeing)
        (*n)++;
    cb(uc, 0, arg);
}

static void tls_read(sb_upstream_conn *uc, ssize_t nread, const uv_buf_t *buf)
{
    int state = uc->state;
    int rc = nread < 0 ? -1
                       : sb_tls_feed(&uc->tls, buf->base, (size_t)nread, uc->up->tls_buf, sizeof uc->up->tls_buf, NULL,
                                     tls_plain, uc);
    if (state == UC_HANDSHAKE && uc->state == UC_HANDSHAKE) {
        if (rc < 0 || uc->tls_early_data) {
            void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
            void *arg = uc->connect_arg;
            SB_DEBUG("upstream %s: TLS handshake failed", uc->up->address);
            uc->connect_cb = NULL;
            sb_upstream_close(uc);
            cb(uc, nread < 0 ? (int)nread : UV_EPROTO, arg);
            return;
        }
        if (tls_flush(uc) < 0) {
            void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
            void *arg = uc->connect_arg;
            uc->connect_cb = NULL;
            sb_upstream_close(uc);
            cb(uc, UV_ENOMEM, arg);
            return;
        }
        if (uc->tls.ready)
            tls_established(uc);
        return;
    }
    if (uc->state == UC_CLOSING)
        return;
    if (rc < 0) { /* the server's close_notify or EOF (an end), a TLS error (a read error) */
        if (uc->state == UC_OWNED && uc->on_read) {
            uv_buf_t none = uv_buf_init(NULL, 0);
            uc->on_read(uc, nread < 0 ? nread : uc->tls.peer_closed ? UV_EOF : UV_EPROTO, &none);
        } else {
            sb_upstream_close(uc);
        }
        return;
    }
    if ((uc->state == UC_OWNED || uc->state == UC_IDLE) && tls_flush(uc) < 0)
        sb_upstream_close(uc);
}

static void uc_read_locked(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sb_upstream_conn *uc = s->data;
    if (nread == 0)
        return;
    if (uc->tls.ssl && uc->state != UC_CLOSING) {
        tls_read(uc, nread, buf);
        return;
    }
    if (uc->state == UC_OWNED && uc->on_read) {
        uc->on_read(uc, nread, buf);
        return;
    }
    sb_upstream_close(uc);
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void uc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sb_guard_enter();
    uc_read_locked(s, nread, buf);
    sb_guard_leave();
}

void sb_upstream_pause(sb_upstream_conn *uc)
{
    if (uc->state == UC_OWNED)
        sb_iob_read_stop((uv_stream_t *)&uc->tcp);
}

int sb_upstream_resume(sb_upstream_conn *uc)
{
    if (uc->state != UC_OWNED)
        return UV_EINVAL;
    int rc = sb_iob_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read);
    return rc == UV_EALREADY ? 0 : rc;
}

static void idle_timeout(sb_upstream_conn *uc)
{
    sb_upstream_close(uc);
}

static int sb_upstream_resume_idle(sb_upstream_conn *uc)
{
    int rc = sb_iob_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read);
    return rc == UV_EALREADY ? 0 : rc;
}

void sb_upstream_release(sb_upstream_conn *uc)
{
    sb_upstream *u = uc->up;
    if (uc->state != UC_OWNED)
        return;
    /* TLS bytes already read and not yet delivered (a record after the response, part of one)
     * would reach the next owner as the start of its response: not reusable. */
    bool tls_leftover = uc->tls.ssl && (SSL_has_pending(uc->tls.ssl) || BIO_ctrl_pending(uc->tls.rbio));
    if (u->freeing || u->n_idle >= u->opts.max_idle || tls_leftover) {
        sb_upstream_close(uc);
        return;
    }
    uc->state = UC_IDLE;
    uc->owner = NULL;
    uc->on_read = NULL;
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uc->next_idle = u->idle;
    uc->prev_idle = NULL;
    if (u->idle)
        u->idle->prev_idle = uc;
    u->idle = uc;
    u->n_idle++;
    sb_upstream_deadline(uc, u->opts.idle_ms, idle_timeout);
    /* Still reading (paused owners are resumed here), so a server closing it is seen. */
    if (sb_upstream_resume_idle(uc) < 0)
        sb_upstream_close(uc);
}

/* ---- writing (TLS: encrypted into a buffer the write owns) ---- */

typedef struct tls_wreq {
    uv_write_t w;
    uv_write_t *user; /* NULL: the pool's own write (handshake records, alerts) */
    uv_write_cb cb;
    char *data;
} tls_wreq;

static void on_tls_written_locked(uv_write_t *w, int status)
{
    tls_wreq *t = (tls_wreq *)w;
    uv_write_t *user = t->user;
    uv_write_cb cb = t->cb;
    uv_stream_t *handle = w->handle; /* read before t (and w in it) is freed */
    sb_free(t->data);
    sb_free(t);
    if (user) {
        user->handle = handle;
        cb(user, status);
    }
}

/* libuv's callback: the owner's callbacks run under the lock (net/guard.h). */
static void on_tls_written(uv_write_t *w, int status)
{
    sb_guard_enter();
    on_tls_written_locked(w, status);
    sb_guard_leave();
}

/* Writes what the session has produced; the user's request (may be NULL) hears when it left. */
static int tls_send(sb_upstream_conn *uc, uv_write_t *user, uv_write_cb cb)
{
    sb_buf out = {0};
    if (sb_tls_take(&uc->tls, &out) < 0) {
        sb_buf_free(&out);
        return UV_ENOMEM;
    }
    if (!out.len && !user)
        return 0;
    tls_wreq *t = sb_malloc(sizeof *t);
    if (!t) {
        sb_buf_free(&out);
        return UV_ENOMEM;
    }
    *t = (tls_wreq){.user = user, .cb = cb};
    size_t len;
    t->data = sb_buf_steal(&out, &len);
    uv_buf_t b = uv_buf_init(t->data ? t->data : "", (unsigned)len);
    int rc = uv_write(&t->w, (uv_stream_t *)&uc->tcp, &b, 1, on_tls_written);
    if (rc < 0) {
        sb_free(t->data);
        sb_free(t);
    }
    return rc;
}

static int tls_flush(sb_upstream_conn *uc)
{
    return sb_tls_pending(&uc->tls) ? tls_send(uc, NULL, NULL) : 0;
}

int sb_upstream_write(sb_upstream_conn *uc, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    if (!uc->tls.ssl) /* with the loop turn's other writes, where the loop batches them */
        return sb_iob_write(req, (uv_stream_t *)&uc->tcp, bufs, n, cb);
    for (unsigned i = 0; i < n; i++)
        if (bufs[i].len && sb_tls_write(&uc->tls, bufs[i].base, bufs[i].len) < 0)
            return UV_EPROTO;
    return tls_send(uc, req, cb);
}

int sb_upstream_try_write(sb_upstream_conn *uc, const uv_buf_t *bufs, unsigned n)
{
    if (uc->tls.ssl)
        return 0;
    sb_iob_release((uv_stream_t *)&uc->tcp); /* behind what is batched, if anything is */
    int rc = uv_try_write((uv_stream_t *)&uc->tcp, bufs, n);
    return rc > 0 ? rc : 0;
}
