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

/* The parser works in two steps: libyaml builds a node tree (so every node keeps its line and
 * column), then one walk over the tree fills an sb_config and records every problem it meets.
 * The walk never stops at the first error: an operator fixing a config wants the whole list. */

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A model, alias or adapter name already claimed by a pool: names must route to one pool. */
typedef struct claimed_name {
    const char *name; /* points into the pool's own copy; lives as long as the config */
    int line;
    size_t pool; /* index in cfg->pools */
} claimed_name;

typedef struct parse {
    yaml_document_t *doc;
    sb_config *cfg;
    sb_config_errors *errs;
    bool oom;
    /* Linear scan on insert: a fleet has tens to hundreds of names, and the scan runs once,
     * at load time. Revisit if configs with many thousands of adapters appear. */
    claimed_name *names;
    size_t n_names, cap_names;
} parse;

/* Scalar kinds of the flat sections (limits, timeouts, upstream, routing, admin, and a pool's
 * probe, health and metrics). */
enum kind {
    K_BYTES,   /* size_t; integer or suffixed size string */
    K_COUNT,   /* size_t; plain integer */
    K_COUNT32, /* uint32_t; plain integer */
    K_MS,      /* uint32_t; plain integer, milliseconds */
    K_BOOL,    /* bool; plain true/false */
    K_NAME,    /* char *; any string, null means unset */
    K_PATH,    /* char *; an HTTP path starting with '/', null means unset */
    K_METRIC,  /* char *; a Prometheus metric name, null means unset */
};

typedef struct field {
    const char *key;
    enum kind kind;
    size_t offset; /* into the section's struct: sb_config, or sb_pool_config for pool sections */
    uint64_t min, max;
} field;

typedef struct section {
    const char *key;
    const field *fields;
    size_t n_fields;
} section;

/* Top-level keys are named after the sb_config members they fill; pool sections prefix some
 * members (probe.interval_ms fills probe_interval_ms) so that the pool struct reads alone. */
// clang-format off
#define F(m, k, lo, hi) {.key = #m, .kind = k, .offset = offsetof(sb_config, m), .min = lo, .max = hi}
#define PF(key_, m, k, lo, hi) {.key = key_, .kind = k, .offset = offsetof(sb_pool_config, m), .min = lo, .max = hi}
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

/* admin's scalar keys; listen, token and token_file are parsed by parse_admin. */
static const field admin_fields[] = {
    F(debug_endpoints, K_BOOL, 0, 1),
    /* Its own budget, so operators can still look at a gateway whose client listener is
     * full; scrapers and a few people need tens, not thousands. */
    {.key = "max_connections",
     .kind = K_COUNT,
     .offset = offsetof(sb_config, admin_max_connections),
     .min = 1,
     .max = 1u << 20},
    {.key = "metrics_auth", .kind = K_BOOL, .offset = offsetof(sb_config, admin_metrics_auth), .max = 1},
};

/* A top-level scalar rather than a section: it belongs with access_log. */
static const field log_decisions_field = {
    .key = "access_log_decisions", .kind = K_BOOL, .offset = offsetof(sb_config, log_decisions), .max = 1};

static const section sections[] = {
    {"limits", limits_fields, ARRAY_LEN(limits_fields)},
    {"timeouts", timeouts_fields, ARRAY_LEN(timeouts_fields)},
    {"upstream", upstream_fields, ARRAY_LEN(upstream_fields)},
    {"routing", routing_fields, ARRAY_LEN(routing_fields)},
};

/* Per pool. Intervals are at least 1 ms: 0 would busy-loop the prober; only the active health
 * check may be turned off with 0. */
static const field probe_fields[] = {
    PF("interval_ms", probe_interval_ms, K_MS, 1, UINT32_MAX),
    PF("min_interval_ms", probe_min_interval_ms, K_MS, 1, UINT32_MAX),
    PF("max_interval_ms", probe_max_interval_ms, K_MS, 1, UINT32_MAX),
    PF("timeout_ms", probe_timeout_ms, K_MS, 1, UINT32_MAX),
    PF("stale_ms", stale_ms, K_MS, 1, UINT32_MAX),
    PF("path", probe_path, K_PATH, 0, 0),
    PF("health_path", health_path, K_PATH, 0, 0),
    PF("health_interval_ms", health_interval_ms, K_MS, 0, UINT32_MAX),
    PF("enabled", probe_enabled, K_BOOL, 0, 1),
};

static const field health_fields[] = {
    PF("max_failures", max_failures, K_COUNT32, 1, UINT32_MAX),
    PF("base_eject_ms", base_eject_ms, K_MS, 1, UINT32_MAX),
    PF("max_eject_ms", max_eject_ms, K_MS, 1, UINT32_MAX),
};

static const field metrics_fields[] = {
    PF("running", metric_running, K_METRIC, 0, 0),
    PF("waiting", metric_waiting, K_METRIC, 0, 0),
    PF("kv_usage", metric_kv_usage, K_METRIC, 0, 0),
};

#undef F
#undef PF

static const section probe_section = {"probe", probe_fields, ARRAY_LEN(probe_fields)};
static const section health_section = {"health", health_fields, ARRAY_LEN(health_fields)};
static const section metrics_section = {"metrics", metrics_fields, ARRAY_LEN(metrics_fields)};

static const char *const engines[] = {"vllm", "sglang", "llamacpp", "trtllm", "custom"};

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
static void __attribute__((format(printf, 3, 4))) node_error(parse *p, const yaml_node_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (n)
        verror(p, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1, fmt, ap);
    else
        verror(p, 0, 0, fmt, ap);
    va_end(ap);
}

/* Returns NULL so that allocation sites can `return out_of_memory(p)`. */
static void *out_of_memory(parse *p)
{
    p->oom = true;
    return NULL;
}

/* ---- nodes ---- */

static yaml_node_t *node_at(parse *p, int id)
{
    return yaml_document_get_node(p->doc, id);
}

static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static const char *type_name(const yaml_node_t *n)
{
    if (is_null(n))
        return "nothing";
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

/* The text of a string scalar, or NULL after reporting why the node is not one. Empty strings
 * and embedded NULs are refused: neither can name anything. */
static const char *string_of(parse *p, const yaml_node_t *n, const char *what)
{
    if (n->type != YAML_SCALAR_NODE || is_null(n)) {
        node_error(p, n, "%s must be a string, got %s", what, type_name(n));
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        node_error(p, n, "%s must not contain NUL bytes", what);
        return NULL;
    }
    if (!*s) {
        node_error(p, n, "%s must not be empty", what);
        return NULL;
    }
    return s;
}

static char *dup_string(parse *p, const yaml_node_t *n, const char *what)
{
    const char *s = string_of(p, n, what);
    if (!s)
        return NULL;
    char *d = sb_strdup(s);
    return d ? d : out_of_memory(p);
}

/* Reports a node that should be a mapping. A null (a key written with no value) is an empty
 * mapping, so commenting out every entry of a section leaves the defaults. Returns true when
 * the node is a mapping worth walking. */
static bool want_mapping(parse *p, const yaml_node_t *n, const char *what)
{
    if (n->type == YAML_MAPPING_NODE)
        return true;
    if (!is_null(n))
        node_error(p, n, "%s must be a mapping, got %s", what, type_name(n));
    return false;
}

/* The key of a mapping pair, or NULL when the pair must be skipped: a non-string key, or a
 * key already seen in the same mapping (YAML forbids it, libyaml does not check, and letting
 * the last one win would hide a typo). */
static const char *pair_key(parse *p, const yaml_node_t *map, const yaml_node_pair_t *pair, const char *what)
{
    const yaml_node_t *k = node_at(p, pair->key);
    if (k->type != YAML_SCALAR_NODE) {
        node_error(p, k, "keys in %s must be strings, got %s", what, type_name(k));
        return NULL;
    }
    const char *key = (const char *)k->data.scalar.value;
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *qk = node_at(p, q->key);
        if (qk->type == YAML_SCALAR_NODE && !strcmp((const char *)qk->data.scalar.value, key)) {
            node_error(p, k, "duplicate key '%s' in %s (first at line %d)", key, what, (int)qk->start_mark.line + 1);
            return NULL;
        }
    }
    return key;
}

