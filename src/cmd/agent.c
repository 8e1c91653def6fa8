/* agent: `switchboard agent`, a small process beside one model server (llama.cpp first, vLLM
 * and SGLang too) that tells one or more gateways what the server serves and how busy it is,
 * as Paddler's agents do for its balancer.
 *
 * Every --poll-ms it reads the server's state: llama.cpp's GET /slots (slots total and idle,
 * running) then its /metrics (queue, KV use) when it has them, or GET /metrics for vLLM and
 * SGLang (queue, running, KV use; proto/engine_metrics.h),
 * and GET /v1/models on start and every 30 polls (the served models). It pushes a report to
 * each gateway at once when the state changed, and every --interval-ms regardless (the
 * heartbeat): POST /admin/endpoints (registration: address, model, engine, ttl_ms, so a
 * gateway that does not list the server learns it), then POST /admin/agents/report
 * (proto/agent_report.h). Neither answer stops it: a gateway that does not take
 * registrations (404, 405) still takes reports for the endpoints it lists statically, and a
 * report for an endpoint it does not know (404) is logged once and retried at the next beat.
 *
 * Never blocks: every request is asynchronous on one libuv loop (net/http_get.h) with a
 * timeout and a bounded answer; a poll or push still running when the next is due is not
 * doubled. A gateway that cannot be reached is tried again after a backoff that doubles from
 * the interval up to 30 s, and at once when it answers again.
 *
 * SIGTERM or SIGINT: a last poll and a last report to every gateway (backoff ignored), then
 * exit 0 once they are answered or timed out. No DELETE of the registration: an agent also
 * runs beside statically configured endpoints, which it must not remove; a registration it
 * made expires by its TTL (5 x interval by default), and the gateway drains it then. A second
 * signal exits at once. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "cmd/flags.h"
#include "net/http_get.h"
#include "net/upstream.h"
#include "proto/agent_report.h"
#include "proto/engine_metrics.h"

#define MAX_GATEWAYS 8
/* Bounds of what the server may answer: a busy vLLM's /metrics is ~100 KiB, a llama.cpp
 * /slots ~3 KiB a slot, /v1/models a few KiB. */
#define MAX_METRICS_BYTES (4u << 20)
#define MAX_SLOTS_BYTES (1u << 20)
#define MAX_MODELS_BYTES (256u << 10)
#define MAX_GATEWAY_ANSWER (64u << 10)
/* JSON tokens for /slots and /v1/models: 20 bytes each, 64K tokens. */
#define SCRATCH_BYTES ((size_t)20 << 16)
#define MAX_BACKOFF_MS 30000u
#define MODELS_EVERY_POLLS 30u

enum engine { ENGINE_AUTO, ENGINE_LLAMACPP, ENGINE_VLLM, ENGINE_SGLANG };
static const char *const engine_names[] = {"auto", "llama.cpp", "vllm", "sglang"};

typedef struct agent agent;

typedef struct gateway {
    agent *a;
    char url[256];
    sb_upstream *up;
    sb_http_get *req; /* the request in flight, NULL when idle */
    int step;         /* 0: registration in flight, 1: report in flight */
    uint32_t backoff_ms;
    uint64_t retry_at_ms; /* no push before this (loop time) */
    bool warned_register, warned_report;
    uint64_t pushes, failures;
} gateway;

struct agent {
    uv_loop_t *loop;
    /* options */
    char server_host[200];
    uint16_t server_port;
    char address[SB_AGENT_ADDRESS_MAX];
    char id[SB_AGENT_ID_MAX];
    char auth[600]; /* "Authorization: Bearer ...\r\n" or "" */
    enum engine engine;
    uint32_t interval_ms, poll_ms, timeout_ms, ttl_ms;
    gateway gw[MAX_GATEWAYS];
    size_t n_gw;
    /* the server */
    sb_upstream *server;
    sb_http_get *poll_req;
    int poll_step; /* 0: models, 1: state */
    uint32_t polls;
    bool models_known;
    bool llama_metrics_off; /* llama.cpp without --metrics: /slots alone */
    sb_engine_map map;
    void *scratch;
    /* what to report */
    sb_agent_report cur;    /* the state read last */
    sb_agent_report pushed; /* the state last pushed (to compare) */
    bool have_state, have_pushed;
    uint64_t seq;
    uint64_t last_push_ms;
    sb_buf report_body, register_body;
    /* timers and signals */
    uv_timer_t poll_timer;
    uv_signal_t sigterm, sigint;
    bool handles_init; /* the timer and signals exist (close_all closes them) */
    bool stopping, final_pushed;
};

