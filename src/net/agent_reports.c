/* agent_reports: agents' reports applied to the endpoints (the header has the contract). */
#include "net/agent_reports.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "net/admission.h"
#include "proto/agent_report.h"
#include "proto/openai_error.h"

enum { REFUSED_BAD_BODY, REFUSED_UNKNOWN_ADDRESS, REFUSED_TOO_LARGE, N_REFUSED };
static const char *const refused_names[N_REFUSED] = {"bad_body", "unknown_address", "too_large"};

/* When a report gives no interval: the agent's default (--interval-ms 1000). */
#define DEFAULT_INTERVAL_MS 1000u
/* Reports older than this many of the agent's intervals are stale (three missed beats). */
#define STALE_INTERVALS 3u

static void answer_error(sb_http_req *req, int status, const char *message, const char *code)
{
    sb_buf b = {0};
    if (sb_openai_error(&b, message, "invalid_request_error", NULL, code) < 0) {
        sb_buf_free(&b);
        sb_http_stream_abort(req);
        return;
    }
    sb_http_respond(req, status, "application/json", NULL, b.data, b.len);
    sb_buf_free(&b);
}

bool sb_gateway_agent_report_too_long(sb_http_req *req)
{
    const sb_http_header *h = sb_http_req_header(req, "content-length");
    if (!h || h->value_len > 19)
        return h != NULL; /* a length of 20 digits is too long whatever it says */
    char tmp[20];
    memcpy(tmp, h->value, h->value_len);
    tmp[h->value_len] = '\0';
    if (strtoull(tmp, NULL, 10) <= SB_AGENT_REPORT_MAX_BODY)
        return false;
    answer_error(req, 413, "an agent report is at most 64 KiB", "body_too_large");
    return true;
}

static void apply(sb_endpoint *ep, const sb_agent_report *r, sb_ns now)
{
    sb_endpoint_report rep = {.requests_total = -1};
    rep.have_waiting = r->have_queue;
    rep.waiting = r->queue;
    rep.have_running = r->have_running;
    rep.running = r->running;
    rep.have_kv = r->have_kv;
    rep.kv_usage = r->kv_usage;
    sb_endpoint_report_merge(ep, &rep, SB_REPORT_AGENT, now);
    uint32_t interval = r->interval_ms ? r->interval_ms : DEFAULT_INTERVAL_MS;
    if (r->have_slots)
        sb_endpoint_slots_set(ep, r->slots_total, r->slots_idle, (sb_ns)interval * STALE_INTERVALS * SB_NS_PER_MS, now);
    sb_endpoint_agent *a = &ep->agent;
    snprintf(a->id, sizeof a->id, "%s", r->agent);
    a->at = now;
    a->seq = r->seq;
    a->interval_ms = interval;
    a->reports++;
}

void sb_gateway_agent_report(sb_gateway *gw, sb_http_req *req)
{
    if (req->body_len > SB_AGENT_REPORT_MAX_BODY) {
        gw->agent_refused[REFUSED_TOO_LARGE]++;
        answer_error(req, 413, "an agent report is at most 64 KiB", "body_too_large");
        return;
    }
    /* About 12 KiB of tokens and the report: on the heap for the call (one report a second
     * per agent), not on the loop's stack nor in a static that a second loop would share. */
    struct work {
        sb_agent_report r;
        _Alignas(int) char scratch[SB_AGENT_SCRATCH_BYTES];
    } *w = sb_malloc(sizeof *w);
    if (!w) {
        answer_error(req, 500, "out of memory", NULL);
        return;
    }
    const sb_agent_report *rp = &w->r;
    char err[200], msg[300];
    if (sb_agent_report_parse(req->body, req->body_len, w->scratch, sizeof w->scratch, &w->r, err, sizeof err) < 0) {
        gw->agent_refused[REFUSED_BAD_BODY]++;
        snprintf(msg, sizeof msg, "bad agent report: %s", err);
        answer_error(req, 400, msg, "bad_agent_report");
        sb_free(w);
        return;
    }
    sb_ns now = uv_hrtime();
    size_t matched = 0;
    for (size_t p = 0; p < sb_router_pool_count(gw->router); p++) {
        size_t before = matched;
        for (size_t e = 0; e < sb_router_endpoint_count(gw->router, (uint32_t)p); e++) {
            sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
            if (ep && ep->address && !strcmp(ep->address, rp->address)) {
                apply(ep, rp, now);
                matched++;
            }
        }
        if (matched > before)
            sb_gateway_admission_done(gw, (uint32_t)p);
    }
    if (!matched) {
        gw->agent_refused[REFUSED_UNKNOWN_ADDRESS]++;
        snprintf(msg, sizeof msg, "no endpoint has address %.*s: register it with POST /admin/endpoints", 100,
                 rp->address);
        sb_free(w);
        answer_error(req, 404, msg, "unknown_endpoint");
        return;
    }
    sb_free(w);
    char body[48];
    int n = snprintf(body, sizeof body, "{\"matched\":%zu}", matched);
    sb_http_respond(req, 200, "application/json", NULL, body, (size_t)n);
}