/* The value of `key` in a mapping, without reporting anything; NULL when absent. */
static yaml_node_t *lookup(parse *p, const yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const yaml_node_t *k = node_at(p, q->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
            return node_at(p, q->value);
    }
    return NULL;
}

/* Defined with the secrets, below. */
static const char *secret_of(parse *p, const yaml_node_t *v, const char *what);
static void parse_upstream_key(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what);

/* ---- scalars ---- */

/* Parses a decimal integer, optionally followed by a size suffix. All multipliers are powers
 * of 1024 (as in nginx and HAProxy): buffer limits are thought of in binary, and one rule is
 * easier to remember than SI-versus-IEC. Returns false on syntax error or overflow. */
static bool parse_uint(const char *s, bool suffixes, uint64_t *out)
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
static bool bool_of(parse *p, const yaml_node_t *v, const char *what, bool *out)
{
    if (v->type != YAML_SCALAR_NODE || is_null(v)) {
        node_error(p, v, "%s must be true or false, got %s", what, type_name(v));
        return false;
    }
    const char *s = (const char *)v->data.scalar.value;
    bool t = !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE");
    bool fl = !strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE");
    if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || (!t && !fl)) {
        node_error(p, v, "%s must be true or false, got '%s'", what, s);
        return false;
    }
    *out = t;
    return true;
}

/* A plain decimal number within [lo, hi] (hi may be INFINITY; lo_open excludes lo itself);
 * false after reporting. strtod alone would also take hex, "inf" and "nan": the character
 * check keeps to what a person writes for a weight or a threshold. */
static bool number_of(parse *p, const yaml_node_t *v, const char *what, double lo, bool lo_open, double hi,
                      double *out)
{
    if (v->type != YAML_SCALAR_NODE || is_null(v)) {
        node_error(p, v, "%s must be a number, got %s", what, type_name(v));
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
        node_error(p, v, "%s must be a number, got '%s'", what, s);
        return false;
    }
    if (x < lo || (lo_open && x == lo) || x > hi) {
        if (isinf(hi))
            node_error(p, v, "%s must be %s %g, got %s", what, lo_open ? "greater than" : "at least", lo, s);
        else
            node_error(p, v, "%s must be between %g and %g, got %s", what, lo, hi, s);
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
static void parse_field(parse *p, const field *f, const yaml_node_t *v, void *base, const char *section)
{
    void *dst = (char *)base + f->offset;
    char name[160];
    if (section)
        snprintf(name, sizeof name, "%s.%s", section, f->key);
    else
        snprintf(name, sizeof name, "%s", f->key);
    if (f->kind == K_NAME || f->kind == K_PATH || f->kind == K_METRIC) {
        char *s = NULL;
        if (!is_null(v)) {
            const char *t = string_of(p, v, name);
            if (!t)
                return;
            if (f->kind == K_PATH && !valid_path(t)) {
                node_error(p, v, "%s must be a path starting with '/', without spaces, got '%s'", name, t);
                return;
            }
            if (f->kind == K_METRIC && !valid_metric_name(t)) {
                node_error(p, v, "%s must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got '%s'", name,
                           t);
                return;
            }
            if (!(s = sb_strdup(t))) {
                out_of_memory(p);
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
        if (bool_of(p, v, name, &b))
            *(bool *)dst = b;
        return;
    }
    if (v->type != YAML_SCALAR_NODE || is_null(v)) {
        node_error(p, v, "%s must be a scalar, got %s", name, type_name(v));
        return;
    }
    const char *s = (const char *)v->data.scalar.value;
    /* Only sizes may be quoted ("16MiB" reads naturally as a string); a quoted number
     * elsewhere is a type mistake, probably a template gone wrong. */
    bool quoted = v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    uint64_t x;
    if ((quoted && f->kind != K_BYTES) || !parse_uint(s, f->kind == K_BYTES, &x)) {
        const char *expected = f->kind == K_BYTES ? "a size in bytes (like 65536 or 64KiB)"
                               : f->kind == K_MS  ? "an integer number of milliseconds"
                                                  : "a non-negative integer";
        node_error(p, v, "%s must be %s, got '%s'", name, expected, s);
        return;
    }
    if (x < f->min || x > f->max) {
        if (f->max == UINT64_MAX)
            node_error(p, v, "%s must be at least %llu, got %llu", name, (unsigned long long)f->min,
                       (unsigned long long)x);
        else
            node_error(p, v, "%s must be between %llu and %llu, got %llu", name, (unsigned long long)f->min,
                       (unsigned long long)f->max, (unsigned long long)x);
        return;
    }
    if (f->kind == K_MS || f->kind == K_COUNT32)
        *(uint32_t *)dst = (uint32_t)x;
    else
        *(size_t *)dst = (size_t)x;
}

/* Walks a section mapping into the struct at base; `label` names the section in messages. */
static void parse_section(parse *p, const section *s, const yaml_node_t *map, void *base, const char *label)
{
    if (!want_mapping(p, map, label))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, label);
        if (!key)
            continue;
        const field *f = NULL;
        for (size_t i = 0; i < s->n_fields && !f; i++)
            if (!strcmp(s->fields[i].key, key))
                f = &s->fields[i];
        if (!f)
            node_error(p, node_at(p, q->key), "unknown key '%s' in %s", key, label);
        else
            parse_field(p, f, node_at(p, q->value), base, label);
    }
}

/* ---- addresses ---- */

static bool valid_hostname(const char *h, size_t len)
{
    if (len == 0 || len > 253 || h[0] == '-' || h[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_'))
            return false;
    }
    return true;
}

/* Splits "host:port" or "[ipv6]:port". The host comes back without brackets, ready for
 * address parsing. On failure returns a reason suitable for an error message. */
static const char *split_address(const char *s, const char **host, size_t *host_len, uint16_t *port)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close)
            return "missing ']' after the IPv6 address";
        if (close[1] != ':')
            return "expected ':port' after ']'";
        *host = s + 1;
        *host_len = (size_t)(close - s - 1);
        colon = close + 1;
        char ip[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        if (*host_len == 0 || *host_len >= sizeof ip)
            return "invalid IPv6 address";
        memcpy(ip, *host, *host_len);
        ip[*host_len] = '\0';
        if (inet_pton(AF_INET6, ip, &a6) != 1)
            return "invalid IPv6 address";
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return "missing ':port'";
        if (memchr(s, ':', (size_t)(colon - s)))
            return "IPv6 addresses must be in brackets, like [::1]:8080";
        *host = s;
        *host_len = (size_t)(colon - s);
        if (*host_len == 0)
            return "missing host before ':'";
        /* All digits and dots: meant as an IPv4 literal, so hold it to that. */
        if (strspn(s, "0123456789.") >= *host_len) {
            char ip[INET_ADDRSTRLEN];
            struct in_addr a4;
            if (*host_len >= sizeof ip)
                return "invalid IPv4 address";
            memcpy(ip, s, *host_len);
            ip[*host_len] = '\0';
            if (inet_pton(AF_INET, ip, &a4) != 1)
                return "invalid IPv4 address";
        } else if (!valid_hostname(s, *host_len)) {
            return "invalid host name";
        }
    }
    uint64_t v;
    if (strlen(colon + 1) > 5 || !parse_uint(colon + 1, false, &v) || v < 1 || v > 65535)
        return "port must be a number from 1 to 65535";
    *port = (uint16_t)v;
    return NULL;
}

/* Parses an address node into a fresh host copy and port. Returns false after reporting. */
static bool parse_address(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port)
{
    const char *s = string_of(p, n, what);
    if (!s)
        return false;
    const char *h;
    size_t hlen;
    const char *why = split_address(s, &h, &hlen, port);
    if (why) {
        node_error(p, n, "%s: bad address '%s': %s", what, s, why);
        return false;
    }
    if (!(*host = sb_strndup(h, hlen)))
        return out_of_memory(p);
    return true;
}

/* A listening address: an IP literal, since names are not resolved for listening (a name
 * would pass `check` and then fail to bind at start). */
static bool parse_listen_address(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port)
{
    unsigned char a[16];
    if (!parse_address(p, n, what, host, port))
        return false;
    if (inet_pton(AF_INET, *host, a) == 1 || inet_pton(AF_INET6, *host, a) == 1)
        return true;
    node_error(p, n, "%s must be an IP address (like 127.0.0.1, 0.0.0.0 or [::1]), got the name '%s'", what, *host);
    sb_free(*host);
    *host = NULL;
    return false;
}

/* ---- pools ---- */

static const char *pool_label(const sb_config *cfg, size_t i, char *buf, size_t cap)
{
    if (i < cfg->n_pools && cfg->pools[i].name)
        snprintf(buf, cap, "pool '%s'", cfg->pools[i].name);
    else
        snprintf(buf, cap, "pools[%zu]", i);
    return buf;
}

/* Claims a model, alias or adapter name for pool `pool`; reports and returns false if another
 * pool, or an earlier entry of this one, already holds it. */
static bool claim_name(parse *p, const char *name, const yaml_node_t *n, size_t pool)
{
    for (size_t i = 0; i < p->n_names; i++) {
        const claimed_name *c = &p->names[i];
        if (strcmp(c->name, name) != 0)
            continue;
        char label[96];
        pool_label(p->cfg, c->pool, label, sizeof label);
        if (c->pool == pool)
            node_error(p, n, "name '%s' appears twice in %s (first at line %d)", name, label, c->line);
        else
            node_error(p, n,
                       "name '%s' is already served by %s (line %d); a model, alias or "
                       "adapter name must belong to one pool",
                       name, label, c->line);
        return false;
    }
    if (p->n_names == p->cap_names) {
        size_t cap = p->cap_names ? p->cap_names * 2 : 16;
        claimed_name *grown = sb_realloc(p->names, cap * sizeof *grown);
        if (!grown)
            return out_of_memory(p);
        p->names = grown;
        p->cap_names = cap;
    }
    p->names[p->n_names++] = (claimed_name){name, (int)n->start_mark.line + 1, pool};
    return true;
}

/* Parses a list of model or adapter names into a fresh array. Every valid, unclaimed entry is
 * kept so that later checks see as much as possible. */
static void parse_names(parse *p, size_t pool, const yaml_node_t *seq, const char *key, bool may_be_empty, char ***out,
                        size_t *n_out)
{
    char label[96], what[192];
    pool_label(p->cfg, pool, label, sizeof label);
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    if (seq->type != YAML_SEQUENCE_NODE && !is_null(seq)) {
        node_error(p, seq, "%s: %s must be a list, got %s", label, key, type_name(seq));
        return;
    }
    if (n == 0) {
        if (!may_be_empty)
            node_error(p, seq, "%s: %s must not be empty", label, key);
        return;
    }
    if (!(*out = sb_calloc(n, sizeof **out))) {
        out_of_memory(p);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *item = node_at(p, seq->data.sequence.items.start[i]);
        snprintf(what, sizeof what, "%s: %s[%zu]", label, key, i);
        char *s = dup_string(p, item, what);
        if (!s)
            continue;
        (*out)[(*n_out)++] = s;
        claim_name(p, s, item, pool);
    }
}

/* Pool, profile and label names end up in metric labels, log fields, JSON explanations and
 * URLs: keep them plain. Labels may also hold '/' (as in Kubernetes' "zone/rack" style). */
static bool plain_name(const char *s, bool slash)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.' || (slash && *s == '/')))
            return false;
    return true;
}

