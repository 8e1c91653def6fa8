/* admission: the live gateway's adapter of core/admission.h (flow control in front of
 * scheduling). The policy is the core module's; this file derives a request's band and tenant
 * from its key and headers, keeps what a queued request needs until it is released, and turns
 * refusals into HTTP answers.
 *
 * Band: the API key's when the key names one (auth.api_keys, flow_control.api_keys), else the
 * x-priority header (critical | standard | sheddable), else standard. Tenant: the key's tenant
 * when it names one, else x-tenant, else the API key. Every refusal carries Retry-After and says
 * why in its body and in `x-switchboard-refusal`. A client that disconnects while queued is
 * removed at once and nothing is sent upstream.
 *
 * The queues are re-examined when a request ends (capacity freed) and on the adaptive tick
 * (reports arrive, deadlines pass). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/log.h"
#include "core/admission.h"
#include "net/admission.h"
#include "net/errors.h"
#include "net/fallback.h"
#include "net/guard.h"
#include "net/proxy.h"
#include "net/stats.h"
#include "proto/auth.h"

typedef struct queued {
    sb_gateway *gw;
    sb_http_req *req;
    sb_proxy_target t;
    sb_sched_request rr;
    uint64_t *hashes;         /* copied: the gateway's scratch is reused by the next request */
    char model[SB_MODEL_NAME_MAX + 1];
    sb_flow_handle handle;
    uint32_t pool;
    sb_ns t_enqueued; /* for the queue-wait histogram */
} queued;

/* What the access log knows of a request flow control holds or refuses. */
static sb_exchange_log known_of(const sb_proxy_target *t, const char *model)
{
    return (sb_exchange_log){.pool = (int)t->pool,
                             .ep = -1,
                             .adapter = t->adapter,
                             .model = model,
                             .stream = t->stream,
                             .band = t->band >= 0 ? sb_band_name((enum sb_band)t->band) : NULL,
                             .tenant = t->tenant,
                             .ident = &t->ident};
}

/* Answers a refusal: its status, its reason in the body's code and in x-switchboard-refusal;
 * logged with what flow control knew (pool, model, band, tenant). */
static void refuse(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const char *model,
                   const sb_admission_refusal *r)
{
    char headers[160];
    snprintf(headers, sizeof(headers), "Retry-After: %u\r\nx-switchboard-refusal: %s\r\n", r->retry_after_s,
             r->reason);
    gw->counters.refused[r->status == 429 ? 0 : 1]++;
    sb_exchange_log known = known_of(t, model);
    known.outcome = "refused";
    sb_errors_refuse(&gw->stats, req, &known, r->status, r->message,
                     r->status == 429   ? "rate_limit_exceeded"
                     : r->status == 504 ? "timeout"
                                        : "service_unavailable",
                     r->reason, headers);
}

/* The request's band: its API key's (auth.api_keys, flow_control.api_keys) when the key names
 * one, else the x-priority header, else standard. The key wins: a band tied to a key is the
 * operator's decision, which a header the client writes must not overturn. */
static enum sb_band band_of(const sb_http_req *req, const sb_proxy_target *t)
{
    if (t->key_band >= 0)
        return (enum sb_band)t->key_band;
    const sb_http_header *h = sb_http_req_header(req, "x-priority");
    int b = h ? sb_band_parse(h->value, h->value_len) : -1;
    return b >= 0 ? (enum sb_band)b : SB_BAND_STANDARD;
}

/* The fairness key (proto/auth.h): the key's tenant, else x-tenant, else the key itself. */
static uint64_t tenant_of(const sb_http_req *req, const sb_proxy_target *t)
{
    const sb_http_header *h = sb_http_req_header(req, "x-tenant");
    return sb_auth_tenant_key(t->tenant, h ? h->value : NULL, h ? h->value_len : 0, t->key_id);
}

static void free_queued(queued *q)
{
    sb_free(q->hashes);
    sb_free(q);
}

static void detach(queued *q)
{
    q->req->on_abort = NULL;
    q->req->user = NULL;
}

static void on_queued_abort(sb_http_req *req)
{
    queued *q = req->user;
    sb_admission_remove(q->gw->adm, q->pool, q->handle);
    q->gw->counters.client_aborts++;
    /* Never dispatched, never answered: still one line, so the log accounts for it. */
    sb_exchange_log log = known_of(&q->t, q->model);
    log.status = 499;
    log.outcome = "client_abort";
    log.reason = "queued";
    log.t_start = req->start_ns;
    log.t_end = uv_hrtime();
    log.gateway_answer = true;
    log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
    sb_stats_record(&q->gw->stats, &log);
    free_queued(q);
}

/* Scheduling's turn: the proxy forwards the request, or, for an endpoint picker's request
 * (req->ops->pick set: it came on an ext_proc stream), the picker answers with the pick. */
static void dispatch(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    if (req->ops && req->ops->pick && gw->pick) {
        (void)sb_guard_here(req->loop); /* the picker's streams live on the main loop */
        gw->pick(&gw->proxy, req, t, rr);
    } else
        sb_proxy_start(&gw->proxy, req, t, rr);
}

