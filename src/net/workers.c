#include "net/workers.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "net/guard.h"
#include "net/iobatch.h"
#include "net/tls.h"

typedef struct worker {
    uv_loop_t loop;
    uv_thread_t thread;
    bool thread_started;
    sb_http_server *server; /* NULL once stopped (set under the lock) */
    uv_prepare_t turn;
    struct sb_workers *set;
    int index;
} worker;

struct sb_workers {
    size_t n;
    worker *w;
    sb_workers_env env;
    uint16_t port;
    bool stopping;
    size_t holders; /* gateways using the set (under the lock) */
    SSL_CTX *tls;   /* the client listener's TLS context the servers were last given (a reference) */
    /* The client listener's limits hold for all workers together: max_connections counts every
     * worker's connections, max_buffered_body_bytes every worker's bodies. */
    sb_http_shared budgets;
};

static sb_workers *the_set; /* one set per process (sb_workers_join) */
static __thread int my_index = -1;

static void on_turn(uv_prepare_t *h)
{
    worker *w = h->data;
    if (w->set->env.turn)
        w->set->env.turn(w->set->env.ctx); /* takes the lock itself, when it has work */
}

static void worker_main(void *arg)
{
    worker *w = arg;
    my_index = w->index;
    sb_guard_set_loop(&w->loop);
    uv_run(&w->loop, UV_RUN_DEFAULT);
}

/* SO_REUSEPORT lets any socket with the option (of the same user) share the port: a second
 * switchboard started on the same address would take half the clients with a routing state of
 * its own. So the address is first bound plainly, once: taken by anyone (a running gateway's
 * workers included), that fails as a plain listener's bind would. 0 or a negative libuv error. */
static void on_probe_connection(uv_stream_t *s, int status)
{
    (void)s;
    (void)status;
}

static void on_probe_closed(uv_handle_t *h)
{
    sb_free(h);
}

static int address_free(uv_loop_t *loop, const char *host, uint16_t port)
{
    struct sockaddr_storage addr;
    int rc = strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc < 0 || port == 0)
        return rc; /* port 0: the kernel picks a port nobody holds */
    uv_tcp_t *probe = sb_malloc(sizeof(*probe));
    if (!probe)
        return UV_ENOMEM;
    uv_tcp_init(loop, probe);
    rc = uv_tcp_bind(probe, (struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)probe, 1, on_probe_connection);
    uv_close((uv_handle_t *)probe, on_probe_closed); /* before the loop runs: never accepts */
    return rc;
}

int sb_workers_start(size_t n, const char *host, uint16_t port, const sb_http_server_opts *opts,
                     const sb_workers_env *env, sb_workers **out)
{
    sb_workers *set = sb_calloc(1, sizeof(*set));
    worker *ws = sb_calloc(n ? n : 1, sizeof(*ws));
    if (!set || !ws) {
        sb_free(set);
        sb_free(ws);
        return UV_ENOMEM;
    }
    set->n = n;
    set->w = ws;
    set->env = *env;
    int free_rc = address_free(sb_guard_main(), host, port);
    if (free_rc < 0) {
        sb_free(ws);
        sb_free(set);
        return free_rc;
    }
    sb_http_server_opts so = *opts;
    so.reuse_port = true;
    so.shared = &set->budgets;
    int rc = 0;
    size_t made = 0;
    /* Loops and servers are made here, before their threads run them: creating handles needs
     * no lock then (pthread_create orders it before the thread's first step). */
    for (; made < n && rc == 0; made++) {
        worker *w = &ws[made];
        w->set = set;
        w->index = (int)made;
        if ((rc = uv_loop_init(&w->loop)) < 0)
            break;
        if (sb_iob_open(&w->loop) < 0)
            SB_DEBUG("workers: worker %zu writes through libuv (no io_uring)", made);
        if ((rc = sb_guard_mailbox_open(&w->loop, true)) < 0 ||
            (rc = sb_http_server_start(&w->loop, host, port, &so, env->handler, env->ctx, &w->server)) < 0) {
            sb_iob_close(&w->loop);
            if (w->loop.data)
                sb_guard_mailbox_close(&w->loop);
            uv_run(&w->loop, UV_RUN_DEFAULT);
            uv_loop_close(&w->loop);
            break;
        }
        port = sb_http_server_port(w->server); /* port 0: the others take the one picked */
        sb_http_server_set_head_hook(w->server, env->head);
        sb_http_server_set_refused(w->server, env->refused);
        uv_prepare_init(&w->loop, &w->turn);
        w->turn.data = w;
        uv_prepare_start(&w->turn, on_turn);
        uv_unref((uv_handle_t *)&w->turn);
    }
    if (rc < 0) {
        /* Workers 0..made-1 are whole (the one that failed, made, is closed): stop them
         * unthreaded. */
        for (size_t i = 0; i < made; i++) {
            worker *w = &ws[i];
            sb_http_server_stop(w->server);
            uv_close((uv_handle_t *)&w->turn, NULL);
            sb_iob_close(&w->loop);
            sb_guard_mailbox_close(&w->loop);
            uv_run(&w->loop, UV_RUN_DEFAULT);
            uv_loop_close(&w->loop);
        }
        sb_free(ws);
        sb_free(set);
        return rc;
    }
    set->port = port;
    set->holders = 1;
    if (opts->tls_ctx) {
        SSL_CTX_up_ref(opts->tls_ctx);
        set->tls = opts->tls_ctx;
    }
    for (size_t i = 0; i < n; i++) {
        if (uv_thread_create(&ws[i].thread, worker_main, &ws[i]) < 0) {
            SB_ERROR("workers: cannot start thread %zu", i);
            abort(); /* half a set of workers cannot be taken back cleanly */
        }
        ws[i].thread_started = true;
    }
    the_set = set;
    *out = set;
    return 0;
}

