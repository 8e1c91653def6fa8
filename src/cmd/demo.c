/* switchboard demo: the embedded default. A simulated fleet (three replicas of a Llama model
 * with two LoRA adapters, one replica of a Qwen model) and a gateway in front of it, in one
 * process on one loop, on loopback. Prints what to try; Ctrl-C stops everything. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "net/gateway.h"
#include "sim/server.h"

typedef struct demo {
    sb_gateway *gw;
    sb_sim_fleet *llama, *qwen;
    uv_signal_t sigint, sigterm;
} demo;

static void on_signal(uv_signal_t *h, int signum)
{
    demo *d = h->data;
    fprintf(stderr, "\nstopping (signal %d)\n", signum);
    if (d->gw)
        sb_gateway_stop(d->gw);
    if (d->llama)
        sb_sim_fleet_stop(d->llama);
    if (d->qwen)
        sb_sim_fleet_stop(d->qwen);
    d->gw = NULL;
    d->llama = d->qwen = NULL;
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
}

static int usage(void)
{
    fprintf(stderr, "usage: switchboard demo [--port P] [--admin-port P] [--sim-port P] [--speed X] [--access-log]\n"
                    "  --port P       gateway port (default 8080)\n"
                    "  --admin-port P admin port: /metrics, /debug/* (default 8081)\n"
                    "  --sim-port P   first simulated replica's port (default 8101; uses P..P+3)\n"
                    "  --speed X      simulated engine clock speed (default 1: real time)\n"
                    "  --access-log   print one JSON line per request\n");
    return 2;
}

int sb_cmd_demo(int argc, char **argv)
{
    unsigned port = 8080, admin_port = 8081, sim_port = 8101;
    double speed = 1.0;
    bool access_log = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--admin-port") && i + 1 < argc)
            admin_port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sim-port") && i + 1 < argc)
            sim_port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--speed") && i + 1 < argc)
            speed = atof(argv[++i]);
        else if (!strcmp(argv[i], "--access-log"))
            access_log = true;
        else
            return usage();
    }
    if (port == 0 || port > 65535 || admin_port == 0 || admin_port > 65535 || admin_port == port || sim_port == 0 ||
        sim_port > 65532 || speed <= 0)
        return usage();
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    demo d = {0};

    static const char *const adapters[] = {"sql-lora", "chat-lora"};
    sb_sim_opts so;
    sb_sim_opts_default(&so);
    so.port = (uint16_t)sim_port;
    so.replicas = 3;
    so.model = "meta-llama/Llama-3.1-8B-Instruct";
    so.adapters = adapters;
    so.n_adapters = 2;
    so.speed = speed;
    int rc = sb_sim_fleet_start(loop, &so, &d.llama);
    if (rc == 0) {
        sb_sim_opts_default(&so);
        so.port = (uint16_t)(sim_port + 3);
        so.replicas = 1;
        so.model = "Qwen/Qwen2.5-7B-Instruct";
        so.speed = speed;
        rc = sb_sim_fleet_start(loop, &so, &d.qwen);
    }
    if (rc < 0) {
        fprintf(stderr, "demo: cannot start the simulated fleet on ports %u-%u: %s\n", sim_port, sim_port + 3,
                uv_strerror(rc));
        return 1;
    }

    /* The same shape as examples/demo.yaml, with the chosen ports. */
    sb_buf y = {0};
    sb_buf_printf(&y,
                  "listen: \"127.0.0.1:%u\"\n%s"
                  "admin: { listen: \"127.0.0.1:%u\" }\n"
                  "pools:\n"
                  "  - name: llama\n"
                  "    models: [\"meta-llama/Llama-3.1-8B-Instruct\", \"llama-3.1-8b\"]\n"
                  "    adapters: [\"sql-lora\", \"chat-lora\"]\n"
                  "    engine: vllm\n"
                  "    endpoints: [\"127.0.0.1:%u\", \"127.0.0.1:%u\", \"127.0.0.1:%u\"]\n"
                  "  - name: qwen\n"
                  "    models: [\"Qwen/Qwen2.5-7B-Instruct\", \"qwen-7b\"]\n"
                  "    engine: vllm\n"
                  "    endpoints: [\"127.0.0.1:%u\"]\n",
                  port, access_log ? "access_log: \"-\"\n" : "", admin_port, sim_port, sim_port + 1, sim_port + 2,
                  sim_port + 3);
    sb_config *cfg = NULL;
    sb_config_errors errs = {0};
    if (!y.data || sb_config_parse(y.data, y.len, &cfg, &errs) < 0) {
        char buf[4096];
        sb_config_errors_format(&errs, "demo", buf, sizeof(buf));
        fprintf(stderr, "demo: internal config error:\n%s", buf);
        sb_buf_free(&y);
        return 1;
    }
    sb_buf_free(&y);
    if (sb_gateway_start(loop, cfg, &d.gw) < 0) {
        fprintf(stderr, "demo: cannot start the gateway on port %u\n", port);
        sb_sim_fleet_stop(d.llama);
        sb_sim_fleet_stop(d.qwen);
        uv_run(loop, UV_RUN_DEFAULT);
        return 1;
    }
    printf("switchboard demo\n"
           "  gateway    http://127.0.0.1:%u  (pools: llama x3 replicas with LoRA sql-lora, chat-lora; qwen x1)\n"
           "  admin      http://127.0.0.1:%u  (/metrics, /debug/*; loopback only)\n"
           "  replicas   http://127.0.0.1:%u-%u  (simulated vLLM, Llama-3.1-8B on H100 timing, speed %gx)\n\n"
           "Try:\n"
           "  curl -s localhost:%u/v1/models\n"
           "  curl -sN localhost:%u/v1/chat/completions -H 'Content-Type: application/json' \\\n"
           "    -d '{\"model\":\"llama-3.1-8b\",\"stream\":true,\"max_tokens\":20,"
           "\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n"
           "  curl -s localhost:%u/v1/completions -H 'Content-Type: application/json' \\\n"
           "    -d '{\"model\":\"sql-lora\",\"prompt\":\"SELECT\",\"max_tokens\":8}'\n"
           "  curl -s localhost:%u/debug/endpoints      # what the gateway knows of each replica\n"
           "  curl -s localhost:%u/metrics              # Prometheus metrics\n\n"
           "Ctrl-C stops everything.\n",
           port, sb_gateway_admin_port(d.gw), sim_port, sim_port + 3, speed, port, port, port,
           sb_gateway_admin_port(d.gw), sb_gateway_admin_port(d.gw));
    fflush(stdout);
    uv_signal_init(loop, &d.sigint);
    uv_signal_init(loop, &d.sigterm);
    d.sigint.data = d.sigterm.data = &d;
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
