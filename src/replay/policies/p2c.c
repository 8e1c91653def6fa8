/* p2c: power of two choices on requests in flight. Two distinct replicas drawn at random, the
 * one with fewer requests in flight from the gateway wins (Mitzenmacher, "The Power of Two
 * Choices in Randomized Load Balancing", 2001; Envoy's least_request with choice_count 2).
 * Assembled from core plug-ins: healthy filter, in-flight scorer, p2c picker. */
#include "replay/policy.h"

static void build(sb_profile *p)
{
    sb_profile_init(p, "p2c");
    p->filters[p->n_filters++] = sb_filter_find("healthy");
    p->scorers[p->n_scorers++] = (sb_weighted_scorer){sb_scorer_find("in-flight"), 1.0};
    p->picker = sb_picker_find("p2c");
}

const sb_replay_policy_def sb_policy_p2c = {
    .name = "p2c",
    .summary = "power of two choices on in-flight requests (Mitzenmacher 2001; Envoy least_request, 2 choices)",
    .build = build,
};
