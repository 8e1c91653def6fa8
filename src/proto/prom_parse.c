/* prom_parse: Prometheus text format 0.0.4, zero-copy (see prom_parse.h for the contract).
 *
 * One pass per line: memchr finds the line end first, so every later scan is bounded by the
 * line and never by the buffer; an unwanted line costs that memchr and a name scan. */
#include "proto/prom_parse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Character classes, one lookup per byte in the name scans that every line pays, wanted or
 * not. A constant table: no initialisation, nothing shared that changes. */
enum { C_NAME_START = 1, C_NAME = 2, C_LABEL_START = 4, C_LABEL = 8, C_DIGIT = 16 };

/* clang-format off */
static const unsigned char cls[256] = {
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x00 */
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x10 */
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x20 */
    26, 26, 26, 26, 26, 26, 26, 26, 26, 26,  3,  0,  0,  0,  0,  0,  /* 0x30 */
     0, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x40 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  0,  0,  0,  0, 15,  /* 0x50 */
     0, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x60 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  0,  0,  0,  0,  0,  /* 0x70 */
    /* 0x80-0xff: 0 */
};
/* clang-format on */

static bool is_digit(unsigned char c)
{
    return cls[c] & C_DIGIT;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static size_t skip_blanks(const char *s, size_t i, size_t n)
{
    while (i < n && is_blank(s[i]))
        i++;
    return i;
}

/* Length of the metric name starting at s[i] (0 if none). */
static size_t scan_name(const char *s, size_t i, size_t n)
{
    size_t j = i;

    if (j >= n || !(cls[(unsigned char)s[j]] & C_NAME_START))
        return 0;
    for (j++; j < n && (cls[(unsigned char)s[j]] & C_NAME); j++)
        ;
    return j - i;
}

static size_t scan_label_name(const char *s, size_t i, size_t n)
{
    size_t j = i;

    if (j >= n || !(cls[(unsigned char)s[j]] & C_LABEL_START))
        return 0;
    for (j++; j < n && (cls[(unsigned char)s[j]] & C_LABEL); j++)
        ;
    return j - i;
}

static bool ieq(const char *s, size_t n, const char *lower)
{
    size_t k = strlen(lower);

    if (n != k)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != lower[i])
            return false;
    }
    return true;
}

/* Exact powers of ten: every one up to 1e22 is representable in a double. */
static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A value token: [+-]? (digits [. digits*] | . digits) ([eE] [+-]? digits)?, or NaN / [+-]Inf /
 * [+-]Infinity in any case (Go's strconv.ParseFloat; Prometheus writes NaN, +Inf, -Inf).
 * Short decimals (<= 15 significant digits, |exponent| <= 22: most of what engines print,
 * "0.0", "148.0") are converted exactly with one IEEE operation (the classic Clinger fast
 * path: both operands are exact, so the result is correctly rounded); the rest go to strtod
 * after the grammar check, so strtod never sees hex, inf or nan forms. */
/* "Inf", "+Infinity", "-inf", "NaN" (case-insensitive; NaN unsigned). sign_len is 0 or 1. */
static bool parse_special(const char *s, size_t n, size_t sign_len, double *out)
{
    bool neg = sign_len && s[0] == '-';
    if (ieq(s + sign_len, n - sign_len, "inf") || ieq(s + sign_len, n - sign_len, "infinity")) {
        *out = neg ? -INFINITY : INFINITY;
        return true;
    }
    if (sign_len == 0 && ieq(s, n, "nan")) {
        *out = NAN;
        return true;
    }
    return false;
}

/* A decimal being read: up to 19 significant digits, the rest as a power of ten. */
typedef struct decimal {
    uint64_t mant;
    long exp10;
    size_t sig, digits;
} decimal;

/* A decimal's significand from s[i]: up to 19 significant digits in d->mant, the others (and
 * the fraction) as a power of ten in d->exp10. Returns the index past it. */
static size_t scan_significand(const char *s, size_t i, size_t n, decimal *d)
{
    for (; i < n && is_digit((unsigned char)s[i]); i++, d->digits++) {
        if (d->mant == 0 && s[i] == '0')
            continue; /* leading zeros are not significant */
        if (d->sig < 19)
            d->mant = d->mant * 10 + (uint64_t)(s[i] - '0');
        else
            d->exp10++;
        d->sig++;
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && is_digit((unsigned char)s[i]); i++, d->digits++) {
            if (d->mant == 0 && s[i] == '0') {
                d->exp10--;
                continue;
            }
            if (d->sig < 19) {
                d->mant = d->mant * 10 + (uint64_t)(s[i] - '0');
                d->exp10--;
            }
            d->sig++;
        }
    }
    return i;
}

