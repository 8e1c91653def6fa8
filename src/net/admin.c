/* admin: what the gateway tells about itself. GET /metrics (Prometheus text, prefix
 * switchboard_), GET /debug/endpoints (each endpoint's merged state), GET /debug/decisions
 * (recent scheduling decisions, explained, newest first, or one by request id: the ring of
 * net/decisions.h). The dashboard shows them (GET /
 * and /ui/..., files compiled in: net/ui.h). The per-request record that feeds the
 * metrics and the access log is net/stats.c. */
#include <http_parser.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "base/buf.h"
#include "base/version.h"
#include "core/adaptive.h"
#include "core/admission.h"
#include "core/kv_index.h"
#include "core/prefix_index.h"
#include "net/admin.h"
#include "net/agent_reports.h"
#include "net/decisions.h"
#include "net/discovery.h"
#include "net/guard.h"
#include "net/iobatch.h"
#include "net/kv_feed.h"
#include "net/peer_sync.h"
#include "net/picker.h"
#include "net/precise.h"
#include "net/probe.h"
#include "net/process.h"
#include "net/stats.h"
#include "net/ui.h"
#include "net/workers.h"
#include "proto/engine_metrics.h"
#include "proto/openai_error.h"

/* A label value as the text format wants it: backslash, double quote and newline escaped.
 * Model names come from the configuration, which allows any string. */
static void label_value(sb_buf *b, const char *v)
{
    const char *run = v;
    for (const char *c = v; *c; c++)
        if (*c == '\\' || *c == '"' || *c == '\n') {
            sb_buf_append(b, run, (size_t)(c - run));
            sb_buf_puts(b, *c == '\n' ? "\\n" : *c == '"' ? "\\\"" : "\\\\");
            run = c + 1;
        }
    sb_buf_puts(b, run);
}

