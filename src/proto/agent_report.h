/* agent_report: the body of POST /admin/agents/report, the state an agent beside a model
 * server (`switchboard agent`) pushes to the gateway, read into one fixed-size struct.
 *
 * The contract (docs/agents.md):
 *   {"agent":"id", "address":"host:port", "engine":"llama.cpp", "models":["m", ...],
 *    "slots":{"total":N,"idle":N}, "queue":N, "running":N, "kv_usage":0..1, "seq":N,
 *    "interval_ms":N}
 * address is required; every other field is optional (null counts as absent). Unknown keys
 * are ignored, so an agent newer than the gateway can add fields. A duplicate key: the last
 * one wins, as in Python's json module.
 *
 * Hostile input is refused, never truncated silently: a string longer than its field (ids
 * 63 bytes, addresses 255, engine 31, model names 127), more than SB_AGENT_MAX_MODELS models,
 * a control character or NUL in a string (after unescaping), a count that is negative, not
 * an integer or above SB_AGENT_MAX_COUNT, slots.idle above slots.total, kv_usage outside
 * [0,1], a wrong type, nesting deeper than 4 levels, or malformed JSON. The error names the
 * field.
 *
 * Pure: no I/O, no allocation (the JSON tokens go to caller scratch), linear in the body
 * (proto/json.h). Not for: deciding what a report changes (net/agent_reports.c applies it to
 * the endpoints, core/endpoint.h keeps it). */
#ifndef SB_PROTO_AGENT_REPORT_H
#define SB_PROTO_AGENT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SB_AGENT_MAX_MODELS 16
#define SB_AGENT_ID_MAX 64       /* bytes with the NUL */
#define SB_AGENT_ADDRESS_MAX 256 /* host:port, with the NUL */
#define SB_AGENT_ENGINE_MAX 32
#define SB_AGENT_MODEL_MAX 128
/* Counts (slots, queue, running) above this are not a model server's: refused. */
#define SB_AGENT_MAX_COUNT 1000000
/* Tokens a report can need: the fields above plus slack for unknown keys. Scratch of
 * SB_AGENT_SCRATCH_BYTES holds them; a body with more tokens is refused. */
#define SB_AGENT_MAX_TOKENS 512
#define SB_AGENT_SCRATCH_BYTES (SB_AGENT_MAX_TOKENS * 20)

typedef struct sb_agent_report {
    char agent[SB_AGENT_ID_MAX]; /* "" when absent */
    char address[SB_AGENT_ADDRESS_MAX];
    char engine[SB_AGENT_ENGINE_MAX]; /* "" when absent */
    uint32_t n_models;
    char models[SB_AGENT_MAX_MODELS][SB_AGENT_MODEL_MAX];
    bool have_slots, have_queue, have_running, have_kv, have_seq;
    uint32_t slots_total, slots_idle;
    uint32_t queue, running;
    double kv_usage;
    uint64_t seq;
    uint32_t interval_ms; /* the agent's reporting interval; 0 when absent */
} sb_agent_report;

enum { SB_AGENT_REPORT_BAD = -1 };

/* Parses body[0..len) into *out. scratch: caller memory for the JSON tokens (aligned for int,
 * SB_AGENT_SCRATCH_BYTES is enough for any report this accepts). Returns 0, or
 * SB_AGENT_REPORT_BAD with a sentence naming the problem in err (NUL-terminated, cut to
 * err_cap); *out is then unspecified. */
int sb_agent_report_parse(const char *body, size_t len, void *scratch, size_t scratch_bytes, sb_agent_report *out,
                          char *err, size_t err_cap);

/* Writes r as a report body (the contract above; absent fields left out, strings escaped)
 * to b. Returns 0, or -1 when b could not grow. What it writes, sb_agent_report_parse reads
 * back to the same fields. */
struct sb_buf;
int sb_agent_report_render(const sb_agent_report *r, struct sb_buf *b);

/* Reads the served model ids from an OpenAI GET /v1/models body ({"data":[{"id":..},..]})
 * into r->models (the first SB_AGENT_MAX_MODELS; an id too long or with control characters
 * is skipped). scratch as for the parser; a body whose tokens do not fit it is refused.
 * Returns the number of models read (>= 0; r->n_models), or SB_AGENT_REPORT_BAD. */
int sb_agent_models_parse(const char *body, size_t len, void *scratch, size_t scratch_bytes, sb_agent_report *r);

#endif
