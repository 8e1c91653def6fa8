/* engine_metrics: per-engine name tables and the report they fill (see engine_metrics.h).
 *
 * Sources of the names:
 *   vLLM      vllm/v1/metrics/loggers.py, and the captures in tests/fixtures/metrics/vllm/
 *             (V0's gpu_cache_usage_perc, V1's kv_cache_usage_perc, cache_config_info,
 *             lora_requests_info).
 *   SGLang    python/sglang/srt/metrics/collector.py (num_running_reqs, num_queue_reqs,
 *             token_usage, cache_hit_rate, cached_tokens_total, num_requests_total,
 *             max_total_num_tokens); cache_config_info{page_size,num_pages} and, from SGLang
 *             0.5.11, the sglang:page_size / sglang:num_pages gauges, as the Gateway API
 *             Inference Extension's model-server protocol lists them.
 *   TRT-LLM   NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py (MetricsCollector, prefix
 *             "trtllm_", served by trtllm-serve; read at commit 050f80de): num_requests_running
 *             (iteration stats numActiveRequests), num_requests_waiting (numQueuedRequests),
 *             kv_cache_utilization (usedNumBlocks / maxNumBlocks), kv_cache_hit_rate,
 *             kv_cache_max_blocks, kv_cache_tokens_per_block, prompt_cached_tokens_total,
 *             request_success_total. Older releases (1.1.0rc5, as Dynamo documents) export
 *             only the request histograms: those servers report no load, and say so by
 *             leaving the have_ flags clear.
 *   llama.cpp tools/server README, GET /metrics (requests_processing, requests_deferred,
 *             kv_cache_usage_ratio, prompt_tokens_total, tokens_predicted_total) and GET /slots.
 *   all       process_start_time_seconds, from the Prometheus client libraries' process
 *             collector (Python's prometheus_client, which vLLM, SGLang and trtllm-serve use). */
#include "proto/engine_metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "proto/json.h"

enum field {
    F_RUNNING,
    F_WAITING,
    F_KV,          /* preferred KV-usage name */
    F_KV_FALLBACK, /* used only when F_KV is absent */
    F_QUERIES,
    F_HITS,
    F_QUERIES_FALLBACK,
    F_HITS_FALLBACK,
    F_HIT_RATE,
    F_CACHE_INFO, /* labels block_size / num_gpu_blocks (vLLM), page_size / num_pages (SGLang) */
    F_BLOCK_SIZE,
    F_NUM_BLOCKS,
    F_CAPACITY_TOKENS,
    F_LORA_INFO,
    F_REQUESTS,
    F_PROMPT_TOKENS,
    F_GENERATION_TOKENS,
    F_PROCESS_START,
};

typedef struct entry {
    const char *name;
    enum field field;
} entry;

#define PROCESS_START                                                                                                  \
    {                                                                                                                  \
        "process_start_time_seconds", F_PROCESS_START                                                                  \
    }

static const entry vllm_table[] = {
    {"vllm:num_requests_running", F_RUNNING},
    {"vllm:num_requests_waiting", F_WAITING},
    {"vllm:kv_cache_usage_perc", F_KV},
    {"vllm:gpu_cache_usage_perc", F_KV_FALLBACK},
    {"vllm:prefix_cache_queries_total", F_QUERIES},
    {"vllm:prefix_cache_hits_total", F_HITS},
    {"vllm:gpu_prefix_cache_queries_total", F_QUERIES_FALLBACK},
    {"vllm:gpu_prefix_cache_hits_total", F_HITS_FALLBACK},
    {"vllm:cache_config_info", F_CACHE_INFO},
    {"vllm:lora_requests_info", F_LORA_INFO},
    {"vllm:request_success_total", F_REQUESTS},
    {"vllm:prompt_tokens_total", F_PROMPT_TOKENS},
    {"vllm:generation_tokens_total", F_GENERATION_TOKENS},
    PROCESS_START,
};

