/* Tests for src/net/kv_subscriber.c on a real libuv loop against an in-process publisher.
 *
 * The publisher is an XPUB (a PUB that also shows the subscriptions it receives, so a test
 * publishes only once the subscriber's filter has arrived) and a ROUTER answering replay
 * requests as vLLM's does (vllm/distributed/kv_events.py: [identity, "", seq] in; [identity, "",
 * seq, payload] per buffered batch from seq on, then [identity, "", -1, ""]), both on tcp
 * loopback and watched by uv_poll handles on the test's loop. Nothing sleeps: the loop runs until
 * a condition holds, a safety timer failing the test if it never does; the only time that passes
 * is the replay deadline under test, set to tens of milliseconds. */
#include "sb_test.h"

#include <errno.h>
#include <msgpack.h>
#include <uv.h>
#include <zmq.h>

#include "base/alloc.h"
#include "net/kv_subscriber.h"

#define SAFETY_MS 5000
#define MAX_SEQ 2048

static uv_loop_t loop;
static void *zctx;

/* ---- the publisher side ---- */

typedef struct pub {
    void *xpub, *router;
    uv_poll_t xpoll, rpoll;
    char endpoint[128], replay_endpoint[128];
    bool subscribed;
    /* the replay buffer: payloads by seq, from buf_from (vLLM keeps the last buffer_steps) */
    msgpack_sbuffer payload[MAX_SEQ];
    int64_t n_published;
    int64_t buf_from;
    bool router_silent; /* never answer (a replay that times out) */
    int requests;       /* replay requests received */
} pub;

static pub P;

static bool readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

static void send_be(void *sock, int64_t v, int flags)
{
    uint8_t b[8];
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--, u >>= 8)
        b[i] = (uint8_t)u;
    assert_int_equal(zmq_send(sock, b, 8, flags), 8);
}

static void serve_publisher(void)
{
    char buf[64];
    while (readable(P.xpub)) {
        int n = zmq_recv(P.xpub, buf, sizeof buf, ZMQ_DONTWAIT);
        if (n > 0 && buf[0] == 1)
            P.subscribed = true;
    }
    while (readable(P.router)) {
        zmq_msg_t parts[3];
        int nf = 0;
        for (bool more = true; more;) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, P.router, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (nf < 3)
                parts[nf++] = m;
            else
                zmq_msg_close(&m);
        }
        P.requests++;
        /* [identity, "", seq]: what a DEALER sending ["", seq] looks like here (and to vLLM). */
        assert_int_equal(nf, 3);
        assert_int_equal(zmq_msg_size(&parts[1]), 0);
        assert_int_equal(zmq_msg_size(&parts[2]), 8);
        const uint8_t *sb = zmq_msg_data(&parts[2]);
        int64_t start = 0;
        for (int i = 0; i < 8; i++)
            start = start << 8 | sb[i];
        zmq_msg_t *id = &parts[0];
        if (!P.router_silent) {
            for (int64_t s = start > P.buf_from ? start : P.buf_from; s < P.n_published; s++) {
                zmq_send(P.router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
                zmq_send(P.router, "", 0, ZMQ_SNDMORE);
                send_be(P.router, s, ZMQ_SNDMORE);
                zmq_send(P.router, P.payload[s].data, P.payload[s].size, 0);
            }
            zmq_send(P.router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
            zmq_send(P.router, "", 0, ZMQ_SNDMORE);
            send_be(P.router, -1, ZMQ_SNDMORE);
            zmq_send(P.router, "", 0, 0);
        }
        for (int i = 0; i < nf; i++)
            zmq_msg_close(&parts[i]);
    }
}

static void on_pub_poll(uv_poll_t *p, int status, int events)
{
    serve_publisher();
}

static void watch(void *sock, uv_poll_t *p)
{
    int fd;
    size_t len = sizeof fd;
    assert_int_equal(zmq_getsockopt(sock, ZMQ_FD, &fd, &len), 0);
    assert_int_equal(uv_poll_init(&loop, p, fd), 0);
    assert_int_equal(uv_poll_start(p, UV_READABLE, on_pub_poll), 0);
}

/* The payload of batch seq: one BlockStored whose only block hash is seq + 1000 (so the
 * callback can tell which batch it got), 16 tokens. */
static void build_payload(msgpack_sbuffer *sb, int64_t seq)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 1789095808.5);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_str_with_body(&pk, "BlockStored", 11);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, (uint64_t)seq + 1000);
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 16);
    for (int i = 0; i < 16; i++)
        msgpack_pack_uint32(&pk, (uint32_t)i);
    msgpack_pack_uint32(&pk, 16);
    msgpack_pack_int(&pk, 0);
}

