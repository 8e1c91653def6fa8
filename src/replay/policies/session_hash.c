/* session-hash: the core's built-in profile "session-hash" (core/plugins.c), run through
 * sb_decide as `switchboard serve` runs it: consistent hashing with bounded load on the
 * session key (core/chash.h: 256 points per endpoint, load factor 1.25 on the router's own
 * in-flight counts; Mirrokni, Thorup and Zadimoghaddam 2018; HAProxy hash-balance-factor 125).
 * In replay the session key is the workload's conversation or user (docs/replay.md). */
#include "replay/policy.h"

const sb_replay_policy_def sb_policy_session_hash = {
    .name = "session-hash",
    .summary = "consistent hash of the session key with bounded load 1.25, 256 vnodes (core/chash.h; "
               "Mirrokni et al. 2018, HAProxy hash-balance-factor)",
    .profile = "session-hash",
};
