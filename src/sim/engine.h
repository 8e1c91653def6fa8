/* engine: the model of one vLLM-like model-server replica, in any clock.
 *
 * Pure: no I/O, no clock reads, no threads. Time (sb_ns) is an argument, so the same engine runs
 * behind the live simulator's timers (`switchboard sim`) and inside replay's virtual clock. Not
 * for: HTTP, text, streaming or histograms; callers build those from the events reported here.
 *
 * The model, shaped after vLLM's V1 scheduler:
 * - Work happens in steps. A step is formed (its batch chosen) at its start time and its effects
 *   apply at its end. Steps run back to back while there is work; an idle engine starts a step
 *   when work arrives. Forming a step: (1) every running sequence with exactly one token left to
 *   compute (decoding) gets that token; (2) running sequences still in prefill get chunks; (3)
 *   waiting requests are admitted first come first served, each with one prefill chunk, while the
 *   token budget (max_num_batched_tokens) and max_num_seqs allow. A request that arrived after
 *   the step's start never joins that step.
 * - Step duration = overhead + prefill_token * prefill tokens + decode_token * decode tokens
 *   + context_token * KV tokens read by the decoding sequences + lora_load for each adapter
 *   loaded by the step, rounded to the nanosecond.
 * - KV cache: num_gpu_blocks blocks of block_size tokens. A request holds ceil(computed / block
 *   size) blocks. Prefix caching: every full prompt block has a chained hash (it covers the
 *   adapter and all earlier tokens); a request admitted from waiting shares the leading blocks
 *   already cached (in use, or free but not yet evicted) and does not compute them again, as
 *   long as one prompt token is left to compute. Freed blocks keep their hash in an LRU free
 *   queue (a request's blocks are freed tail first, so prefix heads are evicted last) and lose
 *   it only when reused. When a running sequence needs a block and none is free, the newest
 *   running request is preempted: its blocks are freed and it goes back to the front of the
 *   waiting queue, to be recomputed (prompt and tokens generated so far) later. Admission never
 *   preempts: a waiting request that does not fit blocks those behind it.
 * - LoRA: at most max_loras adapters resident. A request whose adapter is not resident is
 *   skipped (others behind it may go) until a slot is free or held by an adapter that no running
 *   request uses (the least recently used one is evicted); loading costs lora_load_ns once,
 *   added to the step that loads it.
 * - A token is produced at the end of the step in which a sequence computes its last known
 *   token: first the step that completes its prefill (the first token), then one per decode
 *   step. A request finishes with its max_tokens-th token.
 * - Generated tokens are cached too, as vLLM caches every full block of a request's tokens: a
 *   block filled partly or wholly by generated tokens is registered once the step that computes
 *   its last token ends (the request's final token is never computed, as in vLLM). A request
 *   generates output_tokens if given, else the simulator's answer (sim/answer.h), so the next
 *   turn of a conversation, whose prompt holds the answer, hits those blocks.
 * - KV usage (kv_cache_usage) counts the blocks held by running requests, as vLLM's
 *   BlockPool.get_usage() does (1 - free / total, where cached blocks nobody holds are free:
 *   they are reclaimable). vLLM also reserves one null block; the simulator does not.
 * Each operation costs O(requests touched + blocks touched), never O(num_gpu_blocks) (except
 * sb_engine_reset_prefix_cache); memory is allocated up front for blocks and grown per request,
 * through base/alloc.h.
 *
 * KV-cache events (params.kv_events). The engine records, in order, what vLLM's BlockPool would
 * publish for the same cache behaviour: STORED when a run of full blocks becomes cached (their
 * chained hashes, the hash of the block before them, their token ids), REMOVED when a cached
 * block is reused for new content (one event per block, as vLLM), CLEARED when the prefix cache
 * is reset. A block whose hash another block already holds (two requests computed one prefix at
 * once) is not cached again, so it splits a STORED run and is never announced. The hashes are
 * the engine's own keyed block hashes (they cannot be recomputed outside the engine, like
 * vLLM's), each event carries the index of the step it belongs to, and nothing touches a socket:
 * the owner drains the record (sb_engine_kv_count / _event / _drain) after each call that may
 * form or complete a step, and publishes it (sim/kv_publisher.h) or delays it (replay).
 *
 * Driving it. Time never goes backwards: every call takes `now`, and earlier values are treated
 * as the latest time seen.
 *   - sb_engine_submit() / sb_engine_abort() at the time they happen.
 *   - sb_engine_next_event() returns the end of the current step (forming it if needed): the
 *     time at which sb_engine_advance() has something to report. SB_ENGINE_NEVER when idle.
 *     It forms a step that starts at the current time, so call it after every submission made
 *     at that time (requests submitted at one instant then share a step).
 *   - sb_engine_advance(now, cb) completes every step that ends at or before `now` and reports
 *     its events, in order, through cb; steps ending later stay in flight.
 * A live server keeps one timer: after any submit, abort or advance it (re)arms the timer for
 * sb_engine_next_event() (converted to its clock, scaled by --speed); when the timer fires it
 * calls sb_engine_advance(now) and re-arms. A discrete-event driver does the same in virtual
 * time: push next_event() into its queue; on that event call advance(t). Callbacks may call
 * sb_engine_submit() and sb_engine_abort() (at the event's time or later), and not
 * sb_engine_advance(). */
