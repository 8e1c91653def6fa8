#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            cap = cap ? cap * 2 : 8192;
            char *d = sb_realloc(data, cap);
            if (!d) {
                sb_free(data);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            data = d;
        }
        size_t r = fread(data + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        sb_free(data);
        errno = EIO;
        return NULL;
    }
    data[n] = '\0';
    if (len)
        *len = n;
    return data;
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
    sb_free(text);
    return cfg;
}
