#include "net/peer_sync.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <string.h>
#include <xxhash.h>
#include <zmq.h>

#include "base/alloc.h"
#include "base/log.h"

/* Senders remembered at once: the peers (at most 64 configured) and, for peer_timeout_ms,
 * the ids of those that restarted (a restart draws a new id). */
#define MAX_SENDERS 256

typedef struct tracked {
    uint64_t sender, request; /* sender 0: a free slot (ids are never 0) */
    uint64_t at_ms;           /* uv_now when its SENT came */
    uint32_t pool, ep;
    sb_ticket t;
} tracked;

typedef struct sender {
    uint64_t id;
    uint64_t last_seq;
    uint64_t last_ms;
} sender;

struct sb_peer_sync {
    uv_loop_t *loop;
    void *zctx, *pub, *sub;
    void *sub2;                     /* the rotation key's SUB (curve_rotation_secret), else NULL */
    void *zap;                      /* the ZAP handler's REP socket (CURVE only), else NULL */
    unsigned char fleet_key[32];    /* the fleet's public key, binary (CURVE only) */
    char secret[41], public[41];    /* ...and its key pair, Z85 */
    unsigned char rotation_key[32]; /* the rotation key's public key, binary (sub2 only) */
    char secret2[41], public2[41];  /* ...and its key pair, Z85 */
    uv_poll_t poll, poll2, zap_poll;
    uv_idle_t idle;
    uv_timer_t timer;
    int open_handles;
    int refs;
    bool stopping;
    bool sub2_first; /* which SUB a pump reads first: they alternate, so neither starves */
    sb_peer_sync_opts opts;
    char *listen;
    char **peers;
    uint64_t id, seq, next_request;
    sb_peer_sync_cbs cbs;
    sb_peer_sync_stats st;
    tracked *slots;
    size_t cap; /* a power of two, or 0 */
    sender senders[MAX_SENDERS];
    size_t n_senders;
    uint64_t *hashes;    /* max_hashes: a SENT's hashes, decoded */
    unsigned char *wbuf; /* a SENT with max_hashes hashes, encoded */
    size_t wcap;
};

/* ---- the table of peers' requests ---- */

static size_t slot_of(const sb_peer_sync *s, uint64_t sender, uint64_t request)
{
    uint64_t k[2] = {sender, request};
    return (size_t)XXH3_64bits_withSeed(k, sizeof k, s->id) & (s->cap - 1);
}

static tracked *find(sb_peer_sync *s, uint64_t sender, uint64_t request)
{
    if (!s->cap)
        return NULL;
    for (size_t i = slot_of(s, sender, request);; i = (i + 1) & (s->cap - 1)) {
        tracked *e = &s->slots[i];
        if (!e->sender)
            return NULL;
        if (e->sender == sender && e->request == request)
            return e;
    }
}

/* Removes e, shifting back the entries after it that probed past its slot (linear probing
 * without tombstones). */
static void erase(sb_peer_sync *s, tracked *e)
{
    size_t i = (size_t)(e - s->slots), mask = s->cap - 1;
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        tracked *n = &s->slots[j];
        if (!n->sender)
            break;
        size_t home = slot_of(s, n->sender, n->request);
        /* n may move to i when i lies cyclically in [home, j). */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->slots[i] = *n;
            i = j;
        }
    }
    s->slots[i].sender = 0;
    s->st.tracked--;
}

static bool grow(sb_peer_sync *s)
{
    size_t ncap = s->cap ? s->cap * 2 : 1024;
    tracked *ns = sb_calloc(ncap, sizeof *ns);
    if (!ns)
        return false;
    tracked *old = s->slots;
    size_t ocap = s->cap;
    s->slots = ns, s->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].sender)
            continue;
        size_t j = slot_of(s, old[i].sender, old[i].request);
        while (ns[j].sender)
            j = (j + 1) & (ncap - 1);
        ns[j] = old[i];
    }
    sb_free(old);
    return true;
}

