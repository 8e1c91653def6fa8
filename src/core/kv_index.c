/* kv_index: see kv_index.h. */
#include "core/kv_index.h"

#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/ilist.h"
#include "base/table.h"

#define NIL UINT32_MAX
/* The endpoint field of a free entry: no endpoint has this id (ids stay below 2^31 - 1), so a
 * free entry never passes for a held one (see sb_kv_index_match's guess). */
#define FREE_EP 0x7fffffffu
/* Second chances given per eviction at most: bounds the work of one eviction when every
 * entry of the victim has been used since (CLOCK would otherwise sweep the whole list). */
#define MAX_SECOND_CHANCES 8

/* One (engine block, endpoint) pair. Indices instead of pointers, and the array grows with
 * realloc. Found two ways: by own key (the holder list from the own-key table) and by
 * (engine hash, endpoint) (the engine table's slot points at the entry itself). The holder
 * list is doubly linked so that a removal is O(1) however many hold the block: a shared
 * system prompt is held by every endpoint, and salted requests (a cache salt the index does
 * not see) can give one endpoint any number of entries with the same own key. */
typedef struct entry {
    uint64_t own;    /* own key, raw: children chain from it */
    uint64_t engine; /* the engine's hash */
    uint32_t ep : 31;
    uint32_t used : 1;    /* a match used it since it was last stored or passed over */
    uint32_t next_holder; /* next entry with the same own key; free-list link when unused */
    uint32_t prev_holder; /* previous one; NIL for the list head (the table points at it) */
    sb_ilist_link lru;    /* on its endpoint's LRU list */
    uint32_t epoch;       /* the endpoint's epoch when stored: an older one means cleared since */
} entry;

/* Clearing an endpoint is O(1): its epoch moves on, and its entries of older epochs are
 * *stale*: never matched, never a parent, and freed a few at a time by later stores (and
 * first, at the memory bound). A restart of an engine holding a million blocks does not stall
 * the loop. Stale entries are the oldest of their endpoint, so they sit at its LRU end. */
typedef struct ep_state {
    sb_ilist lru; /* most recently stored (or saved by a second chance) at the front */
    uint32_t epoch;
    uint64_t stale; /* entries of older epochs still in memory */
    sb_kv_index_ep_stats st;
} ep_state;

struct sb_kv_index {
    entry *entries;
    uint32_t n_alloc, max_entries, free_head;
    size_t used;
    sb_table own_tab; /* keyed own key -> first holder entry */
    sb_table eng_tab; /* keyed (engine hash, ep) -> entry; equality checked on the entry */
    ep_state *eps;
    uint32_t n_eps;
    uint32_t block_size;
    uint64_t seed;
    uint64_t *stamp;              /* per endpoint: match generation that last advanced it */
    uint32_t *alive_ep, *alive_k; /* match scratch: endpoints still matching, their last entry */
    uint64_t generation;
    uint32_t evict_cursor;
    uint32_t stale_cursor; /* next endpoint to free stale entries from */
    uint64_t stale;        /* over all endpoints */
};

/* Stale entries freed per stored block, at most: every store frees more than it takes while a
 * backlog remains, so a cleared endpoint's entries are gone after half as many stores. */
#define RECLAIM_PER_STORE 2
/* Freed at once by a clear: a small endpoint is emptied on the spot. */
#define RECLAIM_ON_CLEAR 1024

/* ---- own keys ---- */

uint64_t sb_kv_extra_of_adapter(const char *name, size_t len)
{
    /* Never 0 for a name: the base model's chains stay apart from every adapter's. */
    return name ? XXH3_64bits(name, len) | 1 : 0;
}

uint64_t sb_kv_key_root(uint64_t seed, uint64_t extra)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(extra >> (8 * i));
    return XXH3_64bits_withSeed(b, sizeof b, seed);
}

static uint64_t block_key(uint64_t parent, const uint32_t *tokens, uint32_t block_size)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The words are already little-endian: hash them in place. */
    return XXH3_64bits_withSeed(tokens, (size_t)block_size * sizeof(uint32_t), parent);
