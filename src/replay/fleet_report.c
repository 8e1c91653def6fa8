/* fleet_report: the table and CSV columns of gateways, bypass traffic and restarts. */
#include "replay/fleet_report.h"

bool sb_replay_any_fleet_events(const sb_replay_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].n_gateways > 1 || r[i].restarts || r[i].bypass_requests)
            return true;
    return false;
}

/* The busiest gateway's share of the requests the gateways dispatched (1/G when even). */
static double max_share(const sb_replay_result *x)
{
    uint64_t total = 0, top = 0;
    for (uint32_t g = 0; x->per_gateway && g < x->n_gateways; g++) {
        total += x->per_gateway[g];
        top = x->per_gateway[g] > top ? x->per_gateway[g] : top;
    }
    return total ? (double)top / (double)total : 0;
}

void sb_replay_write_fleet_table(FILE *f, const sb_replay_result *r, size_t n)
{
    fputs("| policy | rate | gateways | busiest gateway share | restarts | failed | bypass requests | completed "
          "| failed | bypass TTFT p50 ms | p90 | p99 |\n",
          f);
    fputs("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", f);
    for (size_t i = 0; i < n; i++) {
        const sb_replay_result *x = &r[i];
        fprintf(f, "| %s | %.3g | %u | %.3f | %llu | %llu | %llu | %llu | %llu | %.1f | %.1f | %.1f |\n", x->policy,
                x->rate, x->n_gateways, max_share(x), (unsigned long long)x->restarts, (unsigned long long)x->failed,
                (unsigned long long)x->bypass_requests, (unsigned long long)x->bypass_completed,
                (unsigned long long)x->bypass_failed, x->bypass_ttft_p50_ms, x->bypass_ttft_p90_ms,
                x->bypass_ttft_p99_ms);
    }
}

void sb_replay_write_fleet_csv_header(FILE *f)
{
    fputs(",gateways,gateway_max_share,restarts,failed,bypass_requests,bypass_completed,bypass_failed,"
          "bypass_ttft_p50_ms,bypass_ttft_p90_ms,bypass_ttft_p99_ms",
          f);
}

void sb_replay_write_fleet_csv_row(FILE *f, const sb_replay_result *x)
{
    fprintf(f, ",%u,%.4f,%llu,%llu,%llu,%llu,%llu,%.3f,%.3f,%.3f", x->n_gateways, max_share(x),
            (unsigned long long)x->restarts, (unsigned long long)x->failed, (unsigned long long)x->bypass_requests,
            (unsigned long long)x->bypass_completed, (unsigned long long)x->bypass_failed, x->bypass_ttft_p50_ms,
            x->bypass_ttft_p90_ms, x->bypass_ttft_p99_ms);
}