static tracked *insert(sb_peer_sync *s, uint64_t sender, uint64_t request)
{
    if (s->st.tracked >= s->opts.max_tracked)
        return NULL;
    if ((s->st.tracked + 1) * 2 > s->cap && !grow(s))
        return NULL;
    size_t i = slot_of(s, sender, request);
    while (s->slots[i].sender)
        i = (i + 1) & (s->cap - 1);
    tracked *e = &s->slots[i];
    *e = (tracked){.sender = sender, .request = request};
    s->st.tracked++;
    return e;
}

/* Ends e on the owner's router (if told to) and removes it. */
static void release(sb_peer_sync *s, tracked *e, bool tell)
{
    if (tell && s->cbs.done)
        s->cbs.done(s->cbs.ud, e->pool, e->ep, &e->t);
    erase(s, e);
}

/* Releases every entry matching: of `sender` (nonzero), or older than before_ms (nonzero), or
 * all. An erase shifts entries backward only (toward their home slot), into the slot just
 * freed: the scan checks that slot again, and an entry shifted from the table's start (wrapped)
 * was scanned there already. */
static size_t release_where(sb_peer_sync *s, uint64_t sender, uint64_t before_ms, bool tell)
{
    size_t n = 0;
    for (size_t i = 0; i < s->cap; i++) {
        tracked *e = &s->slots[i];
        while (e->sender && (sender ? e->sender == sender : before_ms ? e->at_ms < before_ms : true)) {
            release(s, e, tell);
            n++;
        }
    }
    return n;
}

/* ---- senders ---- */

static sender *sender_of(sb_peer_sync *s, uint64_t id, uint64_t now_ms)
{
    for (size_t i = 0; i < s->n_senders; i++)
        if (s->senders[i].id == id)
            return &s->senders[i];
    if (s->n_senders == MAX_SENDERS)
        return NULL;
    sender *n = &s->senders[s->n_senders++];
    *n = (sender){.id = id, .last_ms = now_ms};
    return n;
}

/* Every heartbeat: peers silent for peer_timeout_ms lose their requests and are forgotten;
 * requests older than max_request_ms are let go. */
static void sweep(sb_peer_sync *s, uint64_t now_ms)
{
    for (size_t i = 0; i < s->n_senders;) {
        if (now_ms - s->senders[i].last_ms >= s->opts.peer_timeout_ms) {
            SB_WARN("sync: peer %016llx silent for %u ms; its requests no longer count",
                    (unsigned long long)s->senders[i].id, s->opts.peer_timeout_ms);
            release_where(s, s->senders[i].id, 0, true);
            s->st.peer_timeouts++;
            s->senders[i] = s->senders[--s->n_senders];
        } else {
            i++;
        }
    }
    s->st.peers_alive = s->n_senders;
    if (now_ms > s->opts.max_request_ms)
        s->st.expired += release_where(s, 0, now_ms - s->opts.max_request_ms, true);
}

/* ---- receiving ---- */

