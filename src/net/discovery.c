#include "net/discovery.h"

#include <http_parser.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "net/gateway_types.h"
#include "proto/json.h"
#include "proto/members.h"
#include "proto/openai_error.h"

/* Housekeeping cadence (TTL and drain checks). A TTL is honoured to within this; agents
 * heartbeat every second, and their TTL is five heartbeats. */
enum { TICK_MS = 100, APPLY_RETRY_MS = 1000, MAX_LABEL_BYTES = 128, MAX_TTL_MS = 86400000 };

/* One pool's `endpoints_from: {dns}`: a resolver on an interval. Heap-allocated and freed once
 * its timer has closed and its resolution (if one is out) has come back. */
typedef struct dns_watch {
    sb_discovery *d; /* NULL once discovery let go of it */
    char *pool, *host;
    uint16_t port;
    uint32_t interval_ms;
    uv_getaddrinfo_t gai;
    uv_timer_t timer;
    int refs; /* the open timer, and a resolution out */
    uint64_t resolutions, failures;
    int last_error;
    size_t addresses, dropped;
} dns_watch;

struct sb_discovery {
    sb_discovery_env env;
    sb_config *base_ref; /* an effective config with no members: holds the file's config alive */
    sb_members members;
    uv_timer_t apply_timer, tick_timer;
    int handles_open;
    bool freeing, apply_armed;
    dns_watch **watches;
    size_t n_watches;
    uint64_t applies, apply_failures, registered, deleted;
};

static const sb_config *base_of(const sb_discovery *d)
{
    return sb_config_base(d->base_ref);
}

/* ---- applying changes ---- */

sb_config *sb_discovery_effective(sb_discovery *d, sb_config *base)
{
    size_t cap = d->members.n ? d->members.n : 1;
    sb_member *view = sb_calloc(cap, sizeof *view);
    if (!view)
        return NULL;
    size_t n = sb_members_view(&d->members, base, view, cap);
    sb_config *cfg = sb_config_with_members(base, view, n);
    sb_free(view);
    return cfg;
}

static void on_apply(uv_timer_t *t)
{
    sb_discovery *d = t->data;
    d->apply_armed = false;
    sb_config *cfg = sb_discovery_effective(d, (sb_config *)base_of(d));
    if (cfg && d->env.apply(d->env.arg, cfg) == 0) {
        d->applies++;
        return;
    }
    d->apply_failures++;
    SB_WARN("membership change not applied (%s); trying again in %d ms", cfg ? "refused" : "out of memory",
            APPLY_RETRY_MS);
    d->apply_armed = true;
    uv_timer_start(&d->apply_timer, on_apply, APPLY_RETRY_MS, 0);
}

/* Coalesces: the first change arms the timer, later ones ride along. */
static void schedule_apply(sb_discovery *d)
{
    if (d->apply_armed || d->freeing)
        return;
    d->apply_armed = true;
    uv_timer_start(&d->apply_timer, on_apply, base_of(d)->discovery_apply_ms, 0);
}

/* The current gateway's endpoint of that pool and address, or NULL. */
static sb_endpoint *current_endpoint(sb_discovery *d, const char *pool, const char *address, sb_gateway **gwp)
{
    sb_gateway *gw = d->env.current(d->env.arg);
    if (gwp)
        *gwp = gw;
    if (!gw)
        return NULL;
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        const sb_pool_config *pc = &gw->cfg->pools[p];
        if (strcmp(pc->name, pool))
            continue;
        for (size_t e = 0; e < pc->n_endpoints; e++)
            if (!strcmp(pc->endpoints[e].address, address))
                return sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
    }
    return NULL;
}

/* A draining member may go once the serving gateway has nothing in flight on it. */
static bool member_idle(void *arg, const char *pool, const char *address)
{
    sb_endpoint *ep = current_endpoint(arg, pool, address, NULL);
    return !ep || ep->in_flight == 0;
}

static void on_tick(uv_timer_t *t)
{
    sb_discovery *d = t->data;
    if (sb_members_tick(&d->members, uv_hrtime(), SB_MS(base_of(d)->discovery_drain_ms), member_idle, d))
        schedule_apply(d);
}

/* ---- DNS watches ---- */

static void watch_unref(dns_watch *w)
{
    if (--w->refs > 0)
        return;
    sb_free(w->pool);
    sb_free(w->host);
    sb_free(w);
}

