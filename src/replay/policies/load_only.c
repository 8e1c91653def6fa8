/* load-only: the core's built-in profile "load-only" (core/plugins.c), run through sb_router_pick as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_load_only = {
    .name = "load-only",
    .summary = "distribution scorers alone (queue, KV, in-flight, pending prefill): the product's load-only reference profile",
    .profile = "load-only",
};
