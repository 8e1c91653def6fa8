/* table: the one open-addressing hash table every module uses (prefix index, flow tenants,
 * router model names, the simulator's blocks and request ids, API-key digests, the replay
 * policies' block tables).
 *
 * What a slot holds: a 64-bit tag and a 32-bit value. The tag is what the caller hashed the
 * key to (usually sb_table_tag_u64 / sb_table_tag_bytes, keyed under the table's secret:
 * base/hash.h says why); its low bits pick the home slot, and it is kept so that probing,
 * backward shifts and growth never hash again. The value is the caller's: an index into its
 * own entry array (an endpoint list head, a tenant, a block id...). Entries stay in the
 * caller's arrays, like redis's dict leaves values to its dictType: the table never copies
 * keys, so strings, digests and 64-bit keys all fit the same 12 bytes per slot.
 *
 * Two keys are told apart by the tag first and then, if the caller passes one, by an equality
 * callback on the stored value (model names compare their bytes). A caller whose key *is* a
 * pseudo-random 64-bit value (the prefix index's keyed block hashes) passes none: tags equal
 * means keys equal, as likely wrong as a 64-bit hash collision.
 *
 * Layout: linear probing over a power-of-two array, at most half full, backward-shift
 * deletion (no tombstones, so probe runs stay short under churn), doubled on demand. Tags and
 * values live in two arrays (12 bytes a slot rather than a padded 16) and the search is
 * inline in this header: the prefix index probes it once per prompt block and prefetches
 * slots ahead of use (sb_table_prefetch).
 *
 * Contract: lookups never allocate. Only sb_table_reserve allocates, and reports failure
 * (-1, table unchanged). A slot number returned by a search is valid until the next reserve,
 * put or delete. Placement is the only thing the secret changes: nothing here iterates in slot
 * order on behalf of the caller, so results do not depend on it.
 * Not thread-safe: one owner. Pure: no I/O. */
#ifndef SB_BASE_TABLE_H
#define SB_BASE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

/* Caller-embedded; all fields private except `probes` (read-only). A zeroed struct is an
 * empty table under secret-key zero; sb_table_init sets the secret. */
typedef struct sb_table {
    uint64_t *tags;
    uint32_t *vals;        /* value + 1; 0 marks an empty slot (so calloc'd pages stay untouched) */
    size_t cap;            /* slots: 0 or a power of two */
    size_t used;
    sb_hash_key key;
    bool wipe;             /* clear tags before freeing their memory (sb_table_wipe_tags) */
    sb_table_probes probes; /* searches made through sb_table_find */
} sb_table;

/* Stored values are below this. */
#define SB_TABLE_VAL_MAX (UINT32_MAX - 1)

/* Equality of the searched key with the entry whose value is val (ctx is the caller's). */
typedef bool (*sb_table_eq_fn)(const void *ctx, uint32_t val);

/* An empty table keyed by secret (base/hash.h: the gateway draws it from the OS, replay
 * derives it from its seed). Allocates nothing. */
void sb_table_init(sb_table *t, uint64_t secret);
/* Frees the slots; the table is left empty and reusable, secret kept. */
void sb_table_free(sb_table *t);

/* For tags derived from secrets (API-key digests): from now on, tag memory is cleared before
 * it is freed, by growth and by sb_table_free, so no freed block holds them. */
static inline void sb_table_wipe_tags(sb_table *t) { t->wipe = true; }

/* Makes room for n entries at most half full, doubling (from at least 16 slots) as needed.
 * 0 on success; -1 if the slots cannot be allocated or n is too large, the table unchanged.
 * Slot numbers held from before are invalid after a successful call. sb_table_grow is its
 * allocating half. */
int sb_table_grow(sb_table *t, size_t n);
static inline int sb_table_reserve(sb_table *t, size_t n)
{
    /* Inline: inserts call it once per new key, and there is nearly always room. */
    return t->cap && n <= t->cap / 2 ? 0 : sb_table_grow(t, n);
}

