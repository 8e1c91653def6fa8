/* errors: the gateway's own OpenAI-shaped error answers. Each is counted (rejected, by
 * status class) and, with an access log, recorded as a rejected request (net/stats.h).
 *
 * A leaf: it sees the sb_stats it counts into, never the gateway. */
#ifndef SB_NET_ERRORS_H
#define SB_NET_ERRORS_H

#include "net/http_server.h"
#include "net/stats.h"

/* Answers req with an OpenAI-shaped error (`param` and `code` fill the body's fields when not
 * NULL) and records it in st. If the body cannot be built (out of memory), the stream is
 * aborted instead: the client sees the connection close. */
void sb_errors_answer(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code);

/* As sb_errors_answer, without a param and with extra response headers ("Name: value\r\n"
 * lines, or NULL). */
void sb_errors_answer_with(sb_stats *st, sb_http_req *req, int status, const char *message, const char *type,
                           const char *code, const char *headers);

#endif
