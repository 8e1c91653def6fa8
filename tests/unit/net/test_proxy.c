/* The proxy's state machine driven without a gateway: a test owner fills in the sb_proxy_env
 * (router, counters, callbacks), scripted upstreams answer on loopback, a raw client
 * (net_fixture.h) sends requests through an sb_http_server whose handler starts the exchange.
 * Everything runs on one loop; nothing sleeps: the loop runs until what the test waits for
 * has happened. The only time that passes is the proxy's own response timer, set to tens of
 * milliseconds where a test is about timeouts.
 *
 * Each upstream endpoint is a libuv listener (or a closed port: it refuses) whose accepted
 * connections hand every whole request to the test's script, which answers, holds, closes or
 * resets as the case needs. */
#include "net_fixture.h"

#include "core/sched.h"
#include "net/proxy.h"

#define ANSWER "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
#define REQUEST_BODY "{\"model\":\"m\",\"messages\":[]}"
#define SSE_HEAD "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
#define SSE_CHUNK "a\r\ndata: hi\n\n\r\n"

#define MAX_EPS 2
#define MAX_CONNS 4

typedef struct harness harness;

/* One connection the scripted upstream accepted. */
typedef struct up_conn {
    uv_tcp_t tcp;
    harness *h;
    int ep, index; /* endpoint, and order of acceptance there */
    char in[8192]; /* the request being read */
    size_t in_len;
    int requests; /* whole requests read on this connection */
    bool eof;     /* the proxy closed it (EOF or reset seen) */
    bool closing;
} up_conn;

typedef struct scripted_ep {
    uv_tcp_t listener;
    int accepted;
    up_conn conns[MAX_CONNS];
} scripted_ep;

struct harness {
    uv_loop_t loop;
    /* the owner's side of the env */
    sb_router *router;
    sb_gateway_counters counters;
    sb_config cfg;
    sb_pool_config pool_cfg;
    sb_snapshot snap;
    sb_upstream *up[MAX_EPS];
    size_t n_eps;
    sb_proxy_env env;
    int begun, ended, recorded, errors;
    int recorded_status, error_status, recorded_retries, recorded_ep;
    char recorded_outcome[32];
    /* the scripted upstreams: script() sees every whole request */
    scripted_ep eps[MAX_EPS];
    void (*script)(harness *h, up_conn *c);
    char last_request[8192];
    /* the server and the client */
    sb_http_server *srv;
    netfx_client client;
};

/* ---- the env: what an owner gives the proxy ---- */

static sb_upstream *env_upstream(void *owner, uint32_t pool, uint32_t ep)
{
    harness *h = owner;
    assert_int_equal(pool, 0);
    assert_true(ep < h->n_eps);
    return h->up[ep];
}

static sb_snapshot *env_begin(void *owner)
{
    harness *h = owner;
    h->begun++;
    h->snap.refs++;
    return &h->snap;
}

static void env_end(void *owner, sb_snapshot *snap, uint32_t pool)
{
    harness *h = owner;
    assert_ptr_equal(snap, &h->snap);
    assert_int_equal(pool, 0);
    h->snap.refs--;
    h->ended++;
}

static void env_record(void *owner, const sb_exchange_log *log)
{
    harness *h = owner;
    h->recorded++;
    h->recorded_status = log->status;
    h->recorded_retries = log->retries;
    h->recorded_ep = log->ep;
    snprintf(h->recorded_outcome, sizeof(h->recorded_outcome), "%s", log->outcome);
}

static void env_error(void *owner, sb_http_req *req, int status, const char *message, const char *type,
                      const char *code)
{
    harness *h = owner;
    h->errors++;
    h->error_status = status;
    char body[256];
    int n = snprintf(body, sizeof(body), "{\"code\":\"%s\"}", code ? code : "");
    sb_http_respond(req, status, "application/json", NULL, body, (size_t)n);
}

/* ---- scripted upstream ---- */

static void on_up_closed(uv_handle_t *hd) {}

static void up_close(up_conn *c, bool reset)
{
    if (c->closing)
        return;
    c->closing = true;
    if (reset)
        uv_tcp_close_reset(&c->tcp, on_up_closed);
    else
        uv_close((uv_handle_t *)&c->tcp, on_up_closed);
}

typedef struct up_write_req {
    uv_write_t w;
    char data[];
} up_write_req;

