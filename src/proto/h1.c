/* h1: the narrow fast path for HTTP/1.x heads (see h1.h). */
#include "proto/h1.h"

#include <http_parser.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { C_TOKEN = SB_H1_TOKEN, C_VALUE = SB_H1_VALUE, C_TARGET = SB_H1_TARGET };

/* Character classes: C_TOKEN is RFC 9110's tchar; C_VALUE a field value's visible ASCII,
 * space and tab; C_TARGET a target's unreserved and sub-delims characters and ":@/?%". Bytes
 * outside every class (controls, DEL, obs-text) make a head deferred, never accepted.
 * tests/unit/proto/test_h1.c rebuilds the table from those definitions and compares. */
const unsigned char sb_h1_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 7, 2, 3, 7,
    7, 7, 7, 6, 6, 7, 7, 6, 7, 7, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 2, 6, 2, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 2, 2, 3, 7, 3, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 3, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static inline bool is(unsigned char c, unsigned k)
{
    return sb_h1_class[c] & k;
}

/* Every byte of p[0..n) is a field value's (C_VALUE: visible ASCII, space, tab). Sixteen at a
 * time where SSE2 is: a byte above 0x1f as a signed byte (so below 0x80) and not DEL, or a tab
 * (the byte loop was ~8 instructions a byte, most of the fast path's cost). */
static bool visible(const char *p, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i space_less = _mm_set1_epi8(0x1f), del = _mm_set1_epi8(0x7f), tab = _mm_set1_epi8('\t');
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        __m128i ok = _mm_andnot_si128(_mm_cmpeq_epi8(v, del), _mm_cmpgt_epi8(v, space_less));
        ok = _mm_or_si128(ok, _mm_cmpeq_epi8(v, tab));
        if (_mm_movemask_epi8(ok) != 0xffff)
            return false;
    }
#endif
    for (; i < n; i++)
        if (!is((unsigned char)p[i], C_VALUE))
            return false;
    return true;
}

/* `a` (n bytes) equals lowercase `lc` ignoring ASCII case (only letters and '-' compared). */
static bool name_eq(const char *a, size_t n, const char *lc, size_t lc_n)
{
    if (n != lc_n)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)(a[i] | 0x20) != (unsigned char)lc[i])
            return false;
    return true;
}

struct framing {
    int64_t cl;
    bool ka, close;
};

/* The header lines from p[pos..end) up to and including the empty line. Returns the head's
 * length, or 0 to defer. */
static size_t fields(const char *p, size_t pos, size_t end, sb_h1_field *f, size_t max_fields, size_t *n_out,
                     struct framing *fr)
{
    size_t n = 0;
    for (;;) {
        if (end - pos < 2)
            return 0;
        if (p[pos] == '\r')
            return p[pos + 1] == '\n' ? (*n_out = n, pos + 2) : 0;
        const char *nl = memchr(p + pos, '\n', end - pos);
        if (!nl || n == max_fields)
            return 0;
        size_t eol = (size_t)(nl - p); /* the '\n'; the line must end "\r\n" */
        if (eol - pos < 4 || p[eol - 1] != '\r')
            return 0;
        size_t i = pos;
        while (is((unsigned char)p[i], C_TOKEN))
            i++;
        if (i == pos || p[i] != ':')
            return 0;
        size_t name_len = i - pos;
        i++;
        while (p[i] == ' ' || p[i] == '\t')
            i++;
        size_t v = i, vend = eol - 1;
        if (v >= vend || p[vend - 1] == ' ' || p[vend - 1] == '\t')
            return 0; /* empty, or trailing whitespace (which RFC 9112 strips and http-parser keeps) */
        if (!visible(p + v, vend - v))
            return 0;
        const char *name = p + pos, *val = p + v;
        size_t vlen = vend - v;
        switch (name_len) {
        case 7:
            if (name_eq(name, 7, "upgrade", 7))
                return 0;
            break;
        case 10:
            if (name_eq(name, 10, "connection", 10)) {
                if (name_eq(val, vlen, "keep-alive", 10))
                    fr->ka = true;
                else if (name_eq(val, vlen, "close", 5))
                    fr->close = true;
                else
                    return 0; /* lists, upgrade: http-parser's reading */
            }
            break;
        case 14:
            if (name_eq(name, 14, "content-length", 14)) {
                if (fr->cl >= 0 || vlen > 18)
                    return 0; /* a second one is http-parser's error to give */
                int64_t cl = 0;
                for (size_t k = 0; k < vlen; k++) {
                    unsigned d = (unsigned char)val[k] - '0';
                    if (d > 9)
                        return 0;
                    cl = cl * 10 + d;
                }
                fr->cl = cl;
            }
            break;
        case 16:
            if (name_eq(name, 16, "proxy-connection", 16))
                return 0;
            break;
        default: break;
        }
        /* http-parser takes any name that begins "Transfer-Encoding" for one (2.9.4 refuses
         * "Transfer-Encodingx: 3" in a request): all of them are its to read. */
        if (name_len >= 17 && name_eq(name, 17, "transfer-encoding", 17))
            return 0;
        f[n++] = (sb_h1_field){(uint32_t)pos, (uint32_t)name_len, (uint32_t)v, (uint32_t)vlen};
        pos = eol + 1;
    }
}

