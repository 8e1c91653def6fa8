/* net/iobatch: a turn's writes leave in one submission, in order per socket; what a socket
 * cannot take goes to libuv and still arrives whole; a release hands queued writes to libuv
 * before a close, so their callbacks come before the close's; the close of the batcher sends
 * what is queued. One loop runs both ends (loopback TCP). */
#include "sb_test.h"

#include <uv.h>

#include "net/iobatch.h"

#define MAX_LOG 64

typedef struct fx {
    uv_loop_t loop;
    uv_tcp_t server;
    uv_tcp_t client[2];   /* the writers */
    uv_tcp_t accepted[2]; /* the readers */
    int n_accepted, n_connected;
    uv_connect_t conn_req[2];
    char *got[2];
    size_t got_len[2], got_cap[2];
    char log[MAX_LOG][16]; /* callbacks and closes, in the order they ran */
    int n_log;
    bool in_write_call; /* set around sb_iob_write: a callback from within it is a failure */
} fx;

static void note(fx *f, const char *what)
{
    assert_true(f->n_log < MAX_LOG);
    snprintf(f->log[f->n_log++], sizeof f->log[0], "%s", what);
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char buf[65536];
    (void)h;
    (void)sz;
    *b = uv_buf_init(buf, sizeof buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    fx *f = s->data;
    int i = s == (uv_stream_t *)&f->accepted[0] ? 0 : 1;
    if (n <= 0)
        return;
    if (f->got_len[i] + (size_t)n > f->got_cap[i]) {
        f->got_cap[i] = (f->got_len[i] + (size_t)n) * 2;
        f->got[i] = realloc(f->got[i], f->got_cap[i]);
        assert_non_null(f->got[i]);
    }
    memcpy(f->got[i] + f->got_len[i], b->base, (size_t)n);
    f->got_len[i] += (size_t)n;
}

static void on_conn(uv_stream_t *s, int status)
{
    fx *f = s->data;
    assert_int_equal(status, 0);
    uv_tcp_t *t = &f->accepted[f->n_accepted++];
    uv_tcp_init(&f->loop, t);
    t->data = f;
    assert_int_equal(uv_accept(s, (uv_stream_t *)t), 0);
}

static void on_connected(uv_connect_t *r, int status)
{
    fx *f = r->data;
    assert_int_equal(status, 0);
    f->n_connected++;
}

static void setup(fx *f, bool batch)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    sb_iob_set_enabled(batch);
    int rc = sb_iob_open(&f->loop);
    if (batch && rc < 0) {
        /* A kernel without io_uring (or a sandbox refusing it) cannot run these: said loudly. */
        fprintf(stderr, "SKIP test_iobatch: io_uring unavailable (%d)\n", rc);
        skip();
    }
    assert_int_equal(rc == 0, batch);
    uv_tcp_init(&f->loop, &f->server);
    f->server.data = f;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&f->server, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&f->server, 8, on_conn), 0);
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&f->server, (struct sockaddr *)&bound, &len);
    for (int i = 0; i < 2; i++) {
        uv_tcp_init(&f->loop, &f->client[i]);
        f->client[i].data = f;
        f->conn_req[i].data = f;
        assert_int_equal(uv_tcp_connect(&f->conn_req[i], &f->client[i], (struct sockaddr *)&bound, on_connected), 0);
    }
    while (f->n_connected < 2 || f->n_accepted < 2)
        uv_run(&f->loop, UV_RUN_ONCE);
    /* The accepted sockets match the clients by their ports. */
    struct sockaddr_storage cl, peer;
    len = sizeof cl;
    uv_tcp_getsockname(&f->client[0], (struct sockaddr *)&cl, &len);
    len = sizeof peer;
    uv_tcp_getpeername(&f->accepted[0], (struct sockaddr *)&peer, &len);
    if (((struct sockaddr_in *)&cl)->sin_port != ((struct sockaddr_in *)&peer)->sin_port) {
        uv_tcp_t t = f->accepted[0];
        f->accepted[0] = f->accepted[1];
        f->accepted[1] = t;
    }
    for (int i = 0; i < 2; i++) {
        f->accepted[i].data = f;
        uv_read_start((uv_stream_t *)&f->accepted[i], on_alloc, on_read);
    }
}

static void on_closed(uv_handle_t *h)
{
    fx *f = h->data;
    if (h == (uv_handle_t *)&f->client[0])
        note(f, "close0");
}