/* `labels` is the series' labels before le, without braces ("pool=\"p\",model=\"m\""). */
static void histo_render(sb_buf *b, const char *name, const char *labels, const sb_histo *h, const double *bounds)
{
    uint64_t cum = 0;
    for (size_t i = 0; i < SB_HISTO_BUCKETS; i++) {
        cum += h->counts[i];
        sb_buf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[SB_HISTO_BUCKETS];
    sb_buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    sb_buf_printf(b, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
                  (unsigned long long)h->n);
}

/* pool="P",model="M" for pool p's model slot s, into lb (reset first). */
static const char *pool_model_labels(sb_buf *lb, const sb_gateway *gw, size_t p, uint32_t s)
{
    sb_buf_reset(lb);
    sb_buf_printf(lb, "pool=\"%s\",model=\"", gw->cfg->pools[p].name);
    label_value(lb, sb_stats_model_name(&gw->stats, (uint32_t)p, s));
    sb_buf_puts(lb, "\"");
    return lb->data ? lb->data : "";
}

/* A pool's model slot is shown once it has seen a request; slot 0 (the served name) always, so
 * every pool has its series from the start. */
static bool slot_shown(const sb_gateway *gw, size_t p, uint32_t s)
{
    return s == 0 || gw->stats.model_metrics[gw->stats.models[p].first + s].duration.n > 0;
}

/* The endpoint picker's streams (`ext_proc:`), when it runs. */
static void render_picker_stats(const sb_gateway *gw, sb_buf *b)
{
    if (!gw->picker)
        return;
    sb_picker_stats ps;
    sb_picker_get_stats(gw->picker, &ps);
    sb_buf_printf(b,
                  "# HELP switchboard_extproc_streams_total Envoy ext_proc streams begun (one per request).\n"
                  "# TYPE switchboard_extproc_streams_total counter\nswitchboard_extproc_streams_total %llu\n"
                  "# HELP switchboard_extproc_streams_open ext_proc streams not yet ended.\n"
                  "# TYPE switchboard_extproc_streams_open gauge\nswitchboard_extproc_streams_open %llu\n"
                  "# HELP switchboard_extproc_picks_total Requests answered with an endpoint (and fallbacks).\n"
                  "# TYPE switchboard_extproc_picks_total counter\nswitchboard_extproc_picks_total %llu\n"
                  "# HELP switchboard_extproc_immediate_total Requests answered by the gateway itself "
                  "(ImmediateResponse: 4xx, 429, 503).\n"
                  "# TYPE switchboard_extproc_immediate_total counter\nswitchboard_extproc_immediate_total %llu\n"
                  "# HELP switchboard_extproc_protocol_errors_total Streams ended for a malformed or out-of-order "
                  "message.\n"
                  "# TYPE switchboard_extproc_protocol_errors_total counter\n"
                  "switchboard_extproc_protocol_errors_total %llu\n"
                  "# HELP switchboard_extproc_cancelled_total Streams the proxy reset before their end.\n"
                  "# TYPE switchboard_extproc_cancelled_total counter\nswitchboard_extproc_cancelled_total %llu\n"
                  "# HELP switchboard_extproc_served_elsewhere_total Responses served by a fallback, not the pick.\n"
                  "# TYPE switchboard_extproc_served_elsewhere_total counter\n"
                  "switchboard_extproc_served_elsewhere_total %llu\n"
                  "# HELP switchboard_extproc_unfreed_streams ext_proc streams ended and not yet freed (freed on "
                  "the loop's next turn: anything but 0 between requests is a leak).\n"
                  "# TYPE switchboard_extproc_unfreed_streams gauge\nswitchboard_extproc_unfreed_streams %llu\n",
                  (unsigned long long)ps.streams, (unsigned long long)ps.streams_open, (unsigned long long)ps.picks,
                  (unsigned long long)ps.immediate, (unsigned long long)ps.protocol_errors,
                  (unsigned long long)ps.cancelled, (unsigned long long)ps.served_elsewhere,
                  (unsigned long long)ps.unfreed);
    sb_buf_printf(
        b,
        "# HELP switchboard_extproc_connections Connections open on the ext_proc listener.\n"
        "# TYPE switchboard_extproc_connections gauge\nswitchboard_extproc_connections %llu\n"
        "# HELP switchboard_extproc_connections_closed_total ext_proc connections the server closed, by "
        "reason.\n"
        "# TYPE switchboard_extproc_connections_closed_total counter\n"
        "switchboard_extproc_connections_closed_total{reason=\"max_connections\"} %llu\n"
        "switchboard_extproc_connections_closed_total{reason=\"evicted\"} %llu\n"
        "switchboard_extproc_connections_closed_total{reason=\"handshake_timeout\"} %llu\n"
        "switchboard_extproc_connections_closed_total{reason=\"protocol_error\"} %llu\n"
        "# HELP switchboard_extproc_calls_refused_total gRPC calls the server ended itself (unknown "
        "method, malformed or oversized message, over the buffered-bytes budget).\n"
        "# TYPE switchboard_extproc_calls_refused_total counter\nswitchboard_extproc_calls_refused_total %llu\n"
        "# HELP switchboard_extproc_calls_over_budget_total Of those, a message past "
        "limits.max_buffered_body_bytes.\n"
        "# TYPE switchboard_extproc_calls_over_budget_total counter\n"
        "switchboard_extproc_calls_over_budget_total %llu\n"
        "# HELP switchboard_extproc_buffered_bytes Bytes held by gRPC messages still arriving.\n"
        "# TYPE switchboard_extproc_buffered_bytes gauge\nswitchboard_extproc_buffered_bytes %llu\n",
        (unsigned long long)ps.connections_open, (unsigned long long)ps.connections_refused,
        (unsigned long long)ps.connections_evicted, (unsigned long long)ps.handshake_timeouts,
        (unsigned long long)ps.protocol_errors_h2, (unsigned long long)ps.calls_refused,
        (unsigned long long)ps.calls_over_budget, (unsigned long long)ps.buffered_bytes);
}

/* The inspectors' token arrays, every loop's, as each last noted it under the lock (a worker
 * grows its own outside it). */
static size_t inspector_bytes(const sb_gateway *gw)
{
    size_t n = 0;
    for (size_t i = 0; i < gw->n_scratch; i++)
        n += gw->scratch[i].token_bytes;
    return n;
}

/* The event loops serving clients and the lock over what they share (net/guard.h): how often
 * it was taken, found busy, waited for, and held (docs/architecture.md, "Every core"). */
static void render_workers(sb_gateway *gw, sb_buf *b)
{
    sb_buf_printf(b,
                  "# HELP switchboard_workers Event loops serving the client listener (workers:).\n"
                  "# TYPE switchboard_workers gauge\nswitchboard_workers %zu\n",
                  gw->wset ? sb_workers_count(gw->wset) : (size_t)(gw->server != NULL));
    if (gw->wset) {
        sb_buf_puts(b, "# HELP switchboard_worker_connections_accepted_total Client connections each worker "
                       "took from the kernel, those refused included (the kernel spreads them: SO_REUSEPORT).\n"
                       "# TYPE switchboard_worker_connections_accepted_total counter\n");
        for (size_t i = 0; i < sb_workers_count(gw->wset); i++) {
            sb_http_server_stats st;
            sb_workers_worker_stats(gw->wset, i, &st);
            sb_buf_printf(b, "switchboard_worker_connections_accepted_total{worker=\"%zu\"} %llu\n", i,
                          (unsigned long long)st.accepted_total);
        }
    }
    /* Socket writes and reads batched per loop turn (net/iobatch.h): process-wide, every loop's. */
    sb_iob_stats io;
    sb_iob_get_stats(&io);
    sb_buf_printf(b,
                  "# HELP switchboard_io_uring_submits_total Submissions of batched socket writes or reads (one "
                  "system call each, for a loop turn's writes, or its reads; io_uring: false leaves them at 0).\n"
                  "# TYPE switchboard_io_uring_submits_total counter\nswitchboard_io_uring_submits_total %llu\n"
                  "# HELP switchboard_io_uring_sends_total Socket writes sent in those submissions.\n"
                  "# TYPE switchboard_io_uring_sends_total counter\nswitchboard_io_uring_sends_total %llu\n"
                  "# HELP switchboard_io_uring_handed_total Batched writes the socket took only part of (or none), "
                  "finished by libuv as the socket drains.\n"
                  "# TYPE switchboard_io_uring_handed_total counter\nswitchboard_io_uring_handed_total %llu\n"
                  "# HELP switchboard_io_uring_released_total Batched writes handed to libuv before their turn "
                  "ended (a close, or another writer on the socket).\n"
                  "# TYPE switchboard_io_uring_released_total counter\nswitchboard_io_uring_released_total %llu\n"
                  "# HELP switchboard_io_uring_recvs_total Socket reads received in those submissions.\n"
                  "# TYPE switchboard_io_uring_recvs_total counter\nswitchboard_io_uring_recvs_total %llu\n"
                  "# HELP switchboard_io_uring_readers Connections read through a batcher now (a client connection "
                  "from its second request on or once it speaks HTTP/2, and pooled upstream connections; each "
                  "holds a second descriptor of its socket).\n"
                  "# TYPE switchboard_io_uring_readers gauge\nswitchboard_io_uring_readers %llu\n",
                  (unsigned long long)io.submits, (unsigned long long)io.sends, (unsigned long long)io.handed,
                  (unsigned long long)io.released, (unsigned long long)io.recvs, (unsigned long long)io.readers);
    if (!sb_guard_on())
        return;
    sb_guard_stats gs;
    sb_guard_get_stats(&gs);
    sb_buf_printf(b,
                  "# HELP switchboard_lock_acquisitions_total Times a thread took the lock over the routing state.\n"
                  "# TYPE switchboard_lock_acquisitions_total counter\nswitchboard_lock_acquisitions_total %llu\n"
                  "# HELP switchboard_lock_contended_total Acquisitions that found the lock held and waited.\n"
                  "# TYPE switchboard_lock_contended_total counter\nswitchboard_lock_contended_total %llu\n"
                  "# HELP switchboard_lock_wait_seconds_total Time threads waited for the lock.\n"
                  "# TYPE switchboard_lock_wait_seconds_total counter\nswitchboard_lock_wait_seconds_total %.6f\n"
                  "# HELP switchboard_lock_held_seconds_total Time the lock was held, by the workers (requests) "
                  "and by the main loop (control plane).\n"
                  "# TYPE switchboard_lock_held_seconds_total counter\n"
                  "switchboard_lock_held_seconds_total{by=\"workers\"} %.6f\n"
                  "switchboard_lock_held_seconds_total{by=\"main\"} %.6f\n",
                  (unsigned long long)gs.acquired, (unsigned long long)gs.contended, (double)gs.wait_ns / 1e9,
                  (double)gs.held_ns / 1e9, (double)gs.main_held_ns / 1e9);
}

/* The connection, body and refusal figures of both listeners, one family at a time (the text
 * format wants a family's samples together), labelled listener="client" or "admin". */
static void render_listener_stats(sb_gateway *gw, sb_buf *b)
{
    sb_http_server_stats st[2];
    const char *name[2];
    size_t n = 0;
    bool client = gw->server || gw->wset; /* off in a picker-only gateway (listen: null) */
    if (gw->server) {
        name[n] = "client";
        sb_http_server_get_stats(gw->server, &st[n++]);
    } else if (gw->wset) { /* the workers' servers, summed */
        name[n] = "client";
        sb_workers_get_stats(gw->wset, &st[n++]);
    }
    if (gw->admin_server) {
        name[n] = "admin";
        sb_http_server_get_stats(gw->admin_server, &st[n++]);
    }
    sb_buf_puts(b, "# HELP switchboard_open_connections Connections open on each listener (lingering ones "
                   "included), counted against limits.max_connections (client), admin.max_connections (admin) or "
                   "ext_proc.max_connections (ext_proc).\n"
                   "# TYPE switchboard_open_connections gauge\n");
    for (size_t i = 0; i < n; i++)
        sb_buf_printf(b, "switchboard_open_connections{listener=\"%s\"} %zu\n", name[i], st[i].open_connections);
    if (gw->picker) { /* the endpoint picker's gRPC listener (`ext_proc:`, ext_proc.max_connections) */
        sb_picker_stats ps;
        sb_picker_get_stats(gw->picker, &ps);
        sb_buf_printf(b, "switchboard_open_connections{listener=\"ext_proc\"} %llu\n",
                      (unsigned long long)ps.connections_open);
    }
    sb_buf_puts(b, "# HELP switchboard_connections_refused_total Connections refused at the listener's connection "
                   "limit: answered 503, or closed unanswered once max_refusing_connections were being answered.\n"
                   "# TYPE switchboard_connections_refused_total counter\n");
    for (size_t i = 0; i < n; i++)
        sb_buf_printf(b,
                      "switchboard_connections_refused_total{listener=\"%s\",answer=\"503\"} %llu\n"
                      "switchboard_connections_refused_total{listener=\"%s\",answer=\"none\"} %llu\n",
                      name[i], (unsigned long long)st[i].refused_total, name[i], (unsigned long long)st[i].reset_total);
    sb_buf_puts(b, "# HELP switchboard_request_body_bytes Memory held in request bodies on each listener "
                   "(each bounded by limits.max_buffered_body_bytes).\n"
                   "# TYPE switchboard_request_body_bytes gauge\n");
    for (size_t i = 0; i < n; i++)
        sb_buf_printf(b, "switchboard_request_body_bytes{listener=\"%s\"} %zu\n", name[i], st[i].body_bytes);
    sb_buf_puts(b, "# HELP switchboard_body_budget_refusals_total Requests answered 503 because request bodies "
                   "held limits.max_buffered_body_bytes on the listener.\n"
                   "# TYPE switchboard_body_budget_refusals_total counter\n");
    for (size_t i = 0; i < n; i++)
        sb_buf_printf(b, "switchboard_body_budget_refusals_total{listener=\"%s\"} %llu\n", name[i],
                      (unsigned long long)st[i].body_budget_refusals);
    if (client && gw->cfg->tls_cert)
        sb_buf_printf(b,
                      "# HELP switchboard_tls_handshakes_total TLS handshakes completed on the client listener.\n"
                      "# TYPE switchboard_tls_handshakes_total counter\n"
                      "switchboard_tls_handshakes_total{listener=\"client\"} %llu\n"
                      "# HELP switchboard_tls_handshake_failures_total Client connections closed for a failed TLS "
                      "handshake (not TLS, no common protocol or cipher, a bad record).\n"
                      "# TYPE switchboard_tls_handshake_failures_total counter\n"
                      "switchboard_tls_handshake_failures_total{listener=\"client\"} %llu\n",
                      (unsigned long long)st[0].tls_handshakes, (unsigned long long)st[0].tls_failures);
    if (client)
        sb_buf_printf(b,
                      "# HELP switchboard_http2_connections_total Client connections served as HTTP/2 (h2c or h2).\n"
                      "# TYPE switchboard_http2_connections_total counter\n"
                      "switchboard_http2_connections_total{listener=\"client\"} %llu\n"
                      "# HELP switchboard_http2_streams_total HTTP/2 requests handed to the gateway.\n"
                      "# TYPE switchboard_http2_streams_total counter\n"
                      "switchboard_http2_streams_total{listener=\"client\"} %llu\n"
                      "# HELP switchboard_http2_streams_reset_total HTTP/2 streams the gateway reset with an "
                      "error (REFUSED_STREAM past max_concurrent_streams, an answer cut).\n"
                      "# TYPE switchboard_http2_streams_reset_total counter\n"
                      "switchboard_http2_streams_reset_total{listener=\"client\"} %llu\n",
                      (unsigned long long)st[0].h2_connections, (unsigned long long)st[0].h2_streams,
                      (unsigned long long)st[0].h2_refused_streams);
    if (client) {
        sb_buf_puts(b,
                    "# HELP switchboard_http2_goaway_total GOAWAY frames sent to HTTP/2 clients, by reason (idle, "
                    "drain, enhance_your_calm: a flood bound, internal_error and protocol_error: nghttp2's verdicts, "
                    "other_error).\n# TYPE switchboard_http2_goaway_total counter\n");
        for (int r = 0; r < SB_H2_GOAWAY_REASONS; r++)
            sb_buf_printf(b, "switchboard_http2_goaway_total{listener=\"client\",reason=\"%s\"} %llu\n",
                          sb_h2_goaway_reason_names[r], (unsigned long long)st[0].h2_goaway[r]);
    }
    render_workers(gw, b);
}

/* Gateway-wide counters, listener statistics, refusals, and responses by endpoint and class. */
static void render_counters(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    const sb_gateway_counters *c = &gw->counters;
    sb_buf_printf(b,
                  "# HELP switchboard_requests_received_total Requests read by the gateway.\n"
                  "# TYPE switchboard_requests_received_total counter\nswitchboard_requests_received_total %llu\n"
                  "# HELP switchboard_upstream_errors_total Requests that failed before the response started.\n"
                  "# TYPE switchboard_upstream_errors_total counter\nswitchboard_upstream_errors_total %llu\n"
                  "# HELP switchboard_midstream_errors_total Responses cut by an upstream failure.\n"
                  "# TYPE switchboard_midstream_errors_total counter\nswitchboard_midstream_errors_total %llu\n"
                  "# HELP switchboard_client_aborts_total Requests whose client left before the end.\n"
                  "# TYPE switchboard_client_aborts_total counter\nswitchboard_client_aborts_total %llu\n"
                  "# HELP switchboard_orca_reports_total ORCA load headers applied to endpoint state.\n"
                  "# TYPE switchboard_orca_reports_total counter\nswitchboard_orca_reports_total %llu\n"
                  "# HELP switchboard_config_reloads_total Configuration reloads applied.\n"
                  "# TYPE switchboard_config_reloads_total counter\nswitchboard_config_reloads_total %llu\n"
                  "# HELP switchboard_in_flight_requests Requests being proxied now.\n"
                  "# TYPE switchboard_in_flight_requests gauge\nswitchboard_in_flight_requests %zu\n"
                  "# HELP switchboard_draining 1 while a graceful drain (SIGTERM) runs, else 0.\n"
                  "# TYPE switchboard_draining gauge\nswitchboard_draining %d\n",
                  (unsigned long long)c->requests, (unsigned long long)c->upstream_errors,
                  (unsigned long long)c->midstream_errors, (unsigned long long)c->client_aborts,
                  (unsigned long long)c->orca_reports, (unsigned long long)gw->reloads, gw->in_flight,
                  gw->draining ? 1 : 0);
    sb_buf_printf(b,
                  "# HELP switchboard_upstream_tls_handshakes_total TLS handshakes toward https:// endpoints: "
                  "resumed (the endpoint's last session, an abbreviated handshake) or full.\n"
                  "# TYPE switchboard_upstream_tls_handshakes_total counter\n"
                  "switchboard_upstream_tls_handshakes_total{kind=\"resumed\"} %llu\n"
                  "switchboard_upstream_tls_handshakes_total{kind=\"full\"} %llu\n",
                  (unsigned long long)c->upstream_tls_resumed, (unsigned long long)c->upstream_tls_full);
    sb_buf_printf(
        b,
        "# HELP switchboard_stream_usage_stripped_total Usage-only stream chunks the gateway asked for "
        "(upstream.stream_usage) and kept from clients that did not.\n"
        "# TYPE switchboard_stream_usage_stripped_total counter\nswitchboard_stream_usage_stripped_total %llu\n"
        "# HELP switchboard_stream_usage_overflows_total Stream events longer than "
        "limits.max_held_event_bytes, passed on unexamined.\n"
        "# TYPE switchboard_stream_usage_overflows_total counter\nswitchboard_stream_usage_overflows_total "
        "%llu\n",
        (unsigned long long)c->usage_stripped, (unsigned long long)c->usage_overflows);
    sb_buf_printf(b,
                  "# HELP switchboard_reloads_total Configuration reloads by result: success (applied) or failure "
                  "(refused, the running configuration kept: a file with errors, a changed listen address, "
                  "a SIGHUP while draining, out of memory). Membership changes are counted apart "
                  "(switchboard_discovery_*).\n"
                  "# TYPE switchboard_reloads_total counter\n"
                  "switchboard_reloads_total{result=\"success\"} %llu\n"
                  "switchboard_reloads_total{result=\"failure\"} %llu\n"
                  "# HELP switchboard_last_reload_success_timestamp_seconds Unix time the running configuration "
                  "was applied (start or reload).\n"
                  "# TYPE switchboard_last_reload_success_timestamp_seconds gauge\n"
                  "switchboard_last_reload_success_timestamp_seconds %.3f\n"
                  "# HELP switchboard_build_info The running build: its release (VERSION) and git commit.\n"
                  "# TYPE switchboard_build_info gauge\n"
                  "switchboard_build_info{version=\"%s\",commit=\"%s\"} 1\n",
                  (unsigned long long)gw->reload_successes, (unsigned long long)gw->reload_failures,
                  gw->last_reload_ok_s, sb_version, sb_commit);
    render_listener_stats(gw, b);
    render_picker_stats(gw, b);
    sb_buf_printf(b,
                  "# HELP switchboard_inspector_token_bytes Memory held by the request inspector's JSON token "
                  "array, kept between requests (freed after a request that grew it past 64 Ki tokens).\n"
                  "# TYPE switchboard_inspector_token_bytes gauge\nswitchboard_inspector_token_bytes %zu\n",
                  inspector_bytes(gw));
    sb_buf_printf(b,
                  "# HELP switchboard_unauthorized_total Requests refused 401: a missing or unknown API key "
                  "(listener=\"client\") or admin token (listener=\"admin\").\n"
                  "# TYPE switchboard_unauthorized_total counter\n"
                  "switchboard_unauthorized_total{listener=\"client\"} %llu\n"
                  "switchboard_unauthorized_total{listener=\"admin\"} %llu\n",
                  (unsigned long long)c->unauthorized[0], (unsigned long long)c->unauthorized[1]);
    /* By status class and reason (the error code the answer carried): each reason under the
     * class it was answered with, once counted; model_not_found always, so the family has a
     * sample (a 0) from the start. */
    int always = sb_stats_reason("model_not_found", 404);
    sb_buf_puts(b, "# HELP switchboard_rejected_total Requests answered by the gateway itself with an error, by "
                   "status class and reason (the error code of the answer).\n"
                   "# TYPE switchboard_rejected_total counter\n");
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < SB_REASONS; r++)
            if (gw->stats.rejected_by_reason[r][k] || (k == 0 && r == always))
                sb_buf_printf(b, "switchboard_rejected_total{code=\"%dxx\",reason=\"%s\"} %llu\n", k + 4,
                              sb_stats_reason_names[r], (unsigned long long)gw->stats.rejected_by_reason[r][k]);
    sb_buf_puts(b, "# HELP switchboard_requests_total Proxied requests by pool, model (the served name for it and "
                   "its aliases, an adapter's own name, \"other\" past metrics.max_models), endpoint and response "
                   "class.\n"
                   "# TYPE switchboard_requests_total counter\n");
    /* "cut": a response that began and did not finish (net/stats.h), not the 2xx it began as. */
    static const char *const cls[SB_CLASS_COUNT] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx", "cut"};
    sb_buf lb = {0};
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_stats_models *sm = &gw->stats.models[p];
        for (uint32_t s = 0; s < sm->slots; s++)
            for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
                const sb_ep_metrics *m = &gw->stats.ep_metrics[sm->ep_first + e * sm->slots + s];
                for (int k = 0; k < SB_CLASS_COUNT; k++)
                    if (m->by_class[k] || (k == 2 && s == 0))
                        sb_buf_printf(b, "switchboard_requests_total{%s,endpoint=\"%s\",code=\"%s\"} %llu\n",
                                      pool_model_labels(&lb, gw, p, s), cfg->pools[p].endpoints[e].address, cls[k],
                                      (unsigned long long)m->by_class[k]);
            }
    }
    sb_buf_free(&lb);
}

