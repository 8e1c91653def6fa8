/* iobatch: a loop turn's socket writes in one io_uring_enter (see iobatch.h). */
#include "net/iobatch.h"

#include <errno.h>
#include <fcntl.h>
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
/* Receives: a round's receives land in the batcher's own slots (an owner's alloc callback may
 * hand every connection the same buffer, as libuv reads one socket at a time), then are
 * copied to the owner's. A socket with more than a slot waiting is readable again next turn. */
#define IOB_RECV_SLOT (32 * 1024)
#define IOB_RECV_SLOTS 32

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

typedef struct sb_iob sb_iob;

/* A stream read through the batcher. Its own descriptor (a dup of the stream's) is watched by
 * the loop for readability (a second registration of the socket in the loop's epoll set, so
 * libuv's own, for writes, is untouched); the receive itself goes in the round's submission.
 * Lives on the heap until its poll handle closes, apart from its stream. */
typedef struct iob_reader {
    uv_poll_t poll;
    int fd;
    uv_stream_t *s; /* NULL once forgotten */
    sb_iob *b;
    uv_alloc_cb alloc;
    uv_read_cb read;
    bool reading;
    bool ready;     /* in the batcher's ready list */
    bool via_libuv; /* no descriptor could be had: libuv reads the stream (start and stop go there) */
    /* Received for the owner after it stopped reading (a callback of the same round stopped
     * it): given at the next start, before anything else. */
    char *held;
    size_t held_len;
    int held_status; /* UV_EOF or an error to give after the held bytes; 0: none */
    struct iob_reader *next_ready;
    struct iob_reader *hnext;
} iob_reader;

struct sb_iob {
    struct io_uring ring;
    uv_prepare_t flusher;
    uv_check_t reaper; /* after the poll phase: the readable sockets' receives in one submission */
    uv_idle_t kick; /* active while writes wait: the loop's next poll does not block */
    iob_op *head, *tail;
    iob_op *spare; /* freed ops, for reuse */
    size_t n_spare;
    bool flushing;
    bool broken; /* a submission failed: everything goes to libuv */
    int open_handles;
    /* Readers by stream (chained, power-of-two buckets), and those readable this turn. */
    iob_reader **tab;
    size_t tab_cap, n_readers;
    iob_reader *ready;
    char *slots; /* IOB_RECV_SLOTS x IOB_RECV_SLOT */
};

typedef struct slot {
    _Atomic(uv_loop_t *) loop;
    sb_iob *iob;
} slot;

static slot slots[IOB_MAX_LOOPS];
static atomic_bool enabled = true;
static _Atomic uint64_t g_submits, g_sends, g_handed, g_released, g_recvs;
static _Atomic int64_t g_readers; /* readers holding a descriptor now */

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
static void on_reap(uv_check_t *h);
static void on_kick(uv_idle_t *h)
{
    (void)h; /* its being active is what counts: the poll does not block */
}

/* Whether this kernel completes a non-blocking send (and receive) within the submission, a
 * full socket (an empty one) included (MSG_DONTWAIT makes io_uring fail it with -EAGAIN rather
 * than park it): the batcher relies on it to have nothing in flight across turns. Tried on a
 * socket pair filled until it refuses. 0, or a negative errno (the ring is not used). */
