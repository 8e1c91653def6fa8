#include "proto/config.h"

#include "core/flow.h"

#include <arpa/inet.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/alloc.h"

#include "proto/config_internal.h"

/* Top-level keys are named after the sb_config members they fill; pool sections prefix some
 * members (probe.interval_ms fills probe_interval_ms) so that the pool struct reads alone. */
// clang-format off
#define F(m, k, lo, hi) {.key = #m, .kind = k, .offset = offsetof(sb_config, m), .min = lo, .max = hi}
// clang-format on

static const field limits_fields[] = {
    F(max_body_bytes, K_BYTES, 1, SIZE_MAX),
    F(max_header_bytes, K_BYTES, 1, SIZE_MAX),
    F(max_connections, K_COUNT, 1, SIZE_MAX),
    F(max_prompt_blocks, K_COUNT, 1, SIZE_MAX),
    F(max_json_depth, K_COUNT, 1, 100000),
    /* The tokenizer's indexes are ints; 2^30 tokens of 16 bytes is 16 GiB, past any real body. */
    F(max_json_tokens, K_COUNT, 16, 1u << 30),
    F(max_buffered_body_bytes, K_BYTES, 1, SIZE_MAX),
    F(linger_ms, K_MS, 0, UINT32_MAX),
    F(linger_bytes, K_BYTES, 0, SIZE_MAX),
    F(max_refusing_connections, K_COUNT, 1, SIZE_MAX),
    /* A usage chunk with a 256-byte model name fits in 1 KiB; past 1 MiB an event is held
     * back from the client for no use. */
    F(max_held_event_bytes, K_BYTES, 1024, 1u << 20),
};

/* The bound is the field's width; a timeout that large means "never" in practice. */
// clang-format off
static const field timeouts_fields[] = {
    F(connect_ms, K_MS, 1, UINT32_MAX),
    F(response_ms, K_MS, 1, UINT32_MAX),
    F(idle_ms, K_MS, 1, UINT32_MAX),
    F(header_ms, K_MS, 1, UINT32_MAX),
    F(upstream_idle_ms, K_MS, 1, UINT32_MAX),
};
// clang-format on

static const field upstream_fields[] = {
    /* 0 is allowed: it turns connection reuse off, which helps when debugging an upstream. */
    F(max_idle_per_endpoint, K_COUNT, 0, SIZE_MAX),
    F(orca_request, K_BOOL, 0, 1),
    F(stream_usage, K_BOOL, 0, 1),
};

static const field routing_fields[] = {
    /* Below 8 bytes a block holds about one token and the index outgrows its use; above 4 KiB
     * a block rarely matches at all between prompts. */
    F(block_bytes, K_BYTES, 8, 4096),
    F(default_pool, K_NAME, 0, 0),
    /* Session affinity key: this request header if present, else `user`, else the API key,
     * else the client address. */
    F(session_header, K_NAME, 0, 0),
    /* prefix-hash key: the adapter plus the first N bytes of the first user message (KubeAI's
     * prefixCharLength default is 100). */
    F(prefix_chars, K_COUNT, 1, 65536),
};

/* Sections whose keys do not repeat their member's prefix. */
// clang-format off
#define FN(name, m, k, lo, hi) {.key = name, .kind = k, .offset = offsetof(sb_config, m), .min = lo, .max = hi}
// clang-format on

static const field kv_index_fields[] = {
    /* Entries are addressed by 32-bit indices. */
    FN("max_entries", kv_max_entries, K_COUNT, 16, UINT32_MAX - 1),
    /* vLLM's block sizes are 16..256 (1 for SGLang's default page size). */
    FN("block_size", kv_block_size, K_COUNT, 1, 4096),
};

static const field tokenize_fields[] = {
    FN("cache_bytes", tokenize_cache_bytes, K_BYTES, 65536, SIZE_MAX),
    FN("margin_tokens", tokenize_margin_tokens, K_COUNT, 1, 65536),
    FN("timeout_ms", tokenize_timeout_ms, K_MS, 1, UINT32_MAX),
    FN("wait_ms", tokenize_wait_ms, K_MS, 0, UINT32_MAX),
    FN("max_answer_bytes", tokenize_max_answer_bytes, K_BYTES, 1024, SIZE_MAX),
};

/* Up to an hour: a window longer than any orchestrator waits (Kubernetes' default grace period
 * is 30 s) only delays the exit it ends in. 0 cuts what runs at once. */
static const field shutdown_fields[] = {
    FN("drain_ms", drain_ms, K_MS, 0, 3600000),
};

/* The client listener's certificate chain and key (PEM files; both or neither). */
static const field tls_fields[] = {
    FN("cert", tls_cert, K_NAME, 0, 0),
    FN("key", tls_key, K_NAME, 0, 0),
};