static void handle(sb_peer_sync *s, const unsigned char *buf, size_t len, uint64_t now_ms)
{
    s->st.received++;
    sb_peer_msg m;
    int rc = sb_peer_msg_decode(buf, len, s->opts.max_hashes, &m);
    if (rc < 0) {
        s->st.decode_errors++;
        s->st.last_decode_error = rc;
        return;
    }
    if (m.sender == s->id || m.sender == 0) {
        s->st.own++;
        return;
    }
    sender *p = sender_of(s, m.sender, now_ms);
    if (!p) {
        s->st.senders_refused++;
        return;
    }
    p->last_ms = now_ms;
    if (m.seq <= p->last_seq)
        return; /* a duplicate (ZMQ does not send one, but a frame is not trusted) */
    if (p->last_seq && m.seq > p->last_seq + 1)
        s->st.gaps += m.seq - p->last_seq - 1;
    p->last_seq = m.seq;
    if (m.kind == SB_PEER_HEARTBEAT)
        return;
    if (m.kind == SB_PEER_SENT) {
        if (!s->cbs.sent)
            return;
        tracked *e = find(s, m.sender, m.request);
        if (e) { /* the same request id again: not from a well-behaved peer; the old one ends */
            release(s, e, true);
        }
        for (size_t i = 0; i < m.n_hashes; i++)
            s->hashes[i] = sb_peer_msg_hash(&m, i);
        uint32_t pool, ep;
        sb_ticket t;
        /* Tracked before it is applied: past max_tracked it is not applied at all. */
        if (s->st.tracked >= s->opts.max_tracked) {
            s->st.untracked++;
            return;
        }
        if (!s->cbs.sent(s->cbs.ud, m.pool, m.pool_len, m.endpoint, m.endpoint_len, s->hashes, m.n_hashes,
                         m.prompt_tokens, &pool, &ep, &t)) {
            s->st.unknown++;
            return;
        }
        e = insert(s, m.sender, m.request);
        if (!e) { /* no memory to grow: undo at once */
            s->st.untracked++;
            if (s->cbs.done)
                s->cbs.done(s->cbs.ud, pool, ep, &t);
            return;
        }
        e->pool = pool, e->ep = ep, e->t = t, e->at_ms = now_ms;
        s->st.applied++;
        return;
    }
    tracked *e = find(s, m.sender, m.request);
    if (!e) {
        s->st.stray++;
        return;
    }
    if (m.kind == SB_PEER_FIRST) {
        if (s->cbs.first_byte)
            s->cbs.first_byte(s->cbs.ud, e->pool, e->ep, &e->t);
    } else {
        release(s, e, true);
    }
}

static bool readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    /* Reading ZMQ_EVENTS is also what re-arms the edge-triggered descriptor. */
    return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

static void on_idle(uv_idle_t *h);

/* ---- ZAP (RFC 27): who may subscribe, asked by libzmq for each CURVE handshake ---- */

#define ZAP_FRAMES 8 /* version, request id, domain, address, routing id, mechanism, key; and one to spare */

/* Answers one ZAP request, if one is waiting: 200 for a CURVE client presenting the fleet's
 * public key, 400 for anything else. The requests come from libzmq itself, but their frames are
 * still read with bounds. */
static bool zap_serve_one(sb_peer_sync *s)
{
    if (!readable(s->zap))
        return false;
    zmq_msg_t f[ZAP_FRAMES];
    int n = 0;
    bool more = true;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_FRAMES)
            f[n++] = m;
        else
            zmq_msg_close(&m);
    }
    if (more || n < 2) { /* a request cut short: no reply can be made on a REP socket's turn */
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
        return n > 0;
    }
    /* Only the key this publisher holds, even while a rotation lasts: each of our SUBs presents
     * the key it expects the publisher to hold, so a fleet member never needs another; and a
     * publisher past step 2 of a rotation no longer admits holders of the old key. */
    bool ok = n >= 7 && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3) &&
              zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) && zmq_msg_size(&f[6]) == 32 &&
              !memcmp(zmq_msg_data(&f[6]), s->fleet_key, 32);
    if (ok)
        s->st.auth_accepted++;
    else
        s->st.auth_refused++;
    const char *code = ok ? "200" : "400", *text = ok ? "OK" : "not the fleet's key";
    zmq_send(s->zap, "1.0", 3, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s->zap, code, 3, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s->zap, text, strlen(text), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s->zap, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT); /* user id */
    zmq_send(s->zap, "", 0, ZMQ_DONTWAIT);               /* metadata */
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    return true;
}

/* Reads what sock holds, at most *budget frames. */
static void read_sub(sb_peer_sync *s, void *sock, uint32_t *budget, uint64_t now_ms, bool rotation)
{
    while (*budget && !s->stopping && readable(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        (*budget)--;
        s->st.via_rotation += rotation;
        /* One frame per message: a multipart one is read whole and refused. */
        bool more = zmq_msg_more(&m);
        if (more) {
            s->st.received++;
            s->st.decode_errors++;
            s->st.last_decode_error = SB_PEER_E_LENGTH;
            while (more) {
                zmq_msg_close(&m);
                zmq_msg_init(&m);
                if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0)
                    break;
                more = zmq_msg_more(&m);
            }
        } else {
            handle(s, zmq_msg_data(&m), zmq_msg_size(&m), now_ms);
        }
        zmq_msg_close(&m);
    }
}