/* An exponent "e[+-]digits" at s[i] (s[i] is 'e' or 'E') added to d->exp10. Returns the index
 * past it, or 0 when it has no digits. */
static size_t scan_exponent(const char *s, size_t i, size_t n, decimal *d)
{
    bool eneg = false;
    size_t edigits = 0;
    long e = 0;
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        eneg = s[i] == '-';
        i++;
    }
    for (; i < n && is_digit((unsigned char)s[i]); i++, edigits++)
        if (e < 100000) /* far past any double's range; stops overflow */
            e = e * 10 + (s[i] - '0');
    if (edigits == 0)
        return 0;
    d->exp10 += eneg ? -e : e;
    return i;
}

static bool parse_value(const char *s, size_t n, double *out)
{
    size_t i = 0;
    decimal d = {0};
    char tmp[128];
    char *end;

    if (n == 0)
        return false;
    bool neg = s[0] == '-';
    if (s[0] == '+' || s[0] == '-')
        i = 1;
    if (i < n && !is_digit((unsigned char)s[i]) && s[i] != '.')
        return parse_special(s, n, i, out);
    i = scan_significand(s, i, n, &d);
    if (d.digits == 0)
        return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E') && (i = scan_exponent(s, i, n, &d)) == 0)
        return false;
    if (i != n)
        return false;
    if (d.mant == 0) {
        *out = neg ? -0.0 : 0.0;
        return true;
    }
    if (d.sig <= 15 && d.exp10 >= -22 && d.exp10 <= 22) {
        double v = (double)d.mant;
        v = d.exp10 >= 0 ? v * pow10_exact[d.exp10] : v / pow10_exact[-d.exp10];
        *out = neg ? -v : v;
        return true;
    }
    /* strtod needs a NUL; a longer token (hundreds of leading zeros) is not worth a slow path. */
    if (n >= sizeof tmp)
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    *out = strtod(tmp, &end);
    /* A non-"C" LC_NUMERIC would stop early: refuse rather than misread. Overflow to +-Inf is
     * an error, as in Go's ParseFloat (so in Prometheus); underflow rounds, as there. */
    return end == tmp + n && !isinf(*out);
}

static bool parse_timestamp(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    uint64_t v = 0, limit;

    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return false;
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        unsigned d;
        if (!is_digit((unsigned char)s[i]))
            return false;
        d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    /* -(INT64_MIN) is not representable: negate in unsigned arithmetic. */
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static const struct {
    const char *s;
    size_t len;
} family_suffixes[] = {{"_bucket", 7},  {"_total", 6}, {"_count", 6},  {"_sum", 4},
                       {"_created", 8}, {"_info", 5},  {"_gcount", 7}, {"_gsum", 5}};

/* Whether a sample named s[0..n) belongs to the open family. A family opened by HELP/TYPE
 * takes its suffixed series (histogram _bucket, counter _total, ...); a run of samples outside
 * any family matches its exact name only, so each distinct name is asked about. */
static bool in_family(const sb_prom_parser *p, const char *s, size_t n)
{
    size_t f = p->family_len;

    if (f == 0 || n < f || memcmp(s, p->family, f) != 0)
        return false;
    if (n == f)
        return true;
    if (!p->family_declared)
        return false;
    for (size_t k = 0; k < sizeof family_suffixes / sizeof family_suffixes[0]; k++)
        if (n - f == family_suffixes[k].len && memcmp(s + f, family_suffixes[k].s, n - f) == 0)
            return true;
    return false;
}

static void open_family(sb_prom_parser *p, const char *s, size_t n, bool declared)
{
    bool wanted = p->want ? p->want(p->want_ud, s, n) : true;

    if (n >= SB_PROM_FAMILY_MAX) {
        /* Too long to keep: no open family; its samples are asked about one by one. */
        p->family_len = 0;
        p->family_wanted = wanted;
        return;
    }
    memcpy(p->family, s, n);
    p->family[n] = '\0';
    p->family_len = n;
    p->family_type = SB_PROM_UNTYPED;
    p->family_wanted = wanted;
    p->family_declared = declared;
}

/* A `#` line. Returns NULL, or the reason it is malformed. */
static const char *comment_line(sb_prom_parser *p, const char *s, size_t n)
{
    static const struct {
        const char *word;
        sb_prom_type type;
    } types[] = {{"counter", SB_PROM_COUNTER},
                 {"gauge", SB_PROM_GAUGE},
                 {"histogram", SB_PROM_HISTOGRAM},
                 {"summary", SB_PROM_SUMMARY},
                 {"untyped", SB_PROM_UNTYPED}};
    size_t i = skip_blanks(s, 1, n), w = i, name, nl;
    bool help, type;

    while (w < n && !is_blank(s[w]))
        w++;
    help = w - i == 4 && memcmp(s + i, "HELP", 4) == 0;
    type = w - i == 4 && memcmp(s + i, "TYPE", 4) == 0;
    if (!help && !type)
        return NULL; /* a plain comment */
    name = skip_blanks(s, w, n);
    nl = scan_name(s, name, n);
    if (nl == 0 || (name + nl < n && !is_blank(s[name + nl])))
        return help ? "HELP without a metric name" : "TYPE without a metric name";
    if (!(p->family_len == nl && p->family_declared && memcmp(p->family, s + name, nl) == 0))
        open_family(p, s + name, nl, true);
    if (help)
        return NULL; /* its text is not needed */
    i = skip_blanks(s, name + nl, n);
    w = i;
    while (w < n && !is_blank(s[w]))
        w++;
    if (skip_blanks(s, w, n) != n)
        return "TYPE with trailing text";
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        if (w - i == strlen(types[k].word) && memcmp(s + i, types[k].word, w - i) == 0) {
            p->family_type = types[k].type;
            return NULL;
        }
    }
    return "unknown TYPE";
}