/* HTTP/2 toward clients. A stream count past a few hundred is memory per connection (each
 * stream may hold a body and 64 KiB of answer) for no client in practice; the window is
 * RFC 9113's range. */
static const field http2_fields[] = {
    FN("enabled", http2_enabled, K_BOOL, 0, 1),
    FN("max_concurrent_streams", http2_max_streams, K_COUNT32, 1, 1000),
    FN("initial_window_size", http2_window_bytes, K_BYTES, 1024, 2147483647),
    FN("max_header_list_bytes", http2_max_header_list_bytes, K_BYTES, 1024, UINT32_MAX),
    FN("max_connection_header_bytes", http2_max_connection_header_bytes, K_BYTES, 1024, SIZE_MAX),
    FN("connection_window_size", http2_connection_window_bytes, K_BYTES, 65535, 2147483647),
    /* Below 1 KiB an SSE event would not fit; above a few MiB per stream, max_concurrent_streams
     * of them make one connection's memory large. */
    FN("stream_buffer_bytes", http2_stream_buffer_bytes, K_BYTES, 1024, 64u << 20),
    FN("reset_burst", http2_reset_burst, K_COUNT32, 1, 1000000),
    FN("reset_rate", http2_reset_rate, K_COUNT32, 1, 1000000),
};

/* The request-level series' `model` label (net/stats.h): a pool's served name, then its adapters
 * in config order, up to this many values per pool; the rest are counted as model="other". Each
 * value costs a few hundred series (histogram buckets by endpoint), so the bound is the
 * operator's, with room for a pool of LoRA adapters by default. */
static const field metrics_fields[] = {
    FN("max_models", metrics_max_models, K_COUNT, 1, 4096),
};

#undef FN

/* `workers: N | auto`. 64: past the cores one host gives a proxy, and a bound on the threads a
 * typo starts. */
static const field workers_field = {
    .key = "workers", .kind = K_COUNT, .offset = offsetof(sb_config, workers), .min = 1, .max = 64};

/* A top-level scalar rather than a section: it belongs with access_log. */
static const field log_decisions_field = {
    .key = "access_log_decisions", .kind = K_BOOL, .offset = offsetof(sb_config, log_decisions), .max = 1};

/* Membership at run time (net/discovery.h). The window is short: long enough to fold a burst of
 * registrations or a DNS answer into one rebuild, short enough that a registered endpoint is
 * routable before its agent's next heartbeat. */
static const field discovery_fields[] = {
    {.key = "apply_ms", .kind = K_MS, .offset = offsetof(sb_config, discovery_apply_ms), .min = 0, .max = 10000},
    {.key = "drain_ms", .kind = K_MS, .offset = offsetof(sb_config, discovery_drain_ms), .min = 0, .max = UINT32_MAX},
    {.key = "max_endpoints",
     .kind = K_COUNT,
     .offset = offsetof(sb_config, discovery_max_endpoints),
     .min = 0,
     .max = 65536},
    {.key = "retry_ms", .kind = K_MS, .offset = offsetof(sb_config, discovery_retry_ms), .min = 10, .max = UINT32_MAX},
    {.key = "retry_max_ms",
     .kind = K_MS,
     .offset = offsetof(sb_config, discovery_retry_max_ms),
     .min = 10,
     .max = UINT32_MAX},
};

static const section sections[] = {
    {"limits", limits_fields, ARRAY_LEN(limits_fields)},
    {"timeouts", timeouts_fields, ARRAY_LEN(timeouts_fields)},
    {"upstream", upstream_fields, ARRAY_LEN(upstream_fields)},
    {"routing", routing_fields, ARRAY_LEN(routing_fields)},
    {"kv_index", kv_index_fields, ARRAY_LEN(kv_index_fields)},
    {"tokenize", tokenize_fields, ARRAY_LEN(tokenize_fields)},
    {"shutdown", shutdown_fields, ARRAY_LEN(shutdown_fields)},
    {"discovery", discovery_fields, ARRAY_LEN(discovery_fields)},
    {"tls", tls_fields, ARRAY_LEN(tls_fields)},
    {"http2", http2_fields, ARRAY_LEN(http2_fields)},
    {"metrics", metrics_fields, ARRAY_LEN(metrics_fields)},
};

#undef F

/* ---- errors ---- */

static void verror(parse *p, int line, int column, const char *fmt, va_list ap)
{
    sb_config_errors *e = p->errs;
    e->total++;
    if (e->n >= ARRAY_LEN(e->items))
        return;
    sb_config_error *it = &e->items[e->n++];
    it->line = line;
    it->column = column;
    vsnprintf(it->message, sizeof it->message, fmt, ap);
}

static void __attribute__((format(printf, 4, 5))) error_at(parse *p, int line, int column, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(p, line, column, fmt, ap);
    va_end(ap);
}

