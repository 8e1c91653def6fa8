/* driver_internal: what the files of the replay driver share, and nothing else.
 * Private to src/replay/driver*.c; the public contract is replay/driver.h.
 *
 * driver.c holds the discrete-event loop, the request life cycle, simulated probing, flow
 * control in virtual time and the run's summary; driver_setup.c the options' defaults and
 * checks, the set-up and tear-down of a run; driver_fleet.c the fleet events: which gateway
 * replica each request reaches, bypass traffic, replica restarts and the requests they lose;
 * driver_bands.c the flow-control bands and tenants: which conversation gets which, and the
 * per-band figures of the result; driver_events.c the product's precise index (KV events). */
#ifndef SB_REPLAY_DRIVER_INTERNAL_H
#define SB_REPLAY_DRIVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/admission.h"
#include "core/control.h"
#include "core/decide.h"
#include "replay/driver.h"
#include "replay/event_queue.h"
#include "replay/lag_queue.h"

/* The virtual clock starts at 1 s, not 0: core/endpoint.h reads report_ns == 0 as "never
 * reported", and the first scrape happens at the start. */
#define EPOCH_NS SB_NS_PER_S
#define NEVER UINT64_MAX
#define MAX_ADAPTERS 64      /* the router's LoRA masks are 64 bits (core/endpoint.h) */
#define PREFIX_KEY_TOKENS 25 /* the gateway's prefix key covers 100 bytes (proto/prompt.h) */
#define DEFAULT_MODEL "meta-llama/Llama-3.1-8B-Instruct" /* the simulator's default model */

enum {
    EV_STEP = 1,
    EV_SCRAPE,
    EV_ARRIVE,
    EV_DELIVER,
    EV_FIRST,
    EV_DONE,
    EV_TICK,
    EV_DRAIN,
    EV_RESTART,
    EV_PROBED,
    EV_PEER_SENT,
    EV_PEER_FIRST,
    EV_PEER_DONE
};

/* net/gateway.c's adaptive timer: every 100 ms, sooner if a pool probes faster. */
#define TICK_MAX_NS SB_MS(100)

typedef struct req_rt {
    sb_ticket ticket;
    sb_ns arrival_ns;
    sb_ns dispatch_ns;    /* left the gateway for a replica: arrival, or the end of its queue wait */
    sb_ns ttft_ns;        /* as the gateway sees it from dispatch, once the engine has finished */
    sb_ns client_ttft_ns; /* from arrival, queue wait and network included */
    uint32_t replica;
    uint32_t cached_tokens;
    uint32_t tenant;
    uint16_t status; /* flow control's refusal (429, 503) */
    uint8_t outcome;
    uint8_t band;
    bool queued;
    bool bypass;    /* past every gateway (opts.bypass) */
    bool on_engine; /* submitted to its replica's engine, not finished there */
    bool probed;    /* the synchronous probe ran for it (opts.sync_probe_age_ns) */
    uint16_t gw;    /* the gateway replica that routes it */
} req_rt;

struct driver;

/* One gateway replica: what a gateway process owns (opts.gateways of them). */
typedef struct gateway {
    struct driver *d;
    uint32_t index;
    sb_router *router;
    void *pstate; /* a custom policy's state */
    uint64_t prng;
    sb_adaptive *adaptive;
    sb_admission *adm;  /* flow control; NULL without */
    bool drain_pending; /* an EV_DRAIN is queued at `now` */
    double share_sum;
} gateway;

typedef struct driver {
    const sb_replay_workload *w;
    const sb_replay_policy *p;
    const sb_replay_opts *o;
    /* The profile the pool routes with, as a gateway's pool_profile resolves it: the policy's,
     * `default-events` for `default` with KV events (sb_profile_with_events); the adaptive
     * configurator's base too. NULL for a custom policy. */
    const sb_profile *base;
    sb_replay_result *out;
    char *err;
    size_t errcap;
    int error;

    gateway *gw;
    uint32_t n_gw;
    sb_engine **engines;
    uint32_t *engine_gen; /* incremented by a restart: an EV_STEP of an older engine is void */
    uint32_t n;
    bool *scheduled; /* an EV_STEP is queued for the engine */
    bool *is_dirty;  /* touched at `now`: its next step is due once time moves on */
    uint32_t *dirty;
    size_t n_dirty;
    sb_replay_queue q;
    sb_ns now;
    uint32_t cur_replica; /* the engine being advanced, for its event callback */

    req_rt *rt;
    uint64_t total, settled; /* requests this run will settle (complete or shed), and so far */
    uint64_t *itl_hist;
    sb_ns *ttft, *e2e;
    size_t n_done;
    sb_ns first_arrival, last_answer;

    uint64_t hash_seeds[MAX_ADAPTERS + 1]; /* router block-hash seed per engine adapter id */
    uint32_t *tokens;                      /* scratch, sized for the longest prompt */
    uint32_t *answer;                      /* scratch for a request's output tokens, grown */
    size_t cap_answer;
    uint64_t *rhash, *ehash;
    sb_ticket *peer_tk; /* gateway sync: [request * n_gw + gateway], the peer's ticket */
    sb_engine_adapter adapters[MAX_ADAPTERS + 1];
    uint32_t block_tokens; /* router index block, tokens: pool block_bytes / bytes_per_token */

    sb_ns tick_ns; /* the gateways' adaptive and flow-control timer */

    /* fleet events */
    sb_ns *bypass_ttft;
    size_t n_bypass_done;
    uint64_t gone_hits, gone_queries, gone_steps; /* counters of engines replaced by restarts */
    uint32_t next_restart_replica;

    /* the product's precise index (opts.kv_events; driver_events.c) */
    struct sb_lag_queue *kv_lag; /* engine events on their way to the routers */
    uint64_t *kv_keys;           /* scratch: a request's precise keys */
    void *kv_rec;                /* scratch: one event as a lag-queue record */
    size_t kv_rec_cap;
} driver;

