/* explain: decisions copied into self-contained records, and rendered; see the header. */
#include "core/explain.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* Copies s into dst[cap], cut to fit; NULL copies as "". */
static void copy_str(char *dst, size_t cap, const char *s)
{
    size_t n = s ? strnlen(s, cap - 1) : 0;
    memcpy(dst, s ? s : "", n);
    dst[n] = '\0';
}

/* Whether candidate a ranks before b among the kept: higher total, then pool order. */
static bool better(const sb_candidate *c, uint32_t a, uint32_t b)
{
    return c[a].total != c[b].total ? c[a].total > c[b].total : a < b;
}

/* Which of the pool's n candidates a record of max keeps (max < n): the pick, then the
 * best-scored live ones, then filtered-out ones in pool order; into keep[], in pool order.
 * O(n * max), run only for pools larger than the record. */
static size_t choose(const sb_decision *d, size_t max, uint32_t *keep)
{
    const sb_candidate *c = d->cands;
    size_t k = 0;
    if (d->picked >= 0)
        keep[k++] = (uint32_t)d->picked;
    size_t first_live = k;
    for (uint32_t i = 0; i < d->n; i++) {
        if ((int)i == d->picked || c[i].removed_by)
            continue;
        size_t j = k < max ? k++ : max;
        while (j > first_live && better(c, i, keep[j - 1])) {
            if (j < max)
                keep[j] = keep[j - 1];
            j--;
        }
        if (j < max)
            keep[j] = i;
    }
    for (uint32_t i = 0; i < d->n && k < max; i++)
        if (c[i].removed_by)
            keep[k++] = i;
    for (size_t i = 1; i < k; i++) /* pool order: insertion sort of at most max entries */
        for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            uint32_t t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    return k;
}

void sb_explain_fill(sb_explain *rec, size_t max_cands, const sb_decision *d, const char *id, const char *model,
                     int64_t at_ms)
{
    const sb_profile *p = d->profile;
    copy_str(rec->id, sizeof rec->id, id);
    copy_str(rec->model, sizeof rec->model, model);
    copy_str(rec->pool, sizeof rec->pool, d->pool_name);
    copy_str(rec->profile, sizeof rec->profile, p->name);
    rec->at_ms = at_ms;
    rec->picker = p->picker ? p->picker->name : "";
    rec->reason = d->reason;
    rec->n_scorers = (uint8_t)p->n_scorers;
    for (size_t s = 0; s < p->n_scorers; s++)
        rec->scorers[s] = p->scorers[s].def->name;
    rec->panic = d->panic;
    rec->hot_blocks = d->hot_blocks;
    rec->hot_needed = (float)d->hot_needed;
    rec->picked = -1;
    rec->fallback_from[0] = '\0';
    rec->fallback_reason = NULL;
    memset(&rec->outcome, 0, sizeof rec->outcome);
    rec->outcome.ttft_ms = -1;
    /* keep[] only when the pool outgrows the record: the common case copies in order. */
    uint32_t keep_buf[256];
    const uint32_t *keep = NULL;
    size_t n = d->n;
    if (n > max_cands) {
        if (max_cands > sizeof keep_buf / sizeof keep_buf[0])
            max_cands = sizeof keep_buf / sizeof keep_buf[0];
        n = choose(d, max_cands, keep_buf);
        keep = keep_buf;
    }
    rec->n_cands = (uint32_t)n;
    rec->omitted = (uint32_t)(d->n - n);
    for (size_t k = 0; k < n; k++) {
        uint32_t i = keep ? keep[k] : (uint32_t)k;
        const sb_candidate *c = &d->cands[i];
        sb_explain_cand *o = &rec->cands[k];
        copy_str(o->endpoint, sizeof o->endpoint, c->ep->address);
        o->removed_by = c->removed_by;
        o->total = (float)c->total;
        o->index = i;
        o->prefix_blocks = c->prefix_blocks;
        o->prefix_source = c->prefix_source;
        o->stale = c->stale;
        o->serving = c->serving;
        o->panic = c->panic;
        if (!c->removed_by && c->slot >= 0)
            for (size_t s = 0; s < p->n_scorers; s++)
                o->scores[s] = (float)d->scores[s * d->n_live + (size_t)c->slot];
        if ((int)i == d->picked)
            rec->picked = (int32_t)k;
    }
}

/* Appends s as a JSON string, quotes included: names and addresses come from configuration
 * and requests, and may hold anything. */
static int put_string(sb_buf *b, const char *s)
{
    int rc = sb_buf_puts(b, "\"");
    rc |= sb_buf_json_escape(b, s, strlen(s));
    rc |= sb_buf_puts(b, "\"");
    return rc;
}

/* A score as JSON: a NaN from a report the metrics parser accepted must not break the page. */
static int put_number(sb_buf *b, double v)
{
    return isfinite(v) ? sb_buf_printf(b, "%.4f", v) : sb_buf_puts(b, "null");
}

