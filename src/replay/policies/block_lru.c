/* block_lru: a table (base/table.h) from hash to entry id; entries in one array with a free
 * list and an intrusive LRU list.
 *
 * The one table whose tags are not keyed: its keys are block hashes of trace prompts in an
 * offline replay, never a live client's, and a keyed hash on every find and get cost replay
 * ~6% of its instructions (cachegrind, 12 policies over 300 requests). The tag folds the high
 * bits in (the hashes are xxh3 output already); the fold is a bijection, so equal tags mean
 * equal hashes and no equality callback is needed. */
#include "replay/policies/block_lru.h"

#include <string.h>

#include "base/alloc.h"
#include "base/table.h"

#define NIL SB_BLOCK_LRU_NONE

typedef struct entry {
    uint64_t hash;
    uint32_t prev, next; /* LRU list when unpinned; next doubles as the free-list link */
    uint32_t refs;
} entry;

struct sb_block_lru {
    entry *entries;
    uint64_t *payload;
    size_t words;
    uint32_t n_alloc, free_head;
    uint32_t lru_head, lru_tail; /* head = least recently used */
    sb_table table;              /* tag_of(hash) -> entry id */
    size_t count, pinned;
};

sb_block_lru *sb_block_lru_new(size_t payload_words)
{
    sb_block_lru *t = sb_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->words = payload_words;
    t->free_head = t->lru_head = t->lru_tail = NIL;
    sb_table_init(&t->table, 0);
    if (sb_table_reserve(&t->table, 512) < 0) {
        sb_free(t);
        return NULL;
    }
    return t;
}

void sb_block_lru_free(sb_block_lru *t)
{
    if (!t)
        return;
    sb_free(t->entries);
    sb_free(t->payload);
    sb_table_free(&t->table);
    sb_free(t);
}

static uint64_t tag_of(uint64_t hash) { return hash ^ hash >> 33; }

/* The slot of hash, or the empty slot where it would go. */
static size_t slot_of(const sb_block_lru *t, uint64_t hash)
{
    size_t steps;
    return sb_table_search(&t->table, tag_of(hash), NULL, NULL, &steps);
}

uint32_t sb_block_lru_find(const sb_block_lru *t, uint64_t hash)
{
    return sb_table_val_or(&t->table, slot_of(t, hash), NIL);
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
    size_t s = slot_of(t, hash);
    bool found = sb_table_occupied(&t->table, s);
    if (created)
        *created = !found;
    if (found)
        return sb_table_val(&t->table, s);
    if (sb_table_reserve(&t->table, t->count + 1) < 0)
        return NIL;
    uint32_t e = alloc_entry(t);
    if (e == NIL)
        return NIL;
    t->entries[e] = (entry){.hash = hash, .prev = NIL, .next = NIL, .refs = 0};
    sb_table_put(&t->table, slot_of(t, hash), tag_of(hash), e);
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

bool sb_block_lru_evict_one(sb_block_lru *t)
{
    uint32_t e = t->lru_head;
    if (e == NIL)
        return false;
    list_unlink(t, e);
    sb_table_delete(&t->table, slot_of(t, t->entries[e].hash));
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
