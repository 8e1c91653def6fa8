#include "net/guard.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "base/alloc.h"

typedef struct post_item {
    void (*fn)(void *arg);
    void *arg;
    struct post_item *next;
} post_item;

/* loop->data of a loop with a mailbox (nothing else in switchboard uses a loop's data). */
typedef struct mailbox {
    uv_async_t async;
    pthread_mutex_t mu; /* the list only: posting never waits for the big lock */
    post_item *head, *tail;
    bool closed;
} mailbox;

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static bool on; /* set before any worker starts, never cleared while they run */
static uv_loop_t *main_loop;
static sb_guard_stats stats; /* under big */
/* Threads blocked in sb_guard_enter, and acquisitions that had waited: the main loop, between two
 * of its turns, lets a waiting worker in before it takes the lock back (a pthread mutex is not
 * fair: the thread that just unlocked usually wins). */
static atomic_int waiters;
static atomic_uint handoffs;

static __thread int depth;
static __thread uv_loop_t *my_loop;
static __thread bool touched_main; /* this thread acted on the main loop under the lock */
static __thread bool is_main;
static __thread uint64_t held_since;
static __thread int keep; /* sb_guard_keep nesting */

int sb_guard_start(uv_loop_t *main)
{
    main_loop = main;
    my_loop = main;
    is_main = true;
    on = true;
    return sb_guard_mailbox_open(main, false);
}

bool sb_guard_on(void)
{
    return on;
}

void sb_guard_enter(void)
{
    if (!on || depth++ > 0)
        return;
    if (pthread_mutex_trylock(&big) != 0) {
        uint64_t t0 = uv_hrtime();
        waiters++;
        pthread_mutex_lock(&big);
        waiters--;
        handoffs++;
        stats.contended++;
        stats.wait_ns += uv_hrtime() - t0;
    }
    stats.acquired++;
    held_since = uv_hrtime();
}

void sb_guard_leave(void)
{
    if (!on || --depth > 0)
        return;
    uint64_t held = uv_hrtime() - held_since;
    if (is_main)
        stats.main_held_ns += held;
    else
        stats.held_ns += held;
    bool wake = touched_main;
    touched_main = false;
    pthread_mutex_unlock(&big);
    if (wake)
        uv_async_send(&((mailbox *)main_loop->data)->async);
}

void sb_guard_get_stats(sb_guard_stats *out)
{
    *out = stats;
}

bool sb_guard_on_worker(void)
{
    return on && my_loop && !is_main;
}

int sb_guard_suspend(void)
{
    if (!on || is_main || depth == 0)
        return 0;
    int held = depth;
    depth = 1;
    sb_guard_leave();
    return held;
}

void sb_guard_resume(int held)
{
    if (!held)
        return;
    sb_guard_enter();
    depth = held;
}

int sb_guard_io_begin(void)
{
    return keep ? 0 : sb_guard_suspend();
}

void sb_guard_io_end(int held)
{
    sb_guard_resume(held);
}

void sb_guard_keep(void)
{
    keep++;
}

void sb_guard_unkeep(void)
{
    keep--;
}

uv_loop_t *sb_guard_loop(void)
{
    return my_loop;
}
void sb_guard_set_loop(uv_loop_t *loop)
{
    my_loop = loop;
}
uv_loop_t *sb_guard_main(void)
{
    return main_loop;
}

bool sb_guard_here(uv_loop_t *loop)
{
    if (!on)
        return true;
    if (!loop)
        loop = main_loop;
    if (loop == my_loop)
        return true;
    if (loop != main_loop || depth == 0)
        return false;
    /* The main loop waits for events with its time as it was: a timer started now is due
     * from this moment, not from when it last woke. */
    uv_update_time(main_loop);
    touched_main = true;
    return true;
}

static void run_posted(mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    post_item *it = mb->head;
    mb->head = mb->tail = NULL;
    pthread_mutex_unlock(&mb->mu);
    while (it) {
        post_item *next = it->next;
        sb_guard_enter();
        it->fn(it->arg);
        sb_guard_leave();
        sb_free(it);
        it = next;
    }
}

static void on_async(uv_async_t *a)
{
    run_posted(a->data);
}

int sb_guard_mailbox_open(uv_loop_t *loop, bool keep_alive)
{
    mailbox *mb = sb_calloc(1, sizeof(*mb));
    if (!mb)
        return UV_ENOMEM;
    pthread_mutex_init(&mb->mu, NULL);
    int rc = uv_async_init(loop, &mb->async, on_async);
    if (rc < 0) {
        pthread_mutex_destroy(&mb->mu);
        sb_free(mb);
        return rc;
    }
    mb->async.data = mb;
    if (!keep_alive)
        uv_unref((uv_handle_t *)&mb->async);
    loop->data = mb;
    return 0;
}

static void on_mailbox_closed(uv_handle_t *h)
{
    mailbox *mb = h->data;
    run_posted(mb); /* posted between the close and now */
    pthread_mutex_destroy(&mb->mu);
    sb_free(mb);
}

void sb_guard_mailbox_close(uv_loop_t *loop)
{
    mailbox *mb = loop->data;
    if (!mb)
        return;
    run_posted(mb);
    pthread_mutex_lock(&mb->mu);
    mb->closed = true;
    pthread_mutex_unlock(&mb->mu);
    loop->data = NULL;
    uv_close((uv_handle_t *)&mb->async, on_mailbox_closed);
}

int sb_guard_post(uv_loop_t *loop, void (*fn)(void *arg), void *arg)
{
    mailbox *mb = loop ? loop->data : NULL;
    if (!mb)
        return UV_EINVAL;
    post_item *it = sb_malloc(sizeof(*it));
    if (!it)
        return UV_ENOMEM;
    *it = (post_item){.fn = fn, .arg = arg};
    pthread_mutex_lock(&mb->mu);
    if (mb->closed) {
        pthread_mutex_unlock(&mb->mu);
        sb_free(it);
        return UV_EINVAL;
    }
    if (mb->tail)
        mb->tail->next = it;
    else
        mb->head = it;
    mb->tail = it;
    uv_async_send(&mb->async); /* under the list's lock: the mailbox cannot be closed meanwhile */
    pthread_mutex_unlock(&mb->mu);
    return 0;
}

int sb_guard_run_main(uv_loop_t *loop)
{
    if (!on)
        return uv_run(loop, UV_RUN_DEFAULT);
    sb_guard_enter();
    int alive;
    for (;;) {
        alive = uv_run(loop, UV_RUN_NOWAIT);
        if (!alive)
            break;
        int timeout = uv_backend_timeout(loop);
        /* Let go after every turn, also when the next one is due at once (an idle handle: a
         * KV-event backlog read 64 messages a turn): the workers' requests go between turns.
         * A worker already waiting is let in first. */
        unsigned h = handoffs;
        bool waiting = waiters > 0;
        sb_guard_leave();
        for (int i = 0; waiting && handoffs == h && waiters > 0 && i < 64; i++)
            sched_yield();
        if (timeout != 0) {
            /* Wait unlocked: the workers run meanwhile. The loop's epoll descriptor is
             * readable when an event is ready (libuv's embedding pattern). */
            struct pollfd p = {.fd = uv_backend_fd(loop), .events = POLLIN};
            (void)poll(&p, 1, timeout);
        }
        sb_guard_enter();
    }
    sb_guard_leave();
    return alive;
}