static int render_cand(const sb_explain *rec, const sb_explain_cand *c, sb_buf *b)
{
    int rc = sb_buf_puts(b, "{\"endpoint\":");
    rc |= put_string(b, c->endpoint);
    rc |= sb_buf_printf(b, ",\"index\":%u,\"stale\":%s", c->index, c->stale || c->serving ? "true" : "false");
    if (c->serving)
        rc |= sb_buf_puts(b, ",\"serving\":true");
    if (c->panic)
        rc |= sb_buf_puts(b, ",\"panic\":true");
    if (c->prefix_source != SB_PREFIX_NONE)
        rc |= sb_buf_printf(b, ",\"prefix\":{\"blocks\":%u,\"source\":\"%s\"}", c->prefix_blocks,
                            c->prefix_source == SB_PREFIX_REPORTED ? "reported" : "routed");
    if (c->removed_by) {
        rc |= sb_buf_puts(b, ",\"removed_by\":");
        rc |= put_string(b, c->removed_by);
        return rc | sb_buf_puts(b, "}");
    }
    rc |= sb_buf_puts(b, ",\"total\":");
    rc |= put_number(b, c->total);
    rc |= sb_buf_puts(b, ",\"scores\":{");
    for (size_t s = 0; s < rec->n_scorers; s++) {
        rc |= sb_buf_printf(b, "%s\"%s\":", s ? "," : "", rec->scorers[s]);
        rc |= put_number(b, c->scores[s]);
    }
    return rc | sb_buf_puts(b, "}}");
}

int sb_explain_render(const sb_explain *rec, enum sb_explain_render how, sb_buf *b)
{
    int rc = sb_buf_puts(b, "{");
    if (how == SB_EXPLAIN_FULL) {
        rc |= sb_buf_puts(b, "\"id\":");
        rc |= put_string(b, rec->id);
        rc |= sb_buf_printf(b, ",\"at_ms\":%lld,\"model\":", (long long)rec->at_ms);
        rc |= put_string(b, rec->model);
        rc |= sb_buf_puts(b, ",");
    }
    rc |= sb_buf_puts(b, "\"pool\":");
    rc |= put_string(b, rec->pool);
    rc |= sb_buf_puts(b, ",\"profile\":");
    rc |= put_string(b, rec->profile);
    rc |= sb_buf_puts(b, ",\"picker\":");
    rc |= put_string(b, rec->picker ? rec->picker : "");
    rc |= sb_buf_puts(b, ",\"reason\":");
    rc |= put_string(b, rec->reason ? rec->reason : "");
    rc |= sb_buf_puts(b, ",\"picked\":");
    if (rec->picked >= 0) {
        rc |= put_string(b, rec->cands[rec->picked].endpoint);
        rc |= sb_buf_printf(b, ",\"picked_index\":%u", rec->cands[rec->picked].index);
    } else {
        rc |= sb_buf_puts(b, "null,\"picked_index\":null");
    }
    if (rec->panic)
        rc |= sb_buf_puts(b, ",\"panic\":true");
    if (rec->hot_blocks)
        rc |= sb_buf_printf(b, ",\"hot_prefix\":{\"blocks\":%u,\"needed\":%.2f}", rec->hot_blocks,
                            (double)rec->hot_needed);
    if (rec->fallback_from[0]) {
        rc |= sb_buf_puts(b, ",\"fallback\":{\"from\":");
        rc |= put_string(b, rec->fallback_from);
        rc |= sb_buf_puts(b, ",\"reason\":");
        rc |= put_string(b, rec->fallback_reason ? rec->fallback_reason : "");
        rc |= sb_buf_puts(b, "}");
    }
    rc |= sb_buf_puts(b, ",\"candidates\":[");
    for (size_t i = 0; i < rec->n_cands; i++) {
        rc |= sb_buf_puts(b, i ? "," : "");
        rc |= render_cand(rec, &rec->cands[i], b);
    }
    rc |= sb_buf_puts(b, "]");
    if (rec->omitted)
        rc |= sb_buf_printf(b, ",\"omitted\":%u", rec->omitted);
    if (how == SB_EXPLAIN_FULL) {
        const sb_explain_outcome *o = &rec->outcome;
        if (!o->set) {
            rc |= sb_buf_puts(b, ",\"outcome\":null");
        } else {
            rc |= sb_buf_printf(b, ",\"outcome\":{\"status\":%d,\"ttft_ms\":", o->status);
            rc |= o->ttft_ms >= 0 ? sb_buf_printf(b, "%.3f", o->ttft_ms) : sb_buf_puts(b, "null");
            rc |= sb_buf_printf(b, ",\"attempts\":%u,\"served_by\":", o->attempts);
            rc |= o->served_by[0] ? put_string(b, o->served_by) : sb_buf_puts(b, "null");
            rc |= sb_buf_puts(b, "}");
        }
    }
    rc |= sb_buf_puts(b, "}");
    return rc ? -1 : 0;
}

int sb_decision_render(const sb_decision *d, sb_buf *b)
{
    size_t n = d->n ? d->n : 1;
    sb_explain *rec = sb_malloc(sb_explain_size(n));
    if (!rec)
        return -1;
    sb_explain_fill(rec, n, d, NULL, NULL, 0);
    int rc = sb_explain_render(rec, SB_EXPLAIN_DECISION, b);
    sb_free(rec);
    return rc;
}
