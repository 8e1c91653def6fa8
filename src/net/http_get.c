#include "net/http_get.h"

#include <http_parser.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/alloc.h"
#include "base/buf.h"

struct sb_http_get {
    sb_upstream *up;
    sb_upstream_conn *uc;
    http_parser parser;
    sb_buf request;
    bool wipe_request;  /* it carries credentials: wiped before it is freed */
    sb_buf body;
    size_t max_body;
    uint32_t timeout_ms;
    bool deadline_from_start;
    uint64_t started_ns; /* uv_hrtime() at the call, for deadline_from_start */
    sb_http_get_cb cb;
    void *ud;
    bool complete;
    bool too_big;
    bool writing;     /* a write is in flight: its callback frees nothing, just clears this */
    bool dead;        /* finished or cancelled while the write was in flight */
};

/* Defined (const) after its callbacks, before sb_http_get_start. */
static const http_parser_settings settings;

static void get_free(sb_http_get *g)
{
    if (g->writing) {
        g->dead = true;
        return;
    }
    if (g->wipe_request && g->request.data)
        OPENSSL_cleanse(g->request.data, g->request.cap);
    sb_buf_free(&g->request);
    sb_buf_free(&g->body);
    sb_free(g);
}

static void drop_conn(sb_http_get *g, bool reusable)
{
    sb_upstream_conn *uc = g->uc;
    if (!uc)
        return;
    g->uc = NULL;
    sb_upstream_deadline(uc, 0, NULL);
    uc->timer.data = uc;
    uc->owner = NULL;
    uc->on_read = NULL;
    if (reusable)
        sb_upstream_release(uc);
    else
        sb_upstream_close(uc);
}

static void finish(sb_http_get *g, int status)
{
    bool reusable = status >= 100 && g->complete && http_should_keep_alive(&g->parser);
    drop_conn(g, reusable);
    sb_http_get_cb cb = g->cb;
    g->cb = NULL;
    if (cb)
        cb(g->ud, status, g->body.data ? g->body.data : "", g->body.len);
    get_free(g);
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    sb_http_get *g = p->data;
    if (g->body.len + len > g->max_body) {
        g->too_big = true;
        return -1;
    }
    return sb_buf_append(&g->body, at, len);
}

static int on_complete(http_parser *p)
{
    sb_http_get *g = p->data;
    /* A 1xx other than 101 (103 Early Hints, a stray 100 Continue) is interim: the answer
     * follows on the same connection. Taking it for the answer would report it with no body
     * and pool a connection whose real answer is still on the way. */
    if (p->status_code >= 100 && p->status_code < 200 && p->status_code != 101)
        return 0;
    g->complete = true;
    http_parser_pause(p, 1);
    return 0;
}

static void on_read(sb_upstream_conn *uc, ssize_t nread, const uv_buf_t *buf)
{
    sb_http_get *g = uc->owner;
    if (nread == 0)
        return;
    if (nread < 0) {
        if (nread == UV_EOF)
            http_parser_execute(&g->parser, &settings, NULL, 0);
        finish(g, g->complete ? (int)g->parser.status_code : (nread == UV_EOF ? UV_ECONNRESET : (int)nread));
        return;
    }
    http_parser_execute(&g->parser, &settings, buf->base, (size_t)nread);
    if (g->complete) {
        finish(g, (int)g->parser.status_code);
        return;
    }
    if (HTTP_PARSER_ERRNO(&g->parser) != HPE_OK)
        finish(g, g->too_big ? UV_E2BIG : UV_EPROTO);
}

static void on_timeout(sb_upstream_conn *uc)
{
    finish(uc->owner, UV_ETIMEDOUT);
}

static void on_written(uv_write_t *w, int status)
{
    sb_http_get *g = w->data;
    sb_free(w);
    g->writing = false;
    if (g->dead) {
        get_free(g);
        return;
    }
    if (status < 0 && g->uc)
        finish(g, status);
}