#else
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, parent);
    unsigned char b[256];
    size_t k = 0;
    for (uint32_t i = 0; i < block_size; i++) {
        for (int j = 0; j < 4; j++)
            b[k++] = (unsigned char)(tokens[i] >> (8 * j));
        if (k == sizeof b) {
            XXH3_64bits_update(&st, b, k);
            k = 0;
        }
    }
    XXH3_64bits_update(&st, b, k);
    return XXH3_64bits_digest(&st);
#endif
}

void sb_kv_keys_chain(uint64_t parent_key, const uint32_t *tokens, size_t n_blocks, uint32_t block_size, uint64_t *out)
{
    for (size_t i = 0; i < n_blocks; i++) {
        parent_key = block_key(parent_key, tokens + i * block_size, block_size);
        out[i] = parent_key;
    }
}

size_t sb_kv_keys_from_tokens(uint64_t seed, const uint32_t *tokens, size_t n_tokens, uint32_t block_size,
                              uint64_t extra, uint64_t *out_keys)
{
    if (!block_size)
        return 0;
    size_t n = n_tokens / block_size;
    sb_kv_keys_chain(sb_kv_key_root(seed, extra), tokens, n, block_size, out_keys);
    return n;
}

/* ---- tables ---- */

static uint64_t own_tag(const sb_kv_index *ix, uint64_t own)
{
    return sb_table_tag_u64(&ix->own_tab, own);
}

static uint64_t eng_tag(const sb_kv_index *ix, uint64_t engine, uint32_t ep)
{
    /* Both halves under the key: one engine hash is reported by every endpoint of a fleet
     * whose engines share a hash seed, and must not pile those entries into one probe run. */
    uint64_t b[2] = {engine, ep};
    return sb_table_tag_bytes(&ix->eng_tab, b, sizeof b);
}

typedef struct eng_query {
    const entry *entries;
    uint64_t engine;
    uint32_t ep;
} eng_query;

static bool eng_eq(const void *ctx, uint32_t val)
{
    const eng_query *q = ctx;
    return q->entries[val].engine == q->engine && q->entries[val].ep == q->ep;
}

/* The entry of (engine, ep), or NIL; *slot gets its slot or where it would go. */
static uint32_t find_engine(sb_kv_index *ix, uint64_t engine, uint32_t ep, uint64_t tag, size_t *slot)
{
    eng_query q = {ix->entries, engine, ep};
    *slot = sb_table_find(&ix->eng_tab, tag, eng_eq, &q);
    return sb_table_val_or(&ix->eng_tab, *slot, NIL);
}

/* ---- lifetime ---- */

sb_kv_index *sb_kv_index_new(const sb_kv_index_config *cfg)
{
    if (!cfg->n_endpoints || cfg->n_endpoints > 0x7fffffffu)
        return NULL;
    if (cfg->block_size > SB_KV_INDEX_MAX_BLOCK_SIZE)
        return NULL;
    sb_kv_index *ix = sb_calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    sb_table_init(&ix->own_tab, cfg->hash_secret);
    sb_table_init(&ix->eng_tab, cfg->hash_secret);
    size_t max = cfg->max_entries ? cfg->max_entries : SB_KV_INDEX_DEFAULT_MAX_ENTRIES;
    ix->max_entries = max > NIL - 1 ? NIL - 1 : (uint32_t)max;
    ix->free_head = NIL;
    ix->n_eps = cfg->n_endpoints;
    ix->block_size = cfg->block_size ? cfg->block_size : SB_KV_INDEX_DEFAULT_BLOCK_SIZE;
    ix->seed = cfg->key_seed;
    ix->eps = sb_calloc(ix->n_eps, sizeof(ep_state));
    ix->stamp = sb_calloc(ix->n_eps, sizeof(uint64_t));
    ix->alive_ep = sb_calloc(ix->n_eps, sizeof(uint32_t));
    ix->alive_k = sb_calloc(ix->n_eps, sizeof(uint32_t));
    if (!ix->eps || !ix->stamp || !ix->alive_ep || !ix->alive_k) {
        sb_kv_index_free(ix);
        return NULL;
    }
    for (uint32_t e = 0; e < ix->n_eps; e++)
        ix->eps[e].lru = SB_ILIST_EMPTY;
    return ix;
}

