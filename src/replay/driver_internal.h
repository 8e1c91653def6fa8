/* driver_internal: what the files of the replay driver share, and nothing else.
 * Private to src/replay/driver*.c; the public contract is replay/driver.h.
 *
 * driver.c holds the discrete-event loop, the request life cycle, simulated probing and the
 * run's summary; driver_bands.c the flow-control bands and tenants: which conversation gets
 * which, and the per-band figures of the result. */
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

/* The virtual clock starts at 1 s, not 0: core/endpoint.h reads report_ns == 0 as "never
 * reported", and the first scrape happens at the start. */
#define EPOCH_NS SB_NS_PER_S
#define NEVER UINT64_MAX
#define MAX_ADAPTERS 64      /* the router's LoRA masks are 64 bits (core/endpoint.h) */
#define PREFIX_KEY_TOKENS 25 /* the gateway's prefix key covers 100 bytes (proto/prompt.h) */
#define DEFAULT_MODEL "meta-llama/Llama-3.1-8B-Instruct" /* the simulator's default model */

enum { EV_STEP = 1, EV_SCRAPE, EV_ARRIVE, EV_DELIVER, EV_FIRST, EV_DONE, EV_TICK, EV_DRAIN };

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
} req_rt;

typedef struct driver {
    const sb_replay_workload *w;
    const sb_replay_policy *p;
    const sb_replay_opts *o;
    sb_replay_result *out;
    char *err;
    size_t errcap;
    int error;

    sb_router *router;
    sb_engine **engines;
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
    sb_engine_adapter adapters[MAX_ADAPTERS + 1];
    uint32_t block_tokens; /* router index block, tokens: pool block_bytes / bytes_per_token */
    void *pstate;
    uint64_t prng;

    /* adaptive weights and flow control, as the gateway runs them */
    sb_adaptive *adaptive;
    sb_admission *adm; /* flow control; NULL without */
    sb_ns tick_ns;
    bool drain_pending; /* an EV_DRAIN is queued at `now` */
    double share_sum;
} driver;

/* ---- driver_bands.c ---- */

/* Draws a band and a tenant per conversation (its later turns inherit them) into d->rt. */
void drv_assign_bands(driver *d);
/* Fills d->out's per-band figures from the settled requests; uses d->e2e as scratch. */
void drv_summarise_bands(driver *d);

#endif
