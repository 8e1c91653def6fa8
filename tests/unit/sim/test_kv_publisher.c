/* Tests src/sim/kv_publisher.c in one process over inproc sockets: endpoint offsets per replica,
 * one batch per engine step with contiguous sequence numbers from 0, the drop-every fault
 * leaving a gap that the replay socket fills (then the -1 end marker), malformed replay requests
 * dropped, and a restart starting the sequence again with an empty replay buffer. The libuv loop
 * runs without blocking between socket polls (zmq_poll waits for a message, bounded). */
#include "sb_test.h"

#include <errno.h>
#include <msgpack.h>
#include <uv.h>
#include <zmq.h>

#include "base/alloc.h"
#include "sim/engine.h"
#include "sim/kv_publisher.h"

static void test_endpoint_offsets(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(sb_kv_pub_endpoint("tcp://*:5557", 0, out, sizeof out), 0);
    assert_string_equal(out, "tcp://*:5557");
    assert_int_equal(sb_kv_pub_endpoint("tcp://*:5557", 3, out, sizeof out), 0);
    assert_string_equal(out, "tcp://*:5560");
    assert_int_equal(sb_kv_pub_endpoint("tcp://10.0.0.1:6000", 1, out, sizeof out), 0);
    assert_string_equal(out, "tcp://10.0.0.1:6001");
    assert_int_equal(sb_kv_pub_endpoint("tcp://127.0.0.1:*", 2, out, sizeof out), 0);
    assert_string_equal(out, "tcp://127.0.0.1:*");
    assert_int_equal(sb_kv_pub_endpoint("inproc://kv", 2, out, sizeof out), 0);
    assert_string_equal(out, "inproc://kv");
    assert_int_equal(sb_kv_pub_endpoint("tcp://*:65535", 1, out, sizeof out), -EINVAL);
    assert_int_equal(sb_kv_pub_endpoint("tcp://*:5557", 1, out, 8), -EINVAL);
}

typedef struct fixture {
    uv_loop_t loop;
    void *ctx, *sub;
    sb_kv_pub *pub;
    sb_engine *e;
    sb_ns now;
    int closed;
} fixture;

static void on_closed(void *ud)
{
    (*(int *)ud)++;
}

static void setup(fixture *f, uint32_t drop_every)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->ctx = zmq_ctx_new();
    sb_kv_pub_opts o;
    sb_kv_pub_opts_default(&o);
    o.endpoint = "inproc://kv-test";
    o.replay_endpoint = "inproc://kv-test-replay";
    o.topic = "kv@t";
    o.drop_every = drop_every;
    sb_kv_encode_opts enc = {0};
    assert_int_equal(sb_kv_pub_start(&f->loop, f->ctx, &o, 0, &enc, &f->pub), 0);
    assert_string_equal(sb_kv_pub_endpoint_bound(f->pub), "inproc://kv-test");
    f->sub = zmq_socket(f->ctx, ZMQ_SUB);
    assert_int_equal(zmq_setsockopt(f->sub, ZMQ_SUBSCRIBE, "kv@", 3), 0);
    assert_int_equal(zmq_connect(f->sub, "inproc://kv-test"), 0);
    sb_engine_params p = sb_engine_params_default();
    p.num_gpu_blocks = 64;
    p.kv_events = true;
    f->e = sb_engine_new(&p);
    assert_non_null(f->e);
}

static void teardown(fixture *f)
{
    zmq_close(f->sub);
    sb_kv_pub_close(f->pub, on_closed, &f->closed);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->closed, 1);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    zmq_ctx_term(f->ctx);
    sb_engine_free(f->e);
}

static void ignore(void *ud, const sb_engine_event *ev)
{
    (void)ud;
    (void)ev;
}

