/* sse_strip_check: what the fuzz target (fuzz_sse_strip.c) and the corpus replay
 * (tests/unit/proto/test_sse_strip.c) check of one input stream: the strip's output and
 * counters do not depend on how the bytes are cut (whole, byte by byte, at cuts drawn from the
 * input), it never emits more than it was fed, it holds at most its buffer, and with nothing
 * stripped it passes the stream byte for byte. Returns 0, or the number of the failed check. */
#ifndef SB_FUZZ_SSE_STRIP_CHECK_H
#define SB_FUZZ_SSE_STRIP_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sse_strip.h"

typedef struct sse_check_out {
    char *buf;
    size_t len, cap;
    int overrun;
} sse_check_out;

static void sse_check_emit(void *ud, const char *at, size_t len)
{
    sse_check_out *o = ud;
    if (len == 0 || o->len + len > o->cap) {
        o->overrun = 1;
        return;
    }
    memcpy(o->buf + o->len, at, len);
    o->len += len;
}

/* mode 0: whole; 1: byte by byte; 2: pieces whose lengths come from the input's bytes. */
static int sse_check_run(const uint8_t *d, size_t n, size_t cap, int mode, sse_check_out *o, uint64_t *stripped,
                         uint64_t *overflows)
{
    char *hold = malloc(cap ? cap : 1);
    if (!hold)
        return 0;
    sb_sse_strip s;
    sb_sse_strip_init(&s, hold, cap, sse_check_emit, o);
    size_t at = 0, k = 0;
    while (at < n) {
        size_t step = mode == 0 ? n : mode == 1 ? 1 : 1 + (size_t)(d[k++ % n] % 37);
        if (step > n - at)
            step = n - at;
        sb_sse_strip_feed(&s, (const char *)d + at, step);
        at += step;
        if (s.held > cap) {
            free(hold);
            return 1;
        }
    }
    sb_sse_strip_finish(&s);
    free(hold);
    *stripped = s.stripped;
    *overflows = s.overflows;
    return 0;
}

static int sse_strip_check(const uint8_t *d, size_t n)
{
    static const size_t caps[] = {64, 1024};
    int rc = 0;
    char *bufs[3];
    for (int m = 0; m < 3; m++)
        bufs[m] = malloc(n ? n : 1);
    for (size_t c = 0; c < 2 && !rc; c++) {
        sse_check_out out[3];
        uint64_t st[3], ov[3];
        for (int m = 0; m < 3 && !rc; m++) {
            out[m] = (sse_check_out){.buf = bufs[m], .cap = n};
            if (!bufs[m])
                rc = 0; /* no memory to check with */
            else if (sse_check_run(d, n, caps[c], m, &out[m], &st[m], &ov[m]))
                rc = 2; /* held more than its buffer */
            else if (out[m].overrun)
                rc = 3; /* emitted more than fed, or an empty piece */
        }
        for (int m = 1; m < 3 && !rc && bufs[0]; m++)
            if (out[m].len != out[0].len || memcmp(out[m].buf, out[0].buf, out[0].len) || st[m] != st[0] ||
                ov[m] != ov[0])
                rc = 4; /* depends on the cuts */
        if (!rc && bufs[0] && st[0] == 0 && (out[0].len != n || memcmp(out[0].buf, d, n)))
            rc = 5; /* nothing stripped, yet the stream changed */
    }
    for (int m = 0; m < 3; m++)
        free(bufs[m]);
    return rc;
}

#endif
