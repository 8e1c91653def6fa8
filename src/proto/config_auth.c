/* Secrets (the admin token, API keys, upstream keys), the admin listener and client API keys.
 * Secrets never reach a message: config errors are printed and may be logged. */
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

/* admin's scalar keys; listen, token and token_file are parsed by parse_admin. */
static const field admin_fields[] = {
    {.key = "debug_endpoints", .kind = K_BOOL, .offset = offsetof(sb_config, debug_endpoints), .max = 1},
    /* Its own budget, so operators can still look at a gateway whose client listener is
     * full; scrapers and a few people need tens, not thousands. */
    {.key = "max_connections",
     .kind = K_COUNT,
     .offset = offsetof(sb_config, admin_max_connections),
     .min = 1,
     .max = 1u << 20},
    {.key = "metrics_auth", .kind = K_BOOL, .offset = offsetof(sb_config, admin_metrics_auth), .max = 1},
    /* Registrations and agent reports are a few hundred bytes; 1 MiB is far past any real one. */
    {.key = "max_body_bytes",
     .kind = K_BYTES,
     .offset = offsetof(sb_config, admin_max_body_bytes),
     .min = 64,
     .max = 1u << 20},
    /* The ring of recent decisions: ~6 KiB a record at 16 candidates (336 bytes each, most of
     * it the address field, sized for a 253-byte host name), so the default costs about 3 MiB;
     * the bounds keep a typo from asking for gigabytes (65536 records of 256 candidates would
     * be 5.5 GiB: refused below, past 512 Ki candidates, about 170 MiB). */
    {.key = "decisions", .kind = K_COUNT, .offset = offsetof(sb_config, admin_decisions), .min = 0, .max = 65536},
    {.key = "decision_candidates",
     .kind = K_COUNT,
     .offset = offsetof(sb_config, admin_decision_candidates),
     .min = 1,
     .max = 256},
};

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
const char *cfg_secret_of(parse *p, const yaml_node_t *v, const char *what)
{
    const char *s = cfg_string_of(p, v, what);
    if (s && !sb_auth_valid_key(s, strlen(s))) {
        cfg_node_error(p, v, "%s must be 1 to %d printable ASCII characters without blanks", what, SB_AUTH_KEY_MAX);
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

void cfg_parse_upstream_key(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what)
{
    const char *s = cfg_secret_of(p, v, what);
    if (s && !upstream_header_of(s, strlen(s), &pc->upstream_auth_header))
        cfg_out_of_memory(p);
}

/* admin: { listen, max_connections, token, token_file, metrics_auth, debug_endpoints, decisions,
 * decision_candidates } */
void cfg_parse_admin(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!cfg_want_mapping(p, map, "admin"))
        return;
    const yaml_node_t *token = NULL, *token_file = NULL, *listen = NULL;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "admin");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        const field *f = NULL;
        for (size_t i = 0; i < ARRAY_LEN(admin_fields) && !f; i++)
            if (!strcmp(admin_fields[i].key, key))
                f = &admin_fields[i];
        if (f) {
            cfg_parse_field(p, f, v, cfg, "admin");
        } else if (!strcmp(key, "listen")) {
            listen = v;
            char *host = NULL;
            uint16_t port = 0;
            if (cfg_is_null(v) || cfg_parse_listen_address(p, v, "admin.listen", &host, &port)) {
                sb_free(cfg->admin_host);
                cfg->admin_host = host;
                cfg->admin_port = port;
            }
        } else if (!strcmp(key, "token")) {
            token = v;
            const char *s = cfg_secret_of(p, v, "admin.token");
            if (s) {
                sb_auth_digest(s, strlen(s), cfg->admin_token_digest);
                cfg->admin_has_token = true;
            }
        } else if (!strcmp(key, "token_file")) {
            token_file = v;
            char *s = cfg_dup_string(p, v, "admin.token_file");
            if (s) {
                sb_free(cfg->admin_token_file);
                cfg->admin_token_file = s;
            }
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in admin", key);
        }
    }
    if (token && token_file)
        cfg_node_error(p, token_file, "admin: give token or token_file, not both");
    bool has_token = token || token_file;
    /* Secure by default: /debug shows every endpoint's state and later operator endpoints
     * change routing; reachable from other hosts, they must not be open. */
    if (cfg->admin_host && !has_token && !sb_config_host_is_loopback(cfg->admin_host))
        cfg_node_error(p, listen ? listen : map,
                       "admin.listen %s is not a loopback address: set admin.token or admin.token_file "
                       "(the admin endpoints must not be open to other hosts)",
                       cfg->admin_host);
    if (cfg->admin_metrics_auth && !has_token)
        cfg_node_error(p, cfg_lookup(p, map, "metrics_auth"),
                       "admin.metrics_auth needs admin.token or admin.token_file");
    if (cfg->admin_decisions * cfg->admin_decision_candidates > ((size_t)1 << 19))
        cfg_node_error(p, cfg_lookup(p, map, "decisions") ? cfg_lookup(p, map, "decisions") : map,
                       "admin.decisions times admin.decision_candidates is %zu: at most 524288 candidates "
                       "(about 170 MiB) are kept",
                       cfg->admin_decisions * cfg->admin_decision_candidates);
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
            const char *name = cfg_pair_key(p, item, q, what);
            if (!name) {
                ok = false;
                continue;
            }
            const yaml_node_t *v = cfg_node_at(p, q->value);
            char field_what[128];
            snprintf(field_what, sizeof field_what, "%s.%s", what, name);
            if (!strcmp(name, "key")) {
                key = cfg_secret_of(p, v, field_what);
                ok = ok && key;
            } else if (!strcmp(name, "tenant")) {
                const char *t = cfg_string_of(p, v, field_what);
                if (t && !sb_auth_valid_tenant(t, strlen(t))) {
                    cfg_node_error(p, v, "%s must be 1 to %d letters, digits, '-', '_' or '.'", field_what,
                                   SB_AUTH_TENANT_MAX);
                    t = NULL;
                }
                if (t)
                    snprintf(k.tenant, sizeof k.tenant, "%s", t);
                ok = ok && t;
            } else if (!strcmp(name, "band")) {
                const char *b = cfg_string_of(p, v, field_what);
                k.band = b ? sb_band_parse(b, strlen(b)) : -1;
                if (b && k.band < 0)
                    cfg_node_error(p, v, "%s: unknown band '%s' (critical, standard or sheddable)", field_what, b);
                ok = ok && k.band >= 0;
            } else {
                cfg_node_error(p, cfg_node_at(p, q->key),
                               "unknown field %s%s%sin %s (the fields are key, tenant and band)",
                               QUOTE_IF_FIELDLIKE(name), what);
                ok = false;
            }
        }
        if (!cfg_lookup(p, item, "key")) {
            cfg_node_error(p, item, "%s has no 'key'", what);
            return;
        }
        if (!ok)
            return;
    } else {
        key = cfg_secret_of(p, item, what);
        if (!key)
            return;
    }
    sb_auth_digest(key, strlen(key), k.digest);
    const char *why = NULL;
    int rc = sb_auth_keys_add(&p->cfg->api_keys, &k, &why);
    if (rc == -1)
        cfg_out_of_memory(p);
    else if (rc < 0)
        cfg_node_error(p, item, "%s: %s", what, why);
}

