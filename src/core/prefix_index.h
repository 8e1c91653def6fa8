/* prefix_index: the router's approximate picture of what each endpoint's KV cache holds.
 *
 * Keys are the chained block hashes of a request's canonical prompt (proto/prompt.h: block
 * i's hash covers blocks 0..i and the model and adapter), so holding block i means holding the
 * whole prefix up to it. One table maps a block hash to the endpoints believed to hold it;
 * each endpoint keeps its entries in an LRU list bounded by a capacity derived from what its
 * engine reports (num_gpu_blocks x block_size tokens, converted to index blocks) or set by the
 * owner, so the index never claims more than the engine can keep. A global bound on entries
 * caps memory whatever the engines say.
 *
 * Recording: the blocks of a routed request are inserted for the chosen endpoint tail first,
 * so the prompt's head is the most recently used and the last to be evicted (engines evict
 * their LRU blocks, and a shared head is reused most).
 * Lookup: one walk over the request's hashes yields, per endpoint, the number of leading
 * blocks it holds. Cost: O(blocks walked x holders per block), independent of the number of
 * endpoints that hold nothing; the walk stops at the first block nobody holds.
 *
 * Slots are keyed (base/hash.h): a block hash is a public function of the prompt and the
 * model name, so with a fixed slot function prompts could be ground offline to share one home
 * slot and make every insert and lookup walk a long probe run. With the owner's secret mixed
 * in, placement cannot be predicted; the secret changes where keys sit, never what any call
 * returns.
 *
 * Ageing: entries carry the owner's clock (a 32-bit stamp, set by sb_prefix_index_set_clock;
 * 0 unless the owner sets it) from their last insert or refresh, so an owner that has a better
 * source for older knowledge (an endpoint whose engine reports its cache: core/kv_index.h)
 * can keep only the recent entries (sb_prefix_index_expire).
 *
 * Memory: 32 bytes per (block, endpoint) entry, plus the hash table (12 bytes per slot, at
 * most 50% full). Pure: no I/O, no clock. Not thread-safe: one owner. */
#ifndef SB_CORE_PREFIX_INDEX_H
#define SB_CORE_PREFIX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

typedef struct sb_prefix_index sb_prefix_index;

/* n_endpoints endpoints (ids 0..n-1), each starting with default_capacity blocks; at most
 * max_entries entries in all; table slots keyed by hash_secret (the live gateway passes a
 * secret drawn from the OS, replay one derived from its seed). Returns NULL on ENOMEM.
 * Memory grows with use. */
sb_prefix_index *sb_prefix_index_new(uint32_t n_endpoints, size_t max_entries, uint32_t default_capacity,
                                     uint64_t hash_secret);
void sb_prefix_index_free(sb_prefix_index *ix);

/* Sets an endpoint's capacity in blocks; entries beyond it are evicted (LRU first). */
void sb_prefix_index_set_capacity(sb_prefix_index *ix, uint32_t ep, uint32_t blocks);
uint32_t sb_prefix_index_capacity(const sb_prefix_index *ix, uint32_t ep);

/* Records that ep now holds hashes[0..n): inserted or refreshed tail first. An endpoint with
 * capacity 0 records nothing. Cannot fail: when memory cannot grow, the least recently used
 * entries are evicted instead. */
void sb_prefix_index_insert(sb_prefix_index *ix, uint32_t ep, const uint64_t *hashes, size_t n);

/* The same, for a request just sent to ep: the blocks it adds are *pending* (the engine has
 * not computed them yet, so a request sent there meanwhile would compute them again) and do
 * not match until settled. Returns true and the hash to settle with if it added any. */
bool sb_prefix_index_insert_pending(sb_prefix_index *ix, uint32_t ep, const uint64_t *hashes, size_t n,
                                    uint64_t *pending_hash);
/* The request that added pending_hash on ep got its first token (computed: the blocks now
 * match) or failed before it (not computed: the blocks it added are forgotten). A hash that is
 * gone or no longer pending is ignored. */
void sb_prefix_index_settle(sb_prefix_index *ix, uint32_t ep, uint64_t pending_hash, bool computed);
/* Settles every pending entry as computed (their requests can no longer settle them). */
void sb_prefix_index_settle_all(sb_prefix_index *ix);

/* For each endpoint e, match[e] = the number of leading blocks of hashes[0..n) it holds
 * (match has n_endpoints entries). Returns the largest value. */
size_t sb_prefix_index_match(sb_prefix_index *ix, const uint64_t *hashes, size_t n, uint32_t *match);

/* Forgets everything an endpoint holds (it left, restarted or was reported cleared). */
/* Renumbers the endpoints after a membership change: old endpoint e becomes map[e] (an index
 * below n_new, each used at most once) with its entries, LRU order and capacity; one mapped to
 * -1 is forgotten; new endpoints no old one maps to start empty with default_capacity. O(n +
 * entries). 0, or -1 on ENOMEM with the index unchanged. */
int sb_prefix_index_remap(sb_prefix_index *ix, const int32_t *map, uint32_t n_new, uint32_t default_capacity);
void sb_prefix_index_clear_endpoint(sb_prefix_index *ix, uint32_t ep);

/* The stamp given to entries inserted or refreshed from now on. Stamps compare by wrapping
 * difference: the owner keeps the clock non-decreasing and ages under 2^31. */
void sb_prefix_index_set_clock(sb_prefix_index *ix, uint32_t stamp);
/* Forgets ep's entries last inserted or refreshed with a stamp before `before` (pending ones
 * too: their settle is then ignored). Returns how many; O(that). */
size_t sb_prefix_index_expire(sb_prefix_index *ix, uint32_t ep, uint32_t before);
/* Entries forgotten by sb_prefix_index_expire so far (not counted as evictions). */
uint64_t sb_prefix_index_expired(const sb_prefix_index *ix);

size_t sb_prefix_index_entries(const sb_prefix_index *ix);
size_t sb_prefix_index_endpoint_entries(const sb_prefix_index *ix, uint32_t ep);
/* Pending marks on ep: requests sent there whose prompt is not known computed yet. */
size_t sb_prefix_index_endpoint_pending(const sb_prefix_index *ix, uint32_t ep);
/* Bytes held by the index (entries, table, per-endpoint state). */
size_t sb_prefix_index_bytes(const sb_prefix_index *ix);
/* Entries evicted so far (capacity or memory bound). */
uint64_t sb_prefix_index_evictions(const sb_prefix_index *ix);
/* Table searches made by inserts, lookups, settles and removals so far, and their probe
 * lengths (the only figures that depend on the secret). */
sb_table_probes sb_prefix_index_probes(const sb_prefix_index *ix);
/* Keyed hashes of block hashes computed so far. Matches remember them by block position and
 * reuse them while the same block hash comes back at the same position (a shared prefix), and
 * an insert after a match reuses that match's: a repeated prompt costs none. */
uint64_t sb_prefix_index_hashes(const sb_prefix_index *ix);

#endif
