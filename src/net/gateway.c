#include "net/gateway.h"
#include "net/admin.h"
#include "net/admission.h"
#include "net/decisions.h"
#include "net/discovery.h"
#include "net/errors.h"
#include "net/fallback.h"
#include "net/gateway_types.h"
#include "net/guard.h"
#include "net/kv_feed.h"
#include "net/picker.h"
#include "net/precise.h"
#include "net/proxy.h"
#include "net/routes.h"
#include "net/stats.h"
#include "net/sync_feed.h"
#include "net/tls.h"
#include "net/workers.h"

#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "core/adaptive.h"
#include "core/control.h"
#include "core/kv_index.h"
#include "net/probe.h"
#include "proto/engine_metrics.h"

static double wall_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void exchange_done(sb_gateway *gw);
static int membership_apply(void *arg, sb_config *cfg);
static sb_gateway *membership_current(void *arg);
static sb_snapshot *snapshot_ref(sb_gateway *gw);
static void snapshot_unref(sb_gateway *gw, sb_snapshot *snap);
static sb_snapshot *pin(sb_gateway *gw);
static void unpin(sb_gateway *gw, sb_snapshot *snap);

/* GET /v1/models: every served model, alias and adapter, built once from config. */
static int build_models_json(sb_gateway *gw)
{
    sb_buf b = {0};
    int rc = sb_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    bool first = true;
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        const sb_pool_config *pc = &gw->cfg->pools[p];
        for (size_t i = 0; i < pc->n_models + pc->n_adapters; i++) {
            bool adapter = i >= pc->n_models;
            const char *id = adapter ? pc->adapters[i - pc->n_models] : pc->models[i];
            rc |= sb_buf_puts(&b, first ? "{\"id\":\"" : ",{\"id\":\"");
            first = false;
            rc |= sb_buf_json_escape(&b, id, strlen(id));
            rc |= sb_buf_puts(&b, "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"switchboard\",\"root\":\"");
            rc |= sb_buf_json_escape(&b, pc->models[0], strlen(pc->models[0]));
            rc |= sb_buf_puts(&b, "\",\"parent\":");
            if (i == 0) {
                rc |= sb_buf_puts(&b, "null");
            } else {
                rc |= sb_buf_puts(&b, "\"");
                rc |= sb_buf_json_escape(&b, pc->models[0], strlen(pc->models[0]));
                rc |= sb_buf_puts(&b, "\"");
            }
            rc |= sb_buf_printf(&b, ",\"kind\":\"%s\",\"pool\":\"", adapter ? "adapter" : i == 0 ? "served" : "alias");
            rc |= sb_buf_json_escape(&b, pc->name, strlen(pc->name));
            rc |= sb_buf_puts(&b, "\"}");
        }
    }
    rc |= sb_buf_puts(&b, "]}");
    if (rc) {
        sb_buf_free(&b);
        return -1;
    }
    gw->models_json = sb_buf_steal(&b, &gw->models_json_len);
    return 0;
}

/* The pool of endpoint ep of pool for the calling thread: a worker's own (made now on its loop
 * if it has none yet), else the main loop's. NULL: a worker's could not be made (no memory). */
static sb_upstream *gateway_upstream(sb_gateway *gw, uint32_t pool, uint32_t ep)
{
    size_t i = gw->pool_first_up[pool] + ep;
    int w = gw->wups ? sb_worker_index() : -1;
    if (w < 0)
        return gw->ups[i];
    sb_upstream **slot = &gw->wups[(size_t)w * gw->pool_first_up[gw->cfg->n_pools] + i];
    if (!*slot) {
        const sb_pool_config *pc = &gw->cfg->pools[pool];
        sb_upstream_opts o = gw->uo;
        o.on_resolved = NULL; /* the main loop's pool reports resolution */
        o.tls_ctx = gw->pool_tls ? gw->pool_tls[pool] : NULL;
        o.tls_server_name = pc->tls_server_name;
        if (sb_upstream_new(sb_guard_loop(), pc->endpoints[ep].host, pc->endpoints[ep].port, &o, slot) < 0)
            *slot = NULL;
        else
            (void)sb_upstream_adopt_address(*slot, gw->ups[i]);
    }
    return *slot;
}

/* Frees a retired or stopped gateway's per-worker pools, each on its worker's loop. */
typedef struct pools_to_free {
    sb_upstream **ups;
    size_t n;
} pools_to_free;

static void free_pools(void *arg)
{
    pools_to_free *f = arg;
    for (size_t i = 0; i < f->n; i++)
        sb_upstream_free(f->ups[i]);
    sb_free(f->ups);
    sb_free(f);
}

static void free_worker_pools(sb_gateway *gw)
{
    size_t per = gw->pool_first_up[gw->cfg->n_pools];
    for (size_t w = 0; w < sb_workers_count(gw->wset); w++) {
        pools_to_free *f = sb_calloc(1, sizeof(*f));
        if (f)
            f->ups = sb_calloc(per ? per : 1, sizeof(sb_upstream *));
        if (!f || !f->ups) {
            sb_free(f);
            SB_WARN("workers: out of memory; worker %zu's connection pools of a retired gateway stay open", w);
            continue;
        }
        for (size_t i = 0; i < per; i++)
            if (gw->wups[w * per + i])
                f->ups[f->n++] = gw->wups[w * per + i];
        if (f->n == 0 || sb_guard_post(sb_workers_loop(gw->wset, w), free_pools, f) < 0) {
            if (f->n)
                SB_WARN("workers: worker %zu stopped; its connection pools of a retired gateway stay open", w);
            sb_free(f->ups);
            sb_free(f);
        }
    }
}

static void on_adaptive_timer_closed(uv_handle_t *h);

/* The profile a pool routes with: the one it names, else `default`; with KV events, the built-in
 * `default` as sb_profile_with_events adjusts it. */
static const sb_profile *pool_profile(const sb_config *cfg, const sb_pool_config *pc)
{
    const sb_profile *prof = sb_config_profile(cfg, pc->profile ? pc->profile : "default");
    return pc->kv_events ? sb_profile_with_events(prof) : prof;
}

/* The adaptive loop: every pool's detectors tick on the probing cadence (never on the request
 * path); pools with `adaptive: true` route with the configurator's published profile. */
static void on_adaptive_tick(uv_timer_t *t)
{
    sb_gateway *gw = t->data;
    sb_ns now = uv_hrtime();
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        sb_adaptive *a = gw->adaptive[p];
        if (!a)
            continue;
        const sb_pool_config *pc = &gw->cfg->pools[p];
        const sb_profile *base = pool_profile(gw->cfg, pc);
        unsigned changed = sb_control_tick(gw->router, (uint32_t)p, a, base, pc->adaptive, now);
        for (int d = 0; d < SB_DETECT_COUNT; d++)
            if (changed & (1u << d))
                SB_INFO("pool %s: %s %s (signal %.2f); weights affinity %.2f distribution %.2f", pc->name,
                        sb_adaptive_regime(a, (enum sb_detector)d) ? "entered" : "left",
                        sb_detector_name((enum sb_detector)d), sb_adaptive_signal(a, (enum sb_detector)d),
                        sb_adaptive_category_weight(a, SB_AFFINITY), sb_adaptive_category_weight(a, SB_DISTRIBUTION));
    }
    sb_gateway_admission_tick(gw, now);
}

static void start_adaptive(sb_gateway *gw)
{
    const sb_config *cfg = gw->cfg;
    gw->adaptive = sb_calloc(cfg->n_pools ? cfg->n_pools : 1, sizeof(sb_adaptive *));
    if (!gw->adaptive)
        return;
    uint32_t tick_ms = 100;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_profile *base = sb_router_pool_profile(gw->router, (uint32_t)p);
        gw->adaptive[p] = base ? sb_adaptive_new(&cfg->pools[p].adaptive_params, base) : NULL;
        if (gw->adaptive[p])
            sb_control_publish(gw->router, (uint32_t)p, gw->adaptive[p], base, cfg->pools[p].adaptive);
        if (cfg->pools[p].probe_interval_ms && cfg->pools[p].probe_interval_ms < tick_ms)
            tick_ms = cfg->pools[p].probe_interval_ms;
    }
    uv_timer_init(gw->loop, &gw->adaptive_timer);
    gw->adaptive_timer.data = gw;
    gw->adaptive_timer_open = true;
    uv_timer_start(&gw->adaptive_timer, on_adaptive_tick, tick_ms, tick_ms);
}

