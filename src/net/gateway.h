/* gateway: `switchboard serve`, the live data path.
 *
 * Ties the pieces together on one event loop: the HTTP server (net/http_server.h) accepts
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
 * Owns its config, router, upstream pools and server. Not thread-safe: one loop. */
#ifndef SB_NET_GATEWAY_H
#define SB_NET_GATEWAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "core/router.h"
#include "net/http_server.h"
#include "net/upstream.h"
#include "proto/config.h"
#include "proto/inspect.h"
#include "proto/usage.h"

typedef struct sb_gateway_counters {
    uint64_t requests;         /* requests read */
    uint64_t proxied;          /* requests forwarded */
    uint64_t retries;          /* second attempts on another endpoint */
    uint64_t upstream_errors;  /* failed before the response started (502/504) */
    uint64_t midstream_errors; /* upstream died after the response started */
    uint64_t client_aborts;    /* client left while its request was in flight */
    uint64_t rejected;         /* answered with 4xx by the gateway itself */
    uint64_t orca_reports;     /* endpoint-load-metrics headers applied */
    uint64_t refused[2];       /* flow control: [0] 429 (queue full, shed), [1] 503 (timeout, none healthy) */
    uint64_t unauthorized[2];  /* 401: [0] client API key, [1] admin token */
} sb_gateway_counters;

/* Fixed-bucket latency histogram (seconds), Prometheus-style cumulative on output. */
#define SB_HISTO_BUCKETS 15
typedef struct sb_histo {
    uint64_t counts[SB_HISTO_BUCKETS + 1]; /* last: above every bound (+Inf) */
    double sum;
    uint64_t n;
} sb_histo;

typedef struct sb_pool_metrics {
    sb_histo duration;          /* request start to end */
    sb_histo ttfb;              /* request start to first response byte */
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
} sb_pool_metrics;

typedef struct sb_ep_metrics {
    uint64_t by_class[6];       /* responses 1xx..5xx (index 1..5); [0]: no response */
} sb_ep_metrics;

typedef struct sb_prober sb_prober;
typedef struct sb_adaptive sb_adaptive;
typedef struct sb_admission sb_admission;

/* A configuration in use: the current one, or a retired one still referenced by requests
 * that started under it (they finish with the profile they started with). */
typedef struct sb_snapshot {
    sb_config *cfg;
    size_t refs;                /* exchanges holding it, plus 1 while current */
    struct sb_snapshot *next;   /* retired snapshots */
} sb_snapshot;

typedef struct sb_gateway {
    uv_loop_t *loop;
    sb_config *cfg;             /* == snap->cfg */
    sb_snapshot *snap;
    sb_snapshot *retired;
    uint64_t reloads;
    sb_router *router;
    sb_upstream **ups;          /* all endpoints, pool-major */
    size_t *pool_first_up;      /* index into ups of each pool's first endpoint */
    sb_http_server *server;
    sb_http_server *admin_server; /* NULL when admin.listen is null */
    sb_inspect_ctx ictx;        /* reused for every request: one loop, one request at a time */
    uint64_t *hashes;           /* block-hash scratch, hashes_cap entries */
    size_t hashes_cap;
    char *models_json;          /* GET /v1/models body, built once from config */
    size_t models_json_len;
    FILE *access_log;
    sb_gateway_counters counters;
    size_t in_flight;           /* exchanges alive */
    sb_prober *prober;
    sb_adaptive **adaptive;     /* per pool: detectors and configurator (core/adaptive.h) */
    sb_admission *adm;          /* flow control (core/admission.h, net/admission.c); NULL: off */
    uv_timer_t adaptive_timer;  /* ticks them on the probing cadence */
    bool adaptive_timer_open;
    sb_pool_metrics *pool_metrics;
    sb_ep_metrics *ep_metrics;  /* parallel to ups */
    uint64_t rejected_by_status[6];
    bool stopping;
    /* Keys the slots of every table holding client-derived keys (router, prefix indexes, flow
     * control; base/hash.h). Drawn from the OS once at start, kept by reloads; never logged. */
    uint64_t hash_secret;
} sb_gateway;

/* Starts serving cfg (ownership of cfg passes to the gateway, also on failure).
 * Returns 0 and sets *out, or a negative libuv error with a message logged. */
int sb_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **out);
/* Stops listening, aborts in-flight exchanges, and frees the gateway (handles close on the
 * loop's next turns). */