/* libyaml marks are 0-based; errors are 1-based like compilers'. */
/* n may be NULL (a default, not written in the file, is at fault): the error then has no
 * line (0:0). */
void __attribute__((format(printf, 3, 4))) cfg_node_error(parse *p, const yaml_node_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (n)
        verror(p, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1, fmt, ap);
    else
        verror(p, 0, 0, fmt, ap);
    va_end(ap);
}

/* Returns NULL so that allocation sites can `return cfg_out_of_memory(p)`. */
void *cfg_out_of_memory(parse *p)
{
    p->oom = true;
    return NULL;
}

/* ---- nodes ---- */

yaml_node_t *cfg_node_at(parse *p, int id)
{
    return yaml_document_get_node(p->doc, id);
}

bool cfg_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

const char *cfg_type_name(const yaml_node_t *n)
{
    if (cfg_is_null(n))
        return "nothing";
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

/* The text of a string scalar, or NULL after reporting why the node is not one. Empty strings
 * and embedded NULs are refused: neither can name anything. */
const char *cfg_string_of(parse *p, const yaml_node_t *n, const char *what)
{
    if (n->type != YAML_SCALAR_NODE || cfg_is_null(n)) {
        cfg_node_error(p, n, "%s must be a string, got %s", what, cfg_type_name(n));
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        cfg_node_error(p, n, "%s must not contain NUL bytes", what);
        return NULL;
    }
    if (!*s) {
        cfg_node_error(p, n, "%s must not be empty", what);
        return NULL;
    }
    return s;
}

char *cfg_dup_string(parse *p, const yaml_node_t *n, const char *what)
{
    const char *s = cfg_string_of(p, n, what);
    if (!s)
        return NULL;
    char *d = sb_strdup(s);
    return d ? d : cfg_out_of_memory(p);
}

/* Reports a node that should be a mapping. A null (a key written with no value) is an empty
 * mapping, so commenting out every entry of a section leaves the defaults. Returns true when
 * the node is a mapping worth walking. */
bool cfg_want_mapping(parse *p, const yaml_node_t *n, const char *what)
{
    if (n->type == YAML_MAPPING_NODE)
        return true;
    if (!cfg_is_null(n))
        cfg_node_error(p, n, "%s must be a mapping, got %s", what, cfg_type_name(n));
    return false;
}

/* The key of a mapping pair, or NULL when the pair must be skipped: a non-string key, or a
 * key already seen in the same mapping (YAML forbids it, libyaml does not check, and letting
 * the last one win would hide a typo). */
const char *cfg_pair_key(parse *p, const yaml_node_t *map, const yaml_node_pair_t *pair, const char *what)
{
    const yaml_node_t *k = cfg_node_at(p, pair->key);
    if (k->type != YAML_SCALAR_NODE) {
        cfg_node_error(p, k, "keys in %s must be strings, got %s", what, cfg_type_name(k));
        return NULL;
    }
    const char *key = (const char *)k->data.scalar.value;
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *qk = cfg_node_at(p, q->key);
        if (qk->type == YAML_SCALAR_NODE && !strcmp((const char *)qk->data.scalar.value, key)) {
            cfg_node_error(p, k, "duplicate key '%s' in %s (first at line %d)", key, what,
                           (int)qk->start_mark.line + 1);
            return NULL;
        }
    }
    return key;
}

/* The value of `key` in a mapping, without reporting anything; NULL when absent. */
yaml_node_t *cfg_lookup(parse *p, const yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const yaml_node_t *k = cfg_node_at(p, q->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
            return cfg_node_at(p, q->value);
    }
    return NULL;
}

/* Defined with the secrets, below. */
/* Wipes every scalar of the document: keys and tokens were read from it. */
static void wipe_document(yaml_document_t *doc)
{
    for (yaml_node_t *n = doc->nodes.start; n < doc->nodes.top; n++)
        if (n->type == YAML_SCALAR_NODE && n->data.scalar.value)
            OPENSSL_cleanse(n->data.scalar.value, n->data.scalar.length);
}

/* libyaml copies the input into its own buffers (raw, then decoded); they are freed without
 * being wiped, so wipe them first. */
static void wipe_parser(yaml_parser_t *y)
{
    if (y->raw_buffer.start)
        OPENSSL_cleanse(y->raw_buffer.start, (size_t)(y->raw_buffer.end - y->raw_buffer.start));
    if (y->buffer.start)
        OPENSSL_cleanse(y->buffer.start, (size_t)(y->buffer.end - y->buffer.start));
}
/* ---- scalars ---- */

/* Parses a decimal integer, optionally followed by a size suffix. All multipliers are powers
 * of 1024 (as in nginx and HAProxy): buffer limits are thought of in binary, and one rule is
 * easier to remember than SI-versus-IEC. Returns false on syntax error or overflow. */
