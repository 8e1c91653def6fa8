/* profiles: named compositions of filters, scorers and a picker, checked against the registry. */
#include "core/flow.h"

#include <arpa/inet.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/alloc.h"

#include "proto/config_internal.h"

/* ---- profiles ---- */

/* Joins the names of a NULL-terminated registry table ("healthy, lora, ...") for messages.
 * Every plug-in definition starts with its name, so a pointer to one is a pointer to that. */
static const char *known_names(const void *const *defs, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; defs[i] && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", *(const char *const *)defs[i]);
        used = w < 0 ? cap : used + (size_t)w;
    }
    return buf;
}

static void parse_profile_filters(parse *p, sb_profile *prof, const yaml_node_t *seq, const char *what)
{
    char item[240], known[160];
    if (seq->type != YAML_SEQUENCE_NODE) {
        if (!cfg_is_null(seq))
            cfg_node_error(p, seq, "%s must be a list, got %s", what, cfg_type_name(seq));
        return;
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > SB_MAX_FILTERS) {
        cfg_node_error(p, seq, "%s: at most %d filters, got %zu", what, SB_MAX_FILTERS, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *v = cfg_node_at(p, seq->data.sequence.items.start[i]);
        snprintf(item, sizeof item, "%s[%zu]", what, i);
        const char *name = cfg_string_of(p, v, item);
        if (!name)
            continue;
        const sb_filter_def *f = sb_filter_find(name);
        bool dup = false;
        for (size_t j = 0; f && j < prof->n_filters && !dup; j++)
            dup = prof->filters[j] == f;
        if (!f)
            cfg_node_error(p, v, "%s: unknown filter '%s' (known: %s)", item, name,
                           known_names((const void *const *)sb_filters_all(), known, sizeof known));
        else if (dup)
            cfg_node_error(p, v, "%s: filter '%s' is listed twice", item, name);
        else
            prof->filters[prof->n_filters++] = f;
    }
}

static void parse_profile_scorers(parse *p, sb_profile *prof, const yaml_node_t *map, const char *what)
{
    char item[240], known[160];
    if (!cfg_want_mapping(p, map, what))
        return;
    if (cfg_mapping_len(map) > SB_MAX_SCORERS) {
        cfg_node_error(p, map, "%s: at most %d scorers, got %zu", what, SB_MAX_SCORERS, cfg_mapping_len(map));
        return;
    }
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *name = cfg_pair_key(p, map, q, what);
        if (!name)
            continue;
        const sb_scorer_def *def = sb_scorer_find(name);
        snprintf(item, sizeof item, "%s.%s", what, name);
        double weight;
        if (!def)
            cfg_node_error(p, cfg_node_at(p, q->key), "%s: unknown scorer '%s' (known: %s)", what, name,
                           known_names((const void *const *)sb_scorers_all(), known, sizeof known));
        else if (cfg_number_of(p, cfg_node_at(p, q->value), item, 0, false, INFINITY, &weight))
            prof->scorers[prof->n_scorers++] = (sb_weighted_scorer){def, weight};
    }
}

