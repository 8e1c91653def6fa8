/* config_internal: what the files of the configuration parser share, and nothing else.
 * Private to src/proto/config*.c; the public contract is proto/config.h.
 *
 * The parser works in two steps: libyaml builds a node tree (so every node keeps its line and
 * column), then one walk over the tree fills an sb_config and records every problem it meets.
 * The walk never stops at the first error: an operator fixing a config wants the whole list.
 * The walk is split by concept: config.c holds the error recording, the node and scalar helpers,
 * the flat table-driven sections and the top level; config_pool.c the listen and endpoint
 * addresses, pools and endpoints; config_profile.c the profiles; config_flow.c flow control;
 * config_auth.c secrets, the admin listener and API keys. */
#ifndef SB_PROTO_CONFIG_INTERNAL_H
#define SB_PROTO_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "proto/config.h"

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

/* config.c */
/* Records an error at n's position (every error message comes through here or error_at). */
void __attribute__((format(printf, 3, 4))) cfg_node_error(parse *p, const yaml_node_t *n, const char *fmt, ...);
void *cfg_out_of_memory(parse *p);
yaml_node_t *cfg_node_at(parse *p, int id);
bool cfg_is_null(const yaml_node_t *n);
const char *cfg_type_name(const yaml_node_t *n);
const char *cfg_string_of(parse *p, const yaml_node_t *n, const char *what);
char *cfg_dup_string(parse *p, const yaml_node_t *n, const char *what);
bool cfg_want_mapping(parse *p, const yaml_node_t *n, const char *what);
const char *cfg_pair_key(parse *p, const yaml_node_t *map, const yaml_node_pair_t *pair, const char *what);
yaml_node_t *cfg_lookup(parse *p, const yaml_node_t *map, const char *key);
bool cfg_parse_uint(const char *s, bool suffixes, uint64_t *out);
bool cfg_bool_of(parse *p, const yaml_node_t *v, const char *what, bool *out);
bool cfg_number_of(parse *p, const yaml_node_t *v, const char *what, double lo, bool lo_open, double hi, double *out);
void cfg_parse_field(parse *p, const field *f, const yaml_node_t *v, void *base, const char *section);
void cfg_parse_section(parse *p, const section *s, const yaml_node_t *map, void *base, const char *label);

/* config_pool.c */
bool cfg_parse_listen_address(parse *p, const yaml_node_t *n, const char *what, char **host, uint16_t *port);
/* Resolves every pool's fallbacks to pool indices once all pools are read; an unknown name is
 * reported at its node. */
void cfg_check_pool_fallbacks(parse *p, const yaml_node_t *root);
const char *cfg_pool_label(const sb_config *cfg, size_t i, char *buf, size_t cap);
bool cfg_plain_name(const char *s, bool slash);
size_t cfg_mapping_len(const yaml_node_t *n);
size_t cfg_parse_labels(parse *p, const yaml_node_t *map, const char *what, size_t max, char **keys, char **values);
void cfg_free_endpoint(sb_endpoint_config *ep);
/* config_members.c: frees an effective config (cfg->base set) and releases its base. */
void cfg_free_effective(sb_config *cfg);
void cfg_parse_pools(parse *p, const yaml_node_t *seq);

/* config_profile.c */
void cfg_parse_profiles(parse *p, const yaml_node_t *map);
void cfg_check_pool_profiles(parse *p, const yaml_node_t *root);

/* config_flow.c */
void cfg_parse_flow_control(parse *p, const yaml_node_t *map);

/* config_retry.c: the top-level `retry:` */
void cfg_parse_retry(parse *p, const yaml_node_t *map);

/* config_auth.c */
const char *cfg_secret_of(parse *p, const yaml_node_t *v, const char *what);
void cfg_parse_upstream_key(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what);
void cfg_parse_admin(parse *p, const yaml_node_t *map);
void cfg_parse_auth(parse *p, const yaml_node_t *map);

/* config_sync.c: the top-level `sync:` (gateway sync, net/peer_sync.h) */
void cfg_parse_sync(parse *p, const yaml_node_t *map);

/* config_extproc.c: the top-level `ext_proc:` (the endpoint picker's listener) */
void cfg_parse_ext_proc(parse *p, const yaml_node_t *map);

/* ---- config_kv.c: a pool's kv_events ---- */

/* Parses the `kv_events:` mapping v into pc->kv_events (allocated; defaults first). */
void cfg_parse_kv_events(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what);
/* Once the endpoints are known: with more than one, a pattern naming no endpoint would have
 * them all read one publisher (map: the mapping, for positions; NULL if none). */
void cfg_check_kv_events(parse *p, const sb_pool_config *pc, const yaml_node_t *map, const char *label);

#endif