static void teardown(fx *f)
{
    sb_iob_close(&f->loop);
    for (int i = 0; i < 2; i++) {
        if (!uv_is_closing((uv_handle_t *)&f->client[i]))
            uv_close((uv_handle_t *)&f->client[i], on_closed);
        uv_close((uv_handle_t *)&f->accepted[i], NULL);
        free(f->got[i]);
    }
    uv_close((uv_handle_t *)&f->server, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    sb_iob_set_enabled(true);
}

typedef struct wr {
    uv_write_t w;
    fx *f;
    const char *name;
    int status;
    bool done;
} wr;

static void on_written(uv_write_t *w, int status)
{
    wr *r = (wr *)w;
    assert_false(r->f->in_write_call);
    assert_ptr_not_equal(w->handle, NULL);
    r->status = status;
    r->done = true;
    note(r->f, r->name);
}

static void write_on(fx *f, wr *r, int client, const char *name, const uv_buf_t *bufs, unsigned n)
{
    *r = (wr){.f = f, .name = name, .status = 1};
    f->in_write_call = true;
    assert_int_equal(sb_iob_write(&r->w, (uv_stream_t *)&f->client[client], bufs, n, on_written), 0);
    f->in_write_call = false;
}

static void run_until_got(fx *f, int i, size_t len)
{
    while (f->got_len[i] < len)
        assert_true(uv_run(&f->loop, UV_RUN_ONCE) || f->got_len[i] >= len);
}

static void find_active_idle(uv_handle_t *h, void *arg)
{
    if (h->type == UV_IDLE && uv_is_active(h))
        *(bool *)arg = true;
}

/* Whether the batcher keeps the loop from blocking (its kick is active). */
static bool loop_kept_awake(fx *f)
{
    bool found = false;
    uv_walk(&f->loop, find_active_idle, &found);
    return found;
}

/* Writes to two sockets in one turn: one submission, both whole, callbacks later. */
static void test_one_submission_for_a_turn(void **state)
{
    fx f;
    setup(&f, true);
    sb_iob_stats s0, s1;
    sb_iob_get_stats(&s0);
    uv_buf_t a[2] = {uv_buf_init("head|", 5), uv_buf_init("body", 4)};
    uv_buf_t b = uv_buf_init("answer", 6);
    wr w0, w1;
    write_on(&f, &w0, 0, "w0", a, 2);
    write_on(&f, &w1, 1, "w1", &b, 1);
    assert_false(w0.done); /* queued: nothing left yet */
    assert_true(loop_kept_awake(&f)); /* the loop's next poll does not block on them */
    assert_int_equal(f.got_len[0], 0);
    run_until_got(&f, 0, 9);
    run_until_got(&f, 1, 6);
    while (!w0.done || !w1.done)
        uv_run(&f.loop, UV_RUN_ONCE);
    sb_iob_get_stats(&s1);
    assert_int_equal(s1.submits - s0.submits, 1);
    assert_int_equal(s1.sends - s0.sends, 2);
    assert_int_equal(s1.handed - s0.handed, 0);
    assert_int_equal(w0.status, 0);
    assert_int_equal(w1.status, 0);
    assert_memory_equal(f.got[0], "head|body", 9);
    assert_memory_equal(f.got[1], "answer", 6);
    teardown(&f);
}

/* Three writes to one socket in a turn: one in the ring at a time, the bytes in order. */
static void test_same_socket_keeps_order(void **state)
{
    fx f;
    setup(&f, true);
    uv_buf_t b1 = uv_buf_init("one,", 4), b2 = uv_buf_init("two,", 4), b3 = uv_buf_init("three", 5);
    wr w1, w2, w3;
    write_on(&f, &w1, 0, "w1", &b1, 1);
    write_on(&f, &w2, 0, "w2", &b2, 1);
    write_on(&f, &w3, 0, "w3", &b3, 1);
    run_until_got(&f, 0, 13);
    while (!w3.done)
        uv_run(&f.loop, UV_RUN_ONCE);
    assert_memory_equal(f.got[0], "one,two,three", 13);
    assert_string_equal(f.log[0], "w1");
    assert_string_equal(f.log[1], "w2");
    assert_string_equal(f.log[2], "w3");
    teardown(&f);
}

/* More than the socket takes: the rest goes to libuv, and everything arrives, in order, with a
 * later write behind it. */
static void test_a_short_send_is_finished_by_libuv(void **state)
{
    fx f;
    setup(&f, true);
    size_t big = 16u << 20;
    char *data = malloc(big);
    assert_non_null(data);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)('a' + i % 23);
    sb_iob_stats s0, s1;
    sb_iob_get_stats(&s0);
    uv_buf_t b = uv_buf_init(data, (unsigned)big), tail = uv_buf_init("END", 3);
    wr w, w2;
    write_on(&f, &w, 0, "big", &b, 1);
    if (*(bool *)*state)
        uv_run(&f.loop, UV_RUN_NOWAIT); /* sent: the socket took part of it; libuv has the rest */
    /* Else in the same turn: the tail must not overtake the rest of the big one. */
    write_on(&f, &w2, 0, "tail", &tail, 1);
    run_until_got(&f, 0, big + 3);
    while (!w2.done)
        uv_run(&f.loop, UV_RUN_ONCE);
    sb_iob_get_stats(&s1);
    /* The big one's rest; in the same turn the tail too (it found libuv holding bytes). */
    assert_int_equal(s1.handed - s0.handed, *(bool *)*state ? 1 : 2);
    assert_int_equal(w.status, 0);
    assert_int_equal(w2.status, 0);
    assert_memory_equal(f.got[0], data, big);
    assert_memory_equal(f.got[0] + big, "END", 3);
    assert_string_equal(f.log[0], "big");
    assert_string_equal(f.log[1], "tail");
    free(data);
    teardown(&f);
}

