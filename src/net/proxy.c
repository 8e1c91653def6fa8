/* proxy: one request's exchange with an upstream endpoint.
 *
 * An exchange lives from the routing decision until both sides are done: the client's
 * response is finished or the client left, and the upstream connection is released or
 * closed. It is freed synchronously at that point; it owns no libuv handle of its own (the
 * upstream connection's timer serves for timeouts; a retry's backoff timer is a separate
 * allocation that frees itself when closed), so no close callback delays it.
 *
 * Retries (core/retry.h, `retry:`): an attempt that failed before any response byte reached
 * the client (connect failure, reset or close before the answer, optionally a response
 * timeout, or a listed 5xx status, read before the head is forwarded and its body discarded)
 * is followed, after a jittered backoff, by another on an endpoint the request has not tried:
 * the router decides again with the tried ones excluded, since the fleet has changed meanwhile
 * and a fresh decision sees the failure just counted; the first pick is the plain decision, so
 * replay is unchanged. Bounded by retry.attempts, by the endpoints the pool has, and by the
 * retry budget (retries in flight against requests in flight). The body is held whole by the
 * gateway, so resending it costs nothing. A pooled connection that the server had closed
 * (write error or EOF with nothing read) is replaced by a fresh connection to the same
 * endpoint once, without counting as a retry. After response bytes reach the client, nothing
 * is retried. */
#include <http_parser.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "core/decide.h"
#include "core/explain.h"
#include "core/flow.h"
#include "core/retry.h"
#include "net/decisions.h"
#include "net/guard.h"
#include "net/iobatch.h"
#include "net/probe.h"
#include "net/proxy.h"
#include "net/stats.h"
#include "proto/body_edit.h"
#include "proto/h1.h"
#include "proto/inspect.h"
#include "proto/openai_error.h"
#include "proto/orca.h"
#include "proto/sse_strip.h"
#include "proto/usage.h"

/* The backoff before a retry: its own allocation, so the exchange can be freed while the
 * timer's close is still pending (x is NULL then). */
typedef struct backoff {
    uv_timer_t timer;
    struct exchange *x;
} backoff;

typedef struct exchange {
    const sb_proxy_env *env;
    sb_http_req *req;          /* NULL once the client is gone or answered */
    sb_proxy_target t;
    sb_sched_request rr;
    sb_snapshot *snap;         /* the configuration this request started under */
    uint32_t ep;
    uint32_t excluded[SB_RETRY_MAX_ATTEMPTS];
    size_t n_excluded;
    int attempts;
    int retries;      /* attempts on another endpoint after a failure (the log's retries) */
    bool retrying;    /* past its first attempt: counted in retries_live */
    int retry_status; /* a retryable 5xx head just read: discard it and retry */
    bool status_to_fallback; /* ...on a fallback: no endpoint of this pool is left to try */
    backoff *backoff; /* waiting to retry */
    /* The synchronous probe (probe.sync_max_age_ms): waiting for fresh reports of the best
     * candidates before the first dispatch; the prompt's hashes copied out of the gateway's
     * scratch (valid for the first pick only) so the decision after the wait has them. */
    sb_probe_wait *probe_wait;
    uint64_t *probe_keys; /* block hashes, then KV keys: one allocation */
    bool probed;
    bool decided;     /* a pick in this pool has counted the request's demand (sb_sched_request.repeat) */
    int last_status;  /* the last failed attempt, for the answer if none is left */
    const char *last_code;
    bool fresh_retry_used;
    bool retry_same_ep;        /* next attempt: same endpoint, new connection */
    /* Decided on another thread than the client's (a queued request released by another
     * worker or the main loop): the connection is taken on the client's loop (loop), by a post
     * (net/guard.h); the exchange lives until it ran. */
    bool transit;
    uv_loop_t *loop;
    bool dispatched;           /* router was told; must be told how it ended */
    sb_ticket ticket;
    uint32_t prompt_tokens;    /* estimate, for the router's pending-prefill accounting */
    sb_upstream_conn *uc;
    sb_upstream_conn *connecting; /* a connect in progress (owned by the pool until it ends) */
    http_parser parser;
    /* The response's head read by the fast path (proto/h1.h): its body bytes still due, -1
     * while http-parser reads the response. fast_tried: the fast path had its one look (at the
     * first bytes of the answer); fast_taken: it read the head. */
    int64_t fast_left;
    bool fast_tried, fast_taken;
    bool fast_reuse; /* the fast path's verdict: keep-alive, and nothing after the body */
    sb_buf head; /* request head sent upstream */
    size_t served_quoted_len;
    int pending_writes;
    /* response */
    sb_buf resp_headers;       /* header lines for the client */
    size_t hfield_start;       /* where the current header line begins in resp_headers */
    bool in_value;
    bool skip_header;
    bool orca_header;          /* the current header line is endpoint-load-metrics */
    size_t orca_off;           /* its value within resp_headers */
    bool ctype_header;         /* the current header line is Content-Type */
    size_t ctype_off;          /* the Content-Type value within resp_headers (0: none yet) */
    bool orca_asked;           /* we added the request header: strip the answer */
    bool got_bytes;            /* anything read from upstream for this attempt */
    bool started;              /* response head sent to the client */
    bool complete;             /* upstream message complete */
    bool sse;
    bool paused;               /* upstream reading paused for client backpressure */
    int status;
    uint64_t bytes_out;
    sb_ns t_start, t_first_byte;
    bool carry_pending;        /* a same-endpoint retry keeps the pick's pending prefix mark */
    bool wipe_head;            /* head holds the pool's upstream key: wiped before it is freed */
    uint64_t carried_hash;
    sb_ns t_first_body;        /* first body byte: for a stream, about the first token */
    sb_ns t_attempt;           /* the last attempt's dispatch: the served endpoint's prefill starts there */
    sb_token_clock tokens;     /* when the answer's tokens came: the TTFT and ITL figures */
    int final_status;          /* what the client got (499: it left first) */
    const char *outcome;       /* NULL: decided from final_status at the end (record) */
    const char *reason;
    size_t tail_len;
    /* upstream.stream_usage: the gateway asked this stream for usage (t.usage_edit): the
     * usage-only chunk is read (tail) but not passed on. hold: the strip's buffer for an
     * unfinished event (limits.max_held_event_bytes), allocated when such a stream begins. */
    bool stripping;
    sb_sse_strip strip;
    char *hold;
    char model[SB_MODEL_NAME_MAX + 1];
    sb_buf decision;           /* the pick explained, rendered at pick time (access_log_decisions) */
    sb_decision_ref dref;      /* its record in the ring of recent decisions, for the outcome */
    /* Buffers last: not zeroed when the exchange is made (exchange_new); each has its length
     * or its NUL set before it is read. */
    char last_msg[200];
    char served_quoted[SB_MODEL_NAME_MAX * 6 + 16];
    char tail[2048]; /* last bytes of the response body: usage comes last */
} exchange;

/* Zeroes the exchange up to its buffers: calloc cleared all 5 KiB of it, a sixth of the
 * instructions of a request (docs/benchmarks.md, proxy overhead). */
static exchange *exchange_new(void)
{
    exchange *x = sb_malloc(sizeof(*x));
    if (x) {
        memset(x, 0, offsetof(exchange, last_msg));
        x->last_msg[0] = 0;
    }
    return x;
}

/* Defined (const) after its callbacks, before sb_proxy_start. */
static const http_parser_settings resp_settings;
static void attempt(exchange *x);
static void resume_attempt(void *arg);
static void connect_attempt(exchange *x);
static void close_header_line(exchange *x);
static void to_client(void *ud, const char *at, size_t len);
static void upstream_read_start(exchange *x);
static void on_response_timeout(sb_upstream_conn *uc);

static sb_ns now_ns(void) { return uv_hrtime(); }

/* An answer passed through from the endpoint: ok, or which class of error it was (a 500
 * relayed is not a success, even though the gateway did its part). */
static const char *relayed_outcome(int status)
{
    return status >= 500 ? "upstream_5xx" : status >= 400 ? "upstream_4xx" : "ok";
}

