/* trace: parsers of public LLM serving traces into a replay workload.
 *
 * - Mooncake JSONL (kvcache-ai/Mooncake, FAST'25 traces, Apache-2.0): one JSON object per
 *   line with `timestamp` (ms since the trace start), `input_length`, `output_length` (tokens)
 *   and `hash_ids`, the ids of the prompt's 512-token blocks (chained: equal ids at a position
 *   mean equal prompts up to the end of that block). Each id becomes a span of 512 tokens (the
 *   last block: whatever input_length leaves), so prompts share exactly the trace's prefixes.
 *   Prompt tokens beyond the listed blocks, if any, are unique content. Other keys are skipped.
 * - Azure LLM inference traces (Azure/AzurePublicDataset, 2023, CC-BY-4.0): CSV with the header
 *   `TIMESTAMP,ContextTokens,GeneratedTokens` and timestamps like `2023-11-16 18:17:03.9799600`
 *   (UTC, up to 9 fractional digits), relative to the first row. They carry no prefix
 *   information: every prompt is unique content.
 * Requests are sorted by time (stably); an output length of 0 becomes 1 (the engine generates
 * at least one token). The format is chosen by sb_replay_trace_load from the first
 * non-blank byte ('{' is Mooncake, anything else Azure).
 *
 * Parsers take text in memory (the caller reads the file), never read past `len`, and report
 * the first malformed line as "LINE: message". On failure the workload is left empty. */
#ifndef SB_REPLAY_TRACE_H
#define SB_REPLAY_TRACE_H

#include <stddef.h>

#include "replay/workload.h"

#define SB_REPLAY_TRACE_BLOCK_TOKENS 512 /* Mooncake's hash_ids block size (its README) */

typedef struct sb_replay_trace_error {
    size_t line; /* 1-based; 0 when not tied to a line (ENOMEM, empty trace) */
    char message[200];
} sb_replay_trace_error;

/* Each returns 0 and fills an empty *w, -EINVAL (malformed: *err says where and why) or
 * -ENOMEM. max_requests > 0 stops after that many lines of requests. */
int sb_replay_trace_mooncake(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                             sb_replay_trace_error *err);
int sb_replay_trace_azure(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                          sb_replay_trace_error *err);
/* Picks the parser by content (see above). */
int sb_replay_trace_parse(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                          sb_replay_trace_error *err);

#endif