/* Per pool and model: latency histograms and the token counters of upstream usage; per pool,
 * the queue wait (before a request's answer, so by pool only). */
static void render_pool_usage(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    /* Bounds per metric (net/stats.c): a time to first token and a gap between tokens live on
     * scales a thousand times apart. */
    static const struct {
        const char *name, *help;
        size_t off;
        const double *bounds;
    } hs[] = {
        {"switchboard_request_duration_seconds", "Time from request to the end of its response.",
         offsetof(sb_model_metrics, duration), sb_histo_bounds},
        {"switchboard_time_to_first_byte_seconds",
         "Time from request to the first byte of the response head (headers time; for streams see "
         "switchboard_time_to_first_token_seconds).",
         offsetof(sb_model_metrics, ttfb), sb_histo_bounds},
        {"switchboard_time_to_first_token_seconds",
         "Time from request to the first token of a successful answer: a stream's first SSE data event, "
         "else the first body byte.",
         offsetof(sb_model_metrics, ttft), sb_histo_ttft_bounds},
        {"switchboard_inter_token_latency_seconds",
         "Mean time between SSE data events of a successful stream, one observation per request: "
         "(last event - first event) / (events - 1).",
         offsetof(sb_model_metrics, itl), sb_histo_itl_bounds},
    };
    sb_buf lb = {0};
    for (size_t k = 0; k < sizeof(hs) / sizeof(hs[0]); k++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", hs[k].name, hs[k].help, hs[k].name);
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (uint32_t s = 0; s < gw->stats.models[p].slots; s++)
                if (slot_shown(gw, p, s))
                    histo_render(
                        b, hs[k].name, pool_model_labels(&lb, gw, p, s),
                        (const sb_histo *)((const char *)&gw->stats.model_metrics[gw->stats.models[p].first + s] +
                                           hs[k].off),
                        hs[k].bounds);
    }
    sb_buf_printf(b, "# HELP switchboard_queue_wait_seconds Time a request flow control admitted waited before "
                     "dispatch (0 when dispatched at once).\n# TYPE switchboard_queue_wait_seconds histogram\n");
    for (size_t p = 0; p < cfg->n_pools; p++) {
        sb_buf_reset(&lb);
        sb_buf_printf(&lb, "pool=\"%s\"", cfg->pools[p].name);
        histo_render(b, "switchboard_queue_wait_seconds", lb.data ? lb.data : "", &gw->stats.pool_metrics[p].queue_wait,
                     sb_histo_queue_bounds);
    }
    /* One series per configured (pool, fallback) and reason: bounded by the configuration. */
    sb_buf_printf(b, "# HELP switchboard_fallbacks_total Requests a pool passed to one of its fallbacks, by "
                     "reason (saturated, failed, unavailable).\n# TYPE switchboard_fallbacks_total counter\n");
    for (size_t p = 0; p < cfg->n_pools; p++)
        for (size_t f = 0; f < cfg->pools[p].n_fallbacks && f < SB_FALLBACKS_MAX; f++)
            for (int r = 0; r < SB_FALLBACK_REASONS; r++)
                sb_buf_printf(b, "switchboard_fallbacks_total{pool=\"%s\",fallback=\"%s\",reason=\"%s\"} %llu\n",
                              cfg->pools[p].name, cfg->pools[p].fallbacks[f].pool_name,
                              sb_stats_fallback_reason_names[r],
                              (unsigned long long)gw->stats.fallbacks[p * SB_FALLBACKS_MAX + f][r]);
    static const struct {
        const char *name, *help;
    } tok[] = {{"switchboard_prompt_tokens_total", "Prompt tokens reported by upstream usage."},
               {"switchboard_cached_tokens_total", "Prompt tokens served from the prefix cache (upstream usage)."},
               {"switchboard_completion_tokens_total", "Completion tokens reported by upstream usage."}};
    for (size_t t = 0; t < 3; t++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", tok[t].name, tok[t].help, tok[t].name);
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (uint32_t s = 0; s < gw->stats.models[p].slots; s++) {
                if (!slot_shown(gw, p, s))
                    continue;
                const sb_model_metrics *mm = &gw->stats.model_metrics[gw->stats.models[p].first + s];
                uint64_t v = t == 0 ? mm->prompt_tokens : t == 1 ? mm->cached_tokens : mm->completion_tokens;
                sb_buf_printf(b, "%s{%s} %llu\n", tok[t].name, pool_model_labels(&lb, gw, p, s), (unsigned long long)v);
            }
    }
    sb_buf_free(&lb);
}

