/* tls: server-side TLS over memory BIOs (see tls.h). */
#include "net/tls.h"

#include <arpa/inet.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    (void)ssl;
    const sb_tls_alpn *a = arg;
    unsigned char *sel;
    /* The server's list first: its order of preference wins. */
    if (SSL_select_next_proto(&sel, outlen, (const unsigned char *)a->wire, (unsigned)a->len, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED) {
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    return a->required ? SSL_TLSEXT_ERR_ALERT_FATAL : SSL_TLSEXT_ERR_NOACK;
}

SSL_CTX *sb_tls_server_ctx(const char *cert_file, const char *key_file, const sb_tls_alpn *alpn, char *err,
                           size_t err_len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    /* RFC 9113 9.2: HTTP/2 over TLS is TLS 1.2 or later; nothing older is worth offering. */
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    /* Plaintext is handed over a record at a time and copied out at once: no read-ahead
     * buffers kept per idle connection. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        ERR_error_string_n(ERR_get_error(), err, err_len);
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (alpn)
        SSL_CTX_set_alpn_select_cb(ctx, select_alpn, (void *)alpn);
    return ctx;
}

bool sb_tls_keep_tickets(SSL_CTX *to, SSL_CTX *from)
{
    X509 *a = SSL_CTX_get0_certificate(to), *b = SSL_CTX_get0_certificate(from);
    if (!a || !b || X509_cmp(a, b) != 0)
        return false;
    /* OpenSSL's ticket key block: name (16), HMAC secret (32), AES key (32). */
    unsigned char keys[80];
    bool ok = SSL_CTX_get_tlsext_ticket_keys(from, keys, sizeof keys) == 1 &&
              SSL_CTX_set_tlsext_ticket_keys(to, keys, sizeof keys) == 1;
    OPENSSL_cleanse(keys, sizeof keys);
    ERR_clear_error();
    return ok;
}

/* A client context's new-session callback: the session goes to the connection's on_session
 * (one kept per endpoint: net/upstream.c); OpenSSL's own cache is off. 1: the reference taken. */
static int on_new_session(SSL *ssl, SSL_SESSION *session)
{
    sb_tls *t = SSL_get_app_data(ssl);
    if (!t || !t->on_session)
        return 0;
    t->on_session(t->session_arg, session);
    return 1;
}

void sb_tls_offer_session(sb_tls *t, SSL_SESSION *session)
{
    if (t->ssl && session)
        (void)SSL_set_session(t->ssl, session); /* refused (expired, another context): a full handshake */
}

bool sb_tls_resumed(const sb_tls *t)
{
    return t->ssl && SSL_session_reused(t->ssl) == 1;
}

SSL_CTX *sb_tls_client_ctx(const char *ca_file, const char *cert_file, const char *key_file, bool verify, char *err,
                           size_t err_len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    /* Sessions are kept by their connections' owners (one per endpoint), not in the context. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    static const unsigned char alpn[] = SB_TLS_ALPN_HTTP1;
    bool ok = SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1) == 0;
    if (ok && verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) == 1
                     : SSL_CTX_set_default_verify_paths(ctx) == 1;
    } else if (ok) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (ok && cert_file)
        ok = SSL_CTX_use_certificate_chain_file(ctx, cert_file) == 1 &&
             SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) == 1 && SSL_CTX_check_private_key(ctx) == 1;
    if (!ok) {
        ERR_error_string_n(ERR_get_error(), err, err_len);
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

static int session_new(sb_tls *t, SSL_CTX *ctx)
{
    *t = (sb_tls){0};
    t->ssl = SSL_new(ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        SSL_free(t->ssl);
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        *t = (sb_tls){0};
        return -1;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    return 0;
}

int sb_tls_init(sb_tls *t, SSL_CTX *ctx)
{
    if (session_new(t, ctx) < 0)
        return -1;
    SSL_set_accept_state(t->ssl);
    return 0;
}

int sb_tls_init_client(sb_tls *t, SSL_CTX *ctx, const char *server_name)
{
    if (session_new(t, ctx) < 0)
        return -1;
    SSL_set_connect_state(t->ssl);
    SSL_set_app_data(t->ssl, t);
    struct in6_addr a6;
    struct in_addr a4;
    bool ip = inet_pton(AF_INET, server_name, &a4) == 1 || inet_pton(AF_INET6, server_name, &a6) == 1;
    /* RFC 6066: no SNI for an address. The certificate check follows the context (SSL_VERIFY_PEER
     * or not); the name, or the IP address, it must carry is set either way. */
    bool ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), server_name) == 1
                 : SSL_set_tlsext_host_name(t->ssl, server_name) == 1 && SSL_set1_host(t->ssl, server_name) == 1;
    if (!ok) {
        ERR_clear_error();
        sb_tls_free(t);
        return -1;
    }
    return 0;
}

