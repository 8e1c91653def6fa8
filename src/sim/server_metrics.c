/* server_metrics: the live simulator's /metrics and /slots routes (see server_internal.h). */
#include "sim/server_internal.h"

#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"

/* Comma-separated names of the adapters with running (or waiting) requests. */
static void adapter_names(const replica *r, bool running, sb_buf *out)
{
    const sb_sim_fleet *f = r->fleet;
    size_t n = sb_engine_adapters(r->engine, NULL, 0);
    sb_engine_adapter *ad = n ? sb_calloc(n, sizeof(*ad)) : NULL;
    if (ad)
        n = sb_engine_adapters(r->engine, ad, n);
    for (size_t i = 0; ad && i < n; i++) {
        if ((running ? ad[i].running : ad[i].waiting) == 0 || ad[i].id == 0 || ad[i].id > f->opts.n_adapters)
            continue;
        if (out->len)
            sb_buf_puts(out, ",");
        sb_buf_puts(out, f->adapters[ad[i].id - 1]);
    }
    sb_free(ad);
}

static void answer_metrics(replica *r, sb_http_req *h)
{
    sb_sim_fleet *f = r->fleet;
    sb_engine_metrics m;
    sb_engine_metrics_get(r->engine, &m);
    sb_buf run = {0}, wait = {0}, b = {0};
    adapter_names(r, true, &run);
    adapter_names(r, false, &wait);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sb_sim_metrics_view v = {
        .flavor = f->opts.flavor,
        .model_name = f->model,
        .engine = &m,
        .stats = &r->stats,
        .running_adapters = run.data ? run.data : "",
        .waiting_adapters = wait.data ? wait.data : "",
        .enable_prefix_caching = f->opts.engine.enable_prefix_caching,
        .now_unix_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9,
    };
    if (sb_sim_metrics_render(&b, &v) == 0)
        sb_http_respond(h, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
    else
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
    sb_buf_free(&run);
    sb_buf_free(&wait);
    sb_buf_free(&b);
}

void srv_unpark(parked *p)
{
    replica *r = p->rep;
    if (p->prev)
        p->prev->next = p->next;
    else
        r->parked_head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        r->parked_tail = p->prev;
    p->http->user = NULL;
    p->http->on_abort = NULL;
    sb_free(p);
}

static void on_parked_abort(sb_http_req *h)
{
    if (h->user)
        srv_unpark(h->user);
}

static void on_metrics_timer(uv_timer_t *t);

static void arm_metrics_timer(replica *r)
{
    parked *p = r->parked_head;
    while (p && p->due_ns == UINT64_MAX)
        p = p->next;
    if (!p || r->fleet->stopping) {
        uv_timer_stop(&r->metrics_timer);
        return;
    }
    uint64_t now = uv_hrtime();
    uint64_t ms = p->due_ns > now ? (p->due_ns - now + SB_NS_PER_MS - 1) / SB_NS_PER_MS : 0;
    uv_timer_start(&r->metrics_timer, on_metrics_timer, ms, 0);
}

static void on_metrics_timer(uv_timer_t *t)
{
    replica *r = t->data;
    uint64_t now = uv_hrtime();
    /* Answering may run the handler for a pipelined request, which may park again: take one
     * due entry at a time from the list as it is then. */
    for (;;) {
        parked *p = r->parked_head;
        while (p && (p->due_ns == UINT64_MAX || p->due_ns > now))
            p = p->next;
        if (!p)
            break;
        sb_http_req *h = p->http;
        srv_unpark(p);
        answer_metrics(r, h);
    }
    arm_metrics_timer(r);
}

void srv_handle_metrics(replica *r, sb_http_req *h)
{
    const sb_sim_faults *fa = &r->fleet->opts.faults;
    if (!r->faulty || (!fa->metrics_hang && !fa->metrics_delay_ms)) {
        answer_metrics(r, h);
        return;
    }
    parked *p = sb_calloc(1, sizeof(*p));
    if (!p) {
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
        return;
    }
    p->rep = r;
    p->http = h;
    p->due_ns = fa->metrics_hang ? UINT64_MAX : uv_hrtime() + (uint64_t)fa->metrics_delay_ms * SB_NS_PER_MS;
    p->prev = r->parked_tail;
    if (r->parked_tail)
        r->parked_tail->next = p;
    else
        r->parked_head = p;
    r->parked_tail = p;
    h->user = p;
    h->on_abort = on_parked_abort;
    arm_metrics_timer(r);
}

/* llama.cpp's slots: max_num_seqs of them; the oldest live requests, as many as the engine
 * runs, are shown processing (the engine admits first come first served). */
void srv_handle_slots(replica *r, sb_http_req *h)
{
    sb_engine_metrics m;
    sb_engine_metrics_get(r->engine, &m);
    const sb_engine_params *p = sb_engine_params_get(r->engine);
    size_t n = p->max_num_seqs;
    sb_sim_slot *slots = sb_calloc(n, sizeof(*slots));
    sb_buf b = {0};
    if (!slots) {
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
        return;
    }
    size_t i = 0;
    for (const sim_req *q = r->head; q && i < n && i < m.num_requests_running; q = q->next, i++)
        slots[i] = (sb_sim_slot){true, q->id >> 32, q->emitted, q->max_tokens, q->stream};
    uint32_t n_ctx = (uint32_t)((uint64_t)p->num_gpu_blocks * p->block_size / n);
    if (sb_sim_slots_render(&b, slots, n, n_ctx) == 0)
        srv_respond_json(h, 200, &b);
    else
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
    sb_free(slots);
    sb_buf_free(&b);
}
