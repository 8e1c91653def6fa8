/* fleet_report: what a replay with fleet events reports (issue 13: several gateway replicas,
 * traffic that bypasses them, replica restarts), on top of replay/report.h: a markdown table and
 * extra results.csv columns. Written only when some result has such events, so a run without
 * them prints exactly what it always printed.
 *
 * Same rules as report.h: writers take open streams and print fixed precision. */
#ifndef SB_REPLAY_FLEET_REPORT_H
#define SB_REPLAY_FLEET_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "replay/result.h"

/* Whether any result ran more than one gateway, bypass traffic or restarts. */
bool sb_replay_any_fleet_events(const sb_replay_result *r, size_t n);

/* One row per result: gateways and the largest gateway's share of the routed requests,
 * restarts, gateway requests lost to them, bypassed requests (completed, failed) and their TTFT. */
void sb_replay_write_fleet_table(FILE *f, const sb_replay_result *r, size_t n);

/* results.csv columns (a leading comma each): gateways,gateway_max_share,restarts,failed,
 * bypass_requests,bypass_completed,bypass_failed,bypass_ttft_p50_ms,bypass_ttft_p90_ms,
 * bypass_ttft_p99_ms. */
void sb_replay_write_fleet_csv_header(FILE *f);
void sb_replay_write_fleet_csv_row(FILE *f, const sb_replay_result *x);

#endif