static int probe_inline(struct io_uring *ring)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    char chunk[16384];
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
    /* Receives likewise: one with bytes waiting, one on a socket with none. */
    for (int i = 0; rc == 0 && i < 2; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        io_uring_prep_recv(sqe, sv[1 - i], chunk, sizeof chunk, MSG_DONTWAIT);
        struct io_uring_cqe *cqe;
        if (io_uring_submit(ring) != 1 || io_uring_peek_cqe(ring, &cqe) != 0) {
            rc = -ENOTSUP;
            break;
        }
        int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        if (i == 0 ? res <= 0 : res != -EAGAIN)
            rc = res < 0 && res != -EAGAIN ? res : -ENOTSUP;
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
    if (!b || !(b->slots = sb_malloc((size_t)IOB_RECV_SLOTS * IOB_RECV_SLOT))) {
        sb_free(b);
        return -ENOMEM;
    }
    /* Completions need no task work (sends complete inline), so no interrupt is asked for
     * them. Not IORING_SETUP_SINGLE_ISSUER: a worker's ring is made on the main thread, before
     * the worker's own runs it. Older kernels lack the flag: plain. */
    int rc = io_uring_queue_init(IOB_ENTRIES, &b->ring, IORING_SETUP_COOP_TASKRUN);
    if (rc == -EINVAL)
        rc = io_uring_queue_init(IOB_ENTRIES, &b->ring, 0);
    if (rc < 0) {
        sb_free(b->slots);
        sb_free(b);
        return rc;
    }
    if ((rc = probe_inline(&b->ring)) < 0) {
        io_uring_queue_exit(&b->ring);
        sb_free(b->slots);
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
        sb_free(b->slots);
        sb_free(b);
        return -ENOSPC;
    }
    uv_prepare_init(loop, &b->flusher);
    uv_check_init(loop, &b->reaper);
    uv_idle_init(loop, &b->kick);
    b->flusher.data = b->reaper.data = b->kick.data = b;
    uv_prepare_start(&b->flusher, on_flush);
    uv_unref((uv_handle_t *)&b->flusher); /* the kick keeps the loop alive while writes wait */
    uv_check_start(&b->reaper, on_reap);
    uv_unref((uv_handle_t *)&b->reaper); /* the readers' polls keep it alive */
    slots[i].iob = b;
    atomic_store_explicit(&slots[i].loop, loop, memory_order_release);
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    sb_iob *b = h->data;
    if (--b->open_handles > 0)
        return; /* the batcher goes with the last of its handles */
    while (b->spare) {
        iob_op *op = b->spare;
        b->spare = op->next;
        sb_free(op);
    }
    io_uring_queue_exit(&b->ring);
    sb_free(b->tab);
    sb_free(b->slots);
    sb_free(b);
}

static void flush(sb_iob *b);
static void readers_to_libuv(sb_iob *b);

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
    readers_to_libuv(b); /* streams still open: libuv reads them from now on */
    b->open_handles = 3;
    uv_close((uv_handle_t *)&b->flusher, on_closed);
    uv_close((uv_handle_t *)&b->reaper, on_closed);
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
    if (!b->head && !b->ready)
        uv_idle_stop(&b->kick);
}

static void on_flush(uv_prepare_t *h)
{
    sb_iob *b = h->data;
    if (b->head)
        flush(b);
    else if (!b->ready) /* released meanwhile: nothing keeps the loop awake */
        uv_idle_stop(&b->kick);
}

/* ---- Reads ---- */

