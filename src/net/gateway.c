#include "net/gateway.h"
#include "net/admin.h"
#include "net/admission.h"
#include "net/errors.h"
#include "net/gateway_types.h"
#include "net/proxy.h"
#include "net/stats.h"

#include <http_parser.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "core/adaptive.h"
#include "core/control.h"
#include "net/probe.h"
#include "proto/engine_metrics.h"
#include "proto/openai_error.h"
#include "proto/prompt.h"

typedef struct route {
    const char *path;
    enum sb_api_kind kind;
} route;

/* The inference routes: bodies are inspected and forwarded. */
static const route inference_routes[] = {
    {"/v1/chat/completions", SB_API_CHAT},
    {"/v1/completions", SB_API_COMPLETIONS},
    {"/v1/embeddings", SB_API_EMBEDDINGS},
    {"/v1/responses", SB_API_RESPONSES},
};

/* The inspector's token array (gw->ictx) is reused across requests so that an ordinary one
 * tokenizes with no allocation; one that grew it past this many tokens (~1.3 MiB at 20 bytes
 * a token; limits.max_json_tokens lets one request grow it to ~20 MiB, outside every budget)
 * frees it once done, so the next ordinary request starts small again. 64 Ki tokens is a
 * chat request of several hundred KiB. */
#define INSPECT_KEEP_TOKENS ((size_t)64 * 1024)

static void exchange_done(sb_gateway *gw);
static sb_snapshot *snapshot_ref(sb_gateway *gw);
static void snapshot_unref(sb_gateway *gw, sb_snapshot *snap);

static void inspector_trim(sb_gateway *gw)
{
    if (gw->ictx.json.cap_tokens > INSPECT_KEEP_TOKENS)
        sb_inspect_ctx_free(&gw->ictx);
}

static bool path_is(const sb_http_req *req, const char *path)
{
    size_t n = strlen(path);
    return req->path_len == n && memcmp(req->path, path, n) == 0;
}

/* Who sent a request, from its Authorization bearer token: computed once per request. */
typedef struct caller {
    uint64_t key_id;       /* 64 bits of the token's SHA-256; 0: no bearer token */
    const sb_api_key *key; /* the configured key it matches, or NULL */
} caller;

static caller caller_of(const sb_gateway *gw, const sb_http_req *req)
{
    caller c = {0};
    const sb_http_header *h = sb_http_req_header(req, "authorization");
    const char *tok;
    size_t n;
    if (!h || !sb_auth_bearer(h->value, h->value_len, &tok, &n))
        return c;
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest(tok, n, d);
    memcpy(&c.key_id, d, sizeof c.key_id);
    c.key_id |= 1; /* never 0 */
    c.key = sb_auth_keys_find(&gw->cfg->api_keys, d);
    return c;
}

/* 401 as OpenAI answers it (type invalid_request_error, code invalid_api_key), never quoting
 * what the client sent. */
static void refuse_unauthorized(sb_gateway *gw, sb_http_req *req, bool had_token)
{
    gw->counters.unauthorized[0]++;
    sb_gateway_error_with(gw, req, 401,
                          had_token ? "Incorrect API key provided. You can find your API key with the operator of "
                                      "this gateway."
                                    : "You didn't provide an API key. You need to provide your API key in an "
                                      "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                          "invalid_request_error", "invalid_api_key", "WWW-Authenticate: Bearer realm=\"switchboard\"\r\n");
}

/* The session affinity key: the configured header, else the request's `user`, else the API
 * key (its digest), else the client's address (without its port). Never 0 (0 means "none"). */
static uint64_t session_key(const sb_gateway *gw, const sb_http_req *req, const sb_inspect_result *res,
                            const caller *who)
{
    const sb_http_header *h = gw->cfg->session_header ? sb_http_req_header(req, gw->cfg->session_header) : NULL;
    uint64_t k;
    if (h && h->value_len)
        k = XXH3_64bits_withSeed(h->value, h->value_len, 1);
    else if (res->user_len)
        k = XXH3_64bits_withSeed(res->user, res->user_len, 2);
    else if (who->key_id)
        k = who->key_id;
    else {
        const char *colon = strrchr(req->peer, ':');
        k = XXH3_64bits_withSeed(req->peer, colon ? (size_t)(colon - req->peer) : strlen(req->peer), 4);
    }
    return k ? k : 1;
}

