/* Tests for src/proto/prom_parse.c: the Prometheus text format parser, on the real captures in
 * tests/fixtures/metrics/ (expected values read by hand from the files) and on edge cases.
 * Every parse runs over a heap copy of exactly the input's bytes, so ASan sees a read past
 * the end. */
#include "sb_test.h"

#include "proto/prom_parse.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#define LIT(s) s, sizeof(s) - 1

/* ---- helpers ---- */


/* Samples rendered as one canonical string each, so whole parses compare with strcmp. */
#define MAX_SAMPLES 512
#define SAMPLE_TEXT 1200

typedef struct collected {
    size_t n;
    char text[MAX_SAMPLES][SAMPLE_TEXT];
    uint32_t line[MAX_SAMPLES];
    size_t n_bad;
    uint32_t bad_line[64];
    const char *bad_reason[64];
    size_t want_calls;
    const char *const *wanted; /* NULL-terminated, or NULL for all */
} collected;

static void render(const sb_prom_sample *s, char *out, size_t cap)
{
    int o = snprintf(out, cap, "%.*s|%s|%.*s|", (int)s->family.len, s->family.p, sb_prom_type_name(s->type),
                     (int)s->name.len, s->name.p);
    for (size_t i = 0; i < s->n_labels && o < (int)cap; i++)
        o += snprintf(out + o, cap - (size_t)o, "%.*s=%.*s,", (int)s->labels[i].name.len, s->labels[i].name.p,
                      (int)s->labels[i].value.len, s->labels[i].value.p);
    if (o < (int)cap)
        o += snprintf(out + o, cap - (size_t)o, "|%a", s->value);
    if (s->has_timestamp && o < (int)cap)
        snprintf(out + o, cap - (size_t)o, "|%lld", (long long)s->timestamp_ms);
}

static void on_sample(void *ud, const sb_prom_sample *s)
{
    collected *c = ud;

    assert_true(c->n < MAX_SAMPLES);
    render(s, c->text[c->n], SAMPLE_TEXT);
    c->line[c->n] = s->line;
    c->n++;
}

static void on_malformed(void *ud, uint32_t line, const char *reason)
{
    collected *c = ud;

    assert_non_null(reason);
    if (c->n_bad < 64) {
        c->bad_line[c->n_bad] = line;
        c->bad_reason[c->n_bad] = reason;
    }
    c->n_bad++;
}

static bool want_listed(void *ud, const char *name, size_t len)
{
    collected *c = ud;

    c->want_calls++;
    for (const char *const *w = c->wanted; *w; w++)
        if (strlen(*w) == len && memcmp(*w, name, len) == 0)
            return true;
    return false;
}

static collected *new_collected(void)
{
    collected *c = calloc(1, sizeof *c);
    assert_non_null(c);
    return c;
}

/* Parses exactly len bytes (heap copy) into c; returns the bytes consumed. */
static size_t parse_into(const char *text, size_t len, collected *c, sb_prom_parser *stats)
{
    char *copy = malloc(len ? len : 1);
    sb_prom_handler h = {c->wanted ? want_listed : NULL, on_sample, on_malformed, c};
    size_t used;

    assert_non_null(copy);
    memcpy(copy, text, len);
    used = sb_prom_parse(copy, len, &h, stats);
    free(copy);
    return used;
}

/* Parses one line (the test adds the newline) that must hold one good sample. */
static sb_prom_sample *one(const char *line, sb_prom_sample *s)
{
    size_t n = strlen(line);
    char *copy = malloc(n + 1);
    sb_prom_parser p;
    int rc;

    memcpy(copy, line, n);
    copy[n] = '\n';
    sb_prom_init(&p, NULL, NULL);
    sb_prom_feed(&p, copy, n + 1);
    rc = sb_prom_next(&p, s);
    if (rc != SB_PROM_SAMPLE)
        fail_msg("\"%s\": expected a sample, got %d (%s)", line, rc, p.error ? p.error : "");
    assert_int_equal(sb_prom_next(&p, s), SB_PROM_END);
    free(copy);
    /* Slices point into the freed copy: only the value fields are used by callers of one(). */
    return s;
}

/* A line that must be reported malformed, and nothing else. */
static void bad(const char *line)
{
    size_t n = strlen(line);
    char *copy = malloc(n + 1);
    sb_prom_parser p;
    sb_prom_sample s;
    int rc;

    memcpy(copy, line, n);
    copy[n] = '\n';
    sb_prom_init(&p, NULL, NULL);
    sb_prom_feed(&p, copy, n + 1);
    rc = sb_prom_next(&p, &s);
    if (rc != SB_PROM_MALFORMED)
        fail_msg("\"%s\": expected malformed, got %d", line, rc);
    assert_int_equal(p.error_line, 1);
    assert_non_null(p.error);
    assert_int_equal(sb_prom_next(&p, &s), SB_PROM_END);
    assert_int_equal(p.consumed, n + 1);
    free(copy);
}

