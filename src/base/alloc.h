/* alloc: the one allocation wrapper every module uses.
 *
 * All heap allocation goes through these functions so that tests can inject allocation
 * failure (sb_alloc_fail_after). They behave like their libc counterparts: NULL on failure,
 * and the caller owns the result. Not for hot-path per-request objects: use pools there. */
#ifndef SB_BASE_ALLOC_H
#define SB_BASE_ALLOC_H

#include <stddef.h>

void *sb_malloc(size_t n);
void *sb_calloc(size_t count, size_t n);
void *sb_realloc(void *p, size_t n);
void sb_free(void *p);
/* Copies len bytes of s and a terminating NUL; NULL on failure. */
char *sb_strndup(const char *s, size_t len);
char *sb_strdup(const char *s);

/* Test hook: after `n` more successful allocations, every allocation fails.
 * A negative n disables injection (the default). */
void sb_alloc_fail_after(long n);

#endif