/* No model named: the default pool serves it under its served name, inserted as the object's
 * first member. (A body that names a model of the wrong type, or null, is still refused: it
 * said something, and it was not a model.) Returns true (res and *m set) if the default pool
 * takes the request. */
static bool default_model(sb_gateway *gw, const sb_http_req *req, sb_inspect_result *res, sb_model_match *m,
                          bool *comma)
{
    bool insert = false;
    for (size_t p = 0; p < gw->cfg->n_pools; p++)
        if (!strcmp(gw->cfg->pools[p].name, gw->cfg->default_pool)) {
            const char *served = gw->cfg->pools[p].models[0];
            if (sb_router_resolve(gw->router, served, strlen(served), m) == 0) {
                const char *open = memchr(req->body, '{', req->body_len);
                size_t at = open ? (size_t)(open - req->body) + 1 : 0;
                size_t k = at;
                while (k < req->body_len && strchr(" \t\r\n", req->body[k]))
                    k++;
                *comma = k < req->body_len && req->body[k] != '}';
                res->model_tok_start = res->model_tok_end = at;
                snprintf(res->model, sizeof(res->model), "%s", served);
                res->model_len = strlen(served);
                insert = open != NULL;
            }
            break;
        }
    return insert;
}

/* Answers a request the inspector refused (rc, not SB_INSPECT_OK). */
static void refuse_inspected(sb_gateway *gw, sb_http_req *req, int rc, const sb_inspect_result *res)
{
    inspector_trim(gw); /* the tokens are not needed past this point */
    char msg[200];
    const char *param = NULL;
    switch (rc) {
    case SB_INSPECT_NO_MODEL:
        snprintf(msg, sizeof(msg), "you must provide a model parameter (a string)");
        param = "model";
        break;
    case SB_INSPECT_BAD_FIELD:
        snprintf(msg, sizeof(msg), "invalid type or value for '%s'", res->error_field ? res->error_field : "?");
        param = res->error_field;
        break;
    case SB_INSPECT_TOO_COMPLEX:
        snprintf(msg, sizeof(msg), "request body has more than %zu JSON values (limits.max_json_tokens)",
                 gw->cfg->max_json_tokens);
        sb_gateway_error(gw, req, 400, msg, "invalid_request_error", NULL, "json_too_large");
        return;
    case SB_INSPECT_TOO_DEEP:
        snprintf(msg, sizeof(msg),
                 "request body nests JSON arrays and objects more than %zu levels deep "
                 "(limits.max_json_depth)", gw->cfg->max_json_depth);
        sb_gateway_error(gw, req, 400, msg, "invalid_request_error", NULL, "json_too_deep");
        return;
    case SB_INSPECT_NOMEM:
        sb_gateway_error(gw, req, 500, "out of memory", "server_error", NULL, NULL);
        return;
    default:
        snprintf(msg, sizeof(msg), "request body is not valid JSON (an object is expected)");
    }
    sb_gateway_error(gw, req, 400, msg, "invalid_request_error", param, NULL);
}

