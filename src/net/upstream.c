#include "net/upstream.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

enum { UC_CONNECTING = 1, UC_OWNED, UC_IDLE, UC_CLOSING };
enum { READ_BUF_BYTES = 65536 };

struct sb_upstream {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    char address[280];
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
};

static void uc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void uc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void maybe_free_pool(sb_upstream *u)
{
    if (u->freeing && u->n_open == 0)
        sb_free(u);
}

static void on_closed(uv_handle_t *h)
{
    sb_upstream_conn *uc = h->data;
    if (--uc->handles_open > 0)
        return;
    sb_upstream *u = uc->up;
    u->n_open--;
    sb_free(uc);
    maybe_free_pool(u);
}

static void unlink_idle(sb_upstream_conn *uc)
{
    sb_upstream *u = uc->up;
    if (uc->prev_idle)
        uc->prev_idle->next_idle = uc->next_idle;
    else
        u->idle = uc->next_idle;
    if (uc->next_idle)
        uc->next_idle->prev_idle = uc->prev_idle;
    uc->next_idle = uc->prev_idle = NULL;
    u->n_idle--;
}

void sb_upstream_close(sb_upstream_conn *uc)
{
    if (uc->state == UC_CLOSING)
        return;
    if (uc->state == UC_IDLE)
        unlink_idle(uc);
    uc->state = UC_CLOSING;
    uc->connect_cb = NULL;
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uv_timer_stop(&uc->timer);
    uv_close((uv_handle_t *)&uc->timer, on_closed);
    uv_close((uv_handle_t *)&uc->tcp, on_closed);
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
    int rc;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&u->addr) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&u->addr) == 0) {
        rc = 0;
    } else {
        /* A name: resolved once, synchronously, at start-up or reload (never per request). */
        uv_getaddrinfo_t gai;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        char portstr[8];
        snprintf(portstr, sizeof(portstr), "%u", port);
        rc = uv_getaddrinfo(loop, &gai, NULL, host, portstr, &hints);
        if (rc == 0) {
            memcpy(&u->addr, gai.addrinfo->ai_addr, gai.addrinfo->ai_addrlen);
            uv_freeaddrinfo(gai.addrinfo);
        }
    }
    if (rc < 0) {
        sb_free(u);
        return rc;
    }
    snprintf(u->address, sizeof(u->address), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    *out = u;
    return 0;
}

void sb_upstream_free(sb_upstream *u)
{
    u->freeing = true;
    while (u->idle)
        sb_upstream_close(u->idle);
    maybe_free_pool(u);
}

const char *sb_upstream_address(const sb_upstream *u) { return u->address; }
size_t sb_upstream_idle_count(const sb_upstream *u) { return u->n_idle; }
uint64_t sb_upstream_connects(const sb_upstream *u) { return u->connects; }

static void on_connect_timeout(uv_timer_t *t)
{
    sb_upstream_conn *uc = t->data;
    void (*cb)(sb_upstream_conn *, int, void *) = uc->connect_cb;
    void *arg = uc->connect_arg;
    sb_upstream_close(uc);
    if (cb)
        cb(uc, UV_ETIMEDOUT, arg);
}

static void on_connect(uv_connect_t *req, int status)
{
    sb_upstream_conn *uc = req->data;
    if (uc->state != UC_CONNECTING)
        return; /* closed meanwhile (timeout or owner gave up): nobody to tell */
    uv_timer_stop(&uc->timer);
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
    if (uv_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read) < 0) {
        sb_upstream_close(uc);
        cb(uc, UV_ECONNRESET, arg);
        return;
    }
    cb(uc, 0, arg);
}

int sb_upstream_acquire(sb_upstream *u, void (*cb)(sb_upstream_conn *, int, void *), void *arg,
                        sb_upstream_conn **out)
{
    if (u->idle) {
        sb_upstream_conn *uc = u->idle;
        unlink_idle(uc);
        uv_timer_stop(&uc->timer);
        uc->on_read = NULL;
        uc->state = UC_OWNED;
        uc->reused = true;
        uc->requests++;
        *out = uc;
        return 1;
    }
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
    int rc = uv_tcp_connect(&uc->connect_req, &uc->tcp, (struct sockaddr *)&u->addr, on_connect);
    if (rc < 0) {
        uc->connect_cb = NULL;
        sb_upstream_close(uc);
        return rc;
    }
    uv_timer_start(&uc->timer, on_connect_timeout, u->opts.connect_ms, 0);
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
static void uc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sb_upstream_conn *uc = s->data;
    if (nread == 0)
        return;
    if (uc->state == UC_OWNED && uc->on_read) {
        uc->on_read(uc, nread, buf);
        return;
    }
    sb_upstream_close(uc);
}

void sb_upstream_pause(sb_upstream_conn *uc)
{
    if (uc->state == UC_OWNED)
        uv_read_stop((uv_stream_t *)&uc->tcp);
}

int sb_upstream_resume(sb_upstream_conn *uc)
{
    if (uc->state != UC_OWNED)
        return UV_EINVAL;
    int rc = uv_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read);
    return rc == UV_EALREADY ? 0 : rc;
}

static void idle_timeout(uv_timer_t *t) { sb_upstream_close(t->data); }

static int sb_upstream_resume_idle(sb_upstream_conn *uc)
{
    int rc = uv_read_start((uv_stream_t *)&uc->tcp, uc_alloc, uc_read);
    return rc == UV_EALREADY ? 0 : rc;
}

void sb_upstream_release(sb_upstream_conn *uc)
{
    sb_upstream *u = uc->up;
    if (uc->state != UC_OWNED)
        return;
    if (u->freeing || u->n_idle >= u->opts.max_idle) {
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
    uv_timer_start(&uc->timer, idle_timeout, u->opts.idle_ms, 0);
    /* Still reading (paused owners are resumed here), so a server closing it is seen. */
    if (sb_upstream_resume_idle(uc) < 0)
        sb_upstream_close(uc);
}
