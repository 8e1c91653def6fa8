// Build and run: make build/bench/bench_decisions && build/bench/bench_decisions

/* bench_decisions: what keeping each request's decision costs on the request path
 * (net/decisions.h): sb_decisions_record copies the router's decision into the ring's next
 * slot (names, addresses, scores; no JSON, no allocation), and sb_decisions_finish writes
 * the outcome. Side by side with the decision itself (sb_router_pick, profile `default`) for
 * pools of 8, 64 and 256 endpoints, records of 16 candidates (admin.decision_candidates'
 * default) in a ring of 512 (admin.decisions'), so a 64- or 256-endpoint pool also pays for
 * choosing which 16 to keep. Then the admin side, off the request path: rendering one
 * record as JSON, and a look-up by id that misses (a scan of the whole ring).
 *
 * Medians of 5 runs; ids like a UUID, addresses like "10.1.2.3:8000". Prints figures only:
 * a benchmark never fails a build. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "core/explain.h"
#include "core/router.h"
#include "net/decisions.h"

#define RUNS 5

static char (*addrs)[32];

/* A pool of n endpoints with varied fresh reports, as in bench_sched.c. */
static sb_router *make_pool(size_t n, sb_ns now)
{
    sb_router *r = sb_router_new(0x5eed, 0x5ec7e7);
    addrs = realloc(addrs, n * sizeof(*addrs));
    if (!r || !addrs || sb_router_add_pool(r, "chat-llama-70b", sb_profile_builtin("default"), n, NULL) < 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 12345;
    for (uint32_t i = 0; i < n; i++) {
        sb_endpoint *ep = sb_router_endpoint(r, 0, i);
        snprintf(addrs[i], sizeof addrs[i], "10.1.%u.%u:8000", i / 250, i % 250 + 1);
        ep->address = addrs[i];
        sb_endpoint_report rep = {
            .have_running = true,
            .running = (double)(sb_rand_next(&s) % 32),
            .have_waiting = true,
            .waiting = (double)(sb_rand_next(&s) % 8),
            .have_kv = true,
            .kv_usage = sb_rand_unit(&s) * 0.95,
            .requests_total = 1000,
        };
        sb_endpoint_report_set(ep, &rep, SB_REPORT_SCRAPE, now - SB_MS(sb_rand_next(&s) % 200));
    }
    return r;
}

static double median(double *t)
{
    qsort(t, RUNS, sizeof(double), cmp_double);
    return t[RUNS / 2];
}

int main(void)
{
    const size_t sizes[] = {8, 64, 256};
    const sb_ns now = SB_MS(100000);
    const char *id = "3f2b9c1e-7d4a-4e8b-9a61-0c5d2e7f8a90";
    printf("per request: the decision (sb_router_pick, `default`) and keeping it (record + outcome),\n"
           "ring of 512 records of 16 candidates; median of %d runs\n\n",
           RUNS);
    printf("%10s %14s %14s %12s %14s %16s\n", "endpoints", "ns/decision", "ns/record+fin", "vs decision", "ns/render",
           "ns/miss (512)");
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z];
        sb_router *r = make_pool(n, now);
        sb_decisions *ring = sb_decisions_new(512, 16);
        sb_sched_request rq = {.pool = 0, .adapter = -1, .prompt_tokens = 1000};
        size_t iters = 2000000 / n + 1000;
        double td[RUNS], tr[RUNS], tj[RUNS], tm[RUNS];
        volatile int sink = 0;
        for (int k = 0; k < RUNS; k++) {
            sb_ns t0 = clock_ns();
            for (size_t i = 0; i < iters; i++)
                sink += sb_router_pick(r, &rq, now);
            sb_ns t1 = clock_ns();
            const sb_decision *d = sb_router_last_decision(r, 0);
            for (size_t i = 0; i < iters; i++) {
                sb_decision_ref ref = sb_decisions_record(ring, d, id, "meta-llama/Llama-3.1-70B-Instruct", 1);
                sb_decisions_finish(&ref, 200, 123.4, 1, addrs[0]);
            }
            sb_ns t2 = clock_ns();
            sb_buf b = {0};
            size_t renders = iters / 10 + 1;
            for (size_t i = 0; i < renders; i++) {
                sb_buf_reset(&b);
                sb_explain_render(sb_decisions_newest(ring, 0), SB_EXPLAIN_FULL, &b);
            }
            sb_ns t3 = clock_ns();
            sb_buf_free(&b);
            size_t finds = 2000;
            for (size_t i = 0; i < finds; i++)
                sink += sb_decisions_find(ring, "not-there-at-all", 16) != NULL;
            sb_ns t4 = clock_ns();
            td[k] = (double)(t1 - t0) / (double)iters;
            tr[k] = (double)(t2 - t1) / (double)iters;
            tj[k] = (double)(t3 - t2) / (double)renders;
            tm[k] = (double)(t4 - t3) / (double)finds;
        }
        (void)sink;
        double md = median(td), mr = median(tr);
        printf("%10zu %14.0f %14.0f %11.1f%% %14.0f %16.0f\n", n, md, mr, 100.0 * mr / md, median(tj), median(tm));
        sb_decisions_release(ring);
        sb_router_free(r);
    }
    free(addrs);
    return 0;
}
