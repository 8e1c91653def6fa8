/* kv_events: the decoder of the engines' KV-cache event batches (vLLM, SGLang), pure.
 *
 * One ZMQ payload frame (msgpack) in, one batch out: the envelope `[ts, [events...], dp_rank]`
 * (or the map `{ts, events, data_parallel_rank | attn_dp_rank}`), each event in either of the
 * two encodings engines have published:
 *   - a tagged array, tag first: ["BlockStored", block_hashes, parent_block_hash, token_ids,
 *     block_size, lora_id, medium, lora_name, extra_keys, group_idx, ...],
 *     ["BlockRemoved", block_hashes, medium, group_idx], ["AllBlocksCleared"]; fields after
 *     the block hashes may be left off (msgspec's omit_defaults, or an older release);
 *   - a map with a "type" key (vLLM since PR #42892, SGLang since #37482), keys in any order.
 * Block hashes come as an integer (uint64, values above INT64_MAX included; a negative int64 is
 * taken as its two's-complement bit pattern) or as a bin of 1..64 bytes (the 32-byte SHA-256
 * digest with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), folded to 64 bits exactly as vLLM folds
 * its digest into the int form (`int.from_bytes(digest, "big") & (2**64 - 1)`,
 * vllm/v1/core/kv_cache_utils.py maybe_convert_block_hash): the last 8 bytes, big-endian. So a
 * fleet mixing the two forms agrees on every block's number.
 * Unknown keys, trailing array fields and unknown event types are skipped and counted; a known
 * field of the wrong type is a decode error.
 *
 * What it is not: it does not talk to ZMQ (net/kv_subscriber.c does), keeps no index and reads
 * no clock. It never allocates: every array of the result lives in caller-owned scratch,
 * and strings point into the payload, which must outlive the batch.
 *
 * Cost: one pass over the payload, each byte read a bounded number of times; values skipped
 * (unknown fields, extra_keys) are walked with a counter of items still to skip, not recursion,
 * so nesting costs no stack and no more than its bytes. */
#ifndef SB_PROTO_KV_EVENTS_H
#define SB_PROTO_KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on one payload. Over any of them the whole payload is refused (SB_KV_E_LIMIT): a
 * batch is the engine's record of one step, and applying half of it would leave the index
 * wrong in ways nothing downstream could tell. Defaults: sb_kv_limits_default(). */
typedef struct sb_kv_limits {
    size_t max_payload_bytes;      /* the payload frame; default 8 MiB */
    uint32_t max_events;           /* events in one batch (declared length); default 16384 */
    uint32_t max_hashes_per_event; /* block hashes of one event; default 16384 */
    uint32_t max_tokens_per_event; /* token ids of one BlockStored; default 262144 */
    uint32_t max_batch_hashes;     /* block hashes over the batch; default 131072 */
    uint32_t max_batch_tokens;     /* token ids over the batch; default 1048576 */
} sb_kv_limits;

/* The defaults, sized for one vLLM engine step with a large max_num_batched_tokens (a 256k-token
 * prefill is 16384 blocks of 16): vLLM emits a BlockStored per request per step and a
 * BlockRemoved per evicted block (vllm/v1/core/block_pool.py). */
sb_kv_limits sb_kv_limits_default(void);
/* Field by field (the struct has padding). */
bool sb_kv_limits_equal(const sb_kv_limits *a, const sb_kv_limits *b);

typedef enum sb_kv_kind {
    SB_KV_BLOCK_STORED = 1,  /* blocks entered the cache (or moved tier, when n_tokens == 0) */
    SB_KV_BLOCK_REMOVED = 2, /* blocks left the cache (of `medium`) */
    SB_KV_ALL_CLEARED = 3,   /* the engine dropped every cached block */
} sb_kv_kind;

typedef enum sb_kv_medium {
    SB_KV_MEDIUM_GPU = 0,   /* "GPU", or no medium given (releases before the field were GPU-only) */
    SB_KV_MEDIUM_CPU = 1,   /* "CPU" (offloading connectors) */
    SB_KV_MEDIUM_OTHER = 2, /* any other name: see medium_name */
} sb_kv_medium;

