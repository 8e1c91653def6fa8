#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

/* Test-only failure injection (sb_alloc_fail_after): set by unit tests, never by the product,
 * where it stays -1 (off) for the life of the process. */
static long fail_after = -1;

static int should_fail(void)
{
    if (fail_after < 0)
        return 0;
    if (fail_after == 0)
        return 1;
    fail_after--;
    return 0;
}

void sb_alloc_fail_after(long n) { fail_after = n; }

void *sb_malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }

void *sb_calloc(size_t count, size_t n) { return should_fail() ? NULL : calloc(count ? count : 1, n ? n : 1); }

void *sb_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

void sb_free(void *p) { free(p); }

char *sb_strndup(const char *s, size_t len)
{
    char *d = sb_malloc(len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *sb_strdup(const char *s) { return sb_strndup(s, strlen(s)); }
