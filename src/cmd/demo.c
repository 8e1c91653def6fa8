/* switchboard demo: the embedded default. A simulated fleet (three replicas of a Llama model
 * with two LoRA adapters, one replica of a Qwen model) and a gateway in front of it, in one
 * process on one loop, on loopback. The Llama replicas publish their KV-cache events as vLLM
 * does and the gateway's llama pool subscribes (kv_events), so its precise index and the
 * fusion with its own marks are on show in /debug/endpoints and the decisions. Prints what to
 * try; Ctrl-C stops everything. SIGTERM drains as `serve` does: the gateway first (its requests
 * and streams finish, up to shutdown.drain_ms), then the simulated fleet, which by then has no
 * request of the gateway's left in flight. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "net/gateway.h"
#include "net/guard.h"
#include "net/sigwatch.h"
#include "sim/server.h"

typedef struct demo {
    sb_gateway *gw;
    sb_sim_fleet *llama, *qwen;
    sb_sigwatch signals;
    bool draining;
} demo;

static const int demo_signals[] = {SIGINT, SIGTERM, SIGQUIT};

static void stop_all(demo *d)
{
    if (d->gw)
        sb_gateway_stop(d->gw);
    if (d->llama)
        sb_sim_fleet_stop(d->llama);
    if (d->qwen)
        sb_sim_fleet_stop(d->qwen);
    d->gw = NULL;
    d->llama = d->qwen = NULL;
    sb_sigwatch_close(&d->signals);
}

static void on_drained(void *arg)
{
    stop_all(arg);
}

static void on_signal(void *arg, int signum)
{
    demo *d = arg;
    if (signum == SIGTERM && !d->draining && d->gw) {
        fprintf(stderr, "\ndraining (signal %d; again, or Ctrl-C, to stop at once)\n", signum);
        d->draining = true;
        sb_gateway_drain(d->gw, on_drained, d);
        return;
    }
    fprintf(stderr, "\nstopping (signal %d)\n", signum);
    stop_all(d);
}

static int usage(void)
{
    fprintf(stderr, "usage: switchboard demo [--port P] [--admin-port P] [--sim-port P] [--kv-port P] [--speed X]\n"
                    "                        [--access-log] [--fleet-only | --print-config]\n"
                    "  --port P       gateway port (default 8080)\n"
                    "  --admin-port P admin port: the dashboard (/), /metrics, /debug/* (default 8081)\n"
                    "  --sim-port P   first simulated replica's port (default 8101; uses P..P+3)\n"
                    "  --kv-port P    first Llama replica's KV-event publisher (default sim port + 1000,\n"
                    "                 or - 1000 near the top of the range; uses P..P+2)\n"
                    "  --speed X      simulated engine clock speed (default 1: real time)\n"
                    "  --access-log   print one JSON line per request\n"
                    "  --fleet-only   run the simulated fleet alone (a gateway runs from a config file:\n"
                    "                 the packaged switchboard-demo-fleet service does this)\n"
                    "  --print-config print the gateway's YAML for these ports and exit\n");
    return 2;
}

typedef struct demo_args {
    unsigned port, admin_port, sim_port, kv_port; /* kv_port 0: sim_port + 1000 */
    double speed;
    bool access_log;
    bool fleet_only, print_config;
} demo_args;

/* Returns 0, or usage()'s exit code for flags it does not know or values out of range. */
static int parse_args(int argc, char **argv, demo_args *a)
{
    *a = (demo_args){.port = 8080, .admin_port = 8081, .sim_port = 8101, .speed = 1.0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            a->port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--admin-port") && i + 1 < argc)
            a->admin_port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sim-port") && i + 1 < argc)
            a->sim_port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-port") && i + 1 < argc)
            a->kv_port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--speed") && i + 1 < argc)
            a->speed = atof(argv[++i]);
        else if (!strcmp(argv[i], "--access-log"))
            a->access_log = true;
        else if (!strcmp(argv[i], "--fleet-only"))
            a->fleet_only = true;
        else if (!strcmp(argv[i], "--print-config"))
            a->print_config = true;
        else
            return usage();
    }
    if (a->port == 0 || a->port > 65535 || a->admin_port == 0 || a->admin_port > 65535 || a->admin_port == a->port ||
        a->sim_port == 0 || a->sim_port > 65532 || a->speed <= 0 || (a->fleet_only && a->print_config))
        return usage();
    if (a->kv_port == 0)
        a->kv_port = a->sim_port + 1002 <= 65535 ? a->sim_port + 1000 : a->sim_port - 1000;
    /* The publishers' ports (kv_port..+2) must not meet the replicas' HTTP ports nor the
     * gateway's two. */
    bool meets = a->kv_port + 2 >= a->sim_port && a->kv_port <= a->sim_port + 3;
    meets = meets || (a->port >= a->kv_port && a->port <= a->kv_port + 2);
    meets = meets || (a->admin_port >= a->kv_port && a->admin_port <= a->kv_port + 2);
    if (a->kv_port == 0 || a->kv_port > 65533 || meets) {
        fprintf(stderr, "demo: the KV-event ports %u-%u are out of range or meet another port\n", a->kv_port,
                a->kv_port + 2);
        return usage();
    }
    return 0;
}