static double value_of(const char *line)
{
    sb_prom_sample s;
    return one(line, &s)->value;
}

/* Non-comment, non-blank lines: what a clean capture must yield as samples. */
static size_t count_sample_lines(const char *t, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len;) {
        const char *nl = memchr(t + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - t) : len;
        if (!nl)
            break;
        if (e > i && t[i] != '#')
            n++;
        i = e + 1;
    }
    return n;
}

static const char *const captures[] = {
    "tests/fixtures/metrics/vllm/v0_qwen2.5-coder-1.5b_truncated.prom",
    "tests/fixtures/metrics/vllm/v1_early_qwen2.5-coder-32b.prom",
    "tests/fixtures/metrics/vllm/v1_glm4.5_vllm0.10.prom",
    "tests/fixtures/metrics/vllm/v1_issue26762_head.prom",
    "tests/fixtures/metrics/sglang/docs_sample.prom",
};

/* ---- the real captures ---- */

static void test_captures_parse_cleanly(void **state)
{
    static const size_t samples[] = {29, 7, 5, 11, 70};

    for (size_t k = 0; k < sizeof captures / sizeof captures[0]; k++) {
        size_t len;
        char *t = sb_test_read_file(captures[k], &len);
        collected *c = new_collected();
        sb_prom_parser st;

        assert_int_equal(parse_into(t, len, c, &st), len);
        assert_int_equal(c->n_bad, 0);
        assert_int_equal(c->n, samples[k]);
        assert_int_equal(c->n, count_sample_lines(t, len));
        assert_int_equal(st.n_samples, samples[k]);
        assert_int_equal(st.n_malformed, 0);
        {
            size_t lines = 0;
            for (size_t i = 0; i < len; i++)
                lines += t[i] == '\n';
            assert_int_equal(st.line, lines);
        }
        free(c);
        free(t);
    }
}

static void test_vllm_v0_capture(void **state)
{
    size_t len;
    char *t = sb_test_read_file(captures[0], &len);
    collected *c = new_collected();

    assert_int_equal(parse_into(t, len, c, NULL), len);
    assert_int_equal(c->n, 29);
    /* The first sample: the info gauge with its 12 labels, only a TYPE line above it. */
    assert_string_equal(c->text[0], "vllm:cache_config_info|gauge|vllm:cache_config_info|block_size=16,"
                                    "cache_dtype=auto,calculate_kv_scales=False,cpu_offload_gb=0,"
                                    "enable_prefix_caching=False,gpu_memory_utilization=0.9,is_attention_free="
                                    "False,num_cpu_blocks=9362,num_gpu_blocks=81767,num_gpu_blocks_override="
                                    "None,sliding_window=None,swap_space_bytes=4294967296,|0x1p+0");
    assert_int_equal(c->line[0], 2);
    assert_string_equal(c->text[1], "vllm:num_requests_running|gauge|vllm:num_requests_running|"
                                    "model_name=Qwen/Qwen2.5-Coder-1.5B-Instruct,|0x0p+0");
    assert_int_equal(c->line[1], 5);
    /* -1.0 hit rate, the lora info with empty adapter lists and a wall-clock value. */
    assert_string_equal(c->text[7], "vllm:gpu_prefix_cache_hit_rate|gauge|"
                                    "vllm:gpu_prefix_cache_hit_rate|model_name=Qwen/"
                                    "Qwen2.5-Coder-1.5B-Instruct,|-0x1p+0");
    {
        char want[256];
        snprintf(want, sizeof want,
                 "vllm:lora_requests_info|gauge|vllm:lora_requests_info|max_lora=0,"
                 "running_lora_adapters=,waiting_lora_adapters=,|%a",
                 1.7382173358407154e+09);
        assert_string_equal(c->text[8], want);
    }
    assert_string_equal(c->text[10], "vllm:prompt_tokens_total|counter|vllm:prompt_tokens_total|"
                                     "model_name=Qwen/Qwen2.5-Coder-1.5B-Instruct,|0x1.28p+7");
    /* The histogram, cut by its source after the le="96.0" bucket: _sum then buckets. */
    assert_string_equal(c->text[13], "vllm:iteration_tokens_total|histogram|"
                                     "vllm:iteration_tokens_total_sum|model_name=Qwen/"
                                     "Qwen2.5-Coder-1.5B-Instruct,|0x1.13cp+10");
    assert_string_equal(c->text[28], "vllm:iteration_tokens_total|histogram|"
                                     "vllm:iteration_tokens_total_bucket|le=96.0,model_name=Qwen/"
                                     "Qwen2.5-Coder-1.5B-Instruct,|0x1.f3p+9");
    assert_int_equal(c->line[28], 56);
    free(c);
    free(t);
}