static const entry sglang_table[] = {
    {"sglang:num_running_reqs", F_RUNNING},
    {"sglang:num_queue_reqs", F_WAITING},
    {"sglang:token_usage", F_KV},
    {"sglang:cache_hit_rate", F_HIT_RATE},
    {"sglang:prompt_tokens_total", F_QUERIES}, /* every prompt token is looked up in the radix tree */
    {"sglang:cached_tokens_total", F_HITS},
    {"sglang:cache_config_info", F_CACHE_INFO},
    {"sglang:page_size", F_BLOCK_SIZE},
    {"sglang:num_pages", F_NUM_BLOCKS},
    {"sglang:max_total_num_tokens", F_CAPACITY_TOKENS},
    {"sglang:num_requests_total", F_REQUESTS},
    {"sglang:prompt_tokens_total", F_PROMPT_TOKENS},
    {"sglang:generation_tokens_total", F_GENERATION_TOKENS},
    PROCESS_START,
};

static const entry trtllm_table[] = {
    {"trtllm_num_requests_running", F_RUNNING},
    {"trtllm_num_requests_waiting", F_WAITING},
    {"trtllm_kv_cache_utilization", F_KV},
    {"trtllm_kv_cache_hit_rate", F_HIT_RATE},
    {"trtllm_prompt_tokens_total", F_QUERIES},
    {"trtllm_prompt_cached_tokens_total", F_HITS},
    {"trtllm_kv_cache_tokens_per_block", F_BLOCK_SIZE},
    {"trtllm_kv_cache_max_blocks", F_NUM_BLOCKS},
    {"trtllm_request_success_total", F_REQUESTS},
    {"trtllm_prompt_tokens_total", F_PROMPT_TOKENS},
    {"trtllm_generation_tokens_total", F_GENERATION_TOKENS},
    PROCESS_START,
};

static const entry llamacpp_table[] = {
    {"llamacpp:requests_processing", F_RUNNING},
    {"llamacpp:requests_deferred", F_WAITING},
    {"llamacpp:kv_cache_usage_ratio", F_KV},
    {"llamacpp:prompt_tokens_total", F_PROMPT_TOKENS},
    {"llamacpp:tokens_predicted_total", F_GENERATION_TOKENS},
    PROCESS_START,
};

static const char *const kind_names[] = {"vllm", "sglang", "trtllm", "llamacpp", "custom"};

