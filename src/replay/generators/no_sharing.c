/* no-sharing: unique prompts, nothing for a cache to reuse: the control case where prefix
 * affinity can only cost (it must not herd) and pure load balancing should win. Prompt lengths
 * are uniform in prompt * [1 - spread, 1 + spread]. */
#include <errno.h>

#include "core/sched.h"
#include "replay/workload.h"

enum { PROMPT, SPREAD, OUTPUT };

static const sb_replay_param params[] = {
    {"prompt", 2000, 1, 1e6, "mean prompt tokens"},
    {"spread", 0.5, 0, 0.99, "prompt lengths uniform in prompt*(1 +- spread)"},
    {"output", 200, 1, 1e6, "output tokens"},
    {NULL, 0, 0, 0, NULL},
};

static int generate(const double *v, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ULL + 4;
    double t = 0;
    for (uint64_t n = 0;; n++) {
        t += sb_replay_exp(&rng, 1e9 / o->rate);
        if (!sb_replay_gen_more(o, n, (sb_ns)t))
            break;
        double len = v[PROMPT] * (1 - v[SPREAD] + 2 * v[SPREAD] * sb_rand_unit(&rng));
        sb_replay_span s = {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, n), len < 1 ? 1 : (uint32_t)len};
        sb_replay_request r = {
            .arrival_ns = (sb_ns)t, .max_tokens = (uint32_t)v[OUTPUT], .followup = SB_REPLAY_NO_REQUEST};
        if (sb_replay_workload_add(w, &r, &s, 1) < 0)
            return -ENOMEM;
    }
    return 0;
}

const sb_replay_generator sb_gen_no_sharing = {
    .name = "no-sharing",
    .summary = "unique prompts: nothing to reuse (the control case)",
    .params = params,
    .generate = generate,
};
