#include "core/endpoint.h"

#include <math.h>

sb_health_params sb_health_params_default(void)
{
    /* Envoy's outlier detection defaults are 5 consecutive 5xx and 30 s base ejection; a
     * model-server fleet is small and a dead replica costs a retry per request, so eject
     * sooner and come back sooner. */
    return (sb_health_params){.max_failures = 3,
                              .base_eject_ns = SB_MS(1000),
                              .max_eject_ns = SB_MS(30000),
                              .failure_rate = 0.25,
                              .min_requests = 10,
                              .window_ns = SB_MS(10000),
                              .max_eject_percent = 50};
}

const char *sb_eject_reason_name(enum sb_eject_reason r)
{
    static const char *const names[SB_EJECT_REASONS] = {"consecutive", "failure_rate", "trial"};
    return r >= 0 && r < SB_EJECT_REASONS ? names[r] : "none";
}

static void new_report_epoch(sb_endpoint *ep, enum sb_report_source src, sb_ns now)
{
    ep->report_ns = now;
    ep->report_source = src;
    ep->report_seq++;
    /* Requests sent before this report are in it (as waiting or running) or done. */
    ep->sent_since_report = 0;
}

/* The metrics parser accepts NaN and +-Inf (engines do emit them); a non-finite load
 * value would turn every comparison false and every score NaN, so it counts as absent. */
static sb_endpoint_report sanitize(const sb_endpoint_report *in)
{
    sb_endpoint_report r = *in;
    r.have_running = r.have_running && isfinite(r.running);
    r.have_waiting = r.have_waiting && isfinite(r.waiting);
    r.have_kv = r.have_kv && isfinite(r.kv_usage);
    if (!isfinite(r.requests_total))
        r.requests_total = -1;
    return r;
}

/* Time constant of the traffic share's decayed sums: long enough to hold a few dozen requests
 * of a replica at under one request per second. */
#define SHARE_TAU_NS ((sb_ns)30 * 1000 * 1000 * 1000)
/* Engine requests the sums must hold before the share is read. */
#define SHARE_MIN_REQUESTS 8.0

static void share_update(sb_endpoint *ep, double requests_total, bool restarted, sb_ns now)
{
    if (requests_total < 0)
        return;
    /* A new engine (the counter went back, also across reports without it): what the old one
     * served says nothing of the new one's cache. */
    if (restarted || (ep->share_at && requests_total < ep->share_engine_last)) {
        ep->share_own = ep->share_engine = 0;
        restarted = true;
    }
    if (ep->share_at && !restarted && now >= ep->share_at) {
        double f = exp(-(double)(now - ep->share_at) / (double)SHARE_TAU_NS);
        ep->share_own = ep->share_own * f + (double)(ep->completed - ep->share_own_last);
        ep->share_engine = ep->share_engine * f + (requests_total - ep->share_engine_last);
    }
    ep->share_engine_last = requests_total;
    ep->share_own_last = ep->completed;
    ep->share_at = now;
}

void sb_endpoint_share_sums(const sb_endpoint *ep, sb_ns now, double *own, double *engine)
{
    double f = ep->share_at && now > ep->share_at ? exp(-(double)(now - ep->share_at) / (double)SHARE_TAU_NS) : 1.0;
    *own = ep->share_own * f;
    *engine = ep->share_engine * f;
}

double sb_traffic_share_of(double own, double engine)
{
    if (engine < SHARE_MIN_REQUESTS || !(own < engine))
        return 1.0;
    double s = own / engine;
    return s < 0.05 ? 0.05 : s;
}

double sb_endpoint_traffic_share(const sb_endpoint *ep)
{
    return sb_traffic_share_of(ep->share_own, ep->share_engine);
}

bool sb_endpoint_report_set(sb_endpoint *ep, const sb_endpoint_report *in, enum sb_report_source src, sb_ns now)
{
    sb_endpoint_report clean = sanitize(in), *r = &clean;
    bool restarted = ep->report_ns && r->requests_total >= 0 && ep->report.requests_total >= 0 &&
                     r->requests_total < ep->report.requests_total;
    share_update(ep, r->requests_total, restarted, now);
    ep->report = *r;
    new_report_epoch(ep, src, now);
    return restarted;
}

