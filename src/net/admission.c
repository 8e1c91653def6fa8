/* admission: flow control in front of scheduling (core/flow.h), wired to live requests.
 *
 * Per pool: while the pool is saturated (every available endpoint over the profile's queue or
 * KV threshold, or stale), requests wait in bounded queues by priority band (x-priority:
 * critical | standard | sheddable, default standard; a band the API key names wins) and tenant
 * (the key's tenant, else x-tenant, else the API key),
 * dispatched strictly by band and round robin across tenants as capacity returns. A full queue
 * answers 429, a request that waited past its band's deadline 503, sheddable requests are
 * refused first (429), and with no healthy endpoint at all the answer is 503 at once; every
 * refusal carries Retry-After and says why in its body and in `x-switchboard-refusal`. A client
 * that disconnects while queued is removed at once and nothing is sent upstream.
 *
 * The queue is re-examined when a request ends (capacity freed) and on the adaptive tick
 * (reports arrive, deadlines pass). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/log.h"
#include "core/flow.h"
#include "net/gateway.h"

typedef struct queued {
    sb_gateway *gw;
    sb_http_req *req;
    sb_proxy_target t;
    sb_sched_request rr;
    uint64_t *hashes;         /* copied: the gateway's scratch is reused by the next request */
    char model[SB_MODEL_NAME_MAX + 1];
    sb_flow_handle handle;
    uint32_t pool;
} queued;

static void refuse(sb_gateway *gw, sb_http_req *req, int status, const char *reason, const char *message,
                   uint32_t retry_after_s)
{
    char headers[160];
    snprintf(headers, sizeof(headers), "Retry-After: %u\r\nx-switchboard-refusal: %s\r\n",
             retry_after_s ? retry_after_s : 1, reason);
    gw->counters.refused[status == 429 ? 0 : 1]++;
    sb_gateway_error_with(gw, req, status, message, status == 429 ? "rate_limit_exceeded" : "service_unavailable",
                          reason, headers);
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

/* The fairness key: the API key's tenant when it names one, else x-tenant, else the key
 * itself (its digest), else none. Key tenants and x-tenant values are hashed apart (seeds 1
 * and 2): a client whose key names no tenant cannot write `x-tenant: alice` and queue in the
 * FIFO of the keys whose tenant is alice. */
static uint64_t tenant_of(const sb_http_req *req, const sb_proxy_target *t)
{
    if (t->tenant[0])
        return XXH3_64bits_withSeed(t->tenant, strlen(t->tenant), 1);
    const sb_http_header *h = sb_http_req_header(req, "x-tenant");
    if (h && h->value_len)
        return XXH3_64bits_withSeed(h->value, h->value_len, 2);
    return t->key_id;
}

static void free_queued(queued *q)
{
    sb_free(q->hashes);
    sb_free(q);
}

static void on_queued_abort(sb_http_req *req)
{
    queued *q = req->user;
    sb_flow_remove(q->gw->flows[q->pool], q->handle);
    q->gw->counters.client_aborts++;
    free_queued(q);
}

static void start(sb_gateway *gw, queued *q)
{
    sb_http_req *req = q->req;
    req->on_abort = NULL;
    req->user = NULL;
    q->t.model = q->model;
    q->rr.block_hashes = q->hashes;
    /* Scheduled with the weights in force now, not those of its arrival. */
    q->rr.profile = sb_router_pool_profile(gw->router, q->pool);
    q->rr.gated = true;
    q->rr.gate_queue = gw->cfg->flow_gate_queue;
    q->rr.gate_kv = gw->cfg->flow_gate_kv;
    sb_proxy_start(gw, req, &q->t, &q->rr);
    free_queued(q);
}

/* Dispatches queued requests while the pool has room; expires those past their deadline. */
static void drain(sb_gateway *gw, uint32_t pool, sb_ns now);

static void on_expired(void *ctx, void *user, enum sb_band band, int reason)
{
    sb_gateway *gw = ctx;
    queued *q = user;
    uint32_t ra = sb_flow_retry_after_s(gw->flows[q->pool], band, uv_hrtime());
    q->req->on_abort = NULL;
    q->req->user = NULL;
    if (reason == SB_FLOW_EXPIRED)
        refuse(gw, q->req, 503, "queue_timeout", "the request waited too long for capacity", ra);
    else
        refuse(gw, q->req, 429, "shed", "sheddable request evicted to make room for higher priority", ra);
    free_queued(q);
}

static void drain(sb_gateway *gw, uint32_t pool, sb_ns now)
{
    sb_flow *f = gw->flows[pool];
    sb_flow_expire(f, now, on_expired, gw);
    while (!sb_router_pool_saturated(gw->router, pool, gw->cfg->flow_gate_queue, gw->cfg->flow_gate_kv, now)) {
        queued *q = sb_flow_next(f, now);
        if (!q)
            break;
        start(gw, q);
    }
}

void sb_admission_tick(sb_gateway *gw, sb_ns now)
{
    if (!gw->flows || gw->draining_queues)
        return;
    gw->draining_queues = true;
    for (size_t p = 0; p < gw->cfg->n_pools; p++)
        if (gw->flows[p])
            drain(gw, (uint32_t)p, now);
    gw->draining_queues = false;
}

void sb_admission_request_done(sb_gateway *gw, uint32_t pool)
{
    /* A request started by a drain can end at once (a refused connection): no nested drain,
     * the outer loop goes on. */
    if (!gw->flows || pool >= gw->cfg->n_pools || !gw->flows[pool] || gw->stopping || gw->draining_queues)
        return;
    gw->draining_queues = true;
    drain(gw, pool, uv_hrtime());
    gw->draining_queues = false;
}

void sb_admission_route(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    sb_ns now = uv_hrtime();
    uint32_t pool = t->pool;
    if (!sb_router_pool_available(gw->router, pool, now)) {
        refuse(gw, req, 503, "no_healthy_endpoint", "no healthy endpoint serves this model", 1);
        return;
    }
    sb_flow *f = gw->flows ? gw->flows[pool] : NULL;
    if (!f) {
        sb_proxy_start(gw, req, t, rr);
        return;
    }
    enum sb_band band = band_of(req, t);
    sb_proxy_target tb = *t;
    tb.band = (int)band;
    t = &tb;
    bool saturated = sb_router_pool_saturated(gw->router, pool, gw->cfg->flow_gate_queue, gw->cfg->flow_gate_kv, now);
    int a = sb_flow_admit(f, saturated, band);
    if (a == SB_FLOW_DISPATCH) {
        sb_proxy_start(gw, req, t, rr);
        return;
    }
    if (a == SB_FLOW_SHED) {
        refuse(gw, req, 429, "shed", "the pool is saturated and the request is sheddable",
               sb_flow_retry_after_s(f, band, now));
        return;
    }
    queued *q = sb_calloc(1, sizeof(*q));
    uint64_t *hashes = rr->n_blocks ? sb_malloc(rr->n_blocks * sizeof(uint64_t)) : NULL;
    if (!q || (rr->n_blocks && !hashes)) {
        sb_free(q);
        sb_free(hashes);
        sb_gateway_error(gw, req, 500, "out of memory", "server_error", NULL, NULL);
        return;
    }
    if (hashes)
        memcpy(hashes, rr->block_hashes, rr->n_blocks * sizeof(uint64_t));
    *q = (queued){.gw = gw, .req = req, .t = *t, .rr = *rr, .hashes = hashes, .pool = pool};
    snprintf(q->model, sizeof(q->model), "%s", t->model ? t->model : "");
    q->t.served = t->served; /* owned by the router: stable */
    sb_flow_item item = {
        .band = band, .tenant = tenant_of(req, t), .bytes = req->body_len, .deadline = UINT64_MAX, .user = q};
    int e = sb_flow_enqueue(f, &item, now, &q->handle);
    if (e != SB_FLOW_QUEUED) {
        free_queued(q);
        refuse(gw, req, 429, "queue_full", "the pool is saturated and its queue is full",
               sb_flow_retry_after_s(f, band, now));
        return;
    }
    req->user = q;
    req->on_abort = on_queued_abort;
    req->on_drain = NULL;
}

static void on_evicted(void *ctx, void *user, enum sb_band band, int reason) { on_expired(ctx, user, band, reason); }

static void flow_config_of(sb_gateway *gw, sb_flow_config *fc)
{
    const sb_config *cfg = gw->cfg;
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
    fc->on_evict = on_evicted;
    fc->evict_ctx = gw;
    fc->hash_secret = gw->hash_secret;
}

int sb_admission_start(sb_gateway *gw)
{
    if (!gw->cfg->flow_enabled)
        return 0; /* flows stay NULL: every request goes straight to scheduling */
    gw->flows = sb_calloc(gw->cfg->n_pools ? gw->cfg->n_pools : 1, sizeof(sb_flow *));
    if (!gw->flows)
        return -1;
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        sb_flow_config fc;
        flow_config_of(gw, &fc);
        gw->flows[p] = sb_flow_new(&fc);
        if (!gw->flows[p])
            return -1;
    }
    return 0;
}