static void record(exchange *x)
{
    sb_exchange_log log = {
        .pool = x->t.pool,
        .ep = x->dispatched || x->attempts ? (int)x->ep : -1,
        .adapter = x->t.adapter,
        .status = x->final_status,
        .upstream_status = x->status >= 200 ? x->status : 0,
        .outcome = x->outcome ? x->outcome : relayed_outcome(x->final_status),
        .reason = x->reason,
        .ident = &x->t.ident,
        .model = x->model,
        .stream = x->t.stream,
        .bytes_out = x->bytes_out,
        .t_start = x->t_start,
        .t_first_byte = x->t_first_byte,
        .t_end = now_ns(),
        .retries = x->retries,
        .decision = x->decision.data,
        .band = x->t.band >= 0 ? sb_band_name((enum sb_band)x->t.band) : NULL,
        .tenant = x->t.tenant,
        .fell_back = x->t.fell_back,
        .requested_pool = x->t.requested_pool,
        .fallback_reason =
            x->t.fell_back ? sb_stats_fallback_reason_names[x->t.fallback_reason % SB_FALLBACK_REASONS] : NULL,
    };
    sb_usage_scan(x->tail, x->tail_len, &log.usage);
    sb_token_clock_log(&x->tokens, &log);
    x->env->counters->usage_stripped += x->strip.stripped;
    x->env->counters->usage_overflows += x->strip.overflows;
    sb_decisions_finish(&x->dref, log.status, sb_decisions_ttft_ms(&log), (uint32_t)x->attempts,
                        log.upstream_status ? sb_upstream_address(x->env->upstream(x->env->owner, x->t.pool, x->ep))
                                            : NULL);
    /* A streamed answer's first body bytes come with its first token: learn the endpoint's
     * prefill speed from it (non-streamed answers arrive whole: no time to first token), timed
     * from the attempt it answered, not the request's start (failed attempts, backoff, the pool
     * a fallback left are not this endpoint's prefill). */
    if (x->t.stream && log.usage.found && log.usage.prompt_tokens > 0 && x->t_first_body && x->t_attempt &&
        log.outcome[0] == 'o' && log.ep >= 0)
        sb_router_observe_ttft(x->env->router, x->t.pool, (uint32_t)log.ep, (uint64_t)log.usage.prompt_tokens,
                               log.usage.cached_tokens > 0 ? (uint64_t)log.usage.cached_tokens : 0,
                               x->t_first_body - x->t_attempt);
    /* What the engine found cached against what the pick's index predicted: the index learns
     * how fast the endpoint's cache really turns over (pools with prefix_calibrate). */
    if (log.usage.found && log.usage.prompt_tokens > 0 && log.usage.cached_tokens >= 0 && log.outcome[0] == 'o' &&
        log.ep >= 0)
        sb_router_observe_cached(x->env->router, x->t.pool, (uint32_t)log.ep, &x->ticket,
                                 (uint64_t)log.usage.prompt_tokens, (uint64_t)log.usage.cached_tokens);
    x->env->record(x->env->owner, &log);
}

static void exchange_maybe_free(exchange *x)
{
    if (x->req || x->uc || x->pending_writes || x->connecting || x->backoff || x->probe_wait || x->transit)
        return;
    record(x);
    x->env->counters->exchanges_live--;
    if (x->retrying)
        x->env->counters->retries_live--;
    const sb_proxy_env *env = x->env;
    uint32_t pool = x->t.pool;
    sb_snapshot *snap = x->snap;
    if (x->wipe_head && x->head.data)
        OPENSSL_cleanse(x->head.data, x->head.cap);
    sb_buf_free(&x->head);
    sb_buf_free(&x->resp_headers);
    sb_buf_free(&x->decision);
    sb_free(x->probe_keys);
    sb_free(x->hold);
    sb_free(x);
    /* Capacity freed: queued requests of this pool may go; the owner may be freed. */
    env->end(env->owner, snap, pool);
}

/* Tells the router how this attempt ended (once). status 0: the connection failed; 499: not
 * the endpoint's doing (the client left, or a pooled connection was found closed before the
 * request reached it): it does not count for outlier detection. */
static void report_end(exchange *x, bool ok, int status)
{
    if (!x->dispatched)
        return;
    x->dispatched = false;
    bool healthy = ok && status < 500;
    sb_router_finished(x->env->router, x->t.pool, x->ep, &x->ticket, healthy, status != 499, now_ns());
}

static void drop_upstream(exchange *x, bool reusable)
{
    if (!x->uc)
        return;
    sb_upstream_conn *uc = x->uc;
    x->uc = NULL;
    sb_upstream_deadline(uc, 0, NULL);
    uc->on_read = NULL;
    uc->owner = NULL;
    if (reusable)
        sb_upstream_release(uc);
    else
        sb_upstream_close(uc);
}

/* Client answered or gone: detach from it. */
static void detach_client(exchange *x)
{
    if (!x->req)
        return;
    x->req->on_abort = NULL;
    x->req->on_drain = NULL;
    x->req->on_cut = NULL;
    x->req->user = NULL;
    x->req = NULL;
}

static bool fall_back(exchange *x, enum sb_fallback_reason why);

/* Fails the exchange before anything reached the client: unless the pool's next fallback
 * takes the request (an upstream failure or no endpoint, not the gateway's own error).
 * resend_ok: the failure is one that may be sent elsewhere, as retry.on says (a connect failure
 * or no endpoint always: nothing ran). A fallback sends the request again, so a response
 * timeout, a reset or a bad answer the policy does not retry (the generation may be running, a
 * paid provider would run it twice) is answered, never moved. */
static void fail_before_response(exchange *x, int status, const char *message, const char *code, bool resend_ok)
{
    drop_upstream(x, false);
    report_end(x, false, status);
    if (code && resend_ok && x->req && !x->started &&
        fall_back(x, x->attempts ? SB_FALLBACK_FAILED : SB_FALLBACK_UNAVAILABLE))
        return;
    x->env->counters->upstream_errors++;
    if (x->req) {
        x->final_status = status;
        /* The gateway's own failure (out of memory) comes without a code; 503 before any
         * attempt: nothing to route to (the gateway's answer, not a failure); anything else
         * is the upstream's (a replica's 500 whose retry found no endpoint left included). */
        x->outcome = !code ? "gateway_error" : status == 503 && !x->attempts ? "refused" : "upstream_error";
        x->reason = code;
    }
    if (x->req) {
        sb_http_req *req = x->req;
        detach_client(x);
        x->env->error(x->env->owner, req, status, message, "upstream_error", code);
    }
    exchange_maybe_free(x);
}

/* The upstream failed after the response started: end the client's stream visibly. `code`
 * names the failure in the access log (reason). */
static void fail_midstream(exchange *x, const char *why, const char *code)
{
    drop_upstream(x, false);
    report_end(x, false, 502);
    x->env->counters->midstream_errors++;
    if (x->req) {
        x->outcome = "midstream_error";
        x->reason = code;
    }
    if (x->req) {
        sb_http_req *req = x->req;
        detach_client(x);
        if (x->sse) {
            sb_buf ev = {0};
            sb_buf_puts(&ev, "data: ");
            sb_openai_error(&ev, why, "upstream_error", NULL, "upstream_failed_midstream");
            sb_buf_puts(&ev, "\n\n");
            if (ev.data)
                sb_http_stream_write(req, ev.data, ev.len);
            sb_buf_free(&ev);
        }
        SB_WARN("upstream %s failed mid-stream: %s",
                sb_upstream_address(x->env->upstream(x->env->owner, x->t.pool, x->ep)), why);
        sb_http_stream_abort(req);
    }
    exchange_maybe_free(x);
}

static void on_backoff_closed(uv_handle_t *h)
{
    sb_free(h->data);
}

static void cancel_backoff(exchange *x)
{
    if (!x->backoff)
        return;
    x->backoff->x = NULL;
    uv_close((uv_handle_t *)&x->backoff->timer, on_backoff_closed);
    x->backoff = NULL;
}

