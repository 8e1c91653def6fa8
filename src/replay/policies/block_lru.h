/* block_lru: a table of block hashes in least-recently-used order, with pinning and an optional
 * fixed-size payload per entry, for the reference policies that keep their own picture of
 * cached blocks: kv_shadow.c (a per-replica model of an engine's prefix cache: blocks of running
 * requests are pinned, freed ones age in LRU order) and aibrix_prefix.c (AIBrix's global LRU
 * store of prompt blocks, each with the set of pods that were sent it).
 *
 * An entry is unpinned (on the LRU list, evictable) or pinned (reference count > 0, off the
 * list). The table has no capacity of its own: the owner evicts (sb_block_lru_evict_one) to
 * whatever bound its model has, because the two users bound different things (an engine's
 * blocks, pinned included; an index's entries).
 *
 * Not for: the gateway's prefix index (core/prefix_index.h), which is per endpoint and bounded
 * by reports. Pure, single owner; memory grows with use through base/alloc.h. */
#ifndef SB_REPLAY_POLICIES_BLOCK_LRU_H
#define SB_REPLAY_POLICIES_BLOCK_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SB_BLOCK_LRU_NONE UINT32_MAX

typedef struct sb_block_lru sb_block_lru;

/* A table whose entries each carry payload_words 64-bit words (0 for none), zeroed at
 * creation of the entry. Returns NULL on ENOMEM. */
sb_block_lru *sb_block_lru_new(size_t payload_words);
void sb_block_lru_free(sb_block_lru *t);

/* The entry of hash, or SB_BLOCK_LRU_NONE. Does not change the order. */
uint32_t sb_block_lru_find(const sb_block_lru *t, uint64_t hash);
/* The entry of hash, created (unpinned, most recently used, payload zeroed) if absent; *created
 * says which (may be NULL). SB_BLOCK_LRU_NONE on ENOMEM (nothing changed). An existing entry is
 * not moved: call sb_block_lru_touch. Entry ids stay valid until the entry is evicted. */
uint32_t sb_block_lru_get(sb_block_lru *t, uint64_t hash, bool *created);
/* Makes an unpinned entry the most recently used; no effect on a pinned one. */
void sb_block_lru_touch(sb_block_lru *t, uint32_t e);
/* Reference counting: a pinned entry leaves the LRU list; the last unpin puts it back as the
 * most recently used. Unpinning an unpinned entry does nothing. */
void sb_block_lru_pin(sb_block_lru *t, uint32_t e);
void sb_block_lru_unpin(sb_block_lru *t, uint32_t e);
uint32_t sb_block_lru_refs(const sb_block_lru *t, uint32_t e);
/* Removes the least recently used unpinned entry. Returns false if every entry is pinned. */
bool sb_block_lru_evict_one(sb_block_lru *t);

uint64_t *sb_block_lru_payload(sb_block_lru *t, uint32_t e);
size_t sb_block_lru_count(const sb_block_lru *t);  /* entries, pinned or not */
size_t sb_block_lru_pinned(const sb_block_lru *t); /* entries with refs > 0 */

#endif
