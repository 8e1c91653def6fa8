/* router: the routing core as the data path (and replay) sees it.
 *
 * Holds pools, each with its endpoints (core/endpoint.h: report + own accounting + health)
 * and a scheduling profile (core/sched.h), plus the table of model names (served name,
 * aliases, LoRA adapters) that picks a request's pool. The data path asks: which pool serves
 * this model, and which endpoint should take this request; then reports the request's life:
 * dispatched, first byte, finished. Every pick keeps its explanation until the pool's next
 * pick (sb_router_last_decision).
 *
 * Built by the caller from its configuration (core never reads files). Pure: no I/O, no
 * clock; `now` is an argument. Owns copies of every string given to it; profiles are
 * referenced, not copied (they must outlive the router or be replaced with set_profile).
 * Not thread-safe: one owner (the event loop). */
#ifndef SB_CORE_ROUTER_H
#define SB_CORE_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/endpoint.h"
#include "core/sched.h"

typedef struct sb_router sb_router;

/* The pool a model name resolves to. */
typedef struct sb_model_match {
    uint32_t pool;
    int adapter;             /* index into the pool's adapters, or -1 for a base model */
    bool is_alias;           /* the name is an alias: forward `served` instead */
    const char *served;      /* the pool's served model name (owned by the router) */
    size_t served_len;
    const char *name;        /* the name as registered */
} sb_model_match;

typedef struct sb_pool_params {
    sb_ns stale_ns;          /* reports older than this are stale; default 1 s */
    sb_health_params health;
    /* prefix index (core/prefix_index.h) */
    size_t prefix_max_entries;       /* memory bound, entries; default 1M (~40 MiB) */
    uint32_t prefix_default_blocks;  /* capacity per endpoint before its engine reports one;
                                        default 16384 blocks (~1 MiB of prompt text) */
    uint32_t block_bytes;            /* canonical-prompt bytes per index block; default 64 */
    double bytes_per_token;          /* to convert engine capacity to blocks; default 4 */
    double prefix_ref_tokens;        /* prefix-tokens scorer scale; default 4096 */
    uint32_t timed_settle_max;       /* sb_router_first_token_unseen's marks held; default 4096 */
    /* The index keeps, per endpoint, the share of its cache this router's traffic fills
     * (sb_endpoint_traffic_share x the reported capacity; a share of 0.9 or more counts as all
     * of it): for gateways run as several replicas, or beside traffic that bypasses them
     * (`prefix_share:`). Default false: the whole reported capacity. */
    bool prefix_share;
    /* The index learns from the engines' answers how much of what it predicts is still cached
     * (sb_router_observe_cached) and shrinks an endpoint's capacity while it over-predicts.
     * On in sb_pool_params_default (`prefix_calibrate:`, default true). */
    bool prefix_calibrate;
} sb_pool_params;

sb_pool_params sb_pool_params_default(void);

/* A router whose random choices are seeded by `seed` and whose tables (model names, every
 * pool's prefix index) place keys by `hash_secret` (base/hash.h): secret where clients can
 * reach it (the gateway draws it from the OS), derived from the seed where runs must repeat
 * (replay). Neither changes what the router decides, except through the seed's random
 * choices. NULL on ENOMEM. */
sb_router *sb_router_new(uint64_t seed, uint64_t hash_secret);
void sb_router_free(sb_router *r);

/* Adds a pool of n_endpoints endpoints scheduled by `profile`; returns its index or -1
 * (ENOMEM). params NULL = defaults. */
int sb_router_add_pool(sb_router *r, const char *name, const sb_profile *profile, size_t n_endpoints,
                       const sb_pool_params *params);
void sb_router_set_profile(sb_router *r, uint32_t pool, const sb_profile *profile);
void sb_router_set_pool_params(sb_router *r, uint32_t pool, const sb_pool_params *params);

/* Registers a model name for a pool: the first SERVED name becomes the pool's `served`;
 * adapters are numbered in registration order. Returns 0, -1 on ENOMEM, -2 if the name is
 * already registered (to any pool). */
