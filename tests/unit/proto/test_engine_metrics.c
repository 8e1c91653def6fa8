/* Tests for src/proto/engine_metrics.c: engine-neutral load reports from the real captures in
 * tests/fixtures/metrics/ (expected values read by hand from the files), from synthetic
 * bodies for the engines without a capture (TensorRT-LLM, llama.cpp /metrics, custom), and
 * from llama.cpp's /slots JSON. */
#include "sb_test.h"

#include "base/buf.h"
#include "proto/engine_metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#define LIT_ARGS(s) s, sizeof(s) - 1

static size_t last_used; /* bytes consumed by the last report_of* parse */


/* Parses a fixture (or a literal, on an exact-size heap copy) as `kind`. */
static sb_engine_report *report_of_bytes(sb_engine_kind kind, const sb_engine_custom_names *custom, const char *text,
                                         size_t len)
{
    static sb_engine_report r;
    sb_engine_map m;
    char *copy = malloc(len ? len : 1);

    memcpy(copy, text, len);
    sb_engine_map_init(&m, kind, custom);
    last_used = sb_engine_metrics_parse(&m, copy, len, &r);
    free(copy);
    return &r;
}

static sb_engine_report *report_of(sb_engine_kind kind, const char *text)
{
    return report_of_bytes(kind, NULL, text, strlen(text));
}

static sb_engine_report *report_of_file(sb_engine_kind kind, const char *rel)
{
    size_t len;
    char *t = sb_test_read_file(rel, &len);
    sb_engine_report *r = report_of_bytes(kind, NULL, t, len);

    assert_int_equal(last_used, len);
    free(t);
    return r;
}

static void test_vllm_v0_capture(void **state)
{
    sb_engine_report *r =
        report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/vllm/v0_qwen2.5-coder-1.5b_truncated.prom");

    assert_int_equal(r->n_malformed, 0);
    assert_true(r->have_running && r->running == 0.0);
    assert_true(r->have_waiting && r->waiting == 0.0);
    /* V0 has only vllm:gpu_cache_usage_perc: the fallback. */
    assert_true(r->have_kv && r->kv_usage == 0.0);
    /* cache_config_info{block_size="16",...,num_gpu_blocks="81767",...} 1.0 */
    assert_true(r->have_block_size && r->block_size == 16);
    assert_true(r->have_num_gpu_blocks && r->num_gpu_blocks == 81767);
    assert_true(r->have_capacity_tokens && r->capacity_tokens == 16ull * 81767);
    /* lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""} */
    assert_true(r->have_lora);
    assert_int_equal(r->max_lora, 0);
    assert_int_equal(r->running_adapters.n, 0);
    assert_int_equal(r->waiting_adapters.n, 0);
    assert_true(r->lora_info_time == 1.7382173358407154e+09);
    /* request_success_total{finished_reason="stop"} 4.0, prompt 148.0, generation 955.0 */
    assert_true(r->have_requests_total && r->requests_total == 4.0);
    assert_true(r->have_prompt_tokens_total && r->prompt_tokens_total == 148.0);
    assert_true(r->have_generation_tokens_total && r->generation_tokens_total == 955.0);
    /* V0 has neither prefix-cache counter (only the hit-rate gauges, not read for vLLM). */
    assert_false(r->have_prefix_queries);
    assert_false(r->have_prefix_hits);
    assert_false(r->have_process_start);
    assert_false(r->have_slots);
    /* 1 info + running + waiting + kv + lora + 3 counters */
    assert_int_equal(r->n_samples, 8);
}

static void test_vllm_v1_early_capture(void **state)
{
    sb_engine_report *r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/vllm/v1_early_qwen2.5-coder-32b.prom");

    assert_true(r->have_running && r->running == 0.0);
    assert_true(r->have_waiting && r->waiting == 0.0);
    assert_true(r->have_kv && r->kv_usage == 0.0); /* still gpu_cache_usage_perc */
    assert_true(r->have_process_start && r->process_start_time == 1.74262400557e+09);
    /* Its last line is a TYPE for gpu_prefix_cache_queries_total, with no sample. */
    assert_false(r->have_prefix_queries);
    assert_false(r->have_block_size);
    assert_false(r->have_capacity_tokens);
    assert_false(r->have_lora);
    assert_false(r->have_requests_total);
}

static void test_vllm_v1_010_capture(void **state)
{
    sb_engine_report *r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/vllm/v1_glm4.5_vllm0.10.prom");

    /* An excerpt: kv usage and the prefix counters only. */
    assert_false(r->have_running);
    assert_false(r->have_waiting);
    assert_true(r->have_kv && r->kv_usage == 9.75010481363281e-06);
    assert_true(r->have_prefix_queries && r->prefix_queries_total == 32.0);
    /* No vllm:prefix_cache_hits_total in the excerpt: the deprecated gpu_ name stands in. */
    assert_true(r->have_prefix_hits && r->prefix_hits_total == 0.0);
    assert_int_equal(r->n_samples, 3);
}