static void pump(sb_peer_sync *s)
{
    uint32_t budget = s->opts.max_messages_per_turn;
    for (uint32_t z = 0; s->zap && !s->stopping && z < budget && zap_serve_one(s); z++)
        ;
    uint64_t now_ms = uv_now(s->loop);
    if (s->sub2 && s->sub2_first)
        read_sub(s, s->sub2, &budget, now_ms, true);
    read_sub(s, s->sub, &budget, now_ms, false);
    if (s->sub2 && !s->sub2_first)
        read_sub(s, s->sub2, &budget, now_ms, true);
    s->sub2_first = !s->sub2_first;
    if (s->stopping)
        return;
    if (readable(s->sub) || (s->sub2 && readable(s->sub2)) || (s->zap && readable(s->zap)))
        uv_idle_start(&s->idle, on_idle);
    else
        uv_idle_stop(&s->idle);
}

static void on_idle(uv_idle_t *h)
{
    pump(h->data);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    sb_peer_sync *s = p->data;
    uv_idle_start(&s->idle, on_idle);
}

/* ---- publishing ---- */

static void send_frame(sb_peer_sync *s, size_t len)
{
    if (zmq_send(s->pub, s->wbuf, len, ZMQ_DONTWAIT) < 0)
        s->st.publish_dropped++;
    else
        s->st.published++;
}

uint64_t sb_peer_sync_publish_sent(sb_peer_sync *s, const char *pool, const char *endpoint, const uint64_t *hashes,
                                   size_t n, uint32_t prompt_tokens)
{
    uint64_t request = ++s->next_request;
    if (s->stopping)
        return request;
    if (n > s->opts.max_hashes)
        n = s->opts.max_hashes; /* the first ones: the prefix is what matters */
    sb_peer_msg m = {.kind = SB_PEER_SENT,
                     .sender = s->id,
                     .seq = ++s->seq,
                     .request = request,
                     .prompt_tokens = prompt_tokens,
                     .pool = pool,
                     .pool_len = strlen(pool),
                     .endpoint = endpoint,
                     .endpoint_len = strlen(endpoint)};
    size_t len = sb_peer_msg_encode(&m, hashes, n, s->wbuf, s->wcap);
    if (!len) { /* a name over 255 bytes: not told */
        s->seq--;
        s->st.publish_dropped++;
        return request;
    }
    send_frame(s, len);
    return request;
}

void sb_peer_sync_publish(sb_peer_sync *s, int kind, uint64_t request)
{
    if (s->stopping)
        return;
    sb_peer_msg m = {.kind = (uint8_t)kind, .sender = s->id, .seq = ++s->seq, .request = request};
    size_t len = sb_peer_msg_encode(&m, NULL, 0, s->wbuf, s->wcap);
    if (len)
        send_frame(s, len);
}

static void on_timer(uv_timer_t *t)
{
    sb_peer_sync *s = t->data;
    /* Sent whether or not other messages went meanwhile: one small frame a second, and the
     * publishing side keeps no clock (it runs on whichever thread holds the lock). */
    sb_peer_sync_publish(s, SB_PEER_HEARTBEAT, 0);
    sweep(s, uv_now(s->loop));
}

/* ---- lifecycle ---- */

static void fill_defaults(sb_peer_sync_opts *o)
{
    if (!o->heartbeat_ms)
        o->heartbeat_ms = 1000;
    if (!o->peer_timeout_ms)
        o->peer_timeout_ms = 5000;
    if (!o->max_request_ms)
        o->max_request_ms = 600000;
    if (!o->max_tracked)
        o->max_tracked = 65536;
    if (!o->max_hashes)
        o->max_hashes = 16384;
    if (o->max_hashes > (1u << 24))
        o->max_hashes = 1u << 24;
    if (!o->max_messages_per_turn)
        o->max_messages_per_turn = 256;
}

