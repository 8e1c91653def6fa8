/* switchboard replay: offline comparison of routing policies on a simulated fleet, over a trace
 * or a generated workload (replay/driver.h). Prints a markdown table; with --out, writes
 * results.csv, results.md and, when gnuplot is installed, TTFT plots. See docs/replay.md. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cmd/cmd.h"
#include "cmd/flags.h"
#include "replay/band_report.h"
#include "replay/driver.h"
#include "replay/fleet_report.h"
#include "replay/generators.h"
#include "replay/policy.h"
#include "replay/report.h"
#include "replay/trace.h"
#include "replay/workload.h"

extern char **environ;

static const char usage_text[] =
    "usage: switchboard replay (--trace FILE | --workload NAME [k=v ...]) [options]\n"
    "       switchboard replay --list\n"
    "Replays requests through the routing core onto simulated replicas in virtual time and\n"
    "compares policies (docs/replay.md).\n"
    "\n"
    "input:\n"
    "  --trace FILE           Mooncake JSONL or Azure CSV trace\n"
    "  --workload NAME        a generator (see --list), parameters as k=v after the options\n"
    "  --rate R               generator: requests/s (default 10); trace: rescale to R requests/s\n"
    "  --rate-scale K         trace: replay K times faster\n"
    "  --rates A,B,C          sweep: one run per rate per policy\n"
    "  --requests N           at most N requests (generators default to 1000)\n"
    "  --trace-skip K         trace: start after its first K requests (a later window; times\n"
    "                         start at the first kept one, --rate rescales the window's own rate)\n"
    "  --duration S           only requests arriving in the first S seconds\n"
    "fleet and routing:\n"
    "  --replicas N           replicas (default 4)\n"
    "  --policies A,B|all     policies to compare (default all; see --list)\n"
    "  --config FILE          gateway config whose profiles become policies too\n"
    "  --scrape-ms M          metrics scrape interval per replica (default 100; 0 = none)\n"
    "  --stale-ms M           reports older than this are stale (default 1000)\n"
    "  --net-delay-ms D       one-way gateway-replica latency (default 0)\n"
    "  --sync-probe-ms A      synchronous probe: when a best-ranked candidate's report is older\n"
    "                         than A ms, scrape it before committing (default off)\n"
    "  --sync-probe-rtt-ms R  the probe's round trip, added to the request's wait (default 1)\n"
    "  --sync-probe-candidates K  best-ranked candidates checked and probed (1-8, default 2)\n"
    "  --prefix-max-entries N the router's prefix index bound, entries (default the router's, 1M)\n"
    "  --model NAME           served model name, seeds prefix hashes (default the sim's)\n"
    "  --seed S               seed of generators, router and policies (default 1)\n"
    "fleet events (docs/replay.md):\n"
    "  --gateways G           G gateway replicas, each its own router and policy state, behind an\n"
    "                         L4 balancer (a session keeps its gateway) (default 1)\n"
    "  --bypass F             fraction of conversations sent straight to a random replica, past\n"
    "                         the gateways; reported apart (default 0)\n"
    "  --restart-every S      a replica restarts every S seconds, each in turn (empty cache; the\n"
    "                         requests on it fail)\n"
    "  --restarts N           or N restarts spread over the arrivals\n"
    "  --event-lag-ms L       KV events reach the event-fed references (dynamo-kv, llm-d-precise)\n"
    "                         and POLICY+events runs L ms late (default 20: about one engine\n"
    "                         step; 0 = at once)\n"
    "  --gateway-sync-ms L    gateway sync: each gateway hears what the others sent where L ms\n"
    "                         late, into its prefix index and load accounting (profile\n"
    "                         policies; the peers' policies keep their own state)\n"
    "  POLICY+events          a profile run as a pool with kv_events: the engines' events feed\n"
    "                         its precise index, fused with the router's own marks\n"
    "  --kv-cover-ms C        how long those marks count on an endpoint that reports (default\n"
    "                         2000, kv_events.cover_ms)\n"
    "  --prefix-share         size each router's approximate index to its share of each\n"
    "                         replica's traffic (a pool's prefix_share: true)\n"
    "  --no-prefix-calibrate  the index does not learn from answers' cached tokens how fast\n"
    "                         each replica's cache turns over (prefix_calibrate: false)\n"
    "  --working-set          print the workload's working set (distinct engine blocks) and exit\n"
    "adaptive weights and flow control (docs/benchmarks.md):\n"
    "  --adaptive             run every profile policy with adaptive weights (core/adaptive.h),\n"
    "                         as a pool with `adaptive: true`; or name one as POLICY+adaptive\n"
    "  --adaptive-param K=V,.. override adaptive defaults: x0 k nu share_lo share_hi\n"
    "                         share_saturated epsilon min_publish_ms, <detector>_tau_ms,\n"
    "                         _enter, _exit (imbalance, burst, saturation), w_waiting w_running\n"
    "                         w_kv w_in_flight queue_ref running_ref in_flight_ref load_floor...\n"
    "                         (the names of a pool's `adaptive:` mapping, docs/configuration.md)\n"
    "  --flow-control         admission, fair queues and shedding in front of the pick (core/flow.h)\n"
    "  --priority-mix B=F,..  bands per conversation, e.g. critical=0.2,standard=0.5,sheddable=0.3\n"
    "                         (seeded; default: all standard); results are reported per band\n"
    "  --tenants N            conversations spread over N tenants (default 1)\n"
    "  --flow-max-wait-ms B=M,.. a band's longest queue wait (defaults 30000, 10000, 2000)\n"
    "  --flow-gate K=V,..     the gate's thresholds: queue=N (default 1), kv=F (default: the\n"
    "                         profile's); negative: the profile's saturation thresholds\n"
    "engine (as `switchboard sim`; vLLM's names and defaults, see docs/simulator.md):\n"
    "  --max-num-seqs N  --max-num-batched-tokens N  --num-gpu-blocks N  --block-size N\n"
    "  --max-loras N  --lora-load-ms F  --no-enable-prefix-caching\n"
    "  --step-overhead-ms F  --prefill-token-us F  --decode-token-us F  --context-token-us F\n"
    "output:\n"
    "  --out DIR              write DIR/results.csv, results.md, requests.csv (one row per\n"
    "                         request) and plots (gnuplot)\n"
    "  --list                 name the workloads, their parameters and the policies\n";

enum {
    O_TRACE = 256,
    O_WORKLOAD,
    O_RATE,
    O_RATE_SCALE,
    O_RATES,
    O_REQUESTS,
    O_TRACE_SKIP,
    O_DURATION,
    O_REPLICAS,
    O_POLICIES,
    O_CONFIG,
    O_SCRAPE,
    O_STALE,
    O_NET_DELAY,
    O_PREFIX_MAX,
    O_MODEL,
    O_SEED,
    O_OUT,
    O_LIST,
    O_ADAPTIVE,
    O_ADAPTIVE_PARAM,
    O_FLOW,
    O_PRIORITY_MIX,
    O_TENANTS,
    O_FLOW_WAIT,
    O_FLOW_GATE,
    O_GATEWAYS,
    O_BYPASS,
    O_RESTART_EVERY,
    O_RESTARTS,
    O_EVENT_LAG,
    O_KV_COVER,
    O_PREFIX_SHARE,
    O_PREFIX_CALIBRATE,
    O_WORKING_SET,
    O_GATEWAY_SYNC,
    O_SYNC_PROBE,
    O_SYNC_PROBE_RTT,
    O_SYNC_PROBE_K,
    O_HELP,
};

static const struct option long_opts[] = {
    {"trace", required_argument, NULL, O_TRACE},
    {"workload", required_argument, NULL, O_WORKLOAD},
    {"rate", required_argument, NULL, O_RATE},
    {"rate-scale", required_argument, NULL, O_RATE_SCALE},
    {"rates", required_argument, NULL, O_RATES},
    {"requests", required_argument, NULL, O_REQUESTS},
    {"trace-skip", required_argument, NULL, O_TRACE_SKIP},
    {"duration", required_argument, NULL, O_DURATION},
    {"replicas", required_argument, NULL, O_REPLICAS},
    {"policies", required_argument, NULL, O_POLICIES},
    {"config", required_argument, NULL, O_CONFIG},
    {"scrape-ms", required_argument, NULL, O_SCRAPE},
    {"stale-ms", required_argument, NULL, O_STALE},
    {"net-delay-ms", required_argument, NULL, O_NET_DELAY},
    {"sync-probe-ms", required_argument, NULL, O_SYNC_PROBE},
    {"sync-probe-rtt-ms", required_argument, NULL, O_SYNC_PROBE_RTT},
    {"sync-probe-candidates", required_argument, NULL, O_SYNC_PROBE_K},
    {"prefix-max-entries", required_argument, NULL, O_PREFIX_MAX},
    {"model", required_argument, NULL, O_MODEL},
    {"seed", required_argument, NULL, O_SEED},
    {"out", required_argument, NULL, O_OUT},
    {"list", no_argument, NULL, O_LIST},
    SB_ENGINE_LONG_OPTIONS,
    {"adaptive", no_argument, NULL, O_ADAPTIVE},
    {"adaptive-param", required_argument, NULL, O_ADAPTIVE_PARAM},
    {"flow-control", no_argument, NULL, O_FLOW},
    {"priority-mix", required_argument, NULL, O_PRIORITY_MIX},
    {"tenants", required_argument, NULL, O_TENANTS},
    {"flow-max-wait-ms", required_argument, NULL, O_FLOW_WAIT},
    {"flow-gate", required_argument, NULL, O_FLOW_GATE},
    {"gateways", required_argument, NULL, O_GATEWAYS},
    {"bypass", required_argument, NULL, O_BYPASS},
    {"restart-every", required_argument, NULL, O_RESTART_EVERY},
    {"restarts", required_argument, NULL, O_RESTARTS},
    {"event-lag-ms", required_argument, NULL, O_EVENT_LAG},
    {"kv-cover-ms", required_argument, NULL, O_KV_COVER},
    {"prefix-share", no_argument, NULL, O_PREFIX_SHARE},
    {"no-prefix-calibrate", no_argument, NULL, O_PREFIX_CALIBRATE},
    {"working-set", no_argument, NULL, O_WORKING_SET},
    {"gateway-sync-ms", required_argument, NULL, O_GATEWAY_SYNC},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

#define MAX_RATES 64
#define MAX_POLICIES 64

typedef struct args {
    const char *trace, *workload, *config, *out, *policies;
    double rate, rate_scale;
    double rates[MAX_RATES];
    size_t n_rates;
    uint64_t requests, trace_skip;
    double duration_s;
    bool list;
    bool working_set;  /* --working-set */
    bool adaptive_all; /* --adaptive */
    sb_replay_opts o;
} args;