/* Tags under the table's secret: the usual way to hash a key for this table. */
static inline uint64_t sb_table_tag_u64(const sb_table *t, uint64_t key) { return sb_hash_u64(&t->key, key); }
uint64_t sb_table_tag_bytes(const sb_table *t, const void *data, size_t len);

/* The slot holding an entry with this tag (and, if eq is not NULL, eq(ctx, value) true), or
 * the empty slot ending its probe run, where such an entry would be put; SIZE_MAX (absent, and
 * no place to put: reserve first) while the table has no slots. *steps gets the slots
 * examined beyond the home slot. Const and uncounted: for const owners; sb_table_find counts. */
static inline size_t sb_table_search(const sb_table *t, uint64_t tag, sb_table_eq_fn eq, const void *ctx,
                                     size_t *steps)
{
    if (!t->cap) {
        *steps = 0;
        return SIZE_MAX;
    }
    size_t mask = t->cap - 1, i = (size_t)tag & mask, n = 0;
    for (; t->vals[i]; i = (i + 1) & mask, n++)
        if (t->tags[i] == tag && (!eq || eq(ctx, t->vals[i] - 1)))
            break;
    *steps = n;
    return i;
}

/* sb_table_search, counted in t->probes (a table with no slots counts nothing). */
static inline size_t sb_table_find(sb_table *t, uint64_t tag, sb_table_eq_fn eq, const void *ctx)
{
    size_t steps, i = sb_table_search(t, tag, eq, ctx, &steps);
    if (i != SIZE_MAX)
        sb_table_probes_add(&t->probes, steps);
    return i;
}

/* Whether slot i (from a search) holds an entry; SIZE_MAX holds none. */
static inline bool sb_table_occupied(const sb_table *t, size_t i) { return i != SIZE_MAX && t->vals[i] != 0; }
/* The value in occupied slot i. */
static inline uint32_t sb_table_val(const sb_table *t, size_t i) { return t->vals[i] - 1; }
/* The value in slot i if occupied, else none. */
static inline uint32_t sb_table_val_or(const sb_table *t, size_t i, uint32_t none)
{
    return sb_table_occupied(t, i) ? sb_table_val(t, i) : none;
}
/* Replaces the value in occupied slot i (same key). */
static inline void sb_table_set_val(sb_table *t, size_t i, uint32_t val) { t->vals[i] = val + 1; }

/* Puts (tag, val) into empty slot i, which a search for tag has just returned with no
 * reserve, put or delete since. The caller has reserved room for it (sb_table_reserve(t,
 * used + 1)) before searching. */
static inline void sb_table_put(sb_table *t, size_t i, uint64_t tag, uint32_t val)
{
    t->tags[i] = tag;
    t->vals[i] = val + 1;
    t->used++;
}

/* The equality callback for the usual case: the caller's entries are an array of fixed-size
 * structs with a 64-bit key field. Pass an sb_table_key64 as ctx: the array, its stride and
 * the key field's offset (offsetof), and the key sought. */
typedef struct sb_table_key64 {
    const void *entries;
    size_t stride, offset;
    uint64_t key;
} sb_table_key64;
bool sb_table_key64_eq(const void *ctx, uint32_t val);

/* Empties occupied slot i and shifts the rest of its probe run back into the hole. */
void sb_table_delete(sb_table *t, size_t i);

/* Hints the cache that the home slot of tag will be searched soon. Nothing for a table with
 * no slots yet. */
static inline void sb_table_prefetch(const sb_table *t, uint64_t tag)
{
    if (!t->cap)
        return;
    size_t i = (size_t)tag & (t->cap - 1);
    __builtin_prefetch(&t->tags[i]);
    __builtin_prefetch(&t->vals[i]);
}

static inline size_t sb_table_count(const sb_table *t) { return t->used; }
/* Bytes held by the slots. */
static inline size_t sb_table_bytes(const sb_table *t) { return t->cap * (sizeof(uint64_t) + sizeof(uint32_t)); }

#endif