static const struct option long_options[] = {
    {"server", required_argument, NULL, 's'},
    {"engine", required_argument, NULL, 'e'},
    {"gateway", required_argument, NULL, 'g'},
    {"token", required_argument, NULL, 't'},
    {"token-file", required_argument, NULL, 'T'},
    {"interval-ms", required_argument, NULL, 'i'},
    {"poll-ms", required_argument, NULL, 'p'},
    {"timeout-ms", required_argument, NULL, 'o'},
    {"ttl-ms", required_argument, NULL, 'l'},
    {"address", required_argument, NULL, 'a'},
    {"id", required_argument, NULL, 'n'},
    {"log-level", required_argument, NULL, 'L'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: switchboard agent --server URL --gateway URL [options]\n"
            "Runs beside one model server and reports its models and load to gateways (POST\n"
            "/admin/endpoints, then /admin/agents/report, on their admin listeners).\n\n"
            "  --server URL        the model server, http://HOST:PORT\n"
            "  --engine E          llama.cpp | vllm | sglang | auto (default auto: /slots if it\n"
            "                      answers, else /metrics, named by its metric prefix)\n"
            "  --gateway URL       a gateway's admin listener, http://HOST:PORT (repeatable, up to %d)\n"
            "  --token T           the gateways' admin token (--token-file F reads it from F)\n"
            "  --interval-ms N     heartbeat: a report at least this often (default 1000)\n"
            "  --poll-ms N         how often the server is read; a change is pushed at once\n"
            "                      (default min(250, interval))\n"
            "  --timeout-ms N      each request's deadline (default 1000)\n"
            "  --ttl-ms N          registration TTL asked of the gateway (default 5 x interval)\n"
            "  --address HOST:PORT the server's address as the gateways know it (default: from --server)\n"
            "  --id ID             this agent's name in reports (default agent-<address>)\n"
            "  --log-level L       debug | info | warn | error\n",
            MAX_GATEWAYS);
}

/* "http://HOST:PORT[/]" (HOST may be [v6]) into host and port: 0, or -1. */
static int parse_url(const char *url, char *host, size_t cap, uint16_t *port)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *end;
    size_t hl;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end || end[1] != ':')
            return -1;
        h++;
        hl = (size_t)(end - h);
        end++;
    } else {
        end = strrchr(h, ':');
        if (!end)
            return -1;
        hl = (size_t)(end - h);
    }
    if (hl == 0 || hl >= cap)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    char *rest;
    unsigned long p = strtoul(end + 1, &rest, 10);
    if (p == 0 || p > 65535 || (*rest && strcmp(rest, "/") != 0))
        return -1;
    *port = (uint16_t)p;
    return 0;
}

static uint64_t now_ms(agent *a)
{
    return uv_now(a->loop);
}

/* ---- pushing to the gateways ---- */

static void push_step(gateway *g);

static void gateway_failed(gateway *g, const char *what, int status)
{
    g->failures++;
    g->backoff_ms = g->backoff_ms ? g->backoff_ms * 2 : g->a->interval_ms;
    if (g->backoff_ms > MAX_BACKOFF_MS)
        g->backoff_ms = MAX_BACKOFF_MS;
    g->retry_at_ms = now_ms(g->a) + g->backoff_ms;
    SB_WARN("agent: gateway %s: %s failed (%s); next try in %u ms", g->url, what,
            status < 0 ? uv_strerror(status) : "bad status", g->backoff_ms);
}

static void on_push_done(void *ud, int status, const char *body, size_t len)
{
    gateway *g = ud;
    g->req = NULL;
    if (status < 0) {
        gateway_failed(g, g->step == 0 ? "registration" : "report", status);
        return;
    }
    g->backoff_ms = 0;
    g->retry_at_ms = 0;
    if (g->step == 0) {
        /* A gateway without the registration API (404, 405), or one that refuses this
         * registration (409: a static endpoint of another pool), still takes reports. */
        if ((status < 200 || status >= 300) && !g->warned_register) {
            g->warned_register = true;
            SB_WARN("agent: gateway %s: registration answered %d (%.*s); reporting anyway", g->url, status,
                    (int)(len > 200 ? 200 : len), body);
        }
        g->step = 1;
        push_step(g);
        return;
    }
    g->pushes++;
    if (status == 200) {
        g->warned_report = false;
    } else if (!g->warned_report) {
        g->warned_report = true;
        SB_WARN("agent: gateway %s: report answered %d (%.*s)", g->url, status, (int)(len > 200 ? 200 : len), body);
    }
}