/* The suffixes naming a policy run with adaptive weights ("default+adaptive") and with the
 * engines' KV events feeding its precise index ("default+events"). */
#define ADAPTIVE_SUFFIX "+adaptive"
#define EVENTS_SUFFIX "+events"

/* What a policy name's suffixes ask of its run. */
typedef struct run_flags {
    bool adaptive, events;
} run_flags;

static int parse_u64(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return sb_flag_u64("replay", flag, s, min, max, out);
}

static int parse_u32(const char *flag, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (parse_u64(flag, s, min, max, &v) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double min, double max, double *out)
{
    return sb_flag_double("replay", flag, s, min, max, out);
}

static int parse_rates(const char *s, args *a)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", s);
    a->n_rates = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->n_rates == MAX_RATES) {
            fprintf(stderr, "switchboard replay: --rates takes at most %d rates\n", MAX_RATES);
            return -1;
        }
        if (parse_double("rates", tok, 1e-6, 1e9, &a->rates[a->n_rates]) < 0 || !(a->rates[a->n_rates] > 0))
            return -1;
        a->n_rates++;
    }
    if (!a->n_rates) {
        fprintf(stderr, "switchboard replay: --rates wants a list like 2,4,8\n");
        return -1;
    }
    return 0;
}

static int parse_ms(const char *flag, const char *s, double max, sb_ns *out)
{
    double d;
    if (parse_double(flag, s, 0, max, &d) < 0)
        return -1;
    *out = (sb_ns)(d * 1e6);
    return 0;
}

