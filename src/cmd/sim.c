/* switchboard sim: runs a fleet of simulated model servers (sim/server.h) until SIGINT or
 * SIGTERM. Flags are named like vLLM's engine arguments where one exists. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "cmd/flags.h"
#include "proto/json.h"
#include "sim/server.h"

static const char usage_text[] =
    "usage: switchboard sim [options]\n"
    "Serves N simulated vLLM-compatible replicas on ports P..P+N-1.\n"
    "With --calibrate, prints what the engine parameters imply (TTFT, inter-token latency,\n"
    "prefill throughput) next to published reference points, and exits.\n"
    "\n"
    "  --replicas N                 replicas (default 1)\n"
    "  --port P                     first port (default 8000; 0: any free ports)\n"
    "  --host ADDR                  listen address (default 127.0.0.1)\n"
    "  --model NAME                 served model (default meta-llama/Llama-3.1-8B-Instruct)\n"
    "  --adapters A,B               LoRA adapter names served besides the model\n"
    "  --engine vllm|sglang|llamacpp  whose /metrics names to speak (default vllm)\n"
    "  --speed X                    engine clock rate over real time (default 1)\n"
    "  --max-model-len N            prompt + output tokens at most (default min(131072, cache))\n"
    "engine (vLLM's names and defaults; see docs/simulator.md):\n"
    "  --max-num-seqs N  --max-num-batched-tokens N  --num-gpu-blocks N  --block-size N\n"
    "  --max-loras N  --lora-load-ms F  --no-enable-prefix-caching\n"
    "  --step-overhead-ms F  --prefill-token-us F  --decode-token-us F  --context-token-us F\n"
    "faults (off by default; --fault-replicas picks the replicas, default all):\n"
    "  --fail-rate F                answer that fraction of completions with 500\n"
    "  --metrics-delay-ms D         answer /metrics after D ms\n"
    "  --metrics-hang               never answer /metrics\n"
    "  --die-after-tokens N         cut each connection after N generated tokens\n"
    "  --refuse                     do not listen (connections refused)\n"
    "  --restart-every-ms M         restart (down M/10 ms, empty cache) every M ms\n"
    "  --fault-replicas I,J         0-based replica indexes the faults apply to (< 64)\n"
    "  --seed N                     seed of the fault draws (default 1)\n"
    "KV-cache events, published as vLLM does (off by default; any of these turns them on):\n"
    "  --kv-events-config JSON      vLLM's --kv-events-config: enable_kv_cache_events, publisher,\n"
    "                               endpoint, replay_endpoint, buffer_steps, hwm, topic\n"
    "  --kv-events                  publish with vLLM's defaults (PUB bound on port 5557)\n"
    "  --kv-events-endpoint EP      PUB address, replica i on port + i; binds with a wildcard\n"
    "                               (tcp://*:5557), else connects (vLLM's rule)\n"
    "  --kv-events-replay EP        replay ROUTER address (replica i: port + i)\n"
    "  --kv-events-topic T          topic frame (default empty)\n"
    "  --kv-events-encoding array|map  tagged arrays (vLLM before May 2026) or maps (default array)\n"
    "  --kv-events-hashes int|bytes    uint64 hashes or 32-byte bins (default int)\n"
    "  --kv-events-buffer-steps N   batches kept for replay (default 10000)\n"
    "  --kv-events-drop-every N     fault: leave every Nth batch out of the live stream\n"
    "  --drain-ms D                 on SIGTERM, let generations in flight finish for up to D ms\n"
    "                               (default 30000; a second SIGTERM, SIGINT or SIGQUIT stops at once)\n"
    "  --log-level debug|info|warn|error\n";

enum {
    O_REPLICAS = 256,
    O_CALIBRATE,
    O_PORT,
    O_HOST,
    O_MODEL,
    O_ADAPTERS,
    O_ENGINE,
    O_SPEED,
    O_MAX_MODEL_LEN,
    O_FAIL_RATE,
    O_METRICS_DELAY,
    O_METRICS_HANG,
    O_DIE_AFTER,
    O_REFUSE,
    O_RESTART,
    O_FAULT_REPLICAS,
    O_SEED,
    O_LOG_LEVEL,
    O_DRAIN_MS,
    O_HELP,
    O_KV_CONFIG,
    O_KV_ON,
    O_KV_ENDPOINT,
    O_KV_REPLAY,
    O_KV_TOPIC,
    O_KV_ENCODING,
    O_KV_HASHES,
    O_KV_BUFFER_STEPS,
    O_KV_DROP_EVERY,
};

static const struct option long_opts[] = {
    {"replicas", required_argument, NULL, O_REPLICAS},
    {"calibrate", no_argument, NULL, O_CALIBRATE},
    {"port", required_argument, NULL, O_PORT},
    {"host", required_argument, NULL, O_HOST},
    {"model", required_argument, NULL, O_MODEL},
    {"adapters", required_argument, NULL, O_ADAPTERS},
    {"engine", required_argument, NULL, O_ENGINE},
    {"speed", required_argument, NULL, O_SPEED},
    {"max-model-len", required_argument, NULL, O_MAX_MODEL_LEN},
    SB_ENGINE_LONG_OPTIONS,
    {"fail-rate", required_argument, NULL, O_FAIL_RATE},
    {"metrics-delay-ms", required_argument, NULL, O_METRICS_DELAY},
    {"metrics-hang", no_argument, NULL, O_METRICS_HANG},
    {"die-after-tokens", required_argument, NULL, O_DIE_AFTER},
    {"refuse", no_argument, NULL, O_REFUSE},
    {"restart-every-ms", required_argument, NULL, O_RESTART},
    {"fault-replicas", required_argument, NULL, O_FAULT_REPLICAS},
    {"seed", required_argument, NULL, O_SEED},
    {"log-level", required_argument, NULL, O_LOG_LEVEL},
    {"drain-ms", required_argument, NULL, O_DRAIN_MS},
    {"help", no_argument, NULL, O_HELP},
    {"kv-events-config", required_argument, NULL, O_KV_CONFIG},
    {"kv-events", no_argument, NULL, O_KV_ON},
    {"kv-events-endpoint", required_argument, NULL, O_KV_ENDPOINT},
    {"kv-events-replay", required_argument, NULL, O_KV_REPLAY},
    {"kv-events-topic", required_argument, NULL, O_KV_TOPIC},
    {"kv-events-encoding", required_argument, NULL, O_KV_ENCODING},
    {"kv-events-hashes", required_argument, NULL, O_KV_HASHES},
    {"kv-events-buffer-steps", required_argument, NULL, O_KV_BUFFER_STEPS},
    {"kv-events-drop-every", required_argument, NULL, O_KV_DROP_EVERY},
    {NULL, 0, NULL, 0},
};

/* Signals as `serve` takes them: SIGTERM drains (listeners closed, generations in flight
 * finish, up to --drain-ms), a second SIGTERM, SIGINT or SIGQUIT stops at once. */