static void push_step(gateway *g)
{
    agent *a = g->a;
    const sb_buf *body = g->step == 0 ? &a->register_body : &a->report_body;
    sb_http_request req = {.method = "POST",
                           .path = g->step == 0 ? "/admin/endpoints" : "/admin/agents/report",
                           .headers = a->auth[0] ? a->auth : NULL,
                           .accept = "application/json",
                           .body = body->data,
                           .body_len = body->len,
                           .timeout_ms = a->timeout_ms,
                           .deadline_from_start = true,
                           .max_body = MAX_GATEWAY_ANSWER};
    int rc = sb_http_request_start(g->up, &req, on_push_done, g, &g->req);
    if (rc < 0) {
        g->req = NULL;
        gateway_failed(g, "request", rc);
    }
}

/* Renders the bodies once for every gateway, then starts a push where none is in flight and
 * no backoff holds (force: the last report, backoff ignored). */
static void push_all(agent *a, bool force)
{
    if (!a->have_state)
        return;
    a->seq++;
    a->cur.seq = a->seq;
    a->cur.have_seq = true;
    a->cur.interval_ms = a->interval_ms;
    a->report_body.len = 0;
    a->register_body.len = 0;
    int rc = sb_agent_report_render(&a->cur, &a->report_body);
    /* The registration names the first served model (the gateway picks the pool serving it). */
    rc |= sb_buf_puts(&a->register_body, "{\"address\":\"");
    rc |= sb_buf_json_escape(&a->register_body, a->address, strlen(a->address));
    rc |= sb_buf_puts(&a->register_body, "\"");
    if (a->cur.n_models) {
        rc |= sb_buf_puts(&a->register_body, ",\"model\":\"");
        rc |= sb_buf_json_escape(&a->register_body, a->cur.models[0], strlen(a->cur.models[0]));
        rc |= sb_buf_puts(&a->register_body, "\"");
    }
    if (a->cur.engine[0])
        rc |= sb_buf_printf(&a->register_body, ",\"engine\":\"%s\"", a->cur.engine);
    rc |= sb_buf_printf(&a->register_body, ",\"ttl_ms\":%u}", a->ttl_ms);
    if (rc < 0) {
        SB_ERROR("agent: out of memory building a report");
        return;
    }
    a->pushed = a->cur;
    a->have_pushed = true;
    a->last_push_ms = now_ms(a);
    for (size_t i = 0; i < a->n_gw; i++) {
        gateway *g = &a->gw[i];
        if (g->req || (!force && g->retry_at_ms && now_ms(a) < g->retry_at_ms))
            continue;
        g->step = 0;
        push_step(g);
    }
}

/* A change worth pushing at once: slots, queue or running moved, or the models changed. KV
 * use alone waits for the heartbeat (it moves with every token). */
static bool changed(const sb_agent_report *x, const sb_agent_report *y)
{
    if (x->have_slots != y->have_slots || x->slots_total != y->slots_total || x->slots_idle != y->slots_idle ||
        x->have_queue != y->have_queue || x->queue != y->queue || x->have_running != y->have_running ||
        x->running != y->running || x->n_models != y->n_models || strcmp(x->engine, y->engine) != 0)
        return true;
    for (uint32_t i = 0; i < x->n_models; i++)
        if (strcmp(x->models[i], y->models[i]) != 0)
            return true;
    return false;
}

/* ---- polling the server ---- */

static void poll_start(agent *a);
static void stop_now(agent *a);

static void poll_finished(agent *a)
{
    if (a->stopping) {
        if (!a->final_pushed) {
            a->final_pushed = true;
            push_all(a, true);
        }
        stop_now(a);
        return;
    }
    if (a->have_state &&
        (!a->have_pushed || changed(&a->cur, &a->pushed) || now_ms(a) - a->last_push_ms >= a->interval_ms))
        push_all(a, false);
}

