/* picker: Envoy's ext_proc streams, each one request through the gateway's pipeline, answered
 * with the pick (net/picker.h has the contract).
 *
 * A stream's life: ST_HEADERS (waiting for request_headers), ST_BODY (collecting the body),
 * ST_PENDING (the gateway's handler owns the request: inspection, /tokenize, a flow-control
 * queue), ST_RESPONSE (decided and answered; the endpoint's answer passes through), ST_DONE
 * (answered with an ImmediateResponse, or the exchange ended: only the stream's end is
 * awaited). A stream that ends is put on the graveyard and freed on the loop's next check
 * phase, never inside a call that may still read its request (error answers read the request
 * after sending it, as they may with the HTTP server's). */
#include "net/picker.h"

#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "base/alloc.h"
#include "base/log.h"
#include "core/decide.h"
#include "core/explain.h"
#include "net/decisions.h"
#include "net/errors.h"
#include "net/grpc_server.h"
#include "net/probe.h"
#include "net/routes.h"
#include "net/stats.h"
#include "proto/auth.h"
#include "proto/body_edit.h"
#include "proto/extproc.h"
#include "proto/orca.h"
#include "proto/sse_strip.h"
#include "proto/usage.h"

#define PROCESS_METHOD "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
#define HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define HEALTH_WATCH "/grpc.health.v1.Health/Watch"
#define DEST_HEADER "x-gateway-destination-endpoint"
#define LB_NAMESPACE "envoy.lb"
/* A message may carry a whole buffered body plus its framing and headers. */
#define MESSAGE_SLACK (64 * 1024)
/* How often request deadlines (limits.header_ms) are looked at. */
#define SWEEP_MS 250

enum call_kind { CALL_PROCESS = 1, CALL_HEALTH };

enum st { ST_HEADERS, ST_BODY, ST_PENDING, ST_RESPONSE, ST_DONE };

typedef struct pstream pstream;
typedef struct hcall hcall;

struct sb_picker {
    uv_loop_t *loop;
    sb_gateway *gw; /* the serving gateway: requests that complete go to it */
    sb_grpc_server *grpc;
    uv_timer_t sweep;  /* request deadlines */
    uv_check_t reaper; /* frees the graveyard */
    int closing;       /* handles not yet closed after stop */
    bool stopped, draining;
    size_t body_bytes;  /* request bodies held by all streams (limits.max_buffered_body_bytes) */
    pstream *live;      /* streams not ended, newest first */
    pstream *dead;      /* ended, to be freed */
    hcall *watchers;    /* Health/Watch calls, told when serving changes */
    sb_extproc_msg msg; /* decode scratch: one loop, one message at a time */
    sb_buf out;         /* encode scratch */
    sb_picker_stats stats;
};

struct hcall {
    int kind; /* CALL_HEALTH */
    sb_picker *pk;
    sb_grpc_call *call;
    bool is_watch; /* Watch: answered, then kept and told of changes */
    bool watch;    /* on pk->watchers */
    bool unknown;  /* a Watch of a service not served here: SERVICE_UNKNOWN, for good */
    hcall *prev, *next;
};

struct pstream {
    int kind;        /* CALL_PROCESS */
    sb_http_req req; /* the request as the gateway's handler sees it; req.ops set */
    sb_picker *pk;
    sb_grpc_call *call; /* NULL once the stream has ended */
    enum st st;
    int req_mode, resp_mode; /* enum sb_extproc_mode */
    bool headers_answered;   /* request_headers has its answer (BUFFERED mode answers at once) */
    bool trailers_pending;   /* request trailers came before the decision */
    bool resp_headers_seen;
    bool picked; /* the pick went out: the response phase may begin */
    sb_ns t_start;
    sb_ns t_last; /* the stream's last message: a response phase silent for timeouts.response_ms ends */
    /* the request head, copied out of the message */
    sb_buf head;
    sb_http_header *hdrs;
    size_t n_hdrs;
    char peer[64];
    sb_buf body;
    size_t charged; /* of pk->body_bytes */
    /* metadata_context envoy.lb: the candidates Envoy allows */
    bool has_subset;
    char *subset;
    /* the exchange, once decided (as the proxy's, net/proxy.c) */
    const sb_proxy_env *env; /* NULL: none (yet, or ended) */
    sb_snapshot *snap;
    sb_proxy_target t;
    char model[SB_MODEL_NAME_MAX + 1];
    uint32_t ep;
    uint32_t prompt_tokens;
    bool dispatched;
    sb_ticket ticket;
    int status; /* the endpoint's, from response_headers */
    sb_ns t_first_byte, t_first_body;
    sb_token_clock tokens; /* when the answer's tokens came (net/stats.h), as the proxy's */
    uint64_t bytes_out;
    char tail[2048]; /* the response body's last bytes: usage comes last */
    size_t tail_len;
    /* upstream.stream_usage, as the proxy's: include_usage was added to the body sent on
     * (usage_asked), and the usage-only chunk is taken out of the response chunks Envoy gets
     * back (stripping; full-duplex response mode only). strip_out: one chunk's bytes kept. */
    bool usage_asked, stripping, strip_failed;
    sb_sse_strip strip;
    char *hold;
    sb_buf strip_out;
    sb_buf decision;
    sb_decision_ref dref; /* its record in the ring of recent decisions (net/decisions.h) */
    uint32_t attempts;    /* endpoints that took it: the pick, and one Envoy served it on instead */
    /* the synchronous probe (probe.sync_max_age_ms), as the proxy's */
    sb_sched_request rr;       /* what decides; its hashes valid until the first decision */
    sb_probe_wait *probe_wait; /* waiting for fresh reports */
    uint64_t *probe_keys;      /* the hashes, copied for the decision after the wait */
    bool probed;
    pstream *prev, *next; /* pk->live, or pk->dead (next only) */
};

static sb_ns now_ns(void)
{
    return uv_hrtime();
}

static pstream *stream_of(sb_http_req *req)
{
    return (pstream *)((char *)req - offsetof(pstream, req));
}

/* ---- sending ---- */

/* Sends what pk->out holds on s's stream. */
static void send_out(pstream *s)
{
    sb_picker *pk = s->pk;
    if (s->call && pk->out.data)
        sb_grpc_send(s->call, (const uint8_t *)pk->out.data, pk->out.len);
    sb_buf_reset(&pk->out);
}

static void on_reap(uv_check_t *h);

static void release_body(pstream *s)
{
    s->pk->body_bytes -= s->charged;
    s->charged = 0;
    sb_buf_free(&s->body);
}

/* The stream has ended or will: off the live list, freed at the next check phase. */
static void bury(pstream *s)
{
    sb_picker *pk = s->pk;
    if (s->prev)
        s->prev->next = s->next;
    else if (pk->live == s)
        pk->live = s->next;
    else
        return; /* already buried */
    if (s->next)
        s->next->prev = s->prev;
    s->prev = NULL;
    s->next = pk->dead;
    pk->dead = s;
    pk->stats.streams_open--;
    pk->stats.unfreed++;
    release_body(s);
    if (!pk->stopped)
        uv_check_start(&pk->reaper, on_reap);
}

static void stream_free(pstream *s)
{
    sb_decisions_drop(&s->dref); /* finished already, unless the stream ended unrecorded */
    sb_buf_free(&s->head);
    sb_buf_free(&s->body);
    sb_buf_free(&s->decision);
    sb_buf_free(&s->strip_out);
    sb_free(s->hold);
    sb_free(s->hdrs);
    sb_free(s->subset);
    sb_free(s->probe_keys);
    sb_free(s);
}

static void on_reap(uv_check_t *h)
{
    sb_picker *pk = h->data;
    while (pk->dead) {
        pstream *s = pk->dead;
        pk->dead = s->next;
        pk->stats.unfreed--;
        stream_free(s);
    }
    uv_check_stop(h);
}

/* Ends the stream with a gRPC status (not OK: the request did not go through). */
static void end_call(pstream *s, int status, const char *message)
{
    if (s->call)
        sb_grpc_finish(s->call, status, message);
    s->call = NULL;
}

/* ---- the exchange's end (as net/proxy.c's record and exchange_maybe_free) ---- */

static const char *relayed_outcome(int status)
{
    return status >= 500 ? "upstream_5xx" : status >= 400 ? "upstream_4xx" : "ok";
}