static void on_adaptive_timer_closed(uv_handle_t *h);

/* The access log is written through stdio's buffer and flushed once per loop turn, before
 * the loop waits for events: one write for the lines of every request that ended in the turn
 * (a write and a flush per line were a syscall per request on the loop: docs/benchmarks.md,
 * proxy overhead). A line is in the file before the gateway reads anything further, so a
 * client that got its answer and then asks anything (the admin API included) finds it there;
 * a crash loses at most the turn's lines. Its own allocation, closed apart from the gateway:
 * the handle's close completes after the gateway is gone. */
/* The access log file's buffer: many lines per write, flushed once per loop turn. */
#define SB_ACCESS_LOG_BUF (64 << 10)

typedef struct log_flusher {
    uv_prepare_t prepare;
    sb_stats *st; /* the gateway's: the flusher is stopped before the gateway is freed */
} log_flusher;

static void on_log_flush(uv_prepare_t *h)
{
    sb_stats *st = ((log_flusher *)h->data)->st;
    if (st->access_log_buffered) {
        fflush(st->access_log);
        st->access_log_buffered = 0;
    }
}

static void on_log_flusher_closed(uv_handle_t *h)
{
    sb_free(h->data);
}

/* Started last in a build (it cannot fail then: without memory, lines flush per line). */
static void start_log_flusher(sb_gateway *gw)
{
    if (!gw->stats.access_log)
        return;
    log_flusher *lf = sb_malloc(sizeof(*lf));
    if (!lf)
        return; /* access_log_cap stays 0: every line flushed as it is written */
    /* Our file's buffer was set when it was opened; stdout's is stdio's own, at least a page
     * (glibc sizes it by the device's block size). */
    if (gw->stats.access_log == stdout || gw->access_log_buf)
        gw->stats.access_log_cap = gw->stats.access_log == stdout ? 4096 : SB_ACCESS_LOG_BUF;
    lf->st = &gw->stats;
    uv_prepare_init(gw->loop, &lf->prepare);
    lf->prepare.data = lf;
    uv_prepare_start(&lf->prepare, on_log_flush);
    uv_unref((uv_handle_t *)&lf->prepare); /* never what keeps the loop running */
    gw->log_flusher = lf;
}

static void gateway_free(sb_gateway *gw)
{
    (void)sb_guard_here(gw->loop); /* a worker may free it: what follows closes main-loop handles */
    if (gw->wups) {
        free_worker_pools(gw);
        sb_free(gw->wups);
    }
    if (gw->wset)
        sb_workers_release(gw->wset); /* the last gateway's: they quit after the pools' posts ran */
    if (gw->pool_tls && gw->cfg)
        for (size_t p = 0; p < gw->cfg->n_pools; p++)
            SSL_CTX_free(gw->pool_tls[p]);
    sb_free(gw->pool_tls);
    if (gw->log_flusher) {
        uv_prepare_stop(&gw->log_flusher->prepare);
        uv_close((uv_handle_t *)&gw->log_flusher->prepare, on_log_flusher_closed);
        gw->log_flusher = NULL;
    }
    sb_discovery_free(gw->disc);
    if (gw->ups) {
        size_t n = gw->cfg ? gw->pool_first_up[gw->cfg->n_pools] : 0;
        for (size_t i = 0; i < n; i++)
            if (gw->ups[i])
                sb_upstream_free(gw->ups[i]);
    }
    sb_gateway_kv_stop(gw); /* none left unless the build failed */
    sb_gateway_sync_stop(gw);
    sb_gateway_precise_stop(gw);
    sb_free(gw->kv_subs);
    sb_free(gw->ups);
    sb_free(gw->pool_first_up);
    sb_stats_free(&gw->stats);
    if (gw->adaptive && gw->cfg)
        for (size_t p = 0; p < gw->cfg->n_pools; p++)
            sb_adaptive_free(gw->adaptive[p]);
    sb_free(gw->adaptive);
    sb_gateway_admission_free(gw);
    sb_router_free(gw->router);
    sb_decisions_release(gw->decisions);
    for (size_t i = 0; gw->scratch && i < gw->n_scratch; i++) {
        sb_inspect_ctx_free(&gw->scratch[i].ictx);
        sb_free(gw->scratch[i].hashes);
    }
    sb_free(gw->scratch);
    sb_free(gw->models_json);
    if (gw->stats.access_log && gw->stats.access_log != stdout)
        fclose(gw->stats.access_log);
    sb_free(gw->access_log_buf); /* after fclose: stdio writes out of it until then */
    while (gw->retired) {
        sb_snapshot *n = gw->retired->next;
        sb_config_free(gw->retired->cfg);
        sb_free(gw->retired);
        gw->retired = n;
    }
    sb_config_free(gw->cfg); /* the current snapshot's */
    sb_free(gw->snap);
    sb_free(gw);
}

/* The client listener's TLS context from tls.cert and tls.key, read now (start and every
 * reload, so a rotated certificate is picked up by SIGHUP). NULL without TLS; -1 in *failed
 * (the reason logged) when the files do not load. The caller frees its reference. */
static SSL_CTX *listener_tls(const sb_config *cfg, bool *failed)
{
    static const sb_tls_alpn alpn = {SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1, false};
    /* h2 first: a client offering both gets HTTP/2 (http2.enabled). */
    static const sb_tls_alpn alpn_h2 = {SB_TLS_ALPN_H2 SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_H2 SB_TLS_ALPN_HTTP1 - 1,
                                        false};
    *failed = false;
    if (!cfg->tls_cert || !cfg->listen_host)
        return NULL;
    char err[256];
    SSL_CTX *ctx =
        sb_tls_server_ctx(cfg->tls_cert, cfg->tls_key, cfg->http2_enabled ? &alpn_h2 : &alpn, err, sizeof err);
    if (!ctx) {
        SB_ERROR("tls: certificate %s / key %s: %s", cfg->tls_cert, cfg->tls_key, err);
        *failed = true;
    }
    return ctx;
}

/* The listeners' limits, from the configuration (start and reload). The admin listener has
 * the same request limits and its own connection budget, so a full client listener leaves room
 * for operators. TLS (tls, may be NULL) is the client listener's only. */
static void server_opts(const sb_config *cfg, SSL_CTX *tls, sb_http_server_opts *so, sb_http_server_opts *admin)
{
    *so = (sb_http_server_opts){
        .max_header_bytes = cfg->max_header_bytes,
        .max_body_bytes = cfg->max_body_bytes,
        .max_connections = cfg->max_connections,
        .max_refusing = cfg->max_refusing_connections,
        .max_buffered_body_bytes = cfg->max_buffered_body_bytes,
        .header_ms = cfg->header_ms,
        .idle_ms = cfg->idle_ms,
        /* 0 in the configuration means "close at once", 0 in the options "default". */
        .linger_ms = cfg->linger_ms && cfg->linger_bytes ? cfg->linger_ms : SB_HTTP_LINGER_OFF,
        .linger_bytes = cfg->linger_bytes ? cfg->linger_bytes : 1,
        .h2_off = !cfg->http2_enabled,
        .h2_max_streams = cfg->http2_max_streams,
        .h2_window_bytes = (uint32_t)cfg->http2_window_bytes, /* at most 2^31-1 (config) */
        .h2_max_header_list_bytes = cfg->http2_max_header_list_bytes,
        .h2_max_connection_header_bytes = cfg->http2_max_connection_header_bytes,
        .h2_connection_window_bytes = (uint32_t)cfg->http2_connection_window_bytes, /* at most 2^31-1 */
        .h2_stream_buffer_bytes = cfg->http2_stream_buffer_bytes,
        .h2_reset_burst = cfg->http2_reset_burst,
        .h2_reset_rate = cfg->http2_reset_rate,
    };
    *admin = *so;
    so->tls_ctx = tls;
    admin->max_connections = cfg->admin_max_connections;
    admin->max_body_bytes = cfg->admin_max_body_bytes; /* registrations: a few hundred bytes */
}

