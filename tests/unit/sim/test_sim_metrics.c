/* Tests src/sim/sim_metrics.c: Prometheus text in three dialects, histograms, number and label
 * formatting, the ORCA header and llama.cpp's /slots. */
#include "sb_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "sim/sim_metrics.h"

static sb_engine_metrics sample_metrics(void)
{
    sb_engine_metrics m = {0};
    m.num_requests_running = 3;
    m.num_requests_waiting = 2;
    m.kv_cache_usage = 0.25;
    m.num_blocks_used = 10;
    m.prefix_cache_queries_total = 400;
    m.prefix_cache_hits_total = 100;
    m.request_success_total = 7;
    m.request_aborted_total = 1;
    m.prompt_tokens_total = 1234;
    m.generation_tokens_total = 99;
    m.num_steps_total = 50;
    m.max_loras = 4;
    m.block_size = 16;
    m.num_gpu_blocks = 29205;
    return m;
}

/* Renders and returns the text (caller frees). */
static char *render(sb_sim_flavor f, const char *model, const sb_sim_stats *st, const sb_engine_metrics *m)
{
    sb_buf b = {0};
    sb_sim_metrics_view v = {
        .flavor = f,
        .model_name = model,
        .engine = m,
        .stats = st,
        .running_adapters = "lora-a",
        .waiting_adapters = "",
        .enable_prefix_caching = true,
        .now_unix_s = 1700000000.5,
    };
    assert_int_equal(sb_sim_metrics_render(&b, &v), 0);
    return sb_buf_steal(&b, NULL);
}

static void assert_has(const char *text, const char *needle)
{
    if (!strstr(text, needle)) {
        fprintf(stderr, "missing: %s\n--- in:\n%s\n", needle, text);
        fail();
    }
}

static void test_vllm_names_labels_and_values(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_VLLM);
    sb_engine_metrics m = sample_metrics();
    char *t = render(SB_SIM_VLLM, "org/m", &st, &m);
    assert_has(t, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                  "# TYPE vllm:num_requests_running gauge\n"
                  "vllm:num_requests_running{engine=\"0\",model_name=\"org/m\"} 3.0\n");
    assert_has(t, "vllm:num_requests_waiting{engine=\"0\",model_name=\"org/m\"} 2.0\n");
    assert_has(t, "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"org/m\"} 0.25\n");
    assert_has(t, "# TYPE vllm:prefix_cache_queries_total counter\n"
                  "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"org/m\"} 400.0\n");
    assert_has(t, "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"org/m\"} 100.0\n");
    assert_has(t, "vllm:prompt_tokens_total{engine=\"0\",model_name=\"org/m\"} 1234.0\n");
    assert_has(t, "vllm:generation_tokens_total{engine=\"0\",model_name=\"org/m\"} 99.0\n");
    assert_has(t, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"org/m\"} 7.0\n");
    assert_has(t, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"org/m\"} 1.0\n");
    assert_has(t, "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\","
                  "engine=\"0\",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"0\",num_gpu_blocks=\"29205\"} 1.0\n");
    assert_has(t, "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"lora-a\","
                  "waiting_lora_adapters=\"\"} 1700000000.5\n");
    assert_has(t, "# TYPE vllm:time_to_first_token_seconds histogram\n");
    assert_has(t, "# TYPE vllm:e2e_request_latency_seconds histogram\n");
    assert_has(t, "# TYPE vllm:request_queue_time_seconds histogram\n");
    assert_null(strstr(t, "sglang:"));
    sb_free(t);
}

