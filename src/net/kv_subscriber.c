/* The KV-event subscriber: ZMQ sockets driven by libuv, sequence tracking and replay. */
#include "net/kv_subscriber.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "base/alloc.h"
#include "base/log.h"

struct sb_kv_hub {
    uv_loop_t *loop;
    void *zctx;
    int refs;
    sb_kv_scratch scratch; /* shared: decoding and delivery are synchronous on the loop */
    sb_kv_limits scratch_for;
};

/* The replay channel: a DEALER and its poll handle. Replaced whole after a replay times out,
 * so that late answers to the abandoned request die with the old socket instead of being
 * taken for the next replay's. */
typedef struct replay_chan {
    sb_kv_sub *owner;
    void *sock;
    uv_poll_t poll;
} replay_chan;

struct sb_kv_sub {
    sb_kv_hub *hub;
    uv_loop_t *loop;
    char *endpoint, *replay_endpoint, *topic;
    sb_kv_sub_opts opts; /* strings point at the copies above */
    uint32_t pool, ep;
    sb_kv_sub_cbs cbs;
    void *sock; /* SUB */
    uv_poll_t sub_poll;
    uv_idle_t idle;         /* runs pump() again while work is left after a turn's budget */
    uv_timer_t stale_timer; /* checks silence */
    uv_timer_t replay_timer;
    replay_chan *replay; /* NULL without a replay endpoint */
    int open_handles;    /* uv handles not yet closed: freed at 0 once stopping */
    bool stopping;
    /* sequence */
    int64_t expected;  /* next seq to deliver; -1 before the first message */
    int64_t last_live; /* last seq read live; -1 before the first */
    /* the replay in progress */
    int64_t trigger;   /* the live seq that showed the gap, held in `held` */
    bool first_answer; /* no replayed batch seen yet */
    bool joining;      /* the replay catches up with a publisher met mid-stream: nothing is lost */
    uint8_t *held;
    size_t held_len, held_cap;
    sb_kv_sub_stats st;
};

/* ---- hub ---- */

int sb_kv_hub_new(uv_loop_t *loop, sb_kv_hub **out)
{
    sb_kv_hub *h = sb_calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->loop = loop;
    h->refs = 1;
    h->zctx = zmq_ctx_new();
    if (!h->zctx) {
        int rc = -errno;
        sb_free(h);
        return rc ? rc : -ENOMEM;
    }
    *out = h;
    return 0;
}

void sb_kv_hub_ref(sb_kv_hub *hub)
{
    hub->refs++;
}

void sb_kv_hub_unref(sb_kv_hub *hub)
{
    if (--hub->refs > 0)
        return;
    /* Every socket was closed with linger 0: termination does not wait for the network. */
    zmq_ctx_term(hub->zctx);
    sb_kv_scratch_free(&hub->scratch);
    sb_free(hub);
}