static size_t mapping_len(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start) : 0;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sb_free(v[i]);
}

/* Parses a `labels: { key: value }` mapping of at most `max` pairs into fresh strings in
 * keys[] and values[] (caller's arrays of `max` entries). Returns the number of pairs kept;
 * on any problem, reports it, and the pair is left out. */
static size_t parse_labels(parse *p, const yaml_node_t *map, const char *what, size_t max, char **keys,
                           char **values)
{
    if (!want_mapping(p, map, what))
        return 0;
    if (mapping_len(map) > max) {
        node_error(p, map, "%s: at most %zu labels, got %zu", what, max, mapping_len(map));
        return 0;
    }
    size_t n = 0;
    char item[240];
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, what);
        if (!key)
            continue;
        const yaml_node_t *k = node_at(p, q->key), *v = node_at(p, q->value);
        snprintf(item, sizeof item, "%s.%s", what, key);
        const char *value = string_of(p, v, item);
        if (!*key || !plain_name(key, true)) {
            node_error(p, k, "%s: label name '%s' may only contain letters, digits, '-', '_', '.' and '/'", what,
                       key);
            continue;
        }
        if (!value)
            continue;
        if (!plain_name(value, true)) {
            node_error(p, v, "%s: label value '%s' may only contain letters, digits, '-', '_', '.' and '/'", item,
                       value);
            continue;
        }
        char *kd = sb_strdup(key), *vd = sb_strdup(value);
        if (!kd || !vd) {
            sb_free(kd);
            sb_free(vd);
            out_of_memory(p);
            continue;
        }
        keys[n] = kd;
        values[n++] = vd;
    }
    return n;
}

static void free_endpoint(sb_endpoint_config *ep)
{
    sb_free(ep->host);
    sb_free(ep->address);
    if (ep->label_keys)
        free_strings(ep->label_keys, ep->n_labels);
    if (ep->label_values)
        free_strings(ep->label_values, ep->n_labels);
    sb_free(ep->label_keys);
    sb_free(ep->label_values);
}

/* One `endpoints:` item: "host:port", or { address, labels, draining }. Returns the node
 * holding the address, or NULL when the item has no valid address (after reporting); ep may
 * then still hold labels, for the caller to free. */
