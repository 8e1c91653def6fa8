/* picker: switchboard as an endpoint picker behind Envoy (`ext_proc:`): Envoy's external
 * processing filter opens one gRPC stream per HTTP request (envoy.service.ext_proc.v3
 * ExternalProcessor/Process, net/grpc_server.h, messages in proto/extproc.h) and the picker
 * answers with the endpoint that should serve it, in the header x-gateway-destination-endpoint
 * (the pick, then fallbacks) and the same value in dynamic metadata envoy.lb, as the Gateway API
 * Inference Extension's endpoint-picker protocol asks (../shared/notes/ext-proc.md).
 *
 * A stream's request is the gateway's like any other: once its headers and body have come, it
 * becomes an sb_http_req whose answers go back on the stream (sb_http_req.ops), and goes
 * through the same handler as the proxy's (net/routes.c: route, API key, inspection, model to
 * pool, prompt blocks, precise keys, flow control), so errors are the same OpenAI-shaped
 * answers, sent as an ImmediateResponse (404 unknown model, 429 shed, 503 none available...),
 * and a queued request holds its stream open. Where the proxy would forward it, the picker
 * decides (core/decide.h, the same call with fallbacks ranked) and answers; the body goes back
 * to Envoy (streamed chunks in FULL_DUPLEX_STREAMED mode, a replacement in BUFFERED mode only
 * when an alias was rewritten). The response phase then passes the endpoint's answer through
 * while the gateway does what the proxy does as bytes pass: first byte and first token, the
 * ORCA load report on the response headers, usage in the body's last bytes, the access log
 * line, the router's accounting of the request's end. The endpoint that served, when Envoy
 * says it was a fallback (metadata x-gateway-destination-endpoint-served), takes the accounting.
 *
 * Also on the listener: grpc.health.v1.Health Check and Watch (SERVING; NOT_SERVING while
 * draining).
 *
 * Bounds: a request's body up to limits.max_body_bytes (413), all streams' bodies together up
 * to limits.max_buffered_body_bytes (503); a request must arrive whole within
 * limits.header_ms (DEADLINE_EXCEEDED); messages and streams are bounded by the gRPC server's
 * options (ext_proc.max_streams, max_connections; one message at most max_body_bytes + 64 KiB).
 * A malformed or out-of-order message ends its stream with INVALID_ARGUMENT. */
#ifndef SB_NET_PICKER_H
#define SB_NET_PICKER_H

#include <stdint.h>

#include "net/gateway_types.h"

typedef struct sb_picker sb_picker;

typedef struct sb_picker_stats {
    uint64_t streams;          /* Process streams begun */
    uint64_t streams_open;     /* ...not yet ended */
    uint64_t picks;            /* answered with an endpoint */
    uint64_t immediate;        /* answered with an ImmediateResponse (the gateway's own answer) */
    uint64_t protocol_errors;  /* streams ended INVALID_ARGUMENT (malformed, out of order) */
    uint64_t cancelled;        /* streams Envoy reset before their end */
    uint64_t served_elsewhere; /* response phases served by another endpoint than the pick */
    uint64_t unfreed;          /* streams ended, not yet freed (the next loop turn frees them) */
    /* the listener's (net/grpc_server.h) */
    uint64_t connections_open;
    uint64_t connections_refused; /* closed at once at max_connections */
    uint64_t connections_evicted; /* closed with no stream yet, to make room */
    uint64_t handshake_timeouts;  /* no first stream within limits.header_ms */
    uint64_t protocol_errors_h2;  /* connections closed for an HTTP/2 or TLS error */
    uint64_t calls_refused;       /* calls ended by the server: unknown method, malformed, over bounds */
    uint64_t calls_over_budget;   /* ...a message past limits.max_buffered_body_bytes */
    uint64_t buffered_bytes;      /* held now by messages still arriving */
} sb_picker_stats;

/* Starts the ext_proc listener of gw's configuration (cfg->extproc_host set) and sets
 * gw->picker. 0, or a negative libuv error (logged). */
int sb_picker_start(sb_gateway *gw);
/* A reload replaced the gateway: streams whose request completes from now on go to ngw. */
void sb_picker_handover(sb_picker *pk, sb_gateway *ngw);
/* A drain began: GOAWAY to every connection (streams in flight go on), health NOT_SERVING. */
void sb_picker_drain(sb_picker *pk);
/* The end of a drain window: every stream still open ends UNAVAILABLE (a response phase in
 * flight is logged drain_cut), after the answers already given; connections then close as
 * their last calls end. */
void sb_picker_cut(sb_picker *pk);
/* Ends everything: every stream still open is cancelled (a request in a queue leaves it; one in
 * its response phase is logged client_abort, or drain_cut when the env is cutting), then the
 * picker is freed (its handles close on the loop). */
void sb_picker_stop(sb_picker *pk);
uint16_t sb_picker_port(const sb_picker *pk);
size_t sb_picker_connections(const sb_picker *pk);
void sb_picker_get_stats(const sb_picker *pk, sb_picker_stats *out);

/* Where the proxy would forward req (a request of the picker's, req->ops set), the picker
 * decides and answers on its stream (net/admission.c calls it through gw->pick). */
void sb_picker_dispatch(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t,
                        const sb_sched_request *rr);

#endif