/* Copies the load figures of an engine report into the report to push (those present). */
static void take_load(sb_agent_report *r, const sb_engine_report *er)
{
    if (er->have_running && er->running >= 0 && er->running <= SB_AGENT_MAX_COUNT) {
        r->have_running = true;
        r->running = (uint32_t)er->running;
    }
    if (er->have_waiting && er->waiting >= 0 && er->waiting <= SB_AGENT_MAX_COUNT) {
        r->have_queue = true;
        r->queue = (uint32_t)er->waiting;
    }
    if (er->have_kv && er->kv_usage >= 0 && er->kv_usage <= 1) {
        r->have_kv = true;
        r->kv_usage = er->kv_usage;
    }
}

/* The state from llama.cpp's /slots (slots) or an engine's /metrics, replacing the last one;
 * false when the body could not be read. */
static bool read_state(agent *a, const char *body, size_t len, bool slots)
{
    sb_engine_report er;
    sb_engine_report_init(&er);
    sb_agent_report *r = &a->cur;
    r->have_slots = r->have_queue = r->have_running = r->have_kv = false;
    if (slots) {
        if (sb_engine_slots_parse(body, len, a->scratch, SCRATCH_BYTES, &er) != 0 || !er.have_slots)
            return false;
        r->have_slots = true;
        r->slots_total = er.slots_total > SB_AGENT_MAX_COUNT ? SB_AGENT_MAX_COUNT : er.slots_total;
        uint32_t busy = er.slots_busy > r->slots_total ? r->slots_total : er.slots_busy;
        r->slots_idle = r->slots_total - busy;
    } else {
        sb_engine_metrics_parse(&a->map, body, len, &er);
        if (er.n_samples == 0)
            return false;
    }
    take_load(r, &er);
    return true;
}

/* auto: which engine a /metrics body comes from, by its metric prefix. */
static enum engine sniff_metrics(const char *body, size_t len)
{
    if (memmem(body, len, "vllm:", 5))
        return ENGINE_VLLM;
    if (memmem(body, len, "sglang:", 7))
        return ENGINE_SGLANG;
    if (memmem(body, len, "llamacpp:", 9))
        return ENGINE_LLAMACPP;
    return ENGINE_AUTO;
}

static void set_engine(agent *a, enum engine e)
{
    a->engine = e;
    snprintf(a->cur.engine, sizeof a->cur.engine, "%s", engine_names[e]);
    sb_engine_map_init(&a->map,
                       e == ENGINE_SGLANG     ? SB_ENGINE_SGLANG
                       : e == ENGINE_LLAMACPP ? SB_ENGINE_LLAMACPP
                                              : SB_ENGINE_VLLM,
                       NULL);
}

static const char *state_path(const agent *a, bool *slots)
{
    /* auto tries /slots first: only llama.cpp answers it with an array of slots. */
    *slots = a->engine == ENGINE_LLAMACPP || a->engine == ENGINE_AUTO;
    return *slots ? "/slots" : "/metrics";
}

static void poll_get(agent *a, const char *path, size_t max_body);

/* A poll is a chain of GETs on the server, one at a time: 0 /v1/models (at start and every
 * MODELS_EVERY_POLLS), 1 the state (/slots or /metrics), 2 /metrics to name the engine when
 * auto found no /slots, 3 llama.cpp's /metrics after its /slots (the queue and KV use /slots
 * does not give; skipped for good once the server shows it has none: run without --metrics). */
