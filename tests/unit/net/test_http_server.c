/* http_server: framing, limits, 100-continue, the head hook, lingering close, the body budget,
 * streaming and keep-alive, each checked on the bytes a raw loopback client reads or on the
 * server's stats. One loop runs the server and the client (net_fixture.h). */
#include <http_parser.h>
#include <nghttp2/nghttp2.h>

#include "net/http_server.h"
#include "net_fixture.h"

typedef struct fx {
    uv_loop_t loop;
    sb_http_server *srv;
    netfx_client cl, cl2;
    int handled;             /* handler calls */
    int hooked;              /* head hook calls */
    int aborted;             /* on_abort calls */
    sb_http_req *held;       /* a request the handler keeps unanswered (/hold) */
    char body[256];          /* the last body seen by the handler (truncated) */
    size_t body_len;
} fx;

static void on_abort(sb_http_req *req)
{
    fx *f = req->user;
    f->aborted++;
    if (f->held == req)
        f->held = NULL;
}

static bool path_is(const sb_http_req *req, const char *p)
{
    size_t n = strlen(p);
    return req->path_len >= n && memcmp(req->path, p, n) == 0;
}

static int drained;

/* /drain: once the client read what was queued, finishes the stream. */
static void on_drain(sb_http_req *req)
{
    drained++;
    assert_int_equal(sb_http_stream_write(req, "end", 3), 0);
    assert_int_equal(sb_http_stream_end(req), 0);
}

/* /echo answers the body; /path/... answers the path; /stream streams "ab" "cd"; /abort
 * starts a stream and aborts it; /hold keeps the request for the test to answer. */
static void handler(sb_http_req *req, void *ctx)
{
    fx *f = ctx;
    f->handled++;
    f->body_len = req->body_len;
    memcpy(f->body, req->body, req->body_len < sizeof(f->body) ? req->body_len : sizeof(f->body));
    req->user = f;
    req->on_abort = on_abort;
    if (path_is(req, "/echo")) {
        sb_http_respond(req, 200, "text/plain", NULL, req->body, req->body_len);
    } else if (path_is(req, "/path")) {
        sb_http_respond(req, 200, "text/plain", "X-Test: 1\r\n", req->path, req->path_len);
    } else if (path_is(req, "/stream")) {
        assert_int_equal(sb_http_stream_begin(req, 200, "Content-Type: text/event-stream\r\n", 33, -1), 0);
        assert_int_equal(sb_http_stream_write(req, "ab", 2), 0);
        assert_int_equal(sb_http_stream_write(req, "cd", 2), 0);
        assert_int_equal(sb_http_stream_end(req), 0);
    } else if (path_is(req, "/abort")) {
        assert_int_equal(sb_http_stream_begin(req, 200, "", 0, -1), 0);
        assert_int_equal(sb_http_stream_write(req, "x", 1), 0);
        sb_http_stream_abort(req);
    } else if (path_is(req, "/sized")) {
        assert_int_equal(sb_http_stream_begin(req, 200, "", 0, 4), 0);
        assert_int_equal(sb_http_stream_write(req, "wx", 2), 0);
        assert_int_equal(sb_http_stream_write(req, "yz", 2), 0);
        assert_int_equal(sb_http_stream_end(req), 0);
    } else if (path_is(req, "/drain")) {
        /* 2000 bytes against a 1024-byte high watermark: backpressure at once. */
        static char big[2000];
        memset(big, 'd', sizeof(big));
        req->on_drain = on_drain;
        assert_int_equal(sb_http_stream_begin(req, 200, "", 0, -1), 0);
        assert_int_equal(sb_http_stream_write(req, big, sizeof(big)), 1);
    } else if (path_is(req, "/nocontent")) {
        sb_http_respond(req, 204, "text/plain", NULL, "", 0);
    } else if (path_is(req, "/interim")) {
        /* HTTP/2 has no way to send a 1xx through this call without ending the stream. */
        if (req->h2)
            assert_int_equal(sb_http_respond(req, 100, NULL, NULL, "", 0), -1);
        sb_http_respond(req, 200, "text/plain", NULL, "done", 4);
    } else if (path_is(req, "/hold")) {
        f->held = req;
    } else {
        sb_http_respond(req, 404, NULL, NULL, "{}", 2);
    }
}

/* Refuses /refuse from its head (401), lets everything else through. */
static bool head_hook(sb_http_req *req, void *ctx)
{
    fx *f = ctx;
    f->hooked++;
    if (!path_is(req, "/refuse"))
        return true;
    sb_http_respond(req, 401, NULL, NULL, "{\"error\":\"no key\"}", 18);
    return false;
}

