/* llm-d-precise: llm-d's precise prefix-cache routing profile, the KV-event-fed scorer with the
 * load scorers and weights llm-d's guide ships with it (llm-d/llm-d
 * guides/precise-prefix-cache-routing/router/precise-prefix-cache-routing.values.yaml, the
 * weighted profile it shipped through mid-2026; since PR #2071, 2026-07, that guide moved to
 * the sticky-until-saturated pair, which is llm-d-sticky here):
 *   precise-prefix-cache-scorer 3, kv-cache-utilization-scorer 2, queue-scorer 2,
 *   no-hit-lru-scorer 2, max-score-picker; speculativeIndexing true.
 * Plug-in semantics from llm-d/llm-d-router pkg/epp/framework/plugins/:
 *   - precise prefix (scheduling/scorer/preciseprefixcache, requestcontrol/dataproducer/
 *     preciseprefixcache): an index of what each engine caches, built from its KV events;
 *     score = leading blocks of the prompt the endpoint holds / the prompt's blocks. With
 *     speculative indexing, a pick's blocks count as held by the chosen endpoint at once, for
 *     2 s (prerequest.go defaultSpeculativeTTL) or until the events confirm them;
 *   - kv-cache-utilization: 1 - the scraped KV usage;
 *   - queue (scorer/queuedepth/queue.go): (max - waiting) / (max - min) of the scraped queues,
 *     1 when all are equal;
 *   - no-hit-lru (scorer/nohitlru/no_hit_lru.go): a request no endpoint has any block of is
 *     cold: endpoints that never took a cold request score 1 - i / (n - 1) in order, then the
 *     others by least recent cold request (rank = never-used count + LRU position), and the
 *     chosen endpoint becomes the most recent; a warm request scores 0.5 everywhere.
 * Scores are clamped to [0, 1], weighted and summed; the highest wins, ties at random.
 *
 * Here: the engines' caches come from kv_shadow.h (a replay of each engine's prefix cache from
 * the requests sent to it; its departures from the engine are listed there), heard through
 * the KV-event lag (--event-lag-ms, sb_kv_view). Blocks are the engines' own (16 tokens; the
 * guide sets 64 to match its vLLM --block-size). Queue and KV usage are the last scrape's,
 * uncorrected, as llm-d reads them. */
#include "base/alloc.h"
#include "replay/policies/block_lru.h"
#include "replay/policies/kv_policy.h"

#define W_PREFIX 3.0
#define W_KV 2.0
#define W_QUEUE 2.0
#define W_NO_HIT_LRU 2.0
#define SPECULATIVE_TTL_NS (2 * SB_NS_PER_S) /* preciseprefixcache prerequest.go */

/* The blocks a pick indexed speculatively on an endpoint, until they expire. */
typedef struct spec {
    sb_ns expires;
    uint32_t replica;
    uint32_t n;
    struct spec *next;
    uint32_t entries[];
} spec;

typedef struct state {
    sb_kv_policy kv;            /* first: its on_finish is this policy's */
    sb_block_lru **speculative; /* per endpoint: pinned while a speculative mark lives */
    spec *oldest, *newest;
    uint32_t *match, *lru; /* lru: endpoints that took cold requests, least recent first */
    uint32_t n_lru;
    double *score;
    bool cold; /* the request just picked was cold */
} state;

static void destroy(void *st)
{
    state *s = st;
    if (!s)
        return;
    for (spec *p = s->oldest, *next; p; p = next) {
        next = p->next;
        sb_free(p);
    }
    for (uint32_t i = 0; s->speculative && i < s->kv.n; i++)
        sb_block_lru_free(s->speculative[i]);
    sb_free(s->speculative);
    sb_free(s->match);
    sb_free(s->lru);
    sb_free(s->score);
    sb_kv_policy_free(s);
}

static void *create(const sb_replay_policy_env *env)
{
    state *s = sb_kv_policy_new(sizeof(*s), env, env->event_lag_ns);
    if (!s)
        return NULL;
    size_t n = s->kv.n ? s->kv.n : 1;
    s->speculative = sb_calloc(n, sizeof(sb_block_lru *));
    s->match = sb_calloc(n, sizeof(uint32_t));
    s->lru = sb_calloc(n, sizeof(uint32_t));
    s->score = sb_calloc(n, sizeof(double));
    if (!s->speculative || !s->match || !s->lru || !s->score)
        goto fail;
    for (uint32_t i = 0; i < s->kv.n; i++)
        if (!(s->speculative[i] = sb_block_lru_new(0)))
            goto fail;
    return s;
fail:
    destroy(s);
    return NULL;
}

/* Drops the speculative marks older than the TTL. */
static void expire(state *s, sb_ns now)
{
    while (s->oldest && s->oldest->expires <= now) {
        spec *p = s->oldest;
        sb_block_lru *t = s->speculative[p->replica];
        for (uint32_t k = 0; k < p->n; k++)
            sb_block_lru_unpin(t, p->entries[k]);
        while (sb_block_lru_count(t) > sb_block_lru_pinned(t) && sb_block_lru_evict_one(t))
            ;
        s->oldest = p->next;
        if (!s->oldest)
            s->newest = NULL;
        sb_free(p);
    }
}

