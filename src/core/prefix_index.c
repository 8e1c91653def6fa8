#include "core/prefix_index.h"

#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "base/ilist.h"
#include "base/table.h"

#define NIL UINT32_MAX

/* One (block, endpoint) pair. Indices instead of pointers: 32 bytes, and the array can grow
 * with realloc. `pending`: sent for prefill, not known computed yet (see insert_pending). */
typedef struct entry {
    uint64_t key;          /* the keyed hash of the block hash (see the table below) */
    uint32_t ep : 31;
    uint32_t pending : 1;
    uint32_t next_holder;  /* next entry with the same hash; free-list link when unused */
    sb_ilist_link lru;     /* on its endpoint's LRU list */
    uint32_t stamp;        /* the owner's clock when last inserted or refreshed */
} entry;

typedef struct ep_state {
    sb_ilist lru; /* most recently used at the front */
    uint32_t count;
    uint32_t capacity;
    uint32_t pending;      /* entries marked pending */
} ep_state;

struct sb_prefix_index {
    entry *entries;
    uint32_t n_alloc;      /* entries allocated in the array */
    uint32_t max_entries;
    uint32_t free_head;    /* free list through next_holder */
    size_t used;
    /* Keyed hash of a block hash -> first holder (base/table.h; slots keyed by the owner's
     * secret because block hashes are public functions of a prompt). Blocks are known by
     * their keyed hash, the table's tag, in the table and in the entries, so a block is
     * hashed once per operation and never again by shifts, growth or evictions. Two blocks
     * are confused only if their keyed hashes are equal: a pseudo-random 64-bit value, so
     * about 1 in 2^64 per pair, as for the block hashes themselves, except that it cannot be
     * arranged without the secret. The table's probe counters count inserts, lookups,
     * settles and removals; growth is not counted. */
    sb_table tab;
    /* Keyed hashes by block position: memo_key[i] is the keyed hash of memo_raw[i], the block
     * hash last seen at position i by a match. Kept from one match to the next: the router
     * inserts the prompt it just matched, and consecutive prompts to a pool share their
     * leading blocks (system prompts, conversations), so most blocks are found here instead of
     * hashed (a keyed hash is ~80 instructions; 64 blocks were ~5,300 of a 4 KiB request's
     * 69,000). Each use is checked against the block hash, so a different block at a position
     * just misses and is hashed (then replaces the entry): the memo never changes a result,
     * only how often sb_hash_u64 runs. Entries below memo_n are set; at most MEMO_MAX blocks. */
    uint64_t *memo_raw, *memo_key;
    size_t memo_n, memo_cap;
    uint64_t hashes; /* keyed hashes computed (memo misses), for tests and benchmarks */
    ep_state *eps;
    uint32_t n_eps;
    uint64_t *stamp;       /* per endpoint: lookup generation that last matched it */
    uint64_t generation;
    uint64_t evictions;
    uint64_t expired;
    uint32_t clock;        /* stamp for entries inserted or refreshed now */
    uint32_t evict_cursor; /* next endpoint to consider at the memory bound */
};

static uint64_t keyed(sb_prefix_index *ix, uint64_t h)
{
    ix->hashes++;
    return sb_table_tag_u64(&ix->tab, h);
}

/* The slot holding keyed hash kh, or the empty slot where it would go (counted). */
static size_t find_slot(sb_prefix_index *ix, uint64_t kh) { return sb_table_find(&ix->tab, kh, NULL, NULL); }

/* Inserts and lookups walk a prompt's blocks in order. The keyed hashes of the next AHEAD
 * blocks are computed first and their slots prefetched, so the cache misses of consecutive
 * blocks overlap: a keyed hash is ~70 instructions, enough to keep the CPU from running ahead
 * to the next block's miss on its own (bench/bench_collide.c measures the index with and
 * without). kh[j] gets the keyed hash of hashes[first + j * step]. */
