/* engine_cache: the KV block cache of the engine (see engine.h for the model, engine_internal.h
 * for what the engine's files share). */
#include "sim/engine_internal.h"

#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "sim/answer.h"

/* ---- block hashing -------------------------------------------------------------------------- */

uint64_t eng_hash_root(uint32_t adapter)
{
    return XXH3_64bits_withSeed(&adapter, sizeof adapter, HASH_ROOT_SEED);
}

uint64_t eng_hash_next(uint64_t prev, const uint32_t *tokens, uint32_t block_size)
{
    return XXH3_64bits_withSeed(tokens, block_size * sizeof *tokens, prev);
}

size_t sb_engine_hash_blocks(const uint32_t *tokens, size_t n, uint32_t block_size, uint32_t adapter, uint64_t *out)
{
    if (block_size == 0)
        return 0;
    size_t nb = n / block_size;
    uint64_t h = eng_hash_root(adapter);
    for (size_t i = 0; i < nb; i++)
        out[i] = h = eng_hash_next(h, tokens + i * block_size, block_size);
    return nb;
}

uint32_t eng_token_at(const req *r, uint32_t pos)
{
    if (pos < r->n_prompt)
        return r->toks[pos - r->tok_base];
    return r->out ? r->out[pos - r->n_prompt] : sb_sim_answer_token(pos - r->n_prompt);
}

/* ---- KV events ------------------------------------------------------------------------------ */

/* Grows *arr (elements of `size` bytes) to hold `need`; false if memory ran out. */
static bool grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *n = sb_realloc(*arr, c * size);
    if (!n)
        return false;
    *arr = n;
    *cap = c;
    return true;
}

void eng_kv_record(sb_engine *e, sb_engine_kv_kind kind, sb_ns t, const uint64_t *hashes, uint32_t n, const req *r,
                   uint32_t first_block)
{
    if (!e->p.kv_events)
        return;
    uint32_t bs = e->p.block_size;
    bool toks = kind == SB_ENGINE_KV_STORED && r && r->has_tokens;
    size_t n_tok = toks ? (size_t)n * bs : 0;
    if (!grow((void **)&e->kv, &e->cap_kv, e->n_kv + 1, sizeof *e->kv) ||
        !grow((void **)&e->kv_hashes, &e->cap_kv_hashes, e->n_kv_hashes + n, sizeof *e->kv_hashes) ||
        !grow((void **)&e->kv_tokens, &e->cap_kv_tokens, e->n_kv_tokens + n_tok, sizeof *e->kv_tokens)) {
        e->kv_lost++;
        return;
    }
    kv_rec *k = &e->kv[e->n_kv++];
    *k = (kv_rec){.kind = (uint8_t)kind,
                  .has_tokens = toks,
                  .n_blocks = n,
                  .step = e->steps,
                  .time_ns = t,
                  .hash_off = e->n_kv_hashes,
                  .tok_off = e->n_kv_tokens};
    if (kind == SB_ENGINE_KV_STORED && r) {
        k->adapter = r->adapter;
        k->has_parent = first_block > 0;
        k->parent = first_block > 0 ? r->hashes[first_block - 1] : 0;
    }
    if (n)
        memcpy(e->kv_hashes + e->n_kv_hashes, hashes, n * sizeof *hashes);
    e->n_kv_hashes += n;
    for (size_t i = 0; i < n_tok; i++)
        e->kv_tokens[e->n_kv_tokens++] = eng_token_at(r, (uint32_t)(first_block * bs + i));
}

size_t sb_engine_kv_count(const sb_engine *e)
{
    return e->n_kv;
}

void sb_engine_kv_event_at(const sb_engine *e, size_t i, sb_engine_kv_event *out)
{
    const kv_rec *k = &e->kv[i];
    *out = (sb_engine_kv_event){.kind = (sb_engine_kv_kind)k->kind,
                                .step = k->step,
                                .time_ns = k->time_ns,
                                .n_blocks = k->n_blocks,
                                .block_hashes = e->kv_hashes + k->hash_off,
                                .has_parent = k->has_parent,
                                .parent_hash = k->parent,
                                .token_ids = k->has_tokens ? e->kv_tokens + k->tok_off : NULL,
                                .block_size = e->p.block_size,
                                .adapter = k->adapter};
}

void sb_engine_kv_drain(sb_engine *e)
{
    e->n_kv = e->n_kv_hashes = e->n_kv_tokens = 0;
}

uint64_t sb_engine_kv_lost(const sb_engine *e)
{
    return e->kv_lost;
}

/* ---- block hash table ----------------------------------------------------------------------- */

uint32_t eng_block_find(const sb_engine *e, uint64_t h)
{
    size_t steps, i = sb_table_search(&e->btab, h, NULL, NULL, &steps);
    return sb_table_val_or(&e->btab, i, NIL);
}

/* h is known absent; room for every block was reserved at creation. */
static void btab_insert(sb_engine *e, uint64_t h, uint32_t b)
{
    size_t steps, i = sb_table_search(&e->btab, h, NULL, NULL, &steps);
    sb_table_put(&e->btab, i, h, b);
}

