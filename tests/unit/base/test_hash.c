/* Tests base/hash: SipHash-1-3 against reference vectors, the inline 64-bit form against the
 * byte form, key expansion, and the property tables rely on: a set of keys crafted to share a
 * slot under one secret (or under the old unkeyed functions) spreads under another. */
#include "sb_test.h"

#include "base/hash.h"

/* Key 00 01 .. 0f, message 00 01 .. n-1: SipHash-1-3 outputs as produced by OpenSSL 3's
 * SIPHASH MAC with c-rounds 1, d-rounds 3 (whose 2-4 outputs match the SipHash paper's
 * vectors), read as little-endian 64-bit words. */
static const struct {
    size_t len;
    uint64_t out;
} vectors[] = {
    {0, 0xabac0158050fc4dcULL},  {1, 0xc9f49bf37d57ca93ULL},  {7, 0xd3927d989bb11140ULL},
    {8, 0x369095118d299a8eULL},  {9, 0x25a48eb36c063de4ULL},  {15, 0xd320d86d2a519956ULL},
    {16, 0xcc4fdd1a7d908b66ULL}, {17, 0x9cf2689063dbd80cULL}, {63, 0x9d199062b7bbb3a8ULL},
};

static const sb_hash_key ref_key = {0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};

static void test_reference_vectors(void **state)
{
    (void)state;
    unsigned char msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)i;
    for (size_t v = 0; v < sizeof(vectors) / sizeof(vectors[0]); v++)
        assert_int_equal(sb_hash_bytes(&ref_key, msg, vectors[v].len), vectors[v].out);
    assert_int_equal(sb_hash_bytes(&ref_key, NULL, 0), vectors[0].out);
    /* The zero key: what CPython 3.11 (siphash13) gives for hash(bytes(range(8))) with
     * PYTHONHASHSEED=0. */
    const sb_hash_key zero = {0, 0};
    assert_int_equal(sb_hash_bytes(&zero, msg, 8), 0xead411e67ebe2eeaULL);
}

static void test_u64_equals_bytes(void **state)
{
    (void)state;
    assert_int_equal(sb_hash_u64(&ref_key, 0x0706050403020100ULL), 0x369095118d299a8eULL);
    uint64_t x = 0x243F6A8885A308D3ULL;
    for (int i = 0; i < 1000; i++) {
        sb_hash_key k = sb_hash_key_from_secret((uint64_t)i);
        unsigned char b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (unsigned char)(x >> (8 * j));
        assert_int_equal(sb_hash_u64(&k, x), sb_hash_bytes(&k, b, 8));
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
}

static void test_key_from_secret(void **state)
{
    (void)state;
    sb_hash_key a = sb_hash_key_from_secret(1), b = sb_hash_key_from_secret(1), c = sb_hash_key_from_secret(2);
    assert_int_equal(a.k0, b.k0);
    assert_int_equal(a.k1, b.k1);
    assert_true(a.k0 != c.k0 && a.k1 != c.k1);
    assert_true(a.k0 != a.k1);
    /* Secret 0 is a key like any other (not the all-zero key). */
    sb_hash_key z = sb_hash_key_from_secret(0);
    assert_true(z.k0 != 0 && z.k1 != 0);
}

/* The most keys of `keys` sharing one of `slots` slots under key k. */
static size_t fullest_slot(const sb_hash_key *k, const uint64_t *keys, size_t n, size_t slots)
{
    static uint32_t count[4096];
    memset(count, 0, sizeof(count));
    size_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = ++count[sb_hash_u64(k, keys[i]) & (slots - 1)];
        if (c > most)
            most = c;
    }
    return most;
}

static void test_crafted_set_spreads_under_another_secret(void **state)
{
    (void)state;
    enum { N = 400, SLOTS = 1024 };
    static uint64_t crafted[N];
    /* Ground against secret A: keys whose slot of 1024 is 0. */
    sb_hash_key a = sb_hash_key_from_secret(0xA), b = sb_hash_key_from_secret(0xB);
    uint64_t x = 1;
    for (size_t n = 0; n < N; x++)
        if ((sb_hash_u64(&a, x) & (SLOTS - 1)) == 0)
            crafted[n++] = x;
    assert_int_equal(fullest_slot(&a, crafted, N, SLOTS), N);
    /* Under B they fall like random keys: 400 into 1024 slots rarely put 6 in one. */
    assert_true(fullest_slot(&b, crafted, N, SLOTS) <= 6);

    /* Keys that all share slot 0 under the prefix index's old unkeyed (h ^ h >> 29) & mask
     * (any table up to 2^16 slots): spread under any key. */
    for (size_t i = 0; i < N; i++) {
        uint64_t h = (uint64_t)(i + 1) << 45;
        assert_int_equal((h ^ (h >> 29)) & (SLOTS - 1), 0);
        crafted[i] = h;
    }
    assert_true(fullest_slot(&b, crafted, N, SLOTS) <= 6);
    /* ... and consecutive small integers (tenant keys may be) too. */
    for (size_t i = 0; i < N; i++)
        crafted[i] = i;
    assert_true(fullest_slot(&a, crafted, N, SLOTS) <= 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_u64_equals_bytes),
        cmocka_unit_test(test_key_from_secret),
        cmocka_unit_test(test_crafted_set_spreads_under_another_secret),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
