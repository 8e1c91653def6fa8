#include "core/adaptive.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

struct sb_adaptive {
    sb_adaptive_params p;
    sb_profile base;
    /* detectors */
    bool started; /* a tick has happened: last_ns and the averages mean something */
    sb_ns last_ns;
    double raw[SB_DETECT_COUNT], signal[SB_DETECT_COUNT];
    bool regime[SB_DETECT_COUNT];
    uint64_t n_changes[SB_DETECT_COUNT];
    uint64_t pending_arrivals; /* since the last tick that consumed them */
    bool have_rates;
    double short_rate, long_rate; /* arrivals per second */
    /* configurator: the snapshot ring; current = ring[(generation - 1) % snapshots] */
    sb_profile *ring;
    uint64_t generation;
    sb_ns published_ns;
    double share; /* of the current snapshot */
    /* history rings: next write at head, count entries valid */
    sb_adaptive_sample *samples;
    size_t sample_head, n_samples;
    sb_adaptive_change *changes;
    size_t change_head, n_change_records;
};

sb_adaptive_params sb_adaptive_params_default(void)
{
    sb_adaptive_params p = {
        /* Time constants span several scrapes (probe.interval_ms defaults to 100): one late
         * or odd report moves a signal by a tenth at most. Imbalance's regime enters at the
         * sigmoid's midpoint, where distribution has taken half the move. Saturation reacts
         * fastest (flow control waits on it) and enters only when nearly every endpoint is
         * full; it leaves once a useful fraction has room again. */
        .detector = {[SB_DETECT_IMBALANCE] = {.tau_ns = SB_MS(1000), .enter = 0.3, .exit = 0.15},
                     [SB_DETECT_BURST] = {.tau_ns = SB_MS(500), .enter = 0.5, .exit = 0.2},
                     [SB_DETECT_SATURATION] = {.tau_ns = SB_MS(300), .enter = 0.9, .exit = 0.6}},
        /* Queues are what imbalance is about, so waiting weighs most; with these scales one
         * queued request adds 0.08 to the load and one running or in-flight request 0.00625:
         * running requests are capacity in use, a queue is capacity missing. queue_ref is
         * the saturation threshold (GIE's 5); running_ref and in_flight_ref are scales, not
         * limits (vLLM's max_num_seqs is 256; 32 is where a replica is clearly busy). */
        .w_waiting = 0.4,
        .w_running = 0.2,
        .w_kv = 0.2,
        .w_in_flight = 0.2,
        .queue_ref = 5,
        .running_ref = 32,
        .in_flight_ref = 32,
        /* Two floors keep an idle pool (one request on one of four endpoints) from reading as
         * imbalanced while a lightly loaded one whose load sits on one replica does: the mean
         * is floored at 0.02, and a stddev under 0.02 (loads a few running requests apart)
         * damps the signal in proportion. With the mean floor alone at 0.05, a hot prefix at
         * 10 requests/s on 8 replicas read as a third of its imbalance and p99 TTFT stayed
         * 1.2% above least-request's; with these, +0.2% (docs/benchmarks.md section 1), and
         * one request on an idle pool of four reads 0.06. */
        .load_floor = 0.02,
        .spread_floor = 0.02,
        /* A second for "now", a minute for "usual"; three times the usual rate is a full
         * burst, and below one request a second there is no usual rate to speak of. */
        .burst_short_ns = SB_MS(1000),
        .burst_long_ns = SB_MS(60000),
        .burst_ratio = 3,
        .burst_min_rate = 1,
        .queue_threshold = -1,
        .kv_threshold = -1,
        /* lo: the operator's (or default) profile when the pool is balanced, so adaptive
         * never does worse than static there. hi 0.9 leaves affinity a tenth: among equally
         * loaded endpoints the cache holder still wins. x0 0.1 and k 12: the move is 35% done
         * at x = 0.1, 70% at 0.2 and 89% at 0.3; with this
         * normalisation one endpoint queueing 10 while three others hold 1 reads 0.69, and
         * eight endpoints whose loads differ by a stddev of 20% of the mean read 0.08.
         * Replay chose x0 (docs/benchmarks.md section 2): at 0.3 only a gross imbalance moved
         * weight, and the affinity a balanced pool can afford was lost on shared prefixes.
         * share_saturated 0.2: when every endpoint is full, spreading cannot shorten a queue,
         * but every cache hit saves prefill the fleet has no room for, so a saturated,
         * balanced pool leans to affinity (shared-prefix past capacity, five seeds: p90 TTFT
         * +2.8% of the best static weight at 0.3, +1.1% at 0.25, 0.0% at 0.2; an imbalance
         * still moves weight back to distribution). */
        .share_lo = -1,
        .share_hi = 0.9,
        .share_saturated = 0.2,
        .x0 = 0.1,
        .k = 12,
        .nu = 1,
        .epsilon = 0.01,
        /* With 64 snapshots, a snapshot pointer stays valid >= 31.5 s after it was taken. */
        .min_publish_ns = SB_MS(500),
        .snapshots = 64,
        .history = 128,
        .changes = 64,
    };
    return p;
}

