/* labels filter: keeps endpoints whose labels match every key=value of the profile's
 * selector. Hard: a selector that matches nothing leaves nothing (a configuration error
 * should be visible, not silently ignored). */
#include <string.h>

#include "core/sched.h"

static bool matches(const sb_endpoint *ep, const char *key, const char *value)
{
    for (size_t i = 0; i < ep->n_labels; i++)
        if (!strcmp(ep->label_keys[i], key))
            return !strcmp(ep->label_values[i], value);
    return false;
}

static void run(const sb_sched_ctx *ctx, const sb_sched_request *req, sb_candidate *c, size_t n)
{
    (void)req;
    const sb_profile *p = ctx->profile;
    for (size_t i = 0; i < n; i++) {
        if (c[i].removed_by)
            continue;
        for (size_t k = 0; k < p->n_labels; k++)
            if (!matches(c[i].ep, p->label_keys[k], p->label_values[k])) {
                c[i].removed_by = "labels";
                break;
            }
    }
}

const sb_filter_def sb_filter_labels = {.name = "labels", .soft = false, .run = run};
