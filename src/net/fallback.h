/* fallback: where a request goes when the pool it asked for cannot serve it (a pool's
 * `fallbacks:`, proto/config.h).
 *
 * Three occasions, before any byte reached the client: the pool is saturated past flow
 * control's bound (admission refused the request, or dropped it from the queue when its wait
 * expired or it was evicted), the pool has no available endpoint, or every endpoint the proxy
 * tried failed before the first response byte (retries spent). The request is then decided
 * again in the first listed fallback that takes it at once: flow control of that pool
 * admits it without a wait (a fallback never queues), then that pool's own profile picks the
 * endpoint (core/decide.h) and its retry rules apply. The body's model is rewritten to the
 * fallback's name (the entry's `model`, else the fallback pool's served name) by the same
 * splice that rewrites aliases: never re-serialised. Only the requested pool's list is
 * followed, each entry once, so a request makes at most SB_FALLBACKS_MAX moves and cycles
 * between pools cannot loop. A fallback goes without prefix affinity: the prompt's block
 * hashes are seeded by the requested model and are not kept past the first pick (like a
 * retry's).
 *
 * Not for: the decision itself (core/admission.h's sb_admission_fallback chooses the pool;
 * core/decide.h the endpoint). */
#ifndef SB_NET_FALLBACK_H
#define SB_NET_FALLBACK_H

#include <stdbool.h>

#include "core/sched.h"
#include "net/exchange.h"
#include "net/gateway_types.h"

/* enum sb_fallback_reason: net/exchange.h; its names: net/stats.h (the statistics count by it). */

/* Moves t and rr (a request of t->pool, or of a fallback already) to the next entry of the
 * requested pool's fallbacks in cfg that takes the request now (sb_admission_fallback with
 * gw's flow control), for reason why: t's pool, adapter (none), served name (the body's
 * model rewritten) and fallback fields; rr's pool, adapter, with no prefix hashes and no profile
 * of its own (NULL: the router's current one of that pool at each pick).
 * for_picker: the request came through the endpoint picker (Envoy forwards it), so pools
 * Envoy cannot reach as it reaches the gateway's plain endpoints (https://) are passed over.
 * Counts switchboard_fallbacks_total. Returns true when moved; false leaves t and rr as they
 * were, apart from t->fallback_next (the entries asked are used up). cfg must have gw's pools
 * (a reload in place keeps them). */
bool sb_gateway_fallback(sb_gateway *gw, const sb_config *cfg, sb_proxy_target *t, sb_sched_request *rr,
                         enum sb_fallback_reason why, bool for_picker);

#endif