/* ---- the proxy's env: what an exchange may ask of its gateway ---- */

static sb_upstream *proxy_upstream(void *owner, uint32_t pool, uint32_t ep)
{
    return gateway_upstream(owner, pool, ep);
}

static sb_snapshot *proxy_begin(void *owner)
{
    sb_gateway *gw = owner;
    gw->in_flight++;
    gw->counters.proxied++;
    return snapshot_ref(gw);
}

static void proxy_end(void *owner, sb_snapshot *snap, uint32_t pool)
{
    sb_gateway *gw = owner;
    snapshot_unref(gw, snap);
    /* Capacity freed: queued requests of this pool may go (before the gateway may be freed). */
    if (!gw->stopping)
        sb_gateway_admission_done(gw, pool);
    exchange_done(gw);
}

/* A request moved to a fallback: the pool it left may release what it queues now, not at the
 * next tick (end releases the fallback's pool). */
static void proxy_left(void *owner, uint32_t pool)
{
    sb_gateway *gw = owner;
    if (!gw->stopping)
        sb_gateway_admission_done(gw, pool);
}

static void proxy_record(void *owner, const sb_exchange_log *log)
{
    sb_gateway *gw = owner;
    sb_stats_record(&gw->stats, log);
}

static void proxy_error(void *owner, sb_http_req *req, int status, const char *message, const char *type,
                        const char *code)
{
    (void)owner; /* the exchange records itself: one line, not counted as the gateway's own error */
    sb_errors_reply(req, status, message, type, code);
}

/* The client listener's own answers (malformed or oversized requests, timeouts, the connection
 * limit) get their access-log line too: counted in /metrics by the server, logged here. ctx is
 * the serving gateway (the server's handler context follows a replacement). */
static void on_server_refused(const sb_http_req *req, int status, const char *code, void *ctx)
{
    sb_gateway *gw = ctx;
    sb_request_ident ident;
    sb_stats_ident(req, &ident);
    sb_ns now = uv_hrtime();
    sb_exchange_log log = {.pool = -1,
                           .ep = -1,
                           .status = status,
                           .outcome = "refused",
                           .reason = code,
                           .ident = &ident,
                           .t_start = req->start_ns ? req->start_ns : now,
                           .t_end = now,
                           .gateway_answer = true};
    sb_stats_record(&gw->stats, &log);
}

/* Read at each use: the prober starts after the env is made, and a retiring gateway has none. */
static struct sb_prober *proxy_prober(void *owner)
{
    return ((sb_gateway *)owner)->prober;
}

/* A request the proxy could not serve in its pool goes on in a fallback, if one takes it. */
static bool proxy_fallback(void *owner, const sb_config *cfg, sb_proxy_target *t, sb_sched_request *rr, int why)
{
    return sb_gateway_fallback(owner, cfg, t, rr, (enum sb_fallback_reason)why, false);
}

/* The proxy's view of gw (after gw->router is set). */
static sb_proxy_env proxy_env(sb_gateway *gw)
{
    return (sb_proxy_env){.router = gw->router,
                          .loop = gw->loop,
                          .counters = &gw->counters,
                          .owner = gw,
                          .upstream = proxy_upstream,
                          .begin = proxy_begin,
                          .end = proxy_end,
                          .record = proxy_record,
                          .error = proxy_error,
                          .prober = proxy_prober,
                          .fallback = proxy_fallback,
                          .left = proxy_left,
                          .decisions = gw->decisions};
}

/* The ring of recent decisions cfg asks for: old's when it has that size (a reload keeps the
 * history), else a new one (NULL when off, or out of memory: routing goes on unrecorded). */
static void decisions_apply(sb_gateway *gw, sb_decisions *old)
{
    const sb_config *cfg = gw->cfg;
    sb_decisions *ring = NULL;
    if (old && sb_decisions_capacity(old) == cfg->admin_decisions &&
        sb_decisions_max_cands(old) == cfg->admin_decision_candidates) {
        ring = old;
        sb_decisions_hold(ring);
    } else if (cfg->admin_decisions) {
        ring = sb_decisions_new(cfg->admin_decisions, cfg->admin_decision_candidates);
        if (!ring)
            SB_WARN("the ring of recent decisions: out of memory; /debug/decisions stays empty");
    }
    sb_decisions_release(gw->decisions); /* the one this gateway held, if any (after the hold) */
    gw->decisions = ring;
    gw->proxy.decisions = ring;
}

/* A static name that does not resolve marks its endpoint down (with the reason, shown by the
 * admin pages) until it does; the upstream retries with backoff. O(endpoints) per answer. */
static void on_upstream_resolved(sb_upstream *u, int status, void *arg)
{
    sb_gateway *gw = arg;
    for (size_t p = 0; p < gw->cfg->n_pools; p++)
        for (size_t e = gw->pool_first_up[p]; e < gw->pool_first_up[p + 1]; e++) {
            if (gw->ups[e] != u)
                continue;
            sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)(e - gw->pool_first_up[p]));
            if (ep->active_down != (status != 0))
                sb_log(status ? SB_LOG_WARN : SB_LOG_INFO, "endpoint %s: %s", sb_upstream_address(u),
                       status ? uv_strerror(status) : "resolved; up");
            ep->active_down = status != 0;
            return;
        }
}

static sb_health_params health_params_of(const sb_pool_config *pc)
{
    return (sb_health_params){.max_failures = pc->max_failures,
                              .base_eject_ns = SB_MS(pc->base_eject_ms),
                              .max_eject_ns = SB_MS(pc->max_eject_ms),
                              .failure_rate = pc->failure_rate,
                              .min_requests = pc->min_requests,
                              .window_ns = SB_MS(pc->window_ms),
                              .max_eject_percent = pc->max_eject_percent};
}

/* Pool p of gw->cfg: its router pool (profile, endpoints, ring, models) and the upstream of
 * each endpoint. 0, or a negative libuv error (UV_ENOMEM for anything but an upstream). */
