/* random: a uniformly random replica per request, the behaviour of a Kubernetes Service under
 * kube-proxy's iptables mode (each endpoint rule matched with equal probability). A custom
 * rule: the core has no picker that ignores every score. */
#include "replay/policy.h"

static int pick(void *state, const sb_replay_fleet_view *fleet, const sb_replay_request_view *req)
{
    (void)state;
    (void)req;
    return (int)(sb_rand_next(fleet->rng) % fleet->n_replicas);
}

static const sb_replay_custom_ops ops = {.pick = pick};

const sb_replay_policy_def sb_policy_random = {
    .name = "random",
    .summary = "uniformly random replica (Kubernetes Service, kube-proxy iptables mode)",
    .custom = &ops,
};