static void test_histogram_buckets_are_cumulative(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_VLLM);
    sb_sim_stats_observe(&st, SB_SIM_HIST_TTFT, 0.001); /* on a bound: counted in it (le) */
    sb_sim_stats_observe(&st, SB_SIM_HIST_TTFT, 0.03);
    sb_sim_stats_observe(&st, SB_SIM_HIST_TTFT, 5000.0); /* above every bound */
    sb_engine_metrics m = sample_metrics();
    char *t = render(SB_SIM_VLLM, "m", &st, &m);
    const char *p = "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=";
    char line[160];
    snprintf(line, sizeof line, "%s\"0.001\",model_name=\"m\"} 1.0\n", p);
    assert_has(t, line);
    snprintf(line, sizeof line, "%s\"0.02\",model_name=\"m\"} 1.0\n", p);
    assert_has(t, line);
    snprintf(line, sizeof line, "%s\"0.04\",model_name=\"m\"} 2.0\n", p);
    assert_has(t, line);
    snprintf(line, sizeof line, "%s\"2560.0\",model_name=\"m\"} 2.0\n", p);
    assert_has(t, line);
    snprintf(line, sizeof line, "%s\"+Inf\",model_name=\"m\"} 3.0\n", p);
    assert_has(t, line);
    assert_has(t, "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} 3.0\n");
    assert_has(t, "vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} 5000.031\n");
    /* vLLM's latency buckets, written as prometheus_client writes them. */
    assert_has(t, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"7680.0\",model_name=\"m\"} 0.0\n");
    assert_has(t, "vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"} 0.0\n");
    sb_free(t);
}

static void test_label_values_are_escaped(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_VLLM);
    sb_engine_metrics m = sample_metrics();
    char *t = render(SB_SIM_VLLM, "we\"ird\\na\nme", &st, &m);
    assert_has(t, "model_name=\"we\\\"ird\\\\na\\nme\"");
    sb_free(t);
}

static void test_sglang_dialect(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_SGLANG);
    sb_sim_stats_observe(&st, SB_SIM_HIST_TTFT, 12.0);
    sb_engine_metrics m = sample_metrics();
    char *t = render(SB_SIM_SGLANG, "m", &st, &m);
    assert_has(t, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3.0\n");
    assert_has(t, "sglang:num_queue_reqs{model_name=\"m\"} 2.0\n");
    assert_has(t, "sglang:token_usage{model_name=\"m\"} 0.25\n");
    assert_has(t, "sglang:cache_hit_rate{model_name=\"m\"} 0.25\n");
    assert_has(t, "sglang:num_used_tokens{model_name=\"m\"} 160.0\n");
    assert_has(t, "sglang:cache_config_info{max_total_num_tokens=\"467280\",model_name=\"m\",page_size=\"16\"} 1.0\n");
    /* SGLang's TTFT buckets (docs_sample.prom) go to 30 s. */
    assert_has(t, "sglang:time_to_first_token_seconds_bucket{le=\"10.0\",model_name=\"m\"} 0.0\n");
    assert_has(t, "sglang:time_to_first_token_seconds_bucket{le=\"15.0\",model_name=\"m\"} 1.0\n");
    assert_has(t, "sglang:time_to_first_token_seconds_bucket{le=\"30.0\",model_name=\"m\"} 1.0\n");
    assert_null(strstr(t, "vllm:"));
    sb_free(t);
}

static void test_llamacpp_dialect(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_LLAMACPP);
    sb_engine_metrics m = sample_metrics();
    char *t = render(SB_SIM_LLAMACPP, "m", &st, &m);
    assert_has(t, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3.0\n");
    assert_has(t, "llamacpp:requests_deferred 2.0\n");
    assert_has(t, "llamacpp:kv_cache_usage_ratio 0.25\n");
    assert_has(t, "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1234.0\n");
    assert_has(t, "llamacpp:tokens_predicted_total 99.0\n");
    assert_null(strstr(t, "model_name"));
    sb_free(t);
}

static void test_every_family_has_help_and_type(void **state)
{
    (void)state;
    for (int f = SB_SIM_VLLM; f <= SB_SIM_LLAMACPP; f++) {
        sb_sim_stats st;
        sb_sim_stats_init(&st, (sb_sim_flavor)f);
        sb_engine_metrics m = sample_metrics();
        char *t = render((sb_sim_flavor)f, "m", &st, &m);
        /* Each sample's family (name less _bucket/_sum/_count) was announced just before. */
        char last_type[128] = "";
        for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
            if (!strncmp(line, "# TYPE ", 7)) {
                sscanf(line + 7, "%127s", last_type);
                continue;
            }
            if (line[0] == '#')
                continue;
            size_t n = strlen(last_type);
            assert_true(n > 0);
            assert_memory_equal(line, last_type, n);
            char c = line[n];
            assert_true(c == '{' || c == ' ' || c == '_');
        }
        sb_free(t);
    }
}

