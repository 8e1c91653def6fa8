#include "proto/members.h"

#include <string.h>

#include "base/alloc.h"

/* Linear scans throughout: a pool has at most max_per_pool members (256 by default), and every
 * call here runs per registration, DNS answer or tick, never per request. */

static void free_labels(sb_member_entry *e)
{
    for (size_t i = 0; i < e->n_labels; i++) {
        sb_free(e->label_keys[i]);
        sb_free(e->label_values[i]);
    }
    sb_free(e->label_keys);
    sb_free(e->label_values);
    e->label_keys = e->label_values = NULL;
    e->n_labels = 0;
}

static void free_entry(sb_member_entry *e)
{
    free_labels(e);
    sb_free(e->pool);
    sb_free(e->host);
    sb_free(e->address);
    sb_free(e->engine);
}

static void remove_at(sb_members *m, size_t i)
{
    free_entry(&m->items[i]);
    memmove(&m->items[i], &m->items[i + 1], (m->n - i - 1) * sizeof *m->items);
    m->n--;
}

static size_t pool_count(const sb_members *m, const char *pool)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        k += !strcmp(m->items[i].pool, pool);
    return k;
}

sb_member_entry *sb_members_find(sb_members *m, const char *pool, const char *address)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->items[i].pool, pool) && !strcmp(m->items[i].address, address))
            return &m->items[i];
    return NULL;
}

/* A new entry at the end (not yet counted in n until it is whole). */
static sb_member_entry *append(sb_members *m, const char *pool, const char *host, uint16_t port,
                               enum sb_endpoint_source source)
{
    if (pool_count(m, pool) >= m->max_per_pool)
        return NULL;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        sb_member_entry *items = sb_realloc(m->items, cap * sizeof *items);
        if (!items)
            return NULL;
        m->items = items;
        m->cap = cap;
    }
    char address[300];
    sb_member_entry *e = &m->items[m->n];
    *e = (sb_member_entry){.port = port, .source = source};
    e->pool = sb_strdup(pool);
    e->host = sb_strdup(host);
    if (sb_config_format_address(host, port, address, sizeof address))
        e->address = sb_strdup(address);
    if (!e->pool || !e->host || !e->address) {
        free_entry(e);
        return NULL;
    }
    m->n++;
    return e;
}

static bool set_labels(sb_member_entry *e, const sb_registration *r)
{
    free_labels(e);
    if (r->n_labels == 0)
        return true;
    e->label_keys = sb_calloc(r->n_labels, sizeof *e->label_keys);
    e->label_values = sb_calloc(r->n_labels, sizeof *e->label_values);
    if (!e->label_keys || !e->label_values)
        return false;
    for (size_t i = 0; i < r->n_labels; i++) {
        e->label_keys[i] = sb_strdup(r->label_keys[i]);
        e->label_values[i] = sb_strdup(r->label_values[i]);
        e->n_labels = i + 1;
        if (!e->label_keys[i] || !e->label_values[i])
            return false;
    }
    return true;
}

static bool same_labels(const sb_member_entry *e, const sb_registration *r)
{
    if (e->n_labels != r->n_labels)
        return false;
    for (size_t i = 0; i < r->n_labels; i++)
        if (strcmp(e->label_keys[i], r->label_keys[i]) || strcmp(e->label_values[i], r->label_values[i]))
            return false;
    return true;
}