/* Calls set(ctx, key, value) for each "key=value" of a comma-separated list. */
static int parse_pairs(const char *flag, const char *s, int (*set)(void *, const char *, double), void *ctx)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", s);
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
        char *eq = strchr(tok, '=');
        double v;
        if (!eq) {
            fprintf(stderr, "switchboard replay: --%s wants key=value pairs, got '%s'\n", flag, tok);
            return -1;
        }
        *eq = '\0';
        if (parse_double(flag, eq + 1, -1e12, 1e12, &v) < 0)
            return -1;
        if (set(ctx, tok, v) < 0) {
            fprintf(stderr, "switchboard replay: --%s: unknown or out-of-range '%s'\n", flag, tok);
            return -1;
        }
    }
    if (!n) {
        fprintf(stderr, "switchboard replay: --%s wants key=value pairs\n", flag);
        return -1;
    }
    return 0;
}

static int set_adaptive_knob(void *ctx, const char *key, double v)
{
    return sb_adaptive_param_set(ctx, key, v) == 0 ? 0 : -1;
}

static int set_band_mix(void *ctx, const char *key, double v)
{
    double *mix = ctx;
    int b = sb_band_parse(key, strlen(key));
    if (b < 0 || !(v >= 0))
        return -1;
    mix[b] = v;
    return 0;
}

static int set_band_wait(void *ctx, const char *key, double v)
{
    sb_flow_config *fc = ctx;
    int b = sb_band_parse(key, strlen(key));
    if (b < 0 || !(v >= 0))
        return -1;
    fc->band[b].max_wait_ns = (sb_ns)(v * 1e6);
    return 0;
}

static int set_flow_gate(void *ctx, const char *key, double v)
{
    sb_flow_config *fc = ctx;
    if (!strcmp(key, "queue"))
        fc->gate_queue = v;
    else if (!strcmp(key, "kv") && v <= 1)
        fc->gate_kv = v;
    else
        return -1;
    return 0;
}

static int check_args(int argc, char **argv, const args *a);

