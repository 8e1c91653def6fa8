/* kv_publisher: see kv_publisher.h. */
#include "sim/kv_publisher.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"

#define DEFAULT_BUFFER_STEPS 10000         /* vLLM KVEventsConfig.buffer_steps */
#define DEFAULT_HWM 100000                 /* vLLM KVEventsConfig.hwm */
#define DEFAULT_BUFFER_BYTES (64ull << 20) /* ours: bounds the replay buffer's memory */
#define ENDPOINT_MAX 256

typedef struct kept {
    uint64_t seq;
    char *payload;
    size_t len;
} kept;

struct sb_kv_pub {
    sb_kv_pub_opts o;
    sb_kv_encode_opts enc;
    char topic[ENDPOINT_MAX];
    char ep[ENDPOINT_MAX], replay_ep[ENDPOINT_MAX];
    void *pub, *router;
    uv_poll_t poll;
    bool polling;
    void (*on_closed)(void *ud);
    void *ud;

    uint64_t seq; /* next sequence number */
    kept *ring;   /* the replay buffer, oldest at head */
    uint32_t head, count;
    uint64_t bytes;

    sb_buf events; /* the pending step's events, encoded back to back */
    uint32_t n_events;
    uint64_t step;
    bool pending;
    uint64_t lost_seen;
    sb_kv_pub_stats st;
};

void sb_kv_pub_opts_default(sb_kv_pub_opts *o)
{
    *o = (sb_kv_pub_opts){.endpoint = "tcp://*:5557",
                          .topic = "",
                          .buffer_steps = DEFAULT_BUFFER_STEPS,
                          .buffer_bytes = DEFAULT_BUFFER_BYTES,
                          .hwm = DEFAULT_HWM};
}

int sb_kv_pub_endpoint(const char *endpoint, uint32_t offset, char *out, size_t cap)
{
    size_t n = strlen(endpoint);
    const char *colon = strrchr(endpoint, ':');
    bool numeric = strncmp(endpoint, "tcp://", 6) == 0 && colon && colon[1] && colon > endpoint + 5;
    for (const char *c = colon ? colon + 1 : ""; numeric && *c; c++)
        numeric = *c >= '0' && *c <= '9' && c - colon <= 5;
    if (!numeric || offset == 0) {
        if (n + 1 > cap)
            return -EINVAL;
        memcpy(out, endpoint, n + 1);
        return 0;
    }
    unsigned long port = strtoul(colon + 1, NULL, 10) + offset;
    int w = snprintf(out, cap, "%.*s:%lu", (int)(colon - endpoint), endpoint, port);
    return port > 65535 || w < 0 || (size_t)w >= cap ? -EINVAL : 0;
}

/* ---- sending -------------------------------------------------------------------------------- */

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void be64(uint64_t v, unsigned char out[8])
{
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(v >> (56 - 8 * i));
}

static void ring_drop_oldest(sb_kv_pub *p)
{
    kept *k = &p->ring[p->head];
    p->bytes -= k->len;
    sb_free(k->payload);
    k->payload = NULL;
    p->head = (p->head + 1) % p->o.buffer_steps;
    p->count--;
}

/* Keeps a sent batch for replay (taking the payload), within both bounds. */
static void ring_keep(sb_kv_pub *p, uint64_t seq, sb_buf *payload)
{
    while (p->count && (p->count == p->o.buffer_steps || p->bytes + payload->len > p->o.buffer_bytes))
        ring_drop_oldest(p);
    if (payload->len > p->o.buffer_bytes)
        return; /* larger than the whole buffer: never replayable */
    kept *k = &p->ring[(p->head + p->count) % p->o.buffer_steps];
    k->seq = seq;
    k->len = payload->len;
    k->payload = sb_buf_steal(payload, NULL);
    p->bytes += k->len;
    p->count++;
}

/* Sends a multipart message without waiting; PUB drops it past the high-water mark and a
 * ROUTER to a peer that is gone or full, both silently, as vLLM's sockets do. */
