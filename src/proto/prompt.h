/* prompt: the canonical prompt of a request and its chained block hashes, the keys of
 * prefix-cache-aware routing (core/prefix_index.h) and of the replay's cache models.
 *
 * sb_prompt_hash() walks the prompt sb_inspect found (proto/inspect.h) once, decoding JSON
 * escapes (\n, \", \uXXXX with surrogate pairs) on the fly into the canonical prompt, cuts
 * it into fixed blocks and computes chained 64-bit xxh3 hashes: h[i] = XXH3_64(block i, seed = h[i-1]), h[-1] = seed.
 * The canonical prompt is never materialised; only one block's worth of bytes is buffered.
 *
 * Canonical prompt (collision-free): every text field is emitted decoded, with NUL bytes
 * escaped as 00 01; fields are closed by a two-byte marker that plain text cannot produce:
 *   chat:        for each message: role, 00 02, then each content part followed by 00 04
 *                (a string content is one text part; null or absent content has no part),
 *                then 00 03 at message end. A message's `tool_calls` (assistant turns),
 *                when present and not null, is one more part, of type "tool_calls".
 *   completion:  each prompt string (or `input` for embeddings) followed by 00 03.
 *   responses:   `instructions` as a message with role "system", then `input`: a string is
 *                one message with role "user"; an array is one message per item, an item
 *                without a `role` (function_call, ...) being a message with an empty role
 *                whose one part is the item itself, read as a non-text part.
 * A text part is its decoded text. A non-text part (an image, audio or file part: an object
 * without a string `text`) is 00 05, its decoded `type`, 00 02, then each scalar value found
 * in the part in document order (object keys and the `type` value excluded; strings decoded,
 * numbers / true / false / null as written), each followed by 00 02. So two images differ by
 * URL or data, and the same URL escaped differently (`\/`) reads the same. A token-id prompt
 * (an array of numbers) is 00 05 then each number as written followed by ','. 00 05 opens a
 * field, where decoded text cannot start with a NUL byte, so it never meets a text field.
 * So the same conversation sent by different clients (escaped differently) reads the same,
 * and two different conversations never produce the same canonical bytes. (Within a
 * non-text part only the values count, not the nesting: close enough for routing.)
 *
 * The hashes are a wire format of sorts: equal across processes and runs (no per-process
 * seed), so replays, tests and gateways agree; changing the canonical form changes every key.
 *
 * Not for: checking the request (sb_inspect did, and sb_prompt_hash relies on it), or
 * hash tables (base/hash.h). Pure: no I/O, no allocation; time and randomness play no part. */
#ifndef SB_PROTO_PROMPT_H
#define SB_PROTO_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/inspect.h"

typedef struct sb_prompt_hashes {
    uint64_t *hashes;    /* caller-provided array of `cap` entries (may be NULL if cap is 0) */
    size_t cap;          /* at most this many full blocks are hashed; the rest is counted */
    size_t n;            /* out: number of full blocks hashed (<= cap); a trailing partial
                            block is not hashed */
    size_t prompt_bytes; /* out: length of the canonical prompt, all of it */
    uint64_t prefix_key; /* out: xxh3 of the first `prefix_chars` bytes of the first user
                            message's text (chat, responses: its text parts, concatenated,
                            as in the canonical prompt) or of the first prompt part
                            (completion, embeddings); 0 if there is none */
    size_t prefix_chars; /* in: how many bytes the prefix_key covers (0 = 100) */
} sb_prompt_hashes;

/* Seed for a request's chained block hashes: XXH3_64 of model bytes, one 0 byte, adapter
 * bytes; different models or adapters never share. adapter may be NULL if adapter_len is 0. */
uint64_t sb_prompt_seed(const char *model, size_t model_len, const char *adapter, size_t adapter_len);

/* Walks the prompt found by sb_inspect (same ctx, body, res) and fills *out with the chained
 * hashes of its full blocks of `block_bytes` bytes (block_bytes > 0; any size works, blocks up
 * to 4 KiB are fastest). Cannot fail on a body sb_inspect accepted; never allocates. If the
 * last sb_inspect failed, reports an empty prompt. */
void sb_prompt_hash(const sb_inspect_ctx *ctx, const char *body, const sb_inspect_result *res, uint64_t seed,
                    size_t block_bytes, sb_prompt_hashes *out);

#endif