static void on_up_written(uv_write_t *w, int status)
{
    free(w);
}

/* Writes a copy of data (the copy lives until the write completes). */
static void up_write(up_conn *c, const char *data, size_t len)
{
    up_write_req *r = malloc(sizeof(*r) + len);
    assert_non_null(r);
    memcpy(r->data, data, len);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)len);
    assert_int_equal(uv_write(&r->w, (uv_stream_t *)&c->tcp, &b, 1, on_up_written), 0);
}

static void up_writes(up_conn *c, const char *s)
{
    up_write(c, s, strlen(s));
}

static void up_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    up_conn *c = handle->data;
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(sizeof(c->in) - 1 - c->in_len));
}

/* True when c->in holds a whole request: its head and the body its Content-Length declares. */
static bool whole_request(const up_conn *c)
{
    const char *end = strstr(c->in, "\r\n\r\n");
    const char *cl = strstr(c->in, "Content-Length: ");
    return end && cl && c->in_len >= (size_t)(end + 4 - c->in) + strtoul(cl + 16, NULL, 10);
}

static void up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    up_conn *c = s->data;
    if (n < 0) {
        c->eof = true;
        up_close(c, false);
        return;
    }
    c->in_len += (size_t)n;
    c->in[c->in_len] = '\0';
    assert_true(c->in_len < sizeof(c->in) - 1);
    if (!whole_request(c))
        return;
    c->requests++;
    memcpy(c->h->last_request, c->in, c->in_len + 1);
    c->in_len = 0;
    c->in[0] = '\0';
    c->h->script(c->h, c);
}

static void up_accept(uv_stream_t *l, int status)
{
    harness *h = l->data;
    assert_int_equal(status, 0);
    int ep = (int)((scripted_ep *)l - h->eps);
    scripted_ep *e = &h->eps[ep];
    assert_true(e->accepted < MAX_CONNS);
    up_conn *c = &e->conns[e->accepted];
    *c = (up_conn){.h = h, .ep = ep, .index = e->accepted++};
    uv_tcp_init(&h->loop, &c->tcp);
    c->tcp.data = c;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    uv_read_start((uv_stream_t *)&c->tcp, up_alloc, up_read);
}

/* ---- the server's handler: every request goes to the proxy for pool 0 ---- */

static void handler(sb_http_req *req, void *ctx)
{
    harness *h = ctx;
    sb_proxy_target t = {.pool = 0, .adapter = -1, .model = "m", .key_band = -1, .band = -1};
    sb_sched_request rr = {.pool = 0, .adapter = -1, .profile = sb_router_pool_profile(h->router, 0)};
    sb_proxy_start(&h->env, req, &t, &rr);
}

/* ---- set-up and tear-down ---- */

typedef struct setup {
    size_t n_eps;
    unsigned dead;           /* bit i: endpoint i refuses connections */
    uint32_t response_ms;    /* 0: 5000 */
    size_t write_high_water; /* 0: the server's default */
    int client_rcvbuf;       /* 0: the system's */
    void (*script)(harness *h, up_conn *c);
    void (*retry)(sb_retry_policy *p); /* adjusts the default retry policy; NULL: as is */
} setup;

/* Router (round robin over n_eps endpoints: the first pick is endpoint 0), upstreams,
 * server, and a connected client. */