/* Released before a close: the queued write's callback runs before the close's; nothing queued
 * is left, so the batcher no longer keeps the loop awake. */
static void test_release_before_close(void **state)
{
    fx f;
    setup(&f, true);
    sb_iob_stats s0, s1;
    sb_iob_get_stats(&s0);
    uv_buf_t b = uv_buf_init("bye", 3);
    wr w;
    write_on(&f, &w, 0, "w", &b, 1);
    sb_iob_release((uv_stream_t *)&f.client[0]);
    uv_close((uv_handle_t *)&f.client[0], on_closed);
    while (f.n_log < 2)
        uv_run(&f.loop, UV_RUN_ONCE);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    assert_false(loop_kept_awake(&f));
    sb_iob_get_stats(&s1);
    assert_int_equal(s1.released - s0.released, 1);
    assert_string_equal(f.log[0], "w");
    assert_string_equal(f.log[1], "close0");
    teardown(&f);
}

/* The batcher's close sends what is queued (its callbacks run then). */
static void test_close_sends_what_is_queued(void **state)
{
    fx f;
    setup(&f, true);
    uv_buf_t b = uv_buf_init("last words", 10);
    wr w;
    write_on(&f, &w, 1, "w", &b, 1);
    sb_iob_close(&f.loop);
    assert_true(w.done);
    assert_int_equal(w.status, 0);
    assert_false(sb_iob_active((uv_stream_t *)&f.client[1]));
    run_until_got(&f, 1, 10);
    assert_memory_equal(f.got[1], "last words", 10);
    teardown(&f);
}

/* Turned off: sb_iob_write is uv_write. */
static void test_off_writes_through_libuv(void **state)
{
    fx f;
    setup(&f, false);
    sb_iob_stats s0, s1;
    sb_iob_get_stats(&s0);
    assert_false(sb_iob_active((uv_stream_t *)&f.client[0]));
    uv_buf_t b = uv_buf_init("plain", 5);
    wr w;
    write_on(&f, &w, 0, "w", &b, 1);
    run_until_got(&f, 0, 5);
    while (!w.done)
        uv_run(&f.loop, UV_RUN_ONCE);
    sb_iob_get_stats(&s1);
    assert_int_equal(s1.sends, s0.sends);
    assert_memory_equal(f.got[0], "plain", 5);
    teardown(&f);
}

int main(void)
{
    static bool later_turn = true, same_turn = false;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_submission_for_a_turn),
        cmocka_unit_test(test_same_socket_keeps_order),
        cmocka_unit_test_prestate(test_a_short_send_is_finished_by_libuv, &later_turn),
        cmocka_unit_test_prestate(test_a_short_send_is_finished_by_libuv, &same_turn),
        cmocka_unit_test(test_release_before_close),
        cmocka_unit_test(test_close_sends_what_is_queued),
        cmocka_unit_test(test_off_writes_through_libuv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
