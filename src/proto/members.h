/* members: the endpoints a gateway learns at run time, apart from its file.
 *
 * Two sources feed it: DNS discovery (a pool's `endpoints_from`, net/discovery.c) and the
 * registration API (POST/DELETE /admin/endpoints). The table keeps, per pool name, each dynamic
 * endpoint with its source, engine, labels, registration TTL and drain state, and decides the
 * life cycle: a registration not refreshed within its TTL starts draining, a DELETE or an address
 * gone from DNS starts draining, and a draining endpoint is removed once the caller says it is idle
 * or after drain_ns. The effective configuration is the file's plus sb_members_view's list
 * (sb_config_with_members).
 *
 * Pure: no I/O, no clock (every call takes `now`). Bounded: at most max_per_pool members per pool
 * name. Not for: resolving names, applying configs, HTTP (net/discovery.c). */
#ifndef SB_PROTO_MEMBERS_H
#define SB_PROTO_MEMBERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "proto/config.h"

typedef struct sb_member_entry {
    char *pool; /* pool name (names survive reloads; indexes do not) */
    char *host; /* literal or name, IPv6 without brackets */
    uint16_t port;
    char *address; /* "host:port", as the effective config spells it */
    enum sb_endpoint_source source;
    char *engine; /* as registered; NULL: the pool's */
    char **label_keys, **label_values;
    size_t n_labels;
    sb_ns ttl_ns;      /* 0: no TTL */
    sb_ns deadline_ns; /* refresh before this, or drain; 0 without TTL */
    bool draining;
    const char *drain_reason; /* static text: "deleted", "ttl expired", "gone from DNS" */
    sb_ns drain_since_ns;
    bool mark; /* scratch of sb_members_sync_dns */
} sb_member_entry;

typedef struct sb_members {
    sb_member_entry *items;
    size_t n, cap;
    size_t max_per_pool; /* discovery.max_endpoints */
} sb_members;

/* What POST /admin/endpoints carries (strings borrowed for the call). */
typedef struct sb_registration {
    const char *pool;
    const char *host;
    uint16_t port;
    const char *engine; /* NULL: none given */
    const char *const *label_keys, *const *label_values;
    size_t n_labels;
    uint64_t ttl_ms; /* 0: none */
} sb_registration;

enum {
    SB_MEMBERS_ADDED = 1,     /* a new member */
    SB_MEMBERS_REFRESHED = 2, /* known: TTL reset, labels and engine updated, a drain cancelled */
    SB_MEMBERS_FULL = -1,     /* the pool has max_per_pool members already */
    SB_MEMBERS_NOMEM = -2,
};

/* Adds or refreshes an API registration. A DNS member of the same address becomes an API one
 * (the registration's TTL and labels then apply). Returns one of the codes above; *changed tells
 * whether routing sees a difference (added, a drain cancelled, labels changed), so a heartbeat
 * that only resets the TTL costs no rebuild. */
int sb_members_register(sb_members *m, const sb_registration *r, sb_ns now, bool *changed);
/* DELETE: the member starts draining (reason "deleted"). 0, or -1 when pool/address is unknown. */
int sb_members_remove(sb_members *m, const char *pool, const char *address, sb_ns now);
/* The answer of a pool's DNS name: each address not yet a member joins (source dns); each DNS
 * member of that pool not in the answer starts draining ("gone from DNS"); one that drains and is
 * in the answer again comes back. API members are left alone. Returns whether anything changed;
 * members past max_per_pool are left out (*dropped counts them). */
bool sb_members_sync_dns(sb_members *m, const char *pool, const char *const *hosts, size_t n_hosts, uint16_t port,
                         sb_ns now, size_t *dropped);
/* Time passes: a registration past its deadline starts draining ("ttl expired"); a draining member
 * is removed when idle(arg, pool, address) says nothing is in flight on it, or drain_ns after it
 * started draining. idle may be NULL (always idle). Returns whether anything changed. */
bool sb_members_tick(sb_members *m, sb_ns now, sb_ns drain_ns,
                     bool (*idle)(void *arg, const char *pool, const char *address), void *arg);
/* The member of pool with that address, or NULL. */
sb_member_entry *sb_members_find(sb_members *m, const char *pool, const char *address);
/* The members of base's pools as sb_member items (for sb_config_with_members), into out (cap
 * items; members of pools base lacks are skipped). Returns how many were written. Borrowed: valid
 * until the table changes. */
size_t sb_members_view(const sb_members *m, const sb_config *base, sb_member *out, size_t cap);
void sb_members_free(sb_members *m);

#endif
