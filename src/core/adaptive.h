/* adaptive: detectors of a pool's state and the configurator that moves scorer weight
 * between affinity and distribution from what they see (the idea is GIE/llm-d's
 * "async detectors + adaptive configurator").
 *
 * One sb_adaptive per pool. The caller ticks it on the probing cadence with the pool's
 * endpoints (never on the request path); the request path only counts arrivals
 * (sb_adaptive_arrivals, an increment) and reads the current profile snapshot (a pointer).
 *
 * Detectors: each computes a raw signal in [0,1] per tick, smooths it with an exponential
 * moving average whose weight comes from the time elapsed since the previous tick
 * (alpha = 1 - exp(-dt / tau), so irregular ticks smooth the same as regular ones), and keeps a
 * boolean regime with hysteresis: entered when the smoothed signal reaches `enter`, left only
 * when it falls to `exit` (< enter), so a signal wandering between the two never flips it.
 *   - imbalance: the normalised coefficient of variation of per-endpoint load over the
 *     endpoints that are available and fresh (a stale report's load is unknown; saturation
 *     counts those). load = w_waiting * waiting / queue_ref + w_running * running / running_ref
 *     + w_kv * kv_usage + w_in_flight * in_flight / in_flight_ref (the router's corrected
 *     figures, core/endpoint.h). CV = stddev / max(mean, load_floor), divided by sqrt(n - 1),
 *     the largest CV n non-negative loads can have (all load on one endpoint): 0 is a
 *     perfectly even pool, 1 is everything on one endpoint, whatever n is; times
 *     stddev / spread_floor when the stddev is below spread_floor. The floors keep an idle
 *     pool (one request on one of four endpoints) from reading as imbalanced.
 *     Fewer than two such endpoints: 0 (nothing to balance).
 *   - burst: the arrival rate (arrivals counted between ticks) smoothed over burst_short_ns
 *     against its long-run average over burst_long_ns (floored at burst_min_rate):
 *     clamp((short / long - 1) / (burst_ratio - 1), 0, 1). A step up in traffic reads as a
 *     burst until the long-run average catches up.
 *   - saturation: the fraction of the pool's endpoints (draining ones excepted) that are
 *     saturated: effective waiting > queue_threshold or KV utilisation > kv_threshold, or
 *     stale, or not available (ejected, down, half-open with its trial out). No endpoint at
 *     all is full saturation (1).
 *
 * The configurator keeps the base profile's total weight and gives the distribution scorers
 * a share of it that grows with the smoothed imbalance x along a generalised sigmoid,
 *     g(x) = (1 + exp(-k (x - x0)))^(-1/nu),
 *     share(x) = lo + (hi - lo) * (g(x) - g(0)) / (g(1) - g(0)),
 * rescaled so that share(0) = lo and share(1) = hi exactly: a balanced pool runs the base
 * profile's own weights (lo defaults to its distribution share). Monotonic in x for k, nu > 0.
 * Within a category the base's ratios are kept; a category absent from the base stays absent
 * (and then nothing moves). A new snapshot is published only when some weight moved by more
 * than epsilon x total from the current snapshot, and at most once per min_publish_ns.
 *
 * Snapshot lifetime: snapshots live in a ring of `snapshots` profiles. A pointer returned by
 * sb_adaptive_profile stays valid, unchanged, until `snapshots` - 1 more publications
 * have happened after the one that replaced it; with publications at least min_publish_ns
 * apart, that is at least (snapshots - 1) x min_publish_ns after the pointer was taken
 * (defaults: 63 x 500 ms = 31.5 s), or until sb_adaptive_free. A holder that may outlive
 * that (a request streaming for minutes) must copy what it needs at pick time.
 *
 * Explainability: a bounded history of recent ticks and of regime changes, rendered as JSON
 * (GET /debug/adaptive); accessors for gauges; sb_adaptive_tick says which regimes changed so
 * the caller can log one line per change.
 *
 * Pure and deterministic: no I/O, no clock (`now` is an argument), no randomness; the same
 * ticks give the same signals, regimes and snapshots. Not thread-safe: one owner. */
#ifndef SB_CORE_ADAPTIVE_H
#define SB_CORE_ADAPTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/time.h"
#include "core/endpoint.h"
#include "core/sched.h"