static int build_pool(sb_gateway *gw, size_t p, const sb_upstream_opts *uo)
{
    const sb_config *cfg = gw->cfg;
    const sb_pool_config *pc = &cfg->pools[p];
    const sb_profile *prof = pool_profile(cfg, pc);
    sb_pool_params pp = {.stale_ns = SB_MS(pc->stale_ms),
                         .health = health_params_of(pc),
                         .block_bytes = (uint32_t)cfg->block_bytes,
                         .prefix_share = pc->prefix_share,
                         .prefix_calibrate = pc->prefix_calibrate};
    if (!prof || sb_router_add_pool(gw->router, pc->name, prof, pc->n_endpoints, &pp) < 0)
        return UV_ENOMEM;
    for (size_t e = 0; e < pc->n_endpoints; e++) {
        sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
        const sb_endpoint_config *ec = &pc->endpoints[e];
        ep->address = ec->address;
        ep->draining = ec->draining;
        for (size_t l = 0; l < ec->n_labels && l < SB_MAX_LABELS; l++) {
            ep->label_keys[l] = ec->label_keys[l];
            ep->label_values[l] = ec->label_values[l];
            ep->n_labels = l + 1;
        }
    }
    /* After the addresses: the ring is built from them (core/chash.h). */
    if (sb_router_build_ring(gw->router, (uint32_t)p) < 0)
        return UV_ENOMEM;
    if (pc->kv_events) {
        /* The content seed is fixed: every gateway replica keys the same blocks alike. */
        sb_kv_index_config kc = {.max_entries = cfg->kv_max_entries,
                                 .block_size = (uint32_t)cfg->kv_block_size,
                                 .key_seed = SB_KV_KEY_SEED,
                                 .hash_secret = gw->hash_secret};
        if (sb_router_kv_enable(gw->router, (uint32_t)p, &kc, SB_MS(pc->kv_events->cover_ms)) < 0)
            return UV_ENOMEM;
    }
    for (size_t i = 0; i < pc->n_models; i++)
        if (sb_router_add_model(gw->router, (uint32_t)p, pc->models[i], i == 0 ? SB_MODEL_SERVED : SB_MODEL_ALIAS) ==
            -1)
            return UV_ENOMEM;
    for (size_t i = 0; i < pc->n_adapters; i++)
        if (sb_router_add_model(gw->router, (uint32_t)p, pc->adapters[i], SB_MODEL_ADAPTER) == -1)
            return UV_ENOMEM;
    sb_upstream_opts o = *uo;
    if (pc->tls) {
        char err[256];
        o.tls_ctx = sb_tls_client_ctx(pc->tls_ca_file, pc->tls_cert, pc->tls_key, pc->tls_verify, err, sizeof err);
        o.tls_server_name = pc->tls_server_name;
        if (!o.tls_ctx) {
            SB_ERROR("pool %s: tls: %s", pc->name, err);
            return UV_EINVAL;
        }
    }
    int rc = 0;
    for (size_t e = 0; e < pc->n_endpoints && rc == 0; e++) {
        rc = sb_upstream_new(gw->loop, pc->endpoints[e].host, pc->endpoints[e].port, &o,
                             &gw->ups[gw->pool_first_up[p] + e]);
        if (rc < 0)
            SB_ERROR("endpoint %s: %s", pc->endpoints[e].address, uv_strerror(rc));
    }
    if (gw->pool_tls) /* the workers' pools are made from it later */
        gw->pool_tls[p] = o.tls_ctx;
    else
        SSL_CTX_free(o.tls_ctx); /* each endpoint's pool holds its own reference */
    return rc;
}

/* ---- the workers' servers (net/workers.h): their callbacks reach the serving gateway ---- */

/* ctx is the gateway's home (sb_gateway_start's out): a replacing reload moves it, a stop
 * empties it. The callbacks run under the lock, and pin the gateway and its snapshot while they
 * run: a worker lets the lock go around its socket writes (net/guard.h sb_guard_io_begin), and
 * meanwhile the main loop may stop, retire or reload it. */
static sb_gateway *serving(void *ctx)
{
    return *(sb_gateway **)ctx;
}

static void worker_request(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = serving(ctx);
    if (!gw) {
        sb_errors_reply(req, 503, "the gateway is stopping", "service_unavailable", "draining");
        return;
    }
    sb_snapshot *snap = pin(gw);
    sb_gateway_on_request(req, gw);
    unpin(gw, snap);
}

static bool worker_head(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = serving(ctx);
    if (!gw)
        return true;
    sb_snapshot *snap = pin(gw);
    bool go_on = sb_gateway_on_head(req, gw);
    unpin(gw, snap);
    return go_on;
}

static void worker_refused(const sb_http_req *req, int status, const char *code, void *ctx)
{
    sb_gateway *gw = serving(ctx);
    if (!gw)
        return;
    sb_snapshot *snap = pin(gw);
    on_server_refused(req, status, code, gw);
    unpin(gw, snap);
}

/* Each worker's loop turn: the access log's lines of the turn leave (as the main loop's
 * flusher does for its own). */
static void worker_turn(void *ctx)
{
    /* Read without the lock: a gateway without an access log, or a turn after which nothing
     * was written, takes no lock here. (A retired gateway's lines: its main-loop flusher.) */
    if (!sb_stats_log_pending())
        return;
    sb_guard_enter();
    sb_gateway *gw = serving(ctx);
    if (gw && gw->stats.access_log_buffered) {
        fflush(gw->stats.access_log);
        gw->stats.access_log_buffered = 0;
    }
    sb_stats_log_flushed();
    sb_guard_leave();
}

/* New limits (and certificate) for the client listener: its server's, or every worker's. */
static void client_set_opts(sb_gateway *gw, const sb_http_server_opts *so)
{
    if (gw->server)
        sb_http_server_set_opts(gw->server, so);
    if (gw->wset && sb_workers_set_opts(gw->wset, so) < 0)
        SB_WARN("reload: the workers keep their listener limits (out of memory)");
}

static void server_drain(sb_http_server *s, void *arg)
{
    (void)arg;
    sb_http_server_drain(s);
}

static void server_cut(sb_http_server *s, void *arg)
{
    (void)arg;
    sb_http_server_cut(s);
}

/* The client listener drains or cuts: its server, or every worker's (on its own loop). */
static void client_each(sb_gateway *gw, void (*fn)(sb_http_server *s, void *arg))
{
    if (gw->server)
        fn(gw->server, NULL);
    if (gw->wset && sb_workers_each(gw->wset, fn, NULL, NULL) < 0)
        SB_WARN("workers: out of memory; a drain step did not reach them");
}

static int attach_listeners(sb_gateway *gw, bool handover, sb_http_server *server, sb_http_server *admin_server,
                            struct sb_picker *picker, const sb_http_server_opts *sop, const sb_http_server_opts *aop);

/* The listeners: the old gateway's (handover, a reload; new options applied) or new ones. 0,
 * or a negative libuv error (then what this call started is set in gw). The client listener
 * is off (`listen: null`) in a picker-only gateway. */
static int attach_servers(sb_gateway *gw, bool handover, sb_http_server *server, sb_http_server *admin_server,
                          struct sb_picker *picker)
{
    const sb_config *cfg = gw->cfg;
    bool tls_failed;
    SSL_CTX *tls = listener_tls(cfg, &tls_failed);
    if (tls_failed)
        return UV_EINVAL;
    sb_http_server_opts so, ao;
    server_opts(cfg, tls, &so, &ao);
    int rc = attach_listeners(gw, handover, server, admin_server, picker, &so, &ao);
    SSL_CTX_free(tls); /* the server holds its own reference */
    return rc;
}

static int attach_listeners(sb_gateway *gw, bool handover, sb_http_server *server, sb_http_server *admin_server,
                            struct sb_picker *picker, const sb_http_server_opts *sop, const sb_http_server_opts *aop)
{
    const sb_config *cfg = gw->cfg;
    uv_loop_t *loop = gw->loop;
    sb_http_server_opts so = *sop, ao = *aop;
    if (handover) {
        gw->server = server;
        gw->admin_server = admin_server;
        gw->picker = picker; /* handed over by reload_replace once the build succeeded */
        client_set_opts(gw, &so); /* the server's, or the workers' (gw->wset: the old gateway's) */
        if (admin_server)
            sb_http_server_set_opts(admin_server, &ao);
    } else {
        int rc;
        if (cfg->listen_host && gw->wups) { /* workers: each its own listener (SO_REUSEPORT) */
            sb_workers_env env = {.handler = worker_request,
                                  .head = worker_head,
                                  .refused = worker_refused,
                                  .turn = worker_turn,
                                  .ctx = gw->home};
            rc = sb_workers_start(cfg->workers, cfg->listen_host, cfg->listen_port, &so, &env, &gw->wset);
            if (rc < 0) {
                SB_ERROR("listen %s:%u (%zu workers): %s", cfg->listen_host, cfg->listen_port, cfg->workers,
                         uv_strerror(rc));
                return rc;
            }
        } else if (cfg->listen_host) {
            rc = sb_http_server_start(loop, cfg->listen_host, cfg->listen_port, &so, sb_gateway_on_request, gw,
                                      &gw->server);
            if (rc < 0) {
                SB_ERROR("listen %s:%u: %s", cfg->listen_host, cfg->listen_port, uv_strerror(rc));
                return rc;
            }
            sb_http_server_set_head_hook(gw->server, sb_gateway_on_head);
            sb_http_server_set_refused(gw->server, on_server_refused);
        }
        if (cfg->admin_host) {
            rc = sb_http_server_start(loop, cfg->admin_host, cfg->admin_port, &ao, sb_gateway_admin, gw,
                                      &gw->admin_server);
            if (rc < 0) {
                SB_ERROR("admin.listen %s:%u: %s", cfg->admin_host, cfg->admin_port, uv_strerror(rc));
                return rc;
            }
            sb_http_server_set_head_hook(gw->admin_server, sb_gateway_admin_head);
        }
        if (cfg->extproc_host && (rc = sb_picker_start(gw)) < 0)
            return rc;
    }
    return 0;
}

