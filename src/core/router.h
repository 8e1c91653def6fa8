/* router: the interface the routing core exposes to the data path (and, later, to replay).
 *
 * The data path asks two things: which pool serves a requested model name (served name,
 * alias or LoRA adapter), and which endpoint of that pool should take a request. It then
 * reports what happened to the request: dispatched, first byte, completed, failed. The
 * router keeps its own per-endpoint accounting (in-flight requests) from those reports.
 *
 * Built by the caller from its configuration (core never sees config files): pools,
 * endpoints per pool, model names. Pure: no I/O, no clock; `now` is an argument. Owns
 * copies of every string given to it. Not thread-safe: one owner (the event loop). */
#ifndef SB_CORE_ROUTER_H
#define SB_CORE_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "core/policy.h"

typedef struct sb_router sb_router;

/* What the router counts per endpoint; read-only for callers. */
typedef struct sb_endpoint_stats {
    uint32_t in_flight;      /* dispatched, not yet completed or failed */
    uint64_t dispatched;
    uint64_t completed;
    uint64_t failed;         /* connect failures, upstream errors before completion */
    sb_ns last_dispatch_ns;
    sb_ns last_first_byte_ns;
} sb_endpoint_stats;

/* The pool a model name resolves to. */
typedef struct sb_model_match {
    uint32_t pool;
    int adapter;             /* index into the pool's adapters, or -1 for a base model */
    bool is_alias;           /* the name is an alias: forward `served` instead */
    const char *served;      /* the pool's served model name (owned by the router) */
    size_t served_len;
    const char *name;        /* the canonical name this match was registered under */
} sb_model_match;

/* A request as the core sees it: never text, only what routing needs. */
typedef struct sb_route_request {
    uint32_t pool;
    int adapter;
    const uint64_t *block_hashes;  /* chained prefix-block hashes (proto/inspect.h) */
    size_t n_blocks;
    size_t prompt_bytes;
    const uint32_t *exclude;       /* endpoints not to pick (already failed for this request) */
    size_t n_exclude;
} sb_route_request;

sb_router *sb_router_new(uint64_t seed);
void sb_router_free(sb_router *r);

/* Adds a pool with `n_endpoints` endpoints and a policy; returns its index or -1 (ENOMEM). */
int sb_router_add_pool(sb_router *r, const char *name, enum sb_policy_kind policy, size_t n_endpoints);

/* Registers a model name for a pool: kind 0 = served name (the first registered becomes the
 * pool's `served`), 1 = alias, 2 = adapter (adapter index is its order of registration).
 * Returns 0, -1 on ENOMEM, -2 if the name is already registered. */
enum sb_model_kind { SB_MODEL_SERVED = 0, SB_MODEL_ALIAS = 1, SB_MODEL_ADAPTER = 2 };
int sb_router_add_model(sb_router *r, uint32_t pool, const char *name, enum sb_model_kind kind);

/* Resolves a model name; returns 0 and fills *out, or -1 if no pool serves it. */
int sb_router_resolve(const sb_router *r, const char *name, size_t len, sb_model_match *out);

/* Picks an endpoint index within req->pool, or returns -1 if every endpoint is excluded. */
int sb_router_pick(sb_router *r, const sb_route_request *req, sb_ns now);

void sb_router_dispatched(sb_router *r, uint32_t pool, uint32_t ep, sb_ns now);
void sb_router_first_byte(sb_router *r, uint32_t pool, uint32_t ep, sb_ns now);
void sb_router_completed(sb_router *r, uint32_t pool, uint32_t ep, int status, sb_ns now);
void sb_router_failed(sb_router *r, uint32_t pool, uint32_t ep, sb_ns now);

size_t sb_router_pool_count(const sb_router *r);
size_t sb_router_endpoint_count(const sb_router *r, uint32_t pool);
const char *sb_router_pool_name(const sb_router *r, uint32_t pool);
enum sb_policy_kind sb_router_pool_policy(const sb_router *r, uint32_t pool);
const sb_endpoint_stats *sb_router_endpoint_stats(const sb_router *r, uint32_t pool, uint32_t ep);

#endif
