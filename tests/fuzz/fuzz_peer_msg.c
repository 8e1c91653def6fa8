/* fuzz_peer_msg: libFuzzer target for src/proto/peer_msg.c (outside input: frames from the
 * other gateway replicas' publishers, net/peer_sync.c).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); the seed corpus is
 * tests/fuzz/corpus/peer_msg (one frame of each kind, and broken ones).
 *
 * Besides crashes and sanitizer reports, it checks: an accepted frame's names and hashes lie
 * inside the input, their lengths within the bounds, and it survives a round trip: encoded
 * again, the same bytes. */
#include "proto/peer_msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

#define MAX_HASHES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
    const uint8_t *q = p;
    return q >= data && n <= size && q - data <= (ptrdiff_t)(size - n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char out[SB_PEER_HEADER_BYTES + SB_PEER_SENT_BYTES + 2 * SB_PEER_MAX_NAME + 8 * MAX_HASHES];
    static uint64_t hashes[MAX_HASHES];
    sb_peer_msg m;
    int rc = sb_peer_msg_decode(data, size, MAX_HASHES, &m);
    CHECK(rc <= 0 && rc >= SB_PEER_E_TOO_MANY);
    CHECK(sb_peer_msg_error(rc) != NULL);
    if (rc)
        return 0;
    CHECK(m.kind >= SB_PEER_SENT && m.kind <= SB_PEER_HEARTBEAT);
    if (m.kind == SB_PEER_SENT) {
        CHECK(m.pool_len >= 1 && m.pool_len <= SB_PEER_MAX_NAME);
        CHECK(m.endpoint_len >= 1 && m.endpoint_len <= SB_PEER_MAX_NAME);
        CHECK(m.n_hashes <= MAX_HASHES);
        CHECK(inside(m.pool, m.pool_len, data, size));
        CHECK(inside(m.endpoint, m.endpoint_len, data, size));
        CHECK(inside(m.hashes, 8 * m.n_hashes, data, size));
        for (size_t i = 0; i < m.n_hashes; i++)
            hashes[i] = sb_peer_msg_hash(&m, i);
    } else {
        CHECK(!m.pool && !m.endpoint && !m.hashes && !m.n_hashes);
    }
    size_t len = sb_peer_msg_encode(&m, hashes, m.n_hashes, out, sizeof out);
    CHECK(len == size);
    CHECK(memcmp(out, data, size) == 0);
    return 0;
}