static harness *start(const setup *s)
{
    harness *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    assert_int_equal(uv_loop_init(&h->loop), 0);
    h->n_eps = s->n_eps;
    h->script = s->script;
    h->router = sb_router_new(1, 1);
    assert_non_null(h->router);
    sb_pool_params pp = {0};
    assert_int_equal(sb_router_add_pool(h->router, "p", sb_profile_builtin("round-robin"), (uint32_t)s->n_eps, &pp), 0);
    static const char *const names[MAX_EPS] = {"ep0", "ep1"};
    for (size_t i = 0; i < s->n_eps; i++)
        sb_router_endpoint(h->router, 0, (uint32_t)i)->address = names[i];
    assert_int_equal(sb_router_build_ring(h->router, 0), 0);
    assert_true(sb_router_add_model(h->router, 0, "m", SB_MODEL_SERVED) >= 0);
    h->cfg.pools = &h->pool_cfg;
    h->cfg.n_pools = 1;
    h->cfg.response_ms = s->response_ms ? s->response_ms : 5000;
    h->cfg.retry = sb_retry_policy_default();
    if (s->retry)
        s->retry(&h->cfg.retry);
    h->snap = (sb_snapshot){.cfg = &h->cfg, .refs = 1};
    h->env = (sb_proxy_env){.router = h->router,
                            .loop = &h->loop,
                            .counters = &h->counters,
                            .owner = h,
                            .upstream = env_upstream,
                            .begin = env_begin,
                            .end = env_end,
                            .record = env_record,
                            .error = env_error};

    for (size_t i = 0; i < s->n_eps; i++) {
        /* A dead endpoint's listener is bound but never listens: its port refuses. */
        struct sockaddr_in a;
        uv_ip4_addr("127.0.0.1", 0, &a);
        uv_tcp_init(&h->loop, &h->eps[i].listener);
        h->eps[i].listener.data = h;
        assert_int_equal(uv_tcp_bind(&h->eps[i].listener, (struct sockaddr *)&a, 0), 0);
        struct sockaddr_storage bound;
        int len = sizeof(bound);
        uv_tcp_getsockname(&h->eps[i].listener, (struct sockaddr *)&bound, &len);
        if (!(s->dead & (1u << i)))
            assert_int_equal(uv_listen((uv_stream_t *)&h->eps[i].listener, 8, up_accept), 0);
        sb_upstream_opts uo = {.connect_ms = 2000, .idle_ms = 30000, .max_idle = 4};
        assert_int_equal(
            sb_upstream_new(&h->loop, "127.0.0.1", ntohs(((struct sockaddr_in *)&bound)->sin_port), &uo, &h->up[i]), 0);
    }
    sb_http_server_opts so = {.write_high_water = s->write_high_water};
    assert_int_equal(sb_http_server_start(&h->loop, "127.0.0.1", 0, &so, handler, h, &h->srv), 0);
    netfx_connect_rcvbuf(&h->loop, &h->client, sb_http_server_port(h->srv), s->client_rcvbuf);
    return h;
}

static void send_request(harness *h)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     sizeof(REQUEST_BODY) - 1, REQUEST_BODY);
    netfx_send(&h->client, req, (size_t)n);
}

static bool exchanges_ended(void *arg)
{
    harness *h = arg;
    return h->ended == h->begun && h->begun > 0;
}

static bool up_conn_eof(void *arg)
{
    return ((up_conn *)arg)->eof;
}

static bool up_got_request(void *arg)
{
    return ((up_conn *)arg)->requests > 0;
}

static void wait_ended(harness *h)
{
    netfx_run_until(&h->loop, exchanges_ended, h, "the exchange's end");
}

/* Starts, sends one request and runs until the client has read `until` (NULL: until the
 * server closed the connection) and the exchange has ended. */
static harness *run_request(const setup *s, const char *until)
{
    harness *h = start(s);
    send_request(h);
    if (until)
        netfx_wait_for(&h->loop, &h->client, until);
    else
        netfx_wait_eof(&h->loop, &h->client);
    wait_ended(h);
    return h;
}

/* Everything closed, the loop run dry and closed (a leaked handle fails here), router freed. */
static void finish(harness *h)
{
    netfx_close(&h->client, false);
    sb_http_server_stop(h->srv);
    for (size_t i = 0; i < h->n_eps; i++) {
        uv_close((uv_handle_t *)&h->eps[i].listener, NULL);
        for (int k = 0; k < h->eps[i].accepted; k++)
            up_close(&h->eps[i].conns[k], false);
    }
    uv_run(&h->loop, UV_RUN_DEFAULT);
    for (size_t i = 0; i < h->n_eps; i++)
        sb_upstream_free(h->up[i]);
    netfx_loop_finish(&h->loop);
    sb_router_free(h->router);
    free(h);
}

/* The router's accounting of endpoint ep: nothing in flight, released exactly once. */
static void assert_released_once(harness *h, uint32_t ep)
{
    const sb_endpoint *e = sb_router_endpoint(h->router, 0, ep);
    assert_int_equal(e->in_flight, 0);
    assert_int_equal(e->dispatched, 1);
    assert_int_equal(e->completed + e->failed, 1);
}

/* ---- scripts ---- */

static void answer_ok(harness *h, up_conn *c)
{
    up_writes(c, ANSWER);
}

static void never_answer(harness *h, up_conn *c) {}

static void reset_at_once(harness *h, up_conn *c)
{
    up_close(c, true);
}

