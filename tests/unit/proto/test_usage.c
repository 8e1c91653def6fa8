/* Tests src/proto/usage.c: the usage object of a JSON answer or of a stream's last chunk, read
 * from the bounded tail the proxy keeps, and what hostile tails do to it. */
#include "sb_test.h"

#include "proto/usage.h"

static void scan(const char *s, sb_usage *u) { sb_usage_scan(s, strlen(s), u); }

static void test_answer_and_stream(void **state)
{
    (void)state;
    sb_usage u;

    scan("{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
         "\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":8}}}", &u);
    assert_true(u.found);
    assert_int_equal(u.prompt_tokens, 12);
    assert_int_equal(u.completion_tokens, 3);
    assert_int_equal(u.cached_tokens, 8);

    /* The last usage wins: a stream's chunks say null until the final one. */
    scan("data: {\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
         "\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", &u);
    assert_true(u.found);
    assert_int_equal(u.prompt_tokens, 5);
    assert_int_equal(u.cached_tokens, -1);

    scan("data: {\"usage\":null}\n\n", &u);
    assert_false(u.found);
    /* "usage" inside generated text is escaped there, so never read as the field. */
    scan("{\"choices\":[{\"text\":\"the \\\"usage\\\": {\\\"prompt_tokens\\\": 1}\"}]}", &u);
    assert_false(u.found);
}

/* A tail the size the proxy keeps, of hostile shapes: read in one pass, never past the end. */
static void test_hostile_tails(void **state)
{
    (void)state;
    enum { TAIL = 2048 };
    char *t = malloc(TAIL);
    sb_usage u;

    assert_non_null(t);
    memcpy(t, "\"usage\":", 8);
    memset(t + 8, '{', TAIL - 8); /* never closed */
    sb_usage_scan(t, TAIL, &u);
    assert_false(u.found);
    memset(t + 8, '"', TAIL - 8); /* quotes everywhere: each a candidate key */
    t[8] = '{';
    sb_usage_scan(t, TAIL, &u);
    assert_false(u.found);
    /* Cut inside a number or a key: what is there, never past len. */
    static const char cut[] = "\"usage\":{\"prompt_tokens\":123";
    sb_usage_scan(cut, sizeof cut - 2, &u);
    assert_true(u.found);
    assert_int_equal(u.prompt_tokens, 12);
    sb_usage_scan(cut, 20, &u);
    assert_false(u.found);
    free(t);
}

/* The tail kept while a body arrives in pieces is the body's last bytes, whatever the split. */
static void test_tail_push_any_split(void **state)
{
    (void)state;
    char body[100];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (char)('a' + i % 26);
    enum { CAP = 16 };
    for (size_t step = 1; step <= sizeof body; step++) {
        char tail[CAP];
        size_t len = 0;
        for (size_t off = 0; off < sizeof body; off += step)
            sb_usage_tail_push(tail, CAP, &len, body + off, off + step > sizeof body ? sizeof body - off : step);
        assert_int_equal(len, CAP);
        assert_memory_equal(tail, body + sizeof body - CAP, CAP);
    }
    char tail[CAP];
    size_t len = 0;
    sb_usage_tail_push(tail, CAP, &len, "abc", 3); /* shorter than the cap: all of it */
    sb_usage_tail_push(tail, CAP, &len, "", 0);
    assert_int_equal(len, 3);
    assert_memory_equal(tail, "abc", 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answer_and_stream),
        cmocka_unit_test(test_hostile_tails),
        cmocka_unit_test(test_tail_push_any_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