static const yaml_node_t *parse_endpoint(parse *p, const yaml_node_t *item, const char *what,
                                         sb_endpoint_config *ep)
{
    if (item->type != YAML_MAPPING_NODE) {
        if (item->type != YAML_SCALAR_NODE) {
            node_error(p, item, "%s must be \"host:port\" or a mapping, got %s", what, type_name(item));
            return NULL;
        }
        return parse_address(p, item, what, &ep->host, &ep->port) ? item : NULL;
    }
    const yaml_node_t *address = NULL;
    bool address_ok = false;
    char sub[240];
    for (yaml_node_pair_t *q = item->data.mapping.pairs.start; q < item->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, item, q, what);
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        snprintf(sub, sizeof sub, "%s.%s", what, key);
        if (!strcmp(key, "address")) {
            address = v;
            address_ok = parse_address(p, v, sub, &ep->host, &ep->port);
        } else if (!strcmp(key, "labels")) {
            char *keys[SB_MAX_LABELS], *values[SB_MAX_LABELS];
            size_t n = parse_labels(p, v, sub, SB_MAX_LABELS, keys, values);
            if (n == 0)
                continue;
            ep->label_keys = sb_calloc(n, sizeof *ep->label_keys);
            ep->label_values = sb_calloc(n, sizeof *ep->label_values);
            if (!ep->label_keys || !ep->label_values) {
                free_strings(keys, n);
                free_strings(values, n);
                out_of_memory(p);
                continue;
            }
            memcpy(ep->label_keys, keys, n * sizeof *keys);
            memcpy(ep->label_values, values, n * sizeof *values);
            ep->n_labels = n;
        } else if (!strcmp(key, "draining")) {
            bool_of(p, v, sub, &ep->draining);
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    if (!address)
        node_error(p, item, "%s has no 'address'", what);
    return address_ok ? address : NULL;
}

static void parse_endpoints(parse *p, size_t pool, const yaml_node_t *seq)
{
    sb_pool_config *pc = &p->cfg->pools[pool];
    char label[96], what[192];
    pool_label(p->cfg, pool, label, sizeof label);
    if (seq->type != YAML_SEQUENCE_NODE && !is_null(seq)) {
        node_error(p, seq, "%s: endpoints must be a list, got %s", label, type_name(seq));
        return;
    }
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    if (n == 0) {
        node_error(p, seq, "%s: endpoints must not be empty", label);
        return;
    }
    if (!(pc->endpoints = sb_calloc(n, sizeof *pc->endpoints))) {
        out_of_memory(p);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *item = node_at(p, seq->data.sequence.items.start[i]);
        sb_endpoint_config ep = {0};
        snprintf(what, sizeof what, "%s: endpoints[%zu]", label, i);
        const yaml_node_t *addr = parse_endpoint(p, item, what, &ep);
        if (!addr) {
            free_endpoint(&ep);
            continue;
        }
        const char *text = (const char *)addr->data.scalar.value;
        bool dup = false;
        for (size_t j = 0; j < pc->n_endpoints && !dup; j++)
            dup = pc->endpoints[j].port == ep.port && !strcmp(pc->endpoints[j].host, ep.host);
        if (dup) {
            node_error(p, addr, "%s: endpoint '%s' is listed twice", label, text);
            free_endpoint(&ep);
            continue;
        }
        if (!(ep.address = sb_strdup(text))) {
            free_endpoint(&ep);
            out_of_memory(p);
            continue;
        }
        pc->endpoints[pc->n_endpoints++] = ep;
    }
}

/* min_interval_ms <= interval_ms <= max_interval_ms. The message points at interval_ms when
 * it was written, else at the bound that was. */
static void check_probe_intervals(parse *p, const sb_pool_config *pc, const yaml_node_t *probe, const char *what)
{
    const yaml_node_t *iv = lookup(p, probe, "interval_ms"), *lo = lookup(p, probe, "min_interval_ms"),
                      *hi = lookup(p, probe, "max_interval_ms");
    if (pc->probe_min_interval_ms > pc->probe_max_interval_ms)
        node_error(p, lo ? lo : hi, "%s: min_interval_ms (%u) must not exceed max_interval_ms (%u)", what,
                   pc->probe_min_interval_ms, pc->probe_max_interval_ms);
    else if (pc->probe_interval_ms < pc->probe_min_interval_ms || pc->probe_interval_ms > pc->probe_max_interval_ms) {
        const yaml_node_t *bound = pc->probe_interval_ms < pc->probe_min_interval_ms ? lo : hi;
        node_error(p, iv ? iv : bound,
                   "%s: interval_ms (%u) must be between min_interval_ms (%u) and max_interval_ms (%u)", what,
                   pc->probe_interval_ms, pc->probe_min_interval_ms, pc->probe_max_interval_ms);
    }
}

/* A custom engine has no built-in metric names: all three must be given. Other engines have
 * theirs, and a `metrics:` there would be silently ignored, so it is refused. */
static void check_metrics(parse *p, const sb_pool_config *pc, const char *label, const yaml_node_t *engine,
                          const yaml_node_t *metrics)
{
    bool custom = !strcmp(pc->engine, "custom");
    if (!custom) {
        if (metrics)
            node_error(p, metrics, "%s: metrics applies only to engine custom (this pool's engine is %s)", label,
                       pc->engine);
        return;
    }
    const char *missing[3];
    size_t n = 0;
    if (!pc->metric_running)
        missing[n++] = "running";
    if (!pc->metric_waiting)
        missing[n++] = "waiting";
    if (!pc->metric_kv_usage)
        missing[n++] = "kv_usage";
    for (size_t i = 0; i < n; i++)
        node_error(p, metrics ? metrics : engine, "%s: engine custom needs metrics.%s (the metric's name)", label,
                   missing[i]);
}

/* `adaptive:` as a mapping: `enabled` plus any parameter core/adaptive.h names (x0: 0.1,
 * share_saturated: 0.2, imbalance_tau_ms: 1000, ...), checked as a whole. */
static void parse_adaptive(parse *p, const yaml_node_t *map, sb_pool_config *pc, const char *what)
{
    size_t before = p->errs->total;
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const yaml_node_t *k = node_at(p, q->key), *v = node_at(p, q->value);
        /* As in every other mapping: a non-string or repeated key is reported and skipped
         * (a repeated one used to win silently). */
        const char *key = pair_key(p, map, q, what);
        if (!key)
            continue;
        char sub[200];
        snprintf(sub, sizeof sub, "%s: %s", what, key);
        if (!strcmp(key, "enabled")) {
            bool b;
            if (bool_of(p, v, sub, &b))
                pc->adaptive = b;
            continue;
        }
        double x;
        sb_adaptive_params probe = pc->adaptive_params;
        if (sb_adaptive_param_set(&probe, key, 0) == -1) {
            node_error(p, k, "unknown key '%s' in %s (enabled, %s)", key, what, sb_adaptive_param_list());
            continue;
        }
        if (!number_of(p, v, sub, -INFINITY, false, INFINITY, &x))
            continue;
        if (sb_adaptive_param_set(&pc->adaptive_params, key, x) != 0)
            node_error(p, v, "%s must be a duration from 0 to 1e9 ms", sub);
        else if (!strcmp(key, "min_publish_ms") && x < 100)
            /* Snapshots live in a ring of 64: at one publication per 100 ms or slower, a
             * request's snapshot stays unchanged for 6.3 s or more (core/adaptive.h). */
            node_error(p, v, "%s must be at least 100", sub);
    }
    const char *why = p->errs->total == before ? sb_adaptive_params_check(&pc->adaptive_params) : NULL;
    if (why)
        node_error(p, map, "%s: %s", what, why);
}

/* Fills cfg->pools[i], which the caller has zeroed and already counted in n_pools, so that
 * sb_config_free releases whatever part was built. */
