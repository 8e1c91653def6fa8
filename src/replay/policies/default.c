/* default: the core's built-in profile "default" (core/plugins.c), run through sb_router_pick as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_default = {
    .name = "default",
    .summary = "the product's default profile: saturation and LoRA filters, queue 2 + KV 2 (GIE's weights) + in-flight + pending prefill + LoRA affinity",
    .profile = "default",
};
