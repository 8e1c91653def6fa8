/* engine_internal: what the files of the engine share, and nothing else.
 * Private to src/sim/engine*.c; the public contract is sim/engine.h.
 *
 * The engine is split by concept: engine.c holds the parameters, the request bookkeeping (id
 * map, lists, LoRA adapters) and the scheduler step; engine_cache.c the KV block cache (block
 * hashing, the keyed block table, the LRU free queue); engine_calib.c the calibration run, which
 * drives an engine through the public API only. */
#ifndef SB_SIM_ENGINE_INTERNAL_H
#define SB_SIM_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/table.h"
#include "sim/engine.h"

#define NIL UINT32_MAX
/* Arbitrary fixed seed for the root of every block-hash chain; changing it changes no behaviour
 * but every cached hash, so it is a constant, not a parameter. */
#define HASH_ROOT_SEED 0x5357424c4f434b53ULL /* "SWBLOCKS" */

/* ---- KV blocks ------------------------------------------------------------------------------ */

typedef struct block {
    uint64_t hash;       /* keyed, as the request's hashes are */
    uint32_t ref;        /* running requests holding it */
    uint32_t prev, next; /* free-queue links (NIL at the ends), meaningful while ref == 0 */
    bool hashed;         /* registered in the hash table: a reusable full prompt block */
} block;

/* One recorded KV event (engine.h's sb_engine_kv_event, with offsets for pointers). */
typedef struct kv_rec {
    uint8_t kind;
    bool has_parent, has_tokens;
    uint32_t n_blocks, adapter;
    uint64_t step;
    sb_ns time_ns;
    uint64_t parent;
    size_t hash_off, tok_off;
} kv_rec;

/* ---- requests ------------------------------------------------------------------------------- */

enum { REQ_WAITING = 1, REQ_RUNNING };

typedef struct req {
    uint64_t id;
    struct req *prev, *next; /* in the waiting or the running list */
    int state;
    uint32_t adapter;
    uint32_t n_prompt, max_tokens;
    uint32_t n_generated;  /* tokens produced so far; known tokens = n_prompt + n_generated */
    uint32_t n_computed;   /* tokens whose KV is in the cache */
    uint32_t n_blocks;     /* entries of `table` held */
    uint32_t n_registered; /* leading blocks already hashed in the table */
    uint32_t n_hashes;     /* full blocks of known tokens hashed so far (prompt, then generated) */
    uint32_t max_hashes;   /* room in `hashes`: full blocks of every token ever computed */
    bool can_extend;       /* the tokens of the prompt's partial block are known */
    uint64_t chain;        /* unkeyed hash of block n_hashes - 1 (the root before block 0) */
    uint32_t tok_base;     /* position of toks[0] in the prompt */
    uint32_t *toks;        /* prompt tokens from tok_base (all of them with kv_events, else the
                            * partial block only), stored after the struct */
    uint32_t *out;         /* output_tokens (max_tokens), stored after the struct; NULL: answer */
    bool has_tokens;       /* toks holds the whole prompt (STORED events carry token ids) */
    uint32_t sched;        /* tokens computed by the step in flight */
    bool sched_decode;     /* ... counted as decode tokens (else prefill) */
    bool admitted_once;
    uint64_t sched_context; /* KV tokens its decode reads in the step in flight */
    sb_ns last_token_ns;
    sb_engine_usage u;
    uint64_t *hashes; /* max_hashes, stored after the struct; keyed (the block table's tags) */
    uint32_t *table;  /* block ids, room for every block the request can ever hold */
} req;

typedef struct req_list {
    req *head, *tail;
    uint32_t n;
} req_list;

/* Request id -> req: a keyed table (base/table.h) from the id to a handle, the handle an index
 * into `handles`; freed handles are reused first. */
typedef struct id_handle {
    uint64_t id;
    req *r; /* NULL when the handle is free */
} id_handle;