static int parse_args(int argc, char **argv, args *a)
{
    sb_replay_opts *o = &a->o;
    sb_engine_params *ep = &o->engine;
    uint64_t u;
    int rc = 0, c;
    optind = 1;
    while (rc == 0 && (c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case O_TRACE: a->trace = v; break;
        case O_WORKLOAD: a->workload = v; break;
        case O_RATE: rc = parse_double("rate", v, 1e-6, 1e9, &a->rate); break;
        case O_RATE_SCALE: rc = parse_double("rate-scale", v, 1e-6, 1e9, &a->rate_scale); break;
        case O_RATES: rc = parse_rates(v, a); break;
        case O_REQUESTS: rc = parse_u64("requests", v, 1, UINT32_MAX - 2, &a->requests); break;
        case O_TRACE_SKIP: rc = parse_u64("trace-skip", v, 0, UINT32_MAX - 2, &a->trace_skip); break;
        case O_DURATION: rc = parse_double("duration", v, 1e-3, 1e9, &a->duration_s); break;
        case O_REPLICAS: rc = parse_u32("replicas", v, 1, 65536, &o->replicas); break;
        case O_POLICIES: a->policies = v; break;
        case O_CONFIG: a->config = v; break;
        case O_SCRAPE: rc = parse_ms("scrape-ms", v, 3.6e6, &o->scrape_ns); break;
        case O_STALE: rc = parse_ms("stale-ms", v, 3.6e6, &o->pool.stale_ns); break;
        case O_NET_DELAY: rc = parse_ms("net-delay-ms", v, 6e4, &o->net_delay_ns); break;
        case O_SYNC_PROBE: rc = parse_ms("sync-probe-ms", v, 3.6e6, &o->sync_probe_age_ns); break;
        case O_SYNC_PROBE_RTT: rc = parse_ms("sync-probe-rtt-ms", v, 6e4, &o->sync_probe_rtt_ns); break;
        case O_SYNC_PROBE_K: rc = parse_u32("sync-probe-candidates", v, 1, 8, &o->sync_probe_candidates); break;
        case O_PREFIX_MAX:
            if ((rc = parse_u64("prefix-max-entries", v, 1, UINT32_MAX - 1, &u)) == 0)
                o->pool.prefix_max_entries = (size_t)u;
            break;
        case O_MODEL: o->model = v; break;
        case O_SEED: rc = parse_u64("seed", v, 0, UINT64_MAX, &o->seed); break;
        case O_OUT: a->out = v; break;
        case O_LIST: a->list = true; break;
        case O_ADAPTIVE: a->adaptive_all = true; break;
        case O_ADAPTIVE_PARAM: rc = parse_pairs("adaptive-param", v, set_adaptive_knob, &o->adaptive_params); break;
        case O_FLOW: o->flow_control = true; break;
        case O_PRIORITY_MIX:
            memset(o->band_mix, 0, sizeof(o->band_mix));
            rc = parse_pairs("priority-mix", v, set_band_mix, o->band_mix);
            if (rc == 0 && !(o->band_mix[0] + o->band_mix[1] + o->band_mix[2] > 0)) {
                fprintf(stderr, "switchboard replay: --priority-mix needs a positive fraction\n");
                rc = -1;
            }
            break;
        case O_TENANTS: rc = parse_u32("tenants", v, 1, 1u << 20, &o->tenants); break;
        case O_FLOW_WAIT: rc = parse_pairs("flow-max-wait-ms", v, set_band_wait, &o->flow); break;
        case O_FLOW_GATE: rc = parse_pairs("flow-gate", v, set_flow_gate, &o->flow); break;
        case O_GATEWAYS: rc = parse_u32("gateways", v, 1, SB_REPLAY_MAX_GATEWAYS, &o->gateways); break;
        case O_BYPASS: rc = parse_double("bypass", v, 0, 1, &o->bypass); break;
        case O_RESTART_EVERY: {
            double sec;
            if ((rc = parse_double("restart-every", v, 1e-3, 1e9, &sec)) == 0)
                o->restart_every_ns = (sb_ns)(sec * 1e9);
            break;
        }
        case O_RESTARTS: rc = parse_u32("restarts", v, 0, 1000000, &o->restarts); break;
        case O_EVENT_LAG: rc = parse_ms("event-lag-ms", v, 6e5, &o->event_lag_ns); break;
        case O_KV_COVER: rc = parse_ms("kv-cover-ms", v, 3.6e6, &o->kv_cover_ns); break;
        case O_PREFIX_SHARE: o->pool.prefix_share = true; break;
        case O_PREFIX_CALIBRATE: o->pool.prefix_calibrate = false; break;
        case O_WORKING_SET: a->working_set = true; break;
        case O_GATEWAY_SYNC:
            rc = parse_ms("gateway-sync-ms", v, 6e5, &o->gateway_sync_ns);
            o->gateway_sync = true;
            break;
        case 'h':
        case O_HELP: fputs(usage_text, stdout); return 1;
        default: rc = sb_is_engine_flag(c) ? sb_engine_flag("replay", c, v, ep) : -1; break;
        }
    }
    if (rc < 0)
        return -1;
    return a->list ? 0 : check_args(argc, argv, a);
}

/* The flags' combinations and the engine's and adaptive loop's parameters, once parsed. */
static int check_args(int argc, char **argv, const args *a)
{
    const sb_replay_opts *o = &a->o;
    if (!a->trace == !a->workload) {
        fprintf(stderr, "switchboard replay: give one of --trace FILE and --workload NAME\n");
        return -1;
    }
    if (a->trace && optind < argc) {
        fprintf(stderr, "switchboard replay: unexpected argument '%s' (k=v parameters are for --workload)\n",
                argv[optind]);
        return -1;
    }
    if ((a->rate > 0) + (a->rate_scale > 0) + (a->n_rates > 0) > 1) {
        fprintf(stderr, "switchboard replay: --rate, --rate-scale and --rates exclude each other\n");
        return -1;
    }
    if (o->restart_every_ns && o->restarts) {
        fprintf(stderr, "switchboard replay: --restart-every and --restarts exclude each other\n");
        return -1;
    }
    if (a->workload && a->trace_skip) {
        fprintf(stderr, "switchboard replay: --trace-skip is for traces\n");
        return -1;
    }
    if (a->workload && a->rate_scale > 0) {
        fprintf(stderr, "switchboard replay: --rate-scale is for traces; use --rate with a workload\n");
        return -1;
    }
    if (sb_engine_params_check(&o->engine) < 0) {
        fprintf(stderr, "switchboard replay: engine parameters rejected (a zero size, a block size over 4096, or "
                        "--max-num-seqs above --max-num-batched-tokens)\n");
        return -1;
    }
    const char *why = sb_adaptive_params_check(&o->adaptive_params);
    if (why) {
        fprintf(stderr, "switchboard replay: --adaptive-param: %s\n", why);
        return -1;
    }
    return 0;
}