/* The first connection answers its first request and resets on the second (a keep-alive
 * connection the server dropped); later connections answer. */
static void reset_on_ep0(harness *h, up_conn *c)
{
    if (c->ep == 0)
        up_close(c, true);
    else
        up_writes(c, ANSWER);
}

/* Endpoint 0 is overloaded: 503 with a body of its own. */
static void busy_on_ep0(harness *h, up_conn *c)
{
    if (c->ep == 0)
        up_writes(c,
                  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nbusy-ep-0");
    else
        up_writes(c, ANSWER);
}

static void reset_second_on_first_conn(harness *h, up_conn *c)
{
    if (c->index == 0 && c->requests == 2)
        up_close(c, true);
    else
        up_writes(c, ANSWER);
}

static void sse_then_close(harness *h, up_conn *c)
{
    up_writes(c, SSE_HEAD SSE_CHUNK);
    up_close(c, false);
}

static void sse_then_reset(harness *h, up_conn *c)
{
    up_writes(c, SSE_HEAD SSE_CHUNK);
    up_close(c, true);
}

static void sse_then_hold(harness *h, up_conn *c)
{
    up_writes(c, SSE_HEAD SSE_CHUNK);
}

static void json_cut_short(harness *h, up_conn *c)
{
    up_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"partial\":");
    up_close(c, false);
}

/* An interim 100 Continue before the answer (a server honouring Expect on its own). */
static void interim_then_answer(harness *h, up_conn *c)
{
    up_writes(c, "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n" ANSWER);
}

/* The answer, then bytes no request asked for: the connection cannot be trusted again. */
static void answer_then_junk(harness *h, up_conn *c)
{
    up_writes(c, ANSWER "HTTP/1.1 200 OK\r\n");
}

/* A response head past http-parser's header limit (80 KiB): many ordinary header lines. */
static void oversized_head(harness *h, up_conn *c)
{
    up_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
    char line[1100];
    memset(line, 'v', sizeof(line));
    memcpy(line, "X-Filler: ", 10);
    memcpy(line + sizeof(line) - 2, "\r\n", 2);
    for (int i = 0; i < 100; i++) /* 110 KB of headers */
        up_write(c, line, sizeof(line));
    up_writes(c, "Content-Length: 2\r\n\r\n{}");
}

/* ---- the plain path ---- */

static void test_proxies_through_the_env_alone(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = answer_ok}, "{\"ok\":true}");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 200"));
    /* the upstream got the client's body */
    assert_non_null(strstr(h->last_request, REQUEST_BODY));
    /* the owner heard of it through the env: begun, recorded, ended, snapshot given back */
    assert_int_equal(h->begun, 1);
    assert_int_equal(h->recorded, 1);
    assert_int_equal(h->recorded_status, 200);
    assert_string_equal(h->recorded_outcome, "ok");
    assert_int_equal(h->snap.refs, 1);
    assert_int_equal(h->errors, 0);
    assert_int_equal(h->counters.upstream_errors, 0);
    /* a complete answer returns the connection to the pool */
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 1);
    assert_released_once(h, 0);
    finish(h);
}

/* An interim 1xx answer is the upstream's business: the client gets only the real answer. */
static void test_interim_response_is_dropped(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = interim_then_answer}, "{\"ok\":true}");
    assert_int_equal(strncmp(h->client.in, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_null(strstr(h->client.in, "X-Interim"));
    assert_string_equal(h->recorded_outcome, "ok");
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 1);
    finish(h);
}

/* Bytes after a complete answer: the client gets its answer, the connection is closed rather
 * than pooled (the junk would be read as the next request's answer). */
static void test_junk_after_the_answer_is_not_pooled(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = answer_then_junk}, "{\"ok\":true}");
    assert_string_equal(h->recorded_outcome, "ok");
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0);
    netfx_run_until(&h->loop, up_conn_eof, &h->eps[0].conns[0], "the upstream connection's close");
    finish(h);
}

static void test_refused_upstream_is_answered_through_the_env(void **state)
{
    harness *h = start(&(setup){.n_eps = 1, .dead = 1, .script = answer_ok});
    send_request(h);
    wait_ended(h);
    netfx_wait_for(&h->loop, &h->client, "HTTP/1.1 502");
    /* one endpoint, refused: nothing left to try, the owner answers the error */
    assert_int_equal(h->errors, 1);
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->recorded, 1);
    assert_string_equal(h->recorded_outcome, "upstream_error");
    assert_int_equal(h->snap.refs, 1);
    finish(h);
}