static bool finite_nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

const char *sb_adaptive_params_check(const sb_adaptive_params *p)
{
    for (int d = 0; d < SB_DETECT_COUNT; d++) {
        const sb_detector_params *dp = &p->detector[d];
        if (!finite_nonneg(dp->exit) || !isfinite(dp->enter) || dp->enter > 1 || dp->exit >= dp->enter)
            return "detector thresholds need 0 <= exit < enter <= 1";
    }
    if (!finite_nonneg(p->w_waiting) || !finite_nonneg(p->w_running) || !finite_nonneg(p->w_kv) ||
        !finite_nonneg(p->w_in_flight) || p->w_waiting + p->w_running + p->w_kv + p->w_in_flight <= 0)
        return "load weights must be >= 0 and not all 0";
    if (!(p->queue_ref > 0) || !(p->running_ref > 0) || !(p->in_flight_ref > 0) || !isfinite(p->queue_ref) ||
        !isfinite(p->running_ref) || !isfinite(p->in_flight_ref))
        return "load reference scales must be > 0";
    if (!finite_nonneg(p->load_floor) || !finite_nonneg(p->spread_floor))
        return "load and spread floors must be >= 0";
    if (p->burst_short_ns == 0 || p->burst_long_ns <= p->burst_short_ns)
        return "burst time constants need 0 < short < long";
    if (!(p->burst_ratio > 1) || !isfinite(p->burst_ratio))
        return "burst ratio must be > 1";
    if (!(p->burst_min_rate > 0) || !isfinite(p->burst_min_rate))
        return "burst minimum rate must be > 0";
    if (!isfinite(p->queue_threshold) || !isfinite(p->kv_threshold))
        return "saturation thresholds must be finite";
    if (!isfinite(p->share_lo) || p->share_lo > 1 || !(p->share_hi >= 0 && p->share_hi <= 1) ||
        !isfinite(p->share_saturated) || p->share_saturated > 1)
        return "shares must be in [0,1] (share_lo negative: the base profile's; share_saturated negative: off)";
    if (!isfinite(p->x0) || !(p->k > 0) || !isfinite(p->k) || !(p->nu > 0) || !isfinite(p->nu))
        return "sigmoid needs finite x0, k > 0 and nu > 0";
    if (!finite_nonneg(p->epsilon))
        return "epsilon must be >= 0";
    if (p->snapshots < 2 || p->history < 1 || p->changes < 1)
        return "need at least 2 snapshots, 1 history entry and 1 change entry";
    return NULL;
}

/* NaN (from a degenerate input) reads as 0: a signal must stay printable and comparable. */
static double clamp01(double v)
{
    return v > 1 ? 1 : v > 0 ? v : 0;
}

/* ---- detectors, pure parts ---- */

