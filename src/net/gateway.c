#include "net/gateway.h"

#include <http_parser.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "proto/openai_error.h"

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

static bool path_is(const sb_http_req *req, const char *path)
{
    size_t n = strlen(path);
    return req->path_len == n && memcmp(req->path, path, n) == 0;
}

void sb_gateway_error(sb_gateway *gw, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code)
{
    sb_buf b = {0};
    if (status < 500)
        gw->counters.rejected++;
    if (sb_openai_error(&b, message, type, param, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return;
    }
    const char *allow = NULL;
    if (status == 405)
        allow = req->method == HTTP_POST ? "Allow: GET, HEAD\r\n" : "Allow: POST\r\n";
    sb_http_respond(req, status, "application/json", allow, b.data, b.len);
    sb_buf_free(&b);
}

static void handle_inference(sb_gateway *gw, sb_http_req *req, enum sb_api_kind kind)
{
    sb_inspect_result res;
    int rc = sb_inspect(&gw->ictx, kind, req->body, req->body_len, &res);
    if (rc != SB_INSPECT_OK) {
        char msg[200];
        const char *param = NULL;
        switch (rc) {
        case SB_INSPECT_NO_MODEL:
            snprintf(msg, sizeof(msg), "you must provide a model parameter (a string)");
            param = "model";
            break;
        case SB_INSPECT_BAD_FIELD:
            snprintf(msg, sizeof(msg), "invalid type or value for '%s'", res.error_field ? res.error_field : "?");
            param = res.error_field;
            break;
        case SB_INSPECT_TOO_COMPLEX:
            snprintf(msg, sizeof(msg), "request body has too many JSON values");
            break;
        case SB_INSPECT_NOMEM:
            sb_gateway_error(gw, req, 500, "out of memory", "server_error", NULL, NULL);
            return;
        default:
            snprintf(msg, sizeof(msg), "request body is not valid JSON (an object is expected)");
        }
        sb_gateway_error(gw, req, 400, msg, "invalid_request_error", param, NULL);
        return;
    }
    sb_model_match m;
    if (sb_router_resolve(gw->router, res.model, res.model_len, &m) < 0) {
        char msg[SB_MODEL_NAME_MAX + 80];
        snprintf(msg, sizeof(msg), "The model `%s` does not exist.", res.model);
        sb_gateway_error(gw, req, 404, msg, "invalid_request_error", "model", "model_not_found");
        return;
    }
    /* Blocks are seeded by served model and adapter: two models never share a prefix. */
    const char *adapter = m.adapter >= 0 ? m.name : "";
    uint64_t seed = sb_prompt_seed(m.served, m.served_len, adapter, strlen(adapter));
    sb_prompt_hashes ph = {.hashes = gw->hashes, .cap = gw->cfg->max_prompt_blocks};
    sb_prompt_hash(&gw->ictx, req->body, &res, seed, gw->cfg->block_bytes, &ph);

    sb_proxy_target t = {
        .pool = m.pool,
        .adapter = m.adapter,
        .served = m.is_alias ? m.served : NULL,
        .served_len = m.served_len,
        .model_tok_start = res.model_tok_start,
        .model_tok_end = res.model_tok_end,
        .stream = res.stream,
    };
    sb_route_request rr = {.pool = m.pool, .adapter = m.adapter, .block_hashes = ph.hashes, .n_blocks = ph.n,
                           .prompt_bytes = ph.prompt_bytes};
    sb_proxy_start(gw, req, &t, &rr);
}

static void on_request(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    gw->counters.requests++;
    for (size_t i = 0; i < sizeof(inference_routes) / sizeof(inference_routes[0]); i++) {
        if (path_is(req, inference_routes[i].path)) {
            if (req->method != HTTP_POST) {
                sb_gateway_error(gw, req, 405, "method not allowed: use POST", "invalid_request_error", NULL, NULL);
                return;
            }
            handle_inference(gw, req, inference_routes[i].kind);
            return;
        }
    }
    if (path_is(req, "/v1/models") || path_is(req, "/healthz")) {
        if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
            sb_gateway_error(gw, req, 405, "method not allowed: use GET", "invalid_request_error", NULL, NULL);
            return;
        }
        if (path_is(req, "/healthz"))
            sb_http_respond(req, 200, "application/json", NULL, "{\"status\":\"ok\"}", 15);
        else
            sb_http_respond(req, 200, "application/json", NULL, gw->models_json, gw->models_json_len);
        return;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "no route for %.*s", (int)(req->path_len > 100 ? 100 : req->path_len), req->path);
    sb_gateway_error(gw, req, 404, msg, "invalid_request_error", NULL, "not_found");
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

sb_upstream *sb_gateway_upstream(const sb_gateway *gw, uint32_t pool, uint32_t ep)
{
    return gw->ups[gw->pool_first_up[pool] + ep];
}

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
    sb_router_free(gw->router);
    sb_inspect_ctx_free(&gw->ictx);
    sb_free(gw->hashes);
    sb_free(gw->models_json);
    if (gw->access_log && gw->access_log != stdout)
        fclose(gw->access_log);
    sb_config_free(gw->cfg);
    sb_free(gw);
}

