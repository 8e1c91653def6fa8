/* kv_subscriber: one model server's KV-cache event stream, read on the gateway's libuv loop.
 *
 * A subscriber holds a ZMQ SUB socket connected to one replica's publisher (vLLM's
 * `--kv-events-config` endpoint, SGLang's alike), reads its 3-frame messages
 * [topic, seq (8 bytes big-endian), payload (msgpack)], decodes each payload with
 * proto/kv_events.h and hands the batch to a callback, in sequence order. It tracks the sequence:
 *   - a gap (seq ahead of the next expected) asks the replica's replay socket (a DEALER to its
 *     ROUTER: ["", first missing seq]; answers ["", seq, payload] ... ["", -1, ""]) within
 *     replay_timeout_ms; if there is no replay socket, the replay cannot reach back to the first
 *     missing batch, or it does not answer in time, the endpoint is cleared (the clear
 *     callback: what the index knew of it may be wrong now) and the stream resumes;
 *   - a seq at or below the last one read live (the publisher restarted: its count begins at 0
 *     again) clears the endpoint and resumes from that seq;
 *   - batches already delivered by a replay are dropped when they arrive live.
 * ZMQ reconnects by itself (with backoff, reconnect_ms doubling to reconnect_max_ms). Silence
 * longer than stale_after_ms is counted and shown, never acted on: an idle engine publishes
 * nothing, and its cache is still what it was.
 *
 * The loop is never stalled: ZMQ's descriptor is edge-triggered, so every read drains with
 * ZMQ_DONTWAIT and re-checks ZMQ_EVENTS; at most max_messages_per_turn messages are handled per
 * wakeup, and the rest wait for an idle handle's turn, so other connections are served between.
 * A malformed frame (wrong frame count, a seq that is not 8 bytes, a payload the decoder
 * refuses) is counted and dropped; the next one is read as usual.
 *
 * What it is not: it owns no index. Batches and clears go to the owner's callbacks
 * (sb_kv_sub_cbs), which must not stop the subscriber that calls them. A payload larger than
 * limits.max_payload_bytes is refused by ZMQ itself (ZMQ_MAXMSGSIZE: the connection drops and
 * reconnects), so it never reaches memory; the stream then shows a gap.
 *
 * One sb_kv_hub per process holds the ZMQ context (one I/O thread) and the decode scratch every
 * subscriber of the loop shares (decoding and delivery are synchronous on the loop thread). */
#ifndef SB_NET_KV_SUBSCRIBER_H
#define SB_NET_KV_SUBSCRIBER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "proto/kv_events.h"

typedef struct sb_kv_hub sb_kv_hub;
typedef struct sb_kv_sub sb_kv_sub;

/* A hub on loop. 0, or a negative errno-style code (-ENOMEM, or ZMQ's error) with *out unset.
 * The creator holds one reference; each subscriber holds another. */
int sb_kv_hub_new(uv_loop_t *loop, sb_kv_hub **out);
void sb_kv_hub_ref(sb_kv_hub *hub);
/* Drops a reference; the last one terminates the ZMQ context (every socket is closed by then). */
void sb_kv_hub_unref(sb_kv_hub *hub);

typedef struct sb_kv_sub_opts {
    const char *endpoint;           /* ZMQ address to connect the SUB to, e.g. "tcp://10.0.0.5:5557" */
    const char *replay_endpoint;    /* the ROUTER to ask for missed batches; NULL: no replay */
    const char *topic;              /* exact topic to accept; "" or NULL: every topic */
    uint32_t stale_after_ms;        /* silence counted as stale after this; default 10000 */
    uint32_t replay_timeout_ms;     /* a replay's deadline, first request to end marker; default 2000 */
    uint32_t max_messages_per_turn; /* messages handled per loop wakeup; default 64 */
    uint32_t reconnect_ms;          /* ZMQ reconnect interval, doubled up to the max; default 100 */
    uint32_t reconnect_max_ms;      /* default 5000 */
    /* ZMTP heartbeats: a PING after this much silence on the connection, and the connection
     * dropped (then re-made) if nothing answers within 3 times it: a publisher whose host
     * vanished is noticed without waiting for TCP's own timeouts. Default 5000. */
    uint32_t heartbeat_ms;
    /* Met mid-stream (the first message, or the first after a publisher restart, has seq > 0)
     * and with a replay endpoint: ask for everything the publisher still buffers, from seq 0. */
    bool replay_on_join;
    sb_kv_limits limits; /* decoder bounds; zeros: sb_kv_limits_default() */
} sb_kv_sub_opts;