int sb_engine_kind_parse(const char *s, sb_engine_kind *out)
{
    for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (sb_engine_kind)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *sb_engine_kind_name(sb_engine_kind k)
{
    return (unsigned)k < sizeof kind_names / sizeof kind_names[0] ? kind_names[k] : "unknown";
}

static void map_add(sb_engine_map *m, const char *name, enum field f)
{
    if (!name || !*name || m->n == SB_ENGINE_MAP_MAX)
        return;
    m->e[m->n].name = name;
    m->e[m->n].len = strlen(name);
    m->e[m->n].field = f;
    m->n++;
}

void sb_engine_map_init(sb_engine_map *m, sb_engine_kind kind, const sb_engine_custom_names *custom)
{
    const entry *t = NULL;
    size_t n = 0;

    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->kv_scale = 1.0;
    switch (kind) {
    case SB_ENGINE_VLLM: t = vllm_table, n = sizeof vllm_table / sizeof vllm_table[0]; break;
    case SB_ENGINE_SGLANG: t = sglang_table, n = sizeof sglang_table / sizeof sglang_table[0]; break;
    case SB_ENGINE_TRTLLM: t = trtllm_table, n = sizeof trtllm_table / sizeof trtllm_table[0]; break;
    case SB_ENGINE_LLAMACPP: t = llamacpp_table, n = sizeof llamacpp_table / sizeof llamacpp_table[0]; break;
    case SB_ENGINE_CUSTOM:
        if (custom) {
            map_add(m, custom->running, F_RUNNING);
            map_add(m, custom->waiting, F_WAITING);
            map_add(m, custom->kv_usage, F_KV);
            if (custom->kv_usage_scale != 0 && isfinite(custom->kv_usage_scale))
                m->kv_scale = custom->kv_usage_scale;
        }
        map_add(m, "process_start_time_seconds", F_PROCESS_START);
        return;
    }
    for (size_t i = 0; i < n; i++)
        map_add(m, t[i].name, t[i].field);
}

bool sb_engine_map_want(void *map, const char *family, size_t len)
{
    const sb_engine_map *m = map;

    for (uint32_t i = 0; i < m->n; i++) {
        size_t el = m->e[i].len;
        if (el == len && memcmp(m->e[i].name, family, len) == 0)
            return true;
        /* `# TYPE foo counter` above `foo_total` samples */
        if (el == len + 6 && memcmp(m->e[i].name, family, len) == 0 && memcmp(m->e[i].name + len, "_total", 6) == 0)
            return true;
    }
    return false;
}

void sb_engine_report_init(sb_engine_report *r)
{
    memset(r, 0, sizeof *r);
}

/* A label value holding a non-negative integer ("16", "81767"); anything else (None, 1.5,
 * empty, too large) is false. */
static bool label_uint(const sb_prom_sample *s, const char *name, uint64_t *out)
{
    const sb_prom_slice *v = sb_prom_label_value(s, name);
    uint64_t x = 0;

    if (!v || v->len == 0 || v->len > 18)
        return false;
    for (size_t i = 0; i < v->len; i++) {
        if (v->p[i] < '0' || v->p[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(v->p[i] - '0');
    }
    *out = x;
    return true;
}

/* Splits a comma-separated, escaped label value into names, trimming spaces ("a, b" is how
 * the inference extension's protocol writes it). Empty names, and names holding a NUL byte,
 * are dropped. */
static void lora_list_set(sb_engine_lora_list *l, const sb_prom_slice *v)
{
    char tmp[SB_ENGINE_LORA_TEXT];
    long n;
    size_t i = 0, o = 0;

    memset(l, 0, sizeof *l);
    if (!v)
        return;
    n = sb_prom_unescape(v->p, v->len, tmp, sizeof tmp);
    if (n < 0) {
        l->truncated = true; /* longer than we keep (or badly escaped): keep nothing */
        return;
    }
    while (i < (size_t)n) {
        size_t a = i, b;

        while (i < (size_t)n && tmp[i] != ',')
            i++;
        b = i++;
        while (a < b && (tmp[a] == ' ' || tmp[a] == '\t'))
            a++;
        while (b > a && (tmp[b - 1] == ' ' || tmp[b - 1] == '\t'))
            b--;
        if (a == b || memchr(tmp + a, '\0', b - a))
            continue; /* empty, or a NUL no adapter name holds: names stay C strings */
        if (l->n == SB_ENGINE_LORA_MAX) {
            l->truncated = true;
            return;
        }
        /* o + name + NUL always fits: the names and separators came from tmp, which fits. */
        memcpy(l->text + o, tmp + a, b - a);
        l->text[o + (b - a)] = '\0';
        l->off[l->n] = (uint16_t)o;
        l->len[l->n] = (uint16_t)(b - a);
        l->n++;
        o += b - a + 1;
    }
}

const char *sb_engine_lora_name(const sb_engine_lora_list *l, uint32_t i)
{
    return i < l->n ? l->text + l->off[i] : NULL;
}

bool sb_engine_lora_has(const sb_engine_lora_list *l, const char *name, size_t len)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (l->len[i] == len && memcmp(l->text + l->off[i], name, len) == 0)
            return true;
    return false;
}

static void add_field(sb_engine_report *r, enum field f, const sb_engine_map *m, const sb_prom_sample *s)
{
    double v = s->value;
    uint64_t x;

    switch (f) {
    case F_RUNNING: r->running += v, r->have_running = true; break;
    case F_WAITING: r->waiting += v, r->have_waiting = true; break;
    case F_KV: r->acc.kv_sum[0] += v * m->kv_scale, r->acc.kv_n[0]++; break;
    case F_KV_FALLBACK: r->acc.kv_sum[1] += v, r->acc.kv_n[1]++; break;
    case F_QUERIES: r->prefix_queries_total += v, r->have_prefix_queries = true; break;
    case F_HITS: r->prefix_hits_total += v, r->have_prefix_hits = true; break;
    case F_QUERIES_FALLBACK: r->acc.fb_queries += v, r->acc.fb_have_queries = true; break;
    case F_HITS_FALLBACK: r->acc.fb_hits += v, r->acc.fb_have_hits = true; break;
    case F_HIT_RATE: r->acc.rate_sum += v, r->acc.rate_n++; break;
    case F_CACHE_INFO:
        if ((label_uint(s, "block_size", &x) || label_uint(s, "page_size", &x)) && x > 0 && x <= UINT32_MAX) {
            if (!r->have_block_size || x > r->block_size)
                r->block_size = (uint32_t)x;
            r->have_block_size = true;
        }
        if (label_uint(s, "num_gpu_blocks", &x) || label_uint(s, "num_pages", &x)) {
            r->num_gpu_blocks += x;
            r->have_num_gpu_blocks = true;
        }
        break;
    case F_BLOCK_SIZE:
        if (v >= 1 && v <= UINT32_MAX && (!r->have_block_size || v > r->block_size)) {
            r->block_size = (uint32_t)v;
            r->have_block_size = true;
        }
        break;
    case F_NUM_BLOCKS:
        if (v >= 0 && v < 1e18) {
            r->num_gpu_blocks += (uint64_t)v;
            r->have_num_gpu_blocks = true;
        }
        break;
    case F_CAPACITY_TOKENS:
        if (v >= 0 && v < 1e18) {
            r->capacity_tokens += (uint64_t)v;
            r->have_capacity_tokens = true;
        }
        break;
    case F_LORA_INFO:
        /* The newest series wins; ties keep the first seen. */
        if (r->acc.lora_seen && v <= r->lora_info_time)
            break;
        r->acc.lora_seen = true;
        r->have_lora = true;
        r->lora_info_time = v;
        r->max_lora = label_uint(s, "max_lora", &x) && x <= UINT32_MAX ? (uint32_t)x : 0;
        lora_list_set(&r->running_adapters, sb_prom_label_value(s, "running_lora_adapters"));
        lora_list_set(&r->waiting_adapters, sb_prom_label_value(s, "waiting_lora_adapters"));
        break;
    case F_REQUESTS: r->requests_total += v, r->have_requests_total = true; break;
    case F_PROMPT_TOKENS: r->prompt_tokens_total += v, r->have_prompt_tokens_total = true; break;
    case F_GENERATION_TOKENS: r->generation_tokens_total += v, r->have_generation_tokens_total = true; break;
    case F_PROCESS_START:
        if (!r->have_process_start || v > r->process_start_time)
            r->process_start_time = v;
        r->have_process_start = true;
        break;
    }
}

void sb_engine_report_add(sb_engine_report *r, const sb_engine_map *m, const sb_prom_sample *s)
{
    if (!isfinite(s->value))
        return;
    /* Linear over <= 32 names: only wanted families reach here, a few dozen samples a scrape. */
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->e[i].len == s->name.len && memcmp(m->e[i].name, s->name.p, s->name.len) == 0) {
            add_field(r, (enum field)m->e[i].field, m, s);
            r->n_samples++;
            if (m->e[i].field != F_PROCESS_START)
                r->n_matched++;
        }
    }
}

