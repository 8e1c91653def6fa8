#include "proto/sse_clock.h"

#include <stdbool.h>
#include <string.h>

enum {
    LINE_START = 0, /* at the first byte of a line (zero: a zeroed clock starts here) */
    FIELD,          /* matching "data:" (c->matched bytes so far) */
    VALUE_START,    /* just after "data:": an optional space, then the value's first byte */
    VALUE_SPACE,    /* after "data: ": the value's first byte */
    REST,           /* the rest of a line that is already decided: skipped to its end */
};

void sb_sse_clock_init(sb_sse_clock *c)
{
    memset(c, 0, sizeof(*c));
}

static void count(sb_sse_clock *c, char first, sb_ns now)
{
    c->state = REST;
    if (c->in_event)
        return; /* a further data line of the same event */
    c->in_event = 1;
    if (first == '[')
        return; /* [DONE]: JSON payloads open with '{' */
    if (!c->first_ns)
        c->first_ns = now;
    c->last_ns = now;
    c->events++;
}

/* The first index from i holding \n or \r, or len. Eight bytes a step (a zero byte in
 * x ^ 0x0a.. or x ^ 0x0d.. marks a line end): a decided line, which is all of a JSON answer,
 * was ~1 instruction per byte scanned one at a time (docs/benchmarks.md, proxy overhead). */
static size_t line_end(const char *at, size_t i, size_t len)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    for (; i + 8 <= len; i += 8) {
        uint64_t x;
        memcpy(&x, at + i, 8);
        uint64_t a = x ^ (ones * '\n'), b = x ^ (ones * '\r');
        if (((a - ones) & ~a & highs) | ((b - ones) & ~b & highs))
            break;
    }
    while (i < len && at[i] != '\n' && at[i] != '\r')
        i++;
    return i;
}

void sb_sse_clock_feed(sb_sse_clock *c, const char *at, size_t len, sb_ns now)
{
    static const char field[] = "data:";
    for (size_t i = 0; i < len; i++) {
        if (c->state == REST) {
            size_t j = line_end(at, i, len);
            if (j > i)
                c->after_cr = 0; /* what was skipped holds no \r */
            if ((i = j) == len)
                break;
        }
        char ch = at[i];
        if (ch == '\n' || ch == '\r') {
            bool crlf = ch == '\n' && c->after_cr;
            c->after_cr = ch == '\r';
            if (crlf)
                continue; /* the \n of \r\n: the line already ended at the \r */
            if (c->state == LINE_START)
                c->in_event = 0; /* a blank line dispatches the event */
            else if (c->state == VALUE_START || c->state == VALUE_SPACE)
                count(c, 0, now); /* "data:" with an empty value is an event still */
            c->state = LINE_START;
            c->matched = 0;
            continue;
        }
        c->after_cr = 0;
        switch (c->state) {
        case LINE_START:
        case FIELD:
            if (ch == field[c->matched]) {
                c->state = ++c->matched == 5 ? VALUE_START : FIELD;
            } else {
                c->state = REST; /* another field (event:, id:, a comment) */
            }
            break;
        case VALUE_START:
            if (ch == ' ') {
                c->state = VALUE_SPACE;
                break;
            }
            count(c, ch, now);
            break;
        case VALUE_SPACE: count(c, ch, now); break;
        default: break;
        }
    }
}
