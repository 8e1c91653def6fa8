/* The proxy's state machine driven without a gateway: a test owner fills in the sb_proxy_env
 * (router, counters, callbacks), a scripted upstream answers on loopback, a libuv client
 * sends one request through an sb_http_server whose handler starts the exchange. Everything
 * runs on one loop, until the client has its whole answer. */
#include "sb_test.h"

#include <uv.h>

#include "core/sched.h"
#include "net/proxy.h"

#define ANSWER "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
#define REQUEST_BODY "{\"model\":\"m\",\"messages\":[]}"

typedef struct harness {
    uv_loop_t loop;
    /* the owner's side of the env */
    sb_router *router;
    sb_gateway_counters counters;
    sb_config cfg;
    sb_pool_config pool_cfg;
    sb_snapshot snap;
    sb_upstream *up;
    sb_proxy_env env;
    int begun, ended, recorded, errors;
    uint32_t ended_pool;
    int recorded_status, error_status;
    char recorded_outcome[32];
    /* the scripted upstream */
    uv_tcp_t up_listener;
    uv_tcp_t up_conn;
    char up_in[4096];
    size_t up_in_len;
    bool up_answered;
    /* the server and the client */
    sb_http_server *srv;
    uv_tcp_t client;
    uv_connect_t connect_req;
    uv_write_t client_write;
    char client_in[4096];
    size_t client_in_len;
} harness;

static sb_upstream *env_upstream(void *owner, uint32_t pool, uint32_t ep)
{
    harness *h = owner;
    assert_int_equal(pool, 0);
    assert_int_equal(ep, 0);
    return h->up;
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
    h->snap.refs--;
    h->ended++;
    h->ended_pool = pool;
}

static void env_record(void *owner, const sb_exchange_log *log)
{
    harness *h = owner;
    h->recorded++;
    h->recorded_status = log->status;
    snprintf(h->recorded_outcome, sizeof(h->recorded_outcome), "%s", log->outcome);
}

static void env_error(void *owner, sb_http_req *req, int status, const char *message, const char *type,
                      const char *code)
{
    harness *h = owner;
    h->errors++;
    h->error_status = status;
    sb_http_respond(req, status, "application/json", NULL, "{}", 2);
}

/* Appends a read to an accumulating buffer (NUL-terminated); true once it holds a whole HTTP
 * message: its head and the body its Content-Length declares. */
static bool take(char *dst, size_t *len, size_t cap, const char *data, ssize_t n)
{
    if (n > 0) {
        assert_true(*len + (size_t)n < cap);
        memcpy(dst + *len, data, (size_t)n);
        *len += (size_t)n;
        dst[*len] = '\0';
    }
    const char *end = strstr(dst, "\r\n\r\n");
    const char *cl = strstr(dst, "Content-Length: ");
    return end && cl && *len >= (size_t)(end + 4 - dst) + strtoul(cl + 16, NULL, 10);
}

/* ---- scripted upstream: answers once it has a whole request (head and declared body) ---- */

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    static char slab[65536]; /* test-only: one loop, each read consumed at once */
    *buf = uv_buf_init(slab, sizeof(slab));
}

static void up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    harness *h = s->data;
    if (n <= 0 || !take(h->up_in, &h->up_in_len, sizeof(h->up_in), buf->base, n) || h->up_answered)
        return;
    h->up_answered = true;
    static uv_write_t w;
    uv_buf_t b = uv_buf_init((char *)ANSWER, sizeof(ANSWER) - 1);
    assert_int_equal(uv_write(&w, s, &b, 1, NULL), 0);
}

static void up_accept(uv_stream_t *l, int status)
{
    harness *h = l->data;
    assert_int_equal(status, 0);
    uv_tcp_init(&h->loop, &h->up_conn);
    h->up_conn.data = h;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&h->up_conn), 0);
    uv_read_start((uv_stream_t *)&h->up_conn, alloc_cb, up_read);
}

/* ---- the server's handler: every request goes to the proxy for pool 0 ---- */

static void handler(sb_http_req *req, void *ctx)
{
    harness *h = ctx;
    sb_proxy_target t = {.pool = 0, .adapter = -1, .model = "m", .key_band = -1, .band = -1};
    sb_sched_request rr = {.pool = 0, .adapter = -1, .profile = sb_router_pool_profile(h->router, 0)};
    sb_proxy_start(&h->env, req, &t, &rr);
}

/* ---- client ---- */

static void close_all(harness *h)
{
    uv_close((uv_handle_t *)&h->client, NULL);
    sb_http_server_stop(h->srv);
    uv_close((uv_handle_t *)&h->up_listener, NULL);
    if (uv_is_active((uv_handle_t *)&h->up_conn) || h->up_conn.data)
        uv_close((uv_handle_t *)&h->up_conn, NULL);
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    harness *h = s->data;
    bool whole = take(h->client_in, &h->client_in_len, sizeof(h->client_in), buf->base, n);
    if (n < 0 || whole) {
        uv_read_stop(s);
        close_all(h);
    }
}

