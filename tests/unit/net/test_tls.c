/* net/tls: a server session against an OpenSSL client over memory, no sockets. Bytes cross
 * one at a time (every split of every record), ALPN is agreed or refused as the context says,
 * plaintext comes out whole and in order, and what is not TLS, a client's close_notify or a
 * callback that stops end the feed as the contract says. */
#include "net/tls.h"
#include "tls_fixture.h"

#include <openssl/err.h>

typedef struct client {
    SSL_CTX *ctx;
    SSL *ssl;
    BIO *rbio, *wbio;
} client;

typedef struct sink {
    char data[1 << 17];
    size_t len, pieces, max_piece;
    size_t stop_after; /* stop once this many bytes arrived (0: never) */
} sink;

static char cert[64], key[64];
static char scratch[16 * 1024];

static int setup(void **state)
{
    (void)state;
    make_cert(cert, key);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(cert);
    unlink(key);
    return 0;
}

static void client_open(client *c, const char *alpn_wire, size_t alpn_len)
{
    c->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(c->ctx);
    assert_int_equal(SSL_CTX_load_verify_locations(c->ctx, cert, NULL), 1);
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
    c->ssl = SSL_new(c->ctx);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_connect_state(c->ssl);
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    assert_int_equal(SSL_set1_host(c->ssl, "localhost"), 1);
    if (alpn_wire)
        assert_int_equal(SSL_set_alpn_protos(c->ssl, (const unsigned char *)alpn_wire, (unsigned)alpn_len), 0);
}

static void client_close(client *c)
{
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
    ERR_clear_error();
}

static int to_sink(void *arg, const char *p, size_t n)
{
    sink *k = arg;
    assert_true(k->len + n <= sizeof k->data);
    memcpy(k->data + k->len, p, n);
    k->len += n;
    k->pieces++;
    if (n > k->max_piece)
        k->max_piece = n;
    return k->stop_after && k->len >= k->stop_after;
}

/* Moves the client's output into the server one byte per feed. Returns the last feed's rc. */
static int pump_to_server(client *c, sb_tls *t, sink *k, int (*on_ready)(void *, const sb_tls *))
{
    char buf[4096];
    int n, rc = 0;
    while ((n = BIO_read(c->wbio, buf, sizeof buf)) > 0)
        for (int i = 0; i < n; i++)
            if ((rc = sb_tls_feed(t, buf + i, 1, scratch, sizeof scratch, on_ready, to_sink, k)) < 0)
                return rc;
    return rc;
}

static void pump_to_client(client *c, sb_tls *t)
{
    sb_buf out = {0};
    assert_int_equal(sb_tls_take(t, &out), 0);
    assert_int_equal(sb_tls_pending(t), 0);
    if (out.len)
        assert_int_equal(BIO_write(c->rbio, out.data, (int)out.len), (int)out.len);
    sb_buf_free(&out);
}

/* Runs the handshake; returns the server's last rc (-1: refused). */
static int handshake(client *c, sb_tls *t, sink *k, int (*on_ready)(void *, const sb_tls *))
{
    for (int round = 0; round < 10; round++) {
        int r = SSL_do_handshake(c->ssl);
        if (pump_to_server(c, t, k, on_ready) < 0)
            return -1;
        pump_to_client(c, t);
        if (r == 1 && t->ready)
            return 0;
    }
    return -1;
}

static SSL_CTX *server_ctx(const char *wire, size_t len, bool required)
{
    static sb_tls_alpn alpn;
    alpn = (sb_tls_alpn){wire, len, required};
    char err[256];
    SSL_CTX *ctx = sb_tls_server_ctx(cert, key, &alpn, err, sizeof err);
    assert_non_null(ctx);
    return ctx;
}

