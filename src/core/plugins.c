/* plugins: the one registry of filters, scorers and pickers, and the built-in profiles.
 * Adding a plug-in: write it in its own file under filters/, scorers/ or pickers/, declare
 * it here, list it in its table. */
#include <string.h>

#include "core/sched.h"

extern const sb_filter_def sb_filter_healthy, sb_filter_lora, sb_filter_saturation, sb_filter_labels, sb_filter_gate;
extern const sb_scorer_def sb_scorer_queue, sb_scorer_running, sb_scorer_kv_cache, sb_scorer_in_flight,
    sb_scorer_pending_prefill, sb_scorer_lora_affinity, sb_scorer_prefix, sb_scorer_prefix_tokens,
    sb_scorer_predicted_latency, sb_scorer_session, sb_scorer_prefix_hash, sb_scorer_sent_tokens, sb_scorer_slots,
    sb_scorer_cold_prefix, sb_scorer_lru, sb_scorer_kv_room;
extern const sb_picker_def sb_picker_max_score, sb_picker_weighted_random, sb_picker_p2c, sb_picker_softmax,
    sb_picker_round_robin;

static const sb_filter_def *const filters[] = {&sb_filter_healthy, &sb_filter_lora, &sb_filter_saturation,
                                               &sb_filter_labels,  &sb_filter_gate, NULL};
static const sb_scorer_def *const scorers[] = {&sb_scorer_queue,
                                               &sb_scorer_running,
                                               &sb_scorer_kv_cache,
                                               &sb_scorer_in_flight,
                                               &sb_scorer_pending_prefill,
                                               &sb_scorer_lora_affinity,
                                               &sb_scorer_prefix,
                                               &sb_scorer_prefix_tokens,
                                               &sb_scorer_predicted_latency,
                                               &sb_scorer_session,
                                               &sb_scorer_prefix_hash,
                                               &sb_scorer_sent_tokens,
                                               &sb_scorer_slots,
                                               &sb_scorer_cold_prefix,
                                               &sb_scorer_lru,
                                               &sb_scorer_kv_room,
                                               NULL};
static const sb_picker_def *const pickers[] = {&sb_picker_max_score, &sb_picker_weighted_random, &sb_picker_p2c,
                                               &sb_picker_softmax, &sb_picker_round_robin, NULL};

const sb_filter_def *const *sb_filters_all(void) { return filters; }
const sb_scorer_def *const *sb_scorers_all(void) { return scorers; }
const sb_picker_def *const *sb_pickers_all(void) { return pickers; }

const sb_filter_def *sb_filter_find(const char *name)
{
    for (size_t i = 0; filters[i]; i++)
        if (!strcmp(filters[i]->name, name))
            return filters[i];
    return NULL;
}

const sb_scorer_def *sb_scorer_find(const char *name)
{
    for (size_t i = 0; scorers[i]; i++)
        if (!strcmp(scorers[i]->name, name))
            return scorers[i];
    return NULL;
}

const sb_picker_def *sb_picker_find(const char *name)
{
    for (size_t i = 0; pickers[i]; i++)
        if (!strcmp(pickers[i]->name, name))
            return pickers[i];
    return NULL;
}

bool sb_profile_slots_gate(const sb_profile *p)
{
    for (size_t i = 0; p && i < p->n_scorers; i++)
        if (p->scorers[i].def == &sb_scorer_slots && p->scorers[i].weight > 0)
            return true;
    return false;
}

void sb_profile_init(sb_profile *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    strncpy(p->name, name, sizeof(p->name) - 1);
    p->picker = &sb_picker_max_score;
    p->queue_threshold = 5;   /* GIE saturation detector default queue depth */
    p->kv_threshold = 0.8;    /* GIE saturation detector default KV-cache utilisation */
    p->temperature = 0.1;
}

/* The built-in profiles as one constant table: nothing to initialise at run time and nothing
 * mutable, so any number of event loops may read it at once. BUILTIN fills the defaults that
 * sb_profile_init sets (the saturation filter's and softmax picker's parameters, the max-score
 * picker unless BUILTIN_PICKING names another). Keep the two in step. */
#define BUILTIN_PICKING(name_, picker_, ...)                                                                           \
    {                                                                                                                  \
        .name = name_, .picker = &(picker_), .queue_threshold = 5, .kv_threshold = 0.8, .temperature = 0.1,            \
        __VA_ARGS__                                                                                                    \
    }
#define BUILTIN(name_, ...) BUILTIN_PICKING(name_, sb_picker_max_score, __VA_ARGS__)
#define FILTERS(...)                                                                                                   \
    .filters = {__VA_ARGS__}, .n_filters = sizeof((const sb_filter_def *[]){__VA_ARGS__}) / sizeof(void *)
