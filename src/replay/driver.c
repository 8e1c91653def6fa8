/* driver: the discrete-event loop, the request life cycle, simulated probing, flow control in
 * virtual time, and the summary of a run (set-up in driver_setup.c, fleet events in
 * driver_fleet.c). */
#include "replay/driver_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "replay/latency.h"
#include "sim/answer.h"

int drv_fail(driver *d, int rc, const char *msg)
{
    if (!d->error) {
        d->error = rc;
        snprintf(d->err, d->errcap, "%s", msg);
    }
    return rc;
}

void drv_push(driver *d, sb_ns t, uint32_t kind, uint32_t a, uint64_t b)
{
    if (sb_replay_queue_push(&d->q, t, kind, a, b) < 0)
        drv_fail(d, -ENOMEM, "out of memory");
}

static void mark_dirty(driver *d, uint32_t rep)
{
    if (!d->is_dirty[rep]) {
        d->is_dirty[rep] = true;
        d->dirty[d->n_dirty++] = rep;
    }
}

/* Forms the next step of every engine touched at `now` (so that everything submitted at one
 * instant shares a step, as sim/engine.h asks) and queues its end. */
static void flush_dirty(driver *d)
{
    for (size_t i = 0; i < d->n_dirty; i++) {
        uint32_t rep = d->dirty[i];
        d->is_dirty[rep] = false;
        if (d->scheduled[rep])
            continue;
        sb_ns t = sb_engine_next_event(d->engines[rep]);
        if (t != SB_ENGINE_NEVER) {
            d->scheduled[rep] = true;
            drv_push(d, t, EV_STEP, rep, d->engine_gen[rep]);
        }
    }
    d->n_dirty = 0;
}

/* ---- probing ------------------------------------------------------------------------------- */

/* The report net/probe.c would build from this engine's /metrics page (sim/sim_metrics.c
 * renders exactly these metrics): running, waiting, KV usage, capacity, LoRA. */
static void scrape(driver *d, gateway *g, uint32_t rep)
{
    sb_engine_metrics m;
    sb_engine_metrics_get(d->engines[rep], &m);
    sb_endpoint_report r = {
        .have_running = true,
        .have_waiting = true,
        .have_kv = true,
        .have_capacity = true,
        .running = m.num_requests_running,
        .waiting = m.num_requests_waiting,
        .kv_usage = m.kv_cache_usage,
        .block_size = m.block_size,
        .num_gpu_blocks = m.num_gpu_blocks,
        .requests_total = (double)m.request_success_total,
    };
    if (m.max_loras > 0) {
        r.have_lora = true;
        r.max_lora = m.max_loras;
        if (d->w->n_adapters) {
            size_t na = sb_engine_adapters(d->engines[rep], d->adapters, MAX_ADAPTERS + 1);
            for (size_t i = 0; i < na && i <= MAX_ADAPTERS; i++) {
                const sb_engine_adapter *a = &d->adapters[i];
                if (a->id == 0 || a->id > MAX_ADAPTERS)
                    continue;
                if (a->running) {
                    r.lora_running_mask |= 1ULL << (a->id - 1);
                    r.lora_running_count++;
                }
                if (a->waiting)
                    r.lora_waiting_mask |= 1ULL << (a->id - 1);
            }
        }
    }
    /* As net/probe.c: counters that went backwards mean the engine restarted, and what the
     * prefix index believed it held is dropped; its cache size bounds the index. */
    sb_endpoint *e = sb_router_endpoint(g->router, 0, rep);
    sb_ns before = e->report_ns;
    if (sb_endpoint_report_set(e, &r, SB_REPORT_SCRAPE, d->now))
        sb_router_prefix_clear(g->router, 0, rep, before);
    sb_router_prefix_capacity(g->router, 0, rep, (uint64_t)m.num_gpu_blocks * m.block_size);
}

/* ---- request life ---------------------------------------------------------------------------- */

static gateway *gw_of(driver *d, uint32_t idx)
{
    return &d->gw[d->rt[idx].gw];
}

sb_replay_fleet_view drv_fleet_view(driver *d, gateway *g)
{
    return (sb_replay_fleet_view){
        .now = d->now, .n_replicas = d->n, .router = g->router, .pool = 0, .engines = d->engines, .rng = &g->prng};
}

