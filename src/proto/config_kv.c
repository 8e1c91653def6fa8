/* A pool's `kv_events:` (docs/configuration.md): where each endpoint's engine publishes its
 * KV-cache events, the address patterns and their placeholders, and the subscriber's bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"

#include "proto/config_internal.h"

#define KF(key_, m, k, lo, hi)                                                                                         \
    {                                                                                                                  \
        .key = key_, .kind = k, .offset = offsetof(sb_kv_events_config, m), .min = lo, .max = hi                       \
    }

/* `kv_events:`. The decoder's bounds are capped where a larger value could only be a mistake:
 * 1 GiB for a batch, 2^26 entries for an array (256 MiB of scratch). */
static const field kv_events_fields[] = {
    KF("endpoint", endpoint, K_NAME, 0, 0),
    KF("replay_endpoint", replay_endpoint, K_NAME, 0, 0),
    KF("topic", topic, K_NAME, 0, 0),
    KF("port", port, K_COUNT32, 1, 65535),
    KF("replay_port", replay_port, K_COUNT32, 1, 65535),
    KF("stale_after_ms", stale_after_ms, K_MS, 1, UINT32_MAX),
    KF("replay_timeout_ms", replay_timeout_ms, K_MS, 1, 600000),
    KF("max_messages_per_turn", max_messages_per_turn, K_COUNT32, 1, 1000000),
    KF("reconnect_ms", reconnect_ms, K_MS, 1, 3600000),
    KF("reconnect_max_ms", reconnect_max_ms, K_MS, 1, 3600000),
    KF("heartbeat_ms", heartbeat_ms, K_MS, 1, 3600000),
    KF("replay_on_join", replay_on_join, K_BOOL, 0, 1),
    KF("cover_ms", cover_ms, K_MS, 0, 3600000),
    KF("max_batch_bytes", limits.max_payload_bytes, K_BYTES, 64, (uint64_t)1 << 30),
    KF("max_events", limits.max_events, K_COUNT32, 1, (uint64_t)1 << 26),
    KF("max_hashes_per_event", limits.max_hashes_per_event, K_COUNT32, 1, (uint64_t)1 << 26),
    KF("max_tokens_per_event", limits.max_tokens_per_event, K_COUNT32, 1, (uint64_t)1 << 26),
    KF("max_batch_hashes", limits.max_batch_hashes, K_COUNT32, 1, (uint64_t)1 << 26),
    KF("max_batch_tokens", limits.max_batch_tokens, K_COUNT32, 1, (uint64_t)1 << 26),
};

#undef KF

static const section kv_events_section = {"kv_events", kv_events_fields, ARRAY_LEN(kv_events_fields)};

/* ---- kv_events ---- */

/* "{port}", "{port+N}" or "{port-N}" at s (N: 1 to 5 digits): its length and the offset, or 0. */
static size_t port_placeholder(const char *s, long *offset)
{
    if (strncmp(s, "{port", 5))
        return 0;
    size_t i = 5;
    *offset = 0;
    if (s[i] == '+' || s[i] == '-') {
        long sign = s[i] == '-' ? -1 : 1, v = 0;
        size_t d = 0;
        for (i++; s[i] >= '0' && s[i] <= '9' && d < 5; i++, d++)
            v = v * 10 + (s[i] - '0');
        if (!d)
            return 0;
        *offset = sign * v;
    }
    return s[i] == '}' ? i + 1 : 0;
}

