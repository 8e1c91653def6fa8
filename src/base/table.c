/* table: see table.h. */
#include "base/table.h"

#include <string.h>

#include "base/alloc.h"

#define MIN_CAP 16

void sb_table_init(sb_table *t, uint64_t secret)
{
    *t = (sb_table){.key = sb_hash_key_from_secret(secret)};
}

static void free_tags(const sb_table *t, uint64_t *tags, size_t cap)
{
    if (t->wipe && tags)
        explicit_bzero(tags, cap * sizeof(uint64_t)); /* not elided like a memset before free */
    sb_free(tags);
}

void sb_table_free(sb_table *t)
{
    free_tags(t, t->tags, t->cap);
    sb_free(t->vals);
    t->tags = NULL;
    t->vals = NULL;
    t->cap = t->used = 0;
}

uint64_t sb_table_tag_bytes(const sb_table *t, const void *data, size_t len) { return sb_hash_bytes(&t->key, data, len); }

int sb_table_grow(sb_table *t, size_t n)
{
    if (n > SIZE_MAX / 4)
        return -1;
    size_t cap = t->cap ? t->cap : MIN_CAP;
    while (cap < 2 * n)
        cap *= 2;
    if (cap == t->cap)
        return 0;
    /* Tags are only read where a value is set: malloc, not calloc, for them. */
    uint64_t *tags = sb_malloc(cap * sizeof(uint64_t));
    uint32_t *vals = sb_calloc(cap, sizeof(uint32_t));
    if (!tags || !vals) {
        sb_free(tags);
        sb_free(vals);
        return -1;
    }
    size_t mask = cap - 1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->vals[i])
            continue;
        size_t j = (size_t)t->tags[i] & mask;
        while (vals[j])
            j = (j + 1) & mask;
        tags[j] = t->tags[i];
        vals[j] = t->vals[i];
    }
    free_tags(t, t->tags, t->cap);
    sb_free(t->vals);
    t->tags = tags;
    t->vals = vals;
    t->cap = cap;
    return 0;
}

bool sb_table_key64_eq(const void *ctx, uint32_t val)
{
    const sb_table_key64 *q = ctx;
    uint64_t k;
    memcpy(&k, (const char *)q->entries + (size_t)val * q->stride + q->offset, sizeof k);
    return k == q->key;
}

void sb_table_delete(sb_table *t, size_t i)
{
    size_t mask = t->cap - 1;
    t->vals[i] = 0;
    t->used--;
    for (size_t j = (i + 1) & mask; t->vals[j]; j = (j + 1) & mask) {
        size_t home = (size_t)t->tags[j] & mask;
        /* The entry at j may fill the hole at i unless its home lies cyclically in (i, j]:
         * then a search starting there would no longer pass over the hole to reach it. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        t->tags[i] = t->tags[j];
        t->vals[i] = t->vals[j];
        t->vals[j] = 0;
        i = j;
    }
}
