/* generators: the registry of workload generators (one file each under replay/generators/) and
 * running one by name with "k=v" parameters. The generator type is in replay/workload.h. */
#ifndef SB_REPLAY_GENERATORS_H
#define SB_REPLAY_GENERATORS_H

#include <stddef.h>

#include "replay/workload.h"

/* The registry (NULL-terminated), and look-up by name (NULL if unknown). */
const sb_replay_generator *const *sb_replay_generators_all(void);
const sb_replay_generator *sb_replay_generator_find(const char *name);

/* Runs generator g with its defaults overridden by "k=v" strings. Returns 0; -EINVAL with a
 * message in err for an unknown key, a malformed or out-of-range value, or a generator error;
 * -ENOMEM. On failure *w is empty. One of o->requests and o->duration_ns must be set. */
int sb_replay_generate(const sb_replay_generator *g, const char *const *kv, size_t n_kv, const sb_replay_gen_opts *o,
                       sb_replay_workload *w, char *err, size_t errcap);

#endif
