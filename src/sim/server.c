/* server: the live simulator's replicas (see server.h).
 *
 * Ownership. A completion request becomes a sim_req once its engine submission succeeds; from
 * then on exactly one of three paths frees it: the engine's FINISHED event (response
 * completed), the die-after-tokens fault (connection cut), or the HTTP server's on_abort (the
 * client left, or the replica stopped). The engine knows it by an id made of a slot index and
 * a generation, so an event can never reach a freed request. A sim_req is unlinked before its
 * final HTTP call, because finishing a response may run the handler again at once for a
 * pipelined request on the same connection (same sb_http_req memory).
 *
 * Re-entrancy. Engine callbacks may submit and abort but not query next_event; responding from
 * a callback can run the handler (pipelining) and a failed write runs on_abort synchronously.
 * So `in_advance` defers re-arming the step timer to the end of on_step, and every write that
 * fails returns at once without touching the request again. */
#include "sim/server_internal.h"

#include <errno.h>
#include <http_parser.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "net/http_server.h"
#include "sim/answer.h"
#include "sim/sim_request.h"
#include "sim/tokenizer.h"

/* Llama-3.1-8B's context length (max_position_embeddings), vLLM's default max_model_len. */
#define DEFAULT_MODEL_LEN 131072u
#define DEFAULT_MODEL "meta-llama/Llama-3.1-8B-Instruct"
#define RESTART_DOWN_MIN_MS 10
#define RESTART_DOWN_MAX_MS 1000

static void on_step(uv_timer_t *t);
static void rearm(replica *r);

/* ---- clocks and draws ---- */

static sb_ns engine_now(const sb_sim_fleet *f)
{
    return (sb_ns)((double)(uv_hrtime() - f->start_ns) * f->opts.speed);
}