void sb_kv_index_free(sb_kv_index *ix)
{
    if (!ix)
        return;
    sb_free(ix->entries);
    sb_table_free(&ix->own_tab);
    sb_table_free(&ix->eng_tab);
    sb_free(ix->eps);
    sb_free(ix->stamp);
    sb_free(ix->alive_ep);
    sb_free(ix->alive_k);
    sb_free(ix);
}

/* ---- entries ---- */

/* Entry k's endpoint's LRU list, and the entries as its nodes (base/ilist.h). */
static sb_ilist *lru_of(sb_kv_index *ix, uint32_t k)
{
    return &ix->eps[ix->entries[k].ep].lru;
}
#define LRU_NODES(ix) SB_ILIST_NODES((ix)->entries, entry, lru)

/* Unlinks entry k from its own key's holder list: O(1). */
static void unlink_holder(sb_kv_index *ix, uint32_t k)
{
    entry *en = &ix->entries[k];
    if (en->next_holder != NIL)
        ix->entries[en->next_holder].prev_holder = en->prev_holder;
    if (en->prev_holder != NIL) {
        ix->entries[en->prev_holder].next_holder = en->next_holder;
        return;
    }
    size_t s = sb_table_find(&ix->own_tab, own_tag(ix, en->own), NULL, NULL);
    if (en->next_holder == NIL)
        sb_table_delete(&ix->own_tab, s);
    else
        sb_table_set_val(&ix->own_tab, s, en->next_holder);
}

/* Links entry k (own key set) at the head of its holder list; room reserved by the caller. */
static void link_holder(sb_kv_index *ix, uint32_t k)
{
    entry *en = &ix->entries[k];
    uint64_t tag = own_tag(ix, en->own);
    size_t s = sb_table_find(&ix->own_tab, tag, NULL, NULL);
    en->prev_holder = NIL;
    if (sb_table_occupied(&ix->own_tab, s)) {
        en->next_holder = sb_table_val(&ix->own_tab, s);
        ix->entries[en->next_holder].prev_holder = k;
        sb_table_set_val(&ix->own_tab, s, k);
    } else {
        en->next_holder = NIL;
        sb_table_put(&ix->own_tab, s, tag, k);
    }
}

static bool live(const sb_kv_index *ix, const entry *en)
{
    return en->epoch == ix->eps[en->ep].epoch;
}

/* Removes entry k from everything and puts it on the free list. */
static void remove_entry(sb_kv_index *ix, uint32_t k)
{
    entry *en = &ix->entries[k];
    size_t s;
    (void)find_engine(ix, en->engine, en->ep, eng_tag(ix, en->engine, en->ep), &s);
    sb_table_delete(&ix->eng_tab, s);
    unlink_holder(ix, k);
    sb_ilist_remove(lru_of(ix, k), LRU_NODES(ix), k);
    if (live(ix, en)) {
        ix->eps[en->ep].st.blocks--;
    } else {
        ix->eps[en->ep].stale--;
        ix->stale--;
    }
    en->ep = FREE_EP;
    en->next_holder = ix->free_head;
    ix->free_head = k;
    ix->used--;
}

/* Frees up to budget stale entries of ep (from its LRU end, where they are). */
static void reclaim_ep(sb_kv_index *ix, uint32_t ep, size_t budget)
{
    ep_state *es = &ix->eps[ep];
    while (budget-- && es->stale && es->lru.back != NIL)
        remove_entry(ix, es->lru.back);
}

/* Frees up to budget stale entries, from whichever endpoints have them (round-robin). */
static void reclaim(sb_kv_index *ix, size_t budget)
{
    for (uint32_t k = 0; ix->stale && budget && k <= ix->n_eps; k++) {
        uint32_t e = ix->stale_cursor;
        if (!ix->eps[e].stale) {
            ix->stale_cursor = (e + 1) % ix->n_eps;
            continue;
        }
        uint64_t before = ix->eps[e].stale;
        reclaim_ep(ix, e, budget);
        budget -= (size_t)(before - ix->eps[e].stale);
    }
}

/* Evicts one entry of ep: its least recently stored, after at most MAX_SECOND_CHANCES entries
 * used by matches since are moved to the front with their mark cleared. */
