#include "net/errors.h"

#include <http_parser.h>
#include <stdio.h>

#include "base/buf.h"
#include "proto/openai_error.h"

/* Answers; returns the body's length (for the log), or -1 if the stream was aborted instead. */
static long answer(sb_http_req *req, int status, const char *message, const char *type, const char *param,
                   const char *code, const char *headers)
{
    sb_buf b = {0};
    if (sb_openai_error(&b, message, type, param, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return -1;
    }
    char allow[64] = "";
    if (status == 405)
        snprintf(allow, sizeof(allow), "%s", req->method == HTTP_POST ? "Allow: GET, HEAD\r\n" : "Allow: POST\r\n");
    char hdrs[512];
    snprintf(hdrs, sizeof(hdrs), "%s%s", allow, headers ? headers : "");
    sb_http_respond(req, status, "application/json", hdrs[0] ? hdrs : NULL, b.data, b.len);
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
