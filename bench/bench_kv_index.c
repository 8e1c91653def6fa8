/* bench_kv_index: the precise index (core/kv_index.c) as the event subscriber and the router
 * drive it.
 *
 *   1. memory: 64 endpoints each storing 16,384 engine blocks (16 tokens) in 256-token
 *      BlockStored events, 1 Mi entries in all (the default bound): bytes per
 *      (block, endpoint) entry, tables included, with no block shared between endpoints and
 *      with every block held by all (the own-key table then has one key per 64 entries);
 *   2. BlockStored rate below the bound and at it (every store evicts);
 *   3. a request of 32k tokens: own keys from its token ids (sb_kv_keys_from_tokens), and the
 *      match over 64 endpoints when 64, 8 or 1 of them hold the whole prompt (stored in
 *      512-token events, the endpoints' events interleaved);
 *   4. BlockRemoved rate, and clearing one endpoint's 16k entries (AllBlocksCleared);
 *   5. the rest of a precise lookup, without the /tokenize round trip: building the /tokenize
 *      body of a 32k-token chat request (~128 KiB of text), parsing a 32k-id answer, and the
 *      tokenize cache's exact and prefix lookups for it (core/tok_cache.c).
 * Figures are medians of 5 runs. Built by `make bench` (build/bench/bench_kv_index). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/kv_index.h"
#include "core/tok_cache.h"
#include "proto/tokenize.h"

enum { EPS = 64, BS = 16, EV_BLOCKS = 16, PER_EP = 16384, REQ_TOKENS = 32768 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double median5(double v[5])
{
    qsort(v, 5, sizeof(double), cmp_double);
    return v[2];
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    return x;
}

static sb_kv_index *new_index(size_t max)
{
    sb_kv_index_config cfg = {
        .n_endpoints = EPS, .max_entries = max, .block_size = BS, .key_seed = 1337, .hash_secret = 0x5ec7e7};
    return sb_kv_index_new(&cfg);
}

/* Endpoint ep stores `events` chained events of EV_BLOCKS blocks (each sequence of 8 events
 * is one 2k-token prompt from the root), with engine hashes unique to (ep, salt, event). */
static void fill(sb_kv_index *ix, uint32_t ep, size_t events, uint64_t salt)
{
    static uint32_t tok[EV_BLOCKS * BS];
    uint64_t h[EV_BLOCKS], parent = 0;
    for (size_t e = 0; e < events; e++) {
        for (size_t i = 0; i < EV_BLOCKS * BS; i++)
            tok[i] = (uint32_t)(mix(salt * 7919 + e * 131 + i) % 128000);
        for (size_t i = 0; i < EV_BLOCKS; i++)
            h[i] = mix(((uint64_t)ep << 40) ^ (salt << 20) ^ (e * EV_BLOCKS + i) ^ 0x8000000000000000ULL);
        sb_kv_stored ev = {.engine_hashes = h,
                           .n = EV_BLOCKS,
                           .has_parent = e % 8 != 0,
                           .parent_engine_hash = parent,
                           .token_ids = tok,
                           .n_tokens = EV_BLOCKS * BS,
                           .block_size = BS};
        (void)sb_kv_index_block_stored(ix, ep, &ev);
        parent = h[EV_BLOCKS - 1];
    }
}