static void parse_pool(parse *p, size_t i, const yaml_node_t *map)
{
    sb_pool_config *pc = &p->cfg->pools[i];
    char label[96];
    const yaml_node_t *engine = NULL, *metrics = NULL; /* metrics: the key, for its line */
    const yaml_node_t *upstream_key = NULL, *upstream_key_file = NULL;
    bool metrics_ok = true;
    pc->probe_interval_ms = 100;
    /* On by default: replay shows the configurator within 2% of the static weights on balanced
     * workloads and far better under a hot prefix (docs/benchmarks.md). */
    pc->adaptive = true;
    pc->adaptive_params = sb_adaptive_params_default();
    pc->probe_min_interval_ms = 50;
    pc->probe_max_interval_ms = 1000;
    pc->probe_timeout_ms = 500;
    pc->stale_ms = 2000; /* twice the slowest (idle) scrape interval: an idle endpoint never goes stale */
    pc->health_interval_ms = 2000;
    pc->probe_enabled = true;
    pc->max_failures = 3;
    pc->base_eject_ms = 1000;
    pc->max_eject_ms = 30000;
    if (map->type != YAML_MAPPING_NODE) {
        node_error(p, map, "pools[%zu] must be a mapping, got %s", i, type_name(map));
        return;
    }
    /* The name first, whatever its position, so that every other message can use it. */
    const yaml_node_t *name = lookup(p, map, "name");
    if (!name) {
        node_error(p, map, "pools[%zu] has no 'name'", i);
    } else {
        snprintf(label, sizeof label, "pools[%zu].name", i);
        const char *s = string_of(p, name, label);
        if (s && !plain_name(s, false)) {
            node_error(p, name, "pool name '%s' may only contain letters, digits, '-', '_' and '.'", s);
        } else if (s) {
            bool dup = false;
            for (size_t j = 0; j < i && !dup; j++)
                dup = p->cfg->pools[j].name && !strcmp(p->cfg->pools[j].name, s);
            if (dup)
                node_error(p, name, "duplicate pool name '%s'", s);
            else if (!(pc->name = sb_strdup(s)))
                out_of_memory(p);
        }
    }
    pool_label(p->cfg, i, label, sizeof label);

    bool seen_models = false, seen_endpoints = false;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, label);
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        char what[192];
        if (!strcmp(key, "name")) {
            continue;
        } else if (!strcmp(key, "models")) {
            seen_models = true;
            parse_names(p, i, v, "models", false, &pc->models, &pc->n_models);
        } else if (!strcmp(key, "adapters")) {
            parse_names(p, i, v, "adapters", true, &pc->adapters, &pc->n_adapters);
        } else if (!strcmp(key, "endpoints")) {
            seen_endpoints = true;
            parse_endpoints(p, i, v);
        } else if (!strcmp(key, "engine")) {
            snprintf(what, sizeof what, "%s: engine", label);
            const char *s = string_of(p, v, what);
            size_t e = 0;
            while (s && e < ARRAY_LEN(engines) && strcmp(engines[e], s))
                e++;
            engine = v;
            if (s && e == ARRAY_LEN(engines))
                node_error(p, v,
                           "%s: unknown engine '%s' (expected vllm, sglang, llamacpp, "
                           "trtllm or custom)",
                           label, s);
            else if (s && !(pc->engine = sb_strdup(s)))
                out_of_memory(p);
        } else if (!strcmp(key, "profile")) {
            /* Checked against the profiles once the whole file is read (check_pool_profiles):
             * `profiles:` may come after `pools:`. */
            snprintf(what, sizeof what, "%s: profile", label);
            char *s = dup_string(p, v, what);
            if (s) {
                sb_free(pc->profile);
                pc->profile = s;
            }
        } else if (!strcmp(key, "probe")) {
            snprintf(what, sizeof what, "%s: probe", label);
            size_t before = p->errs->total;
            parse_section(p, &probe_section, v, pc, what);
            if (p->errs->total == before)
                check_probe_intervals(p, pc, v, what);
        } else if (!strcmp(key, "health")) {
            snprintf(what, sizeof what, "%s: health", label);
            size_t before = p->errs->total;
            parse_section(p, &health_section, v, pc, what);
            if (p->errs->total == before && pc->base_eject_ms > pc->max_eject_ms) {
                const yaml_node_t *at = lookup(p, v, "base_eject_ms");
                node_error(p, at ? at : lookup(p, v, "max_eject_ms"),
                           "%s: base_eject_ms (%u) must not exceed max_eject_ms (%u)", what, pc->base_eject_ms,
                           pc->max_eject_ms);
            }
        } else if (!strcmp(key, "adaptive")) {
            /* The adaptive loop (core/adaptive.h) moves weight between the profile's affinity
             * and distribution scorers as the pool's balance changes. */
            snprintf(what, sizeof what, "%s: adaptive", label);
            if (v->type == YAML_MAPPING_NODE) {
                parse_adaptive(p, v, pc, what);
            } else {
                bool b;
                if (bool_of(p, v, what, &b))
                    pc->adaptive = b;
            }
        } else if (!strcmp(key, "upstream_api_key")) {
            snprintf(what, sizeof what, "%s: upstream_api_key", label);
            upstream_key = v;
            parse_upstream_key(p, pc, v, what);
        } else if (!strcmp(key, "upstream_api_key_file")) {
            snprintf(what, sizeof what, "%s: upstream_api_key_file", label);
            upstream_key_file = v;
            char *s = dup_string(p, v, what);
            if (s) {
                sb_free(pc->upstream_api_key_file);
                pc->upstream_api_key_file = s;
            }
        } else if (!strcmp(key, "metrics")) {
            snprintf(what, sizeof what, "%s: metrics", label);
            metrics = node_at(p, q->key);
            size_t before = p->errs->total;
            parse_section(p, &metrics_section, v, pc, what);
            metrics_ok = p->errs->total == before;
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' in %s", key, label);
        }
    }
    if (upstream_key && upstream_key_file)
        node_error(p, upstream_key_file, "%s: give upstream_api_key or upstream_api_key_file, not both", label);
    if (!seen_models)
        node_error(p, map, "%s has no 'models'", label);
    if (!seen_endpoints)
        node_error(p, map, "%s has no 'endpoints'", label);
    bool engine_ok = !engine || pc->engine;
    if (!pc->engine && !(pc->engine = sb_strdup("vllm")))
        out_of_memory(p);
    if (!pc->profile && !(pc->profile = sb_strdup("default")))
        out_of_memory(p);
    if (!pc->probe_path && !(pc->probe_path = sb_strdup("/metrics")))
        out_of_memory(p);
    if (!pc->health_path && !(pc->health_path = sb_strdup("/health")))
        out_of_memory(p);
    if (engine_ok && metrics_ok && pc->engine)
        check_metrics(p, pc, label, engine, metrics);
}

static void parse_pools(parse *p, const yaml_node_t *seq)
{
    if (seq->type != YAML_SEQUENCE_NODE && !is_null(seq)) {
        node_error(p, seq, "pools must be a list, got %s", type_name(seq));
        return;
    }
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    if (n == 0) {
        node_error(p, seq, "pools must list at least one pool");
        return;
    }
    if (!(p->cfg->pools = sb_calloc(n, sizeof *p->cfg->pools))) {
        out_of_memory(p);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        p->cfg->n_pools++;
        parse_pool(p, i, node_at(p, seq->data.sequence.items.start[i]));
    }
}

/* ---- profiles ---- */

/* Joins the names of a NULL-terminated registry table ("healthy, lora, ...") for messages.
 * Every plug-in definition starts with its name, so a pointer to one is a pointer to that. */
static const char *known_names(const void *const *defs, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; defs[i] && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", *(const char *const *)defs[i]);
        used = w < 0 ? cap : used + (size_t)w;
    }
    return buf;
}

static void parse_profile_filters(parse *p, sb_profile *prof, const yaml_node_t *seq, const char *what)
{
    char item[240], known[160];
    if (seq->type != YAML_SEQUENCE_NODE) {
        if (!is_null(seq))
            node_error(p, seq, "%s must be a list, got %s", what, type_name(seq));
        return;
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > SB_MAX_FILTERS) {
        node_error(p, seq, "%s: at most %d filters, got %zu", what, SB_MAX_FILTERS, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *v = node_at(p, seq->data.sequence.items.start[i]);
        snprintf(item, sizeof item, "%s[%zu]", what, i);
        const char *name = string_of(p, v, item);
        if (!name)
            continue;
        const sb_filter_def *f = sb_filter_find(name);
        bool dup = false;
        for (size_t j = 0; f && j < prof->n_filters && !dup; j++)
            dup = prof->filters[j] == f;
        if (!f)
            node_error(p, v, "%s: unknown filter '%s' (known: %s)", item, name,
                       known_names((const void *const *)sb_filters_all(), known, sizeof known));
        else if (dup)
            node_error(p, v, "%s: filter '%s' is listed twice", item, name);
        else
            prof->filters[prof->n_filters++] = f;
    }
}

static void parse_profile_scorers(parse *p, sb_profile *prof, const yaml_node_t *map, const char *what)
{
    char item[240], known[160];
    if (!want_mapping(p, map, what))
        return;
    if (mapping_len(map) > SB_MAX_SCORERS) {
        node_error(p, map, "%s: at most %d scorers, got %zu", what, SB_MAX_SCORERS, mapping_len(map));
        return;
    }
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *name = pair_key(p, map, q, what);
        if (!name)
            continue;
        const sb_scorer_def *def = sb_scorer_find(name);
        snprintf(item, sizeof item, "%s.%s", what, name);
        double weight;
        if (!def)
            node_error(p, node_at(p, q->key), "%s: unknown scorer '%s' (known: %s)", what, name,
                       known_names((const void *const *)sb_scorers_all(), known, sizeof known));
        else if (number_of(p, node_at(p, q->value), item, 0, false, INFINITY, &weight))
            prof->scorers[prof->n_scorers++] = (sb_weighted_scorer){def, weight};
    }
}