/* Three Llama replicas with two adapters from sim_port, one Qwen replica after them. */
static int start_fleets(uv_loop_t *loop, const demo_args *a, demo *d)
{
    static const char *const adapters[] = {"sql-lora", "chat-lora"};
    sb_sim_opts so;
    sb_sim_opts_default(&so);
    so.port = (uint16_t)a->sim_port;
    so.replicas = 3;
    so.model = "meta-llama/Llama-3.1-8B-Instruct";
    so.adapters = adapters;
    so.n_adapters = 2;
    so.speed = a->speed;
    char kv_endpoint[64];
    snprintf(kv_endpoint, sizeof kv_endpoint, "tcp://127.0.0.1:%u", a->kv_port);
    so.kv_events = true;
    so.kv.endpoint = kv_endpoint; /* replica i publishes on kv_port + i, as vLLM's ranks */
    so.kv.bind = true;            /* on loopback only (vLLM would connect to this address) */
    int rc = sb_sim_fleet_start(loop, &so, &d->llama);
    if (rc == 0) {
        sb_sim_opts_default(&so);
        so.port = (uint16_t)(a->sim_port + 3);
        so.replicas = 1;
        so.model = "Qwen/Qwen2.5-7B-Instruct";
        so.speed = a->speed;
        rc = sb_sim_fleet_start(loop, &so, &d->qwen);
    }
    if (rc < 0)
        fprintf(stderr, "demo: cannot start the simulated fleet on ports %u-%u: %s\n", a->sim_port, a->sim_port + 3,
                uv_strerror(rc));
    return rc;
}

/* The demo gateway's configuration as YAML, with the chosen ports: examples/demo.yaml is this
 * with the default ports (tests/integration/test_install.py compares them), and the package
 * installs it as /etc/switchboard/switchboard.yaml. */
static int demo_yaml(const demo_args *a, sb_buf *y)
{
    return sb_buf_printf(y,
                         "listen: \"127.0.0.1:%u\"\n%s"
                         "admin: { listen: \"127.0.0.1:%u\" }\n"
                         "pools:\n"
                         "  - name: llama\n"
                         "    models: [\"meta-llama/Llama-3.1-8B-Instruct\", \"llama-3.1-8b\"]\n"
                         "    adapters: [\"sql-lora\", \"chat-lora\"]\n"
                         "    engine: vllm\n"
                         "    endpoints: [\"127.0.0.1:%u\", \"127.0.0.1:%u\", \"127.0.0.1:%u\"]\n"
                         "    kv_events: { endpoint: \"tcp://{host}:{port%+d}\" }\n"
                         "  - name: qwen\n"
                         "    models: [\"Qwen/Qwen2.5-7B-Instruct\", \"qwen-7b\"]\n"
                         "    engine: vllm\n"
                         "    endpoints: [\"127.0.0.1:%u\"]\n",
                         a->port, a->access_log ? "access_log: \"-\"\n" : "", a->admin_port, a->sim_port,
                         a->sim_port + 1, a->sim_port + 2, (int)a->kv_port - (int)a->sim_port, a->sim_port + 3);
}

