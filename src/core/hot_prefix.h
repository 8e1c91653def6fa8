/* hot_prefix: which leading run of a prompt's blocks is in demand beyond what one endpoint
 * can serve, so that its cached copy should exist on several endpoints.
 *
 * Why: one prefix shared by most of a pool's traffic (a system prompt every conversation
 * starts with) sits on the one endpoint that first computed it, and the prefix scorer's credit
 * for it outweighs every load scorer (those are normalised per pick and bounded by their
 * weights): new conversations all go there and no second endpoint ever gets it. With the
 * engines' KV events every gateway replica sees that one holder (docs/benchmarks.md section
 * 10, session 36: all 800 requests of a multi-turn run on one replica of eight). The remedy is
 * to know the prefix is hot: its demand, in requests, is over its fair share of the pool's
 * (pool requests / endpoints), so it needs `demand / fair share` holders. Demand that only
 * continues this request's own chain does not count (see sb_hot_prefix_observe): the turns
 * of one conversation come one after another and never need two holders at once.
 *
 * How: a fixed table of decayed request counts (time constant HOT_TAU) keyed by the chained
 * block hash at a ladder of prefix lengths (1, 2, 3, 4, 6, 8, 12, 16, ...: two per octave), so
 * a request costs about 2 log2(blocks) probes, not one per block. The hot run is the longest
 * ladder length found hot (sb_hot_prefix_observe); its resolution is that of the ladder (a
 * 62-block system prompt is found hot up to 48 blocks). Memory is bounded by the table (slots
 * x 16 bytes); a full probe window replaces its least-demanded slot. Pure: the caller passes
 * `now`. */
#ifndef SB_CORE_HOT_PREFIX_H
#define SB_CORE_HOT_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

typedef struct sb_hot_prefix sb_hot_prefix;

/* slots is rounded up to a power of two (at least 64); secret keys the slots' placement
 * (block hashes come from client text, their table positions must not). NULL when out of
 * memory. */
sb_hot_prefix *sb_hot_prefix_new(size_t slots, uint64_t secret);
void sb_hot_prefix_free(sb_hot_prefix *h);
/* Counts one request whose prompt has the n chained block hashes, at now, in a pool of
 * n_endpoints. Returns the hot run's length in blocks (0: none): the longest ladder length,
 * asked for at least 4 times in a pool asked at least 4 times per endpoint, whose branching
 * demand (its count less that of this request's next ladder length: the requests that share
 * the run but not this request's continuation of it) is at least share x the pool's demand /
 * n_endpoints; *needed is then that length's whole demand over the fair share (the holders
 * it needs). */
size_t sb_hot_prefix_observe(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints,
                             double share, double *needed);
/* The same answer without counting the request: for a request an earlier pick already counted
 * (the decision after a synchronous probe), which is one request's demand, not two. Writes
 * nothing. */
size_t sb_hot_prefix_peek(sb_hot_prefix *h, const uint64_t *hashes, size_t n, sb_ns now, size_t n_endpoints,
                          double share, double *needed);
/* The ladder's next length after len (1, 2, 3, 4, 6, 8, 12, 16, ...; for a len off the ladder,
 * len plus its step). A hot run of len blocks may be shared up to just before this length (the
 * ladder's resolution); a match reaching it extends past what the hot counts saw shared. */
size_t sb_hot_prefix_next_length(size_t len);
/* Bytes held (for /metrics-style accounting and tests). */
size_t sb_hot_prefix_bytes(const sb_hot_prefix *h);

#endif
