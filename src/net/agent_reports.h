/* agent_reports: the gateway's side of `switchboard agent` (POST /admin/agents/report on the
 * admin listener): a report (proto/agent_report.h) is applied to every endpoint with its
 * address, in every pool, as one more state source beside scrapes and ORCA:
 *   - queue, running and kv_usage are merged into the endpoint's load report (source
 *     "agent"; core/endpoint.h, sb_endpoint_report_merge: a report with a queue freshens it);
 *   - slots set the endpoint's slots with their own staleness: 3 x the agent's interval_ms
 *     (1 s when it sends none), so an agent that stops reporting stops being trusted within
 *     three of its beats, whatever the pool's stale_ms;
 *   - the agent's id, sequence number, interval and time are kept for /debug/endpoints.
 * Then each matched pool's flow control is re-examined: a slot an agent reports free
 * releases a buffered request at once.
 * Answers 200 {"matched":K}, 404 when no endpoint has the address (an agent then registers it
 * through POST /admin/endpoints), 400 for a body the parser refuses, 413 above
 * SB_AGENT_REPORT_MAX_BODY. Refusals are counted by reason, reports applied per endpoint
 * (switchboard_agent_reports_total, switchboard_agent_reports_refused_total).
 * Not for: registering endpoints (the registration API does that). */
#ifndef SB_NET_AGENT_REPORTS_H
#define SB_NET_AGENT_REPORTS_H

#include "base/buf.h"
#include "net/gateway_types.h"

/* A report is a few hundred bytes; 64 KiB bounds a broken agent without refusing a real one. */
#define SB_AGENT_REPORT_MAX_BODY (64u << 10)

/* The admin route (its token, method and path already checked by admin.c). */
void sb_gateway_agent_report(sb_gateway *gw, sb_http_req *req);
/* The head's share of the checks: true (and answered 413) when the declared body is too long. */
bool sb_gateway_agent_report_too_long(sb_http_req *req);
/* ,"agent":{...} for endpoint ep's /debug/endpoints object (nothing if no agent reported). */
void sb_gateway_agent_render(const sb_endpoint *ep, sb_ns now, sb_buf *b);
/* The agent families of /metrics. */
void sb_gateway_agent_metrics(sb_gateway *gw, sb_buf *b);

#endif