static void on_watch_timer_closed(uv_handle_t *h)
{
    watch_unref(h->data);
}

static void watch_resolve(uv_timer_t *t);

static void on_watch_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    dns_watch *w = req->data;
    sb_discovery *d = w->d;
    if (!d) {
        if (res)
            uv_freeaddrinfo(res);
        watch_unref(w);
        return;
    }
    w->resolutions++;
    if (status < 0 || !res) {
        w->failures++;
        w->last_error = status < 0 ? status : UV_EAI_NONAME;
        SB_WARN("pool %s: endpoints_from dns %s:%u: %s; keeping the last known %zu addresses", w->pool, w->host,
                w->port, uv_strerror(w->last_error), w->addresses);
    } else {
        /* Bounded by the pool's member budget (one more to tell "too many" apart). */
        size_t cap = base_of(d)->discovery_max_endpoints + 1, n = 0;
        char(*names)[64] = sb_calloc(cap, sizeof *names);
        const char **hosts = sb_calloc(cap, sizeof *hosts);
        size_t extra = 0;
        for (struct addrinfo *a = res; a && names && hosts; a = a->ai_next) {
            char ip[64];
            int rc = a->ai_family == AF_INET6  ? uv_ip6_name((struct sockaddr_in6 *)a->ai_addr, ip, sizeof ip)
                     : a->ai_family == AF_INET ? uv_ip4_name((struct sockaddr_in *)a->ai_addr, ip, sizeof ip)
                                               : -1;
            if (rc != 0)
                continue;
            bool dup = false;
            for (size_t i = 0; i < n && !dup; i++)
                dup = !strcmp(names[i], ip);
            if (dup)
                continue;
            if (n == cap) {
                extra++;
                continue;
            }
            memcpy(names[n], ip, sizeof ip);
            hosts[n] = names[n];
            n++;
        }
        if (names && hosts) {
            w->last_error = 0;
            size_t dropped = 0;
            if (sb_members_sync_dns(&d->members, w->pool, hosts, n, w->port, uv_hrtime(), &dropped)) {
                SB_INFO("pool %s: endpoints_from dns %s:%u now gives %zu addresses", w->pool, w->host, w->port, n);
                schedule_apply(d);
            }
            w->addresses = n;
            w->dropped = dropped + extra;
            if (w->dropped)
                SB_WARN("pool %s: dns %s gives more addresses than discovery.max_endpoints (%zu); %zu left out",
                        w->pool, w->host, base_of(d)->discovery_max_endpoints, w->dropped);
        } else {
            w->failures++;
            w->last_error = UV_ENOMEM;
        }
        sb_free(names);
        sb_free(hosts);
    }
    if (res)
        uv_freeaddrinfo(res);
    watch_unref(w); /* the resolution's reference */
    if (w->d)
        uv_timer_start(&w->timer, watch_resolve, w->interval_ms, 0);
}

static void watch_resolve(uv_timer_t *t)
{
    dns_watch *w = t->data;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char port[8];
    snprintf(port, sizeof port, "%u", w->port);
    w->gai.data = w;
    int rc = uv_getaddrinfo(t->loop, &w->gai, on_watch_resolved, w->host, port, &hints);
    if (rc < 0) {
        w->failures++;
        w->last_error = rc;
        uv_timer_start(&w->timer, watch_resolve, w->interval_ms, 0);
        return;
    }
    w->refs++;
}

static void stop_watches(sb_discovery *d)
{
    for (size_t i = 0; i < d->n_watches; i++) {
        dns_watch *w = d->watches[i];
        w->d = NULL;
        if (w->refs > 1)
            uv_cancel((uv_req_t *)&w->gai); /* its callback still comes, and drops its reference */
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, on_watch_timer_closed);
    }
    sb_free(d->watches);
    d->watches = NULL;
    d->n_watches = 0;
}

