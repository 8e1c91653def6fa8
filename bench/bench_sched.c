// Build and run (from the repository root; a line comment, since the glob holds a "*/"):
//   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/bench_sched.c src/core/*.c src/core/*/*.c src/base/*.c
//       -lxxhash -lm -o /tmp/bench_sched && /tmp/bench_sched

/* bench_sched: decision time (filters + scorers + picker) of the `default` profile through
 * sb_router_pick, for pools of 8, 64, 256 and 1024 endpoints with varied reports; and through
 * sb_decide (core/decide.h) asking for the pick plus 7 ranked fallbacks, what an endpoint
 * picker behind Envoy asks for (the proxy asks for the pick alone).
 *
 * Each figure is the median of 5 runs; a run times enough decisions to cover ~4M endpoint
 * evaluations, so the small pools are not dominated by clock reads. The state is held
 * constant (no dispatch between picks) so every run measures the same decision; only the
 * random tie-break advances. Prints figures only: a benchmark never fails a build. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "core/decide.h"
#include "core/router.h"

#define RUNS 5

/* A pool of n endpoints as a real fleet looks between two scrapes: mixed queues and KV
 * use, some own traffic since the report, a few saturated, a few unhealthy, LoRA state. */
static sb_router *make_pool(size_t n, sb_ns now)
{
    sb_router *r = sb_router_new(0x5eed, 0x5ec7e7);
    if (!r || sb_router_add_pool(r, "bench", sb_profile_builtin("default"), n, NULL) < 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 12345;
    for (uint32_t i = 0; i < n; i++) {
        sb_endpoint *ep = sb_router_endpoint(r, 0, i);
        sb_endpoint_report rep = {
            .have_running = true, .running = (double)(sb_rand_next(&s) % 32),
            .have_waiting = true, .waiting = (double)(sb_rand_next(&s) % 8),
            .have_kv = true, .kv_usage = sb_rand_unit(&s) * 0.95,
            .have_capacity = true, .block_size = 16, .num_gpu_blocks = 8192,
            .have_lora = true, .max_lora = 4, .lora_running_count = (uint32_t)(sb_rand_next(&s) % 5),
            .lora_running_mask = sb_rand_next(&s) & 0xf, .lora_waiting_mask = sb_rand_next(&s) & 0xf,
            .requests_total = 1000,
        };
        sb_endpoint_report_set(ep, &rep, SB_REPORT_SCRAPE, now - SB_MS(sb_rand_next(&s) % 200));
        for (uint64_t k = sb_rand_next(&s) % 4; k > 0; k--)
            sb_endpoint_dispatch(ep, 500 + (uint32_t)(sb_rand_next(&s) % 2000), now);
        if (i % 50 == 7)
            ep->draining = true;
    }
    return r;
}

/* ranked: 0 times sb_router_pick, else sb_decide asking for that many endpoints. */
static double run_once(sb_router *r, size_t iters, sb_ns now, int adapter, size_t ranked)
{
    sb_request_desc req = {.sched = {.pool = 0, .adapter = adapter, .prompt_tokens = 1000}};
    sb_ranking rk;
    volatile int sink = 0;
    sb_ns t0 = clock_ns();
    for (size_t i = 0; i < iters; i++)
        sink += ranked ? sb_decide(r, &req, ranked, now, &rk) : sb_router_pick(r, &req.sched, now);
    sb_ns t1 = clock_ns();
    (void)sink;
    return (double)(t1 - t0) / (double)iters;
}

int main(void)
{
    const size_t sizes[] = {8, 64, 256, 1024};
    const sb_ns now = SB_MS(100000);
    double base_ns = 0;
    /* Print the profile as it is now: its composition changes as the project measures. */
    const sb_profile *prof = sb_profile_builtin("default");
    printf("decision time, profile `default` (");
    for (size_t i = 0; i < prof->n_filters; i++)
        printf("%s%s", i ? ", " : "", prof->filters[i]->name);
    printf(" |");
    for (size_t i = 0; i < prof->n_scorers; i++)
        printf("%s %s %g", i ? "," : "", prof->scorers[i].def->name, prof->scorers[i].weight);
    printf(" | %s), requests without prompt blocks, median of %d runs\n\n", prof->picker->name, RUNS);
    printf("%10s %12s %14s %12s %14s %14s %10s\n", "endpoints", "iterations", "ns/decision", "ns/endpoint",
           "adapter ns/dec", "8 ranked ns", "vs n=8");
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        size_t n = sizes[z];
        size_t iters = 4000000 / n;
        sb_router *r = make_pool(n, now);
        run_once(r, iters / 10 + 1, now, -1, 0); /* warm caches */
        double t[RUNS], ta[RUNS], tr[RUNS];
        for (int k = 0; k < RUNS; k++) {
            t[k] = run_once(r, iters, now, -1, 0);
            ta[k] = run_once(r, iters, now, 2, 0);
            tr[k] = run_once(r, iters, now, -1, SB_DECIDE_MAX_RANKED);
        }
        qsort(t, RUNS, sizeof(double), cmp_double);
        qsort(ta, RUNS, sizeof(double), cmp_double);
        qsort(tr, RUNS, sizeof(double), cmp_double);
        double med = t[RUNS / 2];
        if (z == 0)
            base_ns = med;
        printf("%10zu %12zu %14.0f %12.1f %14.0f %14.0f %9.1fx\n", n, iters, med, med / (double)n, ta[RUNS / 2],
               tr[RUNS / 2], med / base_ns);
        sb_router_free(r);
    }
    return 0;
}