typedef struct sim_state {
    sb_sim_fleet *fleet;
    uv_signal_t sigint, sigterm, sigquit;
    uv_timer_t drain_timer;
    bool draining;
    uint32_t drain_ms;
    uint64_t drain_deadline_ns;
} sim_state;

static void stop_fleet(sim_state *st)
{
    if (!st->fleet)
        return;
    sb_sim_fleet_stop(st->fleet);
    st->fleet = NULL;
    uv_close((uv_handle_t *)&st->sigint, NULL);
    uv_close((uv_handle_t *)&st->sigterm, NULL);
    uv_close((uv_handle_t *)&st->sigquit, NULL);
    uv_close((uv_handle_t *)&st->drain_timer, NULL);
}

/* Polled: the fleet's connections are few, and a drain ends at most one period late. */
static void on_drain_tick(uv_timer_t *t)
{
    sim_state *st = t->data;
    bool over = uv_hrtime() >= st->drain_deadline_ns;
    if (st->fleet && (sb_sim_fleet_connections(st->fleet) == 0 || over)) {
        if (over)
            SB_WARN("sim: --drain-ms passed with connections open; stopping");
        stop_fleet(st);
    }
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    sim_state *st = h->data;
    if (signum == SIGTERM && !st->draining && st->fleet) {
        SB_INFO("sim: signal %d, draining (again, or SIGINT/SIGQUIT, to stop at once)", signum);
        st->draining = true;
        st->drain_deadline_ns = uv_hrtime() + (uint64_t)st->drain_ms * 1000000u;
        sb_sim_fleet_drain(st->fleet);
        uv_timer_start(&st->drain_timer, on_drain_tick, 0, 20);
        return;
    }
    SB_INFO("sim: signal %d, stopping", signum);
    stop_fleet(st);
}