/* One watch per pool of base with endpoints_from; DNS members of pools without one drain. */
static void start_watches(sb_discovery *d)
{
    const sb_config *base = base_of(d);
    uv_loop_t *loop = d->env.loop;
    d->watches = sb_calloc(base->n_pools ? base->n_pools : 1, sizeof *d->watches);
    for (size_t p = 0; p < base->n_pools; p++) {
        const sb_pool_config *pc = &base->pools[p];
        if (!pc->dns_host) {
            if (sb_members_sync_dns(&d->members, pc->name, NULL, 0, 0, uv_hrtime(), NULL))
                schedule_apply(d);
            continue;
        }
        dns_watch *w = d->watches ? sb_calloc(1, sizeof *w) : NULL;
        if (w) {
            w->pool = sb_strdup(pc->name);
            w->host = sb_strdup(pc->dns_host);
        }
        if (!w || !w->pool || !w->host) {
            if (w) {
                sb_free(w->pool);
                sb_free(w->host);
                sb_free(w);
            }
            SB_ERROR("pool %s: endpoints_from: out of memory; no discovery for it", pc->name);
            continue;
        }
        w->d = d;
        w->port = pc->dns_port;
        w->interval_ms = pc->dns_interval_ms;
        w->refs = 1;
        uv_timer_init(loop, &w->timer);
        w->timer.data = w;
        uv_unref((uv_handle_t *)&w->timer);
        uv_timer_start(&w->timer, watch_resolve, 0, 0);
        d->watches[d->n_watches++] = w;
    }
}

/* ---- life ---- */

int sb_discovery_new(const sb_discovery_env *env, sb_config *base, sb_discovery **out)
{
    sb_discovery *d = sb_calloc(1, sizeof *d);
    if (!d)
        return UV_ENOMEM;
    d->env = *env;
    if (!(d->base_ref = sb_config_with_members(base, NULL, 0))) {
        sb_free(d);
        return UV_ENOMEM;
    }
    d->members.max_per_pool = base->discovery_max_endpoints;
    uv_timer_init(env->loop, &d->apply_timer);
    uv_timer_init(env->loop, &d->tick_timer);
    d->apply_timer.data = d->tick_timer.data = d;
    d->handles_open = 2;
    /* Housekeeping never keeps the loop alive by itself. */
    uv_unref((uv_handle_t *)&d->tick_timer);
    uv_timer_start(&d->tick_timer, on_tick, TICK_MS, TICK_MS);
    start_watches(d);
    *out = d;
    return 0;
}

void sb_discovery_set_base(sb_discovery *d, sb_config *base)
{
    sb_config *ref = sb_config_with_members(base, NULL, 0);
    if (!ref) {
        SB_WARN("reload: membership keeps the previous file's discovery settings (out of memory)");
        return;
    }
    sb_config_free(d->base_ref);
    d->base_ref = ref;
    d->members.max_per_pool = base->discovery_max_endpoints;
    stop_watches(d);
    start_watches(d);
}

static void on_handle_closed(uv_handle_t *h)
{
    sb_discovery *d = h->data;
    if (--d->handles_open > 0)
        return;
    sb_members_free(&d->members);
    sb_config_free(d->base_ref);
    sb_free(d);
}

void sb_discovery_free(sb_discovery *d)
{
    if (!d || d->freeing)
        return;
    d->freeing = true;
    stop_watches(d);
    uv_timer_stop(&d->apply_timer);
    uv_timer_stop(&d->tick_timer);
    uv_close((uv_handle_t *)&d->apply_timer, on_handle_closed);
    uv_close((uv_handle_t *)&d->tick_timer, on_handle_closed);
}

/* ---- the admin API ---- */

static bool path_is(const sb_http_req *req, const char *p)
{
    size_t n = strlen(p);
    return req->path_len == n && !memcmp(req->path, p, n);
}

bool sb_discovery_admin_path(const sb_http_req *req)
{
    return path_is(req, "/admin/endpoints");
}

