/* event_queue: the discrete-event driver's priority queue of timed events.
 *
 * A binary min-heap ordered by (time, sequence number): the sequence number is assigned at push
 * and grows by one per push, so events due at the same instant pop in the order they were
 * pushed. That stable tie-break is what makes a replay bit-for-bit repeatable; a heap alone
 * would pop equal keys in an order that depends on its history. Not for: cancellation (the
 * driver keeps at most one live event per source and ignores nothing), or thread safety.
 *
 * Push and pop are O(log n); memory grows by doubling through base/alloc.h and is kept. */
#ifndef SB_REPLAY_EVENT_QUEUE_H
#define SB_REPLAY_EVENT_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

typedef struct sb_replay_event {
    sb_ns time_ns;
    uint64_t seq;  /* assigned by push */
    uint32_t kind; /* the driver's event kinds */
    uint32_t a;    /* kind-specific: a replica, ... */
    uint64_t b;    /* kind-specific: a request index, ... */
} sb_replay_event;

/* Caller-embedded; zero-initialised is an empty queue. Fields are private. */
typedef struct sb_replay_queue {
    sb_replay_event *heap;
    size_t n, cap;
    uint64_t next_seq;
} sb_replay_queue;

/* Adds an event (its seq is overwritten). Returns 0, or -ENOMEM with the queue unchanged. */
int sb_replay_queue_push(sb_replay_queue *q, sb_ns time_ns, uint32_t kind, uint32_t a, uint64_t b);
/* The earliest event, or NULL if empty; valid until the next push or pop. */
const sb_replay_event *sb_replay_queue_peek(const sb_replay_queue *q);
/* Removes the earliest event into *out; false if empty. */
bool sb_replay_queue_pop(sb_replay_queue *q, sb_replay_event *out);
static inline size_t sb_replay_queue_len(const sb_replay_queue *q)
{
    return q->n;
}
/* Frees the storage; the queue is empty and reusable afterwards. */
void sb_replay_queue_free(sb_replay_queue *q);

#endif