/* Records the exchange and gives its snapshot back: once, when the response phase ends or the
 * stream does. status: what the client got (499 if it left). */
static void finish_exchange(pstream *s, int status, const char *outcome, const char *reason)
{
    const sb_proxy_env *env = s->env;
    if (!env)
        return;
    s->env = NULL;
    if (s->probe_wait) { /* ended while its decision waited for fresh reports */
        sb_prober_sync_cancel(s->probe_wait);
        s->probe_wait = NULL;
    }
    sb_ns now = now_ns();
    if (s->dispatched) {
        s->dispatched = false;
        bool answered = status != 499 && status != 0;
        sb_router_finished(env->router, s->t.pool, s->ep, &s->ticket, answered && status < 500, answered, now);
    }
    sb_exchange_log log = {
        .pool = (int)s->t.pool,
        .ep = (int)s->ep,
        .adapter = s->t.adapter,
        .status = status,
        .upstream_status = s->status >= 200 ? s->status : 0,
        .outcome = outcome ? outcome : relayed_outcome(status),
        .reason = reason,
        .ident = &s->t.ident,
        .model = s->model,
        .stream = s->t.stream,
        .bytes_out = s->bytes_out,
        .t_start = s->t_start,
        .t_first_byte = s->t_first_byte,
        .t_end = now,
        .decision = s->decision.data,
        .band = s->t.band >= 0 ? sb_band_name((enum sb_band)s->t.band) : NULL,
        .tenant = s->t.tenant,
        .fell_back = s->t.fell_back,
        .requested_pool = s->t.requested_pool,
        .fallback_reason =
            s->t.fell_back ? sb_stats_fallback_reason_names[s->t.fallback_reason % SB_FALLBACK_REASONS] : NULL,
    };
    sb_usage_scan(s->tail, s->tail_len, &log.usage);
    sb_token_clock_log(&s->tokens, &log);
    env->counters->usage_stripped += s->strip.stripped;
    env->counters->usage_overflows += s->strip.overflows;
    const sb_endpoint *served = log.upstream_status ? sb_router_endpoint(env->router, s->t.pool, s->ep) : NULL;
    sb_decisions_finish(&s->dref, status, sb_decisions_ttft_ms(&log), s->attempts, served ? served->address : NULL);
    if (s->t.stream && log.usage.found && log.usage.prompt_tokens > 0 && s->t_first_body && log.outcome[0] == 'o')
        sb_router_observe_ttft(env->router, s->t.pool, s->ep, (uint64_t)log.usage.prompt_tokens,
                               log.usage.cached_tokens > 0 ? (uint64_t)log.usage.cached_tokens : 0,
                               s->t_first_body - s->t_start);
    if (log.usage.found && log.usage.prompt_tokens > 0 && log.usage.cached_tokens >= 0 && log.outcome[0] == 'o')
        sb_router_observe_cached(env->router, s->t.pool, s->ep, &s->ticket, (uint64_t)log.usage.prompt_tokens,
                                 (uint64_t)log.usage.cached_tokens);
    env->record(env->owner, &log);
    env->counters->exchanges_live--;
    /* May free the gateway (its last exchange while stopping): env is not touched after. */
    env->end(env->owner, s->snap, s->t.pool);
    s->snap = NULL;
}

/* The response ended (its end_of_stream, or its trailers): the exchange ends with the
 * endpoint's status. */
static void finish_seen(pstream *s)
{
    if (s->env)
        finish_exchange(s, s->status >= 200 ? s->status : 200, NULL, NULL);
}

/* Envoy closed the stream: after the response's end that is the normal end; before it, the
 * request was cut short (the client went away, or the upstream failed and Envoy answered
 * itself), logged as the proxy logs a client that leaves. Envoy must send the response headers
 * (processing_mode.response_header_mode SEND, deploy/envoy.yaml) for the picker to see an end. */
static void stream_closed(pstream *s)
{
    if (!s->env)
        return;
    s->env->counters->client_aborts++;
    finish_exchange(s, 499, "client_abort", s->resp_headers_seen ? "in_flight" : "before_response");
}

/* The stream is gone (Envoy reset it, the connection dropped, the picker stopped) or was
 * ended by us: whatever owns the request lets go. */
static void abandon(pstream *s)
{
    switch (s->st) {
    case ST_PENDING:
        /* The handler holds the request (a queue, a /tokenize wait): it takes it out and logs
         * it (client_abort). A request in no such place has nothing to undo. */
        s->st = ST_DONE;
        if (s->req.on_abort) {
            void (*fn)(sb_http_req *) = s->req.on_abort;
            s->req.on_abort = NULL;
            fn(&s->req);
        }
        break;
    case ST_RESPONSE:
        s->st = ST_DONE;
        if (s->env) {
            bool cut = s->env->cutting;
            s->env->counters->client_aborts += cut ? 0 : 1;
            finish_exchange(s, 499, cut ? "drain_cut" : "client_abort", cut ? NULL : "in_flight");
        }
        break;
    default: s->st = ST_DONE;
    }
    bury(s);
}

/* A message that breaks the protocol: the stream ends INVALID_ARGUMENT (the server goes on). */
static void protocol_error(pstream *s, const char *why)
{
    s->pk->stats.protocol_errors++;
    SB_DEBUG("ext_proc: stream ended: %s", why);
    end_call(s, SB_GRPC_INVALID_ARGUMENT, why);
    abandon(s);
}

/* ---- answers the gateway gives on the stream (sb_http_req.ops) ---- */

/* Header lines "Name: value\r\n" into key-value pairs pointing into text, names lower-cased in
 * place: the gateway's answers write them as HTTP/1.1 does ("Retry-After"), but HTTP/2 field
 * names are lower case (RFC 9113 8.2.1) and Envoy refuses a header mutation that sets one with
 * capitals. */
static size_t split_headers(char *text, sb_extproc_kv *kv, size_t cap)
{
    size_t n = 0;
    char *p = text;
    while (p && *p && n < cap) {
        char *eol = strstr(p, "\r\n");
        char *end = eol ? eol : p + strlen(p);
        char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon) {
            for (char *c = p; c < colon; c++)
                if (*c >= 'A' && *c <= 'Z')
                    *c = (char)(*c - 'A' + 'a');
            const char *v = colon + 1;
            while (v < end && *v == ' ')
                v++;
            kv[n++] =
                (sb_extproc_kv){.key = p, .key_len = (size_t)(colon - p), .value = v, .value_len = (size_t)(end - v)};
        }
        p = eol ? eol + 2 : NULL;
    }
    return n;
}