/* ---- retries ---- */

/* A refused connect reached no endpoint: the request goes to the next one. */
static void test_refused_connect_is_retried_on_a_fallback(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .dead = 1, .script = answer_ok}, "{\"ok\":true}");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 200"));
    assert_int_equal(h->counters.retries, 1);
    assert_int_equal(h->errors, 0);
    assert_int_equal(h->recorded_retries, 1);
    assert_int_equal(h->recorded_ep, 1);
    assert_int_equal(h->eps[1].accepted, 1);
    /* the refused endpoint was told it failed; the fallback, that it answered */
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->failed, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->in_flight, 0);
    assert_released_once(h, 1);
    finish(h);
}

/* A fresh connection reset before any response byte: nothing reached the client, so another
 * endpoint answers it (retry.on: reset); the endpoint that reset is told it failed. */
static void test_reset_before_the_answer_is_retried_elsewhere(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = reset_on_ep0}, "{\"ok\":true}");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 200"));
    assert_int_equal(h->counters.retries, 1);
    assert_int_equal(h->errors, 0);
    assert_int_equal(h->eps[0].accepted, 1);
    assert_int_equal(h->eps[1].accepted, 1);
    assert_int_equal(h->recorded_retries, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->failed, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->retries_by[SB_RETRY_RESET], 1);
    assert_int_equal(h->counters.retries_live, 0);
    assert_int_equal(h->counters.exchanges_live, 0);
    finish(h);
}

/* Every endpoint resets: each is tried once, then the client gets the last error, 502. */
static void test_reset_everywhere_is_502_after_each_was_tried(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = reset_at_once}, "HTTP/1.1 502");
    assert_int_equal(h->counters.retries, 1);
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->eps[0].accepted, 1);
    assert_int_equal(h->eps[1].accepted, 1);
    assert_non_null(strstr(h->client.in, "upstream_unavailable"));
    assert_string_equal(h->recorded_outcome, "upstream_error");
    finish(h);
}

static void no_reset_retry(sb_retry_policy *p)
{
    p->on &= ~(1u << SB_RETRY_RESET);
}

/* Without `reset` in retry.on, the reset is the client's 502, as before. */
static void test_reset_not_retried_when_not_asked(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = reset_on_ep0, .retry = no_reset_retry}, "HTTP/1.1 502");
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->eps[1].accepted, 0);
    assert_string_equal(h->recorded_outcome, "upstream_error");
    assert_released_once(h, 0);
    finish(h);
}

/* A 503 head is read before anything is forwarded: its body is dropped with the connection
 * and the other endpoint answers; the 503 counts against endpoint 0. */
static void test_5xx_is_retried_before_forwarding(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = busy_on_ep0}, "{\"ok\":true}");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 200"));
    assert_null(strstr(h->client.in, "busy-ep-0"));
    assert_null(strstr(h->client.in, "503"));
    assert_int_equal(h->counters.retries, 1);
    assert_int_equal(h->recorded_status, 200);
    assert_int_equal(h->recorded_ep, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->failed, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->consecutive_failures, 1);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->retries_by[SB_RETRY_STATUS], 1);
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0); /* its connection was not pooled */
    finish(h);
}

/* With no endpoint left to try the 5xx is the answer, passed through whole. */
static void test_5xx_passes_when_no_endpoint_is_left(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = busy_on_ep0}, "busy-ep-0");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 503"));
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->recorded_status, 503);
    finish(h);
}

static void long_backoff(sb_retry_policy *p)
{
    p->backoff_ms = p->max_backoff_ms = 60000;
}

static bool retry_pending(void *arg)
{
    return ((harness *)arg)->counters.retries == 1;
}

/* The client leaves while the retry waits out its backoff: the timer is cancelled, the
 * exchange ends at once as a client abort, and nothing is sent to the next endpoint. */
static void test_client_leaving_during_backoff_ends_the_exchange(void **state)
{
    harness *h = start(&(setup){.n_eps = 2, .script = reset_on_ep0, .retry = long_backoff});
    send_request(h);
    netfx_run_until(&h->loop, retry_pending, h, "the retry's backoff");
    netfx_close(&h->client, true);
    wait_ended(h);
    assert_string_equal(h->recorded_outcome, "client_abort");
    assert_int_equal(h->eps[1].accepted, 0);
    assert_int_equal(h->counters.retries_live, 0);
    assert_int_equal(h->counters.exchanges_live, 0);
    finish(h); /* the timer's handle closed: the loop runs dry */
}

