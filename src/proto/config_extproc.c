/* The top-level `ext_proc:`: the endpoint picker's gRPC listener (net/picker.c), where Envoy's
 * external-processing filter asks which endpoint serves each request. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"

#include "proto/config_internal.h"

/* ext_proc's scalar keys; listen and the body modes are parsed by cfg_parse_ext_proc. */
static const field extproc_fields[] = {
    /* Envoy tries the list in order; a handful covers its retries (core/decide.h ranks at most 8). */
    {.key = "fallbacks", .kind = K_COUNT32, .offset = offsetof(sb_config, extproc_fallbacks), .max = 7},
    /* Envoy's own buffers take any size; llm-d's 62,000 keeps each gRPC message well under the
     * 64 KiB a default HTTP/2 frame window allows. 4 MiB is the gRPC default message limit. */
    {.key = "chunk_bytes",
     .kind = K_BYTES,
     .offset = offsetof(sb_config, extproc_chunk_bytes),
     .min = 1024,
     .max = 4u << 20},
    {.key = "max_streams",
     .kind = K_COUNT32,
     .offset = offsetof(sb_config, extproc_max_streams),
     .min = 1,
     .max = 1u << 20},
    {.key = "max_connections",
     .kind = K_COUNT,
     .offset = offsetof(sb_config, extproc_max_connections),
     .min = 1,
     .max = 1u << 20},
    {.key = "idle_ms", .kind = K_MS, .offset = offsetof(sb_config, extproc_idle_ms), .min = 1000, .max = 86400000},
    {.key = "tls_cert", .kind = K_NAME, .offset = offsetof(sb_config, extproc_tls_cert)},
    {.key = "tls_key", .kind = K_NAME, .offset = offsetof(sb_config, extproc_tls_key)},
};

static void parse_mode(parse *p, const yaml_node_t *v, const char *what, bool none_ok, int *out)
{
    const char *s = cfg_string_of(p, v, what);
    if (!s)
        return;
    if (!strcmp(s, "full_duplex_streamed"))
        *out = SB_EXTPROC_MODE_FULL_DUPLEX;
    else if (!strcmp(s, "buffered"))
        *out = SB_EXTPROC_MODE_BUFFERED;
    else if (none_ok && !strcmp(s, "none"))
        *out = SB_EXTPROC_MODE_NONE;
    else
        cfg_node_error(p, v, "%s must be full_duplex_streamed or buffered%s, got '%s'", what, none_ok ? " or none" : "",
                       s);
}

/* ext_proc: { listen, token, tls_cert, tls_key, fallbacks, chunk_bytes, request_body_mode,
 * response_body_mode, max_streams, max_connections, idle_ms } */
void cfg_parse_ext_proc(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (cfg_is_null(map))
        return; /* `ext_proc: null`: no picker, as when absent */
    if (!cfg_want_mapping(p, map, "ext_proc"))
        return;
    bool listen_seen = false;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "ext_proc");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        const field *f = NULL;
        for (size_t i = 0; i < ARRAY_LEN(extproc_fields) && !f; i++)
            if (!strcmp(extproc_fields[i].key, key))
                f = &extproc_fields[i];
        if (f) {
            cfg_parse_field(p, f, v, cfg, "ext_proc");
        } else if (!strcmp(key, "listen")) {
            listen_seen = true;
            char *host = NULL;
            uint16_t port = 0;
            if (cfg_parse_listen_address(p, v, "ext_proc.listen", &host, &port)) {
                sb_free(cfg->extproc_host);
                cfg->extproc_host = host;
                cfg->extproc_port = port;
            }
        } else if (!strcmp(key, "token")) {
            /* Envoy sends it as the call's initial metadata (grpc_service.initial_metadata). */
            const char *t = cfg_secret_of(p, v, "ext_proc.token");
            if (t) {
                sb_auth_digest(t, strlen(t), cfg->extproc_token_digest);
                cfg->extproc_has_token = true;
            }
        } else if (!strcmp(key, "request_body_mode")) {
            /* none is not offered: the picker cannot route without the body */
            parse_mode(p, v, "ext_proc.request_body_mode", false, &cfg->extproc_request_body_mode);
        } else if (!strcmp(key, "response_body_mode")) {
            parse_mode(p, v, "ext_proc.response_body_mode", true, &cfg->extproc_response_body_mode);
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in ext_proc", key);
        }
    }
    if (!listen_seen)
        cfg_node_error(p, map,
                       "ext_proc needs listen (the gRPC address Envoy's ext_proc filter calls, e.g. "
                       "\"0.0.0.0:9002\")");
    if (!cfg->extproc_tls_cert != !cfg->extproc_tls_key)
        cfg_node_error(p, map, "ext_proc: give both tls_cert and tls_key (TLS), or neither (plain h2c)");
}
