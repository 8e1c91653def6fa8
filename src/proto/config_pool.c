/* Pools and their endpoints, and the addresses they and the listeners are written with. */
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
#include "proto/inspect.h"

#define PF(key_, m, k, lo, hi)                                                                                         \
    {                                                                                                                  \
        .key = key_, .kind = k, .offset = offsetof(sb_pool_config, m), .min = lo, .max = hi                            \
    }

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
    /* The synchronous probe (net/probe.h sb_prober_sync); sync_max_age_ms 0 = off. */
    PF("sync_max_age_ms", probe_sync_max_age_ms, K_MS, 0, UINT32_MAX),
    PF("sync_timeout_ms", probe_sync_timeout_ms, K_MS, 1, 60000),
    PF("sync_candidates", probe_sync_candidates, K_COUNT32, 1, 8),
};

static const field health_fields[] = {
    PF("max_failures", max_failures, K_COUNT32, 1, UINT32_MAX),
    PF("base_eject_ms", base_eject_ms, K_MS, 1, UINT32_MAX),
    PF("max_eject_ms", max_eject_ms, K_MS, 1, UINT32_MAX),
    PF("min_requests", min_requests, K_COUNT32, 1, UINT32_MAX),
    PF("window_ms", window_ms, K_MS, 1, UINT32_MAX),
    PF("max_eject_percent", max_eject_percent, K_COUNT32, 1, 100),
};

static const field metrics_fields[] = {
    PF("running", metric_running, K_METRIC, 0, 0),
    PF("waiting", metric_waiting, K_METRIC, 0, 0),
    PF("kv_usage", metric_kv_usage, K_METRIC, 0, 0),
};

static const field tls_fields[] = {
    PF("ca_file", tls_ca_file, K_NAME, 0, 0), PF("cert", tls_cert, K_NAME, 0, 0),
    PF("key", tls_key, K_NAME, 0, 0),         PF("server_name", tls_server_name, K_NAME, 0, 0),
    PF("verify", tls_verify, K_BOOL, 0, 1),
};

#undef PF

static const section probe_section = {"probe", probe_fields, ARRAY_LEN(probe_fields)};
static const section tls_section = {"tls", tls_fields, ARRAY_LEN(tls_fields)};
static const section metrics_section = {"metrics", metrics_fields, ARRAY_LEN(metrics_fields)};

static const char *const engines[] = {"auto", "vllm", "sglang", "llamacpp", "trtllm", "custom"};

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
    if (strlen(colon + 1) > 5 || !cfg_parse_uint(colon + 1, false, &v) || v < 1 || v > 65535)
        return "port must be a number from 1 to 65535";
    *port = (uint16_t)v;
    return NULL;
}

const char *sb_config_split_address(const char *s, char *host, size_t cap, uint16_t *port)
{
    const char *h;
    size_t n;
    const char *why = split_address(s, &h, &n, port);
    if (why)
        return why;
    if (n >= cap)
        return "host too long";
    memcpy(host, h, n);
    host[n] = '\0';
    return NULL;
}

/* Parses an address node into a fresh host copy and port. Returns false after reporting.
 * scheme, when not NULL, allows an endpoint's "http://" or "https://" before the address and
 * says which (0 none, 1 http, 2 https); https without a port is port 443. */
static bool parse_address_scheme(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port,
                                 int *scheme)
{
    const char *s = cfg_string_of(p, n, what);
    if (!s)
        return false;
    const char *written = s;
    if (scheme) {
        *scheme = !strncmp(s, "https://", 8) ? 2 : !strncmp(s, "http://", 7) ? 1 : 0;
        s += *scheme == 2 ? 8 : *scheme == 1 ? 7 : 0;
    }
    const char *h;
    size_t hlen;
    const char *why = split_address(s, &h, &hlen, port);
    char with_port[300];
    /* No port after the host (or after an IPv6 literal's ']'): https's own. */
    const char *tail = s[0] == '[' && strchr(s, ']') ? strchr(s, ']') : s;
    if (why && scheme && *scheme == 2 && !strchr(tail, ':') && strlen(s) < sizeof with_port - 5) {
        snprintf(with_port, sizeof with_port, "%s:443", s);
        why = split_address(with_port, &h, &hlen, port);
    }
    if (why) {
        cfg_node_error(p, n, "%s: bad address '%s': %s", what, written, why);
        return false;
    }
    if (!(*host = sb_strndup(h, hlen)))
        return cfg_out_of_memory(p);
    return true;
}

static bool parse_address(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port)
{
    return parse_address_scheme(p, n, what, host, port, NULL);
}

/* A listening address: an IP literal, since names are not resolved for listening (a name
 * would pass `check` and then fail to bind at start). */
bool cfg_parse_listen_address(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port)
{
    unsigned char a[16];
    if (!parse_address(p, n, what, host, port))
        return false;
    if (inet_pton(AF_INET, *host, a) == 1 || inet_pton(AF_INET6, *host, a) == 1)
        return true;
    cfg_node_error(p, n, "%s must be an IP address (like 127.0.0.1, 0.0.0.0 or [::1]), got the name '%s'", what, *host);
    sb_free(*host);
    *host = NULL;
    return false;
}

/* ---- pools ---- */

