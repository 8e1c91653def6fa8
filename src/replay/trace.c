/* trace: Mooncake JSONL and Azure CSV parsers. Hand-written scanners: the formats are flat and
 * a line is parsed in one pass without allocating beyond the workload's own arrays. */
#include "replay/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* A cursor over one line: [p, end). */
typedef struct cursor {
    const char *p, *end;
} cursor;

static int fail(sb_replay_trace_error *err, size_t line, const char *fmt, ...)
{
    err->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A JSON number; integers must be exact below 2^63. Returns false if none is there. */
static bool read_number(cursor *c, double *out, bool *integral)
{
    skip_ws(c);
    const char *s = c->p;
    char buf[64];
    size_t n = 0;
    while (s + n < c->end && n < sizeof(buf) - 1 && strchr("0123456789+-.eE", s[n]))
        n++;
    if (!n)
        return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *e;
    double v = strtod(buf, &e);
    if (e != buf + n)
        return false;
    *out = v;
    *integral = !memchr(buf, '.', n) && !memchr(buf, 'e', n) && !memchr(buf, 'E', n);
    c->p += n;
    return true;
}

/* A JSON string (escapes kept raw); [*s, *s + *len) is its content. */
static bool read_string(cursor *c, const char **s, size_t *len)
{
    if (!eat(c, '"'))
        return false;
    const char *b = c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\' && c->p + 1 < c->end)
            c->p++;
        c->p++;
    }
    if (c->p >= c->end)
        return false;
    *s = b;
    *len = (size_t)(c->p - b);
    c->p++;
    return true;
}

/* Skips any JSON value (for keys we do not use). */
static bool skip_value(cursor *c, int depth)
{
    skip_ws(c);
    if (c->p >= c->end || depth > 32)
        return false;
    const char *s;
    size_t n;
    double d;
    bool integral;
    char ch = *c->p;
    if (ch == '"')
        return read_string(c, &s, &n);
    if (ch == '[' || ch == '{') {
        char close = ch == '[' ? ']' : '}';
        c->p++;
        if (eat(c, close))
            return true;
        do {
            if (close == '}' && (!read_string(c, &s, &n) || !eat(c, ':')))
                return false;
            if (!skip_value(c, depth + 1))
                return false;
        } while (eat(c, ','));
        return eat(c, close);
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(c->end - c->p) >= l && !memcmp(c->p, lits[i], l)) {
            c->p += l;
            return true;
        }
    }
    return read_number(c, &d, &integral);
}

