#include "net/errors.h"

#include <http_parser.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "net/guard.h"
#include "proto/openai_error.h"

/* An answer decided on another thread than the request's (a queued request refused by the
 * main loop's tick or by another worker, net/guard.h): copied and posted to the request's loop,
 * which gives it unless the client left meanwhile. */
typedef struct deferred {
    sb_http_req *req;
    int status;
    bool gone;  /* the client left before the post ran */
    bool abort; /* no body could be built: the stream is aborted */
    char *headers;
    char *body;
    size_t body_len;
} deferred;

static void on_deferred_abort(sb_http_req *req)
{
    ((deferred *)req->user)->gone = true;
}

static void deferred_free(deferred *d)
{
    sb_free(d->headers);
    sb_free(d->body);
    sb_free(d);
}

static void run_deferred(void *arg)
{
    deferred *d = arg;
    if (!d->gone) {
        sb_http_req *req = d->req;
        req->on_abort = NULL;
        req->user = NULL;
        if (d->abort)
            sb_http_stream_abort(req);
        else
            sb_http_respond(req, d->status, "application/json", d->headers, d->body, d->body_len);
    }
    deferred_free(d);
}

/* sb_http_respond, or sb_http_stream_abort with abort set, on the request's own loop. */
static void respond_on_owner(sb_http_req *req, bool abort, int status, const char *headers, const char *body,
                             size_t len)
{
    if (sb_guard_here(req->loop)) {
        if (abort)
            sb_http_stream_abort(req);
        else
            sb_http_respond(req, status, "application/json", headers, body, len);
        return;
    }
    deferred *d = sb_calloc(1, sizeof(*d));
    if (d) {
        *d = (deferred){.req = req, .status = status, .abort = abort, .body_len = len};
        d->headers = headers ? sb_strdup(headers) : NULL;
        d->body = len ? sb_malloc(len) : NULL;
        if (d->body)
            memcpy(d->body, body, len);
    }
    if (!d || (headers && !d->headers) || (len && !d->body)) {
        if (d)
            deferred_free(d);
        d = sb_calloc(1, sizeof(*d));
        if (!d)
            return; /* no memory to say so: the client's connection times out (header_ms, idle) */
        *d = (deferred){.req = req, .abort = true};
    }
    req->user = d;
    req->on_abort = on_deferred_abort;
    req->on_drain = NULL;
    req->on_cut = NULL;
    if (sb_guard_post(req->loop, run_deferred, d) < 0) {
        req->on_abort = NULL;
        req->user = NULL;
        deferred_free(d); /* the worker is stopping: its server closes the connection */
    }
}

/* Answers; returns the body's length (for the log), or -1 if the stream was aborted instead. */
static long answer(sb_http_req *req, int status, const char *message, const char *type, const char *param,
                   const char *code, const char *headers)
{
    sb_buf b = {0};
    if (sb_openai_error(&b, message, type, param, code) < 0) {
        sb_buf_free(&b);
        respond_on_owner(req, true, 0, NULL, NULL, 0);
        return -1;
    }
    char allow[64] = "";
    if (status == 405)
        snprintf(allow, sizeof(allow), "%s", req->method == HTTP_POST ? "Allow: GET, HEAD\r\n" : "Allow: POST\r\n");
    char hdrs[512];
    snprintf(hdrs, sizeof(hdrs), "%s%s", allow, headers ? headers : "");
    respond_on_owner(req, false, status, hdrs[0] ? hdrs : NULL, b.data, b.len);
    long n = (long)b.len;
    sb_buf_free(&b);
    return n;
}

static void error_response(sb_stats *st, sb_http_req *req, const sb_exchange_log *known, int status,
                           const char *message, const char *type, const char *param, const char *code,
                           const char *headers)
{
    if (status < 500)
        (*st->rejected)++;
    st->rejected_by_status[status / 100 < 6 ? status / 100 : 0]++;
    st->rejected_by_reason[sb_stats_reason(code, status)][status >= 500]++;
    /* The log needs the request's identity, read before the answer ends the request. */
    sb_request_ident ident;
    sb_exchange_log log = {.pool = -1, .ep = -1, .model = ""};
    if (known)
        log = *known;
    if (!log.ident) {
        sb_stats_ident(req, &ident);
        log.ident = &ident;
    }
    long n = answer(req, status, message, type, param, code, headers);
    if (!st->access_log)
        return;
    log.ep = -1;
    log.gateway_answer = true;
    log.status = n < 0 ? 0 : status;
    if (!log.outcome)
        log.outcome = status < 500 ? "rejected" : "gateway_error";
    if (!log.reason)
        log.reason = code;
    log.bytes_out = n < 0 ? 0 : (uint64_t)n;
    log.t_start = req->start_ns;
    log.t_end = uv_hrtime();
    log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
    sb_stats_record(st, &log);
}

void sb_errors_answer(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code)
{
    error_response(st, req, NULL, status, message, type, param, code, NULL);
}

void sb_errors_answer_with(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                           const char *code, const char *headers)
{
    error_response(st, req, NULL, status, message, type, NULL, code, headers);
}

void sb_errors_refuse(sb_stats *st, sb_http_req *req, const sb_exchange_log *known, int status, const char *message,
                      const char *type, const char *code, const char *headers)
{
    error_response(st, req, known, status, message, type, NULL, code, headers);
}

void sb_errors_reply(sb_http_req *req, int status, const char *message, const char *type, const char *code)
{
    answer(req, status, message, type, NULL, code, NULL);
}
