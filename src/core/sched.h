/* sched: the scheduling framework. A profile is filters in order, weighted scorers, and one
 * picker; a decision runs them over a pool's endpoints and records why it chose what it chose.
 *
 * - A filter removes candidates (and says which filter removed whom). Some filters are soft:
 *   when they would remove every candidate they remove none (saturation, LoRA).
 * - A scorer gives each remaining candidate a score in [0,1] (higher is better) and declares a
 *   category: affinity (prefix, session, LoRA) or distribution (queue, running, KV, in-flight,
 *   pending prefill). The adaptive configurator (a later issue) moves weight between the two.
 * - The total is the weighted sum of scores divided by the sum of weights (so it is in [0,1]).
 * - A picker chooses one candidate from the totals.
 *
 * Plug-ins live one per file under core/filters, core/scorers and core/pickers and are listed
 * in one registry (core/plugins.c). Pure: no I/O, no clock (ctx->now), randomness from the
 * caller's seeded generator, so replay is deterministic. */
#ifndef SB_CORE_SCHED_H
#define SB_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/time.h"
#include "core/endpoint.h"

#define SB_MAX_FILTERS 8
#define SB_MAX_SCORERS 12
#define SB_PROFILE_NAME_MAX 64

enum sb_scorer_category { SB_AFFINITY = 0, SB_DISTRIBUTION = 1 };

/* What the core sees of a request: never text, only what routing needs. */
typedef struct sb_sched_request {
    uint32_t pool;
    int adapter;                  /* pool adapter index, -1 for the base model */
    const uint64_t *block_hashes; /* chained prefix-block hashes (proto/prompt.h) */
    size_t n_blocks;
    size_t prompt_bytes;
    uint32_t prompt_tokens;       /* estimate (bytes / 4) */
    uint64_t session_key;         /* 0 if none */
    uint64_t prefix_key;          /* 0 if none */
    /* The request's keys in the precise index (core/kv_index.h: chained over the engine's
     * token ids, sb_kv_keys_from_tokens); NULL when the pool has none or the ids are unknown. */
    const uint64_t *kv_keys;
    size_t n_kv_keys;
    const uint32_t *exclude;      /* endpoint indexes not to pick */
    size_t n_exclude;
    /* An earlier pick already counted this request (the decision after a synchronous probe;
     * a retry too, though a retry carries no block hashes): demand counters (hot_prefix) read
     * it without counting it again. */
    bool repeat;
    const struct sb_profile *profile; /* NULL: the pool's current profile (router.h) */
    /* Released by flow control's gate (core/flow.h): the saturation filter uses the gate's
     * thresholds where they are tighter than the profile's, so the request goes where the gate
     * saw room (negative: no gate threshold). */
    bool gated;
    double gate_queue, gate_kv;
} sb_sched_request;

/* Which source a candidate's prefix match came from (core/router.h, fusion). */
enum sb_prefix_source {
    SB_PREFIX_NONE = 0,     /* no match, or the request had no blocks */
    SB_PREFIX_ROUTED = 1,   /* the router's own marks (approximate) */
    SB_PREFIX_REPORTED = 2, /* the engine's reports (precise), at least as long as the marks */
};

typedef struct sb_candidate {
    sb_endpoint *ep;
    /* Its report is stale and it is not serving (core/endpoint.h): scorers that read reports
     * give it nothing, the gate and saturation filters drop it. */
    bool stale;
    uint8_t prefix_source;        /* enum sb_prefix_source (this and the two flags below sit in
                                     stale's padding: 40 bytes in all, as before them, since the
                                     scheduler copies candidates) */
    bool serving;                 /* stale report, but serving: scored as fresh from the
                                     router's own accounting (sb_endpoint_serving) */
    bool panic;                   /* ejected or down, kept by panic routing (filters/healthy.c) */
    uint32_t prefix_blocks;       /* leading blocks matched (filled by the router) */
    const char *removed_by;       /* filter name, NULL if still a candidate */
    double total;
    int32_t slot;                 /* index among live candidates (scores), -1 if removed */
} sb_candidate;