/* The shared scratch, grown to cover lim (each subscriber's limits). */
static int hub_reserve(sb_kv_hub *h, const sb_kv_limits *lim)
{
    sb_kv_limits *have = &h->scratch_for;
    if (h->scratch.events && lim->max_events <= have->max_events && lim->max_batch_hashes <= have->max_batch_hashes &&
        lim->max_batch_tokens <= have->max_batch_tokens)
        return 0;
    sb_kv_limits want = *have;
    if (lim->max_events > want.max_events)
        want.max_events = lim->max_events;
    if (lim->max_batch_hashes > want.max_batch_hashes)
        want.max_batch_hashes = lim->max_batch_hashes;
    if (lim->max_batch_tokens > want.max_batch_tokens)
        want.max_batch_tokens = lim->max_batch_tokens;
    sb_kv_scratch s;
    if (sb_kv_scratch_init(&s, &want) < 0)
        return -ENOMEM;
    sb_kv_scratch_free(&h->scratch);
    h->scratch = s;
    *have = want;
    return 0;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- handles ---- */

static void sub_free(sb_kv_sub *s)
{
    sb_kv_hub_unref(s->hub);
    sb_free(s->endpoint);
    sb_free(s->replay_endpoint);
    sb_free(s->topic);
    sb_free(s->held);
    sb_free(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    sb_kv_sub *s = h->data;
    if (--s->open_handles == 0 && s->stopping)
        sub_free(s);
}

static void on_chan_closed(uv_handle_t *h)
{
    replay_chan *c = h->data;
    sb_kv_sub *s = c->owner;
    sb_free(c);
    if (--s->open_handles == 0 && s->stopping)
        sub_free(s);
}

/* uv_close removes the descriptor from epoll at once, so the socket may close right after. */
static void chan_close(sb_kv_sub *s, replay_chan *c)
{
    uv_close((uv_handle_t *)&c->poll, on_chan_closed);
    zmq_close(c->sock);
}

static int set_int(void *sock, int opt, int v)
{
    return zmq_setsockopt(sock, opt, &v, sizeof v);
}

/* What both sockets share: no linger at close, reconnect backoff, heartbeats, and the frame
 * bound enforced by ZMQ before a frame is buffered. */
static void socket_options(void *sock, const sb_kv_sub_opts *o)
{
    set_int(sock, ZMQ_LINGER, 0);
    set_int(sock, ZMQ_RECONNECT_IVL, (int)o->reconnect_ms);
    set_int(sock, ZMQ_RECONNECT_IVL_MAX, (int)o->reconnect_max_ms);
    set_int(sock, ZMQ_HEARTBEAT_IVL, (int)o->heartbeat_ms);
    set_int(sock, ZMQ_HEARTBEAT_TIMEOUT, (int)(o->heartbeat_ms > INT32_MAX / 3 ? INT32_MAX : o->heartbeat_ms * 3));
    int64_t max = (int64_t)o->limits.max_payload_bytes;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
}

static void pump(sb_kv_sub *s);

static void on_idle(uv_idle_t *h)
{
    pump(h->data);
}

/* A descriptor's edge only schedules the work: pump() runs from the idle handle alone, once per
 * loop turn, so a turn handles at most max_messages_per_turn messages whichever socket woke. */
static void on_poll(uv_poll_t *p, int status, int events)
{
    sb_kv_sub *s = p->data;
    uv_idle_start(&s->idle, on_idle);
}

static void on_chan_poll(uv_poll_t *p, int status, int events)
{
    replay_chan *c = p->data;
    uv_idle_start(&c->owner->idle, on_idle);
}

/* Watches a ZMQ socket's descriptor (edge-triggered: pump() drains and re-reads ZMQ_EVENTS). */
static int watch(sb_kv_sub *s, void *sock, uv_poll_t *poll, void *data, uv_poll_cb cb)
{
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) < 0)
        return -errno;
    int rc = uv_poll_init(s->loop, poll, fd);
    if (rc < 0)
        return rc;
    poll->data = data;
    s->open_handles++;
    return uv_poll_start(poll, UV_READABLE, cb);
}

/* A fresh replay channel, connected. 0 or a negative code (nothing left open). */
static int chan_open(sb_kv_sub *s)
{
    replay_chan *c = sb_calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->owner = s;
    c->sock = zmq_socket(s->hub->zctx, ZMQ_DEALER);
    if (!c->sock) {
        sb_free(c);
        return -ENOMEM;
    }
    socket_options(c->sock, &s->opts);
    if (zmq_connect(c->sock, s->replay_endpoint) < 0) {
        int rc = -errno;
        zmq_close(c->sock);
        sb_free(c);
        return rc;
    }
    int rc = watch(s, c->sock, &c->poll, c, on_chan_poll);
    if (rc < 0) {
        if (c->poll.loop) { /* initialised: closed through libuv, freed in its callback */
            chan_close(s, c);
        } else {
            zmq_close(c->sock);
            sb_free(c);
        }
        return rc;
    }
    s->replay = c;
    return 0;
}

/* ---- delivery ---- */

static void do_clear(sb_kv_sub *s)
{
    s->st.clears++;
    if (s->cbs.clear)
        s->cbs.clear(s->cbs.ud, s->pool, s->ep);
}