static void list_all(const sb_config *cfg)
{
    printf("workloads (--workload NAME k=v ...):\n");
    for (const sb_replay_generator *const *g = sb_replay_generators_all(); *g; g++) {
        printf("  %-16s %s\n", (*g)->name, (*g)->summary);
        for (const sb_replay_param *p = (*g)->params; p->name; p++)
            printf("      %-12s %-8g %s\n", p->name, p->def, p->help);
    }
    printf("traces (--trace FILE): Mooncake JSONL (timestamp, input_length, output_length, hash_ids), "
           "Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens)\n");
    printf("policies (--policies A,B or all):\n");
    const char *names[MAX_POLICIES];
    size_t n = sb_replay_policy_names(cfg ? cfg->profiles : NULL, cfg ? cfg->n_profiles : 0, names, MAX_POLICIES);
    for (size_t i = 0; i < n && i < MAX_POLICIES; i++) {
        const sb_replay_policy_def *d = sb_replay_policy_find(names[i]);
        printf("  %-16s %s\n", names[i],
               d                              ? d->summary
               : sb_profile_builtin(names[i]) ? "the product's built-in profile of that name (core/plugins.c)"
                                              : "profile from the config file");
    }
}

/* Splits the policy list ("all" expands to the registry, then the config's profiles). */
static int policy_names(const char *list, const sb_config *cfg, const char **names, size_t *n, char *buf, size_t cap)
{
    *n = 0;
    snprintf(buf, cap, "%s", list ? list : "all");
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "all")) {
            size_t k = sb_replay_policy_names(cfg ? cfg->profiles : NULL, cfg ? cfg->n_profiles : 0, names + *n,
                                              MAX_POLICIES - *n);
            *n += k < MAX_POLICIES - *n ? k : MAX_POLICIES - *n;
        } else if (*n < MAX_POLICIES) {
            names[(*n)++] = tok;
        }
    }
    if (!*n) {
        fprintf(stderr, "switchboard replay: --policies names no policy\n");
        return -1;
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Loads the trace, or generates the workload at `rate`. */
static int load_workload(const args *a, int kv_argc, char **kv_argv, double rate, sb_replay_workload *w)
{
    if (a->trace) {
        size_t len;
        char *text = sb_read_file(a->trace, &len);
        if (!text) {
            fprintf(stderr, "switchboard replay: %s: %s\n", a->trace, strerror(errno));
            return -1;
        }
        sb_replay_trace_error err;
        size_t max = a->requests ? (size_t)(a->requests + a->trace_skip) : 0;
        int rc = sb_replay_trace_parse(text, len, max, w, &err);
        sb_free(text);
        if (rc < 0) {
            if (err.line)
                fprintf(stderr, "%s:%zu: %s\n", a->trace, err.line, err.message);
            else
                fprintf(stderr, "%s: %s\n", a->trace, err.message);
            return -1;
        }
        if (a->trace_skip && sb_replay_workload_skip(w, (size_t)a->trace_skip) < 0) {
            fprintf(stderr, "%s: --trace-skip %llu leaves no requests (the trace has %zu)\n", a->trace,
                    (unsigned long long)a->trace_skip, w->n);
            sb_replay_workload_free(w);
            return -1;
        }
        snprintf(w->name, sizeof(w->name), "%s", base_name(a->trace));
        return 0;
    }
    const sb_replay_generator *g = sb_replay_generator_find(a->workload);
    if (!g) {
        fprintf(stderr, "switchboard replay: unknown workload '%s' (see --list)\n", a->workload);
        return -1;
    }
    sb_replay_gen_opts go = {
        .rate = rate, .requests = a->requests, .seed = a->o.seed, .duration_ns = (sb_ns)(a->duration_s * 1e9)};
    if (!go.requests && !go.duration_ns)
        go.requests = 1000;
    char err[256];
    if (sb_replay_generate(g, (const char *const *)kv_argv, (size_t)kv_argc, &go, w, err, sizeof(err)) < 0) {
        fprintf(stderr, "switchboard replay: %s\n", err);
        return -1;
    }
    return 0;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* gnuplot from PATH, or NULL. */
static bool have_gnuplot(void)
{
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        snprintf(buf, sizeof(buf), "%.*s/gnuplot", (int)len, path);
        if (len && access(buf, X_OK) == 0)
            return true;
        path = e ? e + 1 : NULL;
    }
    return false;
}

static int run_gnuplot(const char *script)
{
    char *argv[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0)
        return -1;
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return 0;
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "switchboard replay: %s: %s\n", path, strerror(errno));
    return f;
}

