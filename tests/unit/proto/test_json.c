/* Tests for src/proto/json.c: the tokenizer against the real jsmn (same verdicts, same
 * tokens), the syntax check against an independent validator, the depth bound at its edge,
 * lent buffers, and linear cost on hostile shapes, asserted on the step counter (work done),
 * never on time. */
#include "sb_test.h"

#include "base/alloc.h"
#include "base/buf.h"
#include "proto/json.h"

#include <dirent.h>

/* The real jsmn (strict, parent links), as the reference. */
#define JSMN_STATIC
#define JSMN_PARENT_LINKS
#define JSMN_STRICT
#include <jsmn.h>

_Static_assert(sizeof(sb_json_tok) == sizeof(jsmntok_t), "jsmn's token layout");
_Static_assert((int)SB_JSON_OBJECT == (int)JSMN_OBJECT && (int)SB_JSON_ARRAY == (int)JSMN_ARRAY &&
                   (int)SB_JSON_STRING == (int)JSMN_STRING && (int)SB_JSON_PRIMITIVE == (int)JSMN_PRIMITIVE,
               "jsmn's type values");

#define LIT(s) s, sizeof(s) - 1

static sb_json j;

static int setup(void **state)
{
    (void)state;
    memset(&j, 0, sizeof j);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sb_json_free(&j);
    sb_alloc_fail_after(-1);
    return 0;
}

/* Heap copies of exactly len bytes, so ASan sees any read past the end. */
static int tokenize_n(const char *s, size_t len)
{
    char *copy = malloc(len ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, s, len);
    rc = sb_json_tokenize(&j, copy, len);
    free(copy);
    return rc;
}

static int parse_n(const char *s, size_t len)
{
    char *copy = malloc(len ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, s, len);
    rc = sb_json_parse(&j, copy, len);
    free(copy);
    return rc;
}

static int parse(const char *s) { return parse_n(s, strlen(s)); }

/* ---- an independent validator: RFC 8259 (raw control bytes and invalid UTF-8 allowed in
 * strings, no NUL byte anywhere), any value at the root; a primitive at the root must be
 * followed by something (jsmn's strict mode wants a delimiter after a primitive). ---- */

#define JSON_REF_MAX_DEPTH 5000
#include "json_reference.h"

static int json_valid(const char *b, size_t len)
{
    const char *e = b + len, *p = v_ws(b, e), *root = p, *end;

    if (p == e || !(end = v_value(p, e, 0)))
        return 0;
    if (end == e && *root != '{' && *root != '[' && *root != '"')
        return 0; /* a bare primitive root with nothing after it */
    if (memchr(b, '\0', len))
        return 0;
    return v_ws(end, e) == e;
}

/* One input: sb_json_tokenize gives jsmn's verdict and, when jsmn accepts, jsmn's tokens;
 * sb_json_parse accepts exactly what the validator accepts. The bound is lifted: this is
 * about the tokens (test_depth_bound has the bound). */
static void check_as_jsmn(const char *s, size_t len)
{
    size_t cap = len + 2;
    jsmntok_t *ref = malloc(cap * sizeof *ref);
    char *copy = malloc(len ? len : 1);
    jsmn_parser p;
    int n, rc, valid = json_valid(s, len);

    assert_non_null(ref);
    assert_non_null(copy);
    memcpy(copy, s, len);
    j.max_depth = 1000000;
    jsmn_init(&p);
    n = jsmn_parse(&p, copy, len, ref, (unsigned)cap);
    rc = sb_json_tokenize(&j, copy, len);
    if (n >= 0) {
        if (rc != n)
            fail_msg("jsmn %d tokens, here %d: %.*s", n, rc, (int)len, s);
        assert_memory_equal(j.tokens, ref, (size_t)n * sizeof *ref);
    } else if (rc != SB_JSON_BAD) {
        fail_msg("jsmn rejects (%d), here %d: %.*s", n, rc, (int)len, s);
    }
    rc = sb_json_parse(&j, copy, len);
    if ((rc > 0) != valid)
        fail_msg("parse %d, valid %d: %.*s", rc, valid, (int)len, s);
    for (int i = 0; i < rc; i++) { /* skip: the first token starting past i's end */
        int k = i + 1;
        while (k < rc && j.tokens[k].start < j.tokens[i].end)
            k++;
        assert_int_equal(sb_json_skip(j.tokens, rc, i), k);
    }
    j.max_depth = 0;
    free(copy);
    free(ref);
}