const char *cfg_pool_label(const sb_config *cfg, size_t i, char *buf, size_t cap)
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
        cfg_pool_label(p->cfg, c->pool, label, sizeof label);
        if (c->pool == pool)
            cfg_node_error(p, n, "name '%s' appears twice in %s (first at line %d)", name, label, c->line);
        else
            cfg_node_error(p, n,
                           "name '%s' is already served by %s (line %d); a model, alias or "
                           "adapter name must belong to one pool",
                           name, label, c->line);
        return false;
    }
    if (p->n_names == p->cap_names) {
        size_t cap = p->cap_names ? p->cap_names * 2 : 16;
        claimed_name *grown = sb_realloc(p->names, cap * sizeof *grown);
        if (!grown)
            return cfg_out_of_memory(p);
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
    cfg_pool_label(p->cfg, pool, label, sizeof label);
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    if (seq->type != YAML_SEQUENCE_NODE && !cfg_is_null(seq)) {
        cfg_node_error(p, seq, "%s: %s must be a list, got %s", label, key, cfg_type_name(seq));
        return;
    }
    if (n == 0) {
        if (!may_be_empty)
            cfg_node_error(p, seq, "%s: %s must not be empty", label, key);
        return;
    }
    if (!(*out = sb_calloc(n, sizeof **out))) {
        cfg_out_of_memory(p);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *item = cfg_node_at(p, seq->data.sequence.items.start[i]);
        snprintf(what, sizeof what, "%s: %s[%zu]", label, key, i);
        char *s = cfg_dup_string(p, item, what);
        if (!s)
            continue;
        (*out)[(*n_out)++] = s;
        claim_name(p, s, item, pool);
    }
}

/* Pool, profile and label names end up in metric labels, log fields, JSON explanations and
 * URLs: keep them plain. Labels may also hold '/' (as in Kubernetes' "zone/rack" style). */
bool cfg_plain_name(const char *s, bool slash)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.' || (slash && *s == '/')))
            return false;
    return true;
}

size_t cfg_mapping_len(const yaml_node_t *n)
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
size_t cfg_parse_labels(parse *p, const yaml_node_t *map, const char *what, size_t max, char **keys, char **values)
{
    if (!cfg_want_mapping(p, map, what))
        return 0;
    if (cfg_mapping_len(map) > max) {
        cfg_node_error(p, map, "%s: at most %zu labels, got %zu", what, max, cfg_mapping_len(map));
        return 0;
    }
    size_t n = 0;
    char item[240];
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, what);
        if (!key)
            continue;
        const yaml_node_t *k = cfg_node_at(p, q->key), *v = cfg_node_at(p, q->value);
        snprintf(item, sizeof item, "%s.%s", what, key);
        const char *value = cfg_string_of(p, v, item);
        if (!*key || !cfg_plain_name(key, true)) {
            cfg_node_error(p, k, "%s: label name '%s' may only contain letters, digits, '-', '_', '.' and '/'", what,
                           key);
            continue;
        }
        if (!value)
            continue;
        if (!cfg_plain_name(value, true)) {
            cfg_node_error(p, v, "%s: label value '%s' may only contain letters, digits, '-', '_', '.' and '/'", item,
                           value);
            continue;
        }
        char *kd = sb_strdup(key), *vd = sb_strdup(value);
        if (!kd || !vd) {
            sb_free(kd);
            sb_free(vd);
            cfg_out_of_memory(p);
            continue;
        }
        keys[n] = kd;
        values[n++] = vd;
    }
    return n;
}