static bool to_u32(double v, bool integral, uint32_t *out)
{
    if (!integral || v < 0 || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* Growable span scratch for one line. */
typedef struct spans {
    sb_replay_span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, sb_replay_span x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        sb_replay_span *v = sb_realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

/* Requests are appended in file order; the sort key ties on first_span, which grows in file
 * order, so the sort is stable. */
static int by_arrival(const void *a, const void *b)
{
    const sb_replay_request *x = a, *y = b;
    if (x->arrival_ns != y->arrival_ns)
        return x->arrival_ns < y->arrival_ns ? -1 : 1;
    return x->first_span < y->first_span ? -1 : x->first_span > y->first_span;
}

/* Shifts times to start at the earliest, sorts, and sets the mean rate. times[] holds each
 * request's absolute time in ns (signed: Azure's are since 1970). */
static void finish(sb_replay_workload *w, const int64_t *times)
{
    int64_t t0 = w->n ? times[0] : 0;
    bool sorted = true;
    for (size_t i = 0; i < w->n; i++) {
        t0 = times[i] < t0 ? times[i] : t0;
        sorted &= i == 0 || times[i] >= times[i - 1];
    }
    for (size_t i = 0; i < w->n; i++)
        w->reqs[i].arrival_ns = (sb_ns)(times[i] - t0);
    if (!sorted)
        qsort(w->reqs, w->n, sizeof(*w->reqs), by_arrival);
    sb_replay_workload_measure_rate(w);
}

static int push_time(int64_t **times, size_t *cap, size_t n, int64_t t)
{
    if (n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        int64_t *v = sb_realloc(*times, c * sizeof(*v));
        if (!v)
            return -ENOMEM;
        *times = v;
        *cap = c;
    }
    (*times)[n] = t;
    return 0;
}

/* One Mooncake line into the workload. */
static int mooncake_line(cursor *c, size_t line, spans *sp, uint64_t *unique, sb_replay_workload *w, int64_t *t_ns,
                         sb_replay_trace_error *err)
{
    double ts = -1, v;
    bool integral, have_in = false, have_out = false, have_ids = false;
    uint32_t in_len = 0, out_len = 0;
    sp->n = 0;
    if (!eat(c, '{'))
        return fail(err, line, "expected a JSON object");
    if (!eat(c, '}')) {
        do {
            const char *k;
            size_t kl;
            if (!read_string(c, &k, &kl) || !eat(c, ':'))
                return fail(err, line, "expected \"key\": value");
#define KEY(s) (kl == sizeof(s) - 1 && !memcmp(k, s, kl))
            if (KEY("timestamp")) {
                if (!read_number(c, &ts, &integral) || ts < 0 || ts > 9e12)
                    return fail(err, line, "timestamp: expected milliseconds >= 0");
            } else if (KEY("input_length")) {
                if (!read_number(c, &v, &integral) || !to_u32(v, integral, &in_len))
                    return fail(err, line, "input_length: expected a non-negative integer");
                have_in = true;
            } else if (KEY("output_length")) {
                if (!read_number(c, &v, &integral) || !to_u32(v, integral, &out_len))
                    return fail(err, line, "output_length: expected a non-negative integer");
                have_out = true;
            } else if (KEY("hash_ids")) {
                if (!eat(c, '['))
                    return fail(err, line, "hash_ids: expected an array");
                have_ids = true;
                if (!eat(c, ']')) {
                    do {
                        if (!read_number(c, &v, &integral) || !integral || v < 0 || v >= 72057594037927936.0)
                            return fail(err, line, "hash_ids[%zu]: expected an integer in [0, 2^56)", sp->n);
                        sb_replay_span s = {sb_replay_span_id(SB_REPLAY_NS_TRACE_BLOCK, (uint64_t)v),
                                            SB_REPLAY_TRACE_BLOCK_TOKENS};
                        if (spans_push(sp, s) < 0)
                            return -ENOMEM;
                    } while (eat(c, ','));
                    if (!eat(c, ']'))
                        return fail(err, line, "hash_ids: expected ',' or ']'");
                }
            } else if (!skip_value(c, 0)) {
                return fail(err, line, "malformed value of \"%.*s\"", (int)(kl > 40 ? 40 : kl), k);
            }
#undef KEY
        } while (eat(c, ','));
        if (!eat(c, '}'))
            return fail(err, line, "expected ',' or '}'");
    }
    skip_ws(c);
    if (c->p != c->end)
        return fail(err, line, "trailing bytes after the object");
    if (ts < 0 || !have_in || !have_out || !have_ids)
        return fail(err, line, "missing %s",
                    ts < 0      ? "timestamp"
                    : !have_in  ? "input_length"
                    : !have_out ? "output_length"
                                : "hash_ids");
    if (in_len == 0)
        return fail(err, line, "input_length is 0");
    size_t need = (in_len + SB_REPLAY_TRACE_BLOCK_TOKENS - 1) / SB_REPLAY_TRACE_BLOCK_TOKENS;
    if (sp->n > need)
        return fail(err, line, "hash_ids lists %zu blocks, more than the %zu that input_length %u needs", sp->n, need,
                    in_len);
    if (sp->n == need) {
        sp->v[sp->n - 1].len = in_len - (uint32_t)(need - 1) * SB_REPLAY_TRACE_BLOCK_TOKENS;
    } else {
        sb_replay_span s = {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, (*unique)++),
                            in_len - (uint32_t)sp->n * SB_REPLAY_TRACE_BLOCK_TOKENS};
        if (spans_push(sp, s) < 0)
            return -ENOMEM;
    }
    sb_replay_request r = {.max_tokens = out_len ? out_len : 1, .followup = SB_REPLAY_NO_REQUEST};
    if (sb_replay_workload_add(w, &r, sp->v, (uint32_t)sp->n) < 0)
        return -ENOMEM;
    *t_ns = (int64_t)(ts * 1e6);
    return 0;
}

/* Calls fn for each non-blank line: the line's cursor and number. */
typedef int (*line_fn)(void *ud, cursor *c, size_t line);

static int each_line(const char *text, size_t len, line_fn fn, void *ud)
{
    const char *p = text, *end = text + len;
    size_t line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        cursor c = {p, e};
        skip_ws(&c);
        if (c.p < c.end) {
            int rc = fn(ud, &c, line);
            if (rc)
                return rc;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

typedef struct parse_state {
    sb_replay_workload *w;
    sb_replay_trace_error *err;
    size_t max_requests;
    spans sp;
    uint64_t unique;
    int64_t *times;
    size_t times_cap;
    bool header_seen;
} parse_state;

#define STOP 1 /* each_line: max_requests reached */

static int on_mooncake(void *ud, cursor *c, size_t line)
{
    parse_state *st = ud;
    if (st->max_requests && st->w->n >= st->max_requests)
        return STOP;
    int64_t t = 0;
    int rc = mooncake_line(c, line, &st->sp, &st->unique, st->w, &t, st->err);
    if (rc == 0 && (rc = push_time(&st->times, &st->times_cap, st->w->n - 1, t)) < 0)
        st->w->n--;
    return rc;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(cursor *c, int n, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++, c->p++) {
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return false;
        v = v * 10 + (unsigned)(*c->p - '0');
    }
    *out = v;
    return true;
}

/* The date-time separator: one space (Azure's) or ISO 8601's 'T'. */
static bool date_sep(cursor *c)
{
    if (c->p < c->end && (*c->p == ' ' || *c->p == 'T')) {
        c->p++;
        return true;
    }
    return false;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" to ns since 1970 (UTC). */
static bool azure_time(cursor *c, int64_t *out)
{
    unsigned y, mo, d, h, mi, s;
    if (!digits(c, 4, &y) || !eat(c, '-') || !digits(c, 2, &mo) || !eat(c, '-') || !digits(c, 2, &d) || !date_sep(c) ||
        !digits(c, 2, &h) || !eat(c, ':') || !digits(c, 2, &mi) || !eat(c, ':') || !digits(c, 2, &s))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
        return false;
    int64_t ns = 0, scale = 100000000;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return false;
        for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++, scale /= 10)
            ns += scale * (*c->p - '0');
    }
    *out = ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * (int64_t)1000000000) + ns;
    return true;
}

static bool csv_u32(cursor *c, uint32_t *out)
{
    skip_ws(c);
    uint64_t v = 0;
    const char *b = c->p;
    for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++)
        if ((v = v * 10 + (uint64_t)(*c->p - '0')) > UINT32_MAX)
            return false;
    *out = (uint32_t)v;
    skip_ws(c);
    return c->p > b;
}

static int on_azure(void *ud, cursor *c, size_t line)
{
    parse_state *st = ud;
    static const char header[] = "TIMESTAMP,ContextTokens,GeneratedTokens";
    if (!st->header_seen) {
        size_t n = (size_t)(c->end - c->p);
        while (n && (c->p[n - 1] == '\r' || c->p[n - 1] == ' '))
            n--;
        if (n != sizeof(header) - 1 || memcmp(c->p, header, n))
            return fail(st->err, line, "expected the header '%s'", header);
        st->header_seen = true;
        return 0;
    }
    if (st->max_requests && st->w->n >= st->max_requests)
        return STOP;
    int64_t t = 0;
    uint32_t ctx, gen;
    if (!azure_time(c, &t))
        return fail(st->err, line, "TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS.fraction'");
    if (!eat(c, ','))
        return fail(st->err, line, "expected ',' after TIMESTAMP");
    if (!csv_u32(c, &ctx))
        return fail(st->err, line, "ContextTokens: expected a non-negative integer");
    if (!eat(c, ','))
        return fail(st->err, line, "expected ',' after ContextTokens");
    if (!csv_u32(c, &gen))
        return fail(st->err, line, "GeneratedTokens: expected a non-negative integer");
    skip_ws(c);
    if (c->p != c->end)
        return fail(st->err, line, "expected 3 columns");
    if (ctx == 0)
        return fail(st->err, line, "ContextTokens is 0");
    sb_replay_span s = {sb_replay_span_id(SB_REPLAY_NS_UNIQUE, st->unique++), ctx};
    sb_replay_request r = {.max_tokens = gen ? gen : 1, .followup = SB_REPLAY_NO_REQUEST};
    if (sb_replay_workload_add(st->w, &r, &s, 1) < 0)
        return -ENOMEM;
    if (push_time(&st->times, &st->times_cap, st->w->n - 1, t) < 0) {
        st->w->n--;
        return -ENOMEM;
    }
    return 0;
}

static int run(const char *text, size_t len, size_t max_requests, sb_replay_workload *w, sb_replay_trace_error *err,
               line_fn fn)
{
    *w = (sb_replay_workload){0};
    *err = (sb_replay_trace_error){0};
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) { /* a UTF-8 byte order mark, as spreadsheets write */
        text += 3;
        len -= 3;
    }
    parse_state st = {.w = w, .err = err, .max_requests = max_requests};
    int rc = each_line(text, len, fn, &st);
    if (rc == STOP)
        rc = 0;
    if (rc == 0 && w->n == 0)
        rc = fail(err, 0, "no requests in the trace");
    if (rc == -ENOMEM && !err->message[0])
        snprintf(err->message, sizeof(err->message), "out of memory");
    if (rc == 0)
        finish(w, st.times);
    else
        sb_replay_workload_free(w);
    sb_free(st.sp.v);
    sb_free(st.times);
    return rc;
}

int sb_replay_trace_mooncake(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                             sb_replay_trace_error *err)
{
    return run(text, len, max_requests, w, err, on_mooncake);
}

int sb_replay_trace_azure(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                          sb_replay_trace_error *err)
{
    return run(text, len, max_requests, w, err, on_azure);
}

int sb_replay_trace_parse(const char *text, size_t len, size_t max_requests, sb_replay_workload *w,
                          sb_replay_trace_error *err)
{
    size_t i = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    if (i < len && text[i] == '{')
        return sb_replay_trace_mooncake(text, len, max_requests, w, err);
    return sb_replay_trace_azure(text, len, max_requests, w, err);
}
