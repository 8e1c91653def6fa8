/* Tests for src/proto/kv_events.c: the KV-event batch decoder.
 *
 * Payloads are built with msgpack-c's packer (an encoder written by others), shaped as vLLM's
 * msgspec encoder writes them (vllm/distributed/kv_events.py: EventBatch, BlockStored,
 * BlockRemoved, AllBlocksCleared; omit_defaults; tag first in the array form, "type" in the
 * map form). The committed fuzz corpus is replayed at the end. */
#include "sb_test.h"

#include <dirent.h>
#include <math.h>
#include <msgpack.h>

#include "proto/kv_events.h"

/* ---- building payloads ---- */

typedef struct pk {
    msgpack_sbuffer sb;
    msgpack_packer p;
} pk;

static void pk_init(pk *k)
{
    msgpack_sbuffer_init(&k->sb);
    msgpack_packer_init(&k->p, &k->sb, msgpack_sbuffer_write);
}

static void pk_free(pk *k)
{
    msgpack_sbuffer_destroy(&k->sb);
}

static void str(pk *k, const char *s)
{
    msgpack_pack_str_with_body(&k->p, s, strlen(s));
}
static void arr(pk *k, size_t n)
{
    msgpack_pack_array(&k->p, n);
}
static void map(pk *k, size_t n)
{
    msgpack_pack_map(&k->p, n);
}
static void u64(pk *k, uint64_t v)
{
    msgpack_pack_uint64(&k->p, v);
}
static void i64(pk *k, int64_t v)
{
    msgpack_pack_int64(&k->p, v);
}
static void nil(pk *k)
{
    msgpack_pack_nil(&k->p);
}

static void u64s(pk *k, const uint64_t *v, size_t n)
{
    arr(k, n);
    for (size_t i = 0; i < n; i++)
        u64(k, v[i]);
}

/* The envelope head, array form: [ts, [n events...], (dp_rank)]. */
static void env_array(pk *k, double ts, size_t n_events, bool with_rank)
{
    arr(k, with_rank ? 3 : 2);
    msgpack_pack_double(&k->p, ts);
    arr(k, n_events);
}

/* The envelope's trailing rank (array form). */
static void rank(pk *k, int r)
{
    r < 0 ? nil(k) : u64(k, (uint64_t)r);
}

/* A full BlockStored, array form, all twelve fields (vLLM's current field list). */
static void stored_array(pk *k, const uint64_t *h, size_t nh, bool parent, uint64_t ph, uint32_t first_tok, size_t ntok,
                         const char *medium)
{
    arr(k, 12);
    str(k, "BlockStored");
    u64s(k, h, nh);
    parent ? u64(k, ph) : nil(k);
    arr(k, ntok);
    for (size_t i = 0; i < ntok; i++)
        u64(k, first_tok + i);
    u64(k, 16); /* block_size */
    nil(k);     /* lora_id */
    medium ? str(k, medium) : nil(k);
    nil(k);    /* lora_name */
    nil(k);    /* extra_keys */
    u64(k, 0); /* group_idx */
    str(k, "full_attention");
    nil(k);
}

static sb_kv_limits lim;
static sb_kv_scratch scr;
static sb_kv_batch b;
static sb_kv_error err;

static int setup(void **st)
{
    lim = sb_kv_limits_default();
    return sb_kv_scratch_init(&scr, &lim);
}

static int teardown(void **st)
{
    sb_kv_scratch_free(&scr);
    return 0;
}

static int decode(const pk *k)
{
    return sb_kv_decode((const uint8_t *)k->sb.data, k->sb.size, &lim, &scr, &b, &err);
}

/* ---- both encodings ---- */

