#include "base/buf.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

int sb_buf_reserve(sb_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *d = sb_realloc(b->data, cap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

int sb_buf_append_slow(sb_buf *b, const void *p, size_t n)
{
    if (sb_buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

size_t sb_fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

void sb_fmt_hex64(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = digits[v & 15];
}

int sb_buf_put_u64(sb_buf *b, uint64_t v)
{
    char tmp[20];
    return sb_buf_append(b, tmp, sb_fmt_u64(tmp, v));
}

int sb_buf_vprintf(sb_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || sb_buf_reserve(b, (size_t)n) < 0)
        return -1;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int sb_buf_printf(sb_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sb_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

int sb_buf_json_escape(sb_buf *b, const char *s, size_t n)
{
    /* Worst case every byte becomes \u00XX. */
    if (sb_buf_reserve(b, n * 6) < 0)
        return -1;
    char *o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (c < 0x20) {
                o += sprintf(o, "\\u%04x", c);
            } else {
                *o++ = (char)c;
            }
        }
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return 0;
}

void sb_buf_reset(sb_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void sb_buf_free(sb_buf *b)
{
    sb_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *sb_buf_steal(sb_buf *b, size_t *len)
{
    char *d = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}
