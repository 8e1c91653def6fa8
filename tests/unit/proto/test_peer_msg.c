/* Tests proto/peer_msg: gateway sync's frames, round trips and every way a frame is refused. */
#include "sb_test.h"

#include <dirent.h>

#include "proto/peer_msg.h"

static unsigned char buf[4096];

static sb_peer_msg sent(const char *pool, const char *endpoint)
{
    return (sb_peer_msg){.kind = SB_PEER_SENT,
                         .sender = 0xFEDCBA9876543210ull,
                         .seq = 0x8000000000000001ull,
                         .request = 42,
                         .prompt_tokens = 0xDEADBEEF,
                         .pool = pool,
                         .pool_len = strlen(pool),
                         .endpoint = endpoint,
                         .endpoint_len = strlen(endpoint)};
}

static const uint64_t hashes[] = {
    0, 1, 0x7FFFFFFFFFFFFFFFull, 0x8000000000000000ull, 0xFFFFFFFFFFFFFFFFull, 0x0123456789ABCDEFull};
#define N_HASHES (sizeof hashes / sizeof hashes[0])

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_round_trips(void **state)
{
    (void)state;
    sb_peer_msg m = sent("chat", "10.0.0.7:8000"), d;
    size_t len = sb_peer_msg_encode(&m, hashes, N_HASHES, buf, sizeof buf);
    assert_int_equal(len, sb_peer_msg_size(&m, N_HASHES));
    assert_int_equal(len, SB_PEER_HEADER_BYTES + SB_PEER_SENT_BYTES + 4 + 13 + 8 * N_HASHES);
    /* The layout: magic, version, kind, flags 0, then little-endian integers. */
    assert_memory_equal(buf, "SBSY", 4);
    assert_int_equal(buf[4], 1);
    assert_int_equal(buf[5], SB_PEER_SENT);
    assert_int_equal(buf[6] | buf[7], 0);
    assert_int_equal(buf[8], 0x10);
    assert_true(le64(buf + 8) == m.sender);
    assert_true(le64(buf + 16) == m.seq);
    assert_true(le64(buf + 24) == 42);
    assert_int_equal(sb_peer_msg_decode(buf, len, N_HASHES, &d), 0);
    assert_int_equal(d.kind, SB_PEER_SENT);
    assert_true(d.sender == m.sender && d.seq == m.seq && d.request == m.request);
    assert_int_equal(d.prompt_tokens, 0xDEADBEEF);
    assert_int_equal(d.pool_len, 4);
    assert_memory_equal(d.pool, "chat", 4);
    assert_int_equal(d.endpoint_len, 13);
    assert_memory_equal(d.endpoint, "10.0.0.7:8000", 13);
    assert_ptr_equal(d.pool, (const char *)buf + SB_PEER_HEADER_BYTES + SB_PEER_SENT_BYTES); /* into the frame */
    assert_int_equal(d.n_hashes, N_HASHES);
    for (size_t i = 0; i < N_HASHES; i++)
        assert_true(sb_peer_msg_hash(&d, i) == hashes[i]);

    /* No hashes at all (a prompt shorter than a block). */
    len = sb_peer_msg_encode(&m, NULL, 0, buf, sizeof buf);
    assert_int_equal(sb_peer_msg_decode(buf, len, 0, &d), 0);
    assert_int_equal(d.n_hashes, 0);

    /* The header-only kinds, every field kept, SENT's fields left empty even over garbage. */
    for (uint8_t kind = SB_PEER_FIRST; kind <= SB_PEER_HEARTBEAT; kind++) {
        sb_peer_msg h = {.kind = kind, .sender = ~0ull, .seq = 7, .request = 0x8000000000000000ull};
        len = sb_peer_msg_encode(&h, hashes, N_HASHES, buf, sizeof buf); /* hashes ignored */
        assert_int_equal(len, SB_PEER_HEADER_BYTES);
        assert_int_equal(sb_peer_msg_size(&h, N_HASHES), SB_PEER_HEADER_BYTES);
        memset(&d, 0xA5, sizeof d);
        assert_int_equal(sb_peer_msg_decode(buf, len, 16, &d), 0);
        assert_int_equal(d.kind, kind);
        assert_true(d.sender == ~0ull && d.seq == 7 && d.request == 0x8000000000000000ull);
        assert_null(d.pool);
        assert_null(d.endpoint);
        assert_null(d.hashes);
        assert_int_equal(d.pool_len + d.endpoint_len + d.n_hashes + d.prompt_tokens, 0);
    }
}

