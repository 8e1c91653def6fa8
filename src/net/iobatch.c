/* iobatch: a loop turn's socket writes in one io_uring_enter (see iobatch.h). */
#include "net/iobatch.h"

#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"

/* Ring entries: a turn's writes beyond this go in several submissions of this many. */
#define IOB_ENTRIES 256
/* Buffers of a write kept in the op itself (a request: head and body pieces, at most 6). */
#define IOB_INLINE_BUFS 8
/* Rounds per flush: a write queued by a callback of the flush goes in the next round; past
 * this many the rest waits for the next turn (the loop does not block meanwhile). */
#define IOB_MAX_ROUNDS 4
/* Loops with a batcher at once: the workers (at most 64) and the main loop, with room. */
#define IOB_MAX_LOOPS 128
/* An op's result while its send is in the ring (no send returns it). */
#define IOB_IN_RING INT_MIN

typedef struct iob_op {
    uv_write_t inner; /* the hand-off to libuv */
    uv_write_t *req;  /* the caller's */
    uv_stream_t *s;
    uv_write_cb cb;
    uv_buf_t small[IOB_INLINE_BUFS];
    uv_buf_t *bufs; /* small, or allocated */
    unsigned n;
    size_t total;
    struct msghdr msg;
    int res;
    struct iob_op *next;
} iob_op;

typedef struct sb_iob {
    struct io_uring ring;
    uv_prepare_t flusher;
    uv_idle_t kick; /* active while writes wait: the loop's next poll does not block */
    iob_op *head, *tail;
    iob_op *spare; /* freed ops, for reuse */
    size_t n_spare;
    bool flushing;
    bool broken; /* a submission failed: everything goes to libuv */
    int open_handles;
} sb_iob;

typedef struct slot {
    _Atomic(uv_loop_t *) loop;
    sb_iob *iob;
} slot;

static slot slots[IOB_MAX_LOOPS];
static atomic_bool enabled = true;
static _Atomic uint64_t g_submits, g_sends, g_handed, g_released;

/* The last batcher this thread used: a loop's writes come from its own thread, and a thread
 * runs one loop, so this almost always hits. Cleared when that batcher closes (on this
 * thread: only the loop's own thread closes it). */
static __thread uv_loop_t *cached_loop;
static __thread sb_iob *cached;

static sb_iob *iob_of(uv_loop_t *loop)
{
    if (loop == cached_loop)
        return cached;
    for (size_t i = 0; i < IOB_MAX_LOOPS; i++) {
        if (atomic_load_explicit(&slots[i].loop, memory_order_acquire) == loop) {
            cached_loop = loop;
            cached = slots[i].iob;
            return cached;
        }
    }
    return NULL;
}

void sb_iob_set_enabled(bool on)
{
    atomic_store(&enabled, on);
}

static iob_op *op_new(sb_iob *b)
{
    iob_op *op = b->spare;
    if (op) {
        b->spare = op->next;
        b->n_spare--;
    } else {
        op = sb_malloc(sizeof(*op));
    }
    return op;
}

static void op_free(sb_iob *b, iob_op *op)
{
    if (op->bufs != op->small)
        sb_free(op->bufs);
    if (b && b->n_spare < IOB_ENTRIES) {
        op->next = b->spare;
        b->spare = op;
        b->n_spare++;
        return;
    }
    sb_free(op);
}

static void on_flush(uv_prepare_t *h);
static void on_kick(uv_idle_t *h)
{
    (void)h; /* its being active is what counts: the poll does not block */
}

/* Whether this kernel completes a non-blocking send within the submission, a full socket
 * included (MSG_DONTWAIT makes io_uring fail it with -EAGAIN rather than park it): the batcher
 * relies on it to have nothing in flight across turns. Tried on a socket pair filled until it
 * refuses. 0, or a negative errno (the ring is not used). */