static void test_vllm_head_capture(void **state)
{
    sb_engine_report *r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/vllm/v1_issue26762_head.prom");

    /* Python GC and process families only: nothing for a router, and said so. */
    assert_int_equal(r->n_samples, 0);
    assert_int_equal(r->n_malformed, 0);
    assert_false(r->have_running || r->have_waiting || r->have_kv || r->have_lora);
    assert_false(r->have_process_start);
}

static void test_sglang_capture(void **state)
{
    sb_engine_report *r = report_of_file(SB_ENGINE_SGLANG, "tests/fixtures/metrics/sglang/docs_sample.prom");

    assert_int_equal(r->n_malformed, 0);
    assert_true(r->have_running && r->running == 162.0);
    assert_true(r->have_waiting && r->waiting == 2826.0);
    assert_true(r->have_kv && r->kv_usage == 0.28);
    assert_true(r->have_prefix_hit_rate && r->prefix_hit_rate == 0.007507552643049313);
    assert_true(r->have_prompt_tokens_total && r->prompt_tokens_total == 8128902.0);
    assert_true(r->have_generation_tokens_total && r->generation_tokens_total == 7557572.0);
    assert_true(r->have_prefix_queries && r->prefix_queries_total == 8128902.0);
    assert_false(r->have_prefix_hits); /* no sglang:cached_tokens_total in this version */
    assert_false(r->have_block_size || r->have_capacity_tokens || r->have_requests_total);
    /* The same body read as vLLM: nothing. */
    r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/sglang/docs_sample.prom");
    assert_int_equal(r->n_samples, 0);
}

static void test_sglang_capacity(void **state)
{
    sb_engine_report *r =
        report_of(SB_ENGINE_SGLANG, "# TYPE sglang:cache_config_info gauge\n"
                                    "sglang:cache_config_info{num_pages=\"10000\",page_size=\"1\"} 1.0\n"
                                    "sglang:num_requests_total{model_name=\"m\"} 12.0\n"
                                    "sglang:cached_tokens_total{model_name=\"m\"} 300.0\n");

    assert_true(r->have_block_size && r->block_size == 1);
    assert_true(r->have_num_gpu_blocks && r->num_gpu_blocks == 10000);
    assert_true(r->have_capacity_tokens && r->capacity_tokens == 10000);
    assert_true(r->have_requests_total && r->requests_total == 12.0);
    assert_true(r->have_prefix_hits && r->prefix_hits_total == 300.0);
    /* A direct token capacity wins over pages x page size. */
    r = report_of(SB_ENGINE_SGLANG, "sglang:page_size 16\nsglang:num_pages 100\n"
                                    "sglang:max_total_num_tokens{model_name=\"m\"} 161721.0\n");
    assert_true(r->block_size == 16 && r->num_gpu_blocks == 100);
    assert_true(r->have_capacity_tokens && r->capacity_tokens == 161721);
}

/* Several series for one gauge: counts summed, fractions averaged (engine_metrics.h). */
static void test_several_series(void **state)
{
    sb_engine_report *r =
        report_of(SB_ENGINE_VLLM, "# TYPE vllm:num_requests_running gauge\n"
                                  "vllm:num_requests_running{engine=\"0\",model_name=\"a\"} 3.0\n"
                                  "vllm:num_requests_running{engine=\"1\",model_name=\"a\"} 4.0\n"
                                  "# TYPE vllm:num_requests_waiting gauge\n"
                                  "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 1.0\n"
                                  "vllm:num_requests_waiting{engine=\"1\",model_name=\"a\"} NaN\n"
                                  "vllm:num_requests_waiting{engine=\"2\",model_name=\"a\"} 2.0\n"
                                  "# TYPE vllm:kv_cache_usage_perc gauge\n"
                                  "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a\"} 0.5\n"
                                  "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"a\"} 0.25\n"
                                  "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"a\"} 0.99\n"
                                  "# TYPE vllm:cache_config_info gauge\n"
                                  "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"100\"} 1\n"
                                  "vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"50\"} 1\n"
                                  "# TYPE vllm:request_success_total counter\n"
                                  "vllm:request_success_total{finished_reason=\"stop\"} 10\n"
                                  "vllm:request_success_total{finished_reason=\"length\"} 5\n"
                                  "vllm:request_success_total{finished_reason=\"abort\"} +Inf\n");

    assert_true(r->running == 7.0);
    assert_true(r->waiting == 3.0);    /* NaN series ignored */
    assert_true(r->kv_usage == 0.375); /* mean of the V1 name; V0 name ignored */
    assert_true(r->num_gpu_blocks == 150 && r->block_size == 16);
    assert_true(r->capacity_tokens == 2400);
    assert_true(r->requests_total == 15.0); /* +Inf ignored */
}

