/* admission: the gate, the queues of every pool and the refusals, in one place (see the
 * header for the policy). */
#include "core/admission.h"

#include "base/alloc.h"

/* Evictions happen inside sb_flow_enqueue, expiries inside sb_flow_expire: both are answered
 * through the caller's refuse op, with the Retry-After of that moment. A drop context carries
 * the pool and the time, which flow's callback does not. */
typedef struct drop_ctx {
    struct sb_admission *a;
    uint32_t pool;
    sb_ns now;
} drop_ctx;

struct sb_admission {
    sb_router *router;
    sb_flow **flows; /* one per pool */
    size_t n_pools;
    double gate_queue, gate_kv; /* the gate's thresholds (sb_flow_config) */
    sb_admission_ops ops;
    void *ctx;
    bool releasing; /* no nested release: see the header */
    /* per pool: the statuses of a full queue and of a wait too long (a profile's buffer, else
     * the table's 429 and 503) */
    uint16_t *full_status, *timeout_status;
    /* flow's eviction callback and context are set once at sb_flow_new, so the context stays
     * here; the enqueue in progress fills its pool and time. */
    drop_ctx evict;
};

static const struct {
    uint16_t status;
    const char *reason, *message;
} refusals[] = {
    [SB_REFUSE_NO_ENDPOINT] = {503, "no_healthy_endpoint", "no healthy endpoint serves this model"},
    [SB_REFUSE_SHED] = {429, "shed", "the pool is saturated and the request is sheddable"},
    [SB_REFUSE_QUEUE_FULL] = {429, "queue_full", "the pool is saturated and its queue is full"},
    [SB_REFUSE_QUEUE_TIMEOUT] = {503, "queue_timeout", "the request waited too long for capacity"},
    [SB_REFUSE_EVICTED] = {429, "shed", "sheddable request evicted to make room for higher priority"},
};

sb_admission_refusal sb_admission_refusal_of(enum sb_refusal why, uint32_t retry_after_s)
{
    return (sb_admission_refusal){.why = why,
                                  .status = refusals[why].status,
                                  .reason = refusals[why].reason,
                                  .message = refusals[why].message,
                                  .retry_after_s = retry_after_s ? retry_after_s : 1};
}

static void on_drop(void *ctx, void *user, enum sb_band band, int reason)
{
    drop_ctx *dc = ctx;
    sb_admission *a = dc->a;
    uint32_t ra = sb_flow_retry_after_s(a->flows[dc->pool], band, dc->now);
    sb_admission_refusal r =
        sb_admission_refusal_of(reason == SB_FLOW_EXPIRED ? SB_REFUSE_QUEUE_TIMEOUT : SB_REFUSE_EVICTED, ra);
    if (reason == SB_FLOW_EXPIRED)
        r.status = a->timeout_status[dc->pool];
    a->ops.refuse(a->ctx, user, &r);
}

/* Pool p's flow config: fc, or the pool profile's buffer in place of its bounds (sched.h). */
static sb_flow_config flow_config(sb_admission *a, const sb_flow_config *fc, size_t p)
{
    sb_flow_config c = *fc;
    c.on_evict = on_drop;
    c.evict_ctx = &a->evict;
    const sb_profile *prof = sb_router_pool_profile(a->router, (uint32_t)p);
    a->full_status[p] = 429;
    a->timeout_status[p] = 503;
    if (prof && prof->buffer_max_queued) {
        for (size_t b = 0; b < SB_BAND_COUNT; b++) {
            c.band[b].max_queued = prof->buffer_max_queued;
            c.band[b].max_wait_ns = (sb_ns)prof->buffer_max_wait_ms * SB_NS_PER_MS;
        }
        c.max_queued_total = prof->buffer_max_queued;
        a->full_status[p] = prof->buffer_full_status ? prof->buffer_full_status : 429;
        a->timeout_status[p] = prof->buffer_timeout_status ? prof->buffer_timeout_status : 503;
    }
    return c;
}

sb_admission *sb_admission_new(sb_router *router, size_t n_pools, const sb_flow_config *fc,
                               const sb_admission_ops *ops, void *ctx)
{
    sb_admission *a = sb_calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    *a = (sb_admission){.router = router, .n_pools = n_pools, .gate_queue = fc->gate_queue, .gate_kv = fc->gate_kv,
                        .ops = *ops, .ctx = ctx};
    a->evict.a = a;
    a->flows = sb_calloc(n_pools ? n_pools : 1, sizeof(sb_flow *));
    a->full_status = sb_calloc(n_pools ? n_pools : 1, sizeof(uint16_t));
    a->timeout_status = sb_calloc(n_pools ? n_pools : 1, sizeof(uint16_t));
    if (!a->flows || !a->full_status || !a->timeout_status)
        goto fail;
    for (size_t p = 0; p < n_pools; p++) {
        sb_flow_config c = flow_config(a, fc, p);
        if (!(a->flows[p] = sb_flow_new(&c)))
            goto fail;
    }
    return a;
fail:
    sb_admission_free(a);
    return NULL;
}

void sb_admission_free(sb_admission *a)
{
    if (!a)
        return;
    for (size_t p = 0; a->flows && p < a->n_pools; p++)
        sb_flow_free(a->flows[p]);
    sb_free(a->flows);
    sb_free(a->full_status);
    sb_free(a->timeout_status);
    sb_free(a);
}

