/* flow: admission, fair queueing and shedding in front of one pool's scheduler.
 *
 * While a pool is saturated, requests wait here instead of piling onto replicas that cannot
 * take them. Queues are kept per priority band (critical, standard, sheddable; band 0 is the
 * highest) and, within a band, per tenant. Its one caller is core/admission.h (the gate and
 * the refusals around these queues), which the gateway and the replay driver both drive, so
 * the policy below is the one replay measures.
 *
 * Policy, exactly:
 * - Admission (sb_flow_admit). A request goes straight to scheduling when the pool is not
 *   saturated and nothing is queued in its band or a higher one (it must not overtake a request
 *   that has been waiting with the same or a higher priority). Otherwise a sheddable request
 *   under saturation is refused outright (SHED); every other request is to be enqueued (WAIT).
 * - Bounds (sb_flow_enqueue). Each band has its own count and byte bound; a request that would
 *   pass either is refused (FULL), as is one whose band has a count bound of 0. The pool has a
 *   total count and byte bound over all bands. When a critical or standard request fits its
 *   band but not the total, queued sheddable requests are evicted, newest first (they have
 *   waited least, and a late burst pays for itself), until it fits; each eviction is reported
 *   through the config's on_evict callback before enqueue returns. Eviction happens only when
 *   evicting every queued sheddable request would make room; otherwise nothing is evicted and
 *   the request is refused (FULL). Sheddable requests never evict, and critical never evicts
 *   standard. Without an on_evict callback eviction is off (FULL instead).
 * - Dispatch (sb_flow_next). Strict priority by band: a lower band is served only when every
 *   higher band is empty. Within a band, round robin across tenants, one request per turn,
 *   each tenant its own FIFO; a tenant that starts queueing joins at the end of the current
 *   round. One tenant's burst therefore delays another tenant by at most one request per
 *   active tenant. Turns are per request, not per byte.
 * - Deadlines. An item's effective deadline is the earlier of its own deadline (0: none) and
 *   enqueue time + its band's max_wait_ns (0: none); with neither it never expires.
 *   sb_flow_expire removes every item whose deadline is <= now, earliest deadline first (ties
 *   in enqueue order). sb_flow_next does not look at deadlines: call sb_flow_expire first
 *   (sb_flow_next_deadline tells when the next one falls due).
 * - Tenants. A tenant is tracked while it has at least one request queued, up to max_tenants
 *   at a time. When a request arrives from a new tenant while max_tenants others are tracked,
 *   it is not refused: it joins one shared overflow tenant, which takes its turns like any
 *   other, so fairness among the overflowing tenants degrades to FIFO among themselves while
 *   the tracked ones keep theirs. Counted in sb_flow_stats.tenant_overflow.
 *
 * The caller (core/admission.c, one per pool):
 *     r = sb_flow_admit(f, saturated, band);
 *     DISPATCH -> schedule now; SHED -> 429; WAIT -> sb_flow_enqueue: FULL -> 429
 *     whenever capacity frees: sb_flow_expire(f, now, ...) -> 503 each;
 *                              while (!saturated && (u = sb_flow_next(f, now))) schedule(u);
 *     client gone while queued: sb_flow_remove(f, handle).
 *     Retry-After on 429 and 503: sb_flow_retry_after_s.
 *
 * What it is not: it does not decide saturation (the caller passes it), does not pick an
 * endpoint, does not derive bands or tenants from headers or keys, and does not answer
 * requests. It holds only the caller's opaque pointer and the byte count the caller declares.
 *
 * Memory: everything is allocated in sb_flow_new (nodes for the total count bound, a tenant
 * table for max_tenants), so no later call allocates or fails for lack of memory.
 * Cost: admit, enqueue (per eviction), next and remove are O(log n) (the deadline heap) or
 * better; expire is O(log n) per expired item; nothing scans the queue.
 * Pure: no I/O, no clock (time is an argument). Not thread-safe: one owner. Callbacks must not
 * call into the same sb_flow. */
#ifndef SB_CORE_FLOW_H
#define SB_CORE_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"
#include "base/time.h"

enum sb_band { SB_BAND_CRITICAL = 0, SB_BAND_STANDARD = 1, SB_BAND_SHEDDABLE = 2 };
#define SB_BAND_COUNT 3

/* Results. admit returns DISPATCH, WAIT or SHED; enqueue returns QUEUED or FULL; the drop
 * callbacks receive SHED (evicted) or EXPIRED. */
