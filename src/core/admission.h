/* admission: flow control in front of scheduling, for every pool of a router, as one pure
 * module that the live gateway (net/admission.c) and replay (replay/driver.c) both drive.
 *
 * Per pool (core/flow.h holds the queues): a request whose pool has no available endpoint is
 * refused at once (503); otherwise, while the pool is saturated (the gate,
 * sb_router_pool_saturated with the flow config's gate thresholds), requests wait in bounded
 * queues by priority band and tenant, and are released strictly by band and round robin across
 * tenants as capacity returns. A full queue is refused (429), sheddable requests are refused
 * first (429), one that waited past its band's deadline is dropped (503), and a queued
 * sheddable request may be evicted for a higher band (429). Every refusal carries its status,
 * a reason token, a message and a Retry-After. A pool whose profile carries a buffer
 * (sb_profile.buffer_max_queued: paddler) uses its bounds, wait and statuses instead of the
 * flow config's, per pool.
 *
 * Driven by the caller with the request's descriptor (core/decide.h: pool, band, tenant, body
 * bytes): sb_admission_admit decides at arrival (dispatch now, wait, refused); a waiting
 * request is handed to sb_admission_enqueue with an opaque user pointer; later
 * calls of sb_admission_release (capacity freed) and sb_admission_tick (reports arrived,
 * deadlines passed) give that pointer back through the ops: dispatch (schedule it now, it was
 * released by the gate) or refuse (answer it with this refusal). A request whose client left
 * is taken out with sb_admission_remove.
 *
 * What it is not: it does not derive bands or tenants from headers or keys, does not answer
 * anyone, and has no timers: the caller decides when to release (the gateway on its adaptive
 * timer and when a request ends; replay on its virtual clock).
 *
 * Pure: no I/O, no clock (time is an argument). Not thread-safe: one owner. The router must
 * outlive the module. The ops may call back into the module except for release and tick,
 * which do nothing while a release is running (a request released can end at once, and its
 * end must not start a nested release: the outer loop goes on). */
#ifndef SB_CORE_ADMISSION_H
#define SB_CORE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/decide.h"
#include "core/flow.h"
#include "core/router.h"

/* Why a request is refused. */
enum sb_refusal {
    SB_REFUSE_NO_ENDPOINT = 0, /* 503: no endpoint of the pool is available */
    SB_REFUSE_SHED,            /* 429: sheddable, and the pool is saturated */
    SB_REFUSE_QUEUE_FULL,      /* 429: a queue bound */
    SB_REFUSE_QUEUE_TIMEOUT,   /* 503: waited past its deadline */
    SB_REFUSE_EVICTED,         /* 429: queued sheddable, evicted for a higher band */
};

typedef struct sb_admission_refusal {
    enum sb_refusal why;
    uint16_t status;        /* 429 or 503; a pool whose profile has a buffer (core/sched.h,
                               paddler) answers a full queue and a wait too long with the
                               profile's statuses (503 and 504) */
    const char *reason;     /* a token for headers and error codes: "no_healthy_endpoint", "shed",
                               "queue_full", "queue_timeout" (static) */
    const char *message;    /* a sentence for the error body (static) */
    uint32_t retry_after_s; /* >= 1 */
} sb_admission_refusal;

typedef struct sb_admission_ops {
    /* A queued request leaves the queue for scheduling now (released by the gate: schedule it
     * with the gate's thresholds, sb_sched_request.gated). Return false to stop the release
     * in progress (the caller failed beyond repair); what is still queued stays queued. */
    bool (*dispatch)(void *ctx, void *user);
    /* A queued request is dropped: expired or evicted. The module forgets user. */
    void (*refuse)(void *ctx, void *user, const sb_admission_refusal *r);
} sb_admission_ops;

typedef struct sb_admission sb_admission;

/* Flow control for pools 0..n_pools-1 of router, each with the flow config fc (copied; its
 * on_evict and evict_ctx are the module's own and ignored). ops is copied; ctx is passed to
 * it. Returns NULL on ENOMEM or when sb_flow_new refuses fc's bounds. */
sb_admission *sb_admission_new(sb_router *router, size_t n_pools, const sb_flow_config *fc,
                               const sb_admission_ops *ops, void *ctx);
