/* kv_index: the precise index, what each endpoint's engine *reported* its KV cache holds,
 * built from the engines' KV-cache events (vLLM's and SGLang's BlockStored, BlockRemoved,
 * AllBlocksCleared), as opposed to core/prefix_index.h, which infers it from the router's own
 * routing.
 *
 * Keys. An engine's block hash cannot be recomputed outside the engine (vLLM hashes with a
 * pickle-based SHA-256 whose chain seed was random per process until 2026-08), so, as llm-d
 * and Dynamo do, the index keeps its *own* block keys, computed from the token ids a
 * BlockStored carries, and a per-endpoint map from engine hash to own key for BlockRemoved and
 * for the parent of the next BlockStored. Own keys are chained XXH3-64 over engine blocks:
 *   root      = XXH3_64(extra as 8 little-endian bytes, seed)
 *   key[i]    = XXH3_64(token ids of block i as 4-byte little-endian words, seed = key[i-1])
 * with key[-1] = root. `seed` is the index's content seed (equal across gateway replicas, so
 * they agree); `extra` names the LoRA adapter (0 for the base model) and enters at the root,
 * so an adapter's chain never meets the base model's. A request's token ids (from the
 * engine's /tokenize) give the same keys through sb_kv_keys_from_tokens, and
 * sb_kv_index_match walks them.
 *
 * Blocks are *engine* blocks (block_size tokens, 16 by default in vLLM), not the gateway's
 * 64-byte text blocks: the index has one block size (configured) and refuses, and counts,
 * events of another size (a block-size mismatch is a known cause of silent 0% hit rates).
 *
 * Rules for what the engines send (each counted per endpoint, see sb_kv_index_ep_stats):
 * - Parent unknown on this endpoint (evicted here at the memory bound, stored before we
 *   subscribed, or lost in a gap): the event is dropped. Its blocks' own keys depend on the
 *   parent's, which we do not know, so they could never be reached by a match (matches walk
 *   from the root); recording them would only take memory. llm-d instead hashes them from the
 *   root ("orphaned sequence"), which files them under keys that describe a different prefix.
 *   Their children miss in turn and are dropped too; a BlockRemoved for them counts as unknown.
 * - Tier moves: only GPU presence is indexed (what makes a request's prefill cheap). A
 *   BlockStored for another medium (CPU offload), or one without token ids (a move between
 *   tiers), and a BlockRemoved for another medium are ignored and counted: a block leaving the
 *   CPU tier does not leave the GPU.
 * - A BlockStored for an engine hash the endpoint already holds refreshes it; if its tokens
 *   now give another own key, the newer report wins.
 * - Two engine hashes may give one own key (a cache salt or multimodal extra keys the index
 *   does not see): each is its own entry, and the block stays held until the last is removed.
 *
 * Memory: at most max_entries (block, endpoint) entries (config; default below), the stale
 * ones a clear leaves to be freed lazily included (sb_kv_index_clear). At the bound
 * an entry is evicted from an endpoint holding at least its fair share (max / endpoints),
 * chosen round-robin, from its least recently stored end, with a second chance for entries a
 * match has used since (CLOCK): an engine never re-reports a block it keeps, so pure
 * store-order LRU would evict a hot shared system prompt first. An evicted entry only makes the
 * index forget a block the engine still holds (a miss, never a false hit). Measured size per
 * entry: bench/bench_kv_index.c (a 40-byte entry plus two table slots).
 *
 * Slots are keyed (base/hash.h): own keys are public functions of token ids and engine hashes
 * of prompts, so both tables place them under the owner's secret; results never depend on it.
 *
 * Pure: no I/O, no clock. Not thread-safe: one owner. */
#ifndef SB_CORE_KV_INDEX_H
#define SB_CORE_KV_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

/* 1 Mi entries: 65-88 MiB at the measured size (bench/bench_kv_index.c); 64 endpoints of a
 * 16k-block cache each. */
#define SB_KV_INDEX_DEFAULT_MAX_ENTRIES ((size_t)1 << 20)
/* vLLM's default block size (vllm/config/cache.py). */
#define SB_KV_INDEX_DEFAULT_BLOCK_SIZE 16
/* Larger engine blocks are refused as malformed (vLLM's largest is 256 tokens). */
#define SB_KV_INDEX_MAX_BLOCK_SIZE 4096

/* The content seed the gateway keys its blocks with: fixed, so that gateway replicas (and
 * replay) agree on every key. */
#define SB_KV_KEY_SEED 0x6b765f6b65797331ULL

/* The `extra` of a chain (sb_kv_key_root) for a LoRA adapter named name[0..len); 0 for the
 * base model (name NULL). Engines name adapters in events (lora_name) as clients do. */
uint64_t sb_kv_extra_of_adapter(const char *name, size_t len);

typedef struct sb_kv_index sb_kv_index;

typedef struct sb_kv_index_config {
    uint32_t n_endpoints; /* endpoint ids 0..n-1 */
    size_t max_entries;   /* 0: SB_KV_INDEX_DEFAULT_MAX_ENTRIES; capped below 2^32 - 1 */
    uint32_t block_size;  /* engine block size in tokens; 0: 16 */
    uint64_t key_seed;    /* content seed of own keys: equal in every gateway replica */
    uint64_t hash_secret; /* slot placement only (the gateway's per-process secret) */
} sb_kv_index_config;