static int pick(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r)
{
    state *s = st;
    expire(s, f->now);
    const sb_kv_shadow *cache = sb_kv_view_cache(s->kv.view, f->now);
    bool cold = true;
    double qmin = 0, qmax = 0;
    for (uint32_t i = 0; i < s->kv.n; i++) {
        uint32_t k = 0;
        while (k < r->n_engine_hashes &&
               (sb_kv_shadow_holds(cache, i, r->engine_hashes[k]) ||
                sb_block_lru_find(s->speculative[i], r->engine_hashes[k]) != SB_BLOCK_LRU_NONE))
            k++;
        s->match[i] = k;
        cold = cold && k == 0;
        double q = sb_router_endpoint(f->router, f->pool, i)->report.waiting;
        qmin = i == 0 || q < qmin ? q : qmin;
        qmax = i == 0 || q > qmax ? q : qmax;
    }
    s->cold = cold;
    for (uint32_t i = 0; i < s->kv.n; i++) {
        const sb_endpoint *ep = sb_router_endpoint(f->router, f->pool, i);
        double prefix = r->n_engine_hashes ? (double)s->match[i] / (double)r->n_engine_hashes : 0;
        double kv = 1.0 - ep->report.kv_usage;
        kv = kv < 0 ? 0 : kv > 1 ? 1 : kv;
        double queue = qmax == qmin ? 1.0 : (qmax - ep->report.waiting) / (qmax - qmin);
        s->score[i] = W_PREFIX * prefix + W_KV * kv + W_QUEUE * queue + W_NO_HIT_LRU * 0.5;
    }
    if (cold && s->kv.n > 1) {
        /* never-used endpoints first, in pool order, then the used ones least recent first */
        uint32_t rank = 0;
        for (uint32_t i = 0; i < s->kv.n; i++) {
            bool used = false;
            for (uint32_t k = 0; k < s->n_lru && !used; k++)
                used = s->lru[k] == i;
            if (!used)
                s->score[i] += W_NO_HIT_LRU * (1.0 - (double)rank++ / (double)(s->kv.n - 1) - 0.5);
        }
        for (uint32_t k = 0; k < s->n_lru; k++) {
            double v = 1.0 - (double)(rank + k) / (double)(s->kv.n - 1);
            s->score[s->lru[k]] += W_NO_HIT_LRU * ((v < 0 ? 0 : v) - 0.5);
        }
    }
    /* The highest score is the lowest cost: negation is exact, so the same ones tie. */
    sb_kv_policy_pick_begin(&s->kv);
    for (uint32_t i = 0; i < s->kv.n; i++)
        sb_kv_policy_offer(&s->kv, i, -s->score[i], 0);
    return (int)sb_kv_policy_pick_end(&s->kv, f->rng);
}

static void on_dispatch(void *st, const sb_replay_fleet_view *f, const sb_replay_request_view *r, uint32_t replica)
{
    state *s = st;
    sb_kv_policy_on_dispatch(s, f, r, replica);
    if (s->cold) { /* the chosen endpoint becomes the most recent cold one */
        uint32_t k = 0;
        while (k < s->n_lru && s->lru[k] != replica)
            k++;
        if (k == s->n_lru)
            s->n_lru++;
        for (; k + 1 < s->n_lru; k++)
            s->lru[k] = s->lru[k + 1];
        s->lru[s->n_lru - 1] = replica;
    }
    /* Speculative indexing: the pick's blocks are on the endpoint from now, for the TTL. */
    spec *p = sb_malloc(sizeof(spec) + r->n_engine_hashes * sizeof(uint32_t));
    if (!p)
        return; /* no mark: the index waits for the events */
    sb_block_lru *t = s->speculative[replica];
    uint32_t k = 0;
    for (; k < r->n_engine_hashes; k++) {
        uint32_t e = sb_block_lru_get(t, r->engine_hashes[k], NULL);
        if (e == SB_BLOCK_LRU_NONE)
            break;
        sb_block_lru_pin(t, e);
        p->entries[k] = e;
    }
    *p = (spec){.expires = f->now + SPECULATIVE_TTL_NS, .replica = replica, .n = k, .next = NULL};
    if (s->newest)
        s->newest->next = p;
    else
        s->oldest = p;
    s->newest = p;
}

static const sb_replay_custom_ops ops = {.create = create,
                                         .destroy = destroy,
                                         .pick = pick,
                                         .on_dispatch = on_dispatch,
                                         .on_finish = sb_kv_policy_on_finish};

const sb_replay_policy_def sb_policy_llm_d_precise = {
    .name = "llm-d-precise",
    .summary = "llm-d precise prefix-cache routing: KV-event-fed prefix scorer 3 (speculative 2 s marks), "
               "kv-cache 2, queue 2, no-hit-lru 2, max-score (llm-d guides/precise-prefix-cache-routing; "
               "llm-d-router scorer/preciseprefixcache, nohitlru, queuedepth)",
    .custom = &ops,
};