static int answer_immediate(sb_http_req *req, int status, const char *content_type, const char *headers,
                            const char *body, size_t body_len)
{
    pstream *s = stream_of(req);
    if (s->st == ST_DONE || s->st == ST_RESPONSE || !s->call)
        return -1;
    sb_picker *pk = s->pk;
    sb_extproc_kv kv[16];
    size_t n = 0;
    const char *ct = content_type ? content_type : "application/json";
    kv[n++] = (sb_extproc_kv){.key = "content-type", .key_len = 12, .value = ct, .value_len = strlen(ct)};
    if (req->id[0])
        kv[n++] = (sb_extproc_kv){.key = "x-request-id", .key_len = 12, .value = req->id, .value_len = strlen(req->id)};
    /* The gateway's extra headers are a few short lines (Retry-After, the refusal reason,
     * WWW-Authenticate); a longer text than this copy holds is cut at a line's end. */
    char lines[1024];
    size_t len = headers ? strlen(headers) : 0;
    if (len >= sizeof lines) {
        len = sizeof lines - 1;
        while (len > 0 && headers[len - 1] != '\n')
            len--;
    }
    memcpy(lines, headers ? headers : "", len);
    lines[len] = 0;
    n += split_headers(lines, kv + n, sizeof(kv) / sizeof(kv[0]) - n);
    char details[48];
    snprintf(details, sizeof details, "switchboard_%d", status);
    if (sb_extproc_encode_immediate(status, kv, n, body, body_len, details, &pk->out) < 0) {
        sb_buf_reset(&pk->out);
        end_call(s, SB_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        send_out(s);
        end_call(s, SB_GRPC_OK, NULL);
    }
    pk->stats.immediate++;
    s->st = ST_DONE;
    s->req.on_abort = NULL;
    bury(s); /* freed at the next check phase: the caller may still read req */
    return 0;
}

static void answer_abort(sb_http_req *req)
{
    pstream *s = stream_of(req);
    if (s->st == ST_DONE)
        return;
    end_call(s, SB_GRPC_INTERNAL, "the gateway could not build its answer");
    s->st = ST_DONE;
    s->req.on_abort = NULL;
    bury(s);
}

static const sb_http_req_ops picker_ops = {.respond = answer_immediate, .abort = answer_abort, .pick = true};

/* ---- the request phase ---- */

static int method_of(const char *m, size_t n)
{
    for (int i = 0; i <= 40; i++) {
        const char *name = http_method_str((enum http_method)i);
        if (strlen(name) == n && !memcmp(name, m, n))
            return i;
    }
    return HTTP_TRACE; /* unknown: routed nowhere (405 or 404), never taken for GET or POST */
}

/* The client's address, for the session key when nothing else names the session: Envoy's
 * trusted x-envoy-external-address, else the last x-forwarded-for hop (the one Envoy added;
 * earlier ones are the client's word), else Envoy's own address. */
static void peer_of(pstream *s, const sb_extproc_msg *m)
{
    const sb_extproc_header *h = sb_extproc_header_find(m, "x-envoy-external-address");
    const char *v = NULL;
    size_t n = 0;
    if (h && h->value_len) {
        v = h->value;
        n = h->value_len;
    } else if ((h = sb_extproc_header_find(m, "x-forwarded-for")) && h->value_len) {
        const char *comma = NULL;
        for (size_t i = 0; i < h->value_len; i++)
            if (h->value[i] == ',')
                comma = h->value + i;
        v = comma ? comma + 1 : h->value;
        n = (size_t)(h->value + h->value_len - v);
        while (n && *v == ' ')
            v++, n--;
    }
    if (v && n && n < 46)
        snprintf(s->peer, sizeof s->peer, "%.*s:0", (int)n, v);
    else
        snprintf(s->peer, sizeof s->peer, "%s", s->call ? sb_grpc_call_peer(s->call) : "");
}

/* Copies the request head out of the message into s: the pseudo-headers make method and path,
 * the others are the request's headers. 0, or -1 on ENOMEM. */
static int take_head(pstream *s, const sb_extproc_msg *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_headers; i++)
        n += m->headers[i].key_len > 0 && m->headers[i].key[0] != ':';
    s->hdrs = sb_calloc(n ? n : 1, sizeof(sb_http_header));
    if (!s->hdrs || sb_buf_reserve(&s->head, 64) < 0)
        return -1;
    /* Offsets first (the buffer may move as it grows), pointers after. */
    size_t *off = sb_calloc(n ? n : 1, 2 * sizeof(size_t));
    if (!off)
        return -1;
    const sb_extproc_header *method = sb_extproc_header_find(m, ":method");
    const sb_extproc_header *path = sb_extproc_header_find(m, ":path");
    size_t url_off = 0, url_len = path ? path->value_len : 0;
    int rc = path ? sb_buf_append(&s->head, path->value, path->value_len) : 0;
    size_t k = 0;
    for (size_t i = 0; i < m->n_headers && rc == 0; i++) {
        const sb_extproc_header *h = &m->headers[i];
        if (!h->key_len || h->key[0] == ':')
            continue;
        off[2 * k] = s->head.len;
        rc |= sb_buf_append(&s->head, h->key, h->key_len);
        off[2 * k + 1] = s->head.len;
        rc |= sb_buf_append(&s->head, h->value, h->value_len);
        s->hdrs[k] = (sb_http_header){.name_len = h->key_len, .value_len = h->value_len};
        k++;
    }
    if (rc == 0)
        rc = sb_buf_append(&s->head, "", 1);
    if (rc < 0) {
        sb_free(off);
        return -1;
    }
    for (size_t i = 0; i < k; i++) {
        s->hdrs[i].name = s->head.data + off[2 * i];
        s->hdrs[i].value = s->head.data + off[2 * i + 1];
    }
    sb_free(off);
    s->n_hdrs = k;
    sb_http_req *r = &s->req;
    r->method = method ? method_of(method->value, method->value_len) : HTTP_TRACE;
    r->url = s->head.data + url_off;
    r->url_len = url_len;
    const char *q = url_len ? memchr(r->url, '?', url_len) : NULL;
    r->path = r->url;
    r->path_len = q ? (size_t)(q - r->url) : url_len;
    r->headers = s->hdrs;
    r->n_headers = k;
    r->http_minor = 1;
    r->keep_alive = true;
    peer_of(s, m);
    r->peer = s->peer;
    r->start_ns = s->t_start;
    r->ops = &picker_ops;
    return 0;
}

static void take_subset(pstream *s, const sb_extproc_msg *m)
{
    if (!m->has_subset || s->has_subset)
        return;
    s->has_subset = true;
    s->subset = sb_malloc(m->subset_len + 1);
    if (s->subset) {
        memcpy(s->subset, m->subset, m->subset_len);
        s->subset[m->subset_len] = 0;
    }
}

/* The request is whole: the gateway's handler takes it (its answer comes back through
 * picker_ops, or sb_picker_dispatch). */
static void request_complete(pstream *s)
{
    sb_picker *pk = s->pk;
    s->st = ST_PENDING;
    s->req.body = s->body.data ? s->body.data : "";
    s->req.body_len = s->body.len;
    s->req.has_body = s->body.len > 0;
    sb_gateway *gw = pk->gw;
    if (s->has_subset && (!s->subset || !s->subset[0])) {
        sb_gateway_request_id(gw, &s->req);
        gw->counters.requests++;
        gw->counters.refused[1]++;
        sb_exchange_log known = {.pool = -1, .ep = -1, .model = "", .outcome = "refused"};
        sb_errors_refuse(&gw->stats, &s->req, &known, 503, "no endpoint in the subset the proxy allows",
                         "service_unavailable", "empty_subset", NULL);
        return;
    }
    sb_gateway_on_request(&s->req, gw);
}