double sb_adaptive_load(const sb_adaptive_params *p, const sb_endpoint *ep)
{
    double l = p->w_waiting * sb_endpoint_waiting(ep) / p->queue_ref +
               p->w_running * sb_endpoint_running(ep) / p->running_ref + p->w_kv * sb_endpoint_kv_usage(ep) +
               p->w_in_flight * (double)ep->in_flight / p->in_flight_ref;
    return l > 0 ? l : 0;
}

double sb_adaptive_imbalance_of(const sb_adaptive_params *p, const sb_endpoint *eps, size_t n, sb_ns stale_ns,
                                sb_ns now)
{
    /* Two passes (mean, then squared deviations): n is a pool, tens at most, and this is
     * exact where the one-pass formula cancels badly for near-equal loads. */
    size_t m = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!sb_endpoint_available(&eps[i], now) || sb_endpoint_is_stale(&eps[i], stale_ns, now))
            continue;
        sum += sb_adaptive_load(p, &eps[i]);
        m++;
    }
    if (m < 2)
        return 0;
    double mean = sum / (double)m, var = 0;
    for (size_t i = 0; i < n; i++) {
        if (!sb_endpoint_available(&eps[i], now) || sb_endpoint_is_stale(&eps[i], stale_ns, now))
            continue;
        double d = sb_adaptive_load(p, &eps[i]) - mean;
        var += d * d;
    }
    var /= (double)m;
    double denom = mean > p->load_floor ? mean : p->load_floor;
    if (denom <= 0)
        return 0;
    /* Population CV of m non-negative values is at most sqrt(m - 1) (all on one). */
    double x = sqrt(var) / denom / sqrt((double)(m - 1));
    if (p->spread_floor > 0 && sqrt(var) < p->spread_floor)
        x *= sqrt(var) / p->spread_floor;
    return clamp01(x);
}

double sb_adaptive_saturation_of(const sb_endpoint *eps, size_t n, double queue_threshold, double kv_threshold,
                                 sb_ns stale_ns, sb_ns now)
{
    size_t counted = 0, saturated = 0;
    for (size_t i = 0; i < n; i++) {
        const sb_endpoint *ep = &eps[i];
        if (ep->draining)
            continue; /* taken out on purpose: neither capacity nor its absence */
        counted++;
        if (!sb_endpoint_available(ep, now) || sb_endpoint_is_stale(ep, stale_ns, now) ||
            sb_endpoint_waiting(ep) > queue_threshold || sb_endpoint_kv_usage(ep) > kv_threshold)
            saturated++;
    }
    return counted ? (double)saturated / (double)counted : 1;
}

/* ---- configurator, pure parts ---- */

static double sigmoid(const sb_adaptive_params *p, double x)
{
    return pow(1 + exp(-p->k * (x - p->x0)), -1 / p->nu);
}

double sb_adaptive_share_at(const sb_adaptive_params *p, double lo, double x)
{
    lo = clamp01(lo);
    double hi = p->share_hi > lo ? p->share_hi : lo;
    double g0 = sigmoid(p, 0), g1 = sigmoid(p, 1), span = g1 - g0;
    if (!(span > 1e-12))
        return lo; /* a sigmoid flat over [0,1] (x0 far outside it) moves nothing */
    double t = (sigmoid(p, clamp01(x)) - g0) / span;
    return lo + (hi - lo) * clamp01(t);
}

static void category_sums(const sb_profile *pr, double *aff, double *dist)
{
    *aff = *dist = 0;
    for (size_t i = 0; i < pr->n_scorers; i++) {
        if (pr->scorers[i].def->category == SB_DISTRIBUTION)
            *dist += pr->scorers[i].weight;
        else
            *aff += pr->scorers[i].weight;
    }
}

bool sb_adaptive_movable(const sb_profile *p)
{
    double aff = 0, dist = 0;
    if (p)
        category_sums(p, &aff, &dist);
    return aff > 0 && dist > 0;
}