static int parse_u32(const char *flag, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    return sb_flag_u32("sim", flag, s, min, max, out);
}

static int parse_double(const char *flag, const char *s, double min, double max, double *out)
{
    return sb_flag_double("sim", flag, s, min, max, out);
}

/* Splits a comma-separated list into a NULL-terminated array of fresh strings (empty items
 * skipped). Returns the count, or -1 on ENOMEM. */
static long split_list(const char *s, char ***out)
{
    long n = 0;
    char **v = NULL;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len) {
            char **nv = sb_realloc(v, (size_t)(n + 2) * sizeof(*v));
            if (!nv || !(nv[n] = sb_strndup(s, len))) {
                v = nv ? nv : v;
                for (long i = 0; i < n; i++)
                    sb_free(v[i]);
                sb_free(v);
                return -1;
            }
            v = nv;
            v[++n] = NULL;
        }
        s += len + (e ? 1 : 0);
    }
    *out = v;
    return n;
}

static void free_list(char **v, long n)
{
    for (long i = 0; i < n; i++)
        sb_free(v[i]);
    sb_free(v);
}

static int parse_replica_mask(const char *s, uint64_t *mask)
{
    char **items = NULL;
    long n = split_list(s, &items);
    if (n <= 0) {
        fprintf(stderr, "switchboard sim: --fault-replicas wants indexes like 0,2\n");
        free_list(items, n > 0 ? n : 0);
        return -1;
    }
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        uint32_t idx;
        if ((rc = parse_u32("fault-replicas", items[i], 0, 63, &idx)) == 0)
            *mask |= 1ULL << idx;
    }
    free_list(items, n);
    return rc;
}

static int parse_log_level(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            sb_log_set_level((enum sb_log_level)i);
            return 0;
        }
    fprintf(stderr, "switchboard sim: --log-level wants debug, info, warn or error\n");
    return -1;
}

/* ---- KV-cache event flags -------------------------------------------------------------------- */

/* Strings decoded from --kv-events-config, owned until the fleet has copied them. */
typedef struct kv_strings {
    char *endpoint, *replay, *topic;
} kv_strings;

static void kv_strings_free(kv_strings *k)
{
    sb_free(k->endpoint);
    sb_free(k->replay);
    sb_free(k->topic);
}

/* Decodes JSON string token v into a fresh string in *out (NULL for null). */
static int json_string(const char *b, const sb_json_tok *t, char **out)
{
    if (t->type == SB_JSON_PRIMITIVE && b[t->start] == 'n')
        return 0;
    size_t n = (size_t)(t->end - t->start);
    char *s = t->type == SB_JSON_STRING ? sb_malloc(n + 1) : NULL;
    long r = s ? sb_json_unescape(b + t->start, n, s, n + 1) : -1;
    if (r < 0 || memchr(s, '\0', (size_t)r)) {
        sb_free(s);
        return -1;
    }
    s[r] = '\0';
    sb_free(*out);
    *out = s;
    return 0;
}

static int json_u32(const char *b, const sb_json_tok *t, uint32_t min, uint32_t *out)
{
    char num[16];
    size_t n = (size_t)(t->end - t->start);
    if (t->type != SB_JSON_PRIMITIVE || n == 0 || n >= sizeof num)
        return -1;
    memcpy(num, b + t->start, n);
    num[n] = '\0';
    return sb_flag_u32("sim", "kv-events-config", num, min, INT32_MAX, out);
}

/* vLLM's --kv-events-config (vllm/config/kv_events.py KVEventsConfig): its keys, and nothing
 * else, so that a misspelt key is an error rather than a silently ignored setting. */
