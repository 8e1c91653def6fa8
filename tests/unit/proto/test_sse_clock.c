/* Tests src/proto/sse_clock.c: the data events of a stream counted and timed the same however
 * the network cuts its bytes, and the lines that are not events left uncounted. */
#include "sb_test.h"

#include "proto/sse_clock.h"

/* A vLLM chat stream with what else SSE allows: a comment, an event: field, a two-line event,
 * CRLF endings, a "data:" without the space, the usage-only chunk and [DONE]. 6 data events. */
static const char stream[] = ": keep-alive\n\n"
                             "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
                             "data: {\"choices\":[{\"delta\":{\"content\":\"data: no\"}}]}\n\n"
                             "event: message\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n"
                             "data: {\"choices\":[{\"delta\":\r\ndata: {\"content\":\"c\"}}]}\r\n\r\n"
                             "data: {\"choices\":[{\"delta\":{\"content\":\"d\"}}]}\r\r"
                             "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n"
                             "data: [DONE]\n\n";

/* Offset in the stream of the event value that begins with needle_after: the byte whose
 * arrival the clock must stamp that event with. */
static size_t value_at(const char *needle_after)
{
    const char *p = strstr(stream, needle_after);
    assert_non_null(p);
    return (size_t)(p - stream);
}

static void test_whole_stream(void **state)
{
    (void)state;
    sb_sse_clock c;
    sb_sse_clock_init(&c);
    sb_sse_clock_feed(&c, stream, strlen(stream), 7);
    assert_int_equal(c.events, 6);
    assert_int_equal(c.first_ns, 7);
    assert_int_equal(c.last_ns, 7);
}

/* Every cut in two: the count never changes, and each event is stamped with the time of the
 * piece that held its value's first byte. */
static void test_every_split(void **state)
{
    (void)state;
    size_t n = strlen(stream);
    size_t first = value_at("{\"choices\":[{\"delta\":{\"role\""); /* the role chunk */
    size_t last = value_at("{\"choices\":[],\"usage\"");           /* the usage chunk */
    for (size_t cut = 0; cut <= n; cut++) {
        sb_sse_clock c = {0};
        sb_sse_clock_feed(&c, stream, cut, 1);
        sb_sse_clock_feed(&c, stream + cut, n - cut, 2);
        assert_int_equal(c.events, 6);
        assert_int_equal(c.first_ns, first < cut ? 1 : 2);
        assert_int_equal(c.last_ns, last < cut ? 1 : 2);
    }
}

/* Byte by byte, stamped with the byte's offset + 1: the exact byte each event is timed at. */
static void test_byte_by_byte(void **state)
{
    (void)state;
    size_t n = strlen(stream);
    sb_sse_clock c = {0};
    uint64_t seen = 0;
    size_t stamps[8];
    for (size_t i = 0; i < n; i++) {
        sb_sse_clock_feed(&c, stream + i, 1, (sb_ns)(i + 1));
        if (c.events != seen) {
            assert_int_equal(c.events, seen + 1);
            stamps[seen++] = i;
            assert_int_equal(c.last_ns, i + 1);
        }
    }
    assert_int_equal(seen, 6);
    assert_int_equal(stamps[0], value_at("{\"choices\":[{\"delta\":{\"role\""));
    assert_int_equal(stamps[2], value_at("{\"choices\":[{\"delta\":{\"content\":\"b\""));
    assert_int_equal(stamps[5], value_at("{\"choices\":[],\"usage\""));
    assert_int_equal(c.first_ns, stamps[0] + 1);
}

/* Not events: other fields, comments, "data" not at a line start, a field named "datax",
 * [DONE]; and an empty "data:" is an event (the SSE specification dispatches it). */
static void test_not_events(void **state)
{
    (void)state;
    sb_sse_clock c = {0};
    static const char s[] = "event: data:\n: data: x\nid: 1\n datax: {}\ndatax: {}\ndat\n\ndata: [DONE]\n\n";
    sb_sse_clock_feed(&c, s, strlen(s), 5);
    assert_int_equal(c.events, 0);
    assert_int_equal(c.first_ns, 0);
    sb_sse_clock_feed(&c, "data:\n\n", 7, 9);
    assert_int_equal(c.events, 1);
    assert_int_equal(c.first_ns, 9);
}

/* Long decided lines (a JSON answer, a long event) are skipped eight bytes a step: a line end
 * at every offset of that step, \n, \r or \r\n, cut anywhere, counts as when read byte by
 * byte. The reference is the byte-by-byte feed (one byte can never take the wide path). */
static void test_line_ends_at_every_alignment(void **state)
{
    (void)state;
    static const char *const ends[] = {"\n", "\r", "\r\n"};
    char s[256];
    for (size_t e = 0; e < 3; e++) {
        for (size_t pad = 0; pad < 24; pad++) {
            /* A decided line of pad + 3 bytes, its end, then an event; then a long value. */
            size_t n = 0;
            n += (size_t)sprintf(s + n, "id:");
            memset(s + n, 'x', pad);
            n += pad;
            n += (size_t)sprintf(s + n, "%sdata: {\"a\":1}%s%s", ends[e], ends[e], ends[e]);
            memset(s + n, 'y', 17);
            n += 17;
            n += (size_t)sprintf(s + n, "%s%sdata: [DONE]%s%sdata:z%s", ends[e], ends[e], ends[e], ends[e], ends[e]);
            sb_sse_clock ref = {0};
            for (size_t i = 0; i < n; i++)
                sb_sse_clock_feed(&ref, s + i, 1, (sb_ns)(i + 1));
            assert_int_equal(ref.events, 2);
            for (size_t cut = 0; cut <= n; cut++) {
                sb_sse_clock c = {0};
                sb_sse_clock_feed(&c, s, cut, 1);
                sb_sse_clock_feed(&c, s + cut, n - cut, 2);
                assert_int_equal(c.events, ref.events);
                sb_sse_clock w = {0};
                sb_sse_clock_feed(&w, s, n, 1);
                assert_memory_equal(&w.state, &ref.state, 4); /* state, matched, in_event, after_cr */
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_stream),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_not_events),
        cmocka_unit_test(test_line_ends_at_every_alignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
