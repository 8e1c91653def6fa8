/* The top-level `sync:`: gateway sync (net/peer_sync.h), where this gateway publishes what it
 * sends where, and the other gateway replicas' publishers it listens to. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"

#include "proto/config_internal.h"

#define MAX_PEERS 64

static const field sync_fields[] = {
    {.key = "heartbeat_ms", .kind = K_MS, .offset = offsetof(sb_config, sync_heartbeat_ms), .min = 10, .max = 60000},
    {.key = "peer_timeout_ms",
     .kind = K_MS,
     .offset = offsetof(sb_config, sync_peer_timeout_ms),
     .min = 100,
     .max = 3600000},
    /* Each tracked request is a few dozen bytes; 16 Mi of them is past any fleet's concurrency. */
    {.key = "max_tracked", .kind = K_COUNT, .offset = offsetof(sb_config, sync_max_tracked), .min = 1, .max = 1u << 24},
    {.key = "max_request_ms",
     .kind = K_MS,
     .offset = offsetof(sb_config, sync_max_request_ms),
     .min = 1000,
     .max = 86400000},
};

/* A ZMQ address we can bind or connect: tcp://host:port, ipc://path or inproc://name. */
static bool zmq_address(const char *s)
{
    static const char *schemes[] = {"tcp://", "ipc://", "inproc://"};
    for (size_t i = 0; i < ARRAY_LEN(schemes); i++) {
        size_t n = strlen(schemes[i]);
        if (!strncmp(s, schemes[i], n) && s[n])
            return strlen(s) < 256;
    }
    return false;
}

static char *address_of(parse *p, const yaml_node_t *v, const char *what)
{
    const char *s = cfg_string_of(p, v, what);
    if (!s)
        return NULL;
    if (!zmq_address(s)) {
        cfg_node_error(p, v, "%s must be a ZMQ address (tcp://host:port, ipc://path), got '%s'", what, s);
        return NULL;
    }
    char *d = sb_strdup(s);
    return d ? d : cfg_out_of_memory(p);
}

static void parse_peers(parse *p, const yaml_node_t *v)
{
    sb_config *cfg = p->cfg;
    if (v->type != YAML_SEQUENCE_NODE) {
        cfg_node_error(p, v, "sync.peers must be a list of addresses, got %s", cfg_type_name(v));
        return;
    }
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n > MAX_PEERS) {
        cfg_node_error(p, v, "sync.peers: at most %d peers, got %zu", MAX_PEERS, n);
        return;
    }
    for (size_t i = 0; i < cfg->n_sync_peers; i++)
        sb_free(cfg->sync_peers[i]);
    sb_free(cfg->sync_peers);
    cfg->n_sync_peers = 0;
    cfg->sync_peers = n ? sb_calloc(n, sizeof(char *)) : NULL;
    if (n && !cfg->sync_peers) {
        cfg_out_of_memory(p);
        return;
    }
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        char *a = address_of(p, cfg_node_at(p, *it), "sync.peers[]");
        if (a)
            cfg->sync_peers[cfg->n_sync_peers++] = a;
    }
}

/* sync: { listen, peers, key_file, heartbeat_ms, peer_timeout_ms, max_tracked, max_request_ms } */
void cfg_parse_sync(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (cfg_is_null(map))
        return; /* `sync: null`: off, as when absent */
    if (!cfg_want_mapping(p, map, "sync"))
        return;
    bool listen_seen = false;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "sync");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        const field *f = NULL;
        for (size_t i = 0; i < ARRAY_LEN(sync_fields) && !f; i++)
            if (!strcmp(sync_fields[i].key, key))
                f = &sync_fields[i];
        if (f) {
            cfg_parse_field(p, f, v, cfg, "sync");
        } else if (!strcmp(key, "listen")) {
            listen_seen = true;
            char *a = address_of(p, v, "sync.listen");
            if (a) {
                sb_free(cfg->sync_listen);
                cfg->sync_listen = a;
            }
        } else if (!strcmp(key, "peers")) {
            parse_peers(p, v);
        } else if (!strcmp(key, "key_file")) {
            char *f = cfg_dup_string(p, v, "sync.key_file");
            if (f) {
                sb_free(cfg->sync_key_file);
                cfg->sync_key_file = f;
            }
        } else if (!strcmp(key, "rotation_key_file")) {
            char *f = cfg_dup_string(p, v, "sync.rotation_key_file");
            if (f) {
                sb_free(cfg->sync_rotation_key_file);
                cfg->sync_rotation_key_file = f;
            }
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in sync", key);
        }
    }
    if (cfg->sync_rotation_key_file && !cfg->sync_key_file)
        cfg_node_error(p, map, "sync.rotation_key_file needs sync.key_file (the key this gateway publishes with)");
    if (!listen_seen)
        cfg_node_error(p, map,
                       "sync needs listen (the ZMQ address this gateway publishes on, e.g. tcp://0.0.0.0:5600)");
    if (cfg->sync_peer_timeout_ms <= cfg->sync_heartbeat_ms)
        cfg_node_error(p, map, "sync.peer_timeout_ms (%u) must be longer than sync.heartbeat_ms (%u)",
                       cfg->sync_peer_timeout_ms, cfg->sync_heartbeat_ms);
    for (size_t i = 0; i < cfg->n_sync_peers; i++)
        if (cfg->sync_listen && !strcmp(cfg->sync_peers[i], cfg->sync_listen))
            cfg_node_error(p, cfg_lookup(p, map, "peers"), "sync.peers names this gateway's own listen address (%s)",
                           cfg->sync_listen);
}