static void send_parts(void *sock, const void *const *parts, const size_t *lens, int n)
{
    for (int i = 0; i < n; i++)
        if (zmq_send(sock, parts[i], lens[i], ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
            return;
}

static void publish_batch(sb_kv_pub *p, const char *events, size_t len, uint32_t n)
{
    sb_buf payload = {0};
    if (sb_kv_encode_batch(&payload, wall_seconds(), events, len, n, 0) < 0) {
        p->st.encode_failures++;
        sb_buf_free(&payload);
        return;
    }
    uint64_t seq = p->seq++;
    p->st.batches++;
    if (p->o.drop_every && (seq + 1) % p->o.drop_every == 0) {
        p->st.dropped++;
    } else {
        unsigned char s[8];
        be64(seq, s);
        const void *parts[] = {p->topic, s, payload.data};
        size_t lens[] = {strlen(p->topic), 8, payload.len};
        send_parts(p->pub, parts, lens, 3);
    }
    ring_keep(p, seq, &payload);
    sb_buf_free(&payload);
}

static void flush_pending(sb_kv_pub *p)
{
    if (!p->pending)
        return;
    publish_batch(p, p->events.data, p->events.len, p->n_events);
    sb_buf_reset(&p->events);
    p->n_events = 0;
    p->pending = false;
}

/* What cannot be published faithfully is replaced by "forget everything of this replica". */
static void publish_cleared(sb_kv_pub *p)
{
    sb_buf b = {0};
    sb_engine_kv_event ev = {.kind = SB_ENGINE_KV_CLEARED};
    if (sb_kv_encode_event(&b, &ev, &p->enc) == 0)
        publish_batch(p, b.data, b.len, 1);
    else
        p->st.encode_failures++;
    sb_buf_free(&b);
}

void sb_kv_pub_drain(sb_kv_pub *p, sb_engine *e)
{
    size_t n = sb_engine_kv_count(e);
    bool failed = false;
    for (size_t i = 0; i < n; i++) {
        sb_engine_kv_event ev;
        sb_engine_kv_event_at(e, i, &ev);
        if (p->pending && ev.step != p->step)
            flush_pending(p);
        if (!p->pending) {
            p->pending = true;
            p->step = ev.step;
        }
        if (sb_kv_encode_event(&p->events, &ev, &p->enc) < 0)
            failed = true;
        else
            p->n_events++;
    }
    sb_engine_kv_drain(e);
    sb_engine_metrics m;
    sb_engine_metrics_get(e, &m);
    sb_engine_step cur;
    if (p->pending && (p->step < m.num_steps_total || !sb_engine_current_step(e, &cur)))
        flush_pending(p);
    uint64_t lost = sb_engine_kv_lost(e);
    if (failed || lost != p->lost_seen) {
        flush_pending(p);
        p->lost_seen = lost;
        p->st.encode_failures += failed;
        publish_cleared(p);
    }
}

void sb_kv_pub_restart(sb_kv_pub *p)
{
    while (p->count)
        ring_drop_oldest(p);
    sb_buf_reset(&p->events);
    p->n_events = 0;
    p->pending = false;
    p->seq = 0;
    p->lost_seen = 0;
}

/* ---- replay --------------------------------------------------------------------------------- */

/* Answers one request already read: identity, delimiter and an 8-byte start. */
static void answer_replay(sb_kv_pub *p, const zmq_msg_t *id, uint64_t start)
{
    static const unsigned char end_seq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    unsigned char s[8];
    size_t id_len = zmq_msg_size((zmq_msg_t *)id);
    const void *idp = zmq_msg_data((zmq_msg_t *)id);
    for (uint32_t i = 0; i < p->count; i++) {
        const kept *k = &p->ring[(p->head + i) % p->o.buffer_steps];
        if (k->seq < start)
            continue;
        be64(k->seq, s);
        const void *parts[] = {idp, "", s, k->payload};
        size_t lens[] = {id_len, 0, 8, k->len};
        send_parts(p->router, parts, lens, 4);
        p->st.replayed++;
    }
    const void *parts[] = {idp, "", end_seq, ""};
    size_t lens[] = {id_len, 0, 8, 0};
    send_parts(p->router, parts, lens, 4);
    p->st.replays++;
}

/* Reads one whole message from the ROUTER (0), or -1 if none is ready. Only the first three
 * frames are kept; *n counts them all. */
static int read_request(sb_kv_pub *p, zmq_msg_t f[3], int *n)
{
    *n = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return *n ? 0 : -1;
        }
        bool more = zmq_msg_more(&m);
        if (*n < 3)
            f[*n] = m;
        else
            zmq_msg_close(&m);
        (*n)++;
        if (!more)
            return 0;
    }
}

static void on_router(uv_poll_t *h, int status, int events)
{
    sb_kv_pub *p = h->data;
    /* ZMQ_FD is edge-triggered: read while ZMQ_EVENTS says a message waits. */
    for (;;) {
        int zev = 0;
        size_t sz = sizeof zev;
        if (zmq_getsockopt(p->router, ZMQ_EVENTS, &zev, &sz) < 0 || !(zev & ZMQ_POLLIN))
            return;
        zmq_msg_t f[3];
        int n;
        if (read_request(p, f, &n) < 0)
            return;
        if (n == 3 && zmq_msg_size(&f[1]) == 0 && zmq_msg_size(&f[2]) == 8) {
            const unsigned char *d = zmq_msg_data(&f[2]);
            uint64_t start = 0;
            for (int i = 0; i < 8; i++)
                start = start << 8 | d[i];
            answer_replay(p, &f[0], start);
        } else {
            p->st.bad_requests++;
            SB_WARN("sim: kv-events replay request dropped (%d frames; wanted an 8-byte start seq)", n);
        }
        for (int i = 0; i < (n < 3 ? n : 3); i++)
            zmq_msg_close(&f[i]);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

/* vLLM's rule (ZmqEventPublisher._socket_setup): bind a wildcard or local address, else connect. */
static bool wants_bind(const char *ep)
{
    return strchr(ep, '*') || strstr(ep, "::") || !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9);
}

static int open_socket(void *zctx, int type, const char *ep, bool bind, int hwm, char *bound, size_t cap, void **out)
{
    void *s = zmq_socket(zctx, type);
    if (!s)
        return -zmq_errno();
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if ((bind ? zmq_bind(s, ep) : zmq_connect(s, ep)) < 0) {
        int rc = -zmq_errno();
        zmq_close(s);
        return rc;
    }
    size_t len = cap;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len) < 0 || !bound[0])
        snprintf(bound, cap, "%s", ep);
    *out = s;
    return 0;
}