enum {
    SB_FLOW_DISPATCH = 0, /* admit: schedule it now */
    SB_FLOW_WAIT,         /* admit: enqueue it */
    SB_FLOW_QUEUED,       /* enqueue: held; the handle is valid */
    SB_FLOW_FULL,         /* refused: a count or byte bound; answer 429 with Retry-After */
    SB_FLOW_SHED,         /* refused or evicted: sheddable under pressure; answer 429 */
    SB_FLOW_EXPIRED,      /* dropped: waited past its deadline; answer 503 with Retry-After */
};

/* Reports an item leaving the queue without dispatch. user is the item's pointer; reason is
 * SB_FLOW_SHED or SB_FLOW_EXPIRED. Must not call into the same sb_flow. */
typedef void (*sb_flow_drop_fn)(void *ctx, void *user, enum sb_band band, int reason);

typedef struct sb_flow_band_config {
    uint32_t max_queued; /* requests queued in this band at most; 0: this band never queues */
    uint64_t max_bytes;  /* their declared bytes at most */
    sb_ns max_wait_ns;   /* default and longest queue wait; 0: no bound from the band */
} sb_flow_band_config;

typedef struct sb_flow_config {
    sb_flow_band_config band[SB_BAND_COUNT];
    uint32_t max_queued_total;  /* over all bands; 0: the sum of the bands' bounds */
    uint64_t max_bytes_total;   /* over all bands; 0: the sum of the bands' bounds */
    uint32_t max_tenants;       /* tracked at once; beyond it, the overflow tenant (above) */
    uint32_t max_retry_after_s; /* cap of sb_flow_retry_after_s; 0: 60 */
    sb_flow_drop_fn on_evict;   /* evictions (reason SB_FLOW_SHED); NULL turns eviction off */
    /* The gate the owner applies (core/router.h, sb_router_pool_saturated): requests queue
     * while every endpoint has more than gate_queue waiting or KV use above gate_kv.
     * Negative: the pool profile's saturation thresholds. Default 1 and the profile's KV:
     * lower than the saturation filter's 5, so a request released from the gateway finds at
     * most one ahead of it in an engine's FIFO queue, and bands stay strict where it counts
     * (docs/benchmarks.md section 3). */
    double gate_queue;
    double gate_kv;
    void *evict_ctx;
    /* Keys the tenant table's slots (base/hash.h): tenant keys are hashes of client headers.
     * Read by sb_flow_new only (reconfiguring keeps the table and its key). 0 is a valid but
     * guessable secret: the live gateway passes one drawn from the OS, replay one derived
     * from its seed. Placement only: no result depends on it. */
    uint64_t hash_secret;
} sb_flow_config;

/* Limits sb_flow_new accepts. */
#define SB_FLOW_MAX_QUEUED (1u << 24)
#define SB_FLOW_MAX_TENANTS (1u << 20)

/* A request to hold. The module copies these fields; user stays the caller's. */
typedef struct sb_flow_item {
    enum sb_band band; /* out of range is taken as sheddable */
    uint64_t tenant;   /* any key: a hash of the fairness header or the API key */
    uint64_t bytes;    /* what the caller holds for it (body size), for the byte bounds */
    sb_ns deadline;    /* absolute; 0: the band's max_wait_ns alone */
    void *user;
} sb_flow_item;

/* Names one queued item for sb_flow_remove. A handle outlives its item safely: once the item
 * has left the queue (dispatched, expired, evicted, removed) the handle matches nothing, even
 * after its slot is reused. A zeroed handle matches nothing. */
typedef struct sb_flow_handle {
    uint32_t slot, gen;
} sb_flow_handle;

typedef struct sb_flow sb_flow;

/* Defaults: critical 30 s, standard 10 s, sheddable 2 s of queue wait; 1024 requests and
 * 64 MiB per band, 2048 requests and 128 MiB in all; 1024 tenants; Retry-After up to 60 s.
 * Starting points, not measurements: the waits are round starting values; bookkeeping is
 * 76 bytes per queueable request and 88 per tenant (about 250 KiB per pool with these), the
 * bodies being the caller's. on_evict is NULL. */
void sb_flow_config_default(sb_flow_config *cfg);

/* A pool's flow control. The config is copied. Returns NULL on ENOMEM, or when a total bound
 * exceeds SB_FLOW_MAX_QUEUED or max_tenants exceeds SB_FLOW_MAX_TENANTS. */
sb_flow *sb_flow_new(const sb_flow_config *cfg);
/* Frees the queues. Items still queued are forgotten: their user pointers are not touched
 * (to answer them first, sb_flow_expire(f, UINT64_MAX, ...) drops every one). NULL is fine. */
void sb_flow_free(sb_flow *f);

