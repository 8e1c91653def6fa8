/* workload: request container, prompt content, and the helpers generators share. The
 * registry of generators is replay/generators.c. */
#include "replay/workload.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "core/sched.h"

void sb_replay_prompt_tokens(const sb_replay_workload *w, const sb_replay_request *r, uint32_t *out)
{
    const sb_replay_span *s = &w->spans[r->first_span];
    for (uint32_t k = 0; k < r->n_spans; k++) {
        for (uint32_t i = 0; i < s[k].len; i++)
            out[i] = sb_replay_token(s[k].id, i);
        out += s[k].len;
    }
}

long sb_replay_workload_add(sb_replay_workload *w, const sb_replay_request *r, const sb_replay_span *spans,
                            uint32_t n_spans)
{
    if (w->n >= UINT32_MAX - 1 || w->n_spans + n_spans >= UINT32_MAX - 1)
        return -1;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        sb_replay_request *v = sb_realloc(w->reqs, cap * sizeof(*v));
        if (!v)
            return -1;
        w->reqs = v;
        w->cap = cap;
    }
    if (w->n_spans + n_spans > w->spans_cap) {
        size_t cap = w->spans_cap ? w->spans_cap * 2 : 4096;
        while (cap < w->n_spans + n_spans)
            cap *= 2;
        sb_replay_span *v = sb_realloc(w->spans, cap * sizeof(*v));
        if (!v)
            return -1;
        w->spans = v;
        w->spans_cap = cap;
    }
    sb_replay_request *q = &w->reqs[w->n];
    *q = *r;
    q->first_span = (uint32_t)w->n_spans;
    q->n_spans = n_spans;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_spans; i++)
        total += spans[i].len;
    q->n_prompt = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
    memcpy(&w->spans[w->n_spans], spans, n_spans * sizeof(*spans));
    w->n_spans += n_spans;
    if (q->n_prompt > w->max_prompt)
        w->max_prompt = q->n_prompt;
    if (q->adapter > w->n_adapters)
        w->n_adapters = q->adapter;
    return (long)w->n++;
}

int sb_replay_workload_skip(sb_replay_workload *w, size_t k)
{
    if (k >= w->n)
        return -EINVAL;
    for (size_t i = 0; i < w->n; i++)
        if (w->reqs[i].is_followup || w->reqs[i].followup != SB_REPLAY_NO_REQUEST)
            return -EINVAL;
    memmove(w->reqs, w->reqs + k, (w->n - k) * sizeof(*w->reqs));
    w->n -= k;
    sb_ns t0 = w->reqs[0].arrival_ns;
    for (size_t i = 0; i < w->n; i++)
        w->reqs[i].arrival_ns -= t0;
    sb_replay_workload_measure_rate(w);
    return 0;
}

void sb_replay_workload_measure_rate(sb_replay_workload *w)
{
    sb_ns span = w->n ? w->reqs[w->n - 1].arrival_ns : 0;
    w->rate = span ? (double)(w->n - 1) * 1e9 / (double)span : 0;
}

size_t sb_replay_workload_roots(const sb_replay_workload *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        n += !w->reqs[i].is_followup;
    return n;
}

void sb_replay_workload_free(sb_replay_workload *w)
{
    sb_free(w->reqs);
    sb_free(w->spans);
    *w = (sb_replay_workload){0};
}

double sb_replay_exp(uint64_t *rng, double mean)
{
    return -log(1.0 - sb_rand_unit(rng)) * mean;
}

uint64_t sb_replay_below(uint64_t *rng, uint64_t n)
{
    return n <= 1 ? 0 : sb_rand_next(rng) % n;
}

bool sb_replay_gen_more(const sb_replay_gen_opts *o, uint64_t added, sb_ns t)
{
    if (o->requests && added >= o->requests)
        return false;
    if (o->duration_ns && t >= o->duration_ns)
        return false;
    return o->requests || o->duration_ns;
}