static void answer_error(sb_http_req *req, int status, const char *message, const char *code)
{
    sb_buf b = {0};
    if (sb_openai_error(&b, message, status >= 500 ? "server_error" : "invalid_request_error", NULL, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return;
    }
    sb_http_respond(req, status, "application/json", status == 405 ? "Allow: GET, POST, DELETE\r\n" : NULL, b.data,
                    b.len);
    sb_buf_free(&b);
}

static void answer_json(sb_http_req *req, int status, sb_buf *b)
{
    if (!b->data)
        answer_error(req, 500, "out of memory", NULL);
    else
        sb_http_respond(req, status, "application/json", NULL, b->data, b->len);
    sb_buf_free(b);
}

static const char *source_name(enum sb_endpoint_source s)
{
    return s == SB_EP_DNS ? "dns" : s == SB_EP_API ? "api" : "config";
}

const char *sb_discovery_down_reason(const sb_gateway *gw, uint32_t pool, uint32_t e, char *buf, size_t cap)
{
    int rs = sb_upstream_resolve_status(gw->ups[gw->pool_first_up[pool] + e]);
    if (rs < 0) {
        snprintf(buf, cap, "dns: %s (retried with backoff)", uv_strerror(rs));
        return buf;
    }
    sb_endpoint *ep = sb_router_endpoint(gw->router, pool, e);
    if (ep->active_down)
        return "health check failing";
    if (ep->health == SB_HEALTH_EJECTED || ep->health == SB_HEALTH_HALF_OPEN)
        return "ejected after failures";
    return NULL;
}

static void render_endpoint(sb_discovery *d, sb_gateway *gw, size_t p, size_t e, sb_ns now, sb_buf *b)
{
    const sb_pool_config *pc = &gw->cfg->pools[p];
    const sb_endpoint_config *ec = &pc->endpoints[e];
    sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
    sb_member_entry *m = sb_members_find(&d->members, pc->name, ec->address);
    char why[160];
    const char *state = "active", *reason = NULL;
    if (ep->draining) {
        state = "draining";
        reason = m && m->drain_reason ? m->drain_reason : "configured draining";
    } else if ((reason = sb_discovery_down_reason(gw, (uint32_t)p, (uint32_t)e, why, sizeof why))) {
        state = "down";
    }
    sb_buf_puts(b, "{\"address\":\"");
    sb_buf_json_escape(b, ec->address, strlen(ec->address));
    const char *engine = m && m->engine ? m->engine : pc->engine;
    sb_buf_printf(b, "\",\"source\":\"%s\",\"engine\":\"", source_name(ec->source));
    sb_buf_json_escape(b, engine, strlen(engine));
    sb_buf_printf(b, "\",\"state\":\"%s\",\"reason\":", state);
    if (reason) {
        sb_buf_puts(b, "\"");
        sb_buf_json_escape(b, reason, strlen(reason));
        sb_buf_puts(b, "\"");
    } else {
        sb_buf_puts(b, "null");
    }
    if (m && m->deadline_ns && !m->draining)
        sb_buf_printf(b, ",\"ttl_left_ms\":%llu",
                      (unsigned long long)(m->deadline_ns > now ? (m->deadline_ns - now) / SB_NS_PER_MS : 0));
    else
        sb_buf_puts(b, ",\"ttl_left_ms\":null");
    sb_buf_printf(b, ",\"in_flight\":%u,\"labels\":{", ep->in_flight);
    for (size_t l = 0; l < ec->n_labels; l++) {
        sb_buf_puts(b, l ? ",\"" : "\"");
        sb_buf_json_escape(b, ec->label_keys[l], strlen(ec->label_keys[l]));
        sb_buf_puts(b, "\":\"");
        sb_buf_json_escape(b, ec->label_values[l], strlen(ec->label_values[l]));
        sb_buf_puts(b, "\"");
    }
    sb_buf_puts(b, "}}");
}

static void render_list(sb_discovery *d, sb_buf *b)
{
    sb_gateway *gw = d->env.current(d->env.arg);
    sb_ns now = uv_hrtime();
    sb_buf_puts(b, "{\"pools\":[");
    for (size_t p = 0; gw && p < gw->cfg->n_pools; p++) {
        const sb_pool_config *pc = &gw->cfg->pools[p];
        sb_buf_printf(b, "%s{\"pool\":\"%s\",\"endpoints\":[", p ? "," : "", pc->name);
        for (size_t e = 0; e < pc->n_endpoints; e++) {
            if (e)
                sb_buf_puts(b, ",");
            render_endpoint(d, gw, p, e, now, b);
        }
        sb_buf_puts(b, "]}");
    }
    sb_buf_puts(b, "],\"discovery\":[");
    for (size_t i = 0; i < d->n_watches; i++) {
        const dns_watch *w = d->watches[i];
        sb_buf_printf(b, "%s{\"pool\":\"%s\",\"dns\":\"", i ? "," : "", w->pool);
        sb_buf_json_escape(b, w->host, strlen(w->host));
        sb_buf_printf(b,
                      ":%u\",\"interval_ms\":%u,\"addresses\":%zu,\"resolutions\":%llu,\"failures\":%llu,"
                      "\"left_out\":%zu,\"last_error\":",
                      w->port, w->interval_ms, w->addresses, (unsigned long long)w->resolutions,
                      (unsigned long long)w->failures, w->dropped);
        if (w->last_error)
            sb_buf_printf(b, "\"%s\"}", uv_strerror(w->last_error));
        else
            sb_buf_puts(b, "null}");
    }
    sb_buf_puts(b, "]}");
}

void sb_discovery_render_metrics(const sb_discovery *d, sb_buf *b)
{
    if (!d)
        return;
    sb_buf_printf(b,
                  "# HELP switchboard_discovery_applies_total Membership changes applied (registrations, DNS).\n"
                  "# TYPE switchboard_discovery_applies_total counter\n"
                  "switchboard_discovery_applies_total %llu\n"
                  "# HELP switchboard_discovery_apply_failures_total Membership changes refused or out of memory.\n"
                  "# TYPE switchboard_discovery_apply_failures_total counter\n"
                  "switchboard_discovery_apply_failures_total %llu\n"
                  "# HELP switchboard_discovery_registrations_total POST /admin/endpoints accepted.\n"
                  "# TYPE switchboard_discovery_registrations_total counter\n"
                  "switchboard_discovery_registrations_total %llu\n"
                  "# HELP switchboard_discovery_dynamic_endpoints Endpoints from DNS or the API now.\n"
                  "# TYPE switchboard_discovery_dynamic_endpoints gauge\n"
                  "switchboard_discovery_dynamic_endpoints %zu\n",
                  (unsigned long long)d->applies, (unsigned long long)d->apply_failures,
                  (unsigned long long)d->registered, d->members.n);
    if (!d->n_watches)
        return;
    sb_buf_puts(b, "# HELP switchboard_dns_resolutions_total Answers to a pool's endpoints_from name.\n"
                   "# TYPE switchboard_dns_resolutions_total counter\n");
    for (size_t i = 0; i < d->n_watches; i++)
        sb_buf_printf(b, "switchboard_dns_resolutions_total{pool=\"%s\"} %llu\n", d->watches[i]->pool,
                      (unsigned long long)d->watches[i]->resolutions);
    sb_buf_puts(b, "# HELP switchboard_dns_failures_total Failed resolutions (the last known set was kept).\n"
                   "# TYPE switchboard_dns_failures_total counter\n");
    for (size_t i = 0; i < d->n_watches; i++)
        sb_buf_printf(b, "switchboard_dns_failures_total{pool=\"%s\"} %llu\n", d->watches[i]->pool,
                      (unsigned long long)d->watches[i]->failures);
}

/* A JSON string value without escapes (addresses, names and labels never need them), as a
 * NUL-terminated copy in buf. false if it is not a string, has escapes, or is too long. */
static bool plain_string(const char *body, const sb_json_tok *t, char *buf, size_t cap)
{
    size_t n = (size_t)(t->end - t->start);
    if (t->type != SB_JSON_STRING || n == 0 || n >= cap || memchr(body + t->start, '\\', n))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)body[t->start + i] < 0x20)
            return false;
    memcpy(buf, body + t->start, n);
    buf[n] = '\0';
    return true;
}

