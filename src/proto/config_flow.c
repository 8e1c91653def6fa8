/* flow_control: per-band queue limits and the API keys' bands. */
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

/* ---- flow control ---- */

#define BAND_FIELD(arr, i, k, lo, hi)                                                                                  \
    {                                                                                                                  \
        .key = i == 0   ? "critical"                                                                                   \
               : i == 1 ? "standard"                                                                                   \
                        : "sheddable",                                                                                 \
        .kind = k, .offset = offsetof(sb_config, arr) + (i) * sizeof(uint32_t), .min = lo, .max = hi                   \
    }

static const field flow_wait_fields[] = {BAND_FIELD(flow_max_wait_ms, 0, K_MS, 1, UINT32_MAX),
                                         BAND_FIELD(flow_max_wait_ms, 1, K_MS, 1, UINT32_MAX),
                                         BAND_FIELD(flow_max_wait_ms, 2, K_MS, 1, UINT32_MAX)};
static const field flow_queued_fields[] = {BAND_FIELD(flow_max_queued, 0, K_COUNT32, 0, 1u << 20),
                                           BAND_FIELD(flow_max_queued, 1, K_COUNT32, 0, 1u << 20),
                                           BAND_FIELD(flow_max_queued, 2, K_COUNT32, 0, 1u << 20)};
#define BAND_BYTES(i)                                                                                                  \
    {                                                                                                                  \
        .key = i == 0   ? "critical"                                                                                   \
               : i == 1 ? "standard"                                                                                   \
                        : "sheddable",                                                                                 \
        .kind = K_BYTES, .offset = offsetof(sb_config, flow_max_bytes) + (i) * sizeof(size_t), .min = 0,               \
        .max = 1ull << 40                                                                                              \
    }
static const field flow_bytes_fields[] = {BAND_BYTES(0), BAND_BYTES(1), BAND_BYTES(2)};
static const section flow_bytes_section = {"flow_control.max_bytes", flow_bytes_fields, ARRAY_LEN(flow_bytes_fields)};
static const field flow_total_fields[] = {
    /* 0: the sum of the bands' bounds. The count is allocated up front (about 60 bytes a
     * request per pool), hence a million at most. */
    {.key = "max_queued_total",
     .kind = K_COUNT32,
     .offset = offsetof(sb_config, flow_max_queued_total),
     .min = 0,
     .max = 1u << 20},
    {.key = "max_bytes_total",
     .kind = K_BYTES,
     .offset = offsetof(sb_config, flow_max_bytes_total),
     .min = 0,
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
void cfg_parse_flow_control(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!cfg_want_mapping(p, map, "flow_control"))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "flow_control");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        if (!strcmp(key, "enabled")) {
            cfg_parse_field(p, &flow_enabled_field, v, cfg, "flow_control");
        } else if (!strcmp(key, "max_wait_ms")) {
            cfg_parse_section(p, &flow_wait_section, v, cfg, "flow_control.max_wait_ms");
        } else if (!strcmp(key, "queue_threshold")) {
            cfg_number_of(p, v, "flow_control.queue_threshold", -1, false, 1e9, &cfg->flow_gate_queue);
        } else if (!strcmp(key, "kv_threshold")) {
            cfg_number_of(p, v, "flow_control.kv_threshold", -1, false, 1, &cfg->flow_gate_kv);
        } else if (!strcmp(key, "max_queued")) {
            cfg_parse_section(p, &flow_queued_section, v, cfg, "flow_control.max_queued");
        } else if (!strcmp(key, "max_bytes")) {
            cfg_parse_section(p, &flow_bytes_section, v, cfg, "flow_control.max_bytes");
        } else if (!strcmp(key, "max_queued_total")) {
            cfg_parse_field(p, &flow_total_fields[0], v, cfg, "flow_control");
        } else if (!strcmp(key, "max_bytes_total")) {
            cfg_parse_field(p, &flow_total_fields[1], v, cfg, "flow_control");
        } else if (!strcmp(key, "api_keys")) {
            /* key: band. Hashed at once, like auth.api_keys, and merged with them; no message
             * quotes a key (cfg_pair_key would, for a repeated one: the table reports those). */
            if (!cfg_want_mapping(p, v, "flow_control.api_keys"))
                continue;
            for (yaml_node_pair_t *r = v->data.mapping.pairs.start; r < v->data.mapping.pairs.top; r++) {
                const yaml_node_t *kn = cfg_node_at(p, r->key);
                const char *api_key = cfg_secret_of(p, kn, "a key in flow_control.api_keys");
                const yaml_node_t *bv = cfg_node_at(p, r->value);
                const char *band = cfg_string_of(p, bv, "flow_control.api_keys band");
                if (!api_key || !band)
                    continue;
                sb_api_key k = {.band = sb_band_parse(band, strlen(band))};
                if (k.band < 0) {
                    cfg_node_error(p, bv, "flow_control.api_keys: unknown band '%s' (critical, standard or sheddable)",
                                   band);
                    continue;
                }
                sb_auth_digest(api_key, strlen(api_key), k.digest);
                const char *why = NULL;
                int rc = sb_auth_keys_add(&cfg->api_keys, &k, &why);
                if (rc == -1)
                    cfg_out_of_memory(p);
                else if (rc < 0)
                    cfg_node_error(p, kn, "flow_control.api_keys: %s", why);
            }
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in flow_control", key);
        }
    }
}
