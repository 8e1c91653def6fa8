#include "sb_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "proto/auth.h"

static sb_api_key key_of(const char *text, int band, bool admits)
{
    sb_api_key k = {.band = band, .admits = admits};
    sb_auth_digest(text, strlen(text), k.digest);
    return k;
}

static const sb_api_key *find(const sb_auth_keys *t, const char *text)
{
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest(text, strlen(text), d);
    return sb_auth_keys_find(t, d);
}

static void test_digest_is_sha256(void **state)
{
    (void)state;
    /* FIPS 180-2's "abc" vector. */
    static const uint8_t abc[SB_AUTH_DIGEST_LEN] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
                                                    0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
                                                    0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest("abc", 3, d);
    assert_memory_equal(d, abc, sizeof d);
}

static void test_bearer(void **state)
{
    (void)state;
    const char *tok;
    size_t n;
    assert_true(sb_auth_bearer("Bearer sk-1", 11, &tok, &n));
    assert_int_equal(n, 4);
    assert_memory_equal(tok, "sk-1", 4);
    assert_true(sb_auth_bearer("bearer \t sk-2  ", 15, &tok, &n));
    assert_int_equal(n, 4);
    assert_memory_equal(tok, "sk-2", 4);
    assert_false(sb_auth_bearer("Bearer ", 7, &tok, &n));
    assert_false(sb_auth_bearer("Bearer    ", 10, &tok, &n));
    assert_false(sb_auth_bearer("Basic dXNlcjpw", 14, &tok, &n));
    assert_false(sb_auth_bearer("Bearersk-1", 10, &tok, &n));
    assert_false(sb_auth_bearer("sk-1", 4, &tok, &n));
    assert_false(sb_auth_bearer("", 0, &tok, &n));
}

static void test_table(void **state)
{
    (void)state;
    sb_auth_keys t = {0};
    const char *why = NULL;
    char name[32];
    /* Enough keys that a wrong ordering or search bound shows. */
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof name, "sk-%d", i);
        sb_api_key k = key_of(name, i % 3, i % 2 == 0);
        assert_int_equal(sb_auth_keys_add(&t, &k, &why), 0);
    }
    assert_int_equal(t.n, 500);
    assert_int_equal(sb_auth_keys_clients(&t), 250);
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof name, "sk-%d", i);
        const sb_api_key *k = find(&t, name);
        assert_non_null(k);
        assert_int_equal(k->band, i % 3);
        snprintf(name, sizeof name, "sk-%d-no", i);
        assert_null(find(&t, name));
    }
    /* Merging a band-only entry into a client key, and the conflicts. */
    sb_api_key k = key_of("sk-1", -1, false);
    assert_int_equal(sb_auth_keys_add(&t, &k, &why), 0); /* sk-1: client, band 1; this names none */
    k = key_of("sk-1", 2, false);
    assert_int_equal(sb_auth_keys_add(&t, &k, &why), -2);
    assert_string_equal(why, "the same key is given two different bands");
    k = key_of("sk-0", 0, true);
    assert_int_equal(sb_auth_keys_add(&t, &k, &why), -2);
    assert_string_equal(why, "the same key is listed twice");
    k = key_of("sk-3", -1, true); /* sk-3 was band-only (odd): now a client key too */
    assert_int_equal(sb_auth_keys_add(&t, &k, &why), 0);
    assert_true(find(&t, "sk-3")->admits);
    assert_int_equal(find(&t, "sk-3")->band, 0);
    assert_int_equal(t.n, 500);
    sb_auth_keys_free(&t);
    assert_int_equal(t.n, 0);
    assert_null(find(&t, "sk-1"));
}

static long parse(const char *text, sb_auth_keys *t, sb_auth_file_error *err)
{
    char *copy = strdup(text);
    long n = sb_auth_parse_keys_file(copy, strlen(copy), t, err);
    for (size_t i = 0; i < strlen(text); i++)
        assert_int_equal(copy[i], 0); /* wiped, whatever the outcome */
    free(copy);
    return n;
}

