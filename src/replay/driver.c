/* driver: the discrete-event loop, the request life cycle, simulated probing, and the summary
 * of a run. */
#include "replay/driver_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "proto/prompt.h"
#include "replay/latency.h"
#include "sim/answer.h"

void sb_replay_opts_default(sb_replay_opts *o)
{
    *o = (sb_replay_opts){
        .replicas = 1,
        .engine = sb_engine_params_default(),
        .scrape_ns = SB_MS(100), /* proto/config.h: probe interval_ms default */
        .time_scale = 1.0,
        .seed = 1,
        .model = DEFAULT_MODEL,
        .max_prompt_blocks = 16384, /* proto/config.h max_prompt_blocks default */
        .pool = sb_pool_params_default(),
        .adaptive_params = sb_adaptive_params_default(),
    };
    sb_flow_config_default(&o->flow);
}

static int fail(driver *d, int rc, const char *msg)
{
    if (!d->error) {
        d->error = rc;
        snprintf(d->err, d->errcap, "%s", msg);
    }
    return rc;
}

static void push(driver *d, sb_ns t, uint32_t kind, uint32_t a, uint64_t b)
{
    if (sb_replay_queue_push(&d->q, t, kind, a, b) < 0)
        fail(d, -ENOMEM, "out of memory");
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
            push(d, t, EV_STEP, rep, 0);
        }
    }
    d->n_dirty = 0;
}

/* ---- probing ------------------------------------------------------------------------------- */

/* The report net/probe.c would build from this engine's /metrics page (sim/sim_metrics.c
 * renders exactly these metrics): running, waiting, KV usage, capacity, LoRA. */
static void scrape(driver *d, uint32_t rep)
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
    sb_endpoint_report_set(sb_router_endpoint(d->router, 0, rep), &r, SB_REPORT_SCRAPE, d->now);
    /* As net/probe.c: the engine's cache size bounds what the prefix index believes it holds
     * (replicas never restart here, so nothing is ever cleared). */
    sb_router_prefix_capacity(d->router, 0, rep, (uint64_t)m.num_gpu_blocks * m.block_size);
}

/* ---- request life ---------------------------------------------------------------------------- */

static sb_replay_fleet_view fleet_view(driver *d)
{
    return (sb_replay_fleet_view){
        .now = d->now, .n_replicas = d->n, .router = d->router, .pool = 0, .engines = d->engines, .rng = &d->prng};
}