/* ---- driver.c ---- */

/* Records the run's first error (rc, msg into d->err) and returns rc; later ones are dropped. */
int drv_fail(driver *d, int rc, const char *msg);
/* Gateway sync (opts.gateway_sync): the other gateways hear of request idx's dispatch
 * (EV_PEER_SENT), first byte (EV_PEER_FIRST) or end (EV_PEER_DONE) gateway_sync_ns later. */
void drv_tell_peers(driver *d, uint32_t idx, uint32_t kind);
/* Queues an event of `kind` at t; out of memory fails the run. */
void drv_push(driver *d, sb_ns t, uint32_t kind, uint32_t a, uint64_t b);
/* What a custom policy's callbacks see of gateway g at d->now. */
sb_replay_fleet_view drv_fleet_view(driver *d, gateway *g);
/* Settles request idx and its conversation's later turns as shed; status: flow control's (or 0). */
void drv_settle_shed(driver *d, uint32_t idx, uint16_t status);
/* Submits request idx to replica rep's engine now (its hashes computed again). */
void drv_deliver(driver *d, uint32_t rep, uint32_t idx);
/* Flow control's callbacks (ctx: the gateway; user: the queued request): dispatch routes it
 * now (false once the run has failed), refuse settles it as shed with the refusal's status. */
bool drv_on_admission_dispatch(void *ctx, void *user);
void drv_on_admission_refuse(void *ctx, void *user, const sb_admission_refusal *r);
/* Queues one EV_DRAIN of g's flow-control queue at `at` (none without flow control, or if one is). */
void drv_want_drain(driver *d, gateway *g, sb_ns at);
/* The request's arrival on the run's clock (opts.time_scale applied), from the epoch. */
sb_ns drv_scaled_arrival(const sb_replay_opts *o, const sb_replay_request *r);

/* ---- driver_setup.c ---- */

/* Validates d->o against the workload and policy; sets d->block_tokens and out->have_bands.
 * 0, or -EINVAL with the reason in d->err. */
int drv_check_opts(driver *d);
/* Allocates and builds everything a checked run needs. 0, or the error (recorded by drv_fail). */
int drv_set_up(driver *d);
/* Frees what drv_set_up built, even partly (d zeroed where it did not get). */
void drv_tear_down(driver *d);
/* The secret keying the run's table slots (engines, routers): a function of the seed. */
uint64_t drv_table_secret(uint64_t seed);

/* ---- driver_fleet.c: gateway replicas, bypass, restarts ---- */

/* Which gateway replica each request reaches, and which conversations bypass them all (d->rt). */
void drv_assign_gateways(driver *d);
/* Sends request idx past every gateway to a seeded replica (after the network delay). */
void drv_bypass(driver *d, uint32_t idx);
/* Replaces replica rep's engine with a fresh one; the requests on the old one are lost. */
void drv_restart(driver *d, uint32_t rep);
/* Queues the run's restarts (opts.restart_every_ns or opts.restarts over the `roots` arrivals). */
void drv_schedule_restarts(driver *d, size_t roots);

/* ---- driver_events.c: the product's precise index (opts.kv_events) ---- */

/* Every gateway's router keeps a precise index; the lag queue and scratch. 0 or -ENOMEM. */
int drv_events_set_up(driver *d, uint64_t secret);
void drv_events_tear_down(driver *d);
/* Moves replica rep's recorded engine events into the lag queue (after each engine call). */
void drv_events_collect(driver *d, uint32_t rep);
/* Delivers the events whose lag has passed at d->now. */
void drv_events_advance(driver *d);
/* Replica rep restarted: the routers hear a clear (after the lag). */
void drv_events_restart(driver *d, uint32_t rep);
/* The request's precise keys from d->tokens[0..n_prompt) into s (nothing without events). */
void drv_events_keys(driver *d, uint32_t n_prompt, uint32_t adapter, sb_sched_request *s);

/* ---- driver_bands.c ---- */

/* Draws a band and a tenant per conversation (its later turns inherit them) into d->rt. */
void drv_assign_bands(driver *d);
/* Fills d->out's per-band figures from the settled requests; uses d->e2e as scratch. */
void drv_summarise_bands(driver *d);

#endif