bool cfg_parse_uint(const char *s, bool suffixes, uint64_t *out)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {
        {"", 0},    {"b", 0},    {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20},
        {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30},
    };
    uint64_t v = 0;
    const char *c = s;
    if (*c < '0' || *c > '9')
        return false;
    for (; *c >= '0' && *c <= '9'; c++) {
        unsigned d = (unsigned)(*c - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (suffixes)
        while (*c == ' ')
            c++;
    for (size_t i = 0; i < ARRAY_LEN(units); i++) {
        if (strcasecmp(c, units[i].suffix) != 0)
            continue;
        if (i > 0 && !suffixes)
            return false;
        if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
            return false;
        *out = v << units[i].shift;
        return true;
    }
    return false;
}

/* A plain true/false; false after reporting. YAML 1.1's yes/no/on/off and quoted booleans
 * are refused: the first surprise people, the second is usually a template gone wrong. */
bool cfg_bool_of(parse *p, const yaml_node_t *v, const char *what, bool *out)
{
    if (v->type != YAML_SCALAR_NODE || cfg_is_null(v)) {
        cfg_node_error(p, v, "%s must be true or false, got %s", what, cfg_type_name(v));
        return false;
    }
    const char *s = (const char *)v->data.scalar.value;
    bool t = !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE");
    bool fl = !strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE");
    if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || (!t && !fl)) {
        cfg_node_error(p, v, "%s must be true or false, got '%s'", what, s);
        return false;
    }
    *out = t;
    return true;
}

/* A plain decimal number within [lo, hi] (hi may be INFINITY; lo_open excludes lo itself);
 * false after reporting. strtod alone would also take hex, "inf" and "nan": the character
 * check keeps to what a person writes for a weight or a threshold. */
bool cfg_number_of(parse *p, const yaml_node_t *v, const char *what, double lo, bool lo_open, double hi, double *out)
{
    if (v->type != YAML_SCALAR_NODE || cfg_is_null(v)) {
        cfg_node_error(p, v, "%s must be a number, got %s", what, cfg_type_name(v));
        return false;
    }
    const char *s = (const char *)v->data.scalar.value;
    char *end;
    double x = 0;
    bool ok = v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (*s == '-' || (*s >= '0' && *s <= '9')) &&
              strspn(s, "0123456789.eE+-") == strlen(s);
    if (ok) {
        x = strtod(s, &end);
        ok = *end == '\0' && isfinite(x);
    }
    if (!ok) {
        cfg_node_error(p, v, "%s must be a number, got '%s'", what, s);
        return false;
    }
    if (x < lo || (lo_open && x == lo) || x > hi) {
        if (isinf(hi))
            cfg_node_error(p, v, "%s must be %s %g, got %s", what, lo_open ? "greater than" : "at least", lo, s);
        else
            cfg_node_error(p, v, "%s must be between %g and %g, got %s", what, lo, hi, s);
        return false;
    }
    *out = x;
    return true;
}

/* Paths go into a request line as written: printable ASCII without spaces. */
static bool valid_path(const char *s)
{
    if (s[0] != '/')
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

/* Prometheus metric names: [a-zA-Z_:][a-zA-Z0-9_:]* (the exposition format's rule). */
static bool valid_metric_name(const char *s)
{
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':' ||
              (c > s && *c >= '0' && *c <= '9')))
            return false;
    return true;
}

/* Fills one field of the struct at base. `section` prefixes the key in messages ("limits" gives
 * "limits.max_body_bytes"); NULL for a top-level key. */