/* auth: { api_keys: [KEY | {key, tenant, band}], api_keys_file: PATH } */
void cfg_parse_auth(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!cfg_want_mapping(p, map, "auth"))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "auth");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        if (!strcmp(key, "api_keys")) {
            if (v->type != YAML_SEQUENCE_NODE) {
                cfg_node_error(p, v, "auth.api_keys must be a list, got %s", cfg_type_name(v));
                continue;
            }
            cfg->auth_enabled = true;
            size_t i = 0;
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                parse_api_key(p, cfg_node_at(p, *it), i++);
        } else if (!strcmp(key, "api_keys_file")) {
            char *s = cfg_dup_string(p, v, "auth.api_keys_file");
            if (s) {
                sb_free(cfg->auth_api_keys_file);
                cfg->auth_api_keys_file = s;
                cfg->auth_enabled = true;
            }
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key),
                           "unknown field %s%s%sin auth (the fields are api_keys and api_keys_file)",
                           QUOTE_IF_FIELDLIKE(key));
        }
    }
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

/* ZeroMQ's Z85 alphabet (RFC 32/Z85): 85 printable characters, no quote nor backslash. */
static bool z85_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr(".-:+=^!/*?&<>()[]{}@%$#", c));
}

static int set_z85_key(char dst[41], bool *has, const char *what, char *text, size_t len, char *msg, size_t cap)
{
    size_t a = 0, b = len;
    while (a < b && strchr(" \t\r\n", text[a]))
        a++;
    while (b > a && strchr(" \t\r\n", text[b - 1]))
        b--;
    bool ok = b - a == 40;
    for (size_t i = a; ok && i < b; i++)
        ok = z85_char(text[i]);
    if (ok) {
        memcpy(dst, text + a, 40);
        dst[40] = '\0';
        *has = true;
    } else {
        snprintf(msg, cap,
                 "%s must hold one CURVE secret key: 40 characters of ZeroMQ's Z85 alphabet "
                 "(make one with `switchboard keygen`)",
                 what);
    }
    OPENSSL_cleanse(text, len);
    return ok ? 0 : -1;
}

int sb_config_set_sync_key(sb_config *cfg, char *text, size_t len, char *msg, size_t cap)
{
    return set_z85_key(cfg->sync_key, &cfg->sync_has_key, "sync.key_file", text, len, msg, cap);
}

int sb_config_set_sync_rotation_key(sb_config *cfg, char *text, size_t len, char *msg, size_t cap)
{
    return set_z85_key(cfg->sync_rotation_key, &cfg->sync_has_rotation_key, "sync.rotation_key_file", text, len, msg,
                       cap);
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