static fx *fx_start(const sb_http_server_opts *opts)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(sb_http_server_start(&f->loop, "127.0.0.1", 0, opts, handler, f, &f->srv), 0);
    sb_http_server_set_head_hook(f->srv, head_hook);
    netfx_connect(&f->loop, &f->cl, sb_http_server_port(f->srv));
    return f;
}

static void fx_stop(fx *f)
{
    netfx_close(&f->cl, false);
    netfx_close(&f->cl2, false);
    sb_http_server_stop(f->srv);
    netfx_loop_finish(&f->loop);
    free(f);
}

static bool sent_all_and_eof(void *arg)
{
    netfx_client *c = arg;
    return c->eof && c->out_off == c->out_len;
}

static bool is_held(void *arg) { return ((fx *)arg)->held != NULL; }
static bool was_aborted(void *arg) { return ((fx *)arg)->aborted > 0; }

static sb_http_server_stats stats(fx *f);
static bool no_connections(void *arg) { return stats(arg).open_connections == 0; }

static sb_http_server_stats stats(fx *f)
{
    sb_http_server_stats s;
    sb_http_server_get_stats(f->srv, &s);
    return s;
}

/* ---- framing ---- */

static void test_content_length(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    netfx_wait_for(&f->loop, &f->cl, "hello");
    assert_non_null(strstr(f->cl.in, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(f->cl.in, "Content-Length: 5\r\n"));
    assert_null(strstr(f->cl.in, "Connection: close"));
    fx_stop(f);
}

static void test_chunked_extensions_trailers(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5;name=value\r\nhello\r\n6;x\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "hello world");
    assert_non_null(strstr(f->cl.in, "Content-Length: 11\r\n"));
    assert_int_equal(f->body_len, 11);
    /* The connection is still usable after the trailer. */
    netfx_sends(&f->cl, "GET /path/next HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/next");
    fx_stop(f);
}

static void test_pipelining_in_order(void **state)
{
    fx *f = fx_start(NULL);
    /* The first request is held; the two behind it must not overtake its answer. */
    netfx_sends(&f->cl, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"
                        "GET /path/b HTTP/1.1\r\nHost: x\r\n\r\n"
                        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nc");
    netfx_run_until(&f->loop, is_held, f, "the held request");
    assert_int_equal(f->handled, 1);
    assert_int_equal(sb_http_respond(f->held, 200, "text/plain", NULL, "first", 5), 0);
    f->held = NULL;
    netfx_wait_for(&f->loop, &f->cl, "\r\n\r\nc");
    char *a = strstr(f->cl.in, "first"), *b = strstr(f->cl.in, "/path/b"), *c = strstr(f->cl.in, "\r\n\r\nc");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a < b && b < c);
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 200 OK"), 3);
    assert_int_equal(f->handled, 3);
    fx_stop(f);
}

static void test_http10(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /path/old HTTP/1.0\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_memory_equal(f->cl.in, "HTTP/1.0 200 OK\r\n", 17);
    assert_non_null(strstr(f->cl.in, "Connection: close\r\n"));
    assert_non_null(strstr(f->cl.in, "\r\n\r\n/path/old"));
    fx_stop(f);
}

static void test_http10_keep_alive(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /path/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/a");
    assert_non_null(strstr(f->cl.in, "Connection: keep-alive\r\n"));
    netfx_sends(&f->cl, "GET /path/b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/b");
    assert_false(f->cl.eof);
    fx_stop(f);
}

/* ---- limits ---- */

static void expect_refusal(const sb_http_server_opts *opts, const char *request, const char *status_line)
{
    fx *f = fx_start(opts);
    netfx_sends(&f->cl, request);
    netfx_wait_eof(&f->loop, &f->cl);
    assert_false(f->cl.reset);
    if (strncmp(f->cl.in, status_line, strlen(status_line)) != 0)
        fail_msg("expected %s, read: %s", status_line, f->cl.in);
    assert_non_null(strstr(f->cl.in, "Connection: close\r\n"));
    assert_int_equal(f->handled, 0);
    assert_int_equal(stats(f).body_bytes, 0);
    fx_stop(f);
}

