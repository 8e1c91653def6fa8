/* kv_publisher: one simulated replica's KV-cache event publisher, vLLM's ZmqEventPublisher on
 * the simulator's libuv loop.
 *
 * Wire (vllm/distributed/kv_events.py): a ZMQ PUB socket sends each batch as 3 frames
 * [topic (utf-8), seq (8 bytes big-endian, from 0), payload (sim/kv_encode.h)]; it binds when
 * the endpoint holds `*`, `::`, ipc:// or inproc://, else connects, as vLLM does. An optional
 * ROUTER socket answers replay requests: a REQ (or DEALER) peer sends the first seq it misses
 * as 8 bytes big-endian; the answer is one message [seq, payload] per buffered batch with
 * seq >= start, then [-1 (8 bytes, signed), empty]. A request of another shape is dropped and
 * counted. The last buffer_steps batches (and at most buffer_bytes of payload) are kept.
 *
 * Batches. One per engine step that changed the cache, in step order; a step's batch leaves
 * once the step has ended (or the engine is idle), so removals made while a step forms travel
 * with the blocks that step stores. Events the engine could not record (out of memory) are
 * covered by an AllBlocksCleared batch, so consumers forget rather than believe a wrong view.
 *
 * Never blocks the loop: PUB drops past its high-water mark (vLLM's hwm), sends are
 * non-blocking, and the ROUTER's readiness is watched through ZMQ_FD with a uv_poll handle.
 * Fault for tests: drop_every N leaves every Nth batch out of the live stream (its seq is
 * consumed and it stays in the replay buffer), which a subscriber sees as a gap.
 *
 * Not for: encoding (sim/kv_encode.h), deciding what is cached (sim/engine.h). */
#ifndef SB_SIM_KV_PUBLISHER_H
#define SB_SIM_KV_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "sim/engine.h"
#include "sim/kv_encode.h"

typedef struct sb_kv_pub_opts {
    const char *endpoint;        /* PUB address; vLLM's default binds port 5557, any address */
    const char *replay_endpoint; /* ROUTER address, or NULL for no replay (vLLM's default) */
    const char *topic;           /* vLLM's default "" */
    sb_kv_encoding encoding;
    sb_kv_hash_form hashes;
    uint32_t buffer_steps; /* batches kept for replay, >= 1; vLLM's default 10000 */
    uint64_t buffer_bytes; /* payload bytes kept for replay at most; default 64 MiB */
    uint32_t hwm;          /* PUB high-water mark, messages; vLLM's default 100000 */
    uint32_t drop_every;   /* fault: 0 off, else every Nth batch skips the live stream */
    bool bind;             /* bind the PUB address even where vLLM's rule would connect (a
                            * loopback address such as the demo's); false: vLLM's rule */
} sb_kv_pub_opts;

/* vLLM's defaults (PUB bound on port 5557 of every address, no replay, topic "", buffer_steps
 * 10000, hwm 100000), array encoding, int hashes, buffer_bytes 64 MiB, no fault. */
void sb_kv_pub_opts_default(sb_kv_pub_opts *o);

/* The endpoint of replica (or data-parallel rank) `offset`: a tcp endpoint ending in a numeric
 * port gets port + offset, as vLLM offsets a rank's port; others are kept (tcp://host:* binds
 * an ephemeral port each). Writes a NUL-terminated string to out. Returns 0, or -EINVAL (the
 * port would pass 65535, or out is too small). */
int sb_kv_pub_endpoint(const char *endpoint, uint32_t offset, char *out, size_t cap);

typedef struct sb_kv_pub sb_kv_pub;

/* Opens the sockets of replica `offset` in zmq context zctx (the caller's; it must outlive the
 * publisher) and watches the replay socket on loop. The publisher copies *o and *enc (the
 * adapter names must outlive it). Returns 0 and sets *out, or -EINVAL (bad options), -ENOMEM,
 * or -errno from zmq (an endpoint that cannot be bound: EADDRINUSE...). */
int sb_kv_pub_start(uv_loop_t *loop, void *zctx, const sb_kv_pub_opts *o, uint32_t offset, const sb_kv_encode_opts *enc,
                    sb_kv_pub **out);

/* Publishes what engine e recorded (see Batches) and drains its record. */
void sb_kv_pub_drain(sb_kv_pub *p, sb_engine *e);

/* The replica restarted with a new engine: like a new vLLM process, sequence numbers start
 * again from 0 and the replay buffer is emptied (batches not yet sent are dropped). */
void sb_kv_pub_restart(sb_kv_pub *p);

/* The addresses actually bound or connected (ephemeral ports resolved); "" if none. */
const char *sb_kv_pub_endpoint_bound(const sb_kv_pub *p);
const char *sb_kv_pub_replay_bound(const sb_kv_pub *p);

typedef struct sb_kv_pub_stats {
    uint64_t batches;         /* sequence numbers used */
    uint64_t dropped;         /* left out of the live stream by drop_every */
    uint64_t replays;         /* replay requests answered */
    uint64_t replayed;        /* batches sent in answers */
    uint64_t bad_requests;    /* replay requests dropped for their shape */
    uint64_t encode_failures; /* batches lost to memory (covered by AllBlocksCleared) */
} sb_kv_pub_stats;

void sb_kv_pub_stats_get(const sb_kv_pub *p, sb_kv_pub_stats *out);

/* Closes the sockets at once (linger 0) and frees the publisher once libuv has closed its
 * handle; on_closed(ud) is called then (from the loop). NULL p is a no-op (no call). */
void sb_kv_pub_close(sb_kv_pub *p, void (*on_closed)(void *ud), void *ud);

#endif
