/* errors: the gateway's own OpenAI-shaped error answers. Each is counted (rejected, by
 * status class) and, with an access log, recorded as a rejected request (net/stats.h). */
#ifndef SB_NET_ERRORS_H
#define SB_NET_ERRORS_H

#include "net/gateway_types.h"

/* An OpenAI-shaped error with extra response headers ("Name: value\r\n" lines, or NULL);
 * `code` goes into the body's code field. */
void sb_gateway_error_with(sb_gateway *gw, sb_http_req *req, int status, const char *message, const char *type,
                           const char *code, const char *headers);

/* Answers req with an OpenAI-shaped error. */
void sb_gateway_error(sb_gateway *gw, sb_http_req *req, int status, const char *message, const char *type,
                      const char *param, const char *code);

#endif