static void on_backoff(uv_timer_t *t)
{
    sb_guard_enter(); /* a libuv callback into the exchange (net/guard.h) */
    exchange *x = ((backoff *)t->data)->x;
    cancel_backoff(x);
    if (x->req)
        attempt(x);
    else
        exchange_maybe_free(x);
    sb_guard_leave();
}

/* Whether an endpoint this request has not tried could take it: an available one, or, when no
 * endpoint of the pool is available (panic routing), any that is not draining. As the healthy
 * filter decides; asked before a 5xx head is discarded, so that with nothing to try the
 * replica's answer is passed through rather than replaced by the gateway's. */
static bool untried_left(exchange *x)
{
    sb_ns now = now_ns();
    size_t n = sb_router_endpoint_count(x->env->router, x->t.pool);
    bool any_available = false, untried_available = false, untried_open = false;
    for (size_t i = 0; i < n; i++) {
        sb_endpoint *e = sb_router_endpoint(x->env->router, x->t.pool, (uint32_t)i);
        bool tried = i == x->ep;
        for (size_t k = 0; k < x->n_excluded && !tried; k++)
            tried = x->excluded[k] == i;
        bool available = sb_endpoint_available(e, now);
        any_available |= available;
        if (!tried) {
            untried_available |= available;
            untried_open |= sb_endpoint_health(e, now) != SB_HEALTH_DRAINING;
        }
    }
    return untried_available || (!any_available && untried_open);
}

/* Whether the attempt that just failed for `reason` (status: the 5xx read) may be followed by
 * another: the policy retries it, attempts and endpoints are left, and the budget allows. */
static bool may_retry(exchange *x, enum sb_retry_reason reason, int status)
{
    const sb_retry_policy *rp = &x->snap->cfg->retry;
    if (!x->req || x->started || !sb_retry_on(rp, reason, status) || (uint32_t)x->attempts >= rp->attempts ||
        x->n_excluded + 1 >= SB_RETRY_MAX_ATTEMPTS ||
        x->n_excluded + 1 >= sb_router_endpoint_count(x->env->router, x->t.pool) || !untried_left(x))
        return false;
    /* The budget bounds requests retrying at once, not attempts: one already retrying goes on. */
    sb_gateway_counters *c = x->env->counters;
    if (!x->retrying && !sb_retry_budget_allows(rp, c->retries_live, c->exchanges_live)) {
        c->retries_budget_denied++;
        return false;
    }
    return true;
}

/* Takes the next attempt on another endpoint, after the backoff. */
static void start_retry(exchange *x, enum sb_retry_reason reason)
{
    static uint64_t rng;
    sb_gateway_counters *c = x->env->counters;
    c->retries++;
    x->retries++;
    sb_endpoint *e = sb_router_endpoint(x->env->router, x->t.pool, x->ep);
    if (e)
        e->retries_by[reason]++;
    if (!x->retrying) {
        x->retrying = true;
        c->retries_live++;
    }
    x->excluded[x->n_excluded++] = x->ep;
    /* The failed attempt's status and first byte were the endpoint just left's: kept, they
     * would be logged (and recorded as served_by) against the next one even if it never
     * answers (its connect fails before send_request). */
    x->status = 0;
    x->t_first_byte = 0;
    if (!rng)
        rng = uv_hrtime() | 1;
    uint32_t ms = sb_retry_backoff_ms(&x->snap->cfg->retry, (uint32_t)x->attempts, sb_rand_next(&rng));
    backoff *b = ms ? sb_malloc(sizeof(*b)) : NULL;
    if (!b) {
        attempt(x); /* no wait asked, or no memory to wait with */
        return;
    }
    b->x = x;
    /* The client's loop: a retry follows a failure read there (a decision made on another
     * thread never retries from it, attempt). */
    uv_timer_init(x->loop ? x->loop : x->env->loop, &b->timer);
    b->timer.data = b;
    x->backoff = b;
    uv_timer_start(&b->timer, on_backoff, ms, 0);
}

/* Remembers the failed attempt, for the client's answer if no other attempt is made. */
static void note_failure(exchange *x, int status, const char *code, const char *what)
{
    x->last_status = status;
    x->last_code = code;
    snprintf(x->last_msg, sizeof(x->last_msg), "upstream %s: %s",
             sb_upstream_address(x->env->upstream(x->env->owner, x->t.pool, x->ep)), what);
}

/* A failure with nothing forwarded to the client: retry if the rules allow. */
static void retry_or_fail(exchange *x, int err, enum sb_retry_reason reason)
{
    /* A pooled connection the server had closed shows as a reset or EOF with nothing read,
     * never as a timeout: a timed-out request may be running on the endpoint, and sending it
     * again would run it twice. */
    bool stale_pooled = x->uc && x->uc->reused && !x->got_bytes && err != UV_ETIMEDOUT;
    drop_upstream(x, false);
    if (!x->req) {
        report_end(x, false, 0);
        exchange_maybe_free(x);
        return;
    }
    if (stale_pooled && !x->fresh_retry_used) {
        /* The server closed a keep-alive connection we thought idle: not the endpoint's
         * fault, and the request never reached it. Same endpoint, new connection. */
        x->fresh_retry_used = true;
        x->retry_same_ep = true;
        /* The prefix the pick marked pending there goes with the request, not away with the
         * dead connection's ticket. */
        x->carry_pending = x->ticket.has_prefix_pending;
        x->carried_hash = x->ticket.prefix_pending;
        x->ticket.has_prefix_pending = false;
        report_end(x, true, 499); /* the endpoint never saw it: not evidence of its health */
        attempt(x);
        return;
    }
    /* Never reached the endpoint: the work charged to it goes back. */
    if (reason == SB_RETRY_CONNECT)
        sb_router_withdraw_sent(x->env->router, x->t.pool, x->ep, &x->ticket, now_ns());
    report_end(x, false, 0);
    note_failure(x, err == UV_ETIMEDOUT ? 504 : 502, err == UV_ETIMEDOUT ? "upstream_timeout" : "upstream_unavailable",
                 uv_strerror(err));
    if (may_retry(x, reason, 0)) {
        start_retry(x, reason);
        return;
    }
    fail_before_response(x, x->last_status, x->last_msg, x->last_code,
                         reason == SB_RETRY_CONNECT || sb_retry_on(&x->snap->cfg->retry, reason, 0));
}

/* Whether a retryable 5xx with no endpoint left may go to a fallback: the pool the request
 * asked for has entries not tried yet (whether one takes it is asked afterwards). */
static bool status_may_fall_back(exchange *x, int status)
{
    const sb_config *cfg = x->snap->cfg;
    uint32_t from = x->t.fell_back ? x->t.requested_pool : x->t.pool;
    return x->req && !x->started && x->env->fallback && from < cfg->n_pools &&
           x->t.fallback_next < cfg->pools[from].n_fallbacks && sb_retry_on(&cfg->retry, SB_RETRY_STATUS, status);
}

/* The head of a retryable 5xx was read (nothing forwarded): its body is dropped with the
 * connection, and the request goes to another endpoint, or to a fallback pool. */
static void retry_status(exchange *x)
{
    int status = x->retry_status;
    x->retry_status = 0;
    drop_upstream(x, false);
    report_end(x, true, status);
    char what[40];
    snprintf(what, sizeof(what), "answered %d", status);
    note_failure(x, status, "upstream_error", what);
    if (x->req && x->status_to_fallback) {
        x->status_to_fallback = false;
        fail_before_response(x, x->last_status, x->last_msg, x->last_code, true); /* retry.on has the status */
    } else if (x->req)
        start_retry(x, SB_RETRY_STATUS);
    else
        exchange_maybe_free(x);
}

/* ---- client side callbacks ---- */

/* Stops whatever the exchange waits for before an answer: a retry's backoff, a probe, a
 * connection (closing it suppresses the connect callback: nothing touches x from there). */
static void stop_waiting(exchange *x)
{
    cancel_backoff(x);
    if (x->probe_wait) {
        (void)sb_guard_here(NULL); /* the prober's wait lives on the main loop */
        sb_prober_sync_cancel(x->probe_wait);
        x->probe_wait = NULL;
    }
    if (x->connecting) {
        sb_upstream_close(x->connecting);
        x->connecting = NULL;
    }
}