static int probe_inline_sends(struct io_uring *ring)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    static char chunk[16384];
    int rc = -ENOTSUP;
    for (int i = 0; i < 1024; i++) { /* a socket pair's buffer fills in a few dozen */
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        io_uring_prep_send(sqe, sv[0], chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (io_uring_submit(ring) != 1)
            break;
        struct io_uring_cqe *cqe;
        if (io_uring_peek_cqe(ring, &cqe) != 0)
            break; /* parked: not completed inline (the ring's exit cancels it) */
        int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        if (res == -EAGAIN) {
            rc = 0;
            break;
        }
        if (res < 0) {
            rc = res;
            break;
        }
    }
    close(sv[0]);
    close(sv[1]);
    return rc;
}

int sb_iob_open(uv_loop_t *loop)
{
    if (!atomic_load(&enabled))
        return -EPERM;
    if (iob_of(loop))
        return 0;
    sb_iob *b = sb_calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    /* Completions need no task work (sends complete inline), so no interrupt is asked for
     * them. Not IORING_SETUP_SINGLE_ISSUER: a worker's ring is made on the main thread, before
     * the worker's own runs it. Older kernels lack the flag: plain. */
    int rc = io_uring_queue_init(IOB_ENTRIES, &b->ring, IORING_SETUP_COOP_TASKRUN);
    if (rc == -EINVAL)
        rc = io_uring_queue_init(IOB_ENTRIES, &b->ring, 0);
    if (rc < 0) {
        sb_free(b);
        return rc;
    }
    if ((rc = probe_inline_sends(&b->ring)) < 0) {
        io_uring_queue_exit(&b->ring);
        sb_free(b);
        return rc;
    }
    size_t i = 0;
    for (; i < IOB_MAX_LOOPS; i++) {
        uv_loop_t *none = NULL;
        if (atomic_compare_exchange_strong(&slots[i].loop, &none, (uv_loop_t *)-1))
            break;
    }
    if (i == IOB_MAX_LOOPS) {
        io_uring_queue_exit(&b->ring);
        sb_free(b);
        return -ENOSPC;
    }
    uv_prepare_init(loop, &b->flusher);
    uv_idle_init(loop, &b->kick);
    b->flusher.data = b->kick.data = b;
    uv_prepare_start(&b->flusher, on_flush);
    uv_unref((uv_handle_t *)&b->flusher); /* the kick keeps the loop alive while writes wait */
    slots[i].iob = b;
    atomic_store_explicit(&slots[i].loop, loop, memory_order_release);
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    sb_iob *b = h->data;
    if (--b->open_handles > 0)
        return; /* the batcher goes with the last of its two handles */
    while (b->spare) {
        iob_op *op = b->spare;
        b->spare = op->next;
        sb_free(op);
    }
    io_uring_queue_exit(&b->ring);
    sb_free(b);
}

static void flush(sb_iob *b);

void sb_iob_close(uv_loop_t *loop)
{
    sb_iob *b = iob_of(loop);
    if (!b)
        return;
    while (b->head && !b->flushing)
        flush(b);
    for (size_t i = 0; i < IOB_MAX_LOOPS; i++) {
        if (atomic_load(&slots[i].loop) == loop) {
            atomic_store(&slots[i].loop, NULL);
            break;
        }
    }
    cached_loop = NULL;
    cached = NULL;
    b->open_handles = 2;
    uv_close((uv_handle_t *)&b->flusher, on_closed);
    uv_close((uv_handle_t *)&b->kick, on_closed);
}

bool sb_iob_active(const uv_stream_t *s)
{
    return iob_of(s->loop) != NULL;
}

static void on_handed(uv_write_t *w, int status)
{
    iob_op *op = w->data;
    uv_write_t *req = op->req;
    uv_write_cb cb = op->cb;
    req->handle = op->s;
    op_free(iob_of(op->s->loop), op);
    cb(req, status);
}

/* To libuv, from the first byte not sent. A failure is the callback's, at once: uv_write
 * fails only on a stream that cannot be written (closing, or not open), and the caller's
 * callback handles its errors wherever it runs. */