/* Called on the loop thread. `b` and everything it points to are valid during the call only.
 * lag_seconds: the gateway's wall clock minus the batch's ts (negative if the clocks disagree). */
typedef struct sb_kv_sub_cbs {
    void (*batch)(void *ud, uint32_t pool, uint32_t ep, const sb_kv_batch *b, double lag_seconds);
    void (*clear)(void *ud, uint32_t pool, uint32_t ep);
    void *ud;
} sb_kv_sub_cbs;

typedef struct sb_kv_sub_stats {
    uint64_t messages;         /* 3-frame messages read live */
    uint64_t batches;          /* batches delivered (live and replayed) */
    uint64_t events;           /* events in them */
    uint64_t gaps;             /* times a seq came ahead of the expected one */
    uint64_t replays_asked;    /* replay requests sent */
    uint64_t replays_answered; /* replays that ended with the end marker */
    uint64_t replayed_batches; /* batches delivered from replays */
    uint64_t replay_failures;  /* no replay socket to ask, could not send, short, or timed out */
    uint64_t restarts;         /* seq went back: the publisher restarted */
    uint64_t clears;           /* clear callbacks made */
    uint64_t decode_errors;    /* payloads the decoder refused */
    uint64_t dropped;          /* malformed framing, another topic, or a stray replay answer */
    uint64_t duplicates;       /* live batches already delivered by a replay */
    uint64_t unknown_events;   /* events of unknown types (skipped by the decoder) */
    uint64_t stale_episodes;   /* times the stream went silent for stale_after_ms */
    int64_t last_seq;          /* last seq delivered; -1 before the first */
    double lag_seconds;        /* of the last batch delivered; 0 before the first */
    uint64_t last_message_ms;  /* uv_now() of the last live message; start time before one */
    bool stale;                /* silent for stale_after_ms now */
    bool replaying;            /* a replay is in progress */
    int last_decode_error;     /* SB_KV_E_* of the last refusal; 0 if none */
} sb_kv_sub_stats;

/* Opens the sockets and starts reading. opts' strings are copied. The callbacks identify the
 * endpoint as (pool, ep). 0, or a negative code (-EINVAL for an address ZMQ refuses, -ENOMEM)
 * with nothing started; on failure the callbacks are never called. */
int sb_kv_sub_start(sb_kv_hub *hub, const sb_kv_sub_opts *opts, uint32_t pool, uint32_t ep, const sb_kv_sub_cbs *cbs,
                    sb_kv_sub **out);

/* Hands a running subscriber to a new owner (a reload that rebuilt the gateway keeps the
 * stream, its sequence and its counters): later callbacks carry these. */
void sb_kv_sub_set_owner(sb_kv_sub *s, uint32_t pool, uint32_t ep, const sb_kv_sub_cbs *cbs);

/* Whether s was started with the same endpoint, replay endpoint, topic and options as opts. */
bool sb_kv_sub_same_opts(const sb_kv_sub *s, const sb_kv_sub_opts *opts);

/* Stops reading; no callback is made after this returns. The memory is freed once libuv has
 * closed the handles (the loop must run). Never from inside one of s's callbacks. */
void sb_kv_sub_stop(sb_kv_sub *s);

const sb_kv_sub_stats *sb_kv_sub_stats_get(const sb_kv_sub *s);
const char *sb_kv_sub_endpoint(const sb_kv_sub *s);

#endif