/* A configuration reload: new band bounds and waits, totals and the Retry-After cap, in place.
 * Queued requests stay, with the deadlines they were given; a lower bound refuses what comes
 * next (nothing queued is dropped); a higher total grows the node pool. max_tenants, on_evict
 * and evict_ctx are kept from sb_flow_new. Returns 0, or -1 (ENOMEM, or a total over
 * SB_FLOW_MAX_QUEUED) with the configuration unchanged. */
int sb_flow_reconfigure(sb_flow *f, const sb_flow_config *cfg);

/* The admission decision above: SB_FLOW_DISPATCH, SB_FLOW_WAIT or SB_FLOW_SHED. DISPATCH and
 * SHED are counted (admitted, shed); WAIT counts nothing until enqueue. */
int sb_flow_admit(sb_flow *f, bool saturated, enum sb_band band);

/* Holds item from now. Returns SB_FLOW_QUEUED and fills *out (may be NULL), or SB_FLOW_FULL
 * (nothing queued, nothing evicted, *out untouched). May call on_evict before returning
 * QUEUED. Meant for requests admit answered WAIT; it applies only the bounds. */
int sb_flow_enqueue(sb_flow *f, const sb_flow_item *item, sb_ns now, sb_flow_handle *out);

/* The next request to schedule, removed from the queue, or NULL when nothing is queued. Call
 * it when the pool has capacity. The wait (now - enqueue time) feeds the band's wait figures
 * and the drain rate behind sb_flow_retry_after_s. */
void *sb_flow_next(sb_flow *f, sb_ns now);

/* Removes every item whose deadline is <= now, calling drop(ctx, user, band, SB_FLOW_EXPIRED)
 * for each in deadline order. Returns how many. drop must not be NULL. */
size_t sb_flow_expire(sb_flow *f, sb_ns now, sb_flow_drop_fn drop, void *ctx);

/* The earliest deadline queued, for arming a timer: true and *deadline set, or false when
 * nothing is queued. An item that never expires has deadline UINT64_MAX. */
bool sb_flow_next_deadline(const sb_flow *f, sb_ns *deadline);

/* Removes one queued item at once (its client went away): O(log n). Returns true if it was
 * queued; false if the handle matches nothing (it already left), and nothing changes. */
bool sb_flow_remove(sb_flow *f, sb_flow_handle h);

/* A suggested Retry-After in seconds, at least 1 and at most the config's cap. Estimate: the
 * requests that would be served before a newcomer of this band (queued in it and above), plus
 * one, over the recent drain rate, where the drain rate is the last 32 dispatches from the
 * queue over the time from the oldest of them to now (so a stalled pool's rate decays as time
 * passes). With no dispatch recorded yet: 1 s if nothing is ahead, else the band's max_wait
 * in seconds (1 if it has none). */
uint32_t sb_flow_retry_after_s(const sb_flow *f, enum sb_band band, sb_ns now);

typedef struct sb_flow_band_stats {
    /* now */
    uint32_t queued;
    uint64_t bytes;
    uint32_t tenants; /* tenants with a request queued in this band */
    /* totals since sb_flow_new; every request admit saw ends in exactly one of admitted,
     * shed, refused_full or queued, and every queued one in dispatched, expired, removed,
     * evicted or still queued */
    uint64_t admitted; /* dispatched at once by admit */
    uint64_t enqueued;
    uint64_t dispatched; /* from the queue by sb_flow_next */
    uint64_t refused_full;
    uint64_t shed;    /* refused by admit (sheddable under saturation) */
    uint64_t evicted; /* dropped from the queue to make room for a higher band */
    uint64_t expired;
    uint64_t removed;
    /* waits of the requests dispatched from the queue */
    uint64_t wait_sum_ns;
    uint64_t wait_max_ns;
} sb_flow_band_stats;

typedef struct sb_flow_stats {
    sb_flow_band_stats band[SB_BAND_COUNT];
    sb_flow_band_stats total; /* sums over the bands (wait_max_ns: the largest) */
    uint32_t tenants;         /* tracked tenants with anything queued (overflow excluded) */
    uint64_t tenant_overflow; /* requests queued under the shared overflow tenant */
    sb_table_probes tenant_probes; /* tenant table searches (enqueue, release) and their probes */
} sb_flow_stats;

void sb_flow_stats_get(const sb_flow *f, sb_flow_stats *out);

/* "critical", "standard", "sheddable" (ASCII case-insensitive, exact length n) to the band,
 * or -1. */
int sb_band_parse(const char *s, size_t n);
/* The band's name; "sheddable" for anything out of range. */
const char *sb_band_name(enum sb_band band);
/* A result's name for error bodies and headers: "dispatch", "wait", "queued", "queue_full",
 * "shed", "queue_timeout"; "unknown" otherwise. */
const char *sb_flow_result_name(int result);

#endif