#ifndef SB_SIM_ENGINE_H
#define SB_SIM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

#define SB_ENGINE_NEVER UINT64_MAX

/* Configuration. Names follow vLLM's engine arguments where one exists. */
typedef struct sb_engine_params {
    uint32_t max_num_seqs;           /* running requests at most (vLLM default 256) */
    uint32_t max_num_batched_tokens; /* tokens computed per step at most (vLLM V1: 8192) */
    uint32_t num_gpu_blocks;         /* KV cache size in blocks */
    uint32_t block_size;             /* tokens per KV block (vLLM default 16) */
    uint32_t max_loras;              /* resident LoRA adapters (issue 3: 4; vLLM's is 1) */
    bool enable_prefix_caching;      /* vLLM V1 default: on */
    sb_ns lora_load_ns;              /* cost of loading one adapter */
    /* Step time model, in nanoseconds (doubles: fits are fractional). */
    double step_overhead_ns; /* a: fixed cost of a step */
    double prefill_token_ns; /* b: per prefill token computed */
    double decode_token_ns;  /* c: per decode token computed */
    double context_token_ns; /* e: per KV token read by a decoding sequence */
    /* Keys the slots of the block-hash table (base/hash.h): block hashes are a public
     * function of the prompt a client sends the simulator. Placement only: no result depends
     * on it. The live simulator draws it from the OS, replay derives it from its seed; the
     * default 0 is valid but guessable. */
    uint64_t hash_secret;
    /* Record KV-cache events (see above). Costs a copy of each live request's prompt tokens. */
    bool kv_events;
} sb_engine_params;

/* The defaults: vLLM's for the scheduler, Llama-3.1-8B on one H100-80GB for the rest (see
 * docs/simulator.md for sources). Pure. */
sb_engine_params sb_engine_params_default(void);

/* Checks a parameter set: 0 if usable, -EINVAL if not (a zero size or budget, a block size
 * over 4096, max_num_seqs above max_num_batched_tokens, a negative or non-finite coefficient). */
int sb_engine_params_check(const sb_engine_params *p);

typedef struct sb_engine sb_engine;

/* Returns a new idle engine with an empty cache, or NULL if the parameters fail
 * sb_engine_params_check() or memory runs out. The engine copies *p. */
sb_engine *sb_engine_new(const sb_engine_params *p);
/* Frees the engine and everything it holds; no callback is called. NULL is a no-op. */
void sb_engine_free(sb_engine *e);
/* The engine's parameters (a copy made at creation). */
const sb_engine_params *sb_engine_params_get(const sb_engine *e);

/* A request to submit. The engine reads `tokens` (or `block_hashes`) during the call only and
 * keeps its own copy of what it needs: the caller may free them on return. */
typedef struct sb_engine_request {
    uint64_t id;                  /* caller's id, unique among the engine's live requests */
    const uint32_t *tokens;       /* n_prompt prompt token ids, or NULL if block_hashes given */
    const uint64_t *block_hashes; /* or (and) the n_prompt / block_size full-block hashes, as
                                   * sb_engine_hash_blocks() computes them (replay's fast path:
                                   * given, they are used instead of hashing tokens) */
    uint32_t n_prompt;            /* prompt length in tokens, >= 1 */
    uint32_t max_tokens;          /* tokens to generate, >= 1 (the request finishes then) */
    uint32_t adapter;             /* LoRA adapter id; 0 = base model */
    /* The ids of the max_tokens tokens it generates, or NULL for the simulator's answer
     * (sb_sim_answer_token). Without tokens, blocks holding generated tokens are cached only
     * when n_prompt is a multiple of the block size (the prompt's partial block is unknown),
     * and STORED events for prompt blocks carry no token ids. */
    const uint32_t *output_tokens;
} sb_engine_request;

/* Computes the chained hashes of the n / block_size full blocks of `tokens`, as the engine does
 * for prefix caching, into out (n / block_size entries): h[i] = xxh3_64(block i, seed h[i-1]),
 * h[-1] = a hash of the adapter id. Returns the number of hashes written. Pure. */
