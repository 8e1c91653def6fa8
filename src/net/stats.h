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
#include "proto/sse_clock.h"

/* Fixed-bucket latency histogram (seconds), Prometheus-style cumulative on output. Its bounds
 * are its metric's (one of the sb_histo_*bounds arrays below), given to each add and render. */
#define SB_HISTO_BUCKETS 15
typedef struct sb_histo {
    uint64_t counts[SB_HISTO_BUCKETS + 1]; /* last: above every bound (+Inf) */
    double sum;
    uint64_t n;
} sb_histo;

typedef struct sb_pool_metrics {
    sb_histo duration;   /* request start to end */
    sb_histo ttfb;       /* request start to first response byte (the head: headers time) */
    sb_histo ttft;       /* request start to first token (sb_token_clock); answered "ok" only */
    sb_histo itl;        /* a stream's mean gap between data events, one per request */
    sb_histo queue_wait; /* flow control: admission to dispatch, one per dispatched request */
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

/* Histogram bucket bounds (seconds), SB_HISTO_BUCKETS of each: duration and TTFB; time to
 * first token; inter-token latency; queue wait. */
extern const double sb_histo_bounds[SB_HISTO_BUCKETS];
extern const double sb_histo_ttft_bounds[SB_HISTO_BUCKETS];
extern const double sb_histo_itl_bounds[SB_HISTO_BUCKETS];
extern const double sb_histo_queue_bounds[SB_HISTO_BUCKETS];

/* When a response's tokens arrived, learnt from its body as it streams through (the proxy's
 * and the picker's response phase feed it the same way). Zeroed: nothing seen yet. */
typedef struct sb_token_clock {
    sb_ns first_body_ns; /* first body byte: an unstreamed answer's "first token" */
    sb_sse_clock sse;    /* a stream's data events (proto/sse_clock.h) */
} sb_token_clock;

/* Notes len body bytes at arrived at now. Linear in len, never allocates, cannot fail. */
void sb_token_clock_feed(sb_token_clock *tc, const char *at, size_t len, sb_ns now);

/* Fills log's t_first_token, t_last_token and token_events from tc: a body with data events
 * is a stream (first token: its first event; a JSON answer has no line opening "data:"),
 * any other the first body byte. */
void sb_token_clock_log(const sb_token_clock *tc, sb_exchange_log *log);

/* Records how long a request flow control admitted waited before dispatch (0: dispatched at
 * once) in pool's queue_wait histogram. A pool st->cfg no longer has is ignored. */
void sb_stats_queue_wait(sb_stats *st, uint32_t pool, sb_ns waited);

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
