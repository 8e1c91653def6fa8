#include "proto/orca.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Applies one key=value. Keys are the named metrics of GIE's vLLM mapping; the standard
 * ORCA fields (cpu_utilization, ...) say nothing about an LLM engine's queue, so they are
 * accepted and ignored. */
static int apply(const char *key, size_t klen, double v, sb_endpoint_report *out)
{
    static const char prefix[] = "named_metrics.";
    if (klen > sizeof(prefix) - 1 && !strncmp(key, prefix, sizeof(prefix) - 1)) {
        key += sizeof(prefix) - 1;
        klen -= sizeof(prefix) - 1;
    }
#define KEY_IS(s) (klen == sizeof(s) - 1 && !strncmp(key, s, klen))
    if (!isfinite(v))
        return 0;
    if (KEY_IS("kv_cache_usage_perc") || KEY_IS("kv_cache_utilization")) {
        out->have_kv = true;
        /* vLLM reports a fraction in 0..1 under a name that says percent; accept both. */
        out->kv_usage = v > 1.0 ? v / 100.0 : v;
        return 1;
    }
    if (KEY_IS("num_requests_waiting")) {
        out->have_waiting = true;
        out->waiting = v;
        return 1;
    }
    if (KEY_IS("num_requests_running")) {
        out->have_running = true;
        out->running = v;
        return 1;
    }
#undef KEY_IS
    return 0;
}

static bool parse_number(const char *s, size_t n, double *v)
{
    char tmp[64];
    if (n == 0 || n >= sizeof(tmp))
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *end;
    *v = strtod(tmp, &end);
    return end != tmp && *end == '\0';
}

static int parse_text(const char *s, size_t n, sb_endpoint_report *out)
{
    int found = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == ','))
            i++;
        size_t k0 = i;
        while (i < n && s[i] != '=' && s[i] != ',')
            i++;
        if (i >= n || s[i] != '=')
            return k0 == n ? found : -1;
        size_t k1 = i++;
        size_t v0 = i;
        while (i < n && s[i] != ',')
            i++;
        size_t v1 = i;
        while (k1 > k0 && s[k1 - 1] == ' ')
            k1--;
        while (v1 > v0 && s[v1 - 1] == ' ')
            v1--;
        double v;
        if (!parse_number(s + v0, v1 - v0, &v))
            return -1;
        found += apply(s + k0, k1 - k0, v, out);
    }
    return found;
}

/* A small JSON walk: objects of string keys and number (or nested object) values; nested
 * `named_metrics` keys are applied with their plain names. Anything else is malformed. */
static int parse_json_object(const char *s, size_t n, size_t *pos, int depth, sb_endpoint_report *out)
{
    size_t i = *pos;
    int found = 0;
#define SKIP_WS()                                                                                                   \
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))                                 \
    i++
    SKIP_WS();
    if (i >= n || s[i] != '{' || depth > 2)
        return -1;
    i++;
    SKIP_WS();
    if (i < n && s[i] == '}') {
        *pos = i + 1;
        return 0;
    }
    for (;;) {
        SKIP_WS();
        if (i >= n || s[i] != '"')
            return -1;
        size_t k0 = ++i;
        while (i < n && s[i] != '"')
            i++;
        if (i >= n)
            return -1;
        size_t k1 = i++;
        SKIP_WS();
        if (i >= n || s[i] != ':')
            return -1;
        i++;
        SKIP_WS();
        if (i < n && s[i] == '{') {
            int r = parse_json_object(s, n, &i, depth + 1, out);
            if (r < 0)
                return -1;
            found += r;
        } else {
            size_t v0 = i;
            while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ' ')
                i++;
            double v;
            if (!parse_number(s + v0, i - v0, &v))
                return -1;
            found += apply(s + k0, k1 - k0, v, out);
        }
        SKIP_WS();
        if (i < n && s[i] == ',') {
            i++;
            continue;
        }
        if (i < n && s[i] == '}') {
            *pos = i + 1;
            return found;
        }
        return -1;
    }
#undef SKIP_WS
}

int sb_orca_parse(const char *value, size_t len, sb_endpoint_report *out)
{
    memset(out, 0, sizeof(*out));
    out->requests_total = -1;
    while (len && (*value == ' ' || *value == '\t')) {
        value++;
        len--;
    }
    if (len >= 4 && !strncasecmp(value, "TEXT", 4))
        return parse_text(value + 4, len - 4, out);
    if (len >= 4 && !strncasecmp(value, "JSON", 4)) {
        size_t pos = 0;
        int r = parse_json_object(value + 4, len - 4, &pos, 0, out);
        return r;
    }
    return -1;
}