static void test_array_form(void **st)
{
    pk k;
    pk_init(&k);
    uint64_t h[2] = {11, 12}, rh[1] = {5};
    env_array(&k, 1789095808.83, 3, true);
    stored_array(&k, h, 2, true, 10, 100, 32, "GPU");
    arr(&k, 4), str(&k, "BlockRemoved"), u64s(&k, rh, 1), str(&k, "CPU"), u64(&k, 1);
    arr(&k, 1), str(&k, "AllBlocksCleared");
    rank(&k, 2);
    assert_int_equal(decode(&k), 0);
    assert_true(b.ts > 1789095808.82 && b.ts < 1789095808.84);
    assert_int_equal(b.dp_rank, 2);
    assert_int_equal(b.n_events, 3);
    const sb_kv_event *e = &b.events[0];
    assert_int_equal(e->kind, SB_KV_BLOCK_STORED);
    assert_int_equal(e->n_hashes, 2);
    assert_int_equal(e->hashes[0], 11);
    assert_int_equal(e->hashes[1], 12);
    assert_true(e->has_parent);
    assert_int_equal(e->parent_hash, 10);
    assert_int_equal(e->n_tokens, 32);
    assert_int_equal(e->tokens[0], 100);
    assert_int_equal(e->tokens[31], 131);
    assert_int_equal(e->block_size, 16);
    assert_false(e->has_lora_id);
    assert_int_equal(e->medium, SB_KV_MEDIUM_GPU);
    assert_null(e->lora_name);
    e = &b.events[1];
    assert_int_equal(e->kind, SB_KV_BLOCK_REMOVED);
    assert_int_equal(e->n_hashes, 1);
    assert_int_equal(e->hashes[0], 5);
    assert_int_equal(e->medium, SB_KV_MEDIUM_CPU);
    assert_int_equal(e->group_idx, 1);
    assert_int_equal(b.events[2].kind, SB_KV_ALL_CLEARED);
    assert_int_equal(b.unknown_events, 0);
    assert_int_equal(b.unknown_fields, 0);
    pk_free(&k);
}

/* Older releases and omit_defaults leave trailing fields off: [tag, hashes, parent, tokens,
 * block_size, lora_id] (before medium), and a two-element envelope with no rank. */
static void test_array_form_short(void **st)
{
    pk k;
    pk_init(&k);
    uint64_t h[1] = {7};
    env_array(&k, 1.5, 2, false);
    arr(&k, 6), str(&k, "BlockStored"), u64s(&k, h, 1), nil(&k), arr(&k, 0), u64(&k, 16), u64(&k, 3);
    arr(&k, 2), str(&k, "BlockRemoved"), u64s(&k, h, 1);
    assert_int_equal(decode(&k), 0);
    assert_int_equal(b.dp_rank, -1);
    assert_int_equal(b.n_events, 2);
    assert_true(b.events[0].has_lora_id);
    assert_int_equal(b.events[0].lora_id, 3);
    assert_int_equal(b.events[0].n_tokens, 0); /* a tier move */
    assert_int_equal(b.events[0].medium, SB_KV_MEDIUM_GPU);
    assert_int_equal(b.events[1].medium, SB_KV_MEDIUM_GPU);
    pk_free(&k);
}

/* The map form (vLLM PR #42892, SGLang #37482): keys in any order, "type" last here, unknown
 * keys (SGLang's metadata) skipped and counted, envelope as a map with attn_dp_rank. */