void cfg_free_endpoint(sb_endpoint_config *ep)
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
static const yaml_node_t *parse_endpoint(parse *p, const yaml_node_t *item, const char *what, sb_endpoint_config *ep,
                                         int *scheme)
{
    if (item->type != YAML_MAPPING_NODE) {
        if (item->type != YAML_SCALAR_NODE) {
            cfg_node_error(p, item, "%s must be \"host:port\" or a mapping, got %s", what, cfg_type_name(item));
            return NULL;
        }
        return parse_address_scheme(p, item, what, &ep->host, &ep->port, scheme) ? item : NULL;
    }
    const yaml_node_t *address = NULL;
    bool address_ok = false;
    char sub[240];
    for (yaml_node_pair_t *q = item->data.mapping.pairs.start; q < item->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, item, q, what);
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        snprintf(sub, sizeof sub, "%s.%s", what, key);
        if (!strcmp(key, "address")) {
            address = v;
            address_ok = parse_address_scheme(p, v, sub, &ep->host, &ep->port, scheme);
        } else if (!strcmp(key, "labels")) {
            char *keys[SB_MAX_LABELS], *values[SB_MAX_LABELS];
            size_t n = cfg_parse_labels(p, v, sub, SB_MAX_LABELS, keys, values);
            if (n == 0)
                continue;
            ep->label_keys = sb_calloc(n, sizeof *ep->label_keys);
            ep->label_values = sb_calloc(n, sizeof *ep->label_values);
            if (!ep->label_keys || !ep->label_values) {
                free_strings(keys, n);
                free_strings(values, n);
                cfg_out_of_memory(p);
                continue;
            }
            memcpy(ep->label_keys, keys, n * sizeof *keys);
            memcpy(ep->label_values, values, n * sizeof *values);
            ep->n_labels = n;
        } else if (!strcmp(key, "draining")) {
            cfg_bool_of(p, v, sub, &ep->draining);
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    if (!address)
        cfg_node_error(p, item, "%s has no 'address'", what);
    return address_ok ? address : NULL;
}

static void parse_endpoints(parse *p, size_t pool, const yaml_node_t *seq)
{
    sb_pool_config *pc = &p->cfg->pools[pool];
    char label[96], what[192];
    cfg_pool_label(p->cfg, pool, label, sizeof label);
    if (seq->type != YAML_SEQUENCE_NODE && !cfg_is_null(seq)) {
        cfg_node_error(p, seq, "%s: endpoints must be a list, got %s", label, cfg_type_name(seq));
        return;
    }
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    /* `endpoints: []` is a pool filled at run time (registrations, agents); a bare `endpoints:`
     * is more likely a list left out by mistake. */
    if (n == 0) {
        if (seq->type != YAML_SEQUENCE_NODE)
            cfg_node_error(p, seq, "%s: endpoints must not be empty (write [] for a pool filled by registrations)",
                           label);
        return;
    }
    if (!(pc->endpoints = sb_calloc(n, sizeof *pc->endpoints))) {
        cfg_out_of_memory(p);
        return;
    }
    int first_scheme = -1; /* https for one endpoint is https for all (the pool's TLS) */
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *item = cfg_node_at(p, seq->data.sequence.items.start[i]);
        sb_endpoint_config ep = {0};
        snprintf(what, sizeof what, "%s: endpoints[%zu]", label, i);
        int scheme = 0;
        const yaml_node_t *addr = parse_endpoint(p, item, what, &ep, &scheme);
        if (!addr) {
            cfg_free_endpoint(&ep);
            continue;
        }
        const char *text = (const char *)addr->data.scalar.value;
        if (first_scheme < 0) {
            first_scheme = scheme;
            pc->tls = scheme == 2;
        } else if ((scheme == 2) != pc->tls) {
            cfg_node_error(p, addr, "%s: '%s' mixes https:// and plain endpoints in one pool (TLS is the pool's)",
                           label, text);
            cfg_free_endpoint(&ep);
            continue;
        }
        char formatted[300];
        if (scheme) { /* the address without its scheme, as logs, metrics and Envoy want it */
            if (!sb_config_format_address(ep.host, ep.port, formatted, sizeof formatted)) {
                cfg_node_error(p, addr, "%s: address too long", what);
                cfg_free_endpoint(&ep);
                continue;
            }
            text = formatted;
        }
        bool dup = false;
        for (size_t j = 0; j < pc->n_endpoints && !dup; j++)
            dup = pc->endpoints[j].port == ep.port && !strcmp(pc->endpoints[j].host, ep.host);
        if (dup) {
            cfg_node_error(p, addr, "%s: endpoint '%s' is listed twice", label, text);
            cfg_free_endpoint(&ep);
            continue;
        }
        if (!(ep.address = sb_strdup(text))) {
            cfg_free_endpoint(&ep);
            cfg_out_of_memory(p);
            continue;
        }
        pc->endpoints[pc->n_endpoints++] = ep;
    }
}

/* min_interval_ms <= interval_ms <= max_interval_ms. The message points at interval_ms when
 * it was written, else at the bound that was. */
