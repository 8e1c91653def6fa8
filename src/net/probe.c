#include "net/probe.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "net/http_get.h"
#include "net/upstream.h"
#include "proto/engine_metrics.h"

/* /metrics of a busy vLLM is ~30-100 KiB; 4 MiB bounds a broken one. */
#define MAX_METRICS_BYTES (4u << 20)
#define SLOTS_SCRATCH_BYTES (256u << 10)
/* A /v1/models answer is ~300 bytes a model; 1 MiB is thousands of adapters. */
#define MAX_MODELS_BYTES (1u << 20)

struct probe;

/* One request's wait (sb_prober_sync): the probes it waits for, its deadline timer. In the
 * prober's list of waits until it completes or is cancelled; freed when its timer closes. */
struct sb_probe_wait {
    sb_prober *owner;
    struct sb_probe_wait *prev, *next;
    uv_timer_t timer;
    struct probe *on[SB_PROBE_SYNC_MAX_EPS];
    size_t n_on;
    sb_probe_wait_cb cb;
    void *ud;
};

typedef struct probe {
    sb_prober *owner;
    uint32_t pool, ep;
    sb_upstream *up;             /* a pool of its own: probes never take request connections */
    uv_timer_t scrape_timer, health_timer;
    sb_http_get *scrape, *health, *models;
    bool models_due; /* check /v1/models after the next successful scrape */
    sb_engine_map map;
    sb_engine_report prev;
    bool have_prev;
    bool use_slots;
    const sb_pool_config *pc;
    uint64_t dispatched_at_last;
    sb_probe_stats stats;
} probe;

struct sb_prober {
    uv_loop_t *loop;
    sb_router *router;
    probe *probes;
    size_t n;
    size_t *first;               /* index of each pool's first probe */
    size_t n_pools;
    int handles_open;
    bool stopping;
    void *slots_scratch;
    sb_probe_wait *waits; /* synchronous probes out, a doubly linked list */
    sb_probe_wait *creating; /* the wait sb_prober_sync is starting: not completed from inside */
    size_t n_waits;
    uint64_t sync_waits, sync_timeouts;
};

static sb_ns now_ns(void) { return uv_hrtime(); }
static void configure(probe *pr, const sb_pool_config *pc);


static uint32_t next_interval(probe *pr)
{
    const sb_pool_config *pc = pr->pc;
    sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
    uint64_t d = ep ? ep->dispatched - pr->dispatched_at_last : 0;
    if (ep)
        pr->dispatched_at_last = ep->dispatched;
    uint32_t next;
    if (d >= 1)
        next = (uint32_t)((uint64_t)pc->probe_interval_ms * 4 / (4 + d));
    else
        next = pr->stats.interval_ms ? pr->stats.interval_ms * 2 : pc->probe_interval_ms;
    if (next < pc->probe_min_interval_ms)
        next = pc->probe_min_interval_ms;
    if (next > pc->probe_max_interval_ms)
        next = pc->probe_max_interval_ms;
    return next;
}

static uint64_t adapter_mask(sb_router *r, uint32_t pool, const sb_engine_lora_list *l)
{
    uint64_t m = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        int a = sb_router_adapter_index(r, pool, sb_engine_lora_name(l, i), l->len[i]);
        if (a >= 0 && a < 64)
            m |= 1ULL << a;
    }
    return m;
}