enum sb_model_kind { SB_MODEL_SERVED = 0, SB_MODEL_ALIAS = 1, SB_MODEL_ADAPTER = 2 };
int sb_router_add_model(sb_router *r, uint32_t pool, const char *name, enum sb_model_kind kind);
/* Finds the adapter index of a name registered as adapter of pool, or -1. */
int sb_router_adapter_index(const sb_router *r, uint32_t pool, const char *name, size_t len);

/* Resolves a model name; returns 0 and fills *out, or -1 if no pool serves it. */
int sb_router_resolve(const sb_router *r, const char *name, size_t len, sb_model_match *out);

/* Runs the pool's profile; returns the endpoint index picked, or -1 if no endpoint is
 * available (every one filtered out or excluded). */
int sb_router_pick(sb_router *r, const sb_sched_request *req, sb_ns now);
/* The explanation of the pool's last pick; valid until its next pick. NULL before any. */
const sb_decision *sb_router_last_decision(const sb_router *r, uint32_t pool);

/* Request lifecycle (see core/endpoint.h). The ticket is the caller's to keep. */
sb_ticket sb_router_dispatched(sb_router *r, uint32_t pool, uint32_t ep, uint32_t prompt_tokens, sb_ns now);
/* A request that went to ep without a pick of its own (the endpoint picker learning that Envoy
 * served it elsewhere): the whole prompt is work for ep, and the pool's last pick, which may
 * be another request's still waiting to be dispatched, is neither read nor spent. */
sb_ticket sb_router_dispatched_unpicked(sb_router *r, uint32_t pool, uint32_t ep, uint32_t prompt_tokens, sb_ns now);
/* Gateway sync (net/peer_sync.h): the router tells its owner of each request it dispatches
 * (sb_router_dispatched, _unpicked, _redispatched), of its first byte and of its end, so the
 * owner can tell the other gateway replicas; they apply it with sb_router_peer_dispatched.
 * dispatched gets the pick's block hashes when the request went where it was picked (NULL, 0
 * otherwise: load only) and returns the id the later calls name (0: not told, and they are not
 * made). Requests applied with sb_router_peer_dispatched are never told back. Called inside
 * the router's calls, which the hooks must not re-enter. */
typedef struct sb_router_sync {
    uint64_t (*dispatched)(void *ud, uint32_t pool, uint32_t ep, const uint64_t *hashes, size_t n,
                           uint32_t prompt_tokens);
    void (*first_byte)(void *ud, uint64_t id);
    void (*finished)(void *ud, uint64_t id);
    void *ud;
} sb_router_sync;
/* Sets (NULL: clears) the hooks. With them set, each pick keeps a copy of its hashes for the
 * dispatch that follows. */
void sb_router_set_sync(sb_router *r, const sb_router_sync *hooks);
/* A request another gateway replica sent to ep (gateway sync: what the peers route): its
 * blocks go into this router's prefix index as ep's, pending until sb_router_first_token (as
 * this router's own picks are), and its load is counted as if this router had sent it (in
 * flight, pending prefill of what this index says ep lacks; not its sent tokens) until
 * sb_router_first_byte and sb_router_finished with the ticket. hashes may be
 * NULL (n 0): load only. */
sb_ticket sb_router_peer_dispatched(sb_router *r, uint32_t pool, uint32_t ep, const uint64_t *hashes, size_t n,
                                    uint32_t prompt_tokens, sb_ns now);
/* The same request sent again to the same endpoint without a new pick (the proxy's retry on a
 * fresh connection after a pooled one turned out closed): dispatched again, its sent tokens
 * carried over from prev instead of charged twice. */