static void test_lora_newest_series(void **state)
{
    sb_engine_report *r =
        report_of(SB_ENGINE_VLLM, "# TYPE vllm:lora_requests_info gauge\n"
                                  "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\","
                                  "waiting_lora_adapters=\"\"} 1.70e+09\n"
                                  "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"sql-lora, "
                                  "tweet\\\\x ,,\",waiting_lora_adapters=\"q\\\"uote\"} 1.75e+09\n"
                                  "vllm:lora_requests_info{max_lora=\"8\",running_lora_adapters=\"older\","
                                  "waiting_lora_adapters=\"\"} 1.60e+09\n");

    assert_true(r->have_lora);
    assert_int_equal(r->max_lora, 4);
    assert_true(r->lora_info_time == 1.75e+09);
    assert_int_equal(r->running_adapters.n, 2);
    assert_string_equal(sb_engine_lora_name(&r->running_adapters, 0), "sql-lora");
    assert_string_equal(sb_engine_lora_name(&r->running_adapters, 1), "tweet\\x");
    assert_int_equal(r->running_adapters.len[1], 7);
    assert_null(sb_engine_lora_name(&r->running_adapters, 2));
    assert_true(sb_engine_lora_has(&r->running_adapters, "sql-lora", 8));
    assert_false(sb_engine_lora_has(&r->running_adapters, "sql", 3));
    assert_false(r->running_adapters.truncated);
    assert_int_equal(r->waiting_adapters.n, 1);
    assert_string_equal(sb_engine_lora_name(&r->waiting_adapters, 0), "q\"uote");
}

static void test_lora_bounds(void **state)
{
    char text[8192], list[4096];
    int o = 0;
    sb_engine_report *r;

    for (int i = 0; i < SB_ENGINE_LORA_MAX + 5; i++)
        o += snprintf(list + o, sizeof list - (size_t)o, "%sadapter-%d", i ? "," : "", i);
    snprintf(text, sizeof text,
             "vllm:lora_requests_info{max_lora=\"64\",running_lora_adapters=\"%s\",waiting_lora_adapters=\"\"} 1\n",
             list);
    r = report_of(SB_ENGINE_VLLM, text);
    assert_int_equal(r->running_adapters.n, SB_ENGINE_LORA_MAX);
    assert_true(r->running_adapters.truncated);
    assert_string_equal(sb_engine_lora_name(&r->running_adapters, 31), "adapter-31");

    /* Longer than the text buffer: nothing kept, and flagged. */
    memset(list, 'a', 2000);
    list[2000] = '\0';
    snprintf(text, sizeof text, "vllm:lora_requests_info{running_lora_adapters=\"%s\"} 1\n", list);
    r = report_of(SB_ENGINE_VLLM, text);
    assert_true(r->have_lora);
    assert_int_equal(r->running_adapters.n, 0);
    assert_true(r->running_adapters.truncated);

    /* A NUL byte inside a name (found by the fuzzer): that name is dropped, the others kept. */
    {
        static const char nul[] = "vllm:lora_requests_info{running_lora_adapters=\"a\0b,c\"} 1\n";
        r = report_of_bytes(SB_ENGINE_VLLM, NULL, nul, sizeof nul - 1);
        assert_int_equal(r->running_adapters.n, 1);
        assert_string_equal(sb_engine_lora_name(&r->running_adapters, 0), "c");
    }
}

static void test_cache_info_label_values(void **state)
{
    sb_engine_report *r =
        report_of(SB_ENGINE_VLLM, "vllm:cache_config_info{block_size=\"None\",num_gpu_blocks=\"1.5\"} 1\n");

    assert_false(r->have_block_size || r->have_num_gpu_blocks || r->have_capacity_tokens);
    r = report_of(SB_ENGINE_VLLM, "vllm:cache_config_info{block_size=\"0\",num_gpu_blocks=\"\"} 1\n");
    assert_false(r->have_block_size || r->have_num_gpu_blocks);
    r = report_of(SB_ENGINE_VLLM, "vllm:cache_config_info{num_gpu_blocks=\"7\"} 1\n");
    assert_true(r->have_num_gpu_blocks && r->num_gpu_blocks == 7);
    assert_false(r->have_capacity_tokens); /* no block size: no token capacity */
}