size_t sb_workers_count(const sb_workers *w)
{
    return w ? w->n : 0;
}

static void server_set_opts(sb_http_server *s, void *arg)
{
    sb_http_server_set_opts(s, arg);
}

static void opts_free(void *arg)
{
    sb_http_server_opts *o = arg;
    SSL_CTX_free(o->tls_ctx);
    sb_free(o);
}

int sb_workers_set_opts(sb_workers *set, const sb_http_server_opts *opts)
{
    sb_http_server_opts *o = sb_malloc(sizeof(*o));
    if (!o)
        return -1;
    *o = *opts;
    if (o->tls_ctx) {
        /* Once, here: each worker copying the keys into the context others already serve
         * with would write it while they read it. */
        if (set->tls && set->tls != o->tls_ctx)
            sb_tls_keep_tickets(o->tls_ctx, set->tls);
        o->tls_tickets_kept = true;
        SSL_CTX_up_ref(o->tls_ctx); /* the post's */
        SSL_CTX_up_ref(o->tls_ctx); /* set->tls's */
        SSL_CTX_free(set->tls);
        set->tls = o->tls_ctx;
    }
    if (sb_workers_each(set, server_set_opts, o, opts_free) < 0) {
        opts_free(o);
        return -1;
    }
    return 0;
}
uint16_t sb_workers_port(const sb_workers *w)
{
    return w->port;
}
int sb_worker_index(void)
{
    return my_index;
}
uv_loop_t *sb_workers_loop(sb_workers *w, size_t i)
{
    return &w->w[i].loop;
}

typedef struct each_call {
    void (*fn)(sb_http_server *s, void *arg);
    void *arg;
    void (*done)(void *arg);
    size_t left; /* under the lock */
} each_call;

typedef struct each_item {
    each_call *call;
    worker *w;
} each_item;

static void run_each(void *arg)
{
    each_item *it = arg;
    each_call *call = it->call;
    if (it->w->server)
        call->fn(it->w->server, call->arg);
    sb_free(it);
    if (--call->left == 0) {
        if (call->done)
            call->done(call->arg);
        sb_free(call);
    }
}

