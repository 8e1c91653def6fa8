/* proc_stat: the fields of a /proc/<pid>/stat line, counted from the last ')', whatever the
 * executable's name holds. */
#include "sb_test.h"

#include "proto/proc_stat.h"

/* A line as Linux 6.x writes it (52 fields); utime 250, stime 31, start 123456, vsize
 * 98304000, rss 2048; nice -5 on the way (a negative field that is not read). */
#define TAIL                                                                                                           \
    " S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 31 0 0 20 -5 3 0 123456 98304000 2048 18446744073709551615 1 1 "       \
    "0 0 0 0 0 4096 16386 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

static void check_line(const char *line)
{
    sb_proc_stat st = {0};
    assert_int_equal(sb_proc_stat_parse(line, strlen(line), &st), 0);
    assert_int_equal(st.utime_ticks, 250);
    assert_int_equal(st.stime_ticks, 31);
    assert_int_equal(st.start_ticks, 123456);
    assert_int_equal(st.vsize_bytes, 98304000);
    assert_int_equal(st.rss_pages, 2048);
}

static void test_plain_name(void **state)
{
    check_line("4242 (switchboard)" TAIL);
}

/* comm may hold spaces and parentheses: "a) 1 2 (b" must not shift the fields. */
static void test_hostile_name(void **state)
{
    check_line("4242 (a) 1 2 (b)" TAIL);
    check_line("4242 ())))" TAIL);
}

/* Cut anywhere before the space after rss, or without a ')' at all: refused, never a smaller
 * figure taken for the real one. */
static void test_cut_or_malformed(void **state)
{
    const char *line = "4242 (switchboard)" TAIL;
    const char *rss = strstr(line, " 2048 ");
    size_t full = (size_t)(rss - line) + 5; /* up to and including rss's digits */
    sb_proc_stat st;
    for (size_t n = 0; n <= full; n++)
        assert_int_equal(sb_proc_stat_parse(line, n, &st), -1);
    assert_int_equal(sb_proc_stat_parse(line, full + 1, &st), 0);
    assert_int_equal(st.rss_pages, 2048);
    const char *no_paren = "4242 switchboard S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 ";
    assert_int_equal(sb_proc_stat_parse(no_paren, strlen(no_paren), &st), -1);
    const char *neg_utime = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 -250 31 0 0 20 0 3 0 1 2 3 4 5\n";
    assert_int_equal(sb_proc_stat_parse(neg_utime, strlen(neg_utime), &st), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_name),
        cmocka_unit_test(test_hostile_name),
        cmocka_unit_test(test_cut_or_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