static void test_vllm_v1_captures(void **state)
{
    size_t len;
    char *t = sb_test_read_file(captures[1], &len);
    collected *c = new_collected();
    char want[256];

    /* Early V1: process families untyped by suffix rules, e.g. 1.048576e+06. */
    assert_int_equal(parse_into(t, len, c, NULL), len);
    assert_int_equal(c->n, 7);
    snprintf(want, sizeof want, "process_start_time_seconds|gauge|process_start_time_seconds||%a", 1.74262400557e+09);
    assert_string_equal(c->text[0], want);
    snprintf(want, sizeof want, "process_cpu_seconds_total|counter|process_cpu_seconds_total||%a", 439.71999999999997);
    assert_string_equal(c->text[1], want);
    assert_string_equal(c->text[3], "process_max_fds|gauge|process_max_fds||0x1p+20");
    assert_string_equal(c->text[6], "vllm:gpu_cache_usage_perc|gauge|vllm:gpu_cache_usage_perc|"
                                    "model_name=Qwen/Qwen2.5-Coder-32B-Instruct,|0x0p+0");
    free(c);
    free(t);

    /* vLLM 0.10: two labels, _created as its own gauge family, a tiny kv usage. */
    t = sb_test_read_file(captures[2], &len);
    c = new_collected();
    assert_int_equal(parse_into(t, len, c, NULL), len);
    assert_int_equal(c->n, 5);
    snprintf(want, sizeof want,
             "vllm:gpu_prefix_cache_queries_created|gauge|vllm:gpu_prefix_cache_queries_created|"
             "engine=0,model_name=zai-org/GLM-4.5,|%a",
             1.7537953269352946e+09);
    assert_string_equal(c->text[0], want);
    snprintf(want, sizeof want,
             "vllm:kv_cache_usage_perc|gauge|vllm:kv_cache_usage_perc|engine=0,model_name=zai-org/"
             "GLM-4.5,|%a",
             9.75010481363281e-06);
    assert_string_equal(c->text[3], want);
    assert_string_equal(c->text[4], "vllm:prefix_cache_queries_total|counter|"
                                    "vllm:prefix_cache_queries_total|engine=0,model_name=zai-org/"
                                    "GLM-4.5,|0x1p+5");
    free(c);
    free(t);

    /* The head of a dump: GC counters with three series each, a 3-digit exponent. */
    t = sb_test_read_file(captures[3], &len);
    c = new_collected();
    assert_int_equal(parse_into(t, len, c, NULL), len);
    assert_int_equal(c->n, 11);
    assert_string_equal(c->text[2], "python_gc_objects_collected_total|counter|"
                                    "python_gc_objects_collected_total|generation=2,|0x1.4b8p+10");
    assert_string_equal(c->text[9], "python_info|gauge|python_info|implementation=CPython,major=3,"
                                    "minor=12,patchlevel=11,version=3.12.11,|0x1p+0");
    snprintf(want, sizeof want, "process_virtual_memory_bytes|gauge|process_virtual_memory_bytes||%a",
             1.1701968896e+10);
    assert_string_equal(c->text[10], want);
    free(c);
    free(t);
}

static void test_sglang_capture(void **state)
{
    size_t len;
    char *t = sb_test_read_file(captures[4], &len);
    collected *c = new_collected();
    char want[256];

    assert_int_equal(parse_into(t, len, c, NULL), len);
    assert_int_equal(c->n, 70);
    assert_string_equal(c->text[0], "sglang:prompt_tokens_total|counter|sglang:prompt_tokens_total|"
                                    "model_name=meta-llama/Llama-3.1-8B-Instruct,|0x1.f02618p+22");
    assert_true(strstr(c->text[2], "sglang:token_usage|gauge|") == c->text[2]);
    snprintf(want, sizeof want, "|%a", 0.28);
    assert_non_null(strstr(c->text[2], want));
    /* A histogram: _sum first, buckets up to +Inf, then _count, all in the family. */
    snprintf(want, sizeof want,
             "sglang:time_to_first_token_seconds|histogram|sglang:time_to_first_token_seconds_sum|"
             "model_name=meta-llama/Llama-3.1-8B-Instruct,|%a",
             2.3518979474117756e+06);
    assert_string_equal(c->text[4], want);
    assert_string_equal(c->text[25], "sglang:time_to_first_token_seconds|histogram|"
                                     "sglang:time_to_first_token_seconds_bucket|le=+Inf,model_name="
                                     "meta-llama/Llama-3.1-8B-Instruct,|0x1.58p+13");
    assert_string_equal(c->text[26], "sglang:time_to_first_token_seconds|histogram|"
                                     "sglang:time_to_first_token_seconds_count|model_name=meta-llama/"
                                     "Llama-3.1-8B-Instruct,|0x1.58p+13");
    /* The last four gauges. */
    assert_string_equal(c->text[66], "sglang:num_running_reqs|gauge|sglang:num_running_reqs|"
                                     "model_name=meta-llama/Llama-3.1-8B-Instruct,|0x1.44p+7");
    assert_string_equal(c->text[69], "sglang:num_queue_reqs|gauge|sglang:num_queue_reqs|"
                                     "model_name=meta-llama/Llama-3.1-8B-Instruct,|0x1.614p+11");
    free(c);
    free(t);
}