static int parse_kv_config(const char *json, sb_sim_opts *o, kv_strings *ks)
{
    static const sb_json_key keys[] = {
        {"enable_kv_cache_events", 22}, {"publisher", 9}, {"endpoint", 8},        {"replay_endpoint", 15},
        {"buffer_steps", 12},           {"hwm", 3},       {"max_queue_size", 14}, {"topic", 5},
    };
    enum { K_ENABLE, K_PUBLISHER, K_ENDPOINT, K_REPLAY, K_BUFFER, K_HWM, K_QUEUE, K_TOPIC, K_N };
    sb_json j = {0};
    int n = sb_json_parse(&j, json, strlen(json)), v[K_N], rc = -1;
    const sb_json_tok *t = j.tokens;
    if (n <= 0 || t[0].type != SB_JSON_OBJECT)
        goto out;
    sb_json_find_keys(t, n, json, 0, keys, K_N, v);
    int known = 0;
    for (int k = 0; k < K_N; k++)
        known += v[k] >= 0;
    if (known != t[0].size)
        goto out; /* an unknown (or repeated) key */
    bool enable = v[K_ENABLE] >= 0 && json[t[v[K_ENABLE]].start] == 't';
    char *publisher = NULL;
    if (v[K_PUBLISHER] >= 0 && json_string(json, &t[v[K_PUBLISHER]], &publisher) < 0)
        goto out;
    if (publisher && strcmp(publisher, "zmq") != 0)
        enable = false; /* "null": vLLM's NullEventPublisher */
    sb_free(publisher);
    if ((v[K_ENDPOINT] >= 0 && json_string(json, &t[v[K_ENDPOINT]], &ks->endpoint) < 0) ||
        (v[K_REPLAY] >= 0 && json_string(json, &t[v[K_REPLAY]], &ks->replay) < 0) ||
        (v[K_TOPIC] >= 0 && json_string(json, &t[v[K_TOPIC]], &ks->topic) < 0) ||
        (v[K_BUFFER] >= 0 && json_u32(json, &t[v[K_BUFFER]], 1, &o->kv.buffer_steps) < 0) ||
        (v[K_HWM] >= 0 && json_u32(json, &t[v[K_HWM]], 1, &o->kv.hwm) < 0))
        goto out;
    o->kv_events = enable;
    if (ks->endpoint)
        o->kv.endpoint = ks->endpoint;
    o->kv.replay_endpoint = ks->replay;
    if (ks->topic)
        o->kv.topic = ks->topic;
    rc = 0;
out:
    sb_json_free(&j);
    if (rc < 0)
        fprintf(stderr, "switchboard sim: --kv-events-config wants vLLM's JSON object, e.g. "
                        "'{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\"}'\n");
    return rc;
}

static int parse_kv_flag(int c, const char *a, sb_sim_opts *o, kv_strings *ks)
{
    sb_kv_pub_opts *kv = &o->kv;
    o->kv_events = true;
    switch (c) {
    case O_KV_CONFIG: return parse_kv_config(a, o, ks);
    case O_KV_ON: return 0;
    case O_KV_ENDPOINT: kv->endpoint = a; return 0;
    case O_KV_REPLAY: kv->replay_endpoint = a; return 0;
    case O_KV_TOPIC: kv->topic = a; return 0;
    case O_KV_ENCODING:
        if (!strcmp(a, "array") || !strcmp(a, "map")) {
            kv->encoding = a[0] == 'm' ? SB_KV_ENC_MAP : SB_KV_ENC_ARRAY;
            return 0;
        }
        fprintf(stderr, "switchboard sim: --kv-events-encoding wants array or map\n");
        return -1;
    case O_KV_HASHES:
        if (!strcmp(a, "int") || !strcmp(a, "bytes")) {
            kv->hashes = a[0] == 'b' ? SB_KV_HASH_BYTES : SB_KV_HASH_INT;
            return 0;
        }
        fprintf(stderr, "switchboard sim: --kv-events-hashes wants int or bytes\n");
        return -1;
    case O_KV_BUFFER_STEPS: return parse_u32("kv-events-buffer-steps", a, 1, 10000000, &kv->buffer_steps);
    case O_KV_DROP_EVERY: return parse_u32("kv-events-drop-every", a, 1, UINT32_MAX, &kv->drop_every);
    }
    return -1;
}

static bool is_kv_flag(int c)
{
    return c >= O_KV_CONFIG && c <= O_KV_DROP_EVERY;
}

/* What the engine parameters imply, measured by driving the engine in virtual time, beside
 * the published reference points for Llama-3.1-8B on one H100 (docs/simulator.md). */
