/* exchange: the values an exchange (one proxied request) carries between the gateway, admission
 * and the proxy: what was routed, under which configuration, what it counts, what it leaves
 * for the access log and metrics. Types only. */
#ifndef SB_NET_EXCHANGE_H
#define SB_NET_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/time.h"
#include "proto/auth.h"
#include "proto/config.h"
#include "proto/usage.h"

typedef struct sb_gateway_counters {
    uint64_t requests;         /* requests read */
    uint64_t proxied;          /* requests forwarded */
    uint64_t retries;          /* further attempts on another endpoint (net/proxy.c) */
    uint64_t retries_budget_denied; /* retries the retry budget refused (core/retry.h) */
    uint64_t exchanges_live;        /* proxied requests in flight (the retry budget's base) */
    uint64_t retries_live;          /* ...of which past their first attempt */
    uint64_t upstream_errors;  /* failed before the response started (502/504) */
    uint64_t midstream_errors; /* upstream died after the response started */
    uint64_t client_aborts;    /* client left while its request was in flight */
    uint64_t rejected;         /* answered with 4xx by the gateway itself */
    uint64_t orca_reports;     /* endpoint-load-metrics headers applied */
    uint64_t usage_stripped;   /* usage-only chunks the gateway asked for, kept from clients */
    uint64_t usage_overflows;  /* events past limits.max_held_event_bytes, passed unexamined */
    uint64_t refused[2];       /* flow control: [0] 429 (queue full, shed), [1] 503 (timeout, none healthy) */
    uint64_t unauthorized[2];  /* 401: [0] client API key, [1] admin token */
    uint64_t upstream_tls_resumed, upstream_tls_full; /* handshakes toward https:// endpoints */
} sb_gateway_counters;

/* A configuration in use: the current one, or a retired one still referenced by requests
 * that started under it (they finish with the profile they started with). */
typedef struct sb_snapshot {
    sb_config *cfg;
    size_t refs;              /* exchanges holding it, plus 1 while current */
    struct sb_snapshot *next; /* retired snapshots */
} sb_snapshot;

/* Who asked, and how: the request's identity in the access log. The gateway fills it from
 * the request (net/routes.c) and the exchange keeps a copy for when the client is gone. */
#define SB_REQUEST_ID_MAX 128 /* longest x-request-id kept from a client (a UUID is 36) */
#define SB_LOG_PATH_MAX 128   /* a longer path is cut in the log line */
typedef struct sb_request_ident {
    char id[SB_REQUEST_ID_MAX + 1]; /* x-request-id: the client's if sane, else generated */
    char peer[64];                  /* client address "ip:port" */
    char path[SB_LOG_PATH_MAX + 1]; /* URL path, cut at SB_LOG_PATH_MAX bytes */
    int method;                     /* enum http_method; -1 when the head was not parsed */
    const char *proto;              /* "h2", "http/1.1" or "http/1.0" (a string literal) */
} sb_request_ident;

/* Why a request left its pool for a fallback (net/fallback.h). */
enum sb_fallback_reason {
    SB_FALLBACK_SATURATED = 0, /* flow control refused it, or dropped it from the queue */
    SB_FALLBACK_FAILED,        /* every attempt failed before the first response byte */
    SB_FALLBACK_UNAVAILABLE,   /* no endpoint of the pool was available */
    SB_FALLBACK_REASONS
};