/* status: flow control's answer to this turn (429, 503), or 0 for any other shedding. */
static void settle_shed(driver *d, uint32_t idx, uint16_t status)
{
    d->rt[idx].status = status;
    /* A conversation whose turn is shed ends there: its later turns are shed too. */
    for (; idx != SB_REPLAY_NO_REQUEST; idx = d->w->reqs[idx].followup) {
        d->rt[idx].outcome = SB_REPLAY_SHED;
        d->out->shed++;
        d->out->requests++;
        d->settled++;
        if (d->out->records) {
            sb_replay_record *rec = &d->out->records[idx];
            rec->outcome = SB_REPLAY_SHED;
            rec->arrival_ns = d->rt[idx].arrival_ns;
            rec->prompt_tokens = d->w->reqs[idx].n_prompt;
            rec->band = d->rt[idx].band;
            rec->status = d->rt[idx].status;
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
        fail(d, rc, rc == -ENOMEM ? "out of memory" : "an engine refused a request it should take");
        return;
    }
    mark_dirty(d, rep);
}

/* What the gateway's byte bounds count of a request: its body, 4 bytes per prompt token (the
 * ratio the gateway assumes). */
static uint64_t body_bytes(const sb_replay_request *r)
{
    return (uint64_t)r->n_prompt * 4;
}

/* Schedules a request now: builds its descriptor, asks the policy, dispatches it. */
static void route(driver *d, uint32_t idx)
{
    const sb_replay_workload *w = d->w;
    const sb_replay_request *r = &w->reqs[idx];
    req_rt *rt = &d->rt[idx];
    rt->dispatch_ns = d->now;
    /* What the gateway's inspection would hand the core: proto/inspect.c hashes 64-byte
     * blocks of the canonical prompt, chained, seeded by model and adapter; here a block is
     * block_tokens token ids (64 bytes at the default 16). */
    sb_replay_prompt_tokens(w, r, d->tokens);
    uint32_t bt = d->block_tokens;
    size_t nb = r->n_prompt / bt;
    if (nb > d->o->max_prompt_blocks)
        nb = d->o->max_prompt_blocks;
    uint64_t h = d->hash_seeds[r->adapter];
    for (size_t i = 0; i < nb; i++)
        d->rhash[i] = h = XXH3_64bits_withSeed(d->tokens + i * bt, (size_t)bt * sizeof(uint32_t), h);
    uint32_t pk = r->n_prompt < PREFIX_KEY_TOKENS ? r->n_prompt : PREFIX_KEY_TOKENS;
    sb_request_desc rq = {.sched = {
        .pool = 0,
        .adapter = r->adapter ? (int)r->adapter - 1 : -1,
        .block_hashes = d->rhash,
        .n_blocks = nb,
        .prompt_bytes = (size_t)r->n_prompt * 4,
        .prompt_tokens = r->n_prompt,
        .session_key = r->session ? XXH3_64bits(&r->session, sizeof(r->session)) : 0,
        .prefix_key = XXH3_64bits(d->tokens, pk * sizeof(uint32_t)),
        /* The pool's current profile, as the gateway reads it per request: with adaptive
         * weights, the snapshot in force (for a queued request, the one in force when it
         * leaves the queue, as in the gateway). */
        .profile = d->p->profile ? sb_router_pool_profile(d->router, 0) : NULL,
    }, .band = (enum sb_band)rt->band, .tenant = rt->tenant, .body_bytes = body_bytes(r), .stream = true};
    /* Released by the gate (drain): as in the gateway, it goes where the gate saw room. */
    if (rt->queued)
        sb_admission_mark_released(d->adm, 0, &rq.sched);
    size_t ne = engine_hashes(d, r);

    int pick;
    sb_replay_fleet_view fv;
    sb_replay_request_view rv;
    if (d->p->custom) {
        fv = fleet_view(d);
        rv = (sb_replay_request_view){.id = idx,
                                      .sched = &rq.sched,
                                      .tokens = d->tokens,
                                      .n_tokens = r->n_prompt,
                                      .engine_hashes = d->ehash,
                                      .n_engine_hashes = ne,
                                      .engine_adapter = r->adapter,
                                      .max_tokens = r->max_tokens};
        pick = d->p->custom->pick(d->pstate, &fv, &rv);
        if (pick >= (int)d->n) {
            fail(d, -EINVAL, "a custom policy picked a replica out of range");
            return;
        }
    } else {
        sb_ranking rk;
        pick = sb_decide(d->router, &rq, 1, d->now, &rk);
    }
    if (pick < 0) {
        settle_shed(d, idx, 0);
        return;
    }
    rt->replica = (uint32_t)pick;
    rt->ticket = sb_router_dispatched(d->router, 0, (uint32_t)pick, r->n_prompt, d->now);
    d->out->per_replica[pick]++;
    if (d->p->custom && d->p->custom->on_dispatch)
        d->p->custom->on_dispatch(d->pstate, &fv, &rv, (uint32_t)pick);
    if (d->o->net_delay_ns)
        push(d, d->now + d->o->net_delay_ns, EV_DELIVER, (uint32_t)pick, idx);
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
static bool on_admission_dispatch(void *ctx, void *user)
{
    driver *d = ctx;
    route(d, index_of(user));
    return !d->error;
}

/* Evicted (429) or expired (503) while queued. */
static void on_admission_refuse(void *ctx, void *user, const sb_admission_refusal *r)
{
    settle_shed(ctx, index_of(user), r->status);
}

/* As the gateway (net/admission.c): refused (no endpoint available: 503; sheddable under
 * saturation or a full queue: 429), scheduled now, or queued. */
static void admit(driver *d, uint32_t idx)
{
    req_rt *rt = &d->rt[idx];
    sb_request_desc rq = {
        .sched.pool = 0, .band = (enum sb_band)rt->band, .tenant = rt->tenant, .body_bytes = body_bytes(&d->w->reqs[idx])};
    sb_admission_refusal r;
    int a = sb_admission_admit(d->adm, &rq, d->now, &r);
    if (a == SB_ADMIT_DISPATCH) {
        route(d, idx);
        return;
    }
    if (a == SB_ADMIT_WAIT) {
        a = sb_admission_enqueue(d->adm, &rq, item_of(idx), d->now, NULL, &r);
        if (a == SB_ADMIT_QUEUED) {
            rt->queued = true;
            return;
        }
    }
    settle_shed(d, idx, r.status);
}

/* Re-examines the queue once at this instant, after whatever else happens at it (an answer
 * ends inside an engine's step: scheduling from there would submit to an engine mid-step). */
static void want_drain(driver *d, sb_ns at)
{
    if (d->adm && !d->drain_pending) {
        d->drain_pending = true;
        push(d, at, EV_DRAIN, 0, 0);
    }
}

/* The gateway's adaptive timer (net/gateway.c on_adaptive_tick), the same core calls: the pool's
 * detectors tick and a published snapshot goes in force (core/control.h); then flow control's
 * queue is re-examined (sb_admission_tick). */
static void tick(driver *d)
{
    if (d->adaptive) {
        sb_control_tick(d->router, 0, d->adaptive, d->p->profile, true, d->now);
        double share = sb_adaptive_share(d->adaptive);
        d->share_sum += share;
        d->out->share_max = share > d->out->share_max ? share : d->out->share_max;
        d->out->adaptive_ticks++;
    }
    if (d->adm)
        sb_admission_tick(d->adm, d->now);
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
    /* The gateway counts an arrival once its model resolves, before admission. */
    if (d->adaptive)
        sb_adaptive_arrivals(d->adaptive, 1);
    if ((uint64_t)r->n_prompt + r->max_tokens > (uint64_t)ep->num_gpu_blocks * ep->block_size) {
        settle_shed(d, idx, 0); /* no replica could ever hold it (the engine says -E2BIG) */
        return;
    }
    if (d->adm)
        admit(d, idx);
    else
        route(d, idx);
}

static void deliver(driver *d, uint32_t rep, uint32_t idx)
{
    /* The hashes were computed at arrival into scratch since reused: compute them again. */
    sb_replay_prompt_tokens(d->w, &d->w->reqs[idx], d->tokens);
    submit(d, rep, idx, engine_hashes(d, &d->w->reqs[idx]));
}

static void first_byte(driver *d, uint32_t rep, uint32_t idx)
{
    sb_router_first_byte(d->router, 0, rep, &d->rt[idx].ticket, d->now);
    sb_router_first_token(d->router, 0, rep, &d->rt[idx].ticket);
}

/* The gateway sees the answer end at `now`: release the accounting, start the next turn. */
static void answered(driver *d, uint32_t rep, uint32_t idx)
{
    req_rt *rt = &d->rt[idx];
    const sb_replay_request *r = &d->w->reqs[idx];
    sb_router_finished(d->router, 0, rep, &rt->ticket, true, true, d->now);
    /* As net/proxy.c does for a streamed answer: the router learns the replica's prefill speed. */
    sb_router_observe_ttft(d->router, 0, rep, r->n_prompt, rt->cached_tokens, rt->ttft_ns);
    if (d->p->custom && d->p->custom->on_finish) {
        sb_replay_fleet_view fv = fleet_view(d);
        d->p->custom->on_finish(d->pstate, &fv, idx, rep, true);
    }
    rt->outcome = SB_REPLAY_COMPLETED;
    d->out->completed++;
    d->out->requests++;
    d->settled++;
    d->last_answer = d->now > d->last_answer ? d->now : d->last_answer;
    uint32_t next = r->followup;
    if (next != SB_REPLAY_NO_REQUEST)
        push(d, d->now + d->w->reqs[next].think_ns, EV_ARRIVE, 0, next);
    /* Capacity freed: net/admission.c re-examines the queue when a request ends. */
    want_drain(d, d->now);
}

/* The engine's final accounting of a request; client-side times add the delay both ways. */
static void account(driver *d, uint32_t idx, const sb_engine_usage *u)
{
    sb_ns rtt = 2 * d->o->net_delay_ns;
    sb_ns wait = d->rt[idx].dispatch_ns - d->rt[idx].arrival_ns; /* queued by flow control */
    sb_replay_result *out = d->out;
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
                                  .wait_ns = wait};
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
            push(d, ev->time_ns + delay, EV_FIRST, rep, idx);
        else
            first_byte(d, rep, idx);
        break;
    case SB_ENGINE_EV_TOKEN: d->itl_hist[sb_replay_itl_bucket(ev->itl_ns)]++; break;
    case SB_ENGINE_EV_FINISHED:
        account(d, idx, &ev->usage);
        if (delay) {
            push(d, ev->time_ns + delay, EV_DONE, rep, idx);
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
    switch (ev->kind) {
    case EV_STEP:
        d->scheduled[ev->a] = false;
        d->cur_replica = ev->a;
        sb_engine_advance(d->engines[ev->a], d->now, on_engine_event, d);
        mark_dirty(d, ev->a);
        break;
    case EV_SCRAPE:
        scrape(d, ev->a);
        push(d, d->now + d->o->scrape_ns, EV_SCRAPE, ev->a, 0);
        break;
    case EV_ARRIVE: arrive(d, (uint32_t)ev->b); break;
    case EV_DELIVER: deliver(d, ev->a, (uint32_t)ev->b); break;
    case EV_FIRST: first_byte(d, ev->a, (uint32_t)ev->b); break;
    case EV_DONE: answered(d, ev->a, (uint32_t)ev->b); break;
    case EV_TICK:
        tick(d);
        push(d, d->now + d->tick_ns, EV_TICK, 0, 0);
        break;
    case EV_DRAIN:
        d->drain_pending = false;
        sb_admission_release(d->adm, 0, d->now);
        break;
    }
}

/* ---- set-up, loop, summary ------------------------------------------------------------------- */

static sb_ns scaled_arrival(const sb_replay_opts *o, const sb_replay_request *r)
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
            (o->max_arrival_ns && scaled_arrival(o, r) >= o->max_arrival_ns))
            break;
        roots++;
        for (uint32_t k = (uint32_t)i; k != SB_REPLAY_NO_REQUEST; k = w->reqs[k].followup)
            (*total)++;
    }
    return roots;
}

