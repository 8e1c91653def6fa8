/* sync_feed: gateway sync (net/peer_sync.h) wired to a gateway: its router tells the peers what
 * it dispatches, and what the peers dispatch goes into its router. */
#ifndef SB_NET_SYNC_FEED_H
#define SB_NET_SYNC_FEED_H

#include "net/gateway_types.h"

/* With `old` holding gateway sync (a replacing reload), gw takes it over as its owner (old keeps
 * a reference, so its requests' ends are still told; this cannot fail, so a build calls it once
 * nothing else can); with no `old`, when gw->cfg has sync.listen, starts it. Sets gw's router
 * hooks. 0, or a negative code (the bind failed) with nothing started. */
int sb_gateway_sync_start(sb_gateway *gw, sb_gateway *old);
/* Drops gw's reference (and its ownership). */
void sb_gateway_sync_stop(sb_gateway *gw);
/* Whether two configurations' sync sections agree (a change needs a restart). */
bool sb_gateway_sync_same(const sb_config *a, const sb_config *b);

#endif