size_t sb_engine_hash_blocks(const uint32_t *tokens, size_t n, uint32_t block_size, uint32_t adapter, uint64_t *out);

/* Queues a request that arrived at `now`. Returns 0, or on failure (nothing queued):
 * -EINVAL (n_prompt or max_tokens 0, no tokens nor hashes, an adapter while max_loras is 0),
 * -E2BIG (n_prompt + max_tokens exceeds the cache: it could never run), -EEXIST (id live),
 * -ENOMEM. */
int sb_engine_submit(sb_engine *e, const sb_engine_request *req, sb_ns now);

/* Removes a live request (waiting or running) at `now` and frees its blocks; no event is
 * reported for it. A step in flight keeps its duration. Returns 0, or -ENOENT if the id is not
 * live (finished, aborted or never submitted). */
int sb_engine_abort(sb_engine *e, uint64_t id, sb_ns now);

/* Accounting of one request; times are nanoseconds, measured on the caller's clock. */
typedef struct sb_engine_usage {
    sb_ns arrival_ns; /* when submitted */
    sb_ns queue_ns;   /* arrival to the start of its first step (vLLM queue time) */
    sb_ns ttft_ns;    /* arrival to first token; 0 before it */
    sb_ns e2e_ns;     /* arrival to last token; 0 before it */
    sb_ns itl_sum_ns; /* sum, count and max of the gaps between successive tokens */
    sb_ns itl_max_ns;
    uint32_t itl_count;
    uint32_t prompt_tokens;
    uint32_t cached_tokens; /* prompt tokens served from the prefix cache at first admission */
    uint32_t completion_tokens;
    uint32_t preemptions;
} sb_engine_usage;

typedef enum sb_engine_event_kind {
    SB_ENGINE_EV_FIRST_TOKEN = 1, /* the first token of a request */
    SB_ENGINE_EV_TOKEN,           /* each later token */
    SB_ENGINE_EV_FINISHED,        /* after the last token's event: the request is gone */
    SB_ENGINE_EV_PREEMPTED,       /* sent back to waiting; its tokens so far stay delivered */
} sb_engine_event_kind;

typedef struct sb_engine_event {
    sb_engine_event_kind kind;
    uint64_t id;
    sb_ns time_ns;         /* end of the step that caused it (start, for PREEMPTED) */
    sb_ns itl_ns;          /* TOKEN: time since the request's previous token */
    sb_engine_usage usage; /* the request's accounting so far (final in FINISHED) */
} sb_engine_event;

/* Called once per event; `ev` is valid during the call only. */
typedef void (*sb_engine_event_cb)(void *ud, const sb_engine_event *ev);

/* Completes, in order, every step ending at or before `now`, reporting each step's events
 * through cb before the next step is formed (so requests the callback submits at the event's
 * time join the next step), then any PREEMPTED events from steps formed since the last call.
 * Steps that start before `now` are formed as needed. cb may be NULL (events dropped).
 * Returns the number of steps completed. Called from a callback, it does nothing and returns 0. */
size_t sb_engine_advance(sb_engine *e, sb_ns now, sb_engine_event_cb cb, void *ud);

/* The end time of the step in flight, forming the step due at the latest time seen if none is
 * in flight; SB_ENGINE_NEVER if there is no work. Forming may preempt (events are reported by
 * the next sb_engine_advance()). */
sb_ns sb_engine_next_event(sb_engine *e);

/* The step in flight, for tests, logs and dashboards. */
typedef struct sb_engine_step {
    sb_ns start_ns, end_ns;
    uint32_t num_seqs; /* sequences computing tokens in this step */
    uint32_t prefill_tokens;
    uint32_t decode_tokens;
    uint64_t context_tokens; /* KV tokens read by the decoding sequences */
    uint32_t lora_loads;
} sb_engine_step;

/* Fills *out and returns true if a step is in flight (it does not form one); false otherwise. */
bool sb_engine_current_step(const sb_engine *e, sb_engine_step *out);

/* Gauges and counters, with the meaning of vLLM V1's metrics of the same names. */
typedef struct sb_engine_metrics {
    uint32_t num_requests_running; /* admitted and holding blocks */
    uint32_t num_requests_waiting; /* queued, including preempted ones */
    double kv_cache_usage;         /* blocks in use (ref count > 0) / num_gpu_blocks, 0..1 */
    uint32_t num_blocks_used;
    uint32_t num_blocks_cached;          /* free blocks still holding a prefix (evictable) */
    uint64_t prefix_cache_queries_total; /* prompt tokens looked up at first admission */
    uint64_t prefix_cache_hits_total;    /* of those, tokens found cached */
    uint64_t request_success_total;      /* requests finished (max_tokens reached) */
    uint64_t request_aborted_total;
    uint64_t prompt_tokens_total;     /* prompt tokens of requests that got a first token */
    uint64_t generation_tokens_total; /* tokens produced */
    uint64_t num_preemptions_total;
    uint64_t num_steps_total;
    uint32_t num_running_adapters; /* distinct adapters of running requests */
    uint32_t num_waiting_adapters; /* distinct adapters of waiting requests */
    uint32_t max_loras, block_size, num_gpu_blocks;
} sb_engine_metrics;