/* The closing quote of a label value starting at s[vs]: memchr for the quote, and the byte
 * loop only when a backslash comes before it (escapes are rare in practice). */
static size_t scan_label_value(const char *s, size_t vs, size_t n, const char **err)
{
    const char *q = memchr(s + vs, '"', n - vs);
    size_t v;

    *err = NULL;
    if (q && !memchr(s + vs, '\\', (size_t)(q - s) - vs))
        return (size_t)(q - s);
    for (v = vs; v < n && s[v] != '"'; v++) {
        if (s[v] == '\\') {
            if (v + 1 >= n)
                break;
            if (s[v + 1] != '\\' && s[v + 1] != '"' && s[v + 1] != 'n') {
                *err = "invalid escape in label value";
                return v;
            }
            v++;
        }
    }
    if (v >= n)
        *err = "unterminated label value";
    return v;
}

/* A sample line whose name is s[i0..i0+nl). Returns NULL, or why it is malformed. */
static const char *sample_line(const char *s, size_t n, size_t i0, size_t nl, sb_prom_sample *out)
{
    size_t i = i0 + nl, v = skip_blanks(s, i, n);
    bool braces = false;
    const char *err;

    out->name.p = s + i0;
    out->name.len = nl;
    out->n_labels = 0;
    if (v < n && s[v] == '{') {
        braces = true;
        for (i = v + 1;;) {
            size_t ln, vs;

            i = skip_blanks(s, i, n);
            if (i < n && s[i] == '}') /* empty set, or after a trailing comma */
                break;
            ln = scan_label_name(s, i, n);
            if (ln == 0)
                return i >= n ? "unterminated label set" : "bad label name";
            vs = skip_blanks(s, i + ln, n);
            if (vs >= n || s[vs] != '=')
                return "expected '=' after label name";
            vs = skip_blanks(s, vs + 1, n);
            if (vs >= n || s[vs] != '"')
                return "expected '\"' to open a label value";
            vs++;
            v = scan_label_value(s, vs, n, &err);
            if (err)
                return err;
            if (out->n_labels == SB_PROM_MAX_LABELS)
                return "too many labels";
            out->labels[out->n_labels].name.p = s + i;
            out->labels[out->n_labels].name.len = ln;
            out->labels[out->n_labels].value.p = s + vs;
            out->labels[out->n_labels].value.len = v - vs;
            out->n_labels++;
            i = skip_blanks(s, v + 1, n);
            if (i < n && s[i] == ',') {
                i++;
                continue;
            }
            if (i < n && s[i] == '}')
                break;
            return "expected ',' or '}' in label set";
        }
        i++; /* the '}' */
    }
    v = skip_blanks(s, i, n);
    if (v == n)
        return "missing value";
    if (v == i && !braces)
        return "bad metric name";
    i = v;
    while (i < n && !is_blank(s[i]))
        i++;
    if (!parse_value(s + v, i - v, &out->value))
        return "bad value";
    out->has_timestamp = false;
    out->timestamp_ms = 0;
    v = skip_blanks(s, i, n);
    if (v < n) {
        i = v;
        while (i < n && !is_blank(s[i]))
            i++;
        if (!parse_timestamp(s + v, i - v, &out->timestamp_ms))
            return "bad timestamp";
        out->has_timestamp = true;
        if (skip_blanks(s, i, n) != n)
            return "trailing text after timestamp";
    }
    return NULL;
}