/* Cut a capture at every byte: never a crash, never a read past the cut (ASan), and the samples
 * are exactly those of the complete lines before the cut: a prefix of the full result. */
static void test_truncation_every_offset(void **state)
{
    for (size_t k = 0; k < sizeof captures / sizeof captures[0]; k++) {
        size_t len;
        char *t = sb_test_read_file(captures[k], &len);
        collected *full = new_collected(), *part = new_collected();

        parse_into(t, len, full, NULL);
        for (size_t cut = 0; cut <= len; cut++) {
            size_t used, last_nl = 0;

            memset(part, 0, sizeof *part);
            used = parse_into(t, cut, part, NULL);
            for (size_t i = 0; i < cut; i++)
                if (t[i] == '\n')
                    last_nl = i + 1;
            assert_int_equal(used, last_nl);
            assert_int_equal(part->n_bad, 0);
            assert_int_equal(part->n, count_sample_lines(t, last_nl));
            for (size_t i = 0; i < part->n; i++)
                assert_string_equal(part->text[i], full->text[i]);
        }
        free(full);
        free(part);
        free(t);
    }
}

/* CRLF line ends read exactly as LF. */
static void test_crlf(void **state)
{
    for (size_t k = 0; k < sizeof captures / sizeof captures[0]; k++) {
        size_t len, n = 0;
        char *t = sb_test_read_file(captures[k], &len);
        char *crlf = malloc(2 * len);
        collected *a = new_collected(), *b = new_collected();

        for (size_t i = 0; i < len; i++) {
            if (t[i] == '\n')
                crlf[n++] = '\r';
            crlf[n++] = t[i];
        }
        parse_into(t, len, a, NULL);
        assert_int_equal(parse_into(crlf, n, b, NULL), n);
        assert_int_equal(b->n_bad, 0);
        assert_int_equal(a->n, b->n);
        for (size_t i = 0; i < a->n; i++)
            assert_string_equal(a->text[i], b->text[i]);
        free(a);
        free(b);
        free(crlf);
        free(t);
    }
}

/* Fed in pieces of every size, carrying the incomplete tail: the same samples, same families. */
static void test_streaming_chunks(void **state)
{
    size_t len;
    char *t = sb_test_read_file(captures[4], &len);
    collected *full = new_collected();
    char *carry = malloc(len + 1);

    parse_into(t, len, full, NULL);
    for (size_t chunk = 1; chunk <= 300; chunk += (chunk < 20 ? 1 : 37)) {
        sb_prom_parser p;
        sb_prom_sample s;
        size_t off = 0, held = 0, got = 0;

        sb_prom_init(&p, NULL, NULL);
        while (off < len) {
            size_t take = len - off < chunk ? len - off : chunk;
            char *buf = malloc(held + take);
            int rc;

            memcpy(buf, carry, held);
            memcpy(buf + held, t + off, take);
            off += take;
            sb_prom_feed(&p, buf, held + take);
            while ((rc = sb_prom_next(&p, &s)) != SB_PROM_END) {
                char text[SAMPLE_TEXT];
                assert_int_equal(rc, SB_PROM_SAMPLE);
                render(&s, text, sizeof text);
                assert_true(got < full->n);
                assert_string_equal(text, full->text[got]);
                assert_int_equal(s.line, full->line[got]);
                got++;
            }
            held = held + take - p.consumed;
            memcpy(carry, buf + p.consumed, held);
            free(buf);
        }
        assert_int_equal(held, 0);
        assert_int_equal(got, full->n);
    }
    free(carry);
    free(full);
    free(t);
}

/* The filter: want() asked once per family, unwanted lines skipped unparsed. */
static void test_filter_skips_families(void **state)
{
    static const char *const wanted[] = {"vllm:num_requests_waiting", "vllm:iteration_tokens_total",
                                         "vllm:cache_config_info", NULL};
    size_t len;
    char *t = sb_test_read_file(captures[0], &len);
    collected *c = new_collected();
    sb_prom_parser st;

    c->wanted = wanted;
    assert_int_equal(parse_into(t, len, c, &st), len);
    assert_int_equal(c->want_calls, 14); /* the capture's 14 families, one call each */
    assert_int_equal(c->n, 1 + 1 + 16);
    assert_true(strstr(c->text[0], "vllm:cache_config_info|gauge|") == c->text[0]);
    assert_true(strstr(c->text[1], "vllm:num_requests_waiting|gauge|") == c->text[1]);
    assert_true(strstr(c->text[2], "vllm:iteration_tokens_total|histogram|vllm:iteration_tokens_total_sum|") ==
                c->text[2]);
    assert_int_equal(st.n_skipped, 29 - 18);
    free(c);
    free(t);
}