static void handle_inference(sb_gateway *gw, sb_http_req *req, enum sb_api_kind kind, const caller *who)
{
    sb_inspect_result res;
    /* read per request: reloads apply at once */
    gw->ictx.json.max_depth = gw->cfg->max_json_depth;
    gw->ictx.json.max_tokens = gw->cfg->max_json_tokens;
    int rc = sb_inspect(&gw->ictx, kind, req->body, req->body_len, &res);
    sb_model_match m;
    bool insert = false, comma = false;
    if (rc == SB_INSPECT_NO_MODEL && gw->cfg->default_pool && !memmem(req->body, req->body_len, "\"model\"", 7) &&
        default_model(gw, req, &res, &m, &comma)) {
        insert = true;
        rc = SB_INSPECT_OK;
    }
    if (rc != SB_INSPECT_OK) {
        refuse_inspected(gw, req, rc, &res);
        return;
    }
    if (!insert && sb_router_resolve(gw->router, res.model, res.model_len, &m) < 0) {
        inspector_trim(gw);
        char msg[SB_MODEL_NAME_MAX + 80];
        snprintf(msg, sizeof(msg), "The model `%s` does not exist.", res.model);
        sb_gateway_error(gw, req, 404, msg, "invalid_request_error", "model", "model_not_found");
        return;
    }
    if (gw->adaptive && gw->adaptive[m.pool])
        sb_adaptive_arrivals(gw->adaptive[m.pool], 1);
    /* Blocks are seeded by served model and adapter: two models never share a prefix. */
    const char *adapter = m.adapter >= 0 ? m.name : "";
    uint64_t seed = sb_prompt_seed(m.served, m.served_len, adapter, strlen(adapter));
    size_t cap = gw->cfg->max_prompt_blocks < gw->hashes_cap ? gw->cfg->max_prompt_blocks : gw->hashes_cap;
    sb_prompt_hashes ph = {.hashes = gw->hashes, .cap = cap,
                           .prefix_chars = gw->cfg->prefix_chars};
    sb_prompt_hash(&gw->ictx, req->body, &res, seed, gw->cfg->block_bytes, &ph);
    inspector_trim(gw); /* the last use of the tokens */

    sb_proxy_target t = {
        .pool = m.pool,
        .adapter = m.adapter,
        .served = m.is_alias || insert ? m.served : NULL,
        .insert_model = insert,
        .insert_comma = comma,
        .served_len = m.served_len,
        .model_tok_start = res.model_tok_start,
        .model_tok_end = res.model_tok_end,
        .stream = res.stream,
        .model = res.model,
        .key_id = who->key_id,
        .key_band = who->key ? who->key->band : -1,
        .band = -1,
    };
    if (who->key)
        memcpy(t.tenant, who->key->tenant, sizeof t.tenant);
    /* About 4 bytes per token in English: the router's estimate of prefill work. */
    sb_sched_request rr = {.pool = m.pool,
                           .adapter = m.adapter,
                           .block_hashes = ph.hashes,
                           .n_blocks = ph.n,
                           .prompt_bytes = ph.prompt_bytes,
                           .prompt_tokens = (uint32_t)(ph.prompt_bytes / 4),
                           /* the adapter is part of the prefix-hash key (KubeAI's rule) */
                           .prefix_key = ph.prefix_key ? ph.prefix_key ^ seed : 0,
                           .session_key = session_key(gw, req, &res, who),
                           .profile = sb_router_pool_profile(gw->router, m.pool)};
    sb_gateway_admit(gw, req, &t, &rr);
}

enum { ROUTE_HEALTHZ = -1, ROUTE_MODELS = -2 }; /* else an index in inference_routes */

/* /healthz and GET /v1/models take no body. Read, one would be charged to the body budget
 * paying clients share (and /healthz asks for no key), so a body declared in the head is
 * refused there, before a byte of it is buffered. Answers and returns true if so. */
static bool refuse_body(sb_gateway *gw, sb_http_req *req)
{
    if (!req->has_body)
        return false;
    char msg[160];
    snprintf(msg, sizeof(msg), "%.*s takes no request body", (int)(req->path_len > 100 ? 100 : req->path_len),
             req->path);
    sb_gateway_error(gw, req, 400, msg, "invalid_request_error", NULL, "body_not_allowed");
    return true;
}

/* The checks a request's head decides (route, method, API key, a body where none is
 * taken), in one place for both callers: on_head, before the body is read, and on_request,
 * with the body. Answers and returns true if one fails; else sets *route and *who. The key
 * is hashed and looked up each time rather than carried from the head to the body: the hook
 * must keep no pointers, a reload between the two may swap the configuration (the newer one
 * decides), and one SHA-256 of a token costs about a microsecond. */
static bool refuse_by_head(sb_gateway *gw, sb_http_req *req, int *route, caller *who)
{
    if (path_is(req, "/healthz")) {
        if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
            sb_gateway_error(gw, req, 405, "method not allowed: use GET", "invalid_request_error", NULL, NULL);
            return true;
        }
        if (refuse_body(gw, req))
            return true;
        *route = ROUTE_HEALTHZ;
        return false;
    }
    *who = caller_of(gw, req);
    /* Every OpenAI API path, known or not, needs a key: without one a client learns nothing. */
    if (gw->cfg->auth_enabled && req->path_len >= 4 && !memcmp(req->path, "/v1/", 4) &&
        !(who->key && who->key->admits)) {
        refuse_unauthorized(gw, req, who->key_id != 0);
        return true;
    }
    for (size_t i = 0; i < sizeof(inference_routes) / sizeof(inference_routes[0]); i++) {
        if (path_is(req, inference_routes[i].path)) {
            if (req->method != HTTP_POST) {
                sb_gateway_error(gw, req, 405, "method not allowed: use POST", "invalid_request_error", NULL, NULL);
                return true;
            }
            *route = (int)i;
            return false;
        }
    }
    if (path_is(req, "/v1/models")) {
        if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
            sb_gateway_error(gw, req, 405, "method not allowed: use GET", "invalid_request_error", NULL, NULL);
            return true;
        }
        if (refuse_body(gw, req))
            return true;
        *route = ROUTE_MODELS;
        return false;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "no route for %.*s", (int)(req->path_len > 100 ? 100 : req->path_len), req->path);
    sb_gateway_error(gw, req, 404, msg, "invalid_request_error", NULL, "not_found");
    return true;
}