static size_t reader_bucket(const sb_iob *b, const uv_stream_t *s)
{
    uint64_t h = (uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (b->tab_cap - 1);
}

static iob_reader *reader_find(const sb_iob *b, const uv_stream_t *s)
{
    if (!b->tab_cap)
        return NULL;
    for (iob_reader *r = b->tab[reader_bucket(b, s)]; r; r = r->hnext)
        if (r->s == s)
            return r;
    return NULL;
}

static int reader_insert(sb_iob *b, iob_reader *r)
{
    if (b->n_readers >= b->tab_cap) { /* grow at one per bucket */
        size_t cap = b->tab_cap ? b->tab_cap * 2 : 64;
        iob_reader **tab = sb_calloc(cap, sizeof(*tab));
        if (!tab)
            return UV_ENOMEM;
        iob_reader **old = b->tab;
        size_t old_cap = b->tab_cap;
        b->tab = tab;
        b->tab_cap = cap;
        for (size_t i = 0; i < old_cap; i++) {
            for (iob_reader *o = old[i], *next; o; o = next) {
                next = o->hnext;
                size_t k = reader_bucket(b, o->s);
                o->hnext = tab[k];
                tab[k] = o;
            }
        }
        sb_free(old);
    }
    size_t k = reader_bucket(b, r->s);
    r->hnext = b->tab[k];
    b->tab[k] = r;
    b->n_readers++;
    return 0;
}

static void reader_unlink(sb_iob *b, iob_reader *r)
{
    for (iob_reader **pp = &b->tab[reader_bucket(b, r->s)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == r) {
            *pp = r->hnext;
            b->n_readers--;
            return;
        }
    }
}

/* Ready for the next round. Outside the poll phase (held bytes at a restart, a round's
 * leftovers) the kick keeps the next poll from blocking: the check phase after it serves it. */
static void mark_ready(sb_iob *b, iob_reader *r, bool kick)
{
    if (r->ready)
        return;
    r->ready = true;
    r->next_ready = b->ready;
    b->ready = r;
    if (kick && !uv_is_active((uv_handle_t *)&b->kick))
        uv_idle_start(&b->kick, on_kick);
}

static void reader_closed(uv_handle_t *h)
{
    iob_reader *r = h->data;
    close(r->fd);
    sb_free(r->held);
    sb_free(r);
}

/* The reader lets go of its stream: no callback from now on; its descriptor closes with its
 * poll (in the loop's closing phase, so a round under way may still hold it, forgotten). */
static void reader_forget(sb_iob *b, iob_reader *r)
{
    reader_unlink(b, r);
    if (r->ready) {
        for (iob_reader **pp = &b->ready; *pp; pp = &(*pp)->next_ready) {
            if (*pp == r) {
                *pp = r->next_ready;
                break;
            }
        }
        r->ready = false;
    }
    r->s = NULL;
    r->reading = false;
    if (r->via_libuv) {
        sb_free(r);
        return;
    }
    atomic_fetch_sub_explicit(&g_readers, 1, memory_order_relaxed);
    uv_close((uv_handle_t *)&r->poll, reader_closed);
}

static void on_readable(uv_poll_t *p, int status, int events)
{
    (void)events;
    (void)status; /* an error shows in the receive */
    iob_reader *r = p->data;
    if (r->reading)
        mark_ready(r->b, r, false); /* the check phase follows this poll phase */
}

static void stop_reading(iob_reader *r)
{
    r->reading = false;
    uv_poll_stop(&r->poll);
}

/* Gives the owner n bytes of data through its alloc and read callbacks (as many calls as its
 * buffers take), while it reads; what it stopped reading before is held. */
static void give(iob_reader *r, const char *data, size_t n)
{
    size_t off = 0;
    while (off < n && r->reading) {
        uv_buf_t buf = uv_buf_init(NULL, 0);
        r->alloc((uv_handle_t *)r->s, n - off, &buf);
        if (!buf.base || buf.len == 0) {
            r->read(r->s, UV_ENOBUFS, &buf);
            return; /* the rest of these bytes is lost: the owner was told (it closes) */
        }
        size_t k = n - off < buf.len ? n - off : buf.len;
        memcpy(buf.base, data + off, k);
        off += k;
        r->read(r->s, (ssize_t)k, &buf);
        if (!r->s)
            return; /* forgotten by the callback: it is closing */
    }
    if (off < n && r->s) { /* behind what is held already (a stop during give_held) */
        char *h = sb_realloc(r->held, r->held_len + (n - off));
        if (!h) {
            r->held_status = UV_ENOBUFS; /* a gap must not pass unnoticed: the restart hears it */
            return;
        }
        memcpy(h + r->held_len, data + off, n - off);
        r->held = h;
        r->held_len += n - off;
    }
}

/* EOF or an error: reading stops first (as libuv stops at EOF), then the owner hears it. */
static void give_status(iob_reader *r, int status)
{
    if (!r->reading) {
        r->held_status = status;
        return;
    }
    stop_reading(r);
    uv_buf_t none = uv_buf_init(NULL, 0);
    r->read(r->s, status, &none);
}

static void give_held(iob_reader *r)
{
    char *h = r->held;
    size_t len = r->held_len;
    r->held = NULL;
    r->held_len = 0;
    if (h) {
        give(r, h, len);
        sb_free(h);
    }
    if (r->s && r->reading && r->held_status && !r->held) {
        int st = r->held_status;
        r->held_status = 0;
        give_status(r, st);
    }
}

static void deliver(sb_iob *b, iob_reader **items, const int *res, unsigned n);

/* One round: a receive for each ready reader (up to the slots), in one submission, then each
 * result to its owner in turn. Callbacks that make other readers ready add them for the next
 * round. */
static void recv_round(sb_iob *b)
{
    iob_reader *list = b->ready, *items[IOB_RECV_SLOTS];
    int res[IOB_RECV_SLOTS];
    b->ready = NULL;
    unsigned n = 0;
    while (list) {
        iob_reader *r = list;
        list = r->next_ready;
        r->ready = false;
        if (!r->s || !r->reading)
            continue;
        if (r->held || r->held_status) {
            give_held(r); /* callbacks: other readers may be forgotten, but not those in `list` */
            continue;
        }
        if (n == IOB_RECV_SLOTS) {
            mark_ready(b, r, true);
            continue;
        }
        if (uv_is_closing((uv_handle_t *)r->s)) { /* closed without a forget: let go of it */
            reader_forget(b, r);
            continue;
        }
        items[n] = r;
        res[n] = -EAGAIN;
        n++;
    }
    if (!n)
        return;
    unsigned taken = 0;
    if (n > 1 && !b->broken) {
        for (unsigned i = 0; i < n; i++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring); /* rounds leave the ring empty */
            io_uring_prep_recv(sqe, items[i]->fd, b->slots + (size_t)i * IOB_RECV_SLOT, IOB_RECV_SLOT, MSG_DONTWAIT);
            io_uring_sqe_set_data64(sqe, i);
        }
        int rc = 0;
        for (int tries = 0; tries < 3; tries++) {
            rc = io_uring_submit(&b->ring);
            if (rc != -EAGAIN && rc != -EINTR && rc != -EBUSY)
                break;
        }
        taken = rc > 0 ? (unsigned)rc : 0;
        if (taken < n) {
            b->broken = true; /* what the ring still holds is never entered again */
            SB_WARN("io_uring: a submission took %u of %u receives; this loop reads and writes without the ring from "
                    "now on",
                    taken, n);
        }
        for (unsigned left = taken; left > 0;) {
            struct io_uring_cqe *cqe;
            if (io_uring_peek_cqe(&b->ring, &cqe) != 0 && io_uring_wait_cqe(&b->ring, &cqe) != 0)
                continue;
            uint64_t k = io_uring_cqe_get_data64(cqe);
            if (k < n)
                res[k] = cqe->res;
            io_uring_cqe_seen(&b->ring, cqe);
            left--;
        }
        if (taken) {
            atomic_fetch_add_explicit(&g_submits, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_recvs, (uint64_t)taken, memory_order_relaxed);
        }
    }
    /* One socket (a plain receive is one system call too, and costs less than a submission: no
     * ring to fill and reap), a broken ring, or what it did not take (the first `taken` of a
     * submission are the ones it took): plain receives, which need no ring. */
    for (unsigned i = taken; i < n; i++) {
        ssize_t got = recv(items[i]->fd, b->slots + (size_t)i * IOB_RECV_SLOT, IOB_RECV_SLOT, MSG_DONTWAIT);
        res[i] = got < 0 ? -errno : (int)got;
    }
    deliver(b, items, res, n);
}

