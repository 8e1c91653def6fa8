/* The fleet events of a replay: several gateway replicas (opts.gateways) and which requests
 * reach which, traffic that bypasses every gateway (opts.bypass), and replica restarts
 * (opts.restart_every_ns, opts.restarts) with the requests they lose. Every draw is seeded by
 * the run's seed and the workload only, so every policy sees the same fleet. */
#include "replay/driver_internal.h"

#include <errno.h>

/* splitmix64's finaliser: the seeded draws of the fleet events. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Past every gateway: a uniformly random replica per request (seeded by the request, so
 * every policy sees the same), nobody's accounting. */
void drv_bypass(driver *d, uint32_t idx)
{
    uint64_t z = mix64((d->o->seed ^ 0x4259504153535250ULL) + (uint64_t)idx * 0x9E3779B97F4A7C15ULL); /* "BYPASSRP" */
    uint32_t rep = (uint32_t)(z % d->n);
    d->rt[idx].replica = rep; /* not in per_replica: that is the gateways' balance */
    if (d->o->net_delay_ns)
        drv_push(d, d->now + d->o->net_delay_ns, EV_DELIVER, rep, idx);
    else
        drv_deliver(d, rep, idx);
}

/* The request was on a replica that restarted: the gateway sees the connection fail (no retry:
 * the answer may have begun), the conversation ends there. */
static void lost(driver *d, uint32_t rep, uint32_t idx)
{
    req_rt *rt = &d->rt[idx];
    rt->on_engine = false;
    rt->outcome = SB_REPLAY_FAILED;
    d->settled++;
    if (d->out->records) {
        sb_replay_record *rec = &d->out->records[idx];
        *rec = (sb_replay_record){.arrival_ns = rt->arrival_ns,
                                  .replica = rep,
                                  .prompt_tokens = d->w->reqs[idx].n_prompt,
                                  .outcome = SB_REPLAY_FAILED,
                                  .band = rt->band,
                                  .gateway = rt->gw,
                                  .bypass = rt->bypass};
    }
    if (rt->bypass) {
        d->out->bypass_failed++;
        d->out->bypass_requests++;
    } else {
        gateway *g = &d->gw[rt->gw];
        sb_router_finished(g->router, 0, rep, &rt->ticket, false, true, d->now);
        drv_tell_peers(d, idx, EV_PEER_DONE);
        if (d->p->custom && d->p->custom->on_finish) {
            sb_replay_fleet_view fv = drv_fleet_view(d, g);
            d->p->custom->on_finish(g->pstate, &fv, idx, rep, false);
        }
        d->out->failed++;
        d->out->requests++;
        drv_want_drain(d, g, d->now);
    }
    uint32_t next = d->w->reqs[idx].followup;
    if (next != SB_REPLAY_NO_REQUEST)
        drv_settle_shed(d, next, 0);
}

/* The replica's process is replaced: a fresh engine (empty cache, counters at zero), and the
 * requests on the old one are lost. The old engine's counters are kept for the run's totals. */
void drv_restart(driver *d, uint32_t rep)
{
    sb_engine_metrics m;
    sb_engine_metrics_get(d->engines[rep], &m);
    d->gone_hits += m.prefix_cache_hits_total;
    d->gone_queries += m.prefix_cache_queries_total;
    d->gone_steps += m.num_steps_total;
    sb_engine_params ep = d->o->engine;
    ep.hash_secret = drv_table_secret(d->o->seed);
    ep.kv_events = d->o->kv_events;
    sb_engine *fresh = sb_engine_new(&ep);
    if (!fresh) {
        drv_fail(d, -ENOMEM, "out of memory (engines)");
        return;
    }
    sb_engine_free(d->engines[rep]);
    d->engines[rep] = fresh;
    d->engine_gen[rep]++;
    drv_events_restart(d, rep);
    d->scheduled[rep] = false;
    d->out->restarts++;
    /* O(requests) per restart: restarts are few. */
    for (uint32_t i = 0; i < (uint32_t)d->w->n; i++)
        if (d->rt[i].on_engine && d->rt[i].replica == rep)
            lost(d, rep, i);
}

/* The restarts: every restart_every_ns from a seeded phase, or `restarts` of them evenly over
 * the span of the run's root arrivals; replicas in turn from a seeded one. */
void drv_schedule_restarts(driver *d, size_t roots)
{
    const sb_replay_opts *o = d->o;
    if (!o->restart_every_ns && !o->restarts)
        return;
    uint64_t z = mix64(o->seed ^ 0x5245535441525453ULL); /* "RESTARTS" */
    uint32_t first = (uint32_t)(z % d->n);
    if (o->restart_every_ns) {
        sb_ns phase = (sb_ns)(mix64(z) % o->restart_every_ns);
        drv_push(d, EPOCH_NS + phase, EV_RESTART, first, 0);
        return;
    }
    sb_ns t0 = NEVER, t1 = 0;
    size_t seen = 0;
    for (size_t i = 0; i < d->w->n && seen < roots; i++) {
        if (d->w->reqs[i].is_followup)
            continue;
        sb_ns t = drv_scaled_arrival(o, &d->w->reqs[i]);
        t0 = t < t0 ? t : t0;
        t1 = t > t1 ? t : t1;
        seen++;
    }
    if (!seen)
        return;
    for (uint32_t j = 0; j < o->restarts; j++)
        drv_push(d, EPOCH_NS + t0 + (t1 - t0) * (j + 1) / (o->restarts + 1), EV_RESTART, (first + j) % d->n, 0);
}

/* Which gateway each request reaches, and which conversations bypass them all. An L4 balancer
 * spreads connections, not requests: a client with a session (a conversation, a user) keeps
 * its keep-alive connection, hence its gateway (a seeded hash of the session key); a request
 * without one comes on a connection of its own (a seeded hash of its index). Bypass is drawn
 * per conversation: a client either talks to the gateways or to the replicas. Both depend on
 * the seed and the workload only, so every policy sees the same split. */
void drv_assign_gateways(driver *d)
{
    const sb_replay_workload *w = d->w;
    const sb_replay_opts *o = d->o;
    uint64_t gseed = mix64(o->seed ^ 0x4741544557415953ULL); /* "GATEWAYS" */
    uint64_t bseed = mix64(o->seed ^ 0x4259504153534553ULL); /* "BYPASSES" */
    for (size_t i = 0; i < w->n; i++) {
        const sb_replay_request *r = &w->reqs[i];
        if (d->n_gw > 1) {
            uint64_t key = r->session ? mix64(gseed ^ mix64(r->session)) : mix64(gseed + i * 0x9E3779B97F4A7C15ULL);
            d->rt[i].gw = (uint16_t)(key % d->n_gw);
        }
        if (o->bypass > 0 && !r->is_followup) {
            double u = (double)(mix64(bseed + i * 0x9E3779B97F4A7C15ULL) >> 11) * 0x1.0p-53;
            if (u < o->bypass)
                for (uint32_t k = (uint32_t)i; k != SB_REPLAY_NO_REQUEST; k = w->reqs[k].followup)
                    d->rt[k].bypass = true;
        }
    }
}
