/* policy: the registry of replay policies. Adding one: write it in its own file under
 * policies/, declare it here, list it in the table (the order is --list's and `all`'s). */
#include "replay/policy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern const sb_replay_policy_def sb_policy_round_robin, sb_policy_random, sb_policy_least_request, sb_policy_p2c,
    sb_policy_default, sb_policy_load_only;

static const sb_replay_policy_def *const policies[] = {
    &sb_policy_round_robin, &sb_policy_random,  &sb_policy_least_request,
    &sb_policy_p2c,         &sb_policy_default, &sb_policy_load_only,
    NULL,
};

const sb_replay_policy_def *const *sb_replay_policies_all(void) { return policies; }

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
        return 0;
    }
    if (d && d->custom) {
        out->custom = d->custom;
        return 0;
    }
    for (size_t i = 0; i < n_user; i++)
        if (!strcmp(user[i].name, name)) {
            out->profile = &user[i];
            return 0;
        }
    return -ENOENT;
}
