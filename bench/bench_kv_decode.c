/* bench_kv_decode: the cost of decoding KV-event batches (src/proto/kv_events.c).
 *
 * Built by `make bench` (build/bench/bench_kv_decode) and run by bench/run.sh.
 *
 * Payloads are built with msgpack-c's packer in vLLM's shapes, then decoded again and again:
 *   step      one engine step at max_num_batched_tokens 8192: a 4096-token prefill (256 blocks),
 *             255 decoding requests completing a block each, 511 evictions (one BlockRemoved per
 *             block, as vLLM sends them); positional encoding, uint64 hashes;
 *   step-map  the same batch in the map encoding (vLLM after PR #42892);
 *   step-bin  the same batch with 32-byte bin hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0);
 *   prefill   one BlockStored of 16384 blocks / 262144 tokens (a 256k-token prompt in one step).
 * For each: ns per batch, ns per event, ns per token id, MB/s, and side by side the time
 * msgpack-c's own unpacker (msgpack_unpack_next into a zone) takes merely to build its object
 * tree of the same payload, before any field would be read: the alternative this decoder
 * replaced. Figures only: a benchmark never decides whether a build passes. */
#include "proto/kv_events.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum shape { STEP, STEP_MAP, STEP_BIN, PREFILL };

static void hash(msgpack_packer *pk, uint64_t h, bool bin)
{
    if (!bin) {
        msgpack_pack_uint64(pk, h);
        return;
    }
    uint8_t d[32];
    for (int i = 0; i < 32; i++)
        d[i] = (uint8_t)(h >> (8 * (i & 7))) ^ (uint8_t)i;
    msgpack_pack_bin_with_body(pk, d, 32);
}

static void key(msgpack_packer *pk, const char *k)
{
    msgpack_pack_str_with_body(pk, k, strlen(k));
}

static void stored(msgpack_packer *pk, uint64_t first_hash, int blocks, uint32_t first_tok, bool map, bool bin)
{
    if (map) {
        msgpack_pack_map(pk, 9);
        key(pk, "type"), key(pk, "BlockStored");
        key(pk, "block_hashes");
    } else {
        msgpack_pack_array(pk, 8);
        key(pk, "BlockStored");
    }
    msgpack_pack_array(pk, (size_t)blocks);
    for (int i = 0; i < blocks; i++)
        hash(pk, first_hash + (uint64_t)i * 0x9E3779B97F4A7C15ull, bin);
    if (map)
        key(pk, "parent_block_hash");
    hash(pk, first_hash - 1, bin);
    if (map)
        key(pk, "token_ids");
    msgpack_pack_array(pk, (size_t)blocks * 16);
    for (int i = 0; i < blocks * 16; i++)
        msgpack_pack_uint32(pk, (first_tok + (uint32_t)i * 7919u) % 151936u); /* a Qwen-sized vocabulary */
    if (map)
        key(pk, "block_size");
    msgpack_pack_uint32(pk, 16);
    if (map)
        key(pk, "lora_id");
    msgpack_pack_nil(pk);
    if (map)
        key(pk, "medium");
    key(pk, "GPU");
    if (map)
        key(pk, "lora_name");
    msgpack_pack_nil(pk);
    if (map)
        key(pk, "group_idx"), msgpack_pack_uint32(pk, 0);
}

static void removed(msgpack_packer *pk, uint64_t h, bool map, bool bin)
{
    if (map) {
        msgpack_pack_map(pk, 3);
        key(pk, "type"), key(pk, "BlockRemoved");
        key(pk, "block_hashes");
    } else {
        msgpack_pack_array(pk, 3);
        key(pk, "BlockRemoved");
    }
    msgpack_pack_array(pk, 1);
    hash(pk, h, bin);
    if (map)
        key(pk, "medium");
    key(pk, "GPU");
}

static void build(msgpack_sbuffer *sb, enum shape s)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    bool map = s == STEP_MAP, bin = s == STEP_BIN;
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 1789095808.83);
    if (s == PREFILL) {
        msgpack_pack_array(&pk, 1);
        stored(&pk, 0xC000000000000000ull, 16384, 0, false, false);
    } else {
        msgpack_pack_array(&pk, 1 + 255 + 511);
        stored(&pk, 0xA000000000000000ull, 256, 0, map, bin);
        for (int r = 0; r < 255; r++)
            stored(&pk, 0xF000000000000000ull + (uint64_t)r * 977, 1, (uint32_t)r * 16, map, bin);
        for (int r = 0; r < 511; r++)
            removed(&pk, 0xB000000000000000ull + (uint64_t)r * 31, map, bin);
    }
    msgpack_pack_int(&pk, 0);
}

int main(int argc, char **argv)
{
    double budget = argc > 1 ? atof(argv[1]) : 0.4; /* seconds per measurement */
    sb_kv_limits lim = sb_kv_limits_default();
    sb_kv_scratch scr;
    if (sb_kv_scratch_init(&scr, &lim) < 0)
        return 1;
    static const char *names[] = {"step", "step-map", "step-bin", "prefill"};
    printf("%-9s %9s %7s %8s %11s %9s %8s %8s %11s %7s\n", "payload", "bytes", "events", "tokens", "ns/batch",
           "ns/event", "ns/token", "MB/s", "msgpack-c", "ratio");
    for (int s = STEP; s <= PREFILL; s++) {
        msgpack_sbuffer sb;
        build(&sb, (enum shape)s);
        sb_kv_batch b;
        if (sb_kv_decode((const uint8_t *)sb.data, sb.size, &lim, &scr, &b, NULL) != 0) {
            fprintf(stderr, "%s: decode failed\n", names[s]);
            return 1;
        }
        uint64_t tokens = 0;
        for (uint32_t i = 0; i < b.n_events; i++)
            tokens += b.events[i].n_tokens;
        uint32_t events = b.n_events;
        long iters = 0;
        double t0 = now_s(), t;
        do {
            for (int k = 0; k < 16; k++, iters++) {
                sb_kv_decode((const uint8_t *)sb.data, sb.size, &lim, &scr, &b, NULL);
                sink += b.n_events + b.events[b.n_events - 1].n_hashes;
            }
        } while ((t = now_s() - t0) < budget);
        double ns = t * 1e9 / (double)iters;
        /* msgpack-c's object API: unpacking alone, into a zone reused across iterations. */
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        long iters2 = 0;
        t0 = now_s();
        do {
            for (int k = 0; k < 4; k++, iters2++) {
                size_t off = 0;
                msgpack_unpack_next(&up, sb.data, sb.size, &off);
                sink += up.data.via.array.size + off;
            }
        } while ((t = now_s() - t0) < budget);
        double ns2 = t * 1e9 / (double)iters2;
        msgpack_unpacked_destroy(&up);
        printf("%-9s %9zu %7u %8llu %11.0f %9.1f %8.2f %8.0f %9.0f ns %6.2fx\n", names[s], sb.size, events,
               (unsigned long long)tokens, ns, ns / events, tokens ? ns / (double)tokens : 0.0,
               (double)sb.size / ns * 1e3, ns2, ns2 / ns);
        msgpack_sbuffer_destroy(&sb);
    }
    printf("ratio: msgpack-c's unpack into objects / this decoder's whole decode (higher: this is faster)\n");
    sb_kv_scratch_free(&scr);
    return 0;
}