static void no_budget(sb_retry_policy *p)
{
    p->min_retries = 0;
    p->budget_ratio = 0;
}

/* The retry budget spent (here: none at all), the 5xx goes to the client and the refusal is
 * counted. */
static void test_retry_budget_holds_retries_back(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = busy_on_ep0, .retry = no_budget}, "busy-ep-0");
    assert_non_null(strstr(h->client.in, "HTTP/1.1 503"));
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->counters.retries_budget_denied, 1);
    assert_int_equal(h->eps[1].accepted, 0);
    finish(h);
}

/* A pooled connection the server had dropped (reset with nothing read): the request never
 * reached the endpoint; sent again on a new connection to the same endpoint, not counted
 * as a retry, and the client never knows. */
static void test_stale_pooled_connection_is_replaced_on_the_same_endpoint(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = reset_second_on_first_conn}, "{\"ok\":true}");
    /* round robin would pick endpoint 1 next: put both requests on endpoint 0 */
    sb_router_endpoint(h->router, 0, 1)->draining = true;
    send_request(h);
    netfx_wait_for(&h->loop, &h->client,
                   "{\"ok\":true}HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Length: 11\r\n\r\n{\"ok\":true}");
    wait_ended(h);
    assert_int_equal(h->begun, 2);
    assert_int_equal(h->errors, 0);
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->eps[0].accepted, 2);
    assert_int_equal(h->eps[0].conns[0].requests, 2);
    assert_int_equal(h->eps[0].conns[1].requests, 1);
    assert_int_equal(h->eps[1].accepted, 0);
    assert_string_equal(h->recorded_outcome, "ok");
    finish(h);
}

/* Bytes already reached the client: nothing is retried, the other endpoint is never asked. */
static void test_failure_after_bytes_reached_the_client_is_not_retried(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .script = sse_then_reset}, NULL);
    assert_non_null(strstr(h->client.in, "data: hi"));
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->counters.midstream_errors, 1);
    assert_int_equal(h->eps[1].accepted, 0);
    assert_int_equal(h->recorded_retries, 0);
    assert_string_equal(h->recorded_outcome, "midstream_error");
    finish(h);
}

/* ---- mid-stream failures ---- */

/* A stream cut by the upstream ends visibly: the SSE error event, then the connection closes
 * without the chunked terminator (the client cannot take it for a whole answer). The owner
 * hears of the failure. */
static void test_midstream_close_ends_the_stream_visibly(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = sse_then_close}, NULL);
    const char *in = h->client.in;
    assert_non_null(strstr(in, "HTTP/1.1 200"));
    assert_non_null(strstr(in, "Transfer-Encoding: chunked"));
    const char *hi = strstr(in, "data: hi");
    const char *ev = strstr(in, "upstream_failed_midstream");
    assert_non_null(hi);
    assert_non_null(ev);
    assert_true(ev > hi);
    assert_null(strstr(in, "\r\n0\r\n\r\n"));
    assert_int_equal(h->counters.midstream_errors, 1);
    assert_int_equal(h->counters.upstream_errors, 0);
    assert_int_equal(h->recorded, 1);
    assert_int_equal(h->recorded_status, 200);
    assert_string_equal(h->recorded_outcome, "midstream_error");
    assert_int_equal(h->errors, 0);
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0);
    assert_int_equal(sb_router_endpoint(h->router, 0, 0)->failed, 1);
    assert_released_once(h, 0);
    finish(h);
}

/* A Content-Length answer cut short: the client gets fewer bytes than declared and the
 * connection closes (no SSE event: it is not a stream). */
static void test_midstream_close_of_a_sized_answer_closes_the_client(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = json_cut_short}, NULL);
    assert_non_null(strstr(h->client.in, "Content-Length: 100"));
    assert_non_null(strstr(h->client.in, "{\"partial\":"));
    assert_null(strstr(h->client.in, "upstream_failed_midstream"));
    assert_string_equal(h->recorded_outcome, "midstream_error");
    assert_int_equal(h->counters.midstream_errors, 1);
    assert_released_once(h, 0);
    finish(h);
}