static double base_share(const sb_profile *base)
{
    double aff, dist;
    category_sums(base, &aff, &dist);
    return aff + dist > 0 ? dist / (aff + dist) : 0;
}

/* The distribution share of a balanced pool: share_lo (or the base's), moved towards
 * share_saturated as the smoothed saturation signal rises. */
static double lower_share(const sb_adaptive *a)
{
    double lo = a->p.share_lo < 0 ? base_share(&a->base) : a->p.share_lo;
    if (a->p.share_saturated >= 0)
        lo += (a->p.share_saturated - lo) * clamp01(a->signal[SB_DETECT_SATURATION]);
    return lo;
}

/* The base's weights with distribution given `share` of the total, written into w. Returns
 * the share actually applied: the base's own when a category is absent (nothing to move). */
static double weights_for(const sb_profile *base, double share, double *w)
{
    double aff, dist;
    category_sums(base, &aff, &dist);
    double total = aff + dist;
    bool movable = aff > 0 && dist > 0;
    for (size_t i = 0; i < base->n_scorers; i++) {
        double bw = base->scorers[i].weight;
        if (!movable)
            w[i] = bw;
        else if (base->scorers[i].def->category == SB_DISTRIBUTION)
            w[i] = bw * (total * share / dist);
        else
            w[i] = bw * (total * (1 - share) / aff);
    }
    return movable ? share : (total > 0 ? dist / total : 0);
}

/* ---- the stateful object ---- */

static sb_profile *current(const sb_adaptive *a)
{
    return &a->ring[(a->generation - 1) % a->p.snapshots];
}

static void publish(sb_adaptive *a, const double *w, double share, sb_ns now)
{
    a->generation++;
    sb_profile *s = current(a);
    *s = a->base;
    for (size_t i = 0; i < s->n_scorers; i++)
        s->scorers[i].weight = w[i];
    /* "<base>~adaptive.<generation>": decisions name the exact weights they ran with. */
    char suffix[40];
    int sl = snprintf(suffix, sizeof(suffix), "~adaptive.%llu", (unsigned long long)a->generation);
    int room = (int)sizeof(s->name) - 1 - sl;
    snprintf(s->name, sizeof(s->name), "%.*s%s", room, a->base.name, suffix);
    a->published_ns = now;
    a->share = share;
}

sb_adaptive *sb_adaptive_new(const sb_adaptive_params *p, const sb_profile *base)
{
    if (sb_adaptive_params_check(p))
        return NULL;
    sb_adaptive *a = sb_calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->p = *p;
    a->base = *base;
    a->ring = sb_calloc(p->snapshots, sizeof(*a->ring));
    a->samples = sb_calloc(p->history, sizeof(*a->samples));
    a->changes = sb_calloc(p->changes, sizeof(*a->changes));
    if (!a->ring || !a->samples || !a->changes)
        goto fail;
    double w[SB_MAX_SCORERS];
    double share = weights_for(&a->base, sb_adaptive_share_at(p, lower_share(a), 0), w);
    publish(a, w, share, 0);
    return a;
fail:
    sb_adaptive_free(a);
    return NULL;
}

void sb_adaptive_free(sb_adaptive *a)
{
    if (!a)
        return;
    sb_free(a->ring);
    sb_free(a->samples);
    sb_free(a->changes);
    sb_free(a);
}

void sb_adaptive_set_base(sb_adaptive *a, const sb_profile *base, sb_ns now)
{
    a->base = *base;
    double w[SB_MAX_SCORERS];
    double x = a->signal[SB_DETECT_IMBALANCE];
    double share = weights_for(&a->base, sb_adaptive_share_at(&a->p, lower_share(a), x), w);
    publish(a, w, share, now);
}

void sb_adaptive_set_params(sb_adaptive *a, const sb_adaptive_params *p, sb_ns now)
{
    if (sb_adaptive_params_check(p))
        return;
    /* The rings keep their sizes: they hold snapshots requests may still be using. */
    size_t snapshots = a->p.snapshots, history = a->p.history, changes = a->p.changes;
    a->p = *p;
    a->p.snapshots = snapshots;
    a->p.history = history;
    a->p.changes = changes;
    (void)now;
}