static void on_poll_done(void *ud, int status, const char *body, size_t len)
{
    agent *a = ud;
    a->poll_req = NULL;
    bool slots;
    const char *path;
    switch (a->poll_step) {
    case 0:
        if (status == 200 && sb_agent_models_parse(body, len, a->scratch, SCRATCH_BYTES, &a->cur) >= 0)
            a->models_known = true;
        else
            SB_WARN("agent: %s:%u/v1/models: %s", a->server_host, a->server_port,
                    status < 0 ? uv_strerror(status) : "not an OpenAI model list");
        a->poll_step = 1;
        path = state_path(a, &slots);
        poll_get(a, path, slots ? MAX_SLOTS_BYTES : MAX_METRICS_BYTES);
        return;
    case 1:
        state_path(a, &slots);
        if (status == 200 && read_state(a, body, len, slots)) {
            if (a->engine == ENGINE_AUTO)
                set_engine(a, ENGINE_LLAMACPP);
            a->have_state = a->models_known;
            if (slots && !a->llama_metrics_off) {
                a->poll_step = 3;
                poll_get(a, "/metrics", MAX_METRICS_BYTES);
                return;
            }
        } else if (a->engine == ENGINE_AUTO && slots) {
            a->poll_step = 2;
            poll_get(a, "/metrics", MAX_METRICS_BYTES);
            return;
        } else {
            SB_WARN("agent: %s:%u: state not read (%s)", a->server_host, a->server_port,
                    status < 0      ? uv_strerror(status)
                    : status == 200 ? "unreadable answer"
                                    : "bad status");
            /* The server is not answering: say nothing rather than something stale. The
             * gateway distrusts the last report once it is older than three beats. */
            a->have_state = false;
        }
        break;
    case 2: {
        enum engine e = status == 200 ? sniff_metrics(body, len) : ENGINE_AUTO;
        if (e != ENGINE_AUTO) {
            set_engine(a, e);
            a->have_state = read_state(a, body, len, false) && a->models_known;
        } else {
            SB_WARN("agent: %s:%u: neither /slots nor a known engine's /metrics", a->server_host, a->server_port);
            a->have_state = false;
        }
        break;
    }
    case 3: {
        sb_engine_report er;
        sb_engine_report_init(&er);
        if (status == 200)
            sb_engine_metrics_parse(&a->map, body, len, &er);
        if (status == 200 && er.n_samples > 0) {
            take_load(&a->cur, &er);
        } else if (status >= 400 || (status == 200 && er.n_samples == 0)) {
            a->llama_metrics_off = true;
            SB_INFO("agent: %s:%u has no llama.cpp /metrics (run without --metrics): reporting slots alone",
                    a->server_host, a->server_port);
        }
        break;
    }
    }
    poll_finished(a);
}

static void poll_get(agent *a, const char *path, size_t max_body)
{
    sb_http_request req = {.path = path,
                           .accept = "application/json, text/plain",
                           .timeout_ms = a->timeout_ms,
                           .deadline_from_start = true,
                           .max_body = max_body};
    int rc = sb_http_request_start(a->server, &req, on_poll_done, a, &a->poll_req);
    if (rc < 0) {
        a->poll_req = NULL;
        SB_WARN("agent: cannot poll %s:%u: %s", a->server_host, a->server_port, uv_strerror(rc));
        a->have_state = false;
        poll_finished(a);
    }
}

static void poll_start(agent *a)
{
    if (a->poll_req)
        return; /* the last poll is still running: never doubled */
    bool need_models = !a->models_known || a->polls % MODELS_EVERY_POLLS == 0;
    a->polls++;
    a->poll_step = need_models ? 0 : 1;
    bool slots;
    const char *state = state_path(a, &slots);
    poll_get(a, need_models ? "/v1/models" : state,
             need_models ? MAX_MODELS_BYTES
             : slots     ? MAX_SLOTS_BYTES
                         : MAX_METRICS_BYTES);
}

static void on_poll_timer(uv_timer_t *t)
{
    poll_start(t->data);
}

/* ---- stopping ---- */

static bool pushes_pending(const agent *a)
{
    for (size_t i = 0; i < a->n_gw; i++)
        if (a->gw[i].req)
            return true;
    return false;
}

static void close_all(agent *a)
{
    if (a->poll_req)
        sb_http_get_cancel(a->poll_req);
    a->poll_req = NULL;
    for (size_t i = 0; i < a->n_gw; i++) {
        if (a->gw[i].req)
            sb_http_get_cancel(a->gw[i].req);
        a->gw[i].req = NULL;
        if (a->gw[i].up)
            sb_upstream_free(a->gw[i].up);
        a->gw[i].up = NULL;
    }
    if (a->server)
        sb_upstream_free(a->server);
    a->server = NULL;
    if (!a->handles_init)
        return;
    if (!uv_is_closing((uv_handle_t *)&a->poll_timer))
        uv_close((uv_handle_t *)&a->poll_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->sigterm))
        uv_close((uv_handle_t *)&a->sigterm, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->sigint))
        uv_close((uv_handle_t *)&a->sigint, NULL);
}

/* Runs on the poll timer once stopping: closes everything when the last pushes are answered
 * (or timed out: each has its deadline). */
static void on_stop_check(uv_timer_t *t)
{
    agent *a = t->data;
    if (!pushes_pending(a))
        close_all(a);
}

static void stop_now(agent *a)
{
    uv_timer_stop(&a->poll_timer);
    if (!pushes_pending(a)) {
        close_all(a);
        return;
    }
    uv_timer_start(&a->poll_timer, on_stop_check, 10, 10);
}

