#include "proto/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "core/flow.h"

void sb_auth_digest(const void *secret, size_t len, uint8_t out[SB_AUTH_DIGEST_LEN])
{
    SHA256(secret, len, out);
}

static uint64_t tag_of(const uint8_t *digest)
{
    uint64_t h;
    memcpy(&h, digest, sizeof h); /* a SHA-256 digest's bytes are already uniform */
    return h;
}

typedef struct digest_probe {
    const sb_api_key *items;
    const uint8_t *digest;
} digest_probe;

static bool has_digest(const void *ctx, uint32_t k)
{
    const digest_probe *q = ctx;
    return CRYPTO_memcmp(q->items[k].digest, q->digest, SB_AUTH_DIGEST_LEN) == 0;
}

/* The slot of digest, or the empty one where it would go; SIZE_MAX in an empty table. */
static size_t slot_of(const sb_auth_keys *t, const uint8_t *digest)
{
    digest_probe q = {t->items, digest};
    size_t steps;
    return sb_table_search(&t->slots, tag_of(digest), has_digest, &q, &steps);
}

static sb_api_key *lookup(const sb_auth_keys *t, const uint8_t *digest)
{
    size_t i = slot_of(t, digest);
    return sb_table_occupied(&t->slots, i) ? &t->items[sb_table_val(&t->slots, i)] : NULL;
}

int sb_auth_keys_add(sb_auth_keys *t, const sb_api_key *k, const char **why)
{
    sb_api_key *e = lookup(t, k->digest);
    if (e) {
        if (e->admits && k->admits) {
            *why = "the same key is listed twice";
            return -2;
        }
        if (e->band >= 0 && k->band >= 0 && e->band != k->band) {
            *why = "the same key is given two different bands";
            return -2;
        }
        if (e->tenant[0] && k->tenant[0] && strcmp(e->tenant, k->tenant)) {
            *why = "the same key is given two different tenants";
            return -2;
        }
        if (k->band >= 0)
            e->band = k->band;
        if (k->tenant[0])
            memcpy(e->tenant, k->tenant, sizeof e->tenant);
        e->admits = e->admits || k->admits;
        return 0;
    }
    if (t->n >= UINT32_MAX - 1)
        return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        sb_api_key *items = sb_malloc(cap * sizeof *items);
        if (!items)
            return -1;
        /* Not realloc: the old block would be freed holding digests and tenants unwiped. */
        if (t->items) {
            memcpy(items, t->items, t->n * sizeof *items);
            OPENSSL_cleanse(t->items, t->cap * sizeof *t->items);
            sb_free(t->items);
        }
        t->items = items;
        t->cap = cap;
    }
    sb_table_wipe_tags(&t->slots); /* tags are digest bytes: wiped like the items */
    if (sb_table_reserve(&t->slots, t->n + 1) < 0)
        return -1;
    t->items[t->n] = *k;
    sb_table_put(&t->slots, slot_of(t, k->digest), tag_of(k->digest), (uint32_t)t->n);
    t->n++;
    return 0;
}

const sb_api_key *sb_auth_keys_find(const sb_auth_keys *t, const uint8_t digest[SB_AUTH_DIGEST_LEN])
{
    return lookup(t, digest);
}

size_t sb_auth_keys_clients(const sb_auth_keys *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->items[i].admits;
    return n;
}

void sb_auth_keys_free(sb_auth_keys *t)
{
    if (t->items)
        OPENSSL_cleanse(t->items, t->cap * sizeof *t->items);
    sb_free(t->items);
    sb_table_free(&t->slots);
    *t = (sb_auth_keys){0};
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

bool sb_auth_bearer(const char *value, size_t len, const char **token, size_t *token_len)
{
    if (len < 7 || strncasecmp(value, "Bearer", 6) != 0 || !blank(value[6]))
        return false;
    size_t a = 7, b = len;
    while (a < b && blank(value[a]))
        a++;
    while (b > a && blank(value[b - 1]))
        b--;
    if (a == b)
        return false;
    *token = value + a;
    *token_len = b - a;
    return true;
}

bool sb_auth_valid_key(const char *s, size_t len)
{
    if (len == 0 || len > SB_AUTH_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

bool sb_auth_valid_tenant(const char *s, size_t len)
{
    if (len == 0 || len > SB_AUTH_TENANT_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return false;
    }
    return true;
}

static long file_error(sb_auth_file_error *err, int line, const char *msg)
{
    err->line = line;
    snprintf(err->message, sizeof err->message, "%s", msg);
    return -1;
}

/* One line's fields after the key: `tenant=NAME`, `band=BAND`, each at most once. */
static const char *parse_fields(const char *p, const char *end, sb_api_key *k)
{
    while (p < end) {
        while (p < end && blank(*p))
            p++;
        if (p == end || *p == '#')
            break;
        const char *f = p;
        while (p < end && !blank(*p))
            p++;
        size_t n = (size_t)(p - f);
        if (n > 7 && !memcmp(f, "tenant=", 7)) {
            if (k->tenant[0])
                return "tenant= is given twice";
            if (!sb_auth_valid_tenant(f + 7, n - 7))
                return "tenant= must be 1 to 64 letters, digits, '-', '_' or '.'";
            memcpy(k->tenant, f + 7, n - 7);
            k->tenant[n - 7] = '\0';
        } else if (n > 5 && !memcmp(f, "band=", 5)) {
            if (k->band >= 0)
                return "band= is given twice";
            k->band = sb_band_parse(f + 5, n - 5);
            if (k->band < 0)
                return "band= must be critical, standard or sheddable";
        } else {
            return "unknown field after the key (tenant=NAME and band=BAND are known)";
        }
    }
    return NULL;
}

long sb_auth_parse_keys_file(char *text, size_t len, sb_auth_keys *t, sb_auth_file_error *err)
{
    long added = 0;
    int line = 0;
    const char *p = text, *end = text + len;
    *err = (sb_auth_file_error){0};
    while (p < end) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        if (!eol)
            eol = end;
        if (eol > p && eol[-1] == '\r')
            eol--;
        const char *k0 = p;
        while (k0 < eol && blank(*k0))
            k0++;
        if (k0 == eol || *k0 == '#') {
            p = next;
            continue;
        }
        const char *k1 = k0;
        while (k1 < eol && !blank(*k1))
            k1++;
        if (!sb_auth_valid_key(k0, (size_t)(k1 - k0))) {
            added = file_error(err, line, "a key must be 1 to 4096 printable ASCII characters without blanks");
            break;
        }
        sb_api_key k = {.band = -1, .admits = true};
        const char *why = parse_fields(k1, eol, &k);
        if (why) {
            added = file_error(err, line, why);
            break;
        }
        sb_auth_digest(k0, (size_t)(k1 - k0), k.digest);
        int rc = sb_auth_keys_add(t, &k, &why);
        if (rc == -1) {
            added = file_error(err, line, "out of memory");
            break;
        }
        if (rc < 0) {
            added = file_error(err, line, why);
            break;
        }
        added++;
        p = next;
    }
    OPENSSL_cleanse(text, len);
    return added;
}

uint64_t sb_auth_tenant_key(const char *key_tenant, const char *header, size_t header_len, uint64_t key_id)
{
    if (key_tenant && key_tenant[0])
        return XXH3_64bits_withSeed(key_tenant, strlen(key_tenant), 1);
    if (header && header_len)
        return XXH3_64bits_withSeed(header, header_len, 2);
    return key_id;
}
