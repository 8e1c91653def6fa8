/* net/iobatch, reads: a turn's readable sockets are received from in one submission (one alone
 * with a plain receive), and each owner gets its bytes whole and in order through its own
 * alloc and read callbacks, however small its buffers; bytes of a reader stopped by another's
 * callback are kept for its restart; EOF stops reading; a forgotten reader's descriptor closes
 * with it (the peer sees the socket close). Socket pairs wrapped as libuv TCP streams. */
#include "sb_test.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "net/iobatch.h"

#define N 3

typedef struct fx fx;
typedef struct end {
    uv_tcp_t tcp;
    int peer; /* the other end of the pair: the test writes and reads it directly */
    char got[256];
    size_t len;
    int eofs, errors;
    fx *f;
} end;

struct fx {
    uv_loop_t loop;
    end e[N];
    size_t buf_size;   /* what alloc hands out */
    bool stop_others;  /* a read callback stops every other reader */
    bool skipped;
    uv_timer_t restart, guard; /* a restart from the timer phase; a bound on a stalled loop */
    bool guard_fired;
    size_t want_total;         /* the read callback stops the loop once this many have come */
};

static char shared[64]; /* every stream's alloc returns this one buffer, as the gateway's does */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    end *e = h->data;
    (void)suggested;
    *b = uv_buf_init(shared, (unsigned)e->f->buf_size);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    end *e = s->data;
    if (n == UV_EOF) {
        e->eofs++;
        return;
    }
    if (n < 0) {
        e->errors++;
        return;
    }
    assert_true(e->len + (size_t)n <= sizeof e->got);
    memcpy(e->got + e->len, b->base, (size_t)n);
    e->len += (size_t)n;
    if (e->f->want_total) {
        size_t total = 0;
        for (int i = 0; i < N; i++)
            total += e->f->e[i].len;
        if (total >= e->f->want_total)
            uv_stop(&e->f->loop);
    }
    if (e->f->stop_others) {
        for (int i = 0; i < N; i++)
            if (&e->f->e[i] != e)
                sb_iob_read_stop((uv_stream_t *)&e->f->e[i].tcp);
        e->f->stop_others = false;
    }
}

