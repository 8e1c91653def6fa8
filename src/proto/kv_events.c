/* The KV-event decoder: a pull reader over msgpack written for this one schema.
 *
 * Why not msgpack-c's unpacker: it builds an object tree in a zone, 24 bytes per value, so a
 * 4 MiB batch of token ids costs ~100 MiB of allocations before a single field is read, and the
 * tree is walked a second time to fill the result. Reading the bytes in place costs nothing but
 * the scratch the caller already owns, and bounds are checked before anything is written.
 * msgpack-c's packer builds the payloads the unit tests and the benchmark decode, so the two
 * are checked against each other. */
#include "proto/kv_events.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

sb_kv_limits sb_kv_limits_default(void)
{
    return (sb_kv_limits){
        .max_payload_bytes = (size_t)8 << 20,
        .max_events = 16384,
        .max_hashes_per_event = 16384,
        .max_tokens_per_event = 262144,
        .max_batch_hashes = 131072,
        .max_batch_tokens = 1048576,
    };
}

bool sb_kv_limits_equal(const sb_kv_limits *a, const sb_kv_limits *b)
{
    return a->max_payload_bytes == b->max_payload_bytes && a->max_events == b->max_events &&
           a->max_hashes_per_event == b->max_hashes_per_event && a->max_tokens_per_event == b->max_tokens_per_event &&
           a->max_batch_hashes == b->max_batch_hashes && a->max_batch_tokens == b->max_batch_tokens;
}

int sb_kv_scratch_init(sb_kv_scratch *s, const sb_kv_limits *lim)
{
    memset(s, 0, sizeof *s);
    s->events = sb_malloc((size_t)(lim->max_events ? lim->max_events : 1) * sizeof *s->events);
    s->hashes = sb_malloc((size_t)(lim->max_batch_hashes ? lim->max_batch_hashes : 1) * sizeof *s->hashes);
    s->tokens = sb_malloc((size_t)(lim->max_batch_tokens ? lim->max_batch_tokens : 1) * sizeof *s->tokens);
    if (!s->events || !s->hashes || !s->tokens) {
        sb_kv_scratch_free(s);
        return -1;
    }
    s->events_cap = lim->max_events;
    s->hashes_cap = lim->max_batch_hashes;
    s->tokens_cap = lim->max_batch_tokens;
    return 0;
}

void sb_kv_scratch_free(sb_kv_scratch *s)
{
    sb_free(s->events);
    sb_free(s->hashes);
    sb_free(s->tokens);
    memset(s, 0, sizeof *s);
}

uint64_t sb_kv_fold_hash(const uint8_t *b, size_t len)
{
    size_t from = len > 8 ? len - 8 : 0;
    uint64_t v = 0;
    for (size_t i = from; i < len; i++)
        v = v << 8 | b[i];
    return v;
}

const char *sb_kv_kind_name(sb_kv_kind k)
{
    switch (k) {
    case SB_KV_BLOCK_STORED: return "BlockStored";
    case SB_KV_BLOCK_REMOVED: return "BlockRemoved";
    case SB_KV_ALL_CLEARED: return "AllBlocksCleared";
    }
    return "?";
}

const char *sb_kv_error_name(int code)
{
    switch (code) {
    case 0: return "ok";
    case SB_KV_E_TRUNCATED: return "truncated";
    case SB_KV_E_TYPE: return "wrong type";
    case SB_KV_E_LIMIT: return "over a limit";
    case SB_KV_E_SYNTAX: return "not msgpack";
    }
    return "?";
}

/* ---- the msgpack reader ---- */

enum mp_type { MP_NIL, MP_BOOL, MP_UINT, MP_INT, MP_FLOAT, MP_STR, MP_BIN, MP_EXT, MP_ARRAY, MP_MAP };

/* One value's head. Strings, bins and exts are consumed whole (ptr/len point at their bytes);
 * arrays and maps only their head (n: items, or pairs). */
typedef struct mp_val {
    enum mp_type type;
    uint64_t u; /* MP_UINT, MP_BOOL; MP_ARRAY/MP_MAP: n */
    int64_t i;  /* MP_INT (always negative: non-negative integers are MP_UINT) */
    double f;
    const uint8_t *ptr;
    uint32_t len;
} mp_val;

