/* buf: a growable byte buffer, for building responses, logs and test inputs.
 *
 * Appends either succeed or return -1 leaving the buffer unchanged (ENOMEM). The buffer
 * owns `data`; it is always NUL-terminated after a successful append, for convenience,
 * but may hold binary data. Not for zero-copy paths. */
#ifndef SB_BASE_BUF_H
#define SB_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sb_buf {
    char *data;
    size_t len;
    size_t cap;
} sb_buf;

int sb_buf_reserve(sb_buf *b, size_t extra);
/* The growing half of sb_buf_append (out of line: the inline part is the copy). */
int sb_buf_append_slow(sb_buf *b, const void *p, size_t n);

/* Inline, with sb_buf_puts: requests build their heads from dozens of small appends, and a
 * call per append plus strlen of each literal cost ~2,500 instructions a proxied request
 * (callgrind, docs/benchmarks.md section 15); inlined, a literal's length is a constant. */
static inline int sb_buf_append(sb_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap)
        return sb_buf_append_slow(b, p, n);
    if (n)
        __builtin_memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static inline int sb_buf_puts(sb_buf *b, const char *s)
{
    return sb_buf_append(b, s, __builtin_strlen(s));
}
int sb_buf_printf(sb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sb_buf_vprintf(sb_buf *b, const char *fmt, va_list ap);
/* Appends s as the contents of a JSON string (no surrounding quotes), escaping as needed. */
int sb_buf_json_escape(sb_buf *b, const char *s, size_t n);
/* Appends v in decimal. On the request path instead of printf("%zu"): a formatted print
 * costs ~700 instructions, this ~40 (docs/benchmarks.md, proxy overhead). */
int sb_buf_put_u64(sb_buf *b, uint64_t v);
/* Writes v in decimal at out (room for 20 digits, no NUL); returns the digits written. */
size_t sb_fmt_u64(char *out, uint64_t v);
/* Writes v as 16 lowercase hex digits at out (no NUL), as printf("%016llx") does. */
void sb_fmt_hex64(char *out, uint64_t v);
void sb_buf_reset(sb_buf *b);
void sb_buf_free(sb_buf *b);
/* Hands the data to the caller (who frees it with sb_free) and empties the buffer. */
char *sb_buf_steal(sb_buf *b, size_t *len);

#endif
