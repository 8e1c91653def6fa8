/* engine_metrics: what a model server says about its load, read into one engine-neutral
 * report, from its Prometheus /metrics text (vLLM, SGLang, TensorRT-LLM, llama.cpp, or a
 * `custom` engine whose metric names come from config) or from llama.cpp's GET /slots JSON.
 *
 * Pure: no I/O, no clock, no allocation. The caller (the prober) owns the body and the report.
 * Each engine is a table from series names to report fields (engine_metrics.c cites where
 * each name comes from). The table doubles as the parser's filter, so the families nobody
 * reads (histograms, process and GC families) are skipped without being parsed.
 *
 * Aggregation, when one name has several series (one per model_name, engine="0"/"1" under
 * data parallelism, finished_reason, ...):
 *   - counts and counters are summed: running, waiting, prefix queries / hits, requests,
 *     prompt and generation tokens, num_gpu_blocks (cache_config_info: each data-parallel
 *     engine has its own cache);
 *   - fractions are averaged: kv_usage and prefix_hit_rate (a sum of two engines' 0.5 would
 *     read 1.0, i.e. full, when the server is half full);
 *   - block_size is the largest, process_start_time the latest;
 *   - lora_requests_info: the series with the largest value (vLLM sets it to the wall-clock
 *     time of the update) is the current one; the others are history.
 * A series whose value is NaN or infinite is ignored.
 *
 * Fallbacks: vLLM V0's vllm:gpu_cache_usage_perc when vllm:kv_cache_usage_perc is absent;
 * vllm:gpu_prefix_cache_{queries,hits}_total when vllm:prefix_cache_* are absent (early V1
 * counted those in blocks, not tokens: the hit ratio stays right, the absolute numbers not).
 * capacity_tokens = block_size * num_gpu_blocks when the engine does not report a token
 * capacity directly.
 *
 * Restarts: a counter going backwards, or a new process_start_time_seconds, means the engine
 * restarted; sb_engine_report_restarted compares two reports.
 *
 * Not for: scheduling decisions, staleness, or merging with the router's own accounting
 * (core/endpoint does those), nor the ORCA header. */
#ifndef SB_PROTO_ENGINE_METRICS_H
#define SB_PROTO_ENGINE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/prom_parse.h"

typedef enum sb_engine_kind {
    SB_ENGINE_VLLM = 0,
    SB_ENGINE_SGLANG,
    SB_ENGINE_TRTLLM, /* trtllm-serve's MetricsCollector names (trtllm_*) */
    SB_ENGINE_LLAMACPP,
    SB_ENGINE_CUSTOM,
} sb_engine_kind;

/* Reads "vllm", "sglang", "trtllm", "llamacpp" or "custom" into *out: 0, or -EINVAL. */
int sb_engine_kind_parse(const char *s, sb_engine_kind *out);
const char *sb_engine_kind_name(sb_engine_kind k);

/* Metric names for the `custom` engine (from config). A NULL or empty name: not reported.
 * The strings must outlive every sb_engine_map built from them. */
typedef struct sb_engine_custom_names {
    const char *running;   /* gauge of requests being processed */
    const char *waiting;   /* gauge of requests queued */
    const char *kv_usage;  /* gauge of KV-cache use */
    double kv_usage_scale; /* kv_usage = value * scale; 0 means 1 (0.01 for a percentage) */
} sb_engine_custom_names;

/* Adapter names from a comma-separated label value ("a,b" or "a, b"), copied: the report
 * outlives the body. */
#define SB_ENGINE_LORA_MAX 32
#define SB_ENGINE_LORA_TEXT 1024

typedef struct sb_engine_lora_list {
    uint32_t n;                       /* names kept */
    bool truncated;                   /* more names or bytes than fit: n names were kept */
    uint16_t off[SB_ENGINE_LORA_MAX]; /* name i is text + off[i], NUL-terminated */
    uint16_t len[SB_ENGINE_LORA_MAX];
    char text[SB_ENGINE_LORA_TEXT];
} sb_engine_lora_list;