static void test_encode_refuses(void **state)
{
    (void)state;
    char name[SB_PEER_MAX_NAME + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0'; /* 256 bytes */
    sb_peer_msg m = sent(name, "e");
    assert_int_equal(sb_peer_msg_encode(&m, hashes, 1, buf, sizeof buf), 0);
    m.pool_len = SB_PEER_MAX_NAME;
    assert_true(sb_peer_msg_encode(&m, hashes, 1, buf, sizeof buf) > 0);
    m = sent("p", name);
    assert_int_equal(sb_peer_msg_encode(&m, hashes, 1, buf, sizeof buf), 0);
    m = sent("", "e");
    assert_int_equal(sb_peer_msg_encode(&m, hashes, 1, buf, sizeof buf), 0);
    m = sent("p", "");
    assert_int_equal(sb_peer_msg_encode(&m, hashes, 1, buf, sizeof buf), 0);
    /* The buffer: exactly the size is enough, one byte less is not. */
    m = sent("p", "e");
    size_t need = sb_peer_msg_size(&m, N_HASHES);
    assert_int_equal(sb_peer_msg_encode(&m, hashes, N_HASHES, buf, need), need);
    assert_int_equal(sb_peer_msg_encode(&m, hashes, N_HASHES, buf, need - 1), 0);
    sb_peer_msg h = {.kind = SB_PEER_HEARTBEAT};
    assert_int_equal(sb_peer_msg_encode(&h, NULL, 0, buf, SB_PEER_HEADER_BYTES - 1), 0);
    h.kind = 0;
    assert_int_equal(sb_peer_msg_encode(&h, NULL, 0, buf, sizeof buf), 0);
    h.kind = 5;
    assert_int_equal(sb_peer_msg_encode(&h, NULL, 0, buf, sizeof buf), 0);
}

static void test_decode_refuses(void **state)
{
    (void)state;
    sb_peer_msg m = sent("pool", "ep:1"), d;
    size_t len = sb_peer_msg_encode(&m, hashes, 3, buf, sizeof buf);
    /* Every truncation: too short for the header or for what it declares. */
    for (size_t n = 0; n < len; n++)
        assert_int_equal(sb_peer_msg_decode(buf, n, 16, &d), SB_PEER_E_SHORT);
    /* A byte too many. */
    buf[len] = 0;
    assert_int_equal(sb_peer_msg_decode(buf, len + 1, 16, &d), SB_PEER_E_LENGTH);
    /* More hashes than the reader allows, and a huge count in a short frame: the count is
     * refused before any length is trusted. */
    assert_int_equal(sb_peer_msg_decode(buf, len, 2, &d), SB_PEER_E_TOO_MANY);
    assert_int_equal(sb_peer_msg_decode(buf, len, 3, &d), 0);
    unsigned char huge[SB_PEER_HEADER_BYTES + SB_PEER_SENT_BYTES + 2];
    memcpy(huge, buf, SB_PEER_HEADER_BYTES);
    unsigned char *p = huge + SB_PEER_HEADER_BYTES;
    memset(p, 0, SB_PEER_SENT_BYTES);
    p[4] = 1, p[6] = 1;                 /* pool 1 byte, endpoint 1 byte */
    p[8] = p[9] = p[10] = p[11] = 0xFF; /* 4 Gi hashes */
    p[12] = 'p', p[13] = 'e';
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_TOO_MANY);
    p[8] = 1, p[9] = p[10] = p[11] = 0; /* 1 hash, not there */
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_SHORT);
    p[8] = 0;
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), 0);
    /* Names: empty, or running past the frame. */
    p[4] = 0;
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_LENGTH);
    p[4] = 1, p[6] = 0;
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_LENGTH);
    p[6] = 200;
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_SHORT);
    p[4] = 0, p[5] = 1, p[6] = 1; /* 256 bytes of pool name */
    assert_int_equal(sb_peer_msg_decode(huge, sizeof huge, 16384, &d), SB_PEER_E_LENGTH);

    /* The header: magic, version, flags, kind. */
    sb_peer_msg h = {.kind = SB_PEER_DONE, .sender = 1, .seq = 1, .request = 1};
    unsigned char hb[SB_PEER_HEADER_BYTES + 1];
    assert_int_equal(sb_peer_msg_encode(&h, NULL, 0, hb, sizeof hb), SB_PEER_HEADER_BYTES);
    hb[SB_PEER_HEADER_BYTES] = 0;
    assert_int_equal(sb_peer_msg_decode(hb, SB_PEER_HEADER_BYTES + 1, 0, &d), SB_PEER_E_LENGTH);
    assert_int_equal(sb_peer_msg_decode(hb, SB_PEER_HEADER_BYTES, 0, &d), 0);
    struct {
        size_t at;
        unsigned char v;
        int code;
    } bad[] = {{0, 'X', SB_PEER_E_MAGIC}, {3, 'y', SB_PEER_E_MAGIC}, {4, 2, SB_PEER_E_VERSION},
               {4, 0, SB_PEER_E_VERSION}, {6, 1, SB_PEER_E_VERSION}, {7, 0x80, SB_PEER_E_VERSION},
               {5, 0, SB_PEER_E_KIND},    {5, 5, SB_PEER_E_KIND},    {5, 0xFF, SB_PEER_E_KIND}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char c[SB_PEER_HEADER_BYTES];
        memcpy(c, hb, sizeof c);
        c[bad[i].at] = bad[i].v;
        assert_int_equal(sb_peer_msg_decode(c, sizeof c, 0, &d), bad[i].code);
        assert_int_equal(d.kind, 0); /* nothing half-filled is taken for a message */
    }
}

