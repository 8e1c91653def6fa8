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
#endif
