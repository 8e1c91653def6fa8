/* bench_prom: the cost of one probe cycle's parse, on the largest real vLLM /metrics capture.
 *
 * Build and run from the repository root (to be wired into `make bench`):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -g -Isrc bench/bench_prom.c src/proto/prom_parse.c \
 *       src/proto/engine_metrics.c -lm -o build/bench_prom && build/bench_prom [file] [iterations]
 *
 * Prints ns per parse and MB/s for three ways of reading the same body, side by side:
 *   all       every sample parsed (no filter);
 *   filtered  only the families the vLLM mapping reads (~14 names), the rest skipped by memchr;
 *   report    the whole probe step: filtered parse + mapping into an sb_engine_report.
 * Figures only: a benchmark never decides whether a build passes. */
#include "proto/engine_metrics.h"
#include "proto/prom_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile double sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct result {
    double ns;
    unsigned samples;
} result;

/* Both modes drive the same cursor, so the ratio is the filter's doing alone. */
static result run_parse(const char *body, size_t len, long iters, sb_prom_want_fn want, void *want_ud)
{
    double acc = 0, t0 = now_s();
    unsigned samples = 0;
    result r;

    for (long i = 0; i < iters; i++) {
        sb_prom_parser p;
        sb_prom_sample s;
        int rc;

        sb_prom_init(&p, want, want_ud);
        sb_prom_feed(&p, body, len);
        while ((rc = sb_prom_next(&p, &s)) != SB_PROM_END)
            if (rc == SB_PROM_SAMPLE)
                acc += s.value + (double)s.n_labels;
        samples = p.n_samples;
    }
    r.ns = (now_s() - t0) * 1e9 / (double)iters;
    r.samples = samples;
    sink = acc;
    return r;
}

static result run_report(const char *body, size_t len, long iters, const sb_engine_map *m)
{
    sb_engine_report rep;
    double t0 = now_s(), acc = 0;
    result r;

    for (long i = 0; i < iters; i++) {
        sb_engine_metrics_parse(m, body, len, &rep);
        acc += rep.running + rep.kv_usage;
    }
    r.ns = (now_s() - t0) * 1e9 / (double)iters;
    r.samples = rep.n_samples;
    sink = acc;
    return r;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/fixtures/metrics/vllm/v0_qwen2.5-coder-1.5b_truncated.prom";
    long iters = argc > 2 ? atol(argv[2]) : 200000;
    sb_engine_map m;
    result all, filt, rep;
    FILE *f = fopen(path, "rb");
    char *body;
    long len;

    if (!f) {
        fprintf(stderr, "bench_prom: cannot open %s (run from the repository root)\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    body = malloc((size_t)len);
    if (!body || fread(body, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "bench_prom: cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    sb_engine_map_init(&m, SB_ENGINE_VLLM, NULL);

    /* Warm caches and branch predictors once, then measure. */
    run_parse(body, (size_t)len, iters / 10 + 1, NULL, NULL);
    all = run_parse(body, (size_t)len, iters, NULL, NULL);
    filt = run_parse(body, (size_t)len, iters, sb_engine_map_want, &m);
    rep = run_report(body, (size_t)len, iters, &m);

    printf("bench_prom: %s (%ld bytes), %ld parses each\n", path, len, iters);
    printf("  %-9s %9s %9s %8s %8s\n", "mode", "ns/parse", "MB/s", "samples", "vs all");
    printf("  %-9s %9.0f %9.1f %8u %7.2fx\n", "all", all.ns, (double)len / all.ns * 1e3, all.samples, 1.0);
    printf("  %-9s %9.0f %9.1f %8u %7.2fx\n", "filtered", filt.ns, (double)len / filt.ns * 1e3, filt.samples,
           all.ns / filt.ns);
    printf("  %-9s %9.0f %9.1f %8u %7.2fx\n", "report", rep.ns, (double)len / rep.ns * 1e3, rep.samples,
           all.ns / rep.ns);
    free(body);
    return 0;
}