/* Each result to its owner in turn. */
static void deliver(sb_iob *b, iob_reader **items, const int *res, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        iob_reader *r = items[i];
        if (!r->s)
            continue; /* forgotten by an earlier callback: its bytes go with the closing stream */
        if (res[i] > 0)
            give(r, b->slots + (size_t)i * IOB_RECV_SLOT, (size_t)res[i]);
        else if (res[i] == 0)
            give_status(r, UV_EOF);
        else if (res[i] != -EAGAIN && res[i] != -EINTR)
            give_status(r, res[i]); /* a negative errno: libuv's codes on Unix */
        if (!r->s || !r->reading)
            continue;
        if (!uv_is_active((uv_handle_t *)&r->poll)) {
            /* libuv stopped the poll itself (POLLERR: a reset after data): read on until the
             * receive reports the error or the end, or wait for readiness again. */
            if (res[i] == -EAGAIN)
                uv_poll_start(&r->poll, UV_READABLE, on_readable);
            else
                mark_ready(b, r, true);
        } else if (res[i] == IOB_RECV_SLOT || res[i] == -EINTR) {
            mark_ready(b, r, false); /* more may wait: another round of this turn (or the next turn) */
        }
    }
}

static void on_reap(uv_check_t *h)
{
    sb_iob *b = h->data;
    for (int i = 0; i < IOB_MAX_ROUNDS && b->ready; i++)
        recv_round(b);
    if (b->ready && !uv_is_active((uv_handle_t *)&b->kick)) /* left for the next turn: no blocking poll */
        uv_idle_start(&b->kick, on_kick);
}