/* Fills prof (already sb_profile_init'ed with its name) from its mapping. */
static void parse_profile(parse *p, sb_profile *prof, const yaml_node_t *map, const char *what)
{
    char sub[200], known[160];
    const yaml_node_t *filters = NULL, *labels = NULL;
    bool labels_ok = true;
    if (!want_mapping(p, map, what))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, what);
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        snprintf(sub, sizeof sub, "%s: %s", what, key);
        if (!strcmp(key, "filters")) {
            filters = v;
            parse_profile_filters(p, prof, v, sub);
        } else if (!strcmp(key, "scorers")) {
            parse_profile_scorers(p, prof, v, sub);
        } else if (!strcmp(key, "picker")) {
            const char *name = string_of(p, v, sub);
            const sb_picker_def *def = name ? sb_picker_find(name) : NULL;
            if (name && !def)
                node_error(p, v, "%s: unknown picker '%s' (known: %s)", what, name,
                           known_names((const void *const *)sb_pickers_all(), known, sizeof known));
            else if (def)
                prof->picker = def;
        } else if (!strcmp(key, "temperature")) {
            number_of(p, v, sub, 0, true, INFINITY, &prof->temperature);
        } else if (!strcmp(key, "queue_threshold")) {
            number_of(p, v, sub, 0, false, INFINITY, &prof->queue_threshold);
        } else if (!strcmp(key, "kv_threshold")) {
            number_of(p, v, sub, 0, false, 1, &prof->kv_threshold);
        } else if (!strcmp(key, "labels")) {
            enum { MAX = ARRAY_LEN(prof->label_keys) };
            char *keys[MAX], *values[MAX];
            size_t before = p->errs->total;
            size_t n = parse_labels(p, v, sub, MAX, keys, values);
            labels = node_at(p, q->key);
            labels_ok = p->errs->total == before;
            for (size_t i = 0; i < n; i++) {
                prof->label_keys[i] = keys[i];
                prof->label_values[i] = values[i];
            }
            prof->n_labels = n;
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    /* Labels and the labels filter only make sense together: either alone is a no-op, most
     * likely a forgotten half. */
    bool has_labels_filter = false;
    for (size_t i = 0; i < prof->n_filters; i++)
        has_labels_filter |= !strcmp(prof->filters[i]->name, "labels");
    if (labels && prof->n_labels > 0 && !has_labels_filter)
        node_error(p, labels, "%s: labels take effect only with the 'labels' filter in filters", what);
    else if (has_labels_filter && prof->n_labels == 0 && labels_ok)
        node_error(p, filters, "%s: the 'labels' filter needs labels to select by", what);
}

static void parse_profiles(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!want_mapping(p, map, "profiles") || mapping_len(map) == 0)
        return;
    if (!(cfg->profiles = sb_calloc(mapping_len(map), sizeof *cfg->profiles))) {
        out_of_memory(p);
        return;
    }
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *name = pair_key(p, map, q, "profiles");
        if (!name)
            continue;
        const yaml_node_t *k = node_at(p, q->key);
        if (!*name || !plain_name(name, false)) {
            node_error(p, k, "profile name '%s' may only contain letters, digits, '-', '_' and '.'", name);
            continue;
        }
        if (strlen(name) >= SB_PROFILE_NAME_MAX) {
            node_error(p, k, "profile name '%s' is longer than %d characters", name, SB_PROFILE_NAME_MAX - 1);
            continue;
        }
        /* A pool naming "default" must get what the documentation says "default" is. */
        if (sb_profile_builtin(name)) {
            node_error(p, k, "profile '%s' would shadow the built-in profile of that name; choose another name",
                       name);
            continue;
        }
        sb_profile *prof = &cfg->profiles[cfg->n_profiles++];
        char what[96];
        sb_profile_init(prof, name);
        snprintf(what, sizeof what, "profile '%s'", name);
        parse_profile(p, prof, node_at(p, q->value), what);
    }
}

/* Every pool's profile must exist: checked last, once `profiles:` is read wherever it was. */
static void check_pool_profiles(parse *p, const yaml_node_t *root)
{
    const yaml_node_t *pools = lookup(p, root, "pools");
    if (!pools || pools->type != YAML_SEQUENCE_NODE)
        return;
    for (size_t i = 0; i < p->cfg->n_pools; i++) {
        const sb_pool_config *pc = &p->cfg->pools[i];
        if (!pc->profile || sb_config_profile(p->cfg, pc->profile))
            continue;
        const yaml_node_t *at = lookup(p, node_at(p, pools->data.sequence.items.start[i]), "profile");
        char label[96], builtins[160] = "";
        const char *const *names = sb_profile_builtin_names();
        for (size_t j = 0; names[j]; j++) {
            strncat(builtins, j ? ", " : "", sizeof builtins - strlen(builtins) - 1);
            strncat(builtins, names[j], sizeof builtins - strlen(builtins) - 1);
        }
        if (at)
            node_error(p, at, "%s: unknown profile '%s' (built in: %s; others are defined under 'profiles')",
                       pool_label(p->cfg, i, label, sizeof label), pc->profile, builtins);
    }
}

/* ---- flow control ---- */

#define BAND_FIELD(arr, i, k, lo, hi)                                                                              \
    {.key = i == 0 ? "critical" : i == 1 ? "standard" : "sheddable", .kind = k,                                   \
     .offset = offsetof(sb_config, arr) + (i) * sizeof(uint32_t), .min = lo, .max = hi}

static const field flow_wait_fields[] = {BAND_FIELD(flow_max_wait_ms, 0, K_MS, 1, UINT32_MAX),
                                         BAND_FIELD(flow_max_wait_ms, 1, K_MS, 1, UINT32_MAX),
                                         BAND_FIELD(flow_max_wait_ms, 2, K_MS, 1, UINT32_MAX)};
static const field flow_queued_fields[] = {BAND_FIELD(flow_max_queued, 0, K_COUNT32, 0, 1u << 20),
                                           BAND_FIELD(flow_max_queued, 1, K_COUNT32, 0, 1u << 20),
                                           BAND_FIELD(flow_max_queued, 2, K_COUNT32, 0, 1u << 20)};
#define BAND_BYTES(i)                                                                                              \
    {.key = i == 0 ? "critical" : i == 1 ? "standard" : "sheddable", .kind = K_BYTES,                             \
     .offset = offsetof(sb_config, flow_max_bytes) + (i) * sizeof(size_t), .min = 0, .max = 1ull << 40}
static const field flow_bytes_fields[] = {BAND_BYTES(0), BAND_BYTES(1), BAND_BYTES(2)};
static const section flow_bytes_section = {"flow_control.max_bytes", flow_bytes_fields, ARRAY_LEN(flow_bytes_fields)};
static const field flow_total_fields[] = {
    /* 0: the sum of the bands' bounds. The count is allocated up front (about 60 bytes a
     * request per pool), hence a million at most. */
    {.key = "max_queued_total", .kind = K_COUNT32, .offset = offsetof(sb_config, flow_max_queued_total), .min = 0,
     .max = 1u << 20},
    {.key = "max_bytes_total", .kind = K_BYTES, .offset = offsetof(sb_config, flow_max_bytes_total), .min = 0,
     .max = 1ull << 40},
};
static const section flow_wait_section = {"flow_control.max_wait_ms", flow_wait_fields, ARRAY_LEN(flow_wait_fields)};
static const section flow_queued_section = {"flow_control.max_queued", flow_queued_fields,
                                           ARRAY_LEN(flow_queued_fields)};
static const field flow_enabled_field = {
    .key = "enabled", .kind = K_BOOL, .offset = offsetof(sb_config, flow_enabled), .max = 1};

/* flow_control: { enabled, max_wait_ms: {band: ms}, max_queued: {band: n}, max_bytes: {band: size},
 *                max_queued_total: n, max_bytes_total: size, api_keys: {key: band},
 *                queue_threshold: n, kv_threshold: f } */
static void parse_flow_control(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!want_mapping(p, map, "flow_control"))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, "flow_control");
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        if (!strcmp(key, "enabled")) {
            parse_field(p, &flow_enabled_field, v, cfg, "flow_control");
        } else if (!strcmp(key, "max_wait_ms")) {
            parse_section(p, &flow_wait_section, v, cfg, "flow_control.max_wait_ms");
        } else if (!strcmp(key, "queue_threshold")) {
            number_of(p, v, "flow_control.queue_threshold", -1, false, 1e9, &cfg->flow_gate_queue);
        } else if (!strcmp(key, "kv_threshold")) {
            number_of(p, v, "flow_control.kv_threshold", -1, false, 1, &cfg->flow_gate_kv);
        } else if (!strcmp(key, "max_queued")) {
            parse_section(p, &flow_queued_section, v, cfg, "flow_control.max_queued");
        } else if (!strcmp(key, "max_bytes")) {
            parse_section(p, &flow_bytes_section, v, cfg, "flow_control.max_bytes");
        } else if (!strcmp(key, "max_queued_total")) {
            parse_field(p, &flow_total_fields[0], v, cfg, "flow_control");
        } else if (!strcmp(key, "max_bytes_total")) {
            parse_field(p, &flow_total_fields[1], v, cfg, "flow_control");
        } else if (!strcmp(key, "api_keys")) {
            /* key: band. Hashed at once, like auth.api_keys, and merged with them; no message
             * quotes a key (pair_key would, for a repeated one: the table reports those). */
            if (!want_mapping(p, v, "flow_control.api_keys"))
                continue;
            for (yaml_node_pair_t *r = v->data.mapping.pairs.start; r < v->data.mapping.pairs.top; r++) {
                const yaml_node_t *kn = node_at(p, r->key);
                const char *api_key = secret_of(p, kn, "a key in flow_control.api_keys");
                const yaml_node_t *bv = node_at(p, r->value);
                const char *band = string_of(p, bv, "flow_control.api_keys band");
                if (!api_key || !band)
                    continue;
                sb_api_key k = {.band = sb_band_parse(band, strlen(band))};
                if (k.band < 0) {
                    node_error(p, bv, "flow_control.api_keys: unknown band '%s' (critical, standard or sheddable)",
                               band);
                    continue;
                }
                sb_auth_digest(api_key, strlen(api_key), k.digest);
                const char *why = NULL;
                int rc = sb_auth_keys_add(&cfg->api_keys, &k, &why);
                if (rc == -1)
                    out_of_memory(p);
                else if (rc < 0)
                    node_error(p, kn, "flow_control.api_keys: %s", why);
            }
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' in flow_control", key);
        }
    }
}