static void test_keys_file(void **state)
{
    (void)state;
    sb_auth_keys t = {0};
    sb_auth_file_error err;
    assert_int_equal(parse("# keys for the gateway\r\n"
                           "sk-a\r\n"
                           "   \n"
                           "\tsk-b tenant=team.b band=critical # on call\n"
                           "sk-c band=sheddable tenant=batch\n"
                           "  # indented comment\n"
                           "sk-d",
                           &t, &err),
                     4);
    assert_true(find(&t, "sk-a")->admits);
    assert_int_equal(find(&t, "sk-a")->band, -1);
    assert_string_equal(find(&t, "sk-b")->tenant, "team.b");
    assert_int_equal(find(&t, "sk-b")->band, 0);
    assert_string_equal(find(&t, "sk-c")->tenant, "batch");
    assert_int_equal(find(&t, "sk-c")->band, 2);
    assert_non_null(find(&t, "sk-d"));
    assert_null(find(&t, "sk-a\r"));
    sb_auth_keys_free(&t);

    assert_int_equal(parse("", &t, &err), 0);
    assert_int_equal(parse("# only a comment\n\n", &t, &err), 0);

    static const struct {
        const char *text;
        int line;
        const char *needle;
    } bad[] = {
        {"sk-a\nsk-b band=urgent\n", 2, "band= must be critical, standard or sheddable"},
        {"sk-a tenant=a/b\n", 1, "tenant= must be 1 to 64"},
        {"sk-a tenant=\n", 1, "unknown field"},
        {"sk-a tenant=x tenant=y\n", 1, "tenant= is given twice"},
        {"sk-a band=critical band=standard\n", 1, "band= is given twice"},
        {"sk-a colour=red\n", 1, "unknown field"},
        {"sk-a\n\nsk-a\n", 3, "the same key is listed twice"},
        {"sk-\x01\n", 1, "printable ASCII"},
        {"s\xc3\xa9-utf8\n", 1, "printable ASCII"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i].text, &t, &err), -1);
        if (err.line != bad[i].line || !strstr(err.message, bad[i].needle))
            fprintf(stderr, "case %zu: line %d: %s\n", i, err.line, err.message);
        assert_int_equal(err.line, bad[i].line);
        assert_non_null(strstr(err.message, bad[i].needle));
        assert_null(strstr(err.message, "sk-"));
        sb_auth_keys_free(&t);
    }
    /* A key longer than any header a client could send. */
    char *big = malloc(SB_AUTH_KEY_MAX + 2);
    memset(big, 'k', SB_AUTH_KEY_MAX + 1);
    big[SB_AUTH_KEY_MAX + 1] = '\0';
    assert_int_equal(parse(big, &t, &err), -1);
    big[SB_AUTH_KEY_MAX] = '\0';
    assert_int_equal(parse(big, &t, &err), 1);
    sb_auth_keys_free(&t);
    free(big);
}

static void test_valid_names(void **state)
{
    (void)state;
    assert_true(sb_auth_valid_key("sk-proj-AbC_123.~+/=", 20));
    assert_false(sb_auth_valid_key("", 0));
    assert_false(sb_auth_valid_key("a b", 3));
    assert_false(sb_auth_valid_key("a\r\nb", 4));
    assert_true(sb_auth_valid_tenant("team-a.eu_1", 11));
    assert_false(sb_auth_valid_tenant("team a", 6));
    assert_false(sb_auth_valid_tenant("\"x\"", 3));
    char long_name[SB_AUTH_TENANT_MAX + 1];
    memset(long_name, 't', sizeof long_name);
    assert_true(sb_auth_valid_tenant(long_name, SB_AUTH_TENANT_MAX));
    assert_false(sb_auth_valid_tenant(long_name, SB_AUTH_TENANT_MAX + 1));
}

/* A key's tenant and a header naming the same tenant are different tenants; each is stable. */
static void test_tenant_key(void **state)
{
    (void)state;
    uint64_t by_key = sb_auth_tenant_key("alice", NULL, 0, 7);
    assert_int_equal(by_key, sb_auth_tenant_key("alice", "mallory", 7, 9));  /* the key's tenant wins */
    assert_int_not_equal(by_key, sb_auth_tenant_key("", "alice", 5, 7));      /* no joining by header */
    assert_int_equal(sb_auth_tenant_key("", "alice", 5, 7), sb_auth_tenant_key(NULL, "alice", 5, 8));
    assert_int_not_equal(sb_auth_tenant_key(NULL, "alice", 5, 7), sb_auth_tenant_key(NULL, "bob", 3, 7));
    assert_int_equal(sb_auth_tenant_key(NULL, NULL, 0, 42), 42);              /* the key itself */
    assert_int_equal(sb_auth_tenant_key("", "x", 0, 0), 0);                    /* nothing at all */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest_is_sha256), cmocka_unit_test(test_bearer),      cmocka_unit_test(test_table),
        cmocka_unit_test(test_keys_file),        cmocka_unit_test(test_valid_names),
        cmocka_unit_test(test_tenant_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