/* status: flow control's answer to this turn (429, 503), or 0 for any other shedding. */
void drv_settle_shed(driver *d, uint32_t idx, uint16_t status)
{
    d->rt[idx].status = status;
    /* A conversation whose turn is shed ends there: its later turns are shed too. */
    for (; idx != SB_REPLAY_NO_REQUEST; idx = d->w->reqs[idx].followup) {
        d->rt[idx].outcome = SB_REPLAY_SHED;
        if (d->rt[idx].bypass) {
            d->out->bypass_shed++;
            d->out->bypass_requests++;
        } else {
            d->out->shed++;
            d->out->requests++;
        }
        d->settled++;
        if (d->out->records) {
            sb_replay_record *rec = &d->out->records[idx];
            rec->outcome = SB_REPLAY_SHED;
            rec->arrival_ns = d->rt[idx].arrival_ns;
            rec->prompt_tokens = d->w->reqs[idx].n_prompt;
            rec->band = d->rt[idx].band;
            rec->status = d->rt[idx].status;
            rec->gateway = d->rt[idx].gw;
            rec->bypass = d->rt[idx].bypass;
        }
    }
}

static size_t engine_hashes(driver *d, const sb_replay_request *r)
{
    const sb_engine_params *ep = &d->o->engine;
    return sb_engine_hash_blocks(d->tokens, r->n_prompt, ep->block_size, r->adapter, d->ehash);
}

/* What r generates, for the engine to cache as it caches generated tokens: the span that
 * follows r's prompt in its follow-up's prompt (the conversation's history holds r's answer
 * there), cut or padded to max_tokens with the simulator's answer; NULL (the simulator's answer
 * throughout) without a follow-up that continues r's prompt, or if memory runs out. */
static const uint32_t *answer_tokens(driver *d, const sb_replay_request *r)
{
    const sb_replay_workload *w = d->w;
    if (r->followup == SB_REPLAY_NO_REQUEST || w->reqs[r->followup].n_spans <= r->n_spans)
        return NULL;
    const sb_replay_span *ps = &w->spans[r->first_span], *fs = &w->spans[w->reqs[r->followup].first_span];
    for (uint32_t k = 0; k < r->n_spans; k++)
        if (ps[k].id != fs[k].id || ps[k].len != fs[k].len)
            return NULL;
    if (r->max_tokens > d->cap_answer) {
        uint32_t *a = sb_realloc(d->answer, r->max_tokens * sizeof(*a));
        if (!a)
            return NULL;
        d->answer = a;
        d->cap_answer = r->max_tokens;
    }
    const sb_replay_span *ans = &fs[r->n_spans];
    for (uint32_t i = 0; i < r->max_tokens; i++)
        d->answer[i] = i < ans->len ? sb_replay_token(ans->id, i) : sb_sim_answer_token(i);
    return d->answer;
}

static void submit(driver *d, uint32_t rep, uint32_t idx, size_t n_ehash)
{
    const sb_replay_request *r = &d->w->reqs[idx];
    (void)n_ehash;
    /* Tokens too (d->tokens holds r's): the engine continues the hash chain through the
     * prompt's partial block into the generated blocks. */
    sb_engine_request er = {.id = idx,
                            .tokens = d->tokens,
                            .block_hashes = d->ehash,
                            .n_prompt = r->n_prompt,
                            .max_tokens = r->max_tokens,
                            .adapter = r->adapter,
                            .output_tokens = answer_tokens(d, r)};
    int rc = sb_engine_submit(d->engines[rep], &er, d->now);
    if (rc < 0) {
        drv_fail(d, rc, rc == -ENOMEM ? "out of memory" : "an engine refused a request it should take");
        return;
    }
    d->rt[idx].on_engine = true;
    mark_dirty(d, rep);
}

/* What the gateway's byte bounds count of a request: its body, 4 bytes per prompt token (the
 * ratio the gateway assumes). */
static uint64_t body_bytes(const sb_replay_request *r)
{
    return (uint64_t)r->n_prompt * 4;
}

static void route(driver *d, uint32_t idx);

/* The synchronous probe (opts.sync_probe_age_ns): when a ranked candidate's report is older
 * than the bound, the request waits one probe round trip and is decided again with those
 * candidates scraped at the end of the wait (EV_PROBED). Which ones: a bitmask of the pool's
 * first 64 replicas in the event (the replay's fleets are smaller). The pick just made is
 * not dispatched; the router settles its pending mark at the next pick. */