static void summarise(driver *d)
{
    sb_replay_result *out = d->out;
    sb_replay_latency_summary(out, d->ttft, d->e2e, d->n_done, d->itl_hist);

    uint64_t hits = 0, queries = 0;
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
    if (d->adaptive) {
        out->adaptive = true;
        out->adaptive_generations = sb_adaptive_generation(d->adaptive);
        out->imbalance_changes = sb_adaptive_regime_changes(d->adaptive, SB_DETECT_IMBALANCE);
        out->share_mean = out->adaptive_ticks ? d->share_sum / (double)out->adaptive_ticks : 0;
    }
}

static int check_opts(driver *d)
{
    const sb_replay_opts *o = d->o;
    if (o->replicas == 0)
        return fail(d, -EINVAL, "at least one replica is needed");
    if (sb_engine_params_check(&o->engine) < 0)
        return fail(d, -EINVAL,
                    "engine parameters rejected (a zero size, a block size over 4096, or "
                    "max_num_seqs above max_num_batched_tokens)");
    if (d->w->n_adapters > MAX_ADAPTERS)
        return fail(d, -EINVAL, "more than 64 LoRA adapters (the router's adapter masks hold 64)");
    if (d->w->n_adapters && o->engine.max_loras == 0)
        return fail(d, -EINVAL, "the workload uses LoRA adapters but max_loras is 0");
    double bt = o->pool.bytes_per_token > 0 ? (double)o->pool.block_bytes / o->pool.bytes_per_token : 0;
    if (!(bt >= 1) || bt > 65536 || !(o->time_scale > 0) || !isfinite(o->time_scale))
        return fail(d, -EINVAL,
                    "the router's block size (block_bytes / bytes_per_token) and time_scale must be "
                    "positive");
    d->block_tokens = (uint32_t)bt;
    if (!d->p->profile && !d->p->custom)
        return fail(d, -EINVAL, "the policy is not resolved");
    if (o->adaptive && !d->p->profile)
        return fail(d, -EINVAL, "adaptive weights need a profile policy (a custom rule runs no profile)");
    const char *why = o->adaptive ? sb_adaptive_params_check(&o->adaptive_params) : NULL;
    if (why)
        return fail(d, -EINVAL, why);
    double sum = 0;
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        if (!(o->band_mix[b] >= 0) || !isfinite(o->band_mix[b]))
            return fail(d, -EINVAL, "band mix fractions must be finite and >= 0");
        sum += o->band_mix[b];
    }
    d->out->have_bands = o->flow_control || sum > 0;
    return 0;
}

