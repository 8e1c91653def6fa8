/* hash: keyed slot hashing for tables whose keys an outsider chooses.
 *
 * Every table (base/table.h) that holds client-derived keys (block hashes of prompts in the
 * prefix index, tenant keys from headers in flow control, model names in the router, the
 * simulator's block table) places a key at sb_hash_u64(key, x) or sb_hash_bytes(key, ...),
 * masked to the table size (sb_table_tag_u64 / sb_table_tag_bytes). The key is a
 * per-instance secret: the live gateway draws it from the OS at start (net/gateway.c), replay
 * derives it from --seed so runs repeat. Without it, slot placement is a public function of
 * the key: the block hashes are xxh3 chains seeded by the public model name, so prompts can be
 * ground offline until thousands of blocks share one home slot, and every insert or lookup
 * then walks the whole run (linear probing makes n colliding inserts cost n^2/2 probes).
 *
 * The function is SipHash-1-3 (Aumasson and Bernstein; the reduced-round variant Python and
 * Rust's standard library hash with): a pseudo-random function under a 128-bit key, so slot
 * collisions cannot be predicted without the key, and seeing where some keys landed (through
 * timing) says nothing useful about where others land. A cheaper keyed mixer (key xored in,
 * two folded 64x64->128 multiplies) is about twice as fast alone (4 ns against 8.5), but
 * seeded non-cryptographic hashes have fallen to seed-independent collisions before
 * (MurmurHash3 and CityHash, 2012), and in a whole routing decision it saved little: 32 KiB
 * over 256 endpoints took 20.5-21 us with either, 1 MiB ~510 us against ~540 (16-17 us and
 * ~370 us unkeyed; docs/benchmarks.md section 6, bench/bench_collide.c). A 64-bit secret is
 * expanded to the 128-bit key: 2^64 guesses are out of reach of anyone who can only time
 * requests.
 *
 * Only placement depends on the key: tables behave identically (lookups, evictions, order of
 * anything observable) under any key, which is what lets replay stay byte-identical.
 * Not for: content hashing (block hashes must be equal across processes: proto/prompt.h) or
 * anything needing a MAC or a password hash. Pure: no I/O, no global state. */
#ifndef SB_BASE_HASH_H
#define SB_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb_hash_key {
    uint64_t k0, k1;
} sb_hash_key;

/* The key for a 64-bit secret (two splitmix64 outputs). Equal secrets give equal keys. */
sb_hash_key sb_hash_key_from_secret(uint64_t secret);

/* SipHash-1-3 of len bytes at data (len 0 allowed) under key. */
uint64_t sb_hash_bytes(const sb_hash_key *key, const void *data, size_t len);

static inline uint64_t sb_hash_rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

#define SB_SIPROUND(v0, v1, v2, v3)                                                                 \
    do {                                                                                           \
        v0 += v1; v1 = sb_hash_rotl(v1, 13); v1 ^= v0; v0 = sb_hash_rotl(v0, 32);                  \
        v2 += v3; v3 = sb_hash_rotl(v3, 16); v3 ^= v2;                                             \
        v0 += v3; v3 = sb_hash_rotl(v3, 21); v3 ^= v0;                                             \
        v2 += v1; v1 = sb_hash_rotl(v1, 17); v1 ^= v2; v2 = sb_hash_rotl(v2, 32);                  \
    } while (0)

/* SipHash-1-3 of the 8 bytes of x in little-endian order under key: equal to sb_hash_bytes
 * over those bytes. Inline: it sits on every probe of the tables above. */
static inline uint64_t sb_hash_u64(const sb_hash_key *key, uint64_t x)
{
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL, v1 = key->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL, v3 = key->k1 ^ 0x7465646279746573ULL;
    uint64_t last = (uint64_t)8 << 56; /* the length byte; no tail bytes */
    v3 ^= x;
    SB_SIPROUND(v0, v1, v2, v3);
    v0 ^= x;
    v3 ^= last;
    SB_SIPROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    SB_SIPROUND(v0, v1, v2, v3);
    SB_SIPROUND(v0, v1, v2, v3);
    SB_SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Probe statistics of one table, for benchmarks, tests and /debug: what keyed slots keep
 * small. A search examines its home slot and then `probes` more; mean = probes / searches. */
typedef struct sb_table_probes {
    uint64_t searches;
    uint64_t probes;  /* slots examined beyond the home slot, over all searches */
    uint64_t longest; /* the most any one search examined beyond its home slot */
} sb_table_probes;

static inline void sb_table_probes_add(sb_table_probes *s, uint64_t probes)
{
    s->searches++;
    s->probes += probes;
    if (probes > s->longest)
        s->longest = probes;
}

#endif
