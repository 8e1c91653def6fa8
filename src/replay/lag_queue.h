/* lag_queue: updates that become visible a fixed time after they happen. A bounded FIFO of
 * timestamped records (a kind, an id, a payload copied in); advancing the clock hands every
 * record older than the lag to an apply callback, in the order they were pushed.
 *
 * Why: a router fed by KV-cache events hears of a block some time after the engine stored or
 * evicted it (vLLM publishes a step's events when the step ends; the transport adds its own).
 * Replay's exact-cache references (policies/kv_shadow.h) would otherwise see every change at
 * once. Whatever index sits behind the callback (the references' shadow today; the product's
 * precise index, core/kv_index.h, fed by the simulated engine's event hook, later) sees the
 * world as it was lag_ns ago, and nothing in the index has to know about the lag.
 *
 * Bounded: at most max_records records and max_bytes of payload wait. A push that would pass
 * either bound first applies the oldest records early (counted in sb_lag_queue_early): the view
 * runs ahead rather than loses an update, since a lost removal would leave the index believing
 * forever in a block that is gone. With lag 0 a push is applied at once and nothing is kept.
 *
 * Pure (time is an argument), single owner; O(1) amortised per record plus the payload copy. */
#ifndef SB_REPLAY_LAG_QUEUE_H
#define SB_REPLAY_LAG_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

typedef struct sb_lag_queue sb_lag_queue;

/* Called with each record when it becomes visible. payload is valid during the call only. */
typedef void (*sb_lag_apply_fn)(void *ctx, uint32_t kind, uint64_t id, const void *payload, size_t len);

/* A queue delaying records by lag_ns; bounds of 0 take the defaults (65,536 records, 64 MiB).
 * apply(ctx, ...) receives them. NULL on ENOMEM. */
sb_lag_queue *sb_lag_queue_new(sb_ns lag_ns, size_t max_records, size_t max_bytes, sb_lag_apply_fn apply, void *ctx);
void sb_lag_queue_free(sb_lag_queue *q);

/* Records an update that happened at now (now never goes back between calls). With a zero lag
 * it is applied before this returns. Returns 0, or -ENOMEM (the update is applied at once
 * rather than lost). */
int sb_lag_queue_push(sb_lag_queue *q, sb_ns now, uint32_t kind, uint64_t id, const void *payload, size_t len);

/* Applies, in push order, every record pushed at or before now - lag. */
void sb_lag_queue_advance(sb_lag_queue *q, sb_ns now);

size_t sb_lag_queue_len(const sb_lag_queue *q);
/* Records applied before their time because a bound was reached (or memory ran out). */
uint64_t sb_lag_queue_early(const sb_lag_queue *q);
sb_ns sb_lag_queue_lag(const sb_lag_queue *q);

#endif
