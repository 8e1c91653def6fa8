/* http_get: small asynchronous GET requests to an endpoint, for probing (/metrics, /health,
 * /slots), over the endpoint's keep-alive pool (net/upstream.h).
 *
 * One call, one callback with the status and the whole body (bounded by max_body). A
 * request never blocks the loop and always ends: by the answer, by a connection error, by
 * the timeout (status UV_ETIMEDOUT), or by sb_http_get_cancel (no callback then).
 * Not for: proxying (net/proxy.c streams; this buffers). */
#ifndef SB_NET_HTTP_GET_H
#define SB_NET_HTTP_GET_H

#include <stddef.h>
#include <stdint.h>

#include "net/upstream.h"

typedef struct sb_http_get sb_http_get;

/* status: the final HTTP status (interim 1xx answers but 101 are skipped), or a negative libuv
 * error. body is valid during the call. */
typedef void (*sb_http_get_cb)(void *ud, int status, const char *body, size_t len);

/* Starts GET path on u, with `headers` ("Name: value\r\n" lines, or NULL) added to the request;
 * headers are taken to be credentials: the request buffer is wiped before it is freed.
 * Returns 0 and sets *out (valid until the callback or cancel), or a negative libuv error (the
 * callback is never called). */
int sb_http_get_start(sb_upstream *u, const char *path, const char *headers, uint32_t timeout_ms, size_t max_body,
                      sb_http_get_cb cb, void *ud, sb_http_get **out);
/* Abandons a request: its connection is closed, the callback is not called. */
void sb_http_get_cancel(sb_http_get *g);

#endif
