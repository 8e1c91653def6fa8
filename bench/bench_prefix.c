/* bench_prefix: the prefix index and a whole routing decision as the gateway makes it.
 *
 *   1. index insert and lookup rates, and bytes per (block, endpoint) entry, for a warm index
 *      (16 endpoints, 64-block prompts from 2,000 prefix families);
 *   2. decision time against prompt length (1 KiB .. 1 MiB of chat JSON) and endpoint count
 *      (8, 64, 256): inspect + hash the body (proto/inspect), then sb_router_pick with the
 *      `default` profile (prefix lookup, filters, scorers, picker, recording the blocks).
 * Figures are medians of 5 runs. Built by `make bench` (build/bench/bench_prefix). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "bench_util.h"
#include "core/prefix_index.h"
#include "core/router.h"
#include "proto/prompt.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double median5(double v[5])
{
    qsort(v, 5, sizeof(double), cmp_double);
    return v[2];
}

static void family(uint64_t f, size_t n, uint64_t *out)
{
    uint64_t h = f * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= i;
        out[i] = h;
    }
}

static void bench_index(void)
{
    enum { EPS = 16, BLOCKS = 64, FAMILIES = 2000, OPS = 200000 };
    static uint64_t hs[BLOCKS];
    static uint32_t match[EPS];
    double ins[5], look[5];
    size_t entries = 0, bytes = 0;
    for (int r = 0; r < 5; r++) {
        sb_prefix_index *ix = sb_prefix_index_new(EPS, 1u << 22, 29205, 0x5ec7e7);
        uint64_t x = 12345;
        double t0 = now_s();
        for (int i = 0; i < OPS; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            family((x >> 33) % FAMILIES, BLOCKS, hs);
            sb_prefix_index_insert(ix, (uint32_t)((x >> 20) % EPS), hs, BLOCKS);
        }
        double t1 = now_s();
        size_t sink = 0;
        for (int i = 0; i < OPS; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            family((x >> 33) % FAMILIES, BLOCKS, hs);
            sink += sb_prefix_index_match(ix, hs, BLOCKS, match);
        }
        double t2 = now_s();
        if (sink == 0)
            printf("(no matches)\n");
        ins[r] = (double)OPS * BLOCKS / (t1 - t0);
        look[r] = (double)OPS * BLOCKS / (t2 - t1);
        entries = sb_prefix_index_entries(ix);
        bytes = sb_prefix_index_bytes(ix);
        sb_prefix_index_free(ix);
    }
    printf("prefix index: %d endpoints, %d-block prompts, %d families (warm)\n", EPS, BLOCKS, FAMILIES);
    printf("  insert  %.1f M blocks/s (%.0f ns per 64-block prompt)\n", median5(ins) / 1e6,
           1e9 * BLOCKS / median5(ins));
    printf("  lookup  %.1f M blocks/s (%.0f ns per 64-block prompt)\n", median5(look) / 1e6,
           1e9 * BLOCKS / median5(look));
    printf("  memory  %zu entries, %zu bytes: %.1f bytes per (block, endpoint) entry\n\n", entries, bytes,
           (double)bytes / (double)entries);
}

/* A chat body of about `bytes` bytes: a shared system prompt and a short question; with
 * `escapes`, the text carries a JSON escape (\n or \") about every 20 bytes (code, quoted
 * dialogue), else plain prose. */
static char *make_body(size_t bytes, int variant, bool escapes, size_t *len)
{
    sb_buf b = {0};
    sb_buf_puts(&b, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"");
    static const char *words[] = {"alpha ", "bravo ", "charlie ", "delta ", "echo\\n", "fox ", "golf \\\"q\\\" "};
    static const char *plain[] = {"alpha ", "bravo ", "charlie ", "delta ", "echo ", "fox ", "golf "};
    size_t i = 0;
    while (b.len < bytes)
        sb_buf_puts(&b, (escapes ? words : plain)[i++ % 7]);
    sb_buf_printf(&b, "\"},{\"role\":\"user\",\"content\":\"question %d\"}],\"stream\":true}", variant);
    return sb_buf_steal(&b, len);
}

