/* sigwatch: a process's stop and reload signals read from a descriptor (signalfd) on one loop.
 *
 * Why not uv_signal: libuv's signals run a handler on whichever thread the kernel picks, which
 * writes to a pipe the loop reads. With worker threads that works in a release build, but
 * under ThreadSanitizer (which defers a handler to the receiving thread's next intercepted
 * call) an idle two-worker gateway missed its SIGTERM in about 1 run of 30 (CI, 2026-12-04):
 * the signal was taken by a thread and never reached the loop. Here no handler runs at all:
 * the signals are blocked in every thread (the mask is set before the first thread starts and
 * threads inherit it), so the kernel keeps them pending for the process until the loop reads
 * them from the descriptor. There is no thread to lose them to.
 *
 * Order: sb_sigwatch_block before any thread is created (libuv's thread pool, the workers,
 * ZeroMQ's), then sb_sigwatch_start on the loop that acts on them. A signal sent in between
 * waits, pending, and is read when the loop first runs. Children started through uv_spawn
 * begin with an empty mask (libuv resets it before exec). */
#ifndef SB_NET_SIGWATCH_H
#define SB_NET_SIGWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef void (*sb_sigwatch_cb)(void *arg, int signum);

typedef struct sb_sigwatch {
    uv_poll_t poll;
    int fd;
    bool closed;
    sb_sigwatch_cb cb;
    void *arg;
} sb_sigwatch;

/* Blocks the signals in the calling thread (and so in every thread it starts from now on).
 * 0, or a negative errno. */
int sb_sigwatch_block(const int *sigs, size_t n);
/* Reads the signals (which must be blocked) on loop; cb runs on the loop, once per signal
 * received (of those pending together, the lowest number first: the kernel's order). A signal
 * sent several times before the loop reads it is delivered once (the kernel keeps one pending
 * instance of a standard signal). 0, or a negative errno. */
int sb_sigwatch_start(sb_sigwatch *w, uv_loop_t *loop, const int *sigs, size_t n, sb_sigwatch_cb cb, void *arg);
/* Stops reading; the descriptor closes with the handle. Signals that arrive later stay
 * blocked and pending: the process ends without acting on them. Safe from within cb (no
 * later signal of the same read reaches cb), twice, and after a failed start. */
void sb_sigwatch_close(sb_sigwatch *w);

#endif
