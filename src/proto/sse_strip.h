/* sse_strip: removes the usage-only chunk from a server-sent-event stream as it passes.
 *
 * When a client streams without asking for usage, the gateway asks for it upstream
 * (stream_options.include_usage, see sb_inspect_result.usage_edit) so that its access log and
 * token counters know a stream's prompt, cached and completion tokens. The engine then sends
 * one more event before `data: [DONE]`: `data: {..."choices":[],"usage":{...}}`. This module
 * drops that event from what the client receives, so the client gets the stream it asked for.
 *
 * Framing: events end at a blank line; lines end at \n, \r or \r\n (the SSE specification's
 * three), any of them cut anywhere across pieces. Each event is forwarded as soon as its blank
 * line arrives (a content event is never held past its own end, and a client cannot act on
 * an event before its end anyway); only the bytes of an unfinished event are held, in a
 * buffer the caller lends (cap bytes). An event longer than cap cannot be the usage chunk
 * (which is a few hundred bytes): what is held is forwarded and the rest of that event passes
 * as it arrives, counted in `overflows`. An event is dropped only when it is exactly one
 * `data:` line whose value is a JSON object with `"choices":[]` and a `usage` object; anything
 * else (comments, `event:` lines, several data lines, malformed JSON) passes untouched.
 *
 * Cost: one pass over the bytes, a copy only of an event cut across pieces (at most cap
 * bytes), one bounded JSON read of an event that names "usage" (no allocation: the tokens sit
 * on the stack). Pure: no I/O, no clock; forwarded bytes go to the caller's callback, in order,
 * as pointers into the piece being fed or into the held buffer, valid during the call only. */
#ifndef SB_PROTO_SSE_STRIP_H
#define SB_PROTO_SSE_STRIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Receives bytes to forward, in stream order. */
typedef void (*sb_sse_emit_fn)(void *ud, const char *at, size_t len);

typedef struct sb_sse_strip {
    /* public: set before the first feed */
    char *hold; /* lent buffer for an unfinished event (not owned) */
    size_t cap; /* its size in bytes; 0 passes everything through */
    sb_sse_emit_fn emit;
    void *ud;
    /* read-only */
    uint64_t stripped;  /* usage-only events dropped */
    uint64_t overflows; /* events longer than cap, passed through unexamined */
    /* private */
    size_t held;     /* bytes of the current event in hold */
    bool passing;    /* the current event overflowed: forwarded as it comes */
    bool line_empty; /* nothing yet on the current line (true at a zeroed start: see init) */
    bool after_cr;   /* the last byte was \r: a \n next ends no further line */
    uint8_t owe_lf;  /* the last event ended at a \r that ended a piece: its \n may follow */
} sb_sse_strip;

/* Readies s to strip a stream from its first byte, forwarding through emit(ud, ...), holding
 * unfinished events in hold[0..cap). */
void sb_sse_strip_init(sb_sse_strip *s, char *hold, size_t cap, sb_sse_emit_fn emit, void *ud);

/* Feeds the stream's next len bytes: forwards every event they finish (but the usage chunk)
 * and holds the start of an unfinished one. Cannot fail. */
void sb_sse_strip_feed(sb_sse_strip *s, const char *at, size_t len);

/* The stream ended: forwards an unfinished event's held bytes as they are (a client discards
 * an event without its blank line; the gateway does not decide that for it). */
void sb_sse_strip_finish(sb_sse_strip *s);

/* Whether one complete event's bytes (its lines and the blank line) are the usage-only chunk. */
bool sb_sse_is_usage_chunk(const char *ev, size_t len);

#endif
