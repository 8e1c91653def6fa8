/* tok_cache: see tok_cache.h. */
#include "core/tok_cache.h"

#include <stddef.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/table.h"

#define NIL UINT32_MAX

enum { FREE, PROMPT, PREFIX };

/* One cached answer: a whole prompt's ids (with its text-block keys, so evicting it can undo
 * its entries in the block table), or a proven prefix. Keys are combined with the context
 * (see combine), so every table and record speaks one key space. */
typedef struct rec {
    uint64_t key; /* PROMPT: combine(ctx, prompt_key); PREFIX: combine(ctx, chain[j]) */
    uint32_t *tokens;
    size_t n_tokens;
    uint64_t *chain;     /* PROMPT: its combined block keys */
    size_t n_blocks;     /* PROMPT: chain length; PREFIX: j + 1 */
    size_t bytes;        /* what this record accounts for */
    uint32_t prev, next; /* LRU: prev towards the most recently used; free list through next */
    int kind;
} rec;

struct sb_tok_cache {
    rec *recs;
    uint32_t n_alloc, free_head;
    uint32_t mru, lru;
    sb_table prompts;  /* prompt key -> PROMPT record */
    sb_table prefixes; /* block key -> PREFIX record */
    sb_table blocks;   /* block key -> the PROMPT record that last brought it */
    size_t rec_bytes;  /* records' own bytes, ids and chains */
    size_t max_bytes;
    uint32_t margin;
    bool exact_only;
    uint64_t *scratch; /* the current operation's combined block keys */
    size_t scratch_cap;
    sb_tok_cache_stats st;
};

/* A value and the context, into one key: a different context gives unrelated keys. */
static uint64_t combine(uint64_t ctx, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return XXH3_64bits_withSeed(b, sizeof b, ctx);
}

sb_tok_cache *sb_tok_cache_new(const sb_tok_cache_config *cfg)
{
    sb_tok_cache *c = sb_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->max_bytes = cfg->max_bytes ? cfg->max_bytes : SB_TOK_CACHE_DEFAULT_MAX_BYTES;
    c->margin = cfg->margin_tokens ? cfg->margin_tokens : SB_TOK_CACHE_DEFAULT_MARGIN;
    c->exact_only = cfg->exact_only;
    c->free_head = c->mru = c->lru = NIL;
    sb_table_init(&c->prompts, cfg->hash_secret);
    sb_table_init(&c->prefixes, cfg->hash_secret);
    sb_table_init(&c->blocks, cfg->hash_secret);
    return c;
}

static void free_rec_memory(rec *r)
{
    sb_free(r->tokens);
    sb_free(r->chain);
    r->tokens = NULL;
    r->chain = NULL;
}

void sb_tok_cache_free(sb_tok_cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n_alloc; i++)
        free_rec_memory(&c->recs[i]);
    sb_free(c->recs);
    sb_table_free(&c->prompts);
    sb_table_free(&c->prefixes);
    sb_table_free(&c->blocks);
    sb_free(c->scratch);
    sb_free(c);
}

/* ---- records and their LRU ---- */

static void lru_unlink(sb_tok_cache *c, uint32_t i)
{
    rec *r = &c->recs[i];
    if (r->prev != NIL)
        c->recs[r->prev].next = r->next;
    else
        c->mru = r->next;
    if (r->next != NIL)
        c->recs[r->next].prev = r->prev;
    else
        c->lru = r->prev;
}

static void lru_push(sb_tok_cache *c, uint32_t i)
{
    rec *r = &c->recs[i];
    r->prev = NIL;
    r->next = c->mru;
    if (c->mru != NIL)
        c->recs[c->mru].prev = i;
    c->mru = i;
    if (c->lru == NIL)
        c->lru = i;
}

static void touch(sb_tok_cache *c, uint32_t i)
{
    lru_unlink(c, i);
    lru_push(c, i);
}

static size_t table_bytes(const sb_tok_cache *c)
{
    return sb_table_bytes(&c->prompts) + sb_table_bytes(&c->prefixes) + sb_table_bytes(&c->blocks) +
           (size_t)c->n_alloc * sizeof(rec);
}

