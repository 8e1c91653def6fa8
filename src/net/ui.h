/* ui: the dashboard's static files (src/ui/), compiled into the binary (net/ui_files.S) so the
 * admin listener serves a working page with nothing installed beside the binary and nothing
 * fetched from elsewhere (no CDN: it works offline).
 *
 * Not for: fleet data. The files are the same for every gateway and carry none of its state;
 * the page reads the state from the admin listener's JSON and /metrics pages, each behind the
 * admin token as before (docs/dashboard.md, "Access"). That is why net/admin.c serves these
 * paths without the token. */
#ifndef SB_NET_UI_H
#define SB_NET_UI_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb_ui_file {
    const char *path;         /* the URL path it is served at: "/" or "/ui/<name>" */
    const char *content_type; /* with charset for text */
    const char *data;         /* the bytes, in the binary's read-only data; not NUL-terminated */
    size_t len;
} sb_ui_file;

/* Finds the file served at path[0..len) (a URL path without query): fills *out and returns 1,
 * or returns 0 when there is none (*out untouched). out's pointers are to static data, valid for
 * the process's life. */
int sb_ui_find(const char *path, size_t len, sb_ui_file *out);

/* Whether path[0..len) is one the dashboard owns: "/" or anything under "/ui/" (served or not:
 * an unknown /ui/ path is answered 404 by the admin listener without asking for the token, since
 * the list of files is public, like the binary). */
int sb_ui_owns(const char *path, size_t len);

/* The strong entity tag of f's bytes, quoted as HTTP wants it ("\"<16 hex digits>\""), written
 * to out (at least SB_UI_ETAG_MAX bytes). A hash of the content, not a build time, so a binary
 * rebuilt with the same files keeps the browsers' copies valid. */
#define SB_UI_ETAG_MAX 20
void sb_ui_etag(const sb_ui_file *f, char out[SB_UI_ETAG_MAX]);

#endif