void cfg_parse_field(parse *p, const field *f, const yaml_node_t *v, void *base, const char *section)
{
    void *dst = (char *)base + f->offset;
    char name[160];
    if (section)
        snprintf(name, sizeof name, "%s.%s", section, f->key);
    else
        snprintf(name, sizeof name, "%s", f->key);
    if (f->kind == K_NAME || f->kind == K_PATH || f->kind == K_METRIC) {
        char *s = NULL;
        if (!cfg_is_null(v)) {
            const char *t = cfg_string_of(p, v, name);
            if (!t)
                return;
            if (f->kind == K_PATH && !valid_path(t)) {
                cfg_node_error(p, v, "%s must be a path starting with '/', without spaces, got '%s'", name, t);
                return;
            }
            if (f->kind == K_METRIC && !valid_metric_name(t)) {
                cfg_node_error(p, v, "%s must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got '%s'", name,
                               t);
                return;
            }
            if (!(s = sb_strdup(t))) {
                cfg_out_of_memory(p);
                return;
            }
        }
        char **slot = dst;
        sb_free(*slot);
        *slot = s;
        return;
    }
    if (f->kind == K_BOOL) {
        bool b;
        if (cfg_bool_of(p, v, name, &b))
            *(bool *)dst = b;
        return;
    }
    if (v->type != YAML_SCALAR_NODE || cfg_is_null(v)) {
        cfg_node_error(p, v, "%s must be a scalar, got %s", name, cfg_type_name(v));
        return;
    }
    const char *s = (const char *)v->data.scalar.value;
    /* Only sizes may be quoted ("16MiB" reads naturally as a string); a quoted number
     * elsewhere is a type mistake, probably a template gone wrong. */
    bool quoted = v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    uint64_t x;
    if ((quoted && f->kind != K_BYTES) || !cfg_parse_uint(s, f->kind == K_BYTES, &x)) {
        const char *expected = f->kind == K_BYTES ? "a size in bytes (like 65536 or 64KiB)"
                               : f->kind == K_MS  ? "an integer number of milliseconds"
                                                  : "a non-negative integer";
        cfg_node_error(p, v, "%s must be %s, got '%s'", name, expected, s);
        return;
    }
    if (x < f->min || x > f->max) {
        if (f->max == UINT64_MAX)
            cfg_node_error(p, v, "%s must be at least %llu, got %llu", name, (unsigned long long)f->min,
                           (unsigned long long)x);
        else
            cfg_node_error(p, v, "%s must be between %llu and %llu, got %llu", name, (unsigned long long)f->min,
                           (unsigned long long)f->max, (unsigned long long)x);
        return;
    }
    if (f->kind == K_MS || f->kind == K_COUNT32)
        *(uint32_t *)dst = (uint32_t)x;
    else
        *(size_t *)dst = (size_t)x;
}

/* Walks a section mapping into the struct at base; `label` names the section in messages. */
void cfg_parse_section(parse *p, const section *s, const yaml_node_t *map, void *base, const char *label)
{
    if (!cfg_want_mapping(p, map, label))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, label);
        if (!key)
            continue;
        const field *f = NULL;
        for (size_t i = 0; i < s->n_fields && !f; i++)
            if (!strcmp(s->fields[i].key, key))
                f = &s->fields[i];
        if (!f)
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, label);
        else
            cfg_parse_field(p, f, cfg_node_at(p, q->value), base, label);
    }
}

/* ---- top level ---- */

static bool is_wildcard(const char *host) { return !strcmp(host, "0.0.0.0") || !strcmp(host, "::"); }

/* Two listeners would collide: the same port on the same host, or on any host when either binds
 * every address (0.0.0.0, or :: which takes IPv4 too on a dual-stack system). */
static bool listeners_overlap(const char *h1, uint16_t p1, const char *h2, uint16_t p2)
{
    return p1 == p2 && (!strcmp(h1, h2) || is_wildcard(h1) || is_wildcard(h2));
}