static void hand_to_libuv(sb_iob *b, iob_op *op, size_t sent)
{
    unsigned i = 0;
    while (i < op->n && sent >= op->bufs[i].len)
        sent -= op->bufs[i++].len;
    if (i < op->n) {
        op->bufs[i].base += sent;
        op->bufs[i].len -= sent;
    }
    op->inner.data = op;
    int rc = uv_write(&op->inner, op->s, op->bufs + i, op->n - i, on_handed);
    if (rc < 0) {
        uv_write_t *req = op->req;
        uv_write_cb cb = op->cb;
        req->handle = op->s;
        op_free(b, op);
        cb(req, rc);
    }
}

int sb_iob_write(uv_write_t *req, uv_stream_t *s, const uv_buf_t bufs[], unsigned n, uv_write_cb cb)
{
    sb_iob *b = iob_of(s->loop);
    /* Behind bytes libuv still holds, order says libuv; so it does for a stream closing. */
    if (!b || b->broken || uv_stream_get_write_queue_size(s) > 0 || uv_is_closing((uv_handle_t *)s)) {
        sb_iob_release(s); /* whatever of s is still queued here goes first */
        return uv_write(req, s, bufs, n, cb);
    }
    iob_op *op = op_new(b);
    if (!op)
        return UV_ENOMEM;
    op->bufs = n <= IOB_INLINE_BUFS ? op->small : sb_malloc(n * sizeof(uv_buf_t));
    if (!op->bufs) {
        op->bufs = op->small;
        op_free(b, op);
        return UV_ENOMEM;
    }
    op->req = req;
    op->s = s;
    op->cb = cb;
    op->n = n;
    op->total = 0;
    for (unsigned i = 0; i < n; i++) {
        op->bufs[i] = bufs[i];
        op->total += bufs[i].len;
    }
    op->next = NULL;
    req->handle = s;
    if (b->tail)
        b->tail->next = op;
    else
        b->head = op;
    b->tail = op;
    if (!uv_is_active((uv_handle_t *)&b->kick))
        uv_idle_start(&b->kick, on_kick);
    return 0;
}

