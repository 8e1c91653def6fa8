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

void sb_sse_clock_feed(sb_sse_clock *c, const char *at, size_t len, sb_ns now)
{
    static const char field[] = "data:";
    for (size_t i = 0; i < len; i++) {
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
