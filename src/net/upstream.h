/* upstream: keep-alive connection pools to model-server endpoints.
 *
 * One sb_upstream per endpoint address. sb_upstream_acquire hands out an idle pooled
 * connection at once or starts a new one (bounded by a connect timeout). The caller then
 * owns the connection: it writes the request on its TCP stream and receives what arrives
 * through the on_read callback it sets (the pool keeps every connection reading for its
 * whole life and dispatches: no read stop/start per request, which costs two epoll_ctl
 * calls each on Linux), and gives the connection back with sb_upstream_release (reusable:
 * back to the idle list) or sb_upstream_close. Idle connections are watched: one the server closes, or one idle
 * past upstream_idle_ms, leaves the pool. The pool never holds more than max_idle idle
 * connections; beyond that, released connections are closed.
 *
 * TLS (https:// endpoints): with opts.tls_ctx every connection runs a client handshake after
 * its TCP connect, within the same connect timeout, and the connect callback hears of it only
 * once the handshake is done (a failed one is UV_EPROTO). Owners write with sb_upstream_write
 * (encrypted here) and read plaintext through on_read as before; a TLS error while owned is a
 * read of UV_EPROTO.
 *
 * Not for: HTTP framing (the proxy parses responses), health or load state (core/). */
#ifndef SB_NET_UPSTREAM_H
#define SB_NET_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/tls.h"

typedef struct sb_upstream sb_upstream;
typedef struct sb_upstream_conn sb_upstream_conn;

typedef struct sb_upstream_opts {
    uint32_t connect_ms;   /* default 1000 */
    uint32_t idle_ms;      /* pooled idle lifetime; default 30000 */
    size_t max_idle;       /* idle connections kept; 0 keeps none (no reuse) */
    /* A name that does not resolve is tried again after retry_ms, doubled up to retry_max_ms
     * (defaults 1000 and 30000). */
    uint32_t retry_ms, retry_max_ms;
    /* Told of every resolution that ends (status 0: the address is known now; else the libuv
     * error), on the loop; may be NULL. It must not free the pool. */
    void (*on_resolved)(sb_upstream *u, int status, void *arg);
    void *resolved_arg;
    /* TLS toward this endpoint (net/tls.h sb_tls_client_ctx), or NULL: plain. The pool takes
     * its own reference. tls_server_name: SNI and the name verified (NULL: the host). */
    SSL_CTX *tls_ctx;
    const char *tls_server_name;
    /* Counted on each TLS handshake completed toward the endpoint, or NULL: abbreviated ones
     * (the pool's last session resumed) and full ones. Must outlive the pool's use (not
     * counted once it is being freed). */
    uint64_t *tls_resumed, *tls_full;
} sb_upstream_opts;

/* Caller-embedded view of a connection. */
struct sb_upstream_conn {
    /* public, read-only */
    uv_tcp_t tcp;          /* the stream; tcp.data belongs to the current owner */
    uv_timer_t timer;      /* the deadline's (sb_upstream_deadline); not for direct use */
    sb_upstream *up;
    bool reused;           /* it served a request before (may have been closed by the peer) */
    uint64_t requests;     /* requests sent on it so far, including the current one */
    /* public, read-write while owned */
    void *owner;
    /* Set by the owner as soon as it holds the connection (before returning to the loop):
     * receives every read (nread < 0: EOF or error). buf is valid during the call. */
    void (*on_read)(sb_upstream_conn *uc, ssize_t nread, const uv_buf_t *buf);
    /* private */
    sb_upstream_conn *next_idle, *prev_idle;
    void (*connect_cb)(sb_upstream_conn *uc, int status, void *arg);
    void *connect_arg;
    uv_connect_t connect_req;
    int state;
    int handles_open;
    sb_tls tls;          /* tls.ssl NULL: plain */
    bool tls_early_data; /* application data arrived inside the handshake (refused) */
    uint64_t deadline_due, deadline_fires; /* loop ms; 0: none / timer not started */
    void (*deadline_cb)(sb_upstream_conn *uc);
};

