#include "net/errors.h"

#include <http_parser.h>
#include <stdio.h>

#include "base/buf.h"
#include "proto/openai_error.h"

static void error_response(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                           const char *param, const char *code, const char *headers)
{
    sb_buf b = {0};
    if (status < 500)
        (*st->rejected)++;
    st->rejected_by_status[status / 100 < 6 ? status / 100 : 0]++;
    if (st->access_log) {
        sb_exchange_log log = {.pool = -1,
                               .ep = -1,
                               .status = status,
                               .outcome = "rejected",
                               .model = "",
                               .t_start = req->start_ns,
                               .t_end = uv_hrtime()};
        log.usage.prompt_tokens = log.usage.completion_tokens = log.usage.cached_tokens = -1;
        sb_stats_record(st, &log);
    }
    if (sb_openai_error(&b, message, type, param, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return;
    }
    char allow[64] = "";
    if (status == 405)
        snprintf(allow, sizeof(allow), "%s", req->method == HTTP_POST ? "Allow: GET, HEAD\r\n" : "Allow: POST\r\n");
    char hdrs[512];
    snprintf(hdrs, sizeof(hdrs), "%s%s", allow, headers ? headers : "");
    sb_http_respond(req, status, "application/json", hdrs[0] ? hdrs : NULL, b.data, b.len);
    sb_buf_free(&b);
}

void sb_errors_answer(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code)
{
    error_response(st, req, status, message, type, param, code, NULL);
}

void sb_errors_answer_with(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                           const char *code, const char *headers)
{
    error_response(st, req, status, message, type, NULL, code, headers);
}