static void parse_root(parse *p, const yaml_node_t *root)
{
    if (root->type != YAML_MAPPING_NODE) {
        cfg_node_error(p, root, "the configuration must be a mapping, got %s", cfg_type_name(root));
        return;
    }
    bool seen_pools = false;
    for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < root->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, root, q, "the top level");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        const section *s = NULL;
        for (size_t i = 0; i < ARRAY_LEN(sections) && !s; i++)
            if (!strcmp(sections[i].key, key))
                s = &sections[i];
        if (s) {
            cfg_parse_section(p, s, v, p->cfg, s->key);
        } else if (!strcmp(key, "listen")) {
            char *host = NULL;
            uint16_t port = 0;
            /* null: no HTTP proxy listener (a picker-only gateway; checked below) */
            if (cfg_is_null(v) || cfg_parse_listen_address(p, v, "listen", &host, &port)) {
                sb_free(p->cfg->listen_host);
                p->cfg->listen_host = host;
                p->cfg->listen_port = port;
            }
        } else if (!strcmp(key, "access_log")) {
            char *path = cfg_is_null(v) ? NULL : cfg_dup_string(p, v, "access_log");
            if (path || cfg_is_null(v)) {
                sb_free(p->cfg->access_log);
                p->cfg->access_log = path;
            }
        } else if (!strcmp(key, "workers")) {
            /* auto (the default): the cores this process may use (cmd/serve.c). */
            const char *s = v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
            if (s && !strcmp(s, "auto"))
                p->cfg->workers = 0;
            else
                cfg_parse_field(p, &workers_field, v, p->cfg, NULL);
        } else if (!strcmp(key, "io_uring")) {
            /* false: socket writes and reads through libuv, a system call each (net/iobatch.h). */
            bool on;
            if (cfg_bool_of(p, v, "io_uring", &on))
                p->cfg->io_uring_off = !on;
        } else if (!strcmp(key, "access_log_decisions")) {
            cfg_parse_field(p, &log_decisions_field, v, p->cfg, NULL);
        } else if (!strcmp(key, "profiles")) {
            cfg_parse_profiles(p, v);
        } else if (!strcmp(key, "flow_control")) {
            cfg_parse_flow_control(p, v);
        } else if (!strcmp(key, "retry")) {
            cfg_parse_retry(p, v);
        } else if (!strcmp(key, "admin")) {
            cfg_parse_admin(p, v);
        } else if (!strcmp(key, "auth")) {
            cfg_parse_auth(p, v);
        } else if (!strcmp(key, "ext_proc")) {
            cfg_parse_ext_proc(p, v);
        } else if (!strcmp(key, "sync")) {
            cfg_parse_sync(p, v);
        } else if (!strcmp(key, "pools")) {
            seen_pools = true;
            cfg_parse_pools(p, v);
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' at the top level", key);
        }
    }
    if (!seen_pools)
        cfg_node_error(p, root, "missing required key 'pools'");

    /* Cross-references last, once every pool and profile is known. */
    cfg_check_pool_profiles(p, root);
    cfg_check_pool_fallbacks(p, root);
    const sb_config *cfg = p->cfg;
    if (!cfg->tls_cert != !cfg->tls_key)
        cfg_node_error(p, cfg_lookup(p, root, "tls"), "tls: give both cert and key (TLS on listen), or neither");
    else if (cfg->tls_cert && !cfg->listen_host)
        cfg_node_error(p, cfg_lookup(p, root, "tls"), "tls is for the client listener, and listen is null");
    if (!cfg->listen_host && !cfg->extproc_host)
        cfg_node_error(p, cfg_lookup(p, root, "listen"),
                       "listen: null turns the HTTP proxy listener off, and without ext_proc nothing would be served");
    if (cfg->admin_host && cfg->listen_host &&
        listeners_overlap(cfg->admin_host, cfg->admin_port, cfg->listen_host, cfg->listen_port)) {
        const yaml_node_t *at = cfg_lookup(p, cfg_lookup(p, root, "admin"), "listen");
        cfg_node_error(p, at ? at : cfg_lookup(p, root, "listen"),
                       "admin.listen must differ from listen (admin %s:%u%s, listen %s:%u): set admin.listen to "
                       "another port, or null to turn the admin listener off",
                       cfg->admin_host, cfg->admin_port, at ? "" : ", the default", cfg->listen_host, cfg->listen_port);
    }
    if (cfg->extproc_host) {
        const yaml_node_t *at = cfg_lookup(p, cfg_lookup(p, root, "ext_proc"), "listen");
        if (cfg->listen_host &&
            listeners_overlap(cfg->extproc_host, cfg->extproc_port, cfg->listen_host, cfg->listen_port))
            cfg_node_error(p, at, "ext_proc.listen must differ from listen (%s:%u)", cfg->listen_host,
                           cfg->listen_port);
        else if (cfg->admin_host &&
                 listeners_overlap(cfg->extproc_host, cfg->extproc_port, cfg->admin_host, cfg->admin_port))
            cfg_node_error(p, at, "ext_proc.listen must differ from admin.listen (%s:%u)", cfg->admin_host,
                           cfg->admin_port);
    }
    if (p->cfg->default_pool) {
        bool found = false;
        for (size_t i = 0; i < p->cfg->n_pools && !found; i++)
            found = p->cfg->pools[i].name && !strcmp(p->cfg->pools[i].name, p->cfg->default_pool);
        if (!found)
            cfg_node_error(p, cfg_lookup(p, cfg_lookup(p, root, "routing"), "default_pool"),
                           "routing.default_pool names no pool: '%s'", p->cfg->default_pool);
    }
}

static void syntax_error(parse *p, const yaml_parser_t *y, const char *text, size_t len)
{
    if (y->error == YAML_MEMORY_ERROR) {
        cfg_out_of_memory(p);
        return;
    }
    int line = (int)y->problem_mark.line + 1, column = (int)y->problem_mark.column + 1;
    if (y->error == YAML_READER_ERROR) {
        /* Reader errors (bad encoding) carry a byte offset, not a mark. */
        line = 1;
        column = 1;
        for (size_t i = 0; i < y->problem_offset && i < len; i++, column++)
            if (text[i] == '\n') {
                line++;
                column = 0;
            }
    }
    const char *problem = y->problem ? y->problem : "malformed YAML";
    if (y->context)
        error_at(p, line, column, "YAML syntax error: %s (%s at line %d)", problem, y->context,
                 (int)y->context_mark.line + 1);
    else
        error_at(p, line, column, "YAML syntax error: %s", problem);
}

