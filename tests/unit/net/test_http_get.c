/* http_get over upstream: GETs and POSTs against a tiny scripted server on loopback, on the
 * test's own loop. The server reads each request (head, then a Content-Length body) and
 * answers it with the test's script (or never answers); the checks are on the callback's status
 * and body, on the request bytes the server saw, and on the pool's connection counts. */
#include "net/http_get.h"
#include "net/upstream.h"
#include "net_fixture.h"
#include "proto/tokenize.h"

#include <strings.h>

#define SCRIPT_CONNS 8

typedef struct sconn {
    uv_tcp_t tcp;
    struct script *srv;
    char in[1 << 18];
    size_t in_len;
    bool open;
} sconn;

/* The scripted server: answers every request head with `reply` (NULL: never answers) and
 * closes the connection after it if `close_after`. */
typedef struct script {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uint16_t port;
    const char *reply;
    bool close_after;
    int accepted, requests;
    char last_req[8192];
    char last_body[1 << 18];
    size_t last_body_len;
    sconn conns[SCRIPT_CONNS];
} script;

typedef struct result {
    int calls;
    int status;
    char body[4096];
    size_t len;
} result;

static void on_get(void *ud, int status, const char *body, size_t len)
{
    result *r = ud;
    r->calls++;
    r->status = status;
    r->len = len;
    assert_true(len < sizeof(r->body));
    memcpy(r->body, body, len);
    r->body[len] = '\0';
}

static void s_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sconn *c = h->data;
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(sizeof(c->in) - c->in_len - 1));
}

static void s_closed(uv_handle_t *h) { ((sconn *)h->data)->open = false; }

static void s_close(sconn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, s_closed);
}

static void s_written(uv_write_t *w, int status)
{
    sconn *c = w->data;
    free(w);
    if (c->srv->close_after)
        s_close(c);
}

static void s_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    sconn *c = st->data;
    if (nread < 0) {
        s_close(c);
        return;
    }
    c->in_len += (size_t)nread;
    c->in[c->in_len] = '\0';
    char *end;
    while ((end = strstr(c->in, "\r\n\r\n"))) {
        size_t n = (size_t)(end + 4 - c->in);
        /* A body follows the head when it has a Content-Length: wait for all of it. */
        size_t body = 0;
        for (const char *h = c->in; h && h < end; h = strstr(h, "\r\n"), h = h ? h + 2 : NULL)
            if (strncasecmp(h, "Content-Length:", 15) == 0)
                body = strtoul(h + 15, NULL, 10);
        if (c->in_len < n + body)
            break;
        c->srv->requests++;
        memcpy(c->srv->last_req, c->in, n);
        c->srv->last_req[n] = '\0';
        memcpy(c->srv->last_body, c->in + n, body);
        c->srv->last_body_len = body;
        n += body;
        memmove(c->in, c->in + n, c->in_len - n + 1);
        c->in_len -= n;
        if (c->srv->reply) {
            uv_write_t *w = malloc(sizeof(*w));
            assert_non_null(w);
            w->data = c;
            uv_buf_t b = uv_buf_init((char *)c->srv->reply, (unsigned)strlen(c->srv->reply));
            assert_int_equal(uv_write(w, st, &b, 1, s_written), 0);
        }
    }
}

static void s_conn(uv_stream_t *l, int status)
{
    script *s = l->data;
    assert_true(s->accepted < SCRIPT_CONNS);
    sconn *c = &s->conns[s->accepted++];
    c->srv = s;
    c->open = true;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    uv_read_start((uv_stream_t *)&c->tcp, s_alloc, s_read);
}

typedef struct fx {
    uv_loop_t loop;
    script srv;
    sb_upstream *up;
    result r;
} fx;

static fx *fx_start(const char *reply, bool close_after, size_t max_idle)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    script *s = &f->srv;
    s->loop = &f->loop;
    s->reply = reply;
    s->close_after = close_after;
    uv_tcp_init(&f->loop, &s->listener);
    s->listener.data = s;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&s->listener, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 16, s_conn), 0);
    struct sockaddr_in bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.sin_port);
    sb_upstream_opts o = {.connect_ms = 1000, .idle_ms = 30000, .max_idle = max_idle};
    assert_int_equal(sb_upstream_new(&f->loop, "127.0.0.1", s->port, &o, &f->up), 0);
    return f;
}

