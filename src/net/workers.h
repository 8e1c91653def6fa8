/* workers: `workers: N` event loops serving the client listener, one thread each.
 *
 * Every worker has its own loop, its own client listener on the same address (SO_REUSEPORT:
 * the kernel spreads new connections over the workers' sockets), its own connections, TLS
 * sessions, HTTP/1.1 and HTTP/2 framing and upstream connection pools (the gateway's, per
 * worker: net/gateway.c). What they share (the routing state) is reached under the lock of
 * net/guard.h: the server's callbacks into the gateway hold it.
 *
 * The main loop keeps the control plane (admin listener, probes, discovery, KV events, the
 * endpoint picker, signals, reloads) and serves no client connection.
 *
 * One set per process. Operations on a worker's server from another thread are posted to the
 * worker (net/guard.h sb_guard_post). */
#ifndef SB_NET_WORKERS_H
#define SB_NET_WORKERS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/http_server.h"

typedef struct sb_workers sb_workers;

/* How the workers' servers reach the gateway: the handler, head hook and refusal callback
 * every worker's server gets (called under the lock), with ctx; turn(ctx) runs once per loop
 * turn of each worker, before it waits for events, without the lock (it takes it if it has
 * work: the access log's flush). */
typedef struct sb_workers_env {
    sb_http_handler handler;
    sb_http_head_hook head;
    sb_http_refused_fn refused;
    void (*turn)(void *ctx);
    void *ctx;
} sb_workers_env;

/* Starts n workers listening on host:port (port 0: one is picked, the same for all). From the
 * main thread, with the guard on. 0 and *out, or a negative libuv error (nothing left open). */
int sb_workers_start(size_t n, const char *host, uint16_t port, const sb_http_server_opts *opts,
                     const sb_workers_env *env, sb_workers **out);
size_t sb_workers_count(const sb_workers *w);
uint16_t sb_workers_port(const sb_workers *w);
/* The calling thread's worker index, or -1 (the main loop, or no workers). */
int sb_worker_index(void);
uv_loop_t *sb_workers_loop(sb_workers *w, size_t i);

/* Runs fn(server, arg) on every worker's thread, under the lock. arg is shared: done(arg),
 * if not NULL, runs once after the last worker ran fn (on that worker's thread). 0, or -1
 * when nothing could be posted (then done is not called: the caller keeps arg). */
int sb_workers_each(sb_workers *w, void (*fn)(sb_http_server *s, void *arg), void *arg, void (*done)(void *arg));
/* New limits (and TLS context) for every worker's server, posted to each (the context's session
 * ticket keys are carried over from the last one here, once). 0, or -1 (out of memory: the
 * servers keep theirs). Under the lock. */
int sb_workers_set_opts(sb_workers *w, const sb_http_server_opts *opts);
/* The servers' gauges and counters summed (read from their atomics). Under the lock (a worker's
 * server is let go under it). */
void sb_workers_get_stats(const sb_workers *w, sb_http_server_stats *out);
size_t sb_workers_connections(const sb_workers *w);
/* Worker i's server's figures (zeroes once it stopped). Under the lock. */
void sb_workers_worker_stats(const sb_workers *w, size_t i, sb_http_server_stats *out);

/* The gateways using the set: sb_workers_start gives its caller the first hold; each further
 * gateway takes one (a reload's), and the last release stops the workers (sb_workers_stop),
 * after the posts the releasing gateway made (its pools' frees). Under the lock. */
void sb_workers_hold(sb_workers *w);
void sb_workers_release(sb_workers *w);
/* Stops the workers' servers (in-flight requests get on_abort), each on its loop; the loops go
 * on (what the aborted requests leave closes there) until sb_workers_stop. Under the lock. */
void sb_workers_stop_servers(sb_workers *w);
/* Stops the workers: their servers close, then their loops end once what they hold is closed
 * (the gateway's upstream pools are freed by posts before this). Any thread, under the lock.
 * Idempotent. */
void sb_workers_stop(sb_workers *w);
/* Waits for the workers' threads and frees the set (the main thread, not holding the lock). */
void sb_workers_join(void);

#endif
