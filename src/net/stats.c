#include "net/stats.h"

#include <http_parser.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"

/* Some access log holds lines (sb_stats_log_pending). */
static atomic_bool log_pending;

bool sb_stats_log_pending(void)
{
    return log_pending;
}

void sb_stats_log_flushed(void)
{
    log_pending = false;
}

/* Seconds; spans a cached short answer (5 ms) to a long generation (120 s). */
const double sb_histo_bounds[SB_HISTO_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                  2.5,   5,    10,    30,   60,  120,  300};

/* Time to first token: prefill of a cached short prompt (10 ms) to a long prompt behind a queue
 * (seconds). A quantile read from buckets is a linear guess inside one bucket, so its error is
 * up to the bucket's width: 20-33% wide from 30 to 100 ms, where most interactive first tokens
 * land (a 25 ms-wide bucket at 50-75 ms read every 57 ms first token as 62.5 ms, 12% high),
 * 50% up to 300 ms; above 10 s only the count and sum tell (the time is lost anyway). */
const double sb_histo_ttft_bounds[SB_HISTO_BUCKETS] = {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1,
                                                       0.15, 0.2,  0.3,  0.5,  1,    2.5,  10};
/* Inter-token latency: a decode step is 5-50 ms on current GPUs; up to 1 s for a starved batch. */
const double sb_histo_itl_bounds[SB_HISTO_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03,
                                                      0.04,  0.05,   0.075, 0.1,  0.25,  0.5,  1};
/* Queue wait: most dispatches wait nothing; a saturated pool holds requests up to its
 * buffer_max_wait_ms (seconds to minutes). */
const double sb_histo_queue_bounds[SB_HISTO_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                        1,     2.5,   5,    10,    30,   60,  120};

