/* least-request: the core's built-in profile "least-request" (core/plugins.c), run through sb_decide as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_least_request = {
    .name = "least-request",
    .summary = "fewest requests in flight from the gateway's own accounting (the core's least-request profile)",
    .profile = "least-request",
};