sb_ticket sb_router_redispatched(sb_router *r, uint32_t pool, uint32_t ep, const sb_ticket *prev, sb_ns now);
/* The request never reached ep (a connect failure): the work it was charged is taken back. */
void sb_router_withdraw_sent(sb_router *r, uint32_t pool, uint32_t ep, sb_ticket *t, sb_ns now);
void sb_router_first_byte(sb_router *r, uint32_t pool, uint32_t ep, sb_ticket *t, sb_ns now);
/* The first token arrived (a stream's first body bytes; replay's time to first token): the
 * prefix blocks the request's pick added to the index stop being pending and start matching.
 * A pick's pending blocks go to the ticket of the dispatch that follows it to the same
 * endpoint (a dispatch elsewhere, or a next pick with no dispatch between, forgets them);
 * sb_router_finished forgets what is still pending: no token ever came back. Call it for
 * answers (2xx) only: an error body computed nothing worth reusing. */
void sb_router_first_token(sb_router *r, uint32_t pool, uint32_t ep, sb_ticket *t);
/* For an answer whose first token the caller will not see (a non-streamed one arrives whole):
 * its pending blocks count as computed once its predicted prefill is over (its prompt times
 * the requests waiting there by a fresh report and sent since, its own included, or its own
 * alone without a fresh report; at the endpoint's learned speed or 10,000 tokens/s),
 * checked by the picks at or after that time; or earlier, by sb_router_first_token. Call after
 * sb_router_dispatched. At most timed_settle_max marks wait; beyond, the earliest is settled at
 * once. */
void sb_router_first_token_unseen(sb_router *r, uint32_t pool, uint32_t ep, const sb_ticket *t, sb_ns now);
/* ok: a response arrived with status < 500. counts_for_health: false for client aborts.
 * Outlier ejection is bounded per pool by params.health.max_eject_percent (core/endpoint.h). */
void sb_router_finished(sb_router *r, uint32_t pool, uint32_t ep, sb_ticket *t, bool ok, bool counts_for_health,
                        sb_ns now);

/* Flow control's gate (net/admission.c, replay): the pool is saturated when every available
 * endpoint is over the queue or KV threshold (negative: the pool profile's; effective queue:
 * report plus requests sent since); stale endpoints are skipped, and at least one fresh report
 * must say so. A pool whose endpoints never report load is never saturated: there is no
 * evidence to queue on, and the router's own accounting spreads the load. For a pool whose
 * profile gates on slots (sb_profile_slots_gate: paddler), the test is instead that no
 * available endpoint has a free slot (sb_endpoint_slots_idle: its fresh slots report
 * corrected by requests sent and ended since); endpoints without fresh slots are skipped, and
 * at least one must have them; the thresholds are not used. Pure. */
bool sb_router_pool_saturated(sb_router *r, uint32_t pool, double queue_threshold, double kv_threshold, sb_ns now);
/* Whether any endpoint of the pool may take a request now: one not draining (healthy and
 * half-open ones first; with none of those, panic routing takes ejected and down ones). */
bool sb_router_pool_available(sb_router *r, uint32_t pool, sb_ns now);
/* Picks of the pool made in panic (every endpoint left was ejected or down: core/sched.h). */
uint64_t sb_router_pool_panics(const sb_router *r, uint32_t pool);
/* A replacing router's pool takes over the old one's counters (panics), so the metrics built
 * on them never go back. */
void sb_router_pool_carry_counters(sb_router *dst, uint32_t dst_pool, const sb_router *src, uint32_t src_pool);

/* Prefix index upkeep, from what the engines report: capacity in tokens (0 = unknown: keep
 * the current one), and a restart or departure forgetting everything the endpoint held: the
 * router's marks, and the precise index's reports unless the endpoint's event stream cleared
 * them itself after `since` (the time of the last report before the one that showed the
 * restart; sb_router_kv_cleared): that stream saw the restart and carries the new engine's
 * state since. */
void sb_router_prefix_capacity(sb_router *r, uint32_t pool, uint32_t ep, uint64_t capacity_tokens);
void sb_router_prefix_clear(sb_router *r, uint32_t pool, uint32_t ep, sb_ns since);
/* Moves src's pool index to dst's pool (a reload that kept the pool's endpoints as they
 * were); src's pool gets an empty one. Both pools must have the same endpoint count. */