static void apply_report(probe *pr, const sb_engine_report *er)
{
    sb_router *r = pr->owner->router;
    sb_endpoint *ep = sb_router_endpoint(r, pr->pool, pr->ep);
    if (!ep)
        return;
    sb_endpoint_report rep = {0};
    rep.requests_total = er->have_requests_total ? er->requests_total : -1;
    rep.have_running = er->have_running;
    rep.running = er->running;
    rep.have_waiting = er->have_waiting;
    rep.waiting = er->waiting;
    rep.have_kv = er->have_kv;
    rep.kv_usage = er->kv_usage;
    if (er->have_block_size && er->have_num_gpu_blocks && er->block_size && er->num_gpu_blocks) {
        rep.have_capacity = true;
        rep.block_size = er->block_size;
        rep.num_gpu_blocks = (uint32_t)er->num_gpu_blocks;
    } else if (er->have_capacity_tokens && er->capacity_tokens) {
        rep.have_capacity = true;
        rep.block_size = 1;
        rep.num_gpu_blocks = (uint32_t)er->capacity_tokens;
    }
    if (er->have_lora) {
        rep.have_lora = true;
        rep.max_lora = er->max_lora;
        rep.lora_running_count = er->running_adapters.n;
        rep.lora_running_mask = adapter_mask(r, pr->pool, &er->running_adapters);
        rep.lora_waiting_mask = adapter_mask(r, pr->pool, &er->waiting_adapters);
    }
    bool restarted = pr->have_prev && sb_engine_report_restarted(&pr->prev, er);
    sb_ns before = ep->report_ns;
    sb_endpoint_report_set(ep, &rep, SB_REPORT_SCRAPE, now_ns());
    if (restarted) {
        /* A restarted engine has an empty cache: what the index believed is gone. It may
         * also serve another model now. */
        pr->stats.restarts++;
        pr->models_due = true;
        sb_router_prefix_clear(r, pr->pool, pr->ep, before);
        SB_INFO("endpoint %s restarted (counters went back): prefix index entries dropped",
                ep->address ? ep->address : "?");
    }
    if (er->have_slots)
        sb_endpoint_slots_set(ep, er->slots_total, er->slots_total - er->slots_busy,
                              sb_router_pool_params(r, pr->pool)->stale_ns, now_ns());
    if (rep.have_capacity)
        sb_router_prefix_capacity(r, pr->pool, pr->ep, (uint64_t)rep.num_gpu_blocks * rep.block_size);
    pr->prev = *er;
    pr->have_prev = true;
}

const char *sb_probe_engine_why(const sb_probe_engine *e, const char *path, char *buf, size_t cap)
{
    if (!e->mismatch)
        return NULL;
    const char *pre = sb_engine_prefix((sb_engine_kind)e->kind);
    if (e->automatic && !e->have_looks_like)
        snprintf(buf, cap,
                 "no vllm:, sglang:, trtllm_ or llamacpp: families in %s (engine auto; another server "
                 "needs engine: custom)",
                 path);
    else if (e->have_looks_like && e->looks_like == e->kind)
        /* The engine's prefix is there, but none of the load families read (TensorRT-LLM
         * releases that export only request histograms). */
        snprintf(buf, cap, "%s families in %s, but none of the load metrics read (running, waiting, KV use)", pre,
                 path);
    else if (!pre)
        snprintf(buf, cap, "none of the configured metric names in %s%s%s", path,
                 e->have_looks_like ? "; this looks like " : "",
                 e->have_looks_like ? sb_engine_kind_name((sb_engine_kind)e->looks_like) : "");
    else
        snprintf(buf, cap, "no %s families in %s; this looks like %s", pre, path,
                 e->have_looks_like ? sb_engine_kind_name((sb_engine_kind)e->looks_like) : "no known engine");
    return buf;
}

/* A 200 /metrics page parsed into er with the mapping in use. Returns true when it matched
 * the engine's families (er then holds the report to apply). With engine: auto a page that
 * does not match is looked at once more: the families it exposes choose the mapping, and it
 * is parsed again with it. The detection pass runs only on a miss, so a steady endpoint costs
 * one parse per scrape. */
static bool read_metrics(probe *pr, const char *body, size_t len, sb_engine_report *er)
{
    sb_probe_engine *eg = &pr->stats.engine;
    sb_engine_metrics_parse(&pr->map, body, len, er);
    if (er->n_matched == 0) {
        sb_engine_kind guess;
        bool have = sb_engine_guess(sb_engine_families(body, len), &guess);
        if (eg->automatic && have && (!eg->detected || guess != pr->map.kind)) {
            sb_engine_map_init(&pr->map, guess, NULL);
            /* Counters of another mapping are not comparable: no restart from them. */
            pr->have_prev = false;
            eg->kind = guess;
            eg->detected = true;
            sb_engine_metrics_parse(&pr->map, body, len, er);
            sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
            SB_INFO("endpoint %s: engine auto: reading %s metrics", ep && ep->address ? ep->address : "?",
                    sb_engine_kind_name(guess));
        }
        if (er->n_matched == 0) {
            eg->mismatches++;
            eg->have_looks_like = have;
            eg->looks_like = have ? (int)guess : 0;
            if (!eg->mismatch) {
                char why[200];
                sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
                eg->mismatch = true;
                SB_WARN("endpoint %s: scrape answered 200 but %s; its load is unknown until this is fixed",
                        ep && ep->address ? ep->address : "?",
                        sb_probe_engine_why(eg, pr->pc->probe_path, why, sizeof why));
            }
            return false;
        }
    }
    if (eg->automatic && !eg->detected) {
        eg->detected = true;
        eg->kind = (int)pr->map.kind;
    }
    if (eg->mismatch) {
        sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
        eg->mismatch = false;
        eg->have_looks_like = false;
        SB_INFO("endpoint %s: scrape matches engine %s again", ep && ep->address ? ep->address : "?",
                sb_engine_kind_name(pr->map.kind));
    }
    return true;
}