static size_t held_bytes(const sb_tok_cache *c)
{
    return c->rec_bytes + table_bytes(c);
}

/* The slot of key in t (records compared by their key), or where it would go. */
static size_t find_rec(sb_tok_cache *c, sb_table *t, uint64_t key)
{
    sb_table_key64 q = {c->recs, sizeof(rec), offsetof(rec, key), key};
    return sb_table_find(t, sb_table_tag_u64(t, key), sb_table_key64_eq, &q);
}

/* Removes record i from its tables and the LRU, frees its memory, and puts it on the free
 * list. */
static void drop_rec(sb_tok_cache *c, uint32_t i)
{
    rec *r = &c->recs[i];
    if (r->kind == PROMPT) {
        sb_table_delete(&c->prompts, find_rec(c, &c->prompts, r->key));
        /* Undo its block entries that still point at it (later prompts may have taken some). */
        for (size_t j = 0; j < r->n_blocks; j++) {
            size_t s = sb_table_find(&c->blocks, sb_table_tag_u64(&c->blocks, r->chain[j]), NULL, NULL);
            if (sb_table_occupied(&c->blocks, s) && sb_table_val(&c->blocks, s) == i)
                sb_table_delete(&c->blocks, s);
        }
        c->st.prompts--;
    } else {
        sb_table_delete(&c->prefixes, find_rec(c, &c->prefixes, r->key));
        c->st.prefixes--;
    }
    lru_unlink(c, i);
    c->rec_bytes -= r->bytes;
    free_rec_memory(r);
    r->kind = FREE;
    r->next = c->free_head;
    c->free_head = i;
}

/* Evicts least recently used records until `need` more bytes fit (or nothing is left). */
static void make_room(sb_tok_cache *c, size_t need)
{
    while (c->lru != NIL && held_bytes(c) + need > c->max_bytes) {
        drop_rec(c, c->lru);
        c->st.evictions++;
    }
}

/* A free record slot (NIL on ENOMEM), not yet linked anywhere. */
static uint32_t alloc_rec(sb_tok_cache *c)
{
    if (c->free_head == NIL) {
        if (c->n_alloc >= NIL / 2)
            return NIL;
        uint32_t n = c->n_alloc ? c->n_alloc * 2 : 64;
        rec *nr = sb_realloc(c->recs, (size_t)n * sizeof(rec));
        if (!nr)
            return NIL;
        c->recs = nr;
        for (uint32_t k = n; k-- > c->n_alloc;) {
            nr[k] = (rec){.kind = FREE, .next = c->free_head};
            c->free_head = k;
        }
        c->n_alloc = n;
    }
    uint32_t i = c->free_head;
    c->free_head = c->recs[i].next;
    return i;
}

static void release_rec(sb_tok_cache *c, uint32_t i)
{
    c->recs[i].kind = FREE;
    c->recs[i].next = c->free_head;
    c->free_head = i;
}

