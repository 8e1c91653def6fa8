/* net/upstream: names are resolved asynchronously; connections asked for meanwhile wait for the
 * address; a name that does not resolve fails acquires at once and is retried. The name that
 * fails is in the reserved .invalid domain (RFC 6761). */
#include "sb_test.h"

#include <uv.h>

#include "net/upstream.h"

typedef struct fx {
    uv_loop_t loop;
    uv_tcp_t server;
    uint16_t port;
    int resolved_calls, last_status;
    int connect_calls, connect_status;
    sb_upstream_conn *conn;
    int accepted;
} fx;

static void on_conn(uv_stream_t *s, int status)
{
    fx *f = s->data;
    uv_tcp_t *c = malloc(sizeof *c);
    uv_tcp_init(&f->loop, c);
    if (status == 0 && uv_accept(s, (uv_stream_t *)c) == 0)
        f->accepted++;
    uv_close((uv_handle_t *)c, (uv_close_cb)free);
}

static void setup(fx *f)
{
    memset(f, 0, sizeof *f);
    uv_loop_init(&f->loop);
    uv_tcp_init(&f->loop, &f->server);
    f->server.data = f;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&f->server, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&f->server, 8, on_conn), 0);
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&f->server, (struct sockaddr *)&bound, &len);
    f->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
}

static void teardown(fx *f)
{
    uv_close((uv_handle_t *)&f->server, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

static void on_resolved(sb_upstream *u, int status, void *arg)
{
    fx *f = arg;
    f->resolved_calls++;
    f->last_status = status;
}

static void on_connected(sb_upstream_conn *uc, int status, void *arg)
{
    fx *f = arg;
    f->connect_calls++;
    f->connect_status = status;
    f->conn = status == 0 ? uc : NULL;
}

/* Runs the loop until cond holds (the resolver's thread pool answers through the loop). */
#define RUN_UNTIL(f, cond)                                                                                             \
    do {                                                                                                               \
        for (int i_ = 0; i_ < 100000 && !(cond); i_++)                                                                 \
            uv_run(&(f)->loop, UV_RUN_ONCE);                                                                           \
        assert_true(cond);                                                                                             \
    } while (0)

static void test_name_resolves_and_waiting_connection_proceeds(void **state)
{
    (void)state;
    fx f;
    setup(&f);
    sb_upstream_opts o = {.connect_ms = 5000, .max_idle = 1, .on_resolved = on_resolved, .resolved_arg = &f};
    sb_upstream *u = NULL;
    assert_int_equal(sb_upstream_new(&f.loop, "localhost", f.port, &o, &u), 0);
    /* Nothing blocked: the answer is not in yet, and a connection asked for now waits for it. */
    assert_int_equal(sb_upstream_resolve_status(u), 1);
    sb_upstream_conn *uc = NULL;
    assert_int_equal(sb_upstream_acquire(u, on_connected, &f, &uc), 0);
    RUN_UNTIL(&f, f.connect_calls == 1);
    assert_int_equal(f.resolved_calls, 1);
    assert_int_equal(f.last_status, 0);
    assert_int_equal(f.connect_status, 0);
    assert_int_equal(sb_upstream_resolve_status(u), 0);
    RUN_UNTIL(&f, f.accepted == 1);
    sb_upstream_close(f.conn);
    /* A rebuilt pool takes the known address over and needs no resolver. */
    sb_upstream *u2 = NULL;
    assert_int_equal(sb_upstream_new(&f.loop, "localhost", f.port, NULL, &u2), 0);
    assert_int_equal(sb_upstream_adopt_address(u2, u), 0);
    assert_int_equal(sb_upstream_resolve_status(u2), 0);
    sb_upstream_free(u2); /* its own resolution is still out: freed when it comes back */
    sb_upstream_free(u);
    teardown(&f);
}

static void test_unresolvable_name_fails_fast_and_retries(void **state)
{
    (void)state;
    fx f;
    setup(&f);
    sb_upstream_opts o = {
        .connect_ms = 5000, .retry_ms = 20, .retry_max_ms = 40, .on_resolved = on_resolved, .resolved_arg = &f};
    sb_upstream *u = NULL;
    assert_int_equal(sb_upstream_new(&f.loop, "no-such-replica.invalid", 9, &o, &u), 0);
    assert_string_equal(sb_upstream_address(u), "no-such-replica.invalid:9");
    sb_upstream_conn *uc = NULL;
    assert_int_equal(sb_upstream_acquire(u, on_connected, &f, &uc), 0); /* waits for the first answer */
    RUN_UNTIL(&f, f.connect_calls == 1);
    assert_true(f.connect_status < 0); /* the waiting connection learns the resolver's error */
    assert_true(f.last_status < 0);
    assert_true(sb_upstream_resolve_status(u) < 0);
    /* Now acquires fail at once, without a callback. */
    int before = f.connect_calls;
    assert_true(sb_upstream_acquire(u, on_connected, &f, &uc) < 0);
    assert_int_equal(f.connect_calls, before);
    /* And the name is asked again, with backoff. */
    RUN_UNTIL(&f, f.resolved_calls >= 2);
    sb_upstream_free(u);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_resolves_and_waiting_connection_proceeds),
        cmocka_unit_test(test_unresolvable_name_fails_fast_and_retries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
