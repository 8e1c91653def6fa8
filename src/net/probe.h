/* probe: keeps the router's picture of each endpoint fresh, off the request path.
 *
 * Per endpoint, on the gateway's loop:
 *   - a scrape of its metrics (GET /metrics, or /slots for llama.cpp run without metrics)
 *     every interval, with a timeout, parsed by proto/engine_metrics into an endpoint report
 *     (core/endpoint.h). A scrape never blocks a request: it is one more asynchronous GET on
 *     its own keep-alive connection.
 *   - an active health check (GET /health) every health interval.
 * Adaptive interval: an endpoint that received requests since its last scrape is scraped
 * sooner, an idle one later, within [min_interval, max_interval]:
 *     busy (d >= 1 requests dispatched since the last scrape): next = base * 4 / (4 + d)
 *     idle (d = 0):                                             next = previous * 2
 * so a replica taking a burst is looked at up to base/min times as often, and an idle fleet
 * costs little. A scrape in flight is never doubled up: the next starts after it ends.
 * Not for: ORCA headers (net/proxy.c applies those as responses arrive). */
#ifndef SB_NET_PROBE_H
#define SB_NET_PROBE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/router.h"
#include "proto/config.h"

typedef struct sb_prober sb_prober;

/* An endpoint's engine, as the prober reads it. With `engine: auto` the mapping is chosen from
 * the families its /metrics exposes (proto/engine_metrics sb_engine_families), at the first
 * scrape and again whenever a scrape stops matching the mapping in use; a configured engine is
 * kept. A scrape that answers 200 but holds none of the mapping's families (a wrong `engine:`,
 * or with auto none of the known ones) is a mismatch: counted in mismatches (and in
 * scrape_errors), kept in `mismatch` until a scrape matches again, logged once when it starts
 * and once when it ends, never per scrape; looks_like names the engine the page points at. */
typedef struct sb_probe_engine {
    bool automatic;       /* engine: auto */
    bool detected;        /* automatic, and a scrape has chosen `kind` */
    bool mismatch;        /* the last 200 scrape matched nothing */
    bool have_looks_like; /* mismatch, and the page looks like looks_like */
    int kind;             /* sb_engine_kind of the mapping in use */
    int looks_like;       /* sb_engine_kind */
    uint64_t mismatches;  /* 200 scrapes that matched nothing */
} sb_probe_engine;

/* Writes why an endpoint's scrapes match nothing ("no vllm: families in /metrics; this looks
 * like sglang") into buf (NUL-terminated, truncated to cap); returns buf, or NULL with no
 * mismatch. */
const char *sb_probe_engine_why(const sb_probe_engine *e, const char *path, char *buf, size_t cap);

/* The served-name check: the pool's first model is the name sent upstream, so it must be one
 * of the ids the endpoint's GET /v1/models lists. Checked once after the first successful
 * scrape, and again after a reload or a restart of the engine (a list that cannot change
 * otherwise is not fetched per scrape). A missing name is logged once, shown in
 * /debug/endpoints with what the endpoint serves, and exported as a gauge. */
typedef struct sb_probe_models {
    bool checked;     /* a /v1/models answer was read */
    bool missing;     /* ... and the served name was not in it */
    uint64_t checks;  /* answers read */
    char served[128]; /* missing: the first id listed ("" for an empty list), truncated */
} sb_probe_models;

/* Writes why the served name is wrong into buf; returns buf, or NULL when it is not. */
const char *sb_probe_models_why(const sb_probe_models *m, const char *served_name, char *buf, size_t cap);

typedef struct sb_probe_stats {
    uint64_t scrapes, scrape_errors, health_checks, health_failures, restarts;
    sb_probe_engine engine;
    sb_probe_models models;
    uint32_t interval_ms; /* current scrape interval */
    int last_status;      /* last scrape: HTTP status or negative libuv error */
    sb_ns last_scrape_ns;
} sb_probe_stats;

/* Starts probing every endpoint of every pool of cfg (the router's pools, same order).
 * Returns 0 and sets *out, or a negative libuv error. */
int sb_prober_start(uv_loop_t *loop, const sb_config *cfg, sb_router *router, sb_prober **out);
/* Stops every timer and request; frees once handles are closed. */
void sb_prober_stop(sb_prober *p);
const sb_probe_stats *sb_prober_stats(const sb_prober *p, uint32_t pool, uint32_t ep);
/* The synchronous probe (a pool's probe.sync_max_age_ms; off by default): a request about to
 * commit to endpoints whose reports are old asks for a scrape of each now and waits for them.
 * sb_prober_sync starts a scrape of each listed endpoint of `pool` (or joins the one in
 * flight) and calls cb(ud) exactly once: when every one has answered or failed, or at
 * timeout_ms, whichever comes first (never from inside sb_prober_sync). It returns NULL, and
 * never calls cb, when there is nothing to wait for: no listed endpoint can be scraped (probing
 * off, no address) or the last scrape of each failed (a hung /metrics must not cost every
 * request the timeout: the regular scrapes find out when it answers again), or when
 * SB_PROBE_MAX_WAITS waits are out already. sb_prober_sync_cancel (the client left) ends a wait
 * without calling cb. Stopping the prober calls cb of every wait still out. */
#define SB_PROBE_MAX_WAITS 1024
#define SB_PROBE_SYNC_MAX_EPS 8
typedef struct sb_probe_wait sb_probe_wait;
typedef void (*sb_probe_wait_cb)(void *ud);
sb_probe_wait *sb_prober_sync(sb_prober *p, uint32_t pool, const uint32_t *eps, size_t n, uint32_t timeout_ms,
                              sb_probe_wait_cb cb, void *ud);
void sb_prober_sync_cancel(sb_probe_wait *w);
/* Requests that waited for a synchronous probe, and waits that ended at their deadline. */
void sb_prober_sync_stats(const sb_prober *p, uint64_t *waits, uint64_t *timeouts);

/* After a reload with the same pools and endpoints: probe settings (intervals, paths,
 * timeouts, custom metric names) come from cfg from now on; cfg must outlive the prober or
 * the next reconfigure. */
void sb_prober_reconfigure(sb_prober *p, const sb_config *cfg);

#endif