/* The pool that serves `model` (a served name or an alias) in the current config; -1 if none. */
static int pool_of_model(const sb_config *cfg, const char *model)
{
    for (size_t p = 0; p < cfg->n_pools; p++)
        for (size_t i = 0; i < cfg->pools[p].n_models; i++)
            if (!strcmp(cfg->pools[p].models[i], model))
                return (int)p;
    return -1;
}

/* The pool of base other than `pool` that lists (host, port) in the file; -1 if none. */
static int static_elsewhere(const sb_config *base, size_t pool, const char *address, bool *here)
{
    *here = false;
    for (size_t p = 0; p < base->n_pools; p++)
        for (size_t e = 0; e < base->pools[p].n_endpoints; e++)
            if (!strcmp(base->pools[p].endpoints[e].address, address)) {
                if (p == pool)
                    *here = true;
                else
                    return (int)p;
            }
    return -1;
}

/* What the file allows in labels (letters, digits, '-', '_', '.', '/'): the labels filter
 * compares them byte for byte, and the admin pages print them. */
static bool label_chars(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("-_./", *s)))
            return false;
    return true;
}

static bool valid_engine(const char *s)
{
    static const char *const engines[] = {"vllm", "sglang", "llama.cpp", "llamacpp", "trtllm", "custom"};
    for (size_t i = 0; i < sizeof engines / sizeof *engines; i++)
        if (!strcmp(s, engines[i]))
            return true;
    return false;
}