static void histo_add(sb_histo *h, const double *bounds, double v)
{
    size_t i = 0;
    while (i < SB_HISTO_BUCKETS && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

/* Every code the gateway's own error answers carry (net/errors.c's callers, core/admission.c's
 * refusals, the picker's), then the names given to answers without a code, then "other" for a
 * code added later and not listed here (a test pins the list against the callers). */
const char *const sb_stats_reason_names[SB_REASONS] = {
    "invalid_api_key",  "json_too_large",
    "json_too_deep",    "model_not_found",
    "body_not_allowed", "not_found",
    "body_too_large",   "shed",
    "queue_full",       "no_healthy_endpoint",
    "queue_timeout",    "draining",
    "empty_subset",     "request_bodies_over_budget",
    "invalid_request",  "method_not_allowed",
    "internal_error",   "other",
};

int sb_stats_reason(const char *code, int status)
{
    if (!code)
        code = status == 400   ? "invalid_request"
               : status == 405 ? "method_not_allowed"
               : status == 500 ? "internal_error"
                               : "other";
    for (int i = 0; i < SB_REASONS - 1; i++)
        if (!strcmp(code, sb_stats_reason_names[i]))
            return i;
    return SB_REASONS - 1;
}

static void layout(const sb_config *cfg, size_t max_models, sb_stats_models *out, size_t *n_model, size_t *n_ep)
{
    size_t first = 0, ep_first = 0;
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *pc = &cfg->pools[p];
        size_t names = 1 + pc->n_adapters;
        sb_stats_models *m = &out[p];
        m->named = (uint32_t)(names < max_models ? names : max_models);
        m->slots = m->named + (names > max_models);
        m->first = first;
        m->ep_first = ep_first;
        first += m->slots;
        ep_first += pc->n_endpoints * m->slots;
    }
    *n_model = first;
    *n_ep = ep_first;
}

const char *const sb_stats_fallback_reason_names[SB_FALLBACK_REASONS] = {"saturated", "failed", "unavailable"};

int sb_stats_init(sb_stats *st, const sb_config *cfg)
{
    size_t max_models = cfg->metrics_max_models ? cfg->metrics_max_models : 32, n_model = 0, n_ep = 0;
    st->cfg = cfg;
    st->models = sb_calloc(cfg->n_pools ? cfg->n_pools : 1, sizeof(sb_stats_models));
    if (st->models)
        layout(cfg, max_models, st->models, &n_model, &n_ep);
    st->model_metrics = sb_calloc(n_model ? n_model : 1, sizeof(sb_model_metrics));
    st->pool_metrics = sb_calloc(cfg->n_pools ? cfg->n_pools : 1, sizeof(sb_pool_metrics));
    st->ep_metrics = sb_calloc(n_ep ? n_ep : 1, sizeof(sb_ep_metrics));
    st->fallbacks = sb_calloc((cfg->n_pools ? cfg->n_pools : 1) * SB_FALLBACKS_MAX, sizeof *st->fallbacks);
    if (st->models && st->model_metrics && st->pool_metrics && st->ep_metrics && st->fallbacks)
        return 0;
    sb_stats_free(st);
    return -1;
}

void sb_stats_free(sb_stats *st)
{
    sb_free(st->models);
    sb_free(st->model_metrics);
    sb_free(st->pool_metrics);
    sb_free(st->ep_metrics);
    sb_free(st->fallbacks);
    st->fallbacks = NULL;
    st->models = NULL;
    st->model_metrics = NULL;
    st->pool_metrics = NULL;
    st->ep_metrics = NULL;
}

uint32_t sb_stats_model_slot(const sb_stats *st, uint32_t pool, int adapter)
{
    const sb_stats_models *m = &st->models[pool];
    uint32_t s = adapter < 0 ? 0 : (uint32_t)adapter + 1;
    /* Past the named ones: "other", the last slot. An index past the pool's adapters cannot come
     * from the router; it still lands inside the pool's slots. */
    return s < m->named ? s : m->slots - 1;
}

const char *sb_stats_model_name(const sb_stats *st, uint32_t pool, uint32_t slot)
{
    const sb_pool_config *pc = &st->cfg->pools[pool];
    if (slot >= st->models[pool].named)
        return "other";
    return slot == 0 ? pc->models[0] : pc->adapters[slot - 1];
}

/* The slot of `from`'s pool q named like st's slot s of pool p, or -1. O(slots): at a reload. */
static long same_model(const sb_stats *st, uint32_t p, uint32_t s, const sb_stats *from, uint32_t q)
{
    const char *name = sb_stats_model_name(st, p, s);
    for (uint32_t t = 0; t < from->models[q].slots; t++)
        if (!strcmp(name, sb_stats_model_name(from, q, t)))
            return t;
    return -1;
}

void sb_stats_carry_fallbacks(sb_stats *st, uint32_t p, const sb_stats *from, uint32_t q)
{
    const sb_pool_config *np = &st->cfg->pools[p], *op = &from->cfg->pools[q];
    for (size_t f = 0; f < np->n_fallbacks && f < SB_FALLBACKS_MAX; f++)
        for (size_t g = 0; g < op->n_fallbacks && g < SB_FALLBACKS_MAX; g++)
            if (!strcmp(np->fallbacks[f].pool_name, op->fallbacks[g].pool_name)) {
                memcpy(st->fallbacks[p * SB_FALLBACKS_MAX + f], from->fallbacks[q * SB_FALLBACKS_MAX + g],
                       sizeof *st->fallbacks);
                break;
            }
}

void sb_stats_renumber_fallbacks(sb_stats *st, const sb_config *cfg)
{
    size_t n = st->cfg->n_pools * SB_FALLBACKS_MAX;
    uint64_t(*old)[SB_FALLBACK_REASONS] = n ? sb_malloc(n * sizeof *old) : NULL;
    if (!old)
        return; /* the counts stay by position: at worst a series takes another entry's label */
    memcpy(old, st->fallbacks, n * sizeof *old);
    memset(st->fallbacks, 0, n * sizeof *old);
    sb_stats from = {.cfg = st->cfg, .fallbacks = old};
    const sb_config *prev = st->cfg;
    st->cfg = cfg;
    for (uint32_t p = 0; p < cfg->n_pools && p < prev->n_pools; p++)
        sb_stats_carry_fallbacks(st, p, &from, p);
    st->cfg = prev;
    sb_free(old);
}

void sb_stats_carry(sb_stats *st, const sb_stats *from)
{
    memcpy(st->rejected_by_status, from->rejected_by_status, sizeof st->rejected_by_status);
    memcpy(st->rejected_by_reason, from->rejected_by_reason, sizeof st->rejected_by_reason);
    const sb_config *cfg = st->cfg, *ocfg = from->cfg;
    for (uint32_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_config *np = &cfg->pools[p];
        uint32_t q = 0;
        while (q < ocfg->n_pools && strcmp(np->name, ocfg->pools[q].name))
            q++;
        if (q == ocfg->n_pools)
            continue;
        const sb_pool_config *op = &ocfg->pools[q];
        const sb_stats_models *nm = &st->models[p], *om = &from->models[q];
        st->pool_metrics[p] = from->pool_metrics[q];
        sb_stats_carry_fallbacks(st, p, from, q);
        for (uint32_t s = 0; s < nm->slots; s++) {
            long t = same_model(st, p, s, from, q);
            if (t < 0)
                continue;
            st->model_metrics[nm->first + s] = from->model_metrics[om->first + (size_t)t];
            /* O(endpoints^2) per model: tens to hundreds of endpoints, once per reload. */
            for (size_t e = 0; e < np->n_endpoints; e++)
                for (size_t f = 0; f < op->n_endpoints; f++)
                    if (!strcmp(np->endpoints[e].address, op->endpoints[f].address)) {
                        st->ep_metrics[nm->ep_first + e * nm->slots + s] =
                            from->ep_metrics[om->ep_first + f * om->slots + (size_t)t];
                        break;
                    }
        }
    }
}

_Static_assert(SB_REQUEST_ID_MAX == SB_HTTP_REQ_ID_MAX, "a request's id fits its log record");

static void json_str(sb_buf *b, const char *s)
{
    sb_buf_json_escape(b, s, strlen(s));
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

void sb_stats_ident(const sb_http_req *req, sb_request_ident *out)
{
    /* Bounded copies, not snprintf("%s"): per request (docs/benchmarks.md, proxy overhead). */
    copy_str(out->id, sizeof(out->id), req->id);
    copy_str(out->peer, sizeof(out->peer), req->peer ? req->peer : "");
    size_t n = !req->path ? 0 : req->path_len < SB_LOG_PATH_MAX ? req->path_len : SB_LOG_PATH_MAX;
    if (n)
        memcpy(out->path, req->path, n);
    out->path[n] = 0;
    out->method = req->path ? req->method : -1; /* no head parsed: no method either */
    out->proto = req->h2 ? "h2" : req->http_minor ? "http/1.1" : "http/1.0";
}

int sb_stats_class(const sb_exchange_log *log)
{
    /* Begun and not finished: whatever status line went out, the client did not get the answer. */
    if (!strcmp(log->outcome, "midstream_error") || (!strcmp(log->outcome, "drain_cut") && log->upstream_status))
        return SB_CLASS_CUT;
    return log->status >= 100 && log->status < 600 && log->status != 499 ? log->status / 100 : 0;
}

void sb_stats_record(sb_stats *st, const sb_exchange_log *log)
{
    double total_s = (double)(log->t_end - log->t_start) / 1e9;
    double ttfb_s = log->t_first_byte ? (double)(log->t_first_byte - log->t_start) / 1e9 : -1;
    /* Tokens only from an answer that finished well: an error's body, or a stream cut short,
     * would pass for a fast first token. */
    bool ok = !strcmp(log->outcome, "ok") && log->upstream_status >= 200 && log->upstream_status < 300;
    double ttft_s = ok && log->t_first_token >= log->t_start && log->t_first_token
                        ? (double)(log->t_first_token - log->t_start) / 1e9
                        : -1;
    /* The mean gap per request, not each gap: the gateway sees events as the network batches
     * them (several in one read get one timestamp), so single gaps would pile up at zero,
     * while (last - first) / (events - 1) is exact whatever the batching. */
    double itl_s = ttft_s >= 0 && log->token_events >= 2
                       ? (double)(log->t_last_token - log->t_first_token) / 1e9 / (double)(log->token_events - 1)
                       : -1;
    if (log->pool >= 0 && (size_t)log->pool < st->cfg->n_pools && !log->gateway_answer) {
        const sb_stats_models *m = &st->models[log->pool];
        uint32_t slot = sb_stats_model_slot(st, (uint32_t)log->pool, log->adapter);
        sb_model_metrics *mm = &st->model_metrics[m->first + slot];
        histo_add(&mm->duration, sb_histo_bounds, total_s);
        if (ttfb_s >= 0)
            histo_add(&mm->ttfb, sb_histo_bounds, ttfb_s);
        if (ttft_s >= 0)
            histo_add(&mm->ttft, sb_histo_ttft_bounds, ttft_s);
        if (itl_s >= 0)
            histo_add(&mm->itl, sb_histo_itl_bounds, itl_s);
        if (log->usage.prompt_tokens > 0)
            mm->prompt_tokens += (uint64_t)log->usage.prompt_tokens;
        if (log->usage.cached_tokens > 0)
            mm->cached_tokens += (uint64_t)log->usage.cached_tokens;
        if (log->usage.completion_tokens > 0)
            mm->completion_tokens += (uint64_t)log->usage.completion_tokens;
        if (log->ep >= 0 && (size_t)log->ep < st->cfg->pools[log->pool].n_endpoints)
            st->ep_metrics[m->ep_first + (size_t)log->ep * m->slots + slot].by_class[sb_stats_class(log)]++;
    }
    if (!st->access_log)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    const sb_request_ident *id = log->ident;
    sb_buf b = {0};
    sb_buf_printf(&b, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"request_id\":\"", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    /* The id is token characters only (routes.c), the peer an address: escaped all the same,
     * so a change upstream of here cannot break the line. */
    json_str(&b, id ? id->id : "");
    sb_buf_puts(&b, "\",\"client\":\"");
    json_str(&b, id ? id->peer : "");
    sb_buf_printf(&b, "\",\"method\":\"%s\",\"path\":\"",
                  id && id->method >= 0 ? http_method_str((enum http_method)id->method) : "");
    json_str(&b, id ? id->path : "");
    sb_buf_printf(&b, "\",\"proto\":\"%s", id && id->proto ? id->proto : "");
    sb_buf_puts(&b, "\",\"model\":\"");
    json_str(&b, log->model ? log->model : "");
    /* A request served by a fallback keeps the pool it asked for in "pool"; "fallback" names
     * the pool that took it, whose endpoint "endpoint" is. */
    bool fell = log->fell_back && log->pool >= 0 && log->requested_pool < st->cfg->n_pools;
    const char *pool = fell             ? st->cfg->pools[log->requested_pool].name
                       : log->pool >= 0 ? st->cfg->pools[log->pool].name
                                        : "";
    const char *ep = log->pool >= 0 && log->ep >= 0 ? st->cfg->pools[log->pool].endpoints[log->ep].address : "";
    sb_buf_printf(
        &b,
        "\",\"pool\":\"%s\",\"endpoint\":\"%s\",\"status\":%d,\"upstream_status\":%d,\"outcome\":\"%s\",\"reason\":\"",
        pool, ep, log->status, log->upstream_status, log->outcome);
    json_str(&b, log->reason ? log->reason : "");
    sb_buf_printf(&b,
                  "\",\"stream\":%s,\"bytes\":%llu,\"ttfb_ms\":%.3f,\"ttft_ms\":%.3f,\"itl_ms\":%.3f,\"total_ms\":%.3f,"
                  "\"retries\":%d,"
                  "\"prompt_tokens\":%lld,\"cached_tokens\":%lld,\"completion_tokens\":%lld",
                  log->stream ? "true" : "false", (unsigned long long)log->bytes_out, ttfb_s >= 0 ? ttfb_s * 1e3 : -1.0,
                  ttft_s >= 0 ? ttft_s * 1e3 : -1.0, itl_s >= 0 ? itl_s * 1e3 : -1.0, total_s * 1e3, log->retries,
                  (long long)log->usage.prompt_tokens, (long long)log->usage.cached_tokens,
                  (long long)log->usage.completion_tokens);
    /* Who asked, as flow control saw it: never the key, only what the configuration names. */
    if (fell)
        sb_buf_printf(&b, ",\"fallback\":\"%s\",\"fallback_reason\":\"%s\"", st->cfg->pools[log->pool].name,
                      log->fallback_reason ? log->fallback_reason : "");
    if (log->band)
        sb_buf_printf(&b, ",\"band\":\"%s\"", log->band);
    if (log->tenant && log->tenant[0])
        sb_buf_printf(&b, ",\"tenant\":\"%s\"", log->tenant); /* a plain name (proto/auth.h) */
    if (log->decision) {
        sb_buf_puts(&b, ",\"decision\":");
        sb_buf_puts(&b, log->decision);
    }
    sb_buf_puts(&b, "}\n");
    if (b.data) { /* else flushed by the owner (net/gateway.c: once per loop turn) */
        if (st->access_log_buffered && st->access_log_buffered + b.len > st->access_log_cap) {
            fflush(st->access_log);
            st->access_log_buffered = 0;
        }
        fwrite(b.data, 1, b.len, st->access_log);
        if (b.len >= st->access_log_cap) {
            fflush(st->access_log); /* as large as the buffer: stdio may have kept a tail */
            st->access_log_buffered = 0;
        } else {
            st->access_log_buffered += b.len;
            log_pending = true;
        }
    }
    sb_buf_free(&b);
}

void sb_stats_queue_wait(sb_stats *st, uint32_t pool, sb_ns waited)
{
    if (pool < st->cfg->n_pools)
        histo_add(&st->pool_metrics[pool].queue_wait, sb_histo_queue_bounds, (double)waited / 1e9);
}

void sb_token_clock_feed(sb_token_clock *tc, const char *at, size_t len, sb_ns now)
{
    if (!len)
        return;
    if (!tc->first_body_ns)
        tc->first_body_ns = now;
    if (!tc->not_a_stream)
        sb_sse_clock_feed(&tc->sse, at, len, now);
}

void sb_token_clock_log(const sb_token_clock *tc, sb_exchange_log *log)
{
    if (tc->sse.events) {
        log->t_first_token = tc->sse.first_ns;
        log->t_last_token = tc->sse.last_ns;
        log->token_events = tc->sse.events;
    } else {
        log->t_first_token = tc->first_body_ns;
        log->t_last_token = 0;
        log->token_events = 0;
    }
}