static bool set_defaults(sb_config *cfg)
{
    *cfg = (sb_config){
        .listen_port = 8080,
        .max_body_bytes = 16u << 20,
        .max_header_bytes = 64u << 10,
        .http2_enabled = true,
        .http2_max_streams = 100,
        .http2_window_bytes = 256u << 10,
        .max_connections = 10000,
        .max_prompt_blocks = 16384,
        .max_json_depth = 128,
        .max_json_tokens = 1u << 20,
        .max_buffered_body_bytes = 256u << 20,
        .linger_ms = 5000,
        .drain_ms = 30000,
        .linger_bytes = 64u << 20,
        .max_refusing_connections = 64,
        .connect_ms = 1000,
        .response_ms = 600000,
        .idle_ms = 60000,
        .header_ms = 10000,
        .upstream_idle_ms = 30000,
        .retry = sb_retry_policy_default(),
        .max_idle_per_endpoint = 1024,
        .orca_request = true,
        .stream_usage = true,
        .max_held_event_bytes = 16u << 10,
        .block_bytes = 64,
        .prefix_chars = 100,
        .kv_max_entries = (size_t)1 << 20,
        .kv_block_size = 16,
        .tokenize_cache_bytes = (size_t)64 << 20,
        .tokenize_margin_tokens = 128,
        .tokenize_timeout_ms = 2000,
        .tokenize_wait_ms = 20,
        .tokenize_max_answer_bytes = (size_t)8 << 20,
        .flow_enabled = true,
        /* starting points for band deadlines (critical waits longest); 1024 queued per band */
        .flow_max_wait_ms = {30000, 10000, 2000},
        .flow_gate_queue = 1,
        .flow_max_bytes = {64u << 20, 64u << 20, 64u << 20},
        .flow_max_queued_total = 2048,
        .flow_max_bytes_total = 128u << 20,
        .flow_gate_kv = -1,
        .flow_max_queued = {1024, 1024, 1024},
        .debug_endpoints = true,
        .metrics_max_models = 32,
        .admin_port = 8081,
        .admin_max_connections = 64,
        .admin_max_body_bytes = 64 << 10,
        .admin_decisions = 512,
        .admin_decision_candidates = 16,
        .extproc_port = 9002,
        .extproc_fallbacks = 0,
        .extproc_chunk_bytes = 62000,
        .extproc_max_streams = 1024,
        .extproc_max_connections = 1024,
        .extproc_idle_ms = 300000,
        .discovery_apply_ms = 20,
        .discovery_drain_ms = 30000,
        .discovery_max_endpoints = 256,
        .discovery_retry_ms = 1000,
        .discovery_retry_max_ms = 30000,
        .sync_heartbeat_ms = 1000,
        .sync_peer_timeout_ms = 5000,
        .sync_max_tracked = 65536,
        .sync_max_request_ms = 600000,
    };
    return (cfg->listen_host = sb_strdup("127.0.0.1")) != NULL && (cfg->admin_host = sb_strdup("127.0.0.1")) != NULL &&
           (cfg->session_header = sb_strdup("x-session-id")) != NULL;
}

int sb_config_parse(const char *text, size_t len, sb_config **out, sb_config_errors *errs)
{
    sb_config_errors scratch;
    if (!errs)
        errs = &scratch;
    memset(errs, 0, sizeof *errs);
    parse p = {.errs = errs};
    yaml_parser_t y;
    yaml_document_t doc, extra;
    bool have_parser = false, have_doc = false;

    if (!(p.cfg = sb_malloc(sizeof *p.cfg)) || !set_defaults(p.cfg)) {
        cfg_out_of_memory(&p);
        goto done;
    }
    if (!yaml_parser_initialize(&y)) {
        cfg_out_of_memory(&p);
        goto done;
    }
    have_parser = true;
    yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
    if (!yaml_parser_load(&y, &doc)) {
        syntax_error(&p, &y, text, len);
        goto done;
    }
    have_doc = true;
    p.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        error_at(&p, 1, 1, "the configuration is empty");
        goto done;
    }
    /* Load once more: this reports a second document, and any syntax error after the first
     * document, which would otherwise go unseen. */
    if (!yaml_parser_load(&y, &extra)) {
        syntax_error(&p, &y, text, len);
    } else {
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2)
            cfg_node_error(&p, r2, "only one YAML document is allowed");
        yaml_document_delete(&extra);
    }
    parse_root(&p, root);

done:
    if (have_doc) {
        wipe_document(&doc);
        yaml_document_delete(&doc);
    }
    if (have_parser) {
        wipe_parser(&y);
        yaml_parser_delete(&y);
    }
    sb_free(p.names);
    if (p.oom) {
        /* Errors found before the failure may be artefacts of it: report the cause alone. */
        memset(errs, 0, sizeof *errs);
        error_at(&p, 0, 0, "out of memory while loading the configuration");
    }
    if (errs->total > 0) {
        sb_config_free(p.cfg);
        return -1;
    }
    *out = p.cfg;
    return 0;
}

