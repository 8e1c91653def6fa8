/* gateway: `switchboard serve`, the live data path.
 *
 * Ties the pieces together on the main event loop (with `workers:` above 1, the client listener
 * runs on the workers' loops, net/workers.h, and what they share is reached under the lock of
 * net/guard.h): the HTTP server (net/http_server.h) accepts
 * OpenAI-style requests; proto/inspect reads model, stream flag and prompt from the body
 * without copying it; core/router resolves the model to a pool and picks an endpoint; the
 * proxy (net/proxy.c) forwards the request on a pooled keep-alive upstream connection and
 * streams the answer back as it arrives. The gateway answers GET /v1/models and /healthz
 * itself. With `auth` configured, every OpenAI API request needs a configured API key
 * (Authorization: Bearer KEY; 401 invalid_api_key otherwise); the key's tenant and band feed
 * flow control.
 *
 * A second server, the admin listener (`admin.listen`, its own connection budget), serves
 * /metrics and the /debug pages (net/admin.c), behind the admin bearer token when one is set; the
 * client listener never serves them. Both listeners survive reloads.
 *
 * Owns its config, router, upstream pools and server. Not thread-safe by itself: with workers,
 * every entry from another thread holds the guard (net/guard.h).
 *
 * This is the public door (what cmd/ needs). net's own files share the gateway's internals
 * through net/gateway_types.h; error answers live in net/errors.h, the per-request record in
 * net/stats.h, the admin pages in net/admin.h, flow control's adapter in net/admission.h and
 * the forwarding state machine in net/proxy.h. */
#ifndef SB_NET_GATEWAY_H
#define SB_NET_GATEWAY_H

#include <stdint.h>
#include <uv.h>

#include "proto/config.h"

typedef struct sb_gateway sb_gateway;

/* Starts serving cfg (ownership of cfg passes to the gateway, also on failure).
 * Returns 0 and sets *out, or a negative libuv error with a message logged.
 * *out is the gateway's home: it must stay at the same address while the gateway runs, since a
 * membership change (DNS discovery, POST/DELETE /admin/endpoints; net/discovery.h) may replace
 * the gateway like a reload does and then stores the new one there. */
int sb_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **out);
/* Stops listening, aborts in-flight exchanges, and frees the gateway (handles close on the
 * loop's next turns). */
void sb_gateway_stop(sb_gateway *gw);
/* Begins a graceful drain (SIGTERM): the client listener closes (new connections are refused),
 * /healthz answers 503 draining, idle keep-alive connections close at once, and every answer
 * from now on closes its connection. Requests in flight and streams go on; queued requests are
 * dispatched as capacity frees. After shutdown.drain_ms, queued requests are refused 503
 * (reason draining) and what still runs is cut. on_drained(arg) is called once, from the loop,
 * when no client connection is left (at most about a second after the deadline); the caller
 * then calls sb_gateway_stop. The admin listener keeps answering (/metrics shows
 * switchboard_draining 1) until the stop. A second call does nothing; reloads are the
 * caller's to refuse meanwhile. */
void sb_gateway_drain(sb_gateway *gw, void (*on_drained)(void *arg), void *arg);
uint16_t sb_gateway_port(const sb_gateway *gw);
/* The endpoint picker's gRPC port (`ext_proc:`); 0 when there is none (or after a drain's cut). */
uint16_t sb_gateway_extproc_port(const sb_gateway *gw);
/* The admin listener's port; 0 when there is none. */
uint16_t sb_gateway_admin_port(const sb_gateway *gw);
/* Replaces the configuration (SIGHUP). Ownership of cfg passes to the gateway either way.
 * Same pools, models and endpoints: profiles, weights, thresholds, timeouts and limits change
 * in place; requests in flight keep the snapshot they started with. Pools, models or endpoints
 * changed: a new gateway takes over the listener (*gw is replaced), every endpoint that stays
 * keeps its state (reports, health, learned figures; the prefix index of an unchanged pool),
 * and the old gateway finishes its requests in flight, then frees itself. A change of the
 * listen address, or of admin.listen, is refused (-1, reason logged): that needs a restart. */
int sb_gateway_reload(sb_gateway **gw, sb_config *cfg);
/* Counts a reload its caller refused before it reached the gateway (a config file with
 * errors, a SIGHUP while draining) as a failed one: switchboard_reloads_total{result="failure"}
 * counts those and every refusal of sb_gateway_reload alike. */
void sb_gateway_reload_refused(sb_gateway *gw);
/* SIGHUP keeps the endpoints discovered or registered at run time: cfg is the file's, and the
 * configuration applied is cfg with them (net/discovery.h). */

/* The configuration in use (borrowed; valid until the next reload or stop). */
const sb_config *sb_gateway_config(const sb_gateway *gw);

#endif