/* The batcher closes with streams still open: libuv reads those that were reading (their held
 * bytes given first); bytes held for a stopped one go with the batcher. */
static void readers_to_libuv(sb_iob *b)
{
    for (size_t i = 0; i < b->tab_cap; i++) {
        while (b->tab[i]) {
            iob_reader *r = b->tab[i];
            if (r->reading && (r->held || r->held_status))
                give_held(r);
            if (!r->s) /* forgotten meanwhile (gone from the table too) */
                continue;
            uv_stream_t *s = r->s;
            bool reading = r->reading && !r->via_libuv;
            uv_alloc_cb alloc = r->alloc;
            uv_read_cb read = r->read;
            reader_forget(b, r);
            if (reading && !uv_is_closing((uv_handle_t *)s))
                uv_read_start(s, alloc, read);
        }
    }
}

int sb_iob_read_start(uv_stream_t *s, uv_alloc_cb alloc, uv_read_cb read)
{
    sb_iob *b = iob_of(s->loop);
    iob_reader *r = b ? reader_find(b, s) : NULL;
    if (!r && (!b || b->broken || s->type != UV_TCP))
        return uv_read_start(s, alloc, read);
    if (r && r->via_libuv)
        return uv_read_start(s, alloc, read);
    if (!r) {
        int fd = -1;
        if (uv_fileno((uv_handle_t *)s, &fd) < 0 || uv_is_closing((uv_handle_t *)s))
            return UV_EINVAL;
        if (!(r = sb_calloc(1, sizeof(*r))))
            return UV_ENOMEM;
        r->s = s;
        r->b = b;
        r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (r->fd < 0) {
            /* Out of descriptors: libuv reads this stream, and the table says so (a later
             * start must meet libuv's reading, a stop must stop it). */
            r->via_libuv = true;
            int rc = reader_insert(b, r);
            if (rc < 0) {
                sb_free(r);
                return rc;
            }
            return uv_read_start(s, alloc, read);
        }
        int rc = uv_poll_init_socket(s->loop, &r->poll, r->fd);
        if (rc < 0) {
            close(r->fd);
            sb_free(r);
            return rc;
        }
        r->poll.data = r;
        if ((rc = reader_insert(b, r)) < 0) {
            r->s = NULL;
            uv_close((uv_handle_t *)&r->poll, reader_closed);
            return rc;
        }
        atomic_fetch_add_explicit(&g_readers, 1, memory_order_relaxed);
    }
    if (r->reading)
        return UV_EALREADY;
    r->alloc = alloc;
    r->read = read;
    r->reading = true;
    int rc = uv_poll_start(&r->poll, UV_READABLE, on_readable);
    if (rc < 0) {
        r->reading = false;
        return rc;
    }
    if (r->held || r->held_status)
        mark_ready(b, r, true);
    return 0;
}

int sb_iob_read_stop(uv_stream_t *s)
{
    sb_iob *b = iob_of(s->loop);
    iob_reader *r = b ? reader_find(b, s) : NULL;
    if (!r || r->via_libuv)
        return uv_read_stop(s);
    if (r->reading)
        stop_reading(r);
    return 0;
}

void sb_iob_read_forget(uv_stream_t *s)
{
    sb_iob *b = iob_of(s->loop);
    iob_reader *r = b ? reader_find(b, s) : NULL;
    if (r)
        reader_forget(b, r);
}

void sb_iob_get_stats(sb_iob_stats *out)
{
    out->submits = atomic_load_explicit(&g_submits, memory_order_relaxed);
    out->sends = atomic_load_explicit(&g_sends, memory_order_relaxed);
    out->handed = atomic_load_explicit(&g_handed, memory_order_relaxed);
    out->released = atomic_load_explicit(&g_released, memory_order_relaxed);
    out->recvs = atomic_load_explicit(&g_recvs, memory_order_relaxed);
    int64_t readers = atomic_load_explicit(&g_readers, memory_order_relaxed);
    out->readers = readers > 0 ? (uint64_t)readers : 0;
}
