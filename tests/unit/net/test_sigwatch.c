/* net/sigwatch: blocked signals are read on the loop, whichever thread they were sent from or
 * would have been delivered to; a close from within the callback stops the rest. The signals
 * used are SIGUSR1 and SIGUSR2, blocked for the whole test process. */
#include "sb_test.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <uv.h>

#include "net/sigwatch.h"

static const int sigs[] = {SIGUSR1, SIGUSR2};

typedef struct fx {
    uv_loop_t loop;
    sb_sigwatch w;
    int got[8];
    int n_got;
    bool close_in_cb;
} fx;

static void on_signal(void *arg, int signum)
{
    fx *f = arg;
    assert_true(f->n_got < 8);
    f->got[f->n_got++] = signum;
    if (f->close_in_cb)
        sb_sigwatch_close(&f->w);
}

static int setup(void **state)
{
    static fx f;
    f = (fx){0};
    if (sb_sigwatch_block(sigs, 2) < 0 || uv_loop_init(&f.loop) < 0)
        return -1;
    *state = &f;
    return 0;
}

/* Nothing of the test may stay pending for the next one. */
static void drain_pending(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    struct timespec zero = {0};
    while (sigtimedwait(&set, NULL, &zero) > 0)
        ;
}

static int teardown(void **state)
{
    fx *f = *state;
    sb_sigwatch_close(&f->w);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&f->loop);
    drain_pending();
    return rc == 0 ? 0 : -1;
}

/* Runs turns until cb has been called n times (or the loop has nothing to wait for). */
static void run_until(fx *f, int n)
{
    for (int i = 0; i < 100 && f->n_got < n; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
}

static void test_a_signal_reaches_the_loop(void **state)
{
    fx *f = *state;
    assert_int_equal(sb_sigwatch_start(&f->w, &f->loop, sigs, 2, on_signal, f), 0);
    assert_int_equal(kill(getpid(), SIGUSR2), 0);
    run_until(f, 1);
    assert_int_equal(f->n_got, 1);
    assert_int_equal(f->got[0], SIGUSR2);
    /* Sent before the loop reads: both arrive, the lower number first. */
    assert_int_equal(kill(getpid(), SIGUSR2), 0);
    assert_int_equal(kill(getpid(), SIGUSR1), 0);
    run_until(f, 3);
    assert_int_equal(f->n_got, 3);
    assert_int_equal(f->got[1], SIGUSR1);
    assert_int_equal(f->got[2], SIGUSR2);
}

static void *send_from_thread(void *arg)
{
    (void)arg;
    /* This thread inherited the mask: the signal stays pending for the process (not the
     * thread) until the loop reads it. */
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    if (!sigismember(&cur, SIGUSR1))
        return (void *)1;
    kill(getpid(), SIGUSR1);
    return NULL;
}

static void test_a_signal_from_another_thread_reaches_the_loop(void **state)
{
    fx *f = *state;
    assert_int_equal(sb_sigwatch_start(&f->w, &f->loop, sigs, 2, on_signal, f), 0);
    pthread_t t;
    void *ret = (void *)2;
    assert_int_equal(pthread_create(&t, NULL, send_from_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_null(ret);
    run_until(f, 1);
    assert_int_equal(f->n_got, 1);
    assert_int_equal(f->got[0], SIGUSR1);
}

static void test_close_from_the_callback_stops_the_rest(void **state)
{
    fx *f = *state;
    f->close_in_cb = true;
    assert_int_equal(sb_sigwatch_start(&f->w, &f->loop, sigs, 2, on_signal, f), 0);
    assert_int_equal(kill(getpid(), SIGUSR1), 0);
    assert_int_equal(kill(getpid(), SIGUSR2), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* ends: the watcher closed itself */
    assert_int_equal(f->n_got, 1);
    assert_int_equal(f->got[0], SIGUSR1);
    assert_int_equal(f->w.fd, -1);
    sb_sigwatch_close(&f->w); /* twice: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_signal_reaches_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_signal_from_another_thread_reaches_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_the_callback_stops_the_rest, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