/* The per-endpoint arrays (pool-major) and the statistics' view of them. */
static int alloc_endpoints(sb_gateway *gw)
{
    const sb_config *cfg = gw->cfg;
    size_t total = 0;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        gw->pool_first_up[p] = total;
        total += cfg->pools[p].n_endpoints;
    }
    gw->pool_first_up[cfg->n_pools] = total;
    gw->ups = sb_calloc(total ? total : 1, sizeof(sb_upstream *));
    int stats_rc = sb_stats_init(&gw->stats, gw->cfg);
    gw->stats.rejected = &gw->counters.rejected;
    gw->kv_subs = sb_calloc(total ? total : 1, sizeof(sb_kv_sub *));
    return gw->ups && stats_rc == 0 && gw->kv_subs ? 0 : -1;
}

/* Names the old gateway had resolved connect at once on the new one. O(endpoints^2) per
 * reload: tens to hundreds of endpoints, once per membership change. */
static void adopt_addresses(sb_gateway *gw, const sb_gateway *old)
{
    size_t n = gw->pool_first_up[gw->cfg->n_pools], m = old->pool_first_up[old->cfg->n_pools];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++)
            if (sb_upstream_adopt_address(gw->ups[i], old->ups[j]) == 0)
                break;
}

/* Builds a gateway over cfg. With `server` NULL it listens itself (and on admin.listen);
 * otherwise it takes over the existing servers (a reload that changed pools or endpoints).
 * `old`: the gateway a reload replaces (its KV-event subscribers may move over), or NULL. */
static int gateway_build(uv_loop_t *loop, sb_config *cfg, sb_http_server *server, sb_http_server *admin_server,
                         struct sb_picker *picker, uint64_t hash_secret, sb_gateway *old, sb_gateway **out)
{
    sb_gateway *gw = sb_calloc(1, sizeof(*gw));
    if (!gw) {
        sb_config_free(cfg);
        return UV_ENOMEM;
    }
    gw->loop = loop;
    gw->cfg = cfg;
    int rc = UV_ENOMEM;
    gw->snap = sb_calloc(1, sizeof(sb_snapshot));
    if (!gw->snap)
        goto fail;
    gw->snap->cfg = cfg;
    gw->snap->refs = 1;
    gw->hash_secret = hash_secret;
    gw->router = sb_router_new(uv_hrtime(), hash_secret);
    gw->proxy = proxy_env(gw);
    decisions_apply(gw, old ? old->decisions : NULL);
    gw->pick = sb_picker_dispatch;
    gw->pool_first_up = sb_calloc(cfg->n_pools + 1, sizeof(size_t));
    /* Bounded so the product cannot overflow; a reload keeps this capacity (hashes_cap). */
    gw->hashes_cap = cfg->max_prompt_blocks < ((size_t)1 << 24) ? cfg->max_prompt_blocks : ((size_t)1 << 24);
    gw->pin = pin;
    gw->unpin = unpin;
    size_t n_workers =
        old ? sb_workers_count(old->wset) : (cfg->workers > 1 && cfg->listen_host && sb_guard_on() ? cfg->workers : 0);
    gw->n_scratch = 1 + n_workers;
    gw->scratch = sb_calloc(gw->n_scratch, sizeof(sb_scratch));
    for (size_t i = 0; gw->scratch && i < gw->n_scratch; i++)
        if (!(gw->scratch[i].hashes = sb_malloc(gw->hashes_cap * sizeof(uint64_t))))
            goto fail;
    if (!gw->router || !gw->pool_first_up || !gw->scratch || build_models_json(gw) < 0 || alloc_endpoints(gw) < 0)
        goto fail;
    sb_upstream_opts uo = {.connect_ms = cfg->connect_ms,
                           .idle_ms = cfg->upstream_idle_ms,
                           .max_idle = cfg->max_idle_per_endpoint,
                           .retry_ms = cfg->discovery_retry_ms,
                           .retry_max_ms = cfg->discovery_retry_max_ms,
                           .on_resolved = on_upstream_resolved,
                           .resolved_arg = gw,
                           .tls_resumed = &gw->counters.upstream_tls_resumed,
                           .tls_full = &gw->counters.upstream_tls_full};
    gw->uo = uo;
    /* Workers serve the client listener: the old gateway's (a reload), or new ones (started by
     * attach_servers) when the configuration asks for more than one and the guard is on. */
    gw->home = old ? old->home : out;
    gw->wset = old ? old->wset : NULL;
    if (gw->wset)
        sb_workers_hold(gw->wset); /* a new set is held by its start (attach_servers) */
    if (n_workers) {
        gw->pool_tls = sb_calloc(cfg->n_pools ? cfg->n_pools : 1, sizeof(SSL_CTX *));
        gw->wups = sb_calloc(n_workers * (gw->pool_first_up[cfg->n_pools] ? gw->pool_first_up[cfg->n_pools] : 1),
                             sizeof(sb_upstream *));
        if (!gw->pool_tls || !gw->wups)
            goto fail;
    }
    for (size_t p = 0; p < cfg->n_pools; p++) {
        rc = build_pool(gw, p, &uo);
        if (rc < 0)
            goto fail;
    }
    if (old)
        adopt_addresses(gw, old);
    if ((rc = sb_gateway_precise_start(gw)) < 0)
        goto fail;
    /* Before the listeners: a sync address that cannot be bound fails the start with nothing
     * served. (A reload takes the running one over at the end.) */
    if (!old && (rc = sb_gateway_sync_start(gw, NULL)) < 0)
        goto fail;
    if (cfg->access_log) {
        gw->stats.access_log = strcmp(cfg->access_log, "-") == 0 ? stdout : fopen(cfg->access_log, "a");
        if (!gw->stats.access_log) {
            SB_ERROR("access log %s: cannot open", cfg->access_log);
            rc = UV_EACCES;
            goto fail;
        }
        /* A file of ours gets a buffer for many lines (stdio's default holds a few), given
         * with its memory: glibc ignores the size of a NULL buffer. stdout is shared and may
         * have been written already, so its buffering stays as it is. */
        if (gw->stats.access_log != stdout && (gw->access_log_buf = sb_malloc(SB_ACCESS_LOG_BUF)))
            setvbuf(gw->stats.access_log, gw->access_log_buf, _IOFBF, SB_ACCESS_LOG_BUF);
    }
    rc = attach_servers(gw, old != NULL, server, admin_server, picker);
    if (rc < 0)
        goto fail_server;
    if (sb_gateway_admission_start(gw) < 0) {
        SB_ERROR("admission queues: out of memory");
        rc = UV_ENOMEM;
        goto fail_server;
    }
    rc = sb_prober_start(loop, cfg, gw->router, &gw->prober);
    if (rc < 0) {
        SB_ERROR("prober: %s", uv_strerror(rc));
        goto fail_server;
    }
    start_adaptive(gw);
    start_log_flusher(gw);
    sb_gateway_kv_start(gw, old); /* last: nothing after it fails, so what moves from old stays moved */
    if (old)
        sb_gateway_sync_start(gw, old); /* the same: a handover cannot fail */
    *out = gw;
    return 0;
fail_server:
    if (!old) { /* what this build started; a reload's listeners stay with the old gateway */
        if (gw->server)
            sb_http_server_stop(gw->server);
        if (gw->admin_server)
            sb_http_server_stop(gw->admin_server);
        sb_picker_stop(gw->picker);
    }
    gw->server = gw->admin_server = NULL;
    gw->picker = NULL;
fail:
    gateway_free(gw);
    return rc < 0 ? rc : UV_ENOMEM;
}

