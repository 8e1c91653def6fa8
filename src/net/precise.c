/* A request's precise keys: the tokenize cache, /tokenize round trips, and requests waiting
 * for one (net/precise.h). */
#include "net/precise.h"
#include "net/guard.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "core/kv_index.h"
#include "core/router.h"
#include "core/tok_cache.h"
#include "net/admission.h"
#include "net/http_get.h"
#include "proto/tokenize.h"

#define PRECISE_MAX_FLIGHTS 16

typedef struct flight flight;
typedef struct parked parked;

struct sb_precise {
    sb_gateway *gw;
    size_t n_pools;
    sb_tok_cache **caches; /* per pool; NULL where the pool keeps no precise index */
    uint32_t *next_ep;     /* per pool: the endpoint the next /tokenize goes to */
    uint32_t *flights_out; /* per pool: /tokenize in flight */
    flight *flights;       /* every one in flight */
    sb_buf body;           /* scratch: a /tokenize body */
    uint64_t *keys;        /* scratch: a request's precise keys */
    size_t keys_cap;
    sb_json json; /* answers' tokenizer */
    sb_precise_stats st;
};

/* One /tokenize in flight, and the request waiting for it (if still waiting). */
struct flight {
    sb_precise *pr;
    uint32_t pool;
    sb_http_get *g;
    sb_tok_key key; /* key.chain points at chain */
    uint64_t *chain;
    uint64_t extra;
    parked *waiter;
    flight *prev, *next;
};

/* A request held for its ids: what sb_gateway_admit needs, copied. */
struct parked {
    sb_precise *pr;
    flight *flight;
    sb_http_req *req;
    sb_proxy_target t;
    sb_sched_request rr;
    uint64_t *hashes;
    char model[SB_MODEL_NAME_MAX + 1];
    uv_timer_t timer;
};

int sb_gateway_precise_start(sb_gateway *gw)
{
    const sb_config *cfg = gw->cfg;
    bool any = false;
    for (size_t p = 0; p < cfg->n_pools; p++)
        any |= sb_router_kv_index(gw->router, (uint32_t)p) != NULL;
    if (!any)
        return 0;
    sb_precise *pr = sb_calloc(1, sizeof(*pr));
    if (!pr)
        return UV_ENOMEM;
    gw->precise = pr;
    pr->gw = gw;
    pr->n_pools = cfg->n_pools;
    pr->caches = sb_calloc(cfg->n_pools, sizeof(*pr->caches));
    pr->next_ep = sb_calloc(cfg->n_pools, sizeof(uint32_t));
    pr->flights_out = sb_calloc(cfg->n_pools, sizeof(uint32_t));
    if (!pr->caches || !pr->next_ep || !pr->flights_out)
        return UV_ENOMEM;
    sb_tok_cache_config tc = {.max_bytes = cfg->tokenize_cache_bytes,
                              .margin_tokens = (uint32_t)cfg->tokenize_margin_tokens,
                              .hash_secret = gw->hash_secret};
    for (size_t p = 0; p < cfg->n_pools; p++)
        if (sb_router_kv_index(gw->router, (uint32_t)p) && !(pr->caches[p] = sb_tok_cache_new(&tc)))
            return UV_ENOMEM;
    return 0;
}

static void flight_unlink(flight *f)
{
    sb_precise *pr = f->pr;
    if (f->prev)
        f->prev->next = f->next;
    else
        pr->flights = f->next;
    if (f->next)
        f->next->prev = f->prev;
    pr->flights_out[f->pool]--;
}

static void flight_free(flight *f)
{
    sb_free(f->chain);
    sb_free(f);
}

static void on_parked_closed(uv_handle_t *h)
{
    parked *w = h->data;
    sb_free(w->hashes);
    sb_free(w);
}

/* Routes a held request with the keys it has (none, or those of its own answer). */
/* The one access-log line of a request that waited for its token ids and was never routed. */
static void record_unrouted(const parked *w, const sb_http_req *req, const char *outcome)
{
    sb_exchange_log log = {.pool = (int)w->t.pool,
                           .ep = -1,
                           .status = 499,
                           .outcome = outcome,
                           .reason = "waiting_for_token_ids",
                           .model = w->model,
                           .stream = w->t.stream,
                           .t_start = req->start_ns,
                           .t_end = uv_hrtime(),
                           .tenant = w->t.tenant,
                           .ident = &w->t.ident,
                           .gateway_answer = true};
    log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
    sb_stats_record(&w->pr->gw->stats, &log);
}

static void resume(parked *w, const uint64_t *keys, size_t n_keys)
{
    sb_precise *pr = w->pr;
    if (w->flight)
        w->flight->waiter = NULL;
    w->flight = NULL;
    uv_timer_stop(&w->timer);
    w->req->on_abort = NULL;
    w->req->user = NULL;
    w->t.model = w->model;
    w->rr.block_hashes = w->hashes;
    w->rr.kv_keys = keys;
    w->rr.n_kv_keys = n_keys;
    if (pr->gw->stopped) {
        /* The gateway stops (with workers, their servers abort their requests from their own
         * loops, after this): not routed now, one line that says so. */
        record_unrouted(w, w->req, "drain_cut");
    } else {
        sb_gateway_admit(pr->gw, w->req, &w->t, &w->rr);
    }
    uv_close((uv_handle_t *)&w->timer, on_parked_closed);
}