static void test_filter_skips_without_checking(void **state)
{
    static const char *const wanted[] = {"keep", NULL};
    static const char text[] = "# TYPE junk gauge\n"
                               "junk{a=\"unterminated} 1\n" /* never parsed: not reported */
                               "junk not a value\n"
                               "keep 1\n"
                               "untyped_junk{{{ 3\n" /* outside a family: asked, skipped */
                               "untyped_junk{{{ 4\n" /* same name: not asked again */
                               "keep{x=\"2\"} 2\n";
    collected *c = new_collected();
    sb_prom_parser st;

    c->wanted = wanted;
    assert_int_equal(parse_into(LIT(text), c, &st), sizeof text - 1);
    assert_int_equal(c->n_bad, 0);
    assert_int_equal(c->n, 2);
    assert_string_equal(c->text[0], "keep|untyped|keep||0x1p+0");
    assert_string_equal(c->text[1], "keep|untyped|keep|x=2,|0x1p+1");
    assert_int_equal(c->want_calls, 4); /* junk, keep, untyped_junk, keep */
    assert_int_equal(st.n_skipped, 4);
    free(c);
}

/* ---- edge cases ---- */

static void test_malformed_lines_in_the_middle(void **state)
{
    static const char text[] = "# TYPE a gauge\n"
                               "a 1\n"
                               "a{x=\"1\" 2\n"       /* 3: no closing brace */
                               "9bad 3\n"            /* 4: name starts with a digit */
                               "a{x=\"1\"} 0x10\n"   /* 5: hex value */
                               "# TYPE b nonsense\n" /* 6: unknown type */
                               "b 4\n"
                               "a{x=\"\\t\"} 5\n" /* 8: invalid escape */
                               "\n"
                               "c 6 1700000000000\n";
    collected *c = new_collected();
    sb_prom_parser st;

    assert_int_equal(parse_into(LIT(text), c, &st), sizeof text - 1);
    assert_int_equal(c->n, 3);
    assert_string_equal(c->text[0], "a|gauge|a||0x1p+0");
    assert_string_equal(c->text[1], "b|untyped|b||0x1p+2");
    assert_string_equal(c->text[2], "c|untyped|c||0x1.8p+2|1700000000000");
    assert_int_equal(c->line[2], 10);
    assert_int_equal(c->n_bad, 5);
    assert_int_equal(c->bad_line[0], 3);
    assert_int_equal(c->bad_line[1], 4);
    assert_int_equal(c->bad_line[2], 5);
    assert_int_equal(c->bad_line[3], 6);
    assert_int_equal(c->bad_line[4], 8);
    assert_string_equal(c->bad_reason[4], "invalid escape in label value");
    assert_int_equal(st.n_malformed, 5);
    assert_int_equal(st.line, 10);
    free(c);
}