int sb_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **out)
{
    /* getrandom(2), or /dev/urandom where it is missing. Refusing to start beats running with
     * a guessable table secret; on Linux this fails only before the kernel's pool is seeded
     * at boot, where getrandom waits rather than fails. */
    uint64_t secret[2]; /* the tables' secret; the request ids' key */
    int rc = uv_random(NULL, NULL, secret, sizeof(secret), 0, NULL);
    if (rc < 0) {
        SB_ERROR("cannot draw the hash-table secret from the OS: %s", uv_strerror(rc));
        sb_config_free(cfg);
        return rc;
    }
    /* The file's config is the base of every effective one (net/discovery.h). */
    sb_discovery *disc = NULL;
    sb_discovery_env env = {.loop = loop, .apply = membership_apply, .current = membership_current, .arg = out};
    sb_config *eff = NULL;
    if ((rc = sb_discovery_new(&env, cfg, &disc)) < 0 || !(eff = sb_discovery_effective(disc, cfg))) {
        SB_ERROR("membership: out of memory");
        sb_discovery_free(disc);
        sb_config_free(cfg);
        return UV_ENOMEM;
    }
    sb_config_free(cfg); /* discovery and the effective config hold it now */
    *out = NULL;
    rc = gateway_build(loop, eff, NULL, NULL, NULL, secret[0], NULL, out);
    if (rc < 0) {
        sb_discovery_free(disc);
        return rc;
    }
    (*out)->id_secret = secret[1];
    (*out)->last_reload_ok_s = wall_now_s(); /* the first configuration loaded counts, as Prometheus counts its own */
    (*out)->disc = disc;
    (*out)->home = out;
    return 0;
}

uint16_t sb_gateway_port(const sb_gateway *gw)
{
    return gw->server ? sb_http_server_port(gw->server) : gw->wset ? sb_workers_port(gw->wset) : 0;
}

/* The client listener's open connections (none when it is off; the workers' summed). */
static size_t client_connections(const sb_gateway *gw)
{
    return gw->server ? sb_http_server_connections(gw->server) : gw->wset ? sb_workers_connections(gw->wset) : 0;
}

const sb_config *sb_gateway_config(const sb_gateway *gw)
{
    return gw->cfg;
}

uint16_t sb_gateway_extproc_port(const sb_gateway *gw)
{
    return sb_picker_port(gw->picker);
}

uint16_t sb_gateway_admin_port(const sb_gateway *gw)
{
    return gw->admin_server ? sb_http_server_port(gw->admin_server) : 0;
}

void sb_gateway_stop(sb_gateway *gw)
{
    /* Stopping the server aborts in-flight exchanges (their upstream connections close);
     * an exchange still waiting for a write callback keeps the gateway alive until it is
     * done (its env.end, proxy_end). Pools free themselves once their last connection
     * has closed. */
    gw->stopping = true;
    gw->stopped = true;
    /* Held while stopping: exchanges aborted below may end (and would free gw) before we
     * are done with it. */
    gw->in_flight++;
    gw->proxy.cutting = gw->draining; /* what a drain left running is cut, not abandoned */
    if (gw->drain_timer_open) {
        uv_timer_stop(&gw->drain_timer);
        uv_close((uv_handle_t *)&gw->drain_timer, on_adaptive_timer_closed);
        gw->drain_timer_open = false;
        gw->in_flight++;
    }
    if (gw->adaptive_timer_open) {
        uv_timer_stop(&gw->adaptive_timer);
        uv_close((uv_handle_t *)&gw->adaptive_timer, on_adaptive_timer_closed);
        gw->adaptive_timer_open = false;
        gw->in_flight++; /* the timer's memory lives in gw: free only once it is closed */
    }
    if (gw->prober)
        sb_prober_stop(gw->prober);
    gw->prober = NULL;
    sb_gateway_kv_stop(gw);
    sb_gateway_admission_stop(gw);
    if (gw->server)
        sb_http_server_stop(gw->server); /* aborts requests waiting for their token ids too */
    if (gw->wset)
        sb_workers_stop_servers(gw->wset); /* the same, on each worker's loop */
    sb_picker_stop(gw->picker);      /* ...and the picker's streams */
    gw->picker = NULL;
    sb_gateway_precise_stop(gw);
    if (gw->admin_server)
        sb_http_server_stop(gw->admin_server);
    gw->admin_server = NULL;
    sb_discovery_free(gw->disc);
    gw->disc = NULL;
    exchange_done(gw);
}

/* The gateway's own timers (adaptive, drain): gw is freed only once they are closed. */
static void on_adaptive_timer_closed(uv_handle_t *h)
{
    exchange_done(((uv_timer_t *)h)->data);
}

/* ---- graceful drain ---- */

/* What is left after the cut (lingering answers: refusals on their way out) gets this long:
 * the answers are already written, this only lets them leave before the process exits. */
#define DRAIN_GRACE_MS 1000
/* How often the drain looks at what is left: it ends at most this late. */
#define DRAIN_POLL_MS 20

static void on_drain_tick(uv_timer_t *t)
{
    sb_gateway *gw = t->data;
    sb_ns now = uv_hrtime();
    bool done = client_connections(gw) + sb_picker_connections(gw->picker) == 0;
    if (!done && !gw->drain_cut_at && now >= gw->drain_deadline) {
        /* The window is over: queued requests are refused (they go out with Connection: close,
         * lingering), what still runs is cut (logged drain_cut), then a short grace. */
        SB_WARN("drain: shutdown.drain_ms (%u ms) passed with %zu connections open; cutting them", gw->cfg->drain_ms,
                client_connections(gw));
        sb_gateway_admission_refuse_draining(gw);
        gw->proxy.cutting = true;
        client_each(gw, server_cut);
        sb_picker_cut(gw->picker); /* its streams are cut (logged drain_cut), the refusals leave */
        gw->drain_cut_at = now;
        done = client_connections(gw) + sb_picker_connections(gw->picker) == 0;
    }
    if (!done && !(gw->drain_cut_at && now >= gw->drain_cut_at + SB_MS(DRAIN_GRACE_MS)))
        return;
    uv_timer_stop(t);
    if (gw->on_drained) {
        void (*cb)(void *) = gw->on_drained;
        gw->on_drained = NULL;
        SB_INFO("drain: done");
        cb(gw->drained_arg); /* may stop (and free) gw */
    }
}

void sb_gateway_drain(sb_gateway *gw, void (*on_drained)(void *arg), void *arg)
{
    if (gw->draining || gw->stopping)
        return;
    gw->draining = true;
    gw->on_drained = on_drained;
    gw->drained_arg = arg;
    gw->drain_deadline = uv_hrtime() + SB_MS(gw->cfg->drain_ms);
    /* Membership stops changing: a change would replace this gateway and hand the closed
     * listener to a new one (the registration API answers 503 from now on). */
    sb_discovery_free(gw->disc);
    gw->disc = NULL;
    SB_INFO("drain: listener closed; %zu connections open, up to %u ms to finish", client_connections(gw),
            gw->cfg->drain_ms);
    client_each(gw, server_drain);
    if (gw->picker)
        sb_picker_drain(gw->picker);
    uv_timer_init(gw->loop, &gw->drain_timer);
    gw->drain_timer.data = gw;
    gw->drain_timer_open = true;
    /* First look at once: with nothing in flight the drain ends on the next loop turn. */
    uv_timer_start(&gw->drain_timer, on_drain_tick, 0, DRAIN_POLL_MS);
}

static void exchange_done(sb_gateway *gw)
{
    if (--gw->in_flight == 0 && gw->stopping)
        gateway_free(gw);
}

static sb_snapshot *pin(sb_gateway *gw)
{
    gw->in_flight++;
    return snapshot_ref(gw);
}