static int print_calibration(const sb_engine_params *ep)
{
    sb_engine_calibration cal;
    if (sb_engine_calibrate(ep, &cal) < 0) {
        fprintf(stderr, "switchboard sim: calibration failed\n");
        return 1;
    }
    printf("engine: a=%.3f ms, b=%.2f us/prefill token, c=%.2f us/decode token, e=%.3f us/context token;\n"
           "        max_num_seqs %u, max_num_batched_tokens %u, %u blocks of %u tokens\n\n",
           ep->step_overhead_ns / 1e6, ep->prefill_token_ns / 1e3, ep->decode_token_ns / 1e3,
           ep->context_token_ns / 1e3, ep->max_num_seqs, ep->max_num_batched_tokens, ep->num_gpu_blocks,
           ep->block_size);
    printf("%-44s %14s   %s\n", "measure", "simulated", "reference (Llama-3.1-8B, 1x H100)");
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof(name), "TTFT, %u-token prompt, idle", cal.ttft_prompt_tokens[i]);
        if (cal.ttft_ns[i])
            printf("%-44s %11.1f ms   %s\n", name, cal.ttft_ns[i] / 1e6, "-");
        else
            printf("%-44s %14s   %s\n", name, "(too long)", "-");
    }
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof(name), "inter-token latency, batch %u, %u-token ctx", cal.itl_batch[i],
                 cal.itl_context_tokens);
        printf("%-44s %11.2f ms   %s\n", name, cal.itl_ns[i] / 1e6, "roughly 5-13 ms");
    }
    printf("%-44s %10.0f tok/s  %s\n", "prefill throughput", cal.prefill_tokens_per_s,
           "tens of thousands of tokens/s");
    printf("%-44s %10.0f tok/s  %s\n", "decode throughput, largest batch", cal.decode_tokens_per_s_256, "-");
    return 0;
}

/* What the command line asks for; the strings it owns are freed by args_free. */
typedef struct sim_args {
    sb_sim_opts o;
    char **adapters;
    long n_adapters;
    kv_strings kvs;
    bool calibrate, help;
    uint32_t drain_ms;
} sim_args;

static void args_free(sim_args *a)
{
    free_list(a->adapters, a->n_adapters);
    kv_strings_free(&a->kvs);
}

/* One option. Returns 0 or -1 (the message is printed). */
static int parse_option(int c, const char *a, sim_args *s)
{
    sb_sim_opts *o = &s->o;
    sb_sim_faults *fa = &o->faults;
    uint32_t u;
    int rc = 0;
    switch (c) {
    case O_REPLICAS: return parse_u32("replicas", a, 1, 4096, &o->replicas);
    case O_CALIBRATE: s->calibrate = true; return 0;
    case O_PORT:
        if ((rc = parse_u32("port", a, 0, 65535, &u)) == 0)
            o->port = (uint16_t)u;
        return rc;
    case O_HOST: o->host = a; return 0;
    case O_MODEL: o->model = a; return 0;
    case O_ADAPTERS:
        free_list(s->adapters, s->n_adapters);
        s->adapters = NULL;
        if ((s->n_adapters = split_list(a, &s->adapters)) < 0) {
            s->n_adapters = 0;
            return -1;
        }
        return 0;
    case O_ENGINE:
        if (sb_sim_flavor_parse(a, &o->flavor) == 0)
            return 0;
        fprintf(stderr, "switchboard sim: --engine wants vllm, sglang or llamacpp\n");
        return -1;
    case O_SPEED: return parse_double("speed", a, 1e-3, 1e6, &o->speed);
    case O_MAX_MODEL_LEN: return parse_u32("max-model-len", a, 1, UINT32_MAX, &o->max_model_len);
    case O_FAIL_RATE: return parse_double("fail-rate", a, 0, 1, &fa->fail_rate);
    case O_METRICS_DELAY: return parse_u32("metrics-delay-ms", a, 0, 3600000, &fa->metrics_delay_ms);
    case O_METRICS_HANG: fa->metrics_hang = true; return 0;
    case O_DIE_AFTER: return parse_u32("die-after-tokens", a, 1, UINT32_MAX, &fa->die_after_tokens);
    case O_REFUSE: fa->refuse = true; return 0;
    case O_RESTART: return parse_u32("restart-every-ms", a, 10, 86400000, &fa->restart_every_ms);
    case O_FAULT_REPLICAS: return parse_replica_mask(a, &fa->replica_mask);
    case O_SEED:
        if ((rc = parse_u32("seed", a, 0, UINT32_MAX, &u)) == 0)
            o->seed = u;
        return rc;
    case O_LOG_LEVEL: return parse_log_level(a);
    case O_DRAIN_MS: return parse_u32("drain-ms", a, 0, 3600000, &s->drain_ms);
    case 'h':
    case O_HELP: s->help = true; return 0;
    default:
        if (is_kv_flag(c))
            return parse_kv_flag(c, a, o, &s->kvs);
        return sb_is_engine_flag(c) ? sb_engine_flag("sim", c, a, &o->engine) : -1;
    }
}

