/* block_lru: a keyed table (base/table.h) from hash to entry id; entries in one array with a
 * free list and an intrusive LRU list. */
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
    sb_table table;              /* keyed hash -> entry id */
    size_t count, pinned;
};

sb_block_lru *sb_block_lru_new(size_t payload_words, uint64_t hash_secret)
{
    sb_block_lru *t = sb_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->words = payload_words;
    t->free_head = t->lru_head = t->lru_tail = NIL;
    sb_table_init(&t->table, hash_secret);
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

/* The slot of hash (tag is its keyed hash), or the empty slot where it would go. */
static size_t slot_of(const sb_block_lru *t, uint64_t hash, uint64_t tag)
{
    sb_table_key64 q = {t->entries, sizeof(entry), offsetof(entry, hash), hash};
    size_t steps;
    return sb_table_search(&t->table, tag, sb_table_key64_eq, &q, &steps);
}

uint32_t sb_block_lru_find(const sb_block_lru *t, uint64_t hash)
{
    size_t s = slot_of(t, hash, sb_table_tag_u64(&t->table, hash));
    return sb_table_val_or(&t->table, s, NIL);
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
    uint64_t tag = sb_table_tag_u64(&t->table, hash);
    size_t s = slot_of(t, hash, tag);
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
    sb_table_put(&t->table, slot_of(t, hash, tag), tag, e);
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

static bool is_entry(const void *ctx, uint32_t e) { return *(const uint32_t *)ctx == e; }

bool sb_block_lru_evict_one(sb_block_lru *t)
{
    uint32_t e = t->lru_head;
    if (e == NIL)
        return false;
    list_unlink(t, e);
    size_t steps, s = sb_table_search(&t->table, sb_table_tag_u64(&t->table, t->entries[e].hash), is_entry, &e, &steps);
    sb_table_delete(&t->table, s);
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
