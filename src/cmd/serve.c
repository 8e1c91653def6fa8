#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "base/log.h"
#include "cmd/cmd.h"
#include "net/gateway.h"
#include "net/guard.h"
#include "net/iobatch.h"
#include "net/sigwatch.h"
#include "net/workers.h"

/* Signals: SIGTERM drains (what orchestrators send before they kill: Kubernetes, systemd,
 * docker stop); a second SIGTERM, SIGINT (Ctrl-C: someone at a terminal wants it gone now) or
 * SIGQUIT stops at once. SIGHUP reloads, except while draining. */
typedef struct serve_state {
    sb_gateway *gw;
    const char *path;
    bool draining;
    sb_sigwatch signals;
} serve_state;

static const int serve_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};

/* SIGHUP: read the file again; a bad file is refused and the running config stays. */
static void on_reload_signal(serve_state *st)
{
    if (!st->gw)
        return;
    if (st->draining) {
        SB_WARN("reload: ignored while draining");
        sb_gateway_reload_refused(st->gw);
        return;
    }
    sb_config *cfg = sb_load_config(st->path);
    if (!cfg) {
        SB_WARN("reload: %s has errors; keeping the running configuration", st->path);
        sb_gateway_reload_refused(st->gw);
        return;
    }
    sb_gateway_reload(&st->gw, cfg);
}

static void close_signals(serve_state *st)
{
    sb_sigwatch_close(&st->signals);
}

static void stop_now(serve_state *st)
{
    if (st->gw) {
        sb_gateway_stop(st->gw);
        st->gw = NULL;
        close_signals(st);
    }
}

static void on_drained(void *arg)
{
    stop_now(arg);
}

static void on_signal(void *arg, int signum)
{
    serve_state *st = arg;
    if (signum == SIGHUP) {
        on_reload_signal(st);
        return;
    }
    if (signum == SIGTERM && !st->draining && st->gw) {
        SB_INFO("signal %d: draining (again, or SIGINT/SIGQUIT, to stop at once)", signum);
        st->draining = true;
        sb_gateway_drain(st->gw, on_drained, st);
        return;
    }
    SB_INFO("signal %d: stopping", signum);
    stop_now(st);
}

/* The CPU quota of the process's cgroup, in cores rounded up (cgroup v2 cpu.max, else v1's
 * cfs_quota_us / cfs_period_us), or 0 when there is none: a container limited to 2 CPUs on a
 * 64-core node runs 2 workers, not 64 (libuv counts the cores the affinity mask allows). */
static long cgroup_cores(void)
{
    long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char q[32] = "";
        if (fscanf(f, "%31s %ld", q, &period) == 2 && strcmp(q, "max") != 0)
            quota = strtol(q, NULL, 10);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r")) != NULL) {
        if (fscanf(f, "%ld", &quota) != 1)
            quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r")) != NULL) {
            if (fscanf(f, "%ld", &period) != 1)
                period = 0;
            fclose(f);
        }
    }
    return quota > 0 && period > 0 ? (quota + period - 1) / period : 0;
}

/* `workers: auto` (or none given): SWITCHBOARD_WORKERS when set (a test harness pins it), else
 * the cores this process may run on, within its cgroup's CPU quota. Capped as the configuration
 * caps an explicit count. */
static size_t resolve_workers(const sb_config *cfg)
{
    if (cfg->workers)
        return cfg->workers;
    const char *env = getenv("SWITCHBOARD_WORKERS");
    long n = (long)uv_available_parallelism();
    long quota = cgroup_cores();
    if (quota > 0 && quota < n)
        n = quota;
    if (env && *env)
        n = strtol(env, NULL, 10);
    return n < 1 ? 1 : n > 64 ? 64 : (size_t)n;
}