/* Per endpoint: the state the router scores with, and the probe cadence. */
static void render_endpoint_gauges(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    sb_ns now = uv_hrtime();
    static const char *const gauges[][2] = {
        {"switchboard_endpoint_healthy", "1 if the endpoint takes new requests (healthy or half-open)."},
        {"switchboard_endpoint_stale", "1 if the endpoint's last load report is older than stale_ms."},
        {"switchboard_endpoint_in_flight", "Requests the gateway has in flight to the endpoint."},
        {"switchboard_endpoint_waiting", "Effective queue: reported waiting plus requests sent since the report."},
        {"switchboard_endpoint_running",
         "Requests the engine reported running (without a report: the gateway's own in flight)."},
        {"switchboard_endpoint_kv_cache_usage", "KV-cache utilisation used for scoring (0..1)."},
        {"switchboard_endpoint_report_age_seconds", "Age of the endpoint's last load report (-1: none)."},
        {"switchboard_probe_interval_seconds", "Current metrics scrape interval (adaptive)."},
    };
    for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g][0], gauges[g][1], gauges[g][0]);
        for (size_t p = 0; p < cfg->n_pools; p++) {
            const sb_pool_params *pp = sb_router_pool_params(gw->router, (uint32_t)p);
            for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
                sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
                const sb_probe_stats *ps = gw->prober ? sb_prober_stats(gw->prober, (uint32_t)p, (uint32_t)e) : NULL;
                double v = 0;
                switch (g) {
                case 0: v = sb_endpoint_available(ep, now); break;
                case 1: v = sb_endpoint_is_stale(ep, pp->stale_ns, now); break;
                case 2: v = ep->in_flight; break;
                case 3: v = sb_endpoint_waiting(ep); break;
                case 4: v = sb_endpoint_running(ep); break;
                case 5: v = sb_endpoint_kv_usage(ep); break;
                case 6: v = ep->report_ns ? (double)(now - ep->report_ns) / 1e9 : -1; break;
                default: v = ps ? ps->interval_ms / 1e3 : 0; break;
                }
                sb_buf_printf(b, "%s{pool=\"%s\",endpoint=\"%s\"} %g\n", gauges[g][0], cfg->pools[p].name,
                              cfg->pools[p].endpoints[e].address, v);
            }
        }
    }
}

/* Per pool: the prefix index's size. */
static void render_prefix_indexes(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    sb_buf_puts(b, "# HELP switchboard_prefix_index_entries (block, endpoint) entries in the pool's prefix index.\n"
                   "# TYPE switchboard_prefix_index_entries gauge\n");
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_prefix_index *ix = sb_router_prefix_index(gw->router, (uint32_t)p);
        sb_buf_printf(b, "switchboard_prefix_index_entries{pool=\"%s\"} %zu\n", cfg->pools[p].name,
                      ix ? sb_prefix_index_entries(ix) : 0);
    }
    sb_buf_puts(b, "# HELP switchboard_prefix_index_bytes Memory held by the pool's prefix index.\n"
                   "# TYPE switchboard_prefix_index_bytes gauge\n");
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_prefix_index *ix = sb_router_prefix_index(gw->router, (uint32_t)p);
        sb_buf_printf(b, "switchboard_prefix_index_bytes{pool=\"%s\"} %zu\n", cfg->pools[p].name,
                      ix ? sb_prefix_index_bytes(ix) : 0);
    }
}

/* Flow control's queues, per pool and band (only when flow control is on). */
static void render_queues(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    if (gw->adm) {
        sb_buf_puts(b, "# HELP switchboard_queue_length Requests waiting in the gateway's admission queue.\n"
                       "# TYPE switchboard_queue_length gauge\n");
        for (size_t p = 0; p < cfg->n_pools; p++) {
            sb_flow_stats fs;
            sb_flow_stats_get(sb_admission_flow(gw->adm, (uint32_t)p), &fs);
            for (int k = 0; k < SB_BAND_COUNT; k++)
                sb_buf_printf(b, "switchboard_queue_length{pool=\"%s\",band=\"%s\"} %u\n", cfg->pools[p].name,
                              sb_band_name((enum sb_band)k), fs.band[k].queued);
        }
        static const char *const qc[][2] = {
            {"switchboard_queue_dispatched_total", "Requests dispatched from the admission queue."},
            {"switchboard_queue_refused_total",
             "Requests refused by flow control (reason: full, shed, evicted, timeout)."},
            {"switchboard_queue_removed_total", "Queued requests whose client disconnected (nothing sent upstream)."},
            {"switchboard_queue_wait_seconds_total", "Total time dispatched requests waited in the queue."},
        };
        for (size_t g = 0; g < 4; g++) {
            sb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", qc[g][0], qc[g][1], qc[g][0]);
            for (size_t p = 0; p < cfg->n_pools; p++) {
                sb_flow_stats fs;
                sb_flow_stats_get(sb_admission_flow(gw->adm, (uint32_t)p), &fs);
                for (int k = 0; k < SB_BAND_COUNT; k++) {
                    const sb_flow_band_stats *bs = &fs.band[k];
                    const char *pn = cfg->pools[p].name, *bn = sb_band_name((enum sb_band)k);
                    if (g == 0)
                        sb_buf_printf(b, "%s{pool=\"%s\",band=\"%s\"} %llu\n", qc[g][0], pn, bn,
                                      (unsigned long long)bs->dispatched);
                    else if (g == 1) {
                        const char *rs[] = {"full", "shed", "evicted", "timeout"};
                        uint64_t rv[] = {bs->refused_full, bs->shed, bs->evicted, bs->expired};
                        for (int r = 0; r < 4; r++)
                            sb_buf_printf(b, "%s{pool=\"%s\",band=\"%s\",reason=\"%s\"} %llu\n", qc[g][0], pn, bn,
                                          rs[r], (unsigned long long)rv[r]);
                    } else if (g == 2)
                        sb_buf_printf(b, "%s{pool=\"%s\",band=\"%s\"} %llu\n", qc[g][0], pn, bn,
                                      (unsigned long long)bs->removed);
                    else
                        sb_buf_printf(b, "%s{pool=\"%s\",band=\"%s\"} %.6f\n", qc[g][0], pn, bn,
                                      (double)bs->wait_sum_ns / 1e9);
                }
            }
        }
    }
}

/* The adaptive configurator's detectors and weights (only when it is on). */
static void render_adaptive_metrics(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    if (gw->adaptive) {
        sb_buf_puts(b, "# HELP switchboard_adaptive_signal Smoothed detector signal (0..1).\n"
                       "# TYPE switchboard_adaptive_signal gauge\n");
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (int d = 0; d < SB_DETECT_COUNT && gw->adaptive[p]; d++)
                sb_buf_printf(b, "switchboard_adaptive_signal{pool=\"%s\",detector=\"%s\"} %g\n", cfg->pools[p].name,
                              sb_detector_name((enum sb_detector)d),
                              sb_adaptive_signal(gw->adaptive[p], (enum sb_detector)d));
        sb_buf_puts(b, "# HELP switchboard_adaptive_regime 1 while the detector's regime is entered.\n"
                       "# TYPE switchboard_adaptive_regime gauge\n");
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (int d = 0; d < SB_DETECT_COUNT && gw->adaptive[p]; d++)
                sb_buf_printf(b, "switchboard_adaptive_regime{pool=\"%s\",detector=\"%s\"} %d\n", cfg->pools[p].name,
                              sb_detector_name((enum sb_detector)d),
                              sb_adaptive_regime(gw->adaptive[p], (enum sb_detector)d) ? 1 : 0);
        sb_buf_puts(b, "# HELP switchboard_adaptive_weight Total scorer weight by category in the adaptive snapshot.\n"
                       "# TYPE switchboard_adaptive_weight gauge\n");
        for (size_t p = 0; p < cfg->n_pools; p++) {
            if (!gw->adaptive[p])
                continue;
            sb_buf_printf(b, "switchboard_adaptive_weight{pool=\"%s\",category=\"affinity\"} %g\n", cfg->pools[p].name,
                          sb_adaptive_category_weight(gw->adaptive[p], SB_AFFINITY));
            sb_buf_printf(b, "switchboard_adaptive_weight{pool=\"%s\",category=\"distribution\"} %g\n",
                          cfg->pools[p].name, sb_adaptive_category_weight(gw->adaptive[p], SB_DISTRIBUTION));
        }
    }
}