static void test_trtllm(void **state)
{
    /* Names and label sets of tensorrt_llm/metrics/collector.py (MetricsCollector). */
    sb_engine_report *r =
        report_of(SB_ENGINE_TRTLLM,
                  "# HELP trtllm_num_requests_running Number of active requests\n"
                  "# TYPE trtllm_num_requests_running gauge\n"
                  "trtllm_num_requests_running{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 5.0\n"
                  "# TYPE trtllm_num_requests_waiting gauge\n"
                  "trtllm_num_requests_waiting{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 2.0\n"
                  "# TYPE trtllm_kv_cache_utilization gauge\n"
                  "trtllm_kv_cache_utilization{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 0.4375\n"
                  "# TYPE trtllm_kv_cache_hit_rate gauge\n"
                  "trtllm_kv_cache_hit_rate{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 0.5\n"
                  "# TYPE trtllm_kv_cache_max_blocks gauge\n"
                  "trtllm_kv_cache_max_blocks{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 4096.0\n"
                  "# TYPE trtllm_kv_cache_tokens_per_block gauge\n"
                  "trtllm_kv_cache_tokens_per_block{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 32.0\n"
                  "# TYPE trtllm_request_success_total counter\n"
                  "trtllm_request_success_total{engine_type=\"trtllm\",finished_reason=\"stop\",model_name=\"Qwen/"
                  "Qwen3-0.6B\"} 150.0\n"
                  "trtllm_request_success_total{engine_type=\"trtllm\",finished_reason=\"length\",model_name=\"Qwen/"
                  "Qwen3-0.6B\"} 5.0\n"
                  "# TYPE trtllm_prompt_tokens_total counter\n"
                  "trtllm_prompt_tokens_total{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 1000.0\n"
                  "# TYPE trtllm_prompt_cached_tokens_total counter\n"
                  "trtllm_prompt_cached_tokens_total{engine_type=\"trtllm\",model_name=\"Qwen/Qwen3-0.6B\"} 640.0\n"
                  "# TYPE trtllm_time_to_first_token_seconds histogram\n"
                  "trtllm_time_to_first_token_seconds_bucket{le=\"0.01\",model_name=\"Qwen/Qwen3-0.6B\"} 0.0\n");

    assert_true(r->have_running && r->running == 5.0);
    assert_true(r->have_waiting && r->waiting == 2.0);
    assert_true(r->have_kv && r->kv_usage == 0.4375);
    assert_true(r->have_prefix_hit_rate && r->prefix_hit_rate == 0.5);
    assert_true(r->block_size == 32 && r->num_gpu_blocks == 4096);
    assert_true(r->have_capacity_tokens && r->capacity_tokens == 32 * 4096);
    assert_true(r->requests_total == 155.0);
    assert_true(r->prefix_queries_total == 1000.0 && r->prefix_hits_total == 640.0);
    assert_true(r->prompt_tokens_total == 1000.0);
    assert_int_equal(r->n_samples, 11); /* prompt_tokens_total counts twice: queries and prompt */

    /* A 1.1.0rc5-era server exports only request histograms: no load, and said so. */
    r = report_of(SB_ENGINE_TRTLLM, "# TYPE trtllm_e2e_request_latency_seconds histogram\n"
                                    "trtllm_e2e_request_latency_seconds_sum{model_name=\"m\"} 45.2\n");
    assert_false(r->have_running || r->have_waiting || r->have_kv);
}

static void test_llamacpp_metrics(void **state)
{
    /* llama.cpp prints C++ stream defaults (6 significant digits) and no labels. */
    sb_engine_report *r =
        report_of(SB_ENGINE_LLAMACPP, "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
                                      "# TYPE llamacpp:prompt_tokens_total counter\n"
                                      "llamacpp:prompt_tokens_total 1.23457e+06\n"
                                      "# TYPE llamacpp:tokens_predicted_total counter\n"
                                      "llamacpp:tokens_predicted_total 3469\n"
                                      "# TYPE llamacpp:kv_cache_usage_ratio gauge\n"
                                      "llamacpp:kv_cache_usage_ratio 0.0123457\n"
                                      "# TYPE llamacpp:requests_processing gauge\n"
                                      "llamacpp:requests_processing 2\n"
                                      "# TYPE llamacpp:requests_deferred gauge\n"
                                      "llamacpp:requests_deferred 1\n");

    assert_true(r->have_running && r->running == 2.0);
    assert_true(r->have_waiting && r->waiting == 1.0);
    assert_true(r->have_kv && r->kv_usage == 0.0123457);
    assert_true(r->prompt_tokens_total == 1234570.0);
    assert_true(r->generation_tokens_total == 3469.0);
    assert_false(r->have_requests_total);
}

static void test_custom_names(void **state)
{
    static const sb_engine_custom_names names = {"my_running", "my_queue", "my_kv_percent", 0.01};
    static const char body[] = "# TYPE my_running gauge\nmy_running{x=\"1\"} 3\nmy_running{x=\"2\"} 4\n"
                               "my_queue 5\nmy_kv_percent 42\nvllm:num_requests_running 100\n";
    sb_engine_report *r = report_of_bytes(SB_ENGINE_CUSTOM, &names, body, sizeof body - 1);
    static const sb_engine_custom_names partial = {"my_running", NULL, "", 0};

    assert_true(r->have_running && r->running == 7.0);
    assert_true(r->have_waiting && r->waiting == 5.0);
    assert_true(r->have_kv && fabs(r->kv_usage - 0.42) < 1e-15);
    r = report_of_bytes(SB_ENGINE_CUSTOM, &partial, body, sizeof body - 1);
    assert_true(r->have_running && !r->have_waiting && !r->have_kv);
    r = report_of_bytes(SB_ENGINE_CUSTOM, NULL, body, sizeof body - 1);
    assert_int_equal(r->n_samples, 0);
}