#ifndef SB_PREFIX_INDEX_AHEAD
#define SB_PREFIX_INDEX_AHEAD 8 /* bench/bench_collide.c rebuilds the index as it was with 1 */
#endif
#define AHEAD SB_PREFIX_INDEX_AHEAD
static void look_ahead(sb_prefix_index *ix, const uint64_t *hashes, size_t first, ptrdiff_t step, size_t count,
                       uint64_t *kh, bool record)
{
    for (size_t j = 0; j < count; j++) {
        size_t i = (size_t)((ptrdiff_t)first + (ptrdiff_t)j * step);
        if (i < ix->memo_n && ix->memo_raw[i] == hashes[i]) {
            kh[j] = ix->memo_key[i];
        } else {
            kh[j] = keyed(ix, hashes[i]);
            /* Matches walk from block 0, so i <= memo_n: the set entries stay a prefix. */
            if (record && i <= ix->memo_n && i < ix->memo_cap) {
                ix->memo_raw[i] = hashes[i];
                ix->memo_key[i] = kh[j];
                if (i == ix->memo_n)
                    ix->memo_n = i + 1;
            }
        }
        sb_table_prefetch(&ix->tab, kh[j]);
    }
}

/* 1 MiB of memo covers 64 Ki blocks (4 MiB of prompt at 64-byte blocks); blocks beyond are
 * hashed twice. */
#define MEMO_MAX ((size_t)1 << 16)

/* Makes room for a match of n blocks to record its keyed hashes, keeping what is recorded;
 * on ENOMEM records fewer. */
static void memo_reserve(sb_prefix_index *ix, size_t n)
{
    if (n > MEMO_MAX)
        n = MEMO_MAX;
    if (n <= ix->memo_cap)
        return;
    size_t cap = ix->memo_cap ? ix->memo_cap : 64;
    while (cap < n)
        cap *= 2;
    uint64_t *raw = sb_realloc(ix->memo_raw, cap * sizeof(uint64_t));
    if (!raw)
        return;
    ix->memo_raw = raw;
    uint64_t *key = sb_realloc(ix->memo_key, cap * sizeof(uint64_t));
    if (!key)
        return; /* raw grew, harmlessly: memo_cap still bounds both */
    ix->memo_key = key;
    ix->memo_cap = cap;
}

sb_prefix_index *sb_prefix_index_new(uint32_t n_endpoints, size_t max_entries, uint32_t default_capacity,
                                     uint64_t hash_secret)
{
    sb_prefix_index *ix = sb_calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    sb_table_init(&ix->tab, hash_secret);
    if (n_endpoints > 0x7fffffffu)
        n_endpoints = 0x7fffffffu; /* entries keep the endpoint in 31 bits */
    ix->n_eps = n_endpoints;
    ix->max_entries = max_entries > NIL - 1 ? NIL - 1 : (uint32_t)max_entries;
    ix->free_head = NIL;
    ix->eps = sb_calloc(n_endpoints ? n_endpoints : 1, sizeof(ep_state));
    ix->stamp = sb_calloc(n_endpoints ? n_endpoints : 1, sizeof(uint64_t));
    if (!ix->eps || !ix->stamp || sb_table_reserve(&ix->tab, 512) < 0) {
        sb_prefix_index_free(ix);
        return NULL;
    }
    for (uint32_t e = 0; e < n_endpoints; e++)
        ix->eps[e] = (ep_state){.lru = SB_ILIST_EMPTY, .capacity = default_capacity};
    return ix;
}

void sb_prefix_index_free(sb_prefix_index *ix)
{
    if (!ix)
        return;
    sb_free(ix->entries);
    sb_table_free(&ix->tab);
    sb_free(ix->eps);
    sb_free(ix->stamp);
    sb_free(ix->memo_raw);
    sb_free(ix->memo_key);
    sb_free(ix);
}

/* Entry k's endpoint's LRU list, and the entries as its nodes (base/ilist.h). */
static sb_ilist *lru_of(sb_prefix_index *ix, uint32_t k)
{
    return &ix->eps[ix->entries[k].ep].lru;
}
#define LRU_NODES(ix) SB_ILIST_NODES((ix)->entries, entry, lru)

/* Removes entry k from everything and puts it on the free list. */
static void remove_entry(sb_prefix_index *ix, uint32_t k)
{
    entry *en = &ix->entries[k];
    sb_ilist_remove(lru_of(ix, k), LRU_NODES(ix), k);
    ix->eps[en->ep].count--;
    if (en->pending) {
        ix->eps[en->ep].pending--;
        en->pending = 0;
    }
    size_t s = find_slot(ix, en->key);
    if (sb_table_val(&ix->tab, s) == k) {
        if (en->next_holder == NIL)
            sb_table_delete(&ix->tab, s);
        else
            sb_table_set_val(&ix->tab, s, en->next_holder);
    } else {
        uint32_t p = sb_table_val(&ix->tab, s);
        while (ix->entries[p].next_holder != k)
            p = ix->entries[p].next_holder;
        ix->entries[p].next_holder = en->next_holder;
    }
    en->next_holder = ix->free_head;
    ix->free_head = k;
    ix->used--;
}

