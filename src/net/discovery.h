/* discovery: the gateway's membership at run time.
 *
 * The endpoints a gateway routes to are the file's plus the dynamic ones (proto/members.h): those
 * DNS discovery finds (a pool's `endpoints_from: {dns: "name:port"}`: every A and AAAA address is
 * an endpoint, resolved asynchronously every interval_ms) and those registered through the admin
 * API (POST/DELETE/GET /admin/endpoints). One mechanism applies every change: the effective
 * configuration (sb_config_with_members: the file's config, each pool's members appended) goes
 * through the reload path, so endpoints that stay keep their state and requests in flight finish
 * where they started. Changes are coalesced: a burst of registrations, or a DNS answer that adds
 * ten addresses, applies once, discovery.apply_ms after the first change.
 *
 * A failed resolution keeps the last known set (logged, counted in /metrics and in GET
 * /admin/endpoints). Draining members (DELETE, TTL expired, gone from DNS) take no new requests and
 * are removed once the current gateway has none in flight on them, or discovery.drain_ms after they
 * started draining (requests a replaced gateway still carries finish there either way).
 *
 * The object outlives the gateways it feeds: a reload that replaces the gateway hands it over.
 * Not for: resolving static endpoints' names (net/upstream.c does, asynchronously, per endpoint). */
#ifndef SB_NET_DISCOVERY_H
#define SB_NET_DISCOVERY_H

#include <uv.h>

#include "net/http_server.h"
#include "proto/config.h"

typedef struct sb_discovery sb_discovery;
typedef struct sb_gateway sb_gateway;

typedef struct sb_discovery_env {
    uv_loop_t *loop;
    /* Applies an effective configuration (ownership passes, also on failure). 0, or -1 when it
     * was refused (the running configuration stays; discovery tries again a second later). */
    int (*apply)(void *arg, sb_config *effective);
    /* The gateway serving now, for the admin pages' state and the drain check. */
    sb_gateway *(*current)(void *arg);
    void *arg;
} sb_discovery_env;

/* Starts membership over the file's configuration `base` (the caller keeps its own reference:
 * discovery takes one with sb_config_with_members and drops it in sb_discovery_free). Starts the
 * DNS watches of base's pools. Returns 0, or UV_ENOMEM. */
int sb_discovery_new(const sb_discovery_env *env, sb_config *base, sb_discovery **out);
/* The effective configuration over `base` (the running file config, or a new one a SIGHUP read)
 * with the current members. NULL when out of memory. The caller owns it. */
sb_config *sb_discovery_effective(sb_discovery *d, sb_config *base);
/* A new file configuration was applied (SIGHUP): keep a reference to it as the base of later
 * changes (the previous base's reference is dropped) and restart the DNS watches from it. */
void sb_discovery_set_base(sb_discovery *d, sb_config *base);
/* Stops the watches and timers; the object frees itself once its handles have closed. */
void sb_discovery_free(sb_discovery *d);

/* The admin routes (net/admin.c dispatches; the admin token was checked). path_ok: whether
 * req's path is one of them. */
bool sb_discovery_admin_path(const sb_http_req *req);
void sb_discovery_admin(sb_discovery *d, sb_http_req *req);
/* Prometheus lines (switchboard_discovery_*) into b. */
struct sb_buf;
void sb_discovery_render_metrics(const sb_discovery *d, struct sb_buf *b);
/* The reason an endpoint of the current gateway is down, for /debug/endpoints; NULL if none. */
const char *sb_discovery_down_reason(const sb_gateway *gw, uint32_t pool, uint32_t ep, char *buf, size_t cap);

#endif
