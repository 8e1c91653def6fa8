/* production-stack-prefix: the vLLM production-stack router's prefix-aware routing
 * (vllm-project/production-stack src/vllm_router/routers/routing_logic.py, PrefixAwareRouter;
 * src/vllm_router/prefix/hashtrie.py, HashTrie with chunk_size 128).
 *
 * The rule: the prompt is cut into 128-character chunks (the last one may be short), each
 * hashed; a trie over the chunk hashes records, at every node, the endpoints that were sent a
 * prompt through it. The longest match walks down while some still-selected endpoint holds the
 * next chunk; the endpoints holding the longest matched prefix are the candidates (all available
 * endpoints when not even the first chunk matches), one is chosen uniformly at random, and the
 * prompt is inserted for it. No load signal, no eviction: "we assume that there is no eviction
 * of prefix cache" (routing_logic.py).
 *
 * Here: 128 characters = 32 token ids (4 bytes per token); chunks are chained hashes of 32 token
 * ids (the last chunk partial, as theirs), unseeded (their trie ignores the model and adapter),
 * kept in a core/prefix_index.h (per endpoint: leading chunks held), which answers the same
 * question as the trie walk: an endpoint reaches depth d only if it holds chunks 1..d. Their
 * trie is unbounded; this index is bounded at 4M entries (about 140 MB), evicting the least
 * recently used beyond (docs/replay.md says whether a run reached it). */
#include <xxhash.h>

#include "base/alloc.h"
#include "core/prefix_index.h"
#include "replay/policy.h"

#define CHUNK_TOKENS 32 /* HashTrie chunk_size 128 characters at 4 bytes per token */
#define MAX_ENTRIES (1u << 22)

typedef struct state {
    uint32_t n;
    sb_prefix_index *trie;
    uint32_t *match, *ties;
    uint64_t *chunks; /* scratch: the current request's chunk hashes */
    size_t cap;
    size_t n_chunks; /* of the request last picked, reused by on_dispatch */
    uint64_t picked_id;
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    sb_prefix_index_free(s->trie);
    sb_free(s->match);
    sb_free(s->ties);
    sb_free(s->chunks);
    sb_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = env->n_replicas;
    s->trie = sb_prefix_index_new(s->n, MAX_ENTRIES, MAX_ENTRIES, env->hash_secret);
    s->match = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    s->ties = sb_calloc(s->n ? s->n : 1, sizeof(uint32_t));
    s->picked_id = UINT64_MAX;
    if (!s->trie || !s->match || !s->ties) {
        destroy(s);
        return NULL;
    }
    return s;
}

/* Chained hashes of the 32-token chunks, the last one partial. Returns the count, or SIZE_MAX
 * on ENOMEM. */
static size_t hash_chunks(state *s, const uint32_t *tokens, uint32_t n)
{
    size_t k = ((size_t)n + CHUNK_TOKENS - 1) / CHUNK_TOKENS;
    if (k > s->cap) {
        uint64_t *nc = sb_realloc(s->chunks, k * sizeof(uint64_t));
        if (!nc)
            return SIZE_MAX;
        s->chunks = nc;
        s->cap = k;
    }
    uint64_t h = 0;
    for (size_t i = 0; i < k; i++) {
        size_t len = n - i * CHUNK_TOKENS < CHUNK_TOKENS ? n - i * CHUNK_TOKENS : CHUNK_TOKENS;
        s->chunks[i] = h = XXH3_64bits_withSeed(tokens + i * CHUNK_TOKENS, len * sizeof(uint32_t), h);
    }
    return k;
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    size_t k = hash_chunks(s, r->tokens, r->n_tokens);
    s->picked_id = r->id;
    s->n_chunks = k == SIZE_MAX ? 0 : k;
    size_t best = sb_prefix_index_match(s->trie, s->chunks, s->n_chunks, s->match);
    uint32_t nt = 0;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->match[i] == best)
            s->ties[nt++] = i;
    return (int)s->ties[sb_rand_next(f->rng) % nt];
}

static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    (void)f;
    state *s = st;
    if (s->picked_id != r->id) { /* not the request just picked: hash it again */
        size_t k = hash_chunks(s, r->tokens, r->n_tokens);
        s->n_chunks = k == SIZE_MAX ? 0 : k;
    }
    sb_prefix_index_insert(s->trie, replica, s->chunks, s->n_chunks);
}

static const sb_replay_custom_ops ops = {
    .create = create, .destroy = destroy, .pick = pick, .on_dispatch = on_dispatch};

const sb_replay_policy_def sb_policy_production_stack_prefix = {
    .name = "production-stack-prefix",
    .summary = "vLLM production-stack prefix-aware: hash trie of 128-char chunks, random among longest matches, "
               "no eviction (production-stack vllm_router/routers/routing_logic.py, prefix/hashtrie.py)",
    .custom = &ops,
};