static void evict_one(sb_kv_index *ix, uint32_t ep)
{
    ep_state *es = &ix->eps[ep];
    for (int c = 0; c < MAX_SECOND_CHANCES && es->lru.back != NIL && ix->entries[es->lru.back].used; c++) {
        uint32_t k = es->lru.back;
        ix->entries[k].used = 0;
        sb_ilist_move_to_front(lru_of(ix, k), LRU_NODES(ix), k);
    }
    if (es->lru.back != NIL) {
        remove_entry(ix, es->lru.back);
        es->st.evictions++;
    }
}

/* A free entry, growing the array up to the bound, else evicting from an endpoint at or above
 * its fair share (round-robin cursor: amortised O(1), since at the bound most holders are at
 * their share). NIL if nothing can be had. */
static uint32_t alloc_entry(sb_kv_index *ix, uint32_t for_ep)
{
    if (ix->free_head == NIL && ix->n_alloc < ix->max_entries) {
        uint32_t n = ix->n_alloc ? (ix->n_alloc > ix->max_entries / 2 ? ix->max_entries : ix->n_alloc * 2) : 1024;
        if (n > ix->max_entries)
            n = ix->max_entries;
        entry *ne = sb_realloc(ix->entries, (size_t)n * sizeof(entry));
        if (ne) {
            ix->entries = ne;
            for (uint32_t k = n; k-- > ix->n_alloc;) {
                ne[k].ep = FREE_EP;
                ne[k].next_holder = ix->free_head;
                ix->free_head = k;
            }
            ix->n_alloc = n;
        }
    }
    if (ix->free_head == NIL && ix->stale)
        reclaim(ix, 1); /* the forgotten go before anything still held */
    if (ix->free_head == NIL && ix->used > 0) {
        uint32_t fair = ix->max_entries / ix->n_eps;
        uint32_t victim = for_ep;
        for (uint32_t k = 0; k < ix->n_eps; k++) {
            uint32_t e = ix->evict_cursor;
            ix->evict_cursor = (e + 1) % ix->n_eps;
            if (ix->eps[e].st.blocks && ix->eps[e].st.blocks >= fair) {
                victim = e;
                break;
            }
        }
        for (uint32_t k = 0; k < ix->n_eps && ix->eps[victim].st.blocks == 0; k++)
            victim = (victim + 1) % ix->n_eps;
        evict_one(ix, victim);
    }
    if (ix->free_head == NIL)
        return NIL;
    uint32_t k = ix->free_head;
    ix->free_head = ix->entries[k].next_holder;
    return k;
}

/* Records (engine, own) on ep as most recently stored. false if no entry could be had. */
static bool record(sb_kv_index *ix, uint32_t ep, uint64_t engine, uint64_t own)
{
    uint64_t etag = eng_tag(ix, engine, ep);
    size_t s;
    uint32_t k = find_engine(ix, engine, ep, etag, &s);
    if (k != NIL && !live(ix, &ix->entries[k])) {
        remove_entry(ix, k); /* from before a clear: stored afresh below */
        k = NIL;
    }
    if (k != NIL) {
        entry *en = &ix->entries[k];
        if (en->own != own) {
            /* The newer report wins: the block now stands for other tokens. */
            if (sb_table_reserve(&ix->own_tab, sb_table_count(&ix->own_tab) + 1) < 0) {
                remove_entry(ix, k); /* forgotten rather than left under the old tokens */
                return false;
            }
            unlink_holder(ix, k);
            en->own = own;
            link_holder(ix, k);
        }
        en->used = 0;
        sb_ilist_move_to_front(lru_of(ix, k), LRU_NODES(ix), k);
        return true;
    }
    k = alloc_entry(ix, ep);
    if (k == NIL)
        return false;
    /* Room in both tables before linking anything, so nothing is left half-linked. */
    if (sb_table_reserve(&ix->eng_tab, sb_table_count(&ix->eng_tab) + 1) < 0 ||
        sb_table_reserve(&ix->own_tab, sb_table_count(&ix->own_tab) + 1) < 0) {
        ix->entries[k].next_holder = ix->free_head;
        ix->free_head = k;
        return false;
    }
    entry *en = &ix->entries[k];
    *en = (entry){.own = own, .engine = engine, .ep = ep & 0x7fffffffu, .epoch = ix->eps[ep].epoch};
    /* Evictions and growth may have moved slots: search again. */
    (void)find_engine(ix, engine, ep, etag, &s);
    sb_table_put(&ix->eng_tab, s, etag, k);
    link_holder(ix, k);
    sb_ilist_push_front(lru_of(ix, k), LRU_NODES(ix), k);
    ix->eps[ep].st.blocks++;
    ix->used++;
    return true;
}