/* Descriptors: a connection read through the batcher holds two (net/iobatch.h), and a shell's
 * soft limit is often 1024. The soft limit goes up to the hard one (systemd's unit sets 65536),
 * as HAProxy raises its own to fit maxconn. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            SB_WARN("cannot raise the open files limit to %llu: %s", (unsigned long long)rl.rlim_max, strerror(errno));
    }
}

int sb_cmd_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **gw)
{
    raise_fd_limit();
    cfg->workers = resolve_workers(cfg);
    /* Each loop batches its socket writes and reads (the workers' loops open theirs as they start). */
    sb_iob_set_enabled(!cfg->io_uring_off);
    int irc = cfg->io_uring_off ? 0 : sb_iob_open(loop);
    if (irc < 0)
        SB_WARN("io_uring unavailable (%s): socket writes and reads go one system call each", strerror(-irc));
    if (cfg->workers > 1 && cfg->listen_host && !sb_guard_on() && sb_guard_start(loop) < 0) {
        SB_ERROR("workers: cannot set up the main loop's mailbox; serving on one loop");
        cfg->workers = 1;
    }
    /* Held while the gateway starts: a worker's first request waits until it is whole. */
    sb_guard_enter();
    int rc = sb_gateway_start(loop, cfg, gw);
    sb_guard_leave();
    if (rc == 0 && sb_guard_on())
        SB_INFO("%zu workers serve the client listener (workers:)", sb_gateway_config(*gw)->workers);
    return rc;
}

void sb_cmd_run(uv_loop_t *loop)
{
    sb_guard_run_main(loop);
    if (!sb_guard_on()) {
        sb_iob_close(loop); /* its handles close in the loop's last run */
        uv_run(loop, UV_RUN_DEFAULT);
        return;
    }
    sb_workers_join();
    sb_iob_close(loop); /* after the workers: none of them can queue on it any more */
    /* What the workers left for the main loop as they ended (closes of its handles). */
    sb_guard_mailbox_close(loop);
    uv_run(loop, UV_RUN_DEFAULT);
}

int sb_cmd_serve(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))
            sb_log_set_level(SB_LOG_DEBUG);
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet"))
            sb_log_set_level(SB_LOG_WARN);
        else {
            fprintf(stderr, "usage: switchboard serve -c FILE [-v|-q]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: switchboard serve -c FILE [-v|-q]\n");
        return 2;
    }
    /* Before any thread starts (they inherit the mask): see net/sigwatch.h. */
    if (sb_sigwatch_block(serve_signals, 4) < 0) {
        fprintf(stderr, "switchboard: cannot block the stop signals\n");
        return 1;
    }
    sb_config *cfg = sb_load_config(path);
    if (!cfg)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    serve_state st = {.path = path};
    /* Signals first: once the port accepts connections, a SIGHUP must reload, not kill. */
    int src = sb_sigwatch_start(&st.signals, loop, serve_signals, 4, on_signal, &st);
    if (src < 0) {
        SB_ERROR("cannot watch signals: %s", uv_strerror(src));
        return 1;
    }
    int rc = sb_cmd_gateway_start(loop, cfg, &st.gw);
    if (rc < 0) {
        close_signals(&st);
        sb_cmd_run(loop);
        return 1;
    }
    if (sb_gateway_port(st.gw))
        SB_INFO("switchboard listening on http://%s:%u", sb_gateway_config(st.gw)->listen_host, sb_gateway_port(st.gw));
    else
        SB_INFO("HTTP proxy listener off (listen: null): endpoint picker only");
    if (sb_gateway_admin_port(st.gw))
        SB_INFO("admin (/metrics, /debug/*) on http://%s:%u%s", sb_gateway_config(st.gw)->admin_host,
                sb_gateway_admin_port(st.gw),
                sb_gateway_config(st.gw)->admin_has_token ? " (bearer token required)" : "");
    else
        SB_INFO("admin listener off (admin.listen: null)");
    if (sb_gateway_extproc_port(st.gw))
        SB_INFO("endpoint picker (Envoy ext_proc, gRPC%s) on %s:%u",
                sb_gateway_config(st.gw)->extproc_tls_cert ? " over TLS" : ", h2c",
                sb_gateway_config(st.gw)->extproc_host, sb_gateway_extproc_port(st.gw));
    const sb_config *c0 = sb_gateway_config(st.gw);
    if (c0->extproc_host && !c0->extproc_has_token && !sb_config_host_is_loopback(c0->extproc_host))
        SB_WARN("ext_proc.listen %s is reachable from other hosts and ext_proc.token is not set: anyone who reaches "
                "it can ask for picks and report responses; set a token (Envoy's grpc_service.initial_metadata) or "
                "restrict the port",
                c0->extproc_host);
    if (sb_gateway_config(st.gw)->auth_enabled)
        SB_INFO("client authentication on: %zu API keys", sb_auth_keys_clients(&sb_gateway_config(st.gw)->api_keys));
    sb_cmd_run(loop);
    uv_loop_close(loop);
    return 0;
}