/* Frees the queues; requests still queued are forgotten, their user pointers untouched (take
 * them first with sb_admission_take). NULL is fine. */
void sb_admission_free(sb_admission *a);

/* A configuration reload (sb_flow_reconfigure on every pool): 0, or -1 when a pool refused
 * its new bounds (that pool keeps its old ones; the others take theirs). */
int sb_admission_reconfigure(sb_admission *a, const sb_flow_config *fc);

/* The arrival decision for req (its pool and band; an out-of-range band counts as
 * sheddable, a pool out of range is refused as having no endpoint). */
enum { SB_ADMIT_DISPATCH = 0, SB_ADMIT_WAIT, SB_ADMIT_QUEUED, SB_ADMIT_REFUSED };
/* Returns SB_ADMIT_DISPATCH (schedule it now), SB_ADMIT_WAIT (call sb_admission_enqueue) or
 * SB_ADMIT_REFUSED with *out filled. Calls no op. */
int sb_admission_admit(sb_admission *a, const sb_request_desc *req, sb_ns now, sb_admission_refusal *out);
/* Fallbacks (a pool's `fallbacks:`, net/fallback.c): the first of pools[*cursor..n) that takes
 * a request of band now, that is one sb_admission_admit would dispatch at once. A fallback never
 * queues: the request was refused (or held, then dropped) once already, and waiting behind the
 * fallback's own queue would jump it or double the wait. a NULL (flow control off): the pool's
 * availability alone decides. skip (NULL: none) marks pools the caller cannot use. *cursor ends
 * past every pool examined, so across calls each pool is tried at most once. Returns an index
 * into pools, or -1 when none takes it. Calls no op; counts the request as admitted in the flow
 * statistics of the pool that takes it only (one passed over counts nothing: no shed). */
int sb_admission_fallback(sb_admission *a, sb_router *r, const uint32_t *pools, const bool *skip, size_t n,
                          size_t *cursor, enum sb_band band, sb_ns now);
/* Holds a request admit answered WAIT for, by its pool, band, tenant and body bytes, until
 * `user` comes back through the ops: SB_ADMIT_QUEUED (*handle set; handle may be NULL) or
 * SB_ADMIT_REFUSED (queue full: *out filled, nothing held). May refuse queued sheddable
 * requests through the ops (evictions) before returning QUEUED. */
int sb_admission_enqueue(sb_admission *a, const sb_request_desc *req, void *user, sb_ns now, sb_flow_handle *handle,
                         sb_admission_refusal *out);
/* Takes a queued request out at once (its client left): true if it was queued. */
bool sb_admission_remove(sb_admission *a, uint32_t pool, sb_flow_handle handle);

/* Re-examines one pool's queue: refuses what is past its deadline, then dispatches while the
 * gate sees room. Nothing when a release is already running. */
void sb_admission_release(sb_admission *a, uint32_t pool, sb_ns now);
/* sb_admission_release over every pool. */
void sb_admission_tick(sb_admission *a, sb_ns now);
/* Marks rr, a request pool's queue just released (from the dispatch op), the way every front
 * end schedules one: with the pool's profile in force now (adaptive weights move while it
 * waits), and gated: sent only where the gate saw room, with the gate's thresholds. */
void sb_admission_mark_released(const sb_admission *a, uint32_t pool, sb_sched_request *rr);

/* Takes the next queued request of pool regardless of capacity and deadlines (a shutdown or
 * flow control turned off), or NULL when none is left. It counts as dispatched at now, after
 * the wait it had (the queue statistics stay true if the module lives on). */
void *sb_admission_take(sb_admission *a, uint32_t pool, sb_ns now);

/* The refusal for `why` (the retry_after_s given, at least 1): the one table of statuses,
 * reasons and messages, also for callers that refuse without flow control. */
sb_admission_refusal sb_admission_refusal_of(enum sb_refusal why, uint32_t retry_after_s);

size_t sb_admission_pool_count(const sb_admission *a);
/* The pool's queues, for statistics (read only). */
const sb_flow *sb_admission_flow(const sb_admission *a, uint32_t pool);

#endif
