/* generators: the registry of workload generators and running one with "k=v" parameters.
 * Adding a generator: write it in its own file under generators/, declare it here, list it in
 * the table. Apart from workload.c so that the generators (which use workload.c's helpers) and
 * the registry (which names them) do not call each other in a circle. */
#include "replay/generators.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const sb_replay_generator sb_gen_shared_prefix, sb_gen_multi_turn, sb_gen_hot_prefix, sb_gen_no_sharing,
    sb_gen_lora_mix;

static const sb_replay_generator *const generators[] = {&sb_gen_shared_prefix, &sb_gen_multi_turn, &sb_gen_hot_prefix,
                                                        &sb_gen_no_sharing,    &sb_gen_lora_mix,   NULL};

const sb_replay_generator *const *sb_replay_generators_all(void)
{
    return generators;
}

const sb_replay_generator *sb_replay_generator_find(const char *name)
{
    for (size_t i = 0; generators[i]; i++)
        if (!strcmp(generators[i]->name, name))
            return generators[i];
    return NULL;
}

static int set_param(const sb_replay_generator *g, double *values, const char *kv, char *err, size_t errcap)
{
    const char *eq = strchr(kv, '=');
    size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
    for (size_t i = 0; g->params[i].name; i++) {
        const sb_replay_param *p = &g->params[i];
        if (strlen(p->name) != klen || strncmp(p->name, kv, klen))
            continue;
        char *end;
        double v = eq ? strtod(eq + 1, &end) : NAN;
        if (!eq || end == eq + 1 || *end || !isfinite(v) || v < p->min || v > p->max) {
            snprintf(err, errcap, "workload %s: %s wants a number in [%g, %g], got '%s'", g->name, p->name, p->min,
                     p->max, eq ? eq + 1 : "");
            return -EINVAL;
        }
        values[i] = v;
        return 0;
    }
    snprintf(err, errcap, "workload %s: unknown parameter '%.*s' (see switchboard replay --list)", g->name, (int)klen,
             kv);
    return -EINVAL;
}

int sb_replay_generate(const sb_replay_generator *g, const char *const *kv, size_t n_kv, const sb_replay_gen_opts *o,
                       sb_replay_workload *w, char *err, size_t errcap)
{
    double values[SB_REPLAY_MAX_PARAMS];
    size_t np = 0;
    for (; g->params[np].name && np < SB_REPLAY_MAX_PARAMS; np++)
        values[np] = g->params[np].def;
    for (size_t i = 0; i < n_kv; i++) {
        int rc = set_param(g, values, kv[i], err, errcap);
        if (rc < 0)
            return rc;
    }
    if (!(o->rate > 0) || !isfinite(o->rate)) {
        snprintf(err, errcap, "workload %s: the rate must be a positive number", g->name);
        return -EINVAL;
    }
    if (!o->requests && !o->duration_ns) {
        snprintf(err, errcap, "workload %s: give a number of requests or a duration", g->name);
        return -EINVAL;
    }
    *w = (sb_replay_workload){0};
    int rc = g->generate(values, o, w, err, errcap);
    if (rc < 0) {
        if (rc == -ENOMEM)
            snprintf(err, errcap, "workload %s: out of memory", g->name);
        sb_replay_workload_free(w);
        return rc;
    }
    w->rate = o->rate;
    snprintf(w->name, sizeof(w->name), "%s", g->name);
    return 0;
}
