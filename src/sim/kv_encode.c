/* kv_encode: see kv_encode.h for the wire shapes. */
#include "sim/kv_encode.h"

#include <errno.h>
#include <msgpack.h>
#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

/* msgpack-c's writer: appends to an sb_buf (0, or -1 when memory runs out). */
static int write_buf(void *data, const char *p, size_t n)
{
    return sb_buf_append(data, p, n) < 0 ? -1 : 0;
}

static int pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

void sb_kv_hash_bytes(uint64_t h, uint8_t out[32])
{
    for (int k = 0; k < 3; k++) {
        uint64_t d = XXH3_64bits_withSeed(&h, sizeof h, (uint64_t)k + 1);
        for (int i = 0; i < 8; i++)
            out[k * 8 + i] = (uint8_t)(d >> (56 - 8 * i));
    }
    for (int i = 0; i < 8; i++)
        out[24 + i] = (uint8_t)(h >> (56 - 8 * i));
}

static int pack_hash(msgpack_packer *pk, uint64_t h, const sb_kv_encode_opts *o)
{
    if (o->hashes == SB_KV_HASH_INT)
        return msgpack_pack_uint64(pk, h);
    uint8_t d[32];
    sb_kv_hash_bytes(h, d);
    return msgpack_pack_bin(pk, sizeof d) || msgpack_pack_bin_body(pk, d, sizeof d);
}

static int pack_hashes(msgpack_packer *pk, const sb_engine_kv_event *ev, const sb_kv_encode_opts *o)
{
    if (msgpack_pack_array(pk, ev->n_blocks))
        return -1;
    for (uint32_t i = 0; i < ev->n_blocks; i++)
        if (pack_hash(pk, ev->block_hashes[i], o))
            return -1;
    return 0;
}

/* Writes the map key when encoding maps; nothing for arrays. */
static int key(msgpack_packer *pk, const sb_kv_encode_opts *o, const char *k)
{
    return o->encoding == SB_KV_ENC_MAP ? pack_cstr(pk, k) : 0;
}

static int pack_stored(msgpack_packer *pk, const sb_engine_kv_event *ev, const sb_kv_encode_opts *o)
{
    bool map = o->encoding == SB_KV_ENC_MAP;
    const char *lora =
        ev->adapter && ev->adapter <= o->n_adapter_names && o->adapter_names ? o->adapter_names[ev->adapter - 1] : NULL;
    uint32_t n_tok = ev->token_ids ? ev->n_blocks * ev->block_size : 0;
    if ((map ? msgpack_pack_map(pk, 11) : msgpack_pack_array(pk, 8)) || key(pk, o, "type") ||
        pack_cstr(pk, "BlockStored") || key(pk, o, "block_hashes") || pack_hashes(pk, ev, o) ||
        key(pk, o, "parent_block_hash") ||
        (ev->has_parent ? pack_hash(pk, ev->parent_hash, o) : msgpack_pack_nil(pk)) || key(pk, o, "token_ids") ||
        msgpack_pack_array(pk, n_tok))
        return -1;
    for (uint32_t i = 0; i < n_tok; i++)
        if (msgpack_pack_uint32(pk, ev->token_ids[i]))
            return -1;
    if (key(pk, o, "block_size") || msgpack_pack_uint32(pk, ev->block_size) || key(pk, o, "lora_id") ||
        (ev->adapter ? msgpack_pack_uint32(pk, ev->adapter) : msgpack_pack_nil(pk)) || key(pk, o, "medium") ||
        pack_cstr(pk, "GPU") || key(pk, o, "lora_name") || (lora ? pack_cstr(pk, lora) : msgpack_pack_nil(pk)))
        return -1;
    if (!map)
        return 0;
    if (pack_cstr(pk, "extra_keys") || msgpack_pack_array(pk, ev->n_blocks))
        return -1;
    for (uint32_t i = 0; i < ev->n_blocks; i++)
        if (msgpack_pack_nil(pk))
            return -1;
    return pack_cstr(pk, "group_idx") || msgpack_pack_int(pk, 0) || pack_cstr(pk, "kv_cache_spec_kind") ||
                   pack_cstr(pk, "full_attention")
               ? -1
               : 0;
}

static int pack_event(msgpack_packer *pk, const sb_engine_kv_event *ev, const sb_kv_encode_opts *o)
{
    bool map = o->encoding == SB_KV_ENC_MAP;
    switch (ev->kind) {
    case SB_ENGINE_KV_STORED: return pack_stored(pk, ev, o);
    case SB_ENGINE_KV_REMOVED:
        if ((map ? msgpack_pack_map(pk, 4) : msgpack_pack_array(pk, 3)) || key(pk, o, "type") ||
            pack_cstr(pk, "BlockRemoved") || key(pk, o, "block_hashes") || pack_hashes(pk, ev, o) ||
            key(pk, o, "medium") || pack_cstr(pk, "GPU"))
            return -1;
        return map && (pack_cstr(pk, "group_idx") || msgpack_pack_int(pk, 0)) ? -1 : 0;
    case SB_ENGINE_KV_CLEARED:
        return (map ? msgpack_pack_map(pk, 1) : msgpack_pack_array(pk, 1)) || key(pk, o, "type") ||
                       pack_cstr(pk, "AllBlocksCleared")
                   ? -1
                   : 0;
    }
    return -1;
}

int sb_kv_encode_event(sb_buf *b, const sb_engine_kv_event *ev, const sb_kv_encode_opts *o)
{
    size_t was = b->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, write_buf);
    if (pack_event(&pk, ev, o) != 0) {
        b->len = was;
        return -ENOMEM;
    }
    return 0;
}

int sb_kv_encode_batch(sb_buf *b, double ts, const char *events, size_t len, uint32_t n, int dp_rank)
{
    size_t was = b->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, write_buf);
    if (msgpack_pack_array(&pk, 3) || msgpack_pack_double(&pk, ts) || msgpack_pack_array(&pk, n) ||
        (len && sb_buf_append(b, events, len) < 0) ||
        (dp_rank < 0 ? msgpack_pack_nil(&pk) : msgpack_pack_int(&pk, dp_rank))) {
        b->len = was;
        return -ENOMEM;
    }
    return 0;
}