int sb_config_kv_address(const char *pattern, const char *host, uint16_t port, char *out, size_t cap)
{
    size_t n = 0, hl = strlen(host);
    bool v6 = strchr(host, ':') != NULL;
    for (const char *c = pattern; *c;) {
        long off;
        size_t pl = port_placeholder(c, &off);
        if (pl) {
            long v = (long)port + off;
            if (v < 1 || v > 65535)
                return -1;
            int w = snprintf(out + n, cap > n ? cap - n : 0, "%ld", v);
            if (w < 0 || n + (size_t)w >= cap)
                return -1;
            n += (size_t)w;
            c += pl;
            continue;
        }
        if (!strncmp(c, "{host}", 6)) {
            bool bracket = v6 && !(c > pattern && c[-1] == '[');
            if (n + hl + 2 * bracket >= cap)
                return -1;
            if (bracket)
                out[n++] = '[';
            memcpy(out + n, host, hl);
            n += hl;
            if (bracket)
                out[n++] = ']';
            c += 6;
            continue;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = *c++;
    }
    if (n >= cap)
        return -1;
    out[n] = '\0';
    return 0;
}

/* Why an address pattern is unusable, or NULL. ZMQ checks the expanded address again when the
 * gateway connects; this catches at load time what is wrong for every endpoint. */
static const char *kv_pattern_problem(const char *s)
{
    static const char *const schemes[] = {"tcp://", "ipc://", "inproc://"};
    size_t k = 0;
    while (k < ARRAY_LEN(schemes) && strncmp(s, schemes[k], strlen(schemes[k])))
        k++;
    if (k == ARRAY_LEN(schemes))
        return "must start with tcp://, ipc:// or inproc://";
    if (strlen(s) > 200)
        return "is longer than 200 characters";
    for (const char *c = s; *c; c++) {
        long off;
        size_t pl = port_placeholder(c, &off);
        if (*c == '{' && !strncmp(c, "{host}", 6)) {
            c += 5;
            continue;
        }
        if (pl) {
            c += pl - 1;
            continue;
        }
        if (*c == '{' || *c == '}')
            return "may hold no placeholder but {host} and {port}, {port+N}, {port-N}";
        if ((unsigned char)*c <= ' ')
            return "may not hold spaces or control characters";
    }
    const char *rest = s + strlen(schemes[k]);
    if (!*rest)
        return "has no address after the scheme";
    if (k == 0) {
        const char *colon = strrchr(rest, ':');
        uint64_t port;
        long off;
        size_t pl = colon ? port_placeholder(colon + 1, &off) : 0;
        if (pl && !colon[1 + pl])
            return NULL;
        if (!colon || colon == rest || strlen(colon + 1) > 5 || !cfg_parse_uint(colon + 1, false, &port) || port < 1 ||
            port > 65535)
            return "must end in :PORT (1 to 65535), like tcp://{host}:5557";
    }
    return NULL;
}

/* One of endpoint/port (or replay_endpoint/replay_port): the shorthand becomes the pattern. */
static void kv_address(parse *p, const yaml_node_t *map, const char *what, const char *key, const char *port_key,
                       char **pattern, uint32_t port, const char *fallback)
{
    const yaml_node_t *kn = cfg_lookup(p, map, key), *pn = cfg_lookup(p, map, port_key);
    if (*pattern && port) {
        cfg_node_error(p, pn, "%s: give %s or %s, not both", what, key, port_key);
        return;
    }
    char buf[64];
    if (port) {
        snprintf(buf, sizeof buf, "tcp://{host}:%u", port);
        fallback = buf;
    }
    if (!*pattern && fallback && !(*pattern = sb_strdup(fallback))) {
        cfg_out_of_memory(p);
        return;
    }
    const char *why = *pattern ? kv_pattern_problem(*pattern) : NULL;
    if (why)
        cfg_node_error(p, kn ? kn : map, "%s.%s '%s' %s", what, key, *pattern, why);
}

void cfg_parse_kv_events(parse *p, sb_pool_config *pc, const yaml_node_t *v, const char *what)
{
    if (cfg_is_null(v))
        return;
    if (!cfg_want_mapping(p, v, what))
        return;
    sb_kv_events_config *kc = pc->kv_events;
    if (!kc && !(kc = pc->kv_events = sb_calloc(1, sizeof *kc))) {
        cfg_out_of_memory(p);
        return;
    }
    *kc = (sb_kv_events_config){.stale_after_ms = 10000,
                                .replay_timeout_ms = 2000,
                                .max_messages_per_turn = 64,
                                .reconnect_ms = 100,
                                .reconnect_max_ms = 5000,
                                .heartbeat_ms = 5000,
                                .replay_on_join = true,
                                .cover_ms = 2000,
                                .limits = sb_kv_limits_default()};
    size_t before = p->errs->total;
    cfg_parse_section(p, &kv_events_section, v, kc, what);
    if (p->errs->total != before)
        return;
    kv_address(p, v, what, "endpoint", "port", &kc->endpoint, kc->port, "tcp://{host}:5557");
    kv_address(p, v, what, "replay_endpoint", "replay_port", &kc->replay_endpoint, kc->replay_port, NULL);
    if (!kc->topic && !(kc->topic = sb_strdup("")))
        cfg_out_of_memory(p);
    if (kc->reconnect_ms > kc->reconnect_max_ms) {
        const yaml_node_t *at = cfg_lookup(p, v, "reconnect_ms");
        cfg_node_error(p, at ? at : cfg_lookup(p, v, "reconnect_max_ms"),
                       "%s: reconnect_ms (%u) must not exceed reconnect_max_ms (%u)", what, kc->reconnect_ms,
                       kc->reconnect_max_ms);
    }
    const sb_kv_limits *l = &kc->limits;
    if (l->max_hashes_per_event > l->max_batch_hashes)
        cfg_node_error(p, v, "%s: max_hashes_per_event (%u) must not exceed max_batch_hashes (%u)", what,
                       l->max_hashes_per_event, l->max_batch_hashes);
    if (l->max_tokens_per_event > l->max_batch_tokens)
        cfg_node_error(p, v, "%s: max_tokens_per_event (%u) must not exceed max_batch_tokens (%u)", what,
                       l->max_tokens_per_event, l->max_batch_tokens);
}

void cfg_check_kv_events(parse *p, const sb_pool_config *pc, const yaml_node_t *map, const char *label)
{
    const sb_kv_events_config *kc = pc->kv_events;
    if (!kc || !map || pc->n_endpoints < 2)
        return;
    const char *keys[2] = {"endpoint", "replay_endpoint"};
    const char *pats[2] = {kc->endpoint, kc->replay_endpoint};
    for (int i = 0; i < 2; i++) {
        if (!pats[i] || strstr(pats[i], "{host}") || strstr(pats[i], "{port"))
            continue;
        const yaml_node_t *at = cfg_lookup(p, map, keys[i]);
        cfg_node_error(p, at ? at : map,
                       "%s: kv_events.%s '%s' has neither {host} nor {port...}: all %zu endpoints would read the same "
                       "publisher",
                       label, keys[i], pats[i], pc->n_endpoints);
    }
}
