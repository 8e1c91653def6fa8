/* http_get: small asynchronous HTTP requests to an endpoint, with the whole answer buffered:
 * GETs for probing (/metrics, /health, /slots) and small POSTs such as an engine's
 * /tokenize, over the endpoint's keep-alive pool (net/upstream.h).
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
/* A request in general. Strings are copied at start: none needs to outlive the call. */
typedef struct sb_http_request {
    const char *method; /* "GET", "POST", ...; NULL is GET */
    const char *path;
    const char *headers;      /* "Name: value\r\n" lines, or NULL; treated as credentials (the
                                 request buffer is wiped before it is freed) */
    const char *accept;       /* Accept value; NULL: text/plain */
    const char *content_type; /* for a body; NULL: application/json */
    const char *body;         /* sent with Content-Length; NULL or body_len 0: no body */
    size_t body_len;
    uint32_t timeout_ms; /* 0: 1000 */
    /* false: timeout_ms runs from the request written (the pool's connect_ms bounds the
     * connect before it), as for probes; true: it is the whole request's deadline, from the
     * call, connect included (a caller waiting on the answer to route). A connect still runs
     * to the pool's connect_ms: a caller whose deadline is shorter than that cancels on its
     * own timer, or routes without the answer and lets it fill a cache. */
    bool deadline_from_start;
    size_t max_body; /* a longer answer ends the request with UV_E2BIG */
} sb_http_request;

/* Starts req on u. Returns 0 and sets *out (valid until the callback or cancel), or a
 * negative libuv error (the callback is never called). sb_http_get_start is this with a GET. */
int sb_http_request_start(sb_upstream *u, const sb_http_request *req, sb_http_get_cb cb, void *ud, sb_http_get **out);

/* Abandons a request: its connection is closed, the callback is not called. */
void sb_http_get_cancel(sb_http_get *g);

#endif