static bool sync_probe(driver *d, gateway *g, uint32_t idx, const sb_ranking *rk)
{
    uint64_t mask = 0;
    for (size_t i = 0; i < rk->n; i++) {
        const sb_endpoint *e = sb_router_endpoint(g->router, 0, rk->ep[i]);
        if (rk->ep[i] < 64 && d->now - e->report_ns > d->o->sync_probe_age_ns)
            mask |= 1ULL << rk->ep[i];
    }
    if (!mask)
        return false;
    d->rt[idx].probed = true;
    d->out->sync_probes++;
    drv_push(d, d->now + d->o->sync_probe_rtt_ns, EV_PROBED, idx, mask);
    return true;
}

static void probed(driver *d, uint32_t idx, uint64_t mask)
{
    req_rt *rt = &d->rt[idx];
    gateway *g = &d->gw[rt->gw];
    for (uint32_t rep = 0; rep < d->n && rep < 64; rep++) {
        if (mask & (1ULL << rep)) {
            scrape(d, g, rep);
            d->out->sync_probed++;
        }
    }
    /* The wait counts as the gateway's: the request left for a replica when first decided. */
    sb_ns first = rt->dispatch_ns;
    route(d, idx);
    rt->dispatch_ns = first;
}

/* The request's prompt tokens into d->tokens and its chained router block hashes into
 * d->rhash, as the gateway's inspection would hand the core: proto/inspect.c hashes 64-byte
 * blocks of the canonical prompt, chained, seeded by model and adapter; here a block is
 * block_tokens token ids (64 bytes at the default 16). Returns the block count. */
static size_t request_hashes(driver *d, const sb_replay_request *r)
{
    sb_replay_prompt_tokens(d->w, r, d->tokens);
    uint32_t bt = d->block_tokens;
    size_t nb = r->n_prompt / bt;
    if (nb > d->o->max_prompt_blocks)
        nb = d->o->max_prompt_blocks;
    uint64_t h = d->hash_seeds[r->adapter];
    for (size_t i = 0; i < nb; i++)
        d->rhash[i] = h = XXH3_64bits_withSeed(d->tokens + i * bt, (size_t)bt * sizeof(uint32_t), h);
    return nb;
}

/* Gateway sync (opts.gateway_sync): the other gateways hear of request idx's dispatch, first
 * byte or end gateway_sync_ns later. */
void drv_tell_peers(driver *d, uint32_t idx, uint32_t kind)
{
    if (!d->peer_tk)
        return;
    for (uint32_t h = 0; h < d->n_gw; h++)
        if (h != d->rt[idx].gw)
            drv_push(d, d->now + d->o->gateway_sync_ns, kind, h, idx);
}

static void peer_heard(driver *d, uint32_t kind, uint32_t h, uint32_t idx)
{
    sb_router *router = d->gw[h].router;
    sb_ticket *t = &d->peer_tk[(size_t)idx * d->n_gw + h];
    uint32_t rep = d->rt[idx].replica;
    if (kind == EV_PEER_SENT) {
        const sb_replay_request *r = &d->w->reqs[idx];
        size_t nb = request_hashes(d, r);
        *t = sb_router_peer_dispatched(router, 0, rep, d->rhash, nb, r->n_prompt, d->now);
    } else if (kind == EV_PEER_FIRST) {
        sb_router_first_byte(router, 0, rep, t, d->now);
        sb_router_first_token(router, 0, rep, t);
    } else {
        sb_router_finished(router, 0, rep, t, true, false, d->now);
    }
}