typedef struct param_name {
    const char *name;
    size_t offset;
    bool is_ms; /* an sb_ns field given in milliseconds */
} param_name;

#define PARAM(n, field) {n, offsetof(sb_adaptive_params, field), false}
#define PARAM_MS(n, field) {n, offsetof(sb_adaptive_params, field), true}
static const param_name param_names[] = {
    PARAM("x0", x0),
    PARAM("k", k),
    PARAM("nu", nu),
    PARAM("share_lo", share_lo),
    PARAM("share_hi", share_hi),
    PARAM("share_saturated", share_saturated),
    PARAM("epsilon", epsilon),
    PARAM_MS("min_publish_ms", min_publish_ns),
    PARAM_MS("imbalance_tau_ms", detector[SB_DETECT_IMBALANCE].tau_ns),
    PARAM("imbalance_enter", detector[SB_DETECT_IMBALANCE].enter),
    PARAM("imbalance_exit", detector[SB_DETECT_IMBALANCE].exit),
    PARAM_MS("burst_tau_ms", detector[SB_DETECT_BURST].tau_ns),
    PARAM("burst_enter", detector[SB_DETECT_BURST].enter),
    PARAM("burst_exit", detector[SB_DETECT_BURST].exit),
    PARAM_MS("saturation_tau_ms", detector[SB_DETECT_SATURATION].tau_ns),
    PARAM("saturation_enter", detector[SB_DETECT_SATURATION].enter),
    PARAM("saturation_exit", detector[SB_DETECT_SATURATION].exit),
    PARAM("w_waiting", w_waiting),
    PARAM("w_running", w_running),
    PARAM("w_kv", w_kv),
    PARAM("w_in_flight", w_in_flight),
    PARAM("queue_ref", queue_ref),
    PARAM("running_ref", running_ref),
    PARAM("in_flight_ref", in_flight_ref),
    PARAM("load_floor", load_floor),
    PARAM("spread_floor", spread_floor),
    PARAM_MS("burst_short_ms", burst_short_ns),
    PARAM_MS("burst_long_ms", burst_long_ns),
    PARAM("burst_ratio", burst_ratio),
    PARAM("burst_min_rate", burst_min_rate),
    PARAM("queue_threshold", queue_threshold),
    PARAM("kv_threshold", kv_threshold),
    {NULL, 0, false},
};

int sb_adaptive_param_set(sb_adaptive_params *p, const char *name, double v)
{
    for (const param_name *k = param_names; k->name; k++) {
        if (strcmp(k->name, name))
            continue;
        if (k->is_ms) {
            if (!(v >= 0 && v <= 1e9))
                return -2;
            *(sb_ns *)((char *)p + k->offset) = (sb_ns)(v * 1e6);
        } else {
            *(double *)((char *)p + k->offset) = v;
        }
        return 0;
    }
    return -1;
}

size_t sb_adaptive_param_list(char *buf, size_t cap)
{
    size_t n = 0;
    for (const param_name *k = param_names; k->name; k++) {
        int w = snprintf(cap > n ? buf + n : NULL, cap > n ? cap - n : 0, "%s%s", n ? ", " : "", k->name);
        n += (size_t)w;
    }
    return n;
}

void sb_adaptive_arrivals(sb_adaptive *a, uint32_t n)
{
    a->pending_arrivals += n;
}

/* alpha for an average with time constant tau over dt: exact for a piecewise-constant input,
 * so two ticks of dt/2 move the average exactly as one tick of dt does. */
static double ema_alpha(sb_ns dt, sb_ns tau)
{
    if (tau == 0)
        return 1;
    return 1 - exp(-(double)dt / (double)tau);
}

