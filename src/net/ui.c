/* ui: the table of the dashboard's compiled-in files (net/ui_files.S holds their bytes). */
#include "net/ui.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

/* Symbols from net/ui_files.S: each file's first byte and the byte after its last. */
extern const char sb_ui_index_html[], sb_ui_index_html_end[];
extern const char sb_ui_app_js[], sb_ui_app_js_end[];
extern const char sb_ui_app_css[], sb_ui_app_css_end[];

int sb_ui_find(const char *path, size_t len, sb_ui_file *out)
{
    /* Built per call: the lengths are link-time differences that C cannot put in a constant
     * initialiser, and a table filled on first use would be hidden mutable state. Three entries. */
    const sb_ui_file files[] = {
        {"/", "text/html; charset=utf-8", sb_ui_index_html, (size_t)(sb_ui_index_html_end - sb_ui_index_html)},
        {"/ui/app.js", "text/javascript; charset=utf-8", sb_ui_app_js, (size_t)(sb_ui_app_js_end - sb_ui_app_js)},
        {"/ui/app.css", "text/css; charset=utf-8", sb_ui_app_css, (size_t)(sb_ui_app_css_end - sb_ui_app_css)},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strlen(files[i].path) == len && !memcmp(files[i].path, path, len)) {
            *out = files[i];
            return 1;
        }
    return 0;
}

int sb_ui_owns(const char *path, size_t len)
{
    return (len == 1 && path[0] == '/') || (len >= 4 && !memcmp(path, "/ui/", 4));
}

void sb_ui_etag(const sb_ui_file *f, char out[SB_UI_ETAG_MAX])
{
    /* Hashed per request rather than cached: XXH3 reads the few tens of kilobytes in
     * microseconds, and no state is kept. */
    snprintf(out, SB_UI_ETAG_MAX, "\"%016llx\"", (unsigned long long)XXH3_64bits(f->data, f->len));
}