static void test_error_names(void **state)
{
    (void)state;
    const int codes[] = {
        0, SB_PEER_E_SHORT, SB_PEER_E_MAGIC, SB_PEER_E_VERSION, SB_PEER_E_KIND, SB_PEER_E_LENGTH, SB_PEER_E_TOO_MANY};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *a = sb_peer_msg_error(codes[i]);
        assert_non_null(a);
        assert_string_not_equal(a, "unknown");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(a, sb_peer_msg_error(codes[j]));
    }
    assert_string_equal(sb_peer_msg_error(-99), "unknown");
}

/* The fuzz corpus (tests/fuzz/corpus/peer_msg), replayed: the seeds named for a kind decode,
 * the broken ones do not, and each accepted frame encodes back to its own bytes. */
static void test_corpus(void **state)
{
    (void)state;
    static unsigned char data[8192];
    char path[1024];
    int files = 0, good = 0;
    DIR *dir = opendir("tests/fuzz/corpus/peer_msg");
    if (!dir)
        fail_msg("cannot open tests/fuzz/corpus/peer_msg (run from the repository root)");
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "tests/fuzz/corpus/peer_msg/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        size_t len = fread(data, 1, sizeof data, f);
        fclose(f);
        files++;
        sb_peer_msg m;
        int rc = sb_peer_msg_decode(data, len, 64, &m);
        bool broken = strstr(e->d_name, "bad") || strstr(e->d_name, "truncated") || strstr(e->d_name, "huge");
        if (broken) {
            assert_true(rc < 0);
            continue;
        }
        assert_int_equal(rc, 0);
        good++;
        uint64_t h[64];
        for (size_t i = 0; i < m.n_hashes; i++)
            h[i] = sb_peer_msg_hash(&m, i);
        assert_int_equal(sb_peer_msg_encode(&m, h, m.n_hashes, buf, sizeof buf), len);
        assert_memory_equal(buf, data, len);
    }
    closedir(dir);
    assert_true(files >= 8);
    assert_true(good >= 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),    cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_decode_refuses), cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
