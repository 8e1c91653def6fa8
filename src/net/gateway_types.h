/* gateway_types: the gateway's state, shared by net's own files (gateway.c, routes.c,
 * admission.c, admin.c; not proxy.c, which gets an sb_proxy_env, nor the leaves errors.c and
 * stats.c, which get an sb_stats) and by nothing outside net/. cmd/ sees only the
 * opaque handle of net/gateway.h.
 *
 * Types only: gateway.c calls the other files of net/, and they never call back into it (the
 * proxy reaches its owner only through the callbacks of its sb_proxy_env, net/proxy.h). */
#ifndef SB_NET_GATEWAY_TYPES_H
#define SB_NET_GATEWAY_TYPES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "core/router.h"
#include "net/exchange.h"
#include "net/http_server.h"
#include "net/proxy.h"
#include "net/stats.h"
#include "net/upstream.h"
#include "proto/config.h"
#include "proto/inspect.h"
#include "proto/usage.h"

typedef struct sb_gateway sb_gateway; /* also in net/gateway.h (C11 allows the repeat) */
typedef struct sb_prober sb_prober;
typedef struct sb_adaptive sb_adaptive;
typedef struct sb_admission sb_admission;
typedef struct sb_kv_hub sb_kv_hub;
typedef struct sb_kv_sub sb_kv_sub;
typedef struct sb_precise sb_precise;

/* A loop's scratch for reading request bodies: the inspector's token array and the block
 * hashes. One per loop (the main loop's [0], worker w's [w + 1]), touched by its thread only:
 * a worker reads a body outside the lock (net/routes.c). */
typedef struct sb_scratch {
    sb_inspect_ctx ictx;
    uint64_t *hashes;   /* hashes_cap entries */
    size_t token_bytes; /* the token array's size, noted under the lock (for /metrics) */
} sb_scratch;

struct sb_gateway {
    uv_loop_t *loop;
    sb_config *cfg; /* == snap->cfg */
    sb_snapshot *snap;
    sb_snapshot *retired;
    uint64_t reloads;
    /* Configuration reloads (SIGHUP: sb_gateway_reload, sb_gateway_reload_refused), apart from
     * `reloads`, which membership changes (net/discovery.h) apply through the same path. */
    uint64_t reload_successes;
    uint64_t reload_failures; /* refused, the running configuration kept */
    double last_reload_ok_s;  /* Unix time of the last configuration applied; the start counts */
    sb_router *router;
    sb_upstream **ups;     /* all endpoints, pool-major */
    size_t *pool_first_up; /* index into ups of each pool's first endpoint */
    sb_http_server *server;
    sb_http_server *admin_server; /* NULL when admin.listen is null */
    sb_scratch *scratch;          /* n_scratch: 1, plus one per worker */
    size_t n_scratch;
    size_t hashes_cap;
    /* Keeps the gateway (and its configuration) alive while a worker reads a request outside
     * the lock (net/routes.c), and lets it go (which may free a retired gateway). Set by
     * gateway.c, called through the pointers (routes.c does not call gateway.c). */
    sb_snapshot *(*pin)(sb_gateway *gw);
    void (*unpin)(sb_gateway *gw, sb_snapshot *snap);
    char *models_json; /* GET /v1/models body, built once from config */
    size_t models_json_len;
    sb_gateway_counters counters;
    size_t in_flight; /* exchanges alive */
    sb_prober *prober;
    sb_adaptive **adaptive;    /* per pool: detectors and configurator (core/adaptive.h) */
    sb_admission *adm;         /* flow control (core/admission.h, net/admission.c); NULL: off */
    uv_timer_t adaptive_timer; /* ticks them on the probing cadence */
    bool adaptive_timer_open;
    sb_stats stats; /* metrics and access log (net/stats.h); its ep_metrics parallel ups */
    /* The access log file's stdio buffer (SB_ACCESS_LOG_BUF bytes), ours: glibc ignores the size
     * given with a NULL buffer and keeps its own (a page), so lines would straddle writes, and
     * interleave with a replaced gateway's during a reload. Freed after the file is closed. */
    char *access_log_buf;
    struct log_flusher *log_flusher; /* flushes stats.access_log once per loop turn (gateway.c) */
    bool stopping;
    bool stopped; /* sb_gateway_stop ran (stopping, not retiring) */
    /* Graceful drain (sb_gateway_drain): the listener is closed, /healthz says 503, requests in
     * flight finish until drain_deadline; then what is left is cut (drain_cut_at set), and
     * on_drained runs once the last connection is gone or a short grace has passed. */
    bool draining;
    uv_timer_t drain_timer;
    bool drain_timer_open;
    sb_ns drain_deadline, drain_cut_at;
    void (*on_drained)(void *arg);
    void *drained_arg;
    /* x-request-id for requests that bring none (net/routes.c): a per-process key over a
     * counter. Drawn at start, carried by reloads. */
    uint64_t id_secret, id_seq;
    /* Keys the slots of every table holding client-derived keys (router, prefix indexes, flow
     * control; base/hash.h). Drawn from the OS once at start, kept by reloads; never logged. */
    uint64_t hash_secret;
    sb_proxy_env proxy; /* what the proxy gets instead of the gateway (gateway_build) */
    /* The endpoint picker (`ext_proc:`, net/picker.h): its listener and streams; NULL without.
     * Handed to the new gateway by a replacing reload, like the listeners. */
    struct sb_picker *picker;
    /* Where admission sends a routed request of the picker's (req->ops set) instead of the
     * proxy: sb_picker_dispatch, set by gateway.c (admission.c cannot include net/picker.h:
     * the picker calls the routes, which call admission). */
    void (*pick)(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr);
    /* KV-cache events (net/kv_feed.c): the hub (ZMQ context), NULL until a pool asks for events;
     * subscribers parallel to ups, NULL for endpoints of pools without `kv_events:`. */
    sb_kv_hub *kv_hub;
    sb_kv_sub **kv_subs;
    uint64_t kv_batches, kv_clears; /* seen by the gateway's callbacks */
    struct sb_peer_sync *sync;      /* gateway sync (net/sync_feed.h); NULL: off */
    sb_precise *precise;            /* requests' precise keys (net/precise.c); NULL without a precise index */
    uint64_t agent_refused[3];      /* agent reports refused, by reason (net/agent_reports.c) */
    /* Membership at run time (net/discovery.h): the serving gateway holds it, a replace-reload
     * hands it over. `home` is the owner's variable (sb_gateway_start's out), which a
     * membership change that replaces the gateway updates. */
    struct sb_discovery *disc;
    sb_gateway **home;
    /* Recent decisions (net/decisions.h, admin.decisions): NULL when off. A reload of the same
     * size keeps it (a replacing gateway shares it); the proxy's env points at it. */
    struct sb_decisions *decisions;
    /* Workers (net/workers.h; `workers:` above 1): their loops serve the client listener, and
     * server is NULL. Every gateway using them holds the set (a retired one frees its per-worker
     * pools through it): the last one let go stops them. */
    struct sb_workers *wset;
    /* Per worker, the upstream pool of each endpoint (wups[w * endpoints + i], parallel to ups),
     * made by the worker on its own loop at first use, with uo and the pool's TLS context. The
     * main loop's pools (ups) stay: probes and /tokenize use them, workers adopt their
     * resolved addresses. */
    sb_upstream **wups;
    sb_upstream_opts uo;
    SSL_CTX **pool_tls;
};

#endif