/* The connection's one deadline: the connect (and handshake) timeout while connecting, the idle
 * timeout while pooled, the owner's response timeout while acquired. Sets it ms from now (the
 * loop's time) with the function called when it passes, or clears it (ms 0). Replaces any
 * deadline set before. Lazy, as the HTTP server's (net/http_server.c hs_arm_timer): the timer
 * is restarted only for a deadline earlier than it is due to fire, so pushing a response
 * timeout back on every read, clearing it at the answer's end and setting the idle timeout
 * costs no timer heap operation most of the time. */
void sb_upstream_deadline(sb_upstream_conn *uc, uint32_t ms, void (*cb)(sb_upstream_conn *uc));

/* Creates the pool. An IPv4/IPv6 literal is its address at once; a name is resolved
 * asynchronously (uv_getaddrinfo, never blocking the loop): connections asked for meanwhile wait
 * for the answer within their connect timeout, and a name that does not resolve is retried with
 * backoff while acquire fails at once with the resolver's error. The first address of the answer
 * is used (IPv4 or IPv6, as the resolver orders them). Returns 0 and sets *out, or UV_ENOMEM. */
int sb_upstream_new(uv_loop_t *loop, const char *host, uint16_t port, const sb_upstream_opts *opts,
                    sb_upstream **out);
/* Closes idle connections and frees the pool once every acquired connection has been
 * released or closed. */
void sb_upstream_free(sb_upstream *u);
const char *sb_upstream_address(const sb_upstream *u);
/* 0 when the address is known; 1 while the first resolution runs; else the libuv error of the
 * last resolution (the name did not resolve, and no address is known). */
int sb_upstream_resolve_status(const sb_upstream *u);
/* Takes over src's resolved address when both name the same host and port, so a pool rebuilt by a
 * reload connects at once instead of waiting for the resolver (0), else does nothing (-1). */
int sb_upstream_adopt_address(sb_upstream *u, const sb_upstream *src);

/* Gets a connection. Returns 1 with *out set to an idle pooled connection (no callback), or
 * 0 with a new connection in progress: cb is called once with status 0 (connected) or a
 * negative libuv error (refused, timed out as UV_ETIMEDOUT), after which a failed
 * connection is already closed. Returns a negative error (cb never called) if nothing
 * could be started. */
int sb_upstream_acquire(sb_upstream *u, void (*cb)(sb_upstream_conn *, int, void *), void *arg,
                        sb_upstream_conn **out);

/* Writes bufs on an owned connection, as uv_write does (req is the caller's; cb gets it back
 * with its handle set), encrypting them over TLS. 0, or a negative libuv error (cb not called). */
int sb_upstream_write(sb_upstream_conn *uc, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb);

/* Writes what the socket takes now, in one writev, without a request or a callback: the
 * number of bytes written, 0 over TLS, when the socket is full, earlier writes are still
 * queued, or on an error (left to sb_upstream_write, which the caller uses for the rest, if
 * any, and which reports it through its callback, from the loop, as before). Why: a uv_write that completes costs the
 * loop an epoll_ctl when its queue drains (libuv stops the POLLOUT watch it never started), a request allocation and a
 * callback in the next iteration; a request of a few KiB almost always fits the socket buffer at once
 * (docs/benchmarks.md, proxy overhead). */
int sb_upstream_try_write(sb_upstream_conn *uc, const uv_buf_t *bufs, unsigned n);

/* Flow control for an owner whose consumer is slower than the server: stop and resume
 * reading (0, or a negative libuv error from resume). */
void sb_upstream_pause(sb_upstream_conn *uc);
int sb_upstream_resume(sb_upstream_conn *uc);

/* Gives a connection back for reuse. The caller must not touch it afterwards. */
void sb_upstream_release(sb_upstream_conn *uc);
/* Closes a connection (pending writes are cancelled). The caller must not touch it
 * afterwards; a connect in progress has its callback suppressed. */
void sb_upstream_close(sb_upstream_conn *uc);

size_t sb_upstream_idle_count(const sb_upstream *u);
uint64_t sb_upstream_connects(const sb_upstream *u); /* connections opened so far */

#endif
