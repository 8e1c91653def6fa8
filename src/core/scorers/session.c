/* Hash-affinity scorers (affinity), the stateless policies: the pool's consistent-
 * hash ring with bounded loads (core/chash.h) names one endpoint among the candidates, which
 * scores 1.0; the others score 0.
 *   session      key = the request's session key (header, `user`, API key or client address)
 *   prefix-hash  key = adapter + the first characters of the prompt (KubeAI's prefix hash)
 *   cold-prefix  prefix-hash's key, but only for a cold prompt: when no candidate holds any of
 *                its blocks by the prefix index, it names where the prefix should live; once
 *                some endpoint holds it, it abstains and the prefix scorers decide. Gateway
 *                replicas that never hear each other's routing then place a new prefix on the
 *                same endpoint (each one's own index sees every prefix the others started as
 *                cold), instead of one copy per gateway.
 * Load is the router's own in-flight count (never stale), bound c = 1.25: a hot session or
 * prefix stays on its endpoint until that holds 1.25x the candidates' average, then spills
 * clockwise. No key, no ring, or no candidate on the ring: every candidate scores 1.0 (the
 * scorer abstains rather than invent a preference). Same ring and loads give the same pick on
 * every gateway replica. */
#include <string.h>

#include "core/chash.h"
#include "core/sched.h"

static void score_key(const sb_sched_ctx *ctx, uint64_t key, const sb_candidate *c, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = 1.0;
    const sb_chash *ring = ctx->ring;
    if (key == 0 || ring == NULL || n == 0)
        return;
    /* The candidates as a bitmap over the ring's endpoints: 8 KiB at most on the stack, and
     * only the words in use are cleared. Cheaper than endpoint-indexed load and mask arrays,
     * which would need per-pool scratch. */
    size_t ring_n = sb_chash_endpoint_count(ring);
    uint64_t allowed[SB_CHASH_MAX_ENDPOINTS / 64];
    memset(allowed, 0, (ring_n + 63) / 64 * sizeof(uint64_t));
    uint64_t total = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].ep->index < ring_n) {
            total += c[i].ep->in_flight;
            m++;
        }
    if (m == 0)
        return;
    uint64_t bound = sb_chash_load_bound(total, m, SB_CHASH_DEFAULT_LOAD_FACTOR);
    for (size_t i = 0; i < n; i++) {
        uint32_t e = c[i].ep->index;
        if (e < ring_n && (uint64_t)c[i].ep->in_flight + 1 <= bound)
            allowed[e / 64] |= 1ULL << (e % 64);
    }
    int pick = sb_chash_first(ring, key, allowed);
    if (pick < 0) /* cannot happen: some candidate is under the bound */
        return;
    for (size_t i = 0; i < n; i++)
        out[i] = c[i].ep->index == (uint32_t)pick ? 1.0 : 0.0;
}

static void session_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                          double *out)
{
    score_key(ctx, req->session_key, c, n, out);
}

static void prefix_hash_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                              double *out)
{
    score_key(ctx, req->prefix_key, c, n, out);
}

static void cold_prefix_score(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                              double *out)
{
    bool warm = false;
    for (size_t i = 0; ctx->prefix_match && i < n && !warm; i++)
        warm = ctx->prefix_match[c[i].ep->index] > 0;
    if (warm || req->n_blocks == 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = 1.0;
        return;
    }
    score_key(ctx, req->prefix_key, c, n, out);
}

const sb_scorer_def sb_scorer_session = {.name = "session", .category = SB_AFFINITY, .score = session_score};
const sb_scorer_def sb_scorer_prefix_hash = {
    .name = "prefix-hash", .category = SB_AFFINITY, .score = prefix_hash_score};
const sb_scorer_def sb_scorer_cold_prefix = {
    .name = "cold-prefix", .category = SB_AFFINITY, .score = cold_prefix_score};
