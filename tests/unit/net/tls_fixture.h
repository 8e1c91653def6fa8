/* tls_fixture: a self-signed certificate for the TLS tests (net/tls.h and the servers on it). */
#ifndef SB_TEST_TLS_FIXTURE_H
#define SB_TEST_TLS_FIXTURE_H

#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "sb_test.h"

/* A self-signed certificate and key, written as PEM to temporary files. */
static inline void make_cert(char *cert, char *key)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    assert_non_null(pk);
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pk);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, n);
    X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, "DNS:localhost");
    assert_non_null(san);
    X509_add_ext(x, san, -1);
    X509_EXTENSION_free(san);
    assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
    strcpy(cert, "/tmp/sb_tls_cert_XXXXXX");
    strcpy(key, "/tmp/sb_tls_key_XXXXXX");
    FILE *fc = fdopen(mkstemp(cert), "w"), *fk = fdopen(mkstemp(key), "w");
    assert_non_null(fc);
    assert_non_null(fk);
    assert_true(PEM_write_X509(fc, x) == 1);
    assert_true(PEM_write_PrivateKey(fk, pk, NULL, NULL, 0, NULL, NULL) == 1);
    fclose(fc);
    fclose(fk);
    X509_free(x);
    EVP_PKEY_free(pk);
}

#endif
