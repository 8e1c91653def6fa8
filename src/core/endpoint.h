/* endpoint: what the router knows of one model-server replica, from every source, merged.
 *
 * Two halves, as in DESIGN.md: what the endpoint last reported (scraped metrics, an ORCA
 * header, an agent) with the time of the report, and what the router has done since
 * (requests dispatched and not yet answered, prompt tokens sent). The state used for scoring
 * is the report corrected by the router's own traffic since that report: a request
 * dispatched after the last report counts as waiting until a newer report has had the
 * chance to show it, so a burst between two scrapes does not pile onto the replica that
 * looked idle. A report older than `stale_ns` is stale and scored as if loaded, never trusted
 * silently.
 *
 * Health: passive outlier detection (connect failures and 5xx count as failures: a run of
 * max_failures in a row, or a failure rate of at least failure_rate over a window of at least
 * min_requests, ejects for a backoff that doubles per ejection up to a bound; after it,
 * half-open: one trial request decides), active checks (a failed /health marks it down until
 * one succeeds; a success readmits an ejected endpoint at once, as Envoy's
 * successful_active_health_check_uneject_host does, keeping the backoff exponent so a replica
 * that keeps failing is ejected for longer each time; not one its failure rate ejected, which
 * answers /health all along), and draining (no new requests;
 * in-flight ones finish). How many of a pool's endpoints may be ejected at once is the
 * router's bound (core/router.h), passed in as may_eject.
 *
 * Stale but serving: an endpoint whose reports stopped but whose latest evidence (its last
 * request that counted for health, or its last active check, whichever is newer) is a
 * success within SB_SERVING_WINDOW_NS is still serving (sb_endpoint_serving): the scheduler
 * keeps it and scores it from the router's own accounting (sb_endpoint_expire_report).
 *
 * Pure: no I/O, no clock; every function takes `now`. */
#ifndef SB_CORE_ENDPOINT_H
#define SB_CORE_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/retry.h"

#define SB_MAX_LABELS 8

enum sb_report_source { SB_REPORT_NONE = 0, SB_REPORT_SCRAPE, SB_REPORT_ORCA, SB_REPORT_AGENT };

/* A load report, engine-neutral. Fields count only when their have_ flag is set. */
typedef struct sb_endpoint_report {
    bool have_running, have_waiting, have_kv, have_lora, have_capacity;
    double running;              /* requests being processed */
    double waiting;              /* requests queued in the engine */
    double kv_usage;             /* KV-cache utilisation, 0..1 */
    uint32_t block_size;         /* tokens per KV block */
    uint32_t num_gpu_blocks;     /* KV blocks in all */
    uint32_t max_lora;           /* resident adapters at most */
    uint64_t lora_running_mask;  /* bit i: pool adapter i is loaded and running */
    uint64_t lora_waiting_mask;  /* bit i: requests wait for pool adapter i */
    uint32_t lora_running_count; /* adapters loaded (may exceed the mask's 64 bits) */
    double requests_total;       /* a monotonic counter, for restart detection; <0 unknown */
} sb_endpoint_report;

enum sb_health {
    SB_HEALTH_HEALTHY = 0,
    SB_HEALTH_EJECTED,     /* outlier: out until ejected_until */
    SB_HEALTH_HALF_OPEN,   /* after ejection: one trial request at a time */
    SB_HEALTH_DOWN,        /* active health check failing */
    SB_HEALTH_DRAINING,    /* operator asked: no new requests */
};

/* llama.cpp's slots (an agent's report, or the prober's /slots scrape), kept apart from the
 * load report: they have their own source, age and staleness, and a /metrics scrape carrying
 * no slots must not erase what an agent said. The gateway's own traffic corrects them the way
 * sent_since_report corrects the queue: a request dispatched after the report holds a slot it
 * does not show, and one dispatched before it frees a slot it showed busy when it ends. */
typedef struct sb_endpoint_slots {
    uint32_t total, idle; /* as reported */
    sb_ns at;             /* when reported; 0 = never */
    sb_ns ttl_ns;         /* older than this: stale (the reporter's own staleness) */
    uint64_t seq;         /* increments with every slots report */
    uint32_t sent_since;  /* dispatched after the report and still in flight */
    uint32_t freed_since; /* dispatched before the report, ended after it */
} sb_endpoint_slots;

/* What the last agent report said about itself (the state is in report and slots). */
typedef struct sb_endpoint_agent {
    char id[64];
    sb_ns at;         /* last report; 0 = never */
    uint64_t seq;     /* the agent's own sequence number */
    uint64_t reports; /* agent reports applied to this endpoint */
    uint32_t interval_ms;
} sb_endpoint_agent;