const char *sb_probe_models_why(const sb_probe_models *m, const char *served_name, char *buf, size_t cap)
{
    if (!m->missing)
        return NULL;
    if (m->served[0])
        snprintf(buf, cap, "/v1/models lists '%s', not '%s' (the pool's first model, the name sent upstream)",
                 m->served, served_name);
    else
        snprintf(buf, cap, "/v1/models lists no model, not '%s' (the pool's first model, the name sent upstream)",
                 served_name);
    return buf;
}

static void on_models_done(void *ud, int status, const char *body, size_t len)
{
    probe *pr = ud;
    sb_probe_models *m = &pr->stats.models;
    const char *name = pr->pc->models[0], *first;
    size_t first_len;
    pr->models = NULL;
    if (status < 0)
        return; /* not reached: models_due stays set, the next good scrape tries again */
    pr->models_due = false;
    if (status != 200)
        return; /* a server without /v1/models (a custom engine) says nothing about names */
    int rc = sb_engine_models_has(body, len, pr->owner->slots_scratch, SLOTS_SCRATCH_BYTES, name, strlen(name), &first,
                                  &first_len);
    if (rc < 0)
        return;
    sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
    const char *addr = ep && ep->address ? ep->address : "?";
    bool was = m->missing;
    m->checked = true;
    m->checks++;
    m->missing = rc == 0;
    if (m->missing) {
        size_t n = first_len < sizeof m->served - 1 ? first_len : sizeof m->served - 1;
        memcpy(m->served, first ? first : "", n);
        m->served[n] = '\0';
        if (!was) {
            char why[320];
            SB_WARN("endpoint %s: %s; its requests will fail", addr, sb_probe_models_why(m, name, why, sizeof why));
        }
    } else if (was) {
        SB_INFO("endpoint %s: /v1/models lists '%s' again", addr, name);
    }
}

static void start_models_check(probe *pr)
{
    if (pr->models || !pr->up || pr->owner->stopping)
        return;
    if (sb_http_get_start(pr->up, "/v1/models", pr->pc->upstream_auth_header, pr->pc->probe_timeout_ms,
                          MAX_MODELS_BYTES, on_models_done, pr, &pr->models) < 0)
        pr->models = NULL;
}

static void on_scrape_timer(uv_timer_t *t);
static void wait_scrape_ended(sb_prober *p, probe *pr);
static void wait_end(sb_probe_wait *w, bool call);

static void on_scrape_done(void *ud, int status, const char *body, size_t len)
{
    probe *pr = ud;
    pr->scrape = NULL;
    pr->stats.scrapes++;
    pr->stats.last_status = status;
    pr->stats.last_scrape_ns = now_ns();
    if (status == 200) {
        sb_engine_report er;
        int ok = 0;
        if (pr->use_slots) {
            sb_engine_report_init(&er);
            ok = sb_engine_slots_parse(body, len, pr->owner->slots_scratch, SLOTS_SCRATCH_BYTES, &er) == 0;
        } else {
            ok = read_metrics(pr, body, len, &er);
        }
        if (ok)
            apply_report(pr, &er);
        else
            pr->stats.scrape_errors++;
        /* After a 200 (the server is up), whether its page matched or not: a wrong served
         * name is worth knowing either way. */
        if (pr->models_due)
            start_models_check(pr);
    } else {
        pr->stats.scrape_errors++;
    }
    if (!pr->owner->stopping && pr->pc->probe_enabled) {
        pr->stats.interval_ms = next_interval(pr);
        uv_timer_start(&pr->scrape_timer, on_scrape_timer, pr->stats.interval_ms, 0);
    }
    wait_scrape_ended(pr->owner, pr);
}

/* Starts one scrape (the timer's, or a synchronous probe's): 0, or a negative libuv error with
 * no scrape out. */
static int start_scrape(probe *pr)
{
    const char *path = pr->use_slots ? "/slots" : pr->pc->probe_path;
    int rc = sb_http_get_start(pr->up, path, pr->pc->upstream_auth_header, pr->pc->probe_timeout_ms, MAX_METRICS_BYTES,
                               on_scrape_done, pr, &pr->scrape);
    if (rc < 0)
        pr->scrape = NULL;
    return rc;
}

