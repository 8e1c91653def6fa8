/* bench_nesting: what a 1 MiB body of pure nesting costs the request inspector, next to an
 * ordinary 1 MiB prompt (issue 11: 100,000 nested arrays used to take ~10 s of CPU on the
 * event loop; the target is under 5 ms for 1 MiB, the cost of one ordinary 1 MiB prompt).
 *
 * Built by `make bench` (build/bench/bench_nesting) and run by bench/run.sh. Usage:
 *   build/bench/bench_nesting [runs]      (default 11; medians are printed)
 *
 * Rows, each the median over runs of one sb_inspect (and, for the ordinary prompt, the
 * sb_prompt_hash the gateway runs next, 64-byte blocks):
 *   refused  the default bound (limits.max_json_depth = 128): refused as TOO_DEEP;
 *   lifted   the bound at 1,000,000: the whole body tokenized and checked, to show the
 *            tokenizer itself is linear (ns per byte stays flat along the ladder below);
 *   wide     what the default bound still admits at its dearest: a token every 2-3 bytes.
 * Figures only: a benchmark never decides whether a build passes. */
#include "base/buf.h"
#include "bench_util.h"
#include "proto/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB (1u << 20)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* {"model":"m1","x":OPEN...INNER CLOSE...,"messages":[]} of about `bytes` bytes. */
static void nesting(sb_buf *b, size_t bytes, const char *open, const char *inner, const char *close)
{
    static const char head[] = "{\"model\":\"m1\",\"x\":", tail[] = ",\"messages\":[]}";
    size_t unit = strlen(open) + strlen(close), n = (bytes - sizeof head - sizeof tail) / unit;

    b->len = 0;
    if (sb_buf_puts(b, head) < 0)
        exit(1);
    for (size_t i = 0; i < n; i++)
        if (sb_buf_puts(b, open) < 0)
            exit(1);
    if (sb_buf_puts(b, inner) < 0)
        exit(1);
    for (size_t i = 0; i < n; i++)
        if (sb_buf_puts(b, close) < 0)
            exit(1);
    if (sb_buf_puts(b, tail) < 0)
        exit(1);
}

/* An ordinary chat request whose one user message is `bytes` of prose with a few escapes. */
static void prompt(sb_buf *b, size_t bytes)
{
    static const char words[] = "The quick brown fox jumps over the lazy dog. \\\"Quoted\\\" text,\\n new line. ";

    b->len = 0;
    if (sb_buf_puts(b, "{\"model\":\"m1\",\"messages\":[{\"role\":\"system\",\"content\":\"Be terse.\"},"
                       "{\"role\":\"user\",\"content\":\"") < 0)
        exit(1);
    while (b->len + sizeof words < bytes - 8)
        if (sb_buf_puts(b, words) < 0)
            exit(1);
    if (sb_buf_puts(b, "\"}]}") < 0)
        exit(1);
}

static uint64_t hashes[16384];

/* Median ns of `runs` inspections of body (with the prompt hashed when hash is set). Checks the
 * status each time: a bench that measured the wrong path would print a lie. */