static void client_connected(uv_connect_t *c, int status)
{
    harness *h = c->data;
    assert_int_equal(status, 0);
    static char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     sizeof(REQUEST_BODY) - 1, REQUEST_BODY);
    uv_buf_t b = uv_buf_init(req, (unsigned)n);
    assert_int_equal(uv_write(&h->client_write, (uv_stream_t *)&h->client, &b, 1, NULL), 0);
    uv_read_start((uv_stream_t *)&h->client, alloc_cb, client_read);
}

/* Sets up router, upstream (listening unless `dead`), server; runs one request; tears down. */
static void run_one(harness *h, bool dead)
{
    memset(h, 0, sizeof(*h));
    assert_int_equal(uv_loop_init(&h->loop), 0);
    h->router = sb_router_new(1, 1);
    assert_non_null(h->router);
    sb_pool_params pp = {0};
    assert_int_equal(sb_router_add_pool(h->router, "p", sb_profile_builtin("round-robin"), 1, &pp), 0);
    sb_router_endpoint(h->router, 0, 0)->address = "upstream";
    assert_int_equal(sb_router_build_ring(h->router, 0), 0);
    assert_true(sb_router_add_model(h->router, 0, "m", SB_MODEL_SERVED) >= 0);
    h->cfg.pools = &h->pool_cfg;
    h->cfg.n_pools = 1;
    h->cfg.response_ms = 5000;
    h->snap = (sb_snapshot){.cfg = &h->cfg, .refs = 1};
    h->env = (sb_proxy_env){.router = h->router,
                            .counters = &h->counters,
                            .owner = h,
                            .upstream = env_upstream,
                            .begin = env_begin,
                            .end = env_end,
                            .record = env_record,
                            .error = env_error};

    /* the upstream listener (closed at once when `dead`: its port then refuses) */
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(&h->loop, &h->up_listener);
    h->up_listener.data = h;
    assert_int_equal(uv_tcp_bind(&h->up_listener, (struct sockaddr *)&a, 0), 0);
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&h->up_listener, (struct sockaddr *)&bound, &len);
    uint16_t up_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (!dead)
        assert_int_equal(uv_listen((uv_stream_t *)&h->up_listener, 8, up_accept), 0);
    sb_upstream_opts uo = {.connect_ms = 2000, .idle_ms = 30000, .max_idle = 4};
    assert_int_equal(sb_upstream_new(&h->loop, "127.0.0.1", up_port, &uo, &h->up), 0);

    sb_http_server_opts so = {0};
    assert_int_equal(sb_http_server_start(&h->loop, "127.0.0.1", 0, &so, handler, h, &h->srv), 0);
    uv_ip4_addr("127.0.0.1", sb_http_server_port(h->srv), &a);
    uv_tcp_init(&h->loop, &h->client);
    h->client.data = h;
    h->connect_req.data = h;
    assert_int_equal(uv_tcp_connect(&h->connect_req, &h->client, (struct sockaddr *)&a, client_connected), 0);
    uv_run(&h->loop, UV_RUN_DEFAULT);

    sb_upstream_free(h->up);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&h->loop), 0);
    sb_router_free(h->router);
}

static void test_proxies_through_the_env_alone(void **state)
{
    harness *h = calloc(1, sizeof(*h));
    run_one(h, false);
    assert_non_null(strstr(h->client_in, "HTTP/1.1 200"));
    assert_non_null(strstr(h->client_in, "{\"ok\":true}"));
    /* the upstream got the client's body */
    assert_non_null(strstr(h->up_in, REQUEST_BODY));
    /* the owner heard of it through the env: begun, recorded, ended, snapshot given back */
    assert_int_equal(h->begun, 1);
    assert_int_equal(h->recorded, 1);
    assert_int_equal(h->recorded_status, 200);
    assert_string_equal(h->recorded_outcome, "ok");
    assert_int_equal(h->ended, 1);
    assert_int_equal(h->ended_pool, 0);
    assert_int_equal(h->snap.refs, 1);
    assert_int_equal(h->errors, 0);
    assert_int_equal(h->counters.upstream_errors, 0);
    free(h);
}

static void test_refused_upstream_is_answered_through_the_env(void **state)
{
    harness *h = calloc(1, sizeof(*h));
    run_one(h, true);
    /* one endpoint, refused: nothing left to try, the owner answers the error */
    assert_int_equal(h->errors, 1);
    assert_true(h->error_status == 502 || h->error_status == 503);
    assert_int_equal(h->counters.upstream_errors, 1);
    assert_int_equal(h->recorded, 1);
    assert_string_equal(h->recorded_outcome, "upstream_error");
    assert_int_equal(h->ended, 1);
    assert_int_equal(h->snap.refs, 1);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proxies_through_the_env_alone),
        cmocka_unit_test(test_refused_upstream_is_answered_through_the_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
