/* tok_cache: token ids of prompts the engines have tokenised, so that the precise index
 * (core/kv_index.h) can be consulted without a /tokenize round trip per request, and a shared
 * system prompt is tokenised once.
 *
 * Keys come from the gateway's canonical prompt (proto/prompt.h): the chained hashes of its
 * full 64-byte text blocks, plus two values the caller computes:
 *   ctx        - everything besides the prompt text that shapes the engine's tokens: the
 *                served model, `tools`, `chat_template`, `chat_template_kwargs`,
 *                `add_generation_prompt`, ... (e.g. XXH3 of the /tokenize body built with
 *                empty messages). Entries of different contexts never meet.
 *   prompt_key - the whole prompt, its trailing partial block included (e.g. XXH3 of the
 *                /tokenize body itself, proto/tokenize.h). Block hashes alone do not cover the
 *                tail.
 *
 * What is returned, and why it stays correct. Token ids of a text prefix are not in general
 * a prefix of the whole prompt's ids: BPE merges across the cut, and a chat template renders
 * a conversation's end (the generation prompt) differently from its middle. So:
 * - an *exact* hit (same ctx and prompt_key) returns the engine's own answer for that prompt;
 * - a *prefix* hit returns ids the engine itself has shown to be stable: when a prompt is
 *   inserted and an earlier one (same ctx) shares its first j + 1 text blocks, the two
 *   answers' longest common prefix of ids, less `margin_tokens`, is recorded under block j.
 *   Two different continuations agreeing on those ids is the engine's evidence that they do
 *   not depend on what follows block j; the margin takes back the ids that may cover text
 *   the two witnesses still shared past block j (less than one 64-byte block, since they
 *   differ in block j + 1: at most 63 bytes, a token covers at least one, and a message
 *   boundary adds a few template tokens) and any merge at the cut. Later witnesses can only
 *   shrink a record (to their agreement, less the margin), never grow it.
 *   The margin argument holds for text; a non-text part (an image: hundreds of placeholder
 *   tokens for a few bytes of URL) can break it, so callers insert such prompts with
 *   share_prefix false (exact hits only).
 * If the engine's tokenisation were to depend on text further away than the margin (a
 * pathological pre-tokenizer chunk), a prefix hit would give wrong ids for its last blocks:
 * the precise index would then miss those blocks, or at worst credit an endpoint with a few
 * blocks the request does not share. The request itself is never changed: this is routing
 * input only.
 *
 * Memory: at most max_bytes (records, their ids and text-block chains, tables), least
 * recently used records evicted first; a prompt larger than a quarter of the bound is not
 * cached. Pure: no I/O, no clock. Not thread-safe: one owner. */
#ifndef SB_CORE_TOK_CACHE_H
#define SB_CORE_TOK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

/* 64 MiB: 16 Mi token ids, e.g. 500 distinct 32k-token prompts. */
#define SB_TOK_CACHE_DEFAULT_MAX_BYTES ((size_t)64 << 20)
/* Two text blocks' worth of ids (see above); 0 in the config means this. */
#define SB_TOK_CACHE_DEFAULT_MARGIN 128

typedef struct sb_tok_cache sb_tok_cache;

typedef struct sb_tok_cache_config {
    size_t max_bytes;       /* 0: SB_TOK_CACHE_DEFAULT_MAX_BYTES */
    uint32_t margin_tokens; /* 0: SB_TOK_CACHE_DEFAULT_MARGIN */
    bool exact_only;        /* no prefix records at all */
    uint64_t hash_secret;   /* slot placement only */
} sb_tok_cache_config;

/* A prompt's identity (see above). chain: its text blocks' chained hashes, n_blocks of them. */
typedef struct sb_tok_key {
    uint64_t ctx;
    uint64_t prompt_key;
    const uint64_t *chain;
    size_t n_blocks;
} sb_tok_key;

typedef struct sb_tok_hit {
    const uint32_t *tokens; /* valid until the next insert or free; NULL on a miss */
    size_t n_tokens;
    bool exact;    /* the whole prompt's ids; else a proven prefix of them */
    size_t blocks; /* prefix hit: the text blocks the record stands for (j + 1) */
} sb_tok_hit;

/* NULL on ENOMEM. */
sb_tok_cache *sb_tok_cache_new(const sb_tok_cache_config *cfg);
void sb_tok_cache_free(sb_tok_cache *c);

/* The exact hit for k, else the deepest prefix record on k's chain, else a miss (tokens
 * NULL). Marks what it returns most recently used. O(n_blocks) table lookups at most. */
sb_tok_hit sb_tok_cache_lookup(sb_tok_cache *c, const sb_tok_key *k);

/* Stores the engine's answer tokens[0..n_tokens) for the prompt k (a newer answer for the same
 * prompt replaces the older), and, if share_prefix, records or shrinks the proven prefix it
 * shares with the deepest earlier prompt of the same ctx (see above). Copies what it keeps.
 * Returns 0, or -1 if nothing was stored (too large for the bound, or ENOMEM; the cache is
 * unchanged but for evictions). O(n_blocks + n_tokens). */
int sb_tok_cache_insert(sb_tok_cache *c, const sb_tok_key *k, const uint32_t *tokens, size_t n_tokens,
                        bool share_prefix);

typedef struct sb_tok_cache_stats {
    uint64_t exact_hits, prefix_hits, misses;
    uint64_t inserts, prefix_records, prefix_shrinks, evictions, refused;
    size_t prompts, prefixes; /* records held now */
    size_t bytes;             /* accounted bytes held now (<= max_bytes) */
} sb_tok_cache_stats;
sb_tok_cache_stats sb_tok_cache_get_stats(const sb_tok_cache *c);

#endif