/* Runs a request to its end, publishing after every engine call as the live server does. */
static void serve(fixture *f, uint32_t seed, uint32_t n, uint32_t max_tokens)
{
    uint32_t t[256];
    for (uint32_t i = 0; i < n; i++)
        t[i] = seed * 1000 + i;
    sb_engine_request q = {.id = seed, .tokens = t, .n_prompt = n, .max_tokens = max_tokens};
    assert_int_equal(sb_engine_submit(f->e, &q, f->now), 0);
    sb_ns next;
    while ((next = sb_engine_next_event(f->e)) != SB_ENGINE_NEVER) {
        sb_kv_pub_drain(f->pub, f->e);
        sb_engine_advance(f->e, next, ignore, NULL);
        f->now = next;
    }
    sb_kv_pub_drain(f->pub, f->e);
}

/* Receives the live messages waiting: their seqs into seqs (returns how many). */
static size_t receive(fixture *f, uint64_t *seqs, size_t cap)
{
    size_t n = 0;
    zmq_pollitem_t it = {f->sub, 0, ZMQ_POLLIN, 0};
    while (n < cap && zmq_poll(&it, 1, 100) > 0) {
        char topic[16], seq[8], payload[4096];
        int tl = zmq_recv(f->sub, topic, sizeof topic, 0);
        assert_int_equal(tl, 4);
        assert_memory_equal(topic, "kv@t", 4);
        assert_int_equal(zmq_recv(f->sub, seq, sizeof seq, 0), 8);
        int pl = zmq_recv(f->sub, payload, sizeof payload, 0);
        assert_true(pl > 0 && pl < (int)sizeof payload);
        int more;
        size_t sz = sizeof more;
        zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &sz);
        assert_false(more);
        /* Each batch holds one step's events: here, one BlockStored. */
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        assert_int_equal(msgpack_unpack_next(&u, payload, (size_t)pl, &off), MSGPACK_UNPACK_SUCCESS);
        assert_int_equal(u.data.via.array.size, 3);
        assert_int_equal(u.data.via.array.ptr[1].via.array.size, 1);
        msgpack_unpacked_destroy(&u);
        uint64_t s = 0;
        for (int i = 0; i < 8; i++)
            s = s << 8 | (uint8_t)seq[i];
        seqs[n++] = s;
    }
    return n;
}

/* Asks the replay socket for start.. and returns the seqs answered before the end marker;
 * the loop runs between polls so the publisher's uv_poll handle serves the request. */
static size_t replay(fixture *f, const void *req, size_t req_len, int64_t *seqs, size_t cap, bool *ended)
{
    void *d = zmq_socket(f->ctx, ZMQ_DEALER);
    assert_int_equal(zmq_connect(d, "inproc://kv-test-replay"), 0);
    assert_int_equal(zmq_send(d, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(d, req, req_len, 0), (int)req_len);
    size_t n = 0;
    *ended = false;
    for (int spins = 0; spins < 200 && !*ended; spins++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
        while (!*ended && zmq_poll(&it, 1, 5) > 0) {
            char delim[8], seq[8], payload[4096];
            assert_int_equal(zmq_recv(d, delim, sizeof delim, 0), 0);
            assert_int_equal(zmq_recv(d, seq, sizeof seq, 0), 8);
            int pl = zmq_recv(d, payload, sizeof payload, 0);
            int64_t s = 0;
            for (int i = 0; i < 8; i++)
                s = (int64_t)((uint64_t)s << 8 | (uint8_t)seq[i]);
            if (s == -1) {
                assert_int_equal(pl, 0);
                *ended = true;
            } else if (n < cap) {
                assert_true(pl > 0);
                seqs[n++] = s;
            }
        }
    }
    zmq_close(d);
    return n;
}

static size_t replay_from(fixture *f, uint64_t start, int64_t *seqs, size_t cap)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(start >> (56 - 8 * i));
    bool ended;
    size_t n = replay(f, b, 8, seqs, cap, &ended);
    assert_true(ended);
    return n;
}

