/* policy: the routing policies replay compares, and the one registry that names them.
 *
 * A policy is one of three kinds:
 *   1. a core profile by name: the product's own (round-robin, least-request, load-only,
 *      default) or a user profile from --config. Run through sb_decide exactly as
 *      `switchboard serve` runs it.
 *   2. a profile assembled from core plug-ins (filters, scorers, a picker) that the product does
 *      not ship as a built-in, e.g. p2c = in-flight scorer + power-of-two-choices picker.
 *   3. a custom decision rule with its own state: the reference policies that reproduce peers
 *      (random, and later session hash, KubeAI CHWBL, SGLang cache-aware, ...). They see what
 *      the gateway would see (the request's routing descriptor, the endpoints' scraped reports
 *      and the router's own accounting), the prompt's token ids for text-based rules, and, for
 *      references defined to see them only, the engines themselves.
 * Whatever the kind, the driver does the bookkeeping around the decision identically: it tells
 * the router of dispatch, first byte and completion (so endpoint accounting and reports mean
 * the same for every policy), submits to the engine, and measures.
 *
 * Adding a policy: one file under replay/policies/ defining a `const sb_replay_policy_def`,
 * declared and listed in the table in policy.c. Its summary names the source of its rule and
 * constants. Names are stable: scripts and documents use them.
 *
 * Not for: running a replay (replay/driver.h). */
#ifndef SB_REPLAY_POLICY_H
#define SB_REPLAY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/router.h"
#include "core/sched.h"
#include "sim/engine.h"

/* What a custom policy is created with, for one run. */
typedef struct sb_replay_policy_env {
    uint32_t n_replicas;
    const sb_engine_params *engine; /* every replica's parameters (identical) */
    uint32_t router_block_tokens;   /* tokens per router index block (sched->block_hashes) */
    uint64_t seed;                  /* the run's seed; the policy's rng is seeded from it too */
    uint64_t hash_secret;           /* for the slots of its tables (base/hash.h), from the seed */
    sb_ns event_lag_ns;             /* KV events reach an event-fed reference this late (0: at once) */
} sb_replay_policy_env;

/* The fleet at a decision. Valid during the call only. */
typedef struct sb_replay_fleet_view {
    sb_ns now;
    uint32_t n_replicas;
    /* The router as the gateway has it: sb_router_endpoint(router, pool, i) is replica i's
     * endpoint (its last scraped report and the router's own accounting). Read only. */
    sb_router *router;
    uint32_t pool;
    /* The engines: exact, instantaneous state. Only references that by definition see
     * everything (min-predicted-ttft, the KV-event-fed references through a
     * lagged shadow) may read them; read only. */
    sb_engine *const *engines;
    uint64_t *rng; /* the policy's own seeded xorshift state (sb_rand_next) */
} sb_replay_fleet_view;

/* One request at a decision. Valid during the call only: copy what you keep. */
typedef struct sb_replay_request_view {
    uint64_t id; /* the workload's request index: the same across policies */
    /* What the gateway's core would get for this request: router index block hashes (one per
     * router_block_tokens tokens, chained, seeded by model and adapter as proto/inspect.c
     * seeds them), prompt_tokens, the pool's adapter index, session and prefix keys. */
    const sb_sched_request *sched;
    /* The prompt's token ids. A rule defined on text reads 4 bytes of text per token (the
     * ratio the gateway assumes), e.g. "the first 100 characters" = the first 25 tokens. */
    const uint32_t *tokens;
    uint32_t n_tokens;
    const uint64_t *engine_hashes; /* the engines' own block hashes (block_size tokens each) */
    size_t n_engine_hashes;
    uint32_t engine_adapter; /* 0 = base model */
    uint32_t max_tokens;
} sb_replay_request_view;

/* A custom decision rule. Every hook but pick may be NULL. */
typedef struct sb_replay_custom_ops {
    /* Returns the state for one run (NULL means ENOMEM, the run fails). */
    void *(*create)(const sb_replay_policy_env *env);
    void (*destroy)(void *state);
    /* Returns the replica to send the request to, or -1 to shed it (it counts as shed). */
    int (*pick)(void *state, const sb_replay_fleet_view *fleet, const sb_replay_request_view *req);
    /* After the request was dispatched to `replica` (same views as pick). */
    void (*on_dispatch)(void *state, const sb_replay_fleet_view *fleet, const sb_replay_request_view *req,
                        uint32_t replica);
    /* When the gateway sees the request end (its last byte, or its failure). */
    void (*on_finish)(void *state, const sb_replay_fleet_view *fleet, uint64_t id, uint32_t replica, bool ok);
    /* When the gateway sees the request's first streamed byte (its prefill is done there). */
    void (*on_first_token)(void *state, const sb_replay_fleet_view *fleet, uint64_t id, uint32_t replica);
} sb_replay_custom_ops;

/* A registry entry: exactly one of profile, build, custom is set. */
typedef struct sb_replay_policy_def {
    const char *name;
    const char *summary;                /* one line for --list, naming the source */
    const char *profile;                /* kind 1: a core built-in profile's name */
    void (*build)(sb_profile *out);     /* kind 2: fills a profile from core plug-ins */
    const sb_replay_custom_ops *custom; /* kind 3 */
} sb_replay_policy_def;

/* The registry, NULL-terminated, in --list order; and look-up by name (NULL if unknown). */
const sb_replay_policy_def *const *sb_replay_policies_all(void);
const sb_replay_policy_def *sb_replay_policy_find(const char *name);

/* A policy resolved for running. Caller-embedded; do not copy after resolving (profile may
 * point into it). */
typedef struct sb_replay_policy {
    char name[SB_PROFILE_NAME_MAX];
    const sb_profile *profile;          /* kinds 1 and 2; NULL for custom */
    const sb_replay_custom_ops *custom; /* kind 3; NULL otherwise */
    sb_profile built;                   /* storage for kind 2 */
    /* Kind 2 and 3: a peer's policy, not the product's: its pool runs without what only the
     * product does to the prefix index (prefix_share, prefix_calibrate). */
    bool peer;
} sb_replay_policy;

/* Resolves a name: the registry first (its names are stable), then the core's other built-in
 * profiles (sb_profile_builtin: whatever the product ships, e.g. prefix-only, without a
 * registry entry to keep in step), then the user's profiles (e.g. a parsed config's, which own
 * the storage and must outlive the policy). Returns 0, or -ENOENT if nothing has that name. */
int sb_replay_policy_resolve(const char *name, const sb_profile *user, size_t n_user, sb_replay_policy *out);

/* Every policy name, in that order and without duplicates: what `--policies all` runs. Writes
 * up to cap names (pointers into the registry, the core or `user`) and returns the count,
 * which may exceed cap. */
size_t sb_replay_policy_names(const sb_profile *user, size_t n_user, const char **out, size_t cap);

#endif
