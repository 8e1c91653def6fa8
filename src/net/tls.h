/* tls: TLS for the gateway's listeners (the HTTP/1.1 client listener and the ext_proc gRPC
 * listener) and toward model servers (net/upstream.c's https:// endpoints), with OpenSSL over
 * memory BIOs so that libuv keeps the sockets:
 * ciphertext read from the socket is fed in, plaintext comes out to the protocol's parser;
 * plaintext written is encrypted into an output buffer the caller hands to uv_write.
 *
 * Contract:
 * - A context (sb_tls_server_ctx) holds a certificate chain and key loaded from PEM files and
 *   an ALPN preference list; TLS 1.2 or later, no compression, no renegotiation (a client
 *   cannot make the server redo handshakes on an open connection). Each connection's session
 *   holds its own reference on the context, so a context replaced by a reload (SIGHUP, new
 *   certificate files) is freed when its last connection closes.
 * - sb_tls_feed is linear in its input: every byte fed is consumed (the memory BIO holds at
 *   most one read's worth, which the SSL_read loop drains), and plaintext leaves in pieces of
 *   at most one TLS record (16 KiB) through the caller's scratch. Its memory is one record
 *   buffer per direction per connection, bounded by the listener's max_connections.
 * - A failed handshake, a TLS error, or the peer's close_notify return -1: the caller closes.
 * Not thread-safe: one loop thread owns a session. */
#ifndef SB_NET_TLS_H
#define SB_NET_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/* ALPN lists, in the wire format (length-prefixed names), in the server's order of preference. */
#define SB_TLS_ALPN_H2 "\x02h2"
#define SB_TLS_ALPN_HTTP1 "\x08http/1.1"

typedef struct sb_tls_alpn {
    const char *wire; /* a list as above (a string literal: it is not copied) */
    size_t len;
    bool required; /* no name in common: the handshake fails (else it goes on without ALPN) */
} sb_tls_alpn;

/* A server context from PEM files (the certificate file may hold the chain). NULL on failure,
 * with OpenSSL's reason in err (the files are named by the caller's message). */
SSL_CTX *sb_tls_server_ctx(const char *cert_file, const char *key_file, const sb_tls_alpn *alpn, char *err,
                           size_t err_len);

/* A reload's new server context `to` takes the session-ticket keys of the context it replaces,
 * `from`, when both present the same certificate: clients resume their sessions across a
 * SIGHUP instead of paying a full handshake each. A rotated certificate keeps the new
 * context's own fresh keys (a rotation also retires what was resumable under the old one).
 * Returns true when the keys were carried over. */
bool sb_tls_keep_tickets(SSL_CTX *to, SSL_CTX *from);

/* A client context (toward model servers and providers): TLS 1.2 or later, ALPN http/1.1.
 * verify: the server's chain must verify against ca_file (NULL: the system's store) and name
 * the host (sb_tls_init_client); false accepts any certificate (a test fleet's self-signed
 * ones: say so in the config). cert_file/key_file: a client certificate, or NULL. NULL on
 * failure, with the reason in err. */
SSL_CTX *sb_tls_client_ctx(const char *ca_file, const char *cert_file, const char *key_file, bool verify, char *err,
                           size_t err_len);

typedef struct sb_tls {
    SSL *ssl;         /* NULL: no TLS on this connection */
    BIO *rbio, *wbio; /* owned by ssl */
    bool ready;       /* the handshake is complete */
    bool notified;    /* our close_notify is written */
    bool peer_closed; /* the peer's close_notify arrived (sb_tls_feed returned -1 for it): a clean
                       * end, as EOF, unlike a TLS error */
    /* A client session: told of each resumable session the server grants on this connection
     * (TLS 1.3 sends them after the handshake); on_session takes the reference. NULL: none kept. */
    void (*on_session)(void *arg, SSL_SESSION *session);
    void *session_arg;
} sb_tls;

/* A server session: 0, or -1 (out of memory). */
int sb_tls_init(sb_tls *t, SSL_CTX *ctx);
/* A client session for server_name: sent as SNI (unless an IP literal) and, when the context
 * verifies, the name (or IP) the certificate must carry. 0, or -1. */
int sb_tls_init_client(sb_tls *t, SSL_CTX *ctx, const char *server_name);
/* Offers `session` (a session of the same server, from on_session) for resumption: call between
 * sb_tls_init_client and sb_tls_start. The server may accept it (an abbreviated handshake) or
 * not (a full one); sb_tls_resumed says which, once ready. */
void sb_tls_offer_session(sb_tls *t, SSL_SESSION *session);
bool sb_tls_resumed(const sb_tls *t);
/* Begins a client's handshake: its first flight waits in the output (sb_tls_take). 0, or -1. */
int sb_tls_start(sb_tls *t);
void sb_tls_free(sb_tls *t);

/* Called with each piece of plaintext; returns 0 to go on, nonzero to stop (the connection is
 * closing: what SSL still holds is dropped with it). */
typedef int (*sb_tls_plain_fn)(void *arg, const char *p, size_t n);

/* Feeds n bytes of ciphertext: advances the handshake, then decrypts what it can into scratch
 * (scratch_len: 16 KiB holds a record) and passes it on. On the handshake's completion
 * on_ready, if given, may refuse the session (the ALPN it agreed, say) by returning nonzero.
 * 0, or -1 (TLS failed or the peer closed: close the connection). Output the handshake
 * produced waits in the session (sb_tls_pending). */
int sb_tls_feed(sb_tls *t, const char *in, size_t n, char *scratch, size_t scratch_len,
                int (*on_ready)(void *arg, const sb_tls *t), sb_tls_plain_fn on_plain, void *arg);

/* Encrypts n bytes of plaintext into the session's output. 0, or -1. */
int sb_tls_write(sb_tls *t, const void *p, size_t n);

/* Bytes of ciphertext waiting to be sent. */
size_t sb_tls_pending(const sb_tls *t);

/* Moves the waiting ciphertext to the end of out. 0, or -1 (out of memory). */
int sb_tls_take(sb_tls *t, sb_buf *out);

/* Writes our close_notify into the output, once. */
void sb_tls_close_notify(sb_tls *t);

/* The protocol ALPN agreed (NULL, *len 0: none). */
const char *sb_tls_alpn_selected(const sb_tls *t, size_t *len);

#endif