/* Values are finite one by one (add skips the others), but a sum can still overflow: a field
 * that does is dropped rather than handed to the scorers as infinity. */
static void keep_finite(bool *have, double *v)
{
    if (!isfinite(*v)) {
        *have = false;
        *v = 0;
    }
}

void sb_engine_report_finish(sb_engine_report *r)
{
    int k = r->acc.kv_n[0] ? 0 : r->acc.kv_n[1] ? 1 : -1;

    if (k >= 0) {
        r->kv_usage = r->acc.kv_sum[k] / r->acc.kv_n[k];
        r->have_kv = true;
    }
    if (r->acc.rate_n) {
        r->prefix_hit_rate = r->acc.rate_sum / r->acc.rate_n;
        r->have_prefix_hit_rate = true;
    }
    if (!r->have_prefix_queries && r->acc.fb_have_queries) {
        r->prefix_queries_total = r->acc.fb_queries;
        r->have_prefix_queries = true;
    }
    if (!r->have_prefix_hits && r->acc.fb_have_hits) {
        r->prefix_hits_total = r->acc.fb_hits;
        r->have_prefix_hits = true;
    }
    keep_finite(&r->have_running, &r->running);
    keep_finite(&r->have_waiting, &r->waiting);
    keep_finite(&r->have_kv, &r->kv_usage);
    keep_finite(&r->have_prefix_hit_rate, &r->prefix_hit_rate);
    keep_finite(&r->have_prefix_queries, &r->prefix_queries_total);
    keep_finite(&r->have_prefix_hits, &r->prefix_hits_total);
    keep_finite(&r->have_requests_total, &r->requests_total);
    keep_finite(&r->have_prompt_tokens_total, &r->prompt_tokens_total);
    keep_finite(&r->have_generation_tokens_total, &r->generation_tokens_total);
    if (!r->have_capacity_tokens && r->have_block_size && r->have_num_gpu_blocks) {
        r->capacity_tokens = (uint64_t)r->block_size * r->num_gpu_blocks;
        r->have_capacity_tokens = true;
    }
}

