/* server_internal: what the files of the live simulator share, and nothing else.
 * Private to src/sim/server*.c; the public contract is sim/server.h.
 *
 * server.c holds the fleet, the replicas' listeners and faults, and the OpenAI routes (requests
 * live from submission to the engine until their response ends); server_metrics.c the
 * /metrics route (with its delay and hang faults, which park the request) and /slots;
 * server_info.c /v1/models, /tokenize and the model-name check. */
#ifndef SB_SIM_SERVER_INTERNAL_H
#define SB_SIM_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "net/http_server.h"
#include "sim/engine.h"
#include "sim/server.h"
#include "sim/sim_metrics.h"
#include "sim/sim_request.h"

typedef struct replica replica;

typedef struct sim_req {
    replica *rep;
    sb_http_req *http;
    struct sim_req *prev, *next; /* live list, in arrival order */
    uint64_t id;                 /* engine id: generation << 32 | slot */
    uint32_t slot;
    bool chat, stream, include_usage;
    sb_sim_orca orca;
    uint32_t max_tokens, emitted;
    uint64_t created; /* unix seconds */
    char rid[48];     /* "chatcmpl-..." / "cmpl-..." */
    char model[SB_SIM_MODEL_MAX + 1];
} sim_req;

/* A GET /metrics held back by a fault. */
typedef struct parked {
    struct parked *prev, *next;
    replica *rep;
    sb_http_req *http;
    uint64_t due_ns; /* uv_hrtime deadline; UINT64_MAX: never (hang) */
} parked;

struct replica {
    sb_sim_fleet *fleet;
    uint32_t index;
    uint16_t port;
    bool faulty;
    bool in_advance;
    bool down;           /* restart fault: between going down and listening again */
    sb_http_server *srv; /* NULL while not listening */
    sb_engine *engine;
    sb_kv_pub *kv; /* NULL without KV events */
    sb_sim_stats stats;
    uv_timer_t step_timer, metrics_timer, restart_timer;
    sim_req *head, *tail;
    sim_req **slots;      /* id lookup: slots[id & 0xffffffff] */
    uint32_t *free_slots; /* stack of free slot indices */
    uint32_t cap_slots, n_free;
    uint64_t generation;
    parked *parked_head, *parked_tail;
};

struct sb_sim_fleet {
    uv_loop_t *loop;
    sb_sim_opts opts; /* strings below are the fleet's copies */
    char *host, *model;
    char **adapters;
    char *kv_endpoint, *kv_replay, *kv_topic; /* copies of opts.kv's strings */
    void *zctx;                               /* zmq context of the publishers, or NULL */
    uint32_t max_model_len;
    uint64_t start_ns;
    uint64_t rng;
    replica *reps;
    uint32_t n;
    int handles_open;
    bool stopping;
    bool draining; /* listeners closed for good (sb_sim_fleet_drain): no restart listens again */
};

/* ---- server.c ---- */

/* Answers with vLLM's error body shape ({"error":{...}} with the HTTP status as the code). */
void srv_respond_error(sb_http_req *h, int status, const char *type, const char *message, const char *extra_headers);
/* Answers b as JSON, or 500 if building b ran out of memory (b->data is NULL). */
void srv_respond_json(sb_http_req *h, int status, sb_buf *b);

/* ---- server_info.c ---- */

/* The engine adapter id for a model name: 0 for the base model, i + 1 for adapter i, -1 if
 * the replica does not serve it. */
int srv_model_adapter(const sb_sim_fleet *f, const sb_sim_request *pr);
/* 404 in vLLM's words. */
void srv_respond_unknown_model(sb_http_req *h, const char *model);
/* GET /v1/models: the model and its adapters. */
void srv_handle_models(replica *r, sb_http_req *h);
/* POST /tokenize: vLLM's answer shape, the same ids the engine caches for the request. */
void srv_handle_tokenize(replica *r, sb_http_req *h);

/* ---- server_metrics.c ---- */

/* GET /metrics: answers now, or parks the request when the replica's metrics fault says so. */
void srv_handle_metrics(replica *r, sb_http_req *h);
/* GET /slots: llama.cpp's view of the replica's sequences. */
void srv_handle_slots(replica *r, sb_http_req *h);
/* Forgets a parked /metrics request without answering it (the replica stops listening). */
void srv_unpark(parked *p);

#endif