/* Schedules a request now: builds its descriptor, asks the policy, dispatches it. */
static void route(driver *d, uint32_t idx)
{
    const sb_replay_workload *w = d->w;
    const sb_replay_request *r = &w->reqs[idx];
    req_rt *rt = &d->rt[idx];
    gateway *g = &d->gw[rt->gw];
    rt->dispatch_ns = d->now;
    size_t nb = request_hashes(d, r);
    uint32_t pk = r->n_prompt < PREFIX_KEY_TOKENS ? r->n_prompt : PREFIX_KEY_TOKENS;
    sb_request_desc rq = {.sched =
                              {
                                  .pool = 0,
                                  .adapter = r->adapter ? (int)r->adapter - 1 : -1,
                                  .block_hashes = d->rhash,
                                  .n_blocks = nb,
                                  .prompt_bytes = (size_t)r->n_prompt * 4,
                                  .prompt_tokens = r->n_prompt,
                                  .session_key = r->session ? XXH3_64bits(&r->session, sizeof(r->session)) : 0,
                                  .prefix_key = XXH3_64bits(d->tokens, pk * sizeof(uint32_t)),
                                  /* The decision after a synchronous probe: counted at the first. */
                                  .repeat = rt->probed,
                                  /* The pool's current profile, as the gateway reads it per request: with adaptive
                                   * weights, the snapshot in force (for a queued request, the one in force when it
                                   * leaves the queue, as in the gateway). */
                                  .profile = d->p->profile ? sb_router_pool_profile(g->router, 0) : NULL,
                              },
                          .band = (enum sb_band)rt->band,
                          .tenant = rt->tenant,
                          .body_bytes = body_bytes(r),
                          .stream = true};
    /* Released by the gate (drain): as in the gateway, it goes where the gate saw room. */
    if (rt->queued)
        sb_admission_mark_released(g->adm, 0, &rq.sched);
    drv_events_keys(d, r->n_prompt, r->adapter, &rq.sched);
    size_t ne = engine_hashes(d, r);

    int pick;
    sb_replay_fleet_view fv;
    sb_replay_request_view rv;
    if (d->p->custom) {
        fv = drv_fleet_view(d, g);
        rv = (sb_replay_request_view){.id = idx,
                                      .sched = &rq.sched,
                                      .tokens = d->tokens,
                                      .n_tokens = r->n_prompt,
                                      .engine_hashes = d->ehash,
                                      .n_engine_hashes = ne,
                                      .engine_adapter = r->adapter,
                                      .max_tokens = r->max_tokens};
        pick = d->p->custom->pick(g->pstate, &fv, &rv);
        if (pick >= (int)d->n) {
            drv_fail(d, -EINVAL, "a custom policy picked a replica out of range");
            return;
        }
    } else {
        sb_ranking rk;
        bool probe = d->o->sync_probe_age_ns && !rt->probed;
        pick = sb_decide(g->router, &rq, probe ? d->o->sync_probe_candidates : 1, d->now, &rk);
        if (probe && pick >= 0 && sync_probe(d, g, idx, &rk))
            return;
    }
    if (pick < 0) {
        drv_settle_shed(d, idx, 0);
        return;
    }
    rt->replica = (uint32_t)pick;
    rt->ticket = sb_router_dispatched(g->router, 0, (uint32_t)pick, r->n_prompt, d->now);
    drv_tell_peers(d, idx, EV_PEER_SENT);
    d->out->per_replica[pick]++;
    d->out->per_gateway[g->index]++;
    if (d->p->custom && d->p->custom->on_dispatch)
        d->p->custom->on_dispatch(g->pstate, &fv, &rv, (uint32_t)pick);
    if (d->o->net_delay_ns)
        drv_push(d, d->now + d->o->net_delay_ns, EV_DELIVER, (uint32_t)pick, idx);
    else
        submit(d, (uint32_t)pick, idx, ne);
}

/* ---- flow control: core/admission.h, the gateway's, in virtual time ------------------------- */

/* Items carry the request index + 1 (a queued pointer is never NULL). */
static void *item_of(uint32_t idx)
{
    return (void *)((uintptr_t)idx + 1);
}
static uint32_t index_of(void *user)
{
    return (uint32_t)((uintptr_t)user - 1);
}

/* Released by the gate: scheduled now; a failure stops the release. */
bool drv_on_admission_dispatch(void *ctx, void *user)
{
    driver *d = ((gateway *)ctx)->d;
    route(d, index_of(user));
    return !d->error;
}

/* Evicted (429) or expired (503) while queued. */
void drv_on_admission_refuse(void *ctx, void *user, const sb_admission_refusal *r)
{
    drv_settle_shed(((gateway *)ctx)->d, index_of(user), r->status);
}

/* As the gateway (net/admission.c): refused (no endpoint available: 503; sheddable under
 * saturation or a full queue: 429), scheduled now, or queued. */
static void admit(driver *d, uint32_t idx)
{
    req_rt *rt = &d->rt[idx];
    sb_request_desc rq = {
        .sched.pool = 0, .band = (enum sb_band)rt->band, .tenant = rt->tenant, .body_bytes = body_bytes(&d->w->reqs[idx])};
    sb_admission_refusal r;
    sb_admission *adm = d->gw[rt->gw].adm;
    int a = sb_admission_admit(adm, &rq, d->now, &r);
    if (a == SB_ADMIT_DISPATCH) {
        route(d, idx);
        return;
    }
    if (a == SB_ADMIT_WAIT) {
        a = sb_admission_enqueue(adm, &rq, item_of(idx), d->now, NULL, &r);
        if (a == SB_ADMIT_QUEUED) {
            rt->queued = true;
            return;
        }
    }
    drv_settle_shed(d, idx, r.status);
}

