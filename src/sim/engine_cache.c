/* engine_cache: the KV block cache of the engine (see engine.h for the model, engine_internal.h
 * for what the engine's files share). */
#include "sim/engine_internal.h"

#include <xxhash.h>

/* ---- block hashing -------------------------------------------------------------------------- */

static uint64_t hash_root(uint32_t adapter)
{
    return XXH3_64bits_withSeed(&adapter, sizeof adapter, HASH_ROOT_SEED);
}

size_t sb_engine_hash_blocks(const uint32_t *tokens, size_t n, uint32_t block_size, uint32_t adapter, uint64_t *out)
{
    if (block_size == 0)
        return 0;
    size_t nb = n / block_size;
    uint64_t h = hash_root(adapter);
    for (size_t i = 0; i < nb; i++) {
        h = XXH3_64bits_withSeed(tokens + i * block_size, block_size * sizeof *tokens, h);
        out[i] = h;
    }
    return nb;
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

/* Registers the request's newly computed full prompt blocks so later requests can share them.
 * A block whose hash is already cached elsewhere (two requests computed the same prefix at
 * once) stays unhashed and is simply freed later. */
void eng_register_blocks(sb_engine *e, req *r)
{
    uint32_t full = r->n_computed / e->p.block_size;
    if (full > r->n_hashes)
        full = r->n_hashes;
    if (!e->p.enable_prefix_caching) {
        r->n_registered = full;
        return;
    }
    for (uint32_t i = r->n_registered; i < full; i++) {
        uint64_t h = r->hashes[i];
        if (eng_block_find(e, h) != NIL)
            continue;
        block *k = &e->blocks[r->table[i]];
        k->hash = h;
        k->hashed = true;
        btab_insert(e, h, r->table[i]);
    }
    if (full > r->n_registered)
        r->n_registered = full;
}