static void evict_lru(sb_prefix_index *ix, uint32_t ep)
{
    if (ix->eps[ep].lru.back != NIL) {
        remove_entry(ix, ix->eps[ep].lru.back);
        ix->evictions++;
    }
}

void sb_prefix_index_set_capacity(sb_prefix_index *ix, uint32_t ep, uint32_t blocks)
{
    if (ep >= ix->n_eps)
        return;
    ix->eps[ep].capacity = blocks;
    while (ix->eps[ep].count > blocks)
        evict_lru(ix, ep);
}

uint32_t sb_prefix_index_capacity(const sb_prefix_index *ix, uint32_t ep)
{
    return ep < ix->n_eps ? ix->eps[ep].capacity : 0;
}

/* A free entry, growing the array or, at the memory bound, evicting the LRU entry of an
 * endpoint holding at least its fair share (max_entries / endpoints), found by a cursor that
 * moves round the endpoints: amortised O(1), since at the bound most holders are at or above
 * their share. NIL if none can be had. */
static uint32_t alloc_entry(sb_prefix_index *ix, uint32_t for_ep)
{
    if (ix->free_head == NIL && ix->n_alloc < ix->max_entries) {
        uint32_t n = ix->n_alloc ? ix->n_alloc * 2 : 4096;
        if (n > ix->max_entries)
            n = ix->max_entries;
        entry *ne = sb_realloc(ix->entries, (size_t)n * sizeof(entry));
        if (ne) {
            ix->entries = ne;
            for (uint32_t k = n; k-- > ix->n_alloc;) {
                ne[k].next_holder = ix->free_head;
                ix->free_head = k;
            }
            ix->n_alloc = n;
        }
    }
    if (ix->free_head == NIL) {
        uint32_t fair = ix->max_entries / (ix->n_eps ? ix->n_eps : 1);
        uint32_t victim = for_ep;
        for (uint32_t k = 0; k < ix->n_eps; k++) {
            uint32_t e = ix->evict_cursor;
            ix->evict_cursor = (e + 1) % ix->n_eps;
            if (ix->eps[e].count && ix->eps[e].count >= fair) {
                victim = e;
                break;
            }
        }
        if (ix->eps[victim].count == 0) {
            /* Nobody at its share and the inserter holds nothing: take from anyone. */
            for (uint32_t k = 0; k < ix->n_eps && ix->eps[victim].count == 0; k++)
                victim = (victim + 1) % ix->n_eps;
        }
        evict_lru(ix, victim);
    }
    if (ix->free_head == NIL)
        return NIL;
    uint32_t k = ix->free_head;
    ix->free_head = ix->entries[k].next_holder;
    return k;
}

/* Inserts tail first; returns the entry of the lowest block that was not there before (and
 * its position in *lowest), or NIL if every block was. */