static void test_map_form(void **st)
{
    pk k;
    pk_init(&k);
    uint64_t h[3] = {1, 2, 3};
    map(&k, 4);
    str(&k, "events");
    arr(&k, 3);
    map(&k, 8);
    str(&k, "block_hashes"), u64s(&k, h, 3);
    str(&k, "token_ids"), arr(&k, 2), u64(&k, 9), u64(&k, 8);
    str(&k, "parent_block_hash"), nil(&k);
    str(&k, "block_size"), u64(&k, 16);
    str(&k, "lora_name"), str(&k, "sql-adapter");
    str(&k, "medium"), str(&k, "disk");
    str(&k, "metadata"), map(&k, 2), str(&k, "cache_salt"), str(&k, "x"), str(&k, "session_id"), str(&k, "s");
    str(&k, "type"), str(&k, "BlockStored");
    map(&k, 3);
    str(&k, "type"), str(&k, "BlockRemoved"), str(&k, "block_hashes"), u64s(&k, h, 1), str(&k, "group_idx"), u64(&k, 2);
    map(&k, 1), str(&k, "type"), str(&k, "AllBlocksCleared");
    str(&k, "ts"), msgpack_pack_double(&k.p, 2.25);
    str(&k, "attn_dp_rank"), u64(&k, 1);
    str(&k, "future_field"), arr(&k, 2), u64(&k, 1), map(&k, 0);
    assert_int_equal(decode(&k), 0);
    assert_true(b.ts == 2.25);
    assert_int_equal(b.dp_rank, 1);
    assert_int_equal(b.n_events, 3);
    const sb_kv_event *e = &b.events[0];
    assert_int_equal(e->kind, SB_KV_BLOCK_STORED);
    assert_int_equal(e->n_hashes, 3);
    assert_int_equal(e->hashes[2], 3);
    assert_false(e->has_parent);
    assert_int_equal(e->n_tokens, 2);
    assert_int_equal(e->tokens[1], 8);
    assert_int_equal(e->medium, SB_KV_MEDIUM_OTHER);
    assert_int_equal(e->medium_name_len, 4);
    assert_memory_equal(e->medium_name, "disk", 4);
    assert_int_equal(e->lora_name_len, 11);
    assert_memory_equal(e->lora_name, "sql-adapter", 11);
    assert_int_equal(b.events[1].kind, SB_KV_BLOCK_REMOVED);
    assert_int_equal(b.events[1].group_idx, 2);
    assert_int_equal(b.events[2].kind, SB_KV_ALL_CLEARED);
    assert_int_equal(b.unknown_fields, 2); /* metadata, future_field */
    pk_free(&k);
}

/* Unknown event types are skipped whole (their hashes give back the scratch), unknown
 * trailing fields of a known array event too; both counted. */
static void test_unknown_events_and_fields(void **st)
{
    pk k;
    pk_init(&k);
    uint64_t h[2] = {1, 2};
    env_array(&k, 1, 4, true);
    arr(&k, 3), str(&k, "BlockPinned"), u64s(&k, h, 2), map(&k, 1), str(&k, "a"), arr(&k, 1), nil(&k);
    map(&k, 2), str(&k, "block_hashes"), u64s(&k, h, 2), str(&k, "type"), str(&k, "BlockMoved");
    arr(&k, 6), str(&k, "BlockRemoved"), u64s(&k, h, 2), nil(&k), nil(&k), str(&k, "new"), u64(&k, 1);
    arr(&k, 2), str(&k, "AllBlocksCleared"), u64(&k, 1);
    rank(&k, 0);
    assert_int_equal(decode(&k), 0);
    assert_int_equal(b.n_events, 2);
    assert_int_equal(b.unknown_events, 2);
    assert_int_equal(b.unknown_fields, 3);
    assert_int_equal(b.events[0].kind, SB_KV_BLOCK_REMOVED);
    assert_ptr_equal(b.events[0].hashes, scr.hashes); /* the skipped events' hashes were given back */
    pk_free(&k);
}

/* ---- hash forms ---- */