/* Per endpoint: the prober's and outlier detection's counters. */
static void render_probe_counters(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    static const char *const probe_counters[][2] = {
        {"switchboard_probe_scrapes_total", "Metrics scrapes attempted."},
        {"switchboard_probe_errors_total", "Metrics scrapes that failed (connect, timeout, status, parse)."},
        {"switchboard_health_check_failures_total", "Active health checks that failed."},
        {"switchboard_endpoint_ejections_total", "Times outlier detection ejected the endpoint."},
        {"switchboard_endpoint_restarts_total", "Engine restarts detected from its counters."},
        {"switchboard_probe_mismatch_total",
         "Scrapes that answered 200 with none of the engine's metric families (a wrong engine:, or with auto none "
         "known); /debug/endpoints says which engine the page looks like."},
    };
    for (size_t g = 0; g < sizeof(probe_counters) / sizeof(probe_counters[0]); g++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", probe_counters[g][0], probe_counters[g][1],
                      probe_counters[g][0]);
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
                const sb_probe_stats *ps = gw->prober ? sb_prober_stats(gw->prober, (uint32_t)p, (uint32_t)e) : NULL;
                sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
                uint64_t v = g == 0   ? (ps ? ps->scrapes : 0)
                             : g == 1 ? (ps ? ps->scrape_errors : 0)
                             : g == 2 ? (ps ? ps->health_failures : 0)
                             : g == 3 ? ep->ejections_total
                             : g == 4 ? (ps ? ps->restarts : 0)
                                      : (ps ? ps->engine.mismatches : 0);
                sb_buf_printf(b, "%s{pool=\"%s\",endpoint=\"%s\"} %llu\n", probe_counters[g][0], cfg->pools[p].name,
                              cfg->pools[p].endpoints[e].address, (unsigned long long)v);
            }
    }
    sb_buf_puts(b, "# HELP switchboard_endpoint_served_model_missing 1 while the endpoint's /v1/models does not list "
                   "its pool's first model (the name sent upstream).\n"
                   "# TYPE switchboard_endpoint_served_model_missing gauge\n");
    for (size_t p = 0; p < cfg->n_pools; p++)
        for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
            const sb_probe_stats *ps = gw->prober ? sb_prober_stats(gw->prober, (uint32_t)p, (uint32_t)e) : NULL;
            sb_buf_printf(b, "switchboard_endpoint_served_model_missing{pool=\"%s\",endpoint=\"%s\"} %d\n",
                          cfg->pools[p].name, cfg->pools[p].endpoints[e].address, ps && ps->models.missing ? 1 : 0);
        }
    uint64_t waits = 0, timeouts = 0;
    if (gw->prober)
        sb_prober_sync_stats(gw->prober, &waits, &timeouts);
    sb_buf_printf(
        b,
        "# HELP switchboard_sync_probe_waits_total Requests that waited for a synchronous probe of their best "
        "candidates (probe.sync_max_age_ms), since the prober started.\n"
        "# TYPE switchboard_sync_probe_waits_total counter\nswitchboard_sync_probe_waits_total %llu\n"
        "# HELP switchboard_sync_probe_timeouts_total Synchronous probe waits that ended at their deadline "
        "(probe.sync_timeout_ms).\n"
        "# TYPE switchboard_sync_probe_timeouts_total counter\nswitchboard_sync_probe_timeouts_total %llu\n",
        (unsigned long long)waits, (unsigned long long)timeouts);
}

/* One counter family per endpoint and reason: `counts` is the offset of an array of n
 * uint64_t in sb_endpoint, indexed by reason. */
static void render_by_reason(sb_gateway *gw, sb_buf *b, const char *name, const char *help, size_t counts,
                             const char *(*reason)(int), int n)
{
    const sb_config *cfg = gw->cfg;
    sb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t p = 0; p < cfg->n_pools; p++)
        for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
            const uint64_t *v =
                (const uint64_t *)((const char *)sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e) + counts);
            for (int r = 0; r < n; r++)
                sb_buf_printf(b, "%s{pool=\"%s\",endpoint=\"%s\",reason=\"%s\"} %llu\n", name, cfg->pools[p].name,
                              cfg->pools[p].endpoints[e].address, reason(r), (unsigned long long)v[r]);
        }
}

static const char *retry_reason(int r)
{
    return sb_retry_reason_name((enum sb_retry_reason)r);
}
static const char *eject_reason(int r)
{
    return sb_eject_reason_name((enum sb_eject_reason)r);
}

/* Per endpoint: retries away from it and ejections of it, by reason; readmissions by an
 * active check; per pool, picks made in panic; the retries the budget refused. */
static void render_outlier_counters(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    render_by_reason(gw, b, "switchboard_retries_total",
                     "Attempts that failed before any byte reached the client and were retried on another "
                     "endpoint, by the failed endpoint and why.",
                     offsetof(sb_endpoint, retries_by), retry_reason, SB_RETRY_REASONS);
    render_by_reason(gw, b, "switchboard_ejections_total",
                     "Outlier ejections, by endpoint and reason (consecutive failures, failure rate over the "
                     "window, failed half-open trial).",
                     offsetof(sb_endpoint, ejections_by), eject_reason, SB_EJECT_REASONS);
    sb_buf_puts(b, "# HELP switchboard_readmissions_total Ejections ended early by a successful active health "
                   "check.\n# TYPE switchboard_readmissions_total counter\n");
    for (size_t p = 0; p < cfg->n_pools; p++)
        for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++)
            sb_buf_printf(b, "switchboard_readmissions_total{pool=\"%s\",endpoint=\"%s\"} %llu\n", cfg->pools[p].name,
                          cfg->pools[p].endpoints[e].address,
                          (unsigned long long)sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e)->readmissions);
    sb_buf_puts(b, "# HELP switchboard_panic_routing_total Picks made while every endpoint left was ejected or "
                   "down (routed over them all instead of answering 503).\n"
                   "# TYPE switchboard_panic_routing_total counter\n");
    for (size_t p = 0; p < cfg->n_pools; p++)
        sb_buf_printf(b, "switchboard_panic_routing_total{pool=\"%s\"} %llu\n", cfg->pools[p].name,
                      (unsigned long long)sb_router_pool_panics(gw->router, (uint32_t)p));
    sb_buf_printf(b,
                  "# HELP switchboard_retries_budget_denied_total Retries not made because the retry budget "
                  "was spent.\n# TYPE switchboard_retries_budget_denied_total counter\n"
                  "switchboard_retries_budget_denied_total %llu\n",
                  (unsigned long long)gw->counters.retries_budget_denied);
}

/* Per endpoint subscribed to KV-cache events (net/kv_feed.h): the stream's counters. */
static void render_kv_events(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    static const char *m[][3] = {
        {"switchboard_kv_events_messages_total", "counter", "Event messages read from the endpoint's publisher."},
        {"switchboard_kv_events_batches_total", "counter", "Event batches decoded and delivered (live and replayed)."},
        {"switchboard_kv_events_events_total", "counter", "Events in the delivered batches."},
        {"switchboard_kv_events_gaps_total", "counter", "Sequence gaps seen (batches the subscriber missed)."},
        {"switchboard_kv_events_replays_total", "counter", "Replay requests sent to the endpoint's replay socket."},
        {"switchboard_kv_events_replayed_batches_total", "counter", "Batches recovered by replays."},
        {"switchboard_kv_events_replay_failures_total", "counter",
         "Gaps not recovered (no replay socket, no answer in time, or the replay buffer no longer reached back)."},
        {"switchboard_kv_events_restarts_total", "counter", "Publisher restarts seen (the sequence went back)."},
        {"switchboard_kv_events_clears_total", "counter",
         "Times the endpoint's cached state was cleared for lost events."},
        {"switchboard_kv_events_decode_errors_total", "counter", "Event batches refused by the decoder."},
        {"switchboard_kv_events_dropped_total", "counter",
         "Malformed messages, other topics and stray replay answers dropped."},
        {"switchboard_kv_events_stale_total", "counter", "Times the stream went silent for stale_after_ms."},
        {"switchboard_kv_events_last_seq", "gauge", "Sequence number of the last batch delivered (-1: none yet)."},
        {"switchboard_kv_events_lag_seconds", "gauge", "Gateway wall clock minus the last batch's timestamp."},
        {"switchboard_kv_events_stale", "gauge", "1 while the stream has been silent for stale_after_ms."},
    };
    bool any = false;
    for (size_t i = 0; gw->kv_subs && i < gw->pool_first_up[cfg->n_pools]; i++)
        any |= gw->kv_subs[i] != NULL;
    if (!any)
        return;
    for (size_t g = 0; g < sizeof m / sizeof m[0]; g++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", m[g][0], m[g][2], m[g][0], m[g][1]);
        for (size_t p = 0; p < cfg->n_pools; p++)
            for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
                const sb_kv_sub *ks = sb_gateway_kv_sub(gw, (uint32_t)p, (uint32_t)e);
                if (!ks)
                    continue;
                const sb_kv_sub_stats *st = sb_kv_sub_stats_get(ks);
                const uint64_t c[] = {st->messages,      st->batches,          st->events,          st->gaps,
                                      st->replays_asked, st->replayed_batches, st->replay_failures, st->restarts,
                                      st->clears,        st->decode_errors,    st->dropped,         st->stale_episodes};
                sb_buf_printf(b, "%s{pool=\"%s\",endpoint=\"%s\"} ", m[g][0], cfg->pools[p].name,
                              cfg->pools[p].endpoints[e].address);
                if (g < sizeof c / sizeof c[0])
                    sb_buf_printf(b, "%llu\n", (unsigned long long)c[g]);
                else if (g == 12)
                    sb_buf_printf(b, "%lld\n", (long long)st->last_seq);
                else if (g == 13)
                    sb_buf_printf(b, "%.6f\n", st->lag_seconds);
                else
                    sb_buf_printf(b, "%d\n", st->stale ? 1 : 0);
            }
    }
}