/* The client listener's head hook: a request refused anyway (no key, no route, wrong
 * method) is answered before its body is read, so a stranger can neither make the gateway
 * buffer bodies nor spend the body budget (limits.max_buffered_body_bytes) of paying
 * clients, and `Expect: 100-continue` gets the refusal instead of 100. */
static bool on_head(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    int route;
    caller who;
    if (!refuse_by_head(gw, req, &route, &who))
        return true;
    gw->counters.requests++; /* answered here: on_request never sees it */
    return false;
}

/* The client listener: the OpenAI API and /healthz only (the admin pages live on the admin
 * listener, net/admin.c). */
static void on_request(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    gw->counters.requests++;
    int route;
    caller who = {0};
    if (refuse_by_head(gw, req, &route, &who))
        return;
    if (route == ROUTE_HEALTHZ)
        sb_http_respond(req, 200, "application/json", NULL, "{\"status\":\"ok\"}", 15);
    else if (route == ROUTE_MODELS)
        sb_http_respond(req, 200, "application/json", NULL, gw->models_json, gw->models_json_len);
    else
        handle_inference(gw, req, inference_routes[route].kind, &who);
}

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

static sb_upstream *gateway_upstream(const sb_gateway *gw, uint32_t pool, uint32_t ep)
{
    return gw->ups[gw->pool_first_up[pool] + ep];
}

static void on_adaptive_timer_closed(uv_handle_t *h);

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
        const sb_profile *base = sb_config_profile(gw->cfg, pc->profile ? pc->profile : "default");
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

static void gateway_free(sb_gateway *gw)
{
    if (gw->ups) {
        size_t n = gw->cfg ? gw->pool_first_up[gw->cfg->n_pools] : 0;
        for (size_t i = 0; i < n; i++)
            if (gw->ups[i])
                sb_upstream_free(gw->ups[i]);
    }
    sb_free(gw->ups);
    sb_free(gw->pool_first_up);
    sb_free(gw->pool_metrics);
    sb_free(gw->ep_metrics);
    if (gw->adaptive && gw->cfg)
        for (size_t p = 0; p < gw->cfg->n_pools; p++)
            sb_adaptive_free(gw->adaptive[p]);
    sb_free(gw->adaptive);
    sb_gateway_admission_free(gw);
    sb_router_free(gw->router);
    sb_inspect_ctx_free(&gw->ictx);
    sb_free(gw->hashes);
    sb_free(gw->models_json);
    if (gw->access_log && gw->access_log != stdout)
        fclose(gw->access_log);
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

/* The listeners' limits, from the configuration (start and reload). The admin listener has
 * the same request limits and its own connection budget, so a full client listener leaves room
 * for operators. */
static void server_opts(const sb_config *cfg, sb_http_server_opts *so, sb_http_server_opts *admin)
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
    };
    *admin = *so;
    admin->max_connections = cfg->admin_max_connections;
}

/* Builds a gateway over cfg. With `server` NULL it listens itself (and on admin.listen);
 * otherwise it takes over the existing servers (a reload that changed pools or endpoints). */
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

static void proxy_record(void *owner, const sb_exchange_log *log) { sb_gateway_record(owner, log); }

static void proxy_error(void *owner, sb_http_req *req, int status, const char *message, const char *type,
                        const char *code)
{
    sb_gateway_error(owner, req, status, message, type, NULL, code);
}

/* Pool p of gw->cfg: its router pool (profile, endpoints, ring, models) and the upstream of
 * each endpoint. 0, or a negative libuv error (UV_ENOMEM for anything but an upstream). */