/* ---- secrets: admin token, API keys, upstream keys ---- */

/* Secrets never appear in messages: a config error is printed, and may be logged. */

bool sb_config_host_is_loopback(const char *host)
{
    if (!host)
        return false;
    if (!strcasecmp(host, "localhost") || !strcmp(host, "::1"))
        return true;
    struct in_addr a4;
    return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* A secret given inline: a non-empty string of printable ASCII without blanks (it travels in a
 * header). Returns its text (in the YAML document, wiped after parsing) or NULL after
 * reporting. */
static const char *secret_of(parse *p, const yaml_node_t *v, const char *what)
{
    const char *s = string_of(p, v, what);
    if (s && !sb_auth_valid_key(s, strlen(s))) {
        node_error(p, v, "%s must be 1 to %d printable ASCII characters without blanks", what, SB_AUTH_KEY_MAX);
        return NULL;
    }
    return s;
}

static bool upstream_header_of(const char *key, size_t len, char **out)
{
    static const char pre[] = "Authorization: Bearer ";
    size_t n = sizeof pre - 1 + len + 3;
    char *h = sb_malloc(n);
    if (!h)
        return false;
    memcpy(h, pre, sizeof pre - 1);
    memcpy(h + sizeof pre - 1, key, len);
    memcpy(h + sizeof pre - 1 + len, "\r\n", 3);
    if (*out) {
        OPENSSL_cleanse(*out, strlen(*out));
        sb_free(*out);
    }
    *out = h;
    return true;
}

static void parse_upstream_key(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what)
{
    const char *s = secret_of(p, v, what);
    if (s && !upstream_header_of(s, strlen(s), &pc->upstream_auth_header))
        out_of_memory(p);
}

/* admin: { listen, max_connections, token, token_file, metrics_auth, debug_endpoints } */
static void parse_admin(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!want_mapping(p, map, "admin"))
        return;
    const yaml_node_t *token = NULL, *token_file = NULL, *listen = NULL;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, "admin");
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        const field *f = NULL;
        for (size_t i = 0; i < ARRAY_LEN(admin_fields) && !f; i++)
            if (!strcmp(admin_fields[i].key, key))
                f = &admin_fields[i];
        if (f) {
            parse_field(p, f, v, cfg, "admin");
        } else if (!strcmp(key, "listen")) {
            listen = v;
            char *host = NULL;
            uint16_t port = 0;
            if (is_null(v) || parse_listen_address(p, v, "admin.listen", &host, &port)) {
                sb_free(cfg->admin_host);
                cfg->admin_host = host;
                cfg->admin_port = port;
            }
        } else if (!strcmp(key, "token")) {
            token = v;
            const char *s = secret_of(p, v, "admin.token");
            if (s) {
                sb_auth_digest(s, strlen(s), cfg->admin_token_digest);
                cfg->admin_has_token = true;
            }
        } else if (!strcmp(key, "token_file")) {
            token_file = v;
            char *s = dup_string(p, v, "admin.token_file");
            if (s) {
                sb_free(cfg->admin_token_file);
                cfg->admin_token_file = s;
            }
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' in admin", key);
        }
    }
    if (token && token_file)
        node_error(p, token_file, "admin: give token or token_file, not both");
    bool has_token = token || token_file;
    /* Secure by default: /debug shows every endpoint's state and later operator endpoints
     * change routing; reachable from other hosts, they must not be open. */
    if (cfg->admin_host && !has_token && !sb_config_host_is_loopback(cfg->admin_host))
        node_error(p, listen ? listen : map,
                   "admin.listen %s is not a loopback address: set admin.token or admin.token_file "
                   "(the admin endpoints must not be open to other hosts)",
                   cfg->admin_host);
    if (cfg->admin_metrics_auth && !has_token)
        node_error(p, lookup(p, map, "metrics_auth"), "admin.metrics_auth needs admin.token or admin.token_file");
}

/* Inside auth a mapping key may be a secret written in the wrong place (`- sk-...: {..}`), and
 * messages reach logs: a name is quoted back only when it looks like a field name (up to 24
 * lowercase letters and underscores), as a typo of one does. */
static bool fieldlike(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz_");
    return n > 0 && n <= 24 && s[n] == '\0';
}
#define QUOTE_IF_FIELDLIKE(s) fieldlike(s) ? "'" : "", fieldlike(s) ? (s) : "", fieldlike(s) ? "' " : ""

/* One auth.api_keys item: "KEY" or { key: KEY, tenant: NAME, band: BAND }. */
static void parse_api_key(parse *p, const yaml_node_t *item, size_t i)
{
    char what[96];
    snprintf(what, sizeof what, "auth.api_keys[%zu]", i);
    sb_api_key k = {.band = -1, .admits = true};
    const char *key = NULL;
    if (item->type == YAML_MAPPING_NODE) {
        bool ok = true;
        for (yaml_node_pair_t *q = item->data.mapping.pairs.start; q < item->data.mapping.pairs.top; q++) {
            const char *name = pair_key(p, item, q, what);
            if (!name) {
                ok = false;
                continue;
            }
            const yaml_node_t *v = node_at(p, q->value);
            char field_what[128];
            snprintf(field_what, sizeof field_what, "%s.%s", what, name);
            if (!strcmp(name, "key")) {
                key = secret_of(p, v, field_what);
                ok = ok && key;
            } else if (!strcmp(name, "tenant")) {
                const char *t = string_of(p, v, field_what);
                if (t && !sb_auth_valid_tenant(t, strlen(t))) {
                    node_error(p, v, "%s must be 1 to %d letters, digits, '-', '_' or '.'", field_what,
                               SB_AUTH_TENANT_MAX);
                    t = NULL;
                }
                if (t)
                    snprintf(k.tenant, sizeof k.tenant, "%s", t);
                ok = ok && t;
            } else if (!strcmp(name, "band")) {
                const char *b = string_of(p, v, field_what);
                k.band = b ? sb_band_parse(b, strlen(b)) : -1;
                if (b && k.band < 0)
                    node_error(p, v, "%s: unknown band '%s' (critical, standard or sheddable)", field_what, b);
                ok = ok && k.band >= 0;
            } else {
                node_error(p, node_at(p, q->key), "unknown field %s%s%sin %s (the fields are key, tenant and band)",
                           QUOTE_IF_FIELDLIKE(name), what);
                ok = false;
            }
        }
        if (!lookup(p, item, "key")) {
            node_error(p, item, "%s has no 'key'", what);
            return;
        }
        if (!ok)
            return;
    } else {
        key = secret_of(p, item, what);
        if (!key)
            return;
    }
    sb_auth_digest(key, strlen(key), k.digest);
    const char *why = NULL;
    int rc = sb_auth_keys_add(&p->cfg->api_keys, &k, &why);
    if (rc == -1)
        out_of_memory(p);
    else if (rc < 0)
        node_error(p, item, "%s: %s", what, why);
}