static void btab_remove(sb_engine *e, uint64_t h)
{
    size_t steps, i = sb_table_search(&e->btab, h, NULL, NULL, &steps);
    sb_table_delete(&e->btab, i);
}

/* ---- free queue ----------------------------------------------------------------------------- */

uint32_t eng_free_blocks(const sb_engine *e)
{
    return e->fq_len + (e->p.num_gpu_blocks - e->n_fresh);
}

static void fq_unlink(sb_engine *e, uint32_t b)
{
    block *k = &e->blocks[b];
    if (k->prev != NIL)
        e->blocks[k->prev].next = k->next;
    else
        e->fq_head = k->next;
    if (k->next != NIL)
        e->blocks[k->next].prev = k->prev;
    else
        e->fq_tail = k->prev;
    e->fq_len--;
    if (k->hashed)
        e->n_cached_free--;
}

/* Hashed blocks join the tail (most recently used, evicted last). Unhashed ones join the head:
 * they hold nothing reusable, so using them first spares cached prefixes. (vLLM appends all to
 * the tail; this only changes which worthless block goes first.) */
static void fq_push(sb_engine *e, uint32_t b)
{
    block *k = &e->blocks[b];
    if (k->hashed) {
        k->prev = e->fq_tail;
        k->next = NIL;
        if (e->fq_tail != NIL)
            e->blocks[e->fq_tail].next = b;
        else
            e->fq_head = b;
        e->fq_tail = b;
        e->n_cached_free++;
    } else {
        k->prev = NIL;
        k->next = e->fq_head;
        if (e->fq_head != NIL)
            e->blocks[e->fq_head].prev = b;
        else
            e->fq_tail = b;
        e->fq_head = b;
    }
    e->fq_len++;
}

/* Takes a free block for new content: an unhashed freed block, else a never-used one, else the
 * least recently freed cached block, whose hash is evicted. Caller checked one is free. */
uint32_t eng_take_block(sb_engine *e)
{
    uint32_t b;
    if (e->fq_head != NIL && !e->blocks[e->fq_head].hashed) {
        b = e->fq_head;
        fq_unlink(e, b);
    } else if (e->n_fresh < e->p.num_gpu_blocks) {
        b = e->n_fresh++;
    } else {
        b = e->fq_head;
        fq_unlink(e, b);
        btab_remove(e, e->blocks[b].hash);
        e->blocks[b].hashed = false;
        /* Blocks are taken while a step forms: the eviction belongs to that step. */
        eng_kv_record(e, SB_ENGINE_KV_REMOVED, e->step.start_ns, &e->blocks[b].hash, 1, NULL, 0);
    }
    e->blocks[b].ref = 1;
    e->n_used++;
    return b;
}

/* Shares a cached block (in use or free). */
void eng_touch_block(sb_engine *e, uint32_t b)
{
    if (e->blocks[b].ref++ == 0) {
        fq_unlink(e, b);
        e->n_used++;
    }
}

/* Releases a request's blocks, tail first so that a prompt's head stays cached longest. */
void eng_release_blocks(sb_engine *e, req *r)
{
    for (uint32_t i = r->n_blocks; i-- > 0;) {
        uint32_t b = r->table[i];
        if (--e->blocks[b].ref == 0) {
            e->n_used--;
            fq_push(e, b);
        }
    }
    r->n_blocks = 0;
    r->n_registered = 0;
    r->n_computed = 0;
}

/* Registers the request's newly computed full blocks so later requests can share them, and
 * records each run of newly cached blocks as one STORED event at the step's end. A block whose
 * hash is already cached elsewhere (two requests computed the same prefix at once) stays
 * unhashed and is simply freed later: it ends a run. */
void eng_register_blocks(sb_engine *e, req *r)
{
    uint32_t full = r->n_computed / e->p.block_size;
    if (full > r->n_hashes)
        full = r->n_hashes;
    if (!e->p.enable_prefix_caching) {
        r->n_registered = full;
        return;
    }
    uint32_t run = r->n_registered; /* first block of the run being stored */
    for (uint32_t i = r->n_registered; i < full; i++) {
        uint64_t h = r->hashes[i];
        if (eng_block_find(e, h) != NIL) {
            if (i > run)
                eng_kv_record(e, SB_ENGINE_KV_STORED, e->step.end_ns, r->hashes + run, i - run, r, run);
            run = i + 1;
            continue;
        }
        block *k = &e->blocks[r->table[i]];
        k->hash = h;
        k->hashed = true;
        btab_insert(e, h, r->table[i]);
    }
    if (full > run)
        eng_kv_record(e, SB_ENGINE_KV_STORED, e->step.end_ns, r->hashes + run, full - run, r, run);
    if (full > r->n_registered)
        r->n_registered = full;
}

void eng_unhash_all(sb_engine *e)
{
    for (uint32_t b = e->fq_head; b != NIL; b = e->blocks[b].next) {
        block *k = &e->blocks[b];
        if (k->hashed) {
            btab_remove(e, k->hash);
            k->hashed = false;
        }
    }
    e->n_cached_free = 0;
}
