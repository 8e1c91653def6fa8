/* The effective configuration: the file's, with the endpoints found at run time (DNS discovery,
 * registrations) appended to their pools. Pure: no I/O, no clock. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "proto/config_internal.h"

bool sb_config_format_address(const char *host, uint16_t port, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
    return n > 0 && (size_t)n < cap;
}

const sb_config *sb_config_base(const sb_config *cfg)
{
    return cfg->base ? cfg->base : cfg;
}

static bool copy_labels(sb_endpoint_config *dst, const char *const *keys, const char *const *values, size_t n)
{
    if (n == 0)
        return true;
    dst->label_keys = sb_calloc(n, sizeof *dst->label_keys);
    dst->label_values = sb_calloc(n, sizeof *dst->label_values);
    if (!dst->label_keys || !dst->label_values)
        return false;
    for (size_t i = 0; i < n; i++) {
        dst->label_keys[i] = sb_strdup(keys[i]);
        dst->label_values[i] = sb_strdup(values[i]);
        dst->n_labels = i + 1; /* what cfg_free_endpoint frees, set before a failure can return */
        if (!dst->label_keys[i] || !dst->label_values[i])
            return false;
    }
    return true;
}

/* A deep copy of src into dst (zeroed): the effective config owns every endpoint string, so
 * freeing it never has to ask which came from where. */
static bool copy_endpoint(sb_endpoint_config *dst, const sb_endpoint_config *src)
{
    *dst = (sb_endpoint_config){.port = src->port, .draining = src->draining, .source = src->source};
    dst->host = sb_strdup(src->host);
    dst->address = sb_strdup(src->address);
    return dst->host && dst->address &&
           copy_labels(dst, (const char *const *)src->label_keys, (const char *const *)src->label_values,
                       src->n_labels);
}

static bool member_endpoint(sb_endpoint_config *dst, const sb_member *m)
{
    char address[300];
    *dst = (sb_endpoint_config){.port = m->port, .draining = m->draining, .source = m->source};
    if (!sb_config_format_address(m->host, m->port, address, sizeof address))
        return false;
    dst->host = sb_strdup(m->host);
    dst->address = sb_strdup(address);
    return dst->host && dst->address && copy_labels(dst, m->label_keys, m->label_values, m->n_labels);
}

static bool has_endpoint(const sb_pool_config *pc, const char *host, uint16_t port)
{
    for (size_t e = 0; e < pc->n_endpoints; e++)
        if (pc->endpoints[e].port == port && !strcmp(pc->endpoints[e].host, host))
            return true;
    return false;
}

void cfg_free_effective(sb_config *cfg)
{
    for (size_t p = 0; cfg->pools && p < cfg->n_pools; p++) {
        sb_pool_config *pc = &cfg->pools[p];
        for (size_t e = 0; e < pc->n_endpoints; e++)
            cfg_free_endpoint(&pc->endpoints[e]);
        sb_free(pc->endpoints);
    }
    sb_free(cfg->pools);
    sb_config *base = cfg->base;
    memset(cfg, 0, sizeof *cfg); /* the copy of the token digest too */
    sb_free(cfg);
    sb_config_free(base);
}

sb_config *sb_config_with_members(sb_config *base, const sb_member *members, size_t n)
{
    /* An effective config's base is the file's: one level only, so freeing stays simple. */
    if (base->base)
        base = base->base;
    sb_config *cfg = sb_malloc(sizeof *cfg);
    if (!cfg)
        return NULL;
    *cfg = *base;
    cfg->base = base;
    cfg->derived = 0;
    base->derived++;
    cfg->pools = sb_calloc(base->n_pools ? base->n_pools : 1, sizeof *cfg->pools);
    if (!cfg->pools) {
        cfg->n_pools = 0;
        goto fail;
    }
    for (size_t p = 0; p < base->n_pools; p++) {
        const sb_pool_config *bp = &base->pools[p];
        sb_pool_config *pc = &cfg->pools[p];
        *pc = *bp;
        pc->endpoints = NULL;
        pc->n_endpoints = 0;
        size_t want = bp->n_endpoints;
        for (size_t i = 0; i < n; i++)
            want += members[i].pool == p;
        if (want == 0)
            continue;
        if (!(pc->endpoints = sb_calloc(want, sizeof *pc->endpoints)))
            goto fail;
        for (size_t e = 0; e < bp->n_endpoints; e++) {
            bool ok = copy_endpoint(&pc->endpoints[e], &bp->endpoints[e]);
            pc->n_endpoints++;
            if (!ok)
                goto fail;
        }
        /* Linear scan for duplicates: a pool has at most discovery.max_endpoints members, and
         * this runs once per membership change, never per request. */
        for (size_t i = 0; i < n; i++) {
            const sb_member *m = &members[i];
            if (m->pool != p || has_endpoint(pc, m->host, m->port))
                continue;
            bool ok = member_endpoint(&pc->endpoints[pc->n_endpoints], m);
            pc->n_endpoints++;
            if (!ok)
                goto fail;
        }
    }
    return cfg;
fail:
    cfg_free_effective(cfg);
    return NULL;
}
