#include "net/stats.h"

#include <string.h>
#include <time.h>

#include "base/buf.h"

/* Seconds; spans a cached short answer (5 ms) to a long generation (120 s). */
const double sb_histo_bounds[SB_HISTO_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                  2.5,   5,    10,    30,   60,  120,  300};

static void histo_add(sb_histo *h, double v)
{
    size_t i = 0;
    while (i < SB_HISTO_BUCKETS && v > sb_histo_bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

void sb_stats_record(sb_stats *st, const sb_exchange_log *log)
{
    double total_s = (double)(log->t_end - log->t_start) / 1e9;
    double ttfb_s = log->t_first_byte ? (double)(log->t_first_byte - log->t_start) / 1e9 : -1;
    if (log->pool >= 0 && (size_t)log->pool < st->cfg->n_pools) {
        sb_pool_metrics *pm = &st->pool_metrics[log->pool];
        histo_add(&pm->duration, total_s);
        if (ttfb_s >= 0)
            histo_add(&pm->ttfb, ttfb_s);
        if (log->usage.prompt_tokens > 0)
            pm->prompt_tokens += (uint64_t)log->usage.prompt_tokens;
        if (log->usage.cached_tokens > 0)
            pm->cached_tokens += (uint64_t)log->usage.cached_tokens;
        if (log->usage.completion_tokens > 0)
            pm->completion_tokens += (uint64_t)log->usage.completion_tokens;
        if (log->ep >= 0) {
            int cls = log->status >= 100 && log->status < 600 && log->status != 499 ? log->status / 100 : 0;
            st->ep_metrics[st->pool_first_up[log->pool] + (size_t)log->ep].by_class[cls]++;
        }
    }
    if (!st->access_log)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    sb_buf b = {0};
    sb_buf_printf(&b, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"model\":\"", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    sb_buf_json_escape(&b, log->model ? log->model : "", log->model ? strlen(log->model) : 0);
    const char *pool = log->pool >= 0 ? st->cfg->pools[log->pool].name : "";
    const char *ep = log->pool >= 0 && log->ep >= 0 ? st->cfg->pools[log->pool].endpoints[log->ep].address : "";
    sb_buf_printf(&b,
                  "\",\"pool\":\"%s\",\"endpoint\":\"%s\",\"status\":%d,\"outcome\":\"%s\",\"stream\":%s,"
                  "\"bytes\":%llu,\"ttfb_ms\":%.3f,\"total_ms\":%.3f,\"retries\":%d,\"prompt_tokens\":%lld,"
                  "\"cached_tokens\":%lld,\"completion_tokens\":%lld",
                  pool, ep, log->status, log->outcome, log->stream ? "true" : "false",
                  (unsigned long long)log->bytes_out, ttfb_s >= 0 ? ttfb_s * 1e3 : -1.0, total_s * 1e3, log->retries,
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