static void on_signal(uv_signal_t *h, int signum)
{
    agent *a = h->data;
    if (a->stopping) {
        SB_INFO("agent: signal %d again, exiting at once", signum);
        close_all(a);
        return;
    }
    SB_INFO("agent: signal %d: a last report, then exit", signum);
    a->stopping = true;
    uv_timer_stop(&a->poll_timer);
    if (a->poll_req)
        return; /* its end pushes the last report */
    /* Read the state once more so the last report is current; the poll's end pushes it. */
    a->poll_step = 1;
    bool slots;
    const char *path = state_path(a, &slots);
    poll_get(a, path, slots ? MAX_SLOTS_BYTES : MAX_METRICS_BYTES);
}

/* ---- the command ---- */

static int read_token_file(const char *path, char *out, size_t cap)
{
    size_t len;
    char *text = sb_read_file(path, &len);
    if (!text)
        return -1;
    size_t s = 0, e = len;
    while (s < e && (text[s] == ' ' || text[s] == '\t' || text[s] == '\n' || text[s] == '\r'))
        s++;
    while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n' || text[e - 1] == '\r'))
        e--;
    int rc = e - s < cap ? 0 : -1;
    if (rc == 0) {
        memcpy(out, text + s, e - s);
        out[e - s] = '\0';
    }
    memset(text, 0, len);
    free(text);
    return rc;
}

