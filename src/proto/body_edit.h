/* body_edit: a request body with a few spans replaced, as pieces that point into the original
 * and into the replacement texts: nothing copied, nothing re-serialised.
 *
 * The gateway edits a body it forwards in at most a few places (the served name for an alias
 * or a missing model, stream_options.include_usage for a stream: proto/inspect.h); every other
 * byte goes out as the client sent it. The proxy hands the pieces to one vectored write; the
 * endpoint picker concatenates them for Envoy. Pure. */
#ifndef SB_PROTO_BODY_EDIT_H
#define SB_PROTO_BODY_EDIT_H

#include <stddef.h>

#define SB_BODY_EDITS_MAX 4
#define SB_BODY_PIECES_MAX (2 * SB_BODY_EDITS_MAX + 1)

/* Replace body[start, end) with text[0..len) (start == end: an insertion). */
typedef struct sb_body_edit {
    size_t start, end;
    const char *text;
    size_t len;
} sb_body_edit;

typedef struct sb_body_piece {
    const char *at;
    size_t len;
} sb_body_piece;

/* Cuts body[0..len) with edits e[0..n) (any order; two insertions at one place keep their
 * order in e) into out (room for SB_BODY_PIECES_MAX), empty pieces left out. Returns the number
 * of pieces and sets *total to the edited body's length; -1 (nothing set) if n exceeds
 * SB_BODY_EDITS_MAX, an edit falls outside the body, or two edits overlap. */
int sb_body_edit_pieces(const char *body, size_t len, const sb_body_edit *e, size_t n, sb_body_piece *out,
                        size_t *total);

#endif