/* The drain window ended before any answer began (waiting to retry, for a probe, for a
 * connection or for the answer's head): the client gets a clear 503 rather than a closed
 * connection; what was sent upstream is abandoned (closing it stops the engine). */
static void on_client_cut(sb_http_req *req)
{
    exchange *x = req->user;
    stop_waiting(x);
    drop_upstream(x, false);
    report_end(x, true, 499); /* not the endpoint's doing */
    x->final_status = 503;
    x->outcome = "drain_cut";
    x->reason = "drain_deadline_before_response";
    detach_client(x);
    x->env->error(x->env->owner, req, 503,
                  "the gateway is shutting down: shutdown.drain_ms passed before an answer came", "service_unavailable",
                  "draining");
    exchange_maybe_free(x);
}

static void on_client_abort(sb_http_req *req)
{
    exchange *x = req->user;
    x->req = NULL;
    stop_waiting(x);
    if (x->env->cutting || req->cut) {
        /* The drain window ended with this request still running: the gateway closed it (req
         * says so for a request of a gateway retired before the drain, whose env is not the
         * one that cut). */
        x->outcome = "drain_cut";
        x->reason = x->started ? "drain_deadline" : "drain_deadline_before_response";
        if (!x->started)
            x->final_status = 503;
    } else {
        x->env->counters->client_aborts++;
        x->outcome = "client_abort";
        x->reason = "in_flight";
        if (!x->started)
            x->final_status = 499;
    }
    /* Closing the upstream connection is how a model server learns to stop generating. */
    drop_upstream(x, false);
    report_end(x, true, 499);
    exchange_maybe_free(x);
}

static void on_client_drain(sb_http_req *req)
{
    exchange *x = req->user;
    if (x->paused && x->uc) {
        x->paused = false;
        uint32_t rto = x->snap->cfg->response_ms;
        sb_upstream_deadline(x->uc, rto, on_response_timeout);
        upstream_read_start(x);
    }
}

/* ---- response parsing ---- */

/* Header names proxying treats apart, classified by length first and one case-blind compare
 * (a loop of strlen and strncasecmp over the list was ~1,300 instructions a request: callgrind,
 * docs/benchmarks.md section 15). */
enum hkind {
    H_OTHER,
    H_HOP, /* hop-by-hop: connection, keep-alive, transfer-encoding, content-length,
            * proxy-connection, te, trailer, upgrade */
    H_HOST,
    H_EXPECT,
    H_AUTHORIZATION,
    H_REQUEST_ID,
    H_FORWARDED_FOR,
    H_ORCA_FORMAT, /* endpoint-load-metrics-format */
    H_ORCA,        /* endpoint-load-metrics */
    H_CONTENT_TYPE,
};

/* `a` (n bytes) is `lc` (lowercase letters, digits and '-') but for ASCII case. */
static bool name_is(const char *a, size_t n, const char *lc)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)(a[i] | 0x20) != (unsigned char)lc[i])
            return false;
    return lc[n] == '\0';
}

static enum hkind header_kind(const char *n, size_t len)
{
    switch (len) {
    case 2: return name_is(n, len, "te") ? H_HOP : H_OTHER;
    case 4: return name_is(n, len, "host") ? H_HOST : H_OTHER;
    case 6: return name_is(n, len, "expect") ? H_EXPECT : H_OTHER;
    case 7: return name_is(n, len, "trailer") || name_is(n, len, "upgrade") ? H_HOP : H_OTHER;
    case 10: return name_is(n, len, "connection") || name_is(n, len, "keep-alive") ? H_HOP : H_OTHER;
    case 12:
        return name_is(n, len, "x-request-id")   ? H_REQUEST_ID
               : name_is(n, len, "content-type") ? H_CONTENT_TYPE
                                                 : H_OTHER;
    case 13: return name_is(n, len, "authorization") ? H_AUTHORIZATION : H_OTHER;
    case 14: return name_is(n, len, "content-length") ? H_HOP : H_OTHER;
    case 15: return name_is(n, len, "x-forwarded-for") ? H_FORWARDED_FOR : H_OTHER;
    case 16: return name_is(n, len, "proxy-connection") ? H_HOP : H_OTHER;
    case 17: return name_is(n, len, "transfer-encoding") ? H_HOP : H_OTHER;
    case 21: return name_is(n, len, "endpoint-load-metrics") ? H_ORCA : H_OTHER;
    case 28: return name_is(n, len, "endpoint-load-metrics-format") ? H_ORCA_FORMAT : H_OTHER;
    default: return H_OTHER;
    }
}

static int r_on_header_field(http_parser *p, const char *at, size_t len)
{
    exchange *x = p->data;
    if (x->in_value || x->resp_headers.len == x->hfield_start) {
        if (x->in_value)
            close_header_line(x);
        x->hfield_start = x->resp_headers.len;
        x->in_value = false;
        x->skip_header = false;
    }
    return sb_buf_append(&x->resp_headers, at, len);
}

static void classify_header(exchange *x)
{
    enum hkind k = header_kind(x->resp_headers.data + x->hfield_start, x->resp_headers.len - x->hfield_start);
    /* The client gets the gateway's id (added by the server for every answer), not a second one. */
    if (k == H_HOP || k == H_REQUEST_ID)
        x->skip_header = true;
    x->ctype_header = k == H_CONTENT_TYPE;
    x->orca_header = k == H_ORCA;
}

/* Ends the current header line: an ORCA load report updates the endpoint at once (before
 * the next scrape); it is passed on to the client only if the client asked for it. */
static void close_header_line(exchange *x)
{
    if (x->orca_header) {
        const char *v = x->resp_headers.data + x->orca_off;
        size_t vlen = x->resp_headers.len - x->orca_off;
        sb_endpoint_report rep;
        if (sb_orca_parse(v, vlen, &rep) > 0) {
            sb_endpoint *ep = sb_router_endpoint(x->env->router, x->t.pool, x->ep);
            if (ep)
                sb_endpoint_report_merge(ep, &rep, SB_REPORT_ORCA, now_ns());
            x->env->counters->orca_reports++;
        }
        x->orca_header = false;
        if (x->orca_asked)
            x->skip_header = true;
    }
    if (x->skip_header)
        x->resp_headers.len = x->hfield_start;
    else
        sb_buf_puts(&x->resp_headers, "\r\n");
}

static int r_on_header_value(http_parser *p, const char *at, size_t len)
{
    exchange *x = p->data;
    if (!x->in_value) {
        classify_header(x);
        x->in_value = true;
        if (sb_buf_puts(&x->resp_headers, ": ") < 0)
            return -1;
        x->orca_off = x->resp_headers.len;
        if (x->ctype_header && !x->ctype_off)
            x->ctype_off = x->resp_headers.len;
    }
    return sb_buf_append(&x->resp_headers, at, len);
}

/* The response's head is read (either parser). Returns 1 when the answer is not to be passed
 * on (a status to retry or to fall back on: retry_status is set), else 0. */
static int resp_head_done(exchange *x, int status, int64_t cl)
{
    if (x->in_value)
        close_header_line(x);
    x->in_value = false;
    x->status = status;
    if (status < 200)
        return 0; /* 1xx interim: its headers are dropped, the real head follows */
    /* Content type decides how a mid-stream failure is shown (SSE error event). */
    /* Its first Content-Type, noted as the head was read (a search of the whole head for it
     * was ~1,500 instructions per answer: docs/benchmarks.md, proxy overhead). */
    const char *ct = x->ctype_off ? x->resp_headers.data + x->ctype_off : NULL;
    x->sse = ct && strncasecmp(ct + strspn(ct, " "), "text/event-stream", 17) == 0;
    x->tokens.not_a_stream = ct && !x->sse;
    if (!x->req)
        return 0;
    /* A 5xx another endpoint may answer better: nothing of it goes to the client. With no
     * endpoint of the pool left to try, a fallback pool may (the status is one retry.on
     * lists); should none take it then, the client gets the gateway's answer with that
     * status instead of the replica's body. */
    bool to_fallback = false;
    if (status >= 500 && (may_retry(x, SB_RETRY_STATUS, status) || (to_fallback = status_may_fall_back(x, status)))) {
        x->retry_status = status;
        x->status_to_fallback = to_fallback;
        return 1;
    }
    if (x->t.usage_edit && x->sse && status >= 200 && status < 300) {
        /* Stripping changes the length: the client's answer is chunked (or ends with the
         * connection, for HTTP/1.0). Without memory for the buffer, the stream passes whole:
         * the client sees one chunk it did not ask for, never a broken stream. */
        if (!x->hold)
            x->hold = sb_malloc(x->snap->cfg->max_held_event_bytes);
        sb_sse_strip_init(&x->strip, x->hold, x->hold ? x->snap->cfg->max_held_event_bytes : 0, to_client, x);
        x->stripping = true;
        cl = -1;
    }
    if (sb_http_stream_begin(x->req, status, x->resp_headers.data ? x->resp_headers.data : "", x->resp_headers.len,
                             cl) < 0) {
        detach_client(x);
        return 0;
    }
    x->started = true;
    x->final_status = status;
    return 0;
}