int main(void)
{
    /* 1 and 2: fill to the bound, then store past it. */
    double fill_s[5], over_s[5], bytes_per = 0;
    size_t entries = 0, bytes = 0;
    const size_t events = PER_EP / EV_BLOCKS;
    for (int r = 0; r < 5; r++) {
        sb_kv_index *ix = new_index(0);
        double t0 = now_s();
        for (uint32_t ep = 0; ep < EPS; ep++)
            fill(ix, ep, events, 100 + ep); /* every endpoint its own prompts: no block shared */
        fill_s[r] = now_s() - t0;
        entries = sb_kv_index_entries(ix);
        bytes = sb_kv_index_bytes(ix);
        bytes_per = (double)bytes / (double)entries;
        t0 = now_s();
        for (uint32_t ep = 0; ep < EPS; ep++)
            fill(ix, ep, events / 8, 2);
        over_s[r] = now_s() - t0;
        sb_kv_index_free(ix);
    }
    /* The same, every endpoint holding the same prompts (one own key per 64 entries). */
    sb_kv_index *shared = new_index(0);
    for (uint32_t ep = 0; ep < EPS; ep++)
        fill(shared, ep, events, 1);
    double shared_per = (double)sb_kv_index_bytes(shared) / (double)sb_kv_index_entries(shared);
    sb_kv_index_free(shared);
    size_t stored_events = (size_t)EPS * events;
    double f = median5(fill_s), o = median5(over_s);
    printf("memory: %zu entries (64 endpoints x 16384 blocks), %.1f MiB, %.1f bytes per (block, endpoint) entry "
           "with no block shared; %.1f with every block held by all 64\n",
           entries, bytes / 1048576.0, bytes_per, shared_per);
    printf("BlockStored (16 blocks of 16 tokens) below the bound: %.0f events/s, %.0f blocks/s, %.0f ns/block\n",
           stored_events / f, stored_events * EV_BLOCKS / f, f / (stored_events * EV_BLOCKS) * 1e9);
    printf("BlockStored at the bound (each block evicts one): %.0f events/s, %.0f ns/block\n", stored_events / 8 / o,
           o / (stored_events / 8 * EV_BLOCKS) * 1e9);

    /* 3: a 32k-token request. */
    static uint32_t tok[REQ_TOKENS];
    static uint64_t keys[REQ_TOKENS / BS], h[REQ_TOKENS / BS];
    static uint32_t match[EPS];
    for (size_t i = 0; i < REQ_TOKENS; i++)
        tok[i] = (uint32_t)(mix(i + 99) % 128000);
    const size_t nb = REQ_TOKENS / BS;
    double keys_s[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int k = 0; k < 100; k++)
            sb_kv_keys_from_tokens(1337, tok, REQ_TOKENS, BS, (uint64_t)r, keys);
        keys_s[r] = (now_s() - t0) / 100;
    }
    sb_kv_keys_from_tokens(1337, tok, REQ_TOKENS, BS, 0, keys);
    printf("own keys of a 32k-token request (2048 blocks): %.1f us\n", median5(keys_s) * 1e6);
    const int holders[3] = {64, 8, 1};
    for (int hi = 0; hi < 3; hi++) {
        /* A warm index: every endpoint at 16k blocks of other prompts, `holders` of them also
         * holding the request's whole prompt, stored as a chunked prefill reports it: events of
         * 32 blocks (512 tokens), the endpoints' events interleaved, so each endpoint's chain
         * is consecutive in memory only within an event. */
        sb_kv_index *ix = new_index((size_t)EPS * (PER_EP + nb));
        for (uint32_t ep = 0; ep < EPS; ep++)
            fill(ix, ep, events, 3);
        enum { CHUNK = 32 };
        for (size_t c = 0; c < nb; c += CHUNK) {
            for (uint32_t ep = 0; ep < (uint32_t)holders[hi]; ep++) {
                for (size_t i = 0; i < nb; i++)
                    h[i] = mix(((uint64_t)ep << 32) ^ i ^ 0xabcdef);
                sb_kv_stored ev = {.engine_hashes = h + c,
                                   .n = CHUNK,
                                   .has_parent = c > 0,
                                   .parent_engine_hash = c ? h[c - 1] : 0,
                                   .token_ids = tok + c * BS,
                                   .n_tokens = CHUNK * BS,
                                   .block_size = BS};
                (void)sb_kv_index_block_stored(ix, ep, &ev);
            }
        }
        double m[5];
        size_t best = 0;
        for (int r = 0; r < 5; r++) {
            double t0 = now_s();
            for (int k = 0; k < 20; k++)
                best = sb_kv_index_match(ix, keys, nb, match);
            m[r] = (now_s() - t0) / 20;
        }
        double mm = median5(m);
        printf("match, 32k tokens over 64 endpoints, %2d holding it (%zu blocks matched): %.1f us, %.1f ns/block\n",
               holders[hi], best, mm * 1e6, mm / nb * 1e9);
        if (hi == 0) {
            /* 4: removals and a clear on the same warm index. */
            double t0 = now_s();
            for (uint32_t ep = 0; ep < EPS; ep++) {
                for (size_t i = 0; i < nb; i++)
                    h[i] = mix(((uint64_t)ep << 32) ^ i ^ 0xabcdef);
                (void)sb_kv_index_block_removed(ix, ep, h, nb, false);
            }
            double rm = now_s() - t0;
            printf("BlockRemoved: %.0f blocks/s, %.0f ns/block\n", EPS * nb / rm, rm / (EPS * nb) * 1e9);
            t0 = now_s();
            sb_kv_index_clear(ix, 0);
            printf("clear of one endpoint holding %d blocks: %.2f ms\n", PER_EP, (now_s() - t0) * 1e3);
        }
        sb_kv_index_free(ix);
    }

    /* 5: the request-side codecs and the tokenize cache. */
    static char req[200000], body[200000], answer[400000];
    size_t rl = (size_t)snprintf(req, sizeof req, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"");
    while (rl < 131072)
        rl += (size_t)snprintf(req + rl, sizeof req - rl, "word%zu ", rl % 977);
    rl += (size_t)snprintf(req + rl, sizeof req - rl, "\"},{\"role\":\"user\",\"content\":\"hi\"}]}");
    sb_json j = {0};
    int nt = sb_json_parse(&j, req, rl);
    double b5[5], p5[5], le[5], lp[5];
    long bl = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int k = 0; k < 20; k++) {
            nt = sb_json_parse(&j, req, rl);
            bl = sb_tokenize_build_body(req, j.tokens, nt, "m", 1, body, sizeof body);
        }
        b5[r] = (now_s() - t0) / 20;
    }
    size_t al =
        (size_t)snprintf(answer, sizeof answer, "{\"count\":%d,\"max_model_len\":131072,\"tokens\":[", REQ_TOKENS);
    for (size_t i = 0; i < REQ_TOKENS; i++)
        al += (size_t)snprintf(answer + al, sizeof answer - al, "%s%u", i ? "," : "", tok[i]);
    al += (size_t)snprintf(answer + al, sizeof answer - al, "]}");
    static uint32_t parsed[REQ_TOKENS];
    size_t np = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int k = 0; k < 20; k++)
            (void)sb_tokenize_parse_answer(&j, answer, al, parsed, REQ_TOKENS, &np);
        p5[r] = (now_s() - t0) / 20;
    }
    sb_json_free(&j);
    /* The cache: 100 prompts sharing a 2,000-block (128 KiB) system prompt, each with its own
     * 48 blocks after it; then lookups of one cached prompt (exact) and of a new one (the
     * prefix the others proved). */
    sb_tok_cache_config tcfg = {0};
    sb_tok_cache *tc = sb_tok_cache_new(&tcfg);
    static uint64_t chain[2048];
    for (uint64_t p = 0; p < 100; p++) {
        for (size_t b = 0; b < 2048; b++)
            chain[b] = mix(b < 2000 ? b : (p << 32) + b);
        for (size_t i = 30000; i < REQ_TOKENS; i++)
            tok[i] = (uint32_t)(mix(p * 65536 + i) % 128000);
        sb_tok_key k = {.ctx = 1, .prompt_key = p, .chain = chain, .n_blocks = 2048};
        (void)sb_tok_cache_insert(tc, &k, tok, REQ_TOKENS, true);
    }
    sb_tok_key kx = {.ctx = 1, .prompt_key = 99, .chain = chain, .n_blocks = 2048};
    size_t got_exact = 0, got_prefix = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int k = 0; k < 100; k++)
            got_exact = sb_tok_cache_lookup(tc, &kx).n_tokens;
        le[r] = (now_s() - t0) / 100;
    }
    for (size_t b = 2000; b < 2048; b++)
        chain[b] = mix(((uint64_t)777 << 32) + b);
    sb_tok_key kn = {.ctx = 1, .prompt_key = 777, .chain = chain, .n_blocks = 2048};
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int k = 0; k < 100; k++)
            got_prefix = sb_tok_cache_lookup(tc, &kn).n_tokens;
        lp[r] = (now_s() - t0) / 100;
    }
    sb_tok_cache_stats ts = sb_tok_cache_get_stats(tc);
    sb_tok_cache_free(tc);
    printf("/tokenize body for a 128 KiB chat request (parse + build, %ld bytes): %.1f us\n", bl, median5(b5) * 1e6);
    printf("/tokenize answer of %zu ids (%zu bytes) parsed: %.1f us\n", np, al, median5(p5) * 1e6);
    printf("tokenize cache, 100 prompts of 32k ids sharing 2000 text blocks (%.1f MiB held): exact lookup %.2f us "
           "(%zu ids), prefix lookup of a new prompt %.2f us (%zu ids proven)\n",
           ts.bytes / 1048576.0, median5(le) * 1e6, got_exact, median5(lp) * 1e6, got_prefix);
    return 0;
}