static int close_file(FILE *f, const char *path)
{
    if (ferror(f) | fclose(f)) {
        fprintf(stderr, "switchboard replay: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

/* The main table, then per band and adaptive ones when any run has them. */
static void write_tables(FILE *f, const sb_replay_result *r, size_t n)
{
    sb_replay_write_table(f, r, n);
    if (sb_replay_any_bands(r, n)) {
        fputs("\nPer priority band (flow control: refused = 429, expired = 503; TTFT includes the queue wait):\n\n", f);
        sb_replay_write_band_table(f, r, n);
    }
    if (sb_replay_any_adaptive(r, n)) {
        fputs("\nAdaptive weights (core/adaptive.h):\n\n", f);
        sb_replay_write_adaptive_table(f, r, n);
    }
    if (sb_replay_any_fleet_events(r, n)) {
        fputs("\nFleet events (gateway replicas, bypass traffic, restarts; bypassed requests are not in the "
              "figures above):\n\n",
              f);
        sb_replay_write_fleet_table(f, r, n);
    }
}

/* One row per request of every run (with keep_records): which gateway and replica took it, its
 * prompt and cached tokens, its times; for looking at the requests behind a percentile. */
static void write_requests(FILE *f, const sb_replay_result *r, size_t n, const sb_replay_workload *w)
{
    /* each request's turn in its conversation (1 = its first), along the follow-up chains */
    uint32_t *turns = w && w->n ? sb_calloc(w->n, sizeof(*turns)) : NULL;
    for (size_t k = 0; turns && k < w->n; k++) {
        if (w->reqs[k].is_followup)
            continue;
        uint32_t t = 1;
        for (uint32_t j = (uint32_t)k; j != SB_REPLAY_NO_REQUEST && j < w->n; j = w->reqs[j].followup)
            turns[j] = t++;
    }
    static const char *const outcome[] = {"pending", "completed", "shed", "failed"};
    fputs("policy,rate,request,session,turn,gateway,bypass,replica,arrival_ms,ttft_ms,e2e_ms,wait_ms,prompt_tokens,"
          "cached_tokens,completion_tokens,preemptions,outcome,status\n",
          f);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r[i].n_records; k++) {
            const sb_replay_record *q = &r[i].records[k];
            /* session and turn need the run's workload: a sweep of a generator over rates
             * regenerates it per rate, and only the last is kept (0, 0 then) */
            unsigned long long session = 0;
            unsigned turn = 0;
            if (w && w->n == r[i].n_records) {
                session = (unsigned long long)w->reqs[k].session;
                turn = turns ? turns[k] : 0;
            }
            fprintf(f, "%s,%.4f,%zu,%llu,%u,%u,%d,%d,%.3f,%.3f,%.3f,%.3f,%u,%u,%u,%u,%s,%u\n", r[i].policy, r[i].rate,
                    k, session, turn, (unsigned)q->gateway, q->bypass ? 1 : 0,
                    q->replica == UINT32_MAX ? -1 : (int)q->replica, q->arrival_ns / 1e6, q->ttft_ns / 1e6,
                    q->e2e_ns / 1e6, q->wait_ns / 1e6, q->prompt_tokens, q->cached_tokens, q->completion_tokens,
                    q->preemptions, q->outcome < 4 ? outcome[q->outcome] : "?", (unsigned)q->status);
        }
    sb_free(turns);
}

static int write_outputs(const char *dir, const sb_replay_result *r, size_t n, const sb_replay_workload *w)
{
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "switchboard replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char path[4096], data[4096], png[4096];
    FILE *f;
    if (!(f = open_in(dir, "results.csv", path, sizeof(path))))
        return -1;
    if (sb_replay_write_csv_extended(f, r, n) < 0)
        fprintf(stderr, "switchboard replay: %s: out of memory\n", path);
    if (close_file(f, path) < 0 || !(f = open_in(dir, "results.md", path, sizeof(path))))
        return -1;
    write_tables(f, r, n);
    if (close_file(f, path) < 0 || !(f = open_in(dir, "requests.csv", path, sizeof(path))))
        return -1;
    write_requests(f, r, n, w);
    if (close_file(f, path) < 0 || !(f = open_in(dir, "ttft_cdf.dat", data, sizeof(data))))
        return -1;
    sb_replay_write_cdf_data(f, r, n);
    if (close_file(f, data) < 0 || !(f = open_in(dir, "ttft_cdf.gp", path, sizeof(path))))
        return -1;
    snprintf(png, sizeof(png), "%s/ttft_cdf", dir);
    sb_replay_write_cdf_script(f, r, n, data, png);
    if (close_file(f, path) < 0)
        return -1;
    bool sweep = sb_replay_distinct_rates(r, n) > 1;
    char p90_script[4096];
    if (sweep) {
        if (!(f = open_in(dir, "ttft_p90.dat", data, sizeof(data))))
            return -1;
        sb_replay_write_p90_data(f, r, n);
        if (close_file(f, data) < 0 || !(f = open_in(dir, "ttft_p90.gp", p90_script, sizeof(p90_script))))
            return -1;
        snprintf(png, sizeof(png), "%s/ttft_p90_vs_rate.png", dir);
        sb_replay_write_p90_script(f, r, n, data, png);
        if (close_file(f, p90_script) < 0)
            return -1;
    }
    if (!have_gnuplot()) {
        fprintf(stderr,
                "switchboard replay: gnuplot not found: plots skipped (scripts are in %s; install "
                "gnuplot-nox and run gnuplot on them)\n",
                dir);
        return 0;
    }
    if (run_gnuplot(path) < 0 || (sweep && run_gnuplot(p90_script) < 0))
        fprintf(stderr, "switchboard replay: gnuplot failed; plots may be missing\n");
    return 0;
}

/* Strips suffix from the end of name (a NUL-terminated buffer); whether it was there. */
static bool strip_suffix(char *name, const char *suffix)
{
    size_t len = strlen(name), sl = strlen(suffix);
    if (len <= sl || strcmp(name + len - sl, suffix))
        return false;
    name[len - sl] = '\0';
    return true;
}

/* Resolves each name to its policy. NAME+adaptive (or --adaptive on a profile) runs the profile
 * with adaptive weights, NAME+events with the engines' KV events feeding its routers' precise
 * index (either order, both allowed), side by side with NAME. */
static int resolve_policies(const args *a, const sb_config *cfg, const char **names, size_t n_names,
                            sb_replay_policy *pols, run_flags *flags)
{
    const sb_profile *user = cfg ? cfg->profiles : NULL;
    size_t n_user = cfg ? cfg->n_profiles : 0;
    for (size_t i = 0; i < n_names; i++) {
        char base[SB_PROFILE_NAME_MAX];
        snprintf(base, sizeof(base), "%s", names[i]);
        bool adaptive = false, events = false;
        for (bool more = true; more;) {
            bool ad = strip_suffix(base, ADAPTIVE_SUFFIX), ev = strip_suffix(base, EVENTS_SUFFIX);
            adaptive |= ad;
            events |= ev;
            more = ad || ev;
        }
        if (sb_replay_policy_resolve(base, user, n_user, &pols[i]) < 0) {
            fprintf(stderr, "switchboard replay: unknown policy '%s' (see --list)\n", base);
            return -1;
        }
        if ((adaptive || events) && !pols[i].profile) {
            fprintf(stderr, "switchboard replay: %s: %s need a profile (a custom rule runs none)\n", names[i],
                    adaptive ? "adaptive weights" : "KV events");
            return -1;
        }
        flags[i].adaptive = adaptive || (a->adaptive_all && pols[i].profile);
        flags[i].events = events;
        if (flags[i].adaptive || events) {
            int w = snprintf(pols[i].name, sizeof(pols[i].name), "%s%s%s", base, events ? EVENTS_SUFFIX : "",
                             flags[i].adaptive ? ADAPTIVE_SUFFIX : "");
            if (w < 0 || (size_t)w >= sizeof(pols[i].name)) {
                fprintf(stderr, "switchboard replay: %s: name too long for its suffixes\n", base);
                return -1;
            }
        }
    }
    return 0;
}

/* Runs every policy on one workload; results appended at res[*n_res]. */
static int run_policies(const args *a, const sb_replay_workload *w, const sb_replay_opts *base,
                        const sb_replay_policy *pols, const run_flags *flags, size_t n_names, sb_replay_result *res,
                        size_t *n_res)
{
    sb_replay_opts o = *base;
    for (size_t pi = 0; pi < n_names; pi++) {
        char err[256];
        double t0 = wall_s();
        o.adaptive = flags[pi].adaptive;
        o.kv_events = flags[pi].events;
        sb_replay_result *r = &res[*n_res];
        if (sb_replay_run(w, &pols[pi], &o, r, err, sizeof(err)) < 0) {
            fprintf(stderr, "switchboard replay: %s: %s\n", pols[pi].name, err);
            return -1;
        }
        fprintf(stderr, "replay: %-16s %llu requests, %llu events in %.2f s wall\n", pols[pi].name,
                (unsigned long long)r->requests, (unsigned long long)r->events, wall_s() - t0);
        if (r->sync_probes)
            fprintf(stderr, "replay: %-16s %llu requests waited for a synchronous probe (%llu endpoints scraped)\n",
                    pols[pi].name, (unsigned long long)r->sync_probes, (unsigned long long)r->sync_probed);
        if (r->completed == 0 && r->shed > 0)
            fprintf(stderr,
                    "replay: note: %s shed every request (a labels filter? replay's endpoints carry "
                    "no labels)\n",
                    pols[pi].name);
        (*n_res)++;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* --working-set: the distinct full engine blocks of every prompt the run would send (roots
 * within --requests/--duration and their later turns), the quantity a fleet's caches compete
 * for; bench/routing_matrix.py sizes --num-gpu-blocks from it. Sort and count: O(B log B) in
 * the blocks of all prompts, for sizing runs, not for the largest traces. */
static int print_working_set(const args *a, const sb_replay_workload *w)
{
    const sb_engine_params *ep = &a->o.engine;
    size_t total = 0, roots = 0;
    uint64_t max_req_blocks = 0;
    for (size_t i = 0; i < w->n; i++) {
        const sb_replay_request *r = &w->reqs[i];
        if (!r->is_followup && a->requests && roots++ >= a->requests)
            break;
        total += r->n_prompt / ep->block_size;
        uint64_t need = ((uint64_t)r->n_prompt + r->max_tokens + ep->block_size - 1) / ep->block_size;
        max_req_blocks = need > max_req_blocks ? need : max_req_blocks;
    }
    uint64_t *all = sb_malloc((total ? total : 1) * sizeof(uint64_t));
    uint32_t *tokens = sb_malloc((w->max_prompt ? w->max_prompt : 1) * sizeof(uint32_t));
    if (!all || !tokens) {
        sb_free(all);
        sb_free(tokens);
        fprintf(stderr, "switchboard replay: out of memory\n");
        return -1;
    }
    size_t k = 0;
    roots = 0;
    for (size_t i = 0; i < w->n && k < total; i++) {
        const sb_replay_request *r = &w->reqs[i];
        if (!r->is_followup && a->requests && roots++ >= a->requests)
            break;
        sb_replay_prompt_tokens(w, r, tokens);
        k += sb_engine_hash_blocks(tokens, r->n_prompt, ep->block_size, r->adapter, all + k);
    }
    qsort(all, k, sizeof(uint64_t), cmp_u64);
    size_t distinct = 0;
    for (size_t i = 0; i < k; i++)
        distinct += i == 0 || all[i] != all[i - 1];
    printf("working_set_blocks %zu\nprompt_blocks %zu\nblock_size %u\nmax_request_blocks %llu\n", distinct, k,
           ep->block_size, (unsigned long long)max_req_blocks);
    sb_free(all);
    sb_free(tokens);
    return 0;
}

/* The runs: every rate (one, unless a sweep), every policy. */
static int run_all(const args *a, int argc, char **argv, const sb_replay_policy *pols, const run_flags *flags,
                   size_t n_names, sb_replay_result *res, size_t *n_res, sb_replay_workload *w)
{
    double one_rate = a->rate > 0 ? a->rate : 0;
    size_t n_rates = a->n_rates ? a->n_rates : 1;
    char **kv = argv + optind;
    int n_kv = a->trace ? 0 : argc - optind;
    for (size_t ri = 0; ri < n_rates; ri++) {
        double rate = a->n_rates ? a->rates[ri] : one_rate;
        if (ri == 0 || a->workload) { /* a generator's arrivals depend on the rate */
            sb_replay_workload_free(w);
            if (load_workload(a, n_kv, kv, a->workload && !(rate > 0) ? 10.0 : rate, w) < 0)
                return -1;
            if (a->working_set)
                return print_working_set(a, w) < 0 ? -1 : 1;
        }
        sb_replay_opts o = a->o;
        o.max_arrival_ns = a->trace ? (sb_ns)(a->duration_s * 1e9) : 0;
        if (a->trace) {
            if (rate > 0 && !(w->rate > 0)) {
                fprintf(stderr, "switchboard replay: the trace spans no time: it has no rate to scale\n");
                return -1;
            }
            o.time_scale = rate > 0 ? rate / w->rate : a->rate_scale > 0 ? a->rate_scale : 1.0;
        }
        fprintf(stderr, "replay: %s, %zu requests, %.4g requests/s offered, %u replicas\n", w->name, w->n,
                w->rate * o.time_scale, o.replicas);
        if (run_policies(a, w, &o, pols, flags, n_names, res, n_res) < 0)
            return -1;
    }
    return 0;
}

int sb_cmd_replay(int argc, char **argv)
{
    args a = {0};
    sb_replay_opts_default(&a.o);
    a.o.replicas = 4;
    int prc = parse_args(argc, argv, &a);
    if (prc > 0)
        return 0;
    if (prc < 0) {
        fputs("(switchboard replay --help for usage)\n", stderr);
        return 2;
    }
    sb_config *cfg = NULL;
    a.o.keep_records = a.out != NULL; /* DIR/requests.csv */
    if (a.config && !(cfg = sb_load_config(a.config)))
        return 2;
    if (a.list) {
        list_all(cfg);
        sb_config_free(cfg);
        return 0;
    }
    const char *names[MAX_POLICIES];
    size_t n_names;
    char namebuf[4096];
    int code = 2;
    sb_replay_policy *pols = NULL;
    run_flags *flags = NULL;
    sb_replay_result *res = NULL;
    sb_replay_workload w = {0};
    size_t n_res = 0;
    if (policy_names(a.policies, cfg, names, &n_names, namebuf, sizeof(namebuf)) < 0)
        goto done;
    pols = sb_calloc(n_names, sizeof(*pols));
    flags = sb_calloc(n_names, sizeof(*flags));
    res = sb_calloc((a.n_rates ? a.n_rates : 1) * n_names, sizeof(*res));
    if (!pols || !flags || !res || resolve_policies(&a, cfg, names, n_names, pols, flags) < 0)
        goto done;
    code = 1;
    int ran = run_all(&a, argc, argv, pols, flags, n_names, res, &n_res, &w);
    if (ran != 0) {
        code = ran > 0 ? 0 : 1;
        goto done;
    }
    write_tables(stdout, res, n_res);
    fflush(stdout);
    code = a.out && write_outputs(a.out, res, n_res, a.n_rates > 1 && a.workload ? NULL : &w) < 0 ? 1 : 0;
done:
    for (size_t i = 0; i < n_res; i++)
        sb_replay_result_free(&res[i]);
    sb_free(res);
    sb_free(pols);
    sb_free(flags);
    sb_replay_workload_free(&w);
    sb_config_free(cfg);
    return code;
}