void sb_gateway_agent_render(const sb_endpoint *ep, sb_ns now, sb_buf *b)
{
    const sb_endpoint_agent *a = &ep->agent;
    if (a->at) {
        sb_buf_puts(b, ",\"agent\":{\"id\":");
        sb_buf_puts(b, "\"");
        sb_buf_json_escape(b, a->id, strlen(a->id));
        sb_buf_printf(b, "\",\"age_ms\":%.1f,\"seq\":%llu,\"reports\":%llu,\"interval_ms\":%u}",
                      now > a->at ? (double)(now - a->at) / 1e6 : 0.0, (unsigned long long)a->seq,
                      (unsigned long long)a->reports, a->interval_ms);
    }
    const sb_endpoint_slots *s = &ep->slots;
    if (s->at)
        sb_buf_printf(b,
                      ",\"slots\":{\"total\":%u,\"idle_reported\":%u,\"idle\":%u,\"sent_since\":%u,"
                      "\"freed_since\":%u,\"age_ms\":%.1f,\"stale\":%s}",
                      s->total, s->idle, sb_endpoint_slots_idle(ep), s->sent_since, s->freed_since,
                      now > s->at ? (double)(now - s->at) / 1e6 : 0.0,
                      sb_endpoint_slots_fresh(ep, now) ? "false" : "true");
}

void sb_gateway_agent_metrics(sb_gateway *gw, sb_buf *b)
{
    sb_buf_puts(b, "# HELP switchboard_agent_reports_total Agent reports applied to the endpoint.\n"
                   "# TYPE switchboard_agent_reports_total counter\n");
    for (size_t p = 0; p < sb_router_pool_count(gw->router); p++)
        for (size_t e = 0; e < sb_router_endpoint_count(gw->router, (uint32_t)p); e++) {
            const sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
            sb_buf_printf(b, "switchboard_agent_reports_total{pool=\"%s\",endpoint=\"%s\"} %llu\n",
                          sb_router_pool_name(gw->router, (uint32_t)p), ep->address ? ep->address : "",
                          (unsigned long long)ep->agent.reports);
        }
    sb_buf_puts(b, "# HELP switchboard_agent_reports_refused_total Agent reports refused, by reason.\n"
                   "# TYPE switchboard_agent_reports_refused_total counter\n");
    for (size_t i = 0; i < N_REFUSED; i++)
        sb_buf_printf(b, "switchboard_agent_reports_refused_total{reason=\"%s\"} %llu\n", refused_names[i],
                      (unsigned long long)gw->agent_refused[i]);
    sb_buf_puts(b, "# HELP switchboard_endpoint_slots_idle Idle slots as the gateway counts them (-1: no fresh "
                   "slots report).\n# TYPE switchboard_endpoint_slots_idle gauge\n");
    sb_ns now = uv_hrtime();
    for (size_t p = 0; p < sb_router_pool_count(gw->router); p++)
        for (size_t e = 0; e < sb_router_endpoint_count(gw->router, (uint32_t)p); e++) {
            const sb_endpoint *ep = sb_router_endpoint(gw->router, (uint32_t)p, (uint32_t)e);
            sb_buf_printf(b, "switchboard_endpoint_slots_idle{pool=\"%s\",endpoint=\"%s\"} %d\n",
                          sb_router_pool_name(gw->router, (uint32_t)p), ep->address ? ep->address : "",
                          sb_endpoint_slots_fresh(ep, now) ? (int)sb_endpoint_slots_idle(ep) : -1);
        }
}