static void test_want_filter(void **state)
{
    sb_engine_map m;

    sb_engine_map_init(&m, SB_ENGINE_VLLM, NULL);
    assert_true(sb_engine_map_want(&m, "vllm:num_requests_running", 25));
    /* A counter family declared without its _total (OpenMetrics style) still matches. */
    assert_true(sb_engine_map_want(&m, "vllm:prompt_tokens", 18));
    assert_false(sb_engine_map_want(&m, "vllm:num_requests", 17));
    assert_false(sb_engine_map_want(&m, "vllm:time_to_first_token_seconds", 32));
    assert_false(sb_engine_map_want(&m, "sglang:num_running_reqs", 23));
    /* Its samples then match by series name. */
    {
        sb_engine_report *r = report_of(SB_ENGINE_VLLM, "# TYPE vllm:prompt_tokens counter\n"
                                                        "vllm:prompt_tokens_total 9\n"
                                                        "vllm:prompt_tokens_created 1.7e9\n");
        assert_true(r->have_prompt_tokens_total && r->prompt_tokens_total == 9.0);
    }
}

static void test_fallbacks_prefer_v1(void **state)
{
    sb_engine_report *r = report_of(SB_ENGINE_VLLM, "vllm:gpu_cache_usage_perc 0.9\n"
                                                    "vllm:kv_cache_usage_perc 0.1\n"
                                                    "vllm:gpu_prefix_cache_queries_total 50\n"
                                                    "vllm:prefix_cache_queries_total 500\n"
                                                    "vllm:gpu_prefix_cache_hits_total 7\n");

    assert_true(r->kv_usage == 0.1);
    assert_true(r->prefix_queries_total == 500.0);
    assert_true(r->prefix_hits_total == 7.0);
}

static void test_overflowing_sum_dropped(void **state)
{
    sb_engine_report *r = report_of(SB_ENGINE_VLLM, "vllm:num_requests_running{e=\"0\"} 1.7e308\n"
                                                    "vllm:num_requests_running{e=\"1\"} 1.7e308\n"
                                                    "vllm:num_requests_waiting 1\n");

    assert_false(r->have_running);
    assert_true(r->running == 0.0);
    assert_true(r->have_waiting);
}

static void test_malformed_counted(void **state)
{
    sb_engine_report *r = report_of(SB_ENGINE_VLLM, "vllm:num_requests_running 1\n"
                                                    "vllm:num_requests_waiting{ 2\n"
                                                    "vllm:num_requests_waiting 3\n"
                                                    "vllm:kv_cache_usage_perc 0x1\n"
                                                    "vllm:kv_cache_usage_perc 0.5\n"
                                                    "vllm:num_requests_running 9"); /* cut: ignored */

    assert_int_equal(last_used, 143);
    assert_int_equal(r->n_malformed, 2);
    assert_int_equal(r->first_malformed_line, 2);
    assert_true(r->running == 1.0 && r->waiting == 3.0 && r->kv_usage == 0.5);
}

static void test_slots_capture(void **state)
{
    size_t len;
    char *t = sb_test_read_file("tests/fixtures/metrics/llamacpp/slots_example.json", &len);
    int64_t scratch[4096];
    sb_engine_report r;

    /* Two slots, both "is_processing": true, "n_ctx": 65536 each. */
    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(t, len, scratch, sizeof scratch, &r), 0);
    assert_true(r.have_slots);
    assert_int_equal(r.slots_total, 2);
    assert_int_equal(r.slots_busy, 2);
    assert_true(r.have_running && r.running == 2.0);
    assert_false(r.have_waiting); /* every slot busy: the queue is unknown */
    assert_true(r.have_capacity_tokens && r.capacity_tokens == 131072);
    assert_false(r.have_kv);

    /* Scratch too small for the tokens: said so, report untouched. */
    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(t, len, scratch, 64 * 16, &r), SB_ENGINE_SLOTS_NOSPACE);
    assert_false(r.have_slots || r.have_running);

    /* Cut anywhere: never accepted, never a crash. */
    for (size_t cut = 0; cut < len - 1; cut++) {
        char *copy = malloc(cut ? cut : 1);
        memcpy(copy, t, cut);
        sb_engine_report_init(&r);
        assert_int_equal(sb_engine_slots_parse(copy, cut, scratch, sizeof scratch, &r), SB_ENGINE_SLOTS_BAD_JSON);
        free(copy);
    }
    free(t);
}

static void test_slots_shapes(void **state)
{
    int64_t scratch[256];
    sb_engine_report r;
    static const char idle[] = "[{\"id\":0,\"n_ctx\":4096,\"is_processing\":false,"
                               "\"params\":{\"n_ctx\":1,\"is_processing\":true}},"
                               "{\"id\":1,\"n_ctx\":4096,\"is_processing\":true}]\n";

    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(idle, sizeof idle - 1, scratch, sizeof scratch, &r), 0);
    assert_int_equal(r.slots_total, 2);
    assert_int_equal(r.slots_busy, 1); /* the nested is_processing is not a slot's */
    assert_true(r.have_waiting && r.waiting == 0.0);
    assert_true(r.capacity_tokens == 8192);

    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("[]"), scratch, sizeof scratch, &r), 0);
    assert_int_equal(r.slots_total, 0);
    assert_false(r.have_capacity_tokens);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("{\"id\":0}"), scratch, sizeof scratch, &r),
                     SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("[1,2]"), scratch, sizeof scratch, &r), SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("[{}] x"), scratch, sizeof scratch, &r), SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("[{}][{}]"), scratch, sizeof scratch, &r),
                     SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS(""), scratch, sizeof scratch, &r), SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_slots_parse(LIT_ARGS("[{}]"), scratch, 0, &r), SB_ENGINE_SLOTS_NOSPACE);
}

