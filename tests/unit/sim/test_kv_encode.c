/* Tests src/sim/kv_encode.c by decoding its output back with msgpack-c: the batch envelope,
 * each event in both encodings (tagged arrays, maps with "type"), both hash forms (uint64
 * above INT64_MAX, 32-byte bins whose last 8 bytes are the integer big-endian), parents, lora
 * ids and names, and the buffer left as it was when memory runs out. */
#include "sb_test.h"

#include <msgpack.h>

#include "base/buf.h"
#include "sim/kv_encode.h"

static const uint64_t hashes[2] = {0xfedcba9876543210ULL, 42};
static const uint32_t tokens[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 2147483647};
static const char *const names[] = {"sql-lora", "chat-lora"};

static sb_engine_kv_event stored(void)
{
    return (sb_engine_kv_event){.kind = SB_ENGINE_KV_STORED,
                                .n_blocks = 2,
                                .block_hashes = hashes,
                                .has_parent = true,
                                .parent_hash = 0x8000000000000001ULL,
                                .token_ids = tokens,
                                .block_size = 4,
                                .adapter = 2};
}

/* The encoded batch: msgpack-c's objects point into it (strings, bins) until it is freed. */
static sb_buf batch;

/* Encodes events ev[0..n) into one batch and unpacks it into *res; done() frees both. */
static void roundtrip(const sb_engine_kv_event *ev, size_t n, const sb_kv_encode_opts *o, msgpack_unpacked *res)
{
    sb_buf evs = {0};
    sb_buf_reset(&batch);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(sb_kv_encode_event(&evs, &ev[i], o), 0);
    assert_int_equal(sb_kv_encode_batch(&batch, 1789095808.5, evs.data, evs.len, (uint32_t)n, 0), 0);
    msgpack_unpacked_init(res);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(res, batch.data, batch.len, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, batch.len);
    sb_buf_free(&evs);
}

static void done(msgpack_unpacked *res)
{
    msgpack_unpacked_destroy(res);
    sb_buf_free(&batch);
}

static bool str_is(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, strlen(s));
}