static void check_probe_intervals(parse *p, const sb_pool_config *pc, const yaml_node_t *probe, const char *what)
{
    const yaml_node_t *iv = cfg_lookup(p, probe, "interval_ms"), *lo = cfg_lookup(p, probe, "min_interval_ms"),
                      *hi = cfg_lookup(p, probe, "max_interval_ms");
    if (pc->probe_min_interval_ms > pc->probe_max_interval_ms)
        cfg_node_error(p, lo ? lo : hi, "%s: min_interval_ms (%u) must not exceed max_interval_ms (%u)", what,
                       pc->probe_min_interval_ms, pc->probe_max_interval_ms);
    else if (pc->probe_interval_ms < pc->probe_min_interval_ms || pc->probe_interval_ms > pc->probe_max_interval_ms) {
        const yaml_node_t *bound = pc->probe_interval_ms < pc->probe_min_interval_ms ? lo : hi;
        cfg_node_error(p, iv ? iv : bound,
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
            cfg_node_error(p, metrics, "%s: metrics applies only to engine custom (this pool's engine is %s)", label,
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
        cfg_node_error(p, metrics ? metrics : engine, "%s: engine custom needs metrics.%s (the metric's name)", label,
                       missing[i]);
}

/* `adaptive:` as a mapping: `enabled` (default true in the mapping form) plus any parameter
 * core/adaptive.h names (x0: 0.1, share_saturated: 0.2, imbalance_tau_ms: 1000, ...), checked
 * as a whole. */
static void parse_adaptive(parse *p, const yaml_node_t *map, sb_pool_config *pc, const char *what)
{
    size_t before = p->errs->total;
    /* A mapping turns it on (the default is off) unless it says `enabled: false`: parameters
     * tuned for a loop that never runs would be a silent no-op. */
    pc->adaptive = true;
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const yaml_node_t *k = cfg_node_at(p, q->key), *v = cfg_node_at(p, q->value);
        /* As in every other mapping: a non-string or repeated key is reported and skipped
         * (a repeated one used to win silently). */
        const char *key = cfg_pair_key(p, map, q, what);
        if (!key)
            continue;
        char sub[200];
        snprintf(sub, sizeof sub, "%s: %s", what, key);
        if (!strcmp(key, "enabled")) {
            bool b;
            if (cfg_bool_of(p, v, sub, &b))
                pc->adaptive = b;
            continue;
        }
        double x;
        sb_adaptive_params probe = pc->adaptive_params;
        if (sb_adaptive_param_set(&probe, key, 0) == -1) {
            char names[1024];
            sb_adaptive_param_list(names, sizeof(names));
            cfg_node_error(p, k, "unknown key '%s' in %s (enabled, %s)", key, what, names);
            continue;
        }
        if (!cfg_number_of(p, v, sub, -INFINITY, false, INFINITY, &x))
            continue;
        if (sb_adaptive_param_set(&pc->adaptive_params, key, x) != 0)
            cfg_node_error(p, v, "%s must be a duration from 0 to 1e9 ms", sub);
        else if (!strcmp(key, "min_publish_ms") && x < 100)
            /* Snapshots live in a ring of 64: at one publication per 100 ms or slower, a
             * request's snapshot stays unchanged for 6.3 s or more (core/adaptive.h). */
            cfg_node_error(p, v, "%s must be at least 100", sub);
    }
    const char *why = p->errs->total == before ? sb_adaptive_params_check(&pc->adaptive_params) : NULL;
    if (why)
        cfg_node_error(p, map, "%s: %s", what, why);
}

/* What the walk over one pool's keys learns, for the checks made once every key is read. */
typedef struct pool_walk {
    size_t i; /* index in cfg->pools */
    sb_pool_config *pc;
    const char *label;
    const yaml_node_t *engine, *metrics; /* metrics: the key, for its line */
    const yaml_node_t *upstream_key, *upstream_key_file;
    const yaml_node_t *kv_events; /* the mapping, checked against the endpoints in pool_finish */
    const yaml_node_t *tls;       /* the key, for its line */
    const yaml_node_t *probe;     /* the mapping: which keys were given */
    bool metrics_ok, seen_models, seen_endpoints;
} pool_walk;

/* One handler per pool key; `what` is "<label>: <key>", for messages. */
typedef void pool_key_fn(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what);

/* Read before the walk (pool_name), so every other message can use it. */
static void pool_skip(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what) {}

static void pool_models(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->seen_models = true;
    parse_names(p, w->i, v, "models", false, &w->pc->models, &w->pc->n_models);
}

static void pool_adapters(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    parse_names(p, w->i, v, "adapters", true, &w->pc->adapters, &w->pc->n_adapters);
}

static void pool_endpoints(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->seen_endpoints = true;
    parse_endpoints(p, w->i, v);
}

/* endpoints_from: { dns: "name:port", interval_ms: N } */
static void pool_endpoints_from(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    sb_pool_config *pc = w->pc;
    if (!cfg_want_mapping(p, v, what))
        return;
    w->seen_endpoints = true;
    bool seen_dns = false;
    char sub[240];
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, v, q, what);
        if (!key)
            continue;
        const yaml_node_t *x = cfg_node_at(p, q->value);
        snprintf(sub, sizeof sub, "%s.%s", what, key);
        if (!strcmp(key, "dns")) {
            seen_dns = true;
            char *host = NULL;
            if (parse_address(p, x, sub, &host, &pc->dns_port)) {
                sb_free(pc->dns_host);
                pc->dns_host = host;
            }
        } else if (!strcmp(key, "interval_ms")) {
            const char *s = cfg_string_of(p, x, sub);
            uint64_t ms;
            /* At least 100 ms: a resolver asked more often than that is hammered for nothing. */
            if (s && (!cfg_parse_uint(s, false, &ms) || ms < 100 || ms > UINT32_MAX))
                cfg_node_error(p, x, "%s must be an integer from 100 to %u, got '%s'", sub, UINT32_MAX, s);
            else if (s)
                pc->dns_interval_ms = (uint32_t)ms;
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    if (!seen_dns)
        cfg_node_error(p, v, "%s has no 'dns' (\"name:port\")", what);
}

static void pool_engine(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    const char *s = cfg_string_of(p, v, what);
    size_t e = 0;
    while (s && e < ARRAY_LEN(engines) && strcmp(engines[e], s))
        e++;
    w->engine = v;
    if (s && e == ARRAY_LEN(engines))
        cfg_node_error(p, v,
                       "%s: unknown engine '%s' (expected auto, vllm, sglang, llamacpp, "
                       "trtllm or custom)",
                       w->label, s);
    else if (s && !(w->pc->engine = sb_strdup(s)))
        cfg_out_of_memory(p);
}

/* Checked against the profiles once the whole file is read (cfg_check_pool_profiles):
 * `profiles:` may come after `pools:`. */
static void pool_profile(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    char *s = cfg_dup_string(p, v, what);
    if (s) {
        sb_free(w->pc->profile);
        w->pc->profile = s;
    }
}

/* `kind: engine` (model servers: the default) or `kind: provider` (pool_finish_provider). */
static void pool_kind(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    const char *s = cfg_string_of(p, v, what);
    if (s && !strcmp(s, "provider"))
        w->pc->provider = true;
    else if (s && strcmp(s, "engine"))
        cfg_node_error(p, v, "%s: unknown kind '%s' (expected engine or provider)", w->label, s);
}

static void pool_probe(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->probe = v;
    size_t before = p->errs->total;
    cfg_parse_section(p, &probe_section, v, w->pc, what);
    if (p->errs->total == before)
        check_probe_intervals(p, w->pc, v, what);
}

/* Outlier ejection (core/endpoint.h): the table's fields, and failure_rate, a fraction. */
static void pool_health(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    sb_pool_config *pc = w->pc;
    if (!cfg_want_mapping(p, v, what))
        return;
    size_t before = p->errs->total;
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, v, q, what);
        if (!key)
            continue;
        const yaml_node_t *val = cfg_node_at(p, q->value);
        const field *f = NULL;
        for (size_t i = 0; i < ARRAY_LEN(health_fields) && !f; i++)
            if (!strcmp(health_fields[i].key, key))
                f = &health_fields[i];
        if (f) {
            cfg_parse_field(p, f, val, pc, what);
        } else if (!strcmp(key, "failure_rate")) {
            char label[160];
            snprintf(label, sizeof label, "%s: failure_rate", what);
            cfg_number_of(p, val, label, 0, false, 1, &pc->failure_rate);
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    if (p->errs->total == before && pc->base_eject_ms > pc->max_eject_ms) {
        const yaml_node_t *at = cfg_lookup(p, v, "base_eject_ms");
        cfg_node_error(p, at ? at : cfg_lookup(p, v, "max_eject_ms"),
                       "%s: base_eject_ms (%u) must not exceed max_eject_ms (%u)", what, pc->base_eject_ms,
                       pc->max_eject_ms);
    }
}

/* The adaptive loop (core/adaptive.h) moves weight between the profile's affinity and
 * distribution scorers as the pool's balance changes. */
static void pool_adaptive(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    bool b;
    if (v->type == YAML_MAPPING_NODE)
        parse_adaptive(p, v, w->pc, what);
    else if (cfg_bool_of(p, v, what, &b))
        w->pc->adaptive = b;
}

static void pool_prefix_share(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    bool b;
    if (cfg_bool_of(p, v, what, &b))
        w->pc->prefix_share = b;
}

static void pool_prefix_calibrate(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    bool b;
    if (cfg_bool_of(p, v, what, &b))
        w->pc->prefix_calibrate = b;
}

static void pool_upstream_key(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->upstream_key = v;
    cfg_parse_upstream_key(p, w->pc, v, what);
}

static void pool_upstream_key_file(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->upstream_key_file = v;
    char *s = cfg_dup_string(p, v, what);
    if (s) {
        sb_free(w->pc->upstream_api_key_file);
        w->pc->upstream_api_key_file = s;
    }
}

static void pool_metrics(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->metrics = k;
    size_t before = p->errs->total;
    cfg_parse_section(p, &metrics_section, v, w->pc, what);
    w->metrics_ok = p->errs->total == before;
}

static void pool_tls(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    w->tls = k;
    cfg_parse_section(p, &tls_section, v, w->pc, what);
}

static void pool_kv_events(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    if (!cfg_is_null(v))
        w->kv_events = v;
    cfg_parse_kv_events(p, w->pc, v, what);
}

/* One `fallbacks:` item: "pool" or {pool: name, model: name}. Fills fb (pool_name, model);
 * returns the node naming the pool, or NULL after reporting what is wrong. */
static const yaml_node_t *parse_fallback(parse *p, const yaml_node_t *item, const char *what, sb_fallback_config *fb)
{
    const yaml_node_t *name = item, *model = NULL;
    if (item->type == YAML_MAPPING_NODE) {
        name = NULL;
        for (yaml_node_pair_t *q = item->data.mapping.pairs.start; q < item->data.mapping.pairs.top; q++) {
            const char *key = cfg_pair_key(p, item, q, what);
            if (!key)
                continue;
            if (!strcmp(key, "pool"))
                name = cfg_node_at(p, q->value);
            else if (!strcmp(key, "model"))
                model = cfg_node_at(p, q->value);
            else
                cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s (expected pool, model)", key, what);
        }
        if (!name) {
            cfg_node_error(p, item, "%s has no 'pool' (the name of another pool)", what);
            return NULL;
        }
    }
    char sub[260];
    snprintf(sub, sizeof sub, "%.240s.pool", what);
    const char *s = cfg_string_of(p, name, sub);
    if (!s)
        return NULL;
    if (!*s) {
        cfg_node_error(p, name, "%s must name a pool", sub);
        return NULL;
    }
    if (model) {
        snprintf(sub, sizeof sub, "%.240s.model", what);
        const char *m = cfg_string_of(p, model, sub);
        if (!m)
            return NULL;
        /* The body's model is spliced in a fixed buffer sized for a model name (net/proxy.c). */
        if (!*m || strlen(m) > SB_MODEL_NAME_MAX) {
            cfg_node_error(p, model, "%s must be 1 to %d bytes", sub, SB_MODEL_NAME_MAX);
            return NULL;
        }
        if (!(fb->model = sb_strdup(m))) {
            cfg_out_of_memory(p);
            return NULL;
        }
    }
    if (!(fb->pool_name = sb_strdup(s))) {
        cfg_out_of_memory(p);
        return NULL;
    }
    return name;
}

/* fallbacks: ["pool", {pool: name, model: name}, ...]: the shape, the bound, no self and no
 * duplicates here; the names are resolved once every pool is read (cfg_check_pool_fallbacks). */
static void pool_fallbacks(parse *p, pool_walk *w, const yaml_node_t *k, const yaml_node_t *v, const char *what)
{
    sb_pool_config *pc = w->pc;
    if (cfg_is_null(v))
        return;
    if (v->type != YAML_SEQUENCE_NODE) {
        cfg_node_error(p, v, "%s must be a list of pools ({pool: name, model: name}), got %s", what, cfg_type_name(v));
        return;
    }
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n > SB_FALLBACKS_MAX) {
        cfg_node_error(p, v, "%s: at most %d fallbacks, got %zu", what, SB_FALLBACKS_MAX, n);
        return;
    }
    if (n && !(pc->fallbacks = sb_calloc(n, sizeof *pc->fallbacks))) {
        cfg_out_of_memory(p);
        return;
    }
    char item[240];
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *it = cfg_node_at(p, v->data.sequence.items.start[i]);
        snprintf(item, sizeof item, "%s[%zu]", what, i);
        sb_fallback_config *fb = &pc->fallbacks[pc->n_fallbacks];
        const yaml_node_t *at = parse_fallback(p, it, item, fb);
        bool keep = at != NULL;
        if (keep && pc->name && !strcmp(fb->pool_name, pc->name)) {
            cfg_node_error(p, at, "%s: a pool cannot fall back to itself ('%s')", item, pc->name);
            keep = false;
        }
        for (size_t j = 0; keep && j < pc->n_fallbacks; j++)
            if (!strcmp(pc->fallbacks[j].pool_name, fb->pool_name)) {
                cfg_node_error(p, at, "%s: pool '%s' is already a fallback of %s (each is tried once)", item,
                               fb->pool_name, w->label);
                keep = false;
            }
        if (keep) {
            pc->n_fallbacks++;
        } else {
            sb_free(fb->pool_name);
            sb_free(fb->model);
            *fb = (sb_fallback_config){0};
        }
    }
}