static void free_all(sb_peer_sync *s)
{
    for (size_t i = 0; s->peers && i < s->opts.n_peers; i++)
        sb_free(s->peers[i]);
    sb_free(s->peers);
    sb_free(s->listen);
    sb_free(s->slots);
    sb_free(s->hashes);
    sb_free(s->wbuf);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    OPENSSL_cleanse(s->secret, sizeof s->secret); /* freed memory is not a place for a key */
    OPENSSL_cleanse(s->secret2, sizeof s->secret2);
    sb_free(s);
}

static void on_closed(uv_handle_t *h)
{
    sb_peer_sync *s = h->data;
    if (--s->open_handles == 0)
        free_all(s);
}

static void stop(sb_peer_sync *s)
{
    s->stopping = true;
    s->cbs = (sb_peer_sync_cbs){0};
    if (s->poll.loop)
        uv_close((uv_handle_t *)&s->poll, on_closed);
    if (s->poll2.loop)
        uv_close((uv_handle_t *)&s->poll2, on_closed);
    if (s->zap_poll.loop)
        uv_close((uv_handle_t *)&s->zap_poll, on_closed);
    if (s->zap)
        zmq_close(s->zap);
    s->zap = NULL;
    if (s->sub2)
        zmq_close(s->sub2);
    s->sub2 = NULL;
    if (s->sub)
        zmq_close(s->sub);
    if (s->pub)
        zmq_close(s->pub);
    s->sub = s->pub = NULL;
    uv_close((uv_handle_t *)&s->idle, on_closed);
    uv_close((uv_handle_t *)&s->timer, on_closed);
}

static int set_int(void *sock, int opt, int v)
{
    return zmq_setsockopt(sock, opt, &v, sizeof v);
}

/* CURVE on both sockets, and the ZAP handler that admits only the fleet's key (bound before
 * the PUB, so no handshake comes before it). 0 or a negative code, logged. */
static int setup_curve(sb_peer_sync *s)
{
    if (!zmq_has("curve")) {
        SB_ERROR("sync: key_file is set but this libzmq was built without CURVE");
        return -ENOTSUP;
    }
    if (strlen(s->opts.curve_secret) != 40 || zmq_curve_public(s->public, s->opts.curve_secret) < 0 ||
        !zmq_z85_decode(s->fleet_key, s->public)) {
        SB_ERROR("sync: the key is not a Z85 CURVE secret key");
        return -EINVAL;
    }
    memcpy(s->secret, s->opts.curve_secret, sizeof s->secret);
    s->opts.curve_secret = s->secret;
    s->zap = zmq_socket(s->zctx, ZMQ_REP);
    if (!s->zap)
        return -ENOMEM;
    set_int(s->zap, ZMQ_LINGER, 0);
    if (zmq_bind(s->zap, "inproc://zeromq.zap.01") < 0) {
        SB_ERROR("sync: cannot start the ZAP handler: %s", zmq_strerror(errno));
        return -EINVAL;
    }
    static const char domain[] = "switchboard-sync";
    bool ok = set_int(s->pub, ZMQ_CURVE_SERVER, 1) == 0 &&
              zmq_setsockopt(s->pub, ZMQ_CURVE_SECRETKEY, s->secret, sizeof s->secret) == 0 &&
              zmq_setsockopt(s->pub, ZMQ_ZAP_DOMAIN, domain, sizeof domain - 1) == 0 &&
              zmq_setsockopt(s->sub, ZMQ_CURVE_SERVERKEY, s->public, sizeof s->public) == 0 &&
              zmq_setsockopt(s->sub, ZMQ_CURVE_PUBLICKEY, s->public, sizeof s->public) == 0 &&
              zmq_setsockopt(s->sub, ZMQ_CURVE_SECRETKEY, s->secret, sizeof s->secret) == 0;
    if (ok && s->sub2) {
        if (strlen(s->opts.curve_rotation_secret) != 40 ||
            zmq_curve_public(s->public2, s->opts.curve_rotation_secret) < 0 ||
            !zmq_z85_decode(s->rotation_key, s->public2)) {
            SB_ERROR("sync: the rotation key is not a Z85 CURVE secret key");
            return -EINVAL;
        }
        if (!memcmp(s->rotation_key, s->fleet_key, sizeof s->fleet_key)) {
            SB_ERROR("sync: the rotation key is the fleet's key");
            return -EINVAL;
        }
        memcpy(s->secret2, s->opts.curve_rotation_secret, sizeof s->secret2);
        s->opts.curve_rotation_secret = s->secret2;
        ok = zmq_setsockopt(s->sub2, ZMQ_CURVE_SERVERKEY, s->public2, sizeof s->public2) == 0 &&
             zmq_setsockopt(s->sub2, ZMQ_CURVE_PUBLICKEY, s->public2, sizeof s->public2) == 0 &&
             zmq_setsockopt(s->sub2, ZMQ_CURVE_SECRETKEY, s->secret2, sizeof s->secret2) == 0;
    }
    if (!ok) {
        SB_ERROR("sync: ZMQ refused the CURVE options: %s", zmq_strerror(errno));
        return -EINVAL;
    }
    return 0;
}