static void fx_stop(fx *f)
{
    sb_upstream_free(f->up);
    for (int i = 0; i < f->srv.accepted; i++)
        s_close(&f->srv.conns[i]);
    uv_close((uv_handle_t *)&f->srv.listener, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
}

static bool got_answer(void *arg) { return ((result *)arg)->calls > 0; }
static bool got_request(void *arg) { return ((script *)arg)->requests > 0; }

/* Runs the loop until the callback came (the fixture's safety timer fails a GET that never
 * ends). */
static void run_get(fx *f, const char *path, const char *headers, uint32_t timeout_ms, size_t max_body)
{
    sb_http_get *g = NULL;
    f->r = (result){0};
    assert_int_equal(sb_http_get_start(f->up, path, headers, timeout_ms, max_body, on_get, &f->r, &g), 0);
    netfx_run_until(&f->loop, got_answer, &f->r, "the GET's callback");
    assert_int_equal(f->r.calls, 1);
}

static void test_get_with_headers(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, 4);
    run_get(f, "/metrics", "Authorization: Bearer k1\r\n", 1000, 1024);
    assert_int_equal(f->r.status, 200);
    assert_string_equal(f->r.body, "hello");
    char host[64];
    snprintf(host, sizeof(host), "Host: 127.0.0.1:%u\r\n", f->srv.port);
    assert_memory_equal(f->srv.last_req, "GET /metrics HTTP/1.1\r\n", 23);
    assert_non_null(strstr(f->srv.last_req, host));
    assert_non_null(strstr(f->srv.last_req, "\r\nAuthorization: Bearer k1\r\n"));
    fx_stop(f);
}

static void test_status_passed_through(void **state)
{
    fx *f = fx_start("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", false, 4);
    run_get(f, "/health", NULL, 1000, 1024);
    assert_int_equal(f->r.status, 503);
    assert_string_equal(f->r.body, "busy");
    fx_stop(f);
}

static void test_interim_answer_skipped(void **state)
{
    /* A 1xx (here 103 Early Hints) is not the answer: the callback gets the final one. */
    fx *f = fx_start("HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal",
                     false, 4);
    run_get(f, "/metrics", NULL, 1000, 1024);
    assert_int_equal(f->r.status, 200);
    assert_string_equal(f->r.body, "final");
    fx_stop(f);
}

static void test_chunked_answer(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", false, 4);
    run_get(f, "/metrics", NULL, 1000, 1024);
    assert_int_equal(f->r.status, 200);
    assert_string_equal(f->r.body, "abcde");
    /* Complete and keep-alive: the connection went back to the pool. */
    assert_int_equal(sb_upstream_idle_count(f->up), 1);
    fx_stop(f);
}

static void test_body_over_max(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", false, 4);
    run_get(f, "/metrics", NULL, 1000, 9);
    assert_int_equal(f->r.status, UV_E2BIG);
    assert_int_equal(f->r.len, 0);
    /* A connection left mid-answer cannot be reused. */
    assert_int_equal(sb_upstream_idle_count(f->up), 0);
    /* Exactly max_body is fine. */
    run_get(f, "/metrics", NULL, 1000, 10);
    assert_int_equal(f->r.status, 200);
    assert_string_equal(f->r.body, "0123456789");
    fx_stop(f);
}

static void test_timeout(void **state)
{
    /* The server reads the request and never answers: the GET's own timer ends it. */
    fx *f = fx_start(NULL, false, 4);
    run_get(f, "/slots", NULL, 20, 1024);
    assert_int_equal(f->r.status, UV_ETIMEDOUT);
    assert_int_equal(f->srv.requests, 1);
    assert_int_equal(sb_upstream_idle_count(f->up), 0);
    fx_stop(f);
}

static void test_truncated_answer(void **state)
{
    /* The server promises 10 bytes, sends 3 and closes: an error, never a short body. */
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true, 4);
    run_get(f, "/metrics", NULL, 1000, 1024);
    assert_int_equal(f->r.status, UV_ECONNRESET);
    fx_stop(f);
}

