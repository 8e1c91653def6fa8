/* driver: replay's discrete-event simulation of a fleet behind the routing core.
 *
 * One run = one workload, one policy, one fleet. The driver keeps a virtual clock and a queue of
 * timed events (replay/event_queue.h): request arrivals, the end of each engine's step in
 * flight, simulated scrapes, and, with a network delay, requests reaching their replica and
 * responses reaching the gateway. Each replica is a sim/engine.h model. The routing core is
 * the gateway's own: a core/router.h router with one pool of `replicas` endpoints, told of
 * every dispatch, first byte and completion exactly as net/gateway.c tells it, and fed
 * SB_REPORT_SCRAPE reports built from each engine's metrics as net/probe.c builds them from a
 * real /metrics page, every `scrape_ns` per replica (phases staggered across replicas, as
 * independent probe timers drift apart), so the core sees what it would see in production:
 * reports as of the last scrape, corrected by its own accounting since.
 *
 * A request's life: at arrival the driver builds what the gateway's inspection would give the
 * core (router index block hashes: one per 16 tokens of the prompt, the 64 bytes of their token
 * ids, chained with xxh3 and seeded by model and adapter as proto/inspect.c seeds them; prompt
 * tokens; adapter; session and prefix keys), asks the policy for a replica, records the
 * dispatch with the router, and submits the prompt to that engine as precomputed engine block
 * hashes (sb_engine_hash_blocks over the token ids: the engine's fast path). The engine's
 * FIRST_TOKEN is the gateway's first byte; FINISHED its completion, when the router also learns
 * the replica's prefill speed (sb_router_observe_ttft); each scrape bounds the prefix index by
 * the engine's cache size, as in the gateway. A request the policy cannot place (pick -1), or
 * too large for a replica's KV cache, is shed; so are the later turns of its conversation.
 *
 * Adaptive weights and flow control, optional per run and off by default (a run without them is
 * unchanged), both the gateway's own core modules driven on the virtual clock:
 *   - adaptive: one core/adaptive.h configurator over the policy's profile, fed every arrival
 *     and ticked every tick (the gateway's adaptive timer: min(scrape_ns, 100 ms)) with the
 *     pool's endpoints; the pool routes by its snapshots under the gateway's rule for a pool
 *     with `adaptive: true` (core/control.h: only when the profile has weight to move).
 *     Profile policies only (a custom rule runs no profile).
 *   - flow control: core/admission.h in front of the pick, as net/admission.c drives it: the
 *     same saturation gate (every available endpoint over the gate's queue or KV threshold,
 *     stale ones skipped, at least one fresh report saying so), the same admission, bounds,
 *     deadlines and eviction, re-examined when an answer ends and on every tick. Requests
 *     refused (429: shed, queue full, evicted) or expired (503) count as shed, and the later
 *     turns of their conversations with them. A queued request's client-side TTFT and E2E
 *     include its wait.
 *   - bands and tenants: each conversation (a root and its later turns) is given a priority
 *     band and a tenant from a hash of the seed and its root's index, so every policy sees the
 *     same requests in the same bands; results are then also reported per band.
 *
 * Fleet events (issue 13; all off by default, and a run without them is unchanged):
 *   - gateways G: G gateway replicas, each with its own router (prefix index, in-flight
 *     accounting, reports), its own adaptive configurator and admission when enabled, and its
 *     own state of a custom policy. Each scrapes every replica itself, gateway g's phase offset
 *     by g / G of a replica's scrape slot. Requests reach them as an L4 balancer in front of
 *     gateways spreads connections: a request with a session key (a conversation, a user)
 *     rides that client's keep-alive connection, so its gateway is a seeded hash of the key;
 *     one without goes on its own connection: a seeded hash of its index.
 *   - bypass F: a seeded fraction F of conversations (a batch job, a direct client) goes to a
 *     uniformly random replica per request, past every gateway: the routers only see them in
 *     the scraped load. They count in the engines' hit rate and steps; their latency is
 *     reported apart (sb_replay_result.bypass_*), never in the gateways' figures.
 *   - restarts: a replica's engine is replaced by a fresh one (empty cache, counters at zero);
 *     the requests on it fail (the gateway sees a connection error: sb_router_finished with
 *     ok false) and their conversations end. Nobody tells the routers: their prefix index
 *     learns of it only as the gateway does, from the scraped counters going backwards
 *     (sb_endpoint_report_set -> sb_router_prefix_clear, as net/probe.c). restart_every_ns:
 *     one replica every interval, in turn from a seeded replica, the first at a seeded phase;
 *     restarts N: N restarts evenly over the span of the arrivals, in turn likewise.
 *   - event_lag_ns: the exact-cache references fed by KV events see the cache as it was that
 *     long ago (replay/lag_queue.h); min-predicted-ttft, a reference by definition, sees it now.
 *
 * Deterministic: no wall clock, no unseeded randomness, and the queue breaks time ties by
 * insertion order; the same workload, policy, options and seed give bit-identical results.
 * Cost per event is O(log events queued) plus the engine's own work; a pick is O(replicas)
 * (the core scores every endpoint, by design). Time in results is virtual. */
#ifndef SB_REPLAY_DRIVER_H
#define SB_REPLAY_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/adaptive.h"
#include "core/flow.h"
#include "core/router.h"
#include "replay/policy.h"
#include "replay/result.h"
#include "replay/workload.h"
#include "sim/engine.h"