void sb_gateway_stop(sb_gateway *gw);
uint16_t sb_gateway_port(const sb_gateway *gw);
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

/* The upstream pool of endpoint `ep` of pool `pool`. */
sb_upstream *sb_gateway_upstream(const sb_gateway *gw, uint32_t pool, uint32_t ep);

/* Internal, shared by gateway.c and proxy.c: forwards a routed request. */
typedef struct sb_proxy_target {
    uint32_t pool;
    int adapter;
    const char *served;          /* non-NULL: splice this name into the body's model field */
    bool insert_model;           /* no model field: insert "model":served at model_tok_start */
    bool insert_comma;           /* the insertion is followed by another member */
    size_t served_len;
    size_t model_tok_start, model_tok_end;
    int stream;
    const char *model;           /* as requested, for the access log */
    /* who asked (gateway.c, from the Authorization bearer token) */
    uint64_t key_id;             /* 64 bits of the token's SHA-256; 0: no bearer token */
    int key_band;                /* the matched key's band (enum sb_band); -1: none named */
    char tenant[SB_AUTH_TENANT_MAX + 1]; /* the key's tenant; "" if none named */
    int band;                    /* set by admission: the band it queued the request in; -1 */
} sb_proxy_target;

/* What the access log and metrics learn of one request when it ends. */
typedef struct sb_exchange_log {
    int pool;                    /* -1: refused before a pool was chosen */
    int ep;                      /* -1: never dispatched */
    int status;                  /* sent to the client; 499 if it left before the answer */
    const char *outcome;         /* ok, rejected, upstream_error, midstream_error, client_abort */
    const char *model;
    bool stream;
    uint64_t bytes_out;
    sb_ns t_start, t_first_byte, t_end;
    int retries;
    sb_usage usage;
    const char *decision;        /* JSON of the pick, or NULL */
    const char *band;            /* flow-control band's name, NULL if none was decided */
    const char *tenant;          /* the API key's tenant, or NULL */
} sb_exchange_log;

/* Takes and drops a reference on the current snapshot (exchanges). */
sb_snapshot *sb_gateway_snapshot_ref(sb_gateway *gw);
void sb_gateway_snapshot_unref(sb_gateway *gw, sb_snapshot *s);

/* The admin listener's handler (ctx: the gateway): /metrics and /debug/... behind the admin
 * token; 401 with WWW-Authenticate: Bearer without it, 404 for any other path. */
void sb_gateway_admin(sb_http_req *req, void *ctx);
/* The admin listener's head hook (sb_http_head_hook): a missing or wrong token, a method
 * other than GET/HEAD or an unknown path is answered before any body is read. */
bool sb_gateway_admin_head(sb_http_req *req, void *ctx);

/* Records one finished request: metrics, and the access log line if enabled. */
void sb_gateway_record(sb_gateway *gw, const sb_exchange_log *log);
void sb_proxy_start(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr);

/* An exchange has ended (it was counted in in_flight by sb_proxy_start). */
void sb_gateway_exchange_done(sb_gateway *gw);

/* Admission (net/admission.c): routes a request through flow control; re-examines the
 * queues when a request ends and on the periodic tick. */
int sb_gateway_admission_start(sb_gateway *gw);
void sb_gateway_admit(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr);
void sb_gateway_admission_done(sb_gateway *gw, uint32_t pool);
void sb_gateway_admission_tick(sb_gateway *gw, sb_ns now);
void sb_gateway_admission_stop(sb_gateway *gw);
/* Dispatches every queued request now (a gateway being retired by a reload). */
void sb_gateway_admission_flush(sb_gateway *gw);
/* A reload that kept the shape (gw->cfg is the new configuration): flow control turned on or
 * off, or new bounds and waits applied in place; queued requests keep their place. Returns
 * -1 if some pool could not take the new bounds (it keeps its old ones). */
int sb_gateway_admission_reconfigure(sb_gateway *gw);
void sb_gateway_admission_free(sb_gateway *gw);

/* An OpenAI-shaped error with extra response headers ("Name: value\r\n" lines, or NULL);
 * `code` goes into the body's code field. */
void sb_gateway_error_with(sb_gateway *gw, sb_http_req *req, int status, const char *message, const char *type,
                           const char *code, const char *headers);

/* Answers req with an OpenAI-shaped error. */
void sb_gateway_error(sb_gateway *gw, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code);

#endif