static int r_on_headers_complete(http_parser *p)
{
    exchange *x = p->data;
    int64_t cl = (p->flags & F_CONTENTLENGTH) ? (int64_t)p->content_length : -1;
    if (resp_head_done(x, p->status_code, cl))
        http_parser_pause(p, 1);
    return 0;
}

/* Body bytes for the client (sb_sse_emit_fn: the strip forwards through it too). */
static void to_client(void *ud, const char *at, size_t len)
{
    exchange *x = ud;
    if (!x->req)
        return;
    x->bytes_out += len;
    int rc = sb_http_stream_write(x->req, at, len);
    if (rc < 0) {
        detach_client(x);
    } else if (rc == 1 && !x->paused) {
        /* The client reads slower than the model writes: stop reading upstream until the
         * client's queue drains, so memory stays bounded and TCP pushes back. */
        x->paused = true;
    }
}

/* Body bytes of the response (either parser). */
static void resp_body(exchange *x, const char *at, size_t len)
{
    if (!x->t_first_body) {
        x->t_first_body = now_ns();
        /* An answer's first body bytes (a stream's first token, or a whole answer) mean the
         * prompt was computed there; an error's body means nothing of the kind. */
        if (x->dispatched && x->final_status >= 200 && x->final_status < 300)
            sb_router_first_token(x->env->router, x->t.pool, x->ep, &x->ticket);
    }
    sb_token_clock_feed(&x->tokens, at, len, now_ns());
    sb_usage_tail_push(x->tail, sizeof(x->tail), &x->tail_len, at, len);
    if (x->stripping)
        sb_sse_strip_feed(&x->strip, at, len);
    else
        to_client(x, at, len);
}

static int r_on_body(http_parser *p, const char *at, size_t len)
{
    resp_body(p->data, at, len);
    return 0;
}

static int r_on_message_complete(http_parser *p)
{
    exchange *x = p->data;
    if (x->status < 200) {
        /* An interim response: reset header collection for the final one. */
        x->resp_headers.len = 0;
        x->hfield_start = 0;
        x->ctype_off = 0;
        x->in_value = false;
        return 0;
    }
    x->complete = true;
    http_parser_pause(p, 1);
    return 0;
}

static void finish_complete(exchange *x)
{
    /* Not reusable while our request is still being written (the server answered early):
     * the rest of the body would precede the next request on that connection. */
    bool reusable =
        x->fast_taken ? x->fast_reuse && !x->pending_writes
                      : http_should_keep_alive(&x->parser) && x->parser.http_errno == HPE_PAUSED && !x->pending_writes;
    drop_upstream(x, reusable);
    report_end(x, true, x->status);
    if (x->stripping)
        sb_sse_strip_finish(&x->strip); /* an unfinished last event goes as it came */
    if (x->req) {
        sb_http_req *req = x->req;
        detach_client(x);
        sb_http_stream_end(req);
    }
    exchange_maybe_free(x);
}

static void on_response_timeout(sb_upstream_conn *uc)
{
    exchange *x = uc->owner;
    if (x->started)
        fail_midstream(x, "upstream response timed out", "upstream_timeout");
    else
        retry_or_fail(x, UV_ETIMEDOUT, SB_RETRY_TIMEOUT);
}

/* A whole header line of the response, as r_on_header_field and r_on_header_value see it in
 * pieces. Returns 0 or -1 (out of memory). */
static int add_header(exchange *x, const char *name, size_t nlen, const char *value, size_t vlen)
{
    x->hfield_start = x->resp_headers.len;
    x->skip_header = false;
    if (sb_buf_append(&x->resp_headers, name, nlen) < 0)
        return -1;
    classify_header(x);
    if (sb_buf_puts(&x->resp_headers, ": ") < 0)
        return -1;
    x->orca_off = x->resp_headers.len;
    if (x->ctype_header && !x->ctype_off)
        x->ctype_off = x->resp_headers.len;
    if (sb_buf_append(&x->resp_headers, value, vlen) < 0)
        return -1;
    close_header_line(x);
    return 0;
}

/* Body bytes of a response whose head the fast path read: up to what is due; the response
 * completes with its last byte (bytes past it make the connection unfit for reuse). */
static void fast_resp_body(exchange *x, const char *data, size_t len)
{
    size_t take = (uint64_t)x->fast_left < len ? (size_t)x->fast_left : len;
    if (take) {
        x->fast_left -= (int64_t)take;
        resp_body(x, data, take);
    }
    if (x->fast_left == 0) {
        if (take < len)
            x->fast_reuse = false;
        x->complete = true;
    }
}

#define FAST_RESP_FIELDS 64
#define FAST_RESP_HEAD (64 * 1024)

/* The first bytes of an answer hold its whole head, plainly well formed and framed by its
 * Content-Length (proto/h1.h): read here, not by http-parser (~4,000 instructions an answer
 * less, docs/benchmarks.md section 15). Returns false, having changed nothing, when
 * http-parser is to read the answer. */
static bool fast_response(exchange *x, const char *data, size_t len)
{
    sb_h1_field f[FAST_RESP_FIELDS];
    sb_h1_head h;
    x->fast_tried = true;
    if (sb_h1_response(data, len, FAST_RESP_HEAD, f, FAST_RESP_FIELDS, &h) != SB_H1_OK)
        return false;
    x->fast_taken = true;
    x->fast_reuse = h.keep_alive;
    for (size_t i = 0; i < h.n_fields; i++)
        if (add_header(x, data + f[i].name_off, f[i].name_len, data + f[i].value_off, f[i].value_len) < 0) {
            x->fast_reuse = false;
            x->fast_left = 0; /* nothing more is read: the answer fails as malformed */
            return true;
        }
    x->fast_left = h.content_length;
    if (resp_head_done(x, h.status, h.content_length))
        return true; /* retry_status is set */
    fast_resp_body(x, data + h.head_len, len - h.head_len);
    return true;
}

/* The answer cannot be read (malformed, or no memory to read it). */
static void fail_read(exchange *x)
{
    if (x->started)
        fail_midstream(x, "upstream sent a malformed response", "bad_upstream_response");
    else
        fail_before_response(x, 502, "upstream sent a malformed response", "bad_upstream_response", false);
}

static void pause_if_slow_client(exchange *x, sb_upstream_conn *uc)
{
    if (x->paused) {
        /* The client, not the endpoint, is slow: no response timeout while we wait for it
         * (the client's own write stall is bounded by the server's idle timeout). */
        sb_upstream_pause(uc);
        sb_upstream_deadline(uc, 0, NULL);
    }
}