/* Name i (i < l->n), NUL-terminated. */
const char *sb_engine_lora_name(const sb_engine_lora_list *l, uint32_t i);
/* True if the list holds `name` exactly. */
bool sb_engine_lora_has(const sb_engine_lora_list *l, const char *name, size_t len);

/* What one scrape reported. A field means something only when its have_ flag is set. */
typedef struct sb_engine_report {
    bool have_running, have_waiting, have_kv;
    bool have_prefix_queries, have_prefix_hits, have_prefix_hit_rate;
    bool have_block_size, have_num_gpu_blocks, have_capacity_tokens;
    bool have_lora;
    bool have_requests_total, have_prompt_tokens_total, have_generation_tokens_total;
    bool have_process_start;
    bool have_slots; /* from llama.cpp /slots */

    double running;              /* requests in the running batch */
    double waiting;              /* requests queued in the engine */
    double kv_usage;             /* KV-cache utilisation, 0..1 */
    double prefix_queries_total; /* counter: prompt tokens looked up in the prefix cache */
    double prefix_hits_total;    /* counter: of those, tokens found */
    double prefix_hit_rate;      /* gauge 0..1, for engines without the counters */
    uint32_t block_size;         /* tokens per KV block (page) */
    uint64_t num_gpu_blocks;     /* KV blocks in all */
    uint64_t capacity_tokens;    /* KV cache capacity in tokens */

    uint32_t max_lora;     /* adapters resident at most (vLLM --max-loras) */
    double lora_info_time; /* the chosen lora_requests_info series' value (unix s) */
    sb_engine_lora_list running_adapters;
    sb_engine_lora_list waiting_adapters;

    double requests_total; /* counters, compared across scrapes to detect restarts */
    double prompt_tokens_total;
    double generation_tokens_total;
    double process_start_time; /* unix seconds (process_start_time_seconds) */

    uint32_t slots_total, slots_busy; /* llama.cpp /slots */

    uint32_t n_samples;            /* samples read into this report */
    uint32_t n_matched;            /* of those, samples of the engine's own families: all but
                                      process_start_time_seconds, which every Python server
                                      exports; 0 on a 200 scrape means a wrong engine */
    uint32_t n_malformed;          /* malformed lines skipped */
    uint32_t first_malformed_line; /* 0: none */

    /* private: accumulators resolved by sb_engine_report_finish */
    struct {
        double kv_sum[2], rate_sum, fb_queries, fb_hits;
        uint32_t kv_n[2], rate_n;
        bool fb_have_queries, fb_have_hits, lora_seen;
    } acc;
} sb_engine_report;

/* An engine's name table, resolved once (custom names included). Caller-embedded. */
#define SB_ENGINE_MAP_MAX 32

typedef struct sb_engine_map {
    sb_engine_kind kind;
    double kv_scale;
    uint32_t n;
    struct {
        const char *name;
        size_t len;
        int field; /* private: which report field */
    } e[SB_ENGINE_MAP_MAX];
} sb_engine_map;

/* Builds the table of `kind`; custom is read only for SB_ENGINE_CUSTOM (may be NULL
 * otherwise, or then: nothing but process_start_time is read). Cannot fail. */
void sb_engine_map_init(sb_engine_map *m, sb_engine_kind kind, const sb_engine_custom_names *custom);

/* The parser's filter (sb_prom_want_fn with ud = the map): true for a family the table reads.
 * A family named without the _total its series carry (OpenMetrics style) also matches. */
bool sb_engine_map_want(void *map, const char *family, size_t len);

/* Incremental use (a body parsed in chunks with sb_prom_next): init, add each sample, finish.
 * add ignores samples the table does not name. finish resolves means and fallbacks; the
 * report is then complete. None can fail. */
void sb_engine_report_init(sb_engine_report *r);
void sb_engine_report_add(sb_engine_report *r, const sb_engine_map *m, const sb_prom_sample *s);
void sb_engine_report_finish(sb_engine_report *r);

