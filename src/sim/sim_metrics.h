/* sim_metrics: what a simulated replica reports about itself, rendered as the real servers do.
 *
 * Pure: no I/O, no clock reads (times and values come in as arguments). It renders
 *   - GET /metrics in Prometheus text format 0.0.4, with the metric names, label sets and HELP
 *     texts of the engine being imitated (the "flavor"): vLLM V1 (`vllm:*`, labels engine="0"
 *     and model_name), SGLang (`sglang:*`, label model_name) or llama.cpp (`llamacpp:*`, no
 *     labels). Labels are in alphabetical order and numbers are written as Python's
 *     prometheus_client writes them ("3.0", "0.25"), as in the captures under
 *     tests/fixtures/metrics/;
 *   - the ORCA load report header (`endpoint-load-metrics`) in its TEXT or JSON form;
 *   - llama.cpp's GET /slots array.
 * It also keeps the request-level histograms (time to first token, end to end, queue time,
 * inter-token latency) that the engine leaves to its callers, with the bucket boundaries of
 * the imitated engine.
 *
 * Not for: parsing Prometheus text (proto/ does that for the gateway), or deciding when a
 * replica answers (sim/server.c). */
#ifndef SB_SIM_SIM_METRICS_H
#define SB_SIM_SIM_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "sim/engine.h"

typedef enum sb_sim_flavor {
    SB_SIM_VLLM = 0,
    SB_SIM_SGLANG,
    SB_SIM_LLAMACPP,
} sb_sim_flavor;

/* Reads "vllm", "sglang" or "llamacpp" into *out: 0, or -EINVAL for anything else. */
int sb_sim_flavor_parse(const char *s, sb_sim_flavor *out);
const char *sb_sim_flavor_name(sb_sim_flavor f);

enum sb_sim_hist_id {
    SB_SIM_HIST_TTFT = 0, /* arrival to first token */
    SB_SIM_HIST_E2E,      /* arrival to last token */
    SB_SIM_HIST_QUEUE,    /* arrival to first scheduled step */
    SB_SIM_HIST_ITL,      /* between successive tokens of a request */
    SB_SIM_HIST_N,
};

#define SB_SIM_HIST_BOUNDS_MAX 24

/* A Prometheus histogram: per-bucket counts (not cumulative; rendering accumulates them). */
typedef struct sb_sim_hist {
    const double *bounds; /* ascending upper bounds, static storage */
    size_t n_bounds;
    uint64_t counts[SB_SIM_HIST_BOUNDS_MAX + 1]; /* counts[n_bounds] is the +Inf bucket */
    uint64_t count;
    double sum;
} sb_sim_hist;

/* The request-level statistics of one replica. */
typedef struct sb_sim_stats {
    sb_sim_hist hist[SB_SIM_HIST_N];
} sb_sim_stats;

/* Empties *s and sets the bucket boundaries the flavor's server uses. */
void sb_sim_stats_init(sb_sim_stats *s, sb_sim_flavor f);
/* Counts one observation, in seconds. O(buckets). */
void sb_sim_stats_observe(sb_sim_stats *s, enum sb_sim_hist_id h, double seconds);

/* Everything one /metrics answer shows. */
typedef struct sb_sim_metrics_view {
    sb_sim_flavor flavor;
    const char *model_name; /* the served model */
    const sb_engine_metrics *engine;
    const sb_sim_stats *stats;
    const char *running_adapters; /* comma-separated adapter names, "" if none */
    const char *waiting_adapters;
    bool enable_prefix_caching;
    double now_unix_s; /* vllm:lora_requests_info's value: vLLM reports the
                        * wall-clock time of the report there */
} sb_sim_metrics_view;

/* Appends the /metrics text for *v to b. Returns 0, or -1 on ENOMEM (b then holds a prefix). */
int sb_sim_metrics_render(sb_buf *b, const sb_sim_metrics_view *v);

typedef enum sb_sim_orca {
    SB_SIM_ORCA_NONE = 0,
    SB_SIM_ORCA_TEXT,
    SB_SIM_ORCA_JSON,
} sb_sim_orca;

/* The format asked for by an `endpoint-load-metrics-format` request header value ("TEXT" or
 * "JSON", any case, surrounding blanks ignored); SB_SIM_ORCA_NONE for anything else, or if
 * value is NULL. */
sb_sim_orca sb_sim_orca_format(const char *value, size_t len);

/* Appends the response header line "endpoint-load-metrics: ...\r\n" carrying
 * named_metrics.kv_cache_usage_perc and named_metrics.num_requests_waiting, as vLLM's ORCA
 * support writes it:
 *   TEXT named_metrics.kv_cache_usage_perc=0.25, named_metrics.num_requests_waiting=3
 *   JSON {"named_metrics":{"kv_cache_usage_perc":0.25,"num_requests_waiting":3}}
 * Appends nothing for SB_SIM_ORCA_NONE. Returns 0, or -1 on ENOMEM. */
int sb_sim_orca_header(sb_buf *b, sb_sim_orca fmt, const sb_engine_metrics *m);

/* One llama.cpp slot (a sequence the server can run at once). */
typedef struct sb_sim_slot {
    bool processing;
    uint64_t id_task;    /* the request's id on the replica; 0 when idle */
    uint32_t n_decoded;  /* tokens generated so far */
    uint32_t max_tokens; /* requested output length (n_predict) */
    bool stream;
} sb_sim_slot;

/* Appends llama.cpp's GET /slots JSON array for n slots, each with context n_ctx (llama.cpp
 * splits its context evenly among slots). The fields are a subset of the real ones (see
 * tests/fixtures/metrics/llamacpp/slots_example.json): id, id_task, n_ctx, speculative,
 * is_processing, params (n_predict, max_tokens, stream, temperature, top_k, top_p, lora) and
 * next_token. Returns 0, or -1 on ENOMEM. */
int sb_sim_slots_render(sb_buf *b, const sb_sim_slot *slots, size_t n, uint32_t n_ctx);

#endif