static void unpin(sb_gateway *gw, sb_snapshot *snap)
{
    snapshot_unref(gw, snap);
    exchange_done(gw);
}

static sb_snapshot *snapshot_ref(sb_gateway *gw)
{
    gw->snap->refs++;
    return gw->snap;
}

static void snapshot_unref(sb_gateway *gw, sb_snapshot *snap)
{
    if (--snap->refs > 0)
        return;
    /* The last request of a retired configuration ended: free it. */
    for (sb_snapshot **pp = &gw->retired; *pp; pp = &(*pp)->next) {
        if (*pp == snap) {
            *pp = snap->next;
            sb_config_free(snap->cfg);
            sb_free(snap);
            return;
        }
    }
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Same pools, models, adapters and endpoints, in the same order: what a reload may not
 * change in this version (the router, upstream pools and probes are built from them). */
static const char *shape_differs(const sb_config *a, const sb_config *b)
{
    if (a->n_pools != b->n_pools)
        return "the number of pools changed";
    for (size_t i = 0; i < a->n_pools; i++) {
        const sb_pool_config *x = &a->pools[i], *y = &b->pools[i];
        if (strcmp(x->name, y->name))
            return "a pool was renamed or reordered";
        if (x->n_models != y->n_models || x->n_adapters != y->n_adapters || x->n_endpoints != y->n_endpoints)
            return "a pool's models, adapters or endpoints changed";
        for (size_t k = 0; k < x->n_models; k++)
            if (strcmp(x->models[k], y->models[k]))
                return "a pool's models changed";
        for (size_t k = 0; k < x->n_adapters; k++)
            if (strcmp(x->adapters[k], y->adapters[k]))
                return "a pool's adapters changed";
        for (size_t k = 0; k < x->n_endpoints; k++)
            if (strcmp(x->endpoints[k].address, y->endpoints[k].address))
                return "a pool's endpoints changed";
        if (strcmp(x->engine ? x->engine : "", y->engine ? y->engine : ""))
            return "a pool's engine changed";
        /* Connections hold their TLS context: new settings, or the same files rotated on disk,
         * need new connection pools (the endpoints' state is carried over). */
        if (x->tls || y->tls)
            return "a pool's endpoints are https:// (its TLS files are read again)";
    }
    if (a->metrics_max_models != b->metrics_max_models)
        return "metrics.max_models changed"; /* the statistics' model slots are laid out anew */
    if (!same_str(a->listen_host, b->listen_host) || a->listen_port != b->listen_port)
        return "the listen address changed";
    return NULL;
}

/* Whether a and b listen for admin on the same address (or both not at all). */
static bool same_admin_listen(const sb_config *a, const sb_config *b)
{
    if (!a->admin_host || !b->admin_host)
        return !a->admin_host && !b->admin_host;
    return !strcmp(a->admin_host, b->admin_host) && a->admin_port == b->admin_port;
}

/* Whether a and b run the same picker listener (or none): its address and TLS are read once,
 * at start; its other keys are read per stream and apply at once. */
static bool same_extproc(const sb_config *a, const sb_config *b)
{
    return same_str(a->extproc_host, b->extproc_host) && a->extproc_port == b->extproc_port &&
           same_str(a->extproc_tls_cert, b->extproc_tls_cert) && same_str(a->extproc_tls_key, b->extproc_tls_key);
}

/* Stops a gateway's background work but not the server it shares: its requests in flight (and
 * those it had queued, dispatched now) finish on it; it frees itself after the last one. */
static void gateway_retire(sb_gateway *gw)
{
    gw->stopping = true;
    gw->in_flight++; /* held while retiring (see sb_gateway_stop) */
    if (gw->adaptive_timer_open) {
        uv_timer_stop(&gw->adaptive_timer);
        uv_close((uv_handle_t *)&gw->adaptive_timer, on_adaptive_timer_closed);
        gw->adaptive_timer_open = false;
        gw->in_flight++;
    }
    if (gw->prober)
        sb_prober_stop(gw->prober);
    gw->prober = NULL;
    sb_gateway_kv_stop(gw);      /* those the new gateway did not take over */
    sb_gateway_precise_stop(gw); /* requests waiting for their ids go on without, then: */
    sb_gateway_admission_flush(gw);
    gw->server = NULL; /* the new gateway's now, like the admin listener and the picker */
    gw->admin_server = NULL;
    gw->picker = NULL;
    exchange_done(gw);
}

/* What a new gateway inherits from the one it replaces: every endpoint that stays (same pool
 * name, same address) keeps its reports, health and learned figures; a pool whose endpoint
 * list is unchanged keeps its prefix index; counters carry on (Prometheus counters must not
 * go back). The router's own accounting of requests in flight starts at zero: those requests
 * finish on the old gateway, and the next scrape shows them. */
static void carry_state(sb_gateway *ngw, sb_gateway *old)
{
    ngw->counters = old->counters;
    /* What is in flight is the old gateway's: its exchanges decrement its own counts. Copied,
     * they would never come down here, and the retry budget would read a fleet busier (or,
     * with retries in flight, sicker) than it is for good. */
    ngw->counters.exchanges_live = 0;
    ngw->counters.retries_live = 0;
    memcpy(ngw->agent_refused, old->agent_refused, sizeof(ngw->agent_refused));
    ngw->id_secret = old->id_secret;
    ngw->id_seq = old->id_seq;
    sb_stats_carry(&ngw->stats, &old->stats);
    ngw->reloads = old->reloads;
    ngw->reload_failures = old->reload_failures;
    ngw->reload_successes = old->reload_successes;
    ngw->last_reload_ok_s = old->last_reload_ok_s;
    for (size_t p = 0; p < ngw->cfg->n_pools; p++) {
        const sb_pool_config *np = &ngw->cfg->pools[p];
        for (size_t q = 0; q < old->cfg->n_pools; q++) {
            const sb_pool_config *op = &old->cfg->pools[q];
            if (strcmp(np->name, op->name))
                continue;
            sb_router_pool_carry_counters(ngw->router, (uint32_t)p, old->router, (uint32_t)q);
            bool same = np->n_endpoints == op->n_endpoints;
            /* Old endpoint f is new map[f] (-1: gone), for the prefix index's renumbering. */
            int32_t *map = sb_malloc((op->n_endpoints ? op->n_endpoints : 1) * sizeof(int32_t));
            for (size_t f = 0; map && f < op->n_endpoints; f++)
                map[f] = -1;
            for (size_t e = 0; e < np->n_endpoints; e++) {
                for (size_t f = 0; f < op->n_endpoints; f++) {
                    if (strcmp(np->endpoints[e].address, op->endpoints[f].address))
                        continue;
                    sb_endpoint_adopt(sb_router_endpoint(ngw->router, (uint32_t)p, (uint32_t)e),
                                      sb_router_endpoint(old->router, (uint32_t)q, (uint32_t)f));
                    if (map && map[f] < 0)
                        map[f] = (int32_t)e; /* the first new endpoint of that address */
                    break;
                }
                same = same && !strcmp(np->endpoints[e].address, op->endpoints[e].address);
            }
            if (same)
                sb_router_move_prefix_index(ngw->router, (uint32_t)p, old->router, (uint32_t)q);
            else if (map) /* a membership change: the staying endpoints keep what they hold */
                sb_router_remap_prefix_index(ngw->router, (uint32_t)p, old->router, (uint32_t)q, map);
            sb_free(map);
            break;
        }
    }
}

/* An in-place reload of pool p: the same endpoints keep their state; parameters, profile,
 * adaptive bounds and the endpoints' identity strings come from the new config. */
static void reload_pool_in_place(sb_gateway *gw, const sb_config *cfg, size_t p)
{
    const sb_pool_config *pc = &cfg->pools[p];
    sb_pool_params pp = {.stale_ns = SB_MS(pc->stale_ms),
                         .health = health_params_of(pc),
                         .block_bytes = (uint32_t)cfg->block_bytes,
                         .prefix_share = pc->prefix_share,
                         .prefix_calibrate = pc->prefix_calibrate};
    sb_router_set_pool_params(gw->router, (uint32_t)p, &pp);
    const sb_profile *prof = pool_profile(cfg, pc);
    sb_router_set_profile(gw->router, (uint32_t)p, prof);
    if (gw->adaptive && gw->adaptive[p]) {
        sb_adaptive_set_params(gw->adaptive[p], &pc->adaptive_params, uv_hrtime());
        sb_adaptive_set_base(gw->adaptive[p], prof, uv_hrtime());
        sb_control_publish(gw->router, (uint32_t)p, gw->adaptive[p], prof, pc->adaptive);
    }
    for (size_t e = 0; e < pc->n_endpoints; e++) {
        /* Same endpoint, state kept; only its identity strings move to the new config. */
        sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
        const sb_endpoint_config *ec = &pc->endpoints[e];
        ep->address = ec->address;
        ep->draining = ec->draining;
        ep->n_labels = 0;
        for (size_t l = 0; l < ec->n_labels && l < SB_MAX_LABELS; l++) {
            ep->label_keys[l] = ec->label_keys[l];
            ep->label_values[l] = ec->label_values[l];
            ep->n_labels = l + 1;
        }
    }
}

/* A reload that changes pools, models or endpoints: a new gateway takes over the listener;
 * the old one finishes what it has in flight. */
static int reload_replace(sb_gateway **gwp, sb_config *cfg, const char *why)
{
    sb_gateway *gw = *gwp;
    sb_gateway *ngw = NULL;
    /* The same secret: the prefix indexes carried over keep their own key anyway, but one
     * secret per process is simpler to reason about. */
    if (gateway_build(gw->loop, cfg, gw->server, gw->admin_server, gw->picker, gw->hash_secret, gw, &ngw) < 0) {
        SB_WARN("reload refused: the new configuration could not be applied; keeping the running one");
        return -1;
    }
    carry_state(ngw, gw);
    ngw->disc = gw->disc; /* membership follows the serving gateway */
    ngw->home = gw->home;
    gw->disc = NULL;
    ngw->reloads++;
    if (ngw->server)
        sb_http_server_set_handler(ngw->server, sb_gateway_on_request, ngw);
    if (ngw->admin_server)
        sb_http_server_set_handler(ngw->admin_server, sb_gateway_admin, ngw);
    if (ngw->picker)
        sb_picker_handover(ngw->picker, ngw);
    gateway_retire(gw);
    *gwp = ngw;
    SB_INFO("configuration reloaded (%llu): %s; endpoint state carried over",
            (unsigned long long)ngw->reloads, why);
    return 0;
}

/* Applies an effective configuration (the file's with the members): in place, or by replacing
 * the gateway. Ownership of cfg passes either way. */
static int reload_effective(sb_gateway **gwp, sb_config *cfg)
{
    sb_gateway *gw = *gwp;
    if (cfg->workers != gw->cfg->workers && cfg->workers)
        SB_WARN("reload: workers: %zu is read at start only (restart to apply); %zu keep serving", cfg->workers,
                gw->cfg->workers);
    cfg->workers = gw->cfg->workers; /* as resolved at start (auto included) */
    const char *why = shape_differs(gw->cfg, cfg);
    if (why && (!same_str(gw->cfg->listen_host, cfg->listen_host) || gw->cfg->listen_port != cfg->listen_port)) {
        SB_WARN("reload refused: the listen address changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (!same_admin_listen(gw->cfg, cfg)) {
        SB_WARN("reload refused: admin.listen changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (!sb_gateway_sync_same(gw->cfg, cfg)) {
        SB_WARN("reload refused: sync changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (!same_extproc(gw->cfg, cfg)) {
        SB_WARN("reload refused: ext_proc's listen or TLS changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (!gw->cfg->tls_cert != !cfg->tls_cert) {
        SB_WARN("reload refused: tls was turned %s on the client listener (restart to apply)",
                cfg->tls_cert ? "on" : "off");
        sb_config_free(cfg);
        return -1;
    }
    /* Certificate files are read at every reload (a rotation is a SIGHUP): read before anything
     * is applied, so files that do not load refuse the whole reload. The replacing path reads
     * them again in gateway_build (a rename between the two reads fails that build, also a
     * refusal). */
    bool tls_failed;
    SSL_CTX *tls = listener_tls(cfg, &tls_failed);
    if (tls_failed) {
        SB_WARN("reload refused: the TLS certificate or key did not load; keeping the running ones");
        sb_config_free(cfg);
        return -1;
    }
    if (why) {
        SSL_CTX_free(tls);
        return reload_replace(gwp, cfg, why);
    }
    sb_snapshot *ns = sb_calloc(1, sizeof(*ns));
    if (!ns) {
        SSL_CTX_free(tls);
        sb_config_free(cfg);
        return -1;
    }
    ns->cfg = cfg;
    ns->refs = 1;
    for (size_t p = 0; p < cfg->n_pools; p++)
        reload_pool_in_place(gw, cfg, p);
    sb_http_server_opts so, ao;
    server_opts(cfg, tls, &so, &ao);
    client_set_opts(gw, &so);
    SSL_CTX_free(tls);
    if (gw->admin_server)
        sb_http_server_set_opts(gw->admin_server, &ao);
    if (gw->prober)
        sb_prober_reconfigure(gw->prober, cfg);
    /* The old configuration retires; it is freed when its last request ends. */
    sb_snapshot *old = gw->snap;
    old->next = gw->retired;
    gw->retired = old;
    gw->snap = ns;
    gw->cfg = cfg;
    sb_stats_renumber_fallbacks(&gw->stats, cfg);
    gw->stats.cfg = cfg; /* names pools and endpoints in metrics and log lines: the current ones */
    gw->reloads++;
    decisions_apply(gw, gw->decisions);
    sb_gateway_kv_reconfigure(gw);
    if (sb_gateway_admission_reconfigure(gw) < 0)
        SB_WARN("reload: flow control could not take the new bounds (out of memory); some pools keep the old ones");
    snapshot_unref(gw, old);
    SB_INFO("configuration reloaded (%llu)", (unsigned long long)gw->reloads);
    return 0;
}

/* reload_effective, counted: every path that refuses returns -1 with the running gateway in
 * place; one that applies may have replaced it (*gwp), which carried the counts over. */
static int reload_counted(sb_gateway **gwp, sb_config *cfg)
{
    int rc = reload_effective(gwp, cfg);
    if (rc < 0) {
        (*gwp)->reload_failures++;
    } else {
        (*gwp)->reload_successes++;
        (*gwp)->last_reload_ok_s = wall_now_s();
    }
    return rc;
}

void sb_gateway_reload_refused(sb_gateway *gw)
{
    gw->reload_failures++;
}

int sb_gateway_reload(sb_gateway **gwp, sb_config *cfg)
{
    sb_discovery *disc = (*gwp)->disc;
    if (!disc)
        return reload_counted(gwp, cfg);
    sb_config *eff = sb_discovery_effective(disc, cfg);
    if (!eff) {
        SB_WARN("reload refused: out of memory; keeping the running configuration");
        sb_config_free(cfg);
        (*gwp)->reload_failures++;
        return -1;
    }
    int rc = reload_counted(gwp, eff);
    if (rc == 0)
        sb_discovery_set_base(disc, cfg); /* later membership changes build on the new file */
    sb_config_free(cfg);                  /* discovery holds its own reference */
    return rc;
}

/* ---- membership's env (net/discovery.h): arg is the owner's variable, gw->home ---- */

static int membership_apply(void *arg, sb_config *cfg)
{
    sb_gateway **home = arg;
    if (!*home) {
        sb_config_free(cfg);
        return -1;
    }
    return reload_effective(home, cfg); /* discovery counts its own applies and failures */
}

static sb_gateway *membership_current(void *arg)
{
    return *(sb_gateway **)arg;
}