static void up_read(sb_upstream_conn *uc, ssize_t nread, const uv_buf_t *buf)
{
    exchange *x = uc->owner;
    if (nread == 0)
        return;
    if (nread < 0) {
        /* EOF: completes a close-delimited body; anything else ends in error. */
        if (nread == UV_EOF && x->got_bytes) {
            http_parser_execute(&x->parser, &resp_settings, NULL, 0);
            if (x->retry_status) {
                retry_status(x);
                return;
            }
            if (x->complete) {
                finish_complete(x);
                return;
            }
        }
        /* Closed before the answer was forwarded (nothing read, or part of a head): the
         * client has seen nothing, so another endpoint may still answer it. */
        if (!x->started)
            retry_or_fail(x, nread == UV_EOF ? UV_ECONNRESET : (int)nread, SB_RETRY_RESET);
        else
            fail_midstream(x, "upstream closed the connection mid-response", "upstream_closed");
        return;
    }
    if (!x->got_bytes) {
        x->got_bytes = true;
        x->t_first_byte = now_ns();
        sb_router_first_byte(x->env->router, x->t.pool, x->ep, &x->ticket, x->t_first_byte);
    }
    sb_upstream_deadline(uc, x->snap->cfg->response_ms, on_response_timeout); /* pushed back */
    if (!x->fast_tried)
        fast_response(x, buf->base, (size_t)nread);
    else if (x->fast_taken)
        fast_resp_body(x, buf->base, (size_t)nread);
    if (x->fast_taken) {
        if (x->retry_status)
            retry_status(x);
        else if (x->complete)
            finish_complete(x);
        else if (x->fast_left == 0)
            fail_read(x); /* out of memory for the head: as malformed */
        else
            pause_if_slow_client(x, uc);
        return;
    }
    size_t n = http_parser_execute(&x->parser, &resp_settings, buf->base, (size_t)nread);
    if (x->retry_status) {
        retry_status(x);
        return;
    }
    if (x->complete) {
        /* Junk after the response: don't reuse. For HTTP/1.1 http_should_keep_alive reads
         * only F_CONNECTION_CLOSE (clearing KEEP_ALIVE alone left the connection pooled, the
         * junk waiting to be read as the next request's answer). */
        if (n < (size_t)nread) {
            x->parser.flags &= ~F_CONNECTION_KEEP_ALIVE;
            x->parser.flags |= F_CONNECTION_CLOSE;
        }
        finish_complete(x);
        return;
    }
    if (HTTP_PARSER_ERRNO(&x->parser) != HPE_OK) {
        fail_read(x);
        return;
    }
    pause_if_slow_client(x, uc);
}

static void upstream_read_start(exchange *x)
{
    x->uc->on_read = up_read;
    if (sb_upstream_resume(x->uc) < 0)
        retry_or_fail(x, UV_ECONNRESET, SB_RETRY_RESET);
}

/* ---- sending ---- */

typedef struct send_req {
    uv_write_t w;
    exchange *x;
} send_req;

static void on_sent(uv_write_t *w, int status)
{
    sb_guard_enter(); /* libuv's callback for a plain connection (TLS ones come guarded) */
    send_req *s = (send_req *)w;
    exchange *x = s->x;
    uv_stream_t *handle = w->handle; /* read before the request is freed */
    sb_free(s);
    x->pending_writes--;
    if (status < 0 && x->uc && (uv_stream_t *)&x->uc->tcp == handle && !x->got_bytes)
        retry_or_fail(x, status, SB_RETRY_RESET);
    else
        exchange_maybe_free(x);
    sb_guard_leave();
}

/* The request head for the upstream in x->head: rebuilt once per exchange (the Host differs
 * per endpoint on a retry), hop-by-hop headers dropped, the pool's upstream key in place of
 * the client's Authorization. Returns 0 or -1 (out of memory). */
static int build_head(exchange *x, size_t body_len)
{
    sb_buf *h = &x->head;
    sb_buf_reset(h);
    sb_upstream_conn *uc = x->uc;
    sb_http_req *req = x->req;
    /* Host names the server as TLS does: an https:// pool's tls.server_name, when set, is the
     * name the endpoint answers to (an ingress or a provider routes on it), with the port
     * unless it is 443; else the endpoint's address as written. */
    const sb_pool_config *pc = &x->snap->cfg->pools[x->t.pool];
    const sb_endpoint_config *ec = &pc->endpoints[x->ep];
    /* Appends, not printf: the head is built per request (docs/benchmarks.md, proxy overhead). */
    const char *host = pc->tls && pc->tls_server_name ? pc->tls_server_name : sb_upstream_address(uc->up);
    sb_buf_puts(h, req->method == HTTP_POST ? "POST " : "GET ");
    sb_buf_append(h, req->url, req->url_len);
    sb_buf_puts(h, " HTTP/1.1\r\nHost: ");
    sb_buf_puts(h, host);
    if (pc->tls && pc->tls_server_name && ec->port != 443) {
        sb_buf_puts(h, ":");
        sb_buf_put_u64(h, ec->port);
    }
    sb_buf_puts(h, "\r\n");
    bool has_orca_fmt = false;
    bool has_forwarded = false;
    /* A pool with upstream_api_key speaks to its model servers with that key: the client's
     * Authorization (its gateway key, when client auth is on) stays here. */
    const char *upstream_auth = x->snap->cfg->pools[x->t.pool].upstream_auth_header;
    if (upstream_auth) {
        /* Room for the whole head first, so no realloc leaves a copy of the key in freed
         * memory (a retry rebuilds the same head in the same room). */
        size_t need = strlen(upstream_auth) + 512 + sizeof(x->t.ident.id) + sizeof(x->t.ident.peer) + 64;
        for (size_t i = 0; i < req->n_headers; i++)
            need += req->headers[i].name_len + req->headers[i].value_len + 4;
        sb_buf_reserve(h, need);
        x->wipe_head = true;
        sb_buf_puts(h, upstream_auth);
    }
    for (size_t i = 0; i < req->n_headers; i++) {
        const sb_http_header *hd = &req->headers[i];
        enum hkind k = header_kind(hd->name, hd->name_len);
        if (k == H_HOP || k == H_HOST || k == H_EXPECT || (upstream_auth && k == H_AUTHORIZATION) || k == H_REQUEST_ID)
            continue;
        if (k == H_FORWARDED_FOR) {
            has_forwarded = true; /* joined with the client's address below */
            continue;
        }
        if (k == H_ORCA_FORMAT)
            has_orca_fmt = true;
        sb_buf_append(h, hd->name, hd->name_len);
        sb_buf_puts(h, ": ");
        sb_buf_append(h, hd->value, hd->value_len);
        sb_buf_puts(h, "\r\n");
    }
    x->orca_asked = x->snap->cfg->orca_request && !has_orca_fmt;
    if (x->orca_asked)
        sb_buf_puts(h, "endpoint-load-metrics-format: TEXT\r\n");
    if (x->t.ident.id[0]) {
        sb_buf_puts(h, "x-request-id: ");
        sb_buf_puts(h, x->t.ident.id);
        sb_buf_puts(h, "\r\n");
    }
    /* X-Forwarded-For: what the client's side said (several headers joined in order, as one
     * list), then the client's address as this gateway saw it. Bounded by the head's limit. */
    sb_buf_puts(h, "X-Forwarded-For: ");
    for (size_t i = 0; i < req->n_headers && has_forwarded; i++) {
        const sb_http_header *hd = &req->headers[i];
        if (header_kind(hd->name, hd->name_len) == H_FORWARDED_FOR && hd->value_len) {
            sb_buf_append(h, hd->value, hd->value_len);
            sb_buf_puts(h, ", ");
        }
    }
    const char *colon = strrchr(x->t.ident.peer, ':');
    sb_buf_append(h, x->t.ident.peer, colon ? (size_t)(colon - x->t.ident.peer) : strlen(x->t.ident.peer));
    sb_buf_puts(h, "\r\n");
    sb_buf_puts(h, "Content-Length: ");
    sb_buf_put_u64(h, body_len);
    return sb_buf_puts(h, "\r\n\r\n") < 0 ? -1 : 0;
}