typedef struct sb_health_params {
    uint32_t max_failures;   /* consecutive failures that eject; default 3 */
    sb_ns base_eject_ns;     /* first ejection; default 1 s */
    sb_ns max_eject_ns;      /* bound of the doubling; default 30 s */
    /* Failure rate over a tumbling window: at the end of any request, if the window holds
     * at least min_requests and failures / requests >= failure_rate, eject. failure_rate 0 or
     * window_ns 0: off. Defaults 0.25, 10, 10 s. */
    double failure_rate;
    uint32_t min_requests;
    sb_ns window_ns;
    /* The router's bound (Envoy's max_ejection_percent): ejected endpoints at most this share
     * of the pool, though one may always be; 0 or 100: no bound. Default 50. */
    uint32_t max_eject_percent;
} sb_health_params;

/* Why an endpoint was ejected (the label of switchboard_ejections_total's `reason`). */
enum sb_eject_reason {
    SB_EJECT_NONE = -1,
    SB_EJECT_CONSECUTIVE = 0, /* max_failures in a row */
    SB_EJECT_RATE,            /* failure_rate over the window */
    SB_EJECT_TRIAL,           /* the half-open trial failed */
    SB_EJECT_REASONS
};
const char *sb_eject_reason_name(enum sb_eject_reason r);

/* How recent a success keeps a stale endpoint serving: ten seconds, five default health
 * check intervals, so one missed check does not drop a replica that answers. */
#define SB_SERVING_WINDOW_NS ((sb_ns)10 * 1000 * 1000 * 1000)

typedef struct sb_endpoint {
    /* identity (set by the owner) */
    uint32_t pool, index;
    const char *address;
    const char *label_keys[SB_MAX_LABELS];
    const char *label_values[SB_MAX_LABELS];
    size_t n_labels;
    /* the last report */
    sb_endpoint_report report;
    sb_ns report_ns;             /* when it arrived; 0 = never */
    enum sb_report_source report_source;
    uint64_t report_seq;         /* increments with every report */
    /* the router's own accounting */
    uint32_t in_flight;
    uint32_t sent_since_report;  /* dispatched after the last report and still in flight */
    uint64_t pending_prefill_tokens; /* estimated prompt tokens sent, first byte not yet seen */
    /* Of those, the ones to compute: less what the prefix index said the endpoint held at the
     * pick (sb_endpoint_dispatch_uncached); the pending-prefill scorer's signal. */
    uint64_t pending_uncached_tokens;
    uint64_t dispatched, completed, failed;
    /* health */
    enum sb_health health;
    bool draining;
    bool active_down;
    uint32_t consecutive_failures;
    uint32_t ejections;          /* consecutive ejections (the backoff exponent) */
    uint64_t ejections_total;
    sb_ns ejected_until;
    int8_t eject_why; /* enum sb_eject_reason of the last ejection */
    bool trial_in_flight;
    uint64_t ejections_by[SB_EJECT_REASONS];
    uint64_t readmissions; /* ejections ended early by an active check */
    sb_ns window_start_ns; /* the failure-rate window */
    uint32_t window_requests, window_failures;
    /* the latest evidence of serving, for stale-but-serving */
    sb_ns last_ok_ns, last_fail_ns, last_check_ok_ns;
    /* retries away from this endpoint, by reason (enum sb_retry_reason; counted by the proxy) */
    uint64_t retries_by[SB_RETRY_REASONS];
    sb_ns last_dispatch_ns;
    /* uncached prompt tokens sent, decayed (sb_endpoint_sent_tokens): the sum scaled to its
     * epoch, sent_scaled * exp(-(now - sent_epoch_ns) / tau) at now; sent_last_ns: the last
     * change (a clock read before it reads the sum as of then) */
    double sent_scaled;
    sb_ns sent_epoch_ns;
    sb_ns sent_last_ns;
    /* learned online (sb_endpoint_observe_ttft): prefill speed, tokens per second; 0 until
     * the first observation */
    double prefill_tps;
    uint64_t ttft_observations;
    sb_endpoint_slots slots;
    sb_endpoint_agent agent;
    /* This router's share of the endpoint's traffic (sb_endpoint_traffic_share): its own
     * completions against the engine's request counter between reports, both decayed. */
    double share_own, share_engine; /* decayed sums of the deltas */
    double share_engine_last;       /* requests_total at the last report that had one */
    uint64_t share_own_last;        /* completed at that report */
    sb_ns share_at;                 /* that report; 0 = none yet */
    /* The share of the reported cache the router's approximate index keeps for this endpoint,
     * learned from answers (sb_router_observe_cached): 1 - index_shrink; 0 = all of it. */
    double index_shrink;
} sb_endpoint;