int sb_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **out)
{
    sb_gateway *gw = sb_calloc(1, sizeof(*gw));
    if (!gw) {
        sb_config_free(cfg);
        return UV_ENOMEM;
    }
    gw->loop = loop;
    gw->cfg = cfg;
    int rc = UV_ENOMEM;
    gw->router = sb_router_new(uv_hrtime());
    gw->pool_first_up = sb_calloc(cfg->n_pools + 1, sizeof(size_t));
    gw->hashes = sb_malloc(cfg->max_prompt_blocks * sizeof(uint64_t));
    if (!gw->router || !gw->pool_first_up || !gw->hashes || build_models_json(gw) < 0)
        goto fail;
    size_t total = 0;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        gw->pool_first_up[p] = total;
        total += cfg->pools[p].n_endpoints;
    }
    gw->pool_first_up[cfg->n_pools] = total;
    gw->ups = sb_calloc(total, sizeof(sb_upstream *));
    if (!gw->ups)
        goto fail;
    sb_upstream_opts uo = {.connect_ms = cfg->connect_ms, .idle_ms = cfg->upstream_idle_ms,
                           .max_idle = cfg->max_idle_per_endpoint};
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        int policy = sb_policy_find(pc->profile ? pc->profile : SB_POLICY_DEFAULT_NAME);
        if (policy < 0)
            policy = SB_POLICY_LEAST_REQUEST;
        if (sb_router_add_pool(gw->router, pc->name, (enum sb_policy_kind)policy, pc->n_endpoints) < 0)
            goto fail;
        for (size_t i = 0; i < pc->n_models; i++)
            if (sb_router_add_model(gw->router, (uint32_t)p, pc->models[i], i == 0 ? SB_MODEL_SERVED : SB_MODEL_ALIAS) == -1)
                goto fail;
        for (size_t i = 0; i < pc->n_adapters; i++)
            if (sb_router_add_model(gw->router, (uint32_t)p, pc->adapters[i], SB_MODEL_ADAPTER) == -1)
                goto fail;
        for (size_t e = 0; e < pc->n_endpoints; e++) {
            rc = sb_upstream_new(loop, pc->endpoints[e].host, pc->endpoints[e].port, &uo,
                                 &gw->ups[gw->pool_first_up[p] + e]);
            if (rc < 0) {
                SB_ERROR("endpoint %s: %s", pc->endpoints[e].address, uv_strerror(rc));
                goto fail;
            }
        }
    }
    gw->ictx.max_tokens = 1u << 20;
    if (cfg->access_log) {
        gw->access_log = strcmp(cfg->access_log, "-") == 0 ? stdout : fopen(cfg->access_log, "a");
        if (!gw->access_log) {
            SB_ERROR("access log %s: cannot open", cfg->access_log);
            rc = UV_EACCES;
            goto fail;
        }
    }
    sb_http_server_opts so = {.max_header_bytes = cfg->max_header_bytes, .max_body_bytes = cfg->max_body_bytes,
                              .max_connections = cfg->max_connections, .header_ms = cfg->header_ms,
                              .idle_ms = cfg->idle_ms};
    rc = sb_http_server_start(loop, cfg->listen_host, cfg->listen_port, &so, on_request, gw, &gw->server);
    if (rc < 0) {
        SB_ERROR("listen %s:%u: %s", cfg->listen_host, cfg->listen_port, uv_strerror(rc));
        goto fail;
    }
    *out = gw;
    return 0;
fail:
    gateway_free(gw);
    return rc < 0 ? rc : UV_ENOMEM;
}

uint16_t sb_gateway_port(const sb_gateway *gw) { return sb_http_server_port(gw->server); }

void sb_gateway_stop(sb_gateway *gw)
{
    /* Stopping the server aborts in-flight exchanges (their upstream connections close);
     * an exchange still waiting for a write callback keeps the gateway alive until it is
     * done (sb_gateway_exchange_done). Pools free themselves once their last connection
     * has closed. */
    gw->stopping = true;
    sb_http_server_stop(gw->server);
    if (gw->in_flight == 0)
        gateway_free(gw);
}

void sb_gateway_exchange_done(sb_gateway *gw)
{
    if (--gw->in_flight == 0 && gw->stopping)
        gateway_free(gw);
}
