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

/* Per pool and model label value (see sb_stats_models): what finished requests leave. */
typedef struct sb_model_metrics {
    sb_histo duration; /* request start to end */
    sb_histo ttfb;     /* request start to first response byte (the head: headers time) */
    sb_histo ttft;     /* request start to first token (sb_token_clock); answered "ok" only */
    sb_histo itl;      /* a stream's mean gap between data events, one per request */
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
} sb_model_metrics;

/* Per pool: what happens before a request has a model slot's worth of result. */
typedef struct sb_pool_metrics {
    sb_histo queue_wait; /* flow control: admission to dispatch, one per dispatched request */
} sb_pool_metrics;

/* Response classes of switchboard_requests_total: 1xx..5xx at index 1..5; [0] no response
 * (the client left first); SB_CLASS_CUT an answer that started and was cut (the endpoint
 * failed mid-stream, or the drain window ended): never counted as the 2xx it began as. */
#define SB_CLASS_CUT 6
#define SB_CLASS_COUNT 7
typedef struct sb_ep_metrics {
    uint64_t by_class[SB_CLASS_COUNT];
} sb_ep_metrics;

/* A pool's values of the `model` label, fixed when the statistics are built: slot 0 is the
 * pool's served name (the name sent upstream, which aliases resolve to), slots 1.. its adapters
 * in config order (an adapter is a model name of its own, so LoRA traffic shows apart), at most
 * metrics.max_models of them; past that one more slot, "other", takes the rest. A request's
 * slot is then two comparisons on the adapter index the router already found: no string is
 * hashed per request, and the label's cardinality is bounded by the configuration. */
typedef struct sb_stats_models {
    size_t first;    /* index in model_metrics of the pool's slot 0 */
    size_t ep_first; /* index in ep_metrics of (endpoint 0, slot 0); endpoint e, slot s is
                      * ep_first + e * slots + s */
    uint32_t named;  /* slots with a name of the configuration's (>= 1) */
    uint32_t slots;  /* named, plus 1 when the pool has more names than max_models */
} sb_stats_models;

/* Answers the gateway gives itself, by reason (the error code its body carries; statically
 * known, so the label is bounded): see sb_stats_reason. */
#define SB_REASONS 18
extern const char *const sb_stats_reason_names[SB_REASONS];

/* Where finished requests are recorded. sb_stats_init allocates the arrays for a
 * configuration; sb_stats_free frees them. */
typedef struct sb_stats {
    const sb_config *cfg;            /* names pools (cfg->n_pools of them) and endpoints; the
                                      * owner's current configuration (swapped by its reloads,
                                      * which keep pools, models, adapters and endpoints) */
    sb_stats_models *models;         /* cfg->n_pools entries */
    sb_model_metrics *model_metrics; /* per pool and model slot */
    sb_pool_metrics *pool_metrics;  /* cfg->n_pools entries */
    sb_ep_metrics *ep_metrics;      /* per endpoint and model slot, pool-major */
    FILE *access_log;               /* NULL: none; written per line, flushed and closed by the owner */
    /* The owner's stdio buffer size for access_log (0: flushed after every line) and what is in
     * it: a line that would not fit flushes what is there first, so no line is ever split
     * between two writes with another writer's (a reload's new gateway) in between. The owner
     * zeroes access_log_buffered when it flushes. */
    size_t access_log_cap, access_log_buffered;
    uint64_t *rejected;             /* answers the gateway gave itself with a 4xx (net/errors.h) */
    uint64_t rejected_by_status[6]; /* the gateway's own error answers by status class; an upstream
                                     * failure (502/504, counted as upstream_errors) is not one */
    uint64_t rejected_by_reason[SB_REASONS][2]; /* the same by reason: [0] 4xx, [1] 5xx */
    /* switchboard_fallbacks_total: per requested pool p and entry f of its `fallbacks:`, at
     * [p * SB_FALLBACKS_MAX + f], by enum sb_fallback_reason. Bounded by the configuration. */
    uint64_t (*fallbacks)[SB_FALLBACK_REASONS];
} sb_stats;

/* enum sb_fallback_reason's names, "saturated", "failed", "unavailable": the access log's
 * fallback_reason and the label of switchboard_fallbacks_total. */
extern const char *const sb_stats_fallback_reason_names[SB_FALLBACK_REASONS];

/* Builds st's layout and zeroed arrays for cfg's pools (max_models label values per pool,
 * cfg->metrics_max_models when 0). Returns 0, or -1 out of memory with nothing held. Keeps a
 * pointer to cfg (st->cfg); the other fields (access_log, rejected) are the caller's. */
int sb_stats_init(sb_stats *st, const sb_config *cfg);

/* Frees what sb_stats_init allocated; st's arrays are NULL afterwards. */
void sb_stats_free(sb_stats *st);

/* Carries counts from `from` (a replaced gateway's) into st: by pool name, then model label
 * value, then endpoint address; counts whose pool, model or endpoint are gone are dropped
 * (their series end), and the refusal counters carry whole. Cannot fail. */
void sb_stats_carry(sb_stats *st, const sb_stats *from);

/* Carries pool q's fallback counts of `from` into st's pool p, by fallback pool name (an
 * entry no longer listed ends its series). st's and from's arrays must not overlap. */
void sb_stats_carry_fallbacks(sb_stats *st, uint32_t p, const sb_stats *from, uint32_t q);

/* A reload in place (same pools) to cfg, before st->cfg becomes it: the fallback counts move
 * to their entries' new positions by fallback pool name. Out of memory: they stay put. */
void sb_stats_renumber_fallbacks(sb_stats *st, const sb_config *cfg);

/* The model slot of a request to pool with adapter (-1: the base model or an alias of it). */
uint32_t sb_stats_model_slot(const sb_stats *st, uint32_t pool, int adapter);

/* The `model` label value of pool's slot: the served name, an adapter's name, or "other".
 * Borrowed from st->cfg. */
const char *sb_stats_model_name(const sb_stats *st, uint32_t pool, uint32_t slot);

/* The index in sb_stats_reason_names of an error answer's code (NULL: named by its status:
 * 400 invalid_request, 405 method_not_allowed, 500 internal_error); an unknown code is
 * "other". O(SB_REASONS) string compares: error answers only, never the proxied path. */
int sb_stats_reason(const char *code, int status);

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
    /* Set by the reader when the answer declares a Content-Type other than an event stream:
     * its body is not scanned for events (~650 instructions a 4 KiB chat's JSON answer). */
    bool not_a_stream;
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

/* Records one finished request: metrics (when log->pool names a pool of st->cfg; its model
 * slot from log->adapter), and the
 * access log line if st->access_log is set (one JSON object per line; the fields are listed in
 * docs/observability.md). Cannot fail (a line that cannot be built for lack of memory is
 * dropped). */
void sb_stats_record(sb_stats *st, const sb_exchange_log *log);

/* Copies what the access log says of who asked (id, peer, method, path; a long path is cut)
 * out of req, which may end before its log line is written. */
void sb_stats_ident(const sb_http_req *req, sb_request_ident *out);

/* The response class log falls in (an index of sb_ep_metrics.by_class). */
int sb_stats_class(const sb_exchange_log *log);

/* Whether some access log has lines in its buffer since sb_stats_log_flushed was last called:
 * read without the owner's lock (net/guard.h), so a worker's loop turn takes the lock to flush
 * only when there is something to flush. Process-wide; any thread. */
bool sb_stats_log_pending(void);
void sb_stats_log_flushed(void);

#endif