/* The secret keying the run's table slots: a function of the seed apart from the streams
 * the seed drives (the constant separates them), so a run repeats bit for bit. */
static uint64_t table_secret_of(uint64_t seed)
{
    uint64_t z = seed ^ 0x53575441424c4553ULL; /* "SWTABLES" */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The per-run arrays, the router and the engines. */
static int alloc_state(driver *d, uint64_t secret)
{
    const sb_replay_opts *o = d->o;
    const sb_replay_workload *w = d->w;
    sb_replay_result *out = d->out;
    d->n = o->replicas;
    d->engines = sb_calloc(d->n, sizeof(*d->engines));
    d->scheduled = sb_calloc(d->n, sizeof(bool));
    d->is_dirty = sb_calloc(d->n, sizeof(bool));
    d->dirty = sb_calloc(d->n, sizeof(uint32_t));
    d->rt = sb_calloc(w->n ? w->n : 1, sizeof(req_rt));
    d->itl_hist = sb_calloc(SB_REPLAY_ITL_BUCKETS, sizeof(uint64_t));
    d->ttft = sb_malloc((w->n ? w->n : 1) * sizeof(sb_ns));
    d->e2e = sb_malloc((w->n ? w->n : 1) * sizeof(sb_ns));
    size_t maxp = w->max_prompt ? w->max_prompt : 1;
    d->tokens = sb_malloc(maxp * sizeof(uint32_t));
    d->rhash = sb_malloc((maxp / d->block_tokens + 1) * sizeof(uint64_t));
    d->ehash = sb_malloc((maxp / o->engine.block_size + 1) * sizeof(uint64_t));
    out->per_replica = sb_calloc(d->n, sizeof(uint64_t));
    out->n_replicas = d->n;
    if (o->keep_records) {
        out->records = sb_calloc(w->n ? w->n : 1, sizeof(sb_replay_record));
        out->n_records = w->n;
    }
    d->router = sb_router_new(o->seed, secret);
    if (!d->engines || !d->scheduled || !d->is_dirty || !d->dirty || !d->rt || !d->itl_hist || !d->ttft || !d->e2e ||
        !d->tokens || !d->rhash || !d->ehash || !out->per_replica || (o->keep_records && !out->records) || !d->router)
        return fail(d, -ENOMEM, "out of memory");
    sb_engine_params ep = o->engine;
    ep.hash_secret = secret;
    for (uint32_t i = 0; i < d->n; i++)
        if (!(d->engines[i] = sb_engine_new(&ep)))
            return fail(d, -ENOMEM, "out of memory (engines)");
    return 0;
}

/* One pool, as a config with one pool of `replicas` endpoints would build it. A custom policy
 * never runs the pool's profile; the pool still needs one. */
static int set_up_pool(driver *d)
{
    const sb_replay_opts *o = d->o;
    const sb_profile *prof = d->p->profile ? d->p->profile : sb_profile_builtin("default");
    const char *model = o->model ? o->model : DEFAULT_MODEL;
    if (sb_router_add_pool(d->router, "replay", prof, d->n, &o->pool) != 0 ||
        sb_router_add_model(d->router, 0, model, SB_MODEL_SERVED) != 0)
        return fail(d, -ENOMEM, "out of memory (router)");
    d->hash_seeds[0] = sb_prompt_seed(model, strlen(model), "", 0);
    for (uint32_t a = 1; a <= d->w->n_adapters; a++) {
        char name[32];
        int len = snprintf(name, sizeof(name), "adapter-%u", a);
        if (sb_router_add_model(d->router, 0, name, SB_MODEL_ADAPTER) != 0)
            return fail(d, -ENOMEM, "out of memory (router)");
        d->hash_seeds[a] = sb_prompt_seed(model, strlen(model), name, (size_t)len);
    }
    /* The consistent-hash ring of the session and prefix-hash scorers, as net/gateway.c builds
     * it; endpoints have no address here, so the ring names them "#<index>". */
    if (sb_router_build_ring(d->router, 0) < 0)
        return fail(d, -ENOMEM, "out of memory (router)");
    return 0;
}

static int set_up(driver *d)
{
    const sb_replay_opts *o = d->o;
    const sb_replay_workload *w = d->w;
    /* Table slots are keyed by a secret the live gateway draws at random; here it comes from
     * the seed, so runs repeat (and only placement depends on it: results do not). */
    uint64_t secret = table_secret_of(o->seed);
    int rc = alloc_state(d, secret);
    if (rc < 0 || (rc = set_up_pool(d)) < 0)
        return rc;
    d->prng = o->seed * 0x9E3779B97F4A7C15ULL ^ 0xD1B54A32D192ED03ULL;
    if (!d->prng)
        d->prng = 1;
    if (d->p->custom && d->p->custom->create) {
        sb_replay_policy_env env = {
            .n_replicas = d->n, .engine = &o->engine, .router_block_tokens = d->block_tokens, .seed = o->seed,
            .hash_secret = secret};
        if (!(d->pstate = d->p->custom->create(&env)))
            return fail(d, -ENOMEM, "out of memory (policy state)");
    }
    for (size_t i = 0; i < w->n; i++)
        d->rt[i].band = SB_BAND_STANDARD;
    if (d->out->have_bands)
        drv_assign_bands(d);
    /* As net/gateway.c start_adaptive(): the pool routes with the configurator's snapshot from
     * the start (generation 1: the base weights for a balanced pool), if it has weight to move. */
    if (o->adaptive) {
        if (!(d->adaptive = sb_adaptive_new(&o->adaptive_params, d->p->profile)))
            return fail(d, -ENOMEM, "out of memory (adaptive)");
        sb_control_publish(d->router, 0, d->adaptive, d->p->profile, true);
    }
    if (o->flow_control) {
        static const sb_admission_ops ops = {.dispatch = on_admission_dispatch, .refuse = on_admission_refuse};
        sb_flow_config fc = o->flow;
        fc.hash_secret = secret;
        if (!(d->adm = sb_admission_new(d->router, 1, &fc, &ops, d)))
            return fail(d, -EINVAL, "flow control refused its bounds (or out of memory)");
    }
    d->tick_ns = o->scrape_ns && o->scrape_ns < TICK_MAX_NS ? o->scrape_ns : TICK_MAX_NS;
    return 0;
}

static void tear_down(driver *d)
{
    if (d->pstate && d->p->custom->destroy)
        d->p->custom->destroy(d->pstate);
    for (uint32_t i = 0; d->engines && i < d->n; i++)
        sb_engine_free(d->engines[i]);
    sb_free(d->engines);
    sb_free(d->scheduled);
    sb_free(d->is_dirty);
    sb_free(d->dirty);
    sb_free(d->rt);
    sb_free(d->itl_hist);
    sb_free(d->ttft);
    sb_free(d->e2e);
    sb_free(d->tokens);
    sb_free(d->answer);
    sb_free(d->rhash);
    sb_free(d->ehash);
    sb_adaptive_free(d->adaptive);
    sb_admission_free(d->adm);
    sb_router_free(d->router);
    sb_replay_queue_free(&d->q);
}

int sb_replay_run(const sb_replay_workload *w, const sb_replay_policy *p, const sb_replay_opts *o,
                  sb_replay_result *out, char *err, size_t errcap)
{
    char dummy[1]; /* the error sink when the caller wants none: d lives only in this call */
    memset(out, 0, sizeof(*out));
    driver d = {.w = w,
                .p = p,
                .o = o,
                .out = out,
                .err = err ? err : dummy,
                .errcap = err ? errcap : 1,
                .first_arrival = NEVER,
                .now = EPOCH_NS};
    if (check_opts(&d) == 0 && set_up(&d) == 0) {
        snprintf(out->policy, sizeof(out->policy), "%s", p->name);
        out->rate = w->rate * o->time_scale;
        size_t roots = select_roots(w, o, &d.total);
        /* Probing starts before traffic: one scrape of everyone at the start, then each
         * replica on its own phase. */
        for (uint32_t i = 0; i < d.n && o->scrape_ns; i++) {
            scrape(&d, i);
            push(&d, EPOCH_NS + o->scrape_ns * (i + 1) / d.n, EV_SCRAPE, i, 0);
        }
        if (d.adaptive || d.adm)
            push(&d, EPOCH_NS + d.tick_ns, EV_TICK, 0, 0);
        size_t cursor = 0, admitted = 0;
        while (d.settled < d.total && !d.error) {
            while (cursor < w->n && w->reqs[cursor].is_followup)
                cursor++;
            sb_ns t_root = admitted < roots ? EPOCH_NS + scaled_arrival(o, &w->reqs[cursor]) : NEVER;
            const sb_replay_event *top = sb_replay_queue_peek(&d.q);
            sb_ns t_ev = top ? top->time_ns : NEVER;
            sb_ns t = t_ev <= t_root ? t_ev : t_root;
            if (d.n_dirty && t > d.now) {
                flush_dirty(&d);
                continue;
            }
            if (t == NEVER) {
                fail(&d, -EINVAL, "internal: requests left unsettled with nothing to happen");
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
    tear_down(&d);
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
    sb_free(r->ttft_sorted);
    sb_free(r->per_replica);
    sb_free(r->records);
    r->ttft_sorted = NULL;
    r->per_replica = NULL;
    r->records = NULL;
    r->n_ttft = r->n_records = 0;
}