static uint32_t insert(sb_prefix_index *ix, uint32_t ep, const uint64_t *hashes, size_t n, size_t *lowest)
{
    uint32_t lowest_new = NIL;
    if (ep >= ix->n_eps || ix->eps[ep].capacity == 0)
        return NIL;
    uint64_t kh[AHEAD];
    for (size_t i = n; i-- > 0;) {
        size_t ahead = (n - 1 - i) % AHEAD;
        if (ahead == 0)
            look_ahead(ix, hashes, i, -1, i + 1 < AHEAD ? i + 1 : AHEAD, kh, false);
        size_t s = find_slot(ix, kh[ahead]);
        uint32_t k = sb_table_val_or(&ix->tab, s, NIL);
        while (k != NIL && ix->entries[k].ep != ep)
            k = ix->entries[k].next_holder;
        if (k != NIL) {
            sb_ilist_move_to_front(lru_of(ix, k), LRU_NODES(ix), k);
            ix->entries[k].stamp = ix->clock;
            continue;
        }
        if (ix->eps[ep].count >= ix->eps[ep].capacity)
            evict_lru(ix, ep);
        k = alloc_entry(ix, ep);
        /* Out of memory: evictions may have taken lowest_new; nothing is marked pending. */
        if (k == NIL)
            return NIL;
        /* Evictions may have moved table slots: find the slot again. */
        if (sb_table_reserve(&ix->tab, sb_table_count(&ix->tab) + 1) < 0) {
            ix->entries[k].next_holder = ix->free_head;
            ix->free_head = k;
            return NIL;
        }
        s = find_slot(ix, kh[ahead]);
        entry *en = &ix->entries[k];
        en->key = kh[ahead];
        en->ep = ep & 0x7fffffffu;
        en->pending = 0;
        en->stamp = ix->clock;
        lowest_new = k;
        *lowest = i;
        if (!sb_table_occupied(&ix->tab, s)) {
            en->next_holder = NIL;
            sb_table_put(&ix->tab, s, kh[ahead], k);
        } else {
            en->next_holder = sb_table_val(&ix->tab, s);
            sb_table_set_val(&ix->tab, s, k);
        }
        ix->eps[ep].count++;
        ix->used++;
        sb_ilist_push_front(lru_of(ix, k), LRU_NODES(ix), k);
    }
    return lowest_new;
}

void sb_prefix_index_insert(sb_prefix_index *ix, uint32_t ep, const uint64_t *hashes, size_t n)
{
    size_t lowest;
    (void)insert(ix, ep, hashes, n, &lowest);
}

bool sb_prefix_index_insert_pending(sb_prefix_index *ix, uint32_t ep, const uint64_t *hashes, size_t n,
                                    uint64_t *pending_hash)
{
    size_t lowest = 0;
    uint32_t k = insert(ix, ep, hashes, n, &lowest);
    /* Entries below the lowest new one were there already; those above it can only be reached
     * through it (matches count leading blocks), so one mark holds back the whole new part. */
    if (k == NIL)
        return false;
    ix->entries[k].pending = 1;
    ix->eps[ep].pending++;
    *pending_hash = hashes[lowest];
    return true;
}

void sb_prefix_index_settle_all(sb_prefix_index *ix)
{
    for (uint32_t k = 0; k < ix->n_alloc; k++)
        ix->entries[k].pending = 0;
    for (uint32_t e = 0; e < ix->n_eps; e++)
        ix->eps[e].pending = 0;
}

static uint32_t find_entry(sb_prefix_index *ix, uint32_t ep, uint64_t h)
{
    size_t s = find_slot(ix, keyed(ix, h));
    uint32_t k = sb_table_val_or(&ix->tab, s, NIL);
    while (k != NIL && ix->entries[k].ep != ep)
        k = ix->entries[k].next_holder;
    return k;
}

void sb_prefix_index_settle(sb_prefix_index *ix, uint32_t ep, uint64_t pending_hash, bool computed)
{
    if (ep >= ix->n_eps)
        return;
    uint32_t k = find_entry(ix, ep, pending_hash);
    if (k == NIL || !ix->entries[k].pending)
        return; /* evicted, cleared, or settled by another request that computed it */
    if (computed) {
        ix->entries[k].pending = 0;
        ix->eps[ep].pending--;
    } else {
        remove_entry(ix, k);
    }
}

size_t sb_prefix_index_match(sb_prefix_index *ix, const uint64_t *hashes, size_t n, uint32_t *match)
{
    memset(match, 0, ix->n_eps * sizeof(uint32_t));
    uint64_t gen = ++ix->generation;
    size_t best = 0;
    /* stamp[e] == gen means e held every block so far; match[e] counts them. */
    uint64_t kh[AHEAD];
    memo_reserve(ix, n);
    for (size_t i = 0; i < n; i++) {
        if (i % AHEAD == 0)
            look_ahead(ix, hashes, i, 1, n - i < AHEAD ? n - i : AHEAD, kh, true);
        size_t s = find_slot(ix, kh[i % AHEAD]);
        bool advanced = false;
        uint32_t head = sb_table_val_or(&ix->tab, s, NIL);
        for (uint32_t k = head; k != NIL; k = ix->entries[k].next_holder) {
            uint32_t e = ix->entries[k].ep;
            if (ix->entries[k].pending)
                continue; /* still being computed there: nothing to reuse yet */
            if (i == 0) {
                ix->stamp[e] = gen;
                match[e] = 1;
                advanced = true;
            } else if (ix->stamp[e] == gen && match[e] == i) {
                match[e] = (uint32_t)i + 1;
                advanced = true;
            }
        }
        if (!advanced)
            break;
        best = i + 1;
    }
    return best;
}