typedef struct sb_replay_opts {
    uint32_t replicas;          /* >= 1 */
    sb_engine_params engine;    /* every replica's (sb_engine_params_default()) */
    sb_ns scrape_ns;            /* probe interval per replica; 0 = never (default 100 ms, the
                                   gateway's probe interval_ms default) */
    sb_ns net_delay_ns;         /* one-way gateway <-> replica latency (default 0) */
    double time_scale;          /* roots arrive at arrival_ns / time_scale (default 1) */
    uint64_t max_requests;      /* at most this many roots (with their later turns); 0 = all */
    sb_ns max_arrival_ns;       /* drop roots arriving (scaled) at or after this; 0 = none */
    uint64_t seed;              /* router, policy and tie-break randomness (default 1) */
    const char *model;          /* served model name, seeds the router's block hashes */
    uint32_t max_prompt_blocks; /* router blocks hashed per request at most (gateway: 16384) */
    sb_pool_params pool;        /* as a config pool's: staleness, health, prefix index; its
                                   block_bytes / bytes_per_token (64 / 4) is the router's index
                                   block in tokens */
    bool keep_records;          /* fill sb_replay_result.records */
    /* The adaptive loop and flow control (above). adaptive_params is checked with sb_adaptive_params_check; flow's
     * on_evict is the driver's own (whatever is set here is ignored). */
    bool adaptive;
    sb_adaptive_params adaptive_params; /* default sb_adaptive_params_default() */
    bool flow_control;
    sb_flow_config flow; /* default sb_flow_config_default() */
    /* Probability of each band per conversation (normalised; >= 0); all 0 = every request
     * standard, the gateway's band for a request without x-priority. */
    double band_mix[SB_BAND_COUNT];
    uint32_t tenants; /* conversations spread uniformly over this many tenants; 0 or 1 = one */
    /* What a fleet does that a single gateway's routing never sees (below). */
    uint32_t gateways;      /* gateway replicas, each its own router and policy state; >= 1 */
    double bypass;          /* fraction of conversations sent straight to a replica, 0..1 */
    sb_ns restart_every_ns; /* a replica restarts every this often, each in turn; 0 = never */
    uint32_t restarts;      /* or: this many restarts spread over the arrivals; 0 = none */
    sb_ns event_lag_ns;     /* KV-event lag of the references fed by events (dynamo-kv, llm-d-precise) */
    /* The product's own precise index (core/kv_index.h, fused by core/router.h): the engines
     * publish their KV events, every gateway's router hears them event_lag_ns late, and each
     * request carries its keys (the gateway gets them from the engines' /tokenize; replay has
     * the token ids). kv_cover_ns: kv_events.cover_ms (default 2 s). */
    bool kv_events;
    sb_ns kv_cover_ns;
    /* Gateway sync (net/peers.h): each gateway replica's router hears what the others sent
     * where, gateway_sync_ns late: their blocks go into its prefix index, their load into its
     * accounting, until their first byte and their end. Profile policies only (the peers'
     * policies keep their own state). */
    bool gateway_sync;
    sb_ns gateway_sync_ns;
    /* The synchronous probe (issue 14, the probing discussion's solution 1.3), off when
     * sync_probe_age_ns is 0: when one of the `sync_probe_candidates` best-ranked endpoints
     * has a report older than sync_probe_age_ns, the gateway scrapes those before committing:
     * the request waits sync_probe_rtt_ns (the probe's round trip), the probed reports are
     * taken at the end of that wait, and the decision is made again (once; no second probe).
     * The built-in policies only (a custom policy keeps its own state). */
    sb_ns sync_probe_age_ns;
    sb_ns sync_probe_rtt_ns;        /* default 1 ms */
    uint32_t sync_probe_candidates; /* 1..SB_DECIDE_MAX_RANKED; default 2 */
} sb_replay_opts;

/* The default KV-event lag: vLLM publishes a step's events when the step ends
 * (vllm/v1/core/sched/scheduler.py update_from_output -> KVEventPublisher.publish), so a
 * subscriber hears of a block about one engine step after it is scheduled; the default
 * simulated engine's step at a moderate batch with a prefill chunk in it is of the order of
 * 20 ms (sim/engine.c: 5.75 ms overhead + 17.25 us per prefill token). ZMQ transport adds
 * well under a millisecond on a LAN. */
#define SB_REPLAY_EVENT_LAG_DEFAULT_NS SB_MS(20)
#define SB_REPLAY_MAX_GATEWAYS 64

/* Fills *o with the defaults above. */
void sb_replay_opts_default(sb_replay_opts *o);

/* Runs workload w under policy p on a fleet per o, and fills *out (zeroed first). Returns 0;
 * -EINVAL with a message in err for unusable options (zero replicas, engine parameters that
 * fail sb_engine_params_check, adapters while max_loras is 0, more than 64 adapters, adaptive
 * parameters that fail their check or adaptive with a custom policy, a negative or all-NaN
 * band mix, flow bounds sb_flow_new refuses, gateways outside 1..64, a bypass fraction outside
 * 0..1, both restart_every_ns and restarts) or a custom policy returning a replica out of
 * range; -ENOMEM. On failure *out holds nothing to
 * free. w and p are only read and may be reused for other runs. */
int sb_replay_run(const sb_replay_workload *w, const sb_replay_policy *p, const sb_replay_opts *o,
                  sb_replay_result *out, char *err, size_t errcap);

void sb_replay_result_free(sb_replay_result *r);

#endif