void sb_config_free(sb_config *cfg)
{
    if (!cfg)
        return;
    if (cfg->base) {
        cfg_free_effective(cfg);
        return;
    }
    if (cfg->derived) { /* effective configs still share its strings: the last one frees it */
        cfg->derived--;
        return;
    }
    for (size_t i = 0; i < cfg->n_pools; i++) {
        sb_pool_config *pc = &cfg->pools[i];
        for (size_t j = 0; j < pc->n_models; j++)
            sb_free(pc->models[j]);
        for (size_t j = 0; j < pc->n_adapters; j++)
            sb_free(pc->adapters[j]);
        for (size_t j = 0; j < pc->n_endpoints; j++)
            cfg_free_endpoint(&pc->endpoints[j]);
        sb_free(pc->models);
        sb_free(pc->adapters);
        sb_free(pc->endpoints);
        sb_free(pc->name);
        sb_free(pc->engine);
        sb_free(pc->profile);
        sb_free(pc->probe_path);
        sb_free(pc->health_path);
        sb_free(pc->metric_running);
        sb_free(pc->metric_waiting);
        sb_free(pc->metric_kv_usage);
        if (pc->upstream_auth_header)
            OPENSSL_cleanse(pc->upstream_auth_header, strlen(pc->upstream_auth_header));
        sb_free(pc->upstream_auth_header);
        sb_free(pc->upstream_api_key_file);
        sb_free(pc->tls_ca_file);
        sb_free(pc->tls_cert);
        sb_free(pc->tls_key);
        sb_free(pc->tls_server_name);
        sb_free(pc->dns_host);
        for (size_t j = 0; j < pc->n_fallbacks; j++) {
            sb_free(pc->fallbacks[j].pool_name);
            sb_free(pc->fallbacks[j].model);
        }
        sb_free(pc->fallbacks);
        if (pc->kv_events) {
            sb_free(pc->kv_events->endpoint);
            sb_free(pc->kv_events->replay_endpoint);
            sb_free(pc->kv_events->topic);
            sb_free(pc->kv_events);
        }
    }
    sb_free(cfg->pools);
    /* The profiles' label strings are the config's (see parse_profile): const only to
     * the profile's readers. */
    for (size_t i = 0; i < cfg->n_profiles; i++)
        for (size_t j = 0; j < cfg->profiles[i].n_labels; j++) {
            sb_free((char *)cfg->profiles[i].label_keys[j]);
            sb_free((char *)cfg->profiles[i].label_values[j]);
        }
    sb_free(cfg->profiles);
    sb_free(cfg->listen_host);
    sb_free(cfg->default_pool);
    sb_free(cfg->session_header);
    sb_auth_keys_free(&cfg->api_keys);
    sb_free(cfg->auth_api_keys_file);
    sb_free(cfg->admin_host);
    sb_free(cfg->admin_token_file);
    sb_free(cfg->extproc_host);
    sb_free(cfg->tls_cert);
    sb_free(cfg->tls_key);
    sb_free(cfg->extproc_tls_cert);
    sb_free(cfg->extproc_tls_key);
    sb_free(cfg->sync_listen);
    for (size_t i = 0; i < cfg->n_sync_peers; i++)
        sb_free(cfg->sync_peers[i]);
    sb_free(cfg->sync_peers);
    sb_free(cfg->sync_key_file);
    OPENSSL_cleanse(cfg->sync_key, sizeof cfg->sync_key);
    sb_free(cfg->sync_rotation_key_file);
    OPENSSL_cleanse(cfg->sync_rotation_key, sizeof cfg->sync_rotation_key);
    OPENSSL_cleanse(cfg->extproc_token_digest, sizeof cfg->extproc_token_digest);
    OPENSSL_cleanse(cfg->admin_token_digest, sizeof cfg->admin_token_digest);
    sb_free(cfg->access_log);
    sb_free(cfg);
}

const sb_profile *sb_config_profile(const sb_config *cfg, const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; cfg && i < cfg->n_profiles; i++)
        if (!strcmp(cfg->profiles[i].name, name))
            return &cfg->profiles[i];
    return sb_profile_builtin(name);
}

void sb_config_errors_format(const sb_config_errors *errs, const char *file, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    size_t used = 0;
    /* snprintf returns the untruncated length; clamp so a full buffer stays NUL-terminated. */
#define APPEND(...)                                                                                                    \
    do {                                                                                                               \
        if (used < cap) {                                                                                              \
            int w_ = snprintf(buf + used, cap - used, __VA_ARGS__);                                                    \
            used = w_ < 0 ? cap : used + (size_t)w_;                                                                   \
        }                                                                                                              \
    } while (0)
    for (size_t i = 0; i < errs->n; i++) {
        const sb_config_error *e = &errs->items[i];
        if (e->line > 0)
            APPEND("%s:%d:%d: %s\n", file, e->line, e->column, e->message);
        else
            APPEND("%s: %s\n", file, e->message);
    }
    if (errs->total > errs->n)
        APPEND("%s: ... and %zu more errors\n", file, errs->total - errs->n);
#undef APPEND
}