void sb_endpoint_report_merge(sb_endpoint *ep, const sb_endpoint_report *in, enum sb_report_source src, sb_ns now)
{
    sb_endpoint_report clean = sanitize(in), *r = &clean;
    sb_endpoint_report *cur = &ep->report;
    if (r->have_running) {
        cur->have_running = true;
        cur->running = r->running;
    }
    if (r->have_waiting) {
        cur->have_waiting = true;
        cur->waiting = r->waiting;
    }
    if (r->have_kv) {
        cur->have_kv = true;
        cur->kv_usage = r->kv_usage;
    }
    /* Only a queue figure accounts for the requests sent since the last report: a partial
     * report without one updates its fields but neither resets that count nor freshens the
     * report's age (the queue it would vouch for is still the old one). */
    if (r->have_waiting)
        new_report_epoch(ep, src, now);
}

bool sb_endpoint_is_stale(const sb_endpoint *ep, sb_ns stale_ns, sb_ns now)
{
    return ep->report_ns == 0 || (now > ep->report_ns && now - ep->report_ns > stale_ns);
}

void sb_endpoint_slots_set(sb_endpoint *ep, uint32_t total, uint32_t idle, sb_ns ttl_ns, sb_ns now)
{
    sb_endpoint_slots *s = &ep->slots;
    s->total = total;
    s->idle = idle < total ? idle : total;
    s->at = now;
    s->ttl_ns = ttl_ns;
    s->seq++;
    s->sent_since = s->freed_since = 0;
}

bool sb_endpoint_slots_fresh(const sb_endpoint *ep, sb_ns now)
{
    const sb_endpoint_slots *s = &ep->slots;
    return s->at != 0 && s->total > 0 && (now <= s->at || now - s->at <= s->ttl_ns);
}

uint32_t sb_endpoint_slots_idle(const sb_endpoint *ep)
{
    const sb_endpoint_slots *s = &ep->slots;
    int64_t v = (int64_t)s->idle + s->freed_since - s->sent_since;
    /* Whatever a report says, each of our own requests in flight there holds a slot: a report
     * taken before a request started may arrive after it was sent (the agent's or the scrape's
     * lag) and would otherwise show its slot free. */
    int64_t own = (int64_t)s->total - (int64_t)ep->in_flight;
    if (v > own)
        v = own;
    return v <= 0 ? 0 : v >= s->total ? s->total : (uint32_t)v;
}

double sb_endpoint_waiting(const sb_endpoint *ep)
{
    return (ep->report.have_waiting ? ep->report.waiting : 0) + ep->sent_since_report;
}

double sb_endpoint_running(const sb_endpoint *ep)
{
    /* Without a report, the router's own in-flight count is the best estimate. */
    return ep->report.have_running ? ep->report.running : ep->in_flight;
}

double sb_endpoint_kv_usage(const sb_endpoint *ep)
{
    double kv = ep->report.have_kv ? ep->report.kv_usage : 0;
    /* Prompt tokens sent since the report will occupy blocks: add them when capacity is known. */
    if (ep->report.have_capacity && ep->report.num_gpu_blocks && ep->report.block_size) {
        double cap = (double)ep->report.num_gpu_blocks * ep->report.block_size;
        kv += (double)ep->pending_prefill_tokens / cap;
    }
    return kv > 1 ? 1 : kv < 0 ? 0 : kv;
}

enum sb_health sb_endpoint_health(sb_endpoint *ep, sb_ns now)
{
    if (ep->draining)
        return SB_HEALTH_DRAINING;
    if (ep->active_down)
        return SB_HEALTH_DOWN;
    if (ep->health == SB_HEALTH_EJECTED && now >= ep->ejected_until)
        ep->health = SB_HEALTH_HALF_OPEN;
    return ep->health;
}

bool sb_endpoint_available(const sb_endpoint *ep, sb_ns now)
{
    enum sb_health h = sb_endpoint_health((sb_endpoint *)ep, now);
    return h == SB_HEALTH_HEALTHY || (h == SB_HEALTH_HALF_OPEN && !ep->trial_in_flight);
}

const char *sb_health_name(enum sb_health h)
{
    static const char *const names[] = {"healthy", "ejected", "half-open", "down", "draining"};
    return (unsigned)h < sizeof(names) / sizeof(names[0]) ? names[h] : "unknown";
}

