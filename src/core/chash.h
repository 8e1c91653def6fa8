/* chash: a consistent-hash ring with bounded loads, for the stateless affinity policies
 * (session hashing, prefix hashing; core/scorers/session.c).
 *
 * Each endpoint owns `vnodes` points on a 64-bit ring; a key belongs to the endpoint of the
 * first point at or after it, clockwise. A point is derived from the endpoint's identity string
 * (its address), never from its position in the pool, so building the ring from the same ids in
 * any order gives the same owners, and adding or removing one endpoint moves only the keys that
 * endpoint gains or loses (about 1/n of them). Gateway replicas built from the same ids agree on
 * every owner without sharing state.
 *
 * Bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads",
 * SODA 2018; HAProxy's hash-balance-factor, KubeAI's prefix hash): an endpoint may take one
 * more request only while load + 1 <= ceil(c * (total + 1) / m), where total is the load of
 * the m eligible endpoints and c >= 1 is the load factor. The walk goes clockwise from the key
 * to the first eligible endpoint under that bound, so a hot key stays on its owner until the
 * owner holds c times the average, then spills to the next endpoints on the ring, in an order
 * every replica agrees on. With c >= 1 some eligible endpoint is always under the bound.
 *
 * What it is not: it knows nothing of what an engine caches (that is the prefix index), and
 * it does not track load; the caller passes the loads it already keeps.
 *
 * Immutable once built: allocation only in sb_chash_new, look-ups are pure and allocation-free,
 * safe from any number of readers. Rebuild (new + free) when the pool's ids change. */
#ifndef SB_CORE_CHASH_H
#define SB_CORE_CHASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* HAProxy's default: 256 points per endpoint keep each endpoint's share of
 * the keys within about 1/sqrt(256) = 6% (one standard deviation) of fair. */
#define SB_CHASH_DEFAULT_VNODES 256
/* The paper's and HAProxy's usual setting (hash-balance-factor 125). */
#define SB_CHASH_DEFAULT_LOAD_FACTOR 1.25
/* Bounds the ring (n * vnodes points) and the callers' per-endpoint bitmaps. */
#define SB_CHASH_MAX_ENDPOINTS 65536u
#define SB_CHASH_MAX_VNODES 4096u

typedef struct sb_chash sb_chash;

/* Builds a ring of n endpoints: endpoint i (the index every look-up returns) has identity
 * ids[i], a NUL-terminated string that should be unique in the pool (duplicates share points
 * and split their keys arbitrarily). The strings are only read during the call. vnodes 0 means
 * SB_CHASH_DEFAULT_VNODES. n may be 0 (every look-up then returns -1). Returns NULL on ENOMEM,
 * or when n > SB_CHASH_MAX_ENDPOINTS or vnodes > SB_CHASH_MAX_VNODES. */
sb_chash *sb_chash_new(const char *const *ids, size_t n, uint32_t vnodes);
void sb_chash_free(sb_chash *ring);

/* The n and vnodes it was built with. */
size_t sb_chash_endpoint_count(const sb_chash *ring);
uint32_t sb_chash_vnodes(const sb_chash *ring);

/* The unbounded owner of key: the endpoint of the first point clockwise, -1 if the ring is
 * empty. Keys are remixed first, so they need not be uniform (small integers are fine). */
int sb_chash_owner(const sb_chash *ring, uint64_t key);

/* The bounded-load pick. eligible[i] and load[i] describe endpoint i for i < n; n should be
 * the ring's endpoint count (endpoints at or past n are ineligible). c below 1 is taken as 1.
 * Returns the endpoint taking the request, or -1 if no endpoint is eligible. O(n) to total the
 * loads, then a walk of the ring that stops at the first admissible point. */
int sb_chash_pick(const sb_chash *ring, uint64_t key, const bool *eligible, const uint32_t *load, size_t n, double c);

/* The two halves of sb_chash_pick, for callers that already hold the candidates in another
 * shape (the scorers): the bound, and the walk over an admissibility bitmap.
 *
 * sb_chash_load_bound: ceil(c * (total + 1) / m), in exact integer arithmetic (c is rounded to
 * thousandths), for m eligible endpoints whose loads sum to total; 0 when m is 0.
 * sb_chash_first: the first endpoint clockwise from key whose bit is set in allowed (bit i of
 * word i / 64, for i < the ring's endpoint count); -1 if no bit is set. */
uint64_t sb_chash_load_bound(uint64_t total, size_t m, double c);
int sb_chash_first(const sb_chash *ring, uint64_t key, const uint64_t *allowed);

#endif
