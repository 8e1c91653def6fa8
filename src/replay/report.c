/* report: fixed-precision text writers for replay results. */
#include "replay/report.h"

#include <string.h>

/* Policy names come from the registry or a config's profile names: quote them if needed. */
static void csv_name(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void sb_replay_write_csv(FILE *f, const sb_replay_result *r, size_t n)
{
    fputs(SB_REPLAY_CSV_COLUMNS ",ttft_mean_ms,makespan_s,replicas,prompt_tokens,cached_tokens,output_tokens,"
                                "preemptions,engine_steps\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const sb_replay_result *x = &r[i];
        csv_name(f, x->policy);
        fprintf(f,
                ",%.4f,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.4f,%.4f,%.3f,%.3f,%u,%llu,%llu,%llu,%llu,"
                "%llu\n",
                x->rate, (unsigned long long)x->requests, (unsigned long long)x->completed, (unsigned long long)x->shed,
                x->ttft_p50_ms, x->ttft_p90_ms, x->ttft_p99_ms, x->e2e_p50_ms, x->e2e_p99_ms, x->itl_p50_ms,
                x->output_tok_s, x->hit_rate, x->imbalance_cv, x->ttft_mean_ms, x->makespan_s, x->n_replicas,
                (unsigned long long)x->prompt_tokens, (unsigned long long)x->cached_tokens,
                (unsigned long long)x->output_tokens, (unsigned long long)x->preemptions,
                (unsigned long long)x->engine_steps);
    }
}

void sb_replay_write_table(FILE *f, const sb_replay_result *r, size_t n)
{
    fputs("| policy | rate | requests | completed | shed | TTFT p50 ms | p90 | p99 | E2E p50 ms | p99 | ITL p50 ms "
          "| out tok/s | hit rate | imbalance CV |\n",
          f);
    fputs("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", f);
    for (size_t i = 0; i < n; i++) {
        const sb_replay_result *x = &r[i];
        fprintf(f,
                "| %s | %.3g | %llu | %llu | %llu | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.0f | %.3f | %.3f |\n",
                x->policy, x->rate, (unsigned long long)x->requests, (unsigned long long)x->completed,
                (unsigned long long)x->shed, x->ttft_p50_ms, x->ttft_p90_ms, x->ttft_p99_ms, x->e2e_p50_ms,
                x->e2e_p99_ms, x->itl_p50_ms, x->output_tok_s, x->hit_rate, x->imbalance_cv);
    }
}

size_t sb_replay_distinct_rates(const sb_replay_result *r, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += i == 0 || r[i].rate != r[i - 1].rate;
    return k;
}

#define CDF_POINTS 512

void sb_replay_write_cdf_data(FILE *f, const sb_replay_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const sb_replay_result *x = &r[i];
        fprintf(f, "# %s rate %.4f\n", x->policy, x->rate);
        size_t m = x->n_ttft;
        size_t pts = m < CDF_POINTS ? m : CDF_POINTS;
        for (size_t k = 0; k < pts; k++) {
            size_t idx = pts > 1 ? k * (m - 1) / (pts - 1) : 0;
            fprintf(f, "%.3f %.5f\n", (double)x->ttft_sorted[idx] * 1e-6, (double)(idx + 1) / (double)m);
        }
        if (!pts)
            fputs("0 0\n", f); /* keep the index numbering: an empty block would be skipped */
        fputs("\n\n", f);
    }
}

static void script_head(FILE *f)
{
    /* pngcairo draws antialiased lines; plain png (libgd) is the fallback of minimal builds. */
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 960,600 } "
          "else { set terminal png size 960,600 }\n"
          "set grid\nset key bottom right\n",
          f);
}

static void quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void sb_replay_write_cdf_script(FILE *f, const sb_replay_result *r, size_t n, const char *data_file,
                                const char *png_prefix)
{
    script_head(f);
    fputs("set xlabel 'time to first token (ms)'\nset ylabel 'fraction of requests'\nset yrange [0:1]\n"
          "set logscale x\n",
          f);
    size_t rates = sb_replay_distinct_rates(r, n);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && r[j].rate == r[i].rate)
            j++;
        char png[4096];
        if (rates > 1)
            snprintf(png, sizeof(png), "%s_rate%g.png", png_prefix, r[i].rate);
        else
            snprintf(png, sizeof(png), "%s.png", png_prefix);
        fputs("set output ", f);
        quoted(f, png);
        fprintf(f, "\nset title 'TTFT CDF, %.4g requests/s'\nplot ", r[i].rate);
        for (size_t k = i; k < j; k++) {
            fputs(k > i ? ", \\\n     " : "", f);
            quoted(f, data_file);
            fprintf(f, " index %zu using 1:2 with lines lw 2 title ", k);
            quoted(f, r[k].policy);
        }
        fputs("\n", f);
        i = j;
    }
}

/* Policies in order of first appearance. */
static bool seen_before(const sb_replay_result *r, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (!strcmp(r[k].policy, r[i].policy))
            return true;
    return false;
}

void sb_replay_write_p90_data(FILE *f, const sb_replay_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (seen_before(r, i))
            continue;
        fprintf(f, "# %s\n", r[i].policy);
        for (size_t k = i; k < n; k++)
            if (!strcmp(r[k].policy, r[i].policy))
                fprintf(f, "%.4f %.3f\n", r[k].rate, r[k].ttft_p90_ms);
        fputs("\n\n", f);
    }
}

void sb_replay_write_p90_script(FILE *f, const sb_replay_result *r, size_t n, const char *data_file,
                                const char *png_file)
{
    script_head(f);
    fputs("set key top left\nset xlabel 'request rate (requests/s)'\nset ylabel 'p90 time to first token (ms)'\n"
          "set logscale y\nset title 'p90 TTFT against request rate'\nset output ",
          f);
    quoted(f, png_file);
    fputs("\nplot ", f);
    size_t block = 0;
    for (size_t i = 0; i < n; i++) {
        if (seen_before(r, i))
            continue;
        fputs(block ? ", \\\n     " : "", f);
        quoted(f, data_file);
        fprintf(f, " index %zu using 1:2 with linespoints lw 2 title ", block++);
        quoted(f, r[i].policy);
    }
    fputs("\n", f);
}
