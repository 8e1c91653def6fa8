/* stats: what one finished request leaves behind: the metrics counters and histograms
 * (rendered by net/admin.c) and the access log line. */
#ifndef SB_NET_STATS_H
#define SB_NET_STATS_H

#include "net/gateway_types.h"

/* Histogram bucket bounds (seconds), SB_HISTO_BUCKETS of them. */
extern const double sb_histo_bounds[SB_HISTO_BUCKETS];

/* Records one finished request: metrics, and the access log line if enabled. */
void sb_gateway_record(sb_gateway *gw, const sb_exchange_log *log);

#endif
