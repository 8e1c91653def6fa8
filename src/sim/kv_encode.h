/* kv_encode: vLLM's KV-cache event payloads, encoded with msgpack-c, for the simulator's
 * publisher (sim/kv_publisher.h) and for tests that compare a decoder against it.
 *
 * A batch (vLLM's KVEventBatch, one per engine step) is the positional array
 *   [ts (float64, unix seconds), [event, ...], data_parallel_rank (int, or nil if < 0)]
 * and each event is, with SB_KV_ENC_ARRAY (vLLM's tagged arrays, the encoding until vLLM
 * PR #42892, May 2026; the fields of the releases that added `medium` and `lora_name`):
 *   ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil,
 *    "GPU", lora_name|nil]
 *   ["BlockRemoved", block_hashes, "GPU"]
 *   ["AllBlocksCleared"]
 * or with SB_KV_ENC_MAP (after #42892: tagged maps; the outer batch stays an array), with the
 * fields a vLLM 0.26 publisher sends (volcano-sh/kthena#1535 shows one captured):
 *   {"type":"BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
 *    "lora_id", "medium":"GPU", "lora_name", "extra_keys":[nil per block], "group_idx":0,
 *    "kv_cache_spec_kind":"full_attention"}
 *   {"type":"BlockRemoved", "block_hashes", "medium":"GPU", "group_idx":0}
 *   {"type":"AllBlocksCleared"}
 * A block hash is a msgpack unsigned integer (SB_KV_HASH_INT, vLLM's default: values above
 * INT64_MAX are uint64) or a 32-byte bin (SB_KV_HASH_BYTES, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)
 * whose last 8 bytes are the integer form big-endian, as vLLM's integer form is the low 64 bits
 * of the digest read big-endian; the first 24 bytes are derived from the same 64 bits.
 * lora_id is the engine's adapter id (nil for the base model), lora_name its served name.
 *
 * Not for: decoding (the gateway's proto/ decoder), sockets. Pure: appends to the caller's
 * buffer, nothing else is allocated. */
#ifndef SB_SIM_KV_ENCODE_H
#define SB_SIM_KV_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "sim/engine.h"

typedef enum sb_kv_encoding { SB_KV_ENC_ARRAY = 0, SB_KV_ENC_MAP } sb_kv_encoding;
typedef enum sb_kv_hash_form { SB_KV_HASH_INT = 0, SB_KV_HASH_BYTES } sb_kv_hash_form;

typedef struct sb_kv_encode_opts {
    sb_kv_encoding encoding;
    sb_kv_hash_form hashes;
    const char *const *adapter_names; /* adapter id k names adapter_names[k - 1]; may be NULL */
    size_t n_adapter_names;
} sb_kv_encode_opts;

/* Appends one event to b. Returns 0, or -ENOMEM with b as it was. */
int sb_kv_encode_event(sb_buf *b, const sb_engine_kv_event *ev, const sb_kv_encode_opts *o);

/* Appends a batch to b: the envelope around n events already encoded back to back in
 * events[0..len) by sb_kv_encode_event. dp_rank < 0 encodes nil. Returns 0 or -ENOMEM (b as it
 * was). */
int sb_kv_encode_batch(sb_buf *b, double ts, const char *events, size_t len, uint32_t n, int dp_rank);

/* The 32-byte form of hash h (SB_KV_HASH_BYTES) into out. */
void sb_kv_hash_bytes(uint64_t h, uint8_t out[32]);

#endif
