/* precise: a request's keys in its pool's precise index (core/kv_index.h), for pools whose
 * engines report their KV caches (`kv_events:`).
 *
 * The index is keyed by the engine's token ids, which the gateway does not have: it asks the
 * engines (`POST /tokenize`, proto/tokenize.h) and keeps the answers in a per-pool cache keyed
 * by the prompt's text-block chain (core/tok_cache.h), so a prompt, or a shared system prompt,
 * is tokenised once. A request whose ids the cache has (an exact hit, or a prefix two engine
 * answers proved) is routed at once with them. A miss starts a /tokenize to one of the pool's
 * endpoints (round robin; its answer fills the cache) and the request waits for it at most
 * `tokenize.wait_ms` (0: never), then is routed with whatever is known: without precise keys
 * the router scores by its own marks (core/router.h, fusion). A failure or a slow engine
 * therefore costs at most wait_ms, never the request.
 *
 * Bounds: at most PRECISE_MAX_FLIGHTS /tokenize requests in flight per pool (a miss beyond
 * that routes at once and asks nothing); answers of at most tokenize.max_answer_bytes; each
 * request's deadline tokenize.timeout_ms. */
#ifndef SB_NET_PRECISE_H
#define SB_NET_PRECISE_H

#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"
#include "net/gateway_types.h"
#include "proto/json.h"

/* Counters, per gateway (/metrics). */
typedef struct sb_precise_stats {
    uint64_t exact_hits, prefix_hits, misses; /* the cache, per request looked up */
    uint64_t requests, failures;              /* /tokenize sent, and those that gave no ids */
    uint64_t waits, wait_timeouts;            /* requests held for an answer, and those routed before it */
    uint64_t skipped;                         /* misses that asked nothing (flights at the bound) */
} sb_precise_stats;

/* Creates the caches of the pools with a precise index. 0 or UV_ENOMEM. */
int sb_gateway_precise_start(sb_gateway *gw);
/* Cancels every /tokenize in flight; frees the caches. Requests still waiting are the HTTP
 * server's to abort (their abort callback frees them). */
void sb_gateway_precise_stop(sb_gateway *gw);

/* Routes an inspected request (sb_gateway_admit) with its precise keys when its pool keeps a
 * precise index, else as it is. body's JSON tokens t[0..n) must be alive (they are read here,
 * never kept); model[0..model_len) is the served name the engine knows; extra the chain's
 * adapter key (sb_kv_extra_of_adapter). rr's arrays may be the gateway's scratch: what waits
 * is copied. */
void sb_gateway_admit_precise(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, sb_sched_request *rr,
                              const sb_json_tok *tok, int n_tok, const char *model, size_t model_len, uint64_t extra);

const sb_precise_stats *sb_gateway_precise_stats(const sb_gateway *gw);

#endif
