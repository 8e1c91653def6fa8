/* fuzz_prom_parse: libFuzzer target for src/proto/prom_parse.c and the Prometheus half of
 * src/proto/engine_metrics.c (outside input: model servers' /metrics bodies).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each).
 * Built and run by hand (the committed corpus is the seed; it is also replayed by the unit test
 * tests/unit/proto/test_prom_parse.c):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc tests/fuzz/fuzz_prom_parse.c \
 *         src/proto/prom_parse.c src/proto/engine_metrics.c -lm -o /tmp/fuzz_prom_parse
 *   mkdir -p /tmp/corpus_prom
 *   /tmp/fuzz_prom_parse -max_total_time=60 /tmp/corpus_prom tests/fuzz/corpus/prom
 *
 * Besides crashes and sanitizer reports, it checks properties the prober relies on:
 *   - consumed ends on a line boundary, and nothing after it was read (ASan: exact-size copy);
 *   - filtering only removes samples: a filtered parse yields exactly the unfiltered samples
 *     whose family the filter wants, in order, with the same line numbers;
 *   - feeding the body in two pieces (carrying the incomplete tail) yields the same samples;
 *   - a body cut at any point yields a prefix of the whole body's samples;
 *   - every label value the parser accepted unescapes, into no more bytes than it has;
 *   - the engine report never holds a NaN or infinite value (sums that overflow are dropped). */
#include "proto/engine_metrics.h"
#include "proto/prom_parse.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

#define MAX_SEEN 8192

typedef struct seen {
    size_t n;
    uint64_t h[MAX_SEEN];
} seen;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A sample's identity: every field, so two runs compare exactly. */
static uint64_t sample_hash(const sb_prom_sample *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    char out[4096];

    h = mix(h, s->name.p, s->name.len);
    h = mix(h, "|", 1);
    h = mix(h, s->family.p, s->family.len);
    h = mix(h, &s->type, sizeof s->type);
    h = mix(h, &s->line, sizeof s->line);
    h = mix(h, &s->value, sizeof s->value);
    h = mix(h, &s->has_timestamp, sizeof s->has_timestamp);
    h = mix(h, &s->timestamp_ms, sizeof s->timestamp_ms);
    for (size_t i = 0; i < s->n_labels; i++) {
        const sb_prom_label *l = &s->labels[i];
        long d = sb_prom_unescape(l->value.p, l->value.len, out, l->value.len + 1);
        CHECK(d >= 0 && (size_t)d <= l->value.len);
        CHECK(l->name.len > 0);
        h = mix(h, l->name.p, l->name.len);
        h = mix(h, "=", 1);
        h = mix(h, l->value.p, l->value.len);
    }
    return h;
}

/* A deterministic filter: about half of the names. */
static bool want_half(void *ud, const char *name, size_t len)
{
    return (mix(7, name, len) >> 17) & 1;
}

/* Runs the cursor over buf (optionally filtered), appending sample hashes. Returns consumed. */
static size_t run(sb_prom_parser *p, const char *buf, size_t len, seen *out)
{
    sb_prom_sample s;
    int rc;

    sb_prom_feed(p, buf, len);
    while ((rc = sb_prom_next(p, &s)) != SB_PROM_END) {
        CHECK(rc == SB_PROM_SAMPLE || rc == SB_PROM_MALFORMED);
        if (rc == SB_PROM_MALFORMED) {
            CHECK(p->error != NULL && p->error_line == p->line);
            continue;
        }
        CHECK(s.name.len > 0 && s.family.len > 0);
        CHECK(s.name.p >= buf && s.name.p + s.name.len <= buf + len);
        CHECK(s.n_labels <= SB_PROM_MAX_LABELS);
        if (out->n < MAX_SEEN)
            out->h[out->n++] = sample_hash(&s);
    }
    CHECK(p->consumed <= len);
    CHECK(p->consumed == 0 || buf[p->consumed - 1] == '\n');
    CHECK(memchr(buf + p->consumed, '\n', len - p->consumed) == NULL);
    return p->consumed;
}