/* auth: { api_keys: [KEY | {key, tenant, band}], api_keys_file: PATH } */
static void parse_auth(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!want_mapping(p, map, "auth"))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, map, q, "auth");
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        if (!strcmp(key, "api_keys")) {
            if (v->type != YAML_SEQUENCE_NODE) {
                node_error(p, v, "auth.api_keys must be a list, got %s", type_name(v));
                continue;
            }
            cfg->auth_enabled = true;
            size_t i = 0;
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                parse_api_key(p, node_at(p, *it), i++);
        } else if (!strcmp(key, "api_keys_file")) {
            char *s = dup_string(p, v, "auth.api_keys_file");
            if (s) {
                sb_free(cfg->auth_api_keys_file);
                cfg->auth_api_keys_file = s;
                cfg->auth_enabled = true;
            }
        } else {
            node_error(p, node_at(p, q->key), "unknown field %s%s%sin auth (the fields are api_keys and api_keys_file)",
                       QUOTE_IF_FIELDLIKE(key));
        }
    }
}

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

static int secret_file_text(char *text, size_t len, const char **s, size_t *n, char *msg, size_t cap, const char *what)
{
    size_t a = 0, b = len;
    while (a < b && strchr(" \t\r\n", text[a]))
        a++;
    while (b > a && strchr(" \t\r\n", text[b - 1]))
        b--;
    if (!sb_auth_valid_key(text + a, b - a)) {
        OPENSSL_cleanse(text, len);
        snprintf(msg, cap, "%s must hold one %s: 1 to %d printable ASCII characters without blanks", what, what,
                 SB_AUTH_KEY_MAX);
        return -1;
    }
    *s = text + a;
    *n = b - a;
    return 0;
}

int sb_config_set_admin_token(sb_config *cfg, char *text, size_t len, char *msg, size_t cap)
{
    const char *s;
    size_t n;
    if (secret_file_text(text, len, &s, &n, msg, cap, "token") < 0)
        return -1;
    sb_auth_digest(s, n, cfg->admin_token_digest);
    cfg->admin_has_token = true;
    OPENSSL_cleanse(text, len);
    return 0;
}

int sb_config_set_upstream_key(sb_config *cfg, size_t pool, char *text, size_t len, char *msg, size_t cap)
{
    const char *s;
    size_t n;
    if (pool >= cfg->n_pools || secret_file_text(text, len, &s, &n, msg, cap, "key") < 0)
        return -1;
    bool ok = upstream_header_of(s, n, &cfg->pools[pool].upstream_auth_header);
    OPENSSL_cleanse(text, len);
    if (!ok)
        snprintf(msg, cap, "out of memory");
    return ok ? 0 : -1;
}

int sb_config_set_keys_file(sb_config *cfg, char *text, size_t len, int *line, char *msg, size_t cap)
{
    sb_auth_file_error err;
    long n = sb_auth_parse_keys_file(text, len, &cfg->api_keys, &err);
    *line = n < 0 ? err.line : 0;
    if (n < 0)
        snprintf(msg, cap, "%s", err.message);
    return n < 0 ? -1 : 0;
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
        node_error(p, root, "the configuration must be a mapping, got %s", type_name(root));
        return;
    }
    bool seen_pools = false;
    for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < root->data.mapping.pairs.top; q++) {
        const char *key = pair_key(p, root, q, "the top level");
        if (!key)
            continue;
        const yaml_node_t *v = node_at(p, q->value);
        const section *s = NULL;
        for (size_t i = 0; i < ARRAY_LEN(sections) && !s; i++)
            if (!strcmp(sections[i].key, key))
                s = &sections[i];
        if (s) {
            parse_section(p, s, v, p->cfg, s->key);
        } else if (!strcmp(key, "listen")) {
            char *host;
            uint16_t port;
            if (parse_listen_address(p, v, "listen", &host, &port)) {
                sb_free(p->cfg->listen_host);
                p->cfg->listen_host = host;
                p->cfg->listen_port = port;
            }
        } else if (!strcmp(key, "access_log")) {
            char *path = is_null(v) ? NULL : dup_string(p, v, "access_log");
            if (path || is_null(v)) {
                sb_free(p->cfg->access_log);
                p->cfg->access_log = path;
            }
        } else if (!strcmp(key, "access_log_decisions")) {
            parse_field(p, &log_decisions_field, v, p->cfg, NULL);
        } else if (!strcmp(key, "profiles")) {
            parse_profiles(p, v);
        } else if (!strcmp(key, "flow_control")) {
            parse_flow_control(p, v);
        } else if (!strcmp(key, "admin")) {
            parse_admin(p, v);
        } else if (!strcmp(key, "auth")) {
            parse_auth(p, v);
        } else if (!strcmp(key, "pools")) {
            seen_pools = true;
            parse_pools(p, v);
        } else {
            node_error(p, node_at(p, q->key), "unknown key '%s' at the top level", key);
        }
    }
    if (!seen_pools)
        node_error(p, root, "missing required key 'pools'");

    /* Cross-references last, once every pool and profile is known. */
    check_pool_profiles(p, root);
    const sb_config *cfg = p->cfg;
    if (cfg->admin_host && listeners_overlap(cfg->admin_host, cfg->admin_port, cfg->listen_host, cfg->listen_port)) {
        const yaml_node_t *at = lookup(p, lookup(p, root, "admin"), "listen");
        node_error(p, at ? at : lookup(p, root, "listen"),
                   "admin.listen must differ from listen (admin %s:%u%s, listen %s:%u): set admin.listen to "
                   "another port, or null to turn the admin listener off",
                   cfg->admin_host, cfg->admin_port, at ? "" : ", the default", cfg->listen_host, cfg->listen_port);
    }
    if (p->cfg->default_pool) {
        bool found = false;
        for (size_t i = 0; i < p->cfg->n_pools && !found; i++)
            found = p->cfg->pools[i].name && !strcmp(p->cfg->pools[i].name, p->cfg->default_pool);
        if (!found)
            node_error(p, lookup(p, lookup(p, root, "routing"), "default_pool"),
                       "routing.default_pool names no pool: '%s'", p->cfg->default_pool);
    }
}

static void syntax_error(parse *p, const yaml_parser_t *y, const char *text, size_t len)
{
    if (y->error == YAML_MEMORY_ERROR) {
        out_of_memory(p);
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
        .max_connections = 10000,
        .max_prompt_blocks = 16384,
        .max_json_depth = 128,
        .max_json_tokens = 1u << 20,
        .max_buffered_body_bytes = 256u << 20,
        .linger_ms = 5000,
        .linger_bytes = 64u << 20,
        .max_refusing_connections = 64,
        .connect_ms = 1000,
        .response_ms = 600000,
        .idle_ms = 60000,
        .header_ms = 10000,
        .upstream_idle_ms = 30000,
        .max_idle_per_endpoint = 64,
        .orca_request = true,
        .block_bytes = 64,
        .prefix_chars = 100,
        .flow_enabled = true,
        /* issue 7's examples of band deadlines; 1024 queued per band */
        .flow_max_wait_ms = {30000, 10000, 2000},
        .flow_gate_queue = 1,
        .flow_max_bytes = {64u << 20, 64u << 20, 64u << 20},
        .flow_max_queued_total = 2048,
        .flow_max_bytes_total = 128u << 20,
        .flow_gate_kv = -1,
        .flow_max_queued = {1024, 1024, 1024},
        .debug_endpoints = true,
        .admin_port = 8081,
        .admin_max_connections = 64,
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
        out_of_memory(&p);
        goto done;
    }
    if (!yaml_parser_initialize(&y)) {
        out_of_memory(&p);
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
            node_error(&p, r2, "only one YAML document is allowed");
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
    for (size_t i = 0; i < cfg->n_pools; i++) {
        sb_pool_config *pc = &cfg->pools[i];
        for (size_t j = 0; j < pc->n_models; j++)
            sb_free(pc->models[j]);
        for (size_t j = 0; j < pc->n_adapters; j++)
            sb_free(pc->adapters[j]);
        for (size_t j = 0; j < pc->n_endpoints; j++)
            free_endpoint(&pc->endpoints[j]);
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