/* Decodes and hands over the batch numbered seq; the stream moves past it either way. */
static void deliver(sb_kv_sub *s, int64_t seq, const uint8_t *payload, size_t len)
{
    sb_kv_batch b;
    sb_kv_error err;
    s->expected = seq + 1;
    int rc = sb_kv_decode(payload, len, &s->opts.limits, &s->hub->scratch, &b, &err);
    if (rc < 0) {
        s->st.decode_errors++;
        s->st.last_decode_error = rc;
        /* Rate-limited by nature: a publisher sending garbage sends a batch per engine step. */
        if (s->st.decode_errors <= 3 || (s->st.decode_errors & (s->st.decode_errors - 1)) == 0)
            SB_WARN("kv events %s: batch %lld refused: %s (%s at byte %zu); %llu refused so far", s->endpoint,
                    (long long)seq, sb_kv_error_name(rc), err.what ? err.what : "-", err.offset,
                    (unsigned long long)s->st.decode_errors);
        return;
    }
    double lag = wall_now() - b.ts;
    s->st.batches++;
    s->st.events += b.n_events;
    s->st.unknown_events += b.unknown_events;
    s->st.last_seq = seq;
    s->st.lag_seconds = lag;
    if (s->cbs.batch)
        s->cbs.batch(s->cbs.ud, s->pool, s->ep, &b, lag);
}

static int64_t seq_of(const zmq_msg_t *m, bool *ok)
{
    *ok = zmq_msg_size((zmq_msg_t *)m) == 8;
    if (!*ok)
        return 0;
    const uint8_t *b = zmq_msg_data((zmq_msg_t *)m);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return (int64_t)v; /* -1 (all ones) is the replay's end marker */
}

/* Reads one whole message of at most `want` frames into m[] (the rest read and dropped).
 * Returns the frame count (0: nothing to read now), or -1 after dropping an oversized one.
 * Parts of a message arrive together, so only the first read can find nothing. */
static int recv_message(void *sock, zmq_msg_t *m, int want, bool *extra)
{
    int n = 0;
    *extra = false;
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            if (n == 0)
                return 0;
            break; /* cannot happen for a multipart message; keep what came */
        }
        bool more = zmq_msg_more(&part);
        if (n < want)
            m[n++] = part;
        else {
            *extra = true;
            zmq_msg_close(&part);
        }
        if (!more)
            break;
    }
    return n;
}

static void close_frames(zmq_msg_t *m, int n)
{
    for (int i = 0; i < n; i++)
        zmq_msg_close(&m[i]);
}

/* ---- replay ---- */

static void replay_end(sb_kv_sub *s, bool answered);

static void on_replay_timeout(uv_timer_t *t)
{
    sb_kv_sub *s = t->data;
    s->st.replay_failures++;
    SB_WARN("kv events %s: replay from %lld unanswered after %u ms", s->endpoint, (long long)s->expected,
            s->opts.replay_timeout_ms);
    /* A new channel: an answer still on its way to the old one must not be taken for the next
     * replay's. If the new one cannot open, the next gap clears instead of replaying. */
    chan_close(s, s->replay);
    s->replay = NULL;
    if (chan_open(s) < 0)
        SB_WARN("kv events %s: replay channel could not be reopened", s->endpoint);
    replay_end(s, false);
}

/* Copies the live batch that showed the gap: the replay normally covers it too, but it must not
 * be lost if the replay stops short of it. */
static bool hold(sb_kv_sub *s, int64_t seq, const zmq_msg_t *payload)
{
    size_t len = zmq_msg_size((zmq_msg_t *)payload);
    if (len > s->held_cap) {
        uint8_t *grown = sb_realloc(s->held, len);
        if (!grown)
            return false;
        s->held = grown;
        s->held_cap = len;
    }
    memcpy(s->held, zmq_msg_data((zmq_msg_t *)payload), len);
    s->held_len = len;
    s->trigger = seq;
    return true;
}

