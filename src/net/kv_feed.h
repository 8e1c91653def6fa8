/* kv_feed: the gateway's KV-event subscriptions (net/kv_subscriber.h), one per endpoint of each
 * pool configured with `kv_events:`, started, carried over by reloads and stopped with the
 * gateway. Pools without it keep the approximate index alone.
 *
 * For now a delivered batch is only counted here (the precise index is wired to
 * sb_gateway_kv_batch and sb_gateway_kv_clear by the index's owner). */
#ifndef SB_NET_KV_FEED_H
#define SB_NET_KV_FEED_H

#include "net/gateway_types.h"
#include "net/kv_subscriber.h"

/* Starts the subscriptions gw->cfg asks for, into gw->kv_subs (allocated by the caller, one
 * slot per endpoint, zeroed). With `old` (a reload that rebuilt the gateway), every subscriber
 * of old whose pool name, endpoint address and options are unchanged moves to gw, keeping its
 * stream, sequence and counters; old keeps the rest, for sb_gateway_kv_stop. An endpoint whose
 * subscriber cannot start is logged and left on the approximate path. */
void sb_gateway_kv_start(sb_gateway *gw, sb_gateway *old);
/* A reload in place (gw->cfg is the new configuration, same pools and endpoints): subscribers
 * whose options changed are replaced, added or stopped; the others keep running. */
void sb_gateway_kv_reconfigure(sb_gateway *gw);
/* Stops every subscriber gw still holds and drops its hub reference. No callback after. */
void sb_gateway_kv_stop(sb_gateway *gw);
/* The subscriber of endpoint ep of pool, or NULL. */
const sb_kv_sub *sb_gateway_kv_sub(const sb_gateway *gw, uint32_t pool, uint32_t ep);

#endif