/* ---- client abort ---- */

/* The client leaves mid-stream: the upstream connection is closed (that is how a model
 * server learns to stop generating), never pooled, and the router's accounting is released
 * exactly once, as a client abort. */
static void test_client_abort_midstream_closes_the_upstream(void **state)
{
    harness *h = start(&(setup){.n_eps = 1, .script = sse_then_hold});
    send_request(h);
    netfx_wait_for(&h->loop, &h->client, "data: hi");
    netfx_close(&h->client, true);
    wait_ended(h);
    up_conn *c = &h->eps[0].conns[0];
    netfx_run_until(&h->loop, up_conn_eof, c, "the upstream connection's close");
    assert_int_equal(h->counters.client_aborts, 1);
    assert_int_equal(h->counters.midstream_errors, 0);
    assert_string_equal(h->recorded_outcome, "client_abort");
    assert_int_equal(h->recorded, 1);
    assert_int_equal(h->snap.refs, 1);
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0);
    const sb_endpoint *e = sb_router_endpoint(h->router, 0, 0);
    /* a client leaving is not the endpoint's fault */
    assert_int_equal(e->failed, 0);
    assert_int_equal(e->consecutive_failures, 0);
    assert_released_once(h, 0);
    finish(h);
}

/* ---- timeouts ---- */

/* No answer within response_ms: 504. A timed-out request may be running on the endpoint, so
 * it is sent nowhere else, and the connection is closed, not pooled. */
static void test_response_timeout_is_504_and_not_resent(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 2, .response_ms = 30, .script = never_answer}, "HTTP/1.1 504");
    netfx_run_until(&h->loop, up_conn_eof, &h->eps[0].conns[0], "the upstream connection's close");
    assert_non_null(strstr(h->client.in, "upstream_timeout"));
    assert_int_equal(h->error_status, 504);
    assert_int_equal(h->counters.retries, 0);
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->eps[1].accepted, 0);
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0);
    assert_string_equal(h->recorded_outcome, "upstream_error");
    assert_released_once(h, 0);
    finish(h);
}

/* A stream that goes silent for response_ms ends visibly, like any mid-stream failure. */
static void test_silent_stream_times_out_visibly(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .response_ms = 30, .script = sse_then_hold}, NULL);
    assert_non_null(strstr(h->client.in, "data: hi"));
    assert_non_null(strstr(h->client.in, "timed out"));
    assert_null(strstr(h->client.in, "\r\n0\r\n\r\n"));
    assert_int_equal(h->counters.midstream_errors, 1);
    assert_string_equal(h->recorded_outcome, "midstream_error");
    assert_released_once(h, 0);
    finish(h);
}

/* ---- oversized upstream head ---- */

/* A response head past the parser's limit is a bad upstream answer (502), not a crash or an
 * unbounded buffer; nothing of it reaches the client. */
static void test_oversized_upstream_head_is_502(void **state)
{
    harness *h = run_request(&(setup){.n_eps = 1, .script = oversized_head}, "HTTP/1.1 502");
    assert_non_null(strstr(h->client.in, "bad_upstream_response"));
    assert_null(strstr(h->client.in, "X-Filler"));
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->counters.retries, 0);
    assert_string_equal(h->recorded_outcome, "upstream_error");
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 0);
    assert_released_once(h, 0);
    finish(h);
}

/* ---- backpressure ---- */

#define SLAB (1u << 20)
#define BIG_SLABS 64 /* 64 MiB: far more than every socket buffer on the way */
static char big_slab[SLAB];
static uv_write_t big_write;

/* A large sized answer, written at once: the body is one slab repeated (no copy). */
static void big_answer(harness *h, up_conn *c)
{
    /* A fixed send buffer: the upstream's kernel buffer does not grow to absorb the answer. */
    int sndbuf = 64 * 1024;
    uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
    static char head[128];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                     "Content-Length: %llu\r\n\r\n",
                     (unsigned long long)SLAB * BIG_SLABS);
    uv_buf_t bufs[BIG_SLABS + 1];
    bufs[0] = uv_buf_init(head, (unsigned)n);
    for (int i = 1; i <= BIG_SLABS; i++)
        bufs[i] = uv_buf_init(big_slab, SLAB);
    assert_int_equal(uv_write(&big_write, (uv_stream_t *)&c->tcp, bufs, BIG_SLABS + 1, NULL), 0);
}

