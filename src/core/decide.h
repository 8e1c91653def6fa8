/* decide: the routing decision as one call, for every front end: the HTTP proxy (net/proxy.c),
 * replay (replay/driver.c) and an endpoint picker behind Envoy, which answers with the pick and
 * its fallbacks (x-gateway-destination-endpoint: "addr,addr,...").
 *
 * In: a request descriptor, everything the core knows of a request (never text: hashes,
 * lengths, keys, band, tenant). Out: the endpoints ranked (the pick first, then fallbacks in
 * the order to try them, up to a bounded count) and the explanation (every candidate of the
 * pool, which filter removed whom, per-scorer scores, totals, the reason; core/sched.h).
 *
 * The pick is exactly sb_router_pick's, with the same random draws and the same accounting
 * (the prefix index records it as pending for the dispatch that follows); ranking the
 * fallbacks draws nothing and changes nothing. Fallbacks are the other candidates the filters
 * kept, by total score, best first; equal totals in pool order starting after the pick (so a
 * round-robin pool falls back round robin). A filtered-out endpoint is never a fallback.
 * Today the proxy and replay ask for the pick alone (max_ranked 1): a proxy retry decides
 * again with the endpoints it tried excluded, since the fleet has changed meanwhile (and the
 * failure just counted may have ejected one); the ranked
 * list is for a front end that hands the fallbacks to someone else to try (Envoy).
 *
 * Admission (core/admission.h) comes before the decision and reads the same descriptor: its
 * band, tenant and body bytes are what requests queue by.
 *
 * Pure: no I/O, no clock (now is an argument). Not thread-safe: the router's owner calls it. */
#ifndef SB_CORE_DECIDE_H
#define SB_CORE_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/time.h"
#include "core/flow.h"
#include "core/router.h"
#include "core/sched.h"

/* Endpoints ranked at most; a caller asks for fewer. Eight covers a retry budget with room:
 * Envoy's endpoint picker protocol sends a handful of fallbacks, not the pool. */
#define SB_DECIDE_MAX_RANKED 8

/* What the core sees of a request. */
typedef struct sb_request_desc {
    /* What scheduling reads: pool, adapter, chained block hashes, prompt size, session and
     * prefix keys, exclusions, the profile (NULL: the pool's current), the gate's thresholds
     * for a request flow control released. Borrowed for the call. */
    sb_sched_request sched;
    /* What admission reads (core/admission.h). */
    enum sb_band band;
    uint64_t tenant;     /* fairness key (a hash of the tenant name or the API key) */
    uint64_t body_bytes; /* what the caller holds while it waits */
    /* The caller's: whether the answer streams (its first token is seen on its own: else
     * sb_router_first_token_unseen after the dispatch). Decisions do not read it. */
    bool stream;
} sb_request_desc;

typedef struct sb_ranking {
    uint32_t ep[SB_DECIDE_MAX_RANKED]; /* endpoint indexes in the pool; ep[0] is the pick */
    double total[SB_DECIDE_MAX_RANKED]; /* their total scores, in [0,1] */
    size_t n;                           /* 0: no endpoint available (every one filtered out) */
    /* The explanation: owned by the router, valid until the pool's next decision. NULL only
     * for a pool that does not exist. */
    const sb_decision *why;
} sb_ranking;

/* Decides for req at now: fills *out with up to max_ranked endpoints (clamped to 1 ..
 * SB_DECIDE_MAX_RANKED) and returns the pick's index, or -1 when no endpoint may take the
 * request (out->n is 0; out->why says why). The caller reports the dispatch to the router as
 * after sb_router_pick (sb_router_dispatched on the pick, or on a fallback if the pick fails
 * before it is sent). */
int sb_decide(sb_router *r, const sb_request_desc *req, size_t max_ranked, sb_ns now, sb_ranking *out);

/* The ranked endpoints' addresses, comma-separated, appended to b (the value of Envoy's
 * x-gateway-destination-endpoint). An endpoint with no address is skipped. 0, or -1 on ENOMEM. */
int sb_decide_render_endpoints(sb_router *r, uint32_t pool, const sb_ranking *rk, sb_buf *b);

#endif