/* Gateway sync (net/peer_sync.h): what was told and heard. */
static void render_sync(sb_gateway *gw, sb_buf *b)
{
    if (!gw->sync)
        return;
    const sb_peer_sync_stats *st = sb_peer_sync_stats_get(gw->sync);
    static const char *m[][3] = {
        {"switchboard_sync_published_total", "counter", "Messages published to the peers (heartbeats included)."},
        {"switchboard_sync_publish_dropped_total", "counter", "Messages ZMQ could not queue for the peers."},
        {"switchboard_sync_received_total", "counter", "Frames read from the peers."},
        {"switchboard_sync_decode_errors_total", "counter", "Frames from the peers the decoder refused."},
        {"switchboard_sync_gaps_total", "counter", "Messages missing from the peers' sequences."},
        {"switchboard_sync_applied_total", "counter", "Peers' dispatches counted in this gateway's router."},
        {"switchboard_sync_unknown_total", "counter",
         "Peers' dispatches naming a pool or endpoint not configured here."},
        {"switchboard_sync_untracked_total", "counter", "Peers' dispatches dropped: sync.max_tracked reached."},
        {"switchboard_sync_stray_total", "counter", "First bytes and ends of peers' requests not tracked."},
        {"switchboard_sync_expired_total", "counter", "Peers' requests forgotten after sync.max_request_ms."},
        {"switchboard_sync_peer_timeouts_total", "counter",
         "Peers silent for sync.peer_timeout_ms (their requests released)."},
        {"switchboard_sync_own_total", "counter", "This gateway's own messages heard back."},
        {"switchboard_sync_tracked", "gauge", "Peers' requests counted now."},
        {"switchboard_sync_peers_alive", "gauge", "Peers heard within sync.peer_timeout_ms."},
        {"switchboard_sync_auth_accepted_total", "counter",
         "Subscribers admitted to this gateway's publisher (CURVE with the fleet's key, sync.key_file)."},
        {"switchboard_sync_auth_refused_total", "counter",
         "Subscribers refused by this gateway's publisher (another key or no CURVE, sync.key_file)."},
        {"switchboard_sync_received_rotation_total", "counter",
         "Of the frames read, those from publishers holding the rotation key (sync.rotation_key_file)."},
    };
    const uint64_t v[] = {
        st->published, st->publish_dropped, st->received,      st->decode_errors, st->gaps,          st->applied,
        st->unknown,   st->untracked,       st->stray,         st->expired,       st->peer_timeouts, st->own,
        st->tracked,   st->peers_alive,     st->auth_accepted, st->auth_refused,  st->via_rotation};
    _Static_assert(sizeof v / sizeof v[0] == sizeof m / sizeof m[0], "a value per sync metric");
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", m[i][0], m[i][2], m[i][0], m[i][1], m[i][0],
                      (unsigned long long)v[i]);
}

/* An endpoint's event stream and what its precise index holds, in /debug/endpoints. */
static void render_endpoint_kv(sb_gateway *gw, sb_buf *b, uint32_t p, uint32_t e)
{
    const sb_kv_sub *ks = sb_gateway_kv_sub(gw, p, e);
    if (ks) {
        const sb_kv_sub_stats *st = sb_kv_sub_stats_get(ks);
        sb_buf_puts(b, ",\"kv_events\":{\"publisher\":\"");
        sb_buf_json_escape(b, sb_kv_sub_endpoint(ks), strlen(sb_kv_sub_endpoint(ks)));
        sb_buf_printf(b,
                      "\",\"last_seq\":%lld,\"lag_seconds\":%.6f,\"stale\":%s,\"replaying\":%s,"
                      "\"silent_ms\":%llu,\"messages\":%llu,\"batches\":%llu,\"events\":%llu,\"gaps\":%llu,"
                      "\"replays\":%llu,\"replays_answered\":%llu,\"replay_failures\":%llu,\"restarts\":%llu,"
                      "\"clears\":%llu,\"decode_errors\":%llu,\"dropped\":%llu,\"unknown_events\":%llu}",
                      (long long)st->last_seq, st->lag_seconds, st->stale ? "true" : "false",
                      st->replaying ? "true" : "false", (unsigned long long)(uv_now(gw->loop) - st->last_message_ms),
                      (unsigned long long)st->messages, (unsigned long long)st->batches, (unsigned long long)st->events,
                      (unsigned long long)st->gaps, (unsigned long long)st->replays_asked,
                      (unsigned long long)st->replays_answered, (unsigned long long)st->replay_failures,
                      (unsigned long long)st->restarts, (unsigned long long)st->clears,
                      (unsigned long long)st->decode_errors, (unsigned long long)st->dropped,
                      (unsigned long long)st->unknown_events);
    }
    const sb_kv_index *kv = sb_router_kv_index(gw->router, p);
    if (kv) {
        sb_kv_index_ep_stats s = sb_kv_index_stats(kv, e);
        sb_buf_printf(b,
                      ",\"kv_index\":{\"blocks\":%llu,\"stored\":%llu,\"removed\":%llu,\"unknown_removes\":%llu,"
                      "\"parent_misses\":%llu,\"clears\":%llu,\"tier_moves\":%llu,\"block_size_mismatches\":%llu,"
                      "\"malformed\":%llu,\"evictions\":%llu}",
                      (unsigned long long)s.blocks, (unsigned long long)s.stored, (unsigned long long)s.removed,
                      (unsigned long long)s.unknown_removes, (unsigned long long)s.parent_misses,
                      (unsigned long long)s.clears, (unsigned long long)s.tier_moves,
                      (unsigned long long)s.block_size_mismatches, (unsigned long long)s.malformed,
                      (unsigned long long)s.evictions);
    }
}

/* The precise indexes (core/kv_index.h) of pools whose engines report their caches. */
static void render_kv_indexes(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    static const char *const m[][3] = {
        {"switchboard_kv_index_blocks", "gauge", "Blocks the endpoint's engine reported it holds (GPU tier)."},
        {"switchboard_kv_index_stored_total", "counter", "Blocks recorded from BlockStored events."},
        {"switchboard_kv_index_removed_total", "counter", "Blocks forgotten by BlockRemoved events."},
        {"switchboard_kv_index_unknown_removes_total", "counter", "BlockRemoved hashes the index did not hold."},
        {"switchboard_kv_index_parent_misses_total", "counter", "BlockStored events dropped: parent block unknown."},
        {"switchboard_kv_index_clears_total", "counter", "Times the endpoint's reported state was cleared."},
        {"switchboard_kv_index_evictions_total", "counter", "Entries dropped at the index's memory bound."},
    };
    bool any = false;
    for (size_t p = 0; p < cfg->n_pools; p++)
        any |= sb_router_kv_index(gw->router, (uint32_t)p) != NULL;
    if (!any)
        return;
    for (size_t g = 0; g < sizeof m / sizeof m[0]; g++) {
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", m[g][0], m[g][2], m[g][0], m[g][1]);
        for (size_t p = 0; p < cfg->n_pools; p++) {
            const sb_kv_index *kv = sb_router_kv_index(gw->router, (uint32_t)p);
            for (size_t e = 0; kv && e < cfg->pools[p].n_endpoints; e++) {
                sb_kv_index_ep_stats s = sb_kv_index_stats(kv, (uint32_t)e);
                const uint64_t c[] = {s.blocks,        s.stored, s.removed,  s.unknown_removes,
                                      s.parent_misses, s.clears, s.evictions};
                sb_buf_printf(b, "%s{pool=\"%s\",endpoint=\"%s\"} %llu\n", m[g][0], cfg->pools[p].name,
                              cfg->pools[p].endpoints[e].address, (unsigned long long)c[g]);
            }
        }
    }
    sb_buf_puts(b, "# HELP switchboard_kv_index_bytes Memory held by the pool's precise index.\n"
                   "# TYPE switchboard_kv_index_bytes gauge\n");
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_kv_index *kv = sb_router_kv_index(gw->router, (uint32_t)p);
        if (kv)
            sb_buf_printf(b, "switchboard_kv_index_bytes{pool=\"%s\"} %zu\n", cfg->pools[p].name,
                          sb_kv_index_bytes(kv));
    }
}

/* The tokenize cache and the engines' /tokenize round trips (net/precise.h). */
static void render_precise(sb_gateway *gw, sb_buf *b)
{
    const sb_precise_stats *s = sb_gateway_precise_stats(gw);
    if (!s)
        return;
    static const char *const m[][2] = {
        {"switchboard_tokenize_cache_exact_hits_total", "Requests whose token ids the cache had whole."},
        {"switchboard_tokenize_cache_prefix_hits_total",
         "Requests whose leading token ids the cache had (a proven prefix)."},
        {"switchboard_tokenize_cache_misses_total", "Requests whose token ids the cache did not have."},
        {"switchboard_tokenize_requests_total", "/tokenize requests sent to engines."},
        {"switchboard_tokenize_failures_total",
         "/tokenize requests that gave no token ids (error, timeout, bad answer)."},
        {"switchboard_tokenize_waits_total", "Requests held for their token ids (up to tokenize.wait_ms)."},
        {"switchboard_tokenize_wait_timeouts_total", "Held requests routed before their ids came."},
        {"switchboard_tokenize_skipped_total", "Cache misses that asked no engine (too many /tokenize in flight)."},
    };
    const uint64_t v[] = {s->exact_hits, s->prefix_hits, s->misses,        s->requests,
                          s->failures,   s->waits,       s->wait_timeouts, s->skipped};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        sb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", m[i][0], m[i][1], m[i][0], m[i][0],
                      (unsigned long long)v[i]);
}

/* The standard process_* families (net/process.h), each only when it could be read. */
static void render_process(sb_buf *b)
{
    sb_process_sample ps;
    sb_process_sample_read(&ps);
    if (ps.have_stat)
        sb_buf_printf(b,
                      "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                      "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n"
                      "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                      "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %.0f\n"
                      "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                      "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %.0f\n"
                      "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                      "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                      ps.cpu_seconds, ps.resident_bytes, ps.virtual_bytes, ps.start_time_s);
    if (ps.open_fds >= 0)
        sb_buf_printf(b,
                      "# HELP process_open_fds Number of open file descriptors.\n"
                      "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n",
                      ps.open_fds);
    if (ps.max_fds >= 0)
        sb_buf_printf(b,
                      "# HELP process_max_fds Maximum number of open file descriptors.\n"
                      "# TYPE process_max_fds gauge\nprocess_max_fds %ld\n",
                      ps.max_fds);
}

