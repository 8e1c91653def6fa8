/* The set-up and tear-down of a replay run: the options' defaults and their validation, the
 * per-run arrays, the engines, and each gateway replica's router, pool, policy state,
 * adaptive weights and flow control. */
#include "replay/driver_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "proto/prompt.h"
#include "replay/latency.h"

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
        .gateways = 1,
        .event_lag_ns = SB_REPLAY_EVENT_LAG_DEFAULT_NS,
        .kv_cover_ns = SB_MS(2000),
        .sync_probe_rtt_ns = SB_MS(1),
        .sync_probe_candidates = 2,
    };
    sb_flow_config_default(&o->flow);
}

int drv_check_opts(driver *d)
{
    const sb_replay_opts *o = d->o;
    if (o->replicas == 0)
        return drv_fail(d, -EINVAL, "at least one replica is needed");
    if (sb_engine_params_check(&o->engine) < 0)
        return drv_fail(d, -EINVAL,
                        "engine parameters rejected (a zero size, a block size over 4096, or "
                        "max_num_seqs above max_num_batched_tokens)");
    if (d->w->n_adapters > MAX_ADAPTERS)
        return drv_fail(d, -EINVAL, "more than 64 LoRA adapters (the router's adapter masks hold 64)");
    if (d->w->n_adapters && o->engine.max_loras == 0)
        return drv_fail(d, -EINVAL, "the workload uses LoRA adapters but max_loras is 0");
    double bt = o->pool.bytes_per_token > 0 ? (double)o->pool.block_bytes / o->pool.bytes_per_token : 0;
    if (!(bt >= 1) || bt > 65536 || !(o->time_scale > 0) || !isfinite(o->time_scale))
        return drv_fail(d, -EINVAL,
                        "the router's block size (block_bytes / bytes_per_token) and time_scale must be "
                        "positive");
    d->block_tokens = (uint32_t)bt;
    if (o->gateways < 1 || o->gateways > SB_REPLAY_MAX_GATEWAYS)
        return drv_fail(d, -EINVAL, "gateways must be 1 to 64");
    if (!(o->bypass >= 0 && o->bypass <= 1))
        return drv_fail(d, -EINVAL, "the bypass fraction must be within 0..1");
    if (o->restart_every_ns && o->restarts)
        return drv_fail(d, -EINVAL, "give restarts as an interval or a count, not both");
    if (o->sync_probe_age_ns && (o->sync_probe_candidates < 1 || o->sync_probe_candidates > SB_DECIDE_MAX_RANKED))
        return drv_fail(d, -EINVAL, "sync probe candidates must be 1 to 8");
    if (!d->p->profile && !d->p->custom)
        return drv_fail(d, -EINVAL, "the policy is not resolved");
    if (o->adaptive && !d->p->profile)
        return drv_fail(d, -EINVAL, "adaptive weights need a profile policy (a custom rule runs no profile)");
    const char *why = o->adaptive ? sb_adaptive_params_check(&o->adaptive_params) : NULL;
    if (why)
        return drv_fail(d, -EINVAL, why);
    double sum = 0;
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        if (!(o->band_mix[b] >= 0) || !isfinite(o->band_mix[b]))
            return drv_fail(d, -EINVAL, "band mix fractions must be finite and >= 0");
        sum += o->band_mix[b];
    }
    d->out->have_bands = o->flow_control || sum > 0;
    return 0;
}

/* The secret keying the run's table slots: a function of the seed apart from the streams
 * the seed drives (the constant separates them), so a run repeats bit for bit. */
uint64_t drv_table_secret(uint64_t seed)
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
    d->n_gw = o->gateways;
    d->gw = sb_calloc(d->n_gw, sizeof(gateway));
    d->engine_gen = sb_calloc(d->n, sizeof(uint32_t));
    out->per_gateway = sb_calloc(d->n_gw, sizeof(uint64_t));
    out->n_gateways = d->n_gw;
    if (o->bypass > 0)
        d->bypass_ttft = sb_malloc((w->n ? w->n : 1) * sizeof(sb_ns));
    if (!d->gw || !d->engine_gen || !out->per_gateway || (o->bypass > 0 && !d->bypass_ttft))
        return drv_fail(d, -ENOMEM, "out of memory");
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
    if (o->gateway_sync && d->n_gw > 1 && !d->p->custom && !d->p->peer) {
        d->peer_tk = sb_calloc((w->n ? w->n : 1) * (size_t)d->n_gw, sizeof(sb_ticket));
        if (!d->peer_tk)
            return drv_fail(d, -ENOMEM, "out of memory");
    }
    if (o->keep_records) {
        out->records = sb_calloc(w->n ? w->n : 1, sizeof(sb_replay_record));
        out->n_records = w->n;
    }
    /* Gateway 0 is seeded as the single gateway always was; the others apart from it. */
    for (uint32_t g = 0; g < d->n_gw; g++) {
        d->gw[g].d = d;
        d->gw[g].index = g;
        if (!(d->gw[g].router = sb_router_new(o->seed + (uint64_t)g * 0x9E3779B97F4A7C15ULL, secret)))
            return drv_fail(d, -ENOMEM, "out of memory");
    }
    if (!d->engines || !d->scheduled || !d->is_dirty || !d->dirty || !d->rt || !d->itl_hist || !d->ttft || !d->e2e ||
        !d->tokens || !d->rhash || !d->ehash || !out->per_replica || (o->keep_records && !out->records))
        return drv_fail(d, -ENOMEM, "out of memory");
    sb_engine_params ep = o->engine;
    ep.hash_secret = secret;
    ep.kv_events = o->kv_events;
    for (uint32_t i = 0; i < d->n; i++)
        if (!(d->engines[i] = sb_engine_new(&ep)))
            return drv_fail(d, -ENOMEM, "out of memory (engines)");
    return 0;
}

