#include "net/routes.h"

#include <http_parser.h>
#include <string.h>
#include <xxhash.h>

#include "core/adaptive.h"
#include "core/kv_index.h"
#include "net/admission.h"
#include "net/errors.h"
#include "net/guard.h"
#include "net/precise.h"
#include "net/workers.h"
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

/* The inspector's token array (the loop's scratch, gw->scratch) is reused across requests so that an ordinary one
 * tokenizes with no allocation; one that grew it past this many tokens (~1.3 MiB at 20 bytes
 * a token; limits.max_json_tokens lets one request grow it to ~20 MiB, outside every budget)
 * frees it once done, so the next ordinary request starts small again. 64 Ki tokens is a
 * chat request of several hundred KiB. */
#define INSPECT_KEEP_TOKENS ((size_t)64 * 1024)

static void inspector_trim(sb_scratch *sc)
{
    if (sc->ictx.json.cap_tokens > INSPECT_KEEP_TOKENS)
        sb_inspect_ctx_free(&sc->ictx);
    sc->token_bytes = sc->ictx.json.cap_tokens * sizeof(sb_json_tok);
}

/* The calling loop's scratch: the main loop's, or its worker's. */
static sb_scratch *scratch_of(sb_gateway *gw)
{
    int w = sb_worker_index();
    return &gw->scratch[w >= 0 && (size_t)w + 1 < gw->n_scratch ? (size_t)w + 1 : 0];
}

/* A client's x-request-id is kept when it is 1 to SB_HTTP_REQ_ID_MAX token characters (RFC
 * 9110 tchar): it then goes into headers and log lines as it is. Anything else is replaced. */
static bool sane_request_id(const char *v, size_t n)
{
    if (n == 0 || n > SB_HTTP_REQ_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              strchr("!#$%&'*+-.^_`|~", ch)))
            return false;
    }
    return true;
}

/* Gives req its id (once: the head hook and the handler both call this): the client's
 * x-request-id if sane, else 32 hex digits keyed by a per-process secret over a counter, so ids
 * are unique and say nothing of the request volume. */
void sb_gateway_request_id(sb_gateway *gw, sb_http_req *req)
{
    if (req->id[0])
        return;
    const sb_http_header *h = sb_http_req_header(req, "x-request-id");
    if (h && sane_request_id(h->value, h->value_len)) {
        memcpy(req->id, h->value, h->value_len);
        req->id[h->value_len] = 0;
        return;
    }
    uint64_t seq = ++gw->id_seq;
    XXH128_hash_t d = XXH3_128bits_withSeed(&seq, sizeof seq, gw->id_secret);
    _Static_assert(sizeof(req->id) > 32, "32 hex digits and a NUL");
    sb_fmt_hex64(req->id, d.high64); /* not snprintf: per request (docs/benchmarks.md) */
    sb_fmt_hex64(req->id + 16, d.low64);
    req->id[32] = 0;
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
    sb_errors_answer_with(&gw->stats, req, 401,
                          had_token ? "Incorrect API key provided. You can find your API key with the operator of "
                                      "this gateway."
                                    : "You didn't provide an API key. You need to provide your API key in an "
                                      "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                          "invalid_request_error", "invalid_api_key",
                          "WWW-Authenticate: Bearer realm=\"switchboard\"\r\n");
}

/* The session affinity key: the configured header, else the request's `user`, else the API
 * key (its digest), else the client's address (without its port). Never 0 (0 means "none"). */