static void send_get(sb_http_get *g)
{
    sb_upstream_conn *uc = g->uc;
    uc->owner = g;
    uc->on_read = on_read;
    uc->timer.data = uc;
    uv_write_t *w = sb_malloc(sizeof(*w));
    if (!w) {
        finish(g, UV_ENOMEM);
        return;
    }
    w->data = g;
    uv_buf_t b = uv_buf_init(g->request.data, (unsigned)g->request.len);
    if (sb_upstream_write(uc, w, &b, 1, on_written) < 0) {
        sb_free(w);
        finish(g, UV_ECONNRESET);
        return;
    }
    g->writing = true;
    uint64_t wait_ms = g->timeout_ms;
    if (g->deadline_from_start) {
        /* What the connect took comes off the deadline; at least 1 ms is left to the answer,
         * so an expiry is always reported by the timer, never inline. */
        uint64_t spent_ms = (uv_hrtime() - g->started_ns) / 1000000;
        wait_ms = spent_ms < g->timeout_ms ? g->timeout_ms - spent_ms : 1;
    }
    /* The connection's deadline, not its timer directly: the pool keeps its idle deadline
     * lazily on the same timer (sb_upstream_deadline). */
    sb_upstream_deadline(uc, wait_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)wait_ms, on_timeout);
    uc->on_read = on_read;
}

static void on_connected(sb_upstream_conn *uc, int status, void *arg)
{
    sb_http_get *g = arg;
    if (status < 0) {
        g->uc = NULL;
        finish(g, status);
        return;
    }
    g->uc = uc;
    if (!g->cb) {
        /* Cancelled while connecting. */
        drop_conn(g, true);
        get_free(g);
        return;
    }
    send_get(g);
}

static const http_parser_settings settings = {.on_body = on_body, .on_message_complete = on_complete};

int sb_http_get_start(sb_upstream *u, const char *path, const char *headers, uint32_t timeout_ms, size_t max_body,
                      sb_http_get_cb cb, void *ud, sb_http_get **out)
{
    sb_http_request req = {.path = path, .headers = headers, .timeout_ms = timeout_ms, .max_body = max_body};
    return sb_http_request_start(u, &req, cb, ud, out);
}

int sb_http_request_start(sb_upstream *u, const sb_http_request *req, sb_http_get_cb cb, void *ud, sb_http_get **out)
{
    sb_http_get *g = sb_calloc(1, sizeof(*g));
    if (!g)
        return UV_ENOMEM;
    g->up = u;
    g->cb = cb;
    g->ud = ud;
    g->max_body = req->max_body;
    g->timeout_ms = req->timeout_ms ? req->timeout_ms : 1000;
    g->deadline_from_start = req->deadline_from_start;
    g->started_ns = uv_hrtime();
    http_parser_init(&g->parser, HTTP_RESPONSE);
    g->parser.data = g;
    const char *method = req->method ? req->method : "GET";
    const char *headers = req->headers;
    size_t body_len = req->body ? req->body_len : 0;
    /* Room first when credentials go in, so no realloc leaves a copy of them in freed memory. */
    g->wipe_request = headers != NULL;
    int rc = 0;
    if (headers && sb_buf_reserve(&g->request, strlen(req->path) + strlen(headers) + body_len + 320) < 0)
        rc = -1;
    if (!rc)
        rc = sb_buf_printf(&g->request, "%s %s HTTP/1.1\r\nHost: %s\r\nAccept: %s\r\nUser-Agent: switchboard\r\n%s",
                           method, req->path, sb_upstream_address(u), req->accept ? req->accept : "text/plain",
                           headers ? headers : "");
    if (!rc && body_len)
        rc = sb_buf_printf(&g->request, "Content-Type: %s\r\nContent-Length: %zu\r\n",
                           req->content_type ? req->content_type : "application/json", body_len);
    if (!rc)
        rc = sb_buf_append(&g->request, "\r\n", 2);
    if (!rc && body_len)
        rc = sb_buf_append(&g->request, req->body, body_len);
    if (rc < 0) {
        get_free(g);
        return UV_ENOMEM;
    }
    sb_upstream_conn *uc = NULL;
    rc = sb_upstream_acquire(u, on_connected, g, &uc);
    if (rc < 0) {
        get_free(g);
        return rc;
    }
    *out = g;
    if (rc == 1) {
        g->uc = uc;
        send_get(g);
    } else {
        /* Connecting: the connect timeout is the pool's; the response timeout starts once
         * the request is written. */
        g->uc = NULL;
    }
    return 0;
}

void sb_http_get_cancel(sb_http_get *g)
{
    g->cb = NULL;
    if (g->uc) {
        drop_conn(g, false);
        get_free(g);
    } else {
        /* Still connecting: the pool will call on_connected; finish() then frees quietly. */
    }
}
