/* lora-mix: requests for several LoRA adapters with Zipf popularity (adapter k, 1-based, drawn
 * with weight 1 / k^s), each adapter with its own system prompt, then a unique question. With
 * more adapters than an engine's max_loras (4 by default), replicas must swap adapters unless
 * the router keeps each adapter on a few replicas. */
#include <errno.h>
#include <math.h>

#include "base/alloc.h"
#include "core/sched.h"
#include "replay/workload.h"

enum { ADAPTERS, ZIPF, SYSTEM, QUESTION, OUTPUT };

static const sb_replay_param params[] = {
    {"adapters", 8, 1, 64, "LoRA adapters (at most 64: the router's adapter masks)"},
    {"zipf", 1.0, 0, 10, "Zipf exponent of adapter popularity (0 = uniform)"},
    {"system", 500, 0, 1e6, "per-adapter system prompt tokens"},
    {"question", 500, 1, 1e6, "unique question tokens"},
    {"output", 200, 1, 1e6, "output tokens"},
    {NULL, 0, 0, 0, NULL},
};

static int generate(const double *v, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ULL + 5;
    uint32_t k = (uint32_t)v[ADAPTERS];
    double *cdf = sb_malloc(k * sizeof(*cdf)), sum = 0;
    if (!cdf)
        return -ENOMEM;
    for (uint32_t i = 0; i < k; i++)
        cdf[i] = sum += pow(i + 1, -v[ZIPF]);
    int rc = 0;
    double t = 0;
    for (uint64_t n = 0;; n++) {
        t += sb_replay_exp(&rng, 1e9 / o->rate);
        if (!sb_replay_gen_more(o, n, (sb_ns)t))
            break;
        double u = sb_rand_unit(&rng) * sum;
        uint32_t lo = 0, hi = k - 1;
        while (lo < hi) { /* first adapter whose cumulative weight exceeds u */
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        sb_replay_span s[2];
        uint32_t ns = 0;
        if (v[SYSTEM] >= 1)
            s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_SHARED, 5ULL << 40 | lo), (uint32_t)v[SYSTEM]};
        s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_UNIQUE, n), (uint32_t)v[QUESTION]};
        sb_replay_request r = {.arrival_ns = (sb_ns)t,
                               .max_tokens = (uint32_t)v[OUTPUT],
                               .adapter = lo + 1,
                               .followup = SB_REPLAY_NO_REQUEST};
        if (sb_replay_workload_add(w, &r, s, ns) < 0) {
            rc = -ENOMEM;
            break;
        }
    }
    sb_free(cdf);
    w->n_adapters = k; /* even those never drawn: the fleet serves them all */
    return rc;
}

const sb_replay_generator sb_gen_lora_mix = {
    .name = "lora-mix",
    .summary = "several LoRA adapters with Zipf popularity, a system prompt per adapter",
    .params = params,
    .generate = generate,
};