void sb_gateway_precise_stop(sb_gateway *gw)
{
    sb_precise *pr = gw->precise;
    if (!pr)
        return;
    /* Held requests go on without their ids (a retiring gateway still serves them). */
    while (pr->flights) {
        flight *f = pr->flights;
        flight_unlink(f);
        sb_http_get_cancel(f->g);
        if (f->waiter)
            resume(f->waiter, NULL, 0);
        flight_free(f);
    }
    for (size_t p = 0; p < pr->n_pools; p++)
        sb_tok_cache_free(pr->caches ? pr->caches[p] : NULL);
    sb_free(pr->caches);
    sb_free(pr->next_ep);
    sb_free(pr->flights_out);
    sb_buf_free(&pr->body);
    sb_free(pr->keys);
    sb_json_free(&pr->json);
    sb_free(pr);
    gw->precise = NULL;
}

const sb_precise_stats *sb_gateway_precise_stats(const sb_gateway *gw)
{
    return gw->precise ? &gw->precise->st : NULL;
}

/* The precise keys of tokens[0..n) into the scratch (NULL when it cannot grow). */
static const uint64_t *keys_of(sb_precise *pr, const sb_kv_index *kv, const uint32_t *tokens, size_t n, uint64_t extra,
                               size_t *n_keys)
{
    uint32_t bs = sb_kv_index_block_size(kv);
    size_t need = n / bs + 1;
    if (need > pr->keys_cap) {
        uint64_t *k = sb_realloc(pr->keys, need * sizeof(uint64_t));
        if (!k)
            return NULL;
        pr->keys = k;
        pr->keys_cap = need;
    }
    *n_keys = sb_kv_keys_from_tokens(sb_kv_index_key_seed(kv), tokens, n, bs, extra, pr->keys);
    return pr->keys;
}

static void on_parked_timeout(uv_timer_t *h)
{
    parked *w = h->data;
    w->pr->st.wait_timeouts++;
    resume(w, NULL, 0);
}

static void on_parked_abort(sb_http_req *req)
{
    parked *w = req->user;
    (void)sb_guard_here(w->pr->gw->loop); /* its timer is the main loop's (net/guard.h) */
    if (w->flight)
        w->flight->waiter = NULL;
    uv_timer_stop(&w->timer);
    record_unrouted(w, req, "client_abort"); /* never admitted, never answered */
    w->pr->gw->counters.client_aborts++;
    req->user = NULL;
    req->on_abort = NULL;
    uv_close((uv_handle_t *)&w->timer, on_parked_closed);
}

/* The engine's answer: into the cache, and to the request waiting for it. */
static void on_tokenized(void *ud, int status, const char *body, size_t len)
{
    flight *f = ud;
    sb_precise *pr = f->pr;
    flight_unlink(f);
    uint32_t *ids = NULL;
    size_t n = 0;
    bool ok = false;
    if (status == 200) {
        ids = sb_malloc((len / 2 + 1) * sizeof(uint32_t));
        pr->json.max_tokens = len / 2 + 16;
        ok = ids && sb_tokenize_parse_answer(&pr->json, body, len, ids, len / 2 + 1, &n) == SB_TOKENIZE_OK;
    }
    const sb_kv_index *kv = sb_router_kv_index(pr->gw->router, f->pool);
    if (!ok || !kv) {
        pr->st.failures++;
        if (f->waiter)
            resume(f->waiter, NULL, 0);
    } else {
        sb_tok_cache_insert(pr->caches[f->pool], &f->key, ids, n, true);
        if (f->waiter) {
            size_t nk = 0;
            const uint64_t *k = keys_of(pr, kv, ids, n, f->extra, &nk);
            resume(f->waiter, k, k ? nk : 0);
        }
    }
    sb_free(ids);
    flight_free(f);
}

