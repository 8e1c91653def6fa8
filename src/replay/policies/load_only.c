/* load-only: the core's built-in profile "load-only" (core/plugins.c), run through sb_decide as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_load_only = {
    .name = "load-only",
    .summary = "the product's distribution scorers alone, no affinity (core/plugins.c)",
    .profile = "load-only",
};