static int build_pool(sb_gateway *gw, size_t p, const sb_upstream_opts *uo)
{
    const sb_config *cfg = gw->cfg;
    const sb_pool_config *pc = &cfg->pools[p];
    const sb_profile *prof = sb_config_profile(cfg, pc->profile ? pc->profile : "default");
    sb_pool_params pp = {.stale_ns = SB_MS(pc->stale_ms),
                         .health = {.max_failures = pc->max_failures,
                                    .base_eject_ns = SB_MS(pc->base_eject_ms),
                                    .max_eject_ns = SB_MS(pc->max_eject_ms)},
                         .block_bytes = (uint32_t)cfg->block_bytes};
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
    for (size_t i = 0; i < pc->n_models; i++)
        if (sb_router_add_model(gw->router, (uint32_t)p, pc->models[i], i == 0 ? SB_MODEL_SERVED : SB_MODEL_ALIAS) == -1)
            return UV_ENOMEM;
    for (size_t i = 0; i < pc->n_adapters; i++)
        if (sb_router_add_model(gw->router, (uint32_t)p, pc->adapters[i], SB_MODEL_ADAPTER) == -1)
            return UV_ENOMEM;
    for (size_t e = 0; e < pc->n_endpoints; e++) {
        int rc = sb_upstream_new(gw->loop, pc->endpoints[e].host, pc->endpoints[e].port, uo,
                                 &gw->ups[gw->pool_first_up[p] + e]);
        if (rc < 0) {
            SB_ERROR("endpoint %s: %s", pc->endpoints[e].address, uv_strerror(rc));
            return rc;
        }
    }
    return 0;
}

/* The listeners: the old gateway's (a reload; new options applied) or new ones. 0, or a
 * negative libuv error (then gw->server, if set, is a listener this call started). */
static int attach_servers(sb_gateway *gw, sb_http_server *server, sb_http_server *admin_server)
{
    const sb_config *cfg = gw->cfg;
    uv_loop_t *loop = gw->loop;
    sb_http_server_opts so, ao;
    server_opts(cfg, &so, &ao);
    if (server) {
        gw->server = server;
        gw->admin_server = admin_server;
        sb_http_server_set_opts(server, &so);
        if (admin_server)
            sb_http_server_set_opts(admin_server, &ao);
    } else {
        int rc = sb_http_server_start(loop, cfg->listen_host, cfg->listen_port, &so, on_request, gw, &gw->server);
        if (rc < 0) {
            SB_ERROR("listen %s:%u: %s", cfg->listen_host, cfg->listen_port, uv_strerror(rc));
            return rc;
        }
        sb_http_server_set_head_hook(gw->server, on_head);
        if (cfg->admin_host) {
            rc = sb_http_server_start(loop, cfg->admin_host, cfg->admin_port, &ao, sb_gateway_admin, gw,
                                      &gw->admin_server);
            if (rc < 0) {
                SB_ERROR("admin.listen %s:%u: %s", cfg->admin_host, cfg->admin_port, uv_strerror(rc));
                return rc;
            }
            sb_http_server_set_head_hook(gw->admin_server, sb_gateway_admin_head);
        }
    }
    return 0;
}