static void send_raw(const char *topic, const void *seq, size_t seq_len, const void *payload, size_t len)
{
    zmq_send(P.xpub, topic, strlen(topic), ZMQ_SNDMORE);
    zmq_send(P.xpub, seq, seq_len, ZMQ_SNDMORE);
    zmq_send(P.xpub, payload, len, 0);
    serve_publisher(); /* after a send, ZMQ_EVENTS must be read again (edge-triggered fd) */
}

/* Publishes the next batch; skipped, it goes into the replay buffer only (a lost message). */
static void publish(bool skip)
{
    int64_t s = P.n_published++;
    assert_true(s < MAX_SEQ);
    build_payload(&P.payload[s], s);
    if (skip)
        return;
    zmq_send(P.xpub, "kv@test", 7, ZMQ_SNDMORE);
    send_be(P.xpub, s, ZMQ_SNDMORE);
    zmq_send(P.xpub, P.payload[s].data, P.payload[s].size, 0);
    serve_publisher();
}

static void bound_endpoint(void *sock, char *out, size_t cap)
{
    assert_int_equal(zmq_bind(sock, "tcp://127.0.0.1:*"), 0);
    size_t len = cap;
    assert_int_equal(zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &len), 0);
}

/* ---- the subscriber's owner ---- */

static int64_t got[MAX_SEQ * 2];
static int n_got, n_clears, max_per_turn, this_turn, busy_turns;
static sb_kv_hub *hub;
static sb_kv_sub *sub;
static uv_check_t turn_check;
static bool timed_out;
static uv_timer_t safety;

static void on_batch(void *ud, uint32_t pool, uint32_t ep, const sb_kv_batch *b, double lag)
{
    assert_int_equal(pool, 3);
    assert_int_equal(ep, 7);
    assert_int_equal(b->n_events, 1);
    assert_true(n_got < MAX_SEQ * 2);
    got[n_got++] = (int64_t)b->events[0].hashes[0] - 1000;
    busy_turns += this_turn == 0;
    if (++this_turn > max_per_turn)
        max_per_turn = this_turn;
}

static void on_clear(void *ud, uint32_t pool, uint32_t ep)
{
    assert_int_equal(pool, 3);
    n_clears++;
}

static void on_turn(uv_check_t *c)
{
    this_turn = 0;
}
static void on_safety(uv_timer_t *t)
{
    timed_out = true;
}

typedef bool cond_fn(void);

/* Runs the loop until cond() holds. The publisher is served before every check: serving it can
 * itself meet the condition (a subscription read from the XPUB), and its reads consume the
 * descriptor's edge, so no wakeup would follow; blocking in uv_run after that waited for the
 * safety timer. Only a condition still unmet when the safety timer fires fails the test. */
static void run_until(cond_fn *cond)
{
    timed_out = false;
    uv_timer_start(&safety, on_safety, SAFETY_MS, 0);
    for (;;) {
        serve_publisher();
        if (cond() || timed_out)
            break;
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_timer_stop(&safety);
    if (!cond())
        fail_msg("timed out: the condition never held");
}

static int want_got;
static bool have_got(void)
{
    return n_got >= want_got;
}
static bool subscribed(void)
{
    return P.subscribed;
}
static const sb_kv_sub_stats *stats(void)
{
    return sb_kv_sub_stats_get(sub);
}
static bool replay_done(void)
{
    return !stats()->replaying && stats()->replays_asked > 0;
}

static void wait_got(int n)
{
    want_got = n;
    run_until(have_got);
}

static bool opt_join; /* replay_on_join for the next start() */
/* start() lets the subscription reach the XPUB before the loop first runs (the next test only). */
static bool opt_queued_first;

/* Blocks the test thread until sock has a message to read: an observable condition, bounded by
 * the safety time. What it leaves is the ordering the loop must survive: the message already
 * queued, its descriptor's edge consumed by zmq_poll, so no wakeup will ever announce it. */
static void wait_queued(void *sock)
{
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, SAFETY_MS), 1);
}