int sb_tls_start(sb_tls *t)
{
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->ready = true;
        return 0;
    }
    int e = SSL_get_error(t->ssl, r);
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

void sb_tls_free(sb_tls *t)
{
    SSL_free(t->ssl); /* and its BIOs */
    *t = (sb_tls){0};
}

int sb_tls_feed(sb_tls *t, const char *in, size_t n, char *scratch, size_t scratch_len,
                int (*on_ready)(void *arg, const sb_tls *t), sb_tls_plain_fn on_plain, void *arg)
{
    if (n > INT_MAX || BIO_write(t->rbio, in, (int)n) != (int)n)
        return -1;
    if (!t->ready) {
        int r = SSL_do_handshake(t->ssl);
        if (r != 1) {
            int e = SSL_get_error(t->ssl, r);
            ERR_clear_error();
            return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
        }
        t->ready = true;
        if (on_ready && on_ready(arg, t) != 0)
            return -1;
    }
    int len = scratch_len > INT_MAX ? INT_MAX : (int)scratch_len;
    for (;;) {
        int r = SSL_read(t->ssl, scratch, len);
        if (r <= 0) {
            int e = SSL_get_error(t->ssl, r);
            ERR_clear_error();
            t->peer_closed = e == SSL_ERROR_ZERO_RETURN;
            return e == SSL_ERROR_WANT_READ ? 0 : -1; /* close_notify, or a TLS error: the end */
        }
        if (on_plain(arg, scratch, (size_t)r) != 0)
            return 0;
    }
}

int sb_tls_write(sb_tls *t, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        /* A memory BIO grows as needed: SSL_write completes or fails, never wants to wait. */
        int r = SSL_write(t->ssl, s, chunk);
        if (r <= 0) {
            ERR_clear_error();
            return -1;
        }
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

size_t sb_tls_pending(const sb_tls *t)
{
    return t->wbio ? BIO_ctrl_pending(t->wbio) : 0;
}

int sb_tls_take(sb_tls *t, sb_buf *out)
{
    size_t n = sb_tls_pending(t);
    if (n == 0)
        return 0;
    if (n > INT_MAX || sb_buf_reserve(out, n) < 0)
        return -1;
    int r = BIO_read(t->wbio, out->data + out->len, (int)n);
    if (r != (int)n)
        return -1;
    out->len += n;
    return 0;
}

void sb_tls_close_notify(sb_tls *t)
{
    if (!t->ssl || t->notified || !t->ready)
        return;
    t->notified = true;
    SSL_shutdown(t->ssl); /* writes the alert into wbio; the peer's answer is not awaited */
    ERR_clear_error();
}

const char *sb_tls_alpn_selected(const sb_tls *t, size_t *len)
{
    const unsigned char *p = NULL;
    unsigned n = 0;
    if (t->ssl)
        SSL_get0_alpn_selected(t->ssl, &p, &n);
    *len = n;
    return n ? (const char *)p : NULL;
}
