/* result: what a replay run reports (sb_replay_result, per band and per request), apart from
 * the driver that fills it, so that the modules computing figures from it (replay/latency.c,
 * replay/report.c) need not include the driver. Types only. */
#ifndef SB_REPLAY_RESULT_H
#define SB_REPLAY_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/flow.h"
#include "core/sched.h"

/* FAILED: dispatched, then lost with its replica (a restart while it was on the engine). */
enum sb_replay_outcome { SB_REPLAY_PENDING = 0, SB_REPLAY_COMPLETED, SB_REPLAY_SHED, SB_REPLAY_FAILED };

/* One request, as the client saw it (times include the network delay both ways). */
typedef struct sb_replay_record {
    sb_ns arrival_ns; /* virtual time of arrival at the gateway (the clock starts at 1 s) */
    sb_ns ttft_ns;    /* arrival to first token at the client */
    sb_ns e2e_ns;     /* arrival to last token at the client */
    uint32_t replica; /* UINT32_MAX if never dispatched */
    uint32_t prompt_tokens, cached_tokens, completion_tokens, preemptions;
    uint8_t outcome; /* enum sb_replay_outcome */
    uint8_t band;    /* enum sb_band (standard without a band mix) */
    uint16_t status; /* flow control's refusal: 429 (shed, full, evicted) or 503 (expired); else 0 */
    sb_ns wait_ns;   /* time queued by flow control before dispatch */
    uint16_t gateway; /* the gateway replica that routed it (0 with one gateway) */
    bool bypass;      /* sent straight to a replica, past every gateway (--bypass) */
} sb_replay_record;

/* One priority band's share of a run (flow control or a band mix). */
typedef struct sb_replay_band_result {
    uint64_t requests; /* offered: completed + shed */
    uint64_t completed, shed;
    uint64_t refused;                             /* of shed: 429 from flow control (sheddable under saturation, queue
                                                     full, evicted for a higher band) */
    uint64_t expired;                             /* of shed: 503, waited past the band's deadline */
    uint64_t queued;                              /* of completed: waited in flow control's queue first */
    double ttft_p50_ms, ttft_p90_ms, ttft_p99_ms; /* completed, queue wait included */
    double wait_mean_ms;                          /* completed: mean queue wait */
} sb_replay_band_result;

typedef struct sb_replay_result {
    char policy[SB_PROFILE_NAME_MAX];
    double rate;       /* offered root arrival rate, requests/s (workload rate x scale) */
    uint64_t requests; /* offered through the gateways: completed + shed + failed */
    uint64_t completed, shed;
    double ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, ttft_mean_ms;
    double e2e_p50_ms, e2e_p99_ms;
    double itl_p50_ms;   /* median gap between successive tokens, over all tokens
                            (log-bucketed: within 0.4%) */
    double output_tok_s; /* output tokens / (last answer - first arrival) */
    double hit_rate;     /* prompt tokens served from cache / prompt tokens looked up
                            (the engines' prefix-cache counters) */
    double imbalance_cv; /* stddev / mean of requests dispatched per replica */
    double makespan_s;   /* first arrival to last answer, virtual seconds */
    uint64_t prompt_tokens, cached_tokens, output_tokens, preemptions, engine_steps, events;
    /* Flow control and bands: have_bands when the run had flow control or a band mix. */
    bool have_bands;
    uint64_t refused, expired; /* of shed, as in sb_replay_band_result */
    sb_replay_band_result band[SB_BAND_COUNT];
    /* Adaptive: snapshots published (1 = the weights never moved), regime changes of the
     * imbalance detector, and the distribution share of the snapshot in force over the ticks. */
    bool adaptive;
    uint64_t adaptive_generations, imbalance_changes, adaptive_ticks;
    double share_mean, share_max;
    /* Fleet events (issue 13): gateway replicas, traffic that bypasses them, replica restarts.
     * `failed` counts gateway requests lost on a restarting replica (also in `requests`);
     * bypassed requests are outside every figure above except hit_rate and engine_steps (the
     * engines served them) and are reported here alone. */
    uint32_t n_gateways;   /* >= 1 */
    uint64_t *per_gateway; /* owned: requests each gateway dispatched */
    uint64_t failed;       /* gateway requests lost to a restart */
    uint64_t restarts;     /* replica restarts during the run */
    uint64_t sync_probes;  /* requests that waited for a synchronous probe (opts.sync_probe_age_ns) */
    uint64_t sync_probed;  /* endpoints those probes scraped */
    uint64_t bypass_requests, bypass_completed, bypass_failed, bypass_shed;
    double bypass_ttft_p50_ms, bypass_ttft_p90_ms, bypass_ttft_p99_ms;
    /* Owned; freed by sb_replay_result_free. */
    sb_ns *ttft_sorted; /* every completed request's TTFT, ascending (for CDFs) */
    size_t n_ttft;
    uint64_t *per_replica; /* requests dispatched to each replica */
    uint32_t n_replicas;
    sb_replay_record *records; /* one per workload request if opts.keep_records, else NULL */
    size_t n_records;
} sb_replay_result;

#endif