static double burst_raw(sb_adaptive *a, sb_ns dt)
{
    const sb_adaptive_params *p = &a->p;
    if (dt == 0)
        return a->raw[SB_DETECT_BURST]; /* no time passed: no rate; arrivals stay pending */
    double rate = (double)a->pending_arrivals / ((double)dt / (double)SB_NS_PER_S);
    a->pending_arrivals = 0;
    if (!a->have_rates) {
        /* The first measured interval seeds both: start-up is not a burst. */
        a->short_rate = a->long_rate = rate;
        a->have_rates = true;
    } else {
        a->short_rate += ema_alpha(dt, p->burst_short_ns) * (rate - a->short_rate);
        a->long_rate += ema_alpha(dt, p->burst_long_ns) * (rate - a->long_rate);
    }
    double base = a->long_rate > p->burst_min_rate ? a->long_rate : p->burst_min_rate;
    return clamp01((a->short_rate / base - 1) / (p->burst_ratio - 1));
}

static void record_change(sb_adaptive *a, enum sb_detector d, bool entered, sb_ns now)
{
    a->changes[a->change_head] =
        (sb_adaptive_change){.now = now, .detector = d, .entered = entered, .signal = a->signal[d]};
    a->change_head = (a->change_head + 1) % a->p.changes;
    if (a->n_change_records < a->p.changes)
        a->n_change_records++;
    a->n_changes[d]++;
}

unsigned sb_adaptive_tick(sb_adaptive *a, const sb_endpoint *eps, size_t n, sb_ns stale_ns, sb_ns now)
{
    const sb_adaptive_params *p = &a->p;
    unsigned out = 0;
    sb_ns dt = a->started && now > a->last_ns ? now - a->last_ns : 0;
    if (!a->started) {
        /* No interval yet: arrivals so far cannot be turned into a rate. */
        a->pending_arrivals = 0;
    }

    double qt = p->queue_threshold >= 0 ? p->queue_threshold : a->base.queue_threshold;
    double kt = p->kv_threshold >= 0 ? p->kv_threshold : a->base.kv_threshold;
    a->raw[SB_DETECT_IMBALANCE] = sb_adaptive_imbalance_of(p, eps, n, stale_ns, now);
    a->raw[SB_DETECT_SATURATION] = sb_adaptive_saturation_of(eps, n, qt, kt, stale_ns, now);
    a->raw[SB_DETECT_BURST] = a->started ? burst_raw(a, dt) : 0;

    for (int d = 0; d < SB_DETECT_COUNT; d++) {
        const sb_detector_params *dp = &p->detector[d];
        if (!a->started)
            a->signal[d] = a->raw[d];
        else
            a->signal[d] += ema_alpha(dt, dp->tau_ns) * (a->raw[d] - a->signal[d]);
        a->signal[d] = clamp01(a->signal[d]);
        bool next = a->regime[d] ? a->signal[d] > dp->exit : a->signal[d] >= dp->enter;
        if (next != a->regime[d]) {
            a->regime[d] = next;
            record_change(a, (enum sb_detector)d, next, now);
            out |= 1u << d;
        }
    }
    if (now > a->last_ns || !a->started)
        a->last_ns = now;
    a->started = true;

    /* Configurator: publish when a weight moved enough, at most once per min_publish_ns. */
    double w[SB_MAX_SCORERS];
    double share = weights_for(&a->base, sb_adaptive_share_at(p, lower_share(a), a->signal[SB_DETECT_IMBALANCE]), w);
    const sb_profile *cur = current(a);
    double total = 0, moved = 0;
    for (size_t i = 0; i < cur->n_scorers; i++) {
        total += cur->scorers[i].weight;
        double dw = fabs(w[i] - cur->scorers[i].weight);
        moved = dw > moved ? dw : moved;
    }
    bool rested = now >= a->published_ns + p->min_publish_ns;
    if (moved > p->epsilon * total && rested) {
        publish(a, w, share, now);
        out |= SB_ADAPTIVE_PUBLISHED;
    }

    sb_adaptive_sample *s = &a->samples[a->sample_head];
    *s = (sb_adaptive_sample){.now = now, .share = share, .generation = a->generation};
    for (int d = 0; d < SB_DETECT_COUNT; d++) {
        s->raw[d] = a->raw[d];
        s->signal[d] = a->signal[d];
        s->regimes |= a->regime[d] ? 1u << d : 0;
    }
    s->affinity = sb_adaptive_category_weight(a, SB_AFFINITY);
    s->distribution = sb_adaptive_category_weight(a, SB_DISTRIBUTION);
    a->sample_head = (a->sample_head + 1) % p->history;
    if (a->n_samples < p->history)
        a->n_samples++;
    return out;
}

