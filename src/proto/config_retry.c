/* The top-level `retry:` (core/retry.h): what the proxy retries, how often, and within which
 * budget. */
#include <string.h>
#include <yaml.h>

#include "proto/config_internal.h"

static const field retry_fields[] = {
    {.key = "attempts",
     .kind = K_COUNT32,
     .offset = offsetof(sb_retry_policy, attempts),
     .min = 1,
     .max = SB_RETRY_MAX_ATTEMPTS},
    {.key = "backoff_ms", .kind = K_MS, .offset = offsetof(sb_retry_policy, backoff_ms), .min = 0, .max = 60000},
    {.key = "max_backoff_ms",
     .kind = K_MS,
     .offset = offsetof(sb_retry_policy, max_backoff_ms),
     .min = 0,
     .max = 60000},
    {.key = "min_retries",
     .kind = K_COUNT32,
     .offset = offsetof(sb_retry_policy, min_retries),
     .min = 0,
     .max = 1u << 20},
};

static const field *find_field(const field *fs, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fs[i].key, key))
            return &fs[i];
    return NULL;
}

/* `on:` a list of reasons (connect-failure, reset, timeout) and 5xx statuses; it replaces the
 * default list whole, so what is written is exactly what is retried. */
static void parse_on(parse *p, const yaml_node_t *v, sb_retry_policy *rp)
{
    if (v->type != YAML_SEQUENCE_NODE) {
        cfg_node_error(p, v, "retry.on must be a list, got %s", cfg_type_name(v));
        return;
    }
    rp->on = 0;
    rp->statuses[0] = rp->statuses[1] = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        const yaml_node_t *e = cfg_node_at(p, *it);
        const char *s = cfg_string_of(p, e, "retry.on");
        if (!s)
            continue;
        int reason = sb_retry_reason_find(s);
        uint64_t status;
        if (reason >= 0)
            rp->on |= 1u << reason;
        else if (cfg_parse_uint(s, false, &status) && status >= 500 && status <= 599)
            rp->statuses[(status - 500) / 64] |= 1ull << ((status - 500) % 64);
        else
            cfg_node_error(p, e,
                           "retry.on: '%s' is neither connect-failure, reset, timeout nor a status from 500 to 599", s);
    }
}

void cfg_parse_retry(parse *p, const yaml_node_t *map)
{
    if (!cfg_want_mapping(p, map, "retry"))
        return;
    sb_retry_policy *rp = &p->cfg->retry;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, "retry");
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        const field *f = find_field(retry_fields, ARRAY_LEN(retry_fields), key);
        if (f)
            cfg_parse_field(p, f, v, rp, "retry");
        else if (!strcmp(key, "on"))
            parse_on(p, v, rp);
        else if (!strcmp(key, "budget_ratio"))
            cfg_number_of(p, v, "retry.budget_ratio", 0, false, 1, &rp->budget_ratio);
        else
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in retry", key);
    }
    if (rp->backoff_ms > rp->max_backoff_ms) {
        const yaml_node_t *at = cfg_lookup(p, map, "backoff_ms");
        cfg_node_error(p, at ? at : map, "retry: backoff_ms (%u) must not exceed max_backoff_ms (%u)", rp->backoff_ms,
                       rp->max_backoff_ms);
    }
}