static int parse_args(agent *a, int argc, char **argv)
{
    char token[512] = "";
    const char *server = NULL;
    bool poll_set = false, ttl_set = false;
    a->interval_ms = 1000;
    a->timeout_ms = 1000;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        switch (opt) {
        case 's': server = optarg; break;
        case 'e':
            if (!strcmp(optarg, "llama.cpp") || !strcmp(optarg, "llamacpp"))
                a->engine = ENGINE_LLAMACPP;
            else if (!strcmp(optarg, "vllm"))
                a->engine = ENGINE_VLLM;
            else if (!strcmp(optarg, "sglang"))
                a->engine = ENGINE_SGLANG;
            else if (!strcmp(optarg, "auto"))
                a->engine = ENGINE_AUTO;
            else {
                fprintf(stderr, "switchboard agent: --engine wants llama.cpp, vllm, sglang or auto, got '%s'\n",
                        optarg);
                return -1;
            }
            break;
        case 'g': {
            if (a->n_gw == MAX_GATEWAYS) {
                fprintf(stderr, "switchboard agent: at most %d --gateway\n", MAX_GATEWAYS);
                return -1;
            }
            gateway *g = &a->gw[a->n_gw++];
            g->a = a;
            snprintf(g->url, sizeof g->url, "%s", optarg);
            break;
        }
        case 't':
            if (strlen(optarg) >= sizeof token) {
                fprintf(stderr, "switchboard agent: --token is too long\n");
                return -1;
            }
            snprintf(token, sizeof token, "%s", optarg);
            break;
        case 'T':
            if (read_token_file(optarg, token, sizeof token) < 0) {
                fprintf(stderr, "switchboard agent: cannot read a token from %s\n", optarg);
                return -1;
            }
            break;
        case 'i':
            if (sb_flag_u32("agent", "--interval-ms", optarg, 50, 3600000, &a->interval_ms) < 0)
                return -1;
            break;
        case 'p':
            if (sb_flag_u32("agent", "--poll-ms", optarg, 10, 3600000, &a->poll_ms) < 0)
                return -1;
            poll_set = true;
            break;
        case 'o':
            if (sb_flag_u32("agent", "--timeout-ms", optarg, 10, 600000, &a->timeout_ms) < 0)
                return -1;
            break;
        case 'l':
            if (sb_flag_u32("agent", "--ttl-ms", optarg, 100, UINT32_MAX, &a->ttl_ms) < 0)
                return -1;
            ttl_set = true;
            break;
        case 'a':
            if (strlen(optarg) >= sizeof a->address) {
                fprintf(stderr, "switchboard agent: --address is too long\n");
                return -1;
            }
            snprintf(a->address, sizeof a->address, "%s", optarg);
            break;
        case 'n':
            if (strlen(optarg) >= sizeof a->id) {
                fprintf(stderr, "switchboard agent: --id is at most %d bytes\n", SB_AGENT_ID_MAX - 1);
                return -1;
            }
            snprintf(a->id, sizeof a->id, "%s", optarg);
            break;
        case 'L': {
            static const char *const levels[] = {"debug", "info", "warn", "error"};
            int l = 0;
            while (l < 4 && strcmp(optarg, levels[l]) != 0)
                l++;
            if (l == 4) {
                fprintf(stderr, "switchboard agent: --log-level wants debug, info, warn or error\n");
                return -1;
            }
            sb_log_set_level((enum sb_log_level)l);
            break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (!server || !a->n_gw) {
        fprintf(stderr, "switchboard agent: --server and at least one --gateway are required\n");
        usage(stderr);
        return -1;
    }
    if (parse_url(server, a->server_host, sizeof a->server_host, &a->server_port) < 0) {
        fprintf(stderr, "switchboard agent: --server wants http://HOST:PORT, got '%s'\n", server);
        return -1;
    }
    if (!a->address[0]) {
        bool v6 = strchr(a->server_host, ':') != NULL;
        snprintf(a->address, sizeof a->address, v6 ? "[%s]:%u" : "%s:%u", a->server_host, a->server_port);
    }
    if (!a->id[0])
        snprintf(a->id, sizeof a->id, "agent-%.50s", a->address);
    if (!poll_set)
        a->poll_ms = a->interval_ms < 250 ? a->interval_ms : 250;
    if (!ttl_set)
        a->ttl_ms = a->interval_ms * 5 < a->interval_ms ? UINT32_MAX : a->interval_ms * 5;
    if (token[0])
        snprintf(a->auth, sizeof a->auth, "Authorization: Bearer %s\r\n", token);
    memset(token, 0, sizeof token);
    return 0;
}

int sb_cmd_agent(int argc, char **argv)
{
    agent *a = sb_calloc(1, sizeof(*a));
    if (!a)
        return 1;
    int rc = 1;
    if (parse_args(a, argc, argv) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN);
    a->loop = uv_default_loop();
    a->scratch = sb_malloc(SCRATCH_BYTES);
    if (!a->scratch)
        goto out;
    snprintf(a->cur.address, sizeof a->cur.address, "%s", a->address);
    snprintf(a->cur.agent, sizeof a->cur.agent, "%s", a->id);
    if (a->engine != ENGINE_AUTO)
        set_engine(a, a->engine);
    /* Names are resolved once, here, before the loop runs (net/upstream.h). */
    sb_upstream_opts so = {.connect_ms = a->timeout_ms, .idle_ms = 60000, .max_idle = 1};
    int e = sb_upstream_new(a->loop, a->server_host, a->server_port, &so, &a->server);
    if (e < 0) {
        fprintf(stderr, "switchboard agent: --server %s:%u: %s\n", a->server_host, a->server_port, uv_strerror(e));
        goto out;
    }
    for (size_t i = 0; i < a->n_gw; i++) {
        char host[200];
        uint16_t port;
        if (parse_url(a->gw[i].url, host, sizeof host, &port) < 0) {
            fprintf(stderr, "switchboard agent: --gateway wants http://HOST:PORT, got '%s'\n", a->gw[i].url);
            goto out;
        }
        if ((e = sb_upstream_new(a->loop, host, port, &so, &a->gw[i].up)) < 0) {
            fprintf(stderr, "switchboard agent: --gateway %s: %s\n", a->gw[i].url, uv_strerror(e));
            goto out;
        }
    }
    uv_timer_init(a->loop, &a->poll_timer);
    a->poll_timer.data = a;
    uv_signal_init(a->loop, &a->sigterm);
    uv_signal_init(a->loop, &a->sigint);
    a->sigterm.data = a->sigint.data = a;
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    a->handles_init = true;
    uv_timer_start(&a->poll_timer, on_poll_timer, 0, a->poll_ms);
    printf("switchboard agent: server %s (%s), %zu gateway(s), every %u ms\n", a->address, engine_names[a->engine],
           a->n_gw, a->interval_ms);
    fflush(stdout);
    uv_run(a->loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    if (a->loop) {
        close_all(a);
        uv_run(a->loop, UV_RUN_DEFAULT);
        uv_loop_close(a->loop);
    }
    sb_buf_free(&a->report_body);
    sb_buf_free(&a->register_body);
    sb_free(a->scratch);
    memset(a->auth, 0, sizeof a->auth);
    sb_free(a);
    return rc;
}
