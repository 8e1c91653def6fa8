#include "net/stats.h"

#include <http_parser.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"

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

_Static_assert(SB_REQUEST_ID_MAX == SB_HTTP_REQ_ID_MAX, "a request's id fits its log record");

static void json_str(sb_buf *b, const char *s)
{
    sb_buf_json_escape(b, s, strlen(s));
}

void sb_stats_ident(const sb_http_req *req, sb_request_ident *out)
{
    snprintf(out->id, sizeof(out->id), "%s", req->id);
    snprintf(out->peer, sizeof(out->peer), "%s", req->peer ? req->peer : "");
    size_t n = !req->path ? 0 : req->path_len < SB_LOG_PATH_MAX ? req->path_len : SB_LOG_PATH_MAX;
    if (n)
        memcpy(out->path, req->path, n);
    out->path[n] = 0;
    out->method = req->path ? req->method : -1; /* no head parsed: no method either */
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
        sb_pool_metrics *pm = &st->pool_metrics[log->pool];
        histo_add(&pm->duration, sb_histo_bounds, total_s);
        if (ttfb_s >= 0)
            histo_add(&pm->ttfb, sb_histo_bounds, ttfb_s);
        if (ttft_s >= 0)
            histo_add(&pm->ttft, sb_histo_ttft_bounds, ttft_s);
        if (itl_s >= 0)
            histo_add(&pm->itl, sb_histo_itl_bounds, itl_s);
        if (log->usage.prompt_tokens > 0)
            pm->prompt_tokens += (uint64_t)log->usage.prompt_tokens;
        if (log->usage.cached_tokens > 0)
            pm->cached_tokens += (uint64_t)log->usage.cached_tokens;
        if (log->usage.completion_tokens > 0)
            pm->completion_tokens += (uint64_t)log->usage.completion_tokens;
        if (log->ep >= 0)
            st->ep_metrics[st->pool_first_up[log->pool] + (size_t)log->ep].by_class[sb_stats_class(log)]++;
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
    sb_buf_puts(&b, "\",\"model\":\"");
    json_str(&b, log->model ? log->model : "");
    const char *pool = log->pool >= 0 ? st->cfg->pools[log->pool].name : "";
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
    if (log->band)
        sb_buf_printf(&b, ",\"band\":\"%s\"", log->band);
    if (log->tenant && log->tenant[0])
        sb_buf_printf(&b, ",\"tenant\":\"%s\"", log->tenant); /* a plain name (proto/auth.h) */
    if (log->decision) {
        sb_buf_puts(&b, ",\"decision\":");
        sb_buf_puts(&b, log->decision);
    }
    sb_buf_puts(&b, "}\n");
    if (b.data) {
        fwrite(b.data, 1, b.len, st->access_log);
        fflush(st->access_log);
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