static void on_scrape_timer(uv_timer_t *t)
{
    probe *pr = t->data;
    int rc = start_scrape(pr);
    if (rc < 0)
        on_scrape_done(pr, rc, "", 0);
}

static void on_health_timer(uv_timer_t *t);

static void on_health_done(void *ud, int status, const char *body, size_t len)
{
    (void)body;
    (void)len;
    probe *pr = ud;
    pr->health = NULL;
    pr->stats.health_checks++;
    bool ok = status >= 200 && status < 300;
    if (!ok)
        pr->stats.health_failures++;
    sb_endpoint *ep = sb_router_endpoint(pr->owner->router, pr->pool, pr->ep);
    if (ep) {
        if (ep->active_down != !ok)
            SB_INFO("endpoint %s health check: %s", ep->address ? ep->address : "?", ok ? "up" : "down");
        sb_endpoint_active_check(ep, ok, now_ns());
    }
    if (!pr->owner->stopping && pr->pc->health_interval_ms)
        uv_timer_start(&pr->health_timer, on_health_timer, pr->pc->health_interval_ms, 0);
}

static void on_health_timer(uv_timer_t *t)
{
    probe *pr = t->data;
    int rc = sb_http_get_start(pr->up, pr->pc->health_path, pr->pc->upstream_auth_header, pr->pc->probe_timeout_ms, 64 * 1024, on_health_done, pr,
                               &pr->health);
    if (rc < 0) {
        pr->health = NULL;
        on_health_done(pr, rc, "", 0);
    }
}

/* One handle of the prober's closed (a probe's timers, a wait's timer): the last frees it. */
static void on_closed_count(sb_prober *p)
{
    if (--p->handles_open > 0)
        return;
    for (size_t i = 0; i < p->n; i++)
        if (p->probes[i].up)
            sb_upstream_free(p->probes[i].up);
    sb_free(p->probes);
    sb_free(p->first);
    sb_free(p->slots_scratch);
    sb_free(p);
}

static void on_closed(uv_handle_t *h)
{
    on_closed_count(((probe *)h->data)->owner);
}

int sb_prober_start(uv_loop_t *loop, const sb_config *cfg, sb_router *router, sb_prober **out)
{
    sb_prober *p = sb_calloc(1, sizeof(*p));
    if (!p)
        return UV_ENOMEM;
    p->loop = loop;
    p->router = router;
    size_t total = 0;
    for (size_t i = 0; i < cfg->n_pools; i++)
        total += cfg->pools[i].n_endpoints;
    p->probes = sb_calloc(total ? total : 1, sizeof(probe));
    p->first = sb_calloc(cfg->n_pools + 1, sizeof(size_t));
    p->slots_scratch = sb_malloc(SLOTS_SCRATCH_BYTES);
    if (!p->probes || !p->first || !p->slots_scratch) {
        sb_free(p->probes);
        sb_free(p->first);
        sb_free(p->slots_scratch);
        sb_free(p);
        return UV_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < cfg->n_pools; i++) {
        const sb_pool_config *pc = &cfg->pools[i];
        p->first[i] = k;
        char err[256];
        SSL_CTX *tls =
            pc->tls ? sb_tls_client_ctx(pc->tls_ca_file, pc->tls_cert, pc->tls_key, pc->tls_verify, err, sizeof err)
                    : NULL;
        for (size_t e = 0; e < pc->n_endpoints; e++, k++) {
            probe *pr = &p->probes[k];
            pr->owner = p;
            pr->pool = (uint32_t)i;
            pr->ep = (uint32_t)e;
            configure(pr, pc);
            sb_upstream_opts uo = {.connect_ms = pc->probe_timeout_ms,
                                   .idle_ms = 60000,
                                   .max_idle = 1,
                                   .tls_ctx = tls,
                                   .tls_server_name = pc->tls_server_name};
            /* An https:// pool whose TLS settings did not load (logged by the gateway, which then
             * refuses the configuration) gets no prober connection. */
            if ((pc->tls && !tls) ||
                sb_upstream_new(loop, pc->endpoints[e].host, pc->endpoints[e].port, &uo, &pr->up) < 0)
                pr->up = NULL;
            uv_timer_init(loop, &pr->scrape_timer);
            uv_timer_init(loop, &pr->health_timer);
            pr->scrape_timer.data = pr->health_timer.data = pr;
            p->handles_open += 2;
            pr->stats.interval_ms = pc->probe_interval_ms;
            if (pr->up && pc->probe_enabled)
                uv_timer_start(&pr->scrape_timer, on_scrape_timer, 0, 0);
            if (pr->up && pc->health_interval_ms)
                uv_timer_start(&pr->health_timer, on_health_timer, pc->health_interval_ms, 0);
        }
        SSL_CTX_free(tls); /* each endpoint's connection pool holds its own reference */
    }
    p->n = k;
    p->first[cfg->n_pools] = k;
    p->n_pools = cfg->n_pools;
    *out = p;
    return 0;
}

