/* server: the live simulator, a fleet of simulated vLLM-compatible model servers on one loop.
 *
 * A fleet is N replicas of one model (with optional LoRA adapters), replica i listening on
 * port + i, each an sb_engine (sim/engine.h) behind the project's HTTP server
 * (net/http_server.h). Several fleets (different models, ports, flavors) can share one loop
 * and one process: `switchboard sim` runs one, `switchboard demo` runs its own next to the
 * gateway. Each replica answers:
 *   POST /v1/chat/completions, POST /v1/completions  streaming (SSE) or not; the output is a
 *        deterministic answer of max_tokens tokens (sim/answer.h); errors shaped like vLLM's
 *   GET /v1/models, GET /health, GET /metrics (vLLM, SGLang or llama.cpp names), GET /slots
 *        (llama.cpp flavor only)
 *   POST /tokenize  vLLM's: {"model"?, "messages"} (the chat template applied exactly as for
 *        /v1/chat/completions, generation prompt included) or {"model"?, "prompt"}; answers
 *        {"count":N,"max_model_len":M,"tokens":[...],"token_strs":null}. The ids are the prompt
 *        ids the engine caches for the same request, hence the token_ids of its BlockStored
 *        events (the gateway's precise index relies on it)
 *   POST /reset_prefix_cache  vLLM's: forgets every cached block (AllBlocksCleared); 200, or
 *        409 while requests run (vLLM refuses then too)
 * and, when a request carries `endpoint-load-metrics-format: TEXT|JSON`, the ORCA response
 * header `endpoint-load-metrics`.
 *
 * Time. Each replica's engine runs on the fleet's clock: engine ns = real ns since the fleet
 * started * speed. One uv timer per replica is armed for the engine's next event, converted
 * back to real time (libuv timers have millisecond resolution, so at high speeds several steps
 * complete per timer tick and their tokens leave together). Latency histograms in /metrics
 * and usage are in engine time: what the simulated GPU server would have measured.
 *
 * Faults (off by default) apply to the replicas selected by faults.replica_mask:
 *   fail_rate          that fraction of completion requests is answered 500 before parsing
 *                      (a deterministic pseudo-random draw, seeded by opts.seed)
 *   metrics_delay_ms   GET /metrics answers after that many real milliseconds
 *   metrics_hang       GET /metrics never answers (until the client leaves)
 *   die_after_tokens   after N generated tokens of a request that wants more, the replica
 *                      closes that connection without finishing the response (streaming or not)
 *   refuse             the replica never listens: connections to its port are refused
 *   restart_every_ms   every M real ms the replica stops listening, drops its connections and
 *                      in-flight requests, and listens again after M/10 ms (10 ms to 1 s) with
 *                      a new engine: empty cache, zeroed counters
 *
 * KV-cache events (opts.kv_events): each replica publishes its engine's cache events as vLLM
 * does (sim/kv_publisher.h), replica i on the configured endpoints' ports + i.
 *
 * Not for: routing; real model output; TLS. One loop thread owns a fleet. */
#ifndef SB_SIM_SERVER_H
#define SB_SIM_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "sim/engine.h"
#include "sim/kv_publisher.h"
#include "sim/sim_metrics.h"

typedef struct sb_sim_faults {
    double fail_rate;          /* 0..1 */
    uint32_t metrics_delay_ms; /* 0 = off */
    bool metrics_hang;
    uint32_t die_after_tokens; /* 0 = off */
    bool refuse;
    uint32_t restart_every_ms; /* 0 = off */
    uint64_t replica_mask;     /* bit i selects replica i (i < 64); 0 selects every replica */
} sb_sim_faults;

typedef struct sb_sim_opts {
    const char *host;            /* listen address, IPv4 or IPv6 literal */
    uint16_t port;               /* replica i listens on port + i; 0 lets each pick a port */
    uint32_t replicas;           /* >= 1 */
    const char *model;           /* served model name */
    const char *const *adapters; /* LoRA adapter names, engine adapter ids 1..n_adapters */
    size_t n_adapters;
    sb_sim_flavor flavor;    /* whose /metrics names to speak */
    double speed;            /* engine clock rate over real time, > 0 */
    sb_engine_params engine; /* every replica's engine */
    uint32_t max_model_len;  /* prompt + output tokens at most; 0 = min(131072,
                              * num_gpu_blocks * block_size) */
    uint64_t seed;           /* for fault draws */
    sb_sim_faults faults;
    bool kv_events;    /* publish KV-cache events (engine.kv_events is then set) */
    sb_kv_pub_opts kv; /* their sockets and encodings (sb_kv_pub_opts_default) */
} sb_sim_opts;

/* Fills *o with the defaults: 127.0.0.1, port 8000, 1 replica, model
 * "meta-llama/Llama-3.1-8B-Instruct" (the model the engine defaults are fitted to), no
 * adapters, vLLM flavor, speed 1, sb_engine_params_default(), no faults, no KV events
 * (sb_kv_pub_opts_default for when they are turned on). */
void sb_sim_opts_default(sb_sim_opts *o);

typedef struct sb_sim_fleet sb_sim_fleet;

/* Starts opts->replicas replicas on `loop`. The fleet copies everything in *opts (strings and
 * the adapter list included). Returns 0 and sets *out, or a negative errno / libuv code:
 * -EINVAL for bad options (no model, no replicas, speed <= 0, port + replicas beyond 65535,
 * engine parameters failing sb_engine_params_check, an adapter named like the model or twice),
 * a listen error (UV_EADDRINUSE...), -ENOMEM. On failure nothing is left listening; handles
 * already opened are closing, and are released when `loop` next runs. */
int sb_sim_fleet_start(uv_loop_t *loop, const sb_sim_opts *opts, sb_sim_fleet **out);

uint32_t sb_sim_fleet_size(const sb_sim_fleet *f);
/* The KV-event addresses replica i bound (PUB, replay ROUTER), or NULL without events (the
 * replay one without replay). Valid until the fleet stops. */
const char *sb_sim_fleet_kv_endpoint(const sb_sim_fleet *f, uint32_t i);
const char *sb_sim_fleet_kv_replay(const sb_sim_fleet *f, uint32_t i);
/* The port replica i listens on, or would if it is refusing or restarting (with opts.port 0,
 * a replica that never listened has no port: 0); 0 if i is out of range. */
uint16_t sb_sim_fleet_port(const sb_sim_fleet *f, uint32_t i);

/* Begins a graceful drain, as the gateway's (net/http_server.h sb_http_server_drain): every
 * replica closes its listener for good (a restart fault no longer listens again) and its idle
 * connections; generations in flight go on, each answer closes its connection. The caller
 * watches sb_sim_fleet_connections fall to 0 (or its deadline pass), then stops the fleet. */
void sb_sim_fleet_drain(sb_sim_fleet *f);
/* Client connections open over all replicas. */
size_t sb_sim_fleet_connections(const sb_sim_fleet *f);

/* Stops every replica: listeners and connections are closed (in-flight requests are dropped),
 * timers stopped. The fleet is freed once libuv has closed its handles, so the loop must run
 * afterwards (uv_run returns once nothing else is active). f must not be used after. */
void sb_sim_fleet_stop(sb_sim_fleet *f);

#endif
