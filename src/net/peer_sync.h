/* peer_sync: gateway sync, the gateway replicas of one fleet telling each other what they
 * sent where (`sync:` in the configuration, docs/routing.md "Gateway sync").
 *
 * Behind an L4 balancer each gateway replica sees a third (with three) of the traffic: its
 * prefix index knows only the prefixes it routed, its in-flight accounting only its own
 * requests. Each gateway here publishes, on a ZMQ PUB socket (`sync.listen`), a message per
 * dispatch (pool, endpoint, prompt tokens, the prompt's block hashes), per first byte and per
 * end (proto/peer_msg.h), and subscribes to the others' (`sync.peers`). What a peer sent goes
 * into this gateway's router as if it had sent it itself (sb_router_peer_dispatched): its
 * blocks into the prefix index, its load into in flight and pending prefill until the peer
 * says its first byte came and it ended. Replay measures what it is worth (`--gateways 3
 * --gateway-sync-ms L`).
 *
 * Bounds and failures, every one counted (sb_peer_sync_stats):
 *   - a frame larger than a SENT with max_hashes hashes is refused by ZMQ itself
 *     (ZMQ_MAXMSGSIZE); one the decoder refuses is dropped;
 *   - at most max_tracked peers' requests are counted at once; past it a SENT is dropped;
 *   - a request whose end never comes (its DONE lost: PUB/SUB drops at its high-water mark,
 *     and a peer may die) stops counting after max_request_ms, and every request of a peer
 *     silent for peer_timeout_ms (it sends a heartbeat every heartbeat_ms) stops at once;
 *   - a gap in a peer's sequence is counted (what was lost is the timeouts' to release);
 *   - a pool or endpoint name this gateway does not have is counted and ignored (the fleets'
 *     configurations differ for a moment during a rollout);
 *   - publishing never blocks: a message ZMQ cannot queue is counted as dropped.
 * The loop is never stalled: reads drain at most max_messages_per_turn messages per turn, as
 * the KV-event subscriber does (net/kv_subscriber.h).
 *
 * Threads: the SUB socket, the timers and the owner's callbacks run on the loop that made it
 * (the main loop); sb_peer_sync_publish_* run on whichever thread holds the gateway's lock
 * (net/guard.h), which serialises every use of the PUB socket (ZMQ allows a socket to move
 * between threads with a full barrier between uses: the mutex is one).
 *
 * Reloads: a replacing reload hands the object to the new gateway (sb_peer_sync_set_owner);
 * the peers' requests counted on the old router are forgotten (that router retires), and the
 * new one counts those that start from then on. The old gateway keeps a reference until its
 * last request ends, so its own requests' ends are still told. */
#ifndef SB_NET_PEER_SYNC_H
#define SB_NET_PEER_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/endpoint.h"
#include "proto/peer_msg.h"

typedef struct sb_peer_sync sb_peer_sync;

typedef struct sb_peer_sync_opts {
    const char *listen;       /* ZMQ address to bind the PUB to */
    const char *const *peers; /* the other gateways' PUB addresses, to connect the SUB to */
    size_t n_peers;
    uint32_t heartbeat_ms;          /* default 1000 */
    uint32_t peer_timeout_ms;       /* default 5000 */
    uint32_t max_request_ms;        /* default 600000 */
    size_t max_tracked;             /* default 65536 */
    size_t max_hashes;              /* hashes per SENT read or written; default 16384 */
    uint32_t max_messages_per_turn; /* default 256 */
    /* The fleet's CURVE secret key (Z85, 40 characters), or NULL: plain text, anyone who can
     * reach the sockets reads and publishes. With it every gateway of the fleet holds the same
     * key pair: the PUB is a CURVE server, and a ZAP handler here admits only subscribers that
     * present the fleet's public key; the SUB is a CURVE client that accepts only publishers
     * proving they hold the secret. Traffic is encrypted both ways. */
    const char *curve_secret;
    /* A second fleet key, or NULL, for a rotation without a gap (needs curve_secret, and must
     * be another key): a second SUB, a CURVE client with this key, connects to every peer too.
     * A peer's publisher holds one of the two keys, so exactly one of the two connections to it
     * completes its handshake; the other fails it, and libzmq retries it every second (it does
     * not back off after a failed handshake). The two SUBs are read in turn, each pump starting
     * with the other. The publisher still admits only curve_secret's key. */
    const char *curve_rotation_secret;
} sb_peer_sync_opts;