static void test_body_too_large(void **state)
{
    sb_http_server_opts o = {.max_body_bytes = 100};
    expect_refusal(&o, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", "HTTP/1.1 413 ");
    /* Chunked: refused when the bytes pass the bound, whatever the chunk sizes claim. */
    char req[512];
    char chunk[80];
    memset(chunk, 'a', sizeof(chunk));
    int n = snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                       "50\r\n%.80s\r\n50\r\n%.80s\r\n0\r\n\r\n", chunk, chunk);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    expect_refusal(&o, req, "HTTP/1.1 413 ");
    /* Exactly at the bound is fine. */
    fx *f = fx_start(&o);
    char ok[256];
    memset(chunk, 'b', sizeof(chunk));
    snprintf(ok, sizeof(ok), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n%.80s%.20s", chunk, chunk);
    netfx_sends(&f->cl, ok);
    netfx_wait_for(&f->loop, &f->cl, "Content-Length: 100\r\n");
    assert_int_equal(f->handled, 1);
    fx_stop(f);
}

static void test_header_too_large(void **state)
{
    sb_http_server_opts o = {.max_header_bytes = 1024};
    char req[4096];
    char pad[2000];
    memset(pad, 'v', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    snprintf(req, sizeof(req), "GET /path HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", pad);
    expect_refusal(&o, req, "HTTP/1.1 431 ");
}

static void test_too_many_headers(void **state)
{
    char req[8192];
    size_t n = (size_t)snprintf(req, sizeof(req), "GET /path HTTP/1.1\r\n");
    for (int i = 0; i < 130; i++)
        n += (size_t)snprintf(req + n, sizeof(req) - n, "X-H%d: v\r\n", i);
    snprintf(req + n, sizeof(req) - n, "\r\n");
    expect_refusal(NULL, req, "HTTP/1.1 431 ");
}

static void test_smuggling_and_bad_lengths(void **state)
{
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "0\r\n\r\n", "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
                         "0\r\n\r\n", "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
                   "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 400 ");
    expect_refusal(NULL, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HTTP/1.1 400 ");
}

static void test_slow_head_408(void **state)
{
    /* header_ms is the server's own bound (a libuv timer), not the test waiting. */
    sb_http_server_opts o = {.header_ms = 30};
    fx *f = fx_start(&o);
    netfx_sends(&f->cl, "GET /path HTTP/1.1\r\nHost:");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_memory_equal(f->cl.in, "HTTP/1.1 408 ", 13);
    assert_int_equal(f->handled, 0);
    fx_stop(f);
}

/* ---- 100-continue and the head hook ---- */

static void test_100_continue(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "HTTP/1.1 100 Continue\r\n\r\n");
    assert_int_equal(f->hooked, 1);
    assert_int_equal(f->handled, 0);
    netfx_sends(&f->cl, "hello");
    netfx_wait_for(&f->loop, &f->cl, "hello");
    assert_memory_equal(f->cl.in, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 42);
    fx_stop(f);
}

static void test_head_hook_answers(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "POST /refuse HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_false(f->cl.reset);
    assert_memory_equal(f->cl.in, "HTTP/1.1 401 ", 13);
    assert_null(strstr(f->cl.in, "100 Continue"));
    assert_non_null(strstr(f->cl.in, "Connection: close\r\n"));
    assert_non_null(strstr(f->cl.in, "no key"));
    assert_int_equal(f->hooked, 1);
    assert_int_equal(f->handled, 0);
    assert_int_equal(stats(f).body_bytes, 0);
    /* A request without a body skips the hook and goes to the handler. */
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    netfx_sends(&f->cl2, "GET /path/free HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl2, "/path/free");
    assert_int_equal(f->hooked, 1);
    fx_stop(f);
}

/* A client that writes its whole (large) body before reading still reads the early answer:
 * the server lingers, discarding the body, instead of resetting the connection. */
static void test_lingering_close(void **state)
{
    fx *f = fx_start(NULL);
    size_t body = 4 << 20;
    char head[128];
    int n = snprintf(head, sizeof(head), "POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", body);
    char *req = malloc((size_t)n + body);
    assert_non_null(req);
    memcpy(req, head, (size_t)n);
    memset(req + n, 'z', body);
    netfx_send(&f->cl, req, (size_t)n + body);
    free(req);
    /* The answer and the server's FIN come while the client is still writing; the client
     * goes on writing its whole body (the server reads and drops it) and is never reset. */
    netfx_run_until(&f->loop, sent_all_and_eof, &f->cl, "the whole body written and EOF");
    assert_false(f->cl.reset);
    assert_memory_equal(f->cl.in, "HTTP/1.1 401 ", 13);
    /* The server still lingers, waiting for the client's EOF. */
    assert_int_equal(stats(f).lingering_connections, 1);
    assert_int_equal(stats(f).body_bytes, 0);
    netfx_close(&f->cl, false);
    netfx_run_until(&f->loop, no_connections, f, "the lingering connection to close");
    assert_int_equal(stats(f).lingering_connections, 0);
    fx_stop(f);
}

/* ---- the body budget and stats ---- */

static void test_body_budget(void **state)
{
    sb_http_server_opts o = {.max_buffered_body_bytes = 8192};
    fx *f = fx_start(&o);
    char body[6000];
    memset(body, 'q', sizeof(body));
    char head[128];
    int n = snprintf(head, sizeof(head), "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", sizeof(body));
    netfx_send(&f->cl, head, (size_t)n);
    netfx_send(&f->cl, body, sizeof(body));
    netfx_run_until(&f->loop, is_held, f, "the held request");
    /* The held body is charged (its bytes and the NUL) until it is answered. */
    assert_int_equal(stats(f).body_bytes, sizeof(body) + 1);
    /* A second body does not fit: 503 at once, not a pause. */
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    n = snprintf(head, sizeof(head), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", sizeof(body));
    netfx_send(&f->cl2, head, (size_t)n);
    netfx_send(&f->cl2, body, sizeof(body));
    netfx_wait_eof(&f->loop, &f->cl2);
    assert_memory_equal(f->cl2.in, "HTTP/1.1 503 ", 13);
    assert_non_null(strstr(f->cl2.in, "request_bodies_over_budget"));
    assert_non_null(strstr(f->cl2.in, "Retry-After: 1\r\n"));
    sb_http_server_stats s = stats(f);
    assert_int_equal(s.body_budget_refusals, 1);
    assert_int_equal(s.body_bytes, sizeof(body) + 1);
    assert_int_equal(f->handled, 1);
    /* Answering the held request gives its budget back. */
    assert_int_equal(sb_http_respond(f->held, 200, NULL, NULL, "{}", 2), 0);
    f->held = NULL;
    assert_int_equal(stats(f).body_bytes, 0);
    netfx_wait_for(&f->loop, &f->cl, "{}");
    fx_stop(f);
}

static void test_connection_limit(void **state)
{
    sb_http_server_opts o = {.max_connections = 1};
    fx *f = fx_start(&o);
    netfx_sends(&f->cl, "GET /path/a HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/a");
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    netfx_sends(&f->cl2, "GET /path/b HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl2);
    assert_memory_equal(f->cl2.in, "HTTP/1.1 503 ", 13);
    assert_non_null(strstr(f->cl2.in, "too_many_connections"));
    sb_http_server_stats s = stats(f);
    assert_int_equal(s.refused_total, 1);
    assert_int_equal(s.open_connections, 1);
    fx_stop(f);
}

/* ---- streaming ---- */

static void test_stream_chunked(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "0\r\n\r\n");
    assert_non_null(strstr(f->cl.in, "Transfer-Encoding: chunked\r\n"));
    assert_non_null(strstr(f->cl.in, "Content-Type: text/event-stream\r\n"));
    assert_non_null(strstr(f->cl.in, "\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n"));
    /* HTTP/1.0 has no chunking: the body is delimited by the close. */
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    netfx_sends(&f->cl2, "GET /stream HTTP/1.0\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl2);
    assert_null(strstr(f->cl2.in, "Transfer-Encoding"));
    size_t len = strlen(f->cl2.in);
    assert_true(len > 8);
    assert_string_equal(f->cl2.in + len - 8, "\r\n\r\nabcd");
    fx_stop(f);
}

static void test_stream_abort(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /abort HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    /* The bytes written before the abort arrive; no terminating chunk does. */
    assert_non_null(strstr(f->cl.in, "\r\n\r\n1\r\nx\r\n"));
    assert_null(strstr(f->cl.in, "0\r\n\r\n"));
    assert_int_equal(f->aborted, 0); /* the handler aborted it: no on_abort back to it */
    fx_stop(f);
}

static void test_client_gone_aborts(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_run_until(&f->loop, is_held, f, "the held request");
    netfx_close(&f->cl, true);
    netfx_run_until(&f->loop, was_aborted, f, "on_abort");
    assert_null(f->held);
    assert_int_equal(stats(f).open_connections, 0);
    fx_stop(f);
}

static void test_stream_length_framed(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /sized HTTP/1.1\r\nHost: x\r\n\r\nGET /path/after HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/after");
    assert_non_null(strstr(f->cl.in, "Content-Length: 4\r\n\r\nwxyzHTTP/1.1 200 OK\r\n"));
    assert_null(strstr(f->cl.in, "Transfer-Encoding"));
    fx_stop(f);
}

static void test_stream_backpressure_drain(void **state)
{
    sb_http_server_opts o = {.write_high_water = 1024};
    fx *f = fx_start(&o);
    drained = 0;
    netfx_sends(&f->cl, "GET /drain HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "3\r\nend\r\n0\r\n\r\n");
    assert_int_equal(drained, 1);
    assert_non_null(strstr(f->cl.in, "7d0\r\nddd"));
    fx_stop(f);
}

/* ---- keep-alive ---- */

static void test_idle_timeout(void **state)
{
    /* idle_ms is the server's own bound (a libuv timer): an idle keep-alive connection is
     * closed, quietly (no 408 between requests). */
    sb_http_server_opts o = {.idle_ms = 20};
    fx *f = fx_start(&o);
    netfx_sends(&f->cl, "GET /path/a HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 "), 1);
    assert_null(strstr(f->cl.in, "408"));
    fx_stop(f);
}

/* Keep-alive requests push the connection's deadline back without restarting its timer (a
 * timer heap removal and insertion each): 40 requests answered one after another restart it
 * at most a few times, not once or more per request. The deadlines themselves are pinned by
 * test_idle_timeout and the header timeout tests. */
static size_t want_answers;
static bool has_answers(void *arg)
{
    return netfx_count(arg, "HTTP/1.1 200") >= want_answers;
}

static void test_keep_alive_leaves_timer_running(void **state)
{
    fx *f = fx_start(NULL);
    uint64_t before = stats(f).timer_starts;
    for (want_answers = 1; want_answers <= 40; want_answers++) {
        netfx_sends(&f->cl, "GET /path/k HTTP/1.1\r\nHost: x\r\n\r\n");
        netfx_run_until(&f->loop, has_answers, &f->cl, "an answer");
    }
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 200"), 40);
    assert_true(stats(f).timer_starts - before <= 4);
    fx_stop(f);
}

static void test_set_opts_next_request(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world");
    netfx_wait_for(&f->loop, &f->cl, "hello world");
    /* A reload lowers the body limit: the same connection's next request sees it. */
    sb_http_server_set_opts(f->srv, &(sb_http_server_opts){.max_body_bytes = 10});
    netfx_sends(&f->cl, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_non_null(strstr(f->cl.in, "HTTP/1.1 413 "));
    assert_int_equal(f->handled, 1);
    fx_stop(f);
}

static void test_head_method(void **state)
{
    fx *f = fx_start(NULL);
    /* A HEAD answer has the GET answer's length and no body; the next answer follows it
     * directly on the same connection. */
    netfx_sends(&f->cl, "HEAD /path/abc HTTP/1.1\r\nHost: x\r\n\r\nGET /path/def HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/def");
    assert_null(strstr(f->cl.in, "/path/abc"));
    assert_non_null(strstr(f->cl.in, "Content-Length: 9\r\n\r\nHTTP/1.1 200 OK\r\n"));
    fx_stop(f);
}

static void test_nothing_after_connection_close(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /path/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                        "GET /path/b HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_non_null(strstr(f->cl.in, "/path/a"));
    assert_null(strstr(f->cl.in, "/path/b"));
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 "), 1);
    assert_int_equal(f->handled, 1);
    fx_stop(f);
}

/* ---- drain ---- */

static bool no_held(void *arg)
{
    return ((fx *)arg)->held == NULL;
}

static void test_drain_closes_idle_and_closes_after_the_next_answer(void **state)
{
    fx *f = fx_start(NULL);
    /* cl: one answer read, now idle (keep-alive); cl2: a request in progress. */
    netfx_sends(&f->cl, "GET /path/a HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "/path/a");
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    netfx_sends(&f->cl2, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_run_until(&f->loop, is_held, f, "the held request");
    sb_http_server_drain(f->srv);
    sb_http_server_drain(f->srv); /* idempotent */
    /* The idle connection is closed at once; the busy one is untouched. */
    netfx_wait_eof(&f->loop, &f->cl);
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 "), 1);
    assert_int_equal(sb_http_server_connections(f->srv), 1);
    assert_int_equal(f->aborted, 0);
    /* Its answer closes the connection, and carries the id the handler gave the request. */
    snprintf(f->held->id, sizeof f->held->id, "rid-7");
    assert_int_equal(sb_http_respond(f->held, 200, "text/plain", NULL, "ok", 2), 0);
    f->held = NULL;
    netfx_wait_eof(&f->loop, &f->cl2);
    assert_non_null(strstr(f->cl2.in, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(f->cl2.in, "x-request-id: rid-7\r\n"));
    assert_non_null(strstr(f->cl2.in, "Connection: close\r\n"));
    netfx_run_until(&f->loop, no_connections, f, "every connection closed");
    fx_stop(f); /* stopping a drained server: its listener is closed already */
}

static void test_cut_aborts_what_runs(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_run_until(&f->loop, is_held, f, "the held request");
    sb_http_server_drain(f->srv);
    sb_http_server_cut(f->srv);
    netfx_run_until(&f->loop, no_held, f, "on_abort");
    assert_int_equal(f->aborted, 1);
    netfx_wait_eof(&f->loop, &f->cl);
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 "), 0);
    assert_int_equal(sb_http_server_connections(f->srv), 0);
    fx_stop(f);
}

static void test_keep_alive_reuse(void **state)
{
    fx *f = fx_start(NULL);
    for (int i = 0; i < 5; i++) {
        char req[128], want[32];
        snprintf(req, sizeof(req), "GET /path/%d HTTP/1.1\r\nHost: x\r\n\r\n", i);
        snprintf(want, sizeof(want), "/path/%d", i);
        netfx_sends(&f->cl, req);
        netfx_wait_for(&f->loop, &f->cl, want);
    }
    assert_int_equal(netfx_count(&f->cl, "HTTP/1.1 200 OK"), 5);
    assert_false(f->cl.eof);
    assert_int_equal(stats(f).open_connections, 1);
    /* Connection: close from the client: answered, then closed. */
    netfx_sends(&f->cl, "GET /path/last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    netfx_wait_eof(&f->loop, &f->cl);
    assert_non_null(strstr(f->cl.in, "/path/last"));
    fx_stop(f);
}

/* ---- writes made outside the poll phase ---- */

static bool later_fired;
static void on_later(uv_timer_t *t)
{
    later_fired = true;
}
static void on_answer_timer(uv_timer_t *t)
{
    fx *f = t->data;
    /* A stream's head and an event, as the simulator writes a token (no flush of its own). */
    assert_int_equal(sb_http_stream_begin(f->held, 200, "", 0, -1), 0);
    assert_int_equal(sb_http_stream_write(f->held, "late", 4), 0);
}

/* An answer written from a timer (as the simulator writes each token, or as a queued request
 * is answered at its deadline) leaves in that loop iteration: the poll that follows does not
 * block until the next timer or I/O first. (It did: the flush ran after the poll, so every
 * streamed first token through the simulator came one decode step late, ~6 ms.) The next timer
 * here is 1 s away: the answer must be read before it fires. An ordering, not a timing. */
static void test_write_from_timer_is_not_held_by_the_poll(void **state)
{
    fx *f = fx_start(NULL);
    netfx_sends(&f->cl, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_run_until(&f->loop, is_held, f, "the held request");
    uv_timer_t answer, later;
    uv_timer_init(&f->loop, &answer);
    uv_timer_init(&f->loop, &later);
    answer.data = f;
    later_fired = false;
    uv_timer_start(&answer, on_answer_timer, 0, 0);
    uv_timer_start(&later, on_later, 1000, 0);
    netfx_wait_for(&f->loop, &f->cl, "late");
    assert_false(later_fired);
    assert_int_equal(sb_http_stream_end(f->held), 0);
    f->held = NULL;
    netfx_wait_for(&f->loop, &f->cl, "0\r\n\r\n");
    uv_close((uv_handle_t *)&answer, NULL);
    uv_close((uv_handle_t *)&later, NULL);
    fx_stop(f);
}

/* ---- the first bytes choose HTTP/2 (the h2c preface) or HTTP/1.1 ---- */

static bool sent_all(void *arg)
{
    netfx_client *c = arg;
    return c->out_off == c->out_len;
}

/* Sends bytes and lets the server read them before anything else is sent: each piece is
 * its own read on the server's side. */
static void send_piece(fx *f, const char *p, size_t n)
{
    netfx_send(&f->cl, p, n);
    netfx_run_until(&f->loop, sent_all, &f->cl, "bytes sent");
    for (int i = 0; i < 4; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

static bool server_settings_read(void *arg)
{
    netfx_client *c = arg;
    return c->in_len >= 9 && c->in[3] == 0x4; /* a frame header: type SETTINGS */
}

/* The preface split over reads (a byte, then some, then the rest with the client's SETTINGS)
 * still makes the connection HTTP/2: the server answers with its SETTINGS frame. */
static void test_h2c_preface_in_pieces(void **state)
{
    fx *f = fx_start(NULL);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    static const char settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    send_piece(f, preface, 1);
    send_piece(f, preface + 1, 10);
    assert_int_equal(f->cl.in_len, 0); /* nothing decided yet, nothing answered */
    send_piece(f, preface + 11, sizeof(preface) - 1 - 11);
    netfx_send(&f->cl, settings, sizeof settings);
    netfx_run_until(&f->loop, server_settings_read, &f->cl, "the server's SETTINGS");
    assert_int_equal(stats(f).h2_connections, 1);
    assert_int_equal(f->handled, 0);
    fx_stop(f);
}

/* An HTTP/1.1 request whose first byte arrives alone ("P", as a preface would begin) is
 * replayed whole to HTTP/1.1; so is one that matches the preface for 18 bytes. */
static void test_http1_first_byte_alone(void **state)
{
    fx *f = fx_start(NULL);
    send_piece(f, "P", 1);
    netfx_sends(&f->cl, "OST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
    netfx_wait_for(&f->loop, &f->cl, "\r\n\r\nhi");
    assert_non_null(strstr(f->cl.in, "HTTP/1.1 200"));
    assert_int_equal(f->body_len, 2);
    assert_int_equal(stats(f).h2_connections, 0);
    netfx_close(&f->cl, false);
    netfx_connect(&f->loop, &f->cl2, sb_http_server_port(f->srv));
    netfx_sends(&f->cl2, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl2, "HTTP/1.1 400");
    assert_int_equal(stats(f).h2_connections, 0);
    fx_stop(f);
}

/* h2_off: the preface is HTTP/1.1's to refuse (400), as before HTTP/2 existed here. */
static void test_h2_off_leaves_the_preface_to_http1(void **state)
{
    sb_http_server_opts o = {.h2_off = true};
    fx *f = fx_start(&o);
    netfx_sends(&f->cl, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    netfx_wait_for(&f->loop, &f->cl, "HTTP/1.1 400");
    assert_int_equal(stats(f).h2_connections, 0);
    fx_stop(f);
}

/* ---- HTTP/2 streams (raw frames: literal HPACK out, frame headers in) ---- */

static size_t h2_frame(char *out, uint8_t type, uint8_t flags, uint32_t sid, const char *payload, size_t n)
{
    out[0] = (char)(n >> 16), out[1] = (char)(n >> 8), out[2] = (char)n;
    out[3] = (char)type, out[4] = (char)flags;
    out[5] = (char)(sid >> 24), out[6] = (char)(sid >> 16), out[7] = (char)(sid >> 8), out[8] = (char)sid;
    memcpy(out + 9, payload, n);
    return 9 + n;
}

/* Literal header field without indexing, new name (RFC 7541 6.2.2); names and values < 127. */
static size_t hpack_field(char *out, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    out[0] = 0;
    out[1] = (char)nl;
    memcpy(out + 2, name, nl);
    out[2 + nl] = (char)vl;
    memcpy(out + 3 + nl, value, vl);
    return 3 + nl + vl;
}

/* Sends the preface, empty SETTINGS and one request without a body on stream 1. */
static void h2_request(fx *f, const char *method, const char *path)
{
    char blk[256], buf[512];
    size_t n = hpack_field(blk, ":method", method);
    n += hpack_field(blk + n, ":scheme", "http");
    n += hpack_field(blk + n, ":path", path);
    n += hpack_field(blk + n, ":authority", "x");
    memcpy(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    size_t len = 24 + h2_frame(buf + 24, 0x4, 0, 0, "", 0);
    len += h2_frame(buf + len, 0x1, 0x1 | 0x4, 1, blk, n); /* END_STREAM | END_HEADERS */
    netfx_send(&f->cl, buf, len);
}

/* The frames the server sent on stream 1: a bit per type seen, and whether one ended it. */
static unsigned stream1_frames(const netfx_client *c, bool *ended)
{
    unsigned seen = 0;
    *ended = false;
    for (size_t off = 0; off + 9 <= c->in_len;) {
        const uint8_t *h = (const uint8_t *)c->in + off;
        size_t n = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
        if (off + 9 + n > c->in_len)
            break;
        uint32_t sid = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffff;
        if (sid == 1) {
            seen |= 1u << h[3];
            *ended |= (h[3] == 0x0 || h[3] == 0x1) && (h[4] & 0x1);
        }
        off += 9 + n;
    }
    return seen;
}

static bool stream1_done(void *arg)
{
    bool ended;
    unsigned seen = stream1_frames(arg, &ended);
    return ended || (seen & 1u << 0x3); /* END_STREAM, or RST_STREAM */
}

/* A HEAD answer streamed over HTTP/2 behaves as on HTTP/1.1: the HEADERS frame ends the
 * stream, the handler's writes are dropped and its end succeeds (/sized asserts both). */
static void test_h2_head_streamed(void **state)
{
    fx *f = fx_start(NULL);
    h2_request(f, "HEAD", "/sized");
    netfx_run_until(&f->loop, stream1_done, &f->cl, "stream 1's end");
    bool ended;
    unsigned seen = stream1_frames(&f->cl, &ended);
    assert_true(ended);
    assert_int_equal(seen, 1u << 0x1); /* HEADERS only: no DATA, no RST_STREAM */
    assert_int_equal(f->handled, 1);
    fx_stop(f);
}

/* A 1xx through sb_http_respond is refused on HTTP/2 (it would end the stream); the final
 * answer that follows goes out whole. */
static void test_h2_interim_refused(void **state)
{
    fx *f = fx_start(NULL);
    h2_request(f, "GET", "/interim");
    netfx_run_until(&f->loop, stream1_done, &f->cl, "stream 1's end");
    bool ended;
    unsigned seen = stream1_frames(&f->cl, &ended);
    assert_true(ended);
    assert_int_equal(seen, 1u << 0x1 | 1u << 0x0); /* HEADERS and DATA */
    assert_non_null(memmem(f->cl.in, f->cl.in_len, "done", 4));
    fx_stop(f);
}

/* Whether stream 1's HEADERS block (the first, unpadded, as nghttp2 sends it) names `field`. */
static bool stream1_head_has(const netfx_client *c, const char *field)
{
    nghttp2_hd_inflater *inf;
    assert_int_equal(nghttp2_hd_inflate_new(&inf), 0);
    bool found = false;
    for (size_t off = 0; off + 9 <= c->in_len;) {
        const uint8_t *h = (const uint8_t *)c->in + off;
        size_t n = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
        uint32_t sid = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffff;
        if (h[3] == 0x1 && sid == 1) {
            const uint8_t *in = h + 9;
            size_t left = n;
            for (;;) {
                nghttp2_nv nv;
                int flags = 0;
                ssize_t rv = nghttp2_hd_inflate_hd2(inf, &nv, &flags, in, left, 1);
                assert_true(rv >= 0);
                in += rv;
                left -= (size_t)rv;
                if (flags & NGHTTP2_HD_INFLATE_EMIT)
                    found |= nv.namelen == strlen(field) && !memcmp(nv.name, field, nv.namelen);
                if (flags & NGHTTP2_HD_INFLATE_FINAL)
                    break;
            }
            break;
        }
        off += 9 + n;
    }
    nghttp2_hd_inflate_del(inf);
    return found;
}

/* 204 over HTTP/2: no content-type (and no body), though the handler named one. */
static void test_h2_no_content_has_no_type(void **state)
{
    fx *f = fx_start(NULL);
    h2_request(f, "GET", "/nocontent");
    netfx_run_until(&f->loop, stream1_done, &f->cl, "stream 1's end");
    bool ended;
    assert_int_equal(stream1_frames(&f->cl, &ended), 1u << 0x1);
    assert_true(stream1_head_has(&f->cl, ":status"));
    assert_false(stream1_head_has(&f->cl, "content-type"));
    fx_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2c_preface_in_pieces),
        cmocka_unit_test(test_http1_first_byte_alone),
        cmocka_unit_test(test_h2_off_leaves_the_preface_to_http1),
        cmocka_unit_test(test_h2_head_streamed),
        cmocka_unit_test(test_h2_interim_refused),
        cmocka_unit_test(test_h2_no_content_has_no_type),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked_extensions_trailers),
        cmocka_unit_test(test_pipelining_in_order),
        cmocka_unit_test(test_http10),
        cmocka_unit_test(test_http10_keep_alive),
        cmocka_unit_test(test_body_too_large),
        cmocka_unit_test(test_header_too_large),
        cmocka_unit_test(test_smuggling_and_bad_lengths),
        cmocka_unit_test(test_slow_head_408),
        cmocka_unit_test(test_100_continue),
        cmocka_unit_test(test_head_hook_answers),
        cmocka_unit_test(test_lingering_close),
        cmocka_unit_test(test_body_budget),
        cmocka_unit_test(test_connection_limit),
        cmocka_unit_test(test_stream_chunked),
        cmocka_unit_test(test_stream_abort),
        cmocka_unit_test(test_client_gone_aborts),
        cmocka_unit_test(test_keep_alive_reuse),
        cmocka_unit_test(test_drain_closes_idle_and_closes_after_the_next_answer),
        cmocka_unit_test(test_cut_aborts_what_runs),
        cmocka_unit_test(test_head_method),
        cmocka_unit_test(test_nothing_after_connection_close),
        cmocka_unit_test(test_too_many_headers),
        cmocka_unit_test(test_stream_length_framed),
        cmocka_unit_test(test_stream_backpressure_drain),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_keep_alive_leaves_timer_running),
        cmocka_unit_test(test_set_opts_next_request),
        cmocka_unit_test(test_write_from_timer_is_not_held_by_the_poll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