typedef struct rd {
    const uint8_t *p;
    size_t len, pos;
    const sb_kv_limits *lim;
    sb_kv_scratch *s;
    uint32_t h_used, t_used; /* scratch entries filled so far */
    sb_kv_batch *out;
    sb_kv_error *err;
} rd;

static int fail(rd *r, int code, const char *what)
{
    if (r->err) {
        r->err->code = code;
        r->err->offset = r->pos;
        r->err->what = what;
    }
    return code;
}

static uint64_t be64(const uint8_t *b)
{
    uint64_t v;
    memcpy(&v, b, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* n (1, 2, 4 or 8) bytes, big-endian. */
static uint64_t be(const uint8_t *b, int n)
{
    if (n == 8)
        return be64(b);
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | b[i];
    return v;
}

/* Takes n bytes at the cursor; NULL if fewer remain. */
static const uint8_t *take(rd *r, size_t n)
{
    if (r->len - r->pos < n)
        return NULL;
    const uint8_t *b = r->p + r->pos;
    r->pos += n;
    return b;
}

/* Reads the head of the next value into *v. 0 or a negative SB_KV_E_*. */
static int next(rd *r, mp_val *v)
{
    const uint8_t *b = take(r, 1);
    if (!b)
        return fail(r, SB_KV_E_TRUNCATED, "value");
    uint8_t c = *b;
    size_t blen = 0; /* str/bin/ext payload length, once known */
    int lenb = 0;    /* bytes of a length field to read */
    /* No memset: readers look only at the fields of the type they got. */
    if (c <= 0x7f) {
        v->type = MP_UINT, v->u = c;
        return 0;
    }
    if (c >= 0xe0) {
        v->type = MP_INT, v->i = (int8_t)c;
        return 0;
    }
    if (c <= 0x8f) {
        v->type = MP_MAP, v->u = c & 0x0f;
        return 0;
    }
    if (c <= 0x9f) {
        v->type = MP_ARRAY, v->u = c & 0x0f;
        return 0;
    }
    if (c <= 0xbf) {
        v->type = MP_STR, blen = c & 0x1f;
        goto payload;
    }
    switch (c) {
    case 0xc0: v->type = MP_NIL; return 0;
    case 0xc2:
    case 0xc3: v->type = MP_BOOL, v->u = c & 1; return 0;
    case 0xc4:
    case 0xc5:
    case 0xc6: v->type = MP_BIN, lenb = 1 << (c - 0xc4); break;
    case 0xc7:
    case 0xc8:
    case 0xc9: v->type = MP_EXT, lenb = 1 << (c - 0xc7); break;
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        v->type = MP_EXT, blen = (size_t)1 << (c - 0xd4);
        if (!take(r, 1)) /* the ext type byte */
            return fail(r, SB_KV_E_TRUNCATED, "ext");
        goto payload;
    case 0xd9:
    case 0xda:
    case 0xdb: v->type = MP_STR, lenb = 1 << (c - 0xd9); break;
    case 0xca:
    case 0xcb: {
        int n = c == 0xca ? 4 : 8;
        const uint8_t *x = take(r, (size_t)n);
        if (!x)
            return fail(r, SB_KV_E_TRUNCATED, "float");
        uint64_t bits = be(x, n);
        v->type = MP_FLOAT;
        if (n == 4) {
            uint32_t b32 = (uint32_t)bits;
            float f;
            memcpy(&f, &b32, 4);
            v->f = f;
        } else {
            memcpy(&v->f, &bits, 8);
        }
        return 0;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: {
        int n = 1 << (c - 0xcc);
        const uint8_t *x = take(r, (size_t)n);
        if (!x)
            return fail(r, SB_KV_E_TRUNCATED, "integer");
        v->type = MP_UINT, v->u = be(x, n);
        return 0;
    }
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        int n = 1 << (c - 0xd0);
        const uint8_t *x = take(r, (size_t)n);
        if (!x)
            return fail(r, SB_KV_E_TRUNCATED, "integer");
        uint64_t raw = be(x, n);
        /* Sign-extend from n bytes; a non-negative value is reported as MP_UINT, so readers
         * check one type whatever width the encoder chose. */
        int shift = 64 - 8 * n;
        int64_t sv = shift ? (int64_t)(raw << shift) >> shift : (int64_t)raw;
        if (sv >= 0)
            v->type = MP_UINT, v->u = (uint64_t)sv;
        else
            v->type = MP_INT, v->i = sv;
        return 0;
    }
    case 0xdc:
    case 0xdd:
    case 0xde:
    case 0xdf: {
        int n = c == 0xdc || c == 0xde ? 2 : 4;
        const uint8_t *x = take(r, (size_t)n);
        if (!x)
            return fail(r, SB_KV_E_TRUNCATED, "container length");
        v->type = c <= 0xdd ? MP_ARRAY : MP_MAP;
        v->u = be(x, n);
        return 0;
    }
    default: /* 0xc1: never used */ r->pos--; return fail(r, SB_KV_E_SYNTAX, "reserved byte 0xc1");
    }
    {
        const uint8_t *x = take(r, (size_t)lenb);
        if (!x)
            return fail(r, SB_KV_E_TRUNCATED, "length");
        blen = be(x, lenb);
        if (v->type == MP_EXT && !take(r, 1))
            return fail(r, SB_KV_E_TRUNCATED, "ext");
    }
payload:
    v->ptr = take(r, blen);
    if (!v->ptr)
        return fail(r, SB_KV_E_TRUNCATED, "string or bin");
    v->len = (uint32_t)blen;
    return 0;
}

/* Skips `items` whole values whose heads are still to read. No recursion: `todo` counts the
 * values left, a container adding its children. Every value takes at least one byte, so a
 * count larger than the bytes left is a truncation known at once, and the loop is linear. */
static int skip_values(rd *r, uint64_t todo)
{
    while (todo) {
        if (todo > r->len - r->pos)
            return fail(r, SB_KV_E_TRUNCATED, "container");
        mp_val v;
        int rc = next(r, &v);
        if (rc)
            return rc;
        todo--;
        if (v.type == MP_ARRAY)
            todo += v.u;
        else if (v.type == MP_MAP)
            todo += 2 * v.u;
    }
    return 0;
}

/* The rest of a value whose head was read. */
static int skip_rest(rd *r, const mp_val *v)
{
    if (v->type == MP_ARRAY)
        return skip_values(r, v->u);
    if (v->type == MP_MAP)
        return skip_values(r, 2 * v->u);
    return 0;
}

static bool str_is(const mp_val *v, const char *s)
{
    size_t n = strlen(s);
    return v->type == MP_STR && v->len == n && memcmp(v->ptr, s, n) == 0;
}

/* ---- fields ---- */

enum field {
    F_HASHES,
    F_PARENT,
    F_TOKENS,
    F_BLOCK_SIZE,
    F_LORA_ID,
    F_MEDIUM,
    F_LORA_NAME,
    F_EXTRA_KEYS,
    F_GROUP_IDX,
    F_SPEC_KIND,
    F_SPEC_WINDOW,
    F_UNKNOWN,
};

/* Map keys, as vLLM's msgspec structs name them (vllm/distributed/kv_events.py), with their
 * lengths so a key is compared only with names of its length. */
#define KEY(f, name) [f] = {name, sizeof name - 1}
static const struct {
    const char *name;
    uint32_t len;
} field_keys[F_UNKNOWN] = {
    KEY(F_HASHES, "block_hashes"),
    KEY(F_PARENT, "parent_block_hash"),
    KEY(F_TOKENS, "token_ids"),
    KEY(F_BLOCK_SIZE, "block_size"),
    KEY(F_LORA_ID, "lora_id"),
    KEY(F_MEDIUM, "medium"),
    KEY(F_LORA_NAME, "lora_name"),
    KEY(F_EXTRA_KEYS, "extra_keys"),
    KEY(F_GROUP_IDX, "group_idx"),
    KEY(F_SPEC_KIND, "kv_cache_spec_kind"),
    KEY(F_SPEC_WINDOW, "kv_cache_spec_sliding_window"),
};
#undef KEY

/* Array positions after the tag, per kind (the structs' field order). */
static const enum field stored_order[] = {F_HASHES,    F_PARENT,     F_TOKENS,    F_BLOCK_SIZE, F_LORA_ID,    F_MEDIUM,
                                          F_LORA_NAME, F_EXTRA_KEYS, F_GROUP_IDX, F_SPEC_KIND,  F_SPEC_WINDOW};
static const enum field removed_order[] = {F_HASHES, F_MEDIUM, F_GROUP_IDX};

static int read_hash(rd *r, uint64_t *h)
{
    /* uint64 is the common form (vLLM's digests are above 2^32 almost always). */
    if (r->len - r->pos >= 9 && r->p[r->pos] == 0xcf) {
        *h = be64(r->p + r->pos + 1);
        r->pos += 9;
        return 0;
    }
    mp_val v;
    int rc = next(r, &v);
    if (rc)
        return rc;
    if (v.type == MP_UINT)
        *h = v.u;
    else if (v.type == MP_INT)
        *h = (uint64_t)v.i; /* a signed 64-bit producer's bit pattern */
    else if (v.type == MP_BIN && v.len >= 1 && v.len <= 64)
        *h = sb_kv_fold_hash(v.ptr, v.len);
    else
        return fail(r, SB_KV_E_TYPE, "block hash (integer or 1..64-byte bin)");
    return 0;
}

/* Reads an array head of at most per_event items that must also fit used + n <= batch cap. */
static int array_head(rd *r, uint32_t per_event, uint32_t used, uint32_t batch_cap, uint32_t *n, bool nil_ok,
                      const char *what)
{
    mp_val v;
    int rc = next(r, &v);
    if (rc)
        return rc;
    if (v.type == MP_NIL && nil_ok) {
        *n = 0;
        return 0;
    }
    if (v.type != MP_ARRAY)
        return fail(r, SB_KV_E_TYPE, what);
    if (v.u > per_event || v.u > (uint64_t)batch_cap - used)
        return fail(r, SB_KV_E_LIMIT, what);
    *n = (uint32_t)v.u;
    return 0;
}

static uint32_t min32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

static int read_field(rd *r, enum field f, sb_kv_event *e)
{
    const sb_kv_limits *lim = r->lim;
    sb_kv_scratch *s = r->s;
    mp_val v;
    int rc;
    uint32_t n;
    switch (f) {
    case F_HASHES:
        rc = array_head(r, lim->max_hashes_per_event, r->h_used, min32(lim->max_batch_hashes, s->hashes_cap), &n, false,
                        "block_hashes");
        if (rc)
            return rc;
        e->hashes = s->hashes + r->h_used;
        e->n_hashes = n;
        for (uint32_t i = 0; i < n; i++)
            if ((rc = read_hash(r, &s->hashes[r->h_used + i])))
                return rc;
        r->h_used += n;
        return 0;
    case F_TOKENS:
        rc = array_head(r, lim->max_tokens_per_event, r->t_used, min32(lim->max_batch_tokens, s->tokens_cap), &n, true,
                        "token_ids");
        if (rc)
            return rc;
        e->tokens = s->tokens + r->t_used;
        e->n_tokens = n;
        /* The hot loop of a batch: the encodings an encoder picks for token ids (fixint,
         * uint8/16/32) are read inline through a local cursor; anything else goes through
         * next(), which checks the type. */
        uint32_t *dst = s->tokens + r->t_used;
        const uint8_t *q = r->p + r->pos, *end = r->p + r->len;
        for (uint32_t i = 0; i < n; i++) {
            size_t left = (size_t)(end - q);
            if (left >= 1 && q[0] <= 0x7f) {
                dst[i] = q[0];
                q += 1;
            } else if (left >= 5 && q[0] == 0xce) {
                dst[i] = (uint32_t)q[1] << 24 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 8 | q[4];
                q += 5;
            } else if (left >= 3 && q[0] == 0xcd) {
                dst[i] = (uint32_t)q[1] << 8 | q[2];
                q += 3;
            } else if (left >= 2 && q[0] == 0xcc) {
                dst[i] = q[1];
                q += 2;
            } else {
                r->pos = (size_t)(q - r->p);
                if ((rc = next(r, &v)))
                    return rc;
                if (v.type != MP_UINT || v.u > UINT32_MAX)
                    return fail(r, SB_KV_E_TYPE, "token id (0..2^32-1)");
                dst[i] = (uint32_t)v.u;
                q = r->p + r->pos;
            }
        }
        r->pos = (size_t)(q - r->p);
        r->t_used += n;
        return 0;
    case F_PARENT:
        /* Peek for nil: the one optional hash. */
        if (r->pos < r->len && r->p[r->pos] == 0xc0) {
            r->pos++;
            e->has_parent = false;
            return 0;
        }
        e->has_parent = true;
        return read_hash(r, &e->parent_hash);
    default: break;
    }
    if ((rc = next(r, &v)))
        return rc;
    switch (f) {
    case F_BLOCK_SIZE:
    case F_GROUP_IDX:
        if (v.type == MP_NIL)
            v.u = 0;
        else if (v.type != MP_UINT || v.u > UINT32_MAX)
            return fail(r, SB_KV_E_TYPE, f == F_BLOCK_SIZE ? "block_size" : "group_idx");
        *(f == F_BLOCK_SIZE ? &e->block_size : &e->group_idx) = (uint32_t)v.u;
        return 0;
    case F_LORA_ID:
        if (v.type == MP_NIL) {
            e->has_lora_id = false;
            return 0;
        }
        if (v.type == MP_UINT && v.u <= INT64_MAX)
            e->lora_id = (int64_t)v.u;
        else if (v.type == MP_INT)
            e->lora_id = v.i;
        else
            return fail(r, SB_KV_E_TYPE, "lora_id");
        e->has_lora_id = true;
        return 0;
    case F_MEDIUM:
        if (v.type == MP_NIL) {
            e->medium = SB_KV_MEDIUM_GPU;
            e->medium_name = NULL, e->medium_name_len = 0;
            return 0;
        }
        if (v.type != MP_STR)
            return fail(r, SB_KV_E_TYPE, "medium");
        e->medium = str_is(&v, "GPU") ? SB_KV_MEDIUM_GPU : str_is(&v, "CPU") ? SB_KV_MEDIUM_CPU : SB_KV_MEDIUM_OTHER;
        e->medium_name = (const char *)v.ptr, e->medium_name_len = v.len;
        return 0;
    case F_LORA_NAME:
        if (v.type == MP_NIL) {
            e->lora_name = NULL, e->lora_name_len = 0;
            return 0;
        }
        if (v.type != MP_STR)
            return fail(r, SB_KV_E_TYPE, "lora_name");
        e->lora_name = (const char *)v.ptr, e->lora_name_len = v.len;
        return 0;
    default: /* known and unused (extra_keys, the spec fields), or unknown: any shape */
        if (f == F_UNKNOWN)
            r->out->unknown_fields++;
        return skip_rest(r, &v);
    }
}

static int kind_of(const mp_val *tag, sb_kv_kind *k)
{
    if (str_is(tag, "BlockStored"))
        *k = SB_KV_BLOCK_STORED;
    else if (str_is(tag, "BlockRemoved"))
        *k = SB_KV_BLOCK_REMOVED;
    else if (str_is(tag, "AllBlocksCleared"))
        *k = SB_KV_ALL_CLEARED;
    else
        return -1;
    return 0;
}

static bool field_applies(sb_kv_kind k, enum field f)
{
    if (k == SB_KV_ALL_CLEARED)
        return false;
    if (k == SB_KV_BLOCK_REMOVED)
        return f == F_HASHES || f == F_MEDIUM || f == F_GROUP_IDX;
    return true;
}

/* ["Tag", fields...]: n items, head read. *known is false for a tag this decoder does not know
 * (skipped, counted). */
static int event_array(rd *r, uint64_t n, sb_kv_event *e, bool *known)
{
    mp_val tag;
    int rc;
    if (n == 0)
        return fail(r, SB_KV_E_TYPE, "event: empty array");
    if ((rc = next(r, &tag)))
        return rc;
    if (tag.type != MP_STR)
        return fail(r, SB_KV_E_TYPE, "event tag (a string)");
    if (kind_of(&tag, &e->kind) < 0) {
        *known = false;
        return skip_values(r, n - 1);
    }
    const enum field *order = e->kind == SB_KV_BLOCK_STORED ? stored_order : removed_order;
    size_t n_order = e->kind == SB_KV_BLOCK_STORED    ? sizeof stored_order / sizeof *order
                     : e->kind == SB_KV_BLOCK_REMOVED ? sizeof removed_order / sizeof *order
                                                      : 0;
    if (n_order && n < 2)
        return fail(r, SB_KV_E_TYPE, "event without block_hashes");
    for (uint64_t i = 1; i < n; i++)
        if ((rc = read_field(r, i - 1 < n_order ? order[i - 1] : F_UNKNOWN, e)))
            return rc;
    return 0;
}

/* {"type": "Tag", key: value...}: n pairs, head read. Keys may come in any order, "type"
 * included, so fields are read by name and checked against the kind at the end. */
static int event_map(rd *r, uint64_t n, sb_kv_event *e, bool *known)
{
    bool have_type = false, have_hashes = false;
    int rc;
    for (uint64_t i = 0; i < n; i++) {
        mp_val key;
        if ((rc = next(r, &key)))
            return rc;
        if (key.type != MP_STR)
            return fail(r, SB_KV_E_TYPE, "event key (a string)");
        if (str_is(&key, "type")) {
            mp_val tag;
            if ((rc = next(r, &tag)))
                return rc;
            if (tag.type != MP_STR)
                return fail(r, SB_KV_E_TYPE, "event type (a string)");
            have_type = true;
            *known = kind_of(&tag, &e->kind) == 0;
            continue;
        }
        enum field f = F_UNKNOWN;
        for (int k = 0; k < F_UNKNOWN && f == F_UNKNOWN; k++)
            if (key.len == field_keys[k].len && !memcmp(key.ptr, field_keys[k].name, key.len))
                f = (enum field)k;
        have_hashes |= f == F_HASHES;
        if ((rc = read_field(r, f, e)))
            return rc;
    }
    if (!have_type)
        return fail(r, SB_KV_E_TYPE, "event map without \"type\"");
    if (*known && e->kind != SB_KV_ALL_CLEARED && !have_hashes)
        return fail(r, SB_KV_E_TYPE, "event without block_hashes");
    return 0;
}

static int read_events(rd *r)
{
    mp_val v;
    int rc;
    sb_kv_batch *out = r->out;
    if ((rc = next(r, &v)))
        return rc;
    if (v.type != MP_ARRAY)
        return fail(r, SB_KV_E_TYPE, "events (an array)");
    if (v.u > r->lim->max_events || v.u > r->s->events_cap)
        return fail(r, SB_KV_E_LIMIT, "events per batch");
    out->events = r->s->events;
    for (uint64_t i = 0; i < v.u; i++) {
        mp_val ev;
        if ((rc = next(r, &ev)))
            return rc;
        sb_kv_event *e = &r->s->events[out->n_events];
        memset(e, 0, sizeof *e);
        uint32_t h0 = r->h_used, t0 = r->t_used;
        bool known = true;
        if (ev.type == MP_ARRAY)
            rc = event_array(r, ev.u, e, &known);
        else if (ev.type == MP_MAP)
            rc = event_map(r, ev.u, e, &known);
        else
            rc = fail(r, SB_KV_E_TYPE, "event (an array or a map)");
        if (rc)
            return rc;
        if (!known) {
            out->unknown_events++;
            r->h_used = h0, r->t_used = t0; /* its fields are dropped with it */
            continue;
        }
        /* A field of another kind (token_ids on a BlockRemoved map) is read, then dropped. */
        if (!field_applies(e->kind, F_HASHES))
            e->hashes = NULL, e->n_hashes = 0;
        if (!field_applies(e->kind, F_TOKENS)) {
            e->tokens = NULL, e->n_tokens = 0, e->has_parent = false, e->block_size = 0;
            e->has_lora_id = false, e->lora_name = NULL, e->lora_name_len = 0;
        }
        if (e->kind == SB_KV_ALL_CLEARED)
            e->medium = SB_KV_MEDIUM_GPU, e->medium_name = NULL, e->medium_name_len = 0, e->group_idx = 0;
        out->n_events++;
    }
    return 0;
}

static int read_ts(rd *r, double *ts)
{
    mp_val v;
    int rc = next(r, &v);
    if (rc)
        return rc;
    if (v.type == MP_FLOAT && isfinite(v.f))
        *ts = v.f;
    else if (v.type == MP_UINT)
        *ts = (double)v.u;
    else if (v.type == MP_INT)
        *ts = (double)v.i;
    else
        return fail(r, SB_KV_E_TYPE, "ts (a finite number)");
    return 0;
}

static int read_rank(rd *r, int32_t *rank)
{
    mp_val v;
    int rc = next(r, &v);
    if (rc)
        return rc;
    if (v.type == MP_NIL)
        *rank = -1;
    else if (v.type == MP_UINT && v.u <= INT32_MAX)
        *rank = (int32_t)v.u;
    else
        return fail(r, SB_KV_E_TYPE, "data_parallel_rank");
    return 0;
}

int sb_kv_decode(const uint8_t *payload, size_t len, const sb_kv_limits *lim, sb_kv_scratch *s, sb_kv_batch *out,
                 sb_kv_error *err)
{
    rd r = {.p = payload, .len = len, .lim = lim, .s = s, .out = out, .err = err};
    memset(out, 0, sizeof *out);
    out->dp_rank = -1;
    out->events = s->events;
    if (err)
        *err = (sb_kv_error){0, 0, NULL};
    if (len > lim->max_payload_bytes)
        return fail(&r, SB_KV_E_LIMIT, "payload bytes");
    mp_val env;
    int rc = next(&r, &env);
    if (rc)
        goto bad;
    if (env.type == MP_ARRAY) {
        /* [ts, events, dp_rank]: later positions ignored (counted). */
        if (env.u < 2) {
            rc = fail(&r, SB_KV_E_TYPE, "envelope: [ts, events, ...]");
            goto bad;
        }
        if ((rc = read_ts(&r, &out->ts)) || (rc = read_events(&r)))
            goto bad;
        if (env.u >= 3 && (rc = read_rank(&r, &out->dp_rank)))
            goto bad;
        if (env.u > 3) {
            out->unknown_fields += (uint32_t)(env.u - 3 < UINT32_MAX ? env.u - 3 : UINT32_MAX);
            if ((rc = skip_values(&r, env.u - 3)))
                goto bad;
        }
    } else if (env.type == MP_MAP) {
        bool have_ts = false, have_events = false;
        for (uint64_t i = 0; i < env.u; i++) {
            mp_val key;
            if ((rc = next(&r, &key)))
                goto bad;
            if (key.type != MP_STR) {
                rc = fail(&r, SB_KV_E_TYPE, "envelope key (a string)");
                goto bad;
            }
            if (str_is(&key, "ts")) {
                have_ts = true;
                rc = read_ts(&r, &out->ts);
            } else if (str_is(&key, "events")) {
                /* A repeated key would append to the first's events: refuse it. */
                if (have_events) {
                    rc = fail(&r, SB_KV_E_TYPE, "envelope: events given twice");
                    goto bad;
                }
                have_events = true;
                rc = read_events(&r);
            } else if (str_is(&key, "data_parallel_rank") || str_is(&key, "attn_dp_rank")) {
                rc = read_rank(&r, &out->dp_rank);
            } else {
                out->unknown_fields++;
                rc = skip_values(&r, 1);
            }
            if (rc)
                goto bad;
        }
        if (!have_ts || !have_events) {
            rc = fail(&r, SB_KV_E_TYPE, have_ts ? "envelope without events" : "envelope without ts");
            goto bad;
        }
    } else {
        rc = fail(&r, SB_KV_E_TYPE, "envelope (an array or a map)");
        goto bad;
    }
    if (r.pos != len) {
        rc = fail(&r, SB_KV_E_SYNTAX, "bytes after the envelope");
        goto bad;
    }
    return 0;
bad:
    out->n_events = 0;
    return rc;
}
