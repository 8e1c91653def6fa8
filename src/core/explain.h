/* explain: a routing decision as a self-contained record, and its one JSON rendering.
 *
 * A decision (core/sched.h) points into the router: its candidates' endpoints, the pool's
 * scratch reused by the next pick, the copied profile. A record copies what explaining it
 * needs (the pool's and profile's names, each candidate's address, filter verdict, total,
 * per-scorer scores, prefix match and flags) into fixed-size fields, so it stays true after
 * the next pick, a reload or the router's end: nothing in it points at configuration or
 * endpoint memory. The strings it keeps as pointers are static (filter, scorer and picker
 * names from the plug-in registry, core/plugins.c, and the decision's reason literals).
 *
 * Used by the access log's `decision` field (sb_decision_render) and the gateway's ring of
 * recent decisions (net/decisions.h), so both render one shape. Copying is bounded: names and
 * addresses are cut at fixed lengths, and a record holds at most the candidates its owner
 * sized it for; when a pool has more, the pick and the best-scored others are kept (the
 * rest counted in `omitted`). Not for: deciding anything (it is a copy).
 *
 * Pure: no I/O, no clock (the time of the decision is an argument). */
#ifndef SB_CORE_EXPLAIN_H
#define SB_CORE_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "core/sched.h"

#define SB_EXPLAIN_ID_MAX 128    /* request id (net's x-request-id bound) */
#define SB_EXPLAIN_MODEL_MAX 128 /* the model name asked; longer ones are cut */
#define SB_EXPLAIN_NAME_MAX 64   /* pool and profile names: the configuration allows 63 bytes */
/* "host:port" with its NUL: the configuration allows a 253-byte host name (RFC 1035's limit),
 * so ':' and a 5-digit port make 259 bytes; 262 would also hold that host in brackets. A record
 * is ~6 KiB at 16 candidates (336 bytes each, most of it this field). */
#define SB_EXPLAIN_ADDR_MAX 262

typedef struct sb_explain_cand {
    char endpoint[SB_EXPLAIN_ADDR_MAX]; /* the address, cut at SB_EXPLAIN_ADDR_MAX - 1 bytes */
    const char *removed_by;             /* static filter name, NULL if it stayed a candidate */
    float total;
    float scores[SB_MAX_SCORERS]; /* in the record's scorer order; meaningful if kept */
    uint32_t index;               /* its position in the pool */
    uint32_t prefix_blocks;
    uint8_t prefix_source; /* enum sb_prefix_source */
    bool stale, serving, panic;
} sb_explain_cand;

/* How the request ended, set after the decision (net/decisions.h). */
typedef struct sb_explain_outcome {
    bool set;
    int status;                          /* what the client got (499: it left first) */
    double ttft_ms;                      /* first token (a stream) or first byte; < 0: none */
    uint32_t attempts;                   /* dispatches to an endpoint, retries included */
    char served_by[SB_EXPLAIN_ADDR_MAX]; /* the endpoint that answered last; "" if none */
} sb_explain_outcome;

typedef struct sb_explain {
    char id[SB_EXPLAIN_ID_MAX + 1];
    char model[SB_EXPLAIN_MODEL_MAX + 1];
    char pool[SB_EXPLAIN_NAME_MAX];
    char profile[SB_EXPLAIN_NAME_MAX];
    int64_t at_ms;                       /* unix time of the decision, ms */
    const char *picker;                  /* static */
    const char *reason;                  /* static */
    const char *scorers[SB_MAX_SCORERS]; /* static names, n_scorers of them */
    uint8_t n_scorers;
    bool panic;
    uint32_t hot_blocks; /* the request's hot prefix run (profile hot_prefix), 0: none */
    float hot_needed;    /* ...and the holders its demand needs */
    int32_t picked;   /* index into cands[], -1: none */
    uint32_t n_cands; /* kept, in pool order */
    uint32_t omitted; /* the pool's other candidates, not kept */
    sb_explain_outcome outcome;
    /* The request left the pool it asked for (a pool's fallbacks): that pool's name, and why
     * (static). fallback_from "": it did not. */
    char fallback_from[SB_EXPLAIN_NAME_MAX];
    const char *fallback_reason;
    sb_explain_cand cands[]; /* the owner sizes it: sb_explain_size */
} sb_explain;

/* Bytes a record of up to max_cands candidates takes. */
static inline size_t sb_explain_size(size_t max_cands)
{
    return sizeof(sb_explain) + max_cands * sizeof(sb_explain_cand);
}

/* Copies d into rec (sized for max_cands >= 1 candidates), with the request's id and model
 * (NULL: "") and the decision's time. The outcome is cleared. Every string is copied,
 * bounded; nothing in rec refers to d afterwards. */
void sb_explain_fill(sb_explain *rec, size_t max_cands, const sb_decision *d, const char *id, const char *model,
                     int64_t at_ms);

enum sb_explain_render {
    SB_EXPLAIN_DECISION = 0, /* the decision alone: the access log's field (its line has the id) */
    SB_EXPLAIN_FULL = 1,     /* with id, at_ms, model and outcome: /debug/decisions */
};

/* Appends rec as one JSON object to b:
 *   {["id","at_ms","model",] "pool","profile","picker","reason","picked":"<address>"|null,
 *    "picked_index", ["fallback":{"from":"<pool asked for>","reason":...},]
 *    "candidates":[{"endpoint":"<address>","index","stale",["serving",]
 *    ["panic",] ["removed_by":"<filter>" | "total","scores":{...}] ["prefix":{...}]}],
 *    ["omitted",] ["outcome":{...}|null]}
 * (docs/operations.md shows one). 0, or -1 on ENOMEM. */
int sb_explain_render(const sb_explain *rec, enum sb_explain_render how, sb_buf *b);

/* Renders d (every candidate) as sb_explain_render's SB_EXPLAIN_DECISION shape: a record is
 * filled on the heap for it. 0, or -1 on ENOMEM. */
int sb_decision_render(const sb_decision *d, sb_buf *b);

#endif