/* Re-examines the queue once at this instant, after whatever else happens at it (an answer
 * ends inside an engine's step: scheduling from there would submit to an engine mid-step). */
void drv_want_drain(driver *d, gateway *g, sb_ns at)
{
    if (g->adm && !g->drain_pending) {
        g->drain_pending = true;
        drv_push(d, at, EV_DRAIN, g->index, 0);
    }
}

/* The gateway's adaptive timer (net/gateway.c on_adaptive_tick), the same core calls: the pool's
 * detectors tick and a published snapshot goes in force (core/control.h); then flow control's
 * queue is re-examined (sb_admission_tick). */
static void tick(driver *d, gateway *g)
{
    if (g->adaptive) {
        sb_control_tick(g->router, 0, g->adaptive, d->base, true, d->now);
        double share = sb_adaptive_share(g->adaptive);
        g->share_sum += share;
        d->out->share_max = share > d->out->share_max ? share : d->out->share_max;
        d->out->adaptive_ticks++;
    }
    if (g->adm)
        sb_admission_tick(g->adm, d->now);
}

static void arrive(driver *d, uint32_t idx)
{
    const sb_replay_request *r = &d->w->reqs[idx];
    const sb_engine_params *ep = &d->o->engine;
    req_rt *rt = &d->rt[idx];
    rt->arrival_ns = rt->dispatch_ns = d->now;
    rt->replica = UINT32_MAX;
    if (d->first_arrival == NEVER)
        d->first_arrival = d->now;
    gateway *g = rt->bypass ? NULL : &d->gw[rt->gw];
    /* The gateway counts an arrival once its model resolves, before admission. */
    if (g && g->adaptive)
        sb_adaptive_arrivals(g->adaptive, 1);
    if ((uint64_t)r->n_prompt + r->max_tokens > (uint64_t)ep->num_gpu_blocks * ep->block_size) {
        drv_settle_shed(d, idx, 0); /* no replica could ever hold it (the engine says -E2BIG) */
        return;
    }
    if (!g) {
        drv_bypass(d, idx);
        return;
    }
    if (g->adm)
        admit(d, idx);
    else
        route(d, idx);
}

/* The request reaches its replica. */
void drv_deliver(driver *d, uint32_t rep, uint32_t idx)
{
    /* The hashes were computed at arrival into scratch since reused: compute them again. */
    sb_replay_prompt_tokens(d->w, &d->w->reqs[idx], d->tokens);
    submit(d, rep, idx, engine_hashes(d, &d->w->reqs[idx]));
}

static void first_byte(driver *d, uint32_t rep, uint32_t idx)
{
    if (d->rt[idx].bypass || d->rt[idx].outcome == SB_REPLAY_FAILED)
        return; /* nobody's accounting; or lost with its replica while the byte was on its way */
    gateway *g = gw_of(d, idx);
    sb_router_first_byte(g->router, 0, rep, &d->rt[idx].ticket, d->now);
    sb_router_first_token(g->router, 0, rep, &d->rt[idx].ticket);
    drv_tell_peers(d, idx, EV_PEER_FIRST);
    if (d->p->custom && d->p->custom->on_first_token) {
        sb_replay_fleet_view fv = drv_fleet_view(d, g);
        d->p->custom->on_first_token(g->pstate, &fv, idx, rep);
    }
}

/* The conversation's next turn, a think time after this answer. */
static void next_turn(driver *d, uint32_t idx)
{
    uint32_t next = d->w->reqs[idx].followup;
    if (next != SB_REPLAY_NO_REQUEST)
        drv_push(d, d->now + d->w->reqs[next].think_ns, EV_ARRIVE, 0, next);
}

/* The gateway sees the answer end at `now`: release the accounting, start the next turn. */
static void answered(driver *d, uint32_t rep, uint32_t idx)
{
    req_rt *rt = &d->rt[idx];
    const sb_replay_request *r = &d->w->reqs[idx];
    rt->outcome = SB_REPLAY_COMPLETED;
    d->settled++;
    if (rt->bypass) {
        d->out->bypass_completed++;
        d->out->bypass_requests++;
        next_turn(d, idx);
        return;
    }
    gateway *g = &d->gw[rt->gw];
    sb_router_finished(g->router, 0, rep, &rt->ticket, true, true, d->now);
    drv_tell_peers(d, idx, EV_PEER_DONE);
    /* As net/proxy.c does for a streamed answer: the router learns the replica's prefill speed. */
    sb_router_observe_ttft(g->router, 0, rep, r->n_prompt, rt->cached_tokens, rt->ttft_ns);
    sb_router_observe_cached(g->router, 0, rep, &rt->ticket, r->n_prompt, rt->cached_tokens);
    if (d->p->custom && d->p->custom->on_finish) {
        sb_replay_fleet_view fv = drv_fleet_view(d, g);
        d->p->custom->on_finish(g->pstate, &fv, idx, rep, true);
    }
    d->out->completed++;
    d->out->requests++;
    d->last_answer = d->now > d->last_answer ? d->now : d->last_answer;
    next_turn(d, idx);
    /* Capacity freed: net/admission.c re-examines the queue when a request ends. */
    drv_want_drain(d, g, d->now);
}