/* GET /metrics: Prometheus text, sections in a fixed order. */
static void render_metrics(sb_gateway *gw, sb_buf *b)
{
    render_counters(gw, b);
    render_pool_usage(gw, b);
    render_endpoint_gauges(gw, b);
    render_prefix_indexes(gw, b);
    render_queues(gw, b);
    render_adaptive_metrics(gw, b);
    render_probe_counters(gw, b);
    sb_gateway_agent_metrics(gw, b);
    render_outlier_counters(gw, b);
    render_kv_events(gw, b);
    render_sync(gw, b);
    render_kv_indexes(gw, b);
    render_precise(gw, b);
    sb_discovery_render_metrics(gw->disc, b);
    render_process(b);
}

/* The report's engine: configured ("auto" or a name), the mapping in use (null while auto has
 * not seen a page), scrapes that matched nothing, and while they do, why. */
static void render_report_engine(sb_buf *b, const sb_probe_stats *ps, const char *path)
{
    const sb_probe_engine *e = &ps->engine;
    char why[200];
    sb_buf_printf(b, ",\"engine\":{\"configured\":\"%s\",\"in_use\":",
                  e->automatic ? "auto" : sb_engine_kind_name((sb_engine_kind)e->kind));
    if (!e->automatic || e->detected)
        sb_buf_printf(b, "\"%s\"", sb_engine_kind_name((sb_engine_kind)e->kind));
    else
        sb_buf_puts(b, "null");
    sb_buf_printf(b, ",\"mismatches\":%llu}", (unsigned long long)e->mismatches);
    if (sb_probe_engine_why(e, path ? path : "/metrics", why, sizeof why)) {
        sb_buf_puts(b, ",\"error\":\"");
        sb_buf_json_escape(b, why, strlen(why));
        sb_buf_puts(b, "\"");
    }
}

static void render_endpoints(sb_gateway *gw, sb_buf *b)
{
    const sb_config *cfg = gw->cfg;
    sb_ns now = uv_hrtime();
    sb_buf_puts(b, "{\"pools\":[");
    for (size_t p = 0; p < cfg->n_pools; p++) {
        const sb_pool_params *pp = sb_router_pool_params(gw->router, (uint32_t)p);
        const sb_profile *prof = sb_router_pool_profile(gw->router, (uint32_t)p);
        sb_buf_printf(b, "%s{\"pool\":\"%s\",\"profile\":\"%s\",\"stale_ms\":%llu,\"endpoints\":[", p ? "," : "",
                      cfg->pools[p].name, prof ? prof->name : "", (unsigned long long)(pp->stale_ns / SB_NS_PER_MS));
        for (size_t e = 0; e < cfg->pools[p].n_endpoints; e++) {
            sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
            const sb_probe_stats *ps = gw->prober ? sb_prober_stats(gw->prober, (uint32_t)p, (uint32_t)e) : NULL;
            const sb_endpoint_report *r = &ep->report;
            static const char *const src[] = {"none", "scrape", "orca", "agent"};
            sb_buf_printf(b,
                          "%s{\"address\":\"%s\",\"health\":\"%s\",\"available\":%s,\"stale\":%s,"
                          "\"report\":{\"source\":\"%s\",\"age_ms\":%.1f,\"running\":",
                          e ? "," : "", ep->address, sb_health_name(sb_endpoint_health(ep, now)),
                          sb_endpoint_available(ep, now) ? "true" : "false",
                          sb_endpoint_is_stale(ep, pp->stale_ns, now) ? "true" : "false", src[ep->report_source],
                          ep->report_ns ? (double)(now - ep->report_ns) / 1e6 : -1.0);
            if (r->have_running)
                sb_buf_printf(b, "%g", r->running);
            else
                sb_buf_puts(b, "null");
            sb_buf_puts(b, ",\"waiting\":");
            if (r->have_waiting)
                sb_buf_printf(b, "%g", r->waiting);
            else
                sb_buf_puts(b, "null");
            sb_buf_puts(b, ",\"kv_cache_usage\":");
            if (r->have_kv)
                sb_buf_printf(b, "%g", r->kv_usage);
            else
                sb_buf_puts(b, "null");
            sb_buf_printf(b, ",\"block_size\":%u,\"num_gpu_blocks\":%u,\"max_lora\":%u,\"lora_running_mask\":%llu",
                          r->block_size, r->num_gpu_blocks, r->max_lora, (unsigned long long)r->lora_running_mask);
            if (ps) {
                char why[320];
                render_report_engine(b, ps, cfg->pools[p].probe_path);
                if (sb_probe_models_why(&ps->models, cfg->pools[p].models[0], why, sizeof why)) {
                    sb_buf_puts(b, ",\"models_error\":\"");
                    sb_buf_json_escape(b, why, strlen(why));
                    sb_buf_puts(b, "\"");
                }
            }
            sb_buf_puts(b, "}");
            sb_buf_printf(b,
                          ",\"own\":{\"in_flight\":%u,\"sent_since_report\":%u,\"pending_prefill_tokens\":%llu,"
                          "\"dispatched\":%llu,\"completed\":%llu,\"failed\":%llu},"
                          "\"scoring\":{\"waiting\":%g,\"running\":%g,\"kv_cache_usage\":%g},"
                          "\"outlier\":{\"consecutive_failures\":%u,\"ejections\":%u}",
                          ep->in_flight, ep->sent_since_report, (unsigned long long)ep->pending_prefill_tokens,
                          (unsigned long long)ep->dispatched, (unsigned long long)ep->completed,
                          (unsigned long long)ep->failed, sb_endpoint_waiting(ep), sb_endpoint_running(ep),
                          sb_endpoint_kv_usage(ep), ep->consecutive_failures, ep->ejections);
            const sb_prefix_index *ix = sb_router_prefix_index(gw->router, (uint32_t)p);
            if (ix)
                sb_buf_printf(b,
                              ",\"prefix_index\":{\"blocks\":%zu,\"capacity_blocks\":%u,\"pending\":%zu,"
                              "\"calibrated_share\":%.3f,\"traffic_share\":%.3f}",
                              sb_prefix_index_endpoint_entries(ix, (uint32_t)e),
                              sb_prefix_index_capacity(ix, (uint32_t)e),
                              sb_prefix_index_endpoint_pending(ix, (uint32_t)e), 1.0 - ep->index_shrink,
                              sb_endpoint_traffic_share(ep));
            if (ps)
                sb_buf_printf(b,
                              ",\"probe\":{\"interval_ms\":%u,\"scrapes\":%llu,\"errors\":%llu,\"last_status\":%d,"
                              "\"health_checks\":%llu,\"health_failures\":%llu,\"restarts\":%llu}",
                              ps->interval_ms, (unsigned long long)ps->scrapes, (unsigned long long)ps->scrape_errors,
                              ps->last_status, (unsigned long long)ps->health_checks,
                              (unsigned long long)ps->health_failures, (unsigned long long)ps->restarts);
            char why[160];
            const char *down = sb_discovery_down_reason(gw, (uint32_t)p, (uint32_t)e, why, sizeof why);
            if (down) {
                sb_buf_puts(b, ",\"down_reason\":\"");
                sb_buf_json_escape(b, down, strlen(down));
                sb_buf_puts(b, "\"");
            }
            render_endpoint_kv(gw, b, (uint32_t)p, (uint32_t)e);
            sb_gateway_agent_render(ep, now, b);
            sb_buf_puts(b, "}");
        }
        sb_buf_puts(b, "]}");
    }
    sb_buf_puts(b, "]}");
}

static void admin_error(sb_http_req *req, int status, const char *message, const char *code, const char *headers);

/* GET /debug/decisions[?id=..|?pool=..&limit=..]: from the ring, rendered now; a listing also
 * carries the ring's capacity (limit is clamped to it). Answers req itself when the query is
 * refused (400) or the id is not held (404); else fills b. */
static bool render_decisions(sb_gateway *gw, sb_http_req *req, sb_buf *b)
{
    const sb_decisions *ring = gw->decisions;
    size_t cap = ring ? sb_decisions_capacity(ring) : 0;
    const char *q = req->path_len < req->url_len ? req->url + req->path_len + 1 : "";
    size_t qlen = req->path_len < req->url_len ? req->url_len - req->path_len - 1 : 0;
    sb_decisions_query dq;
    char err[160];
    if (sb_decisions_query_parse(q, qlen, cap ? cap : 1, &dq, err, sizeof err) < 0) {
        admin_error(req, 400, err, "bad_query", NULL);
        return false;
    }
    sb_buf_puts(b, "{\"decisions\":[");
    if (dq.id_len) {
        const sb_explain *e = ring ? sb_decisions_find(ring, dq.id, dq.id_len) : NULL;
        if (!e) {
            char msg[240];
            snprintf(
                msg, sizeof msg,
                ring ? "no decision for request id '%.*s': unknown, or it has left the ring of the last %zu"
                     : "no decision for request id '%.*s': the ring of recent decisions is off (admin.decisions: %zu)",
                (int)(dq.id_len > 128 ? 128 : dq.id_len), dq.id, cap);
            admin_error(req, 404, msg, "decision_not_found", NULL);
            return false;
        }
        sb_explain_render(e, SB_EXPLAIN_FULL, b);
    } else {
        size_t shown = 0;
        for (size_t k = 0, n = ring ? sb_decisions_count(ring) : 0; k < n && shown < dq.limit; k++) {
            const sb_explain *e = sb_decisions_newest(ring, k);
            if (dq.has_pool && strcmp(e->pool, dq.pool))
                continue;
            sb_buf_puts(b, shown++ ? "," : "");
            sb_explain_render(e, SB_EXPLAIN_FULL, b);
        }
        /* The ring's size beside the list: 0 tells a reader (the dashboard) that recording is
         * off (admin.decisions: 0), which an empty list alone cannot. */
        sb_buf_printf(b, "],\"capacity\":%zu}", cap);
        return true;
    }
    sb_buf_puts(b, "]}");
    return true;
}