static void test_close_delimited_answer(void **state)
{
    /* No length: the body ends with the connection, and is complete then. */
    fx *f = fx_start("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it", true, 4);
    run_get(f, "/metrics", NULL, 1000, 1024);
    assert_int_equal(f->r.status, 200);
    assert_string_equal(f->r.body, "all of it");
    assert_int_equal(sb_upstream_idle_count(f->up), 0);
    fx_stop(f);
}

static void test_connection_reuse(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 4);
    for (int i = 0; i < 3; i++) {
        run_get(f, "/health", NULL, 1000, 1024);
        assert_int_equal(f->r.status, 200);
        assert_string_equal(f->r.body, "ok");
    }
    assert_int_equal(sb_upstream_connects(f->up), 1);
    assert_int_equal(f->srv.accepted, 1);
    assert_int_equal(f->srv.requests, 3);
    fx_stop(f);
}

static bool pool_empty(void *arg)
{
    return sb_upstream_idle_count(arg) == 0;
}

/* The pool's idle deadline and a GET's answer deadline share the connection's timer
 * (sb_upstream_deadline, lazy): a connection reused by a GET and released again is still
 * closed by the pool's idle_ms (the loop's own timer, not the test waiting). */
static void test_idle_deadline_after_reuse(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 4);
    sb_upstream_free(f->up);
    sb_upstream_opts o = {.connect_ms = 1000, .idle_ms = 30, .max_idle = 4};
    assert_int_equal(sb_upstream_new(&f->loop, "127.0.0.1", f->srv.port, &o, &f->up), 0);
    run_get(f, "/health", NULL, 1000, 1024);
    run_get(f, "/health", NULL, 1000, 1024);
    assert_int_equal(sb_upstream_connects(f->up), 1);
    assert_int_equal(sb_upstream_idle_count(f->up), 1);
    netfx_run_until(&f->loop, pool_empty, f->up, "the idle connection closed");
    fx_stop(f);
}

static void test_no_reuse_without_pool(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 0);
    run_get(f, "/health", NULL, 1000, 1024);
    run_get(f, "/health", NULL, 1000, 1024);
    assert_int_equal(f->r.status, 200);
    assert_int_equal(sb_upstream_connects(f->up), 2);
    assert_int_equal(f->srv.accepted, 2);
    fx_stop(f);
}

static void test_connection_refused(void **state)
{
    fx *f = fx_start(NULL, false, 4);
    sb_upstream *up = f->up;
    /* A port nobody listens on: the listener's, once it is closed. */
    uv_close((uv_handle_t *)&f->srv.listener, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    uv_tcp_init(&f->loop, &f->srv.listener); /* closed again by fx_stop */
    run_get(f, "/health", NULL, 1000, 1024);
    assert_int_equal(f->r.status, UV_ECONNREFUSED);
    assert_ptr_equal(f->up, up);
    fx_stop(f);
}

static void test_cancel(void **state)
{
    fx *f = fx_start(NULL, false, 4);
    sb_http_get *g = NULL;
    f->r = (result){0};
    /* Cancelled while connecting, and once more after the request was sent. */
    assert_int_equal(sb_http_get_start(f->up, "/a", NULL, 1000, 1024, on_get, &f->r, &g), 0);
    sb_http_get_cancel(g);
    assert_int_equal(sb_http_get_start(f->up, "/b", "X-Secret: s\r\n", 1000, 1024, on_get, &f->r, &g), 0);
    netfx_run_until(&f->loop, got_request, &f->srv, "the request at the server");
    sb_http_get_cancel(g);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->r.calls, 0);
    /* fx_stop runs the loop dry: a late callback would write into the freed fixture, which
     * the sanitizer reports. */
    fx_stop(f);
}

/* ---- POST (sb_http_request_start), as for an engine's /tokenize ---- */

static void run_request(fx *f, const sb_http_request *req)
{
    sb_http_get *g = NULL;
    f->r = (result){0};
    assert_int_equal(sb_http_request_start(f->up, req, on_get, &f->r, &g), 0);
    netfx_run_until(&f->loop, got_answer, &f->r, "the request's callback");
    assert_int_equal(f->r.calls, 1);
}