static void take_body(pstream *s, const sb_extproc_msg *m)
{
    sb_picker *pk = s->pk;
    const sb_config *cfg = pk->gw->cfg;
    if (m->body_len) {
        if (s->body.len + m->body_len > cfg->max_body_bytes) {
            s->st = ST_PENDING; /* answered now, as the proxy's server answers an oversized body */
            pk->gw->counters.requests++;
            sb_gateway_request_id(pk->gw, &s->req);
            char msg[120];
            snprintf(msg, sizeof msg, "request body is larger than %zu bytes (limits.max_body_bytes)",
                     cfg->max_body_bytes);
            sb_errors_answer(&pk->gw->stats, &s->req, 413, msg, "invalid_request_error", NULL, "body_too_large");
            return;
        }
        size_t before = s->body.cap;
        if (s->body.len + m->body_len > s->body.cap &&
            pk->body_bytes + (s->body.len + m->body_len) * 2 - s->charged > cfg->max_buffered_body_bytes) {
            s->st = ST_PENDING;
            pk->gw->counters.requests++;
            sb_gateway_request_id(pk->gw, &s->req);
            sb_errors_answer_with(&pk->gw->stats, &s->req, 503,
                                  "the gateway holds too many request bodies; retry shortly", "service_unavailable",
                                  "request_bodies_over_budget", "Retry-After: 1\r\n");
            return;
        }
        if (sb_buf_append(&s->body, m->body, m->body_len) < 0) {
            end_call(s, SB_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            abandon(s);
            return;
        }
        if (s->body.cap != before) {
            pk->body_bytes += s->body.cap - s->charged;
            s->charged = s->body.cap;
        }
    }
    if (m->end_of_stream)
        request_complete(s);
}

static int mode_of(enum sb_extproc_body_mode m, int fallback)
{
    switch (m) {
    case SB_EXTPROC_BODY_FULL_DUPLEX_STREAMED: return SB_EXTPROC_MODE_FULL_DUPLEX;
    case SB_EXTPROC_BODY_BUFFERED:
    case SB_EXTPROC_BODY_BUFFERED_PARTIAL: return SB_EXTPROC_MODE_BUFFERED; /* a response's: CONTINUE each */
    case SB_EXTPROC_BODY_NONE: return SB_EXTPROC_MODE_NONE;
    default: return fallback;
    }
}

static void send_trailers(pstream *s, enum sb_extproc_kind kind)
{
    if (sb_extproc_encode_trailers(kind, &s->pk->out) == 0)
        send_out(s);
    sb_buf_reset(&s->pk->out);
}

static void on_request_headers(pstream *s, const sb_extproc_msg *m)
{
    sb_picker *pk = s->pk;
    if (s->st != ST_HEADERS) {
        protocol_error(s, "request_headers came twice");
        return;
    }
    if (m->has_protocol_config) {
        /* Envoy says which modes it runs: STREAMED and GRPC body modes cannot carry a pick
         * (the headers leave before the body is seen), so they are refused plainly. */
        if (m->request_body_mode == SB_EXTPROC_BODY_STREAMED || m->request_body_mode == SB_EXTPROC_BODY_GRPC ||
            m->request_body_mode == SB_EXTPROC_BODY_BUFFERED_PARTIAL) {
            pk->stats.protocol_errors++;
            end_call(s, SB_GRPC_FAILED_PRECONDITION,
                     "request body mode not supported by the endpoint picker (it must see the whole body "
                     "before the headers leave): use FULL_DUPLEX_STREAMED or BUFFERED");
            abandon(s);
            return;
        }
        s->req_mode = mode_of(m->request_body_mode, s->req_mode);
        s->resp_mode = mode_of(m->response_body_mode, s->resp_mode);
        if (m->response_body_mode == SB_EXTPROC_BODY_STREAMED)
            s->resp_mode = SB_EXTPROC_MODE_BUFFERED; /* answered one CONTINUE per chunk */
    }
    if (take_head(s, m) < 0) {
        end_call(s, SB_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        abandon(s);
        return;
    }
    take_subset(s, m);
    if (m->end_of_stream) {
        request_complete(s);
        return;
    }
    s->st = ST_BODY;
    if (s->req_mode == SB_EXTPROC_MODE_BUFFERED) {
        /* Envoy waits for this answer before it sends the buffered body: an empty one now; the
         * destination goes with the body's answer. */
        sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_HEADERS};
        if (sb_extproc_encode_common(&c, &pk->out) == 0)
            send_out(s);
        s->headers_answered = true;
    }
}

/* ---- the decision ---- */

static bool in_subset(const char *subset, const char *addr)
{
    size_t n = strlen(addr);
    for (const char *p = subset; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (len == n && !memcmp(p, addr, n))
            return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

/* The body Envoy sends on: the client's, with the model field rewritten to the served name
 * when the client named an alias (or inserted for the default pool), and include_usage asked
 * for a stream that did not (only when the response comes back through here in full duplex,
 * where the usage chunk can be taken out again), as the proxy does. Sets *out (s->body's
 * bytes, or rewritten's). 0, or -1 on ENOMEM. */
static int body_to_send(pstream *s, sb_buf *rewritten, const char **out, size_t *len)
{
    const sb_proxy_target *t = &s->t;
    *out = s->body.data ? s->body.data : "";
    *len = s->body.len;
    sb_buf quoted = {0};
    sb_body_edit edits[2];
    size_t ne = 0;
    int rc = 0;
    if (t->served) {
        rc |= sb_buf_puts(&quoted, t->insert_model ? "\"model\":\"" : "\"");
        rc |= sb_buf_json_escape(&quoted, t->served, t->served_len);
        rc |= sb_buf_puts(&quoted, t->insert_model && t->insert_comma ? "\"," : "\"");
        edits[ne++] = (sb_body_edit){t->model_tok_start, t->insert_model ? t->model_tok_start : t->model_tok_end,
                                     quoted.data, quoted.len};
    }
    bool usage = t->usage_edit && s->resp_mode == SB_EXTPROC_MODE_FULL_DUPLEX;
    if (usage)
        edits[ne++] = (sb_body_edit){t->usage_edit_start, t->usage_edit_end, t->usage_edit, t->usage_edit_len};
    sb_body_piece pieces[SB_BODY_PIECES_MAX];
    size_t total = 0;
    int np = rc || ne == 0 ? -1 : sb_body_edit_pieces(*out, *len, edits, ne, pieces, &total);
    for (int i = 0; i < np && rc == 0; i++)
        rc |= sb_buf_append(rewritten, pieces[i].at, pieces[i].len);
    sb_buf_free(&quoted);
    if (rc)
        return -1;
    if (np < 0) /* nothing to change (or offsets that are not this body's: sent as it is) */
        return 0;
    s->usage_asked = usage;
    *out = rewritten->data ? rewritten->data : "";
    *len = rewritten->len;
    return 0;
}

/* Answers with the pick: dest is "addr,addr,...". */
static int answer_pick(pstream *s, const char *dest, size_t dest_len)
{
    sb_picker *pk = s->pk;
    const sb_config *cfg = s->snap->cfg;
    sb_buf rewritten = {0};
    const char *body;
    size_t body_len;
    if (body_to_send(s, &rewritten, &body, &body_len) < 0) {
        sb_buf_free(&rewritten);
        return -1;
    }
    bool changed = body != s->body.data && (s->t.served || s->usage_asked);
    bool buffered = s->req_mode == SB_EXTPROC_MODE_BUFFERED && s->headers_answered;
    char clen[24];
    int cl = snprintf(clen, sizeof clen, "%zu", body_len);
    sb_extproc_kv set[5];
    size_t n_set = 0;
    set[n_set++] =
        (sb_extproc_kv){.key = DEST_HEADER, .key_len = sizeof(DEST_HEADER) - 1, .value = dest, .value_len = dest_len};
    /* The length of the body sent on: always in full duplex (the body comes back as chunks),
     * in buffered mode only when it changed; a bodiless request keeps its framing. */
    if (s->req.has_body && (!buffered || changed))
        set[n_set++] = (sb_extproc_kv){.key = "content-length", .key_len = 14, .value = clen, .value_len = (size_t)cl};
    /* Ask the endpoint for an ORCA load report on its answer, as the proxy does (read on the
     * response headers), unless the client asked for a format itself. */
    if (cfg->orca_request && !sb_http_req_header(&s->req, "endpoint-load-metrics-format"))
        set[n_set++] =
            (sb_extproc_kv){.key = "endpoint-load-metrics-format", .key_len = 28, .value = "TEXT", .value_len = 4};
    /* The request's id, as the proxy sends it upstream: the model server's logs meet the
     * gateway's access log. */
    if (s->t.ident.id[0])
        set[n_set++] = (sb_extproc_kv){
            .key = "x-request-id", .key_len = 12, .value = s->t.ident.id, .value_len = strlen(s->t.ident.id)};
    /* A pool's upstream_api_key replaces the client's Authorization, as the proxy does: the
     * client's key to the gateway never reaches the model servers. It travels on this stream,
     * so a picker port other hosts reach wants TLS; unlike the proxy's request head, the encode
     * and gRPC buffers it passes through are not wiped (docs/endpoint-picker.md). */
    const char *up = cfg->pools[s->t.pool].upstream_auth_header; /* "Authorization: Bearer K\r\n" */
    const char *upv = up ? strchr(up, ':') : NULL;
    if (upv) {
        upv++;
        while (*upv == ' ')
            upv++;
        const char *eol = strstr(upv, "\r\n");
        set[n_set++] = (sb_extproc_kv){
            .key = "authorization", .key_len = 13, .value = upv, .value_len = eol ? (size_t)(eol - upv) : strlen(upv)};
    }
    sb_extproc_kv meta = {.key = DEST_HEADER, .key_len = sizeof(DEST_HEADER) - 1, .value = dest, .value_len = dest_len};
    int rc = 0;
    if (buffered) {
        /* BUFFERED: the body's answer carries the destination and, if it changed, the body. */
        sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_BODY,
                               .set_headers = set,
                               .n_set_headers = n_set,
                               .clear_route_cache = true,
                               .replace_body = changed,
                               .body = (const uint8_t *)body,
                               .body_len = body_len,
                               .metadata_ns = LB_NAMESPACE,
                               .metadata = &meta,
                               .n_metadata = 1};
        rc = sb_extproc_encode_common(&c, &pk->out);
        if (rc == 0)
            send_out(s);
    } else {
        sb_extproc_common c = {.kind = SB_EXTPROC_REQUEST_HEADERS,
                               .set_headers = set,
                               .n_set_headers = n_set,
                               .clear_route_cache = true,
                               .metadata_ns = LB_NAMESPACE,
                               .metadata = &meta,
                               .n_metadata = 1};
        rc = sb_extproc_encode_common(&c, &pk->out);
        if (rc == 0)
            send_out(s);
        s->headers_answered = true;
        /* FULL_DUPLEX_STREAMED: the body goes back in chunks, the last one ending it. */
        size_t chunk = cfg->extproc_chunk_bytes ? cfg->extproc_chunk_bytes : 62000;
        for (size_t off = 0; rc == 0 && s->req.has_body && s->call;) {
            size_t n = body_len - off < chunk ? body_len - off : chunk;
            sb_extproc_common b = {.kind = SB_EXTPROC_REQUEST_BODY,
                                   .streamed = true,
                                   .body = (const uint8_t *)body + off,
                                   .body_len = n,
                                   /* trailers end the request when they follow */
                                   .end_of_stream = off + n == body_len && !s->trailers_pending};
            rc = sb_extproc_encode_common(&b, &pk->out);
            if (rc == 0)
                send_out(s);
            off += n;
            if (off == body_len)
                break;
        }
    }
    sb_buf_free(&rewritten);
    if (rc == 0 && s->trailers_pending) {
        s->trailers_pending = false;
        send_trailers(s, SB_EXTPROC_REQUEST_TRAILERS);
    }
    return rc;
}

/* No endpoint may take it (or the answer could not be built): answered here and recorded as
 * the proxy records a request that never reached an endpoint. */
static void fail_before_response(pstream *s, int status, const char *message, const char *code)
{
    s->st = ST_PENDING; /* answer_immediate takes it from here */
    sb_errors_reply(&s->req, status, message, status == 503 ? "service_unavailable" : "server_error", code);
    s->st = ST_DONE;
    finish_exchange(s, status, status == 503 ? "refused" : "gateway_error", code);
}

static void decide(pstream *s);

/* The wait for fresh reports ended (answers, deadline, or the prober stopping): decide again
 * with the prompt's hashes, as the proxy does (net/proxy.c). */
static void on_probed(void *ud)
{
    pstream *s = ud;
    s->probe_wait = NULL;
    if (s->probe_keys) {
        s->rr.block_hashes = s->probe_keys;
        s->rr.kv_keys = s->rr.n_kv_keys ? s->probe_keys + s->rr.n_blocks : NULL;
    }
    decide(s);
}

/* The synchronous probe (a pool's probe.sync_max_age_ms), as the proxy's: when a report of
 * the best candidates is older than the bound, scrape them and wait (at most sync_timeout_ms)
 * before deciding again. True when waiting. Once per request. */
static bool sync_probe(pstream *s, const sb_ranking *rk, const sb_pool_config *pc, sb_ns now)
{
    const sb_proxy_env *env = s->env;
    struct sb_prober *pr = env->prober ? env->prober(env->owner) : NULL;
    uint32_t old[SB_DECIDE_MAX_RANKED];
    size_t n = 0;
    for (size_t i = 0; i < rk->n && i < (size_t)pc->probe_sync_candidates; i++) {
        const sb_endpoint *e = sb_router_endpoint(env->router, s->t.pool, rk->ep[i]);
        if (e && (!e->report_ns || now - e->report_ns > SB_MS(pc->probe_sync_max_age_ms)))
            old[n++] = rk->ep[i];
    }
    s->probed = true;
    if (!pr || n == 0)
        return false;
    size_t keys = s->rr.n_blocks + (s->rr.kv_keys ? s->rr.n_kv_keys : 0);
    if (keys) {
        /* The hashes live in the gateway's scratch, valid during this call only. */
        s->probe_keys = sb_malloc(keys * sizeof(uint64_t));
        if (!s->probe_keys)
            return false;
        if (s->rr.n_blocks)
            memcpy(s->probe_keys, s->rr.block_hashes, s->rr.n_blocks * sizeof(uint64_t));
        if (s->rr.kv_keys && s->rr.n_kv_keys)
            memcpy(s->probe_keys + s->rr.n_blocks, s->rr.kv_keys, s->rr.n_kv_keys * sizeof(uint64_t));
    }
    s->probe_wait = sb_prober_sync(pr, s->t.pool, old, n, pc->probe_sync_timeout_ms, on_probed, s);
    if (!s->probe_wait) {
        sb_free(s->probe_keys);
        s->probe_keys = NULL;
        return false;
    }
    return true;
}

/* Decides for s and answers with the pick and its fallbacks. */
static void decide(pstream *s)
{
    const sb_proxy_env *env = s->env;
    const sb_proxy_target *t = &s->t;
    const sb_config *cfg = s->snap->cfg;
    const sb_pool_config *pc = &cfg->pools[t->pool];
    sb_ns now = now_ns();

    sb_sched_request sr = s->rr;
    uint32_t *excl = NULL;
    if (s->has_subset) {
        /* Envoy's subset: every endpoint of the pool it does not name is excluded. */
        size_t n = sb_router_endpoint_count(env->router, t->pool), k = 0;
        excl = sb_calloc(n + sr.n_exclude + 1, sizeof(uint32_t));
        if (!excl) {
            fail_before_response(s, 500, "out of memory", "out_of_memory");
            return;
        }
        for (size_t i = 0; i < sr.n_exclude; i++)
            excl[k++] = sr.exclude[i];
        size_t named = 0;
        for (size_t i = 0; i < n; i++) {
            const sb_endpoint *e = sb_router_endpoint(env->router, t->pool, (uint32_t)i);
            if (e && e->address && in_subset(s->subset, e->address))
                named++;
            else
                excl[k++] = (uint32_t)i;
        }
        sr.exclude = excl;
        sr.n_exclude = k;
        if (!named) {
            sb_free(excl);
            fail_before_response(s, 503, "no endpoint of this model's pool is in the subset the proxy allows",
                                 "no_endpoint_in_subset");
            return;
        }
    }
    size_t want = 1 + cfg->extproc_fallbacks;
    bool probe = !s->probed && pc->probe_sync_max_age_ms && pc->probe_enabled;
    if (probe && pc->probe_sync_candidates > want)
        want = pc->probe_sync_candidates;
    sr.repeat = s->probed; /* the decision after a synchronous probe: counted at the first */
    sb_request_desc desc = {.sched = sr, .stream = t->stream};
    sb_ranking rk;
    int ep = sb_decide(env->router, &desc, want, now, &rk);
    sb_free(excl);
    if (probe && ep >= 0 && sync_probe(s, &rk, pc, now))
        return;             /* not dispatched: the router settles the pick's pending mark at its next pick */
    sb_free(s->probe_keys); /* the copy a synchronous probe kept, used now */
    s->probe_keys = NULL;
    s->rr.block_hashes = NULL; /* scratch: valid for this decision only */
    s->rr.n_blocks = 0;
    s->rr.kv_keys = NULL;
    s->rr.n_kv_keys = 0;
    if (rk.n > 1 + (size_t)cfg->extproc_fallbacks)
        rk.n = 1 + cfg->extproc_fallbacks;
    /* Copied now: the decision scratch is the pool's, reused by the next pick. */
    if (rk.why && !s->dref.ring) {
        s->dref = sb_decisions_record(env->decisions, rk.why, t->ident.id, s->model, sb_decisions_clock_ms());
        if (t->fell_back && t->requested_pool < cfg->n_pools)
            sb_decisions_fallback(&s->dref, cfg->pools[t->requested_pool].name,
                                  sb_stats_fallback_reason_names[t->fallback_reason % SB_FALLBACK_REASONS]);
    }
    if (cfg->log_decisions && rk.why) {
        sb_buf_reset(&s->decision);
        sb_decision_render(rk.why, &s->decision);
    }
    if (ep < 0) {
        fail_before_response(s, 503, "no healthy endpoint for this model", "no_healthy_endpoint");
        return;
    }
    sb_buf dest = {0};
    if (sb_decide_render_endpoints(env->router, t->pool, &rk, &dest) < 0 || !dest.len) {
        sb_buf_free(&dest);
        fail_before_response(s, 500, "out of memory", "out_of_memory");
        return;
    }
    s->ep = (uint32_t)ep;
    s->ticket = sb_router_dispatched(env->router, t->pool, s->ep, s->prompt_tokens, now);
    s->dispatched = true;
    s->attempts = 1;
    /* A non-streamed answer arrives whole: its first token is never seen on its own. */
    if (!t->stream)
        sb_router_first_token_unseen(env->router, t->pool, s->ep, &s->ticket, now);
    s->pk->stats.picks++;
    s->picked = true;
    s->t_last = now; /* the response timeout counts from the pick, as the proxy's from dispatch */
    if (answer_pick(s, dest.data, dest.len) < 0) {
        sb_buf_free(&dest);
        end_call(s, SB_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        abandon(s);
        return;
    }
    sb_buf_free(&dest);
    release_body(s); /* sent on: Envoy holds it now */
    s->req.body = "";
    s->req.body_len = 0;
}

void sb_picker_dispatch(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr)
{
    pstream *s = stream_of(req);
    req->on_abort = NULL; /* the stream's end is ours to handle now (abandon) */
    req->user = NULL;
    s->env = env;
    s->t = *t;
    snprintf(s->model, sizeof s->model, "%s", t->model ? t->model : "");
    s->t.model = s->model;
    s->rr = *rr;
    s->prompt_tokens = rr->prompt_tokens;
    s->snap = env->begin(env->owner);
    env->counters->exchanges_live++;
    s->st = ST_RESPONSE;
    decide(s);
}

/* ---- the response phase ---- */

static int endpoint_by_address(const sb_router *r, uint32_t pool, const char *addr, size_t len)
{
    size_t n = sb_router_endpoint_count((sb_router *)r, pool);
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *e = sb_router_endpoint((sb_router *)r, pool, (uint32_t)i);
        if (e && e->address && strlen(e->address) == len && !memcmp(e->address, addr, len))
            return (int)i;
    }
    return -1;
}

/* Envoy served the request elsewhere (a fallback: the pick failed to connect, or Envoy's retry
 * moved it): the pick's attempt counts as failed, and the request's load moves to the
 * endpoint that served it. */
static void served_by(pstream *s, const char *addr, size_t len)
{
    const sb_proxy_env *env = s->env;
    if (!env || !s->dispatched)
        return;
    const sb_endpoint *pick = sb_router_endpoint(env->router, s->t.pool, s->ep);
    if (pick && pick->address && strlen(pick->address) == len && !memcmp(pick->address, addr, len))
        return;
    int ep = endpoint_by_address(env->router, s->t.pool, addr, len);
    if (ep < 0)
        return; /* not one of ours: nothing to move it to */
    sb_ns now = now_ns();
    sb_router_withdraw_sent(env->router, s->t.pool, s->ep, &s->ticket, now);
    sb_router_finished(env->router, s->t.pool, s->ep, &s->ticket, false, true, now);
    s->ep = (uint32_t)ep;
    /* Not this request's pick: the pool's pick state may be another request's, waiting. */
    s->ticket = sb_router_dispatched_unpicked(env->router, s->t.pool, s->ep, s->prompt_tokens, now);
    if (!s->t.stream)
        sb_router_first_token_unseen(env->router, s->t.pool, s->ep, &s->ticket, now);
    s->t_last = now;
    s->attempts++;
    s->pk->stats.served_elsewhere++;
}

/* The strip's output for the chunk being answered (sb_sse_emit_fn). Out of memory: the bytes
 * are lost, so the stream is ended (the client sees a cut, never a silent gap). */
static void keep_chunk_bytes(void *ud, const char *at, size_t len)
{
    pstream *s = ud;
    if (!s->strip_failed && sb_buf_append(&s->strip_out, at, len) < 0)
        s->strip_failed = true;
}

static void on_response_headers(pstream *s, const sb_extproc_msg *m)
{
    sb_picker *pk = s->pk;
    const sb_proxy_env *env = s->env;
    sb_ns now = now_ns();
    s->resp_headers_seen = true;
    if (m->served && m->served_len) {
        /* a list: the last is the one that answered */
        const char *v = m->served;
        size_t n = m->served_len;
        const char *comma = memrchr(v, ',', n);
        if (comma) {
            n -= (size_t)(comma + 1 - v);
            v = comma + 1;
        }
        served_by(s, v, n);
    }
    const sb_extproc_header *h = sb_extproc_header_find(m, ":status");
    if (h) {
        int st = 0;
        for (size_t i = 0; i < h->value_len && i < 3 && h->value[i] >= '0' && h->value[i] <= '9'; i++)
            st = st * 10 + (h->value[i] - '0');
        s->status = st;
    }
    if (env && s->dispatched) {
        if (!s->t_first_byte) {
            s->t_first_byte = now;
            sb_router_first_byte(env->router, s->t.pool, s->ep, &s->ticket, now);
        }
        if ((h = sb_extproc_header_find(m, "endpoint-load-metrics")) != NULL) {
            sb_endpoint_report rep;
            if (sb_orca_parse(h->value, h->value_len, &rep) > 0) {
                sb_endpoint *e = sb_router_endpoint(env->router, s->t.pool, s->ep);
                if (e)
                    sb_endpoint_report_merge(e, &rep, SB_REPORT_ORCA, now);
                env->counters->orca_reports++;
            }
        }
    }
    /* The usage chunk the gateway asked for comes out of a 2xx event stream. Not from a body
     * framed by a content-length, which these chunks would then contradict: that one passes
     * whole (engines stream SSE chunked, or over HTTP/2 without a length). */
    const sb_extproc_header *ct = sb_extproc_header_find(m, "content-type");
    if (s->usage_asked && s->status >= 200 && s->status < 300 && ct && ct->value_len >= 17 &&
        !strncasecmp(ct->value, "text/event-stream", 17) && !sb_extproc_header_find(m, "content-length")) {
        size_t cap = s->snap ? s->snap->cfg->max_held_event_bytes : 0;
        if (!s->hold && cap)
            s->hold = sb_malloc(cap);
        sb_sse_strip_init(&s->strip, s->hold, s->hold ? cap : 0, keep_chunk_bytes, s);
        s->stripping = true;
    }
    sb_extproc_common c = {.kind = SB_EXTPROC_RESPONSE_HEADERS};
    if (sb_extproc_encode_common(&c, &pk->out) == 0)
        send_out(s);
    /* Without the body (response_body_mode none) the headers are all the picker sees. */
    if (m->end_of_stream || s->resp_mode == SB_EXTPROC_MODE_NONE)
        finish_seen(s);
}

static void on_response_body(pstream *s, const sb_extproc_msg *m)
{
    sb_picker *pk = s->pk;
    const sb_proxy_env *env = s->env;
    if (env && !s->t_first_body && m->body_len) {
        s->t_first_body = now_ns();
        /* An answer's first body bytes (a stream's first token, or a whole answer) mean the
         * prompt was computed there; an error's body means nothing of the kind. */
        if (s->dispatched && s->status >= 200 && s->status < 300)
            sb_router_first_token(env->router, s->t.pool, s->ep, &s->ticket);
    }
    size_t len = m->body_len;
    const uint8_t *at = m->body;
    if (env)
        sb_token_clock_feed(&s->tokens, (const char *)at, len, now_ns());
    sb_usage_tail_push(s->tail, sizeof(s->tail), &s->tail_len, at, len);
    sb_extproc_common c = {.kind = SB_EXTPROC_RESPONSE_BODY};
    if (s->resp_mode == SB_EXTPROC_MODE_FULL_DUPLEX) {
        /* Full duplex: Envoy forwards only what comes back; the bytes go back unchanged, but
         * for the usage chunk the gateway asked for (held while unfinished, bounded). */
        c.streamed = true;
        c.body = m->body;
        c.body_len = m->body_len;
        c.end_of_stream = m->end_of_stream;
        if (s->stripping) {
            s->strip_out.len = 0;
            sb_sse_strip_feed(&s->strip, (const char *)at, len);
            if (m->end_of_stream)
                sb_sse_strip_finish(&s->strip);
            if (s->strip_failed) {
                end_call(s, SB_GRPC_RESOURCE_EXHAUSTED, "out of memory");
                abandon(s);
                return;
            }
            c.body = (const uint8_t *)s->strip_out.data;
            c.body_len = s->strip_out.len;
            len = s->strip_out.len;
        }
    }
    s->bytes_out += len;
    if (sb_extproc_encode_common(&c, &pk->out) == 0)
        send_out(s);
    if (m->end_of_stream)
        finish_seen(s);
}

/* ---- the stream's messages ---- */

static void on_process_message(pstream *s, const uint8_t *buf, size_t len)
{
    sb_picker *pk = s->pk;
    const char *why = "malformed ProcessingRequest";
    int rc = sb_extproc_decode(buf, len, &pk->msg, &why);
    if (rc < 0) {
        protocol_error(s, why);
        return;
    }
    const sb_extproc_msg *m = &pk->msg;
    s->t_last = now_ns();
    /* Until the pick has gone out (a queue, /tokenize, a synchronous probe), Envoy has nothing
     * to forward: a response phase now is out of order. */
    bool early = s->st == ST_PENDING || (s->st == ST_RESPONSE && !s->picked);
    if (early && m->kind >= SB_EXTPROC_RESPONSE_HEADERS) {
        protocol_error(s, "response phase before the request's answer");
        return;
    }
    switch (m->kind) {
    case SB_EXTPROC_REQUEST_HEADERS: on_request_headers(s, m); break;
    case SB_EXTPROC_REQUEST_BODY:
        if (s->st != ST_BODY) {
            protocol_error(s, s->st == ST_HEADERS ? "request_body before request_headers"
                                                  : "request_body after the request's end");
            break;
        }
        take_subset(s, m);
        take_body(s, m);
        break;
    case SB_EXTPROC_REQUEST_TRAILERS:
        if (s->st == ST_HEADERS) {
            protocol_error(s, "request_trailers before request_headers");
        } else if (s->st == ST_BODY) {
            s->trailers_pending = true; /* trailers end the body */
            request_complete(s);
        } else if (early) {
            s->trailers_pending = true; /* answered after the body's answer */
        } else if (s->st == ST_RESPONSE) {
            send_trailers(s, SB_EXTPROC_REQUEST_TRAILERS);
        }
        break;
    case SB_EXTPROC_RESPONSE_HEADERS:
        if (s->st == ST_RESPONSE && !s->resp_headers_seen)
            on_response_headers(s, m);
        else if (s->st != ST_DONE)
            protocol_error(s, "response_headers out of order");
        break;
    case SB_EXTPROC_RESPONSE_BODY:
        if (s->st == ST_RESPONSE && s->resp_headers_seen)
            on_response_body(s, m);
        else if (s->st != ST_DONE)
            protocol_error(s, "response_body before response_headers");
        break;
    case SB_EXTPROC_RESPONSE_TRAILERS:
        if (s->st == ST_RESPONSE) {
            send_trailers(s, SB_EXTPROC_RESPONSE_TRAILERS);
            finish_seen(s);
        } else if (s->st != ST_DONE) {
            protocol_error(s, "response_trailers out of order");
        }
        break;
    default: protocol_error(s, "ProcessingRequest names no phase");
    }
}

/* ---- health ---- */

static enum sb_health_status serving(const sb_picker *pk)
{
    return pk->draining ? SB_HEALTH_NOT_SERVING : SB_HEALTH_SERVING;
}

static void health_send(sb_picker *pk, hcall *h)
{
    if (sb_health_encode_response(h->unknown ? SB_HEALTH_SERVICE_UNKNOWN : serving(pk), &pk->out) == 0 && h->call)
        sb_grpc_send(h->call, (const uint8_t *)pk->out.data, pk->out.len);
    sb_buf_reset(&pk->out);
}

static void unwatch(hcall *h)
{
    if (!h->watch)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        h->pk->watchers = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->watch = false;
}

static void on_health_message(hcall *h, const uint8_t *buf, size_t len, bool watch)
{
    sb_picker *pk = h->pk;
    const char *svc;
    size_t n;
    if (sb_health_decode_request(buf, len, &svc, &n) < 0) {
        sb_grpc_finish(h->call, SB_GRPC_INVALID_ARGUMENT, "malformed HealthCheckRequest");
        h->call = NULL;
        sb_free(h);
        return;
    }
    static const char ours[] = "envoy.service.ext_proc.v3.ExternalProcessor";
    h->unknown = n && !(n == sizeof(ours) - 1 && !memcmp(svc, ours, n));
    if (h->unknown && !watch) { /* Check says NOT_FOUND; Watch says SERVICE_UNKNOWN and stays */
        sb_grpc_finish(h->call, SB_GRPC_NOT_FOUND, "unknown service");
        h->call = NULL;
        sb_free(h);
        return;
    }
    health_send(pk, h);
    if (!watch) {
        sb_grpc_finish(h->call, SB_GRPC_OK, NULL);
        h->call = NULL;
        sb_free(h);
        return;
    }
    h->watch = true;
    h->prev = NULL;
    h->next = pk->watchers;
    if (pk->watchers)
        pk->watchers->prev = h;
    pk->watchers = h;
}

/* ---- the gRPC server's callbacks ---- */

static void on_message(sb_grpc_call *c, const uint8_t *msg, size_t len)
{
    int *kind = sb_grpc_call_user(c);
    if (*kind == CALL_PROCESS) {
        on_process_message((pstream *)((char *)kind - offsetof(pstream, kind)), msg, len);
        return;
    }
    hcall *h = (hcall *)kind;
    if (h->watch)
        return; /* a Watch takes one request */
    on_health_message(h, msg, len, h->is_watch);
}

static void on_half_close(sb_grpc_call *c)
{
    int *kind = sb_grpc_call_user(c);
    if (*kind != CALL_PROCESS) {
        /* A Watch half-closes after its request and stays; a call that sent nothing ends. */
        hcall *h = (hcall *)kind;
        if (!h->watch) {
            sb_grpc_finish(c, SB_GRPC_INVALID_ARGUMENT, "no HealthCheckRequest");
            sb_free(h);
        }
        return;
    }
    pstream *s = (pstream *)((char *)kind - offsetof(pstream, kind));
    switch (s->st) {
    case ST_HEADERS:
    case ST_BODY: protocol_error(s, "the stream ended before the request was complete"); return;
    case ST_RESPONSE:
        stream_closed(s); /* nothing if the response's end was seen */
        s->st = ST_DONE;
        end_call(s, SB_GRPC_OK, NULL);
        bury(s);
        return;
    case ST_PENDING: /* Envoy gave up waiting (its message_timeout): as a cancel */
        s->pk->stats.cancelled++;
        end_call(s, SB_GRPC_CANCELLED, "the proxy closed the stream before the decision");
        abandon(s);
        return;
    default: end_call(s, SB_GRPC_OK, NULL); bury(s);
    }
}

static void on_cancel(sb_grpc_call *c)
{
    int *kind = sb_grpc_call_user(c);
    if (*kind != CALL_PROCESS) {
        hcall *h = (hcall *)kind;
        unwatch(h);
        sb_free(h);
        return;
    }
    pstream *s = (pstream *)((char *)kind - offsetof(pstream, kind));
    s->call = NULL;
    if (s->st != ST_DONE)
        s->pk->stats.cancelled++;
    abandon(s);
}

/* With ext_proc.token, every call but health's carries it: authorization: Bearer TOKEN (Envoy's
 * grpc_service.initial_metadata). Only digests are compared, in constant time. */
static bool call_authorized(const sb_config *cfg, sb_grpc_call *c)
{
    if (!cfg->extproc_has_token)
        return true;
    size_t n;
    const char *v = sb_grpc_call_header(c, "authorization", &n);
    const char *tok;
    size_t tn;
    if (!v || !sb_auth_bearer(v, n, &tok, &tn))
        return false;
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest(tok, tn, d);
    return CRYPTO_memcmp(d, cfg->extproc_token_digest, sizeof d) == 0;
}

static int on_call(sb_grpc_call *c, const char *method, size_t len, void *ctx)
{
    sb_picker *pk = ctx;
    if (len == sizeof(PROCESS_METHOD) - 1 && !memcmp(method, PROCESS_METHOD, len)) {
        if (!call_authorized(pk->gw->cfg, c))
            return SB_GRPC_UNAUTHENTICATED;
        pstream *s = sb_calloc(1, sizeof(*s));
        if (!s)
            return SB_GRPC_RESOURCE_EXHAUSTED;
        s->kind = CALL_PROCESS;
        s->pk = pk;
        s->call = c;
        s->t_start = now_ns();
        s->req_mode = pk->gw->cfg->extproc_request_body_mode;
        s->resp_mode = pk->gw->cfg->extproc_response_body_mode;
        s->t.band = -1;
        s->next = pk->live;
        if (pk->live)
            pk->live->prev = s;
        pk->live = s;
        pk->stats.streams++;
        pk->stats.streams_open++;
        sb_grpc_call_set_user(c, &s->kind);
        return SB_GRPC_OK;
    }
    bool check = len == sizeof(HEALTH_CHECK) - 1 && !memcmp(method, HEALTH_CHECK, len);
    bool watch = len == sizeof(HEALTH_WATCH) - 1 && !memcmp(method, HEALTH_WATCH, len);
    if (!check && !watch)
        return SB_GRPC_UNIMPLEMENTED;
    hcall *h = sb_calloc(1, sizeof(*h));
    if (!h)
        return SB_GRPC_RESOURCE_EXHAUSTED;
    h->kind = CALL_HEALTH;
    h->pk = pk;
    h->call = c;
    h->is_watch = watch;
    sb_grpc_call_set_user(c, h);
    return SB_GRPC_OK;
}

static const sb_grpc_handler handler = {
    .on_call = on_call, .on_message = on_message, .on_half_close = on_half_close, .on_cancel = on_cancel};

/* ---- deadlines ---- */

static void on_sweep(uv_timer_t *t)
{
    sb_picker *pk = t->data;
    sb_ns now = now_ns();
    sb_ns limit = SB_MS(pk->gw->cfg->header_ms);
    for (pstream *s = pk->live, *next; s; s = next) {
        next = s->next;
        if ((s->st == ST_HEADERS || s->st == ST_BODY) && now - s->t_start > limit) {
            end_call(s, SB_GRPC_DEADLINE_EXCEEDED, "the request did not arrive whole within limits.header_ms");
            abandon(s);
        } else if (s->st == ST_RESPONSE && s->picked && s->env &&
                   !(s->resp_headers_seen && s->resp_mode != SB_EXTPROC_MODE_FULL_DUPLEX) &&
                   now - s->t_last > SB_MS(s->snap->cfg->response_ms)) {
            /* (A buffered or unseen response body comes whole or not at all: its silence says
             * nothing of the endpoint; Envoy's own timeouts bound it.) */
            /* The proxy's response timeout: nothing of the response phase for response_ms.
             * Envoy bounds its own streams; a client that takes a pick and goes quiet must not
             * hold the endpoint's in-flight count (and a retired gateway) for ever. */
            s->env->counters->upstream_errors++;
            finish_exchange(s, 504, s->resp_headers_seen ? "midstream_error" : "upstream_error", "response_timeout");
            end_call(s, SB_GRPC_DEADLINE_EXCEEDED, "no response phase message within timeouts.response_ms");
            s->st = ST_DONE;
            bury(s);
        }
    }
}

/* ---- life cycle ---- */

int sb_picker_start(sb_gateway *gw)
{
    const sb_config *cfg = gw->cfg;
    sb_picker *pk = sb_calloc(1, sizeof(*pk));
    if (!pk)
        return UV_ENOMEM;
    pk->loop = gw->loop;
    pk->gw = gw;
    sb_grpc_server_opts o = {.max_message_bytes = cfg->max_body_bytes + MESSAGE_SLACK,
                             .max_concurrent_streams = cfg->extproc_max_streams,
                             .max_connections = cfg->extproc_max_connections,
                             .max_header_bytes = cfg->max_header_bytes,
                             .idle_ms = cfg->extproc_idle_ms,
                             .max_buffered_bytes = cfg->max_buffered_body_bytes,
                             .handshake_ms = cfg->header_ms,
                             .tls_cert_file = cfg->extproc_tls_cert,
                             .tls_key_file = cfg->extproc_tls_key};
    int rc = sb_grpc_server_start(gw->loop, cfg->extproc_host, cfg->extproc_port, &o, &handler, pk, &pk->grpc);
    if (rc < 0) {
        SB_ERROR("ext_proc.listen %s:%u: %s", cfg->extproc_host, cfg->extproc_port,
                 rc == -1 ? "TLS set-up failed" : uv_strerror(rc));
        sb_free(pk);
        return rc == -1 ? UV_EINVAL : rc;
    }
    uv_timer_init(gw->loop, &pk->sweep);
    pk->sweep.data = pk;
    uv_timer_start(&pk->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_check_init(gw->loop, &pk->reaper);
    pk->reaper.data = pk;
    gw->picker = pk;
    return 0;
}

void sb_picker_handover(sb_picker *pk, sb_gateway *ngw)
{
    pk->gw = ngw;
    ngw->picker = pk;
}

/* Tells every watcher NOT_SERVING, then ends its call: a Watch would otherwise hold its
 * connection (and the drain) open to the end of the window. */
static void end_watchers(sb_picker *pk)
{
    while (pk->watchers) {
        hcall *h = pk->watchers;
        unwatch(h);
        health_send(pk, h);
        sb_grpc_finish(h->call, SB_GRPC_UNAVAILABLE, "draining");
        sb_free(h);
    }
}

void sb_picker_drain(sb_picker *pk)
{
    if (pk->draining)
        return;
    pk->draining = true;
    end_watchers(pk);
    sb_grpc_server_drain(pk->grpc);
}

void sb_picker_cut(sb_picker *pk)
{
    if (!pk)
        return;
    /* Each stream ends with a status, and what was answered before (a refusal admission just
     * sent) leaves first: the connections close once their calls are done (the drain's
     * GOAWAY), not at once. */
    for (pstream *s = pk->live, *next; s; s = next) {
        next = s->next;
        end_call(s, SB_GRPC_UNAVAILABLE, "the picker is shutting down");
        abandon(s); /* a response phase in flight is logged drain_cut (the env is cutting) */
    }
    end_watchers(pk);
}

static void on_handle_closed(uv_handle_t *h)
{
    sb_picker *pk = h->data;
    if (--pk->closing == 0) {
        sb_extproc_msg_free(&pk->msg);
        sb_buf_free(&pk->out);
        sb_free(pk);
    }
}

void sb_picker_stop(sb_picker *pk)
{
    if (!pk || pk->stopped)
        return;
    pk->stopped = true;
    /* Every call still open gets on_cancel: queued requests leave their queues, responses in
     * flight are logged, streams go to the graveyard. */
    sb_grpc_server_stop(pk->grpc);
    pk->grpc = NULL;
    while (pk->live) { /* a stream the server did not cancel (none should be left) */
        pstream *s = pk->live;
        s->call = NULL;
        abandon(s);
    }
    on_reap(&pk->reaper);
    pk->closing = 2;
    uv_timer_stop(&pk->sweep);
    uv_close((uv_handle_t *)&pk->sweep, on_handle_closed);
    uv_close((uv_handle_t *)&pk->reaper, on_handle_closed);
}

uint16_t sb_picker_port(const sb_picker *pk)
{
    return pk && pk->grpc ? sb_grpc_server_port(pk->grpc) : 0;
}

size_t sb_picker_connections(const sb_picker *pk)
{
    return pk && pk->grpc ? sb_grpc_server_connections(pk->grpc) : 0;
}

void sb_picker_get_stats(const sb_picker *pk, sb_picker_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!pk)
        return;
    *out = pk->stats;
    if (pk->grpc) {
        sb_grpc_server_stats g;
        sb_grpc_server_get_stats(pk->grpc, &g);
        out->connections_open = g.open_connections;
        out->connections_refused = g.connections_refused;
        out->connections_evicted = g.connections_evicted;
        out->handshake_timeouts = g.handshake_timeouts;
        out->protocol_errors_h2 = g.protocol_errors;
        out->calls_refused = g.calls_refused;
        out->calls_over_budget = g.calls_over_budget;
        out->buffered_bytes = g.buffered_bytes;
    }
}