/* Fills *out. O(1). */
void sb_engine_metrics_get(const sb_engine *e, sb_engine_metrics *out);

/* One LoRA adapter the engine knows of: resident, or used by a live request. */
typedef struct sb_engine_adapter {
    uint32_t id;
    uint32_t running; /* running requests using it */
    uint32_t waiting; /* waiting requests asking for it */
    bool resident;
} sb_engine_adapter;

/* Writes up to cap adapters (ascending id) to out and returns how many there are in all
 * (which may exceed cap). vLLM's lora_requests_info lists those with running / waiting > 0. */
size_t sb_engine_adapters(const sb_engine *e, sb_engine_adapter *out, size_t cap);

/* ---- KV-cache events ----------------------------------------------------------------------- */

typedef enum sb_engine_kv_kind {
    SB_ENGINE_KV_STORED = 1, /* vLLM's BlockStored */
    SB_ENGINE_KV_REMOVED,    /* BlockRemoved */
    SB_ENGINE_KV_CLEARED,    /* AllBlocksCleared */
} sb_engine_kv_kind;

typedef struct sb_engine_kv_event {
    sb_engine_kv_kind kind;
    uint64_t step; /* index of the engine step it belongs to (0-based); CLEARED: steps so far */
    sb_ns time_ns; /* STORED: end of the step that computed the blocks; REMOVED: start of the
                    * step that reused the block; CLEARED: the reset */
    uint32_t n_blocks;
    const uint64_t *block_hashes; /* n_blocks, chained: block i's parent is block i-1 */
    bool has_parent;              /* STORED: the run does not start the chain */
    uint64_t parent_hash;         /* ... and this is the hash of the block before it */
    const uint32_t *token_ids;    /* STORED: n_blocks * block_size ids, or NULL (see request) */
    uint32_t block_size;
    uint32_t adapter; /* LoRA adapter id; 0 = base model */
} sb_engine_kv_event;

/* Events recorded and not yet drained (0 unless params.kv_events). */
size_t sb_engine_kv_count(const sb_engine *e);
/* Fills *out with event i (< sb_engine_kv_count); its arrays stay valid until the next
 * sb_engine_kv_drain or sb_engine_free. */
void sb_engine_kv_event_at(const sb_engine *e, size_t i, sb_engine_kv_event *out);
/* Forgets every recorded event. */
void sb_engine_kv_drain(sb_engine *e);
/* Events the engine could not record (memory ran out) since it was created: an owner that sees
 * this grow must tell its consumers to forget the engine's blocks (CLEARED semantics). */
uint64_t sb_engine_kv_lost(const sb_engine *e);

/* vLLM's reset_prefix_cache: forgets every cached block (none stays shareable) and records
 * CLEARED. Returns 0, or -EBUSY (nothing done) while running requests hold blocks, as vLLM
 * refuses then. O(num_gpu_blocks). */
int sb_engine_reset_prefix_cache(sb_engine *e, sb_ns now);

/* Calibration: what the parameters imply, measured by driving a fresh engine in virtual time.
 * Prompts are unique (no cache hits). */
typedef struct sb_engine_calibration {
    uint32_t ttft_prompt_tokens[3]; /* 1024, 8192, 32768 */
    sb_ns ttft_ns[3];               /* single request, idle engine */
    uint32_t itl_batch[3];          /* 1, 64, 256 (capped at max_num_seqs) */
    uint32_t itl_context_tokens;    /* prompt length of the decoding requests: 1024 */
    sb_ns itl_ns[3];                /* mean gap between tokens once all are decoding */
    double prefill_tokens_per_s;    /* 64 x 4096-token prompts, 1 output token each */
    double decode_tokens_per_s_256; /* output tokens/s at batch itl_batch[2] */
} sb_engine_calibration;

/* Runs the calibration workloads for *p and fills *out. Returns 0, -EINVAL (bad parameters) or
 * -ENOMEM; a prompt too long for the cache leaves its ttft_ns at 0. Takes tens of milliseconds. */
int sb_engine_calibrate(const sb_engine_params *p, sb_engine_calibration *out);

#endif