/* The node of the item of seq naming pool `name`, for the error's line (seq itself if none). */
static const yaml_node_t *fallback_node(parse *p, const yaml_node_t *seq, const char *name)
{
    for (yaml_node_item_t *it = seq ? seq->data.sequence.items.start : NULL; seq && it < seq->data.sequence.items.top;
         it++) {
        const yaml_node_t *n = cfg_node_at(p, *it);
        const yaml_node_t *v = n->type == YAML_MAPPING_NODE ? cfg_lookup(p, n, "pool") : n;
        if (v && v->type == YAML_SCALAR_NODE && !strcmp((const char *)v->data.scalar.value, name))
            return v;
    }
    return seq;
}

void cfg_check_pool_fallbacks(parse *p, const yaml_node_t *root)
{
    const yaml_node_t *pools = cfg_lookup(p, root, "pools");
    if (!pools || pools->type != YAML_SEQUENCE_NODE)
        return;
    for (size_t i = 0; i < p->cfg->n_pools; i++) {
        sb_pool_config *pc = &p->cfg->pools[i];
        /* A provider pool is sent the clients' Authorization unless it has a key of its own;
         * with auth on that is the gateway's key, handed to a third party whether the pool is
         * reached as a fallback or by its own model name: refused, as for https:// fallbacks. */
        if (p->cfg->auth_enabled && pc->provider && !pc->upstream_auth_header && !pc->upstream_api_key_file) {
            char label[96];
            const yaml_node_t *map = cfg_node_at(p, pools->data.sequence.items.start[i]);
            const yaml_node_t *kind = map->type == YAML_MAPPING_NODE ? cfg_lookup(p, map, "kind") : NULL;
            cfg_node_error(p, kind ? kind : map,
                           "%s: a provider pool needs its own upstream_api_key (or upstream_api_key_file): with "
                           "auth on, the clients' gateway keys would be sent to it",
                           cfg_pool_label(p->cfg, i, label, sizeof label));
        }
        if (!pc->n_fallbacks)
            continue;
        const yaml_node_t *seq = cfg_lookup(p, cfg_node_at(p, pools->data.sequence.items.start[i]), "fallbacks");
        for (size_t f = 0; f < pc->n_fallbacks; f++) {
            sb_fallback_config *fb = &pc->fallbacks[f];
            size_t j = 0;
            while (j < p->cfg->n_pools && !(p->cfg->pools[j].name && !strcmp(p->cfg->pools[j].name, fb->pool_name)))
                j++;
            char label[96];
            if (j >= p->cfg->n_pools) {
                /* Kept items are in list order, skipped ones reported already. */
                cfg_node_error(p, fallback_node(p, seq, fb->pool_name), "%s: fallback '%s' is not a pool of this file",
                               cfg_pool_label(p->cfg, i, label, sizeof label), fb->pool_name);
                continue;
            }
            fb->pool = (uint32_t)j;
            /* With auth on, the client's Authorization is the gateway's key; a pool without its
             * own key is sent the client's. The clients asked for this pool's model, not for the
             * provider's: a fallback over https:// (an external provider) would hand every
             * client's gateway key to a third party. Refused here rather than stripped at run
             * time: a pool whose model servers check the gateway's key (the same key, on
             * purpose) keeps working, and the operator decides with a line, not a surprise. */
            const sb_pool_config *to = &p->cfg->pools[j];
            if (p->cfg->auth_enabled && to->tls && !to->provider && !to->upstream_auth_header &&
                !to->upstream_api_key_file) /* a provider: refused at its own `kind` line */
                cfg_node_error(p, fallback_node(p, seq, fb->pool_name),
                               "%s: fallback '%s' is reached over https:// without its own upstream_api_key (or "
                               "upstream_api_key_file): with auth on, the clients' gateway keys would be sent to it",
                               cfg_pool_label(p->cfg, i, label, sizeof label), fb->pool_name);
        }
    }
}

