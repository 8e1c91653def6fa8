/* Tests src/proto/sse_strip.c: the usage-only chunk taken out of a stream and every other byte
 * passed on in order, however the network cuts the bytes; events forwarded as soon as they end;
 * what an unfinished or oversized event does; hostile shapes. */
#include "sb_test.h"

#include "proto/sse_strip.h"

#include <dirent.h>
#include <stdio.h>

#include "../../fuzz/sse_strip_check.h"

#define USAGE                                                                                                          \
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],"                        \
    "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":1}}}"

/* A vLLM stream with what else SSE allows: a comment, an event: field, a two-line event, CRLF
 * and CR endings, a "data:" without the space, text that quotes the usage chunk, a chunk with
 * usage next to choices (continuous usage), then the usage-only chunk (CRLF-ended) and [DONE]. */
static const char head[] = ": keep-alive\n\n"
                           "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
                           "event: message\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n"
                           "data: {\"choices\":[{\"delta\":\r\ndata: {\"content\":\"c\"}}]}\r\n\r\n"
                           "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"choices\\\":[],\\\"usage\\\":{}\"}}]}\r\r"
                           "data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":3}}\n\n";
static const char usage_ev[] = USAGE "\r\n\r\n";
static const char done[] = "data: [DONE]\n\n";

typedef struct sink {
    char buf[8192];
    size_t len;
    size_t calls;
} sink;

static void collect(void *ud, const char *at, size_t len)
{
    sink *k = ud;
    assert_true(len > 0);
    assert_true(k->len + len <= sizeof k->buf);
    memcpy(k->buf + k->len, at, len);
    k->len += len;
    k->calls++;
}

static void whole(char *out, size_t *n)
{
    *n = 0;
    memcpy(out, head, strlen(head));
    *n += strlen(head);
    memcpy(out + *n, usage_ev, strlen(usage_ev));
    *n += strlen(usage_ev);
    memcpy(out + *n, done, strlen(done));
    *n += strlen(done);
}

static void check_stripped(const sink *k)
{
    size_t h = strlen(head);
    assert_int_equal(k->len, h + strlen(done));
    assert_memory_equal(k->buf, head, h);
    assert_memory_equal(k->buf + h, done, strlen(done));
}

static void test_classify(void **state)
{
    (void)state;
    assert_true(sb_sse_is_usage_chunk(USAGE "\n\n", strlen(USAGE) + 2));
    assert_true(sb_sse_is_usage_chunk(USAGE "\r\r", strlen(USAGE) + 2));
    static const char bare[] = "data:{\"choices\":[],\"usage\":{}}\n\n"; /* no space, empty usage */
    assert_true(sb_sse_is_usage_chunk(bare, strlen(bare)));
    static const char *const not_usage[] = {
        "data: {\"choices\":[],\"usage\":null}\n\n",         /* no usage object */
        "data: {\"choices\":[{}],\"usage\":{}}\n\n",         /* choices not empty */
        "data: {\"usage\":{}}\n\n",                          /* no choices */
        "data: {\"choices\":[],\"usage\":{}\n\n",            /* malformed */
        "event: x\ndata: {\"choices\":[],\"usage\":{}}\n\n", /* another field */
        "data: {\"choices\":[],\n\ndata: \"usage\":{}}\n\n", /* two events */
        "data: {\"choices\":[],\ndata: \"usage\":{}}\n\n",   /* two data lines */
        "data: {\"choices\":[],\"usage\":{}} x\n\n",         /* trailing junk */
        "data: [DONE]\n\n",
        "\n",
        "data: {\"choices\":[],\"usage\":{}}\n", /* unfinished */
    };
    for (size_t i = 0; i < sizeof not_usage / sizeof not_usage[0]; i++)
        assert_false(sb_sse_is_usage_chunk(not_usage[i], strlen(not_usage[i])));
    /* More tokens than a usage chunk has: not one, and the read stops at the bound. */
    char big[2048] = "data: {\"choices\":[],\"usage\":{}";
    size_t n = strlen(big);
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(big + n, ",\"k%d\":%d", i, i);
    strcpy(big + n, "}\n\n");
    assert_false(sb_sse_is_usage_chunk(big, n + 3));
}

/* Every cut in two and in three: the same bytes out, the usage chunk only missing. */
static void test_every_split(void **state)
{
    (void)state;
    char s[1024];
    size_t n;
    whole(s, &n);
    char hold[1024];
    for (size_t a = 0; a <= n; a++) {
        for (size_t b = a; b <= n; b++) {
            sink k = {0};
            sb_sse_strip st;
            sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
            sb_sse_strip_feed(&st, s, a);
            sb_sse_strip_feed(&st, s + a, b - a);
            sb_sse_strip_feed(&st, s + b, n - b);
            sb_sse_strip_finish(&st);
            check_stripped(&k);
            assert_int_equal(st.stripped, 1);
            assert_int_equal(st.overflows, 0);
        }
    }
}

/* Byte by byte: each event leaves the moment its blank line (with the \n of a \r\n) arrives,
 * never later; nothing is forwarded before its event ends. */
static void test_byte_by_byte_forwards_at_once(void **state)
{
    (void)state;
    char s[1024];
    size_t n;
    whole(s, &n);
    char hold[1024];
    sink k = {0};
    sb_sse_strip st;
    sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
    static const char ev2_end[] = "\"content\":\"\"}}]}\n\n"; /* the role chunk */
    const char *e = strstr(s, ev2_end) + strlen(ev2_end);
    for (size_t i = 0; i < n; i++) {
        sb_sse_strip_feed(&st, s + i, 1);
        if (s + i + 1 == e)
            assert_int_equal(k.len, (size_t)(e - s)); /* out at its last byte */
        if (s + i + 1 == e - 1)
            assert_true(k.len < (size_t)(e - 1 - s)); /* not before */
    }
    sb_sse_strip_finish(&st);
    check_stripped(&k);
}