void sb_iob_release(uv_stream_t *s)
{
    sb_iob *b = iob_of(s->loop);
    if (!b || !b->head)
        return;
    iob_op **pp = &b->head, *prev = NULL;
    while (*pp) {
        iob_op *op = *pp;
        if (op->s != s) {
            prev = op;
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        if (b->tail == op)
            b->tail = prev;
        atomic_fetch_add_explicit(&g_released, 1, memory_order_relaxed);
        hand_to_libuv(b, op, 0);
    }
}

/* Whether an op of the round writes to op's stream already (O(n) each, over a turn's writes:
 * a few dozen at most under load). A socket has at most one send in the ring: were a first
 * one short, a second one's bytes would overtake the first one's rest. */
static bool stream_taken(const iob_op *round, const iob_op *op)
{
    for (const iob_op *o = round; o; o = o->next)
        if (o->s == op->s)
            return true;
    return false;
}

static void complete(sb_iob *b, iob_op *op)
{
    if (op->res >= 0 && (size_t)op->res == op->total) {
        uv_write_t *req = op->req;
        uv_write_cb cb = op->cb;
        req->handle = op->s;
        op_free(b, op);
        cb(req, 0);
        return;
    }
    if (op->res >= 0 || op->res == -EAGAIN) { /* the socket took part, or none: libuv waits for room */
        atomic_fetch_add_explicit(&g_handed, 1, memory_order_relaxed);
        hand_to_libuv(b, op, op->res > 0 ? (size_t)op->res : 0);
        return;
    }
    uv_write_t *req = op->req;
    uv_write_cb cb = op->cb;
    int status = op->res; /* a negative errno: libuv's error codes on Unix */
    req->handle = op->s;
    op_free(b, op);
    cb(req, status);
}

/* One round: what is queued now goes out in one submission; what the callbacks queue
 * meanwhile, a second write to a socket of this round and what the ring has no room for wait
 * for the next. */
static void round_once(sb_iob *b)
{
    iob_op *list = b->head;
    b->head = b->tail = NULL;
    iob_op *round = NULL, *round_tail = NULL, *later = NULL, *later_tail = NULL;
    unsigned in_ring = 0;
    for (iob_op *op = list, *next; op; op = next) {
        next = op->next;
        op->next = NULL;
        if (in_ring == IOB_ENTRIES || stream_taken(round, op)) {
            if (later_tail)
                later_tail->next = op;
            else
                later = op;
            later_tail = op;
            continue;
        }
        if (round_tail)
            round_tail->next = op;
        else
            round = op;
        round_tail = op;
        int fd = -1;
        /* Libuv holds bytes of this stream now (an earlier write's rest): behind them. A
         * broken ring is never entered again (what it holds would go out twice): libuv's. */
        if (b->broken || uv_stream_get_write_queue_size(op->s) > 0 || uv_fileno((uv_handle_t *)op->s, &fd) < 0) {
            op->res = -EAGAIN;
            continue;
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring); /* room: at most IOB_ENTRIES a round */
        if (op->n == 1) {
            io_uring_prep_send(sqe, fd, op->bufs[0].base, op->bufs[0].len, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else {
            memset(&op->msg, 0, sizeof(op->msg));
            op->msg.msg_iov = (struct iovec *)op->bufs; /* uv_buf_t is an iovec on Unix */
            op->msg.msg_iovlen = op->n;
            io_uring_prep_sendmsg(sqe, fd, &op->msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        io_uring_sqe_set_data(sqe, op);
        op->res = IOB_IN_RING;
        in_ring++;
    }
    int taken = 0;
    for (int tries = 0; in_ring && tries < 3; tries++) { /* a transient refusal is tried again */
        taken = io_uring_submit(&b->ring);
        if (taken != -EAGAIN && taken != -EINTR && taken != -EBUSY)
            break;
    }
    if (taken < 0)
        taken = 0;
    if ((unsigned)taken < in_ring && !b->broken) {
        /* The kernel refused the ring (or took part of it): the batcher stops here, and what
         * it did not take is libuv's (the rest of the ring is never entered again). */
        b->broken = true;
        SB_WARN("io_uring: a submission took %d of %u writes; this loop writes through libuv from now on", taken,
                in_ring);
    }
    /* Non-blocking sends complete within the submission (MSG_DONTWAIT: io_uring never parks
     * them for room); a completion not there yet is waited for, which does not block long. */
    for (int left = taken; left > 0;) {
        struct io_uring_cqe *cqe;
        if (io_uring_peek_cqe(&b->ring, &cqe) != 0 && io_uring_wait_cqe(&b->ring, &cqe) != 0)
            continue;
        iob_op *op = io_uring_cqe_get_data(cqe);
        op->res = cqe->res;
        io_uring_cqe_seen(&b->ring, cqe);
        left--;
    }
    if (taken) {
        atomic_fetch_add_explicit(&g_submits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_sends, (uint64_t)taken, memory_order_relaxed);
    }
    /* Held back ones first: they were written before anything the callbacks write now. */
    b->head = later;
    b->tail = later_tail;
    for (iob_op *op = round, *next; op; op = next) {
        next = op->next;
        if (op->res == IOB_IN_RING) /* never submitted */
            op->res = -EAGAIN;
        complete(b, op);
    }
}

static void flush(sb_iob *b)
{
    b->flushing = true;
    for (int i = 0; i < IOB_MAX_ROUNDS && b->head; i++)
        round_once(b);
    b->flushing = false;
    if (!b->head)
        uv_idle_stop(&b->kick);
}

static void on_flush(uv_prepare_t *h)
{
    sb_iob *b = h->data;
    if (b->head)
        flush(b);
    else /* released meanwhile: nothing keeps the loop awake */
        uv_idle_stop(&b->kick);
}

void sb_iob_get_stats(sb_iob_stats *out)
{
    out->submits = atomic_load_explicit(&g_submits, memory_order_relaxed);
    out->sends = atomic_load_explicit(&g_sends, memory_order_relaxed);
    out->handed = atomic_load_explicit(&g_handed, memory_order_relaxed);
    out->released = atomic_load_explicit(&g_released, memory_order_relaxed);
}
