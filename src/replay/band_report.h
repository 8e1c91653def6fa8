/* band_report: what a replay with flow control, priority bands or adaptive weights reports on
 * top of replay/report.h: a table per band (requests, completed, refused, expired, TTFT with
 * the queue wait), a table of the adaptive loop's activity, and the same figures as extra
 * results.csv columns appended after report.h's (the 14 required columns stay first).
 *
 * Same rules as report.h: writers take open streams and print fixed precision, so the same
 * results give byte-identical output. Not for: the main columns (report.h). */
#ifndef SB_REPLAY_BAND_REPORT_H
#define SB_REPLAY_BAND_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "replay/driver.h"

/* Whether any result has per-band figures (flow control or a band mix), or adaptive ones. */
bool sb_replay_any_bands(const sb_replay_result *r, size_t n);
bool sb_replay_any_adaptive(const sb_replay_result *r, size_t n);

/* A markdown table, one row per (result, band), of the results that have bands. */
void sb_replay_write_band_table(FILE *f, const sb_replay_result *r, size_t n);
/* A markdown table, one row per result that ran adaptive weights. */
void sb_replay_write_adaptive_table(FILE *f, const sb_replay_result *r, size_t n);

/* results.csv: report.h's header and rows (sb_replay_write_csv) and, when any result has
 * bands or adaptive figures, these columns after them on every row (zeros where a run has no
 * such figure): refused,expired,adaptive_generations,adaptive_share_mean,adaptive_share_max,
 * then per band B in critical, standard, sheddable: B_requests,B_completed,B_shed,B_refused,
 * B_expired,B_ttft_p50_ms,B_ttft_p90_ms,B_ttft_p99_ms,B_wait_mean_ms; then, when any result
 * has fleet events, replay/fleet_report.h's columns.
 * Returns 0, or -1 when memory for the staging buffer ran out (nothing written). */
int sb_replay_write_csv_extended(FILE *f, const sb_replay_result *r, size_t n);

#endif