static void test_hash_forms(void **st)
{
    /* A SHA-256 digest; vLLM's int form is int.from_bytes(d, "big") & (2**64-1). */
    uint8_t d[32];
    for (int i = 0; i < 32; i++)
        d[i] = (uint8_t)(0xA0 + i);
    uint64_t want = 0xB8B9BABBBCBDBEBFull; /* bytes 24..31, big-endian: above INT64_MAX */
    assert_int_equal(sb_kv_fold_hash(d, 32), want);
    pk k;
    pk_init(&k);
    env_array(&k, 1, 1, false);
    arr(&k, 2), str(&k, "BlockRemoved");
    arr(&k, 6);
    msgpack_pack_bin_with_body(&k.p, d, 32);
    u64(&k, want);                                /* the same block, int form: must agree */
    u64(&k, UINT64_MAX);                          /* the largest uint64 */
    i64(&k, -2);                                  /* a signed 64-bit producer's bit pattern */
    msgpack_pack_bin_with_body(&k.p, d + 16, 16); /* an xxh3-128 digest */
    msgpack_pack_bin_with_body(&k.p, d, 3);       /* shorter than 8 bytes: the whole number */
    assert_int_equal(decode(&k), 0);
    const sb_kv_event *e = &b.events[0];
    assert_int_equal(e->n_hashes, 6);
    assert_true(e->hashes[0] == want);
    assert_true(e->hashes[1] == want);
    assert_true(e->hashes[2] == UINT64_MAX);
    assert_true(e->hashes[3] == UINT64_MAX - 1);
    assert_true(e->hashes[4] == want);
    assert_true(e->hashes[5] == 0xA0A1A2ull);
    pk_free(&k);
}

/* A parent hash in bin form, and an empty or over-long bin refused. */
static void test_hash_bins_bounds(void **st)
{
    uint8_t d[65] = {0};
    d[31] = 7;
    for (int len = 0; len <= 65; len += 65) {
        pk k;
        pk_init(&k);
        env_array(&k, 1, 1, false);
        arr(&k, 2), str(&k, "BlockRemoved"), arr(&k, 1);
        msgpack_pack_bin_with_body(&k.p, d, (size_t)len);
        assert_int_equal(decode(&k), SB_KV_E_TYPE);
        pk_free(&k);
    }
    pk k;
    pk_init(&k);
    env_array(&k, 1, 1, false);
    arr(&k, 4), str(&k, "BlockStored"), arr(&k, 1), u64(&k, 1);
    msgpack_pack_bin_with_body(&k.p, d, 32);
    arr(&k, 0);
    assert_int_equal(decode(&k), 0);
    assert_true(b.events[0].has_parent);
    assert_true(b.events[0].parent_hash == 7);
    pk_free(&k);
}

/* ---- malformed input ---- */

/* Every proper prefix of a valid payload is refused as truncated, and no prefix is read past
 * (each is decoded from its own exact-size copy: ASan would catch a read beyond it). */
static void test_truncated(void **st)
{
    pk k;
    pk_init(&k);
    uint64_t h[2] = {UINT64_MAX, 3};
    env_array(&k, 1e9, 2, true);
    stored_array(&k, h, 2, true, 1, 5, 20, "GPU");
    map(&k, 2), str(&k, "type"), str(&k, "BlockRemoved"), str(&k, "block_hashes"), u64s(&k, h, 2);
    rank(&k, 0);
    for (size_t n = 0; n < k.sb.size; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, k.sb.data, n);
        int rc = sb_kv_decode(cut, n, &lim, &scr, &b, &err);
        assert_int_equal(rc, SB_KV_E_TRUNCATED);
        assert_int_equal(err.code, rc);
        assert_true(err.offset <= n);
        assert_int_equal(b.n_events, 0);
        free(cut);
    }
    pk_free(&k);
}

typedef void build_fn(pk *k);