/* Answers no llama.cpp sends: refused or read in work linear in their size. */
static void test_slots_hostile(void **state)
{
    static int64_t scratch[(256 << 10) / 8]; /* the prober's scratch */
    sb_engine_report r;
    sb_buf b = {0};

    /* 10,000 nested arrays in a slot (fits the scratch): refused at the depth bound, not
     * tokenized with a walk per bracket. */
    assert_int_equal(sb_buf_puts(&b, "[{\"id\":0,\"params\":"), 0);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(sb_buf_puts(&b, "["), 0);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(sb_buf_puts(&b, "]"), 0);
    assert_int_equal(sb_buf_puts(&b, ",\"is_processing\":true}]"), 0);
    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(b.data, b.len, scratch, sizeof scratch, &r), SB_ENGINE_SLOTS_BAD_JSON);
    assert_false(r.have_slots);

    /* The bound: the array and the slot are two levels, so 30 more are fine, 31 are not. */
    for (int depth = 30; depth <= 31; depth++) {
        b.len = 0;
        assert_int_equal(sb_buf_puts(&b, "[{\"p\":"), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "["), 0);
        for (int i = 0; i < depth; i++)
            assert_int_equal(sb_buf_puts(&b, "]"), 0);
        assert_int_equal(sb_buf_puts(&b, "}]"), 0);
        assert_int_equal(SB_ENGINE_SLOTS_MAX_DEPTH, 32);
        assert_int_equal(sb_engine_slots_parse(b.data, b.len, scratch, sizeof scratch, &r),
                         depth == 30 ? 0 : SB_ENGINE_SLOTS_BAD_JSON);
    }

    /* A key repeated: the last one counts, so one slot is never counted busy twice. */
    static const char dup[] = "[{\"is_processing\":true,\"is_processing\":true,\"is_processing\":false,"
                              "\"n_ctx\":100,\"n_ctx\":4096},{\"is_processing\":false,\"is_processing\":true}]";
    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(dup, sizeof dup - 1, scratch, sizeof scratch, &r), 0);
    assert_int_equal(r.slots_total, 2);
    assert_int_equal(r.slots_busy, 1);
    assert_true(r.capacity_tokens == 4096);

    /* Many slots with many keys each: all read. */
    b.len = 0;
    assert_int_equal(sb_buf_puts(&b, "["), 0);
    for (int i = 0; i < 800; i++)
        assert_int_equal(sb_buf_printf(&b, "%s{\"id\":%d,\"x\":[1,2,3],\"is_processing\":%s,\"n_ctx\":1}", i ? "," : "",
                                       i, i % 2 ? "true" : "false"), 0);
    assert_int_equal(sb_buf_puts(&b, "]"), 0);
    sb_engine_report_init(&r);
    assert_int_equal(sb_engine_slots_parse(b.data, b.len, scratch, sizeof scratch, &r), 0);
    assert_int_equal(r.slots_total, 800);
    assert_int_equal(r.slots_busy, 400);
    assert_true(r.capacity_tokens == 800);
    sb_buf_free(&b);
}

static void test_restart_detection(void **state)
{
    sb_engine_report a, b;

    sb_engine_report_init(&a);
    sb_engine_report_init(&b);
    assert_false(sb_engine_report_restarted(&a, &b)); /* nothing comparable */
    a.have_requests_total = b.have_requests_total = true;
    a.requests_total = 10;
    b.requests_total = 10;
    assert_false(sb_engine_report_restarted(&a, &b));
    b.requests_total = 3;
    assert_true(sb_engine_report_restarted(&a, &b));
    b.requests_total = 11;
    a.have_prompt_tokens_total = b.have_prompt_tokens_total = true;
    a.prompt_tokens_total = 500;
    b.prompt_tokens_total = 20;
    assert_true(sb_engine_report_restarted(&a, &b));
    b.prompt_tokens_total = 600;
    a.have_process_start = b.have_process_start = true;
    a.process_start_time = 1.7e9;
    b.process_start_time = 1.7e9;
    assert_false(sb_engine_report_restarted(&a, &b));
    b.process_start_time = 1.7e9 + 60;
    assert_true(sb_engine_report_restarted(&a, &b));
    /* One side lacks the counter: not comparable, not a restart. */
    b.process_start_time = 1.7e9;
    b.have_generation_tokens_total = true;
    b.generation_tokens_total = 0;
    assert_false(sb_engine_report_restarted(&a, &b));
}