typedef struct id_map {
    sb_table table;
    id_handle *handles;
    uint32_t *free; /* free handles, a stack */
    uint32_t n_free, cap;
} id_map;

typedef struct adapter {
    uint32_t id;
    uint32_t running, waiting;
    bool resident;
    uint64_t last_used_step; /* for LRU eviction among resident adapters */
} adapter;

struct sb_engine {
    sb_engine_params p;

    block *blocks;
    uint32_t n_fresh; /* blocks [n_fresh, N) were never used: free, not in the queue */
    uint32_t fq_head, fq_tail, fq_len;
    uint32_t n_used;        /* blocks with ref > 0 */
    uint32_t n_cached_free; /* hashed blocks in the free queue */
    /* Keyed block hash -> block id (base/table.h), sized for every block at creation. The
     * tags are the requests' block hashes keyed under hash_secret once at submit (a client
     * chooses the prompts behind them), so probing and shifts never hash again. */
    sb_table btab;

    id_map ids;
    req_list waiting, running;
    adapter *adapters; /* sorted by id; few, so binary search and shifting are cheap */
    uint32_t n_adapters, cap_adapters, n_resident;
    uint32_t n_running_adapters, n_waiting_adapters;

    bool active; /* a step is in flight */
    sb_engine_step step;
    uint32_t budget;   /* tokens left while forming a step */
    sb_ns gpu_free_at; /* end of the last completed step */
    sb_ns now;         /* latest time seen */
    bool in_advance;

    sb_engine_event *ev;
    size_t n_ev, cap_ev;

    uint64_t pc_queries, pc_hits, successes, aborts, prompt_tokens, gen_tokens, preemptions;
    uint64_t steps;

    /* KV events not yet drained (params.kv_events): records, and the arrays they point into by
     * offset (they grow, so pointers are resolved only when read). */
    kv_rec *kv;
    size_t n_kv, cap_kv;
    uint64_t *kv_hashes;
    size_t n_kv_hashes, cap_kv_hashes;
    uint32_t *kv_tokens;
    size_t n_kv_tokens, cap_kv_tokens;
    uint64_t kv_lost;
};

/* ---- KV block cache (engine_cache.c) -------------------------------------------------------- */

/* The cached block holding keyed hash h, or NIL. */
uint32_t eng_block_find(const sb_engine *e, uint64_t h);
/* Blocks free for new content: the free queue plus the never-used ones. */
uint32_t eng_free_blocks(const sb_engine *e);
/* Takes a free block for new content (evicting the LRU cached one if it must); one is free. */
uint32_t eng_take_block(sb_engine *e);
/* Shares a cached block (in use or free). */
void eng_touch_block(sb_engine *e, uint32_t b);
/* Releases all of r's blocks, tail first, and resets its cache progress. */
void eng_release_blocks(sb_engine *e, req *r);
/* Registers r's newly computed full blocks in the block table (recording STORED events). */
void eng_register_blocks(sb_engine *e, req *r);
/* The unkeyed chain hash of the block of `tokens` (block_size of them) after `prev`, and the
 * root of an adapter's chains. */
uint64_t eng_hash_next(uint64_t prev, const uint32_t *tokens, uint32_t block_size);
uint64_t eng_hash_root(uint32_t adapter);
/* Token id at prompt-or-output position pos of r (pos >= tok_base). */
uint32_t eng_token_at(const req *r, uint32_t pos);
/* Records a KV event (a no-op unless kv_events): n hashes; STORED: the parent when the run
 * starts after block 0 of r's chain, and r's tokens of blocks first_block.. if r has them. */
void eng_kv_record(sb_engine *e, sb_engine_kv_kind kind, sb_ns t, const uint64_t *hashes, uint32_t n, const req *r,
                   uint32_t first_block);
/* Forgets every hashed free block (reset_prefix_cache). */
void eng_unhash_all(sb_engine *e);

#endif
