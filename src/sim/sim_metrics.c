/* sim_metrics: Prometheus text, ORCA header and /slots rendering for the simulator
 * (see sim_metrics.h). Every append is checked through one `ok` flag per render: the first
 * failure sticks and the caller gets -1, which keeps the long family lists readable. */
#include "sim/sim_metrics.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* vLLM V1 request histograms (vllm/v1/metrics/loggers.py). */
static const double vllm_ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double vllm_latency_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double vllm_itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
/* SGLang's, as its /metrics shows them (tests/fixtures/metrics/sglang/docs_sample.prom). */
static const double sglang_ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                            0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 15.0, 20.0, 25.0, 30.0};
static const double sglang_e2e_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,  2.5, 5.0,
                                           10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0};

int sb_sim_flavor_parse(const char *s, sb_sim_flavor *out)
{
    static const char *names[] = {"vllm", "sglang", "llamacpp"};
    for (size_t i = 0; i < NELEMS(names); i++)
        if (!strcmp(s, names[i])) {
            *out = (sb_sim_flavor)i;
            return 0;
        }
    return -EINVAL;
}

const char *sb_sim_flavor_name(sb_sim_flavor f)
{
    return f == SB_SIM_SGLANG ? "sglang" : f == SB_SIM_LLAMACPP ? "llamacpp" : "vllm";
}

static void hist_init(sb_sim_hist *h, const double *bounds, size_t n)
{
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->n_bounds = n;
}

void sb_sim_stats_init(sb_sim_stats *s, sb_sim_flavor f)
{
    bool sg = f == SB_SIM_SGLANG;
    hist_init(&s->hist[SB_SIM_HIST_TTFT], sg ? sglang_ttft_bounds : vllm_ttft_bounds,
              sg ? NELEMS(sglang_ttft_bounds) : NELEMS(vllm_ttft_bounds));
    hist_init(&s->hist[SB_SIM_HIST_E2E], sg ? sglang_e2e_bounds : vllm_latency_bounds,
              sg ? NELEMS(sglang_e2e_bounds) : NELEMS(vllm_latency_bounds));
    hist_init(&s->hist[SB_SIM_HIST_QUEUE], vllm_latency_bounds, NELEMS(vllm_latency_bounds));
    hist_init(&s->hist[SB_SIM_HIST_ITL], vllm_itl_bounds, NELEMS(vllm_itl_bounds));
}

void sb_sim_stats_observe(sb_sim_stats *s, enum sb_sim_hist_id id, double seconds)
{
    sb_sim_hist *h = &s->hist[id];
    size_t i = 0;
    while (i < h->n_bounds && seconds > h->bounds[i]) /* Prometheus buckets are "le": <= bound */
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += seconds;
}

/* ---- number and label formatting ---- */

/* Writes v the way prometheus_client does (Python's repr of a float): the shortest text that
 * reads back as v, with ".0" on integral values; "+Inf", "-Inf", "NaN". */
