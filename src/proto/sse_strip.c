/* sse_strip: the usage-only chunk taken out of a stream (see sse_strip.h). */
#include "proto/sse_strip.h"

#include <string.h>

#include "proto/json.h"

enum { LF_NONE = 0, LF_FORWARD, LF_DROP };

/* A usage chunk is about 25 tokens (id, object, created, model, choices, usage and its five
 * counts); 64 leaves room for system_fingerprint and the like. A content chunk that needs more
 * is not the usage chunk, and the parse stops at the bound. */
#define USAGE_CHUNK_MAX_TOKENS 64

void sb_sse_strip_init(sb_sse_strip *s, char *hold, size_t cap, sb_sse_emit_fn emit, void *ud)
{
    memset(s, 0, sizeof(*s));
    s->hold = hold;
    s->cap = cap;
    s->emit = emit;
    s->ud = ud;
    s->line_empty = true;
}

static size_t line_end(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] != '\n' && p[i] != '\r')
        i++;
    return i;
}

/* The length of the line terminator at p (\n, \r or \r\n), 0 if none. */
static size_t terminator(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (p[0] == '\n')
        return 1;
    if (p[0] != '\r')
        return 0;
    return n > 1 && p[1] == '\n' ? 2 : 1;
}

bool sb_sse_is_usage_chunk(const char *ev, size_t len)
{
    /* One line, "data:" and an optional space, then the blank line and nothing else. */
    size_t e = line_end(ev, len);
    size_t t1 = terminator(ev + e, len - e);
    size_t rest = t1 ? len - e - t1 : 0;
    if (e < 5 || memcmp(ev, "data:", 5) != 0 || rest == 0 || terminator(ev + e + t1, rest) != rest)
        return false;
    const char *v = ev + 5;
    size_t vlen = e - 5;
    if (vlen && *v == ' ') {
        v++;
        vlen--;
    }
    /* Most events do not name usage: skip the JSON read for them. A "usage" inside generated
     * text is escaped there (\"usage\"), so this never misses the field itself. */
    if (!memmem(v, vlen, "\"usage\"", 7))
        return false;
    sb_json_tok toks[USAGE_CHUNK_MAX_TOKENS];
    sb_json j = {0};
    sb_json_lend(&j, toks, sizeof toks);
    int n = sb_json_parse(&j, v, vlen);
    if (n < 1 || toks[0].type != SB_JSON_OBJECT)
        return false;
    static const sb_json_key keys[] = {{"choices", 7}, {"usage", 5}};
    int val[2];
    sb_json_find_keys(toks, n, v, 0, keys, 2, val);
    return val[0] >= 0 && toks[val[0]].type == SB_JSON_ARRAY && toks[val[0]].size == 0 && val[1] >= 0 &&
           toks[val[1]].type == SB_JSON_OBJECT;
}

/* An event ended; at[0..n) are its bytes in the current piece (s->held more before them).
 * Its length is measured without the \n of a final \r\n: a cut between the two ends the
 * event at the \r (the \n follows it out later), and the verdict must not depend on the cut. */
static void end_event(sb_sse_strip *s, const char *at, size_t n, bool *dropped)
{
    *dropped = false;
    if (s->passing) {
        s->passing = false;
        s->emit(s->ud, at, n);
        return;
    }
    size_t lf = n >= 2 && at[n - 1] == '\n' && at[n - 2] == '\r' ? 1 : 0;
    if (s->held + n - lf > s->cap) {
        /* Too long to be the usage chunk, whether or not the network cut it. */
        s->overflows++;
        if (s->held)
            s->emit(s->ud, s->hold, s->held);
        s->held = 0;
        s->emit(s->ud, at, n);
        return;
    }
    const char *ev = at;
    size_t len = n - lf;
    if (s->held) {
        memcpy(s->hold + s->held, at, n - lf);
        ev = s->hold;
        len = s->held + n - lf;
        s->held = 0;
    }
    if (sb_sse_is_usage_chunk(ev, len)) {
        s->stripped++;
        *dropped = true;
        return;
    }
    s->emit(s->ud, ev, len);
    if (lf)
        s->emit(s->ud, at + n - 1, 1);
}

void sb_sse_strip_feed(sb_sse_strip *s, const char *at, size_t len)
{
    if (s->cap == 0) {
        if (len)
            s->emit(s->ud, at, len);
        return;
    }
    size_t start = 0, i = 0;
    if (s->owe_lf && len) {
        /* The \n of the \r\n that ended the last event goes the way that event went. */
        if (at[0] == '\n') {
            if (s->owe_lf == LF_FORWARD)
                s->emit(s->ud, at, 1);
            start = i = 1;
            s->after_cr = false;
        }
        s->owe_lf = LF_NONE;
    }
    for (; i < len; i++) {
        char ch = at[i];
        if (ch == '\n' && s->after_cr) {
            s->after_cr = false; /* the \n of \r\n: the line ended at the \r */
            continue;
        }
        if (ch != '\n' && ch != '\r') {
            s->after_cr = false;
            s->line_empty = false;
            continue;
        }
        s->after_cr = ch == '\r';
        if (!s->line_empty) {
            s->line_empty = true;
            continue;
        }
        /* A blank line: the event ends here, with the \n of a \r\n if it is in this piece. */
        size_t end = i + 1;
        bool lf_unseen = false;
        if (ch == '\r') {
            if (i + 1 < len) {
                if (at[i + 1] == '\n') {
                    end = ++i + 1;
                    s->after_cr = false;
                }
            } else {
                lf_unseen = true;
            }
        }
        bool dropped;
        end_event(s, at + start, end - start, &dropped);
        if (lf_unseen)
            s->owe_lf = dropped ? LF_DROP : LF_FORWARD;
        start = end;
    }
    size_t rest = len - start;
    if (!rest)
        return;
    if (s->passing) {
        s->emit(s->ud, at + start, rest);
    } else if (s->held + rest <= s->cap) {
        memcpy(s->hold + s->held, at + start, rest);
        s->held += rest;
    } else {
        /* Longer than any usage chunk: what is held goes now, the rest as it comes. */
        s->overflows++;
        if (s->held)
            s->emit(s->ud, s->hold, s->held);
        s->held = 0;
        s->emit(s->ud, at + start, rest);
        s->passing = true;
    }
}

void sb_sse_strip_finish(sb_sse_strip *s)
{
    if (s->held)
        s->emit(s->ud, s->hold, s->held);
    s->held = 0;
}