int sb_workers_each(sb_workers *set, void (*fn)(sb_http_server *s, void *arg), void *arg, void (*done)(void *arg))
{
    each_call *call = sb_malloc(sizeof(*call));
    each_item **items = sb_calloc(set->n, sizeof(*items));
    bool ok = call && items;
    for (size_t i = 0; ok && i < set->n; i++)
        ok = (items[i] = sb_malloc(sizeof(each_item))) != NULL;
    if (!ok) {
        for (size_t i = 0; items && i < set->n; i++)
            sb_free(items[i]);
        sb_free(items);
        sb_free(call);
        return -1;
    }
    *call = (each_call){.fn = fn, .arg = arg, .done = done, .left = set->n};
    /* The caller holds the lock: no worker runs an item before all are posted. An item whose
     * post fails (the worker stopped) runs here: its server is gone, only the count moves. */
    for (size_t i = 0; i < set->n; i++) {
        *items[i] = (each_item){.call = call, .w = &set->w[i]};
        if (sb_guard_post(&set->w[i].loop, run_each, items[i]) < 0) {
            items[i]->w = NULL;
            each_item *it = items[i];
            if (--call->left == 0) {
                if (call->done)
                    call->done(call->arg);
                sb_free(call);
            }
            sb_free(it);
        }
    }
    sb_free(items);
    return 0;
}

void sb_workers_get_stats(const sb_workers *set, sb_http_server_stats *out)
{
    *out = (sb_http_server_stats){0};
    for (size_t i = 0; i < set->n; i++) {
        sb_http_server_stats s;
        sb_workers_worker_stats(set, i, &s);
        out->open_connections += s.open_connections;
        out->lingering_connections += s.lingering_connections;
        out->refusing_connections += s.refusing_connections;
        out->body_bytes += s.body_bytes;
        out->accepted_total += s.accepted_total;
        out->refused_total += s.refused_total;
        out->reset_total += s.reset_total;
        out->body_budget_refusals += s.body_budget_refusals;
        out->tls_handshakes += s.tls_handshakes;
        out->tls_failures += s.tls_failures;
        out->h2_connections += s.h2_connections;
        out->h2_streams += s.h2_streams;
        out->h2_refused_streams += s.h2_refused_streams;
        out->timer_starts += s.timer_starts;
        for (int r = 0; r < SB_H2_GOAWAY_REASONS; r++)
            out->h2_goaway[r] += s.h2_goaway[r];
    }
}

void sb_workers_worker_stats(const sb_workers *set, size_t i, sb_http_server_stats *out)
{
    *out = (sb_http_server_stats){0};
    if (set->w[i].server)
        sb_http_server_get_stats(set->w[i].server, out);
}

size_t sb_workers_connections(const sb_workers *set)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        if (set->w[i].server)
            n += sb_http_server_connections(set->w[i].server);
    return n;
}

static void stop_server(void *arg)
{
    worker *w = arg;
    if (w->server) {
        sb_http_server_stop(w->server);
        w->server = NULL;
    }
}

void sb_workers_stop_servers(sb_workers *set)
{
    for (size_t i = 0; set && i < set->n; i++)
        if (sb_guard_post(&set->w[i].loop, stop_server, &set->w[i]) < 0)
            SB_WARN("workers: worker %zu could not be told to stop its listener", i);
}

/* On the worker: its server stops (if it still runs), its turn hook and mailbox close; the
 * loop ends once the connections and pools it still holds are closed. */
static void quit_worker(void *arg)
{
    worker *w = arg;
    if (w->server) {
        sb_http_server_stop(w->server);
        w->server = NULL;
    }
    uv_prepare_stop(&w->turn);
    uv_close((uv_handle_t *)&w->turn, NULL);
    sb_iob_close(&w->loop);
    sb_guard_mailbox_close(&w->loop);
}

void sb_workers_hold(sb_workers *set)
{
    set->holders++;
}

void sb_workers_release(sb_workers *set)
{
    if (--set->holders == 0)
        sb_workers_stop(set);
}

void sb_workers_stop(sb_workers *set)
{
    if (!set || set->stopping)
        return;
    set->stopping = true;
    for (size_t i = 0; i < set->n; i++)
        if (sb_guard_post(&set->w[i].loop, quit_worker, &set->w[i]) < 0)
            SB_WARN("workers: worker %zu could not be told to stop", i);
}

void sb_workers_join(void)
{
    sb_workers *set = the_set;
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++)
        if (set->w[i].thread_started)
            uv_thread_join(&set->w[i].thread);
    for (size_t i = 0; i < set->n; i++) {
        uv_run(&set->w[i].loop, UV_RUN_DEFAULT); /* what the thread left closing */
        if (uv_loop_close(&set->w[i].loop) != 0)
            SB_WARN("workers: worker %zu's loop still had handles at exit", i);
    }
    SSL_CTX_free(set->tls);
    sb_free(set->w);
    sb_free(set);
    the_set = NULL;
}
