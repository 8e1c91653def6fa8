/* sse_clock: times the events of a server-sent-event stream as its bytes arrive, for the
 * gateway's time-to-first-token and inter-token-latency figures.
 *
 * Fed the response body in whatever pieces the network delivers, it counts the events that
 * carry data (an event's first `data:` line; several data lines of one event count once) and
 * notes when the first and the latest of them arrived. `data: [DONE]`, OpenAI's end marker, is
 * not a token and is not counted. Every event is timed, the role-only first chunk included:
 * vLLM and SGLang send it in the same write as the first token, so it marks the same moment
 * and telling it apart would cost a JSON read per event.
 *
 * Linear in the bytes fed, one pass, no allocation, a few bytes of state whatever the split:
 * a `data:` cut across two pieces is found as if it came whole. Lines end at \n, \r or \r\n
 * (the SSE specification's three). Pure: the caller passes the time the piece arrived. */
#ifndef SB_PROTO_SSE_CLOCK_H
#define SB_PROTO_SSE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "base/time.h"

typedef struct sb_sse_clock {
    /* read-only */
    uint64_t events;         /* data events counted so far */
    sb_ns first_ns, last_ns; /* when the first and the latest counted event arrived; 0: none */
    /* private */
    uint8_t state;    /* where in a line the scan is (sse_clock.c) */
    uint8_t matched;  /* bytes of "data:" matched at the start of this line */
    uint8_t in_event; /* a data line of the current event was seen */
    uint8_t after_cr; /* the last byte was \r: a \n next ends no further line */
} sb_sse_clock;

/* Zeroes c: a stream not yet begun. (A zeroed struct is the same.) */
void sb_sse_clock_init(sb_sse_clock *c);

/* Scans len bytes of at, the stream's next piece, which arrived at now. Cannot fail. */
void sb_sse_clock_feed(sb_sse_clock *c, const char *at, size_t len, sb_ns now);

#endif
