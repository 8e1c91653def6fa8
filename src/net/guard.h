/* guard: the one lock over the gateway's shared state when it runs on several event loops
 * (`workers:` above 1, net/workers.h), and the ways work reaches another loop.
 *
 * Why one lock (docs/architecture.md, "Every core"): the routing state is one fleet-wide view
 * (router and endpoint accounting, prefix and precise indexes, flow control's queues, the
 * decisions ring, statistics, the snapshots of configuration), a graph of single-threaded
 * structures touched a few times per request. Accepting, reading, TLS, request framing,
 * reading a request's body (JSON, prompt, block hashes) and socket writes run on each worker's
 * loop outside the lock; a request takes it when it enters the gateway (the server's and the
 * upstream pools' callbacks) and leaves it when the callback returns, letting it go around its
 * socket writes (sb_guard_io_begin) unless a caller walks shared state (sb_guard_keep).
 *
 * The main loop (the control plane: admin listener, probes, discovery, KV events, the endpoint
 * picker, signals, reloads) holds the lock while it runs its callbacks and lets it go between
 * turns, a waiting worker first (sb_guard_run_main). So a worker that holds the lock may act on
 * the main loop's objects directly (sb_guard_here says so and wakes the main loop when the lock
 * is left); work for a worker's objects from another thread is posted to that worker
 * (sb_guard_post).
 *
 * Off (one loop, the default for one worker): every call here is a test of one global and
 * nothing else; the gateway runs exactly as it always has. */
#ifndef SB_NET_GUARD_H
#define SB_NET_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* The lock's figures, for /metrics (read under the lock). */
typedef struct sb_guard_stats {
    uint64_t acquired;     /* times a thread took it (outermost enters) */
    uint64_t contended;    /* ...of which found it held by another thread and waited */
    uint64_t wait_ns;      /* time spent waiting for it */
    uint64_t held_ns;      /* time it was held by the workers (the main loop's share apart) */
    uint64_t main_held_ns; /* time the main loop held it while running callbacks */
} sb_guard_stats;

/* Turns the lock on, with main as the main loop (before any worker thread starts). The
 * calling thread is the main loop's. 0, or a negative libuv error. */
int sb_guard_start(uv_loop_t *main);
bool sb_guard_on(void);
/* Takes the lock unless this thread holds it already (it nests). No-op when off. */
void sb_guard_enter(void);
/* Leaves one level; the outermost leave releases the lock (and wakes the main loop if this
 * thread acted on it). */
void sb_guard_leave(void);
void sb_guard_get_stats(sb_guard_stats *out);
/* Whether the calling thread is a worker (runs a loop that is not the main one). */
bool sb_guard_on_worker(void);
/* Lets go of the lock for a while on a worker, whatever the nesting (a body read that touches
 * nothing shared): returns what sb_guard_resume takes back. 0 (nothing to resume) when off, on
 * the main loop (which stays locked: others act on its objects), or not holding it. */
int sb_guard_suspend(void);
void sb_guard_resume(int held);
/* Around a system call on the worker's own descriptors (a socket write): the lock is let go for
 * its duration unless a caller up the stack walks shared state that others could change
 * meanwhile (sb_guard_keep). Returns what sb_guard_io_end takes back. */
int sb_guard_io_begin(void);
void sb_guard_io_end(int held);
/* Marks a stretch during which the lock must stay held whatever is called from it (flow
 * control's release loop, whose dispatches may write): nests. */
void sb_guard_keep(void);
void sb_guard_unkeep(void);

/* The loop the calling thread runs (set by sb_guard_start for the main thread and by each
 * worker thread); NULL before. */
uv_loop_t *sb_guard_loop(void);
void sb_guard_set_loop(uv_loop_t *loop);
/* The main loop (NULL when off). */
uv_loop_t *sb_guard_main(void);

/* May the calling thread act on loop's objects now? Its own loop: yes. The main loop from a
 * worker holding the lock: yes (the loop's time is brought up to date, and the main loop is
 * woken when the lock is left, so what was started there is seen). Another worker's loop: no:
 * post. loop NULL stands for the main loop. Always true when off. */
bool sb_guard_here(uv_loop_t *loop);

/* A loop's mailbox: an async handle and a locked list. Opened on the loop's own thread (or
 * before its thread starts), closed there. keep_alive: the open mailbox keeps the loop running
 * (a worker's, which runs until told to quit); else it never does (the main loop's). */
int sb_guard_mailbox_open(uv_loop_t *loop, bool keep_alive);
/* Runs what is still posted, then closes the handle (the loop's thread). */
void sb_guard_mailbox_close(uv_loop_t *loop);
/* Runs fn(arg) on loop's thread, under the lock, after what was posted before it. 0, or
 * UV_ENOMEM / UV_EINVAL (no mailbox: fn is not called). Any thread. */
int sb_guard_post(uv_loop_t *loop, void (*fn)(void *arg), void *arg);

/* Runs the main loop until it has nothing left to do: each turn locked, the lock let go between
 * turns (a waiting worker goes first) and while it waits for events. Returns what uv_run
 * would. */
int sb_guard_run_main(uv_loop_t *loop);

#endif