/* Fills prof (already sb_profile_init'ed with its name) from its mapping. */
static void parse_profile(parse *p, sb_profile *prof, const yaml_node_t *map, const char *what)
{
    char sub[200], known[160];
    const yaml_node_t *filters = NULL, *labels = NULL, *hot = NULL;
    bool labels_ok = true;
    if (!cfg_want_mapping(p, map, what))
        return;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *key = cfg_pair_key(p, map, q, what);
        if (!key)
            continue;
        const yaml_node_t *v = cfg_node_at(p, q->value);
        snprintf(sub, sizeof sub, "%s: %s", what, key);
        if (!strcmp(key, "filters")) {
            filters = v;
            parse_profile_filters(p, prof, v, sub);
        } else if (!strcmp(key, "scorers")) {
            parse_profile_scorers(p, prof, v, sub);
        } else if (!strcmp(key, "picker")) {
            const char *name = cfg_string_of(p, v, sub);
            const sb_picker_def *def = name ? sb_picker_find(name) : NULL;
            if (name && !def)
                cfg_node_error(p, v, "%s: unknown picker '%s' (known: %s)", what, name,
                               known_names((const void *const *)sb_pickers_all(), known, sizeof known));
            else if (def)
                prof->picker = def;
        } else if (!strcmp(key, "temperature")) {
            cfg_number_of(p, v, sub, 0, true, INFINITY, &prof->temperature);
        } else if (!strcmp(key, "hot_prefix")) {
            cfg_number_of(p, v, sub, 0, false, 1000, &prof->hot_prefix);
            hot = v;
        } else if (!strcmp(key, "queue_threshold")) {
            cfg_number_of(p, v, sub, 0, false, INFINITY, &prof->queue_threshold);
        } else if (!strcmp(key, "kv_threshold")) {
            cfg_number_of(p, v, sub, 0, false, 1, &prof->kv_threshold);
        } else if (!strcmp(key, "labels")) {
            enum { MAX = ARRAY_LEN(prof->label_keys) };
            char *keys[MAX], *values[MAX];
            size_t before = p->errs->total;
            size_t n = cfg_parse_labels(p, v, sub, MAX, keys, values);
            labels = cfg_node_at(p, q->key);
            labels_ok = p->errs->total == before;
            for (size_t i = 0; i < n; i++) {
                prof->label_keys[i] = keys[i];
                prof->label_values[i] = values[i];
            }
            prof->n_labels = n;
        } else {
            cfg_node_error(p, cfg_node_at(p, q->key), "unknown key '%s' in %s", key, what);
        }
    }
    /* Labels and the labels filter only make sense together: either alone is a no-op, most
     * likely a forgotten half. */
    bool has_labels_filter = false;
    for (size_t i = 0; i < prof->n_filters; i++)
        has_labels_filter |= !strcmp(prof->filters[i]->name, "labels");
    if (labels && prof->n_labels > 0 && !has_labels_filter)
        cfg_node_error(p, labels, "%s: labels take effect only with the 'labels' filter in filters", what);
    else if (has_labels_filter && prof->n_labels == 0 && labels_ok)
        cfg_node_error(p, filters, "%s: the 'labels' filter needs labels to select by", what);
    /* hot_prefix discounts the prefix scorer's credit: without that scorer it does nothing. */
    bool has_prefix = false;
    for (size_t i = 0; i < prof->n_scorers; i++)
        has_prefix |= !strcmp(prof->scorers[i].def->name, "prefix");
    if (hot && prof->hot_prefix > 0 && !has_prefix)
        cfg_node_error(p, hot, "%s: hot_prefix takes effect only with the 'prefix' scorer in scorers", what);
}

void cfg_parse_profiles(parse *p, const yaml_node_t *map)
{
    sb_config *cfg = p->cfg;
    if (!cfg_want_mapping(p, map, "profiles") || cfg_mapping_len(map) == 0)
        return;
    if (!(cfg->profiles = sb_calloc(cfg_mapping_len(map), sizeof *cfg->profiles))) {
        cfg_out_of_memory(p);
        return;
    }
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < map->data.mapping.pairs.top; q++) {
        const char *name = cfg_pair_key(p, map, q, "profiles");
        if (!name)
            continue;
        const yaml_node_t *k = cfg_node_at(p, q->key);
        if (!*name || !cfg_plain_name(name, false)) {
            cfg_node_error(p, k, "profile name '%s' may only contain letters, digits, '-', '_' and '.'", name);
            continue;
        }
        if (strlen(name) >= SB_PROFILE_NAME_MAX) {
            cfg_node_error(p, k, "profile name '%s' is longer than %d characters", name, SB_PROFILE_NAME_MAX - 1);
            continue;
        }
        /* A pool naming "default" must get what the documentation says "default" is. */
        if (sb_profile_builtin(name)) {
            cfg_node_error(p, k, "profile '%s' would shadow the built-in profile of that name; choose another name",
                           name);
            continue;
        }
        sb_profile *prof = &cfg->profiles[cfg->n_profiles++];
        char what[96];
        sb_profile_init(prof, name);
        snprintf(what, sizeof what, "profile '%s'", name);
        parse_profile(p, prof, cfg_node_at(p, q->value), what);
    }
}

/* Every pool's profile must exist: checked last, once `profiles:` is read wherever it was. */
void cfg_check_pool_profiles(parse *p, const yaml_node_t *root)
{
    const yaml_node_t *pools = cfg_lookup(p, root, "pools");
    if (!pools || pools->type != YAML_SEQUENCE_NODE)
        return;
    for (size_t i = 0; i < p->cfg->n_pools; i++) {
        const sb_pool_config *pc = &p->cfg->pools[i];
        if (!pc->profile || sb_config_profile(p->cfg, pc->profile))
            continue;
        const yaml_node_t *at = cfg_lookup(p, cfg_node_at(p, pools->data.sequence.items.start[i]), "profile");
        char label[96], builtins[160] = "";
        const char *const *names = sb_profile_builtin_names();
        for (size_t j = 0; names[j]; j++) {
            strncat(builtins, j ? ", " : "", sizeof builtins - strlen(builtins) - 1);
            strncat(builtins, names[j], sizeof builtins - strlen(builtins) - 1);
        }
        if (at)
            cfg_node_error(p, at, "%s: unknown profile '%s' (built in: %s; others are defined under 'profiles')",
                           cfg_pool_label(p->cfg, i, label, sizeof label), pc->profile, builtins);
    }
}