static int setup(void **state)
{
    static fx f;
    memset(&f, 0, sizeof f);
    f.buf_size = sizeof shared;
    if (uv_loop_init(&f.loop) < 0)
        return -1;
    sb_iob_set_enabled(true);
    int rc = sb_iob_open(&f.loop);
    if (rc < 0) {
        fprintf(stderr, "SKIP test_iobatch_read: io_uring unavailable (%d)\n", rc);
        f.skipped = true;
    }
    uv_timer_init(&f.loop, &f.restart);
    uv_timer_init(&f.loop, &f.guard);
    f.restart.data = f.guard.data = &f;
    for (int i = 0; i < N; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            return -1;
        end *e = &f.e[i];
        e->f = &f;
        e->peer = sv[1];
        uv_tcp_init(&f.loop, &e->tcp);
        e->tcp.data = e;
        if (uv_tcp_open(&e->tcp, sv[0]) < 0)
            return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    for (int i = 0; i < N; i++) {
        if (!uv_is_closing((uv_handle_t *)&f->e[i].tcp)) {
            sb_iob_read_forget((uv_stream_t *)&f->e[i].tcp);
            uv_close((uv_handle_t *)&f->e[i].tcp, NULL);
        }
        close(f->e[i].peer);
    }
    uv_close((uv_handle_t *)&f->restart, NULL);
    uv_close((uv_handle_t *)&f->guard, NULL);
    sb_iob_close(&f->loop);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return uv_loop_close(&f->loop) == 0 ? 0 : -1;
}

static void start(fx *f, int i)
{
    assert_int_equal(sb_iob_read_start((uv_stream_t *)&f->e[i].tcp, on_alloc, on_read), 0);
}

static void put(fx *f, int i, const char *s)
{
    assert_int_equal(write(f->e[i].peer, s, strlen(s)), (ssize_t)strlen(s));
}

static void got(fx *f, int i, const char *want)
{
    assert_int_equal(f->e[i].len, strlen(want));
    assert_memory_equal(f->e[i].got, want, strlen(want));
}

/* Runs turns until every end has len bytes (or 50 turns). */
static void run_until(fx *f, const size_t *len)
{
    for (int t = 0; t < 50; t++) {
        bool all = true;
        for (int i = 0; i < N; i++)
            all = all && f->e[i].len >= len[i];
        if (all)
            return;
        uv_run(&f->loop, UV_RUN_NOWAIT);
    }
}

static void test_a_turns_reads_in_one_submission(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    for (int i = 0; i < N; i++)
        start(f, i);
    put(f, 0, "first");
    put(f, 1, "second");
    put(f, 2, "third");
    sb_iob_stats a, b;
    sb_iob_get_stats(&a);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* all three are readable in this turn's poll */
    sb_iob_get_stats(&b);
    got(f, 0, "first");
    got(f, 1, "second");
    got(f, 2, "third");
    assert_int_equal(b.recvs - a.recvs, 3);
    assert_int_equal(b.submits - a.submits, 1);
}

static void test_one_readable_socket_is_a_plain_receive(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    for (int i = 0; i < N; i++)
        start(f, i);
    put(f, 1, "alone");
    sb_iob_stats a, b;
    sb_iob_get_stats(&a);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sb_iob_get_stats(&b);
    got(f, 1, "alone");
    assert_int_equal(f->e[0].len + f->e[2].len, 0);
    assert_int_equal(b.recvs - a.recvs, 0);
    assert_int_equal(b.submits - a.submits, 0);
}

static void test_small_buffers_get_every_byte_in_order(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    f->buf_size = 3;
    start(f, 0);
    start(f, 1);
    put(f, 0, "abcdefghijklmnopqrstuvwxyz");
    put(f, 1, "0123456789");
    uv_run(&f->loop, UV_RUN_NOWAIT);
    got(f, 0, "abcdefghijklmnopqrstuvwxyz");
    got(f, 1, "0123456789");
}

static void on_guard(uv_timer_t *t)
{
    fx *f = t->data;
    f->guard_fired = true;
    uv_stop(&f->loop);
}

/* Restarts whichever reader has nothing yet. */
static void on_restart(uv_timer_t *t)
{
    fx *f = t->data;
    start(f, f->e[0].len ? 1 : 0);
}

static void test_stopped_by_another_keeps_its_bytes(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    start(f, 0);
    start(f, 1);
    put(f, 0, "zero;");
    put(f, 1, "one;");
    f->stop_others = true; /* the first read callback of the turn stops the other reader */
    uv_run(&f->loop, UV_RUN_NOWAIT);
    int first = f->e[0].len ? 0 : 1, other = 1 - first;
    assert_true(f->e[first].len > 0);
    assert_int_equal(f->e[other].len, 0); /* received, but held: it stopped reading */
    for (int t = 0; t < 5; t++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->e[other].len, 0); /* still stopped: nothing given */
    /* A restart from a timer (before the poll phase) gives the held bytes in that turn,
     * though the socket has nothing new: the poll does not block (or the guard fires). */
    f->want_total = f->e[first].len + (other == 0 ? strlen("zero;") : strlen("one;"));
    uv_timer_start(&f->restart, on_restart, 0, 0);
    uv_timer_start(&f->guard, on_guard, 5000, 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    /* Stopped by the read callback before the guard's time (the loop's clock, updated after
     * each poll, would have reached it had the poll waited). */
    assert_false(f->guard_fired);
    assert_true(uv_timer_get_due_in(&f->guard) > 0);
    uv_timer_stop(&f->guard);
    f->want_total = 0;
    got(f, other, other == 0 ? "zero;" : "one;");
    put(f, other, "more;");
    size_t want[N] = {0};
    want[first] = f->e[first].len;
    want[other] = other == 0 ? strlen("zero;more;") : strlen("one;more;");
    run_until(f, want);
    got(f, other, other == 0 ? "zero;more;" : "one;more;");
}

static void test_eof_stops_reading(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    start(f, 0);
    put(f, 0, "last");
    shutdown(f->e[0].peer, SHUT_WR);
    for (int t = 0; t < 10; t++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    got(f, 0, "last");
    assert_int_equal(f->e[0].eofs, 1);
    assert_int_equal(f->e[0].errors, 0);
    /* Reading stopped at EOF: nothing keeps the loop alive (a readable EOF would spin). */
    assert_int_equal(uv_loop_alive(&f->loop), 0);
}

static void test_forget_closes_the_readers_descriptor(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    start(f, 2);
    put(f, 2, "x");
    uv_run(&f->loop, UV_RUN_NOWAIT);
    got(f, 2, "x");
    sb_iob_read_forget((uv_stream_t *)&f->e[2].tcp);
    uv_close((uv_handle_t *)&f->e[2].tcp, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* the closing phase: the stream's and the reader's */
    /* No descriptor of the socket is left: the peer reads the end of the stream. */
    fcntl(f->e[2].peer, F_SETFL, O_NONBLOCK);
    char c;
    assert_int_equal(read(f->e[2].peer, &c, 1), 0);
}

/* A loopback TCP pair: *ours is wrapped by e, the peer's descriptor returned. */
static int tcp_pair(fx *f, int i)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    int ours = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    assert_true(ours >= 0);
    close(l);
    end *e = &f->e[i];
    uv_close((uv_handle_t *)&e->tcp, NULL); /* the socket pair's end */
    uv_run(&f->loop, UV_RUN_NOWAIT);
    close(e->peer);
    uv_tcp_init(&f->loop, &e->tcp);
    e->tcp.data = e;
    assert_int_equal(uv_tcp_open(&e->tcp, ours), 0);
    e->peer = c;
    return c;
}

/* A peer that resets the connection after its bytes (SO_LINGER 0): libuv stops the reader's
 * poll at POLLERR; the bytes, then the end or the error, still reach the owner. */
static void test_a_reset_after_data_still_ends_the_stream(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    int peer = tcp_pair(f, 0);
    start(f, 0);
    put(f, 0, "before the reset");
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(peer);
    f->e[0].peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* for teardown to close */
    uv_timer_start(&f->guard, on_guard, 5000, 0);
    uv_unref((uv_handle_t *)&f->guard);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* ends once reading stops (or the guard fires) */
    assert_false(f->guard_fired);
    got(f, 0, "before the reset");
    assert_int_equal(f->e[0].eofs + f->e[0].errors, 1);
}

/* No descriptor to spare: the stream is libuv's, and a second start and a stop reach libuv's
 * reading (UV_EALREADY; nothing delivered after the stop). */
static void test_out_of_descriptors_libuv_reads(void **state)
{
    fx *f = *state;
    if (f->skipped)
        skip();
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = fcntl(0, F_DUPFD, 0); /* the lowest free descriptor */
    assert_true(lowest >= 0);
    close(lowest);
    low = old;
    low.rlim_cur = (rlim_t)lowest; /* every descriptor below it is taken: a dup fails */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int rc1 = sb_iob_read_start((uv_stream_t *)&f->e[0].tcp, on_alloc, on_read);
    int rc2 = sb_iob_read_start((uv_stream_t *)&f->e[0].tcp, on_alloc, on_read);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, UV_EALREADY);
    sb_iob_stats a, b;
    sb_iob_get_stats(&a);
    put(f, 0, "via libuv");
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sb_iob_get_stats(&b);
    got(f, 0, "via libuv");
    assert_int_equal(b.recvs - a.recvs, 0);
    assert_int_equal(sb_iob_read_stop((uv_stream_t *)&f->e[0].tcp), 0);
    put(f, 0, "after the stop");
    for (int t = 0; t < 5; t++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    got(f, 0, "via libuv");
}

static void test_off_reads_through_libuv(void **state)
{
    fx *f = *state;
    sb_iob_close(&f->loop);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sb_iob_stats a, b;
    sb_iob_get_stats(&a);
    for (int i = 0; i < N; i++)
        start(f, i);
    put(f, 0, "p");
    put(f, 1, "q");
    uv_run(&f->loop, UV_RUN_NOWAIT);
    sb_iob_get_stats(&b);
    got(f, 0, "p");
    got(f, 1, "q");
    assert_int_equal(b.recvs - a.recvs, 0);
    assert_int_equal(b.submits - a.submits, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_turns_reads_in_one_submission, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_readable_socket_is_a_plain_receive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_buffers_get_every_byte_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped_by_another_keeps_its_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eof_stops_reading, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_closes_the_readers_descriptor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reset_after_data_still_ends_the_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_descriptors_libuv_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_off_reads_through_libuv, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
