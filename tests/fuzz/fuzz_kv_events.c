/* fuzz_kv_events: libFuzzer target for src/proto/kv_events.c (outside input: the payload frames
 * model servers publish as KV-cache events).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); the committed corpus
 * (tests/fuzz/corpus/kv_events) is also replayed by tests/unit/proto/test_kv_events.c.
 *
 * Besides crashes and sanitizer reports, it checks what the subscriber relies on:
 *   - the result is 0 or one of the four error codes, with the error's offset inside the input;
 *   - a refused payload leaves no events; an accepted one stays inside the scratch and the
 *     limits (events, hashes and tokens per event and per batch), and its strings inside the
 *     payload;
 *   - decoding is deterministic: a second decode gives the same batch;
 *   - with tighter limits, a payload is either refused for a limit or decoded identically. */
#include "proto/kv_events.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

static sb_kv_scratch scratch, scratch2;
static sb_kv_limits lim, tight;

static uint64_t batch_hash(const sb_kv_batch *b)
{
    uint64_t h = 0xcbf29ce484222325ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 0x100000001b3ull)
    MIX(b->n_events), MIX(b->dp_rank), MIX(b->unknown_events), MIX(b->unknown_fields);
    for (uint32_t i = 0; i < b->n_events; i++) {
        const sb_kv_event *e = &b->events[i];
        MIX(e->kind), MIX(e->medium), MIX(e->n_hashes), MIX(e->n_tokens), MIX(e->has_parent), MIX(e->parent_hash);
        MIX(e->block_size), MIX(e->group_idx), MIX(e->lora_id), MIX(e->lora_name_len), MIX(e->medium_name_len);
        for (uint32_t k = 0; k < e->n_hashes; k++)
            MIX(e->hashes[k]);
        for (uint32_t k = 0; k < e->n_tokens; k++)
            MIX(e->tokens[k]);
    }
#undef MIX
    return h;
}

static void check_batch(const sb_kv_batch *b, const sb_kv_scratch *s, const sb_kv_limits *l, const uint8_t *data,
                        size_t size)
{
    uint64_t hashes = 0, tokens = 0;
    CHECK(b->n_events <= l->max_events && b->n_events <= s->events_cap);
    for (uint32_t i = 0; i < b->n_events; i++) {
        const sb_kv_event *e = &b->events[i];
        CHECK(e->kind == SB_KV_BLOCK_STORED || e->kind == SB_KV_BLOCK_REMOVED || e->kind == SB_KV_ALL_CLEARED);
        CHECK(e->n_hashes <= l->max_hashes_per_event && e->n_tokens <= l->max_tokens_per_event);
        CHECK(e->n_hashes == 0 || (e->hashes >= s->hashes && e->hashes + e->n_hashes <= s->hashes + s->hashes_cap));
        CHECK(e->n_tokens == 0 || (e->tokens >= s->tokens && e->tokens + e->n_tokens <= s->tokens + s->tokens_cap));
        CHECK(!e->lora_name || ((const uint8_t *)e->lora_name >= data &&
                                (const uint8_t *)e->lora_name + e->lora_name_len <= data + size));
        CHECK(!e->medium_name || ((const uint8_t *)e->medium_name >= data &&
                                  (const uint8_t *)e->medium_name + e->medium_name_len <= data + size));
        CHECK(e->kind == SB_KV_BLOCK_STORED || e->n_tokens == 0);
        CHECK(e->kind != SB_KV_ALL_CLEARED || e->n_hashes == 0);
        hashes += e->n_hashes;
        tokens += e->n_tokens;
    }
    CHECK(hashes <= l->max_batch_hashes && tokens <= l->max_batch_tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!scratch.events) {
        lim = sb_kv_limits_default();
        CHECK(sb_kv_scratch_init(&scratch, &lim) == 0);
        tight = (sb_kv_limits){.max_payload_bytes = 4096,
                               .max_events = 4,
                               .max_hashes_per_event = 3,
                               .max_tokens_per_event = 40,
                               .max_batch_hashes = 6,
                               .max_batch_tokens = 64};
        CHECK(sb_kv_scratch_init(&scratch2, &tight) == 0);
    }
    sb_kv_batch b, b2;
    sb_kv_error err;
    int rc = sb_kv_decode(data, size, &lim, &scratch, &b, &err);
    CHECK(rc == 0 || rc == SB_KV_E_TRUNCATED || rc == SB_KV_E_TYPE || rc == SB_KV_E_LIMIT || rc == SB_KV_E_SYNTAX);
    if (rc) {
        CHECK(err.code == rc && err.offset <= size && err.what);
        CHECK(b.n_events == 0);
    } else {
        check_batch(&b, &scratch, &lim, data, size);
    }
    uint64_t h = rc ? 0 : batch_hash(&b);
    int rc2 = sb_kv_decode(data, size, &lim, &scratch, &b2, &err);
    CHECK(rc2 == rc && (rc || batch_hash(&b2) == h));
    rc2 = sb_kv_decode(data, size, &tight, &scratch2, &b2, &err);
    if (rc2 == 0) {
        check_batch(&b2, &scratch2, &tight, data, size);
        CHECK(rc == 0 && batch_hash(&b2) == h);
    } else {
        CHECK(rc2 == SB_KV_E_LIMIT || rc2 == rc);
    }
    return 0;
}