/* Flow control or availability refused the request in t's pool: the pool's first fallback that
 * takes it now serves it (net/fallback.h), else the refusal r is answered. A request that waited
 * in the pool's queue first (waited >= 0) and is then dispatched to a fallback counts that wait
 * in the pool's queue_wait histogram, as a request released from the queue does. */
static void refuse_or_fall_back(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr,
                                const char *model, const sb_admission_refusal *r, int64_t waited)
{
    sb_proxy_target ft = *t;
    sb_sched_request frr = *rr;
    enum sb_fallback_reason why = r->why == SB_REFUSE_NO_ENDPOINT ? SB_FALLBACK_UNAVAILABLE : SB_FALLBACK_SATURATED;
    /* The picker's request is the one with ops->pick (dispatch): an HTTP/2 stream has ops too,
     * and is proxied like any other (an https:// fallback is open to it). */
    if (sb_gateway_fallback(gw, gw->cfg, &ft, &frr, why, req->ops && req->ops->pick)) {
        ft.model = model;
        if (waited >= 0)
            sb_stats_queue_wait(&gw->stats, t->pool, (sb_ns)waited);
        dispatch(gw, req, &ft, &frr);
        return;
    }
    refuse(gw, req, t, model, r);
}

static void start(sb_gateway *gw, queued *q)
{
    detach(q);
    q->t.model = q->model;
    q->rr.block_hashes = q->hashes;
    q->rr.kv_keys = q->rr.kv_keys ? q->hashes + q->rr.n_blocks : NULL;
    sb_admission_mark_released(gw->adm, q->pool, &q->rr);
    sb_stats_queue_wait(&gw->stats, q->pool, uv_hrtime() - q->t_enqueued);
    dispatch(gw, q->req, &q->t, &q->rr);
    free_queued(q);
}

/* core/admission.h's ops: a queued request released, or dropped (expired, evicted). */
static bool on_dispatch(void *ctx, void *user)
{
    start(ctx, user);
    return true;
}

/* Dropped from the queue (its wait expired, or evicted for a higher band): the pool stayed
 * saturated past flow control's bound, so a fallback may take it. */
static void on_refuse(void *ctx, void *user, const sb_admission_refusal *r)
{
    queued *q = user;
    detach(q);
    q->t.model = q->model;
    refuse_or_fall_back(ctx, q->req, &q->t, &q->rr, q->model, r, (int64_t)(uv_hrtime() - q->t_enqueued));
    free_queued(q);
}

void sb_gateway_admission_tick(sb_gateway *gw, sb_ns now)
{
    if (gw->adm)
        sb_admission_tick(gw->adm, now);
}

void sb_gateway_admission_done(sb_gateway *gw, uint32_t pool)
{
    if (gw->adm && !gw->stopping) {
        sb_guard_keep(); /* the release walks the queue: its dispatches keep the lock (net/guard.h) */
        sb_admission_release(gw->adm, pool, uv_hrtime());
        sb_guard_unkeep();
    }
}

/* Holds a request admission answered WAIT for: its target, descriptor and hashes are copied
 * (the gateway's scratch is reused by the next request) until it is released. */
static void enqueue(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_request_desc *desc,
                    sb_ns now)
{
    const sb_sched_request *rr = &desc->sched;
    queued *q = sb_calloc(1, sizeof(*q));
    size_t n = rr->n_blocks + (rr->kv_keys ? rr->n_kv_keys : 0);
    uint64_t *hashes = n ? sb_malloc(n * sizeof(uint64_t)) : NULL;
    if (!q || (n && !hashes)) {
        sb_free(q);
        sb_free(hashes);
        sb_errors_answer(&gw->stats, req, 500, "out of memory", "server_error", NULL, NULL);
        return;
    }
    if (rr->n_blocks)
        memcpy(hashes, rr->block_hashes, rr->n_blocks * sizeof(uint64_t));
    if (rr->kv_keys && rr->n_kv_keys) /* the precise keys after the block hashes */
        memcpy(hashes + rr->n_blocks, rr->kv_keys, rr->n_kv_keys * sizeof(uint64_t));
    *q = (queued){.gw = gw, .req = req, .t = *t, .rr = *rr, .hashes = hashes, .pool = t->pool, .t_enqueued = now};
    snprintf(q->model, sizeof(q->model), "%s", t->model ? t->model : "");
    q->t.served = t->served; /* owned by the router: stable */
    sb_admission_refusal r;
    sb_guard_keep(); /* an enqueue may evict (refuse, fall back) from inside the queue */
    int queued = sb_admission_enqueue(gw->adm, desc, q, now, &q->handle, &r);
    sb_guard_unkeep();
    if (queued != SB_ADMIT_QUEUED) {
        free_queued(q);
        refuse_or_fall_back(gw, req, t, &desc->sched, t->model, &r, -1);
        return;
    }
    req->user = q;
    req->on_abort = on_queued_abort;
    req->on_drain = NULL;
}