static void test_round_trip_byte_by_byte(void **state)
{
    SSL_CTX *ctx = server_ctx(SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1, false);
    sb_tls t;
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    SSL_CTX_free(ctx); /* the session holds its own reference */
    client c;
    client_open(&c, "\x02h2\x08http/1.1", 12);
    static sink k;
    k = (sink){0};
    assert_int_equal(handshake(&c, &t, &k, NULL), 0);
    size_t len;
    const char *p = sb_tls_alpn_selected(&t, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(p, "http/1.1", 8);
    /* 40 KB of plaintext: several records, each split at every byte. */
    static char msg[40000];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (char)('a' + i % 26);
    assert_int_equal(SSL_write(c.ssl, msg, sizeof msg), (int)sizeof msg);
    assert_int_equal(pump_to_server(&c, &t, &k, NULL), 0);
    assert_int_equal(k.len, sizeof msg);
    assert_memory_equal(k.data, msg, sizeof msg);
    assert_true(k.max_piece <= sizeof scratch);
    /* The server's answer reaches the client whole. */
    assert_int_equal(sb_tls_write(&t, "pong", 4), 0);
    pump_to_client(&c, &t);
    char got[8];
    assert_int_equal(SSL_read(c.ssl, got, sizeof got), 4);
    assert_memory_equal(got, "pong", 4);
    /* Our close_notify, once; the client reads a clean end. */
    sb_tls_close_notify(&t);
    size_t once = sb_tls_pending(&t);
    assert_true(once > 0);
    sb_tls_close_notify(&t);
    assert_int_equal(sb_tls_pending(&t), once);
    pump_to_client(&c, &t);
    assert_int_equal(SSL_read(c.ssl, got, sizeof got), 0);
    assert_int_equal(SSL_get_error(c.ssl, 0), SSL_ERROR_ZERO_RETURN);
    client_close(&c);
    sb_tls_free(&t);
}

static void test_alpn_required_and_optional(void **state)
{
    /* h2 required, the client offers only http/1.1: the handshake fails. */
    SSL_CTX *ctx = server_ctx(SB_TLS_ALPN_H2, sizeof SB_TLS_ALPN_H2 - 1, true);
    sb_tls t;
    client c;
    static sink k;
    k = (sink){0};
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1);
    assert_int_equal(handshake(&c, &t, &k, NULL), -1);
    assert_false(t.ready);
    client_close(&c);
    sb_tls_free(&t);
    SSL_CTX_free(ctx);
    /* http/1.1 optional, the client offers only h2: no ALPN, the session goes on. */
    ctx = server_ctx(SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1, false);
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, SB_TLS_ALPN_H2, sizeof SB_TLS_ALPN_H2 - 1);
    assert_int_equal(handshake(&c, &t, &k, NULL), 0);
    size_t len;
    assert_null(sb_tls_alpn_selected(&t, &len));
    assert_int_equal(len, 0);
    client_close(&c);
    sb_tls_free(&t);
    SSL_CTX_free(ctx);
}

static int refuse(void *arg, const sb_tls *t)
{
    (void)t;
    ++*(int *)((sink *)arg)->data;
    return 1;
}

/* on_ready may refuse the session; on_plain may stop the feed (0, the rest dropped). */
static void test_callbacks_stop(void **state)
{
    SSL_CTX *ctx = server_ctx(SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1, false);
    sb_tls t;
    client c;
    static sink k;
    k = (sink){0};
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, NULL, 0);
    assert_int_equal(handshake(&c, &t, &k, refuse), -1);
    assert_int_equal(*(int *)k.data, 1);
    client_close(&c);
    sb_tls_free(&t);

    k = (sink){.stop_after = 1};
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, NULL, 0);
    assert_int_equal(handshake(&c, &t, &k, NULL), 0);
    assert_int_equal(SSL_write(c.ssl, "abc", 3), 3);
    assert_int_equal(SSL_write(c.ssl, "def", 3), 3);
    char buf[4096];
    int n = BIO_read(c.wbio, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(sb_tls_feed(&t, buf, (size_t)n, scratch, sizeof scratch, NULL, to_sink, &k), 0);
    assert_int_equal(k.len, 3); /* the first record's plaintext, then stopped */
    client_close(&c);
    sb_tls_free(&t);
    SSL_CTX_free(ctx);
}

/* Not TLS, a client's close_notify, a bad record after the handshake: -1 each time. */
static void test_hostile_input(void **state)
{
    SSL_CTX *ctx = server_ctx(SB_TLS_ALPN_HTTP1, sizeof SB_TLS_ALPN_HTTP1 - 1, false);
    sb_tls t;
    static sink k;
    k = (sink){0};
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(sb_tls_feed(&t, get, sizeof get - 1, scratch, sizeof scratch, NULL, to_sink, &k), -1);
    sb_tls_free(&t);

    client c;
    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, NULL, 0);
    assert_int_equal(handshake(&c, &t, &k, NULL), 0);
    SSL_shutdown(c.ssl);
    assert_int_equal(pump_to_server(&c, &t, &k, NULL), -1);
    client_close(&c);
    sb_tls_free(&t);

    assert_int_equal(sb_tls_init(&t, ctx), 0);
    client_open(&c, NULL, 0);
    assert_int_equal(handshake(&c, &t, &k, NULL), 0);
    assert_int_equal(SSL_write(c.ssl, "hello", 5), 5);
    char buf[512];
    int n = BIO_read(c.wbio, buf, sizeof buf);
    assert_true(n > 6);
    buf[n - 1] ^= 0x55; /* the record's authentication fails */
    assert_int_equal(sb_tls_feed(&t, buf, (size_t)n, scratch, sizeof scratch, NULL, to_sink, &k), -1);
    assert_int_equal(k.len, 0);
    client_close(&c);
    sb_tls_free(&t);
    SSL_CTX_free(ctx);
}

static void test_bad_files(void **state)
{
    char err[256] = "";
    assert_null(sb_tls_server_ctx("/nonexistent/cert.pem", key, NULL, err, sizeof err));
    assert_true(strlen(err) > 0);
    /* A certificate and a key that do not belong together. */
    char cert2[64], key2[64];
    make_cert(cert2, key2);
    err[0] = '\0';
    assert_null(sb_tls_server_ctx(cert, key2, NULL, err, sizeof err));
    assert_true(strlen(err) > 0);
    unlink(cert2);
    unlink(key2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_byte_by_byte),
        cmocka_unit_test(test_alpn_required_and_optional),
        cmocka_unit_test(test_callbacks_stop),
        cmocka_unit_test(test_hostile_input),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