enum sb_detector { SB_DETECT_IMBALANCE = 0, SB_DETECT_BURST = 1, SB_DETECT_SATURATION = 2, SB_DETECT_COUNT = 3 };

/* sb_adaptive_tick's result: bit (1 << d) when detector d's regime changed this tick, and: */
#define SB_ADAPTIVE_PUBLISHED (1u << 8) /* a new profile snapshot was published */

typedef struct sb_detector_params {
    sb_ns tau_ns; /* time constant of the signal's moving average; 0 = none */
    double enter; /* the regime is entered when the smoothed signal reaches this... */
    double exit;  /* ...and left when it falls to this; 0 <= exit < enter <= 1 */
} sb_detector_params;

typedef struct sb_adaptive_params {
    sb_detector_params detector[SB_DETECT_COUNT];
    /* imbalance: the load blend (weights >= 0, not all 0) and its reference scales (> 0) */
    double w_waiting, w_running, w_kv, w_in_flight;
    double queue_ref, running_ref, in_flight_ref;
    double load_floor; /* the CV's denominator is at least this (an idle pool's small mean
                          would make any difference look large); >= 0 */
    double spread_floor; /* load stddev below which the signal is damped in proportion; 0: off */
    /* burst */
    sb_ns burst_short_ns;  /* time constant of the current rate; > 0 */
    sb_ns burst_long_ns;   /* time constant of the long-run rate; > burst_short_ns */
    double burst_ratio;    /* short / long that reads as a full burst (signal 1); > 1 */
    double burst_min_rate; /* arrivals per second the long-run rate is floored at; > 0 */
    /* saturation: negative = the base profile's (the saturation filter's) thresholds */
    double queue_threshold, kv_threshold;
    /* configurator */
    double share_lo;      /* distribution share at x = 0; negative = the base profile's */
    double share_hi;      /* at x = 1; raised to lo when below it (weight never moves back) */
    double share_saturated; /* the share at x = 0 when the pool is saturated: lo moves towards
                               it with the saturation signal; negative = off */
    double x0, k, nu;     /* sigmoid midpoint, steepness (> 0) and shape (> 0; 1 = logistic) */
    double epsilon;       /* publish when a weight moves more than epsilon x total */
    sb_ns min_publish_ns; /* at most one publication per this */
    size_t snapshots;     /* profile ring size; >= 2 */
    size_t history;       /* ticks kept for /debug/adaptive; >= 1 */
    size_t changes;       /* regime changes kept; >= 1 */
} sb_adaptive_params;

/* One tick as recorded. */
typedef struct sb_adaptive_sample {
    sb_ns now;
    double raw[SB_DETECT_COUNT];
    double signal[SB_DETECT_COUNT]; /* smoothed */
    unsigned regimes;               /* bit d: detector d in its regime */
    double share;                   /* distribution share computed this tick */
    double affinity, distribution;  /* weight sums of the current snapshot after this tick */
    uint64_t generation;            /* current snapshot after this tick */
} sb_adaptive_sample;

typedef struct sb_adaptive_change {
    sb_ns now;
    enum sb_detector detector;
    bool entered;  /* false: left */
    double signal; /* smoothed signal that crossed the threshold */
} sb_adaptive_change;

typedef struct sb_adaptive sb_adaptive;

/* The defaults, and why each, in adaptive.c. */
sb_adaptive_params sb_adaptive_params_default(void);
/* NULL when p is usable, else a static sentence saying what is wrong (for config errors). */
const char *sb_adaptive_params_check(const sb_adaptive_params *p);

/* A configurator over `base` (copied; its plug-in definitions and label strings are
 * referenced and must outlive it, as the base's own do). Publishes generation 1 at once: the
 * weights for a balanced pool. Returns NULL on ENOMEM or when params fail the check. */
sb_adaptive *sb_adaptive_new(const sb_adaptive_params *p, const sb_profile *base);
/* Frees everything, every snapshot included. NULL is fine. */
void sb_adaptive_free(sb_adaptive *a);

/* Replaces the base profile (configuration reload) and publishes at once, whatever epsilon
 * and the publication rate say; signals and regimes are kept. */
void sb_adaptive_set_base(sb_adaptive *a, const sb_profile *base, sb_ns now);