static void start(bool with_replay, uint32_t replay_timeout_ms, uint32_t per_turn)
{
    memset(&P, 0, sizeof P);
    n_got = n_clears = max_per_turn = this_turn = busy_turns = 0;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &safety);
    uv_check_init(&loop, &turn_check);
    uv_check_start(&turn_check, on_turn);
    zctx = zmq_ctx_new();
    P.xpub = zmq_socket(zctx, ZMQ_XPUB);
    P.router = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0, big = 100000;
    zmq_setsockopt(P.xpub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(P.router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(P.xpub, ZMQ_SNDHWM, &big, sizeof big);
    bound_endpoint(P.xpub, P.endpoint, sizeof P.endpoint);
    bound_endpoint(P.router, P.replay_endpoint, sizeof P.replay_endpoint);
    watch(P.xpub, &P.xpoll);
    watch(P.router, &P.rpoll);
    assert_int_equal(sb_kv_hub_new(&loop, &hub), 0);
    sb_kv_sub_opts o = {.endpoint = P.endpoint,
                        .replay_endpoint = with_replay ? P.replay_endpoint : NULL,
                        .topic = "kv@test",
                        .replay_timeout_ms = replay_timeout_ms,
                        .max_messages_per_turn = per_turn,
                        .replay_on_join = opt_join,
                        /* no stale checks to wake the loop by chance while the harness waits */
                        .stale_after_ms = opt_queued_first ? 3600000 : 0};
    sb_kv_sub_cbs cbs = {.batch = on_batch, .clear = on_clear};
    assert_int_equal(sb_kv_sub_start(hub, &o, 3, 7, &cbs, &sub), 0);
    if (opt_queued_first) {
        /* The subscriber's first turn (it is idle afterwards), with the publisher unwatched so
         * that the subscription stays queued; then it is awaited outside the loop. */
        uv_poll_stop(&P.xpoll);
        uv_poll_stop(&P.rpoll);
        uv_run(&loop, UV_RUN_NOWAIT);
        wait_queued(P.xpub);
        assert_int_equal(uv_poll_start(&P.xpoll, UV_READABLE, on_pub_poll), 0);
        assert_int_equal(uv_poll_start(&P.rpoll, UV_READABLE, on_pub_poll), 0);
    }
    run_until(subscribed);
}

static void on_closed(uv_handle_t *h) {}

static void finish(void)
{
    opt_join = opt_queued_first = false;
    sb_kv_sub_stop(sub);
    sb_kv_hub_unref(hub);
    uv_close((uv_handle_t *)&P.xpoll, on_closed);
    uv_close((uv_handle_t *)&P.rpoll, on_closed);
    uv_close((uv_handle_t *)&safety, on_closed);
    uv_close((uv_handle_t *)&turn_check, on_closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    zmq_close(P.xpub);
    zmq_close(P.router);
    zmq_ctx_term(zctx);
    for (int64_t s = 0; s < P.n_published; s++)
        msgpack_sbuffer_destroy(&P.payload[s]);
}

static void assert_got(const int64_t *want, int n)
{
    assert_int_equal(n_got, n);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("batch %d: got seq %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

/* ---- tests ---- */

static void test_in_order(void **st)
{
    start(true, 1000, 64);
    for (int i = 0; i < 5; i++)
        publish(false);
    wait_got(5);
    int64_t want[] = {0, 1, 2, 3, 4};
    assert_got(want, 5);
    assert_int_equal(stats()->last_seq, 4);
    assert_int_equal(stats()->batches, 5);
    assert_int_equal(stats()->events, 5);
    assert_int_equal(stats()->gaps, 0);
    assert_int_equal(n_clears, 0);
    assert_true(stats()->lag_seconds != 0);
    finish();
}

/* The harness itself: the subscription is already waiting at the XPUB when run_until starts, so
 * serving the publisher is what meets the condition, and nothing else will wake the loop. The
 * wait must notice that before it blocks (it used to block in uv_run until the safety timer:
 * the flaky timeouts of every test's start(), whenever the subscription arrived while the loop
 * was busy with something else). */
static void test_condition_met_before_blocking(void **st)
{
    opt_queued_first = true;
    start(false, 0, 64); /* no replay channel: its connection's events would wake the loop */
    assert_true(P.subscribed);
    publish(false);
    wait_got(1);
    assert_int_equal(got[0], 0);
    finish();
}

/* Batches 2 and 3 are lost; 4 shows the gap; the replay brings 2, 3 and 4, in order, and the
 * live batches after it are delivered once. */
static void test_gap_replayed(void **st)
{
    start(true, 2000, 64);
    publish(false), publish(false);
    wait_got(2);
    publish(true), publish(true), publish(false);
    wait_got(5);
    run_until(replay_done);
    publish(false);
    wait_got(6);
    int64_t want[] = {0, 1, 2, 3, 4, 5};
    assert_got(want, 6);
    assert_int_equal(stats()->gaps, 1);
    assert_int_equal(stats()->replays_asked, 1);
    assert_int_equal(stats()->replays_answered, 1);
    assert_int_equal(stats()->replayed_batches, 3);
    assert_int_equal(stats()->replay_failures, 0);
    assert_int_equal(P.requests, 1);
    assert_int_equal(n_clears, 0);
    finish();
}

/* The replay buffer no longer holds batch 2: the endpoint is cleared, then the stream goes on
 * from what the replay has. */
static void test_gap_replay_short(void **st)
{
    start(true, 2000, 64);
    publish(false), publish(false);
    wait_got(2);
    publish(true), publish(true), publish(false);
    P.buf_from = 3;
    wait_got(4);
    run_until(replay_done);
    int64_t want[] = {0, 1, 3, 4};
    assert_got(want, 4);
    assert_int_equal(n_clears, 1);
    assert_int_equal(stats()->clears, 1);
    assert_int_equal(stats()->replay_failures, 1);
    assert_int_equal(stats()->replays_answered, 1);
    publish(false);
    wait_got(5);
    assert_int_equal(got[4], 5);
    assert_int_equal(n_clears, 1);
    finish();
}

/* The replay socket never answers: after its deadline the endpoint is cleared and the held
 * batch that showed the gap is delivered; the stream goes on. */
static void test_gap_replay_timeout(void **st)
{
    start(true, 30, 64);
    P.router_silent = true;
    publish(false);
    wait_got(1);
    publish(true), publish(false);
    wait_got(2);
    int64_t want[] = {0, 2};
    assert_got(want, 2);
    assert_int_equal(n_clears, 1);
    assert_int_equal(stats()->replay_failures, 1);
    assert_int_equal(stats()->replays_answered, 0);
    assert_false(stats()->replaying);
    publish(false);
    wait_got(3);
    assert_int_equal(got[2], 3);
    finish();
}

/* Without a replay endpoint a gap clears at once. */
static void test_gap_without_replay(void **st)
{
    start(false, 0, 64);
    publish(false);
    wait_got(1);
    publish(true), publish(false);
    wait_got(2);
    assert_int_equal(got[1], 2);
    assert_int_equal(n_clears, 1);
    assert_int_equal(stats()->gaps, 1);
    assert_int_equal(stats()->replays_asked, 0);
    finish();
}

/* The publisher restarted: its count begins at 0 again. */
static void test_seq_back(void **st)
{
    start(true, 1000, 64);
    for (int i = 0; i < 3; i++)
        publish(false);
    wait_got(3);
    for (int i = 0; i < 3; i++)
        msgpack_sbuffer_destroy(&P.payload[i]);
    P.n_published = 0;
    publish(false);
    wait_got(4);
    assert_int_equal(got[3], 0);
    assert_int_equal(n_clears, 1);
    assert_int_equal(stats()->restarts, 1);
    assert_int_equal(stats()->gaps, 0);
    publish(false);
    wait_got(5);
    assert_int_equal(got[4], 1);
    assert_int_equal(n_clears, 1);
    finish();
}

/* Malformed frames are counted and dropped; the next good batch is delivered. */
static void test_malformed(void **st)
{
    start(true, 1000, 64);
    publish(false);
    wait_got(1);
    uint8_t seq1[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    /* two frames only */
    zmq_send(P.xpub, "kv@test", 7, ZMQ_SNDMORE);
    zmq_send(P.xpub, seq1, 8, 0);
    /* a 4-byte seq */
    send_raw("kv@test", seq1, 4, "\x90", 1);
    /* another topic that shares the prefix */
    send_raw("kv@test2", seq1, 8, P.payload[0].data, P.payload[0].size);
    /* a payload the decoder refuses: seq 1 is consumed by it */
    send_raw("kv@test", seq1, 8, "\x93\xcb\x00", 3);
    publish(true);  /* seq 1: taken by the garbage above */
    publish(false); /* seq 2 */
    wait_got(2);
    assert_int_equal(got[1], 2);
    assert_int_equal(stats()->dropped, 3);
    assert_int_equal(stats()->decode_errors, 1);
    assert_int_equal(stats()->last_decode_error, SB_KV_E_TRUNCATED);
    assert_int_equal(stats()->gaps, 0);
    assert_int_equal(n_clears, 0);
    finish();
}

/* Joining a stream mid-way (seq 3 first), the replay brings the publisher's buffered history
 * from seq 0; that is neither a gap nor a loss. */
static void test_join_replays_history(void **st)
{
    opt_join = true;
    start(true, 2000, 64);
    publish(true), publish(true), publish(true), publish(false);
    wait_got(4);
    run_until(replay_done);
    int64_t want[] = {0, 1, 2, 3};
    assert_got(want, 4);
    assert_int_equal(stats()->gaps, 0);
    assert_int_equal(stats()->replays_asked, 1);
    assert_int_equal(stats()->replays_answered, 1);
    assert_int_equal(stats()->replay_failures, 0);
    assert_int_equal(n_clears, 0);
    publish(false);
    wait_got(5);
    assert_int_equal(got[4], 4);
    finish();
}

/* The buffer no longer holds the oldest batches: where it starts is where the history the
 * gateway can learn starts, not a loss. */
static void test_join_buffer_short(void **st)
{
    opt_join = true;
    start(true, 2000, 64);
    publish(true), publish(true), publish(true), publish(false);
    P.buf_from = 2;
    wait_got(2);
    run_until(replay_done);
    int64_t want[] = {2, 3};
    assert_got(want, 2);
    assert_int_equal(stats()->replay_failures, 0);
    assert_int_equal(n_clears, 0);
    finish();
}

/* After a publisher restart met mid-way (its seq 1 is the first seen), the endpoint is cleared
 * and the new stream joined from its seq 0. */
static void test_restart_joins(void **st)
{
    opt_join = true;
    start(true, 2000, 64);
    publish(false), publish(false), publish(false);
    wait_got(3);
    for (int i = 0; i < 3; i++)
        msgpack_sbuffer_destroy(&P.payload[i]);
    P.n_published = 0;
    publish(true), publish(false);
    wait_got(5);
    run_until(replay_done);
    int64_t want[] = {0, 1, 2, 0, 1};
    assert_got(want, 5);
    assert_int_equal(stats()->restarts, 1);
    assert_int_equal(n_clears, 1);
    assert_int_equal(stats()->gaps, 0);
    finish();
}

/* 1000 queued messages: no loop turn handles more than max_messages_per_turn of them. */
static void test_bounded_per_turn(void **st)
{
    start(true, 1000, 10);
    for (int i = 0; i < 1000; i++)
        publish(false);
    wait_got(1000);
    assert_int_equal(stats()->gaps, 0);
    assert_true(max_per_turn <= 10);
    assert_true(busy_turns >= 100); /* the loop came back between every ten */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(got[i], i);
    finish();
}

/* Silence is counted as stale once, and the next message ends it; nothing is cleared. */
static bool is_stale(void)
{
    return stats()->stale;
}

static void test_stale(void **st)
{
    memset(&P, 0, sizeof P);
    n_got = n_clears = 0;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &safety);
    uv_check_init(&loop, &turn_check);
    uv_check_start(&turn_check, on_turn);
    zctx = zmq_ctx_new();
    P.xpub = zmq_socket(zctx, ZMQ_XPUB);
    P.router = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(P.xpub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(P.router, ZMQ_LINGER, &zero, sizeof zero);
    bound_endpoint(P.xpub, P.endpoint, sizeof P.endpoint);
    bound_endpoint(P.router, P.replay_endpoint, sizeof P.replay_endpoint);
    watch(P.xpub, &P.xpoll);
    watch(P.router, &P.rpoll);
    assert_int_equal(sb_kv_hub_new(&loop, &hub), 0);
    sb_kv_sub_opts o = {.endpoint = P.endpoint, .topic = "kv@test", .stale_after_ms = 20};
    sb_kv_sub_cbs cbs = {.batch = on_batch, .clear = on_clear};
    assert_int_equal(sb_kv_sub_start(hub, &o, 3, 7, &cbs, &sub), 0);
    run_until(subscribed);
    run_until(is_stale);
    assert_int_equal(stats()->stale_episodes, 1);
    publish(false);
    wait_got(1);
    assert_false(stats()->stale);
    assert_int_equal(n_clears, 0);
    finish();
}

/* A bad address is refused at start, and nothing is left open. */
static void test_bad_endpoint(void **st)
{
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(sb_kv_hub_new(&loop, &hub), 0);
    sb_kv_sub_opts o = {.endpoint = "tcp://no-port"};
    sb_kv_sub_cbs cbs = {.batch = on_batch, .clear = on_clear};
    sb_kv_sub *s = NULL;
    assert_int_equal(sb_kv_sub_start(hub, &o, 0, 0, &cbs, &s), -EINVAL);
    o = (sb_kv_sub_opts){.endpoint = "tcp://127.0.0.1:5", .replay_endpoint = "bogus://x"};
    assert_int_equal(sb_kv_sub_start(hub, &o, 0, 0, &cbs, &s), -EINVAL);
    uv_run(&loop, UV_RUN_DEFAULT);
    sb_kv_hub_unref(hub);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Allocation failure at each step of start: -ENOMEM, nothing left open or leaked (ASan). */
static void test_start_out_of_memory(void **st)
{
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(sb_kv_hub_new(&loop, &hub), 0);
    sb_kv_sub_opts o = {.endpoint = "tcp://127.0.0.1:9", .replay_endpoint = "tcp://127.0.0.1:10", .topic = "t"};
    sb_kv_sub_cbs cbs = {.batch = on_batch, .clear = on_clear};
    int ok = 0;
    for (long n = 0; n < 12; n++) {
        sb_kv_sub *s = NULL;
        sb_alloc_fail_after(n);
        int rc = sb_kv_sub_start(hub, &o, 0, 0, &cbs, &s);
        sb_alloc_fail_after(-1);
        assert_true(rc == 0 || rc == -ENOMEM);
        if (rc == 0) {
            ok++;
            sb_kv_sub_stop(s);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
    }
    assert_true(ok > 0);
    sb_kv_hub_unref(hub);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_gap_replayed),
        cmocka_unit_test(test_gap_replay_short),
        cmocka_unit_test(test_gap_replay_timeout),
        cmocka_unit_test(test_gap_without_replay),
        cmocka_unit_test(test_seq_back),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_join_replays_history),
        cmocka_unit_test(test_join_buffer_short),
        cmocka_unit_test(test_restart_joins),
        cmocka_unit_test(test_bounded_per_turn),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_bad_endpoint),
        cmocka_unit_test(test_start_out_of_memory),
        cmocka_unit_test(test_condition_met_before_blocking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