static void test_labels_escapes_and_commas(void **state)
{
    sb_prom_sample s;
    char out[64];
    const sb_prom_slice *v;
    static const char line[] = "m{path=\"C:\\\\dir\\\\\",msg=\"say \\\"hi\\\"\\nbye\",e=\"\",} 7\n";
    char *copy = malloc(sizeof line - 1);
    sb_prom_parser p;

    memcpy(copy, line, sizeof line - 1);
    sb_prom_init(&p, NULL, NULL);
    sb_prom_feed(&p, copy, sizeof line - 1);
    assert_int_equal(sb_prom_next(&p, &s), SB_PROM_SAMPLE);
    assert_int_equal(s.n_labels, 3);
    v = sb_prom_label_value(&s, "path");
    assert_non_null(v);
    assert_int_equal(sb_prom_unescape(v->p, v->len, out, sizeof out), 7);
    assert_string_equal(out, "C:\\dir\\");
    v = sb_prom_label_value(&s, "msg");
    assert_int_equal(sb_prom_unescape(v->p, v->len, out, sizeof out), 12);
    assert_string_equal(out, "say \"hi\"\nbye");
    /* Too small: -1, never an overrun; exactly enough: fits. */
    assert_int_equal(sb_prom_unescape(v->p, v->len, out, 12), -1);
    assert_int_equal(sb_prom_unescape(v->p, v->len, out, 13), 12);
    v = sb_prom_label_value(&s, "e");
    assert_int_equal(sb_prom_unescape(v->p, v->len, out, 1), 0);
    assert_string_equal(out, "");
    assert_int_equal(sb_prom_unescape("x", 1, out, 0), -1);
    assert_null(sb_prom_label_value(&s, "absent"));
    assert_int_equal(sb_prom_unescape("a\\", 2, out, sizeof out), -1);
    assert_int_equal(sb_prom_unescape("a\\t", 3, out, sizeof out), -1);
    assert_true(sb_prom_slice_eq(s.name, "m"));
    assert_false(sb_prom_slice_eq(s.name, "mm"));
    free(copy);

    /* Empty sets, blanks around everything, a trailing comma, tabs. */
    assert_int_equal(one("m{} 1", &s)->n_labels, 0);
    assert_int_equal(one("m {} 1", &s)->n_labels, 0);
    assert_int_equal(one("m{ a = \"1\" ,\tb=\"2\" , } 1", &s)->n_labels, 2);
    assert_int_equal(one("  \tm{a=\"1\"}\t1  ", &s)->n_labels, 1);
    assert_int_equal(one("m{a=\"1\"}1", &s)->n_labels, 1);
    assert_int_equal(one("m{a=\"}{,=\"} 1", &s)->n_labels, 1);
    assert_int_equal(one("vllm:num_requests_running{model_name=\"m\"} 1", &s)->n_labels, 1);
    assert_int_equal(one("_:x_9 1", &s)->n_labels, 0);

    bad("m{a=\"1\"");
    bad("m{a=\"1} 1");
    bad("m{a=1} 1");
    bad("m{a} 1");
    bad("m{=\"1\"} 1");
    bad("m{1a=\"1\"} 1");
    bad("m{a:b=\"1\"} 1");
    bad("m{a=\"1\" b=\"2\"} 1");
    bad("m{a=\"1\",,} 1");
    bad("m{,} 1");
    bad("m{a=\"x\\\"} 1");
    bad("m{a=\"x\\");
    bad("m{a=\"\\q\"} 1");
    bad("m");
    bad("m{}");
    bad("m-x 1");
    bad("{a=\"1\"} 1");
    bad("1m 1");
}

static void test_label_limit(void **state)
{
    char line[4096];
    int o = snprintf(line, sizeof line, "m{");
    sb_prom_sample s;

    for (int i = 0; i < SB_PROM_MAX_LABELS; i++)
        o += snprintf(line + o, sizeof line - (size_t)o, "l%d=\"%d\",", i, i);
    snprintf(line + o, sizeof line - (size_t)o, "} 1");
    assert_int_equal(one(line, &s)->n_labels, SB_PROM_MAX_LABELS);
    snprintf(line + o, sizeof line - (size_t)o, "extra=\"x\"} 1");
    bad(line);
}

static void test_values(void **state)
{
    assert_true(isnan(value_of("m NaN")));
    assert_true(isnan(value_of("m nan")));
    assert_true(isnan(value_of("m NAN")));
    assert_true(isinf(value_of("m +Inf")) && value_of("m +Inf") > 0);
    assert_true(isinf(value_of("m -Inf")) && value_of("m -Inf") < 0);
    assert_true(isinf(value_of("m Inf")) && value_of("m inf") > 0);
    assert_true(isinf(value_of("m -infinity")) && value_of("m +Infinity") > 0);
    /* Go-style and C++-style floats, integers. */
    assert_true(value_of("m 1.7537953269352946e+09") == 1.7537953269352946e+09);
    assert_true(value_of("m 1e+06") == 1e6);
    assert_true(value_of("m 1.5E-3") == 1.5e-3);
    assert_true(value_of("m 1.23457e+06") == 1234570.0);
    assert_true(value_of("m 3.4028234663852886e+38") == 3.4028234663852886e+38);
    assert_true(value_of("m 42") == 42.0);
    assert_true(value_of("m -42") == -42.0);
    assert_true(value_of("m +3") == 3.0);
    assert_true(value_of("m .5") == 0.5);
    assert_true(value_of("m 5.") == 5.0);
    assert_true(value_of("m 0.07500000000000001") == 0.07500000000000001);
    assert_true(value_of("m 9007199254740993") == 9007199254740993.0);
    assert_true(value_of("m 123456789012345678901234567890") == 123456789012345678901234567890.0);
    assert_true(value_of("m 1e-400") == 0.0); /* underflow rounds to 0, as in Go */
    assert_true(value_of("m 4.9e-324") == 4.9e-324);
    assert_true(value_of("m 1.7976931348623157e308") == 1.7976931348623157e308);
    bad("m 1e400"); /* overflow is an error in Go's ParseFloat, so in Prometheus */
    bad("m -1.8e308");
    assert_true(value_of("m 0e99999999999999999999") == 0.0);
    assert_true(value_of("m 000000000000000000000000000001") == 1.0);
    assert_true(signbit(value_of("m -0")));
    assert_true(signbit(value_of("m -0.0e5")));
    bad("m 0x10");
    bad("m 0x1p-2");
    bad("m 1_000");
    bad("m +NaN");
    bad("m nan(1)");
    bad("m infin");
    bad("m 1e");
    bad("m 1e+");
    bad("m e5");
    bad("m .");
    bad("m -");
    bad("m +");
    bad("m 1.2.3");
    bad("m 1,5");
    bad("m ++1");
}