static void registration_answer(sb_http_req *req, int status, const char *pool, const char *address, const char *source,
                                uint64_t ttl_ms)
{
    sb_buf b = {0};
    sb_buf_printf(&b, "{\"pool\":\"%s\",\"address\":\"", pool);
    sb_buf_json_escape(&b, address, strlen(address));
    sb_buf_printf(&b, "\",\"state\":\"active\",\"source\":\"%s\",\"ttl_ms\":", source);
    if (ttl_ms)
        sb_buf_printf(&b, "%llu}", (unsigned long long)ttl_ms);
    else
        sb_buf_puts(&b, "null}");
    answer_json(req, status, &b);
}

/* A registration's body, checked, or why it is refused. */
typedef struct reg_form {
    char address[300], host[260], engine[32];
    uint16_t port;
    int pool; /* index in the file's config */
    char keys[SB_MAX_LABELS][MAX_LABEL_BYTES], values[SB_MAX_LABELS][MAX_LABEL_BYTES];
    const char *lk[SB_MAX_LABELS], *lv[SB_MAX_LABELS];
    size_t n_labels;
    uint64_t ttl_ms;
    int status; /* the refusal: status, code and message */
    const char *code;
    char msg[400];
} reg_form;

static bool __attribute__((format(printf, 4, 5)))
refuse(reg_form *f, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->status = status;
    f->code = code;
    return false;
}

/* `pool` by name, else `model` (a served name or alias): the pool of base it names. */
static bool form_pool(const sb_config *base, const char *body, const sb_json_tok *tpool, const sb_json_tok *tmodel,
                      reg_form *f)
{
    char name[160];
    if (tpool) {
        if (!plain_string(body, tpool, name, sizeof name))
            return refuse(f, 400, "invalid_registration", "'pool' must be a pool name");
        for (size_t p = 0; p < base->n_pools; p++) {
            if (!strcmp(base->pools[p].name, name)) {
                f->pool = (int)p;
                return true;
            }
        }
        return refuse(f, 404, "pool_not_found", "no pool named '%s'", name);
    }
    if (!tmodel)
        return refuse(f, 400, "invalid_registration", "give 'pool' or 'model'");
    if (!plain_string(body, tmodel, name, sizeof name))
        return refuse(f, 400, "invalid_registration", "'model' must be a model name");
    if ((f->pool = pool_of_model(base, name)) < 0)
        return refuse(f, 404, "model_not_found", "no pool serves the model '%s'", name);
    return true;
}

/* `labels`: an object of at most SB_MAX_LABELS plain string values (toks[i] is the object). */
static bool form_labels(const char *body, const sb_json_tok *toks, int i, reg_form *f)
{
    const sb_json_tok *lt = &toks[i];
    if (lt->type != SB_JSON_OBJECT || lt->size > SB_MAX_LABELS)
        return refuse(f, 400, "invalid_registration", "'labels' must be an object of at most %d string values",
                      SB_MAX_LABELS);
    for (int n = 0, k = i + 1; n < lt->size; n++, k += 2) {
        if (!plain_string(body, &toks[k], f->keys[n], MAX_LABEL_BYTES) ||
            !plain_string(body, &toks[k + 1], f->values[n], MAX_LABEL_BYTES) || !label_chars(f->keys[n]) ||
            !label_chars(f->values[n]))
            return refuse(f, 400, "invalid_registration",
                          "labels: names and values are 1 to 127 letters, digits, '-', '_', '.' or '/'");
        f->lk[n] = f->keys[n];
        f->lv[n] = f->values[n];
        f->n_labels = (size_t)n + 1;
    }
    return true;
}