/* The engine's final accounting of a request; client-side times add the delay both ways. */
static void account(driver *d, uint32_t idx, const sb_engine_usage *u)
{
    sb_ns rtt = 2 * d->o->net_delay_ns;
    sb_ns wait = d->rt[idx].dispatch_ns - d->rt[idx].arrival_ns; /* queued by flow control */
    sb_replay_result *out = d->out;
    d->rt[idx].on_engine = false;
    if (d->rt[idx].bypass) {
        d->bypass_ttft[d->n_bypass_done++] = u->ttft_ns + rtt;
        if (out->records)
            out->records[idx] = (sb_replay_record){.arrival_ns = d->rt[idx].arrival_ns,
                                                   .ttft_ns = u->ttft_ns + rtt,
                                                   .e2e_ns = u->e2e_ns + rtt,
                                                   .replica = d->rt[idx].replica,
                                                   .prompt_tokens = u->prompt_tokens,
                                                   .cached_tokens = u->cached_tokens,
                                                   .completion_tokens = u->completion_tokens,
                                                   .preemptions = u->preemptions,
                                                   .outcome = SB_REPLAY_COMPLETED,
                                                   .bypass = true};
        return;
    }
    d->rt[idx].ttft_ns = u->ttft_ns + rtt;
    d->rt[idx].client_ttft_ns = wait + u->ttft_ns + rtt;
    d->rt[idx].cached_tokens = u->cached_tokens;
    d->ttft[d->n_done] = wait + u->ttft_ns + rtt;
    d->e2e[d->n_done] = wait + u->e2e_ns + rtt;
    d->n_done++;
    out->prompt_tokens += u->prompt_tokens;
    out->cached_tokens += u->cached_tokens;
    out->output_tokens += u->completion_tokens;
    out->preemptions += u->preemptions;
    if (out->records) {
        sb_replay_record *rec = &out->records[idx];
        *rec = (sb_replay_record){.arrival_ns = d->rt[idx].arrival_ns,
                                  .ttft_ns = wait + u->ttft_ns + rtt,
                                  .e2e_ns = wait + u->e2e_ns + rtt,
                                  .replica = d->rt[idx].replica,
                                  .prompt_tokens = u->prompt_tokens,
                                  .cached_tokens = u->cached_tokens,
                                  .completion_tokens = u->completion_tokens,
                                  .preemptions = u->preemptions,
                                  .outcome = SB_REPLAY_COMPLETED,
                                  .band = d->rt[idx].band,
                                  .wait_ns = wait,
                                  .gateway = d->rt[idx].gw};
    }
}

static void on_engine_event(void *ud, const sb_engine_event *ev)
{
    driver *d = ud;
    uint32_t idx = (uint32_t)ev->id, rep = d->cur_replica;
    sb_ns delay = d->o->net_delay_ns;
    switch (ev->kind) {
    case SB_ENGINE_EV_FIRST_TOKEN:
        if (delay)
            drv_push(d, ev->time_ns + delay, EV_FIRST, rep, idx);
        else
            first_byte(d, rep, idx);
        break;
    case SB_ENGINE_EV_TOKEN: d->itl_hist[sb_replay_itl_bucket(ev->itl_ns)]++; break;
    case SB_ENGINE_EV_FINISHED:
        account(d, idx, &ev->usage);
        if (delay) {
            drv_push(d, ev->time_ns + delay, EV_DONE, rep, idx);
        } else {
            sb_ns saved = d->now;
            d->now = ev->time_ns;
            answered(d, rep, idx);
            d->now = saved;
        }
        break;
    case SB_ENGINE_EV_PREEMPTED: break;
    }
}