static void send_request(exchange *x)
{
    sb_http_req *req = x->req;
    sb_upstream_conn *uc = x->uc;
    uc->owner = x;
    uc->tcp.data = uc;
    uc->timer.data = uc;
    http_parser_init(&x->parser, HTTP_RESPONSE);
    x->parser.data = x;
    x->resp_headers.len = 0;
    x->hfield_start = 0;
    x->ctype_off = 0;
    x->in_value = false;
    x->got_bytes = false;
    x->fast_left = -1;
    x->fast_tried = x->fast_taken = false;
    /* This attempt's: a same-endpoint retry on a fresh connection starts here too. */
    x->status = 0;
    x->t_first_byte = 0;

    /* Body: the client's bytes as they are, with the served name spliced in place of an
     * alias and include_usage asked for: never re-serialised, never copied. */
    sb_body_edit edits[2];
    size_t ne = 0;
    if (x->t.served)
        edits[ne++] = (sb_body_edit){x->t.model_tok_start, x->t.model_tok_end, x->served_quoted, x->served_quoted_len};
    if (x->t.usage_edit)
        edits[ne++] = (sb_body_edit){x->t.usage_edit_start, x->t.usage_edit_end, x->t.usage_edit, x->t.usage_edit_len};
    sb_body_piece pieces[SB_BODY_PIECES_MAX];
    size_t body_len = 0;
    int np = sb_body_edit_pieces(req->body, req->body_len, edits, ne, pieces, &body_len);
    if (np < 0) { /* the inspector's offsets are the body's: never */
        fail_before_response(x, 500, "request body edit out of range", NULL, false);
        return;
    }
    uv_buf_t bufs[1 + SB_BODY_PIECES_MAX];
    int nb = 1;
    for (int i = 0; i < np; i++)
        bufs[nb++] = uv_buf_init((char *)pieces[i].at, (unsigned)pieces[i].len);
    if (build_head(x, body_len) < 0) {
        fail_before_response(x, 500, "out of memory", NULL, false);
        return;
    }
    bufs[0] = uv_buf_init(x->head.data, (unsigned)x->head.len);
    /* Head and body in one writev. Where the loop batches its writes (net/iobatch.h), with the
     * turn's others, in one system call for all: the write goes whole to sb_upstream_write.
     * Else at once: a few KiB fit the socket (no write request, no callback, no epoll_ctl when
     * libuv's queue drains); whatever did not fit is queued. */
    int wrote = 0, held;
    if (uc->tls.ssl || !sb_iob_active((uv_stream_t *)&uc->tcp)) {
        held = sb_guard_io_begin(); /* workers: the write leaves without the lock */
        wrote = sb_upstream_try_write(uc, bufs, (unsigned)nb);
        sb_guard_io_end(held);
    }
    int i = 0;
    for (size_t left = (size_t)wrote; i < nb; i++) {
        if (left < bufs[i].len) {
            bufs[i].base += left;
            bufs[i].len -= left;
            break;
        }
        left -= bufs[i].len;
    }
    uv_buf_t *rest = bufs + i;
    unsigned nrest = (unsigned)(nb - i);
    if (nrest) {
        send_req *s = sb_malloc(sizeof(*s));
        if (!s) {
            fail_before_response(x, 500, "out of memory", NULL, false);
            return;
        }
        s->x = x;
        held = sb_guard_io_begin(); /* over TLS: the encryption too */
        int wrc = sb_upstream_write(uc, &s->w, rest, nrest, on_sent);
        sb_guard_io_end(held);
        if (wrc < 0) {
            sb_free(s);
            retry_or_fail(x, UV_ECONNRESET, SB_RETRY_RESET);
            return;
        }
        x->pending_writes++;
    }
    uint32_t rto = x->snap->cfg->response_ms;
    sb_upstream_deadline(uc, rto, on_response_timeout);
    upstream_read_start(x);
}

static void on_connected(sb_upstream_conn *uc, int status, void *arg)
{
    exchange *x = arg;
    x->connecting = NULL;
    if (status < 0) {
        x->uc = NULL; /* already closed by the pool */
        retry_or_fail(x, status, SB_RETRY_CONNECT);
        return;
    }
    x->uc = uc;
    if (!x->req) {
        drop_upstream(x, true);
        report_end(x, true, 499);
        exchange_maybe_free(x);
        return;
    }
    send_request(x);
}

/* One attempt: pick an endpoint (a fresh-connection retry keeps the same one), connect or
 * reuse, send. */
/* The wait for fresh reports ended (answers, deadline, or the prober stopping): decide again
 * with the prompt's hashes. */
static void on_probed(void *ud)
{
    exchange *x = ud;
    x->probe_wait = NULL;
    if (x->probe_keys) {
        x->rr.block_hashes = x->probe_keys;
        x->rr.kv_keys = x->rr.n_kv_keys ? x->probe_keys + x->rr.n_blocks : NULL;
    }
    attempt(x);
}

/* The synchronous probe: the first decision ranked the pool's sync_candidates best; when one
 * of their reports is older than sync_max_age_ms, scrape them and wait (at most
 * sync_timeout_ms) before deciding again. True when waiting (on_probed resumes). Once per
 * request; a retry never waits. */
static bool sync_probe(exchange *x, const sb_ranking *rk, const sb_pool_config *pc, sb_ns now)
{
    const sb_proxy_env *env = x->env;
    struct sb_prober *pr = env->prober ? env->prober(env->owner) : NULL;
    uint32_t old[SB_DECIDE_MAX_RANKED];
    size_t n = 0;
    for (size_t i = 0; i < rk->n; i++) {
        const sb_endpoint *e = sb_router_endpoint(env->router, x->t.pool, rk->ep[i]);
        if (e && (!e->report_ns || now - e->report_ns > SB_MS(pc->probe_sync_max_age_ms)))
            old[n++] = rk->ep[i];
    }
    x->probed = true;
    if (!pr || n == 0)
        return false;
    (void)sb_guard_here(NULL); /* the prober runs on the main loop; on_probed comes from there */
    size_t keys = x->rr.n_blocks + (x->rr.kv_keys ? x->rr.n_kv_keys : 0);
    if (keys) {
        x->probe_keys = sb_malloc(keys * sizeof(uint64_t));
        if (!x->probe_keys)
            return false;
        if (x->rr.n_blocks)
            memcpy(x->probe_keys, x->rr.block_hashes, x->rr.n_blocks * sizeof(uint64_t));
        if (x->rr.kv_keys && x->rr.n_kv_keys)
            memcpy(x->probe_keys + x->rr.n_blocks, x->rr.kv_keys, x->rr.n_kv_keys * sizeof(uint64_t));
    }
    x->probe_wait = sb_prober_sync(pr, x->t.pool, old, n, pc->probe_sync_timeout_ms, on_probed, x);
    if (!x->probe_wait) {
        sb_free(x->probe_keys);
        x->probe_keys = NULL;
        return false;
    }
    return true;
}