/* ---- accessors ---- */

const sb_profile *sb_adaptive_profile(const sb_adaptive *a)
{
    return current(a);
}
uint64_t sb_adaptive_generation(const sb_adaptive *a)
{
    return a->generation;
}

static bool valid(enum sb_detector d)
{
    return (unsigned)d < SB_DETECT_COUNT;
}

double sb_adaptive_raw(const sb_adaptive *a, enum sb_detector d)
{
    return valid(d) ? a->raw[d] : 0;
}
double sb_adaptive_signal(const sb_adaptive *a, enum sb_detector d)
{
    return valid(d) ? a->signal[d] : 0;
}
bool sb_adaptive_regime(const sb_adaptive *a, enum sb_detector d)
{
    return valid(d) && a->regime[d];
}
uint64_t sb_adaptive_regime_changes(const sb_adaptive *a, enum sb_detector d)
{
    return valid(d) ? a->n_changes[d] : 0;
}
double sb_adaptive_share(const sb_adaptive *a)
{
    return a->share;
}

double sb_adaptive_category_weight(const sb_adaptive *a, enum sb_scorer_category c)
{
    double aff, dist;
    category_sums(current(a), &aff, &dist);
    return c == SB_DISTRIBUTION ? dist : aff;
}

const char *sb_detector_name(enum sb_detector d)
{
    static const char *const names[SB_DETECT_COUNT] = {"imbalance", "burst", "saturation"};
    return valid(d) ? names[d] : "unknown";
}

const sb_adaptive_sample *sb_adaptive_sample_at(const sb_adaptive *a, size_t i)
{
    if (i >= a->n_samples)
        return NULL;
    return &a->samples[(a->sample_head + a->p.history - 1 - i) % a->p.history];
}

const sb_adaptive_change *sb_adaptive_change_at(const sb_adaptive *a, size_t i)
{
    if (i >= a->n_change_records)
        return NULL;
    return &a->changes[(a->change_head + a->p.changes - 1 - i) % a->p.changes];
}

/* ---- rendering ---- */

static int put_string(sb_buf *b, const char *s)
{
    int rc = sb_buf_puts(b, "\"");
    rc |= sb_buf_json_escape(b, s, strlen(s));
    rc |= sb_buf_puts(b, "\"");
    return rc;
}

/* Times are monotonic-clock nanoseconds, meaningless alone: "ago_ms" counts back from the
 * last tick so a reader sees recency without the gateway's clock. */
static double ago_ms(const sb_adaptive *a, sb_ns t)
{
    return a->last_ns > t ? (double)(a->last_ns - t) / 1e6 : 0;
}