static void handle(driver *d, const sb_replay_event *ev)
{
    drv_events_advance(d);
    switch (ev->kind) {
    case EV_STEP:
        if (ev->b != d->engine_gen[ev->a])
            break; /* the step of an engine a restart replaced */
        d->scheduled[ev->a] = false;
        d->cur_replica = ev->a;
        sb_engine_advance(d->engines[ev->a], d->now, on_engine_event, d);
        drv_events_collect(d, ev->a);
        mark_dirty(d, ev->a);
        break;
    case EV_SCRAPE:
        scrape(d, &d->gw[ev->b], ev->a);
        drv_push(d, d->now + d->o->scrape_ns, EV_SCRAPE, ev->a, ev->b);
        break;
    case EV_ARRIVE: arrive(d, (uint32_t)ev->b); break;
    case EV_DELIVER: drv_deliver(d, ev->a, (uint32_t)ev->b); break;
    case EV_FIRST: first_byte(d, ev->a, (uint32_t)ev->b); break;
    case EV_DONE: answered(d, ev->a, (uint32_t)ev->b); break;
    case EV_TICK:
        tick(d, &d->gw[ev->a]);
        drv_push(d, d->now + d->tick_ns, EV_TICK, ev->a, 0);
        break;
    case EV_DRAIN:
        d->gw[ev->a].drain_pending = false;
        sb_admission_release(d->gw[ev->a].adm, 0, d->now);
        break;
    case EV_PROBED: probed(d, ev->a, ev->b); break;
    case EV_PEER_SENT:
    case EV_PEER_FIRST:
    case EV_PEER_DONE: peer_heard(d, ev->kind, ev->a, (uint32_t)ev->b); break;
    case EV_RESTART:
        drv_restart(d, ev->a);
        if (d->o->restart_every_ns) {
            d->next_restart_replica = (ev->a + 1) % d->n;
            drv_push(d, d->now + d->o->restart_every_ns, EV_RESTART, d->next_restart_replica, 0);
        }
        break;
    }
}

/* ---- loop, summary --------------------------------------------------------------------------- */

sb_ns drv_scaled_arrival(const sb_replay_opts *o, const sb_replay_request *r)
{
    return o->time_scale == 1.0 ? r->arrival_ns : (sb_ns)((double)r->arrival_ns / o->time_scale);
}

/* Counts the roots this run admits (and, through their chains, every request it settles). */
static size_t select_roots(const sb_replay_workload *w, const sb_replay_opts *o, uint64_t *total)
{
    size_t roots = 0;
    *total = 0;
    for (size_t i = 0; i < w->n; i++) {
        const sb_replay_request *r = &w->reqs[i];
        if (r->is_followup)
            continue;
        if ((o->max_requests && roots >= o->max_requests) ||
            (o->max_arrival_ns && drv_scaled_arrival(o, r) >= o->max_arrival_ns))
            break;
        roots++;
        for (uint32_t k = (uint32_t)i; k != SB_REPLAY_NO_REQUEST; k = w->reqs[k].followup)
            (*total)++;
    }
    return roots;
}

static int cmp_ns(const void *a, const void *b)
{
    sb_ns x = *(const sb_ns *)a, y = *(const sb_ns *)b;
    return x < y ? -1 : x > y;
}

static void summarise(driver *d)
{
    sb_replay_result *out = d->out;
    sb_replay_latency_summary(out, d->ttft, d->e2e, d->n_done, d->itl_hist);

    uint64_t hits = d->gone_hits, queries = d->gone_queries;
    out->engine_steps = d->gone_steps;
    for (uint32_t i = 0; i < d->n; i++) {
        sb_engine_metrics m;
        sb_engine_metrics_get(d->engines[i], &m);
        hits += m.prefix_cache_hits_total;
        queries += m.prefix_cache_queries_total;
        out->engine_steps += m.num_steps_total;
    }
    out->hit_rate = queries ? (double)hits / (double)queries : 0;

    out->imbalance_cv = sb_replay_imbalance_cv(out, d->n);

    if (d->first_arrival != NEVER && d->last_answer > d->first_arrival) {
        out->makespan_s = (double)(d->last_answer - d->first_arrival) * 1e-9;
        out->output_tok_s = (double)out->output_tokens / out->makespan_s;
    }
    out->ttft_sorted = d->ttft;
    out->n_ttft = d->n_done;
    d->ttft = NULL;
    if (d->n_bypass_done) {
        qsort(d->bypass_ttft, d->n_bypass_done, sizeof(sb_ns), cmp_ns);
        out->bypass_ttft_p50_ms = sb_replay_percentile(d->bypass_ttft, d->n_bypass_done, 0.50) * 1e-6;
        out->bypass_ttft_p90_ms = sb_replay_percentile(d->bypass_ttft, d->n_bypass_done, 0.90) * 1e-6;
        out->bypass_ttft_p99_ms = sb_replay_percentile(d->bypass_ttft, d->n_bypass_done, 0.99) * 1e-6;
    }
    /* With several gateways, the adaptive figures add up over them (one gateway: its own). */
    double share_sum = 0;
    for (uint32_t g = 0; g < d->n_gw; g++) {
        if (!d->gw[g].adaptive)
            continue;
        out->adaptive = true;
        out->adaptive_generations += sb_adaptive_generation(d->gw[g].adaptive);
        out->imbalance_changes += sb_adaptive_regime_changes(d->gw[g].adaptive, SB_DETECT_IMBALANCE);
        share_sum += d->gw[g].share_sum;
    }
    if (out->adaptive)
        out->share_mean = out->adaptive_ticks ? share_sum / (double)out->adaptive_ticks : 0;
}