/* The value of key k in map m, or NULL. */
static const msgpack_object *get(const msgpack_object *m, const char *k)
{
    assert_int_equal(m->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (str_is(&m->via.map.ptr[i].key, k))
            return &m->via.map.ptr[i].val;
    return NULL;
}

static uint64_t hash_of(const msgpack_object *o, sb_kv_hash_form form)
{
    if (form == SB_KV_HASH_INT) {
        assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        return o->via.u64;
    }
    assert_int_equal(o->type, MSGPACK_OBJECT_BIN);
    assert_int_equal(o->via.bin.size, 32);
    uint64_t h = 0;
    for (int i = 24; i < 32; i++)
        h = h << 8 | (uint8_t)o->via.bin.ptr[i];
    return h;
}

static void check_envelope(const msgpack_object *b, uint32_t n_events)
{
    assert_int_equal(b->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(b->via.array.size, 3);
    assert_int_equal(b->via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
    assert_true(b->via.array.ptr[0].via.f64 == 1789095808.5);
    assert_int_equal(b->via.array.ptr[1].type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(b->via.array.ptr[1].via.array.size, n_events);
    assert_int_equal(b->via.array.ptr[2].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(b->via.array.ptr[2].via.u64, 0);
}

static void check_stored_fields(const msgpack_object *h, const msgpack_object *parent, const msgpack_object *tok,
                                const msgpack_object *bs, const msgpack_object *lora_id, const msgpack_object *medium,
                                const msgpack_object *lora_name, sb_kv_hash_form form)
{
    assert_int_equal(h->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(h->via.array.size, 2);
    assert_true(hash_of(&h->via.array.ptr[0], form) == hashes[0]);
    assert_true(hash_of(&h->via.array.ptr[1], form) == hashes[1]);
    assert_true(hash_of(parent, form) == 0x8000000000000001ULL);
    assert_int_equal(tok->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(tok->via.array.size, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(tok->via.array.ptr[i].via.u64, tokens[i]);
    assert_int_equal(bs->via.u64, 4);
    assert_int_equal(lora_id->via.u64, 2);
    assert_true(str_is(medium, "GPU"));
    assert_true(str_is(lora_name, "chat-lora"));
}

static void test_array_encoding(void **state)
{
    (void)state;
    for (int form = SB_KV_HASH_INT; form <= SB_KV_HASH_BYTES; form++) {
        sb_kv_encode_opts o = {
            .encoding = SB_KV_ENC_ARRAY, .hashes = form, .adapter_names = names, .n_adapter_names = 2};
        sb_engine_kv_event ev[3] = {stored(),
                                    {.kind = SB_ENGINE_KV_REMOVED, .n_blocks = 1, .block_hashes = hashes},
                                    {.kind = SB_ENGINE_KV_CLEARED}};
        msgpack_unpacked res;
        roundtrip(ev, 3, &o, &res);
        check_envelope(&res.data, 3);
        const msgpack_object *e = res.data.via.array.ptr[1].via.array.ptr;
        assert_int_equal(e[0].type, MSGPACK_OBJECT_ARRAY);
        assert_int_equal(e[0].via.array.size, 8);
        const msgpack_object *s = e[0].via.array.ptr;
        assert_true(str_is(&s[0], "BlockStored"));
        check_stored_fields(&s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], form);
        assert_int_equal(e[1].via.array.size, 3);
        assert_true(str_is(&e[1].via.array.ptr[0], "BlockRemoved"));
        assert_true(hash_of(&e[1].via.array.ptr[1].via.array.ptr[0], form) == hashes[0]);
        assert_true(str_is(&e[1].via.array.ptr[2], "GPU"));
        assert_int_equal(e[2].via.array.size, 1);
        assert_true(str_is(&e[2].via.array.ptr[0], "AllBlocksCleared"));
        done(&res);
    }
}

static void test_map_encoding(void **state)
{
    (void)state;
    for (int form = SB_KV_HASH_INT; form <= SB_KV_HASH_BYTES; form++) {
        sb_kv_encode_opts o = {.encoding = SB_KV_ENC_MAP, .hashes = form, .adapter_names = names, .n_adapter_names = 2};
        sb_engine_kv_event ev[3] = {stored(),
                                    {.kind = SB_ENGINE_KV_REMOVED, .n_blocks = 1, .block_hashes = hashes},
                                    {.kind = SB_ENGINE_KV_CLEARED}};
        msgpack_unpacked res;
        roundtrip(ev, 3, &o, &res);
        check_envelope(&res.data, 3);
        const msgpack_object *e = res.data.via.array.ptr[1].via.array.ptr;
        assert_true(str_is(get(&e[0], "type"), "BlockStored"));
        check_stored_fields(get(&e[0], "block_hashes"), get(&e[0], "parent_block_hash"), get(&e[0], "token_ids"),
                            get(&e[0], "block_size"), get(&e[0], "lora_id"), get(&e[0], "medium"),
                            get(&e[0], "lora_name"), form);
        const msgpack_object *xk = get(&e[0], "extra_keys");
        assert_int_equal(xk->via.array.size, 2);
        assert_int_equal(xk->via.array.ptr[0].type, MSGPACK_OBJECT_NIL);
        assert_int_equal(get(&e[0], "group_idx")->via.u64, 0);
        assert_true(str_is(get(&e[0], "kv_cache_spec_kind"), "full_attention"));
        assert_true(str_is(get(&e[1], "type"), "BlockRemoved"));
        assert_true(hash_of(&get(&e[1], "block_hashes")->via.array.ptr[0], form) == hashes[0]);
        assert_true(str_is(get(&e[1], "medium"), "GPU"));
        assert_true(str_is(get(&e[2], "type"), "AllBlocksCleared"));
        assert_int_equal(e[2].via.map.size, 1);
        done(&res);
    }
}

/* The base model: nil lora_id and lora_name; the chain's first run: nil parent; events of a
 * request known by hashes only: empty token_ids. */
static void test_nils(void **state)
{
    (void)state;
    sb_kv_encode_opts o = {.encoding = SB_KV_ENC_ARRAY};
    sb_engine_kv_event ev = stored();
    ev.adapter = 0;
    ev.has_parent = false;
    ev.token_ids = NULL;
    msgpack_unpacked res;
    roundtrip(&ev, 1, &o, &res);
    const msgpack_object *s = res.data.via.array.ptr[1].via.array.ptr[0].via.array.ptr;
    assert_int_equal(s[2].type, MSGPACK_OBJECT_NIL);
    assert_int_equal(s[3].via.array.size, 0);
    assert_int_equal(s[5].type, MSGPACK_OBJECT_NIL);
    assert_int_equal(s[7].type, MSGPACK_OBJECT_NIL);
    done(&res);
    /* An adapter id without a name (out of the table): the id, and a nil name. */
    ev.adapter = 9;
    o.adapter_names = names;
    o.n_adapter_names = 2;
    roundtrip(&ev, 1, &o, &res);
    s = res.data.via.array.ptr[1].via.array.ptr[0].via.array.ptr;
    assert_int_equal(s[5].via.u64, 9);
    assert_int_equal(s[7].type, MSGPACK_OBJECT_NIL);
    done(&res);
}

/* An empty batch with a nil rank still has the three fields. */
static void test_empty_batch_nil_rank(void **state)
{
    (void)state;
    sb_buf b = {0};
    assert_int_equal(sb_kv_encode_batch(&b, 0.25, NULL, 0, 0, -1), 0);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&res, b.data, b.len, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(res.data.via.array.size, 3);
    assert_int_equal(res.data.via.array.ptr[1].via.array.size, 0);
    assert_int_equal(res.data.via.array.ptr[2].type, MSGPACK_OBJECT_NIL);
    msgpack_unpacked_destroy(&res);
    sb_buf_free(&b);
}

/* The 32-byte form folds back to the integer form, and differs between hashes. */
static void test_hash_bytes(void **state)
{
    (void)state;
    uint8_t a[32], b[32];
    sb_kv_hash_bytes(UINT64_MAX, a);
    sb_kv_hash_bytes(UINT64_MAX - 1, b);
    for (int i = 24; i < 32; i++)
        assert_int_equal(a[i], 0xff);
    assert_int_equal(b[31], 0xfe);
    assert_true(memcmp(a, b, 24) != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_encoding),       cmocka_unit_test(test_map_encoding), cmocka_unit_test(test_nils),
        cmocka_unit_test(test_empty_batch_nil_rank), cmocka_unit_test(test_hash_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