int sb_adaptive_render(const sb_adaptive *a, sb_buf *b)
{
    const sb_adaptive_params *p = &a->p;
    const sb_profile *cur = current(a);
    int rc = sb_buf_puts(b, "{\"profile\":");
    rc |= put_string(b, cur->name);
    rc |= sb_buf_puts(b, ",\"base\":");
    rc |= put_string(b, a->base.name);
    rc |= sb_buf_printf(b, ",\"generation\":%llu,\"published_ago_ms\":%.1f,\"now_ns\":%llu",
                        (unsigned long long)a->generation, ago_ms(a, a->published_ns), (unsigned long long)a->last_ns);
    rc |= sb_buf_printf(b,
                        ",\"sigmoid\":{\"x\":%.4f,\"lo\":%.4f,\"hi\":%.4f,\"x0\":%.4f,\"k\":%.4f,\"nu\":%.4f,"
                        "\"share\":%.4f}",
                        a->signal[SB_DETECT_IMBALANCE], lower_share(a),
                        p->share_hi > lower_share(a) ? p->share_hi : lower_share(a), p->x0, p->k, p->nu, a->share);
    rc |= sb_buf_puts(b, ",\"detectors\":[");
    for (int d = 0; d < SB_DETECT_COUNT; d++)
        rc |= sb_buf_printf(b,
                            "%s{\"name\":\"%s\",\"raw\":%.4f,\"signal\":%.4f,\"regime\":%s,\"enter\":%.4f,"
                            "\"exit\":%.4f,\"tau_ms\":%.1f,\"changes\":%llu}",
                            d ? "," : "", sb_detector_name((enum sb_detector)d), a->raw[d], a->signal[d],
                            a->regime[d] ? "true" : "false", p->detector[d].enter, p->detector[d].exit,
                            (double)p->detector[d].tau_ns / 1e6, (unsigned long long)a->n_changes[d]);
    rc |= sb_buf_printf(b, "],\"weights\":{\"affinity\":%.4f,\"distribution\":%.4f,\"scorers\":[",
                        sb_adaptive_category_weight(a, SB_AFFINITY), sb_adaptive_category_weight(a, SB_DISTRIBUTION));
    for (size_t i = 0; i < cur->n_scorers; i++) {
        const sb_weighted_scorer *ws = &cur->scorers[i];
        rc |= sb_buf_printf(b, "%s{\"name\":", i ? "," : "");
        rc |= put_string(b, ws->def->name);
        rc |= sb_buf_printf(b, ",\"category\":\"%s\",\"weight\":%.4f,\"base\":%.4f}",
                            ws->def->category == SB_DISTRIBUTION ? "distribution" : "affinity", ws->weight,
                            i < a->base.n_scorers ? a->base.scorers[i].weight : 0.0);
    }
    rc |= sb_buf_puts(b, "]},\"history\":[");
    for (size_t i = 0;; i++) {
        const sb_adaptive_sample *s = sb_adaptive_sample_at(a, i);
        if (!s)
            break;
        rc |= sb_buf_printf(b, "%s{\"ago_ms\":%.1f,\"raw\":[%.4f,%.4f,%.4f],\"signal\":[%.4f,%.4f,%.4f],\"regimes\":[",
                            i ? "," : "", ago_ms(a, s->now), s->raw[0], s->raw[1], s->raw[2], s->signal[0],
                            s->signal[1], s->signal[2]);
        bool first = true;
        for (int d = 0; d < SB_DETECT_COUNT; d++) {
            if (!(s->regimes & (1u << d)))
                continue;
            rc |= sb_buf_printf(b, "%s\"%s\"", first ? "" : ",", sb_detector_name((enum sb_detector)d));
            first = false;
        }
        rc |= sb_buf_printf(b, "],\"share\":%.4f,\"affinity\":%.4f,\"distribution\":%.4f,\"generation\":%llu}",
                            s->share, s->affinity, s->distribution, (unsigned long long)s->generation);
    }
    rc |= sb_buf_puts(b, "],\"changes\":[");
    for (size_t i = 0;; i++) {
        const sb_adaptive_change *c = sb_adaptive_change_at(a, i);
        if (!c)
            break;
        rc |=
            sb_buf_printf(b, "%s{\"ago_ms\":%.1f,\"detector\":\"%s\",\"event\":\"%s\",\"signal\":%.4f}", i ? "," : "",
                          ago_ms(a, c->now), sb_detector_name(c->detector), c->entered ? "entered" : "left", c->signal);
    }
    rc |= sb_buf_puts(b, "]}");
    return rc ? -1 : 0;
}