void sb_prom_init(sb_prom_parser *p, sb_prom_want_fn want, void *want_ud)
{
    memset(p, 0, sizeof *p);
    p->want = want;
    p->want_ud = want_ud;
}

void sb_prom_feed(sb_prom_parser *p, const char *buf, size_t len)
{
    p->buf = buf;
    p->len = len;
    p->consumed = 0;
}

int sb_prom_next(sb_prom_parser *p, sb_prom_sample *out)
{
    while (p->consumed < p->len) {
        const char *s = p->buf + p->consumed;
        const char *nl = memchr(s, '\n', p->len - p->consumed);
        const char *err;
        size_t n, i, name_len;

        if (!nl)
            return SB_PROM_END; /* an incomplete line: never read, maybe truncated */
        n = (size_t)(nl - s);
        p->consumed += n + 1;
        p->line++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        i = skip_blanks(s, 0, n);
        if (i == n)
            continue;
        if (s[i] == '#') {
            err = comment_line(p, s + i, n - i);
            if (!err)
                continue;
            goto malformed;
        }
        name_len = scan_name(s, i, n);
        if (name_len == 0) {
            err = "bad metric name";
            goto malformed;
        }
        if (!in_family(p, s + i, name_len))
            open_family(p, s + i, name_len, false);
        if (!p->family_wanted) {
            p->n_skipped++;
            continue;
        }
        err = sample_line(s, n, i, name_len, out);
        if (err)
            goto malformed;
        if (p->family_len > 0) {
            out->family.p = p->family;
            out->family.len = p->family_len;
            out->type = p->family_type;
        } else {
            out->family = out->name;
            out->type = SB_PROM_UNTYPED;
        }
        out->line = p->line;
        p->n_samples++;
        return SB_PROM_SAMPLE;
    malformed:
        p->n_malformed++;
        p->error_line = p->line;
        p->error = err;
        return SB_PROM_MALFORMED;
    }
    return SB_PROM_END;
}

size_t sb_prom_parse(const char *buf, size_t len, const sb_prom_handler *h, sb_prom_parser *stats)
{
    sb_prom_parser p;
    sb_prom_sample s;
    int rc;

    sb_prom_init(&p, h->want, h->ud);
    sb_prom_feed(&p, buf, len);
    while ((rc = sb_prom_next(&p, &s)) != SB_PROM_END) {
        if (rc == SB_PROM_SAMPLE) {
            if (h->on_sample)
                h->on_sample(h->ud, &s);
        } else if (h->on_malformed) {
            h->on_malformed(h->ud, p.error_line, p.error);
        }
    }
    if (stats)
        *stats = p;
    return p.consumed;
}

long sb_prom_unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\') {
            if (++i >= n)
                return -1;
            c = s[i] == 'n' ? '\n' : s[i];
            if (s[i] != 'n' && s[i] != '\\' && s[i] != '"')
                return -1;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    if (cap == 0)
        return -1;
    out[o] = '\0';
    return (long)o;
}

const sb_prom_slice *sb_prom_label_value(const sb_prom_sample *s, const char *name)
{
    for (size_t i = 0; i < s->n_labels; i++)
        if (sb_prom_slice_eq(s->labels[i].name, name))
            return &s->labels[i].value;
    return NULL;
}

bool sb_prom_slice_eq(sb_prom_slice a, const char *str)
{
    size_t n = strlen(str);
    return a.len == n && memcmp(a.p, str, n) == 0;
}

const char *sb_prom_type_name(sb_prom_type t)
{
    switch (t) {
    case SB_PROM_COUNTER: return "counter";
    case SB_PROM_GAUGE: return "gauge";
    case SB_PROM_HISTOGRAM: return "histogram";
    case SB_PROM_SUMMARY: return "summary";
    default: return "untyped";
    }
}
