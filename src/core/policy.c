#include "core/policy.h"

#include <stddef.h>
#include <string.h>

/* One row per accepted name. Several names may map to one kind ("default" is an alias whose
 * target may change), so the table is keyed by name, not by kind. */
static const struct {
    const char *name;
    enum sb_policy_kind kind;
} registry[] = {
    {"round-robin", SB_POLICY_ROUND_ROBIN},
    {"least-request", SB_POLICY_LEAST_REQUEST},
    /* Least-request until the scheduling framework ships a tuned default profile. */
    {SB_POLICY_DEFAULT_NAME, SB_POLICY_LEAST_REQUEST},
};

int sb_policy_find(const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i].name, name) == 0)
            return (int)registry[i].kind;
    return -1;
}

const char *sb_policy_name(enum sb_policy_kind kind)
{
    /* The canonical name is the first row for the kind, never the "default" alias. */
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (registry[i].kind == kind)
            return registry[i].name;
    return NULL;
}