static void render_adaptive(sb_gateway *gw, sb_buf *b)
{
    sb_buf_puts(b, "{\"pools\":[");
    for (size_t p = 0; p < gw->cfg->n_pools; p++) {
        sb_buf_printf(b, "%s{\"pool\":\"%s\",\"adaptive\":%s,\"state\":", p ? "," : "", gw->cfg->pools[p].name,
                      gw->cfg->pools[p].adaptive ? "true" : "false");
        if (gw->adaptive && gw->adaptive[p])
            sb_adaptive_render(gw->adaptive[p], b);
        else
            sb_buf_puts(b, "null");
        sb_buf_puts(b, "}");
    }
    sb_buf_puts(b, "]}");
}

static bool path_eq(const sb_http_req *req, const char *p)
{
    size_t n = strlen(p);
    return req->path_len == n && !memcmp(req->path, p, n);
}

static void admin_error(sb_http_req *req, int status, const char *message, const char *code, const char *headers)
{
    sb_buf b = {0};
    if (sb_openai_error(&b, message, status == 500 ? "server_error" : "invalid_request_error", NULL, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return;
    }
    sb_http_respond(req, status, "application/json", headers, b.data, b.len);
    sb_buf_free(&b);
}

/* Whether req carries the admin token. Only the digests are compared, in constant time. */
static bool admin_authorized(const sb_config *cfg, const sb_http_req *req)
{
    const sb_http_header *h = sb_http_req_header(req, "authorization");
    const char *tok;
    size_t n;
    if (!h || !sb_auth_bearer(h->value, h->value_len, &tok, &n))
        return false;
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest(tok, n, d);
    return CRYPTO_memcmp(d, cfg->admin_token_digest, sizeof d) == 0;
}

/* 404 naming the path (its first 100 bytes). */
static void not_found(sb_http_req *req, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "%s %.*s", what, (int)(req->path_len > 100 ? 100 : req->path_len), req->path);
    admin_error(req, 404, msg, "not_found", NULL);
}

/* No admin page takes a body: refused from the head (the hook runs when one is declared), so an
 * open /metrics or the dashboard's files cannot make this listener buffer bodies. True when it
 * answered. */
static bool no_body(sb_http_req *req)
{
    if (!req->has_body)
        return false;
    admin_error(req, 400, "admin endpoints take no request body", "body_not_allowed", NULL);
    return true;
}

enum admin_page {
    PAGE_METRICS,
    PAGE_ENDPOINTS,
    PAGE_DECISIONS,
    PAGE_ADAPTIVE,
    PAGE_AGENT_REPORT,
    PAGE_HEALTHZ,
    PAGE_MEMBERS,
    PAGE_UI
};

/* The checks the head decides (token, method, path, no body), shared by the head hook and the
 * handler. Answers and returns true if one fails; else sets *page. */
static bool admin_refuse(sb_gateway *gw, sb_http_req *req, enum admin_page *page)
{
    const sb_config *cfg = gw->cfg;
    /* The dashboard's files (/ and /ui/...) are open: they are the same in every gateway and
     * carry no fleet data (net/ui.h). The page reads the fleet from the pages below, which keep
     * their token; on a 401 it asks the operator for the token (docs/dashboard.md, "Access").
     * An unknown /ui/ path is 404 without the token: the list of files is public, like the
     * binary. */
    if (sb_ui_owns(req->path, req->path_len)) {
        sb_ui_file f;
        if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
            admin_error(req, 405, "method not allowed: use GET", NULL, "Allow: GET, HEAD\r\n");
            return true;
        }
        if (!sb_ui_find(req->path, req->path_len, &f)) {
            not_found(req, "no dashboard file");
            return true;
        }
        *page = PAGE_UI;
        return no_body(req);
    }
    bool metrics = path_eq(req, "/metrics");
    /* /healthz is open: a load balancer's probe carries no token, and it tells only ok or
     * draining (the client listener's is closed while draining; this one answers until exit). */
    bool healthz = path_eq(req, "/healthz");
    /* Every path but an open /metrics needs the token, unknown ones included: a caller
     * without it learns nothing of what is served here. */
    if (cfg->admin_has_token && !healthz && (!metrics || cfg->admin_metrics_auth) && !admin_authorized(cfg, req)) {
        gw->counters.unauthorized[1]++;
        admin_error(req, 401, "this admin endpoint needs Authorization: Bearer <admin.token>", "invalid_admin_token",
                    "WWW-Authenticate: Bearer realm=\"switchboard-admin\"\r\n");
        return true;
    }
    /* The routes that change what the gateway routes to need the token: without one, anything
     * that reaches the admin listener (every container of a pod shares its loopback) could
     * register an address and pull traffic to it. */
    bool writes = path_eq(req, "/admin/agents/report") ||
                  (sb_discovery_admin_path(req) && req->method != HTTP_GET && req->method != HTTP_HEAD);
    if (writes && !cfg->admin_has_token) {
        gw->counters.unauthorized[1]++;
        admin_error(req, 403, "registrations and agent reports need admin.token to be set", "admin_token_required",
                    NULL);
        return true;
    }
    /* The routes that take a body: agents' reports (net/agent_reports.h), bounded from the
     * head, and the registration API (bounded by admin.max_body_bytes, its own methods). */
    if (path_eq(req, "/admin/agents/report")) {
        if (req->method != HTTP_POST) {
            admin_error(req, 405, "method not allowed: use POST", NULL, "Allow: POST\r\n");
            return true;
        }
        *page = PAGE_AGENT_REPORT;
        return sb_gateway_agent_report_too_long(req);
    }
    if (sb_discovery_admin_path(req)) {
        *page = PAGE_MEMBERS;
        return false;
    }
    if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
        admin_error(req, 405, "method not allowed: use GET", NULL, "Allow: GET, HEAD\r\n");
        return true;
    }
    if (metrics) {
        *page = PAGE_METRICS;
    } else if (healthz) {
        *page = PAGE_HEALTHZ;
    } else if (cfg->debug_endpoints && path_eq(req, "/debug/endpoints")) {
        *page = PAGE_ENDPOINTS;
    } else if (cfg->debug_endpoints && path_eq(req, "/debug/decisions")) {
        *page = PAGE_DECISIONS;
    } else if (cfg->debug_endpoints && path_eq(req, "/debug/adaptive")) {
        *page = PAGE_ADAPTIVE;
    } else {
        not_found(req, "no admin route for");
        return true;
    }
    return no_body(req);
}

/* One of the dashboard's files, with an entity tag: the page is fetched again on every load
 * (no-cache) but costs a 304 while the binary's copy is unchanged. The security headers keep the
 * page to its own files: no inline script, nothing from elsewhere, not framed by another site
 * (it holds the admin token while open). */
static void serve_ui(sb_http_req *req)
{
    sb_ui_file f;
    if (!sb_ui_find(req->path, req->path_len, &f)) { /* checked by admin_refuse */
        admin_error(req, 404, "no such dashboard file", "not_found", NULL);
        return;
    }
    char etag[SB_UI_ETAG_MAX], headers[512];
    sb_ui_etag(&f, etag);
    snprintf(headers, sizeof headers,
             "ETag: %s\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
             "Referrer-Policy: no-referrer\r\n"
             "Content-Security-Policy: default-src 'self'; img-src 'self' data:; frame-ancestors 'none'\r\n",
             etag);
    /* If-None-Match holds one tag, a list, W/ tags or "*": weak comparison (RFC 9110 13.1.2)
     * means finding our tag in it, or a lone "*". One linear scan of a bounded header. */
    const sb_http_header *inm = sb_http_req_header(req, "if-none-match");
    size_t tl = strlen(etag);
    if (inm && ((inm->value_len == 1 && inm->value[0] == '*') || memmem(inm->value, inm->value_len, etag, tl))) {
        sb_http_respond(req, 304, f.content_type, headers, NULL, 0);
        return;
    }
    sb_http_respond(req, 200, f.content_type, headers, f.data, f.len);
}

bool sb_gateway_admin_head(sb_http_req *req, void *ctx)
{
    enum admin_page page;
    return !admin_refuse(ctx, req, &page);
}

void sb_gateway_admin(sb_http_req *req, void *ctx)
{
    sb_gateway *gw = ctx;
    enum admin_page page;
    if (admin_refuse(gw, req, &page))
        return;
    if (page == PAGE_MEMBERS) {
        sb_discovery_admin(gw->disc, req);
        return;
    }
    if (page == PAGE_UI) {
        serve_ui(req);
        return;
    }
    if (page == PAGE_HEALTHZ) {
        if (gw->draining)
            sb_http_respond(req, 503, "application/json", NULL, "{\"status\":\"draining\"}", 21);
        else
            sb_http_respond(req, 200, "application/json", NULL, "{\"status\":\"ok\"}", 15);
        return;
    }
    sb_buf b = {0};
    const char *ct = "application/json";
    switch (page) {
    case PAGE_MEMBERS: break;
    case PAGE_METRICS:
        render_metrics(gw, &b);
        ct = "text/plain; version=0.0.4; charset=utf-8";
        break;
    case PAGE_ENDPOINTS: render_endpoints(gw, &b); break;
    case PAGE_DECISIONS:
        if (!render_decisions(gw, req, &b)) {
            sb_buf_free(&b);
            return;
        }
        break;
    case PAGE_ADAPTIVE: render_adaptive(gw, &b); break;
    case PAGE_AGENT_REPORT: sb_gateway_agent_report(gw, req); return;
    case PAGE_HEALTHZ: /* answered above */
    case PAGE_UI: break;
    }
    if (!b.data) {
        admin_error(req, 500, "out of memory", NULL, NULL);
    } else {
        sb_http_respond(req, 200, ct, NULL, b.data, b.len);
    }
    sb_buf_free(&b);
}
