/* usage: finds the token usage an OpenAI-style response reports, in the last bytes of its
 * body: the `usage` object of a JSON answer, or of the final chunk of a stream
 * (stream_options.include_usage), with prompt_tokens, completion_tokens and
 * prompt_tokens_details.cached_tokens.
 *
 * The proxy keeps only a bounded tail of each response (usage comes last in every server
 * we know of), so this never needs the whole body. Pure; never reads past len. */
#ifndef SB_PROTO_USAGE_H
#define SB_PROTO_USAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sb_usage {
    bool found;
    int64_t prompt_tokens;     /* -1 when absent */
    int64_t completion_tokens;
    int64_t cached_tokens;
} sb_usage;

/* Scans text for the last "usage" object and reads its counts into *out. */
void sb_usage_scan(const char *text, size_t len, sb_usage *out);
/* Keeps the last cap bytes of a body arriving in pieces (usage comes last): appends at[0..n)
 * to tail (*len bytes held, at most cap), dropping the oldest. */
void sb_usage_tail_push(char *tail, size_t cap, size_t *len, const void *at, size_t n);

#endif