static const struct {
    const char *key;
    pool_key_fn *parse;
} pool_keys[] = {
    {"fallbacks", pool_fallbacks},
    {"name", pool_skip},
    {"kind", pool_kind},
    {"models", pool_models},
    {"adapters", pool_adapters},
    {"endpoints", pool_endpoints},
    {"endpoints_from", pool_endpoints_from},
    {"engine", pool_engine},
    {"profile", pool_profile},
    {"probe", pool_probe},
    {"health", pool_health},
    {"adaptive", pool_adaptive},
    {"prefix_share", pool_prefix_share},
    {"prefix_calibrate", pool_prefix_calibrate},
    {"upstream_api_key", pool_upstream_key},
    {"upstream_api_key_file", pool_upstream_key_file},
    {"metrics", pool_metrics},
    {"kv_events", pool_kv_events},
    {"tls", pool_tls},
};

static void pool_defaults(sb_pool_config *pc)
{
    pc->probe_interval_ms = 100;
    /* Off by default: over the routing matrix (docs/benchmarks.md section 10) the configurator
     * on the default profile cost the shared-prefix and multi-turn cells (p90 against the best
     * peer, geometric mean: 1.03 -> 1.21 and 0.92 -> 1.14) more than it gained elsewhere. The
     * detectors run and are exported either way. */
    pc->adaptive = false;
    /* On: over the routing matrix it was ahead on every summary figure (docs/benchmarks.md
     * section 10, session 28), and an engine whose answers carry no cached_tokens teaches it
     * nothing, so it changes nothing there. */
    pc->prefix_calibrate = true;
    pc->adaptive_params = sb_adaptive_params_default();
    pc->probe_min_interval_ms = 50;
    pc->probe_max_interval_ms = 1000;
    pc->probe_timeout_ms = 500;
    pc->stale_ms = 2000; /* twice the slowest (idle) scrape interval: an idle endpoint never goes stale */
    pc->health_interval_ms = 2000;
    pc->probe_enabled = true;
    pc->probe_sync_timeout_ms = 50;
    pc->probe_sync_candidates = 2;
    pc->max_failures = 3;
    pc->base_eject_ms = 1000;
    pc->max_eject_ms = 30000;
    pc->dns_interval_ms = 5000;
    pc->failure_rate = 0.25;
    pc->min_requests = 10;
    pc->window_ms = 10000;
    pc->max_eject_percent = 50;
    pc->tls_verify = true;
}