/* What a dispatch hands back to the caller, to be returned on completion or failure. */
typedef struct sb_ticket {
    uint64_t report_seq;     /* report current at dispatch */
    uint32_t prefill_tokens; /* estimate added to pending_prefill_tokens */
    uint32_t uncached_tokens; /* ...and to pending_uncached_tokens */
    bool first_byte_seen;
    bool trial;              /* the half-open trial request */
    /* Set by the router (core/router.h): the prefix blocks this request added to the index are
     * pending until its first token; prefix_pending is the hash to settle them with. */
    bool has_prefix_pending;
    uint64_t prefix_pending;
    /* Set by the router: what this dispatch added to the endpoint's sent tokens, and when, so
     * a request that never reached it can withdraw it (sb_router_withdraw_sent). */
    uint32_t sent_tokens;
    sb_ns sent_ns;
    uint64_t slots_seq; /* slots report current at dispatch */
    /* Gateway sync (core/router.h, sb_router_set_sync): the id its dispatch was told under, so
     * its first byte and end are told too; 0: not told (a peer's request, or no sync). */
    uint64_t sync_id;
} sb_ticket;

sb_health_params sb_health_params_default(void);

/* Records a report received at now. A counter that went backwards (requests_total) means
 * the engine restarted: the return value is true then, so the caller can drop what it
 * believed the engine cached. */
bool sb_endpoint_report_set(sb_endpoint *ep, const sb_endpoint_report *r, enum sb_report_source src, sb_ns now);

/* Merges a partial report (only its have_ fields) into the current one, e.g. from an ORCA
 * header carrying two named metrics. Counts as a new report (resets the since-report count,
 * freshens its age) only when it carries the queue (waiting). */
void sb_endpoint_report_merge(sb_endpoint *ep, const sb_endpoint_report *r, enum sb_report_source src, sb_ns now);

bool sb_endpoint_is_stale(const sb_endpoint *ep, sb_ns stale_ns, sb_ns now);

/* This router's share of what the endpoint served lately, in [0.05, 1]: its own completions
 * over the engine's request counter (requests_total), each decayed with a 30 s time constant;
 * 1 until the counter has shown 8 requests, or without a counter. Below 1 when another gateway
 * replica, or traffic around the gateway, sends the endpoint the rest. */
double sb_endpoint_traffic_share(const sb_endpoint *ep);
/* The two decayed sums behind it (own completions, the engine's requests), decayed to now: an
 * endpoint whose reports stopped, or never carried the counter, weighs less as time passes
 * instead of keeping what it last showed. */
void sb_endpoint_share_sums(const sb_endpoint *ep, sb_ns now, double *own, double *engine);
/* The share those sums give (summed over a pool's endpoints, or one endpoint's): own / engine,
 * in [0.05, 1]; 1 below 8 engine requests. */
double sb_traffic_share_of(double own, double engine);

/* Records a slots report received at now (idle is clamped to total), stale once older than
 * ttl_ns. Resets the counts of traffic since the last one. */
void sb_endpoint_slots_set(sb_endpoint *ep, uint32_t total, uint32_t idle, sb_ns ttl_ns, sb_ns now);
/* Whether the endpoint has slots reported no longer ago than their ttl. */
bool sb_endpoint_slots_fresh(const sb_endpoint *ep, sb_ns now);
/* Idle slots as the gateway sees them now: reported idle, less requests dispatched since the
 * report, plus requests the report showed busy that have ended since; within [0, total].
 * Meaningful only when sb_endpoint_slots_fresh. */
uint32_t sb_endpoint_slots_idle(const sb_endpoint *ep);

/* The state used for scoring: the report corrected by traffic since. */
double sb_endpoint_waiting(const sb_endpoint *ep);
double sb_endpoint_running(const sb_endpoint *ep);
double sb_endpoint_kv_usage(const sb_endpoint *ep);

/* May the endpoint take a new request now? (healthy, or half-open with no trial out). */
bool sb_endpoint_available(const sb_endpoint *ep, sb_ns now);
/* Current health, advancing EJECTED to HALF_OPEN when the backoff has passed. */
enum sb_health sb_endpoint_health(sb_endpoint *ep, sb_ns now);
const char *sb_health_name(enum sb_health h);

/* The prefill work the router has sent the endpoint lately: uncached prompt tokens (the
 * prompt less what the prefix index says the endpoint holds), each decaying exponentially
 * with time constant SB_SENT_TOKENS_TAU_NS from its dispatch. Unlike pending prefill it does
 * not drop to zero at the first byte: a request that just finished its prefill still decodes
 * there, and its weight fades over the next seconds instead of vanishing. The constant was
 * chosen in replay over the routing matrix (docs/benchmarks.md section 10: time constants of
 * 0.5, 1, 1.5, 3, 10 and 30 s; 1.5 s had the fewest cells behind the best peer and the lowest
 * geometric mean of p90 against it). Our own accounting: never stale. */
