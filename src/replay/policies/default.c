/* default: the core's built-in profile "default" (core/plugins.c), run through sb_decide as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_default = {
    .name = "default",
    .summary = "the product's default profile: what serve runs when a pool names none (core/plugins.c)",
    .profile = "default",
};