static void bad_envelope_scalar(pk *k)
{
    u64(k, 1);
}
static void bad_ts(pk *k)
{
    arr(k, 2), str(k, "1.0"), arr(k, 0);
}
static void bad_ts_nan(pk *k)
{
    arr(k, 2), msgpack_pack_double(&k->p, NAN), arr(k, 0);
}
static void bad_events(pk *k)
{
    arr(k, 2), u64(k, 1), map(k, 0);
}
static void bad_event_scalar(pk *k)
{
    env_array(k, 1, 1, false), u64(k, 3);
}
static void bad_tag(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 2), u64(k, 1), arr(k, 0);
}
static void bad_hashes(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 2), str(k, "BlockRemoved"), u64(k, 1);
}
static void bad_hash_str(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 2), str(k, "BlockRemoved"), arr(k, 1), str(k, "x");
}
static void bad_token_neg(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 4), str(k, "BlockStored"), arr(k, 0), nil(k), arr(k, 1), i64(k, -1);
}
static void bad_token_big(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 4), str(k, "BlockStored"), arr(k, 0), nil(k), arr(k, 1), u64(k, 1ull << 32);
}
static void bad_medium(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 3), str(k, "BlockRemoved"), arr(k, 0), u64(k, 1);
}
static void bad_no_hashes(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 1), str(k, "BlockStored");
}
static void bad_map_no_type(pk *k)
{
    env_array(k, 1, 1, false), map(k, 1), str(k, "block_hashes"), arr(k, 0);
}
static void bad_map_key(pk *k)
{
    env_array(k, 1, 1, false), map(k, 1), u64(k, 1), str(k, "BlockStored");
}
static void bad_rank(pk *k)
{
    env_array(k, 1, 0, true), str(k, "0");
}
static void bad_env_no_events(pk *k)
{
    map(k, 1), str(k, "ts"), u64(k, 1);
}
static void bad_env_twice(pk *k)
{
    map(k, 3), str(k, "ts"), u64(k, 1), str(k, "events"), arr(k, 0), str(k, "events"), arr(k, 0);
}
static void bad_trailing(pk *k)
{
    env_array(k, 1, 0, false), u64(k, 1);
}
static void bad_reserved(pk *k)
{
    msgpack_sbuffer_write(&k->sb, "\x92\xcb\0\0\0\0\0\0\0\0\x91\xc1", 12);
}
static void bad_block_size(pk *k)
{
    env_array(k, 1, 1, false), arr(k, 5), str(k, "BlockStored"), arr(k, 0), nil(k), arr(k, 0), i64(k, -16);
}