#define SB_SENT_TOKENS_TAU_NS ((sb_ns)1500 * 1000 * 1000)
/* The sum is kept scaled to an epoch (a multiple of SB_SENT_EPOCH_NS, moved forward on the next
 * change once it is a window old): its value at now is sent_scaled times
 * sb_sent_epoch_factor(sent_epoch_ns, now). Endpoints changed within the same window share the
 * epoch, so a scorer computes one exp() per pick instead of one per candidate (bench_sched:
 * the per-candidate exp() was most of the default profile's extra cost). 16 time constants:
 * the scale stays below e^16 (about 9e6), far inside a double's precision. */
#define SB_SENT_EPOCH_NS (16 * SB_SENT_TOKENS_TAU_NS)
double sb_sent_epoch_factor(sb_ns epoch, sb_ns now);
void sb_endpoint_sent_tokens_add(sb_endpoint *ep, uint32_t tokens, sb_ns now);
/* Takes back `tokens` added at `at` (what is left of them by now; the sum never goes below 0). */
void sb_endpoint_sent_tokens_withdraw(sb_endpoint *ep, uint32_t tokens, sb_ns at, sb_ns now);
double sb_endpoint_sent_tokens(const sb_endpoint *ep, sb_ns now);

/* Request lifecycle. */
sb_ticket sb_endpoint_dispatch(sb_endpoint *ep, uint32_t prefill_tokens, sb_ns now);

/* The part of the dispatched prompt the endpoint has to compute (its prompt less the prefix
 * it holds), when the caller knows it: dispatch counts the whole prompt as uncached. Lowers
 * the ticket's and the endpoint's uncached count to it; never raises them. */
void sb_endpoint_dispatch_uncached(sb_endpoint *ep, sb_ticket *t, uint32_t uncached_tokens);
void sb_endpoint_first_byte(sb_endpoint *ep, sb_ticket *t, sb_ns now);
/* ok: a response came (status < 500); a 5xx or a connect failure is a failure for outlier
 * detection. A client abort is neither: pass counts_for_health = false. may_eject false: the
 * pool's ejection bound is reached, so a healthy endpoint is not ejected (its failures still
 * count; a failed half-open trial, already ejected, is). Returns why it ejected the endpoint,
 * or SB_EJECT_NONE. */
enum sb_eject_reason sb_endpoint_finish(sb_endpoint *ep, sb_ticket *t, bool ok, bool counts_for_health,
                                        const sb_health_params *hp, bool may_eject, sb_ns now);

/* Whether the endpoint is ejected by outlier detection (ejected or half-open), whatever its
 * active checks and draining say: what the router's ejection bound counts. */
bool sb_endpoint_outlier_ejected(const sb_endpoint *ep);

/* Stale but serving: its latest evidence (last request counted for health, last active
 * check) is a success at most SB_SERVING_WINDOW_NS old. Read by the scheduler for stale
 * endpoints only. */
bool sb_endpoint_serving(const sb_endpoint *ep, sb_ns now);
/* Drops the load figures of a stale report (running, waiting, KV use) so that the state used
 * for scoring is the router's own: running = in flight, waiting = sent since. Keeps the
 * report's age (it stays stale until a report comes) and its other fields. */
void sb_endpoint_expire_report(sb_endpoint *ep);

/* Learns the endpoint's prefill speed from one answered request: `uncached` prompt tokens
 * (prompt minus cached, from the usage the response reported) took ttft_ns to the first
 * token. An exponential moving average (weight 0.2) of uncached / ttft, counted only when the
 * request had real prefill work (>= 64 tokens), so short prompts' fixed overheads do not read
 * as slow prefill. Queue time is included on purpose: it is what the next request will see. */
void sb_endpoint_observe_ttft(sb_endpoint *ep, uint64_t uncached, sb_ns ttft_ns);

/* Carries state across a reload that rebuilt the router: dst (the same endpoint in the new
 * router) takes src's reports, health and learned figures; its identity and the accounting of
 * requests in flight (which finish on the old router) stay dst's own. */
void sb_endpoint_adopt(sb_endpoint *dst, const sb_endpoint *src);

/* Active health check result: a failure marks it down; a success lifts that, and readmits an
 * ejected (or half-open) endpoint at once (counted in readmissions), unless its failure rate
 * ejected it. */
void sb_endpoint_active_check(sb_endpoint *ep, bool ok, sb_ns now);

#endif