static void bench_decisions(void)
{
    static const size_t sizes[] = {1024, 32 * 1024, 256 * 1024, 1024 * 1024};
    static const uint32_t counts[] = {8, 64, 256};
    printf("decision time (median of 5): inspect + hash the body, then sb_router_pick (`default`)\n");
    printf("%10s %8s %9s %12s %12s %12s %9s\n", "prompt", "text", "endpoints", "hash us", "pick us", "total us",
           "blocks");
    for (int esc = 0; esc < 2; esc++)
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            uint32_t E = counts[ci];
            sb_router *r = sb_router_new(7, 0x5ec7e7);
            sb_pool_params pp = sb_pool_params_default();
            sb_router_add_pool(r, "p", sb_profile_builtin("default"), E, &pp);
            sb_router_add_model(r, 0, "m", SB_MODEL_SERVED);
            for (uint32_t e = 0; e < E; e++) {
                sb_endpoint_report rep = {.have_running = true, .running = e % 5, .have_waiting = true,
                                          .waiting = e % 3, .have_kv = true, .kv_usage = 0.1 * (e % 7),
                                          .requests_total = -1};
                sb_endpoint_report_set(sb_router_endpoint(r, 0, e), &rep, SB_REPORT_SCRAPE, 1);
            }
            size_t len;
            char *body = make_body(sizes[si], 0, esc, &len);
            size_t cap = len / 64 + 16;
            uint64_t *hashes = malloc(cap * sizeof(uint64_t));
            sb_inspect_ctx ictx = {.json.max_tokens = 1u << 20};
            int iters = sizes[si] >= 256 * 1024 ? 40 : sizes[si] >= 32 * 1024 ? 400 : 4000;
            double th[5], tp[5];
            size_t nblocks = 0;
            for (int run = 0; run < 5; run++) {
                double hash_t = 0, pick_t = 0;
                for (int it = 0; it < iters; it++) {
                    double t0 = now_s();
                    sb_inspect_result res;
                    sb_inspect(&ictx, SB_API_CHAT, body, len, &res);
                    sb_prompt_hashes ph = {.hashes = hashes, .cap = cap};
                    sb_prompt_hash(&ictx, body, &res, sb_prompt_seed("m", 1, "", 0), 64, &ph);
                    double t1 = now_s();
                    sb_sched_request rq = {.pool = 0, .adapter = -1, .block_hashes = ph.hashes, .n_blocks = ph.n,
                                           .prompt_bytes = ph.prompt_bytes, .prompt_tokens = (uint32_t)(ph.prompt_bytes / 4)};
                    int ep = sb_router_pick(r, &rq, 2);
                    double t2 = now_s();
                    if (ep < 0) {
                        printf("no pick\n");
                    } else {
                        /* The request's life, untimed, as the gateway reports it: its blocks
                         * stop being pending at the first token, so the next pick of the same
                         * prompt walks the whole match, as a warm index does. */
                        sb_ticket tk = sb_router_dispatched(r, 0, (uint32_t)ep, rq.prompt_tokens, 2);
                        sb_router_first_token(r, 0, (uint32_t)ep, &tk);
                        sb_router_finished(r, 0, (uint32_t)ep, &tk, true, true, 2);
                    }
                    hash_t += t1 - t0;
                    pick_t += t2 - t1;
                    nblocks = ph.n;
                }
                th[run] = hash_t / iters * 1e6;
                tp[run] = pick_t / iters * 1e6;
            }
            double h = median5(th), p = median5(tp);
            printf("%9zuK %8s %9u %12.2f %12.2f %12.2f %9zu\n", sizes[si] / 1024, esc ? "escapes" : "plain", E, h,
                   p, h + p, nblocks);
            sb_inspect_ctx_free(&ictx);
            free(hashes);
            free(body);
            sb_router_free(r);
        }
    }
    printf("goals: under 20 us for a 32 KiB prompt over 256 endpoints; under 1 ms for 1 MiB "
           "(the Go endpoint pickers spend 100-200 us per decision)\n");
}

int main(void)
{
    bench_index();
    bench_decisions();
    return 0;
}