/* One pool, as a config with one pool of `replicas` endpoints would build it. A custom policy
 * never runs the pool's profile; the pool still needs one. */
static int set_up_pool(driver *d, sb_router *router)
{
    const sb_replay_opts *o = d->o;
    const sb_profile *prof = d->base ? d->base : sb_profile_builtin("default");
    const char *model = o->model ? o->model : DEFAULT_MODEL;
    sb_pool_params pp = o->pool;
    if (d->p->peer)
        pp.prefix_share = pp.prefix_calibrate = false;
    if (sb_router_add_pool(router, "replay", prof, d->n, &pp) != 0 ||
        sb_router_add_model(router, 0, model, SB_MODEL_SERVED) != 0)
        return drv_fail(d, -ENOMEM, "out of memory (router)");
    d->hash_seeds[0] = sb_prompt_seed(model, strlen(model), "", 0);
    for (uint32_t a = 1; a <= d->w->n_adapters; a++) {
        char name[32];
        int len = snprintf(name, sizeof(name), "adapter-%u", a);
        if (sb_router_add_model(router, 0, name, SB_MODEL_ADAPTER) != 0)
            return drv_fail(d, -ENOMEM, "out of memory (router)");
        d->hash_seeds[a] = sb_prompt_seed(model, strlen(model), name, (size_t)len);
    }
    /* The consistent-hash ring of the session and prefix-hash scorers, as net/gateway.c builds
     * it; endpoints have no address here, so the ring names them "#<index>". */
    if (sb_router_build_ring(router, 0) < 0)
        return drv_fail(d, -ENOMEM, "out of memory (router)");
    return 0;
}

int drv_set_up(driver *d)
{
    const sb_replay_opts *o = d->o;
    const sb_replay_workload *w = d->w;
    /* Table slots are keyed by a secret the live gateway draws at random; here it comes from
     * the seed, so runs repeat (and only placement depends on it: results do not). */
    uint64_t secret = drv_table_secret(o->seed);
    int rc = alloc_state(d, secret);
    if (rc < 0)
        return rc;
    for (uint32_t gi = 0; gi < d->n_gw; gi++) {
        gateway *g = &d->gw[gi];
        uint64_t seed = o->seed + (uint64_t)gi * 0x9E3779B97F4A7C15ULL; /* gateway 0: the run's seed */
        if ((rc = set_up_pool(d, g->router)) < 0)
            return rc;
        g->prng = seed * 0x9E3779B97F4A7C15ULL ^ 0xD1B54A32D192ED03ULL;
        if (!g->prng)
            g->prng = 1;
        if (d->p->custom && d->p->custom->create) {
            sb_replay_policy_env env = {.n_replicas = d->n,
                                        .engine = &o->engine,
                                        .router_block_tokens = d->block_tokens,
                                        .seed = seed,
                                        .hash_secret = secret,
                                        .event_lag_ns = o->event_lag_ns};
            if (!(g->pstate = d->p->custom->create(&env)))
                return drv_fail(d, -ENOMEM, "out of memory (policy state)");
        }
        /* As net/gateway.c start_adaptive(): the pool routes with the configurator's snapshot
         * from the start (generation 1: the base weights for a balanced pool), if it has weight
         * to move. */
        if (o->adaptive) {
            if (!(g->adaptive = sb_adaptive_new(&o->adaptive_params, d->base)))
                return drv_fail(d, -ENOMEM, "out of memory (adaptive)");
            sb_control_publish(g->router, 0, g->adaptive, d->base, true);
        }
        if (o->flow_control) {
            static const sb_admission_ops ops = {.dispatch = drv_on_admission_dispatch,
                                                 .refuse = drv_on_admission_refuse};
            sb_flow_config fc = o->flow;
            fc.hash_secret = secret;
            if (!(g->adm = sb_admission_new(g->router, 1, &fc, &ops, g)))
                return drv_fail(d, -EINVAL, "flow control refused its bounds (or out of memory)");
        }
    }
    for (size_t i = 0; i < w->n; i++)
        d->rt[i].band = SB_BAND_STANDARD;
    if (d->out->have_bands)
        drv_assign_bands(d);
    drv_assign_gateways(d);
    if (drv_events_set_up(d, secret) < 0)
        return drv_fail(d, -ENOMEM, "out of memory (precise index)");
    d->tick_ns = o->scrape_ns && o->scrape_ns < TICK_MAX_NS ? o->scrape_ns : TICK_MAX_NS;
    return 0;
}

void drv_tear_down(driver *d)
{
    drv_events_tear_down(d);
    for (uint32_t g = 0; d->gw && g < d->n_gw; g++) {
        if (d->gw[g].pstate && d->p->custom->destroy)
            d->p->custom->destroy(d->gw[g].pstate);
        sb_adaptive_free(d->gw[g].adaptive);
        sb_admission_free(d->gw[g].adm);
        sb_router_free(d->gw[g].router);
    }
    sb_free(d->gw);
    sb_free(d->engine_gen);
    sb_free(d->bypass_ttft);
    for (uint32_t i = 0; d->engines && i < d->n; i++)
        sb_engine_free(d->engines[i]);
    sb_free(d->engines);
    sb_free(d->scheduled);
    sb_free(d->is_dirty);
    sb_free(d->dirty);
    sb_free(d->rt);
    sb_free(d->peer_tk);
    sb_free(d->itl_hist);
    sb_free(d->ttft);
    sb_free(d->e2e);
    sb_free(d->tokens);
    sb_free(d->answer);
    sb_free(d->rhash);
    sb_free(d->ehash);
    sb_replay_queue_free(&d->q);
}