void sb_prober_stop(sb_prober *p)
{
    p->stopping = true;
    /* Requests waiting for a synchronous probe go on without it. */
    while (p->waits)
        wait_end(p->waits, true);
    if (p->n == 0) {
        sb_free(p->probes);
        sb_free(p->first);
        sb_free(p->slots_scratch);
        sb_free(p);
        return;
    }
    for (size_t i = 0; i < p->n; i++) {
        probe *pr = &p->probes[i];
        if (pr->scrape)
            sb_http_get_cancel(pr->scrape);
        if (pr->health)
            sb_http_get_cancel(pr->health);
        if (pr->models)
            sb_http_get_cancel(pr->models);
        pr->scrape = pr->health = pr->models = NULL;
        uv_close((uv_handle_t *)&pr->scrape_timer, on_closed);
        uv_close((uv_handle_t *)&pr->health_timer, on_closed);
    }
}

/* ---- the synchronous probe ---- */

static void wait_unlink(sb_probe_wait *w)
{
    sb_prober *p = w->owner;
    if (w->prev)
        w->prev->next = w->next;
    else
        p->waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    p->n_waits--;
}

static void on_wait_closed(uv_handle_t *h)
{
    sb_probe_wait *w = h->data;
    sb_prober *p = w->owner;
    sb_free(w);
    on_closed_count(p);
}

/* Ends a wait: out of the list, cb called (unless cancelled), timer closed (frees it). */
static void wait_end(sb_probe_wait *w, bool call)
{
    wait_unlink(w);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_wait_closed);
    if (call)
        w->cb(w->ud);
}

static void on_wait_deadline(uv_timer_t *t)
{
    sb_probe_wait *w = t->data;
    if (w->n_on) /* else every scrape ended during sb_prober_sync: not a timeout */
        w->owner->sync_timeouts++;
    wait_end(w, true);
}

/* A scrape of pr ended (answer, error or timeout): every wait on it has one fewer to wait for.
 * Waits whose last probe ended complete; the list is walked from a saved next, since a
 * completed wait leaves it (and its callback may start another wait, which goes to the head). */
static void wait_scrape_ended(sb_prober *p, probe *pr)
{
    for (sb_probe_wait *w = p->waits, *next; w; w = next) {
        next = w->next;
        for (size_t i = 0; i < w->n_on; i++) {
            if (w->on[i] == pr) {
                w->on[i] = w->on[--w->n_on];
                break;
            }
        }
        if (w->n_on == 0 && w != p->creating)
            wait_end(w, true);
    }
}

sb_probe_wait *sb_prober_sync(sb_prober *p, uint32_t pool, const uint32_t *eps, size_t n, uint32_t timeout_ms,
                              sb_probe_wait_cb cb, void *ud)
{
    if (p->stopping || p->n_waits >= SB_PROBE_MAX_WAITS || pool >= p->n_pools)
        return NULL;
    probe *on[SB_PROBE_SYNC_MAX_EPS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < SB_PROBE_SYNC_MAX_EPS; i++) {
        size_t idx = p->first[pool] + eps[i];
        if (idx >= p->first[pool + 1])
            continue;
        probe *pr = &p->probes[idx];
        /* Nothing to learn from an endpoint we cannot scrape or whose last scrape failed. */
        if (!pr->up || !pr->pc->probe_enabled || (pr->stats.scrapes && pr->stats.last_status != 200))
            continue;
        on[k++] = pr;
    }
    if (k == 0)
        return NULL;
    sb_probe_wait *w = sb_calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->owner = p;
    w->cb = cb;
    w->ud = ud;
    memcpy(w->on, on, k * sizeof(on[0]));
    w->n_on = k;
    uv_timer_init(p->loop, &w->timer);
    w->timer.data = w;
    p->handles_open++;
    uv_timer_start(&w->timer, on_wait_deadline, timeout_ms ? timeout_ms : 1, 0);
    w->next = p->waits;
    if (p->waits)
        p->waits->prev = w;
    p->waits = w;
    p->n_waits++;
    p->sync_waits++;
    /* Start the scrapes not already in flight (the regular timer is re-armed when each ends).
     * A start that fails is not reported from here (cb must not run inside this call): the
     * regular timer, armed to fire at once, tries again on the next loop turn and its end,
     * success or failure, counts for this wait. */
    /* A start can end at once (a reused connection whose write fails): its scrape's end must
     * not complete this wait from inside the call (other waits on it may complete); a wait
     * left with nothing to wait for completes on the next loop turn. */
    sb_probe_wait *outer = p->creating; /* a callback run from here may start another wait */
    p->creating = w;
    for (size_t i = 0; i < k; i++) {
        probe *pr = on[i];
        if (pr->scrape)
            continue;
        uv_timer_stop(&pr->scrape_timer);
        if (start_scrape(pr) < 0)
            uv_timer_start(&pr->scrape_timer, on_scrape_timer, 0, 0); /* the regular path reports it */
    }
    p->creating = outer;
    if (w->n_on == 0)
        uv_timer_start(&w->timer, on_wait_deadline, 0, 0);
    return w;
}