/* A routed request, as the gateway hands it to admission and the proxy. */
typedef struct sb_proxy_target {
    uint32_t pool;
    int adapter;
    const char *served; /* non-NULL: splice this name into the body's model field */
    bool insert_model;  /* no model field: insert "model":served at model_tok_start */
    bool insert_comma;  /* the insertion is followed by another member */
    size_t served_len;
    size_t model_tok_start, model_tok_end;
    int stream;
    /* upstream.stream_usage: a stream that did not ask for usage is asked for it upstream
     * (body[usage_edit_start, usage_edit_end) replaced by usage_edit, a static string) and the
     * usage-only chunk is stripped from what the client receives (proto/sse_strip.h).
     * usage_edit NULL: the body goes as it is, and nothing is stripped. */
    const char *usage_edit;
    size_t usage_edit_len;
    size_t usage_edit_start, usage_edit_end;
    const char *model; /* as requested, for the access log */
    /* who asked (gateway.c, from the Authorization bearer token) */
    uint64_t key_id;                     /* 64 bits of the token's SHA-256; 0: no bearer token */
    int key_band;                        /* the matched key's band (enum sb_band); -1: none named */
    char tenant[SB_AUTH_TENANT_MAX + 1]; /* the key's tenant; "" if none named */
    int band;                            /* set by admission: the band it queued the request in; -1 */
    sb_request_ident ident;              /* for the access log and the upstream request's head */
    /* Fallbacks (net/fallback.h): set when the request left the pool it asked for. Zeroed: it
     * did not, and requested_pool is pool. fallback_next: the next entry of the requested
     * pool's `fallbacks:` to try (each is tried once, in order). */
    bool fell_back;
    uint8_t fallback_next;
    uint8_t fallback_reason; /* enum sb_fallback_reason of the last move */
    uint32_t requested_pool;
} sb_proxy_target;

/* What the access log and metrics learn of one request when it ends. Every request the client
 * listener reads leaves exactly one of these (docs/observability.md lists the log fields).
 * outcome (with reason, a code naming why, or NULL):
 *   ok               answered 1xx-3xx by an endpoint
 *   upstream_4xx     an endpoint's 4xx passed through
 *   upstream_5xx     an endpoint's 5xx passed through (reason: none; upstream_status says which)
 *   rejected         the gateway answered 4xx itself (reason: the error code)
 *   refused          flow control or availability refused it (429/503; reason: queue_full, ...)
 *   gateway_error    the gateway answered 5xx itself (out of memory)
 *   upstream_error   failed before the response started: 502/504 (reason: the error code)
 *   midstream_error  the endpoint failed after the response started (counted apart from 2xx)
 *   client_abort     the client left (reason: queued, in_flight)
 *   drain_cut        still running at the end of the drain window (shutdown.drain_ms), or queued
 *                    when the gateway stopped (reason queued) */
typedef struct sb_exchange_log {
    int pool;            /* -1: refused before a pool was chosen */
    int ep;              /* -1: never dispatched */
    int adapter;         /* the pool's adapter asked for, -1: its base model (an alias too); the
                          * model label's slot (net/stats.h). Set by whoever sets pool and not
                          * gateway_answer: 0 is an adapter */
    int status;          /* sent to the client; 499 if it left before the answer */
    int upstream_status; /* the endpoint's status; 0: no response head was read */
    const char *outcome; /* see above */
    const char *reason;  /* NULL: none */
    const char *model;
    bool stream;
    uint64_t bytes_out;
    sb_ns t_start, t_first_byte, t_end;
    sb_ns t_first_token;   /* a stream's first data event, else the first body byte; 0: none */
    sb_ns t_last_token;    /* a stream's latest data event; 0: not a stream */
    uint64_t token_events; /* a stream's data events (0: not a stream, or none came) */
    int retries; /* attempts after the first on another endpoint */
    sb_usage usage;
    const char *decision;          /* JSON of the pick, or NULL */
    const char *band;              /* flow-control band's name, NULL if none was decided */
    const char *tenant;            /* the API key's tenant, or NULL */
    const sb_request_ident *ident; /* NULL: unknown (logged as empty strings) */
    bool gateway_answer;           /* answered by the gateway, never dispatched: a log line, no
                                    * pool or endpoint metrics */
    /* Served by a fallback (net/fallback.h): pool is the fallback's, requested_pool the pool the
     * request asked for, fallback_reason why it left (a static name). */
    bool fell_back;
    uint32_t requested_pool;
    const char *fallback_reason;
} sb_exchange_log;

#endif
