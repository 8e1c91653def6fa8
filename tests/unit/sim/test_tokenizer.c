/* Tests src/sim/tokenizer.c: the piece rule, determinism, and realistic token counts. */
#include "sb_test.h"

#include <xxhash.h>

#include "sim/tokenizer.h"

static size_t tok(const char *s, uint32_t *out, size_t cap)
{
    return sb_tokenize(s, strlen(s), out, cap);
}

static uint32_t id_of(const char *piece)
{
    return (uint32_t)(XXH3_64bits(piece, strlen(piece)) & 0x7fffffffu);
}

static void test_empty(void **state)
{
    (void)state;
    assert_int_equal(sb_tokenize("", 0, NULL, 0), 0);
    assert_int_equal(sb_tokenize(NULL, 0, NULL, 0), 0);
}

static void test_pieces(void **state)
{
    (void)state;
    uint32_t ids[16];
    /* Whitespace rides with the following word; punctuation is a piece of its own. */
    assert_int_equal(tok("Hello world!", ids, 16), 3);
    assert_int_equal(ids[0], id_of("Hello"));
    assert_int_equal(ids[1], id_of(" world"));
    assert_int_equal(ids[2], id_of("!"));
    /* Words of up to 6 bytes are whole; longer ones are cut every 4 bytes. */
    assert_int_equal(tok(" batching", ids, 16), 2);
    assert_int_equal(ids[0], id_of(" batc"));
    assert_int_equal(ids[1], id_of("hing"));
    assert_int_equal(tok(" server", ids, 16), 1);
    assert_int_equal(tok("abcdefg", ids, 16), 2);
    assert_int_equal(ids[0], id_of("abcd"));
    assert_int_equal(ids[1], id_of("efg"));
    /* A whitespace run: all but its last byte stand alone (cut every 4 bytes). */
    assert_int_equal(tok("a      b", ids, 16), 4);
    assert_int_equal(ids[1], id_of("    "));
    assert_int_equal(ids[2], id_of(" "));
    assert_int_equal(ids[3], id_of(" b"));
    /* Trailing whitespace is its own piece; UTF-8 stays inside words. */
    assert_int_equal(tok("ok \n", ids, 16), 2);
    assert_int_equal(ids[1], id_of(" \n"));
    assert_int_equal(tok("caf\xc3\xa9", ids, 16), 1);
}

static const char english[] =
    "The history of computing is longer than the history of computing hardware and modern "
    "computing technology and includes the history of methods intended for pen and paper or for "
    "chalk and slate, with or without the aid of tables. Digital computing is intimately tied to "
    "the representation of numbers. But long before abstractions like the number arose, there "
    "were mathematical concepts to serve the purposes of civilization. These concepts are "
    "implicit in concrete practices such as one-to-one correspondence, the basis of counting, "
    "and comparison to a standard, used for measurement. Continuous batching lets a model server "
    "admit new requests between decoding steps, so that short requests do not wait behind long "
    "ones; the key-value cache keeps the attention state of every token already processed.";

static void test_english_bytes_per_token(void **state)
{
    (void)state;
    size_t len = sizeof english - 1, n = sb_tokenize(english, len, NULL, 0);
    double bpt = (double)len / (double)n;
    /* Llama 3's tokenizer gives about 4 to 4.5 bytes per token on English prose. */
    assert_true(bpt > 3.6 && bpt < 4.6);
}

static void test_deterministic_and_capped(void **state)
{
    (void)state;
    size_t len = sizeof english - 1, n = sb_tokenize(english, len, NULL, 0);
    uint32_t a[512], b[512], c[10];
    assert_true(n <= 512);
    assert_int_equal(sb_tokenize(english, len, a, 512), n);
    assert_int_equal(sb_tokenize(english, len, b, 512), n);
    assert_memory_equal(a, b, n * sizeof *a);
    /* A short buffer gets the first ids and the full count. */
    memset(c, 0xff, sizeof c);
    assert_int_equal(sb_tokenize(english, len, c, 5), n);
    assert_memory_equal(c, a, 5 * sizeof *a);
    assert_int_equal(c[5], 0xffffffffu);
    for (size_t i = 0; i < n; i++)
        assert_true(a[i] < (1u << 31));
    /* A shared prefix of text gives a shared prefix of tokens. */
    size_t m = sb_tokenize(english, 200, b, 512);
    assert_true(m > 10);
    assert_memory_equal(a, b, (m - 1) * sizeof *a);
}

static void test_different_text_different_ids(void **state)
{
    (void)state;
    uint32_t a[4], b[4];
    tok("Hello", a, 4);
    tok(" Hello", b, 4);
    assert_int_not_equal(a[0], b[0]);
    tok("hello", b, 4);
    assert_int_not_equal(a[0], b[0]);
}

static void test_binary_input(void **state)
{
    (void)state;
    const char bin[] = {'a', 0, 'b', '\xff', ' ', 0};
    uint32_t ids[8];
    assert_int_equal(sb_tokenize(bin, sizeof bin, ids, 8), 4); /* a, NUL, b\xff, " NUL" */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_english_bytes_per_token),
        cmocka_unit_test(test_deterministic_and_capped),
        cmocka_unit_test(test_different_text_different_ids),
        cmocka_unit_test(test_binary_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
