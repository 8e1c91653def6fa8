/* kv_shadow: the reference policies' "exact" knowledge of every replica's prefix cache and of
 * the requests it is working on, for the references defined to see the engines' state
 * (Dynamo's KV router and llm-d's precise scorer, fed by the engines' KV events, and
 * min-predicted-ttft).
 *
 * Why a shadow: sim/engine.h offers no read-only look-up of which block hashes a replica caches
 * (only gauges), and a policy may not change an engine. So this module replays, per replica,
 * what sim/engine.h does with the requests the policy sent there: a request's full prompt
 * blocks are held (pinned) while it is in flight, shared with any other request holding the
 * same chained hash; when it ends they are freed tail first into an LRU of cached blocks (so a
 * prompt's head is evicted last, as the engine frees them); the cache holds num_gpu_blocks
 * blocks in all, counting each in-flight request's unhashed blocks (its partial prompt block
 * and its output, reserved whole at dispatch), and evicts least recently used free blocks
 * beyond that.
 *
 * Where it departs from the engine (docs/replay.md, "Reference policies"): blocks count as
 * cached from dispatch, not from the step that computes them (two requests with one new prefix
 * sent at the same instant both look like hits; the engine computes it twice); output blocks
 * are reserved whole at dispatch, not as they grow; a request queued behind a full cache holds
 * its blocks here while the engine has not admitted it; preemption is not modelled.
 *
 * It also keeps each replica's in-flight requests in dispatch order with their prompt and
 * uncached sizes, so that a policy can tell how much prefill is still queued there from the
 * router's first-byte accounting (sb_kv_shadow_pending_uncached).
 *
 * Pure, single owner; memory grows with the requests in flight and the blocks cached. */
#ifndef SB_REPLAY_POLICIES_KV_SHADOW_H
#define SB_REPLAY_POLICIES_KV_SHADOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "sim/engine.h"

typedef struct sb_kv_shadow sb_kv_shadow;

/* n replicas, each with p's cache (num_gpu_blocks of block_size tokens). NULL on ENOMEM. */
sb_kv_shadow *sb_kv_shadow_new(uint32_t n_replicas, const sb_engine_params *p);
void sb_kv_shadow_free(sb_kv_shadow *s);

/* Leading blocks of hashes[0..n) (the engine's chained full-block hashes) that replica holds,
 * in use or free. Does not change the LRU order. */
uint32_t sb_kv_shadow_cached_blocks(const sb_kv_shadow *s, uint32_t replica, const uint64_t *hashes, size_t n);
/* Whether replica holds the block hash (in use or free). */
bool sb_kv_shadow_holds(const sb_kv_shadow *s, uint32_t replica, uint64_t hash);
/* Prompt tokens the engine would take from its cache for a prompt of n_prompt tokens whose
 * first cached_blocks full blocks are cached: it always computes at least one token. Pure. */
uint32_t sb_kv_shadow_cached_tokens(const sb_kv_shadow *s, uint32_t cached_blocks, uint32_t n_prompt);
/* Of hashes[0..n), how many no in-flight request on replica holds (blocks the request would add
 * to the replica's active set). */
uint32_t sb_kv_shadow_new_active_blocks(const sb_kv_shadow *s, uint32_t replica, const uint64_t *hashes, size_t n);
/* Distinct prompt blocks held by the replica's in-flight requests. */
uint32_t sb_kv_shadow_active_blocks(const sb_kv_shadow *s, uint32_t replica);
/* Blocks with a hash the replica holds, in use or free (its cache's "tree size"). */
uint32_t sb_kv_shadow_cached_total(const sb_kv_shadow *s, uint32_t replica);

/* Records request id (unique among those in flight) as sent to replica: its full-block hashes
 * (copied), prompt and output lengths, and the prompt tokens it must compute there (uncached).
 * Returns 0, or -ENOMEM (nothing recorded), -EEXIST (id in flight). */
int sb_kv_shadow_dispatch(sb_kv_shadow *s, uint32_t replica, uint64_t id, const uint64_t *hashes, size_t n,
                          uint32_t n_prompt, uint32_t max_tokens, uint32_t uncached);
/* The request ended: its blocks are freed tail first. Unknown ids are ignored. */
void sb_kv_shadow_finish(sb_kv_shadow *s, uint64_t id);

/* The dispatch hook of a policy that keeps a shadow (dynamo-kv, llm-d-precise,
 * min-predicted-ttft): records a request
 * sent to replica with what it must compute there. On ENOMEM the shadow forgets the request:
 * a less exact picture, not a failed run. */
struct sb_replay_request_view;
void sb_kv_shadow_record(sb_kv_shadow *s, uint32_t replica, const struct sb_replay_request_view *r);

/* The prefill still queued on replica, given the router's count of prompt tokens sent there
 * whose first byte has not come (sb_endpoint.pending_prefill_tokens): the newest in-flight
 * requests whose prompts add up to that count are the ones still in prefill (engines admit
 * first come first served, so the first tokens come back roughly in dispatch order). Returns
 * the sum of their uncached tokens, and their number in *n_requests (may be NULL). */
uint64_t sb_kv_shadow_pending_uncached(const sb_kv_shadow *s, uint32_t replica, uint64_t pending_prompt_tokens,
                                       uint32_t *n_requests);

/* ---- sb_kv_view: an event-fed router's knowledge, with the events' lag ----------------------
 *
 * A router fed by KV events (Dynamo's, llm-d's precise scorer) knows two things apart: the
 * requests it sent and has not seen end (its own, at once) and what each engine caches (from
 * the events, late). The view keeps both: an instantaneous shadow for the router's own
 * sequences (sb_kv_view_active) and one fed through a replay/lag_queue.h delay for the caches
 * (sb_kv_view_cache: the cache as it was lag_ns ago). With lag 0 both are one shadow, exactly
 * as before the lag existed. */
typedef struct sb_kv_view sb_kv_view;

/* NULL on ENOMEM. */
sb_kv_view *sb_kv_view_new(uint32_t n_replicas, const sb_engine_params *p, sb_ns lag_ns);
void sb_kv_view_free(sb_kv_view *v);
/* The dispatch and end of a request, at now (sb_kv_shadow_record, sb_kv_shadow_finish on both). */
void sb_kv_view_record(sb_kv_view *v, sb_ns now, uint32_t replica, const struct sb_replay_request_view *r);
void sb_kv_view_finish(sb_kv_view *v, sb_ns now, uint64_t id);
/* The router's own in-flight sequences, now. */
const sb_kv_shadow *sb_kv_view_active(const sb_kv_view *v);
/* The caches as the events have told them by now (applies what became visible). */
const sb_kv_shadow *sb_kv_view_cache(sb_kv_view *v, sb_ns now);

#endif