static int gateway_build(uv_loop_t *loop, sb_config *cfg, sb_http_server *server, sb_http_server *admin_server,
                         uint64_t hash_secret, sb_gateway **out)
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
    gw->proxy = (sb_proxy_env){.router = gw->router, .counters = &gw->counters, .owner = gw,
                               .upstream = proxy_upstream, .begin = proxy_begin, .end = proxy_end,
                               .record = proxy_record, .error = proxy_error};
    gw->pool_first_up = sb_calloc(cfg->n_pools + 1, sizeof(size_t));
    /* Bounded so the product cannot overflow; a reload keeps this capacity (hashes_cap). */
    gw->hashes_cap = cfg->max_prompt_blocks < ((size_t)1 << 24) ? cfg->max_prompt_blocks : ((size_t)1 << 24);
    gw->hashes = sb_malloc(gw->hashes_cap * sizeof(uint64_t));
    if (!gw->router || !gw->pool_first_up || !gw->hashes || build_models_json(gw) < 0)
        goto fail;
    size_t total = 0;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        gw->pool_first_up[p] = total;
        total += cfg->pools[p].n_endpoints;
    }
    gw->pool_first_up[cfg->n_pools] = total;
    gw->ups = sb_calloc(total ? total : 1, sizeof(sb_upstream *));
    gw->ep_metrics = sb_calloc(total ? total : 1, sizeof(sb_ep_metrics));
    gw->pool_metrics = sb_calloc(cfg->n_pools ? cfg->n_pools : 1, sizeof(sb_pool_metrics));
    if (!gw->ups || !gw->ep_metrics || !gw->pool_metrics)
        goto fail;
    sb_upstream_opts uo = {.connect_ms = cfg->connect_ms, .idle_ms = cfg->upstream_idle_ms,
                           .max_idle = cfg->max_idle_per_endpoint};
    for (size_t p = 0; p < cfg->n_pools; p++) {
        rc = build_pool(gw, p, &uo);
        if (rc < 0)
            goto fail;
    }
    if (cfg->access_log) {
        gw->access_log = strcmp(cfg->access_log, "-") == 0 ? stdout : fopen(cfg->access_log, "a");
        if (!gw->access_log) {
            SB_ERROR("access log %s: cannot open", cfg->access_log);
            rc = UV_EACCES;
            goto fail;
        }
    }
    rc = attach_servers(gw, server, admin_server);
    if (rc < 0) {
        if (gw->server)
            goto fail_server;
        goto fail;
    }
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
    *out = gw;
    return 0;
fail_server:
    if (!server) {
        sb_http_server_stop(gw->server);
        if (gw->admin_server)
            sb_http_server_stop(gw->admin_server);
    }
fail:
    gateway_free(gw);
    return rc < 0 ? rc : UV_ENOMEM;
}

int sb_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **out)
{
    /* getrandom(2), or /dev/urandom where it is missing. Refusing to start beats running with
     * a guessable table secret; on Linux this fails only before the kernel's pool is seeded
     * at boot, where getrandom waits rather than fails. */
    uint64_t secret;
    int rc = uv_random(NULL, NULL, &secret, sizeof(secret), 0, NULL);
    if (rc < 0) {
        SB_ERROR("cannot draw the hash-table secret from the OS: %s", uv_strerror(rc));
        sb_config_free(cfg);
        return rc;
    }
    return gateway_build(loop, cfg, NULL, NULL, secret, out);
}

uint16_t sb_gateway_port(const sb_gateway *gw) { return sb_http_server_port(gw->server); }

const sb_config *sb_gateway_config(const sb_gateway *gw) { return gw->cfg; }

uint16_t sb_gateway_admin_port(const sb_gateway *gw)
{
    return gw->admin_server ? sb_http_server_port(gw->admin_server) : 0;
}

void sb_gateway_stop(sb_gateway *gw)
{
    /* Stopping the server aborts in-flight exchanges (their upstream connections close);
     * an exchange still waiting for a write callback keeps the gateway alive until it is
     * done (sb_gateway_exchange_done). Pools free themselves once their last connection
     * has closed. */
    gw->stopping = true;
    /* Held while stopping: exchanges aborted below may end (and would free gw) before we
     * are done with it. */
    gw->in_flight++;
    if (gw->adaptive_timer_open) {
        uv_timer_stop(&gw->adaptive_timer);
        uv_close((uv_handle_t *)&gw->adaptive_timer, on_adaptive_timer_closed);
        gw->adaptive_timer_open = false;
        gw->in_flight++; /* the timer's memory lives in gw: free only once it is closed */
    }
    if (gw->prober)
        sb_prober_stop(gw->prober);
    gw->prober = NULL;
    sb_gateway_admission_stop(gw);
    sb_http_server_stop(gw->server);
    if (gw->admin_server)
        sb_http_server_stop(gw->admin_server);
    gw->admin_server = NULL;
    exchange_done(gw);
}

static void on_adaptive_timer_closed(uv_handle_t *h) { exchange_done(((uv_timer_t *)h)->data); }

