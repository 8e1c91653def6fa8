/* sb_test: common includes for cmocka unit tests. */
#ifndef SB_TEST_H
#define SB_TEST_H
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

/* Reads a file of the repository (path relative to its root: the tests run from there) into a
 * NUL-terminated heap buffer the caller frees; fails the test if it cannot. */
static inline char *sb_test_read_file(const char *rel, size_t *len)
{
    FILE *f = fopen(rel, "rb");
    if (!f)
        fail_msg("cannot open %s (run the tests from the repository root)", rel);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    data[n] = '\0';
    *len = (size_t)n;
    return data;
}
#endif
