/* workload: the requests a replay offers to the fleet, whatever their origin (a trace file or a
 * named generator), and the one rule that turns their content into token ids.
 *
 * Content. A prompt is a list of spans; a span is (content id, length): tokens
 * sb_replay_token(id, 0..length-1). Two prompts share a prefix exactly when their span lists
 * agree up to it, so sharing is declared, never discovered. Traces map their block ids to
 * spans (a Mooncake hash id is a span of 512 tokens, shorter for a prompt's last block); the
 * generators allocate span ids for system prompts, questions, turns and answers. The token ids
 * then feed the engines' prefix caches (16-token blocks, chained) and the router's index
 * (docs/replay.md explains how the block sizes relate).
 *
 * Arrivals. Requests are either roots, arriving at arrival_ns after the start, sorted by it, or
 * follow-ups (the next turn of a conversation): a follow-up arrives think_ns after the client
 * received the whole answer to its parent, so it depends on how fast the fleet served the
 * parent (closed loop per conversation, as a person in a chat behaves). A root's followup
 * field names its next turn.
 *
 * Generators are plug-ins, one file each under replay/generators/, listed in one table in
 * workload.c, each with a parameter table (name, default, bounds, help) that the command line
 * fills from k=v arguments. Generation is seeded (xorshift) and deterministic.
 *
 * Not for: running anything (replay/driver.h) or reading files (replay/trace.h). */
#ifndef SB_REPLAY_WORKLOAD_H
#define SB_REPLAY_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

#define SB_REPLAY_NO_REQUEST UINT32_MAX

typedef struct sb_replay_span {
    uint64_t id;  /* content id; see the namespaces below */
    uint32_t len; /* tokens */
} sb_replay_span;

typedef struct sb_replay_request {
    sb_ns arrival_ns;    /* root: time after the start; follow-up: ignored */
    sb_ns think_ns;      /* follow-up: delay after its parent's answer; root: 0 */
    uint32_t first_span; /* into the workload's spans */
    uint32_t n_spans;
    uint32_t n_prompt;   /* tokens: the sum of the spans' lengths, >= 1 */
    uint32_t max_tokens; /* tokens to generate, >= 1 */
    uint32_t adapter;    /* 0 = base model, k = the workload's k-th adapter (1-based) */
    uint32_t followup;   /* index of the next turn, or SB_REPLAY_NO_REQUEST */
    uint64_t session;    /* conversation or user key, 0 if none (the gateway's session key) */
    bool is_followup;
} sb_replay_request;

/* A workload owns its arrays. Zero-initialised is empty; free with sb_replay_workload_free. */
typedef struct sb_replay_workload {
    sb_replay_request *reqs;
    size_t n, cap;
    sb_replay_span *spans;
    size_t n_spans, spans_cap;
    uint32_t n_adapters; /* adapters used: 1..n_adapters */
    uint32_t max_prompt; /* longest prompt, tokens */
    double rate;         /* offered root arrival rate, requests/s (as generated or measured) */
    char name[96];       /* generator name or trace file base name */
} sb_replay_workload;

/* Span id namespaces: the top byte says who allocated the id, so that a trace's block ids and
 * a generator's counters never collide. */
#define SB_REPLAY_NS_TRACE_BLOCK 0x01ULL /* Mooncake hash_ids */
#define SB_REPLAY_NS_UNIQUE 0x02ULL      /* content of one request only (counters) */
#define SB_REPLAY_NS_SHARED 0x03ULL      /* generator shared content (system prompts, ...) */
static inline uint64_t sb_replay_span_id(uint64_t ns, uint64_t n)
{
    return ns << 56 | (n & ((1ULL << 56) - 1));
}

/* The token id at position i of content `id`: the low 31 bits of a splitmix64 mix of (id, i),
 * like the simulator's tokenizer's ids (31 bits). Pure; the whole replay's sharing rests on it. */
static inline uint32_t sb_replay_token(uint64_t id, uint32_t i)
{
    uint64_t z = id * 0x9E3779B97F4A7C15ULL + (uint64_t)i * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (uint32_t)((z ^ (z >> 31)) & 0x7FFFFFFFu);
}

/* Writes request r's prompt tokens (r->n_prompt of them) to out. Pure. */
void sb_replay_prompt_tokens(const sb_replay_workload *w, const sb_replay_request *r, uint32_t *out);

/* Appends a request with its spans (copied); sets n_prompt from them. Returns its index, or -1
 * on ENOMEM or on more than 2^32 - 2 requests or spans (the workload is unchanged then). */
long sb_replay_workload_add(sb_replay_workload *w, const sb_replay_request *r, const sb_replay_span *spans,
                            uint32_t n_spans);
/* Drops the first k requests of a workload of roots only (a trace's): what is left starts at
 * time 0 (the first kept request's arrival) and its rate is measured again over the kept span,
 * as a trace's is. Returns 0, or -EINVAL when k >= n or the workload has conversations
 * (follow-ups, or requests naming a next turn: indices would dangle); *w is unchanged then.
 * The spans stay (unreferenced ones cost memory only). */
int sb_replay_workload_skip(sb_replay_workload *w, size_t k);
/* A trace's rate, requests/s: n - 1 arrivals over the span from the first (at 0) to the last,
 * the requests sorted by arrival; 0 for a span of no time. */
void sb_replay_workload_measure_rate(sb_replay_workload *w);
/* Number of root requests (those that arrive on their own). */
size_t sb_replay_workload_roots(const sb_replay_workload *w);
void sb_replay_workload_free(sb_replay_workload *w);

/* ---- generators ---------------------------------------------------------------------------- */

#define SB_REPLAY_MAX_PARAMS 12

typedef struct sb_replay_param {
    const char *name;
    double def, min, max;
    const char *help;
} sb_replay_param;

/* What every generator takes besides its own parameters. */
typedef struct sb_replay_gen_opts {
    double rate;       /* requests/s offered (Poisson), > 0 */
    uint64_t requests; /* stop after this many requests (0: no limit, then duration_ns bounds) */
    sb_ns duration_ns; /* stop arrivals after this (0: no limit, then requests bounds) */
    uint64_t seed;
} sb_replay_gen_opts;

typedef struct sb_replay_generator {
    const char *name;
    const char *summary;           /* one line, with the source of its defaults */
    const sb_replay_param *params; /* terminated by a NULL name; at most SB_REPLAY_MAX_PARAMS */
    /* Fills an empty w from parameter values (in table order). Returns 0, -ENOMEM, or -EINVAL
     * with a message in err. */
    int (*generate)(const double *values, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap);
} sb_replay_generator;

/* Helpers for generators: seeded xorshift draws. */
double sb_replay_exp(uint64_t *rng, double mean);    /* exponential with that mean */
uint64_t sb_replay_below(uint64_t *rng, uint64_t n); /* uniform in [0, n), n >= 1 */
/* True while a generator should add another root arriving at t. */
bool sb_replay_gen_more(const sb_replay_gen_opts *o, uint64_t added, sb_ns t);

#endif
