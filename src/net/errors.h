/* errors: the gateway's own OpenAI-shaped error answers. Each is counted (rejected, by
 * status class) and, with an access log, recorded as one request (net/stats.h): outcome
 * `rejected` for a 4xx, `gateway_error` for a 5xx unless the caller says otherwise, the error
 * code as the reason.
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

/* As sb_errors_answer_with, for a request the gateway knew more of when it refused it (flow
 * control, a client gone while queued): `known` carries pool, model, band, tenant, stream,
 * ident and, if set, outcome and reason (default: as above, the code as reason); status, the
 * times and the bytes are filled here. */
void sb_errors_refuse(sb_stats *st, sb_http_req *req, const sb_exchange_log *known, int status, const char *message,
                      const char *type, const char *code, const char *headers);

/* Answers req without counting or recording it: for a request whose owner records its end
 * itself (the proxy's failures before the response started, logged once as upstream_error). */
void sb_errors_reply(sb_http_req *req, int status, const char *message, const char *type, const char *code);

#endif