static uint64_t mut_state = 0x2545F4914F6CDD1DULL;

static uint64_t mut_rand(void)
{
    mut_state ^= mut_state << 13;
    mut_state ^= mut_state >> 7;
    mut_state ^= mut_state << 17;
    return mut_state;
}

/* A copy of s with one to three random edits among JSON-significant bytes and fragments. */
static size_t mutate(const char *s, size_t len, char *out, size_t cap)
{
    static const char *const frags[] = {"\"", "\\", "\\u00e9", "{", "}", "[", "]", ":", ",", " ", "true", "-",
                                  "0", "1e5", "\"a\":", "[1,2]", "{}", "[]", ":}", "]]", "\0"};
    static const char special[] = "\"\\{}[]:,0-tfn \x01\xff";
    return json_ref_mutate(s, len, out, cap, frags, sizeof frags / sizeof frags[0], special, mut_rand);
}

/* Both corpora (request bodies, and the tokenizer's own hostile shapes), each file and 40
 * mutations of it. */
static void test_matches_jsmn_on_corpora(void **state)
{
    static const char *dirs[] = {"tests/fuzz/corpus/json", "tests/fuzz/corpus/inspect"};
    static char data[4096], mutated[4200];
    char path[8192];
    int files = 0;

    for (size_t d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;

        if (!dir)
            fail_msg("cannot open corpus %s (run from the repository root)", dirs[d]);
        while ((e = readdir(dir)) != NULL) {
            size_t len;
            FILE *f;

            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            f = fopen(path, "rb");
            assert_non_null(f);
            len = fread(data, 1, sizeof data, f);
            assert_true(len < sizeof data);
            fclose(f);
            files++;
            check_as_jsmn(data, len);
            for (int m = 0; m < 40; m++)
                check_as_jsmn(mutated, mutate(data, len, mutated, sizeof mutated));
        }
        closedir(dir);
    }
    assert_true(files >= 30);
}

/* jsmn's quirks, one by one. */
static void test_quirks(void **state)
{
    static const char *cases[] = {
        "{}:}}}}",     /* close brackets with nothing open: the root's type, a parent set */
        "{}:]",        /* ... but not another type */
        "[]:]]",       /* arrays too */
        "[[]:[]:[]]",  /* a container whose parent is a closed one */
        "{\"a\":1}}",  /* a stray close after the root: no parent set */
        "[1:2]",       /* ':' makes the last token the parent */
        "[\"a\":1,2]", /* ',' moves back from a string parent */
        "{\"a\" 1}",   /* no colon */
        "[1 2]",       /* no comma */
        "[1,]",        /* trailing comma */
        "{}{}",        /* two roots */
        "1",           /* a bare primitive needs a delimiter */
        "1 ",
        "\"a\"",
        "[tru]",
        "[01]",
        "{\"a\":[}",
        "",
        " ",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_as_jsmn(cases[i], strlen(cases[i]));
    assert_true(tokenize_n(LIT("{}:}}}}")) == 1);
    assert_int_equal(parse("{}:}}}}"), SB_JSON_BAD);
}

/* A body nesting `depth` arrays, or objects with a key at each level, or both alternating. */
enum shape { ARRAYS, OBJECTS, MIXED };

static void nest(sb_buf *b, enum shape s, size_t depth)
{
    b->len = 0;
    for (size_t i = 0; i < depth; i++)
        assert_int_equal(sb_buf_puts(b, s == ARRAYS || (s == MIXED && i % 2) ? "[" : "{\"k\":"), 0);
    assert_int_equal(sb_buf_puts(b, depth ? "1" : "{}"), 0);
    for (size_t i = depth; i-- > 0;)
        assert_int_equal(sb_buf_puts(b, s == ARRAYS || (s == MIXED && i % 2) ? "]" : "}"), 0);
}

/* max_depth containers open at once are fine; one more is TOO_DEEP, whatever the shape. */
static void test_depth_bound(void **state)
{
    static const size_t bounds[] = {1, 2, 5, 128, 1000};
    sb_buf b = {0};

    for (int s = ARRAYS; s <= MIXED; s++) {
        for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
            j.max_depth = bounds[k];
            nest(&b, (enum shape)s, bounds[k]);
            assert_true(parse_n(b.data, b.len) > 0);
            nest(&b, (enum shape)s, bounds[k] + 1);
            assert_int_equal(parse_n(b.data, b.len), SB_JSON_TOO_DEEP);
            assert_int_equal(tokenize_n(b.data, b.len), SB_JSON_TOO_DEEP);
        }
    }
    /* 0 means the default, 128. */
    j.max_depth = 0;
    nest(&b, ARRAYS, SB_JSON_DEFAULT_MAX_DEPTH);
    assert_true(parse_n(b.data, b.len) > 0);
    nest(&b, ARRAYS, SB_JSON_DEFAULT_MAX_DEPTH + 1);
    assert_int_equal(parse_n(b.data, b.len), SB_JSON_TOO_DEEP);
    /* Depth is containers open at once, not containers in all: siblings do not add up. */
    j.max_depth = 2;
    assert_true(parse("[[],[],[[]]]") == SB_JSON_TOO_DEEP);
    assert_true(parse("[[],[],[1],{\"a\":[]}]") == SB_JSON_TOO_DEEP);
    assert_true(parse("[[],[],[1],{\"a\":1}]") > 0);
    /* Refused as soon as the bound is crossed: before a syntax error later on, and before
     * the input ends (the 100,000 levels behind it are never read). */
    j.max_depth = 3;
    assert_int_equal(parse("[[[[ this is not json"), SB_JSON_TOO_DEEP);
    nest(&b, ARRAYS, 100000);
    assert_int_equal(parse_n(b.data, b.len), SB_JSON_TOO_DEEP);
    assert_true(j.steps <= 4);
    sb_buf_free(&b);
}