static void test_orca(void **state)
{
    (void)state;
    assert_int_equal(sb_sim_orca_format("TEXT", 4), SB_SIM_ORCA_TEXT);
    assert_int_equal(sb_sim_orca_format(" json ", 6), SB_SIM_ORCA_JSON);
    assert_int_equal(sb_sim_orca_format("BIN", 3), SB_SIM_ORCA_NONE);
    assert_int_equal(sb_sim_orca_format(NULL, 0), SB_SIM_ORCA_NONE);
    sb_engine_metrics m = sample_metrics();
    sb_buf b = {0};
    assert_int_equal(sb_sim_orca_header(&b, SB_SIM_ORCA_NONE, &m), 0);
    assert_int_equal(b.len, 0);
    assert_int_equal(sb_sim_orca_header(&b, SB_SIM_ORCA_TEXT, &m), 0);
    assert_string_equal(b.data, "endpoint-load-metrics: TEXT named_metrics.kv_cache_usage_perc=0.25, "
                                "named_metrics.num_requests_waiting=2\r\n");
    sb_buf_reset(&b);
    assert_int_equal(sb_sim_orca_header(&b, SB_SIM_ORCA_JSON, &m), 0);
    assert_string_equal(b.data, "endpoint-load-metrics: JSON {\"named_metrics\":{\"kv_cache_usage_perc\":0.25,"
                                "\"num_requests_waiting\":2}}\r\n");
    sb_buf_free(&b);
}

static void test_slots(void **state)
{
    (void)state;
    sb_sim_slot slots[2] = {{true, 7, 5, 16, true}, {0}};
    sb_buf b = {0};
    assert_int_equal(sb_sim_slots_render(&b, slots, 2, 4096), 0);
    assert_has(b.data, "[{\"id\":0,\"id_task\":7,\"n_ctx\":4096,\"speculative\":false,\"is_processing\":true,");
    assert_has(b.data,
               "\"next_token\":{\"has_next_token\":true,\"has_new_line\":false,\"n_remain\":11,\"n_decoded\":5}}");
    assert_has(b.data, ",{\"id\":1,\"id_task\":0,\"n_ctx\":4096,\"speculative\":false,\"is_processing\":false,");
    assert_int_equal(b.data[b.len - 1], ']');
    sb_buf_free(&b);
}

static void test_flavor_names(void **state)
{
    (void)state;
    sb_sim_flavor f;
    assert_int_equal(sb_sim_flavor_parse("sglang", &f), 0);
    assert_int_equal(f, SB_SIM_SGLANG);
    assert_int_equal(sb_sim_flavor_parse("llamacpp", &f), 0);
    assert_string_equal(sb_sim_flavor_name(f), "llamacpp");
    assert_true(sb_sim_flavor_parse("trtllm", &f) < 0);
}

static void test_allocation_failure(void **state)
{
    (void)state;
    sb_sim_stats st;
    sb_sim_stats_init(&st, SB_SIM_VLLM);
    sb_engine_metrics m = sample_metrics();
    sb_sim_metrics_view v = {.flavor = SB_SIM_VLLM,
                             .model_name = "m",
                             .engine = &m,
                             .stats = &st,
                             .running_adapters = "",
                             .waiting_adapters = ""};
    /* Failing at every point of the render returns -1 and leaks nothing (ASan checks). */
    for (long n = 0; n < 40; n++) {
        sb_buf b = {0};
        sb_alloc_fail_after(n);
        int rc = sb_sim_metrics_render(&b, &v);
        sb_alloc_fail_after(-1);
        assert_true(rc == 0 || rc == -1);
        sb_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_names_labels_and_values),
        cmocka_unit_test(test_histogram_buckets_are_cumulative),
        cmocka_unit_test(test_label_values_are_escaped),
        cmocka_unit_test(test_sglang_dialect),
        cmocka_unit_test(test_llamacpp_dialect),
        cmocka_unit_test(test_every_family_has_help_and_type),
        cmocka_unit_test(test_orca),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_flavor_names),
        cmocka_unit_test(test_allocation_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
