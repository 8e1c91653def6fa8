/* proxy: forwards a routed request on a pooled upstream connection and streams the answer
 * back (net/proxy.c): the exchange's state machine (pick, connect or reuse, send, relay,
 * retry on endpoints not tried yet while nothing reached the client (core/retry.h), report
 * each attempt's end to the router).
 *
 * The proxy never sees the gateway: its owner hands it an sb_proxy_env, the few values and
 * callbacks it needs. So the door is one-way (gateway.c and admission.c call the proxy; the
 * proxy calls back only through the env), and the proxy can be driven by anything that
 * fills one in. */
#ifndef SB_NET_PROXY_H
#define SB_NET_PROXY_H

#include "core/router.h"
#include "net/exchange.h"
#include "net/http_server.h"
#include "net/upstream.h"

typedef struct sb_proxy_env {
    sb_router *router;             /* picks, and learns from how each attempt ended */
    uv_loop_t *loop;               /* for the retry backoff's timers */
    sb_gateway_counters *counters; /* proxied, retries, upstream/midstream errors, aborts, ORCA */
    void *owner;                   /* first argument of every callback */
    /* The connection pool of endpoint ep of pool. */
    sb_upstream *(*upstream)(void *owner, uint32_t pool, uint32_t ep);
    /* An exchange starts (counted as in flight): returns a reference on the snapshot it runs under. */
    sb_snapshot *(*begin)(void *owner);
    /* An exchange ended and was recorded: drops its snapshot; pool has capacity again. May
     * free the owner (and the env) when it was the last exchange of a stopping gateway. */
    void (*end)(void *owner, sb_snapshot *snap, uint32_t pool);
    /* What the access log and metrics learn of one request. */
    void (*record)(void *owner, const sb_exchange_log *log);
    /* Answers req with an OpenAI-shaped error (nothing was sent to the client yet). Does not
     * record it: the exchange records its own end (record), once. */
    void (*error)(void *owner, sb_http_req *req, int status, const char *message, const char *type, const char *code);
    /* The prober, for the synchronous probe (a pool's probe.sync_max_age_ms); NULL: none now
     * (probing off, or the gateway is being replaced). */
    struct sb_prober *(*prober)(void *owner);
    /* Where each request's decision and outcome are kept (net/decisions.h); NULL: nowhere.
     * The owner may swap it (a reload that resizes it): a request holds its own reference. */
    struct sb_decisions *decisions;
    /* Before anything reached the client, the request cannot be served in t's pool (why: enum
     * sb_fallback_reason, net/fallback.h): moves t and rr to the next fallback of the pool the
     * request asked for that takes it now (true), or leaves them as they were (false: answer
     * as without fallbacks). cfg is the configuration the request runs under. NULL: none. */
    bool (*fallback)(void *owner, const sb_config *cfg, sb_proxy_target *t, sb_sched_request *rr, int why);
    /* The request left pool for a fallback (its attempts there ended): that pool has capacity
     * again, as at end, which will name the fallback's pool. NULL: nothing to do. */
    void (*left)(void *owner, uint32_t pool);
    /* Set by the owner when it cuts what is still running (the end of a drain window): an
     * exchange whose client side is closed now logs outcome drain_cut, not client_abort. */
    bool cutting;
} sb_proxy_env;

/* Forwards req to the endpoint the router picks for t. env must outlive the exchange: its
 * owner is told when it ends (env->end), after its one access-log record (env->record). The
 * upstream request carries t->ident.id as x-request-id and the client's address appended to
 * X-Forwarded-For; the client's own x-request-id and X-Forwarded-For are replaced. */
void sb_proxy_start(const sb_proxy_env *env, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr);

#endif