typedef struct sb_sched_ctx {
    sb_ns now;
    sb_ns stale_ns;
    uint64_t *rng;                /* xorshift state, advanced by pickers */
    size_t rr_cursor;             /* round-robin picker position (per pool, owned by caller) */
    struct sb_profile const *profile;
    /* Prefix-index lookup for this request (core/prefix_index.h), done once by the router
     * before scoring: prefix_match[i] = leading blocks endpoint i (its position in the
     * pool) holds; NULL when the request has no blocks or the pool keeps no index. */
    const uint32_t *prefix_match;
    size_t prefix_blocks;         /* the request's block count */
    double block_tokens;          /* tokens per index block (block_bytes / bytes_per_token) */
    double prefix_ref_tokens;     /* prefix-tokens scorer: matched tokens that score 1.0 */
    /* The request's hot leading run (profile hot_prefix; core/hot_prefix.h), in blocks, and
     * the holders its demand needs; 0 when none or off. */
    uint32_t hot_blocks;
    double hot_needed;
    /* The pool's consistent-hash ring over its endpoint addresses (core/chash.h), for the
     * session and prefix-hash scorers; NULL when the pool has none (they then abstain). */
    const struct sb_chash *ring;
} sb_sched_ctx;

typedef struct sb_filter_def {
    const char *name;
    bool soft;                    /* never removes every candidate */
    /* Sets removed_by on candidates to drop. */
    void (*run)(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n);
} sb_filter_def;

typedef struct sb_scorer_def {
    const char *name;
    enum sb_scorer_category category;
    /* Writes out[i] in [0,1] for each candidate i (all given are live). */
    void (*score)(const sb_sched_ctx *ctx, const sb_sched_request *req, const sb_candidate *c, size_t n,
                  double *out);
} sb_scorer_def;

typedef struct sb_picker_def {
    const char *name;
    /* Returns the index of the chosen candidate among c[0..n), n >= 1. */
    size_t (*pick)(sb_sched_ctx *ctx, const sb_candidate *c, size_t n);
} sb_picker_def;

typedef struct sb_weighted_scorer {
    const sb_scorer_def *def;
    double weight;
} sb_weighted_scorer;

typedef struct sb_profile {
    char name[SB_PROFILE_NAME_MAX];
    const sb_filter_def *filters[SB_MAX_FILTERS];
    size_t n_filters;
    sb_weighted_scorer scorers[SB_MAX_SCORERS];
    size_t n_scorers;
    const sb_picker_def *picker;
    /* plug-in parameters */
    double queue_threshold;   /* saturation and gate filters: waiting requests; default 5 (GIE's) */
    double kv_threshold;      /* saturation and gate filters: KV utilisation; default 0.8 (GIE's) */
    double temperature;       /* softmax picker; default 0.1 */
    /* prefix scorer: a leading run of blocks asked for by more than hot_prefix x its fair share
     * of the pool's requests (requests / endpoints) is hot (core/hot_prefix.h), and while fewer
     * endpoints hold it than its demand needs, holding it earns only holders / needed of its
     * credit. 0: off (the default for custom profiles). */
    double hot_prefix;
    const char *label_keys[4]; /* label selector filter */
    const char *label_values[4];
    size_t n_labels;
    /* Flow control of the pools using this profile, in place of flow_control's bounds when
     * buffer_max_queued > 0 (the paddler profile: Paddler's request buffer). Every band
     * queues up to buffer_max_queued requests in all, each for buffer_max_wait_ms at most; a
     * full buffer answers buffer_full_status, a request that waited too long
     * buffer_timeout_status. 0: flow_control's own bounds and statuses. */
    uint32_t buffer_max_queued;
    uint32_t buffer_max_wait_ms;
    uint16_t buffer_full_status, buffer_timeout_status;
} sb_profile;