/* ---- events ---- */

sb_kv_status sb_kv_index_block_stored(sb_kv_index *ix, uint32_t ep, const sb_kv_stored *ev)
{
    if (ep >= ix->n_eps)
        return SB_KV_BAD_ENDPOINT;
    sb_kv_index_ep_stats *st = &ix->eps[ep].st;
    if (ev->other_medium || (ev->n_tokens == 0 && ev->n > 0)) {
        st->tier_moves++;
        return SB_KV_TIER_MOVE;
    }
    if (ev->block_size != ix->block_size) {
        st->block_size_mismatches++;
        return SB_KV_BLOCK_SIZE_MISMATCH;
    }
    if (ev->n == 0 || ev->n_tokens / ev->block_size != ev->n || ev->n_tokens % ev->block_size) {
        st->malformed++;
        return SB_KV_MALFORMED;
    }
    uint64_t parent;
    if (ev->has_parent) {
        size_t s;
        uint32_t k = find_engine(ix, ev->parent_engine_hash, ep, eng_tag(ix, ev->parent_engine_hash, ep), &s);
        if (k != NIL && !live(ix, &ix->entries[k])) {
            remove_entry(ix, k);
            k = NIL;
        }
        if (k == NIL) {
            st->parent_misses++;
            return SB_KV_PARENT_MISS;
        }
        parent = ix->entries[k].own;
    } else {
        parent = sb_kv_key_root(ix->seed, ev->extra);
    }
    if (ix->stale)
        reclaim(ix, RECLAIM_PER_STORE * ev->n);
    for (size_t i = 0; i < ev->n; i++) {
        parent = block_key(parent, ev->token_ids + i * ix->block_size, ix->block_size);
        if (!record(ix, ep, ev->engine_hashes[i], parent)) {
            /* Nothing to evict and no memory: the rest is lost, as if evicted at once. */
            st->evictions += ev->n - i;
            break;
        }
        st->stored++;
    }
    return SB_KV_OK;
}

sb_kv_status sb_kv_index_block_removed(sb_kv_index *ix, uint32_t ep, const uint64_t *engine_hashes, size_t n,
                                       bool other_medium)
{
    if (ep >= ix->n_eps)
        return SB_KV_BAD_ENDPOINT;
    sb_kv_index_ep_stats *st = &ix->eps[ep].st;
    if (other_medium) {
        st->tier_moves++;
        return SB_KV_TIER_MOVE;
    }
    for (size_t i = 0; i < n; i++) {
        size_t s;
        uint32_t k = ix->used ? find_engine(ix, engine_hashes[i], ep, eng_tag(ix, engine_hashes[i], ep), &s) : NIL;
        if (k != NIL && !live(ix, &ix->entries[k])) {
            remove_entry(ix, k); /* forgotten at a clear: the engine's removal is news to us */
            k = NIL;
        }
        if (k == NIL) {
            st->unknown_removes++;
            continue;
        }
        remove_entry(ix, k);
        st->removed++;
    }
    return SB_KV_OK;
}

void sb_kv_index_clear(sb_kv_index *ix, uint32_t ep)
{
    if (ep >= ix->n_eps)
        return;
    ep_state *es = &ix->eps[ep];
    es->stale += es->st.blocks;
    ix->stale += es->st.blocks;
    es->st.blocks = 0;
    /* Wraps after 2^32 clears; an entry would have to outlive them all, unfreed, to be taken
     * for live again. */
    es->epoch++;
    es->st.clears++;
    reclaim_ep(ix, ep, RECLAIM_ON_CLEAR);
}

/* ---- lookup ---- */

/* The entry of ep holding own key `own`, if it is k: the guess that spares a holder walk. */
static bool holds_at(const sb_kv_index *ix, uint32_t k, uint32_t ep, uint64_t own)
{
    if (k >= ix->n_alloc)
        return false;
    const entry *en = &ix->entries[k];
    return en->ep == ep && en->own == own && live(ix, en);
}