int sb_admission_reconfigure(sb_admission *a, const sb_flow_config *fc)
{
    int rc = 0;
    for (size_t p = 0; p < a->n_pools; p++) {
        sb_flow_config c = flow_config(a, fc, p);
        if (sb_flow_reconfigure(a->flows[p], &c) < 0)
            rc = -1; /* that pool keeps its bounds */
    }
    a->gate_queue = fc->gate_queue;
    a->gate_kv = fc->gate_kv;
    return rc;
}

static bool saturated(sb_admission *a, uint32_t pool, sb_ns now)
{
    return sb_router_pool_saturated(a->router, pool, a->gate_queue, a->gate_kv, now);
}

int sb_admission_admit(sb_admission *a, const sb_request_desc *req, sb_ns now, sb_admission_refusal *out)
{
    uint32_t pool = req->sched.pool;
    enum sb_band band = req->band;
    if (pool >= a->n_pools || !sb_router_pool_available(a->router, pool, now)) {
        *out = sb_admission_refusal_of(SB_REFUSE_NO_ENDPOINT, 1);
        return SB_ADMIT_REFUSED;
    }
    sb_flow *f = a->flows[pool];
    int r = sb_flow_admit(f, saturated(a, pool, now), band);
    if (r == SB_FLOW_DISPATCH)
        return SB_ADMIT_DISPATCH;
    if (r == SB_FLOW_SHED) {
        *out = sb_admission_refusal_of(SB_REFUSE_SHED, sb_flow_retry_after_s(f, band, now));
        return SB_ADMIT_REFUSED;
    }
    return SB_ADMIT_WAIT;
}

int sb_admission_fallback(sb_admission *a, sb_router *r, const uint32_t *pools, const bool *skip, size_t n,
                          size_t *cursor, enum sb_band band, sb_ns now)
{
    while (*cursor < n) {
        size_t i = (*cursor)++;
        if (skip && skip[i])
            continue;
        /* Admit's test, without its counts in a pool that does not take the request: a
         * saturated fallback passed over neither shed nor saw an arrival; with saturated false,
         * sb_flow_admit counts `admitted` only when it dispatches, so only the taker counts. */
        uint32_t p = pools[i];
        bool takes = a ? p < a->n_pools && sb_router_pool_available(a->router, p, now) && !saturated(a, p, now) &&
                             sb_flow_admit(a->flows[p], false, band) == SB_FLOW_DISPATCH
                       : sb_router_pool_available(r, p, now);
        if (takes)
            return (int)i;
    }
    return -1;
}

int sb_admission_enqueue(sb_admission *a, const sb_request_desc *req, void *user, sb_ns now, sb_flow_handle *handle,
                         sb_admission_refusal *out)
{
    uint32_t pool = req->sched.pool;
    if (pool >= a->n_pools) {
        *out = sb_admission_refusal_of(SB_REFUSE_NO_ENDPOINT, 1);
        return SB_ADMIT_REFUSED;
    }
    sb_flow *f = a->flows[pool];
    /* No deadline of its own: the band's wait bounds it. */
    sb_flow_item item = {
        .band = req->band, .tenant = req->tenant, .bytes = req->body_bytes, .deadline = UINT64_MAX, .user = user};
    a->evict.pool = pool;
    a->evict.now = now;
    if (sb_flow_enqueue(f, &item, now, handle) == SB_FLOW_QUEUED)
        return SB_ADMIT_QUEUED;
    *out = sb_admission_refusal_of(SB_REFUSE_QUEUE_FULL, sb_flow_retry_after_s(f, req->band, now));
    out->status = a->full_status[pool];
    return SB_ADMIT_REFUSED;
}

bool sb_admission_remove(sb_admission *a, uint32_t pool, sb_flow_handle handle)
{
    return pool < a->n_pools && sb_flow_remove(a->flows[pool], handle);
}

static void release(sb_admission *a, uint32_t pool, sb_ns now)
{
    sb_flow *f = a->flows[pool];
    drop_ctx dc = {.a = a, .pool = pool, .now = now};
    sb_flow_expire(f, now, on_drop, &dc);
    while (!saturated(a, pool, now)) {
        void *u = sb_flow_next(f, now);
        if (!u || !a->ops.dispatch(a->ctx, u))
            break;
    }
}

void sb_admission_release(sb_admission *a, uint32_t pool, sb_ns now)
{
    if (a->releasing || pool >= a->n_pools)
        return;
    a->releasing = true;
    release(a, pool, now);
    a->releasing = false;
}

void sb_admission_tick(sb_admission *a, sb_ns now)
{
    if (a->releasing)
        return;
    a->releasing = true;
    for (size_t p = 0; p < a->n_pools; p++)
        release(a, (uint32_t)p, now);
    a->releasing = false;
}

void sb_admission_mark_released(const sb_admission *a, uint32_t pool, sb_sched_request *rr)
{
    rr->profile = sb_router_pool_profile(a->router, pool);
    rr->gated = true;
    rr->gate_queue = a->gate_queue;
    rr->gate_kv = a->gate_kv;
}

void *sb_admission_take(sb_admission *a, uint32_t pool, sb_ns now)
{
    return pool < a->n_pools ? sb_flow_next(a->flows[pool], now) : NULL;
}

size_t sb_admission_pool_count(const sb_admission *a) { return a->n_pools; }

const sb_flow *sb_admission_flow(const sb_admission *a, uint32_t pool)
{
    return pool < a->n_pools ? a->flows[pool] : NULL;
}