/* A stream without a usage chunk (the client asked and was not stripped, or an engine that
 * ignores include_usage) passes byte for byte; so does everything with cap 0. */
static void test_nothing_to_strip(void **state)
{
    (void)state;
    char hold[256];
    sink k = {0};
    sb_sse_strip st;
    sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
    sb_sse_strip_feed(&st, head, strlen(head));
    sb_sse_strip_feed(&st, done, strlen(done));
    sb_sse_strip_finish(&st);
    assert_int_equal(k.len, strlen(head) + strlen(done));
    assert_int_equal(st.stripped, 0);

    char s[1024];
    size_t n;
    whole(s, &n);
    sink k0 = {0};
    sb_sse_strip_init(&st, NULL, 0, collect, &k0);
    sb_sse_strip_feed(&st, s, n);
    assert_int_equal(k0.len, n);
    assert_memory_equal(k0.buf, s, n);
}

/* An event longer than the buffer passes as it comes, in order, counted; the stream after it
 * is stripped as before. Holding never exceeds cap, whatever the split. */
static void test_oversized_event_passes(void **state)
{
    (void)state;
    char s[3072];
    size_t n = 0;
    n += (size_t)sprintf(s, "data: {\"choices\":[{\"delta\":{\"content\":\"");
    memset(s + n, 'x', 1500);
    n += 1500;
    n += (size_t)sprintf(s + n, "\"}}]}\n\n%s\r\n\r\n%s", USAGE, done);
    size_t big_end = (size_t)(strstr(s, "\n\n") + 2 - s);
    char hold[512];
    for (size_t cut = 0; cut <= n; cut += 7) {
        sink k = {0};
        sb_sse_strip st;
        sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
        sb_sse_strip_feed(&st, s, cut);
        sb_sse_strip_feed(&st, s + cut, n - cut);
        sb_sse_strip_finish(&st);
        assert_int_equal(st.overflows, 1);
        assert_int_equal(st.stripped, 1);
        assert_int_equal(k.len, big_end + strlen(done));
        assert_memory_equal(k.buf, s, big_end);
        assert_memory_equal(k.buf + big_end, done, strlen(done));
    }
    /* No blank line ever: held up to cap, then passed on as it comes. */
    sink k = {0};
    sb_sse_strip st;
    sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
    for (int i = 0; i < 100; i++)
        sb_sse_strip_feed(&st, "data: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", 67);
    assert_true(k.len >= 100 * 67 - sizeof hold);
    assert_int_equal(st.overflows, 1);
    sb_sse_strip_finish(&st);
    assert_int_equal(k.len, 100 * 67);
}

/* An unfinished event at the end of the stream is forwarded as it came, even one that would
 * have been the usage chunk; \r at a piece's end that was not a blank line stays a line end. */
static void test_unfinished_and_cr_edges(void **state)
{
    (void)state;
    char hold[512];
    sink k = {0};
    sb_sse_strip st;
    sb_sse_strip_init(&st, hold, sizeof hold, collect, &k);
    sb_sse_strip_feed(&st, USAGE "\n", strlen(USAGE) + 1);
    assert_int_equal(k.len, 0);
    sb_sse_strip_finish(&st);
    assert_int_equal(k.len, strlen(USAGE) + 1);
    assert_int_equal(st.stripped, 0);

    /* The usage chunk ends at a \r that ends a piece: its \n, in the next piece, goes with it. */
    sink k2 = {0};
    sb_sse_strip_init(&st, hold, sizeof hold, collect, &k2);
    sb_sse_strip_feed(&st, USAGE "\r\n\r", strlen(USAGE) + 3);
    sb_sse_strip_feed(&st, "\ndata: [DONE]\r\n\r", 16);
    sb_sse_strip_feed(&st, "\n", 1);
    assert_int_equal(k2.len, 16);
    assert_memory_equal(k2.buf, "data: [DONE]\r\n\r\n", 16);
    assert_int_equal(st.stripped, 1);
}

/* The fuzz corpus, replayed through the fuzz target's checks (tests/fuzz/sse_strip_check.h),
 * and an event at the buffer's size with its \r\n cut between \r and \n. */
static void test_corpus_and_cut_independence(void **state)
{
    (void)state;
    static uint8_t data[8192];
    char path[1024];
    int files = 0;
    DIR *dir = opendir("tests/fuzz/corpus/sse_strip");
    if (!dir)
        fail_msg("cannot open tests/fuzz/corpus/sse_strip (run from the repository root)");
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "tests/fuzz/corpus/sse_strip/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        size_t len = fread(data, 1, sizeof data, f);
        fclose(f);
        files++;
        assert_int_equal(sse_strip_check(data, len), 0);
    }
    closedir(dir);
    assert_true(files >= 8);
    /* A usage chunk of exactly 64 bytes to its \r, so 65 with its \n: one verdict either way. */
    char ev[128] = "data: {\"choices\":[],\"usage\":{\"k\":\"";
    size_t n = strlen(ev);
    while (n < 64 - 6)
        ev[n++] = 'z';
    memcpy(ev + n, "\"}}\r\n\r\n", 7);
    n += 7;
    assert_true(sb_sse_is_usage_chunk(ev, n));
    assert_int_equal(n, 65);
    assert_int_equal(sse_strip_check((const uint8_t *)ev, n), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_byte_by_byte_forwards_at_once),
        cmocka_unit_test(test_nothing_to_strip),
        cmocka_unit_test(test_oversized_event_passes),
        cmocka_unit_test(test_unfinished_and_cr_edges),
        cmocka_unit_test(test_corpus_and_cut_independence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
