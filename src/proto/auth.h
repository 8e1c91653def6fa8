/* auth: API keys and bearer tokens, kept only as SHA-256 digests.
 *
 * One table serves client authentication (`auth.api_keys`, `auth.api_keys_file`) and the
 * bands of flow control (`flow_control.api_keys`): each entry is the digest of a key, the
 * tenant and band the key names (if any), and whether the key admits a request (an entry that
 * only names a band, from flow_control.api_keys, does not). The table never holds a key's
 * text: callers hash a presented token with sb_auth_digest() and look the digest up, and wipe
 * the text they hashed (OPENSSL_cleanse) once it is no longer needed.
 *
 * Lookup hashes nothing more: the digest's first 8 bytes are the tag in a base/table.h table
 * (load at most 1/2; no keyed hash needed, see below), and each candidate is compared in constant time (CRYPTO_memcmp). The probe
 * sequence depends only on the digest of the presented token and on where the stored digests
 * fall; SHA-256 being preimage-resistant, its timing says nothing usable about any key's text,
 * and clusters cannot be ground: the stored digests are the operator's keys', not the
 * client's. A constant-time linear scan would cost O(keys) per request instead of O(1).
 *
 * Also the pure parser of a keys file's text (one key per line, see sb_auth_parse_keys_file).
 * Not for: reading files (cmd/config_file.c does), HTTP (net/gateway.c checks requests). */
#ifndef SB_PROTO_AUTH_H
#define SB_PROTO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/table.h"

#define SB_AUTH_DIGEST_LEN 32
#define SB_AUTH_TENANT_MAX 64 /* bytes of a tenant name (the pool-name character rule) */
#define SB_AUTH_KEY_MAX 4096  /* bytes of one key: fits any header a client can send */

typedef struct sb_api_key {
    uint8_t digest[SB_AUTH_DIGEST_LEN];  /* SHA-256 of the key's bytes */
    char tenant[SB_AUTH_TENANT_MAX + 1]; /* "" when the key names none */
    int band;                            /* enum sb_band (core/flow.h), or -1 when none named */
    bool admits;                         /* a client key (auth.*); false: a band only */
} sb_api_key;

/* Zero-initialised is an empty table. Filled with sb_auth_keys_add; lookups may follow any
 * add. */
typedef struct sb_auth_keys {
    sb_api_key *items; /* in the order added */
    size_t n, cap;
    sb_table slots; /* digest's first 8 bytes -> index into items */
} sb_auth_keys;

/* SHA-256 of len bytes. */
void sb_auth_digest(const void *secret, size_t len, uint8_t out[SB_AUTH_DIGEST_LEN]);

/* Adds k, or merges it into the entry of the same digest: a client key and a band-only entry
 * of the same key become one client key (the band from whichever names one). Returns 0, -1
 * when out of memory, or -2 with *why set (a static string, naming no key) when they
 * conflict: the same client key twice, or two different bands or tenants. O(1) on average. */
int sb_auth_keys_add(sb_auth_keys *t, const sb_api_key *k, const char **why);

/* The entry whose digest is `digest`, or NULL. The pointer is valid until the next add. */
const sb_api_key *sb_auth_keys_find(const sb_auth_keys *t, const uint8_t digest[SB_AUTH_DIGEST_LEN]);

/* Number of entries that admit requests (client keys). */
size_t sb_auth_keys_clients(const sb_auth_keys *t);

void sb_auth_keys_free(sb_auth_keys *t);

/* The token of an `Authorization: Bearer TOKEN` value: true and token and token_len set (pointing
 * into value), or false when the scheme is not Bearer (case-insensitive) or the token is
 * empty. Blanks around the token are not part of it. */
bool sb_auth_bearer(const char *value, size_t len, const char **token, size_t *token_len);

/* Whether s is a plausible key: 1..SB_AUTH_KEY_MAX printable ASCII bytes without blanks
 * (what a bearer token can carry in a header). */
bool sb_auth_valid_key(const char *s, size_t len);

/* Whether s (len bytes) may name a tenant: 1..SB_AUTH_TENANT_MAX letters, digits, '-', '_'
 * or '.' (it appears in logs and metrics, like pool names). */
bool sb_auth_valid_tenant(const char *s, size_t len);

typedef struct sb_auth_file_error {
    int line;          /* 1-based; 0 when not tied to a line */
    char message[160]; /* never quotes a key */
} sb_auth_file_error;

/* Parses a keys file: one key per line, optionally followed by `tenant=NAME` and `band=BAND`
 * (critical, standard or sheddable), separated by blanks; blank lines and lines whose first
 * non-blank character is `#` are ignored, and ` #` starts a comment after the fields. Adds each
 * key to t as a client key. The whole of `text` is wiped (OPENSSL_cleanse) before returning,
 * also on failure, so the caller's buffer holds no key afterwards. Returns the number of keys
 * added, or -1 with *err filled (t may then hold the keys of earlier lines). */
long sb_auth_parse_keys_file(char *text, size_t len, sb_auth_keys *t, sb_auth_file_error *err);

/* A request's fairness key for flow control: its key's tenant when the key names one
 * (key_tenant non-empty), else the x-tenant header's value (header_len > 0), else key_id (the
 * key's own identity; 0 without a key). Key tenants and header values are hashed apart, so a
 * client whose key names no tenant cannot write a named tenant in the header and queue in
 * that tenant's FIFO. */
uint64_t sb_auth_tenant_key(const char *key_tenant, const char *header, size_t header_len, uint64_t key_id);

#endif