int sb_members_register(sb_members *m, const sb_registration *r, sb_ns now, bool *changed)
{
    char address[300];
    if (!sb_config_format_address(r->host, r->port, address, sizeof address))
        return SB_MEMBERS_NOMEM;
    sb_member_entry *e = sb_members_find(m, r->pool, address);
    int rc = SB_MEMBERS_REFRESHED;
    *changed = false;
    if (!e) {
        if (pool_count(m, r->pool) >= m->max_per_pool)
            return SB_MEMBERS_FULL;
        if (!(e = append(m, r->pool, r->host, r->port, SB_EP_API)))
            return SB_MEMBERS_NOMEM;
        rc = SB_MEMBERS_ADDED;
    }
    *changed = rc == SB_MEMBERS_ADDED || e->draining || !same_labels(e, r);
    e->source = SB_EP_API;
    e->draining = false;
    e->drain_reason = NULL;
    e->ttl_ns = SB_MS(r->ttl_ms);
    e->deadline_ns = r->ttl_ms ? now + e->ttl_ns : 0;
    char *engine = r->engine ? sb_strdup(r->engine) : NULL;
    bool ok = set_labels(e, r) && (!r->engine || engine);
    sb_free(e->engine);
    e->engine = engine;
    if (!ok) {
        remove_at(m, (size_t)(e - m->items));
        return SB_MEMBERS_NOMEM;
    }
    return rc;
}

static void start_drain(sb_member_entry *e, const char *why, sb_ns now)
{
    if (e->draining)
        return;
    e->draining = true;
    e->drain_reason = why;
    e->drain_since_ns = now;
}

int sb_members_remove(sb_members *m, const char *pool, const char *address, sb_ns now)
{
    sb_member_entry *e = sb_members_find(m, pool, address);
    if (!e)
        return -1;
    start_drain(e, "deleted", now);
    return 0;
}

bool sb_members_sync_dns(sb_members *m, const char *pool, const char *const *hosts, size_t n_hosts, uint16_t port,
                         sb_ns now, size_t *dropped)
{
    bool changed = false;
    size_t lost = 0;
    for (size_t i = 0; i < m->n; i++)
        m->items[i].mark = false;
    for (size_t h = 0; h < n_hosts; h++) {
        char address[300];
        if (!sb_config_format_address(hosts[h], port, address, sizeof address))
            continue;
        sb_member_entry *e = sb_members_find(m, pool, address);
        if (e) {
            e->mark = true;
            if (e->source == SB_EP_DNS && e->draining) {
                e->draining = false;
                e->drain_reason = NULL;
                changed = true;
            }
            continue;
        }
        if ((e = append(m, pool, hosts[h], port, SB_EP_DNS))) {
            e->mark = true;
            changed = true;
        } else {
            lost++;
        }
    }
    for (size_t i = 0; i < m->n; i++) {
        sb_member_entry *e = &m->items[i];
        if (e->source == SB_EP_DNS && !e->mark && !e->draining && !strcmp(e->pool, pool)) {
            start_drain(e, "gone from DNS", now);
            changed = true;
        }
    }
    if (dropped)
        *dropped = lost;
    return changed;
}

bool sb_members_tick(sb_members *m, sb_ns now, sb_ns drain_ns,
                     bool (*idle)(void *arg, const char *pool, const char *address), void *arg)
{
    bool changed = false;
    for (size_t i = 0; i < m->n;) {
        sb_member_entry *e = &m->items[i];
        if (!e->draining && e->deadline_ns && now >= e->deadline_ns) {
            start_drain(e, "ttl expired", now);
            changed = true;
        } else if (e->draining && (now - e->drain_since_ns >= drain_ns || !idle || idle(arg, e->pool, e->address))) {
            remove_at(m, i);
            changed = true;
            continue;
        }
        i++;
    }
    return changed;
}

size_t sb_members_view(const sb_members *m, const sb_config *base, sb_member *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n && k < cap; i++) {
        const sb_member_entry *e = &m->items[i];
        size_t p = 0;
        while (p < base->n_pools && strcmp(base->pools[p].name, e->pool))
            p++;
        if (p == base->n_pools)
            continue;
        out[k++] = (sb_member){.pool = p,
                               .source = e->source,
                               .host = e->host,
                               .port = e->port,
                               .draining = e->draining,
                               .label_keys = (const char *const *)e->label_keys,
                               .label_values = (const char *const *)e->label_values,
                               .n_labels = e->n_labels};
    }
    return k;
}

void sb_members_free(sb_members *m)
{
    for (size_t i = 0; i < m->n; i++)
        free_entry(&m->items[i]);
    sb_free(m->items);
    *m = (sb_members){0};
}