static uint64_t session_key(const sb_config *cfg, const sb_http_req *req, const sb_inspect_result *res,
                            const caller *who)
{
    const sb_http_header *h = cfg->session_header ? sb_http_req_header(req, cfg->session_header) : NULL;
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
static bool default_model(const sb_gateway *gw, const sb_config *cfg, const sb_http_req *req, sb_inspect_result *res,
                          sb_model_match *m, bool *comma)
{
    bool insert = false;
    for (size_t p = 0; p < cfg->n_pools; p++)
        if (!strcmp(cfg->pools[p].name, cfg->default_pool)) {
            const char *served = cfg->pools[p].models[0];
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
static void refuse_inspected(sb_gateway *gw, sb_scratch *sc, sb_http_req *req, int rc, const sb_inspect_result *res)
{
    inspector_trim(sc); /* the tokens are not needed past this point */
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
        sb_errors_answer(&gw->stats, req, 400, msg, "invalid_request_error", NULL, "json_too_large");
        return;
    case SB_INSPECT_TOO_DEEP:
        snprintf(msg, sizeof(msg),
                 "request body nests JSON arrays and objects more than %zu levels deep "
                 "(limits.max_json_depth)",
                 gw->cfg->max_json_depth);
        sb_errors_answer(&gw->stats, req, 400, msg, "invalid_request_error", NULL, "json_too_deep");
        return;
    case SB_INSPECT_NOMEM: sb_errors_answer(&gw->stats, req, 500, "out of memory", "server_error", NULL, NULL); return;
    default: snprintf(msg, sizeof(msg), "request body is not valid JSON (an object is expected)");
    }
    sb_errors_answer(&gw->stats, req, 400, msg, "invalid_request_error", param, NULL);
}

/* What a request's body says, read without touching anything shared: on a worker this runs
 * outside the lock (the gateway and its configuration pinned, the router's model table fixed
 * for the gateway's life, the scratch the loop's own). rc: SB_INSPECT_*, or READ_NO_SUCH_MODEL. */
enum { READ_NO_SUCH_MODEL = -1000 };
typedef struct reading {
    int rc;
    sb_inspect_result res;
    sb_model_match m;
    bool insert, comma;
    uint64_t seed;
    sb_prompt_hashes ph;
    uint64_t session;
} reading;

static void read_request(const sb_gateway *gw, const sb_config *cfg, sb_scratch *sc, const sb_http_req *req,
                         enum sb_api_kind kind, const caller *who, reading *rd)
{
    sb_inspect_result *res = &rd->res;
    /* read per request: reloads apply at once */
    sc->ictx.json.max_depth = cfg->max_json_depth;
    sc->ictx.json.max_tokens = cfg->max_json_tokens;
    rd->rc = sb_inspect(&sc->ictx, kind, req->body, req->body_len, res);
    rd->insert = rd->comma = false;
    if (rd->rc == SB_INSPECT_NO_MODEL && cfg->default_pool && !memmem(req->body, req->body_len, "\"model\"", 7) &&
        default_model(gw, cfg, req, res, &rd->m, &rd->comma)) {
        rd->insert = true;
        rd->rc = SB_INSPECT_OK;
    }
    if (rd->rc != SB_INSPECT_OK)
        return;
    if (!rd->insert && sb_router_resolve(gw->router, res->model, res->model_len, &rd->m) < 0) {
        rd->rc = READ_NO_SUCH_MODEL;
        return;
    }
    /* Blocks are seeded by served model and adapter: two models never share a prefix. */
    const sb_model_match *m = &rd->m;
    const char *adapter = m->adapter >= 0 ? m->name : "";
    rd->seed = sb_prompt_seed(m->served, m->served_len, adapter, strlen(adapter));
    size_t cap = cfg->max_prompt_blocks < gw->hashes_cap ? cfg->max_prompt_blocks : gw->hashes_cap;
    rd->ph = (sb_prompt_hashes){.hashes = sc->hashes, .cap = cap, .prefix_chars = cfg->prefix_chars};
    sb_prompt_hash(&sc->ictx, req->body, res, rd->seed, cfg->block_bytes, &rd->ph);
    rd->session = session_key(cfg, req, res, who);
}

/* The rest of an inference request, under the lock: refusals, the pool's adaptive loop, then
 * admission (which copies what waits: the scratch is reused by the loop's next request). */
static void handle_read(sb_gateway *gw, sb_scratch *sc, const sb_config *cfg, sb_http_req *req, const caller *who,
                        reading *rd)
{
    sb_inspect_result *resp = &rd->res;
    if (rd->rc == READ_NO_SUCH_MODEL) {
        inspector_trim(sc);
        char msg[SB_MODEL_NAME_MAX + 80];
        snprintf(msg, sizeof(msg), "The model `%s` does not exist.", resp->model);
        sb_errors_answer(&gw->stats, req, 404, msg, "invalid_request_error", "model", "model_not_found");
        return;
    }
    if (rd->rc != SB_INSPECT_OK) {
        refuse_inspected(gw, sc, req, rd->rc, resp);
        return;
    }
    const sb_model_match *mp = &rd->m;
    if (gw->adaptive && gw->adaptive[mp->pool])
        sb_adaptive_arrivals(gw->adaptive[mp->pool], 1);
    sb_proxy_target t = {
        .pool = mp->pool,
        .adapter = mp->adapter,
        .served = mp->is_alias || rd->insert ? mp->served : NULL,
        .insert_model = rd->insert,
        .insert_comma = rd->comma,
        .served_len = mp->served_len,
        .model_tok_start = resp->model_tok_start,
        .model_tok_end = resp->model_tok_end,
        .stream = resp->stream,
        .usage_edit = cfg->stream_usage ? resp->usage_edit : NULL,
        .usage_edit_len = resp->usage_edit_len,
        .usage_edit_start = resp->usage_edit_start,
        .usage_edit_end = resp->usage_edit_end,
        .model = resp->model,
        .key_id = who->key_id,
        .key_band = who->key ? who->key->band : -1,
        .band = -1,
    };
    sb_stats_ident(req, &t.ident);
    if (who->key)
        memcpy(t.tenant, who->key->tenant, sizeof t.tenant);
    /* About 4 bytes per token in English: the router's estimate of prefill work. */
    sb_sched_request rr = {.pool = mp->pool,
                           .adapter = mp->adapter,
                           .block_hashes = rd->ph.hashes,
                           .n_blocks = rd->ph.n,
                           .prompt_bytes = rd->ph.prompt_bytes,
                           .prompt_tokens = (uint32_t)(rd->ph.prompt_bytes / 4),
                           /* the adapter is part of the prefix-hash key (KubeAI's rule) */
                           .prefix_key = rd->ph.prefix_key ? rd->ph.prefix_key ^ rd->seed : 0,
                           .session_key = rd->session,
                           .profile = sb_router_pool_profile(gw->router, mp->pool)};
    /* Reads the JSON tokens for the engine's /tokenize when the pool keeps a precise index. */
    sb_gateway_admit_precise(gw, req, &t, &rr, sc->ictx.json.tokens, sc->ictx.n_tokens, mp->served, mp->served_len,
                             mp->adapter >= 0 ? sb_kv_extra_of_adapter(mp->name, strlen(mp->name)) : 0);
    inspector_trim(sc); /* the last use of the tokens */
}

static void handle_inference(sb_gateway *gw, sb_http_req *req, enum sb_api_kind kind, const caller *who)
{
    sb_scratch *sc = scratch_of(gw);
    /* A worker reads the body (JSON, prompt, block hashes: most of a request's own work)
     * without the lock, so the workers' reads run side by side. */
    bool apart = sb_guard_on_worker();
    sb_snapshot *snap = apart ? gw->pin(gw) : NULL;
    const sb_config *cfg = apart ? snap->cfg : gw->cfg;
    reading rd;
    int held = apart ? sb_guard_suspend() : 0;
    read_request(gw, cfg, sc, req, kind, who, &rd);
    sb_guard_resume(held);
    handle_read(gw, sc, cfg, req, who, &rd);
    if (apart)
        gw->unpin(gw, snap); /* after admission: what waits has its copies */
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
    sb_errors_answer(&gw->stats, req, 400, msg, "invalid_request_error", NULL, "body_not_allowed");
    return true;
}

/* The gateway's own GET pages (/healthz, /v1/models): GET or HEAD, and no body. Answers and
 * returns true if the request is neither. */
static bool refuse_unless_get(sb_gateway *gw, sb_http_req *req)
{
    if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
        sb_errors_answer(&gw->stats, req, 405, "method not allowed: use GET", "invalid_request_error", NULL, NULL);
        return true;
    }
    return refuse_body(gw, req);
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
        if (refuse_unless_get(gw, req))
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
                sb_errors_answer(&gw->stats, req, 405, "method not allowed: use POST", "invalid_request_error", NULL,
                                 NULL);
                return true;
            }
            *route = (int)i;
            return false;
        }
    }
    if (path_is(req, "/v1/models")) {
        if (refuse_unless_get(gw, req))
            return true;
        *route = ROUTE_MODELS;
        return false;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "no route for %.*s", (int)(req->path_len > 100 ? 100 : req->path_len), req->path);
    sb_errors_answer(&gw->stats, req, 404, msg, "invalid_request_error", NULL, "not_found");
    return true;
}

