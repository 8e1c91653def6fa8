/* upstream: keep-alive connection pools to model-server endpoints.
 *
 * One sb_upstream per endpoint address. sb_upstream_acquire hands out an idle pooled
 * connection at once or starts a new one (bounded by a connect timeout). The caller then
 * owns the connection's TCP stream: it writes the request and reads the response itself,
 * and gives the connection back with sb_upstream_release (reusable: back to the idle list)
 * or sb_upstream_close. Idle connections are watched: one the server closes, or one idle
 * past upstream_idle_ms, leaves the pool. The pool never holds more than max_idle idle
 * connections; beyond that, released connections are closed.
 *
 * Not for: HTTP framing (the proxy parses responses), health or load state (core/). */
#ifndef SB_NET_UPSTREAM_H
#define SB_NET_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sb_upstream sb_upstream;
typedef struct sb_upstream_conn sb_upstream_conn;

typedef struct sb_upstream_opts {
    uint32_t connect_ms;   /* default 1000 */
    uint32_t idle_ms;      /* pooled idle lifetime; default 30000 */
    size_t max_idle;       /* default 64 */
} sb_upstream_opts;

/* Caller-embedded view of a connection. */
struct sb_upstream_conn {
    /* public, read-only */
    uv_tcp_t tcp;          /* the stream; tcp.data belongs to the current owner */
    uv_timer_t timer;      /* for the owner's use while acquired (response timeouts) */
    sb_upstream *up;
    bool reused;           /* it served a request before (may have been closed by the peer) */
    uint64_t requests;     /* requests sent on it so far, including the current one */
    /* public, read-write while owned */
    void *owner;
    /* private */
    sb_upstream_conn *next_idle, *prev_idle;
    void (*connect_cb)(sb_upstream_conn *uc, int status, void *arg);
    void *connect_arg;
    uv_connect_t connect_req;
    int state;
    int handles_open;
};

/* Resolves host (IPv4/IPv6 literal or a name, resolved once now) and creates the pool.
 * Returns 0 and sets *out, or a negative libuv error. */
int sb_upstream_new(uv_loop_t *loop, const char *host, uint16_t port, const sb_upstream_opts *opts,
                    sb_upstream **out);
/* Closes idle connections and frees the pool once every acquired connection has been
 * released or closed. */
void sb_upstream_free(sb_upstream *u);
const char *sb_upstream_address(const sb_upstream *u);

/* Gets a connection. Returns 1 with *out set to an idle pooled connection (no callback), or
 * 0 with a new connection in progress: cb is called once with status 0 (connected) or a
 * negative libuv error (refused, timed out as UV_ETIMEDOUT), after which a failed
 * connection is already closed. Returns a negative error (cb never called) if nothing
 * could be started. */
int sb_upstream_acquire(sb_upstream *u, void (*cb)(sb_upstream_conn *, int, void *), void *arg,
                        sb_upstream_conn **out);

/* Gives a connection back for reuse. The caller must have stopped reading and must not
 * touch it afterwards. */
void sb_upstream_release(sb_upstream_conn *uc);
/* Closes a connection (pending writes are cancelled). The caller must not touch it
 * afterwards; a connect in progress has its callback suppressed. */
void sb_upstream_close(sb_upstream_conn *uc);

size_t sb_upstream_idle_count(const sb_upstream *u);
uint64_t sb_upstream_connects(const sb_upstream *u); /* connections opened so far */

#endif