static void test_wrong_types(void **st)
{
    static const struct {
        build_fn *build;
        int rc;
    } cases[] = {
        {bad_envelope_scalar, SB_KV_E_TYPE}, {bad_ts, SB_KV_E_TYPE},           {bad_ts_nan, SB_KV_E_TYPE},
        {bad_events, SB_KV_E_TYPE},          {bad_event_scalar, SB_KV_E_TYPE}, {bad_tag, SB_KV_E_TYPE},
        {bad_hashes, SB_KV_E_TYPE},          {bad_hash_str, SB_KV_E_TYPE},     {bad_token_neg, SB_KV_E_TYPE},
        {bad_token_big, SB_KV_E_TYPE},       {bad_medium, SB_KV_E_TYPE},       {bad_no_hashes, SB_KV_E_TYPE},
        {bad_map_no_type, SB_KV_E_TYPE},     {bad_map_key, SB_KV_E_TYPE},      {bad_rank, SB_KV_E_TYPE},
        {bad_env_no_events, SB_KV_E_TYPE},   {bad_env_twice, SB_KV_E_TYPE},    {bad_trailing, SB_KV_E_SYNTAX},
        {bad_reserved, SB_KV_E_SYNTAX},      {bad_block_size, SB_KV_E_TYPE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pk k;
        pk_init(&k);
        cases[i].build(&k);
        int rc = decode(&k);
        if (rc != cases[i].rc)
            fail_msg("case %zu: got %d (%s), want %d", i, rc, err.what ? err.what : "-", cases[i].rc);
        assert_non_null(err.what);
        assert_int_equal(b.n_events, 0);
        pk_free(&k);
    }
}

/* Unknown fields nested 100,000 deep are skipped without recursion and in one pass. */
static void test_deep_unknown(void **st)
{
    pk k;
    pk_init(&k);
    map(&k, 3), str(&k, "ts"), u64(&k, 1), str(&k, "events"), arr(&k, 0), str(&k, "x");
    for (int i = 0; i < 100000; i++)
        arr(&k, 1);
    nil(&k);
    assert_int_equal(decode(&k), 0);
    assert_int_equal(b.unknown_fields, 1);
    /* And a container declaring more items than bytes remain is truncated at once. */
    pk_free(&k);
    pk_init(&k);
    map(&k, 3), str(&k, "ts"), u64(&k, 1), str(&k, "events"), arr(&k, 0), str(&k, "x");
    msgpack_sbuffer_write(&k.sb, "\xdd\xff\xff\xff\xff", 5);
    assert_int_equal(decode(&k), SB_KV_E_TRUNCATED);
    pk_free(&k);
}

/* ---- limits: each at its bound passes, one past it is refused ---- */

static void build_removed(pk *k, uint32_t n_events, uint32_t hashes_each)
{
    env_array(k, 1, n_events, false);
    for (uint32_t e = 0; e < n_events; e++) {
        arr(k, 2), str(k, "BlockRemoved"), arr(k, hashes_each);
        for (uint32_t i = 0; i < hashes_each; i++)
            u64(k, i);
    }
}

static void build_stored(pk *k, uint32_t n_events, uint32_t tokens_each)
{
    env_array(k, 1, n_events, false);
    for (uint32_t e = 0; e < n_events; e++) {
        arr(k, 4), str(k, "BlockStored"), arr(k, 0), nil(k), arr(k, tokens_each);
        for (uint32_t i = 0; i < tokens_each; i++)
            u64(k, i);
    }
}

static int decode_with(const pk *k, const sb_kv_limits *l)
{
    return sb_kv_decode((const uint8_t *)k->sb.data, k->sb.size, l, &scr, &b, &err);
}

static void test_limits(void **st)
{
    sb_kv_limits l = {.max_payload_bytes = 1 << 20,
                      .max_events = 10,
                      .max_hashes_per_event = 8,
                      .max_tokens_per_event = 32,
                      .max_batch_hashes = 40,
                      .max_batch_tokens = 200};
    pk k;
    /* events per batch */
    pk_init(&k), build_removed(&k, 10, 1);
    assert_int_equal(decode_with(&k, &l), 0);
    pk_free(&k), pk_init(&k), build_removed(&k, 11, 1);
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    assert_string_equal(err.what, "events per batch");
    /* hashes per event */
    pk_free(&k), pk_init(&k), build_removed(&k, 1, 8);
    assert_int_equal(decode_with(&k, &l), 0);
    pk_free(&k), pk_init(&k), build_removed(&k, 1, 9);
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    /* hashes per batch: 5 x 8 = 40 passes, 6 x 7 = 42 does not */
    pk_free(&k), pk_init(&k), build_removed(&k, 5, 8);
    assert_int_equal(decode_with(&k, &l), 0);
    assert_int_equal(b.n_events, 5);
    pk_free(&k), pk_init(&k), build_removed(&k, 6, 7);
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    assert_int_equal(b.n_events, 0);
    /* tokens per event */
    pk_free(&k), pk_init(&k), build_stored(&k, 1, 32);
    assert_int_equal(decode_with(&k, &l), 0);
    pk_free(&k), pk_init(&k), build_stored(&k, 1, 33);
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    assert_string_equal(err.what, "token_ids");
    /* tokens per batch: 200 = 10 x 20 passes, 7 x 29 = 203 does not */
    pk_free(&k), pk_init(&k), build_stored(&k, 10, 20);
    assert_int_equal(decode_with(&k, &l), 0);
    pk_free(&k), pk_init(&k), build_stored(&k, 7, 29);
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    /* payload bytes */
    pk_free(&k), pk_init(&k), build_stored(&k, 2, 3);
    l.max_payload_bytes = k.sb.size;
    assert_int_equal(decode_with(&k, &l), 0);
    l.max_payload_bytes = k.sb.size - 1;
    assert_int_equal(decode_with(&k, &l), SB_KV_E_LIMIT);
    assert_string_equal(err.what, "payload bytes");
    pk_free(&k);
    /* A scratch smaller than the limits bounds the decoder too. */
    sb_kv_scratch small;
    sb_kv_limits sl = {.max_payload_bytes = 1 << 20,
                       .max_events = 2,
                       .max_hashes_per_event = 100,
                       .max_tokens_per_event = 100,
                       .max_batch_hashes = 4,
                       .max_batch_tokens = 4};
    assert_int_equal(sb_kv_scratch_init(&small, &sl), 0);
    pk_init(&k), build_removed(&k, 1, 5);
    assert_int_equal(sb_kv_decode((const uint8_t *)k.sb.data, k.sb.size, &l, &small, &b, &err), SB_KV_E_LIMIT);
    pk_free(&k), pk_init(&k), build_removed(&k, 3, 1);
    assert_int_equal(sb_kv_decode((const uint8_t *)k.sb.data, k.sb.size, &l, &small, &b, &err), SB_KV_E_LIMIT);
    pk_free(&k);
    sb_kv_scratch_free(&small);
}

/* A batch the size of a real vLLM step at max_num_batched_tokens 8192: a 4096-token prefill
 * (256 blocks), 255 decoding requests each completing a block, and the 511 evictions they
 * caused (vLLM sends one BlockRemoved per evicted block). */
static void test_real_batch(void **st)
{
    pk k;
    pk_init(&k);
    env_array(&k, 1789095808.5, 1 + 255 + 511, true);
    uint64_t h[256];
    for (int i = 0; i < 256; i++)
        h[i] = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    stored_array(&k, h, 256, true, 42, 1000, 4096, "GPU");
    for (int r = 0; r < 255; r++) {
        uint64_t one = 0xF000000000000000ull + (uint64_t)r;
        stored_array(&k, &one, 1, true, (uint64_t)r, (uint32_t)r * 16, 16, "GPU");
    }
    for (int r = 0; r < 511; r++) {
        uint64_t one = (uint64_t)r * 31;
        arr(&k, 3), str(&k, "BlockRemoved"), u64s(&k, &one, 1), str(&k, "GPU");
    }
    rank(&k, 0);
    assert_int_equal(decode(&k), 0);
    assert_int_equal(b.n_events, 767);
    assert_int_equal(b.events[0].n_hashes, 256);
    assert_int_equal(b.events[0].n_tokens, 4096);
    assert_int_equal(b.events[0].tokens[4095], 1000 + 4095);
    assert_true(b.events[0].hashes[255] == h[255]);
    assert_true(b.events[255].hashes[0] == 0xF000000000000000ull + 254);
    assert_int_equal(b.events[255].tokens[0], 254 * 16);
    assert_int_equal(b.events[766].kind, SB_KV_BLOCK_REMOVED);
    assert_true(b.events[766].hashes[0] == 510 * 31);
    pk_free(&k);
}

/* ---- the fuzz corpus, replayed ---- */

static void test_corpus(void **st)
{
    DIR *d = opendir("tests/fuzz/corpus/kv_events");
    assert_non_null(d);
    struct dirent *de;
    int files = 0, ok = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "tests/fuzz/corpus/kv_events/%s", de->d_name);
        size_t len;
        char *data = sb_test_read_file(path, &len);
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, data, len);
        int rc = sb_kv_decode(exact, len, &lim, &scr, &b, &err);
        assert_true(rc == 0 || rc == SB_KV_E_TRUNCATED || rc == SB_KV_E_TYPE || rc == SB_KV_E_LIMIT ||
                    rc == SB_KV_E_SYNTAX);
        ok += rc == 0;
        files++;
        free(exact);
        free(data);
    }
    closedir(d);
    assert_true(files >= 8);
    assert_true(ok >= 4); /* the seeds are valid batches; crashers found later need not be */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_form),   cmocka_unit_test(test_array_form_short),
        cmocka_unit_test(test_map_form),     cmocka_unit_test(test_unknown_events_and_fields),
        cmocka_unit_test(test_hash_forms),   cmocka_unit_test(test_hash_bins_bounds),
        cmocka_unit_test(test_truncated),    cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_deep_unknown), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_real_batch),   cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