/* Replaces the parameters (configuration reload; ignored if they fail the check); signals and
 * regimes are kept, and so are the ring sizes (snapshots, history, changes), which only a new
 * sb_adaptive can change. Publishes nothing: the next sb_adaptive_set_base or tick applies
 * them (a reload calls this, then set_base: one publication). */
void sb_adaptive_set_params(sb_adaptive *a, const sb_adaptive_params *p, sb_ns now);

/* Sets one parameter by its configuration name (x0, k, nu, share_lo, share_hi,
 * share_saturated, epsilon, the detectors' <name>_tau_ms/_enter/_exit, the load blend...:
 * sb_adaptive_param_list); names ending in _ms take milliseconds. Returns 0, -1 for an unknown
 * name, -2 for a negative or huge duration. Check the whole with sb_adaptive_params_check. */
int sb_adaptive_param_set(sb_adaptive_params *p, const char *name, double v);
/* Every name sb_adaptive_param_set takes, comma-separated (for error messages and --help),
 * written to buf as snprintf writes (NUL-terminated, truncated to cap). Returns the length of
 * the whole list: a larger value than cap - 1 means buf was too small. */
size_t sb_adaptive_param_list(char *buf, size_t cap);

/* Counts n requests arriving for the pool (the request path's only duty). */
void sb_adaptive_arrivals(sb_adaptive *a, uint32_t n);

/* One tick over the pool's endpoints eps[0..n) at now; stale_ns is the pool's. Updates every
 * detector, the weights and perhaps the snapshot, and records the tick. A tick at or before
 * the previous one's time changes no average (dt = 0) and keeps the arrivals for the next.
 * Returns the SB_ADAPTIVE_* / regime-change bits (0: nothing changed). */
unsigned sb_adaptive_tick(sb_adaptive *a, const sb_endpoint *eps, size_t n, sb_ns stale_ns, sb_ns now);

/* Whether the configurator can move weight in profile p: it has scorers of both categories
 * with positive weight. A profile without both (round robin, least request, load only) has
 * nothing to move: its snapshots keep the base's weights, and the pool routes by p itself
 * (core/control.h). NULL: false. */
bool sb_adaptive_movable(const sb_profile *p);

/* The current snapshot (never NULL); lifetime as above. */
const sb_profile *sb_adaptive_profile(const sb_adaptive *a);
uint64_t sb_adaptive_generation(const sb_adaptive *a);

/* Gauges. */
double sb_adaptive_raw(const sb_adaptive *a, enum sb_detector d);
double sb_adaptive_signal(const sb_adaptive *a, enum sb_detector d);
bool sb_adaptive_regime(const sb_adaptive *a, enum sb_detector d);
uint64_t sb_adaptive_regime_changes(const sb_adaptive *a, enum sb_detector d);
double sb_adaptive_share(const sb_adaptive *a); /* of the current snapshot */
double sb_adaptive_category_weight(const sb_adaptive *a, enum sb_scorer_category c);
const char *sb_detector_name(enum sb_detector d);

/* History, newest first (i = 0); NULL past the end. Valid until the next tick. */
const sb_adaptive_sample *sb_adaptive_sample_at(const sb_adaptive *a, size_t i);
const sb_adaptive_change *sb_adaptive_change_at(const sb_adaptive *a, size_t i);

/* Appends the state, parameters, snapshot weights, tick history and regime changes as one
 * JSON object to b. Returns 0, or -1 on ENOMEM (b then holds a partial object). */
int sb_adaptive_render(const sb_adaptive *a, sb_buf *b);

/* The pure pieces, for tests and replay. */
double sb_adaptive_load(const sb_adaptive_params *p, const sb_endpoint *ep);
double sb_adaptive_imbalance_of(const sb_adaptive_params *p, const sb_endpoint *eps, size_t n, sb_ns stale_ns,
                                sb_ns now);
double sb_adaptive_saturation_of(const sb_endpoint *eps, size_t n, double queue_threshold, double kv_threshold,
                                 sb_ns stale_ns, sb_ns now);
/* share(x) for lower bound lo (the upper is max(p->share_hi, lo)); x is clamped to [0,1]. */
double sb_adaptive_share_at(const sb_adaptive_params *p, double lo, double x);

#endif