/* The client listener's head hook: a request refused anyway (no key, no route, wrong
 * method) is answered before its body is read, so a stranger can neither make the gateway
 * buffer bodies nor spend the body budget (limits.max_buffered_body_bytes) of paying
 * clients, and `Expect: 100-continue` gets the refusal instead of 100. */
bool sb_gateway_on_head(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    sb_gateway_request_id(gw, req);
    int route;
    caller who;
    if (!refuse_by_head(gw, req, &route, &who))
        return true;
    gw->counters.requests++; /* answered here: on_request never sees it */
    return false;
}

/* A page the gateway serves itself (200), recorded like every request. */
static void answer_page(sb_gateway *gw, sb_http_req *req, int status, const char *body, size_t len)
{
    sb_request_ident ident;
    sb_stats_ident(req, &ident);
    sb_ns t_start = req->start_ns;
    sb_http_respond(req, status, "application/json", NULL, body, len);
    sb_exchange_log log = {.pool = -1,
                           .ep = -1,
                           .status = status,
                           .outcome = status < 400 ? "ok" : "refused",
                           .reason = status < 400 ? NULL : "draining",
                           .model = "",
                           .bytes_out = len,
                           .t_start = t_start,
                           .t_end = uv_hrtime(),
                           .ident = &ident,
                           .gateway_answer = true};
    log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
    sb_stats_record(&gw->stats, &log);
}

void sb_gateway_healthz(sb_gateway *gw, sb_http_req *req)
{
    /* Draining (SIGTERM): load balancers polling this take the gateway out of rotation. */
    if (gw->draining)
        answer_page(gw, req, 503, "{\"status\":\"draining\"}", 21);
    else
        answer_page(gw, req, 200, "{\"status\":\"ok\"}", 15);
}

/* The client listener: the OpenAI API and /healthz only (the admin pages live on the admin
 * listener, net/admin.c). */
void sb_gateway_on_request(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    gw->counters.requests++;
    sb_gateway_request_id(gw, req);
    int route;
    caller who = {0};
    if (refuse_by_head(gw, req, &route, &who))
        return;
    if (route == ROUTE_HEALTHZ)
        sb_gateway_healthz(gw, req);
    else if (route == ROUTE_MODELS)
        answer_page(gw, req, 200, gw->models_json, gw->models_json_len);
    else
        handle_inference(gw, req, inference_routes[route].kind, &who);
}