void sb_prober_sync_cancel(sb_probe_wait *w)
{
    if (w)
        wait_end(w, false);
}

void sb_prober_sync_stats(const sb_prober *p, uint64_t *waits, uint64_t *timeouts)
{
    *waits = p->sync_waits;
    *timeouts = p->sync_timeouts;
}

const sb_probe_stats *sb_prober_stats(const sb_prober *p, uint32_t pool, uint32_t ep)
{
    size_t i = p->first[pool] + ep;
    return i < p->first[pool + 1] ? &p->probes[i].stats : NULL;
}

/* (Re)reads a probe's engine from its pool. A reload keeping engine: auto keeps what was
 * detected; any other change starts over (and forgets a mismatch: the next scrape decides). */
static void configure(probe *pr, const sb_pool_config *pc)
{
    sb_probe_engine *eg = &pr->stats.engine;
    const char *name = pc->engine ? pc->engine : "auto";
    bool automatic = !strcmp(name, "auto");
    sb_engine_kind kind = SB_ENGINE_VLLM; /* auto starts with vLLM's table, the most common */
    if (!automatic)
        sb_engine_kind_parse(name, &kind);
    pr->pc = pc;
    pr->models_due = true; /* at start, and after a reload (the served name may have changed) */
    /* Only llama.cpp serves /slots: a pool pointed there is llama.cpp, auto or not. */
    bool slots = pc->probe_path && !strcmp(pc->probe_path, "/slots");
    if (automatic && eg->automatic && eg->detected)
        kind = (sb_engine_kind)eg->kind;
    else if (automatic != eg->automatic || (!automatic && (int)kind != eg->kind) || kind == SB_ENGINE_CUSTOM) {
        eg->automatic = automatic;
        eg->detected = false;
        eg->mismatch = false;
        eg->have_looks_like = false;
    }
    if (automatic && slots) {
        kind = SB_ENGINE_LLAMACPP;
        eg->detected = true;
    }
    eg->kind = (int)kind;
    sb_engine_custom_names custom = {.running = pc->metric_running, .waiting = pc->metric_waiting,
                                     .kv_usage = pc->metric_kv_usage};
    sb_engine_map_init(&pr->map, kind, &custom);
    pr->use_slots = kind == SB_ENGINE_LLAMACPP && slots;
}

void sb_prober_reconfigure(sb_prober *p, const sb_config *cfg)
{
    for (size_t i = 0; i < cfg->n_pools; i++)
        for (size_t e = 0; e < cfg->pools[i].n_endpoints && p->first[i] + e < p->first[i + 1]; e++) {
            probe *pr = &p->probes[p->first[i] + e];
            configure(pr, &cfg->pools[i]);
            if (!pr->up)
                continue;
            /* Turned off: stop; turned on: start (a request in flight re-arms when it ends). */
            if (!pr->pc->health_interval_ms)
                uv_timer_stop(&pr->health_timer);
            else if (!pr->health && !uv_is_active((uv_handle_t *)&pr->health_timer))
                uv_timer_start(&pr->health_timer, on_health_timer, pr->pc->health_interval_ms, 0);
            if (!pr->pc->probe_enabled)
                uv_timer_stop(&pr->scrape_timer);
            else if (!pr->scrape && !uv_is_active((uv_handle_t *)&pr->scrape_timer))
                uv_timer_start(&pr->scrape_timer, on_scrape_timer, 0, 0);
        }
}