int sb_prefix_index_remap(sb_prefix_index *ix, const int32_t *map, uint32_t n_new, uint32_t default_capacity)
{
    if (n_new > 0x7fffffffu)
        return -1;
    ep_state *eps = sb_calloc(n_new ? n_new : 1, sizeof(ep_state));
    uint64_t *stamp = sb_calloc(n_new ? n_new : 1, sizeof(uint64_t));
    if (!eps || !stamp) {
        sb_free(eps);
        sb_free(stamp);
        return -1;
    }
    for (uint32_t e = 0; e < n_new; e++)
        eps[e] = (ep_state){.lru = SB_ILIST_EMPTY, .capacity = default_capacity};
    for (uint32_t e = 0; e < ix->n_eps; e++) {
        if (map[e] < 0 || (uint32_t)map[e] >= n_new) {
            sb_prefix_index_clear_endpoint(ix, e); /* its entries name e: before any renumbering */
            continue;
        }
        /* The list links are entry indexes, independent of the ep field: walk, renumber, and
         * the state (list ends, counts, capacity) moves as it is. */
        for (uint32_t k = ix->eps[e].lru.front; k != NIL; k = ix->entries[k].lru.next)
            ix->entries[k].ep = (uint32_t)map[e];
        eps[map[e]] = ix->eps[e];
    }
    sb_free(ix->eps);
    sb_free(ix->stamp);
    ix->eps = eps;
    ix->stamp = stamp;
    ix->n_eps = n_new;
    ix->evict_cursor = 0;
    return 0;
}

void sb_prefix_index_clear_endpoint(sb_prefix_index *ix, uint32_t ep)
{
    if (ep >= ix->n_eps)
        return;
    while (ix->eps[ep].lru.back != NIL)
        remove_entry(ix, ix->eps[ep].lru.back);
}

void sb_prefix_index_set_clock(sb_prefix_index *ix, uint32_t stamp)
{
    ix->clock = stamp;
}

size_t sb_prefix_index_expire(sb_prefix_index *ix, uint32_t ep, uint32_t before)
{
    if (ep >= ix->n_eps)
        return 0;
    /* An endpoint's list runs from the newest stamp (MRU) to the oldest (LRU), since entries
     * reach the MRU end only by an insert or refresh, stamped with a clock that never goes
     * back: the expired entries are a run at the LRU end. */
    size_t n = 0;
    uint32_t k;
    while ((k = ix->eps[ep].lru.back) != NIL && (int32_t)(ix->entries[k].stamp - before) < 0) {
        remove_entry(ix, k);
        n++;
    }
    ix->expired += n;
    return n;
}

uint64_t sb_prefix_index_expired(const sb_prefix_index *ix)
{
    return ix->expired;
}

size_t sb_prefix_index_entries(const sb_prefix_index *ix) { return ix->used; }

size_t sb_prefix_index_endpoint_entries(const sb_prefix_index *ix, uint32_t ep)
{
    return ep < ix->n_eps ? ix->eps[ep].count : 0;
}

size_t sb_prefix_index_endpoint_pending(const sb_prefix_index *ix, uint32_t ep)
{
    return ep < ix->n_eps ? ix->eps[ep].pending : 0;
}

size_t sb_prefix_index_bytes(const sb_prefix_index *ix)
{
    return sizeof(*ix) + (size_t)ix->n_alloc * sizeof(entry) + sb_table_bytes(&ix->tab) +
           ix->n_eps * (sizeof(ep_state) + sizeof(uint64_t)) + ix->memo_cap * 2 * sizeof(uint64_t);
}

uint64_t sb_prefix_index_evictions(const sb_prefix_index *ix) { return ix->evictions; }

sb_table_probes sb_prefix_index_probes(const sb_prefix_index *ix) { return ix->tab.probes; }

uint64_t sb_prefix_index_hashes(const sb_prefix_index *ix)
{
    return ix->hashes;
}
