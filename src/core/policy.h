/* policy: the registry of built-in scheduling profile names.
 *
 * A pool names its profile in config (`profile: round-robin`); the names here are valid
 * forever, because scripts and benchmarks use them. This core implements two
 * policies behind the router interface (core/router.h); the scheduling framework replaces
 * the implementation, never the names. */
#ifndef SB_CORE_POLICY_H
#define SB_CORE_POLICY_H

enum sb_policy_kind {
    SB_POLICY_ROUND_ROBIN = 0,
    SB_POLICY_LEAST_REQUEST,
    SB_POLICY_COUNT,
};

/* "default" is what a pool gets when it names none. */
#define SB_POLICY_DEFAULT_NAME "default"

/* Returns the policy for a built-in profile name ("round-robin", "least-request", "default"),
 * or -1 if the name is not built in. */
int sb_policy_find(const char *name);
const char *sb_policy_name(enum sb_policy_kind kind);

#endif