static void test_post_tokenize(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 52\r\n\r\n"
                     "{\"count\":3,\"max_model_len\":8192,\"tokens\":[1,22,333]}",
                     false, 4);
    const char *client = "{\"model\":\"alias\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}";
    sb_json j = {0};
    int n = sb_json_parse(&j, client, strlen(client));
    char body[256];
    long len = sb_tokenize_build_body(client, j.tokens, n, "served", 6, body, sizeof body);
    assert_true(len > 0 && (size_t)len < sizeof body);
    sb_http_request req = {.method = "POST",
                           .path = "/tokenize",
                           .accept = "application/json",
                           .body = body,
                           .body_len = (size_t)len,
                           .timeout_ms = 1000,
                           .deadline_from_start = true,
                           .max_body = 4096};
    run_request(f, &req);
    assert_int_equal(f->r.status, 200);
    assert_non_null(strstr(f->srv.last_req, "POST /tokenize HTTP/1.1\r\n"));
    assert_non_null(strstr(f->srv.last_req, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(f->srv.last_req, "Accept: application/json\r\n"));
    assert_int_equal(f->srv.last_body_len, (size_t)len);
    assert_memory_equal(f->srv.last_body, body, (size_t)len);
    uint32_t ids[8];
    size_t n_ids = 0;
    assert_int_equal(sb_tokenize_parse_answer(&j, f->r.body, f->r.len, ids, 8, &n_ids), SB_TOKENIZE_OK);
    assert_int_equal(n_ids, 3);
    assert_int_equal(ids[2], 333);
    sb_json_free(&j);
    /* The body was framed right: the connection is reused for a GET that follows. */
    run_get(f, "/health", NULL, 1000, 4096);
    assert_int_equal(f->srv.accepted, 1);
    assert_int_equal(f->srv.requests, 2);
    assert_non_null(strstr(f->srv.last_req, "GET /health HTTP/1.1\r\n"));
    assert_null(strstr(f->srv.last_req, "Content-Length"));
    fx_stop(f);
}

static void test_post_large_body(void **state)
{
    fx *f = fx_start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 4);
    size_t len = 200000;
    char *body = malloc(len);
    assert_non_null(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)('a' + i % 26);
    sb_http_request req = {.method = "POST",
                           .path = "/tokenize",
                           .body = body,
                           .body_len = len,
                           .content_type = "text/plain",
                           .headers = "Authorization: Bearer k\r\n",
                           .max_body = 64};
    run_request(f, &req);
    free(body); /* copied at start */
    assert_int_equal(f->r.status, 200);
    assert_int_equal(f->srv.last_body_len, len);
    assert_int_equal(f->srv.last_body[len - 1], (char)('a' + (len - 1) % 26));
    assert_non_null(strstr(f->srv.last_req, "Content-Type: text/plain\r\n"));
    assert_non_null(strstr(f->srv.last_req, "Authorization: Bearer k\r\n"));
    fx_stop(f);
}

static void test_post_deadline(void **state)
{
    /* An engine that never answers: the deadline ends the request. */
    fx *f = fx_start(NULL, false, 4);
    sb_http_request req = {.method = "POST",
                           .path = "/tokenize",
                           .body = "{}",
                           .body_len = 2,
                           .timeout_ms = 30,
                           .deadline_from_start = true,
                           .max_body = 64};
    run_request(f, &req);
    assert_int_equal(f->r.status, UV_ETIMEDOUT);
    assert_int_equal(f->srv.requests, 1);
    fx_stop(f);
}

int main(void)
{
    /* clang-format off: one test a line */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_with_headers),
        cmocka_unit_test(test_status_passed_through),
        cmocka_unit_test(test_chunked_answer),
        cmocka_unit_test(test_interim_answer_skipped),
        cmocka_unit_test(test_body_over_max),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_truncated_answer),
        cmocka_unit_test(test_close_delimited_answer),
        cmocka_unit_test(test_connection_reuse),
        cmocka_unit_test(test_idle_deadline_after_reuse),
        cmocka_unit_test(test_no_reuse_without_pool),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_post_tokenize),
        cmocka_unit_test(test_post_large_body),
        cmocka_unit_test(test_post_deadline),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