/* Returns 0, or -1 after printing why. */
static int parse_args(int argc, char **argv, sim_args *s)
{
    int rc = 0, c;
    optind = 1;
    while (rc == 0 && !s->help && (c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1)
        rc = parse_option(c, optarg, s);
    if (rc == 0 && !s->help && optind < argc) {
        fprintf(stderr, "switchboard sim: unexpected argument '%s'\n", argv[optind]);
        rc = -1;
    }
    s->o.adapters = (const char *const *)s->adapters;
    s->o.n_adapters = (size_t)s->n_adapters;
    if (rc == 0 && !s->help && sb_engine_params_check(&s->o.engine) < 0) {
        fprintf(stderr, "switchboard sim: engine parameters rejected (a zero size, a block size over 4096, or "
                        "--max-num-seqs above --max-num-batched-tokens)\n");
        rc = -1;
    }
    return rc;
}

static void print_banner(const sb_sim_opts *o, const sb_sim_fleet *f)
{
    const sb_sim_faults *fa = &o->faults;
    printf("switchboard sim: %u replica(s) of %s (%s engine, speed %g)\n", o->replicas, o->model,
           sb_sim_flavor_name(o->flavor), o->speed);
    for (uint32_t i = 0; i < o->replicas; i++) {
        bool faulty = fa->replica_mask == 0 || (i < 64 && (fa->replica_mask >> i & 1));
        printf("  replica %u: http://%s:%u%s\n", i, o->host, sb_sim_fleet_port(f, i),
               faulty && fa->refuse ? " (refusing connections)" : "");
        const char *kv = sb_sim_fleet_kv_endpoint(f, i), *replay = sb_sim_fleet_kv_replay(f, i);
        if (kv)
            printf("    kv-events %s%s%s\n", kv, replay ? " replay " : "", replay ? replay : "");
    }
    fflush(stdout);
}

int sb_cmd_sim(int argc, char **argv)
{
    sim_args s = {.drain_ms = 30000};
    sb_sim_opts_default(&s.o);
    if (parse_args(argc, argv, &s) < 0) {
        fputs(usage_text, stderr);
        args_free(&s);
        return 2;
    }
    if (s.help || s.calibrate) {
        int rc = s.help ? 0 : print_calibration(&s.o.engine);
        if (s.help)
            fputs(usage_text, stdout);
        args_free(&s);
        return rc;
    }

    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    sim_state st = {0};
    int rc = sb_sim_fleet_start(loop, &s.o, &st.fleet);
    uint32_t drain_ms = s.drain_ms;
    args_free(&s); /* the fleet has its copies */
    if (rc < 0) {
        fprintf(stderr, "switchboard sim: cannot start: %s\n",
                rc == -EINVAL ? "invalid options (model, adapters, ports, speed or kv-events endpoints)"
                              : uv_strerror(rc));
        uv_run(loop, UV_RUN_DEFAULT); /* let the closing handles go */
        uv_loop_close(loop);
        return 1;
    }
    /* Handlers before the banner: whoever reads the banner may signal at once. */
    uv_signal_init(loop, &st.sigint);
    uv_signal_init(loop, &st.sigterm);
    uv_signal_init(loop, &st.sigquit);
    uv_timer_init(loop, &st.drain_timer);
    st.sigint.data = st.sigterm.data = st.sigquit.data = st.drain_timer.data = &st;
    st.drain_ms = drain_ms;
    uv_signal_start(&st.sigint, on_stop_signal, SIGINT);
    uv_signal_start(&st.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&st.sigquit, on_stop_signal, SIGQUIT);
    print_banner(&s.o, st.fleet);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
