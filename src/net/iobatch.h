/* iobatch: a loop turn's socket writes leave in one system call (io_uring), and its reads
 * arrive in one more.
 *
 * Why: a system call costs ~0.96 us on the machines measured here (page-table isolation;
 * docs/benchmarks.md section 15, "Session 32"), and a proxied request made two writes of its
 * own (the request to the model server, the answer to the client), each a system call. Writes
 * queued here during a loop turn are sent together when the loop is about to wait (a prepare
 * handle): each as a non-blocking send (MSG_DONTWAIT, so io_uring completes it at once and
 * never waits for room), all in one io_uring_enter. What a send could not write whole goes to
 * libuv's own queue (uv_write), which finishes it as it always has.
 *
 * Reads likewise (sb_iob_read_start): a turn's readable sockets are received from in one
 * submission, after the poll phase, instead of one `read` each. Not for sockets this loop
 * does not own. A loop without a batcher (io_uring unavailable or turned off: `io_uring:
 * false`) reads and writes through libuv.
 *
 * sb_iob_write has uv_write's contract: the buffers stay valid until the callback, the
 * callback never runs from within the call that queued, and a stream's bytes leave in the
 * order written. One more duty: before anything else writes to a stream with queued writes,
 * shuts it down or closes it, sb_iob_release(stream) hands its queued writes to libuv, in
 * order (uv_close then cancels them as it cancels its own). */
#ifndef SB_NET_IOBATCH_H
#define SB_NET_IOBATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct sb_iob_stats {
    uint64_t submits;  /* io_uring_enter calls */
    uint64_t sends;    /* writes sent through the ring */
    uint64_t handed;   /* ...of which libuv finished (the socket took only part, or none) */
    uint64_t released; /* writes handed to libuv before they were sent (a close, another writer) */
    uint64_t recvs;    /* socket reads received through the ring */
    uint64_t readers;  /* streams read through a batcher now (each holds a second descriptor) */
} sb_iob_stats;

/* Whether loops opened from now on batch (default true). `io_uring: false` turns it off. */
void sb_iob_set_enabled(bool on);
/* A batcher for loop, on the thread that runs it (or before that thread starts). 0; or a
 * negative errno when io_uring cannot be had (the loop then writes through libuv; not an
 * error for the caller to report beyond a line in the log). Idempotent. */
int sb_iob_open(uv_loop_t *loop);
/* Sends what is queued (callbacks run here), then closes the batcher's handles; the loop must
 * run once more for them to close. On the loop's thread. No-op without a batcher. */
void sb_iob_close(uv_loop_t *loop);
/* Whether s's loop batches its writes. */
bool sb_iob_active(const uv_stream_t *s);
/* uv_write, batched (see above). 0, or a negative libuv error (then cb is never called). */
int sb_iob_write(uv_write_t *req, uv_stream_t *s, const uv_buf_t bufs[], unsigned n, uv_write_cb cb);
/* Hands s's queued writes to libuv (uv_write, in order): before a close, a shutdown or a
 * write that does not go through here. Cheap when nothing is queued. */
void sb_iob_release(uv_stream_t *s);
/* uv_read_start / uv_read_stop, batched: the receives of a loop turn's readable sockets go in
 * one submission (after the poll phase), each into the batcher's own buffer, then are copied
 * to the owner's (alloc_cb, then read_cb, as libuv calls them; a callback may get less than
 * was received and be called again). Reading stops at EOF and on an error before read_cb
 * hears of it, as libuv's does. Bytes received for an owner that stopped reading meanwhile
 * are kept and given first when it starts again. Only TCP streams; others, and a loop
 * without a batcher, read through libuv. A stream read through here must be forgotten
 * (sb_iob_read_forget) before uv_close: its reader holds a descriptor of the socket. */
int sb_iob_read_start(uv_stream_t *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
int sb_iob_read_stop(uv_stream_t *s);
void sb_iob_read_forget(uv_stream_t *s);
/* The figures of every batcher so far, summed (any thread). */
void sb_iob_get_stats(sb_iob_stats *out);

#endif