/* The name first, whatever its position, so that every other message can use it. */
static void pool_name(parse *p, size_t i, const yaml_node_t *map)
{
    sb_pool_config *pc = &p->cfg->pools[i];
    const yaml_node_t *name = cfg_lookup(p, map, "name");
    if (!name) {
        cfg_node_error(p, map, "pools[%zu] has no 'name'", i);
        return;
    }
    char label[96];
    snprintf(label, sizeof label, "pools[%zu].name", i);
    const char *s = cfg_string_of(p, name, label);
    if (s && !cfg_plain_name(s, false)) {
        cfg_node_error(p, name, "pool name '%s' may only contain letters, digits, '-', '_' and '.'", s);
    } else if (s && strlen(s) >= SB_POOL_NAME_MAX) {
        cfg_node_error(p, name, "pool name '%.*s...' is longer than %d characters", 32, s, SB_POOL_NAME_MAX - 1);
    } else if (s) {
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++)
            dup = p->cfg->pools[j].name && !strcmp(p->cfg->pools[j].name, s);
        if (dup)
            cfg_node_error(p, name, "duplicate pool name '%s'", s);
        else if (!(pc->name = sb_strdup(s)))
            cfg_out_of_memory(p);
    }
}

/* A probe key given in the pool's `probe:` mapping (NULL if not). */
static const yaml_node_t *probe_key(parse *p, const pool_walk *w, const char *key)
{
    return w->probe && w->probe->type == YAML_MAPPING_NODE ? cfg_lookup(p, w->probe, key) : NULL;
}

/* `kind: provider`: an external service (OpenAI, a hosted endpoint, another gateway). It has no
 * engine metrics to scrape, no KV events, no /tokenize, and its caches are its own business, so
 * what only model servers have is refused with a line rather than tried at run time (a scrape
 * of a paid API every 100 ms, 404s counted as failures), and the defaults are a provider's:
 * no scrape, no active health check unless `probe.health_interval_ms` asks for one (a
 * provider's /v1/models, say: health_path), and least-request unless a profile is named
 * (prefix affinity over a provider's one address is moot). */
