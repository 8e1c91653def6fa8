/* decisions: a bounded ring of the gateway's recent routing decisions, each found by its
 * request id, with how its request ended (GET /debug/decisions, net/admin.c).
 *
 * The proxy (net/proxy.c) and the endpoint picker (net/picker.c) record each request's
 * decision when it is dispatched: a copy into a preallocated slot (core/explain.h), no JSON
 * and no allocation per request; the admin page renders on read. The oldest record is
 * overwritten when the ring is full. When the request ends, its outcome (status, time to
 * first token, attempts, the endpoint that answered) is written into the same slot, found by
 * the slot number the record returned, not by a search; a generation number guards it, so an
 * outcome whose slot was reused meanwhile is dropped rather than written into another
 * request's record.
 *
 * The ring is reference-counted: the gateway holds one reference, and each recorded request
 * holds one until its outcome is written (sb_decisions_finish). A reload that resizes the ring
 * replaces it; requests still running finish on the old one, freed after the last. A record
 * copies every string it renders, so no reload or endpoint change can leave one pointing at
 * freed configuration.
 *
 * Not thread-safe: the event loop's. Pure except sb_decisions_clock_ms (the wall clock). */
#ifndef SB_NET_DECISIONS_H
#define SB_NET_DECISIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/explain.h"
#include "core/sched.h"
#include "net/exchange.h"

typedef struct sb_decisions sb_decisions;

/* A recorded request's handle on its slot. All zero: nothing recorded (no ring, or none). */
typedef struct sb_decision_ref {
    sb_decisions *ring; /* a reference, held until sb_decisions_finish */
    uint32_t slot;
    uint64_t seq; /* the record's generation: the slot's, while not reused */
} sb_decision_ref;

/* A ring of `capacity` records of at most max_cands candidates each (both >= 1), with one
 * reference for the caller. NULL on ENOMEM. Memory: capacity * sb_explain_size(max_cands),
 * allocated once, zeroed pages committed as they fill. */
sb_decisions *sb_decisions_new(size_t capacity, size_t max_cands);
void sb_decisions_hold(sb_decisions *r);
/* Drops a reference; the last frees the ring. NULL is ignored. */
void sb_decisions_release(sb_decisions *r);
size_t sb_decisions_capacity(const sb_decisions *r);
size_t sb_decisions_max_cands(const sb_decisions *r);

/* Copies d with the request's id and model (cut at core/explain.h's bounds) into the slot of
 * the oldest record, at_ms its time. Returns the handle, holding a reference on r for the
 * outcome; r NULL: a zero handle (nothing to finish). */
sb_decision_ref sb_decisions_record(sb_decisions *r, const sb_decision *d, const char *id, const char *model,
                                    int64_t at_ms);

/* The request ended: its outcome goes into its record if the slot still holds it (dropped
 * otherwise), and the handle's reference is released. ttft_ms < 0: none; served_by NULL or
 * "": never answered by an endpoint. A zero handle is ignored; ref is zeroed after. */
void sb_decisions_finish(sb_decision_ref *ref, int status, double ttft_ms, uint32_t attempts, const char *served_by);

/* Marks the record as a fallback's decision: the request asked for pool `from` and left it
 * for `reason` (static). Nothing when the slot was reused or the handle is zero. */
void sb_decisions_fallback(const sb_decision_ref *ref, const char *from, const char *reason);

/* Releases the handle's reference without an outcome (the record keeps outcome null). A zero
 * handle is ignored; ref is zeroed after. */
void sb_decisions_drop(sb_decision_ref *ref);

/* A finished request's time to first token in ms, as the access log's ttft_ms (its first
 * content event for a stream, else its first body byte), or -1 when none came. */
double sb_decisions_ttft_ms(const sb_exchange_log *log);

/* Records held, at most capacity. */
size_t sb_decisions_count(const sb_decisions *r);
/* The k-th newest record (0: the newest), NULL for k >= count. Valid until the next record. */
const sb_explain *sb_decisions_newest(const sb_decisions *r, size_t k);
/* The newest record of request id (len bytes), NULL when unknown or overwritten since. A scan
 * newest first, O(capacity): an operator's look-up, never on the request path. */
const sb_explain *sb_decisions_find(const sb_decisions *r, const char *id, size_t len);

/* GET /debug/decisions's query: `id=<request id>` alone, or any of `pool=<name>` and
 * `limit=<n>`, n >= 1, clamped to max_limit (default SB_DECISIONS_DEFAULT_LIMIT, or max_limit
 * when smaller).
 * Values are percent-decoded ('+' is a space). */
#define SB_DECISIONS_DEFAULT_LIMIT 100
typedef struct sb_decisions_query {
    char id[SB_EXPLAIN_ID_MAX + 1];
    size_t id_len; /* 0: no id asked */
    char pool[SB_EXPLAIN_NAME_MAX];
    bool has_pool;
    size_t limit;
} sb_decisions_query;

/* Parses the query string q[0..len) (after the '?'; empty: the defaults), strictly: an unknown
 * or repeated parameter, one without '=' or a value, a bad escape, a NUL, a value longer than
 * its field, a limit that is not a positive integer, or id with another parameter is refused
 * (a limit past max_limit is not: it is clamped, out->limit <= max_limit). Returns 0,
 * or -1 with a message in err[cap]. Linear in len, no allocation. */
int sb_decisions_query_parse(const char *q, size_t len, size_t max_limit, sb_decisions_query *out, char *err,
                             size_t cap);

/* Unix time in ms, for at_ms. */
int64_t sb_decisions_clock_ms(void);

#endif