/* xorshift64*: deterministic per fleet, good enough for fault draws. */
static double draw(sb_sim_fleet *f)
{
    f->rng ^= f->rng >> 12;
    f->rng ^= f->rng << 25;
    f->rng ^= f->rng >> 27;
    return (double)((f->rng * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

/* ---- small responses ---- */

/* vLLM's error body shape ({"error":{...}} with the HTTP status as the code). */
void srv_respond_error(sb_http_req *h, int status, const char *type, const char *message, const char *extra_headers)
{
    sb_buf b = {0};
    sb_buf_puts(&b, "{\"error\":{\"message\":\"");
    sb_buf_json_escape(&b, message, strlen(message));
    sb_buf_printf(&b, "\",\"type\":\"%s\",\"param\":null,\"code\":%d}}", type, status);
    if (b.data)
        sb_http_respond(h, status, "application/json", extra_headers, b.data, b.len);
    else
        sb_http_respond(h, 500, "application/json", NULL, "{}", 2);
    sb_buf_free(&b);
}

void srv_respond_json(sb_http_req *h, int status, sb_buf *b)
{
    if (b->data)
        sb_http_respond(h, status, "application/json", NULL, b->data, b->len);
    else
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
}

/* ---- live requests ---- */

static int slot_alloc(replica *r, sim_req *q)
{
    if (r->n_free == 0) {
        uint32_t cap = r->cap_slots ? r->cap_slots * 2 : 64;
        sim_req **s = sb_realloc(r->slots, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        r->slots = s;
        uint32_t *fr = sb_realloc(r->free_slots, cap * sizeof(*fr));
        if (!fr)
            return -ENOMEM;
        r->free_slots = fr;
        for (uint32_t i = cap; i > r->cap_slots; i--) {
            r->slots[i - 1] = NULL;
            r->free_slots[r->n_free++] = i - 1;
        }
        r->cap_slots = cap;
    }
    q->slot = r->free_slots[--r->n_free];
    q->id = ++r->generation << 32 | q->slot;
    r->slots[q->slot] = q;
    return 0;
}

static void slot_release(replica *r, uint32_t slot)
{
    r->slots[slot] = NULL;
    r->free_slots[r->n_free++] = slot;
}

static sim_req *lookup(replica *r, uint64_t id)
{
    uint32_t s = (uint32_t)id;
    if (s >= r->cap_slots || !r->slots[s] || r->slots[s]->id != id)
        return NULL;
    return r->slots[s];
}

static void link_req(replica *r, sim_req *q)
{
    q->prev = r->tail;
    q->next = NULL;
    if (r->tail)
        r->tail->next = q;
    else
        r->head = q;
    r->tail = q;
}

/* Forgets q (it must be linked) and frees it. */
static void req_free(sim_req *q)
{
    replica *r = q->rep;
    if (q->prev)
        q->prev->next = q->next;
    else
        r->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        r->tail = q->prev;
    slot_release(r, q->slot);
    if (q->http)
        q->http->user = NULL;
    sb_free(q);
}

/* The client left, or the replica is stopping: the engine drops the request. */
static void on_req_abort(sb_http_req *h)
{
    sim_req *q = h->user;
    if (!q)
        return;
    replica *r = q->rep;
    h->user = NULL;
    q->http = NULL;
    if (r->engine)
        sb_engine_abort(r->engine, q->id, engine_now(r->fleet));
    req_free(q);
    rearm(r);
}

/* ---- OpenAI response bodies ---- */

static void put_usage(sb_buf *b, const sb_engine_usage *u)
{
    sb_buf_printf(b,
                  "{\"prompt_tokens\":%u,\"total_tokens\":%u,\"completion_tokens\":%u,"
                  "\"prompt_tokens_details\":{\"cached_tokens\":%u}}",
                  u->prompt_tokens, u->prompt_tokens + u->completion_tokens, u->completion_tokens, u->cached_tokens);
}

/* The common head of a response object or chunk, up to and including "model":"...",. */
static void put_head(sb_buf *b, const sim_req *q, const char *object)
{
    sb_buf_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%llu,\"model\":\"", q->rid, object,
                  (unsigned long long)q->created);
    sb_buf_json_escape(b, q->model, strlen(q->model));
    sb_buf_puts(b, "\",");
}

/* Writes one SSE event holding b's JSON; b is reset. Returns what sb_http_stream_write does. */
static int send_event(sim_req *q, sb_buf *b)
{
    if (!b->data)
        return -1;
    if (sb_buf_puts(b, "\n\n") < 0)
        return -1;
    int rc = sb_http_stream_write(q->http, b->data, b->len);
    sb_buf_reset(b);
    return rc;
}

/* The chunk for token number i (0-based) of q. Returns < 0 if q is gone. */
static int send_token(sim_req *q, uint32_t i, sb_buf *b)
{
    const char *word = sb_sim_answer_word(i);
    const char *finish = i + 1 == q->max_tokens ? "\"length\"" : "null";
    if (q->chat && i == 0) {
        /* vLLM opens a chat stream with the role, sent along with the first token. */
        sb_buf_puts(b, "data: ");
        put_head(b, q, "chat.completion.chunk");
        sb_buf_puts(b, "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                       "\"logprobs\":null,\"finish_reason\":null}]}");
        if (send_event(q, b) < 0)
            return -1;
    }
    sb_buf_puts(b, "data: ");
    if (q->chat) {
        put_head(b, q, "chat.completion.chunk");
        sb_buf_printf(b,
                      "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,"
                      "\"finish_reason\":%s%s}]}",
                      word, finish, i + 1 == q->max_tokens ? ",\"stop_reason\":null" : "");
    } else {
        put_head(b, q, "text_completion");
        sb_buf_printf(b,
                      "\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s,"
                      "\"stop_reason\":null}]}",
                      word, finish);
    }
    return send_event(q, b);
}

/* Cuts the connection as a dying server would, and forgets the request. */
static void kill_req(sim_req *q)
{
    replica *r = q->rep;
    sb_http_req *h = q->http;
    sb_engine_abort(r->engine, q->id, engine_now(r->fleet));
    h->on_abort = NULL;
    req_free(q);
    sb_http_stream_abort(h);
}

static void deliver_tokens(sim_req *q, uint32_t upto)
{
    replica *r = q->rep;
    const sb_sim_faults *fa = &r->fleet->opts.faults;
    sb_buf b = {0};
    while (q->emitted < upto && q->emitted < q->max_tokens) {
        if (q->stream && send_token(q, q->emitted, &b) < 0) {
            sb_buf_free(&b);
            return; /* on_abort has freed q */
        }
        q->emitted++;
        if (r->faulty && fa->die_after_tokens && q->emitted >= fa->die_after_tokens && q->emitted < q->max_tokens) {
            sb_buf_free(&b);
            kill_req(q);
            return;
        }
    }
    sb_buf_free(&b);
}

static void finish_req(sim_req *q, const sb_engine_usage *u)
{
    replica *r = q->rep;
    sb_buf b = {0};
    if (q->stream) {
        if (q->include_usage) {
            sb_buf_puts(&b, "data: ");
            put_head(&b, q, q->chat ? "chat.completion.chunk" : "text_completion");
            sb_buf_puts(&b, "\"choices\":[],\"usage\":");
            put_usage(&b, u);
            sb_buf_puts(&b, "}");
            if (send_event(q, &b) < 0) {
                sb_buf_free(&b);
                return;
            }
        }
        if (sb_http_stream_write(q->http, "data: [DONE]\n\n", 14) < 0) {
            sb_buf_free(&b);
            return;
        }
        sb_http_req *h = q->http;
        h->on_abort = NULL;
        req_free(q);
        sb_http_stream_end(h);
        sb_buf_free(&b);
        return;
    }
    put_head(&b, q, q->chat ? "chat.completion" : "text_completion");
    sb_buf text = {0};
    for (uint32_t i = 0; i < u->completion_tokens; i++)
        sb_buf_puts(&text, sb_sim_answer_word(i));
    if (q->chat)
        sb_buf_puts(&b, "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"");
    else
        sb_buf_puts(&b, "\"choices\":[{\"index\":0,\"text\":\"");
    sb_buf_json_escape(&b, text.data ? text.data : "", text.len);
    sb_buf_puts(&b, q->chat ? "\",\"tool_calls\":[]},\"logprobs\":null,\"finish_reason\":\"length\","
                              "\"stop_reason\":null}],\"usage\":"
                            : "\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":");
    put_usage(&b, u);
    sb_buf_puts(&b, "}");
    sb_buf_free(&text);
    sb_buf hdr = {0};
    sb_engine_metrics m;
    sb_engine_metrics_get(r->engine, &m);
    sb_sim_orca_header(&hdr, q->orca, &m);
    sb_http_req *h = q->http;
    h->on_abort = NULL;
    req_free(q);
    if (b.data)
        sb_http_respond(h, 200, "application/json", hdr.data, b.data, b.len);
    else
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
    sb_buf_free(&hdr);
    sb_buf_free(&b);
}

/* ---- the engine's clock ---- */

static void on_event(void *ud, const sb_engine_event *ev)
{
    replica *r = ud;
    sim_req *q = lookup(r, ev->id);
    double s = 1e-9;
    switch (ev->kind) {
    case SB_ENGINE_EV_FIRST_TOKEN:
    case SB_ENGINE_EV_TOKEN:
        if (ev->kind == SB_ENGINE_EV_TOKEN)
            sb_sim_stats_observe(&r->stats, SB_SIM_HIST_ITL, (double)ev->itl_ns * s);
        if (q)
            deliver_tokens(q, ev->usage.completion_tokens);
        break;
    case SB_ENGINE_EV_FINISHED:
        sb_sim_stats_observe(&r->stats, SB_SIM_HIST_TTFT, (double)ev->usage.ttft_ns * s);
        sb_sim_stats_observe(&r->stats, SB_SIM_HIST_E2E, (double)ev->usage.e2e_ns * s);
        sb_sim_stats_observe(&r->stats, SB_SIM_HIST_QUEUE, (double)ev->usage.queue_ns * s);
        if (q)
            finish_req(q, &ev->usage);
        break;
    case SB_ENGINE_EV_PREEMPTED: break;
    }
}

static void on_step(uv_timer_t *t)
{
    replica *r = t->data;
    if (!r->engine || r->fleet->stopping)
        return;
    r->in_advance = true;
    sb_engine_advance(r->engine, engine_now(r->fleet), on_event, r);
    r->in_advance = false;
    rearm(r);
}

/* Arms the step timer for the engine's next event, converted to real milliseconds (rounded
 * up: a timer that fires early only re-arms). */
static void rearm(replica *r)
{
    sb_sim_fleet *f = r->fleet;
    if (r->in_advance || f->stopping || !r->engine)
        return;
    sb_ns next = sb_engine_next_event(r->engine);
    /* After every change of the engine: completed steps' events, and the evictions of the
     * step just formed (the publisher holds those until that step ends). */
    if (r->kv)
        sb_kv_pub_drain(r->kv, r->engine);
    if (next == SB_ENGINE_NEVER) {
        uv_timer_stop(&r->step_timer);
        return;
    }
    sb_ns now = engine_now(f);
    uint64_t ms = 0;
    if (next > now)
        ms = (uint64_t)ceil((double)(next - now) / f->opts.speed / 1e6);
    uv_timer_start(&r->step_timer, on_step, ms, 0);
}

/* ---- endpoints ---- */

/* Parses a completion request and tokenizes its prompt: returns the prompt length, with the
 * ids in *tokens (the caller frees them) and the engine adapter in *adapter; or 0 once the
 * client has been answered (an error). */
static size_t read_prompt(replica *r, sb_http_req *h, bool chat, sb_sim_request *pr, int *adapter, uint32_t **tokens)
{
    sb_sim_fleet *f = r->fleet;
    sb_buf prompt = {0};
    size_t n = 0;
    *tokens = NULL;
    int rc = sb_sim_request_parse(h->body, h->body_len, chat ? SB_SIM_API_CHAT : SB_SIM_API_COMPLETIONS, pr, &prompt);
    if (rc == -EINVAL) {
        srv_respond_error(h, 400, "BadRequestError", pr->error, NULL);
    } else if (rc < 0) {
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
    } else if ((*adapter = srv_model_adapter(f, pr)) < 0) {
        srv_respond_unknown_model(h, pr->model);
    } else if ((n = sb_tokenize(prompt.data ? prompt.data : "", prompt.len, NULL, 0)) == 0) {
        srv_respond_error(h, 400, "BadRequestError", "The prompt is empty.", NULL);
    } else if (n + pr->max_tokens > f->max_model_len) {
        char msg[320];
        snprintf(msg, sizeof(msg),
                 "This model's maximum context length is %u tokens. However, you requested %zu tokens (%zu in the "
                 "messages, %u in the completion). Please reduce the length of the messages or completion.",
                 f->max_model_len, n + pr->max_tokens, n, pr->max_tokens);
        srv_respond_error(h, 400, "BadRequestError", msg, NULL);
        n = 0;
    } else if (!(*tokens = sb_malloc(n * sizeof(**tokens)))) {
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
        n = 0;
    } else {
        sb_tokenize(prompt.data, prompt.len, *tokens, n);
    }
    sb_buf_free(&prompt);
    return n;
}

/* Fills q for a request the engine took, links it and, when streaming, opens the stream. */
static void start_response(replica *r, sim_req *q, sb_http_req *h, const sb_sim_request *pr, bool chat)
{
    q->rep = r;
    q->http = h;
    q->chat = chat;
    q->stream = pr->stream;
    q->include_usage = pr->stream && pr->include_usage;
    q->max_tokens = pr->max_tokens;
    q->created = (uint64_t)time(NULL);
    const sb_http_header *oh = sb_http_req_header(h, "endpoint-load-metrics-format");
    q->orca = oh ? sb_sim_orca_format(oh->value, oh->value_len) : SB_SIM_ORCA_NONE;
    snprintf(q->rid, sizeof(q->rid), "%s-%04x%012llx", chat ? "chatcmpl" : "cmpl", r->port,
             (unsigned long long)(q->id >> 32));
    memcpy(q->model, pr->model, strlen(pr->model) + 1);
    link_req(r, q);
    h->user = q;
    h->on_abort = on_req_abort;
    if (!q->stream)
        return;
    sb_buf hdr = {0};
    sb_engine_metrics m;
    sb_engine_metrics_get(r->engine, &m);
    sb_buf_puts(&hdr, "Content-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n");
    sb_sim_orca_header(&hdr, q->orca, &m);
    if (!hdr.data) {
        h->on_abort = NULL;
        sb_engine_abort(r->engine, q->id, engine_now(r->fleet));
        req_free(q);
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
    } else {
        /* On failure the connection is closed and on_abort has freed q. */
        sb_http_stream_begin(h, 200, hdr.data, hdr.len, -1);
    }
    sb_buf_free(&hdr);
}

static void handle_completion(replica *r, sb_http_req *h, bool chat)
{
    sb_sim_fleet *f = r->fleet;
    const sb_sim_faults *fa = &f->opts.faults;
    if (r->faulty && fa->fail_rate > 0 && draw(f) < fa->fail_rate) {
        srv_respond_error(h, 500, "InternalServerError", "simulated failure (--fail-rate)", NULL);
        return;
    }
    sb_sim_request pr;
    uint32_t *tokens;
    int adapter = 0;
    size_t n = read_prompt(r, h, chat, &pr, &adapter, &tokens);
    if (n == 0)
        return;
    sim_req *q = sb_calloc(1, sizeof(*q));
    if (!q || slot_alloc(r, q) < 0) {
        sb_free(q);
        sb_free(tokens);
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
        return;
    }
    /* The engine generates the simulator's answer (sim/answer.h), the text sent back. */
    sb_engine_request er = {.id = q->id,
                            .tokens = tokens,
                            .n_prompt = (uint32_t)n,
                            .max_tokens = pr.max_tokens,
                            .adapter = (uint32_t)adapter};
    int rc = sb_engine_submit(r->engine, &er, engine_now(f));
    sb_free(tokens);
    if (rc < 0) {
        slot_release(r, q->slot);
        sb_free(q);
        if (rc == -E2BIG)
            srv_respond_error(h, 400, "BadRequestError", "The prompt and max_tokens do not fit in the KV cache.", NULL);
        else
            srv_respond_error(h, 500, "InternalServerError", "the engine refused the request", NULL);
        return;
    }
    start_response(r, q, h, &pr, chat);
    rearm(r);
}

/* vLLM's dev endpoint (POST /reset_prefix_cache); vLLM answers 200 and logs a refusal, the
 * simulator says it with a status so tests can tell. */
static void handle_reset_prefix_cache(replica *r, sb_http_req *h)
{
    if (sb_engine_reset_prefix_cache(r->engine, engine_now(r->fleet)) < 0) {
        srv_respond_error(h, 409, "ConflictError", "running requests hold blocks: the prefix cache was not reset",
                          NULL);
        return;
    }
    rearm(r); /* publishes AllBlocksCleared */
    sb_http_respond(h, 200, "application/json", NULL, "", 0);
}

static bool path_is(const sb_http_req *h, const char *path)
{
    size_t n = strlen(path);
    return h->path_len == n && memcmp(h->path, path, n) == 0;
}

static void handle_chat(replica *r, sb_http_req *h)
{
    handle_completion(r, h, true);
}
static void handle_completions(replica *r, sb_http_req *h)
{
    handle_completion(r, h, false);
}

static void handle_health(replica *r, sb_http_req *h)
{
    if (r->fleet->opts.flavor == SB_SIM_LLAMACPP)
        sb_http_respond(h, 200, "application/json", NULL, "{\"status\":\"ok\"}", 15);
    else
        sb_http_respond(h, 200, "application/json", NULL, "", 0);
}

static const struct route {
    const char *path;
    int method;
    bool llamacpp_only;
    void (*handle)(replica *r, sb_http_req *h);
} routes[] = {
    {"/v1/chat/completions", HTTP_POST, false, handle_chat},
    {"/v1/completions", HTTP_POST, false, handle_completions},
    {"/v1/models", HTTP_GET, false, srv_handle_models},
    {"/health", HTTP_GET, false, handle_health},
    {"/tokenize", HTTP_POST, false, srv_handle_tokenize},
    {"/reset_prefix_cache", HTTP_POST, false, handle_reset_prefix_cache},
    {"/metrics", HTTP_GET, false, srv_handle_metrics},
    {"/slots", HTTP_GET, true, srv_handle_slots},
};

/* Unrouted requests get FastAPI's bodies, as vLLM and SGLang answer them. */
static void handler(sb_http_req *h, void *ctx)
{
    replica *r = ctx;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *rt = &routes[i];
        if (!path_is(h, rt->path) || (rt->llamacpp_only && r->fleet->opts.flavor != SB_SIM_LLAMACPP))
            continue;
        if (h->method != rt->method)
            sb_http_respond(h, 405, "application/json", NULL, "{\"detail\":\"Method Not Allowed\"}", 31);
        else
            rt->handle(r, h);
        return;
    }
    sb_http_respond(h, 404, "application/json", NULL, "{\"detail\":\"Not Found\"}", 22);
}

/* ---- replica lifecycle ---- */

static int listen_replica(replica *r)
{
    sb_sim_fleet *f = r->fleet;
    /* HTTP/1.1 only, as vLLM's server (uvicorn): a replica that took h2c would hide a gateway
     * speaking HTTP/2 to an engine that cannot. */
    sb_http_server_opts o = {.h2_off = true};
    int rc = sb_http_server_start(f->loop, f->host, r->port, &o, handler, r, &r->srv);
    if (rc < 0) {
        r->srv = NULL;
        return rc;
    }
    r->port = sb_http_server_port(r->srv);
    return 0;
}

/* Closes the listener and every connection (in-flight requests are aborted through
 * on_abort, which needs the engine: it is freed after). */
static void unlisten_replica(replica *r)
{
    if (r->srv) {
        sb_http_server_stop(r->srv);
        r->srv = NULL;
    }
    while (r->parked_head) /* none are left after the server stop; this is a safety net */
        srv_unpark(r->parked_head);
}

static uint32_t restart_down_ms(const sb_sim_faults *fa)
{
    uint32_t d = fa->restart_every_ms / 10;
    return d < RESTART_DOWN_MIN_MS ? RESTART_DOWN_MIN_MS : d > RESTART_DOWN_MAX_MS ? RESTART_DOWN_MAX_MS : d;
}

static void on_restart_timer(uv_timer_t *t)
{
    replica *r = t->data;
    sb_sim_fleet *f = r->fleet;
    const sb_sim_faults *fa = &f->opts.faults;
    if (f->stopping || f->draining)
        return;
    if (!r->down) {
        SB_INFO("sim: replica %u (port %u) restarting", r->index, r->port);
        unlisten_replica(r);
        uv_timer_stop(&r->step_timer);
        uv_timer_stop(&r->metrics_timer);
        sb_engine *fresh = sb_engine_new(&f->opts.engine);
        if (fresh) {
            sb_engine_free(r->engine);
            r->engine = fresh;
            sb_sim_stats_init(&r->stats, f->opts.flavor);
            if (r->kv)
                sb_kv_pub_restart(r->kv); /* a new process: seq from 0, nothing to replay */
        }
        r->down = true;
        uv_timer_start(&r->restart_timer, on_restart_timer, restart_down_ms(fa), 0);
        return;
    }
    int rc = listen_replica(r);
    if (rc < 0)
        SB_WARN("sim: replica %u cannot listen again on port %u: %s", r->index, r->port, uv_strerror(rc));
    else
        r->down = false;
    uv_timer_start(&r->restart_timer, on_restart_timer, rc < 0 ? restart_down_ms(fa) : fa->restart_every_ms, 0);
}

/* ---- the fleet ---- */

void sb_sim_opts_default(sb_sim_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8000;
    o->replicas = 1;
    o->model = DEFAULT_MODEL;
    o->flavor = SB_SIM_VLLM;
    o->speed = 1.0;
    o->engine = sb_engine_params_default();
    o->seed = 1;
    sb_kv_pub_opts_default(&o->kv);
}

static void fleet_free(sb_sim_fleet *f)
{
    for (uint32_t i = 0; i < f->n; i++) {
        sb_free(f->reps[i].slots);
        sb_free(f->reps[i].free_slots);
    }
    for (size_t i = 0; i < f->opts.n_adapters; i++)
        sb_free(f->adapters ? f->adapters[i] : NULL);
    sb_free(f->adapters);
    sb_free(f->reps);
    sb_free(f->kv_endpoint);
    sb_free(f->kv_replay);
    sb_free(f->kv_topic);
    if (f->zctx)
        zmq_ctx_term(f->zctx); /* every socket is closed, with linger 0: returns at once */
    sb_free(f->host);
    sb_free(f->model);
    sb_free(f);
}

static void on_timer_closed(uv_handle_t *h)
{
    sb_sim_fleet *f = ((replica *)h->data)->fleet;
    if (--f->handles_open == 0)
        fleet_free(f);
}

static void on_kv_closed(void *ud)
{
    sb_sim_fleet *f = ud;
    if (--f->handles_open == 0)
        fleet_free(f);
}

const char *sb_sim_fleet_kv_endpoint(const sb_sim_fleet *f, uint32_t i)
{
    return i < f->n && f->reps[i].kv ? sb_kv_pub_endpoint_bound(f->reps[i].kv) : NULL;
}

const char *sb_sim_fleet_kv_replay(const sb_sim_fleet *f, uint32_t i)
{
    const char *ep = i < f->n && f->reps[i].kv ? sb_kv_pub_replay_bound(f->reps[i].kv) : NULL;
    return ep && *ep ? ep : NULL;
}

uint32_t sb_sim_fleet_size(const sb_sim_fleet *f)
{
    return f->n;
}

uint16_t sb_sim_fleet_port(const sb_sim_fleet *f, uint32_t i)
{
    return i < f->n ? f->reps[i].port : 0;
}

void sb_sim_fleet_drain(sb_sim_fleet *f)
{
    if (f->stopping || f->draining)
        return;
    f->draining = true;
    for (uint32_t i = 0; i < f->n; i++)
        if (f->reps[i].srv)
            sb_http_server_drain(f->reps[i].srv);
}

size_t sb_sim_fleet_connections(const sb_sim_fleet *f)
{
    size_t n = 0;
    for (uint32_t i = 0; i < f->n; i++)
        if (f->reps[i].srv)
            n += sb_http_server_connections(f->reps[i].srv);
    return n;
}

void sb_sim_fleet_stop(sb_sim_fleet *f)
{
    if (f->stopping)
        return;
    f->stopping = true;
    for (uint32_t i = 0; i < f->n; i++) {
        replica *r = &f->reps[i];
        unlisten_replica(r);
        sb_engine_free(r->engine);
        r->engine = NULL;
        uv_timer_t *timers[] = {&r->step_timer, &r->metrics_timer, &r->restart_timer};
        for (size_t k = 0; k < 3; k++) {
            uv_timer_stop(timers[k]);
            uv_close((uv_handle_t *)timers[k], on_timer_closed);
        }
        if (r->kv) {
            sb_kv_pub_close(r->kv, on_kv_closed, f);
            r->kv = NULL;
        }
    }
    if (f->handles_open == 0)
        fleet_free(f);
}

static int check_opts(const sb_sim_opts *o)
{
    if (!o->model || !*o->model || strlen(o->model) > SB_SIM_MODEL_MAX || !o->host || o->replicas == 0 ||
        !(o->speed > 0) || !isfinite(o->speed) || sb_engine_params_check(&o->engine) < 0 ||
        !(o->faults.fail_rate >= 0 && o->faults.fail_rate <= 1))
        return -EINVAL;
    if (o->port && (uint32_t)o->port + o->replicas - 1 > 65535)
        return -EINVAL;
    if (o->n_adapters && !o->adapters)
        return -EINVAL;
    if (o->kv_events && (!o->kv.endpoint || !o->kv.topic || o->kv.buffer_steps == 0 || o->kv.buffer_bytes == 0 ||
                         o->kv.hwm == 0 || o->kv.hwm > INT32_MAX))
        return -EINVAL;
    for (size_t i = 0; i < o->n_adapters; i++) {
        if (!o->adapters[i] || !*o->adapters[i] || strlen(o->adapters[i]) > SB_SIM_MODEL_MAX ||
            !strcmp(o->adapters[i], o->model))
            return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(o->adapters[i], o->adapters[j]))
                return -EINVAL;
    }
    return 0;
}

/* Copies the KV-event strings into the fleet and opens the zmq context. -ENOMEM: the caller
 * frees the fleet. */
static int kv_setup(sb_sim_fleet *f)
{
    sb_kv_pub_opts *kv = &f->opts.kv;
    f->opts.engine.kv_events = true;
    f->kv_endpoint = sb_strdup(kv->endpoint);
    f->kv_replay = kv->replay_endpoint ? sb_strdup(kv->replay_endpoint) : NULL;
    f->kv_topic = sb_strdup(kv->topic);
    f->zctx = zmq_ctx_new();
    if (!f->kv_endpoint || (kv->replay_endpoint && !f->kv_replay) || !f->kv_topic || !f->zctx)
        return -ENOMEM;
    kv->endpoint = f->kv_endpoint;
    kv->replay_endpoint = f->kv_replay;
    kv->topic = f->kv_topic;
    return 0;
}

/* Gives replica r its engine and publisher and starts listening (faults permitting). */
static int start_replica(replica *r)
{
    sb_sim_fleet *f = r->fleet;
    const sb_sim_faults *fa = &f->opts.faults;
    int rc;
    if (!(r->engine = sb_engine_new(&f->opts.engine)))
        return -ENOMEM;
    if (f->opts.kv_events) {
        sb_kv_encode_opts enc = {.encoding = f->opts.kv.encoding,
                                 .hashes = f->opts.kv.hashes,
                                 .adapter_names = f->opts.adapters,
                                 .n_adapter_names = f->opts.n_adapters};
        if ((rc = sb_kv_pub_start(f->loop, f->zctx, &f->opts.kv, r->index, &enc, &r->kv)) < 0) {
            r->kv = NULL;
            return rc;
        }
        f->handles_open++;
    }
    if (r->faulty && fa->refuse)
        return 0;
    if ((rc = listen_replica(r)) < 0)
        return rc;
    if (r->faulty && fa->restart_every_ms)
        uv_timer_start(&r->restart_timer, on_restart_timer, fa->restart_every_ms, 0);
    return 0;
}

int sb_sim_fleet_start(uv_loop_t *loop, const sb_sim_opts *opts, sb_sim_fleet **out)
{
    int rc = check_opts(opts);
    if (rc < 0)
        return rc;
    sb_sim_fleet *f = sb_calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->loop = loop;
    f->opts = *opts;
    f->host = sb_strdup(opts->host);
    f->model = sb_strdup(opts->model);
    f->adapters = opts->n_adapters ? sb_calloc(opts->n_adapters, sizeof(char *)) : NULL;
    f->reps = sb_calloc(opts->replicas, sizeof(replica));
    if (!f->host || !f->model || (opts->n_adapters && !f->adapters) || !f->reps) {
        f->opts.n_adapters = f->adapters ? opts->n_adapters : 0;
        fleet_free(f);
        return -ENOMEM;
    }
    for (size_t i = 0; i < opts->n_adapters; i++)
        if (!(f->adapters[i] = sb_strdup(opts->adapters[i]))) {
            fleet_free(f);
            return -ENOMEM;
        }
    f->opts.host = f->host;
    f->opts.model = f->model;
    f->opts.adapters = (const char *const *)f->adapters;
    if (opts->kv_events && kv_setup(f) < 0) {
        fleet_free(f);
        return -ENOMEM;
    }
    uint64_t cache_tokens = (uint64_t)opts->engine.num_gpu_blocks * opts->engine.block_size;
    f->max_model_len = opts->max_model_len
                           ? opts->max_model_len
                           : (uint32_t)(cache_tokens < DEFAULT_MODEL_LEN ? cache_tokens : DEFAULT_MODEL_LEN);
    f->rng = opts->seed ? opts->seed : 0x9E3779B97F4A7C15ULL;
    /* The engines' block tables are keyed (sim/engine.h): clients choose the prompts. Not
     * from --seed: that one is known, and the simulator's answers do not depend on it. */
    int drawn = uv_random(NULL, NULL, &f->opts.engine.hash_secret, sizeof(f->opts.engine.hash_secret), 0, NULL);
    if (drawn < 0) {
        fleet_free(f);
        return drawn;
    }
    f->start_ns = uv_hrtime();
    f->n = opts->replicas;
    /* Timers first, for every replica: from here on, the one cleanup path is fleet_stop. */
    for (uint32_t i = 0; i < f->n; i++) {
        replica *r = &f->reps[i];
        r->fleet = f;
        r->index = i;
        r->port = opts->port ? (uint16_t)(opts->port + i) : 0;
        r->faulty = opts->faults.replica_mask == 0 || (i < 64 && (opts->faults.replica_mask >> i & 1));
        uv_timer_t *timers[] = {&r->step_timer, &r->metrics_timer, &r->restart_timer};
        for (size_t k = 0; k < 3; k++) {
            uv_timer_init(loop, timers[k]);
            timers[k]->data = r;
            f->handles_open++;
        }
        sb_sim_stats_init(&r->stats, opts->flavor);
    }
    for (uint32_t i = 0; i < f->n && rc == 0; i++)
        rc = start_replica(&f->reps[i]);
    if (rc < 0) {
        sb_sim_fleet_stop(f);
        return rc;
    }
    *out = f;
    return 0;
}