static void test_kind_names(void **state)
{
    sb_engine_kind k;

    assert_int_equal(sb_engine_kind_parse("trtllm", &k), 0);
    assert_int_equal(k, SB_ENGINE_TRTLLM);
    assert_int_equal(sb_engine_kind_parse("custom", &k), 0);
    assert_int_equal(k, SB_ENGINE_CUSTOM);
    assert_int_equal(sb_engine_kind_parse("vLLM", &k), -EINVAL);
    for (int i = SB_ENGINE_VLLM; i <= SB_ENGINE_CUSTOM; i++) {
        assert_int_equal(sb_engine_kind_parse(sb_engine_kind_name((sb_engine_kind)i), &k), 0);
        assert_int_equal(k, i);
    }
}

/* The families a page exposes, from a fixture. */
static uint32_t families_of_file(const char *rel)
{
    size_t len;
    char *t = sb_test_read_file(rel, &len);
    uint32_t m = sb_engine_families(t, len);

    free(t);
    return m;
}

static sb_engine_kind guess_of_file(const char *rel)
{
    sb_engine_kind k = SB_ENGINE_CUSTOM;

    assert_true(sb_engine_guess(families_of_file(rel), &k));
    return k;
}

/* engine: auto picks the right mapping for each real capture, and for the engines without
 * one, from their documented names. */
static void test_detect_captures(void **state)
{
    static const char *const vllm[] = {
        "tests/fixtures/metrics/vllm/v0_qwen2.5-coder-1.5b_truncated.prom",
        "tests/fixtures/metrics/vllm/v1_early_qwen2.5-coder-32b.prom",
        "tests/fixtures/metrics/vllm/v1_glm4.5_vllm0.10.prom",
    };
    sb_engine_kind k;

    for (size_t i = 0; i < sizeof vllm / sizeof vllm[0]; i++) {
        assert_int_equal(families_of_file(vllm[i]), 1u << SB_ENGINE_VLLM);
        assert_int_equal(guess_of_file(vllm[i]), SB_ENGINE_VLLM);
    }
    assert_int_equal(families_of_file("tests/fixtures/metrics/sglang/docs_sample.prom"), 1u << SB_ENGINE_SGLANG);
    assert_int_equal(guess_of_file("tests/fixtures/metrics/sglang/docs_sample.prom"), SB_ENGINE_SGLANG);
    /* Only the Python process collector's families: no engine to name. */
    assert_int_equal(families_of_file("tests/fixtures/metrics/vllm/v1_issue26762_head.prom"), 0);
    assert_false(sb_engine_guess(0, &k));

    static const char trt[] = "# TYPE trtllm_num_requests_running gauge\ntrtllm_num_requests_running 2\n";
    assert_true(sb_engine_guess(sb_engine_families(LIT_ARGS(trt)), &k));
    assert_int_equal(k, SB_ENGINE_TRTLLM);
    /* A family declared with no sample yet still counts; the last line needs no newline. */
    static const char llama[] = "process_start_time_seconds 1\n# HELP llamacpp:requests_processing x\n"
                                "llamacpp:requests_deferred 0";
    assert_true(sb_engine_guess(sb_engine_families(LIT_ARGS(llama)), &k));
    assert_int_equal(k, SB_ENGINE_LLAMACPP);
    /* A prefix inside a line (a label value, a comment) is not a family. */
    static const char inside[] = "foo{x=\"vllm:num_requests_running\"} 1\n# sglang:num_queue_reqs\n";
    assert_int_equal(sb_engine_families(LIT_ARGS(inside)), 0);
    /* Reads nothing past len: the prefix cut at the end is no match. */
    assert_int_equal(sb_engine_families("vllm:x", 4), 0);
    assert_int_equal(sb_engine_families("", 0), 0);
}

/* A wrong explicit engine matches nothing (process_start_time_seconds, which every Python
 * server exports, does not count), and detection names the engine the page looks like. */
static void test_wrong_engine_mismatch(void **state)
{
    sb_engine_report *r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/sglang/docs_sample.prom");
    assert_int_equal(r->n_matched, 0);
    assert_false(r->have_running || r->have_waiting || r->have_kv);
    assert_int_equal(guess_of_file("tests/fixtures/metrics/sglang/docs_sample.prom"), SB_ENGINE_SGLANG);

    r = report_of_file(SB_ENGINE_SGLANG, "tests/fixtures/metrics/vllm/v1_glm4.5_vllm0.10.prom");
    assert_int_equal(r->n_matched, 0);
    assert_int_equal(guess_of_file("tests/fixtures/metrics/vllm/v1_glm4.5_vllm0.10.prom"), SB_ENGINE_VLLM);

    /* process_start_time_seconds alone: samples read, none of the engine's own. */
    r = report_of(SB_ENGINE_VLLM, "process_start_time_seconds 1.7e9\nsglang:num_running_reqs 3\n");
    assert_int_equal(r->n_samples, 1);
    assert_int_equal(r->n_matched, 0);

    /* The right engine matches. */
    r = report_of_file(SB_ENGINE_SGLANG, "tests/fixtures/metrics/sglang/docs_sample.prom");
    assert_true(r->n_matched > 0);
    r = report_of_file(SB_ENGINE_VLLM, "tests/fixtures/metrics/vllm/v0_qwen2.5-coder-1.5b_truncated.prom");
    assert_true(r->n_matched > 0);
    assert_string_equal(sb_engine_prefix(SB_ENGINE_SGLANG), "sglang:");
    assert_null(sb_engine_prefix(SB_ENGINE_CUSTOM));
}