/* A 40-token prompt generating 30 tokens stores blocks in three steps: the prefill (2 blocks),
 * the step computing token 47 (block 2), the one computing token 63 (block 3). */
static void test_batches_per_step_and_replay(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 0);
    serve(&f, 1, 40, 30);
    uint64_t seqs[16];
    assert_int_equal(receive(&f, seqs, 16), 3);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(seqs[i], i);
    int64_t r[16];
    assert_int_equal(replay_from(&f, 1, r, 16), 2);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 2);
    sb_kv_pub_stats st;
    sb_kv_pub_stats_get(f.pub, &st);
    assert_int_equal(st.batches, 3);
    assert_int_equal(st.replays, 1);
    assert_int_equal(st.replayed, 2);
    teardown(&f);
}

/* drop_every 2: seq 1 never goes live; replay has it. Malformed requests get no answer. */
static void test_drop_every_gap_and_bad_requests(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 2);
    serve(&f, 1, 40, 30);
    uint64_t seqs[16];
    assert_int_equal(receive(&f, seqs, 16), 2);
    assert_int_equal(seqs[0], 0);
    assert_int_equal(seqs[1], 2);
    int64_t r[16];
    assert_int_equal(replay_from(&f, 0, r, 16), 3);
    for (int64_t i = 0; i < 3; i++)
        assert_int_equal(r[i], i);
    bool ended;
    assert_int_equal(replay(&f, "abc", 3, r, 16, &ended), 0);
    assert_false(ended);
    sb_kv_pub_stats st;
    sb_kv_pub_stats_get(f.pub, &st);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.bad_requests, 1);
    teardown(&f);
}

/* A restart is a new process: seq from 0, nothing left to replay. */
static void test_restart(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 0);
    serve(&f, 1, 40, 1);
    uint64_t seqs[16];
    assert_int_equal(receive(&f, seqs, 16), 1);
    sb_kv_pub_restart(f.pub);
    int64_t r[16];
    assert_int_equal(replay_from(&f, 0, r, 16), 0);
    serve(&f, 2, 40, 1);
    assert_int_equal(receive(&f, seqs, 16), 1);
    assert_int_equal(seqs[0], 0);
    teardown(&f);
}

/* Events the engine lost to memory are covered by an AllBlocksCleared batch. */
static void test_lost_events_clear(void **state)
{
    (void)state;
    fixture f;
    setup(&f, 0);
    uint32_t t[40];
    for (uint32_t i = 0; i < 40; i++)
        t[i] = i;
    sb_engine_request q = {.id = 1, .tokens = t, .n_prompt = 40, .max_tokens = 1};
    assert_int_equal(sb_engine_submit(f.e, &q, 0), 0);
    sb_ns next = sb_engine_next_event(f.e);
    sb_alloc_fail_after(0);
    sb_engine_advance(f.e, next, ignore, NULL);
    sb_alloc_fail_after(-1);
    sb_kv_pub_drain(f.pub, f.e);
    zmq_pollitem_t it = {f.sub, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&it, 1, 1000), 1);
    char frame[256];
    assert_int_equal(zmq_recv(f.sub, frame, sizeof frame, 0), 4);
    assert_int_equal(zmq_recv(f.sub, frame, sizeof frame, 0), 8);
    int n = zmq_recv(f.sub, frame, sizeof frame, 0);
    assert_true(n > 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&u, frame, (size_t)n, &off), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *ev = &u.data.via.array.ptr[1].via.array.ptr[0];
    assert_int_equal(ev->via.array.size, 1);
    assert_int_equal(ev->via.array.ptr[0].via.str.size, 16);
    assert_memory_equal(ev->via.array.ptr[0].via.str.ptr, "AllBlocksCleared", 16);
    msgpack_unpacked_destroy(&u);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_offsets),
        cmocka_unit_test(test_batches_per_step_and_replay),
        cmocka_unit_test(test_drop_every_gap_and_bad_requests),
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_lost_events_clear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
