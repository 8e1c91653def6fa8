/* net/guard.c: the lock over the gateway's shared state with workers, and the mailboxes. One
 * binary: the guard is off for the first test and turned on (for good) by the others, which run
 * in order (cmocka runs a group's tests in the order listed). */
#include "sb_test.h"

#include <uv.h>

#include "net/guard.h"

static void test_off_is_a_no_op(void **state)
{
    (void)state;
    assert_false(sb_guard_on());
    sb_guard_enter();
    sb_guard_enter();
    sb_guard_leave();
    sb_guard_leave();
    assert_int_equal(sb_guard_suspend(), 0);
    assert_int_equal(sb_guard_io_begin(), 0);
    assert_true(sb_guard_here(NULL)); /* one loop: everything is here */
    sb_guard_stats st;
    sb_guard_get_stats(&st);
    assert_int_equal(st.acquired, 0);
}

/* A worker: a loop with a mailbox on its own thread, until told to quit. */
typedef struct worker {
    uv_loop_t loop;
    uv_thread_t thread;
    int ran[8];
    int n_ran;
    bool on_worker[8];
    int io_held, io_held_kept;
} worker;

static void worker_main(void *arg)
{
    worker *w = arg;
    sb_guard_set_loop(&w->loop);
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

typedef struct item {
    worker *w;
    int value;
} item;

static void record(void *arg)
{
    item *it = arg;
    it->w->on_worker[it->w->n_ran] = sb_guard_on_worker() && sb_guard_loop() == &it->w->loop;
    it->w->ran[it->w->n_ran++] = it->value;
}

static void probe_io(void *arg)
{
    worker *w = arg;
    /* Posted functions run under the lock: a socket write would let it go... */
    int held = sb_guard_io_begin();
    w->io_held = held;
    sb_guard_io_end(held);
    /* ...unless a caller keeps it (flow control's release loop). */
    sb_guard_keep();
    w->io_held_kept = sb_guard_io_begin();
    sb_guard_io_end(w->io_held_kept);
    sb_guard_unkeep();
}

static void quit(void *arg)
{
    worker *w = arg;
    sb_guard_mailbox_close(&w->loop);
}

static uv_loop_t main_loop;

static void start_worker(worker *w)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(uv_loop_init(&w->loop), 0);
    assert_int_equal(sb_guard_mailbox_open(&w->loop, true), 0);
    assert_int_equal(uv_thread_create(&w->thread, worker_main, w), 0);
}

static void test_posts_run_in_order_on_the_worker_under_the_lock(void **state)
{
    (void)state;
    assert_int_equal(uv_loop_init(&main_loop), 0);
    assert_int_equal(sb_guard_start(&main_loop), 0);
    assert_true(sb_guard_on());
    assert_false(sb_guard_on_worker()); /* this thread runs the main loop */
    worker w;
    start_worker(&w);
    item items[3] = {{&w, 1}, {&w, 2}, {&w, 3}};
    sb_guard_enter(); /* as the main loop posts: holding the lock */
    for (int i = 0; i < 3; i++)
        assert_int_equal(sb_guard_post(&w.loop, record, &items[i]), 0);
    assert_false(sb_guard_here(&w.loop)); /* another worker's loop: post, never act */
    assert_true(sb_guard_here(&main_loop));
    sb_guard_leave();
    assert_int_equal(sb_guard_post(&w.loop, probe_io, &w), 0);
    assert_int_equal(sb_guard_post(&w.loop, quit, &w), 0);
    uv_thread_join(&w.thread); /* the loop ends once its mailbox is closed */
    assert_int_equal(w.n_ran, 3);
    assert_int_equal(w.ran[0], 1);
    assert_int_equal(w.ran[1], 2);
    assert_int_equal(w.ran[2], 3);
    assert_true(w.on_worker[0] && w.on_worker[2]);
    assert_int_equal(w.io_held, 1);      /* let go around the write, taken back after */
    assert_int_equal(w.io_held_kept, 0); /* kept: never let go */
    /* A closed mailbox refuses: the caller keeps what it meant to post. */
    assert_int_equal(sb_guard_post(&w.loop, record, &items[0]), UV_EINVAL);
    uv_run(&w.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&w.loop), 0);
}

/* Two threads increment one counter under the lock: the count is exact, and the lock says it
 * was taken (and found busy) while they raced. */
static long counter;

static void hammer(void *arg)
{
    (void)arg;
    static uv_loop_t dummy; /* a worker-like thread: not the main loop */
    sb_guard_set_loop(&dummy);
    for (int i = 0; i < 200000; i++) {
        sb_guard_enter();
        sb_guard_enter(); /* nests: one acquisition */
        counter++;
        sb_guard_leave();
        sb_guard_leave();
    }
}

static void test_the_lock_excludes_and_counts(void **state)
{
    (void)state;
    sb_guard_stats before, after;
    sb_guard_enter();
    sb_guard_get_stats(&before);
    sb_guard_leave();
    uv_thread_t a, b;
    assert_int_equal(uv_thread_create(&a, hammer, NULL), 0);
    assert_int_equal(uv_thread_create(&b, hammer, NULL), 0);
    uv_thread_join(&a);
    uv_thread_join(&b);
    sb_guard_enter();
    sb_guard_get_stats(&after);
    sb_guard_leave();
    assert_int_equal(counter, 400000);
    /* 400,000 outermost enters by the hammers, plus this thread's own. */
    assert_true(after.acquired - before.acquired >= 400000);
    assert_true(after.acquired - before.acquired <= 400002);
    assert_true(after.held_ns > before.held_ns);
}

typedef struct suspender {
    uv_sem_t suspended, taken;
    int held;
    int depth_after; /* sb_guard_suspend once resumed: the nesting is back */
} suspender;

static void suspend_thread(void *arg)
{
    suspender *sp = arg;
    static uv_loop_t dummy;
    sb_guard_set_loop(&dummy); /* a worker's thread */
    sb_guard_enter();
    sb_guard_enter();
    sp->held = sb_guard_suspend(); /* both levels let go at once */
    uv_sem_post(&sp->suspended);
    uv_sem_wait(&sp->taken); /* the main thread took and left the lock meanwhile */
    sb_guard_resume(sp->held);
    sb_guard_leave();
    sp->depth_after = sb_guard_suspend(); /* one level left: 1 */
    sb_guard_resume(sp->depth_after);
    sb_guard_leave();
}

static void test_suspend_lets_go_whatever_the_nesting(void **state)
{
    (void)state;
    /* The main loop's thread never suspends: workers act on its objects under the lock. */
    sb_guard_enter();
    assert_int_equal(sb_guard_suspend(), 0);
    sb_guard_leave();
    suspender sp = {0};
    uv_sem_init(&sp.suspended, 0);
    uv_sem_init(&sp.taken, 0);
    uv_thread_t t;
    assert_int_equal(uv_thread_create(&t, suspend_thread, &sp), 0);
    uv_sem_wait(&sp.suspended);
    sb_guard_enter(); /* blocks for good if the suspension kept the lock */
    sb_guard_leave();
    uv_sem_post(&sp.taken);
    uv_thread_join(&t);
    assert_int_equal(sp.held, 2);
    assert_int_equal(sp.depth_after, 1);
    uv_sem_destroy(&sp.suspended);
    uv_sem_destroy(&sp.taken);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_is_a_no_op),
        cmocka_unit_test(test_posts_run_in_order_on_the_worker_under_the_lock),
        cmocka_unit_test(test_the_lock_excludes_and_counts),
        cmocka_unit_test(test_suspend_lets_go_whatever_the_nesting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