typedef struct parse_ctx {
    sb_engine_report *r;
    const sb_engine_map *m;
} parse_ctx;

static void on_sample(void *ud, const sb_prom_sample *s)
{
    parse_ctx *c = ud;
    sb_engine_report_add(c->r, c->m, s);
}

static void on_malformed(void *ud, uint32_t line, const char *reason)
{
    parse_ctx *c = ud;
    if (c->r->n_malformed++ == 0)
        c->r->first_malformed_line = line;
}

static bool want(void *ud, const char *name, size_t len)
{
    parse_ctx *c = ud;
    return sb_engine_map_want((void *)c->m, name, len);
}

size_t sb_engine_metrics_parse(const sb_engine_map *m, const char *body, size_t len, sb_engine_report *r)
{
    parse_ctx c = {r, m};
    sb_prom_handler h = {want, on_sample, on_malformed, &c};
    size_t used;

    sb_engine_report_init(r);
    used = sb_prom_parse(body, len, &h, NULL);
    sb_engine_report_finish(r);
    return used;
}

/* ---- engine detection ---- */

/* Indexed by sb_engine_kind; custom has no prefix. */
static const char *const prefixes[] = {"vllm:", "sglang:", "trtllm_", "llamacpp:", NULL};

const char *sb_engine_prefix(sb_engine_kind k)
{
    return (unsigned)k < sizeof prefixes / sizeof prefixes[0] ? prefixes[k] : NULL;
}

static bool starts(const char *p, size_t n, const char *pre)
{
    size_t l = strlen(pre);
    return n >= l && memcmp(p, pre, l) == 0;
}

uint32_t sb_engine_families(const char *body, size_t len)
{
    uint32_t mask = 0;
    size_t i = 0;

    while (i < len) {
        const char *nl = memchr(body + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - body) : len;
        const char *p = body + i;
        size_t n = end - i;

        /* "# TYPE name ..." / "# HELP name ...": a family declared even with no sample yet
         * (vLLM declares its families before the first request). */
        if (starts(p, n, "# TYPE ") || starts(p, n, "# HELP "))
            p += 7, n -= 7;
        for (uint32_t k = 0; k < SB_ENGINE_CUSTOM; k++)
            if (starts(p, n, prefixes[k]))
                mask |= 1u << k;
        i = end + 1;
    }
    return mask;
}

bool sb_engine_guess(uint32_t families, sb_engine_kind *out)
{
    static const sb_engine_kind order[] = {SB_ENGINE_VLLM, SB_ENGINE_SGLANG, SB_ENGINE_TRTLLM, SB_ENGINE_LLAMACPP};

    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (families & (1u << order[i])) {
            *out = order[i];
            return true;
        }
    }
    return false;
}

/* ---- llama.cpp GET /slots ---- */