static bool keep_alive(int minor, const struct framing *fr)
{
    /* http_should_keep_alive: HTTP/1.1 unless "close"; HTTP/1.0 only with "keep-alive". */
    return minor ? !fr->close : fr->ka;
}

/* "HTTP/1.0" or "HTTP/1.1" at p: the minor version, or -1. */
static int version(const char *p)
{
    if (memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1'))
        return -1;
    return p[7] - '0';
}

static size_t limit(size_t len, size_t max_head)
{
    size_t end = len < max_head ? len : max_head;
    return end > UINT32_MAX ? UINT32_MAX : end;
}

int sb_h1_request(const char *p, size_t len, size_t max_head, sb_h1_field *f, size_t max_fields, sb_h1_head *out)
{
    static const struct {
        const char *s;
        size_t n;
        int method;
    } methods[] = {
        {"GET ", 4, HTTP_GET},       {"POST ", 5, HTTP_POST},       {"HEAD ", 5, HTTP_HEAD},   {"PUT ", 4, HTTP_PUT},
        {"DELETE ", 7, HTTP_DELETE}, {"OPTIONS ", 8, HTTP_OPTIONS}, {"PATCH ", 6, HTTP_PATCH},
    };
    size_t end = limit(len, max_head);
    if (end < 16)
        return SB_H1_DEFER;
    size_t pos = 0;
    out->method = -1;
    for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++)
        if (memcmp(p, methods[k].s, methods[k].n) == 0) {
            out->method = methods[k].method;
            pos = methods[k].n;
            break;
        }
    if (out->method < 0 || p[pos] != '/')
        return SB_H1_DEFER;
    size_t t = pos;
    while (pos < end && is((unsigned char)p[pos], C_TARGET))
        pos++;
    /* " HTTP/1.x\r\n" */
    if (end - pos < 11 || p[pos] != ' ' || p[pos + 9] != '\r' || p[pos + 10] != '\n')
        return SB_H1_DEFER;
    int minor = version(p + pos + 1);
    if (minor < 0)
        return SB_H1_DEFER;
    out->target_off = (uint32_t)t;
    out->target_len = (uint32_t)(pos - t);
    struct framing fr = {-1, false, false};
    size_t head = fields(p, pos + 11, end, f, max_fields, &out->n_fields, &fr);
    if (!head)
        return SB_H1_DEFER;
    out->head_len = head;
    out->status = 0;
    out->http_minor = minor;
    out->content_length = fr.cl;
    out->keep_alive = keep_alive(minor, &fr);
    return SB_H1_OK;
}

int sb_h1_response(const char *p, size_t len, size_t max_head, sb_h1_field *f, size_t max_fields, sb_h1_head *out)
{
    size_t end = limit(len, max_head);
    /* "HTTP/1.x ddd " */
    if (end < 17 || p[8] != ' ' || p[12] != ' ')
        return SB_H1_DEFER;
    int minor = version(p);
    if (minor < 0)
        return SB_H1_DEFER;
    int status = 0;
    for (int k = 9; k < 12; k++) {
        unsigned d = (unsigned char)p[k] - '0';
        if (d > 9)
            return SB_H1_DEFER;
        status = status * 10 + (int)d;
    }
    if (status < 200 || status > 599 || status == 204 || status == 304)
        return SB_H1_DEFER; /* interim answers and bodiless ones: http-parser's */
    const char *nl = memchr(p + 13, '\n', end - 13);
    if (!nl)
        return SB_H1_DEFER;
    size_t eol = (size_t)(nl - p);
    if (p[eol - 1] != '\r')
        return SB_H1_DEFER;
    if (!visible(p + 13, eol - 1 - 13))
        return SB_H1_DEFER;
    struct framing fr = {-1, false, false};
    size_t head = fields(p, eol + 1, end, f, max_fields, &out->n_fields, &fr);
    if (!head || fr.cl < 0)
        return SB_H1_DEFER; /* no length: read to the end, http-parser's */
    out->head_len = head;
    out->method = -1;
    out->status = status;
    out->http_minor = minor;
    out->target_off = out->target_len = 0;
    out->content_length = fr.cl;
    out->keep_alive = keep_alive(minor, &fr);
    return SB_H1_OK;
}