#define SCORERS(...)                                                                                                   \
    .scorers = {__VA_ARGS__}, .n_scorers = sizeof((sb_weighted_scorer[]){__VA_ARGS__}) / sizeof(sb_weighted_scorer)
#define W(s, w)                                                                                                        \
    {                                                                                                                  \
        &(s), (w)                                                                                                      \
    }

static const sb_profile builtins[] = {
    BUILTIN_PICKING("round-robin", sb_picker_round_robin, FILTERS(&sb_filter_healthy)),
    BUILTIN("least-request", FILTERS(&sb_filter_healthy), SCORERS(W(sb_scorer_in_flight, 1))),
    /* load-only: every distribution signal, no affinity. */
    BUILTIN("load-only", FILTERS(&sb_filter_healthy, &sb_filter_saturation),
            SCORERS(W(sb_scorer_queue, 2), W(sb_scorer_kv_cache, 2), W(sb_scorer_in_flight, 1),
                    W(sb_scorer_pending_prefill, 1))),
    /* default: what a pool gets when it names no profile. Its composition changes as the
     * project measures: this one was chosen over the routing matrix (bench/routing_matrix.py,
     * docs/benchmarks.md section 10: seven workloads x three cache sizes x three loads x one
     * and three gateways, against every peer's policy). Against the profile it replaced
     * (prefix 5, queue 2, kv-cache 2, in-flight 1, pending-prefill 1, lora-affinity 1 behind
     * healthy, lora and saturation filters):
     *   - the gate filter instead of saturation: stale endpoints still go for every request,
     *     and the saturation test still applies to what flow control's gate releases, but not
     *     to ordinary traffic: its KV threshold sent that away from the replicas holding its
     *     prefix as soon as a few long prompts filled their caches (the hit rate fell from 0.88
     *     to 0.80 with three gateways at a quarter cache), and its queue threshold cost more
     *     cells than it saved. Overload is flow control's job (core/flow.h);
     *   - sent-tokens 2: the uncached prompt tokens sent in the last seconds, the signal that
     *     balances prefill work where requests differ in length (no-sharing past capacity:
     *     p90 87 -> 80 ms; the best peer, sglang's, balances cumulative characters);
     *   - prefix 6 (was 5) and queue 1 (was 2): with sent-tokens beside it, the scraped queue
     *     is the least timely signal;
     *   - pending-prefill 3, in-flight 1.5, kv-cache 1 (session 28, were 2, 1, 2), with
     *     pending-prefill counting only the tokens still to compute (core/scorers/load.c):
     *     counting whole prompts made the replica holding many conversations look busy and
     *     moved 4.5% of follow-up turns off it, losing their cache (multi-turn, three gateways,
     *     p99 26 ms against sglang's 21). Over the 168 cells: WORSE 34 -> 24, p90 geomean
     *     against the best peer 0.975 -> 0.975, p99 1.004 -> 1.000.
     *   - kv-room 4 (session 29): where a replica's free KV cache cannot take the request's
     *     uncached prompt, its cached prefix is worth less than the wait or the preemptions it
     *     would cause. Shared-prefix at an eighth of the working set past capacity: p99 1,091 ->
     *     103 ms (llm-d-precise 102); over the 168 cells p99 geomean against the best peer
     *     0.986 -> 0.961, p90 0.962 -> 0.957, cells that change by over 3%: four.
     *   - hot_prefix 1 (session 38; core/hot_prefix.h and default-events below): a prefix all
     *     conversations share is spread over holders enough for its demand, planned for this
     *     router's share of the engines' traffic (the approximate index knows only the holders
     *     it made), and a follow-up's history outweighs the system prompt held elsewhere.
     *     Over the 168 cells against the best peer 15/140/13 -> 23/135/10 (better/level/WORSE),
     *     p90 geomean 0.956 -> 0.939, p99 0.965 -> 0.935; against the profile before it 21
     *     cells better, 2 worse (each within 0.2 ms of the seeds' spread).
     * The adaptive configurator is off by default (config: `adaptive: false`): over the matrix
     * it cost the shared-prefix and multi-turn cells more than it gained on the others. */
    BUILTIN("default", FILTERS(&sb_filter_healthy, &sb_filter_lora, &sb_filter_gate),
            SCORERS(W(sb_scorer_prefix, 6), W(sb_scorer_queue, 1), W(sb_scorer_kv_cache, 1),
                    W(sb_scorer_in_flight, 1.5), W(sb_scorer_pending_prefill, 3), W(sb_scorer_sent_tokens, 2),
                    W(sb_scorer_lora_affinity, 1), W(sb_scorer_kv_room, 4)),
            .hot_prefix = 1),
    /* default-events: `default` for a pool the engines' KV events feed (sb_profile_with_events:
     * a pool with `kv_events:` that names `default`, or no profile, routes with this one). The
     * precise index's matches are the engine's own, answers' blocks included, and never fall
     * short of the router's marks (fusion takes the longer), so the same prefix weight pulls
     * harder than on the approximate index: with events, `default`'s prefix 6 gathered
     * multi-turn conversations onto fewer replicas, worse than approximate `default` on 15
     * of the matrix's 16 events-WORSE cells (docs/benchmarks.md section 10, session 35).
     * Prefix 5 over the 168 cells: against approximate `default` 25/127/16 -> 28/128/12
     * (better/level/WORSE); against the best peer 20/130/18 -> 22/129/17, p90 geomean 0.926
     * -> 0.915, p99 0.941 -> 0.935.
     * hot_prefix 1 (session 36; core/hot_prefix.h): every gateway replica hears the events of
     * the one replica that first computed a system prompt all conversations share, and sent it
     * every new conversation (multi-turn at three gateways: all 800 requests of a run on one
     * replica of eight). A prefix asked for beyond its fair share of the pool now earns only
     * holders / needed of its credit until enough replicas hold it. Over the 168 cells, against
     * approximate `default` 28/128/12 -> 34/127/7 (better/level/WORSE); against
     * `default-events` before it 14 better, 1 worse; against the best peer 22/129/17 ->
     * 26/127/15, p90 geomean 0.915 -> 0.896, p99 0.935 -> 0.917. Session 37: an endpoint
     * whose match reaches past the hot run (a follow-up's own history) keeps its whole credit:
     * against the best peer 24/132/12, p99 geomean 0.911; against approximate 35/126/7.
     * Session 38: where one does, the run earns the others nothing; against the best peer
     * 24/132/12 (p90 0.896, p99 0.910). Approximate `default` now spreads hot prefixes too,
     * and beats this profile in 12 cells, 11 of them multi-turn at three gateways (docs/benchmarks.md
     * section 10, session 38). */
    BUILTIN("default-events", FILTERS(&sb_filter_healthy, &sb_filter_lora, &sb_filter_gate),
            SCORERS(W(sb_scorer_prefix, 5), W(sb_scorer_queue, 1), W(sb_scorer_kv_cache, 1),
                    W(sb_scorer_in_flight, 1.5), W(sb_scorer_pending_prefill, 3), W(sb_scorer_sent_tokens, 2),
                    W(sb_scorer_lora_affinity, 1), W(sb_scorer_kv_room, 4)),
            .hot_prefix = 1),
    /* prefix-only: prefix affinity alone (a reference point: it herds). */
    BUILTIN("prefix-only", FILTERS(&sb_filter_healthy), SCORERS(W(sb_scorer_prefix, 1))),
    /* session-hash, prefix-hash: the stateless policies (consistent hashing with bounded load,
     * as KubeAI's prefix hash). The hash scorer decides (10 against at most 1); in-flight only
     * breaks the tie among all candidates when a request has no key. */
    BUILTIN("session-hash", FILTERS(&sb_filter_healthy), SCORERS(W(sb_scorer_session, 10), W(sb_scorer_in_flight, 1))),
    BUILTIN("prefix-hash", FILTERS(&sb_filter_healthy),
            SCORERS(W(sb_scorer_prefix_hash, 10), W(sb_scorer_in_flight, 1))),
    /* paddler: Paddler's balancer for llama.cpp fleets. The replica with the most free slots
     * (slots 10; in-flight 1 only breaks ties among equals), and when no replica has a free
     * slot, requests wait in flow control's buffer (the slots gate, sb_profile_slots_gate)
     * with Paddler's defaults: 30 buffered, 10 s at most, 503 when the buffer is full, 504
     * when a request waited too long (paddler's --max-buffered-requests and
     * --buffered-request-timeout). */
    BUILTIN("paddler", FILTERS(&sb_filter_healthy), SCORERS(W(sb_scorer_slots, 10), W(sb_scorer_in_flight, 1)),
            .buffer_max_queued = 30, .buffer_max_wait_ms = 10000, .buffer_full_status = 503,
            .buffer_timeout_status = 504),
};

#undef BUILTIN
#undef BUILTIN_PICKING
#undef FILTERS
#undef SCORERS
#undef W

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])
static const char *const builtin_names[N_BUILTINS + 1] = {
    "round-robin", "least-request", "load-only",   "default", "default-events",
    "prefix-only", "session-hash",  "prefix-hash", "paddler", NULL};

const sb_profile *sb_profile_builtin(const char *name)
{
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (!strcmp(builtins[i].name, name))
            return &builtins[i];
    return NULL;
}

const char *const *sb_profile_builtin_names(void) { return builtin_names; }

const sb_profile *sb_profile_with_events(const sb_profile *p)
{
    const sb_profile *def = sb_profile_builtin("default");
    return p == def ? sb_profile_builtin("default-events") : p;
}
