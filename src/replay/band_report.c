/* band_report: per-band and adaptive tables and CSV columns. */
#include "replay/band_report.h"

#include <stdlib.h>
#include <string.h>

#include "replay/fleet_report.h"
#include "replay/report.h"

bool sb_replay_any_bands(const sb_replay_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].have_bands)
            return true;
    return false;
}

bool sb_replay_any_adaptive(const sb_replay_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].adaptive)
            return true;
    return false;
}

void sb_replay_write_band_table(FILE *f, const sb_replay_result *r, size_t n)
{
    fputs("| policy | rate | band | requests | completed | shed | refused 429 | expired 503 | TTFT p50 ms | p90 | p99 "
          "| queued | mean wait ms |\n",
          f);
    fputs("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", f);
    for (size_t i = 0; i < n; i++) {
        if (!r[i].have_bands)
            continue;
        for (int b = 0; b < SB_BAND_COUNT; b++) {
            const sb_replay_band_result *x = &r[i].band[b];
            fprintf(f, "| %s | %.3g | %s | %llu | %llu | %llu | %llu | %llu | %.1f | %.1f | %.1f | %llu | %.1f |\n",
                    r[i].policy, r[i].rate, sb_band_name((enum sb_band)b), (unsigned long long)x->requests,
                    (unsigned long long)x->completed, (unsigned long long)x->shed, (unsigned long long)x->refused,
                    (unsigned long long)x->expired, x->ttft_p50_ms, x->ttft_p90_ms, x->ttft_p99_ms,
                    (unsigned long long)x->queued, x->wait_mean_ms);
        }
    }
}

void sb_replay_write_adaptive_table(FILE *f, const sb_replay_result *r, size_t n)
{
    fputs("| policy | rate | ticks | snapshots published | imbalance regime changes | distribution share mean | max "
          "|\n",
          f);
    fputs("|---|---:|---:|---:|---:|---:|---:|\n", f);
    for (size_t i = 0; i < n; i++) {
        const sb_replay_result *x = &r[i];
        if (x->adaptive)
            fprintf(f, "| %s | %.3g | %llu | %llu | %llu | %.3f | %.3f |\n", x->policy, x->rate,
                    (unsigned long long)x->adaptive_ticks, (unsigned long long)x->adaptive_generations,
                    (unsigned long long)x->imbalance_changes, x->share_mean, x->share_max);
    }
}

static void extra_header(FILE *f)
{
    fputs(",refused,expired,adaptive_generations,adaptive_share_mean,adaptive_share_max", f);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        const char *s = sb_band_name((enum sb_band)b);
        fprintf(f,
                ",%s_requests,%s_completed,%s_shed,%s_refused,%s_expired,%s_ttft_p50_ms,%s_ttft_p90_ms,"
                "%s_ttft_p99_ms,%s_wait_mean_ms",
                s, s, s, s, s, s, s, s, s);
    }
}

static void extra_row(FILE *f, const sb_replay_result *x)
{
    fprintf(f, ",%llu,%llu,%llu,%.4f,%.4f", (unsigned long long)x->refused, (unsigned long long)x->expired,
            (unsigned long long)x->adaptive_generations, x->share_mean, x->share_max);
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        const sb_replay_band_result *y = &x->band[b];
        fprintf(f, ",%llu,%llu,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.3f", (unsigned long long)y->requests,
                (unsigned long long)y->completed, (unsigned long long)y->shed, (unsigned long long)y->refused,
                (unsigned long long)y->expired, y->ttft_p50_ms, y->ttft_p90_ms, y->ttft_p99_ms, y->wait_mean_ms);
    }
}

/* report.c writes the main columns; its lines are staged and the extra columns appended to
 * each, so the two writers cannot drift apart on the first columns. Policy names never hold a
 * newline (profile names are [A-Za-z0-9._+-]), so one line is one result. */
int sb_replay_write_csv_extended(FILE *f, const sb_replay_result *r, size_t n)
{
    bool bands = sb_replay_any_bands(r, n) || sb_replay_any_adaptive(r, n);
    bool fleet = sb_replay_any_fleet_events(r, n);
    if (!bands && !fleet) {
        sb_replay_write_csv(f, r, n);
        return 0;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return -1;
    sb_replay_write_csv(m, r, n);
    if (fclose(m) != 0) {
        free(buf);
        return -1;
    }
    size_t row = 0;
    for (char *line = buf, *nl; line < buf + len && (nl = memchr(line, '\n', (size_t)(buf + len - line)));
         line = nl + 1, row++) {
        fwrite(line, 1, (size_t)(nl - line), f);
        if (row == 0) {
            if (bands)
                extra_header(f);
            if (fleet)
                sb_replay_write_fleet_csv_header(f);
        } else if (row <= n) {
            if (bands)
                extra_row(f, &r[row - 1]);
            if (fleet)
                sb_replay_write_fleet_csv_row(f, &r[row - 1]);
        }
        fputc('\n', f);
    }
    free(buf); /* open_memstream's buffer is libc's: plain free */
    return 0;
}