sb_ticket sb_endpoint_dispatch(sb_endpoint *ep, uint32_t prefill_tokens, sb_ns now)
{
    sb_ticket t = {.report_seq = ep->report_seq,
                   .prefill_tokens = prefill_tokens,
                   .uncached_tokens = prefill_tokens,
                   .slots_seq = ep->slots.seq};
    ep->in_flight++;
    ep->slots.sent_since++;
    ep->sent_since_report++;
    ep->pending_prefill_tokens += prefill_tokens;
    ep->pending_uncached_tokens += prefill_tokens;
    ep->dispatched++;
    ep->last_dispatch_ns = now;
    if (sb_endpoint_health(ep, now) == SB_HEALTH_HALF_OPEN) {
        ep->trial_in_flight = true;
        t.trial = true;
    }
    return t;
}

void sb_endpoint_dispatch_uncached(sb_endpoint *ep, sb_ticket *t, uint32_t uncached_tokens)
{
    if (t->first_byte_seen || uncached_tokens >= t->uncached_tokens)
        return;
    uint32_t less = t->uncached_tokens - uncached_tokens;
    ep->pending_uncached_tokens -= less <= ep->pending_uncached_tokens ? less : ep->pending_uncached_tokens;
    t->uncached_tokens = uncached_tokens;
}

/* exp(-(now - epoch) / tau): what is left at now of one unit counted at epoch (an epoch after
 * now, as a reading of a clock that went back, scales up: the stored sum stays exact). */
double sb_sent_epoch_factor(sb_ns epoch, sb_ns now)
{
    double d = now >= epoch ? (double)(now - epoch) : -(double)(epoch - now);
    return exp(-d / (double)SB_SENT_TOKENS_TAU_NS);
}

/* A clock read before the last change reads the sum as of that change: it neither grows nor
 * moves the stamp back. */
double sb_endpoint_sent_tokens(const sb_endpoint *ep, sb_ns now)
{
    if (!ep->sent_scaled)
        return 0.0;
    return ep->sent_scaled * sb_sent_epoch_factor(ep->sent_epoch_ns, now > ep->sent_last_ns ? now : ep->sent_last_ns);
}

/* Adds delta tokens counted at `at` to the sum (never below 0), first moving the sum to the
 * epoch of now's window if it is older. A change read out of order counts at the last one. */
static void sent_tokens_change(sb_endpoint *ep, double delta, sb_ns at, sb_ns now)
{
    if (now < ep->sent_last_ns)
        now = ep->sent_last_ns;
    if (at > now)
        at = now;
    sb_ns epoch = now - now % SB_SENT_EPOCH_NS;
    if (ep->sent_epoch_ns != epoch) {
        ep->sent_scaled = sb_endpoint_sent_tokens(ep, epoch);
        ep->sent_epoch_ns = epoch;
    }
    double v = ep->sent_scaled + delta / sb_sent_epoch_factor(epoch, at);
    ep->sent_scaled = v > 0 ? v : 0;
    ep->sent_last_ns = now;
}

void sb_endpoint_sent_tokens_add(sb_endpoint *ep, uint32_t tokens, sb_ns now)
{
    sent_tokens_change(ep, tokens, now > ep->sent_last_ns ? now : ep->sent_last_ns, now);
}

void sb_endpoint_sent_tokens_withdraw(sb_endpoint *ep, uint32_t tokens, sb_ns at, sb_ns now)
{
    sent_tokens_change(ep, -(double)tokens, at, now);
}

static void release_prefill(sb_endpoint *ep, sb_ticket *t)
{
    if (!t->first_byte_seen) {
        t->first_byte_seen = true;
        ep->pending_prefill_tokens -= t->prefill_tokens <= ep->pending_prefill_tokens ? t->prefill_tokens
                                                                                       : ep->pending_prefill_tokens;
        ep->pending_uncached_tokens -=
            t->uncached_tokens <= ep->pending_uncached_tokens ? t->uncached_tokens : ep->pending_uncached_tokens;
    }
}

void sb_endpoint_first_byte(sb_endpoint *ep, sb_ticket *t, sb_ns now)
{
    (void)now;
    /* The first byte means prefill is done: those tokens are no longer pending work. */
    release_prefill(ep, t);
}

/* Counts one outcome in the failure-rate window (a tumbling one: it starts again window_ns
 * after its first request) and says whether the rate now calls for ejection. */
