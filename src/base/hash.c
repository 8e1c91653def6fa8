/* hash: see hash.h. SipHash-1-3 written from the SipHash paper's description (c = 1
 * compression round per word, d = 3 finalisation rounds). */
#include "base/hash.h"

#include <string.h>

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

sb_hash_key sb_hash_key_from_secret(uint64_t secret)
{
    sb_hash_key k;
    k.k0 = splitmix64(&secret);
    k.k1 = splitmix64(&secret);
    return k;
}

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint64_t sb_hash_bytes(const sb_hash_key *key, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL, v1 = key->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL, v3 = key->k1 ^ 0x7465646279746573ULL;
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        SB_SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    /* The last word: the 0..7 remaining bytes, and the length's low byte on top. */
    unsigned char tail[8] = {0};
    if (len > whole)
        memcpy(tail, p + whole, len - whole);
    tail[7] = (unsigned char)len;
    uint64_t m = load_le64(tail);
    v3 ^= m;
    SB_SIPROUND(v0, v1, v2, v3);
    v0 ^= m;
    v2 ^= 0xff;
    SB_SIPROUND(v0, v1, v2, v3);
    SB_SIPROUND(v0, v1, v2, v3);
    SB_SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}