/* Registry look-ups (core/plugins.c); NULL when unknown. */
const sb_filter_def *sb_filter_find(const char *name);
const sb_scorer_def *sb_scorer_find(const char *name);
const sb_picker_def *sb_picker_find(const char *name);
/* Lists for documentation and `--list`: NULL-terminated arrays. */
const sb_filter_def *const *sb_filters_all(void);
const sb_scorer_def *const *sb_scorers_all(void);
const sb_picker_def *const *sb_pickers_all(void);

/* Built-in profiles by name (sb_profile_builtin_names lists them). NULL if unknown. */
const sb_profile *sb_profile_builtin(const char *name);
const char *const *sb_profile_builtin_names(void);
/* The profile a pool fed by the engines' KV events routes with when it names p: the built-in
 * `default` becomes `default-events` (its prefix weight suits the precise index's matches);
 * any other profile is kept (user profiles cannot take a built-in's name). */
const sb_profile *sb_profile_with_events(const sb_profile *p);
/* Whether flow control's gate counts slots for pools of this profile: it weighs the slots
 * scorer (core/router.h, sb_router_pool_saturated). False for NULL. */
bool sb_profile_slots_gate(const sb_profile *p);
/* A profile with every parameter at its default and nothing else. */
void sb_profile_init(sb_profile *p, const char *name);

/* One decision, with everything needed to explain it. Scores are laid out scorer-major:
 * scores[s * n_live + slot] is scorer s's score of the candidate in that live slot. */
typedef struct sb_decision {
    const sb_profile *profile;
    uint32_t pool;
    const char *pool_name;    /* the router's copy (NULL when run outside a router) */
    sb_candidate *cands;      /* every endpoint of the pool, in order (n entries) */
    size_t n;
    sb_candidate *live;       /* scratch: the candidates left after filters (n entries) */
    double *scores;           /* scratch: n * SB_MAX_SCORERS entries; scorer-major over live */
    int picked;               /* candidate index (= endpoint index), -1 if none */
    const char *reason;       /* "picked by max-score", "all candidates stale", ... */
    size_t n_live;            /* candidates left after filters */
    size_t n_stale;
    bool panic; /* every endpoint left was ejected or down: routed over them all */
    uint32_t hot_blocks; /* the request's hot leading run (ctx->hot_blocks), 0: none */
    double hot_needed;   /* the holders its demand needs */
} sb_decision;

/* Runs ctx->profile over the endpoints eps[0..n) into d (whose cands, live and scores arrays
 * the caller provides, sized for n). Returns the endpoint index picked or -1
 * when every endpoint was filtered out. */
int sb_sched_run(sb_sched_ctx *ctx, const sb_sched_request *req, sb_endpoint *eps, size_t n, sb_decision *d);

/* Its JSON rendering, and a copy that outlives the router's scratch: core/explain.h. */

/* xorshift64* step, shared by pickers and tie-breaks. */
static inline uint64_t sb_rand_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}
/* Uniform double in [0,1). */
static inline double sb_rand_unit(uint64_t *s) { return (double)(sb_rand_next(s) >> 11) * (1.0 / 9007199254740992.0); }



/* Helper for distribution scorers: lower values are better. Scores 1 - (v - min) / range over
 * the fresh candidates, range = max(max - min, min_range) (1.0 for all when they are equal),
 * and 0 for stale ones (when skip_stale): a stale report is scored as if the endpoint were the
 * most loaded. Min-max follows the Gateway API Inference Extension's queue scorer: it ranks the
 * pool whatever its scale. The minimum range keeps a difference of one request from swinging
 * the whole score (with min_range 4, one request more costs a quarter), so small transient
 * differences do not override affinity while real queues still do. */
void sb_score_lower_is_better(const sb_candidate *c, size_t n, const double *values, double min_range,
                              bool skip_stale, double *out);
#endif