int sb_admission_reconfigure(sb_gateway *gw)
{
    if (!gw->cfg->flow_enabled) {
        /* Turned off: what waits goes on to scheduling, as new requests now do. */
        sb_admission_flush(gw);
        sb_admission_free(gw);
        return 0;
    }
    if (!gw->flows) {
        if (sb_admission_start(gw) == 0)
            return 0;
        sb_admission_free(gw); /* a partial start: no flow control rather than half */
        return -1;
    }
    int rc = 0;
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        sb_flow_config fc;
        flow_config_of(gw, &fc);
        if (gw->flows[p] && sb_flow_reconfigure(gw->flows[p], &fc) < 0)
            rc = -1; /* that pool keeps its bounds */
    }
    return rc;
}

void sb_admission_flush(sb_gateway *gw)
{
    if (!gw->flows)
        return;
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        void *q;
        while (gw->flows[p] && (q = sb_flow_next(gw->flows[p], UINT64_MAX)) != NULL)
            start(gw, q);
    }
}

void sb_admission_stop(sb_gateway *gw)
{
    if (!gw->flows)
        return;
    /* Queued requests end with the gateway: their clients are being closed anyway. */
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        if (!gw->flows[p])
            continue;
        void *q;
        while ((q = sb_flow_next(gw->flows[p], UINT64_MAX)) != NULL) {
            queued *qq = q;
            qq->req->on_abort = NULL;
            qq->req->user = NULL;
            free_queued(qq);
        }
    }
}

void sb_admission_free(sb_gateway *gw)
{
    if (!gw->flows)
        return;
    for (size_t p = 0; p < gw->cfg->n_pools; p++)
        sb_flow_free(gw->flows[p]);
    sb_free(gw->flows);
    gw->flows = NULL;
}