/* Own keys, pure. The root key of a chain for adapter `extra`. */
uint64_t sb_kv_key_root(uint64_t seed, uint64_t extra);
/* Keys of n_blocks full blocks of tokens (n_blocks * block_size ids) chained from parent_key
 * into out[0..n_blocks). */
void sb_kv_keys_chain(uint64_t parent_key, const uint32_t *tokens, size_t n_blocks, uint32_t block_size, uint64_t *out);
/* The keys of a request's token ids, as BlockStored events for them would be keyed: one per
 * full block (a trailing partial block has none, as engines cache full blocks only). out has
 * room for n_tokens / block_size keys; returns that count (0 if block_size is 0). */
size_t sb_kv_keys_from_tokens(uint64_t seed, const uint32_t *tokens, size_t n_tokens, uint32_t block_size,
                              uint64_t extra, uint64_t *out_keys);

/* Returns NULL on ENOMEM (or n_endpoints == 0 or above 2^31 - 1). */
sb_kv_index *sb_kv_index_new(const sb_kv_index_config *cfg);
void sb_kv_index_free(sb_kv_index *ix);

/* One BlockStored, in plain arrays (the decoder's types stay out of core). */
typedef struct sb_kv_stored {
    const uint64_t *engine_hashes; /* n engine hashes, 64-bit (32-byte forms folded by the decoder) */
    size_t n;
    bool has_parent; /* parent_block_hash present and not nil */
    uint64_t parent_engine_hash;
    const uint32_t *token_ids; /* n_tokens ids: n * block_size, or 0 for a tier move */
    size_t n_tokens;
    uint32_t block_size; /* the event's; must equal the index's */
    uint64_t extra;      /* adapter key for a root chain (ignored when has_parent) */
    bool other_medium;   /* medium present and not "GPU" */
} sb_kv_stored;

typedef enum sb_kv_status {
    SB_KV_OK = 0,
    SB_KV_TIER_MOVE = 1,           /* ignored: another medium, or no token ids */
    SB_KV_PARENT_MISS = 2,         /* dropped: parent unknown on this endpoint */
    SB_KV_BLOCK_SIZE_MISMATCH = 3, /* dropped: the event's block size is not the index's */
    SB_KV_MALFORMED = 4,           /* dropped: token count is not n * block_size, or n == 0 */
    SB_KV_BAD_ENDPOINT = 5,        /* ep out of range: nothing counted */
} sb_kv_status;

/* Records ev for ep (see the rules above). Cannot fail for memory: at the bound, entries are
 * evicted; if even that is impossible the rest of the event is dropped (counted as evictions).
 * Cost: O(n) table operations plus one XXH3 per block. */
sb_kv_status sb_kv_index_block_stored(sb_kv_index *ix, uint32_t ep, const sb_kv_stored *ev);

/* BlockRemoved: forgets each of the n engine hashes on ep; hashes ep does not hold are
 * counted as unknown removes. other_medium: ignored (a tier move, counted). */
sb_kv_status sb_kv_index_block_removed(sb_kv_index *ix, uint32_t ep, const uint64_t *engine_hashes, size_t n,
                                       bool other_medium);

/* AllBlocksCleared, an engine restart, or a gap in the event stream: ep holds nothing now.
 * O(1) whatever ep held: its entries become stale (never matched, never a parent) and are
 * freed a few per later stored block, first at the memory bound, and up to 1024 at once here. */
void sb_kv_index_clear(sb_kv_index *ix, uint32_t ep);

/* For each endpoint e, match[e] = the number of leading keys of own_keys[0..n) e holds
 * (match has n_endpoints entries). One walk, stopping at the first key nobody still matching
 * holds; O(blocks x endpoints still matching), a block's holder list walked only when an
 * endpoint's next block is not in the entry after its last. Marks the entries it used as
 * recently used. Returns the largest value. */
size_t sb_kv_index_match(sb_kv_index *ix, const uint64_t *own_keys, size_t n, uint32_t *match);

/* The index's block size and content seed (for sb_kv_keys_from_tokens). */
uint32_t sb_kv_index_block_size(const sb_kv_index *ix);
uint64_t sb_kv_index_key_seed(const sb_kv_index *ix);

/* Per-endpoint figures for /metrics and /debug/endpoints. Counters only grow. */
typedef struct sb_kv_index_ep_stats {
    uint64_t blocks;          /* entries held now */
    uint64_t stored;          /* blocks recorded by BlockStored (refreshes included) */
    uint64_t removed;         /* blocks forgotten by BlockRemoved */
    uint64_t unknown_removes; /* BlockRemoved hashes not held */
    uint64_t parent_misses;   /* BlockStored events dropped: parent unknown */
    uint64_t clears;          /* sb_kv_index_clear calls */
    uint64_t tier_moves;      /* events ignored: other medium or no token ids */
    uint64_t block_size_mismatches;
    uint64_t malformed; /* events refused: token count or empty */
    uint64_t evictions; /* entries dropped at the memory bound */
    uint64_t stale;     /* entries from before the last clear not yet freed (in memory, not held) */
} sb_kv_index_ep_stats;

/* Zeros for an ep out of range. */
sb_kv_index_ep_stats sb_kv_index_stats(const sb_kv_index *ix, uint32_t ep);
size_t sb_kv_index_entries(const sb_kv_index *ix);
/* Bytes held: entry array, both tables, per-endpoint state. */
size_t sb_kv_index_bytes(const sb_kv_index *ix);
/* Probe statistics of the own-key and engine-hash tables, summed. */
sb_table_probes sb_kv_index_probes(const sb_kv_index *ix);

#endif