static void pool_finish_provider(parse *p, const pool_walk *w)
{
    sb_pool_config *pc = w->pc;
    const yaml_node_t *at;
    if (w->engine)
        cfg_node_error(p, w->engine, "%s: a provider pool has no engine (kind: provider)", w->label);
    if (w->metrics)
        cfg_node_error(p, w->metrics, "%s: a provider pool has no engine metrics (kind: provider)", w->label);
    if (w->kv_events)
        cfg_node_error(p, w->kv_events, "%s: a provider publishes no KV events (kind: provider)", w->label);
    if ((at = probe_key(p, w, "enabled")) && pc->probe_enabled)
        cfg_node_error(p, at, "%s: probe.enabled: a provider has no /metrics to scrape (kind: provider)", w->label);
    if ((at = probe_key(p, w, "sync_max_age_ms")) && pc->probe_sync_max_age_ms)
        cfg_node_error(p, at, "%s: probe.sync_max_age_ms: a provider has no /metrics to scrape (kind: provider)",
                       w->label);
    pc->probe_enabled = false;
    if (!probe_key(p, w, "health_interval_ms"))
        pc->health_interval_ms = 0;
    if (!pc->profile && !(pc->profile = sb_strdup("least-request")))
        cfg_out_of_memory(p);
}

/* The checks that need every key read, and the defaults of what was not given. */
static void pool_finish(parse *p, const yaml_node_t *map, const pool_walk *w)
{
    sb_pool_config *pc = w->pc;
    if (pc->provider)
        pool_finish_provider(p, w);
    if (w->upstream_key && w->upstream_key_file)
        cfg_node_error(p, w->upstream_key_file, "%s: give upstream_api_key or upstream_api_key_file, not both",
                       w->label);
    if (!w->seen_models)
        cfg_node_error(p, map, "%s has no 'models'", w->label);
    if (!w->seen_endpoints)
        cfg_node_error(p, map, "%s has no 'endpoints' (nor 'endpoints_from')", w->label);
    bool engine_ok = !w->engine || pc->engine;
    /* auto: the prober picks each endpoint's mapping from the families its /metrics exposes. */
    if (!pc->engine && !(pc->engine = sb_strdup("auto")))
        cfg_out_of_memory(p);
    if (!pc->profile && !(pc->profile = sb_strdup("default")))
        cfg_out_of_memory(p);
    if (!pc->probe_path && !(pc->probe_path = sb_strdup("/metrics")))
        cfg_out_of_memory(p);
    if (!pc->health_path && !(pc->health_path = sb_strdup("/health")))
        cfg_out_of_memory(p);
    if (engine_ok && w->metrics_ok && pc->engine)
        check_metrics(p, pc, w->label, w->engine, w->metrics);
    cfg_check_kv_events(p, w->pc, w->kv_events, w->label);
    if (w->tls && !pc->tls)
        cfg_node_error(p, w->tls, "%s: tls is for https:// endpoints, and this pool's are plain (write them https://)",
                       w->label);
    if (!pc->tls_cert != !pc->tls_key)
        cfg_node_error(p, w->tls, "%s: tls: give both cert and key (a client certificate), or neither", w->label);
}

/* Fills cfg->pools[i], which the caller has zeroed and already counted in n_pools, so that
 * sb_config_free releases whatever part was built. Table-driven like the flat sections: each
 * key has its handler in pool_keys. */
static void parse_pool(parse *p, size_t i, const yaml_node_t *map)
{
    char label[96];
    pool_walk w = {.i = i, .pc = &p->cfg->pools[i], .label = label, .metrics_ok = true};
    pool_defaults(w.pc);
    if (map->type != YAML_MAPPING_NODE) {
        cfg_node_error(p, map, "pools[%zu] must be a mapping, got %s", i, cfg_type_name(map));
        return;
    }
    pool_name(p, i, map);
    cfg_pool_label(p->cfg, i, label, sizeof label);
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, label);
        if (!key)
            continue;
        size_t k = 0;
        while (k < ARRAY_LEN(pool_keys) && strcmp(pool_keys[k].key, key))
            k++;
        if (k == ARRAY_LEN(pool_keys)) {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, label);
            continue;
        }
        char what[192];
        snprintf(what, sizeof what, "%s: %s", label, key);
        pool_keys[k].parse(p, &w, cfg_node_at(p, q->key), cfg_node_at(p, q->value), what);
    }
    pool_finish(p, map, &w);
}

void cfg_parse_pools(parse *p, const yaml_node_t *seq)
{
    if (seq->type != YAML_SEQUENCE_NODE && !cfg_is_null(seq)) {
        cfg_node_error(p, seq, "pools must be a list, got %s", cfg_type_name(seq));
        return;
    }
    size_t n =
        seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) : 0;
    if (n == 0) {
        cfg_node_error(p, seq, "pools must list at least one pool");
        return;
    }
    if (!(p->cfg->pools = sb_calloc(n, sizeof *p->cfg->pools))) {
        cfg_out_of_memory(p);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        p->cfg->n_pools++;
        parse_pool(p, i, cfg_node_at(p, seq->data.sequence.items.start[i]));
    }
}