/* Asks for everything from s->expected on. False if no request could be sent. */
static bool replay_ask(sb_kv_sub *s)
{
    if (!s->replay)
        return false;
    uint8_t be[8];
    uint64_t v = (uint64_t)s->expected;
    for (int i = 7; i >= 0; i--, v >>= 8)
        be[i] = (uint8_t)v;
    /* The empty delimiter a REQ socket would add: vLLM's ROUTER expects [identity, "", seq]. */
    if (zmq_send(s->replay->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return false;
    if (zmq_send(s->replay->sock, be, 8, ZMQ_DONTWAIT) < 0)
        return false; /* the first part is discarded with the half message by ZMQ */
    s->st.replays_asked++;
    s->st.replaying = true;
    s->first_answer = true;
    uv_timer_start(&s->replay_timer, on_replay_timeout, s->opts.replay_timeout_ms, 0);
    return true;
}

/* The replay ended (end marker, or not answered): the held batch goes out if the replay did not
 * cover it, and the endpoint is cleared if something between is still missing. */
static void replay_end(sb_kv_sub *s, bool answered)
{
    uv_timer_stop(&s->replay_timer);
    s->st.replaying = false;
    if (answered)
        s->st.replays_answered++;
    if (s->expected <= s->trigger) {
        if (s->expected < s->trigger && !s->joining) {
            if (answered)
                s->st.replay_failures++; /* answered, but short of the gap */
            do_clear(s);
        }
        deliver(s, s->trigger, s->held, s->held_len);
    }
    s->joining = false;
    /* Live messages waited in the SUB's queue meanwhile; no new edge will announce them. */
    uv_idle_start(&s->idle, on_idle);
}

/* One answer of the replay channel: ["", seq, payload]. */
static void replay_answer(sb_kv_sub *s, zmq_msg_t *m, int n, bool extra)
{
    bool ok = n == 3 && !extra && zmq_msg_size(&m[0]) == 0;
    int64_t seq = ok ? seq_of(&m[1], &ok) : 0;
    if (!ok || !s->st.replaying) {
        s->st.dropped++;
        return;
    }
    if (seq == -1) {
        replay_end(s, true);
        return;
    }
    if (seq < 0) {
        s->st.dropped++;
        return;
    }
    if (seq < s->expected) /* already delivered */
        return;
    if (seq > s->expected && !(s->joining && s->first_answer)) {
        /* The replay buffer no longer reaches back to the first missing batch (or skipped):
         * what fell between is lost, so the endpoint starts over from here. (Joining, the
         * buffer's oldest batch is simply where the history the gateway can learn begins.) */
        s->st.replay_failures += s->first_answer;
        do_clear(s);
    }
    s->first_answer = false;
    s->st.replayed_batches++;
    deliver(s, seq, zmq_msg_data(&m[2]), zmq_msg_size(&m[2]));
}

/* ---- live stream ---- */

static void live_message(sb_kv_sub *s, zmq_msg_t *m, int n, bool extra)
{
    bool ok = n == 3 && !extra;
    int64_t seq = ok ? seq_of(&m[1], &ok) : 0;
    if (ok && s->topic[0])
        ok = zmq_msg_size(&m[0]) == strlen(s->topic) && !memcmp(zmq_msg_data(&m[0]), s->topic, strlen(s->topic));
    if (!ok || seq < 0) {
        s->st.dropped++;
        return;
    }
    s->st.messages++;
    s->st.last_message_ms = uv_now(s->loop);
    s->st.stale = false;
    if (s->last_live >= 0 && seq <= s->last_live) {
        /* The live stream went back: a new publisher (engine restart) counting from 0. */
        s->st.restarts++;
        SB_INFO("kv events %s: sequence went back (%lld after %lld): publisher restarted; endpoint cleared",
                s->endpoint, (long long)seq, (long long)s->last_live);
        do_clear(s);
        s->expected = -1;
    }
    s->last_live = seq;
    if (s->expected < 0) {
        /* Met mid-stream (a gateway start, a reconnect to a restarted engine): with a replay
         * socket and replay_on_join, ask for the publisher's whole buffer (vLLM keeps the last
         * buffer_steps batches), so what the engine cached shortly before is known too;
         * otherwise what came before is the approximate index's to cover. */
        s->joining = s->replay && s->opts.replay_on_join && seq > 0;
        s->expected = s->joining ? 0 : seq;
    }
    if (seq < s->expected) {
        s->st.duplicates++;
        return;
    }
    if (seq > s->expected) {
        s->st.gaps += !s->joining;
        if (s->replay && hold(s, seq, &m[2]) && replay_ask(s))
            return; /* the SUB is not read until the replay ends */
        s->st.replay_failures++;
        do_clear(s);
    }
    deliver(s, seq, zmq_msg_data(&m[2]), zmq_msg_size(&m[2]));
}

static bool readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    /* Reading ZMQ_EVENTS is also what re-arms the edge-triggered descriptor. */
    return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

/* Handles what is waiting on both sockets, at most max_messages_per_turn messages; if more is
 * left, the idle handle brings us back on the next loop turn. */
static void pump(sb_kv_sub *s)
{
    uint32_t budget = s->opts.max_messages_per_turn;
    zmq_msg_t m[3];
    bool extra;
    while (budget && !s->stopping && s->replay && readable(s->replay->sock)) {
        int n = recv_message(s->replay->sock, m, 3, &extra);
        if (n == 0)
            break;
        budget--;
        replay_answer(s, m, n, extra);
        close_frames(m, n);
    }
    while (budget && !s->stopping && !s->st.replaying && readable(s->sock)) {
        int n = recv_message(s->sock, m, 3, &extra);
        if (n == 0)
            break;
        budget--;
        live_message(s, m, n, extra);
        close_frames(m, n);
    }
    if (s->stopping)
        return;
    bool more = (s->replay && readable(s->replay->sock)) || (!s->st.replaying && readable(s->sock));
    if (more)
        uv_idle_start(&s->idle, on_idle);
    else
        uv_idle_stop(&s->idle);
}

static void on_stale_check(uv_timer_t *t)
{
    sb_kv_sub *s = t->data;
    if (!s->st.stale && uv_now(s->loop) - s->st.last_message_ms >= s->opts.stale_after_ms) {
        s->st.stale = true;
        s->st.stale_episodes++;
    }
}

/* ---- lifecycle ---- */

static void fill_defaults(sb_kv_sub_opts *o)
{
    if (!o->stale_after_ms)
        o->stale_after_ms = 10000;
    if (!o->replay_timeout_ms)
        o->replay_timeout_ms = 2000;
    if (!o->max_messages_per_turn)
        o->max_messages_per_turn = 64;
    if (!o->reconnect_ms)
        o->reconnect_ms = 100;
    if (!o->reconnect_max_ms)
        o->reconnect_max_ms = 5000;
    if (!o->heartbeat_ms)
        o->heartbeat_ms = 5000;
    if (!o->limits.max_payload_bytes)
        o->limits = sb_kv_limits_default();
}

static bool same_str(const char *a, const char *b)
{
    return (!a || !*a) ? (!b || !*b) : (b && !strcmp(a, b));
}

bool sb_kv_sub_same_opts(const sb_kv_sub *s, const sb_kv_sub_opts *opts)
{
    sb_kv_sub_opts o = *opts;
    fill_defaults(&o);
    const sb_kv_sub_opts *a = &s->opts;
    return same_str(a->endpoint, o.endpoint) && same_str(a->replay_endpoint, o.replay_endpoint) &&
           same_str(a->topic, o.topic) && a->stale_after_ms == o.stale_after_ms &&
           a->replay_timeout_ms == o.replay_timeout_ms && a->max_messages_per_turn == o.max_messages_per_turn &&
           a->reconnect_ms == o.reconnect_ms && a->reconnect_max_ms == o.reconnect_max_ms &&
           a->heartbeat_ms == o.heartbeat_ms && a->replay_on_join == o.replay_on_join &&
           sb_kv_limits_equal(&a->limits, &o.limits);
}

int sb_kv_sub_start(sb_kv_hub *hub, const sb_kv_sub_opts *opts, uint32_t pool, uint32_t ep, const sb_kv_sub_cbs *cbs,
                    sb_kv_sub **out)
{
    sb_kv_sub *s = sb_calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->hub = hub;
    s->loop = hub->loop;
    s->opts = *opts;
    fill_defaults(&s->opts);
    s->pool = pool, s->ep = ep, s->cbs = *cbs;
    s->expected = s->last_live = -1;
    s->st.last_seq = -1;
    s->endpoint = sb_strdup(opts->endpoint ? opts->endpoint : "");
    s->topic = sb_strdup(opts->topic ? opts->topic : "");
    s->replay_endpoint = opts->replay_endpoint && *opts->replay_endpoint ? sb_strdup(opts->replay_endpoint) : NULL;
    int rc = -ENOMEM;
    if (!s->endpoint || !s->topic || (opts->replay_endpoint && *opts->replay_endpoint && !s->replay_endpoint) ||
        hub_reserve(hub, &s->opts.limits) < 0) {
        sb_free(s->endpoint), sb_free(s->topic), sb_free(s->replay_endpoint), sb_free(s);
        return -ENOMEM;
    }
    s->opts.endpoint = s->endpoint, s->opts.topic = s->topic, s->opts.replay_endpoint = s->replay_endpoint;
    sb_kv_hub_ref(hub);
    /* From here on, failure goes through sb_kv_sub_stop, which closes what was opened. */
    uv_idle_init(s->loop, &s->idle);
    uv_timer_init(s->loop, &s->stale_timer);
    uv_timer_init(s->loop, &s->replay_timer);
    s->idle.data = s->stale_timer.data = s->replay_timer.data = s;
    s->open_handles = 3;
    s->sock = zmq_socket(hub->zctx, ZMQ_SUB);
    if (!s->sock)
        goto fail;
    socket_options(s->sock, &s->opts);
    zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, s->topic, strlen(s->topic));
    if (zmq_connect(s->sock, s->endpoint) < 0) {
        rc = errno == ENOMEM ? -ENOMEM : -EINVAL;
        goto fail;
    }
    if ((rc = watch(s, s->sock, &s->sub_poll, s, on_poll)) < 0)
        goto fail;
    if (s->replay_endpoint && (rc = chan_open(s)) < 0) {
        rc = rc == -ENOMEM ? rc : -EINVAL;
        goto fail;
    }
    s->st.last_message_ms = uv_now(s->loop);
    uint64_t every = s->opts.stale_after_ms / 2 ? s->opts.stale_after_ms / 2 : 1;
    uv_timer_start(&s->stale_timer, on_stale_check, every, every);
    /* Messages may already be queued (inproc, or a fast connect): no edge would announce them. */
    uv_idle_start(&s->idle, on_idle);
    *out = s;
    return 0;
fail:
    sb_kv_sub_stop(s);
    return rc;
}

void sb_kv_sub_set_owner(sb_kv_sub *s, uint32_t pool, uint32_t ep, const sb_kv_sub_cbs *cbs)
{
    s->pool = pool, s->ep = ep, s->cbs = *cbs;
}

void sb_kv_sub_stop(sb_kv_sub *s)
{
    if (!s || s->stopping)
        return;
    s->stopping = true;
    s->cbs = (sb_kv_sub_cbs){0};
    if (s->replay) {
        chan_close(s, s->replay);
        s->replay = NULL;
    }
    if (s->sub_poll.loop) /* set once initialised */
        uv_close((uv_handle_t *)&s->sub_poll, on_handle_closed);
    if (s->sock)
        zmq_close(s->sock);
    s->sock = NULL;
    uv_close((uv_handle_t *)&s->idle, on_handle_closed);
    uv_close((uv_handle_t *)&s->stale_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->replay_timer, on_handle_closed);
}

const sb_kv_sub_stats *sb_kv_sub_stats_get(const sb_kv_sub *s)
{
    return &s->st;
}

const char *sb_kv_sub_endpoint(const sb_kv_sub *s)
{
    return s->endpoint;
}