/* The owner (the serving gateway) applies what peers sent, on the loop's thread:
 *   sent: a peer's dispatch to the endpoint named (pool, endpoint: not NUL-terminated) with
 *     its hashes (n of them, in a scratch valid during the call); fills *pool_idx, *ep_idx and
 *     *t and returns true, or false when it has no such pool or endpoint;
 *   first_byte, done: that request's first byte, and its end (or its forgetting: a timeout). */
typedef struct sb_peer_sync_cbs {
    bool (*sent)(void *ud, const char *pool, size_t pool_len, const char *endpoint, size_t endpoint_len,
                 const uint64_t *hashes, size_t n, uint32_t prompt_tokens, uint32_t *pool_idx, uint32_t *ep_idx,
                 sb_ticket *t);
    void (*first_byte)(void *ud, uint32_t pool_idx, uint32_t ep_idx, sb_ticket *t);
    void (*done)(void *ud, uint32_t pool_idx, uint32_t ep_idx, sb_ticket *t);
    void *ud;
} sb_peer_sync_cbs;

typedef struct sb_peer_sync_stats {
    uint64_t published;       /* messages handed to ZMQ (heartbeats included) */
    uint64_t publish_dropped; /* ...that it could not queue */
    uint64_t received;        /* frames read */
    uint64_t decode_errors;   /* frames the decoder refused (last_decode_error: which) */
    uint64_t own;             /* our own messages heard back (a peer address that is us) */
    uint64_t gaps;            /* messages missing from peers' sequences */
    uint64_t applied;         /* peers' dispatches counted */
    uint64_t unknown;         /* ...naming a pool or endpoint we do not have */
    uint64_t untracked;       /* ...dropped: max_tracked reached, or no memory */
    uint64_t stray;           /* a first byte or end of a request not tracked */
    uint64_t expired;         /* requests forgotten after max_request_ms */
    uint64_t peer_timeouts;   /* peers gone silent for peer_timeout_ms (their requests released) */
    uint64_t senders_refused; /* messages from a sender past the table of known senders */
    uint64_t auth_accepted;   /* subscribers admitted by the ZAP handler (CURVE, the fleet's key) */
    uint64_t auth_refused;    /* ...refused: another key, or another mechanism */
    uint64_t via_rotation;    /* of received, frames from publishers holding the rotation key */
    size_t tracked;           /* peers' requests counted now */
    size_t peers_alive;       /* senders heard within peer_timeout_ms */
    int last_decode_error;
} sb_peer_sync_stats;

/* Binds, connects and starts reading on loop. opts' strings are copied. id: this gateway's
 * sender id (drawn from the OS by the caller; nonzero). 0, or a negative code with nothing
 * started (-EADDRINUSE and the like from ZMQ's bind, -EINVAL for an address ZMQ refuses or a
 * key it cannot read, -ENOTSUP when curve_secret is set and this libzmq has no CURVE). */
int sb_peer_sync_start(uv_loop_t *loop, const sb_peer_sync_opts *opts, uint64_t id, const sb_peer_sync_cbs *cbs,
                       sb_peer_sync **out);
/* A new owner's callbacks (NULL: none): the requests counted for the old one are forgotten. */
void sb_peer_sync_set_owner(sb_peer_sync *s, const sb_peer_sync_cbs *cbs);
void sb_peer_sync_ref(sb_peer_sync *s);
/* Drops a reference; if owner_ud is the owner's ud, it is the owner no more (no callback is
 * made to it after this). The last reference stops everything (the loop must run to close). */
void sb_peer_sync_unref(sb_peer_sync *s, void *owner_ud);

/* Tells the peers of a dispatch of ours; returns its request id (never 0). */
uint64_t sb_peer_sync_publish_sent(sb_peer_sync *s, const char *pool, const char *endpoint, const uint64_t *hashes,
                                   size_t n, uint32_t prompt_tokens);
/* ...of its first byte (SB_PEER_FIRST) or its end (SB_PEER_DONE). */
void sb_peer_sync_publish(sb_peer_sync *s, int kind, uint64_t request);

const sb_peer_sync_stats *sb_peer_sync_stats_get(const sb_peer_sync *s);

#endif