static bool form_ttl(const char *body, const sb_json_tok *t, reg_form *f)
{
    char num[16];
    size_t len = (size_t)(t->end - t->start);
    if (t->type != SB_JSON_PRIMITIVE || len == 0 || len >= sizeof num)
        return refuse(f, 400, "invalid_registration", "'ttl_ms' must be an integer from 0 to %d", MAX_TTL_MS);
    memcpy(num, body + t->start, len);
    num[len] = '\0';
    if (strspn(num, "0123456789") != len || (f->ttl_ms = strtoull(num, NULL, 10)) > MAX_TTL_MS)
        return refuse(f, 400, "invalid_registration", "'ttl_ms' must be an integer from 0 to %d", MAX_TTL_MS);
    return true;
}

/* The body of POST /admin/endpoints into f (true), or the refusal in f (false). Linear in the
 * body; at most 64 JSON tokens and 3 levels. */
static bool parse_registration(const sb_config *base, const char *body, size_t len, reg_form *f)
{
    sb_json_tok toks[64];
    sb_json j = {.max_depth = 3};
    sb_json_lend(&j, toks, sizeof toks);
    int n = len ? sb_json_parse(&j, body, len) : SB_JSON_BAD;
    if (n == SB_JSON_TOO_MANY || n == SB_JSON_TOO_DEEP)
        return refuse(f, 400, "invalid_registration", "the registration has too many fields or nests too deep");
    if (n < 1 || toks[0].type != SB_JSON_OBJECT)
        return refuse(f, 400, "invalid_registration",
                      "the body must be a JSON object like {\"address\":\"host:port\",\"pool\":\"name\"}");
    static const sb_json_key keys[] = {{"address", 7}, {"pool", 4},   {"model", 5},
                                       {"engine", 6},  {"labels", 6}, {"ttl_ms", 6}};
    int v[6];
    sb_json_find_keys(toks, n, body, 0, keys, 6, v);
    if (v[0] < 0 || !plain_string(body, &toks[v[0]], f->address, sizeof f->address))
        return refuse(f, 400, "invalid_registration", "'address' (\"host:port\") is required");
    const char *why = sb_config_split_address(f->address, f->host, sizeof f->host, &f->port);
    if (why)
        return refuse(f, 400, "invalid_registration", "bad address '%.300s': %s", f->address, why);
    /* Spelled as the file's endpoints are ("[v6]:port"), so lookups compare like with like. */
    if (!sb_config_format_address(f->host, f->port, f->address, sizeof f->address))
        return refuse(f, 400, "invalid_registration", "address too long");
    if (!form_pool(base, body, v[1] >= 0 ? &toks[v[1]] : NULL, v[2] >= 0 ? &toks[v[2]] : NULL, f))
        return false;
    if (v[3] >= 0 && (!plain_string(body, &toks[v[3]], f->engine, sizeof f->engine) || !valid_engine(f->engine)))
        return refuse(f, 400, "invalid_registration", "'engine' must be one of vllm, sglang, llama.cpp, trtllm");
    return (v[4] < 0 || form_labels(body, toks, v[4], f)) && (v[5] < 0 || form_ttl(body, &toks[v[5]], f));
}