static void exchange_done(sb_gateway *gw)
{
    if (--gw->in_flight == 0 && gw->stopping)
        gateway_free(gw);
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
    }
    if (strcmp(a->listen_host, b->listen_host) || a->listen_port != b->listen_port)
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
    sb_gateway_admission_flush(gw);
    gw->server = NULL; /* the new gateway's now, like the admin listener */
    gw->admin_server = NULL;
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
    memcpy(ngw->rejected_by_status, old->rejected_by_status, sizeof(ngw->rejected_by_status));
    ngw->reloads = old->reloads;
    for (size_t p = 0; p < ngw->cfg->n_pools; p++) {
        const sb_pool_config *np = &ngw->cfg->pools[p];
        for (size_t q = 0; q < old->cfg->n_pools; q++) {
            const sb_pool_config *op = &old->cfg->pools[q];
            if (strcmp(np->name, op->name))
                continue;
            ngw->pool_metrics[p] = old->pool_metrics[q];
            bool same = np->n_endpoints == op->n_endpoints;
            for (size_t e = 0; e < np->n_endpoints; e++) {
                for (size_t f = 0; f < op->n_endpoints; f++) {
                    if (strcmp(np->endpoints[e].address, op->endpoints[f].address))
                        continue;
                    sb_endpoint_adopt(sb_router_endpoint(ngw->router, (uint32_t)p, (uint32_t)e),
                                      sb_router_endpoint(old->router, (uint32_t)q, (uint32_t)f));
                    ngw->ep_metrics[ngw->pool_first_up[p] + e] = old->ep_metrics[old->pool_first_up[q] + f];
                }
                same = same && !strcmp(np->endpoints[e].address, op->endpoints[e].address);
            }
            if (same)
                sb_router_move_prefix_index(ngw->router, (uint32_t)p, old->router, (uint32_t)q);
            break;
        }
    }
}

int sb_gateway_reload(sb_gateway **gwp, sb_config *cfg)
{
    sb_gateway *gw = *gwp;
    const char *why = shape_differs(gw->cfg, cfg);
    if (why && (strcmp(gw->cfg->listen_host, cfg->listen_host) || gw->cfg->listen_port != cfg->listen_port)) {
        SB_WARN("reload refused: the listen address changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (!same_admin_listen(gw->cfg, cfg)) {
        SB_WARN("reload refused: admin.listen changed (restart to apply)");
        sb_config_free(cfg);
        return -1;
    }
    if (why) {
        /* Pools, models or endpoints changed: a new gateway takes over the listener; the old
         * one finishes what it has in flight. */
        sb_gateway *ngw = NULL;
        /* The same secret: the prefix indexes carried over keep their own key anyway, but one
         * secret per process is simpler to reason about. */
        if (gateway_build(gw->loop, cfg, gw->server, gw->admin_server, gw->hash_secret, &ngw) < 0) {
            SB_WARN("reload refused: the new configuration could not be applied; keeping the running one");
            return -1;
        }
        carry_state(ngw, gw);
        ngw->reloads++;
        sb_http_server_set_handler(ngw->server, on_request, ngw);
        if (ngw->admin_server)
            sb_http_server_set_handler(ngw->admin_server, sb_gateway_admin, ngw);
        gateway_retire(gw);
        *gwp = ngw;
        SB_INFO("configuration reloaded (%llu): %s; endpoint state carried over",
                (unsigned long long)ngw->reloads, why);
        return 0;
    }
    sb_snapshot *ns = sb_calloc(1, sizeof(*ns));
    if (!ns) {
        sb_config_free(cfg);
        return -1;
    }
    ns->cfg = cfg;
    ns->refs = 1;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        sb_pool_params pp = {.stale_ns = SB_MS(pc->stale_ms),
                             .health = {.max_failures = pc->max_failures,
                                        .base_eject_ns = SB_MS(pc->base_eject_ms),
                                        .max_eject_ns = SB_MS(pc->max_eject_ms)},
                             .block_bytes = (uint32_t)cfg->block_bytes};
        sb_router_set_pool_params(gw->router, (uint32_t)p, &pp);
        const sb_profile *prof = sb_config_profile(cfg, pc->profile ? pc->profile : "default");
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
    sb_http_server_opts so, ao;
    server_opts(cfg, &so, &ao);
    sb_http_server_set_opts(gw->server, &so);
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
    gw->reloads++;
    if (sb_gateway_admission_reconfigure(gw) < 0)
        SB_WARN("reload: flow control could not take the new bounds (out of memory); some pools keep the old ones");
    snapshot_unref(gw, old);
    SB_INFO("configuration reloaded (%llu)", (unsigned long long)gw->reloads);
    return 0;
}