/* Asks one of the pool's endpoints for body's ids. NULL when at the bound or it cannot start. */
static flight *fly(sb_precise *pr, uint32_t pool, const sb_tok_key *key, uint64_t extra)
{
    /* From a worker too: the round trip runs on the main loop's pool (net/guard.h). */
    (void)sb_guard_here(pr->gw->loop);
    sb_gateway *gw = pr->gw;
    const sb_pool_config *pc = &gw->cfg->pools[pool];
    if (pr->flights_out[pool] >= PRECISE_MAX_FLIGHTS || pc->n_endpoints == 0) {
        pr->st.skipped++;
        return NULL;
    }
    flight *f = sb_calloc(1, sizeof(*f));
    uint64_t *chain = key->n_blocks ? sb_malloc(key->n_blocks * sizeof(uint64_t)) : NULL;
    if (!f || (key->n_blocks && !chain)) {
        sb_free(f);
        sb_free(chain);
        return NULL;
    }
    if (chain)
        memcpy(chain, key->chain, key->n_blocks * sizeof(uint64_t));
    *f = (flight){.pr = pr, .pool = pool, .chain = chain, .extra = extra, .key = *key};
    f->key.chain = chain;
    uint32_t e = pr->next_ep[pool]++ % (uint32_t)pc->n_endpoints;
    sb_http_request hr = {.method = "POST",
                          .path = "/tokenize",
                          .headers = pc->upstream_auth_header,
                          .accept = "application/json",
                          .body = pr->body.data,
                          .body_len = pr->body.len,
                          .timeout_ms = gw->cfg->tokenize_timeout_ms,
                          .deadline_from_start = true,
                          .max_body = gw->cfg->tokenize_max_answer_bytes};
    if (sb_http_request_start(gw->ups[gw->pool_first_up[pool] + e], &hr, on_tokenized, f, &f->g) < 0) {
        pr->st.failures++;
        flight_free(f);
        return NULL;
    }
    pr->st.requests++;
    f->next = pr->flights;
    if (f->next)
        f->next->prev = f;
    pr->flights = f;
    pr->flights_out[pool]++;
    return f;
}

/* Holds req until f answers or wait_ms passes. false (nothing held) on ENOMEM. */
static bool park(sb_precise *pr, flight *f, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    (void)sb_guard_here(pr->gw->loop); /* the wait's timer is the main loop's */
    parked *w = sb_calloc(1, sizeof(*w));
    uint64_t *hashes = rr->n_blocks ? sb_malloc(rr->n_blocks * sizeof(uint64_t)) : NULL;
    if (!w || (rr->n_blocks && !hashes)) {
        sb_free(w);
        sb_free(hashes);
        return false;
    }
    if (hashes)
        memcpy(hashes, rr->block_hashes, rr->n_blocks * sizeof(uint64_t));
    *w = (parked){.pr = pr, .flight = f, .req = req, .t = *t, .rr = *rr, .hashes = hashes};
    snprintf(w->model, sizeof(w->model), "%s", t->model ? t->model : "");
    uv_timer_init(pr->gw->loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, on_parked_timeout, pr->gw->cfg->tokenize_wait_ms, 0);
    f->waiter = w;
    req->user = w;
    req->on_abort = on_parked_abort;
    req->on_drain = NULL;
    pr->st.waits++;
    return true;
}

/* The /tokenize body for req into pr->body; false on ENOMEM or no prompt. */
static bool build_body(sb_precise *pr, const sb_http_req *req, const sb_json_tok *tok, int n_tok, const char *model,
                       size_t model_len)
{
    sb_buf_reset(&pr->body);
    long need = sb_tokenize_build_body(req->body, tok, n_tok, model, model_len, NULL, 0);
    if (need < 0 || sb_buf_reserve(&pr->body, (size_t)need + 1) < 0 ||
        sb_tokenize_build_body(req->body, tok, n_tok, model, model_len, pr->body.data, (size_t)need + 1) != need)
        return false;
    pr->body.len = (size_t)need;
    return true;
}

void sb_gateway_admit_precise(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, sb_sched_request *rr,
                              const sb_json_tok *tok, int n_tok, const char *model, size_t model_len, uint64_t extra)
{
    sb_precise *pr = gw->precise;
    const sb_kv_index *kv = sb_router_kv_index(gw->router, t->pool);
    if (!pr || !kv || !pr->caches[t->pool]) {
        sb_gateway_admit(gw, req, t, rr);
        return;
    }
    /* The prompt's identity, its tail block too, without copying it: the body is built only
     * for a round trip. */
    sb_tok_key key = {.chain = rr->block_hashes, .n_blocks = rr->n_blocks};
    if (sb_tokenize_prompt_key(req->body, tok, n_tok, &key.prompt_key) != SB_TOKENIZE_OK) {
        sb_gateway_admit(gw, req, t, rr); /* no prompt to tokenize: as it is */
        return;
    }
    key.ctx = sb_tokenize_context_key(req->body, tok, n_tok, model, model_len);
    sb_tok_hit hit = sb_tok_cache_lookup(pr->caches[t->pool], &key);
    if (hit.tokens) {
        hit.exact ? pr->st.exact_hits++ : pr->st.prefix_hits++;
        size_t nk = 0;
        const uint64_t *k = keys_of(pr, kv, hit.tokens, hit.n_tokens, extra, &nk);
        rr->kv_keys = k;
        rr->n_kv_keys = k ? nk : 0;
        if (!hit.exact && build_body(pr, req, tok, n_tok, model, model_len))
            fly(pr, t->pool, &key, extra); /* another witness: the whole prompt's ids */
        sb_gateway_admit(gw, req, t, rr);
        return;
    }
    pr->st.misses++;
    flight *f = build_body(pr, req, tok, n_tok, model, model_len) ? fly(pr, t->pool, &key, extra) : NULL;
    if (f && gw->cfg->tokenize_wait_ms > 0 && park(pr, f, req, t, rr))
        return;
    sb_gateway_admit(gw, req, t, rr);
}