void sb_gateway_admit(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    sb_ns now = uv_hrtime();
    sb_admission_refusal r;
    if (!gw->adm) {
        /* No flow control: only the availability check comes before scheduling. */
        if (sb_router_pool_available(gw->router, t->pool, now)) {
            dispatch(gw, req, t, rr);
        } else {
            r = sb_admission_refusal_of(SB_REFUSE_NO_ENDPOINT, 1);
            refuse_or_fall_back(gw, req, t, rr, t->model, &r, -1);
        }
        return;
    }
    sb_request_desc desc = {.sched = *rr, .band = band_of(req, t), .body_bytes = req->body_len, .stream = t->stream};
    sb_proxy_target tb = *t;
    tb.band = (int)desc.band;
    switch (sb_admission_admit(gw->adm, &desc, now, &r)) {
    case SB_ADMIT_DISPATCH:
        sb_stats_queue_wait(&gw->stats, t->pool, 0); /* no wait: the zeros show what share waited */
        dispatch(gw, req, &tb, rr);
        break;
    case SB_ADMIT_WAIT:
        desc.tenant = tenant_of(req, t); /* hashed only for a request that may wait */
        enqueue(gw, req, &tb, &desc, now);
        break;
    default: refuse_or_fall_back(gw, req, &tb, rr, t->model, &r, -1);
    }
}

static void flow_config_of(const sb_config *cfg, sb_flow_config *fc, uint64_t hash_secret)
{
    sb_flow_config_default(fc);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        fc->band[b].max_wait_ns = SB_MS(cfg->flow_max_wait_ms[b]);
        fc->band[b].max_queued = cfg->flow_max_queued[b];
        fc->band[b].max_bytes = cfg->flow_max_bytes[b];
    }
    fc->max_queued_total = cfg->flow_max_queued_total;
    fc->max_bytes_total = cfg->flow_max_bytes_total;
    fc->gate_queue = cfg->flow_gate_queue;
    fc->gate_kv = cfg->flow_gate_kv;
    fc->hash_secret = hash_secret;
}

int sb_gateway_admission_start(sb_gateway *gw)
{
    if (!gw->cfg->flow_enabled)
        return 0; /* adm stays NULL: every request goes straight to scheduling */
    static const sb_admission_ops ops = {.dispatch = on_dispatch, .refuse = on_refuse};
    sb_flow_config fc;
    flow_config_of(gw->cfg, &fc, gw->hash_secret);
    gw->adm = sb_admission_new(gw->router, gw->cfg->n_pools, &fc, &ops, gw);
    return gw->adm ? 0 : -1;
}

int sb_gateway_admission_reconfigure(sb_gateway *gw)
{
    if (!gw->cfg->flow_enabled) {
        /* Turned off: what waits goes on to scheduling, as new requests now do. */
        sb_gateway_admission_flush(gw);
        sb_gateway_admission_free(gw);
        return 0;
    }
    if (!gw->adm)
        return sb_gateway_admission_start(gw);
    sb_flow_config fc;
    flow_config_of(gw->cfg, &fc, gw->hash_secret);
    return sb_admission_reconfigure(gw->adm, &fc);
}

void sb_gateway_admission_flush(sb_gateway *gw)
{
    void *q;
    sb_ns now = uv_hrtime();
    for (size_t p = 0; gw->adm && p < sb_admission_pool_count(gw->adm); p++)
        while ((q = sb_admission_take(gw->adm, (uint32_t)p, now)) != NULL)
            start(gw, q);
}

void sb_gateway_admission_refuse_draining(sb_gateway *gw)
{
    /* Not a core refusal: the gateway is going away, not the fleet full. Retry-After 1: another
     * gateway replica (or this one's successor) takes the retry. */
    static const sb_admission_refusal r = {.status = 503,
                                           .reason = "draining",
                                           .message = "the gateway is shutting down; retry on another replica",
                                           .retry_after_s = 1};
    void *v;
    sb_ns now = uv_hrtime();
    for (size_t p = 0; gw->adm && p < sb_admission_pool_count(gw->adm); p++)
        while ((v = sb_admission_take(gw->adm, (uint32_t)p, now)) != NULL) {
            queued *q = v;
            detach(q);
            refuse(gw, q->req, &q->t, q->model, &r);
            free_queued(q);
        }
}

void sb_gateway_admission_stop(sb_gateway *gw)
{
    /* Queued requests end with the gateway: their clients are being closed anyway. Each still
     * gets its one log line (the gateway cut it, unanswered). */
    void *v;
    sb_ns now = uv_hrtime();
    for (size_t p = 0; gw->adm && p < sb_admission_pool_count(gw->adm); p++)
        while ((v = sb_admission_take(gw->adm, (uint32_t)p, now)) != NULL) {
            queued *q = v;
            sb_exchange_log log = known_of(&q->t, q->model);
            log.status = 499;
            log.outcome = "drain_cut";
            log.reason = "queued";
            log.t_start = q->req->start_ns;
            log.t_end = now;
            log.gateway_answer = true;
            log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
            sb_stats_record(&gw->stats, &log);
            detach(q);
            free_queued(q);
        }
}

void sb_gateway_admission_free(sb_gateway *gw)
{
    sb_admission_free(gw->adm);
    gw->adm = NULL;
}