static bool rate_exceeded(sb_endpoint *ep, bool ok, const sb_health_params *hp, sb_ns now)
{
    if (!(hp->failure_rate > 0) || !hp->window_ns)
        return false;
    if (!ep->window_requests || now - ep->window_start_ns >= hp->window_ns) {
        ep->window_start_ns = now;
        ep->window_requests = ep->window_failures = 0;
    }
    ep->window_requests++;
    ep->window_failures += !ok;
    return !ok && ep->window_requests >= hp->min_requests &&
           (double)ep->window_failures >= hp->failure_rate * (double)ep->window_requests;
}

static void eject(sb_endpoint *ep, enum sb_eject_reason why, const sb_health_params *hp, sb_ns now)
{
    sb_ns backoff = hp->base_eject_ns;
    for (uint32_t i = 0; i < ep->ejections && backoff < hp->max_eject_ns; i++)
        backoff *= 2;
    if (backoff > hp->max_eject_ns)
        backoff = hp->max_eject_ns;
    ep->ejections++;
    ep->ejections_total++;
    ep->ejections_by[why]++;
    ep->health = SB_HEALTH_EJECTED;
    ep->ejected_until = now + backoff;
    /* A failed trial after a failure-rate ejection is still that ejection: a health check
     * must not readmit it (sb_endpoint_active_check). */
    if (!(why == SB_EJECT_TRIAL && ep->eject_why == SB_EJECT_RATE))
        ep->eject_why = (int8_t)why;
    ep->consecutive_failures = 0;
    /* The evidence that ejected it is spent: after readmission the rate starts afresh. */
    ep->window_requests = ep->window_failures = 0;
}

enum sb_eject_reason sb_endpoint_finish(sb_endpoint *ep, sb_ticket *t, bool ok, bool counts_for_health,
                                        const sb_health_params *hp, bool may_eject, sb_ns now)
{
    release_prefill(ep, t);
    if (ep->in_flight)
        ep->in_flight--;
    /* Still counted as "sent since report" only if no report came after its dispatch. */
    if (t->report_seq == ep->report_seq && ep->sent_since_report)
        ep->sent_since_report--;
    /* Sent after the slots report: it no longer holds a slot the report did not show. Sent
     * before it: the report showed its slot busy, and that slot is free now. */
    if (t->slots_seq == ep->slots.seq) {
        if (ep->slots.sent_since)
            ep->slots.sent_since--;
    } else if (ep->slots.at) {
        ep->slots.freed_since++;
    }
    if (ok)
        ep->completed++;
    else
        ep->failed++;
    if (t->trial)
        ep->trial_in_flight = false;
    if (!counts_for_health)
        return SB_EJECT_NONE;
    bool rate = rate_exceeded(ep, ok, hp, now);
    if (ok) {
        ep->last_ok_ns = now;
        ep->consecutive_failures = 0;
        /* Only the half-open trial ends an ejection: a request dispatched before it (a long
         * stream) succeeding says nothing about the requests that failed since. */
        if (t->trial && ep->health == SB_HEALTH_HALF_OPEN) {
            ep->health = SB_HEALTH_HEALTHY;
            ep->ejections = 0;
        }
        return SB_EJECT_NONE;
    }
    ep->last_fail_ns = now;
    ep->consecutive_failures++;
    enum sb_eject_reason why = SB_EJECT_NONE;
    if (t->trial && ep->health == SB_HEALTH_HALF_OPEN)
        why = SB_EJECT_TRIAL;
    else if (ep->health == SB_HEALTH_HEALTHY && may_eject && ep->consecutive_failures >= hp->max_failures)
        why = SB_EJECT_CONSECUTIVE;
    else if (ep->health == SB_HEALTH_HEALTHY && may_eject && rate)
        why = SB_EJECT_RATE;
    if (why != SB_EJECT_NONE)
        eject(ep, why, hp, now);
    return why;
}

bool sb_endpoint_outlier_ejected(const sb_endpoint *ep)
{
    return ep->health == SB_HEALTH_EJECTED || ep->health == SB_HEALTH_HALF_OPEN;
}