static size_t lcp(const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Fills c->scratch with k's combined block keys; false on ENOMEM. */
static bool combine_chain(sb_tok_cache *c, const sb_tok_key *k)
{
    if (k->n_blocks > c->scratch_cap) {
        size_t cap = c->scratch_cap ? c->scratch_cap : 64;
        while (cap < k->n_blocks)
            cap *= 2;
        uint64_t *s = sb_realloc(c->scratch, cap * sizeof(uint64_t));
        if (!s)
            return false;
        c->scratch = s;
        c->scratch_cap = cap;
    }
    for (size_t j = 0; j < k->n_blocks; j++)
        c->scratch[j] = combine(k->ctx, k->chain[j]);
    return true;
}

/* ---- lookup ---- */

sb_tok_hit sb_tok_cache_lookup(sb_tok_cache *c, const sb_tok_key *k)
{
    uint64_t pk = combine(k->ctx, k->prompt_key);
    size_t s = find_rec(c, &c->prompts, pk);
    if (sb_table_occupied(&c->prompts, s)) {
        uint32_t i = sb_table_val(&c->prompts, s);
        touch(c, i);
        c->st.exact_hits++;
        return (sb_tok_hit){
            .tokens = c->recs[i].tokens, .n_tokens = c->recs[i].n_tokens, .exact = true, .blocks = c->recs[i].n_blocks};
    }
    if (c->st.prefixes) {
        /* From the deepest block down, combining keys as it goes: a prompt's own tail is
         * usually short next to the shared part it runs on from. */
        for (size_t j = k->n_blocks; j-- > 0;) {
            s = find_rec(c, &c->prefixes, combine(k->ctx, k->chain[j]));
            if (!sb_table_occupied(&c->prefixes, s))
                continue;
            uint32_t i = sb_table_val(&c->prefixes, s);
            touch(c, i);
            c->st.prefix_hits++;
            return (sb_tok_hit){
                .tokens = c->recs[i].tokens, .n_tokens = c->recs[i].n_tokens, .blocks = c->recs[i].n_blocks};
        }
    }
    c->st.misses++;
    return (sb_tok_hit){0};
}

/* ---- insert ---- */

/* The prefix record under block key bk, if any, meets a new witness: if the witness disagrees
 * inside it, it shrinks to the agreement less the margin (as a new record would be), or goes.
 * Returns whether there was one. */
static bool check_prefix(sb_tok_cache *c, uint64_t bk, const uint32_t *tokens, size_t n_tokens)
{
    size_t s = find_rec(c, &c->prefixes, bk);
    if (!sb_table_occupied(&c->prefixes, s))
        return false;
    uint32_t i = sb_table_val(&c->prefixes, s);
    rec *r = &c->recs[i];
    size_t l = lcp(r->tokens, r->n_tokens, tokens, n_tokens);
    if (l < r->n_tokens) {
        c->st.prefix_shrinks++;
        size_t keep = l > c->margin ? l - c->margin : 0;
        if (keep == 0) {
            drop_rec(c, i);
            return true;
        }
        c->rec_bytes -= (r->n_tokens - keep) * sizeof(uint32_t);
        r->bytes -= (r->n_tokens - keep) * sizeof(uint32_t);
        r->n_tokens = keep; /* the allocation stays, accounted as what is used: it only shrinks */
    }
    touch(c, i);
    return true;
}

/* The proven prefix under block j (key bk): checked against the new answer if a record is
 * there (one the answer refutes is not made again from this pair), else made from the ids the
 * new answer and its witness agree on (agreed). */
static void prove_prefix(sb_tok_cache *c, uint64_t bk, size_t j, const uint32_t *tokens, size_t n_tokens, size_t agreed)
{
    if (check_prefix(c, bk, tokens, n_tokens))
        return;
    size_t keep = agreed > c->margin ? agreed - c->margin : 0;
    if (keep == 0)
        return;
    size_t bytes = sizeof(rec) + keep * sizeof(uint32_t);
    make_room(c, bytes);
    if (sb_table_reserve(&c->prefixes, sb_table_count(&c->prefixes) + 1) < 0)
        return;
    uint32_t i = alloc_rec(c);
    if (i == NIL)
        return;
    uint32_t *copy = sb_malloc(keep * sizeof(uint32_t));
    if (!copy) {
        release_rec(c, i);
        return;
    }
    memcpy(copy, tokens, keep * sizeof(uint32_t));
    c->recs[i] = (rec){.key = bk, .tokens = copy, .n_tokens = keep, .n_blocks = j + 1, .bytes = bytes, .kind = PREFIX};
    size_t s = find_rec(c, &c->prefixes, bk);
    sb_table_put(&c->prefixes, s, sb_table_tag_u64(&c->prefixes, bk), i);
    lru_push(c, i);
    c->rec_bytes += bytes;
    c->st.prefixes++;
    c->st.prefix_records++;
}

int sb_tok_cache_insert(sb_tok_cache *c, const sb_tok_key *k, const uint32_t *tokens, size_t n_tokens,
                        bool share_prefix)
{
    size_t bytes = sizeof(rec) + n_tokens * sizeof(uint32_t) + k->n_blocks * sizeof(uint64_t);
    if (bytes > c->max_bytes / 4 || !combine_chain(c, k)) {
        c->st.refused++;
        return -1;
    }
    uint64_t pk = combine(k->ctx, k->prompt_key);
    size_t s = find_rec(c, &c->prompts, pk);
    if (sb_table_occupied(&c->prompts, s))
        drop_rec(c, sb_table_val(&c->prompts, s)); /* the newer answer replaces it */
    if (share_prefix && !c->exact_only) {
        /* Every prefix record on the chain meets a new witness: one that disagrees inside it
         * shrinks it. Then the deepest earlier prompt sharing text blocks with this one, if
         * its block has no record yet, proves one there. */
        size_t witness_j = SIZE_MAX, agreed = 0;
        for (size_t j = k->n_blocks; j-- > 0;) {
            if (witness_j == SIZE_MAX) {
                s = sb_table_find(&c->blocks, sb_table_tag_u64(&c->blocks, c->scratch[j]), NULL, NULL);
                if (sb_table_occupied(&c->blocks, s)) {
                    const rec *w = &c->recs[sb_table_val(&c->blocks, s)];
                    witness_j = j;
                    agreed = lcp(w->tokens, w->n_tokens, tokens, n_tokens);
                }
            }
            if (c->st.prefixes && j != witness_j)
                check_prefix(c, c->scratch[j], tokens, n_tokens);
        }
        if (witness_j != SIZE_MAX)
            prove_prefix(c, c->scratch[witness_j], witness_j, tokens, n_tokens, agreed);
    }
    make_room(c, bytes);
    if (sb_table_reserve(&c->prompts, sb_table_count(&c->prompts) + 1) < 0 ||
        sb_table_reserve(&c->blocks, sb_table_count(&c->blocks) + k->n_blocks) < 0) {
        c->st.refused++;
        return -1;
    }
    uint32_t i = alloc_rec(c);
    if (i == NIL) {
        c->st.refused++;
        return -1;
    }
    uint32_t *tok = sb_malloc(n_tokens ? n_tokens * sizeof(uint32_t) : 1);
    uint64_t *chain = sb_malloc(k->n_blocks ? k->n_blocks * sizeof(uint64_t) : 1);
    if (!tok || !chain) {
        sb_free(tok);
        sb_free(chain);
        release_rec(c, i);
        c->st.refused++;
        return -1;
    }
    if (n_tokens)
        memcpy(tok, tokens, n_tokens * sizeof(uint32_t));
    if (k->n_blocks)
        memcpy(chain, c->scratch, k->n_blocks * sizeof(uint64_t));
    c->recs[i] = (rec){.key = pk,
                       .tokens = tok,
                       .n_tokens = n_tokens,
                       .chain = chain,
                       .n_blocks = k->n_blocks,
                       .bytes = bytes,
                       .kind = PROMPT};
    s = find_rec(c, &c->prompts, pk);
    sb_table_put(&c->prompts, s, sb_table_tag_u64(&c->prompts, pk), i);
    for (size_t j = 0; j < k->n_blocks; j++) {
        uint64_t tag = sb_table_tag_u64(&c->blocks, chain[j]);
        s = sb_table_find(&c->blocks, tag, NULL, NULL);
        if (sb_table_occupied(&c->blocks, s))
            sb_table_set_val(&c->blocks, s, i); /* the newest prompt stands for the block */
        else
            sb_table_put(&c->blocks, s, tag, i);
    }
    lru_push(c, i);
    c->rec_bytes += bytes;
    c->st.prompts++;
    c->st.inserts++;
    return 0;
}

sb_tok_cache_stats sb_tok_cache_get_stats(const sb_tok_cache *c)
{
    sb_tok_cache_stats st = c->st;
    st.bytes = held_bytes(c);
    return st;
}