int sb_replay_run(const sb_replay_workload *w, const sb_replay_policy *p, const sb_replay_opts *o,
                  sb_replay_result *out, char *err, size_t errcap)
{
    char dummy[1]; /* the error sink when the caller wants none: d lives only in this call */
    memset(out, 0, sizeof(*out));
    driver d = {.w = w,
                .p = p,
                .o = o,
                .base = p->profile && o->kv_events ? sb_profile_with_events(p->profile) : p->profile,
                .out = out,
                .err = err ? err : dummy,
                .errcap = err ? errcap : 1,
                .first_arrival = NEVER,
                .now = EPOCH_NS};
    if (drv_check_opts(&d) == 0 && drv_set_up(&d) == 0) {
        snprintf(out->policy, sizeof(out->policy), "%s", p->name);
        out->rate = w->rate * o->time_scale;
        size_t roots = select_roots(w, o, &d.total);
        /* Probing starts before traffic: one scrape of everyone at the start, then each
         * replica on its own phase; gateway g's phases lag by g / G of a replica's slot. */
        for (uint32_t g = 0; g < d.n_gw; g++)
            for (uint32_t i = 0; i < d.n && o->scrape_ns; i++) {
                scrape(&d, &d.gw[g], i);
                sb_ns slot = o->scrape_ns * (i + 1) / d.n;
                sb_ns lag = o->scrape_ns * g / ((sb_ns)d.n * d.n_gw);
                drv_push(&d, EPOCH_NS + slot + lag, EV_SCRAPE, i, g);
            }
        for (uint32_t g = 0; g < d.n_gw; g++)
            if (d.gw[g].adaptive || d.gw[g].adm)
                drv_push(&d, EPOCH_NS + d.tick_ns, EV_TICK, g, 0);
        drv_schedule_restarts(&d, roots);
        size_t cursor = 0, admitted = 0;
        while (d.settled < d.total && !d.error) {
            while (cursor < w->n && w->reqs[cursor].is_followup)
                cursor++;
            sb_ns t_root = admitted < roots ? EPOCH_NS + drv_scaled_arrival(o, &w->reqs[cursor]) : NEVER;
            const sb_replay_event *top = sb_replay_queue_peek(&d.q);
            sb_ns t_ev = top ? top->time_ns : NEVER;
            sb_ns t = t_ev <= t_root ? t_ev : t_root;
            if (d.n_dirty && t > d.now) {
                flush_dirty(&d);
                continue;
            }
            if (t == NEVER) {
                drv_fail(&d, -EINVAL, "internal: requests left unsettled with nothing to happen");
                break;
            }
            d.now = t > d.now ? t : d.now;
            out->events++;
            if (t_ev <= t_root) {
                sb_replay_event ev;
                sb_replay_queue_pop(&d.q, &ev);
                handle(&d, &ev);
            } else {
                admitted++;
                arrive(&d, (uint32_t)cursor++);
            }
        }
        if (!d.error) {
            summarise(&d);
            if (out->have_bands)
                drv_summarise_bands(&d);
        }
    }
    drv_tear_down(&d);
    if (d.error) {
        sb_replay_result_free(out);
        return d.error;
    }
    return 0;
}

void sb_replay_result_free(sb_replay_result *r)
{
    if (!r)
        return;
    sb_free(r->per_gateway);
    r->per_gateway = NULL;
    sb_free(r->ttft_sorted);
    sb_free(r->per_replica);
    sb_free(r->records);
    r->ttft_sorted = NULL;
    r->per_replica = NULL;
    r->records = NULL;
    r->n_ttft = r->n_records = 0;
}
