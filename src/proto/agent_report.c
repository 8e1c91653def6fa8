/* agent_report: the agent's report body (the header has the contract). */
#include "proto/agent_report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "proto/json.h"

/* Root object, slots object, models array: three levels; one more leaves room for an unknown
 * key holding an object, which is skipped. */
#define MAX_DEPTH 4

static int fail(char *err, size_t cap, const char *fmt, ...)
{
    if (cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return SB_AGENT_REPORT_BAD;
}

/* Copies string token v, unescaped, into out (cap bytes with the NUL): 0, or -1 when it is
 * not a string, does not fit, has a bad escape, or holds a control character or NUL. */
static int copy_string(const char *b, const sb_json_tok *v, char *out, size_t cap)
{
    if (v->type != SB_JSON_STRING)
        return -1;
    long n = sb_json_unescape(b + v->start, (size_t)(v->end - v->start), out, cap);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    out[n] = '\0';
    for (long i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            return -1;
    return 0;
}

/* Reads number token v: 0 and *out, or -1 when it is not a finite number. The token is
 * copied (bounded) because strtod needs a terminator and the body has none. */
static int read_number(const char *b, const sb_json_tok *v, double *out)
{
    if (v->type != SB_JSON_PRIMITIVE)
        return -1;
    char c = b[v->start];
    if (c != '-' && (c < '0' || c > '9'))
        return -1; /* true, false (null was taken as absent before) */
    char tmp[40];
    size_t n = (size_t)(v->end - v->start);
    if (n >= sizeof tmp)
        return -1;
    memcpy(tmp, b + v->start, n);
    tmp[n] = '\0';
    char *end;
    double d = strtod(tmp, &end);
    if (*end || !isfinite(d))
        return -1;
    *out = d;
    return 0;
}

static int read_count(const char *b, const sb_json_tok *v, uint32_t *out)
{
    double d;
    if (read_number(b, v, &d) < 0 || d < 0 || d > SB_AGENT_MAX_COUNT || d != floor(d))
        return -1;
    *out = (uint32_t)d;
    return 0;
}

enum { K_AGENT, K_ADDRESS, K_ENGINE, K_MODELS, K_SLOTS, K_QUEUE, K_RUNNING, K_KV, K_SEQ, K_INTERVAL, N_KEYS };

static const sb_json_key keys[N_KEYS] = {
    [K_AGENT] = {"agent", 5},           [K_ADDRESS] = {"address", 7}, [K_ENGINE] = {"engine", 6},
    [K_MODELS] = {"models", 6},         [K_SLOTS] = {"slots", 5},     [K_QUEUE] = {"queue", 5},
    [K_RUNNING] = {"running", 7},       [K_KV] = {"kv_usage", 8},     [K_SEQ] = {"seq", 3},
    [K_INTERVAL] = {"interval_ms", 11},
};

static int parse_slots(const char *b, const sb_json_tok *t, int n, int obj, sb_agent_report *r, char *err, size_t cap)
{
    static const sb_json_key sk[2] = {{"total", 5}, {"idle", 4}};
    int v[2];
    if (t[obj].type != SB_JSON_OBJECT)
        return fail(err, cap, "slots must be an object {\"total\":N,\"idle\":N}");
    sb_json_find_keys(t, n, b, obj, sk, 2, v);
    if (!sb_json_present(t, v[0], b) || !sb_json_present(t, v[1], b))
        return fail(err, cap, "slots needs both total and idle");
    if (read_count(b, &t[v[0]], &r->slots_total) < 0 || read_count(b, &t[v[1]], &r->slots_idle) < 0)
        return fail(err, cap, "slots.total and slots.idle must be integers from 0 to %d", SB_AGENT_MAX_COUNT);
    if (r->slots_idle > r->slots_total)
        return fail(err, cap, "slots.idle (%u) exceeds slots.total (%u)", r->slots_idle, r->slots_total);
    r->have_slots = true;
    return 0;
}

static int parse_models(const char *b, const sb_json_tok *t, int n, int arr, sb_agent_report *r, char *err, size_t cap)
{
    if (t[arr].type != SB_JSON_ARRAY)
        return fail(err, cap, "models must be an array of strings");
    if (t[arr].size > SB_AGENT_MAX_MODELS)
        return fail(err, cap, "models lists %d names; at most %d", t[arr].size, SB_AGENT_MAX_MODELS);
    for (int i = 0, v = arr + 1; i < t[arr].size; i++, v = sb_json_skip(t, n, v)) {
        if (copy_string(b, &t[v], r->models[i], SB_AGENT_MODEL_MAX) < 0 || !r->models[i][0])
            return fail(err, cap,
                        "models[%d] must be a non-empty string of at most %d bytes without control characters", i,
                        SB_AGENT_MODEL_MAX - 1);
        r->n_models = (uint32_t)i + 1;
    }
    return 0;
}

int sb_agent_report_parse(const char *body, size_t len, void *scratch, size_t scratch_bytes, sb_agent_report *r,
                          char *err, size_t cap)
{
    memset(r, 0, sizeof(*r));
    if (cap)
        err[0] = '\0';
    sb_json j = {.max_depth = MAX_DEPTH, .max_tokens = SB_AGENT_MAX_TOKENS};
    sb_json_lend(&j, scratch, scratch_bytes);
    int n = sb_json_parse(&j, body, len);
    if (n == SB_JSON_TOO_DEEP)
        return fail(err, cap, "report nested deeper than %d levels", MAX_DEPTH);
    if (n == SB_JSON_TOO_MANY || n == SB_JSON_NOMEM)
        return fail(err, cap, "report has more than %d JSON values", SB_AGENT_MAX_TOKENS);
    if (n < 0)
        return fail(err, cap, "report is not valid JSON");
    const sb_json_tok *t = j.tokens;
    if (t[0].type != SB_JSON_OBJECT)
        return fail(err, cap, "report must be a JSON object");
    int v[N_KEYS];
    sb_json_find_keys(t, n, body, 0, keys, N_KEYS, v);
    if (!sb_json_present(t, v[K_ADDRESS], body))
        return fail(err, cap, "address (host:port) is required");
    if (copy_string(body, &t[v[K_ADDRESS]], r->address, sizeof r->address) < 0 || !r->address[0])
        return fail(err, cap, "address must be a non-empty string of at most %d bytes without control characters",
                    SB_AGENT_ADDRESS_MAX - 1);
    if (sb_json_present(t, v[K_AGENT], body) && copy_string(body, &t[v[K_AGENT]], r->agent, sizeof r->agent) < 0)
        return fail(err, cap, "agent must be a string of at most %d bytes without control characters",
                    SB_AGENT_ID_MAX - 1);
    if (sb_json_present(t, v[K_ENGINE], body) && copy_string(body, &t[v[K_ENGINE]], r->engine, sizeof r->engine) < 0)
        return fail(err, cap, "engine must be a string of at most %d bytes without control characters",
                    SB_AGENT_ENGINE_MAX - 1);
    if (sb_json_present(t, v[K_MODELS], body) && parse_models(body, t, n, v[K_MODELS], r, err, cap) < 0)
        return SB_AGENT_REPORT_BAD;
    if (sb_json_present(t, v[K_SLOTS], body) && parse_slots(body, t, n, v[K_SLOTS], r, err, cap) < 0)
        return SB_AGENT_REPORT_BAD;
    if (sb_json_present(t, v[K_QUEUE], body)) {
        if (read_count(body, &t[v[K_QUEUE]], &r->queue) < 0)
            return fail(err, cap, "queue must be an integer from 0 to %d", SB_AGENT_MAX_COUNT);
        r->have_queue = true;
    }
    if (sb_json_present(t, v[K_RUNNING], body)) {
        if (read_count(body, &t[v[K_RUNNING]], &r->running) < 0)
            return fail(err, cap, "running must be an integer from 0 to %d", SB_AGENT_MAX_COUNT);
        r->have_running = true;
    }
    if (sb_json_present(t, v[K_KV], body)) {
        if (read_number(body, &t[v[K_KV]], &r->kv_usage) < 0 || r->kv_usage < 0 || r->kv_usage > 1)
            return fail(err, cap, "kv_usage must be a number from 0 to 1");
        r->have_kv = true;
    }
    if (sb_json_present(t, v[K_SEQ], body)) {
        double d;
        /* 2^53: every integer below it is exact in a double. */
        if (read_number(body, &t[v[K_SEQ]], &d) < 0 || d < 0 || d > 9007199254740992.0 || d != floor(d))
            return fail(err, cap, "seq must be a non-negative integer");
        r->seq = (uint64_t)d;
        r->have_seq = true;
    }
    if (sb_json_present(t, v[K_INTERVAL], body)) {
        /* An hour: an agent reporting less often than that is not keeping anything fresh. */
        double d;
        if (read_number(body, &t[v[K_INTERVAL]], &d) < 0 || d < 0 || d > 3600000 || d != floor(d))
            return fail(err, cap, "interval_ms must be an integer from 0 to 3600000");
        r->interval_ms = (uint32_t)d;
    }
    return 0;
}

/* ,"key":"escaped value" (first: without the comma). */
static int put_string(sb_buf *b, const char *key, const char *v, bool first)
{
    if (sb_buf_printf(b, "%s\"%s\":\"", first ? "" : ",", key) < 0 || sb_buf_json_escape(b, v, strlen(v)) < 0)
        return -1;
    return sb_buf_puts(b, "\"");
}

int sb_agent_report_render(const sb_agent_report *r, sb_buf *b)
{
    int rc = sb_buf_puts(b, "{");
    rc |= put_string(b, "address", r->address, true);
    if (r->agent[0])
        rc |= put_string(b, "agent", r->agent, false);
    if (r->engine[0])
        rc |= put_string(b, "engine", r->engine, false);
    rc |= sb_buf_puts(b, ",\"models\":[");
    for (uint32_t i = 0; i < r->n_models && i < SB_AGENT_MAX_MODELS; i++) {
        rc |= sb_buf_puts(b, i ? ",\"" : "\"");
        rc |= sb_buf_json_escape(b, r->models[i], strlen(r->models[i]));
        rc |= sb_buf_puts(b, "\"");
    }
    rc |= sb_buf_puts(b, "]");
    if (r->have_slots)
        rc |= sb_buf_printf(b, ",\"slots\":{\"total\":%u,\"idle\":%u}", r->slots_total, r->slots_idle);
    if (r->have_queue)
        rc |= sb_buf_printf(b, ",\"queue\":%u", r->queue);
    if (r->have_running)
        rc |= sb_buf_printf(b, ",\"running\":%u", r->running);
    if (r->have_kv)
        rc |= sb_buf_printf(b, ",\"kv_usage\":%.6f", r->kv_usage);
    if (r->have_seq)
        rc |= sb_buf_printf(b, ",\"seq\":%llu", (unsigned long long)r->seq);
    if (r->interval_ms)
        rc |= sb_buf_printf(b, ",\"interval_ms\":%u", r->interval_ms);
    rc |= sb_buf_puts(b, "}");
    return rc < 0 ? -1 : 0;
}

int sb_agent_models_parse(const char *body, size_t len, void *scratch, size_t scratch_bytes, sb_agent_report *r)
{
    static const sb_json_key data_key[1] = {{"data", 4}}, id_key[1] = {{"id", 2}};
    sb_json j = {.max_depth = 8};
    sb_json_lend(&j, scratch, scratch_bytes);
    int n = sb_json_parse(&j, body, len);
    if (n < 0 || j.tokens[0].type != SB_JSON_OBJECT)
        return SB_AGENT_REPORT_BAD;
    const sb_json_tok *t = j.tokens;
    int data;
    sb_json_find_keys(t, n, body, 0, data_key, 1, &data);
    if (data < 0 || t[data].type != SB_JSON_ARRAY)
        return SB_AGENT_REPORT_BAD;
    r->n_models = 0;
    for (int i = 0, m = data + 1; i < t[data].size && r->n_models < SB_AGENT_MAX_MODELS;
         i++, m = sb_json_skip(t, n, m)) {
        int id;
        if (t[m].type != SB_JSON_OBJECT)
            continue;
        sb_json_find_keys(t, n, body, m, id_key, 1, &id);
        if (id >= 0 && copy_string(body, &t[id], r->models[r->n_models], SB_AGENT_MODEL_MAX) == 0 &&
            r->models[r->n_models][0])
            r->n_models++;
    }
    return (int)r->n_models;
}