static void free_pub(sb_kv_pub *p)
{
    while (p->count)
        ring_drop_oldest(p);
    sb_free(p->ring);
    sb_buf_free(&p->events);
    sb_free(p);
}

int sb_kv_pub_start(uv_loop_t *loop, void *zctx, const sb_kv_pub_opts *o, uint32_t offset, const sb_kv_encode_opts *enc,
                    sb_kv_pub **out)
{
    if (!o->endpoint || !o->topic || strlen(o->topic) >= ENDPOINT_MAX || o->buffer_steps == 0 || o->buffer_bytes == 0 ||
        o->hwm == 0 || o->hwm > INT32_MAX)
        return -EINVAL;
    sb_kv_pub *p = sb_calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->o = *o;
    p->enc = *enc;
    snprintf(p->topic, sizeof p->topic, "%s", o->topic);
    p->o.topic = p->topic;
    p->ring = sb_calloc(o->buffer_steps, sizeof *p->ring);
    char ep[ENDPOINT_MAX], rep[ENDPOINT_MAX];
    int rc = !p->ring ? -ENOMEM : sb_kv_pub_endpoint(o->endpoint, offset, ep, sizeof ep);
    if (rc == 0 && o->replay_endpoint)
        rc = sb_kv_pub_endpoint(o->replay_endpoint, offset, rep, sizeof rep);
    if (rc == 0)
        rc = open_socket(zctx, ZMQ_PUB, ep, o->bind || wants_bind(ep), (int)o->hwm, p->ep, sizeof p->ep, &p->pub);
    /* Room for one whole replay answer per peer: a ROUTER drops what passes its mark. */
    int rhwm = o->buffer_steps > INT32_MAX - 2 ? INT32_MAX : (int)o->buffer_steps + 2;
    if (rc == 0 && o->replay_endpoint)
        rc = open_socket(zctx, ZMQ_ROUTER, rep, true, rhwm, p->replay_ep, sizeof p->replay_ep, &p->router);
    if (rc == 0 && p->router) {
        int fd;
        size_t sz = sizeof fd;
        if (zmq_getsockopt(p->router, ZMQ_FD, &fd, &sz) < 0)
            rc = -zmq_errno();
        else if ((rc = uv_poll_init(loop, &p->poll, fd)) == 0) {
            p->poll.data = p;
            p->polling = true;
            uv_poll_start(&p->poll, UV_READABLE, on_router);
        }
    }
    if (rc < 0) {
        if (p->pub)
            zmq_close(p->pub);
        if (p->router)
            zmq_close(p->router);
        free_pub(p);
        return rc;
    }
    *out = p;
    return 0;
}

const char *sb_kv_pub_endpoint_bound(const sb_kv_pub *p)
{
    return p->ep;
}

const char *sb_kv_pub_replay_bound(const sb_kv_pub *p)
{
    return p->replay_ep;
}

void sb_kv_pub_stats_get(const sb_kv_pub *p, sb_kv_pub_stats *out)
{
    *out = p->st;
}

static void on_poll_closed(uv_handle_t *h)
{
    sb_kv_pub *p = h->data;
    void (*cb)(void *) = p->on_closed;
    void *ud = p->ud;
    free_pub(p);
    if (cb)
        cb(ud);
}

void sb_kv_pub_close(sb_kv_pub *p, void (*on_closed)(void *ud), void *ud)
{
    if (!p)
        return;
    p->on_closed = on_closed;
    p->ud = ud;
    /* The poll handle stops watching the fd at once; the fd is zmq's, closed with its socket. */
    if (p->polling)
        uv_poll_stop(&p->poll);
    if (p->pub)
        zmq_close(p->pub);
    if (p->router)
        zmq_close(p->router);
    p->pub = p->router = NULL;
    if (p->polling) {
        uv_close((uv_handle_t *)&p->poll, on_poll_closed);
        return;
    }
    free_pub(p);
    if (on_closed)
        on_closed(ud);
}