/* The fast path agrees with strtod, bit for bit, on random decimals of every shape. */
static void test_values_match_strtod(void **state)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    char line[96], tok[80];

    for (int i = 0; i < 200000; i++) {
        int o = 0, digits, frac, ex;
        double want, got;

        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        digits = (int)(x % 18) + 1;
        frac = (int)((x >> 8) % (unsigned)(digits + 1));
        ex = (int)((x >> 16) % 60) - 30;
        if ((x >> 24) & 1)
            tok[o++] = '-';
        for (int d = 0; d < digits; d++) {
            if (d == digits - frac)
                tok[o++] = '.';
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tok[o++] = (char)('0' + x % 10);
        }
        if ((x >> 30) & 1)
            o += snprintf(tok + o, sizeof tok - (size_t)o, "e%+d", ex);
        tok[o] = '\0';
        want = strtod(tok, NULL);
        snprintf(line, sizeof line, "m %s", tok);
        got = value_of(line);
        if (memcmp(&want, &got, sizeof want) != 0)
            fail_msg("%s: strtod %a, parsed %a", tok, want, got);
    }
}

static void test_timestamps(void **state)
{
    sb_prom_sample s;

    one("m 1 1700000000000", &s);
    assert_true(s.has_timestamp);
    assert_true(s.timestamp_ms == 1700000000000LL);
    one("m{a=\"b\"} 1 -5  ", &s);
    assert_true(s.has_timestamp && s.timestamp_ms == -5);
    one("m 1 9223372036854775807", &s);
    assert_true(s.timestamp_ms == INT64_MAX);
    one("m 1 -9223372036854775808", &s);
    assert_true(s.timestamp_ms == INT64_MIN);
    one("m 1", &s);
    assert_false(s.has_timestamp);
    bad("m 1 9223372036854775808");
    bad("m 1 -9223372036854775809");
    bad("m 1 12.5");
    bad("m 1 1e3");
    bad("m 1 -");
    bad("m 1 2 3");
}

static void test_families_and_comments(void **state)
{
    static const char text[] = "# a plain comment\n"
                               "#\n"
                               "#TYPE tight counter\n"
                               "tight_total 1\n"
                               "   # HELP h Help with \\\\ and \\n escapes.\n"
                               "# TYPE h histogram\n"
                               "h_bucket{le=\"1\"} 1\n"
                               "h_bucket{le=\"+Inf\"} 2\n"
                               "h_sum 3\n"
                               "h_count 2\n"
                               "h_created 4\n"
                               "h_other 5\n" /* not a histogram suffix: its own run */
                               "# TYPE s summary\n"
                               "s{quantile=\"0.5\"} 6\n"
                               "s_sum 7\n"
                               "s_count 8\n"
                               "# HELP only_help no type line\n"
                               "only_help 9\n"
                               "# TYPE u untyped\n"
                               "u 10\n"
                               "# TYPE g gauge\n"
                               "# TYPE g_total counter\n"
                               "g_total 11\n"; /* the nearer TYPE wins */
    collected *c = new_collected();

    assert_int_equal(parse_into(LIT(text), c, NULL), sizeof text - 1);
    assert_int_equal(c->n_bad, 0);
    assert_int_equal(c->n, 13);
    assert_string_equal(c->text[0], "tight|counter|tight_total||0x1p+0");
    assert_string_equal(c->text[1], "h|histogram|h_bucket|le=1,|0x1p+0");
    assert_string_equal(c->text[2], "h|histogram|h_bucket|le=+Inf,|0x1p+1");
    assert_string_equal(c->text[3], "h|histogram|h_sum||0x1.8p+1");
    assert_string_equal(c->text[4], "h|histogram|h_count||0x1p+1");
    assert_string_equal(c->text[5], "h|histogram|h_created||0x1p+2");
    assert_string_equal(c->text[6], "h_other|untyped|h_other||0x1.4p+2");
    assert_string_equal(c->text[7], "s|summary|s|quantile=0.5,|0x1.8p+2");
    assert_string_equal(c->text[9], "s|summary|s_count||0x1p+3");
    assert_string_equal(c->text[10], "only_help|untyped|only_help||0x1.2p+3");
    assert_string_equal(c->text[11], "u|untyped|u||0x1.4p+3");
    assert_string_equal(c->text[12], "g_total|counter|g_total||0x1.6p+3");
    free(c);

    bad("# TYPE");
    bad("# TYPE m");
    bad("# TYPE m gauge extra");
    bad("# TYPE 9m gauge");
    bad("# TYPE m{} gauge");
    bad("# HELP");
    bad("# HELP -x text");
}

