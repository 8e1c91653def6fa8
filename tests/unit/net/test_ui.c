/* ui: the dashboard's files as compiled into the binary (net/ui_files.S) are byte for byte
 * src/ui/'s, found by exact path only, with content types and entity tags. */
#include "sb_test.h"

#include "net/ui.h"

static void find(const char *path, sb_ui_file *f)
{
    assert_true(sb_ui_find(path, strlen(path), f));
}

static void test_files_are_the_sources(void **st)
{
    (void)st;
    static const struct {
        const char *path, *src, *type;
    } want[] = {
        {"/", "src/ui/index.html", "text/html; charset=utf-8"},
        {"/ui/app.js", "src/ui/app.js", "text/javascript; charset=utf-8"},
        {"/ui/app.css", "src/ui/app.css", "text/css; charset=utf-8"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        sb_ui_file f;
        find(want[i].path, &f);
        assert_string_equal(f.path, want[i].path);
        assert_string_equal(f.content_type, want[i].type);
        size_t len;
        char *src = sb_test_read_file(want[i].src, &len);
        assert_true(len > 0);
        assert_int_equal(f.len, len);
        assert_memory_equal(f.data, src, len);
        free(src);
    }
}

static void test_only_exact_paths(void **st)
{
    (void)st;
    static const char *const miss[] = {"",
                                       "/index.html",
                                       "/ui",
                                       "/ui/",
                                       "/ui/app.j",
                                       "/ui/app.jsx",
                                       "/ui/APP.JS",
                                       "//",
                                       "/ui//app.js",
                                       "/ui/../ui/app.js",
                                       "/metrics",
                                       "/ui/app.js/",
                                       "/ui/app.css?"};
    sb_ui_file f = {0};
    for (size_t i = 0; i < sizeof miss / sizeof miss[0]; i++) {
        assert_false(sb_ui_find(miss[i], strlen(miss[i]), &f));
        assert_null(f.data); /* untouched on a miss */
    }
    /* A length shorter than the string: only the first len bytes are the path. */
    assert_true(sb_ui_find("/ui/app.jsXYZ", 10, &f));
    assert_string_equal(f.path, "/ui/app.js");
}

static void test_owned_paths(void **st)
{
    (void)st;
    assert_true(sb_ui_owns("/", 1));
    assert_true(sb_ui_owns("/ui/", 4));
    assert_true(sb_ui_owns("/ui/anything", 12));
    assert_false(sb_ui_owns("", 0));
    assert_false(sb_ui_owns("/ui", 3));
    assert_false(sb_ui_owns("/uix", 4));
    assert_false(sb_ui_owns("/metrics", 8));
    assert_false(sb_ui_owns("/debug/endpoints", 16));
    assert_false(sb_ui_owns("//", 2));
}

static void test_etags_are_content_hashes(void **st)
{
    (void)st;
    sb_ui_file a, b, a2;
    find("/", &a);
    find("/ui/app.js", &b);
    find("/", &a2);
    char ta[SB_UI_ETAG_MAX], tb[SB_UI_ETAG_MAX], ta2[SB_UI_ETAG_MAX];
    sb_ui_etag(&a, ta);
    sb_ui_etag(&b, tb);
    sb_ui_etag(&a2, ta2);
    assert_int_equal(strlen(ta), 18);
    assert_true(ta[0] == '"' && ta[17] == '"');
    for (int i = 1; i < 17; i++)
        assert_non_null(strchr("0123456789abcdef", ta[i]));
    assert_string_equal(ta, ta2);
    assert_string_not_equal(ta, tb);
    /* One byte more or less is another tag. */
    sb_ui_file shorter = a;
    shorter.len--;
    char ts[SB_UI_ETAG_MAX];
    sb_ui_etag(&shorter, ts);
    assert_string_not_equal(ta, ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_are_the_sources),
        cmocka_unit_test(test_only_exact_paths),
        cmocka_unit_test(test_owned_paths),
        cmocka_unit_test(test_etags_are_content_hashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
