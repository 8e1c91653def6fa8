/* round-robin: the core's built-in profile "round-robin" (core/plugins.c), run through sb_decide as
 * `switchboard serve` runs it. */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_round_robin = {
    .name = "round-robin",
    .summary = "rotation over healthy replicas (Kubernetes Service, kube-proxy IPVS rr mode)",
    .profile = "round-robin",
};