typedef struct sb_kv_event {
    sb_kv_kind kind;
    sb_kv_medium medium;
    const uint64_t *hashes; /* into the scratch; n_hashes >= 0 (AllBlocksCleared: 0) */
    uint32_t n_hashes;
    const uint32_t *tokens; /* BlockStored's token_ids, into the scratch; 0 of them: a tier move */
    uint32_t n_tokens;
    bool has_parent;
    uint64_t parent_hash; /* BlockStored: the block before hashes[0], when has_parent */
    uint32_t block_size;  /* BlockStored; 0 if not given */
    uint32_t group_idx;   /* KV-cache group (hybrid models); 0 if not given */
    bool has_lora_id;
    int64_t lora_id;
    const char *lora_name; /* into the payload, not NUL-terminated; NULL if none */
    uint32_t lora_name_len;
    const char *medium_name; /* into the payload; NULL if none given */
    uint32_t medium_name_len;
} sb_kv_event;

typedef struct sb_kv_batch {
    double ts;           /* the engine's wall clock when it published, seconds since the epoch */
    int32_t dp_rank;     /* data_parallel_rank or attn_dp_rank; -1 if none */
    sb_kv_event *events; /* into the scratch; only the known kinds, in payload order */
    uint32_t n_events;
    uint32_t unknown_events; /* events of a type this decoder does not know, skipped */
    uint32_t unknown_fields; /* keys and trailing array fields skipped, over the batch */
} sb_kv_batch;

/* Caller-owned arrays the decoder fills; capacities in entries. A scratch smaller than the
 * limits makes the decoder refuse at its own capacity (SB_KV_E_LIMIT), never write past it. */
typedef struct sb_kv_scratch {
    sb_kv_event *events;
    uint32_t events_cap;
    uint64_t *hashes;
    uint32_t hashes_cap;
    uint32_t *tokens;
    uint32_t tokens_cap;
} sb_kv_scratch;

/* Allocates a scratch sized for lim (base/alloc.h; about 72 bytes per event, 8 per hash and 4
 * per token: 6 MiB at the defaults). 0, or -1 with *s zeroed. */
int sb_kv_scratch_init(sb_kv_scratch *s, const sb_kv_limits *lim);
void sb_kv_scratch_free(sb_kv_scratch *s);

/* Decode results: 0, or one of these. */
enum {
    SB_KV_E_TRUNCATED = -1, /* the payload ends inside a value */
    SB_KV_E_TYPE = -2,      /* a known field has the wrong type, or a value is out of range */
    SB_KV_E_LIMIT = -3,     /* a bound of sb_kv_limits (or the scratch) is exceeded */
    SB_KV_E_SYNTAX = -4,    /* not msgpack (a reserved byte), or bytes after the envelope */
};

typedef struct sb_kv_error {
    int code;         /* as returned */
    size_t offset;    /* byte of the payload where it was found */
    const char *what; /* static text naming the field or bound, for logs */
} sb_kv_error;

/* Decodes payload[0..len) into *out, its arrays in s. Returns 0, or a negative SB_KV_E_* with
 * *err filled (err may be NULL) and *out holding nothing usable: a bad payload is refused
 * whole. Reads only payload[0..len); writes only *out, *err and s's arrays; allocates nothing.
 * O(len). */
int sb_kv_decode(const uint8_t *payload, size_t len, const sb_kv_limits *lim, sb_kv_scratch *s, sb_kv_batch *out,
                 sb_kv_error *err);

/* A 1..64-byte hash folded to 64 bits as vLLM does (the low 64 bits of the big-endian number:
 * the last 8 bytes). Exposed for tests and for code that sees digests elsewhere. */
uint64_t sb_kv_fold_hash(const uint8_t *bytes, size_t len);

const char *sb_kv_kind_name(sb_kv_kind k);
const char *sb_kv_error_name(int code);

#endif
