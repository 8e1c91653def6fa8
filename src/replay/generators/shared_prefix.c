/* shared-prefix: G groups, each with its own P-token system prompt and U users; a request is
 * one user's Q-token question after its group's system prompt. A user's question is the same
 * every time it is asked (as in inference-perf's shared_prefix data generator, which cycles
 * over num_groups x num_prompts_per_group fixed prompts), so a request shares its group's
 * prefix with the group's other users and its whole prompt with its own earlier requests.
 * Defaults: llm-d's prefix-cache benchmark configuration of that generator, as issue 6 quotes
 * it (150 groups, 6,000-token system prompts, 5 prompts per group, 1,200-token questions,
 * 1,000 output tokens); scale down with k=v. Arrivals are Poisson; (group, user) is uniform. */
#include <errno.h>

#include "replay/workload.h"

enum { GROUPS, PREFIX, USERS, QUESTION, OUTPUT };

static const sb_replay_param params[] = {
    {"groups", 150, 1, 1e6, "groups, each with its own system prompt"},
    {"prefix", 6000, 0, 1e6, "system prompt tokens"},
    {"users", 5, 1, 1e6, "users (fixed questions) per group"},
    {"question", 1200, 1, 1e6, "question tokens"},
    {"output", 1000, 1, 1e6, "output tokens"},
    {NULL, 0, 0, 0, NULL},
};

static int generate(const double *v, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ULL + 1;
    uint64_t groups = (uint64_t)v[GROUPS], users = (uint64_t)v[USERS];
    double t = 0;
    for (uint64_t n = 0;; n++) {
        t += sb_replay_exp(&rng, 1e9 / o->rate);
        if (!sb_replay_gen_more(o, n, (sb_ns)t))
            break;
        uint64_t g = sb_replay_below(&rng, groups), u = sb_replay_below(&rng, users);
        uint64_t who = g * users + u;
        sb_replay_span s[2];
        uint32_t ns = 0;
        if (v[PREFIX] >= 1)
            s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_SHARED, g), (uint32_t)v[PREFIX]};
        s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_SHARED, 1ULL << 40 | who), (uint32_t)v[QUESTION]};
        sb_replay_request r = {.arrival_ns = (sb_ns)t,
                               .max_tokens = (uint32_t)v[OUTPUT],
                               .followup = SB_REPLAY_NO_REQUEST,
                               .session = who + 1};
        if (sb_replay_workload_add(w, &r, s, ns) < 0)
            return -ENOMEM;
    }
    return 0;
}

const sb_replay_generator sb_gen_shared_prefix = {
    .name = "shared-prefix",
    .summary = "G groups x P-token system prompt, U users with fixed Q-token questions (llm-d benchmark defaults)",
    .params = params,
    .generate = generate,
};