static seen all, filtered, expect, pieces;

static void check_filter(const char *buf, size_t len)
{
    sb_prom_parser p;
    sb_prom_sample s;
    int rc;

    /* Expected: the unfiltered samples whose family the filter wants. */
    expect.n = 0;
    sb_prom_init(&p, NULL, NULL);
    sb_prom_feed(&p, buf, len);
    while ((rc = sb_prom_next(&p, &s)) != SB_PROM_END)
        if (rc == SB_PROM_SAMPLE && want_half(NULL, s.family.p, s.family.len) && expect.n < MAX_SEEN)
            expect.h[expect.n++] = sample_hash(&s);
    filtered.n = 0;
    sb_prom_init(&p, want_half, NULL);
    run(&p, buf, len, &filtered);
    CHECK(filtered.n == expect.n);
    CHECK(memcmp(filtered.h, expect.h, expect.n * sizeof expect.h[0]) == 0);
}

/* libFuzzer's entry point (it declares none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    sb_prom_parser p;
    size_t used, cut, rest;
    char *first, *second;

    all.n = 0;
    sb_prom_init(&p, NULL, NULL);
    used = run(&p, body, size, &all);

    check_filter(body, size);

    /* Two pieces, split where the input says, the tail carried over. */
    cut = size ? (size_t)data[0] * size / 256 : 0;
    pieces.n = 0;
    sb_prom_init(&p, NULL, NULL);
    first = malloc(cut ? cut : 1);
    memcpy(first, body, cut);
    run(&p, first, cut, &pieces);
    /* A cut body yields a prefix of the whole body's samples. */
    CHECK(pieces.n <= all.n || all.n == MAX_SEEN);
    CHECK(memcmp(pieces.h, all.h, (pieces.n < all.n ? pieces.n : all.n) * sizeof all.h[0]) == 0);
    rest = cut - p.consumed + (size - cut);
    second = malloc(rest ? rest : 1);
    memcpy(second, first + p.consumed, cut - p.consumed);
    memcpy(second + (cut - p.consumed), body + cut, size - cut);
    free(first);
    /* The carried tail's line is re-read: the line counter must not count it twice. */
    run(&p, second, rest, &pieces);
    free(second);
    CHECK(pieces.n == all.n);
    CHECK(memcmp(pieces.h, all.h, all.n * sizeof all.h[0]) == 0);

    /* The engine mapping: any body, every engine; fields stay finite. */
    for (int k = SB_ENGINE_VLLM; k <= SB_ENGINE_CUSTOM; k++) {
        static const sb_engine_custom_names custom = {"m", "ok", "x_total", 0.01};
        sb_engine_map m;
        sb_engine_report r;

        sb_engine_map_init(&m, (sb_engine_kind)k, &custom);
        CHECK(sb_engine_metrics_parse(&m, body, size, &r) == used);
        CHECK(isfinite(r.running) && isfinite(r.waiting) && isfinite(r.kv_usage));
        CHECK(isfinite(r.prefix_queries_total) && isfinite(r.prefix_hits_total));
        CHECK(isfinite(r.prefix_hit_rate) && isfinite(r.lora_info_time));
        CHECK(isfinite(r.requests_total) && isfinite(r.prompt_tokens_total));
        CHECK(isfinite(r.generation_tokens_total) && isfinite(r.process_start_time));
        CHECK(r.n_samples + r.n_malformed > 0 || !r.have_running);
        CHECK(r.running_adapters.n <= SB_ENGINE_LORA_MAX && r.waiting_adapters.n <= SB_ENGINE_LORA_MAX);
        for (uint32_t i = 0; i < r.running_adapters.n; i++)
            CHECK(strlen(sb_engine_lora_name(&r.running_adapters, i)) == r.running_adapters.len[i]);
    }
    return 0;
}