static double measure(sb_inspect_ctx *ctx, const sb_buf *b, size_t max_depth, int want, int hash, int runs)
{
    double *t = malloc(sizeof(double) * (size_t)runs), med;
    sb_inspect_result r;

    ctx->json.max_depth = max_depth;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ns();
        int rc = sb_inspect(ctx, SB_API_CHAT, b->data, b->len, &r);
        if (rc == SB_INSPECT_OK && hash) {
            sb_prompt_hashes ph = {.hashes = hashes, .cap = 16384, .prefix_chars = 100};
            sb_prompt_hash(ctx, b->data, &r, 1, 64, &ph);
        }
        t[i] = now_ns() - t0;
        if (rc != want) {
            fprintf(stderr, "bench_nesting: status %d, expected %d\n", rc, want);
            exit(1);
        }
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    med = t[runs / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 11;
    sb_inspect_ctx ctx = {.json.max_tokens = (size_t)1 << 22};
    sb_buf b = {0};
    double base;
    static const struct {
        const char *name, *open, *inner, *close;
    } shapes[] = {
        {"arrays  [[[...]]]", "[", "", "]"},
        {"objects {\"a\":{...}}", "{\"a\":", "1", "}"},
        {"mixed   [{\"k\":[...]}]", "[{\"k\":", "1", "}]"},
    };

    if (runs < 1)
        runs = 1;
    prompt(&b, MIB);
    (void)measure(&ctx, &b, 0, SB_INSPECT_OK, 1, 1); /* warm: the token array is grown once */
    base = measure(&ctx, &b, 0, SB_INSPECT_OK, 1, runs);
    printf("1 MiB bodies, sb_inspect, median of %d runs\n", runs);
    printf("  %-34s %12s %10s %10s\n", "body", "time", "ns/byte", "vs prompt");
    printf("  %-34s %9.3f ms %10.2f %9.2fx\n", "ordinary prompt (+ block hashes)", base / 1e6, base / (double)b.len, 1.0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        char name[80];
        double refused, lifted;

        nesting(&b, MIB, shapes[s].open, shapes[s].inner, shapes[s].close);
        refused = measure(&ctx, &b, 0, SB_INSPECT_TOO_DEEP, 0, runs);
        lifted = measure(&ctx, &b, 1000000, SB_INSPECT_OK, 0, runs);
        snprintf(name, sizeof name, "%s refused (128)", shapes[s].name);
        printf("  %-34s %9.3f ms %10.2f %9.3fx\n", name, refused / 1e6, refused / (double)b.len, refused / base);
        snprintf(name, sizeof name, "%s lifted (1e6)", shapes[s].name);
        printf("  %-34s %9.3f ms %10.2f %9.2fx\n", name, lifted / 1e6, lifted / (double)b.len, lifted / base);
    }

    /* What the default bound still admits at its most expensive: a token every two bytes. */
    static const struct {
        const char *name, *unit;
    } wide[] = {{"wide    [1,1,1,...] (default bound)", "1,"}, {"wide    [[],[],...] (default bound)", "[],"}};
    for (size_t s = 0; s < sizeof wide / sizeof wide[0]; s++) {
        double t;
        b.len = 0;
        if (sb_buf_puts(&b, "{\"model\":\"m1\",\"x\":[") < 0)
            exit(1);
        while (b.len < MIB - 32)
            if (sb_buf_puts(&b, wide[s].unit) < 0)
                exit(1);
        if (sb_buf_puts(&b, "1],\"messages\":[]}") < 0)
            exit(1);
        t = measure(&ctx, &b, 0, SB_INSPECT_OK, 0, runs);
        printf("  %-34s %9.3f ms %10.2f %9.2fx\n", wide[s].name, t / 1e6, t / (double)b.len, t / base);
    }

    /* Many small messages: every walk over siblings (check, then hashing) skips each one. */
    b.len = 0;
    if (sb_buf_puts(&b, "{\"model\":\"m1\",\"messages\":[") < 0)
        exit(1);
    while (b.len < MIB - 64)
        if (sb_buf_puts(&b, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]},") < 0)
            exit(1);
    if (sb_buf_puts(&b, "{\"role\":\"user\",\"content\":\"x\"}]}") < 0)
        exit(1);
    {
        double t = measure(&ctx, &b, 0, SB_INSPECT_OK, 1, runs);
        printf("  %-34s %9.3f ms %10.2f %9.2fx\n", "small messages (+ block hashes)", t / 1e6, t / (double)b.len,
               t / base);
    }

    /* The ladder: nested arrays, bound lifted. Linear means ns/byte stays flat. */
    printf("\nnested arrays, bound lifted: cost against depth (linear: flat ns/byte)\n");
    printf("  %10s %10s %12s %10s %14s\n", "levels", "bytes", "time", "ns/byte", "steps/byte");
    for (size_t levels = 10000; levels <= 1000000; levels *= 10) {
        double t;
        nesting(&b, 2 * levels + 40, "[", "", "]");
        t = measure(&ctx, &b, 2000000, SB_INSPECT_OK, 0, runs);
        printf("  %10zu %10zu %9.3f ms %10.2f %14.2f\n", levels, b.len, t / 1e6, t / (double)b.len,
               (double)ctx.json.steps / (double)b.len);
    }
    sb_inspect_ctx_free(&ctx);
    sb_buf_free(&b);
    return 0;
}