/* ---- linear cost: the step counter over ladders of sizes ---- */

typedef void (*shape_fn)(sb_buf *b, size_t n);

static void put_n(sb_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(sb_buf_puts(b, s), 0);
}

static void sh_arrays(sb_buf *b, size_t n) { put_n(b, "[", n); put_n(b, "]", n); }
static void sh_objects(sb_buf *b, size_t n) { put_n(b, "{\"a\":", n); put_n(b, "1", 1); put_n(b, "}", n); }
static void sh_mixed(sb_buf *b, size_t n) { put_n(b, "[{\"k\":", n); put_n(b, "[]", 1); put_n(b, "}]", n); }
static void sh_values(sb_buf *b, size_t n) { put_n(b, "[1,\"s\",", n); put_n(b, "0", 1); put_n(b, "]", n); }
/* Deep, all closed, then ':' makes the deepest token the parent and every stray close
 * bracket is accepted by walking from it to the root (jsmn: O(depth) each). */
static void sh_quirk(sb_buf *b, size_t n) { put_n(b, "[", n); put_n(b, "]", n); put_n(b, ":", 1); put_n(b, "]", n); }
/* Containers whose parent is a closed container: each close walks past all the earlier ones. */
static void sh_colon_chain(sb_buf *b, size_t n) { put_n(b, "[[]", 1); put_n(b, ":[]", n); put_n(b, "]", 1); }
/* Deep, closed, deep again, many times: the same levels walked over and over. */
static void sh_sawtooth(sb_buf *b, size_t n)
{
    put_n(b, "[", 1);
    for (size_t k = 0; k < 16; k++) {
        put_n(b, k ? ",[" : "[", n / 16);
        put_n(b, "]", n / 16);
    }
    put_n(b, "]", 1);
}
static void sh_unclosed(sb_buf *b, size_t n) { put_n(b, "[", n); }
static void sh_wide(sb_buf *b, size_t n) { put_n(b, "[", 1); put_n(b, "1,", n); put_n(b, "1]", 1); }
static void sh_dup_keys(sb_buf *b, size_t n) { put_n(b, "{", 1); put_n(b, "\"a\":{},", n); put_n(b, "\"a\":1}", 1); }

static void test_linear_steps(void **state)
{
    static const struct {
        const char *name;
        shape_fn fn;
    } shapes[] = {
        {"arrays", sh_arrays}, {"objects", sh_objects}, {"mixed", sh_mixed}, {"values", sh_values},
        {"quirk", sh_quirk}, {"colon_chain", sh_colon_chain}, {"sawtooth", sh_sawtooth},
        {"unclosed", sh_unclosed}, {"wide", sh_wide}, {"dup_keys", sh_dup_keys},
    };
    static const size_t ladder[] = {1000, 10000, 100000};
    sb_buf b = {0};

    j.max_depth = 1000000;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t k = 0; k < sizeof ladder / sizeof ladder[0]; k++) {
            uint64_t tok_steps;
            b.len = 0;
            shapes[s].fn(&b, ladder[k]);
            (void)sb_json_tokenize(&j, b.data, b.len);
            tok_steps = j.steps;
            (void)sb_json_parse(&j, b.data, b.len);
            /* At most one step per byte in the tokenizer; the check walks each token at most
             * a few times. A quadratic walk would be thousands of times over. */
            if (tok_steps > b.len || j.steps > 4 * (uint64_t)b.len + 8)
                fail_msg("%s, n = %zu: %zu bytes, %llu tokenizer steps, %llu parse steps", shapes[s].name,
                         ladder[k], b.len, (unsigned long long)tok_steps, (unsigned long long)j.steps);
        }
    }
    sb_buf_free(&b);
}

