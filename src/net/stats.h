/* stats: what one finished request leaves behind: the metrics counters and histograms
 * (rendered by net/admin.c) and the access log line.
 *
 * A leaf: it sees an sb_stats (the arrays it updates, the configuration that names pools and
 * endpoints, the log file), never the gateway. Not for: rendering (net/admin.c), error
 * answers (net/errors.h). */
#ifndef SB_NET_STATS_H
#define SB_NET_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "net/exchange.h"
#include "net/http_server.h"
#include "proto/config.h"

/* Fixed-bucket latency histogram (seconds), Prometheus-style cumulative on output. */
#define SB_HISTO_BUCKETS 15
typedef struct sb_histo {
    uint64_t counts[SB_HISTO_BUCKETS + 1]; /* last: above every bound (+Inf) */
    double sum;
    uint64_t n;
} sb_histo;

typedef struct sb_pool_metrics {
    sb_histo duration; /* request start to end */
    sb_histo ttfb;     /* request start to first response byte */
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
} sb_pool_metrics;

/* Response classes of switchboard_requests_total: 1xx..5xx at index 1..5; [0] no response
 * (the client left first); SB_CLASS_CUT an answer that started and was cut (the endpoint
 * failed mid-stream, or the drain window ended): never counted as the 2xx it began as. */
#define SB_CLASS_CUT 6
#define SB_CLASS_COUNT 7
typedef struct sb_ep_metrics {
    uint64_t by_class[SB_CLASS_COUNT];
} sb_ep_metrics;

/* Where finished requests are recorded. Its owner allocates the arrays and keeps every
 * pointer valid while requests can end (the gateway: for its own life). */
typedef struct sb_stats {
    const sb_config *cfg;           /* names pools (cfg->n_pools of them) and endpoints; the
                                     * owner's current configuration (swapped by its reloads) */
    const size_t *pool_first_up;    /* index in ep_metrics of each pool's first endpoint */
    sb_pool_metrics *pool_metrics;  /* cfg->n_pools entries */
    sb_ep_metrics *ep_metrics;      /* one per endpoint, pool-major */
    FILE *access_log;               /* NULL: none; written and flushed per line, never closed here */
    uint64_t *rejected;             /* answers the gateway gave itself with a 4xx (net/errors.h) */
    uint64_t rejected_by_status[6]; /* the gateway's own error answers by status class; an upstream
                                     * failure (502/504, counted as upstream_errors) is not one */
} sb_stats;

/* Histogram bucket bounds (seconds), SB_HISTO_BUCKETS of them. */
extern const double sb_histo_bounds[SB_HISTO_BUCKETS];

/* Records one finished request: metrics (when log->pool names a pool of st->cfg), and the
 * access log line if st->access_log is set (one JSON object per line; the fields are listed in
 * docs/observability.md). Cannot fail (a line that cannot be built for lack of memory is
 * dropped). */
void sb_stats_record(sb_stats *st, const sb_exchange_log *log);

/* Copies what the access log says of who asked (id, peer, method, path; a long path is cut)
 * out of req, which may end before its log line is written. */
void sb_stats_ident(const sb_http_req *req, sb_request_ident *out);

/* The response class log falls in (an index of sb_ep_metrics.by_class). */
int sb_stats_class(const sb_exchange_log *log);

#endif