static void attempt(exchange *x)
{
    const sb_proxy_env *env = x->env;
    sb_ns now = now_ns();
    int ep;
    bool same = x->retry_same_ep;
    if (x->retry_same_ep) {
        x->retry_same_ep = false;
        ep = (int)x->ep;
    } else {
        x->rr.exclude = x->excluded;
        x->rr.n_exclude = x->n_excluded;
        x->rr.repeat = x->decided;
        sb_request_desc desc = {.sched = x->rr, .stream = x->t.stream};
        sb_ranking rk;
        const sb_pool_config *pc = &x->snap->cfg->pools[x->t.pool];
        bool probe = !x->probed && x->attempts == 0 && pc->probe_sync_max_age_ms && pc->probe_enabled;
        ep = sb_decide(env->router, &desc, probe ? pc->probe_sync_candidates : 1, now, &rk);
        x->decided = true;
        if (probe && ep >= 0 && sync_probe(x, &rk, pc, now))
            return; /* the pick is not dispatched: the router settles its pending mark at the next pick */
        /* Copied now: the decision scratch is the pool's, reused by the next pick. The first
         * decision is the request's record; a retry's shows in its outcome (attempts,
         * served_by). */
        if (x->attempts == 0 && rk.why && !x->dref.ring) {
            x->dref = sb_decisions_record(env->decisions, rk.why, x->t.ident.id, x->model, sb_decisions_clock_ms());
            if (x->t.fell_back)
                sb_decisions_fallback(&x->dref, x->snap->cfg->pools[x->t.requested_pool].name,
                                      sb_stats_fallback_reason_names[x->t.fallback_reason % SB_FALLBACK_REASONS]);
        }
        if (x->snap->cfg->log_decisions) {
            sb_buf_reset(&x->decision);
            if (rk.why)
                sb_decision_render(rk.why, &x->decision);
        }
        /* The hashes live in the gateway's scratch, valid during the first pick only; a
         * retry goes without prefix affinity (it excludes the endpoint that failed). */
        x->rr.block_hashes = NULL;
        x->rr.n_blocks = 0;
        x->rr.kv_keys = NULL; /* the same scratch */
        x->rr.n_kv_keys = 0;
        sb_free(x->probe_keys); /* the copy of them a synchronous probe kept, used now */
        x->probe_keys = NULL;
        if (ep < 0) {
            if (x->attempts == 0)
                fail_before_response(x, 503, "no healthy endpoint for this model", "no_healthy_endpoint", true);
            else
                /* what the last said; it was retried, so retry.on allows its reason */
                fail_before_response(x, x->last_status, x->last_msg, x->last_code, true);
            return;
        }
        x->attempts++;
    }
    if (same) {
        /* The same endpoint again (a pooled connection was found closed): its work was
         * charged with the first dispatch. */
        sb_ticket prev = x->ticket;
        x->ticket = sb_router_redispatched(env->router, x->t.pool, x->ep, &prev, now);
    } else {
        x->ep = (uint32_t)ep;
        x->ticket = sb_router_dispatched(env->router, x->t.pool, x->ep, x->prompt_tokens, now);
    }
    x->dispatched = true;
    x->t_attempt = now;
    if (x->carry_pending) {
        x->carry_pending = false;
        x->ticket.has_prefix_pending = true;
        x->ticket.prefix_pending = x->carried_hash;
    }
    /* A non-streamed answer arrives whole: its first token is never seen on its own. */
    if (!x->t.stream)
        sb_router_first_token_unseen(env->router, x->t.pool, x->ep, &x->ticket, now);
    if (!sb_guard_here(x->loop)) {
        /* Decided here (the router's accounting is done, so a release loop sees the pool's
         * load as it is now); connected on the client's loop. */
        x->transit = true;
        if (sb_guard_post(x->loop, resume_attempt, x) == 0)
            return;
        x->transit = false;
        /* Not a retry: that would wait on this thread's loop, not the client's. */
        fail_before_response(x, 500, "out of memory", NULL, false);
        return;
    }
    connect_attempt(x);
}

/* A decision made on another thread reaches the client's loop. The client may have left
 * meanwhile (on_client_abort ran and reported the attempt). */
static void resume_attempt(void *arg)
{
    exchange *x = arg;
    x->transit = false;
    if (!x->req) {
        report_end(x, true, 499);
        exchange_maybe_free(x);
        return;
    }
    connect_attempt(x);
}

/* The attempt's connection: a pooled one at once, or a new one (on_connected). */
static void connect_attempt(exchange *x)
{
    const sb_proxy_env *env = x->env;
    sb_upstream_conn *uc = NULL;
    sb_upstream *u = env->upstream(env->owner, x->t.pool, x->ep);
    int rc = u ? sb_upstream_acquire(u, on_connected, x, &uc) : UV_ENOMEM;
    if (rc == 1) {
        x->uc = uc;
        send_request(x);
    } else if (rc == 0) {
        x->uc = NULL; /* connecting; on_connected takes it */
        x->connecting = uc;
    } else {
        retry_or_fail(x, rc, SB_RETRY_CONNECT);
    }
}

static const http_parser_settings resp_settings = {
    .on_header_field = r_on_header_field,
    .on_header_value = r_on_header_value,
    .on_headers_complete = r_on_headers_complete,
    .on_body = r_on_body,
    .on_message_complete = r_on_message_complete,
};

/* The served name, quoted, as the body splice puts it (x->t.served non-NULL). Escaped into the
 * fixed buffer: a served name is at most SB_MODEL_NAME_MAX bytes, so 6x plus quotes (and the
 * key, for an insertion) always fits. 0, or -1 out of memory. */
static int quote_served(exchange *x)
{
    const sb_proxy_target *t = &x->t;
    sb_buf tmp = {0};
    sb_buf_puts(&tmp, t->insert_model ? "\"model\":\"" : "\"");
    sb_buf_json_escape(&tmp, t->served, t->served_len);
    sb_buf_puts(&tmp, t->insert_model && t->insert_comma ? "\"," : "\"");
    int rc = -1;
    if (tmp.data && tmp.len < sizeof(x->served_quoted)) {
        memcpy(x->served_quoted, tmp.data, tmp.len);
        x->served_quoted_len = tmp.len;
        rc = 0;
    }
    sb_buf_free(&tmp);
    return rc;
}

/* Nothing reached the client and the pool cannot serve the request: the pool's next fallback
 * that takes it now is asked (the env's fallback, net/fallback.h), and the exchange starts
 * over there: that pool's decision, retries and endpoints, the body's model rewritten. The
 * decision made in the pool left gets its outcome now (the last failure); the fallback's
 * decision is recorded anew, marked as one. Bounded: each listed fallback is asked once.
 * True when the request went on; false: answer as without fallbacks. */
static bool fall_back(exchange *x, enum sb_fallback_reason why)
{
    const sb_proxy_env *env = x->env;
    sb_proxy_target t = x->t;
    sb_sched_request rr = x->rr;
    bool moved = env->fallback && env->fallback(env->owner, x->snap->cfg, &t, &rr, (int)why);
    x->t.fallback_next = t.fallback_next; /* the entries asked are used up either way */
    if (!moved)
        return false;
    sb_proxy_target was = x->t;
    x->t = t;
    x->rr = rr;
    if (quote_served(x) < 0) {
        x->t = was; /* answered as the pool left would: its failure, its log line */
        return false;
    }
    sb_decisions_finish(&x->dref, x->last_status ? x->last_status : 503, -1, (uint32_t)x->attempts, NULL);
    x->n_excluded = 0;
    x->attempts = 0;
    x->fresh_retry_used = false;
    x->retry_same_ep = false;
    x->carry_pending = false;
    x->status = 0;
    x->t_first_byte = 0;
    x->probed = true; /* no synchronous probe: it waits for the prompt's hashes' best, and there are none */
    x->decided = false; /* another pool's pick is a first one (the hashes are gone by now, though) */
    sb_free(x->probe_keys);
    x->probe_keys = NULL;
    /* Its attempts in the pool left are over (report_end): what that pool queues may go now. */
    if (env->left)
        env->left(env->owner, was.pool);
    attempt(x);
    return true;
}

/* No exchange could be made (out of memory): answered 500 and recorded, the one line it gets. */
static void fail_unstarted(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t)
{
    sb_ns now = now_ns();
    sb_exchange_log log = {.pool = (int)t->pool,
                           .ep = -1,
                           .status = 500,
                           .outcome = "gateway_error",
                           .reason = "out_of_memory",
                           .model = t->model,
                           .stream = t->stream,
                           .t_start = now,
                           .t_end = now,
                           .ident = &t->ident,
                           .gateway_answer = true};
    log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
    env->error(env->owner, req, 500, "out of memory", "server_error", NULL);
    env->record(env->owner, &log);
}

void sb_proxy_start(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    exchange *x = exchange_new();
    if (!x) {
        fail_unstarted(env, req, t);
        return;
    }
    x->env = env;
    x->req = req;
    x->loop = req->loop;
    x->t = *t;
    x->t_start = now_ns();
    x->rr = *rr;
    if (t->model) {
        size_t n = strnlen(t->model, sizeof(x->model) - 1);
        memcpy(x->model, t->model, n);
        x->model[n] = 0;
    }
    x->prompt_tokens = rr->prompt_tokens;
    if (t->served && quote_served(x) < 0) {
        sb_free(x);
        fail_unstarted(env, req, t);
        return;
    }
    x->snap = env->begin(env->owner);
    env->counters->exchanges_live++;
    req->user = x;
    req->on_abort = on_client_abort;
    req->on_cut = on_client_cut;
    req->on_drain = on_client_drain;
    attempt(x);
}