/* demo_yaml parsed. NULL (after saying why) if it does not parse. */
static sb_config *demo_config(const demo_args *a)
{
    sb_buf y = {0};
    demo_yaml(a, &y);
    sb_config *cfg = NULL;
    sb_config_errors errs = {0};
    if (!y.data || sb_config_parse(y.data, y.len, &cfg, &errs) < 0) {
        char buf[4096];
        sb_config_errors_format(&errs, "demo", buf, sizeof(buf));
        fprintf(stderr, "demo: internal config error:\n%s", buf);
        cfg = NULL;
    }
    sb_buf_free(&y);
    return cfg;
}

static void print_banner(const demo_args *a, unsigned admin_port)
{
    unsigned port = a->port;
    printf("switchboard demo\n"
           "  gateway    http://127.0.0.1:%u  (pools: llama x3 replicas with LoRA sql-lora, chat-lora; qwen x1)\n"
           "  admin      http://127.0.0.1:%u  (dashboard at /, /metrics, /debug/*; loopback only)\n"
           "  replicas   http://127.0.0.1:%u-%u  (simulated vLLM, Llama-3.1-8B on H100 timing, speed %gx)\n"
           "  kv events  tcp://127.0.0.1:%u-%u  (the Llama replicas' KV-cache events; the llama pool subscribes)\n\n"
           "Try:\n"
           "  curl -s localhost:%u/v1/models\n"
           "  curl -sN localhost:%u/v1/chat/completions -H 'Content-Type: application/json' \\\n"
           "    -d '{\"model\":\"llama-3.1-8b\",\"stream\":true,\"max_tokens\":20,"
           "\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n"
           "  curl -s localhost:%u/v1/completions -H 'Content-Type: application/json' \\\n"
           "    -d '{\"model\":\"sql-lora\",\"prompt\":\"SELECT\",\"max_tokens\":8}'\n"
           "  curl -s localhost:%u/debug/endpoints      # each replica's load, and what its cache reports\n"
           "  curl -s localhost:%u/debug/decisions      # recent picks with every score and its source\n"
           "  curl -s localhost:%u/metrics              # Prometheus metrics\n\n"
           "Ctrl-C stops everything.\n",
           port, admin_port, a->sim_port, a->sim_port + 3, a->speed, a->kv_port, a->kv_port + 2, port, port, port,
           admin_port, admin_port, admin_port);
    fflush(stdout);
}

int sb_cmd_demo(int argc, char **argv)
{
    demo_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc;
    if (a.print_config) {
        sb_buf y = {0};
        if (demo_yaml(&a, &y) < 0 || fwrite(y.data, 1, y.len, stdout) != y.len || fflush(stdout) != 0) {
            sb_buf_free(&y);
            return 1;
        }
        sb_buf_free(&y);
        return 0;
    }
    /* Before any thread starts (they inherit the mask): see net/sigwatch.h. */
    if (sb_sigwatch_block(demo_signals, 3) < 0) {
        fprintf(stderr, "demo: cannot block the stop signals\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    demo d = {.signals.fd = -1};
    if (start_fleets(loop, &a, &d) < 0)
        return 1;
    sb_config *cfg = a.fleet_only ? NULL : demo_config(&a);
    if (a.fleet_only) {
        printf("switchboard demo fleet: simulated replicas on 127.0.0.1:%u-%u, KV events on %u-%u\n", a.sim_port,
               a.sim_port + 3, a.kv_port, a.kv_port + 2);
        fflush(stdout);
    } else if (!cfg) {
        return 1;
    } else if (sb_cmd_gateway_start(loop, cfg, &d.gw) < 0) {
        fprintf(stderr, "demo: cannot start the gateway on port %u\n", a.port);
        sb_guard_enter();
        sb_sim_fleet_stop(d.llama);
        sb_sim_fleet_stop(d.qwen);
        sb_guard_leave();
        sb_cmd_run(loop);
        return 1;
    }
    if (d.gw)
        print_banner(&a, sb_gateway_admin_port(d.gw));
    /* The workers run already: the main loop's objects are touched under the lock (net/guard.h). */
    sb_guard_enter();
    int src = sb_sigwatch_start(&d.signals, loop, demo_signals, 3, on_signal, &d);
    if (src < 0) {
        fprintf(stderr, "demo: cannot watch signals: %s\n", uv_strerror(src));
        stop_all(&d);
    }
    sb_guard_leave();
    sb_cmd_run(loop);
    uv_loop_close(loop);
    return 0;
}