size_t sb_kv_index_match(sb_kv_index *ix, const uint64_t *own_keys, size_t n, uint32_t *match)
{
    memset(match, 0, ix->n_eps * sizeof(uint32_t));
    if (!ix->used || n == 0)
        return 0;
    /* Block 0: every live holder starts a run. Then, per block, only the endpoints still
     * matching are checked, each first at the entry right after its entry for the previous
     * block: a BlockStored records its blocks in consecutive entries, so a chain stored in one
     * event is followed without walking the block's holders (with 64 endpoints holding a hot
     * prefix, that walk is 64 dependent cache misses a block). An endpoint the guess misses is
     * looked for in one walk of the block's holders. Results are the same either way. */
    uint32_t *alive_ep = ix->alive_ep, *alive_k = ix->alive_k;
    size_t n_alive = 0;
    size_t s = sb_table_find(&ix->own_tab, own_tag(ix, own_keys[0]), NULL, NULL);
    for (uint32_t k = sb_table_val_or(&ix->own_tab, s, NIL); k != NIL; k = ix->entries[k].next_holder) {
        entry *en = &ix->entries[k];
        if (!live(ix, en) || match[en->ep])
            continue; /* stale, or a second entry of the same endpoint */
        match[en->ep] = 1;
        alive_ep[n_alive] = en->ep;
        alive_k[n_alive++] = k;
        if (!en->used)
            en->used = 1; /* written only when it changes: hot prefixes stay clean */
    }
    size_t best = n_alive ? 1 : 0;
    for (size_t i = 1; i < n && n_alive; i++) {
        uint64_t gen = ++ix->generation;
        size_t kept = 0, missed = 0;
        for (size_t a = 0; a < n_alive; a++) {
            uint32_t e = alive_ep[a], k = alive_k[a] + 1;
            if (holds_at(ix, k, e, own_keys[i])) {
                match[e] = (uint32_t)i + 1;
                alive_ep[kept] = e;
                alive_k[kept++] = k;
                if (!ix->entries[k].used)
                    ix->entries[k].used = 1;
            } else {
                ix->stamp[e] = gen; /* still matching i blocks, to be looked for below */
                missed++;
            }
        }
        if (missed) {
            s = sb_table_find(&ix->own_tab, own_tag(ix, own_keys[i]), NULL, NULL);
            for (uint32_t k = sb_table_val_or(&ix->own_tab, s, NIL); k != NIL && missed;
                 k = ix->entries[k].next_holder) {
                entry *en = &ix->entries[k];
                uint32_t e = en->ep;
                if (ix->stamp[e] != gen || match[e] != i || !live(ix, en))
                    continue;
                match[e] = (uint32_t)i + 1;
                alive_ep[kept] = e;
                alive_k[kept++] = k;
                missed--;
                if (!en->used)
                    en->used = 1;
            }
        }
        n_alive = kept;
        if (n_alive)
            best = i + 1;
    }
    return best;
}

/* ---- figures ---- */

uint32_t sb_kv_index_block_size(const sb_kv_index *ix)
{
    return ix->block_size;
}
uint64_t sb_kv_index_key_seed(const sb_kv_index *ix)
{
    return ix->seed;
}

sb_kv_index_ep_stats sb_kv_index_stats(const sb_kv_index *ix, uint32_t ep)
{
    if (ep >= ix->n_eps)
        return (sb_kv_index_ep_stats){0};
    sb_kv_index_ep_stats st = ix->eps[ep].st;
    st.stale = ix->eps[ep].stale;
    return st;
}

size_t sb_kv_index_entries(const sb_kv_index *ix)
{
    return ix->used;
}

size_t sb_kv_index_bytes(const sb_kv_index *ix)
{
    return sizeof(*ix) + (size_t)ix->n_alloc * sizeof(entry) + sb_table_bytes(&ix->own_tab) +
           sb_table_bytes(&ix->eng_tab) + ix->n_eps * (sizeof(ep_state) + sizeof(uint64_t));
}

sb_table_probes sb_kv_index_probes(const sb_kv_index *ix)
{
    sb_table_probes a = ix->own_tab.probes, b = ix->eng_tab.probes;
    a.searches += b.searches;
    a.probes += b.probes;
    if (b.longest > a.longest)
        a.longest = b.longest;
    return a;
}