static const char *fmt_num(char out[40], double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "+Inf" : "-Inf";
    int digits = 1;
    char e[40];
    for (; digits < 17; digits++) {
        snprintf(e, sizeof(e), "%.*e", digits - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    snprintf(e, sizeof(e), "%.*e", digits - 1, v);
    int exp10 = atoi(strchr(e, 'e') + 1);
    if (v != 0 && (exp10 < -4 || exp10 >= 16)) {
        memcpy(out, e, strlen(e) + 1); /* Python's repr switches to exponents there too */
        return out;
    }
    int decimals = digits - 1 - exp10;
    snprintf(out, 40, "%.*f", decimals > 0 ? decimals : 0, v);
    if (!strchr(out, '.'))
        strcat(out, ".0");
    return out;
}

typedef struct out {
    sb_buf *b;
    bool ok;
} out;

static void put(out *o, const char *s)
{
    if (o->ok && sb_buf_puts(o->b, s) < 0)
        o->ok = false;
}

static void putf(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(out *o, const char *fmt, ...)
{
    if (!o->ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (sb_buf_vprintf(o->b, fmt, ap) < 0)
        o->ok = false;
    va_end(ap);
}

/* Appends s escaped as a Prometheus label value: backslash, double quote and newline. */
static void put_label_value(out *o, const char *s)
{
    for (; *s && o->ok; s++) {
        if (*s == '\\')
            put(o, "\\\\");
        else if (*s == '"')
            put(o, "\\\"");
        else if (*s == '\n')
            put(o, "\\n");
        else if (sb_buf_append(o->b, s, 1) < 0)
            o->ok = false;
    }
}

static void family(out *o, const char *name, const char *type, const char *help)
{
    putf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample; labels is a rendered label list without braces, "" for none. */
static void sample(out *o, const char *name, const char *labels, double v)
{
    char num[40];
    if (*labels)
        putf(o, "%s{%s} %s\n", name, labels, fmt_num(num, v));
    else
        putf(o, "%s %s\n", name, fmt_num(num, v));
}

static void gauge(out *o, const char *name, const char *help, const char *labels, double v)
{
    family(o, name, "gauge", help);
    sample(o, name, labels, v);
}

static void counter(out *o, const char *name, const char *help, const char *labels, double v)
{
    family(o, name, "counter", help);
    sample(o, name, labels, v);
}

/* A histogram whose bucket labels are pre, le, post (alphabetical order, as the captures
 * show); pre and post are rendered label lists, possibly empty. */
static void histogram(out *o, const char *name, const char *help, const char *pre, const char *post,
                      const sb_sim_hist *h)
{
    char num[40];
    const char *sep = *pre && *post ? "," : "";
    family(o, name, "histogram", help);
    putf(o, "%s_sum{%s%s%s} %s\n", name, pre, sep, post, fmt_num(num, h->sum));
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        cum += h->counts[i];
        putf(o, "%s_bucket{%s%sle=\"%s\"%s%s} ", name, pre, *pre ? "," : "",
             i < h->n_bounds ? fmt_num(num, h->bounds[i]) : "+Inf", *post ? "," : "", post);
        putf(o, "%s\n", fmt_num(num, (double)cum));
    }
    putf(o, "%s_count{%s%s%s} %s\n", name, pre, sep, post, fmt_num(num, (double)h->count));
}

/* ---- flavors ---- */

static void render_vllm(out *o, const sb_sim_metrics_view *v, const char *model_label)
{
    const sb_engine_metrics *m = v->engine;
    const sb_sim_hist *hist = v->stats->hist;
    sb_buf lb = {0}, post = {0};
    if (sb_buf_printf(&lb, "engine=\"0\",%s", model_label) < 0 || sb_buf_puts(&post, model_label) < 0) {
        o->ok = false;
        goto done;
    }
    const char *l = lb.data;
    gauge(o, "vllm:num_requests_running", "Number of requests in model execution batches.", l, m->num_requests_running);
    gauge(o, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, m->num_requests_waiting);
    gauge(o, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, m->kv_cache_usage);
    counter(o, "vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", l,
            (double)m->prefix_cache_queries_total);
    counter(o, "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", l,
            (double)m->prefix_cache_hits_total);
    counter(o, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", l,
            (double)m->num_preemptions_total);
    counter(o, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, (double)m->prompt_tokens_total);
    counter(o, "vllm:generation_tokens_total", "Number of generation tokens processed.", l,
            (double)m->generation_tokens_total);
    /* Every request ends by length here (the filler never stops early); aborts are vLLM's
     * "abort" reason. */
    family(o, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    static const char *reasons[] = {"abort", "length", "stop"};
    double counts[] = {(double)m->request_aborted_total, (double)m->request_success_total, 0.0};
    for (size_t i = 0; i < NELEMS(reasons); i++) {
        char num[40];
        putf(o, "vllm:request_success_total{engine=\"0\",finished_reason=\"%s\",%s} %s\n", reasons[i], model_label,
             fmt_num(num, counts[i]));
    }
    histogram(o, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "engine=\"0\"",
              post.data, &hist[SB_SIM_HIST_TTFT]);
    histogram(o, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "engine=\"0\"",
              post.data, &hist[SB_SIM_HIST_ITL]);
    histogram(o, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "engine=\"0\"",
              post.data, &hist[SB_SIM_HIST_E2E]);
    histogram(o, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
              "engine=\"0\"", post.data, &hist[SB_SIM_HIST_QUEUE]);
    family(o, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    putf(o,
         "vllm:cache_config_info{block_size=\"%u\",cache_dtype=\"auto\",enable_prefix_caching=\"%s\",engine=\"0\","
         "gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"0\",num_gpu_blocks=\"%u\"} 1.0\n",
         m->block_size, v->enable_prefix_caching ? "True" : "False", m->num_gpu_blocks);
    family(o, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    char num[40];
    putf(o, "vllm:lora_requests_info{max_lora=\"%u\",running_lora_adapters=\"", m->max_loras);
    put_label_value(o, v->running_adapters ? v->running_adapters : "");
    put(o, "\",waiting_lora_adapters=\"");
    put_label_value(o, v->waiting_adapters ? v->waiting_adapters : "");
    putf(o, "\"} %s\n", fmt_num(num, v->now_unix_s));
done:
    sb_buf_free(&lb);
    sb_buf_free(&post);
}

static void render_sglang(out *o, const sb_sim_metrics_view *v, const char *l)
{
    const sb_engine_metrics *m = v->engine;
    double hit_rate = m->prefix_cache_queries_total
                          ? (double)m->prefix_cache_hits_total / (double)m->prefix_cache_queries_total
                          : 0.0;
    counter(o, "sglang:prompt_tokens_total", "Number of prefill tokens processed.", l, (double)m->prompt_tokens_total);
    counter(o, "sglang:generation_tokens_total", "Number of generation tokens processed.", l,
            (double)m->generation_tokens_total);
    counter(o, "sglang:num_requests_total", "Number of requests processed.", l, (double)m->request_success_total);
    gauge(o, "sglang:num_running_reqs", "The number of running requests", l, m->num_requests_running);
    gauge(o, "sglang:num_queue_reqs", "The number of requests in the waiting queue", l, m->num_requests_waiting);
    gauge(o, "sglang:num_used_tokens", "The number of used tokens", l,
          (double)m->num_blocks_used * (double)m->block_size);
    gauge(o, "sglang:token_usage", "The token usage", l, m->kv_cache_usage);
    gauge(o, "sglang:cache_hit_rate", "The cache hit rate", l, hit_rate);
    family(o, "sglang:cache_config_info", "gauge", "Information of the KV cache configuration");
    putf(o, "sglang:cache_config_info{max_total_num_tokens=\"%llu\",%s,page_size=\"%u\"} 1.0\n",
         (unsigned long long)m->num_gpu_blocks * m->block_size, l, m->block_size);
    histogram(o, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "", l,
              &v->stats->hist[SB_SIM_HIST_TTFT]);
    histogram(o, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "", l,
              &v->stats->hist[SB_SIM_HIST_E2E]);
}

static void render_llamacpp(out *o, const sb_sim_metrics_view *v)
{
    const sb_engine_metrics *m = v->engine;
    counter(o, "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", "",
            (double)m->prompt_tokens_total);
    counter(o, "llamacpp:tokens_predicted_total", "Number of generation tokens processed.", "",
            (double)m->generation_tokens_total);
    counter(o, "llamacpp:n_decode_total", "Total number of llama_decode() calls", "", (double)m->num_steps_total);
    gauge(o, "llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", "", m->kv_cache_usage);
    gauge(o, "llamacpp:kv_cache_tokens", "KV-cache tokens.", "", (double)m->num_blocks_used * (double)m->block_size);
    gauge(o, "llamacpp:requests_processing", "Number of requests processing.", "", m->num_requests_running);
    gauge(o, "llamacpp:requests_deferred", "Number of requests deferred.", "", m->num_requests_waiting);
}

int sb_sim_metrics_render(sb_buf *b, const sb_sim_metrics_view *v)
{
    out o = {b, true};
    if (v->flavor == SB_SIM_LLAMACPP) {
        render_llamacpp(&o, v);
        return o.ok ? 0 : -1;
    }
    sb_buf ml = {0};
    out lo = {&ml, true};
    put(&lo, "model_name=\"");
    put_label_value(&lo, v->model_name);
    put(&lo, "\"");
    if (!lo.ok) {
        sb_buf_free(&ml);
        return -1;
    }
    if (v->flavor == SB_SIM_SGLANG)
        render_sglang(&o, v, ml.data);
    else
        render_vllm(&o, v, ml.data);
    sb_buf_free(&ml);
    return o.ok ? 0 : -1;
}

/* ---- ORCA ---- */

sb_sim_orca sb_sim_orca_format(const char *value, size_t len)
{
    if (!value)
        return SB_SIM_ORCA_NONE;
    while (len && isspace((unsigned char)*value))
        value++, len--;
    while (len && isspace((unsigned char)value[len - 1]))
        len--;
    if (len == 4 && !strncasecmp(value, "TEXT", 4))
        return SB_SIM_ORCA_TEXT;
    if (len == 4 && !strncasecmp(value, "JSON", 4))
        return SB_SIM_ORCA_JSON;
    return SB_SIM_ORCA_NONE;
}

int sb_sim_orca_header(sb_buf *b, sb_sim_orca fmt, const sb_engine_metrics *m)
{
    char num[40];
    fmt_num(num, m->kv_cache_usage);
    if (fmt == SB_SIM_ORCA_TEXT)
        return sb_buf_printf(b,
                             "endpoint-load-metrics: TEXT named_metrics.kv_cache_usage_perc=%s, "
                             "named_metrics.num_requests_waiting=%u\r\n",
                             num, m->num_requests_waiting);
    if (fmt == SB_SIM_ORCA_JSON)
        return sb_buf_printf(b,
                             "endpoint-load-metrics: JSON {\"named_metrics\":{\"kv_cache_usage_perc\":%s,"
                             "\"num_requests_waiting\":%u}}\r\n",
                             num, m->num_requests_waiting);
    return 0;
}

/* ---- llama.cpp /slots ---- */

int sb_sim_slots_render(sb_buf *b, const sb_sim_slot *slots, size_t n, uint32_t n_ctx)
{
    out o = {b, true};
    put(&o, "[");
    for (size_t i = 0; i < n; i++) {
        const sb_sim_slot *s = &slots[i];
        long n_remain = s->processing ? (long)s->max_tokens - (long)s->n_decoded : -1;
        putf(&o,
             "%s{\"id\":%zu,\"id_task\":%llu,\"n_ctx\":%u,\"speculative\":false,\"is_processing\":%s,"
             "\"params\":{\"n_predict\":%ld,\"seed\":4294967295,\"temperature\":0.800000011920929,\"top_k\":40,"
             "\"top_p\":0.949999988079071,\"min_p\":0.05000000074505806,\"max_tokens\":%ld,\"n_keep\":0,"
             "\"stream\":%s,\"lora\":[]},"
             "\"next_token\":{\"has_next_token\":%s,\"has_new_line\":false,\"n_remain\":%ld,\"n_decoded\":%u}}",
             i ? "," : "", i, (unsigned long long)s->id_task, n_ctx, s->processing ? "true" : "false",
             s->processing ? (long)s->max_tokens : -1L, s->processing ? (long)s->max_tokens : -1L,
             s->stream ? "true" : "false", s->processing ? "true" : "false", n_remain, s->n_decoded);
    }
    put(&o, "]");
    return o.ok ? 0 : -1;
}
