#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "base/alloc.h"
#include "cmd/cmd.h"

char *sb_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            /* Not realloc: the old block would be freed unwiped, and config and key files
             * hold secrets. */
            char *d = sb_malloc(ncap);
            if (!d) {
                if (data)
                    OPENSSL_cleanse(data, cap);
                sb_free(data);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            if (data) {
                memcpy(d, data, n);
                OPENSSL_cleanse(data, cap);
                sb_free(data);
            }
            data = d;
            cap = ncap;
        }
        size_t r = fread(data + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        OPENSSL_cleanse(data, cap);
        sb_free(data);
        errno = EIO;
        return NULL;
    }
    data[n] = '\0';
    if (len)
        *len = n;
    return data;
}

/* Whether two CURVE secret keys (Z85) are one key: their public keys compared, since secrets
 * differing only in bits Curve25519 ignores are the same key. */
static bool same_curve_key(const char *a, const char *b)
{
    char pa[41], pb[41];
    if (zmq_curve_public(pa, a) < 0 || zmq_curve_public(pb, b) < 0)
        return !strcmp(a, b);
    return !strcmp(pa, pb);
}

/* A secret file's path as the gateway opens it: absolute as written, else relative to the
 * config file's directory (so a config and its key files move together). */
static void resolve(const char *config_path, const char *file, char *out, size_t cap)
{
    const char *slash = strrchr(config_path, '/');
    if (file[0] == '/' || !slash)
        snprintf(out, cap, "%s", file);
    else
        snprintf(out, cap, "%.*s/%s", (int)(slash - config_path), config_path, file);
}

/* Reads one secret file; NULL after printing why (naming the file, never its content). */
static char *read_secret(const char *config_path, const char *key, const char *file, char *path, size_t cap,
                         size_t *len)
{
    resolve(config_path, file, path, cap);
    char *text = sb_read_file(path, len);
    if (!text)
        fprintf(stderr, "%s: %s: cannot read %s: %s\n", config_path, key, path, strerror(errno));
    return text;
}

int sb_config_load_files(sb_config *cfg, const char *config_path)
{
    char path[4096], msg[256];
    size_t len;
    int bad = 0;
    if (cfg->auth_api_keys_file) {
        char *text = read_secret(config_path, "auth.api_keys_file", cfg->auth_api_keys_file, path, sizeof path, &len);
        int line = 0;
        if (!text) {
            bad = -1;
        } else if (sb_config_set_keys_file(cfg, text, len, &line, msg, sizeof msg) < 0) {
            if (line > 0)
                fprintf(stderr, "%s:%d: %s\n", path, line, msg);
            else
                fprintf(stderr, "%s: %s\n", path, msg);
            bad = -1;
        }
        sb_free(text); /* wiped by the parser */
    }
    if (cfg->admin_token_file) {
        char *text = read_secret(config_path, "admin.token_file", cfg->admin_token_file, path, sizeof path, &len);
        if (!text) {
            bad = -1;
        } else if (sb_config_set_admin_token(cfg, text, len, msg, sizeof msg) < 0) {
            fprintf(stderr, "%s: %s\n", path, msg);
            bad = -1;
        }
        sb_free(text);
    }
    if (cfg->sync_key_file) {
        char *text = read_secret(config_path, "sync.key_file", cfg->sync_key_file, path, sizeof path, &len);
        if (!text) {
            bad = -1;
        } else if (sb_config_set_sync_key(cfg, text, len, msg, sizeof msg) < 0) {
            fprintf(stderr, "%s: %s\n", path, msg);
            bad = -1;
        }
        sb_free(text);
    }
    if (cfg->sync_rotation_key_file) {
        char *text =
            read_secret(config_path, "sync.rotation_key_file", cfg->sync_rotation_key_file, path, sizeof path, &len);
        if (!text) {
            bad = -1;
        } else if (sb_config_set_sync_rotation_key(cfg, text, len, msg, sizeof msg) < 0) {
            fprintf(stderr, "%s: %s\n", path, msg);
            bad = -1;
        } else if (cfg->sync_has_key && same_curve_key(cfg->sync_key, cfg->sync_rotation_key)) {
            fprintf(stderr, "%s: sync.rotation_key_file holds the same key as sync.key_file\n", path);
            bad = -1;
        }
        sb_free(text);
    }
    for (size_t p = 0; p < cfg->n_pools; p++) {
        if (!cfg->pools[p].upstream_api_key_file)
            continue;
        char key[128];
        snprintf(key, sizeof key, "pool '%s': upstream_api_key_file", cfg->pools[p].name);
        char *text = read_secret(config_path, key, cfg->pools[p].upstream_api_key_file, path, sizeof path, &len);
        if (!text) {
            bad = -1;
        } else if (sb_config_set_upstream_key(cfg, p, text, len, msg, sizeof msg) < 0) {
            fprintf(stderr, "%s: %s\n", path, msg);
            bad = -1;
        }
        sb_free(text);
    }
    return bad;
}

sb_config *sb_load_config(const char *path)
{
    size_t len;
    char *text = sb_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return NULL;
    }
    sb_config *cfg = NULL;
    sb_config_errors errs = {0};
    if (sb_config_parse(text, len, &cfg, &errs) < 0) {
        char buf[16384];
        sb_config_errors_format(&errs, path, buf, sizeof(buf));
        fputs(buf, stderr);
        cfg = NULL;
    }
    /* The text may hold keys and tokens: the config keeps only their digests. */
    OPENSSL_cleanse(text, len);
    sb_free(text);
    if (cfg && sb_config_load_files(cfg, path) < 0) {
        sb_config_free(cfg);
        cfg = NULL;
    }
    return cfg;
}
