/* block_lru: open addressing (linear probing, backward-shift deletion, at most half full) from
 * hash to entry id; entries in one array with a free list and an intrusive LRU list. */
#include "replay/policies/block_lru.h"

#include <string.h>

#include "base/alloc.h"

#define NIL SB_BLOCK_LRU_NONE

typedef struct entry {
    uint64_t hash;
    uint32_t prev, next; /* LRU list when unpinned; next doubles as the free-list link */
    uint32_t refs;
    uint32_t slot; /* its slot in the table, kept for O(1) removal */
} entry;

struct sb_block_lru {
    entry *entries;
    uint64_t *payload;
    size_t words;
    uint32_t n_alloc, free_head;
    uint32_t lru_head, lru_tail; /* head = least recently used */
    uint32_t *slots;             /* entry id per slot, NIL if empty */
    uint32_t cap;                /* slots, a power of two */
    size_t count, pinned;
};

static uint32_t slot_of(uint64_t h, uint32_t cap)
{
    h ^= h >> 33; /* the hashes are xxh3 output already; fold the high bits in anyway */
    return (uint32_t)(h & (cap - 1));
}

sb_block_lru *sb_block_lru_new(size_t payload_words)
{
    sb_block_lru *t = sb_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->words = payload_words;
    t->free_head = t->lru_head = t->lru_tail = NIL;
    t->cap = 1024;
    t->slots = sb_malloc(t->cap * sizeof(uint32_t));
    if (!t->slots) {
        sb_free(t);
        return NULL;
    }
    memset(t->slots, 0xff, t->cap * sizeof(uint32_t));
    return t;
}

void sb_block_lru_free(sb_block_lru *t)
{
    if (!t)
        return;
    sb_free(t->entries);
    sb_free(t->payload);
    sb_free(t->slots);
    sb_free(t);
}

uint32_t sb_block_lru_find(const sb_block_lru *t, uint64_t hash)
{
    for (uint32_t s = slot_of(hash, t->cap);; s = (s + 1) & (t->cap - 1)) {
        uint32_t e = t->slots[s];
        if (e == NIL || t->entries[e].hash == hash)
            return e;
    }
}

static void list_unlink(sb_block_lru *t, uint32_t e)
{
    entry *en = &t->entries[e];
    if (en->prev != NIL)
        t->entries[en->prev].next = en->next;
    else
        t->lru_head = en->next;
    if (en->next != NIL)
        t->entries[en->next].prev = en->prev;
    else
        t->lru_tail = en->prev;
    en->prev = en->next = NIL;
}

static void list_push_mru(sb_block_lru *t, uint32_t e)
{
    entry *en = &t->entries[e];
    en->next = NIL;
    en->prev = t->lru_tail;
    if (t->lru_tail != NIL)
        t->entries[t->lru_tail].next = e;
    else
        t->lru_head = e;
    t->lru_tail = e;
}

static int grow_table(sb_block_lru *t)
{
    uint32_t ncap = t->cap * 2;
    uint32_t *ns = sb_malloc(ncap * sizeof(uint32_t));
    if (!ns)
        return -1;
    memset(ns, 0xff, ncap * sizeof(uint32_t));
    for (uint32_t s = 0; s < t->cap; s++) {
        uint32_t e = t->slots[s];
        if (e == NIL)
            continue;
        uint32_t d = slot_of(t->entries[e].hash, ncap);
        while (ns[d] != NIL)
            d = (d + 1) & (ncap - 1);
        ns[d] = e;
        t->entries[e].slot = d;
    }
    sb_free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static uint32_t alloc_entry(sb_block_lru *t)
{
    if (t->free_head == NIL) {
        uint32_t n = t->n_alloc ? t->n_alloc * 2 : 1024;
        entry *ne = sb_realloc(t->entries, (size_t)n * sizeof(entry));
        if (!ne)
            return NIL;
        t->entries = ne;
        if (t->words) {
            uint64_t *np = sb_realloc(t->payload, (size_t)n * t->words * sizeof(uint64_t));
            if (!np)
                return NIL; /* entries grew but stay unused: harmless */
            t->payload = np;
        }
        for (uint32_t k = n; k-- > t->n_alloc;) {
            ne[k].next = t->free_head;
            t->free_head = k;
        }
        t->n_alloc = n;
    }
    uint32_t e = t->free_head;
    t->free_head = t->entries[e].next;
    return e;
}

uint32_t sb_block_lru_get(sb_block_lru *t, uint64_t hash, bool *created)
{
    uint32_t e = sb_block_lru_find(t, hash);
    if (created)
        *created = e == NIL;
    if (e != NIL)
        return e;
    if ((t->count + 1) * 2 > t->cap && grow_table(t) < 0)
        return NIL;
    e = alloc_entry(t);
    if (e == NIL)
        return NIL;
    uint32_t s = slot_of(hash, t->cap);
    while (t->slots[s] != NIL)
        s = (s + 1) & (t->cap - 1);
    t->slots[s] = e;
    t->entries[e] = (entry){.hash = hash, .prev = NIL, .next = NIL, .refs = 0, .slot = s};
    if (t->words)
        memset(t->payload + (size_t)e * t->words, 0, t->words * sizeof(uint64_t));
    list_push_mru(t, e);
    t->count++;
    return e;
}

void sb_block_lru_touch(sb_block_lru *t, uint32_t e)
{
    if (t->entries[e].refs == 0 && t->lru_tail != e) {
        list_unlink(t, e);
        list_push_mru(t, e);
    }
}

void sb_block_lru_pin(sb_block_lru *t, uint32_t e)
{
    if (t->entries[e].refs++ == 0) {
        list_unlink(t, e);
        t->pinned++;
    }
}

void sb_block_lru_unpin(sb_block_lru *t, uint32_t e)
{
    if (t->entries[e].refs == 0)
        return;
    if (--t->entries[e].refs == 0) {
        list_push_mru(t, e);
        t->pinned--;
    }
}

uint32_t sb_block_lru_refs(const sb_block_lru *t, uint32_t e)
{
    return t->entries[e].refs;
}

/* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
static void remove_slot(sb_block_lru *t, uint32_t s)
{
    uint32_t mask = t->cap - 1;
    t->slots[s] = NIL;
    for (uint32_t j = (s + 1) & mask; t->slots[j] != NIL; j = (j + 1) & mask) {
        uint32_t e = t->slots[j];
        uint32_t home = slot_of(t->entries[e].hash, t->cap);
        /* Move e back to s if its home is not in the cyclic range (s, j]. */
        bool in_range = s <= j ? (home > s && home <= j) : (home > s || home <= j);
        if (!in_range) {
            t->slots[s] = e;
            t->entries[e].slot = s;
            t->slots[j] = NIL;
            s = j;
        }
    }
}

bool sb_block_lru_evict_one(sb_block_lru *t)
{
    uint32_t e = t->lru_head;
    if (e == NIL)
        return false;
    list_unlink(t, e);
    remove_slot(t, t->entries[e].slot);
    t->entries[e].next = t->free_head;
    t->free_head = e;
    t->count--;
    return true;
}

uint64_t *sb_block_lru_payload(sb_block_lru *t, uint32_t e)
{
    return t->words ? t->payload + (size_t)e * t->words : NULL;
}

size_t sb_block_lru_count(const sb_block_lru *t)
{
    return t->count;
}

size_t sb_block_lru_pinned(const sb_block_lru *t)
{
    return t->pinned;
}