/* /v1/models: the pool's served name among the ids, or the first id to name in the warning. */
static void test_models_has(void **state)
{
    static int scratch[4096];
    const char *first;
    size_t first_len;
    /* vLLM's answer with a LoRA adapter beside the base model. */
    static const char vllm[] =
        "{\"object\":\"list\",\"data\":[{\"id\":\"Qwen/Qwen2.5-1.5B\",\"object\":\"model\",\"created\":1,"
        "\"owned_by\":\"vllm\",\"root\":\"Qwen/Qwen2.5-1.5B\",\"parent\":null,\"max_model_len\":32768,"
        "\"permission\":[{\"id\":\"modelperm-1\",\"allow_view\":true}]},"
        "{\"id\":\"sql-lora\",\"object\":\"model\",\"parent\":\"Qwen/Qwen2.5-1.5B\"}]}";

    assert_int_equal(sb_engine_models_has(LIT_ARGS(vllm), scratch, sizeof scratch, LIT_ARGS("Qwen/Qwen2.5-1.5B"),
                                          &first, &first_len),
                     1);
    assert_int_equal(sb_engine_models_has(LIT_ARGS(vllm), scratch, sizeof scratch, LIT_ARGS("sql-lora"), NULL, NULL),
                     1);
    /* A typo: not listed, and the first id is there to say what is served. An id nested
     * deeper (a permission's) never counts. */
    assert_int_equal(sb_engine_models_has(LIT_ARGS(vllm), scratch, sizeof scratch, LIT_ARGS("Qwen/Qwen2.5-1.5b"),
                                          &first, &first_len),
                     0);
    assert_int_equal(first_len, strlen("Qwen/Qwen2.5-1.5B"));
    assert_memory_equal(first, "Qwen/Qwen2.5-1.5B", first_len);
    assert_int_equal(sb_engine_models_has(LIT_ARGS(vllm), scratch, sizeof scratch, LIT_ARGS("modelperm-1"), NULL, NULL),
                     0);
    assert_int_equal(
        sb_engine_models_has(LIT_ARGS("{\"data\":[]}"), scratch, sizeof scratch, LIT_ARGS("m"), &first, &first_len), 0);
    assert_int_equal(first_len, 0);
    /* Not a models list. */
    assert_int_equal(sb_engine_models_has(LIT_ARGS("[]"), scratch, sizeof scratch, LIT_ARGS("m"), NULL, NULL),
                     SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(
        sb_engine_models_has(LIT_ARGS("{\"data\":{}}"), scratch, sizeof scratch, LIT_ARGS("m"), NULL, NULL),
        SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(
        sb_engine_models_has(LIT_ARGS("{\"data\":[1]}"), scratch, sizeof scratch, LIT_ARGS("m"), NULL, NULL),
        SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_models_has(LIT_ARGS("{\"data\":["), scratch, sizeof scratch, LIT_ARGS("m"), NULL, NULL),
                     SB_ENGINE_SLOTS_BAD_JSON);
    assert_int_equal(sb_engine_models_has(LIT_ARGS(vllm), scratch, 64, LIT_ARGS("m"), NULL, NULL),
                     SB_ENGINE_SLOTS_NOSPACE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_v0_capture),
        cmocka_unit_test(test_vllm_v1_early_capture),
        cmocka_unit_test(test_vllm_v1_010_capture),
        cmocka_unit_test(test_vllm_head_capture),
        cmocka_unit_test(test_sglang_capture),
        cmocka_unit_test(test_sglang_capacity),
        cmocka_unit_test(test_several_series),
        cmocka_unit_test(test_lora_newest_series),
        cmocka_unit_test(test_lora_bounds),
        cmocka_unit_test(test_cache_info_label_values),
        cmocka_unit_test(test_trtllm),
        cmocka_unit_test(test_llamacpp_metrics),
        cmocka_unit_test(test_custom_names),
        cmocka_unit_test(test_want_filter),
        cmocka_unit_test(test_fallbacks_prefer_v1),
        cmocka_unit_test(test_overflowing_sum_dropped),
        cmocka_unit_test(test_malformed_counted),
        cmocka_unit_test(test_slots_capture),
        cmocka_unit_test(test_slots_shapes),
        cmocka_unit_test(test_slots_hostile),
        cmocka_unit_test(test_restart_detection),
        cmocka_unit_test(test_kind_names),
        cmocka_unit_test(test_detect_captures),
        cmocka_unit_test(test_wrong_engine_mismatch),
        cmocka_unit_test(test_models_has),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
