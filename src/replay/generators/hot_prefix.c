/* hot-prefix: the thundering herd. Every request carries one long system prompt, shared by all,
 * then a unique question; the first `burst` requests arrive together (uniformly within
 * burst_ms), the rest as a Poisson process at the rate. A policy that follows the prefix blindly
 * piles the herd onto one replica; one that ignores it computes the prefix everywhere. */
#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "core/sched.h"
#include "replay/workload.h"

enum { PREFIX, QUESTION, OUTPUT, BURST, BURST_MS };

static const sb_replay_param params[] = {
    {"prefix", 8000, 1, 1e6, "shared system prompt tokens"},
    {"question", 200, 1, 1e6, "unique question tokens"},
    {"output", 200, 1, 1e6, "output tokens"},
    {"burst", 64, 0, 1e7, "requests arriving together at the start"},
    {"burst_ms", 100, 0, 3.6e6, "window the burst arrives in, ms"},
    {NULL, 0, 0, 0, NULL},
};

static int cmp_ns(const void *a, const void *b)
{
    sb_ns x = *(const sb_ns *)a, y = *(const sb_ns *)b;
    return x < y ? -1 : x > y;
}

static int generate(const double *v, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ULL + 3;
    uint64_t burst = (uint64_t)v[BURST];
    if (o->requests && burst > o->requests)
        burst = o->requests;
    sb_ns *herd = sb_malloc((burst ? burst : 1) * sizeof(*herd));
    if (!herd)
        return -ENOMEM;
    for (uint64_t i = 0; i < burst; i++)
        herd[i] = (sb_ns)(sb_rand_unit(&rng) * v[BURST_MS] * 1e6);
    qsort(herd, burst, sizeof(*herd), cmp_ns);
    double t = burst ? (double)herd[burst - 1] : 0;
    int rc = 0;
    for (uint64_t n = 0;; n++) {
        sb_ns at;
        if (n < burst) {
            at = herd[n];
            if (o->duration_ns && at >= o->duration_ns)
                break;
        } else {
            t += sb_replay_exp(&rng, 1e9 / o->rate);
            if (!sb_replay_gen_more(o, n, (sb_ns)t))
                break;
            at = (sb_ns)t;
        }
        sb_replay_span s[2] = {
            {sb_replay_span_id(SB_REPLAY_NS_SHARED, 3ULL << 40), (uint32_t)v[PREFIX]},
            {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, n), (uint32_t)v[QUESTION]},
        };
        sb_replay_request r = {.arrival_ns = at, .max_tokens = (uint32_t)v[OUTPUT], .followup = SB_REPLAY_NO_REQUEST};
        if (sb_replay_workload_add(w, &r, s, 2) < 0) {
            rc = -ENOMEM;
            break;
        }
    }
    sb_free(herd);
    return rc;
}

const sb_replay_generator sb_gen_hot_prefix = {
    .name = "hot-prefix",
    .summary = "one long shared system prompt, the first requests arriving as a burst (thundering herd)",
    .params = params,
    .generate = generate,
};
