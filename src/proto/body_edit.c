/* body_edit: spans of a body replaced without copying it (see body_edit.h). */
#include "proto/body_edit.h"

static void put(sb_body_piece *out, int *k, const char *at, size_t len)
{
    if (len)
        out[(*k)++] = (sb_body_piece){at, len};
}

int sb_body_edit_pieces(const char *body, size_t len, const sb_body_edit *e, size_t n, sb_body_piece *out,
                        size_t *total)
{
    if (n > SB_BODY_EDITS_MAX)
        return -1;
    /* Sorted by start, stably (insertion sort over at most four). */
    const sb_body_edit *s[SB_BODY_EDITS_MAX];
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        while (j > 0 && s[j - 1]->start > e[i].start) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = &e[i];
    }
    int k = 0;
    size_t at = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i]->start < at || s[i]->end < s[i]->start || s[i]->end > len)
            return -1;
        put(out, &k, body + at, s[i]->start - at);
        put(out, &k, s[i]->text, s[i]->len);
        sum += s[i]->start - at + s[i]->len;
        at = s[i]->end;
    }
    put(out, &k, body + at, len - at);
    *total = sum + len - at;
    return k;
}