static void handle_post(sb_discovery *d, sb_http_req *req)
{
    const sb_config *base = base_of(d);
    reg_form f = {.pool = -1};
    if (!parse_registration(base, req->body, req->body_len, &f)) {
        answer_error(req, f.status, f.msg, f.code);
        return;
    }
    const sb_pool_config *pc = &base->pools[f.pool];
    bool here;
    int other = static_elsewhere(base, (size_t)f.pool, f.address, &here);
    if (other >= 0) {
        refuse(&f, 409, "endpoint_conflict",
               "%s is a statically configured endpoint of pool '%s'; register it there or edit the file", f.address,
               base->pools[other].name);
        answer_error(req, f.status, f.msg, f.code);
        return;
    }
    if (here) { /* in the file already: nothing to add, and no TTL applies to it */
        registration_answer(req, 200, pc->name, f.address, "config", 0);
        return;
    }
    sb_registration r = {.pool = pc->name,
                         .host = f.host,
                         .port = f.port,
                         .engine = f.engine[0] ? f.engine : NULL,
                         .label_keys = f.lk,
                         .label_values = f.lv,
                         .n_labels = f.n_labels,
                         .ttl_ms = f.ttl_ms};
    bool changed;
    int rc = sb_members_register(&d->members, &r, uv_hrtime(), &changed);
    if (rc == SB_MEMBERS_FULL) {
        refuse(&f, 429, "too_many_endpoints", "pool '%s' has discovery.max_endpoints (%zu) dynamic endpoints already",
               pc->name, base->discovery_max_endpoints);
        answer_error(req, f.status, f.msg, f.code);
        return;
    }
    if (rc < 0) {
        answer_error(req, 500, "out of memory", NULL);
        return;
    }
    d->registered++;
    if (changed) /* a heartbeat that only resets the TTL costs no rebuild */
        schedule_apply(d);
    if (rc == SB_MEMBERS_ADDED)
        SB_INFO("pool %s: endpoint %s registered", pc->name, f.address);
    registration_answer(req, rc == SB_MEMBERS_ADDED ? 201 : 200, pc->name, f.address, "api", f.ttl_ms);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The value of `name` in the query of req's URL, percent-decoded into buf. */
static bool query_param(const sb_http_req *req, const char *name, char *buf, size_t cap)
{
    const char *q = memchr(req->url, '?', req->url_len);
    if (!q)
        return false;
    const char *end = req->url + req->url_len;
    size_t nl = strlen(name);
    for (const char *s = q + 1; s < end;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *stop = amp ? amp : end;
        if ((size_t)(stop - s) > nl && !memcmp(s, name, nl) && s[nl] == '=') {
            size_t k = 0;
            for (const char *c = s + nl + 1; c < stop; c++) {
                char ch = *c;
                if (ch == '%' && stop - c >= 3 && hexval(c[1]) >= 0 && hexval(c[2]) >= 0) {
                    ch = (char)(hexval(c[1]) * 16 + hexval(c[2]));
                    c += 2;
                } else if (ch == '+') {
                    ch = ' ';
                }
                if (k + 1 >= cap || ch == '\0')
                    return false;
                buf[k++] = ch;
            }
            buf[k] = '\0';
            return k > 0;
        }
        s = stop + 1;
    }
    return false;
}

static void handle_delete(sb_discovery *d, sb_http_req *req)
{
    char pool[160], address[300], host[260];
    uint16_t port;
    if (!query_param(req, "pool", pool, sizeof pool) || !query_param(req, "address", address, sizeof address)) {
        answer_error(req, 400, "use DELETE /admin/endpoints?pool=P&address=host:port", "invalid_request");
        return;
    }
    /* Spelled as the table spells it ("[::1]:9000"), whatever the caller wrote. */
    if (!sb_config_split_address(address, host, sizeof host, &port))
        sb_config_format_address(host, port, address, sizeof address);
    if (sb_members_remove(&d->members, pool, address, uv_hrtime()) < 0) {
        bool here = false;
        const sb_config *base = base_of(d);
        for (size_t p = 0; p < base->n_pools; p++)
            if (!strcmp(base->pools[p].name, pool))
                static_elsewhere(base, p, address, &here);
        char msg[640];
        if (here)
            snprintf(msg, sizeof msg, "%s is a statically configured endpoint of pool '%s': edit the file and reload",
                     address, pool);
        else
            snprintf(msg, sizeof msg, "pool '%s' has no registered or discovered endpoint %s", pool, address);
        answer_error(req, here ? 409 : 404, msg, here ? "endpoint_conflict" : "endpoint_not_found");
        return;
    }
    d->deleted++;
    SB_INFO("pool %s: endpoint %s draining (deleted), removed once idle", pool, address);
    schedule_apply(d);
    sb_buf b = {0};
    sb_buf_printf(&b, "{\"pool\":\"%s\",\"address\":\"", pool);
    sb_buf_json_escape(&b, address, strlen(address));
    sb_buf_puts(&b, "\",\"state\":\"draining\"}");
    answer_json(req, 202, &b);
}

void sb_discovery_admin(sb_discovery *d, sb_http_req *req)
{
    if (!d) {
        answer_error(req, 503, "membership is not running", NULL);
        return;
    }
    if (req->method == HTTP_GET || req->method == HTTP_HEAD) {
        sb_buf b = {0};
        render_list(d, &b);
        answer_json(req, 200, &b);
    } else if (req->method == HTTP_POST) {
        handle_post(d, req);
    } else if (req->method == HTTP_DELETE) {
        handle_delete(d, req);
    } else {
        answer_error(req, 405, "method not allowed: use GET, POST or DELETE", NULL);
    }
}
