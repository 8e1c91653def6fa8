/* Tests src/proto/body_edit.c: a body's edits as pieces (the usage and served-name splices
 * through the inspector are tested in test_inspect.c). */
#include "sb_test.h"

#include "proto/body_edit.h"

#define LIT(s) s, sizeof(s) - 1

/* The pieces of an edited body: in order whatever the order of the edits, insertions at one
 * place in the order given, empty pieces left out, and overlapping or outside edits refused. */
static void test_body_edit_pieces(void **state)
{
    (void)state;
    const char *b = "0123456789";
    sb_body_piece p[SB_BODY_PIECES_MAX];
    size_t total = 99;
    sb_body_edit e[4] = {{5, 7, LIT("ab")}, {0, 0, LIT("<")}, {10, 10, LIT(">")}, {10, 10, LIT("!")}};
    int np = sb_body_edit_pieces(b, 10, e, 4, p, &total);
    char out[64];
    size_t at = 0;
    for (int i = 0; i < np; i++) {
        assert_true(p[i].len > 0);
        memcpy(out + at, p[i].at, p[i].len);
        at += p[i].len;
    }
    assert_int_equal(at, total);
    assert_memory_equal(out, "<01234ab789>!", 13);
    assert_int_equal(sb_body_edit_pieces(b, 10, NULL, 0, p, &total), 1);
    assert_int_equal(total, 10);
    sb_body_edit overlap[2] = {{2, 6, LIT("x")}, {5, 8, LIT("y")}};
    assert_int_equal(sb_body_edit_pieces(b, 10, overlap, 2, p, &total), -1);
    sb_body_edit outside = {9, 11, LIT("x")};
    assert_int_equal(sb_body_edit_pieces(b, 10, &outside, 1, p, &total), -1);
    sb_body_edit backwards = {6, 5, LIT("x")};
    assert_int_equal(sb_body_edit_pieces(b, 10, &backwards, 1, p, &total), -1);
    sb_body_edit five[5] = {{0}};
    assert_int_equal(sb_body_edit_pieces(b, 10, five, 5, p, &total), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body_edit_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