int sb_engine_slots_parse(const char *json, size_t len, void *scratch, size_t scratch_bytes, sb_engine_report *r)
{
    sb_json j = {.max_depth = SB_ENGINE_SLOTS_MAX_DEPTH};
    const sb_json_tok *tok;
    uint32_t total = 0, busy = 0;
    uint64_t ctx_tokens = 0;
    bool have_ctx = false;
    int n;

    sb_json_lend(&j, scratch, scratch_bytes);
    n = sb_json_parse(&j, json, len);
    if (n == SB_JSON_TOO_MANY)
        return SB_ENGINE_SLOTS_NOSPACE;
    tok = j.tokens;
    if (n < 1 || tok[0].type != SB_JSON_ARRAY)
        return SB_ENGINE_SLOTS_BAD_JSON;
    /* Direct children only: each slot's keys, values skipped by binary search. */
    for (int i = 0, obj = 1; i < tok[0].size; i++, obj = sb_json_skip(tok, n, obj)) {
        if (tok[obj].type != SB_JSON_OBJECT)
            return SB_ENGINE_SLOTS_BAD_JSON;
        total++;
        /* A duplicate key: the last one counts, as for the JSON readers llama.cpp's clients
         * use; summing each would count one slot many times. */
        int processing = -1, n_ctx = -1;
        for (int k = 0, key = obj + 1; k < tok[obj].size; k++, key = sb_json_skip(tok, n, key + 1)) {
            if (sb_json_str_is(json, &tok[key], "is_processing", 13))
                processing = key + 1;
            else if (sb_json_str_is(json, &tok[key], "n_ctx", 5))
                n_ctx = key + 1;
        }
        if (processing >= 0 && tok[processing].type == SB_JSON_PRIMITIVE && json[tok[processing].start] == 't')
            busy++;
        if (n_ctx >= 0 && tok[n_ctx].type == SB_JSON_PRIMITIVE && json[tok[n_ctx].start] >= '0' &&
            json[tok[n_ctx].start] <= '9') {
            uint64_t x = 0;
            for (int c = tok[n_ctx].start; c < tok[n_ctx].end && json[c] >= '0' && json[c] <= '9'; c++)
                x = x < (UINT64_MAX - 9) / 10 ? x * 10 + (uint64_t)(json[c] - '0') : x;
            ctx_tokens += x;
            have_ctx = true;
        }
    }
    r->have_slots = true;
    r->slots_total = total;
    r->slots_busy = busy;
    r->running = busy;
    r->have_running = true;
    r->have_waiting = busy < total;
    r->waiting = 0;
    if (have_ctx) {
        r->capacity_tokens = ctx_tokens;
        r->have_capacity_tokens = true;
    }
    return 0;
}

/* ---- OpenAI GET /v1/models ---- */

int sb_engine_models_has(const char *json, size_t len, void *scratch, size_t scratch_bytes, const char *name,
                         size_t name_len, const char **first, size_t *first_len)
{
    sb_json j = {.max_depth = SB_ENGINE_SLOTS_MAX_DEPTH};
    const sb_json_tok *tok;
    int n, data = -1;

    if (first)
        *first = NULL, *first_len = 0;
    sb_json_lend(&j, scratch, scratch_bytes);
    n = sb_json_parse(&j, json, len);
    if (n == SB_JSON_TOO_MANY)
        return SB_ENGINE_SLOTS_NOSPACE;
    tok = j.tokens;
    if (n < 1 || tok[0].type != SB_JSON_OBJECT)
        return SB_ENGINE_SLOTS_BAD_JSON;
    for (int k = 0, key = 1; k < tok[0].size; k++, key = sb_json_skip(tok, n, key + 1))
        if (sb_json_str_is(json, &tok[key], "data", 4))
            data = key + 1;
    if (data < 0 || tok[data].type != SB_JSON_ARRAY)
        return SB_ENGINE_SLOTS_BAD_JSON;
    for (int i = 0, obj = data + 1; i < tok[data].size; i++, obj = sb_json_skip(tok, n, obj)) {
        if (tok[obj].type != SB_JSON_OBJECT)
            return SB_ENGINE_SLOTS_BAD_JSON;
        for (int k = 0, key = obj + 1; k < tok[obj].size; k++, key = sb_json_skip(tok, n, key + 1)) {
            const sb_json_tok *v = &tok[key + 1];
            if (!sb_json_str_is(json, &tok[key], "id", 2) || v->type != SB_JSON_STRING)
                continue;
            if ((size_t)(v->end - v->start) == name_len && memcmp(json + v->start, name, name_len) == 0)
                return 1;
            if (first && !*first)
                *first = json + v->start, *first_len = (size_t)(v->end - v->start);
        }
    }
    return 0;
}

bool sb_engine_report_restarted(const sb_engine_report *prev, const sb_engine_report *cur)
{
    if (prev->have_process_start && cur->have_process_start && prev->process_start_time != cur->process_start_time)
        return true;
    if (prev->have_requests_total && cur->have_requests_total && cur->requests_total < prev->requests_total)
        return true;
    if (prev->have_prompt_tokens_total && cur->have_prompt_tokens_total &&
        cur->prompt_tokens_total < prev->prompt_tokens_total)
        return true;
    if (prev->have_generation_tokens_total && cur->have_generation_tokens_total &&
        cur->generation_tokens_total < prev->generation_tokens_total)
        return true;
    if (prev->have_prefix_queries && cur->have_prefix_queries && cur->prefix_queries_total < prev->prefix_queries_total)
        return true;
    return false;
}
