/* plugins: the one registry of filters, scorers and pickers, and the built-in profiles.
 * Adding a plug-in: write it in its own file under filters/, scorers/ or pickers/, declare
 * it here, list it in its table. */
#include <string.h>

#include "core/sched.h"

extern const sb_filter_def sb_filter_healthy, sb_filter_lora, sb_filter_saturation, sb_filter_labels;
extern const sb_scorer_def sb_scorer_queue, sb_scorer_running, sb_scorer_kv_cache, sb_scorer_in_flight,
    sb_scorer_pending_prefill, sb_scorer_lora_affinity, sb_scorer_prefix, sb_scorer_prefix_tokens,
    sb_scorer_predicted_latency, sb_scorer_session, sb_scorer_prefix_hash;
extern const sb_picker_def sb_picker_max_score, sb_picker_weighted_random, sb_picker_p2c, sb_picker_softmax,
    sb_picker_round_robin;

static const sb_filter_def *const filters[] = {&sb_filter_healthy, &sb_filter_lora, &sb_filter_saturation,
                                               &sb_filter_labels, NULL};
static const sb_scorer_def *const scorers[] = {&sb_scorer_queue,     &sb_scorer_running,
                                               &sb_scorer_kv_cache,  &sb_scorer_in_flight,
                                               &sb_scorer_pending_prefill, &sb_scorer_lora_affinity,
                                               &sb_scorer_prefix,    &sb_scorer_prefix_tokens,
                                               &sb_scorer_predicted_latency, &sb_scorer_session,
                                               &sb_scorer_prefix_hash, NULL};
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

void sb_profile_init(sb_profile *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    strncpy(p->name, name, sizeof(p->name) - 1);
    p->picker = &sb_picker_max_score;
    p->queue_threshold = 5;   /* GIE saturation detector default queue depth */
    p->kv_threshold = 0.8;    /* GIE saturation detector default KV-cache utilisation */
    p->temperature = 0.1;
}

/* The built-in profiles: filled once on the first lookup (configuration load, before any loop
 * runs) and immutable afterwards; every loop reads the same constant profiles. */
static sb_profile builtins[7];
static const char *const builtin_names[] = {"round-robin", "least-request", "load-only", "default", "prefix-only",
                                            "session-hash", "prefix-hash", NULL};

static void add_scorer(sb_profile *p, const sb_scorer_def *s, double w)
{
    p->scorers[p->n_scorers++] = (sb_weighted_scorer){s, w};
}

static void init_builtins(void)
{
    static bool ready;
    if (ready)
        return;
    ready = true;
    sb_profile *p = &builtins[0];
    sb_profile_init(p, "round-robin");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    p->picker = &sb_picker_round_robin;

    p = &builtins[1];
    sb_profile_init(p, "least-request");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    add_scorer(p, &sb_scorer_in_flight, 1);

    /* load-only: every distribution signal, no affinity. */
    p = &builtins[2];
    sb_profile_init(p, "load-only");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    p->filters[p->n_filters++] = &sb_filter_saturation;
    add_scorer(p, &sb_scorer_queue, 2);
    add_scorer(p, &sb_scorer_kv_cache, 2);
    add_scorer(p, &sb_scorer_in_flight, 1);
    add_scorer(p, &sb_scorer_pending_prefill, 1);

    /* default: what a pool gets when it names no profile. Its composition changes as the
     * project measures (docs/benchmarks.md). Load weights start from GIE's default (queue 2,
     * KV 2) plus our own accounting, which is never stale. Prefix 5 (GIE has 3) is chosen for
     * the adaptive configurator, on by default, which starts from these weights and moves
     * weight to distribution when the pool becomes uneven: with that guard a balanced pool
     * can afford more affinity than a static profile can (replay sweep, docs/benchmarks.md
     * section 2: statically prefix 3 is better on shared-prefix and 5 on multi-turn; with
     * the configurator, prefix 5 is within 3% of the best static weight on each). A holder
     * still yields once a queue forms there and not elsewhere and it is busier
     * (5 + 0 < 2 + 2 + 1 + 1). */
    p = &builtins[3];
    sb_profile_init(p, "default");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    p->filters[p->n_filters++] = &sb_filter_lora;
    p->filters[p->n_filters++] = &sb_filter_saturation;
    add_scorer(p, &sb_scorer_prefix, 5);
    add_scorer(p, &sb_scorer_queue, 2);
    add_scorer(p, &sb_scorer_kv_cache, 2);
    add_scorer(p, &sb_scorer_in_flight, 1);
    add_scorer(p, &sb_scorer_pending_prefill, 1);
    add_scorer(p, &sb_scorer_lora_affinity, 1);

    /* prefix-only: prefix affinity alone (a reference point: it herds). */
    p = &builtins[4];
    sb_profile_init(p, "prefix-only");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    add_scorer(p, &sb_scorer_prefix, 1);

    /* session-hash, prefix-hash: the stateless policies (consistent hashing with bounded load,
     * as KubeAI's prefix hash). The hash scorer decides (10 against at most 1); in-flight only
     * breaks the tie among all candidates when a request has no key. */
    p = &builtins[5];
    sb_profile_init(p, "session-hash");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    add_scorer(p, &sb_scorer_session, 10);
    add_scorer(p, &sb_scorer_in_flight, 1);

    p = &builtins[6];
    sb_profile_init(p, "prefix-hash");
    p->filters[p->n_filters++] = &sb_filter_healthy;
    add_scorer(p, &sb_scorer_prefix_hash, 10);
    add_scorer(p, &sb_scorer_in_flight, 1);
}

const sb_profile *sb_profile_builtin(const char *name)
{
    init_builtins();
    for (size_t i = 0; builtin_names[i]; i++)
        if (!strcmp(builtin_names[i], name))
            return &builtins[i];
    return NULL;
}

const char *const *sb_profile_builtin_names(void) { return builtin_names; }