bool sb_endpoint_serving(const sb_endpoint *ep, sb_ns now)
{
    sb_ns ok = ep->last_ok_ns > ep->last_check_ok_ns ? ep->last_ok_ns : ep->last_check_ok_ns;
    return ok && ok > ep->last_fail_ns && (now <= ok || now - ok <= SB_SERVING_WINDOW_NS);
}

void sb_endpoint_expire_report(sb_endpoint *ep)
{
    if (!ep->report.have_running && !ep->report.have_waiting && !ep->report.have_kv)
        return;
    ep->report.have_running = ep->report.have_waiting = ep->report.have_kv = false;
    /* A new epoch without a new age: tickets of the old one stop counting as sent since. */
    ep->report_seq++;
    ep->sent_since_report = 0;
}

void sb_endpoint_active_check(sb_endpoint *ep, bool ok, sb_ns now)
{
    ep->active_down = !ok;
    if (!ok)
        return;
    ep->last_check_ok_ns = now;
    /* It answers its health check: back at once rather than after the backoff (a restart of
     * a fraction of a second must not cost a second of the pool). The backoff exponent stays,
     * so one that fails its requests again is ejected for longer. Not after an ejection for
     * its failure rate: a replica failing a share of its requests answers /health all along,
     * and readmitting it at every check would undo the ejection (its trial after the backoff
     * decides instead). */
    if (sb_endpoint_outlier_ejected(ep) && ep->eject_why != SB_EJECT_RATE) {
        ep->health = SB_HEALTH_HEALTHY;
        ep->consecutive_failures = 0;
        ep->readmissions++;
    }
}

void sb_endpoint_observe_ttft(sb_endpoint *ep, uint64_t uncached, sb_ns ttft_ns)
{
    if (uncached < 64 || ttft_ns == 0)
        return;
    double tps = (double)uncached / ((double)ttft_ns / 1e9);
    ep->prefill_tps = ep->ttft_observations ? 0.8 * ep->prefill_tps + 0.2 * tps : tps;
    ep->ttft_observations++;
}

void sb_endpoint_adopt(sb_endpoint *dst, const sb_endpoint *src)
{
    dst->report = src->report;
    dst->report_ns = src->report_ns;
    dst->report_source = src->report_source;
    dst->report_seq = src->report_seq;
    dst->dispatched = src->dispatched;
    dst->completed = src->completed;
    dst->failed = src->failed;
    dst->health = src->health;
    dst->active_down = src->active_down;
    dst->consecutive_failures = src->consecutive_failures;
    dst->ejections = src->ejections;
    dst->ejections_total = src->ejections_total;
    dst->ejected_until = src->ejected_until;
    dst->eject_why = src->eject_why;
    for (int i = 0; i < SB_EJECT_REASONS; i++)
        dst->ejections_by[i] = src->ejections_by[i];
    dst->readmissions = src->readmissions;
    dst->window_start_ns = src->window_start_ns;
    dst->window_requests = src->window_requests;
    dst->window_failures = src->window_failures;
    dst->last_ok_ns = src->last_ok_ns;
    dst->last_fail_ns = src->last_fail_ns;
    dst->last_check_ok_ns = src->last_check_ok_ns;
    for (int i = 0; i < SB_RETRY_REASONS; i++)
        dst->retries_by[i] = src->retries_by[i];
    dst->last_dispatch_ns = src->last_dispatch_ns;
    /* Recent work is history, as the last dispatch is: without it the signal would be blank
     * across the pool for seconds after every reload. */
    dst->sent_scaled = src->sent_scaled;
    dst->sent_epoch_ns = src->sent_epoch_ns;
    dst->sent_last_ns = src->sent_last_ns;
    dst->prefill_tps = src->prefill_tps;
    dst->ttft_observations = src->ttft_observations;
    /* What the router learned of its view of the endpoint's cache (prefix_calibrate,
     * prefix_share): the prefix index moves to the new router with the endpoint. */
    dst->index_shrink = src->index_shrink;
    dst->share_own = src->share_own;
    dst->share_engine = src->share_engine;
    dst->share_engine_last = src->share_engine_last;
    dst->share_own_last = src->share_own_last;
    dst->share_at = src->share_at;
    /* The slots as reported; the counts of traffic since belong to the requests in flight,
     * which finish on the old router. */
    dst->slots = src->slots;
    dst->slots.sent_since = dst->slots.freed_since = 0;
    dst->agent = src->agent;
}