/* A SUB's options (both SUBs have the same). */
static void sub_options(sb_peer_sync *s, void *sub)
{
    set_int(sub, ZMQ_LINGER, 0);
    set_int(sub, ZMQ_RCVHWM, 10000);
    /* While a rotation key is set, one of the two connections to each peer fails its handshake,
     * and libzmq retries a failed handshake at this interval, without backing off: 1 s then
     * (a failed CURVE handshake a second per peer), 100 ms otherwise. */
    set_int(sub, ZMQ_RECONNECT_IVL, s->opts.curve_rotation_secret ? 1000 : 100);
    set_int(sub, ZMQ_RECONNECT_IVL_MAX, 5000);
    set_int(sub, ZMQ_HEARTBEAT_IVL, (int)s->opts.heartbeat_ms);
    set_int(sub, ZMQ_HEARTBEAT_TIMEOUT, (int)s->opts.peer_timeout_ms);
    int64_t max = (int64_t)s->wcap;
    zmq_setsockopt(sub, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
}

/* Polls a ZMQ socket's descriptor on the loop, into pump. 0 or a negative code. */
static int watch(sb_peer_sync *s, void *sock, uv_poll_t *h)
{
    int fd, rc;
    size_t len = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) < 0)
        return -EINVAL;
    if ((rc = uv_poll_init(s->loop, h, fd)) < 0)
        return rc;
    h->data = s;
    s->open_handles++;
    uv_poll_start(h, UV_READABLE, on_poll);
    return 0;
}