/* One call over a whole /metrics body: init, parse (filtered), add, finish. Returns the bytes
 * consumed (len, or where an incomplete last line starts: that line is ignored). Malformed
 * lines are counted in the report, never fatal. */
size_t sb_engine_metrics_parse(const sb_engine_map *m, const char *body, size_t len, sb_engine_report *r);

/* llama.cpp GET /slots (a JSON array of slot objects with is_processing and n_ctx), for
 * servers run without --metrics. Fills slots_total, slots_busy, running (= busy slots) and
 * capacity_tokens (= sum of n_ctx), into a report first reset by sb_engine_report_init.
 * waiting is an approximation: llama.cpp hands a queued task to the first free slot, so a
 * queue exists only while every slot is busy: waiting = 0 (have_waiting) when a slot is idle,
 * unknown (no have_waiting) when all are busy.
 * scratch: caller memory for the JSON tokens (aligned for int; 20 bytes per JSON value, about
 * 2.6 KiB per slot for current llama.cpp); never allocates. Linear in len whatever the shape
 * (proto/json.h). Returns 0, SB_ENGINE_SLOTS_BAD_JSON (not JSON, not an array of objects, or
 * nested deeper than SB_ENGINE_SLOTS_MAX_DEPTH) or SB_ENGINE_SLOTS_NOSPACE (scratch too small);
 * on error the report is left as it was. */
enum { SB_ENGINE_SLOTS_BAD_JSON = -1, SB_ENGINE_SLOTS_NOSPACE = -2 };
/* llama.cpp's /slots nests 4 levels (array, slot, params, a list in params); a server that
 * answers deeper is not one we can read, and is refused before it costs anything. */
#define SB_ENGINE_SLOTS_MAX_DEPTH 32
int sb_engine_slots_parse(const char *json, size_t len, void *scratch, size_t scratch_bytes, sb_engine_report *r);

/* Engine detection (a pool's `engine: auto`, and naming the engine a wrong one looks like).
 * sb_engine_families returns a mask of (1u << kind) for each engine whose own family prefix
 * starts a sample line or names a # TYPE / # HELP family in body: `vllm:` (V0 and V1),
 * `sglang:`, `trtllm_`, `llamacpp:`. Never SB_ENGINE_CUSTOM (it has no prefix). One linear
 * pass, a few byte compares per line; reads nothing past len; never allocates. */
uint32_t sb_engine_families(const char *body, size_t len);
/* The engine a mask from sb_engine_families points at: true and *out set, or false for an
 * empty mask. Several at once (a server exporting two engines' families, which none does
 * today) resolves in the order vllm, sglang, trtllm, llamacpp. */
bool sb_engine_guess(uint32_t families, sb_engine_kind *out);
/* The family prefix an engine's names carry ("vllm:"), or NULL for custom. */
const char *sb_engine_prefix(sb_engine_kind k);

/* OpenAI GET /v1/models ({"data":[{"id":"name",...},...]}, as vLLM, SGLang, TensorRT-LLM and
 * llama.cpp answer it): whether `name` (len bytes) is one of the ids. Returns 1 (listed) or
 * 0 (not listed; *first, when not NULL, points into json at the first id, *first_len its
 * length, 0 when the list is empty), SB_ENGINE_SLOTS_BAD_JSON (not JSON, no data array of
 * objects, or nested deeper than SB_ENGINE_SLOTS_MAX_DEPTH) or SB_ENGINE_SLOTS_NOSPACE
 * (scratch too small). Ids are compared as written: an escaped id does not match (no served
 * name needs escaping). scratch as for sb_engine_slots_parse; never allocates; linear in len. */
int sb_engine_models_has(const char *json, size_t len, void *scratch, size_t scratch_bytes, const char *name,
                         size_t name_len, const char **first, size_t *first_len);

/* True when `cur` shows a restart since `prev`: process_start_time changed, or a counter
 * both reports carry (requests, prompt or generation tokens, prefix queries) went backwards.
 * Pure; false when nothing comparable is present. */
bool sb_engine_report_restarted(const sb_engine_report *prev, const sb_engine_report *cur);

#endif