typedef struct drain {
    harness *h;
    uint64_t total; /* bytes the client read */
    bool head_ok;
} drain;

/* Counts and discards what the client read (64 MiB are never held at once). */
static bool drained_all(void *arg)
{
    drain *d = arg;
    netfx_client *c = &d->h->client;
    if (c->in_len && d->total == 0)
        d->head_ok = strncmp(c->in, "HTTP/1.1 200", 12) == 0;
    d->total += c->in_len;
    c->in_len = 0;
    return d->total >= (uint64_t)SLAB * BIG_SLABS;
}

/* A client reading slower than the model writes: the proxy stops reading the upstream once
 * the client's queue passes write_high_water, so what it took from the upstream stays within
 * socket buffers plus the bound (memory stays bounded and TCP pushes back on the upstream),
 * and it reads again when the client drains: the whole answer arrives. */
static void test_slow_client_pauses_the_upstream_and_resumes(void **state)
{
    memset(big_slab, 'x', sizeof(big_slab));
    harness *h =
        start(&(setup){.n_eps = 1, .write_high_water = 64 * 1024, .client_rcvbuf = 16 * 1024, .script = big_answer});
    netfx_hold(&h->client, true);
    send_request(h);
    up_conn *c = &h->eps[0].conns[0];
    netfx_run_until(&h->loop, up_got_request, c, "the upstream's request");
    /* Turn the loop until nothing moves any more: with the upstream paused every socket on
     * the way is full and no callback runs. (Without the pause the proxy would read on until
     * the whole answer sat in its own write queue, and only then stop.) */
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    for (int still = 0, turns = 0; still < 200 && turns < 10 * 1000 * 1000; turns++) {
        uv_run(&h->loop, UV_RUN_NOWAIT);
        size_t q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        still = q == queued ? still + 1 : 0;
        queued = q;
    }
    uint64_t taken = (uint64_t)SLAB * BIG_SLABS - queued;
    /* Socket buffers (autotuned up to tens of MiB on loopback) plus the 64 KiB bound: far
     * below the answer. */
    assert_true(taken < (uint64_t)SLAB * BIG_SLABS / 2);
    assert_int_equal(h->ended, 0);

    netfx_hold(&h->client, false);
    drain d = {.h = h};
    netfx_run_until(&h->loop, drained_all, &d, "the whole answer");
    wait_ended(h);
    assert_true(d.head_ok);
    assert_string_equal(h->recorded_outcome, "ok");
    assert_int_equal(h->recorded_status, 200);
    assert_int_equal(sb_upstream_idle_count(h->up[0]), 1);
    assert_released_once(h, 0);
    finish(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proxies_through_the_env_alone),
        cmocka_unit_test(test_interim_response_is_dropped),
        cmocka_unit_test(test_junk_after_the_answer_is_not_pooled),
        cmocka_unit_test(test_refused_upstream_is_answered_through_the_env),
        cmocka_unit_test(test_refused_connect_is_retried_on_a_fallback),
        cmocka_unit_test(test_reset_before_the_answer_is_retried_elsewhere),
        cmocka_unit_test(test_reset_not_retried_when_not_asked),
        cmocka_unit_test(test_reset_everywhere_is_502_after_each_was_tried),
        cmocka_unit_test(test_5xx_is_retried_before_forwarding),
        cmocka_unit_test(test_5xx_passes_when_no_endpoint_is_left),
        cmocka_unit_test(test_retry_budget_holds_retries_back),
        cmocka_unit_test(test_client_leaving_during_backoff_ends_the_exchange),
        cmocka_unit_test(test_stale_pooled_connection_is_replaced_on_the_same_endpoint),
        cmocka_unit_test(test_failure_after_bytes_reached_the_client_is_not_retried),
        cmocka_unit_test(test_midstream_close_ends_the_stream_visibly),
        cmocka_unit_test(test_midstream_close_of_a_sized_answer_closes_the_client),
        cmocka_unit_test(test_client_abort_midstream_closes_the_upstream),
        cmocka_unit_test(test_response_timeout_is_504_and_not_resent),
        cmocka_unit_test(test_silent_stream_times_out_visibly),
        cmocka_unit_test(test_oversized_upstream_head_is_502),
        cmocka_unit_test(test_slow_client_pauses_the_upstream_and_resumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