void sb_router_move_prefix_index(sb_router *dst, uint32_t dst_pool, sb_router *src, uint32_t src_pool);
/* The same after a membership change: src's endpoint e is dst's map[e] (-1: gone; injective);
 * the approximate index moves renumbered (sb_prefix_index_remap), so the endpoints that stay
 * keep what the router believes they hold. The precise index does not move (the engines' next
 * events refill it). Out of memory: dst keeps its empty index. */
void sb_router_remap_prefix_index(sb_router *dst, uint32_t dst_pool, sb_router *src, uint32_t src_pool,
                                  const int32_t *map);
/* The pool's index, for statistics; NULL if none. */
const struct sb_prefix_index *sb_router_prefix_index(const sb_router *r, uint32_t pool);

/* The pool's engines report their KV caches (core/kv_index.h): the router keeps a precise
 * index for it (cfg's n_endpoints is taken from the pool), fed by its owner through
 * sb_router_kv_index, and fuses it with its own marks at every pick that reads the prefix
 * index: on an endpoint whose stream is heard (sb_router_kv_live) the reports are the truth
 * and the router's marks count only for cover_ns after they were made (the report lag);
 * elsewhere the marks stand. The longer match wins; a request's precise keys come in
 * sb_sched_request.kv_keys. Each candidate's explanation says which source scored it.
 * Returns 0 (also when already enabled), -1 on ENOMEM or an unknown pool. */
struct sb_kv_index_config;
int sb_router_kv_enable(sb_router *r, uint32_t pool, const struct sb_kv_index_config *cfg, sb_ns cover_ns);
/* The pool's precise index, NULL when not enabled. */
struct sb_kv_index *sb_router_kv_index(sb_router *r, uint32_t pool);
/* Whether ep's event stream is heard (its reports can replace the router's older marks). */
void sb_router_kv_live(sb_router *r, uint32_t pool, uint32_t ep, bool live);
/* ep's event stream lost its thread (a gap nothing could fill, or the publisher restarted):
 * its reports are dropped, and the time is kept for sb_router_prefix_clear. */
void sb_router_kv_cleared(sb_router *r, uint32_t pool, uint32_t ep, sb_ns now);

/* An answered request's time to first token and usage, to learn the endpoint's prefill
 * speed (core/endpoint.h). */
void sb_router_observe_ttft(sb_router *r, uint32_t pool, uint32_t ep, uint64_t prompt_tokens, uint64_t cached_tokens,
                            sb_ns ttft_ns);

/* What the engine said it served from cache for a request dispatched with ticket t (its
 * answer's usage: prompt_tokens, cached_tokens), against what the pick's index predicted
 * (t's prompt less its uncached tokens). With prefix_calibrate, an answer that found at least
 * a tenth of the prompt less cached than predicted shrinks the endpoint's index capacity by
 * 15%, one that confirmed a prediction lets it grow back by 5% of what is missing: the index
 * forgets at the pace the engine's cache really turns over (other gateways, bypass traffic,
 * blocks pinned by running requests). Predictions of nothing teach nothing. */
void sb_router_observe_cached(sb_router *r, uint32_t pool, uint32_t ep, const sb_ticket *t, uint64_t prompt_tokens,
                              uint64_t cached_tokens);

/* Builds the pool's consistent-hash ring (core/chash.h) from its endpoints' addresses, for the
 * session and prefix-hash scorers: call once the addresses are set, and again if they change.
 * An endpoint with no address is named "#<index>". Returns 0, or -1 on ENOMEM (the pool keeps
 * the ring it had). */
int sb_router_build_ring(sb_router *r, uint32_t pool);

size_t sb_router_pool_count(const sb_router *r);
size_t sb_router_endpoint_count(const sb_router *r, uint32_t pool);
const char *sb_router_pool_name(const sb_router *r, uint32_t pool);
const sb_profile *sb_router_pool_profile(const sb_router *r, uint32_t pool);
const sb_pool_params *sb_router_pool_params(const sb_router *r, uint32_t pool);
/* The endpoint's state, for the owner to set identity, feed reports and read for display. */
sb_endpoint *sb_router_endpoint(sb_router *r, uint32_t pool, uint32_t ep);

#endif
