/* report: what a replay prints and writes: the markdown table, results.csv, and the gnuplot
 * data and scripts for the TTFT CDF and p90-TTFT-versus-rate plots.
 *
 * Writers take open streams (the caller opens files and runs gnuplot) and format numbers with
 * fixed precision, so the same results give byte-identical output. Results are in the order
 * given: one per (rate, policy), rates grouped. Not for: wall-clock figures (they differ run
 * to run; the command prints them to stderr). */
#ifndef SB_REPLAY_REPORT_H
#define SB_REPLAY_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "replay/driver.h"

/* The CSV's first columns, in this order (issue 6); more follow them. */
#define SB_REPLAY_CSV_COLUMNS                                                                                          \
    "policy,rate,requests,completed,shed,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,e2e_p50_ms,e2e_p99_ms,itl_p50_ms,"        \
    "output_tok_s,hit_rate,imbalance_cv"

/* Header line then one line per result. */
void sb_replay_write_csv(FILE *f, const sb_replay_result *r, size_t n);
/* A markdown table of the main columns. */
void sb_replay_write_table(FILE *f, const sb_replay_result *r, size_t n);

/* Number of distinct rates among the results (a sweep has more than one). */
size_t sb_replay_distinct_rates(const sb_replay_result *r, size_t n);

/* gnuplot data: per distinct rate, one block per policy of (ttft_ms, fraction) points (at most
 * 512 per policy, at evenly spaced ranks), blocks separated by two blank lines (gnuplot's
 * `index`). */
void sb_replay_write_cdf_data(FILE *f, const sb_replay_result *r, size_t n);
/* gnuplot script drawing the CDFs from data_file into one PNG per rate, named
 * png_prefix + ".png" (one rate) or png_prefix + "_rate<R>.png" (R as %g). */
void sb_replay_write_cdf_script(FILE *f, const sb_replay_result *r, size_t n, const char *data_file,
                                const char *png_prefix);
/* gnuplot data and script for p90 TTFT against rate, one line per policy (sweeps). */
void sb_replay_write_p90_data(FILE *f, const sb_replay_result *r, size_t n);
void sb_replay_write_p90_script(FILE *f, const sb_replay_result *r, size_t n, const char *data_file,
                                const char *png_file);

#endif
