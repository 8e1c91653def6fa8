/* admin: the admin listener's pages (/metrics, /debug/...). */
#ifndef SB_NET_ADMIN_H
#define SB_NET_ADMIN_H

#include "net/gateway_types.h"

/* The admin listener's handler (ctx: the gateway): /metrics and /debug/... behind the admin
 * token; 401 with WWW-Authenticate: Bearer without it, 404 for any other path. The dashboard's
 * static files (/ and /ui/..., net/ui.h) are served without the token: they hold no fleet data,
 * and the page asks for the token when its data requests answer 401. */
void sb_gateway_admin(sb_http_req *req, void *ctx);
/* The admin listener's head hook (sb_http_head_hook): a missing or wrong token, a method
 * other than GET/HEAD or an unknown path is answered before any body is read. */
bool sb_gateway_admin_head(sb_http_req *req, void *ctx);

#endif