/* ---- storage ---- */

static void test_lent_buffer(void **state)
{
    sb_json_tok buf[7];

    sb_json_lend(&j, buf, sizeof buf);
    sb_alloc_fail_after(0); /* a lent buffer is never grown */
    assert_int_equal(parse("{\"a\":[1,2],\"b\":3}"), 7);
    assert_true(j.tokens == buf);
    assert_int_equal(parse("{\"a\":[1,2,3],\"b\":3}"), SB_JSON_TOO_MANY);
    sb_alloc_fail_after(-1);
    sb_json_free(&j); /* forgets the buffer, frees nothing */
    assert_null(j.tokens);
    assert_int_equal(parse("{\"a\":[1,2,3],\"b\":3}"), 8);
}

static void test_grow_and_bounds(void **state)
{
    sb_buf b = {0};

    sb_alloc_fail_after(0);
    assert_int_equal(parse("[1]"), SB_JSON_NOMEM);
    sb_alloc_fail_after(-1);
    j.max_tokens = 3;
    assert_int_equal(parse("[1,2]"), 3);
    assert_int_equal(parse("[1,2,3]"), SB_JSON_TOO_MANY);
    j.max_tokens = 0;
    put_n(&b, "[", 1);
    put_n(&b, "1,", 5000);
    put_n(&b, "1]", 1);
    assert_int_equal(parse_n(b.data, b.len), 5002);
    sb_buf_free(&b);
}

/* ---- navigation and strings ---- */

static void test_skip_and_str_is(void **state)
{
    static const char doc[] = "{\"a\":[1,[2,{\"x\":3}]],\"mod\\u0065l\":\"m\",\"c\":{}}";
    const sb_json_tok *t;

    assert_int_equal(parse(doc), 13);
    t = j.tokens;
    assert_int_equal(sb_json_skip(t, 13, 1), 2);  /* a key: its own token only */
    assert_int_equal(sb_json_skip(t, 13, 2), 9);  /* the array after "a" */
    assert_int_equal(sb_json_skip(t, 13, 11), 12);
    assert_int_equal(sb_json_skip(t, 13, 0), 13);
    assert_true(sb_json_str_is(doc, &t[9], LIT("model")));
    assert_false(sb_json_str_is(doc, &t[9], LIT("mode")));
    assert_false(sb_json_str_is(doc, &t[2], LIT("a")));
    assert_true(sb_json_str_is(doc, &t[1], LIT("a")));
}

/* Only the object's own keys count (not a nested object's), compared decoded, the last
 * duplicate wins; null is present as a token but not as a value. */
static void test_find_keys(void **state)
{
    static const char doc[] = "{\"a\":1,\"b\":{\"a\":2},\"mod\\u0065l\":\"m\",\"a\":null}";
    static const sb_json_key keys[] = {{LIT("a")}, {LIT("model")}, {LIT("b")}, {LIT("zz")}};
    int v[4];

    assert_int_equal(parse(doc), 11);
    sb_json_find_keys(j.tokens, 11, doc, 0, keys, 4, v);
    assert_int_equal(v[0], 10);
    assert_int_equal(v[1], 8);
    assert_int_equal(v[2], 4);
    assert_int_equal(v[3], -1);
    assert_false(sb_json_present(j.tokens, v[0], doc));
    assert_true(sb_json_present(j.tokens, v[1], doc));
    assert_false(sb_json_present(j.tokens, v[3], doc));
    sb_json_find_keys(j.tokens, 11, doc, 4, keys, 4, v);
    assert_int_equal(v[0], 6);
    assert_int_equal(v[1], -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matches_jsmn_on_corpora, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quirks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_depth_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linear_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lent_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_and_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_skip_and_str_is, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_keys, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
