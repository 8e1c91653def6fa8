/* routes: the client listener's handlers. A request is checked from its head (route, method,
 * API key, declared body), then /healthz and GET /v1/models are answered, and an inference
 * request is inspected, resolved to a pool, hashed into prompt blocks and handed to admission
 * (net/admission.h). ctx is the gateway. */
#ifndef SB_NET_ROUTES_H
#define SB_NET_ROUTES_H

#include "net/gateway_types.h"

/* The head hook (sb_http_head_hook): a request refused from its head is answered before any
 * body is read; returns false then. */
bool sb_gateway_on_head(sb_http_req *req, void *ctx);
/* The request handler (sb_http_handler): the OpenAI API and /healthz only (the admin pages
 * live on the admin listener, net/admin.h). */
void sb_gateway_on_request(sb_http_req *req, void *ctx);
/* Gives req its id once: the client's x-request-id if sane, else a generated one (the head
 * hook and the handler call it; so does the endpoint picker before an answer of its own). */
void sb_gateway_request_id(sb_gateway *gw, sb_http_req *req);
/* Answers /healthz: 200 {"status":"ok"}, or 503 {"status":"draining"} once a drain began;
 * recorded in the access log like every request of the client listener. */
void sb_gateway_healthz(sb_gateway *gw, sb_http_req *req);

#endif