int sb_peer_sync_start(uv_loop_t *loop, const sb_peer_sync_opts *opts, uint64_t id, const sb_peer_sync_cbs *cbs,
                       sb_peer_sync **out)
{
    sb_peer_sync *s = sb_calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->loop = loop;
    s->opts = *opts;
    fill_defaults(&s->opts);
    s->id = id ? id : 1;
    s->refs = 1;
    s->cbs = cbs ? *cbs : (sb_peer_sync_cbs){0};
    s->listen = sb_strdup(opts->listen);
    s->peers = sb_calloc(opts->n_peers ? opts->n_peers : 1, sizeof(char *));
    bool ok = s->listen && s->peers;
    for (size_t i = 0; ok && i < opts->n_peers; i++)
        ok = (s->peers[i] = sb_strdup(opts->peers[i])) != NULL;
    s->opts.listen = s->listen;
    s->opts.peers = (const char *const *)s->peers;
    sb_peer_msg big = {.kind = SB_PEER_SENT, .pool_len = SB_PEER_MAX_NAME, .endpoint_len = SB_PEER_MAX_NAME};
    s->wcap = sb_peer_msg_size(&big, s->opts.max_hashes);
    s->wbuf = ok ? sb_malloc(s->wcap) : NULL;
    s->hashes = ok ? sb_malloc(s->opts.max_hashes * sizeof(uint64_t)) : NULL;
    if (!s->wbuf || !s->hashes || !(s->zctx = zmq_ctx_new())) {
        free_all(s);
        return -ENOMEM;
    }
    int rc = 0;
    if (s->opts.curve_rotation_secret && !s->opts.curve_secret) {
        SB_ERROR("sync: a rotation key needs the fleet's key");
        free_all(s);
        return -EINVAL;
    }
    s->pub = zmq_socket(s->zctx, ZMQ_PUB);
    s->sub = zmq_socket(s->zctx, ZMQ_SUB);
    if (s->opts.curve_rotation_secret)
        s->sub2 = zmq_socket(s->zctx, ZMQ_SUB);
    if (!s->pub || !s->sub || (s->opts.curve_rotation_secret && !s->sub2)) {
        rc = -ENOMEM;
        goto fail_sockets;
    }
    set_int(s->pub, ZMQ_LINGER, 0);
    /* A peer that cannot keep up loses messages rather than hold our memory: 10,000 queued
     * per peer, a second of a busy gateway's dispatches. */
    set_int(s->pub, ZMQ_SNDHWM, 10000);
    sub_options(s, s->sub);
    if (s->sub2)
        sub_options(s, s->sub2);
    if (s->opts.curve_secret && (rc = setup_curve(s)) < 0)
        goto fail_sockets;
    if (zmq_bind(s->pub, s->listen) < 0) {
        rc = errno == EADDRINUSE ? -EADDRINUSE : errno == ENOMEM ? -ENOMEM : -EINVAL;
        SB_ERROR("sync: cannot bind %s: %s", s->listen, zmq_strerror(errno));
        goto fail_sockets;
    }
    for (size_t i = 0; i < s->opts.n_peers; i++)
        if (zmq_connect(s->sub, s->peers[i]) < 0 || (s->sub2 && zmq_connect(s->sub2, s->peers[i]) < 0)) {
            rc = -EINVAL;
            SB_ERROR("sync: cannot connect to peer %s: %s", s->peers[i], zmq_strerror(errno));
            goto fail_sockets;
        }
    uv_idle_init(loop, &s->idle);
    uv_timer_init(loop, &s->timer);
    s->idle.data = s->timer.data = s;
    s->open_handles = 2;
    if ((rc = watch(s, s->sub, &s->poll)) < 0 || (s->sub2 && (rc = watch(s, s->sub2, &s->poll2)) < 0) ||
        (s->zap && (rc = watch(s, s->zap, &s->zap_poll)) < 0)) {
        stop(s);
        return rc;
    }
    uv_timer_start(&s->timer, on_timer, s->opts.heartbeat_ms, s->opts.heartbeat_ms);
    uv_idle_start(&s->idle, on_idle);
    SB_INFO("sync: publishing on %s, %zu peer%s, id %016llx%s", s->listen, s->opts.n_peers,
            s->opts.n_peers == 1 ? "" : "s", (unsigned long long)s->id,
            s->sub2 ? "; accepting the rotation key too" : "");
    *out = s;
    return 0;
fail_sockets:
    if (s->zap)
        zmq_close(s->zap);
    if (s->sub2)
        zmq_close(s->sub2);
    if (s->pub)
        zmq_close(s->pub);
    if (s->sub)
        zmq_close(s->sub);
    free_all(s);
    return rc;
}

void sb_peer_sync_set_owner(sb_peer_sync *s, const sb_peer_sync_cbs *cbs)
{
    release_where(s, 0, 0, false);
    s->cbs = cbs ? *cbs : (sb_peer_sync_cbs){0};
}

void sb_peer_sync_ref(sb_peer_sync *s)
{
    s->refs++;
}

void sb_peer_sync_unref(sb_peer_sync *s, void *owner_ud)
{
    if (!s)
        return;
    if (owner_ud && s->cbs.ud == owner_ud)
        sb_peer_sync_set_owner(s, NULL);
    if (--s->refs > 0)
        return;
    stop(s);
}

const sb_peer_sync_stats *sb_peer_sync_stats_get(const sb_peer_sync *s)
{
    return &s->st;
}