static void test_incomplete_last_line(void **state)
{
    collected *c = new_collected();

    /* A value cut short ("12" -> "1") must not be read: the line has no newline yet. */
    assert_int_equal(parse_into(LIT("a 1\nb 1"), c, NULL), 4);
    assert_int_equal(c->n, 1);
    memset(c, 0, sizeof *c);
    assert_int_equal(parse_into(LIT("# TYPE a gauge\na{x=\"1\"} 1\n# HELP b cut"), c, NULL), 26);
    assert_int_equal(c->n, 1);
    memset(c, 0, sizeof *c);
    assert_int_equal(parse_into("", 0, c, NULL), 0);
    assert_int_equal(parse_into(LIT("\n\n\r\n"), c, NULL), 4);
    assert_int_equal(c->n, 0);
    assert_int_equal(c->n_bad, 0);
    free(c);
}

static void test_long_family_name(void **state)
{
    char text[2048], name[301];
    static const char *const wanted[] = {NULL};
    collected *c = new_collected();
    int o;

    memset(name, 'x', 300);
    name[300] = '\0';
    o = snprintf(text, sizeof text, "# TYPE %s gauge\n%s 1\n%s 2\n", name, name, name);
    /* Too long to keep: the samples read as untyped, each asked about. */
    assert_int_equal(parse_into(text, (size_t)o, c, NULL), (size_t)o);
    assert_int_equal(c->n, 2);
    assert_non_null(strstr(c->text[0], "|untyped|"));
    memset(c, 0, sizeof *c);
    c->wanted = wanted;
    parse_into(text, (size_t)o, c, NULL);
    assert_int_equal(c->n, 0);
    assert_int_equal(c->want_calls, 3);
    free(c);
}

static void test_binary_garbage(void **state)
{
    uint64_t x = 42;
    char buf[512];
    collected *c = new_collected();

    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + (size_t)(round % (int)sizeof buf);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = "ab{}=\",\\ \n\r#:_0.9e+-NI"[x % 23];
        }
        memset(c, 0, sizeof *c);
        assert_true(parse_into(buf, n, c, NULL) <= n);
    }
    free(c);
}

/* ---- corpus replay (tests/fuzz/corpus/prom, shared with tests/fuzz/fuzz_prom_parse.c) ---- */

static bool want_vllm(void *ud, const char *name, size_t len)
{
    return len > 5 && memcmp(name, "vllm:", 5) == 0;
}

static void test_corpus_replay(void **state)
{
    char dir[4096], path[8192];
    struct dirent *e;
    DIR *d;
    int files = 0;

    snprintf(dir, sizeof dir, "tests/fuzz/corpus/prom"); /* the tests run from the repository root */
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open corpus %s", dir);
    while ((e = readdir(d)) != NULL) {
        size_t len;
        char *data;
        collected *all = new_collected();
        sb_prom_parser st;
        sb_prom_handler h = {want_vllm, on_sample, on_malformed, NULL};
        collected *some = new_collected();

        if (e->d_name[0] == '.') {
            free(all);
            free(some);
            continue;
        }
        snprintf(path, sizeof path, "tests/fuzz/corpus/prom/%s", e->d_name);
        data = sb_test_read_file(path, &len);
        files++;
        assert_true(parse_into(data, len, all, &st) <= len);
        assert_int_equal(st.n_samples, all->n);
        assert_int_equal(st.n_malformed, all->n_bad);
        h.ud = some;
        sb_prom_parse(data, len, &h, NULL);
        assert_true(some->n <= all->n);
        free(all);
        free(some);
        free(data);
    }
    closedir(d);
    assert_true(files >= 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_captures_parse_cleanly),
        cmocka_unit_test(test_vllm_v0_capture),
        cmocka_unit_test(test_vllm_v1_captures),
        cmocka_unit_test(test_sglang_capture),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_crlf),
        cmocka_unit_test(test_streaming_chunks),
        cmocka_unit_test(test_filter_skips_families),
        cmocka_unit_test(test_filter_skips_without_checking),
        cmocka_unit_test(test_malformed_lines_in_the_middle),
        cmocka_unit_test(test_labels_escapes_and_commas),
        cmocka_unit_test(test_label_limit),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_values_match_strtod),
        cmocka_unit_test(test_timestamps),
        cmocka_unit_test(test_families_and_comments),
        cmocka_unit_test(test_incomplete_last_line),
        cmocka_unit_test(test_long_family_name),
        cmocka_unit_test(test_binary_garbage),
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
