/* policy: the registry of replay policies. Adding one: write it in its own file under
 * policies/, declare it here, list it in the table (the order is --list's and `all`'s). */
#include "replay/policy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern const sb_replay_policy_def sb_policy_round_robin, sb_policy_random, sb_policy_least_request, sb_policy_p2c,
    sb_policy_default, sb_policy_load_only;
/* Reference policies reproducing peers (issue 6), each citing its source in its file. */
extern const sb_replay_policy_def sb_policy_session_hash, sb_policy_kubeai_chwbl, sb_policy_sglang_cache_aware,
    sb_policy_sglang_cache_aware_rust, sb_policy_gie_default, sb_policy_production_stack_prefix,
    sb_policy_aibrix_prefix, sb_policy_dynamo_kv, sb_policy_min_predicted_ttft;
/* Issue 13: llm-d's 2026 default and its precise (KV-event-fed) profile. */
extern const sb_replay_policy_def sb_policy_llm_d_sticky, sb_policy_llm_d_precise;

static const sb_replay_policy_def *const policies[] = {
    &sb_policy_round_robin,
    &sb_policy_random,
    &sb_policy_least_request,
    &sb_policy_p2c,
    &sb_policy_default,
    &sb_policy_load_only,
    &sb_policy_session_hash,
    &sb_policy_kubeai_chwbl,
    &sb_policy_sglang_cache_aware,
    &sb_policy_sglang_cache_aware_rust,
    &sb_policy_gie_default,
    &sb_policy_production_stack_prefix,
    &sb_policy_aibrix_prefix,
    &sb_policy_dynamo_kv,
    &sb_policy_min_predicted_ttft,
    &sb_policy_llm_d_sticky,
    &sb_policy_llm_d_precise,
    NULL,
};

const sb_replay_policy_def *const *sb_replay_policies_all(void)
{
    return policies;
}

const sb_replay_policy_def *sb_replay_policy_find(const char *name)
{
    for (size_t i = 0; policies[i]; i++)
        if (!strcmp(policies[i]->name, name))
            return policies[i];
    return NULL;
}

int sb_replay_policy_resolve(const char *name, const sb_profile *user, size_t n_user, sb_replay_policy *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", name);
    const sb_replay_policy_def *d = sb_replay_policy_find(name);
    if (d && d->profile) {
        out->profile = sb_profile_builtin(d->profile);
        return out->profile ? 0 : -ENOENT;
    }
    if (d && d->build) {
        d->build(&out->built);
        out->profile = &out->built;
        out->peer = true;
        return 0;
    }
    if (d && d->custom) {
        out->custom = d->custom;
        out->peer = true;
        return 0;
    }
    if ((out->profile = sb_profile_builtin(name)))
        return 0;
    for (size_t i = 0; i < n_user; i++)
        if (!strcmp(user[i].name, name)) {
            out->profile = &user[i];
            return 0;
        }
    return -ENOENT;
}

static bool listed(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

size_t sb_replay_policy_names(const sb_profile *user, size_t n_user, const char **out, size_t cap)
{
    /* Quadratic in the number of names: a few dozen at most. */
    const char *seen[256];
    size_t n = 0, total = 0;
    const char *const *core = sb_profile_builtin_names();
    size_t n_core = 0;
    while (core[n_core])
        n_core++;
    for (size_t pass = 0; pass < 3; pass++) {
        size_t m = pass == 0 ? SIZE_MAX : pass == 1 ? n_core : n_user;
        for (size_t i = 0; i < m; i++) {
            const char *name = pass == 0   ? (policies[i] ? policies[i]->name : NULL)
                               : pass == 1 ? core[i]
                                           : user[i].name;
            if (!name)
                break;
            /* Slot-gated profiles (paddler) need llama.cpp slot reports, which replay's
             * engines do not give: in replay they would pick at random. Named, they still run. */
            if (pass == 1 && sb_profile_slots_gate(sb_profile_builtin(name)))
                continue;
            /* default-events is what `default` becomes with KV events (`default+events` runs
             * it); without them no gateway routes with it unless named. Named, it runs. */
            if (pass == 1 && sb_profile_with_events(sb_profile_builtin("default")) == sb_profile_builtin(name))
                continue;
            if (listed(seen, n, name))
                continue;
            if (n < sizeof(seen) / sizeof(seen[0]))
                seen[n++] = name;
            if (total < cap)
                out[total] = name;
            total++;
        }
    }
    return total;
}
