/* peer_msg: the gateway-sync wire format (net/peer_sync.h), one ZMQ frame per message, every
 * integer little-endian. Only switchboard speaks it, to switchboard.
 *
 *   header, 32 bytes: "SBSY" | version u8 (1) | kind u8 | flags u16 (0) | sender u64 |
 *                     seq u64 | request u64
 *   SENT adds:        prompt_tokens u32 | pool_len u16 | endpoint_len u16 | n_hashes u32 |
 *                     pool bytes | endpoint bytes | n_hashes x u64
 *   FIRST, DONE, HEARTBEAT: the header alone.
 *
 * sender: a gateway's id, drawn at its start; seq: its message count (1, 2, ...), so a lost
 * message shows as a gap; request: the sender's id for one dispatch (SENT names it, FIRST and
 * DONE refer to it; 0 in a HEARTBEAT). pool is the pool's name, endpoint the endpoint's
 * address as configured: gateways of one fleet share both. hashes: the request's chained
 * prefix-block hashes (proto/prompt.h), seeded by model and adapter and not by any secret, so
 * they are the same on every gateway.
 *
 * Pure, no allocation. The decoder reads only inside the frame, refuses what does not add up
 * (lengths past the frame, bytes left over, more hashes than allowed, an unknown version or
 * kind, a name that is empty or over 255 bytes) and points into the frame instead of copying. */
#ifndef SB_PROTO_PEER_MSG_H
#define SB_PROTO_PEER_MSG_H

#include <stddef.h>
#include <stdint.h>

enum { SB_PEER_SENT = 1, SB_PEER_FIRST = 2, SB_PEER_DONE = 3, SB_PEER_HEARTBEAT = 4 };

#define SB_PEER_HEADER_BYTES 32
#define SB_PEER_SENT_BYTES 12 /* SENT's fixed part after the header */
#define SB_PEER_MAX_NAME 255

/* Decode failures. */
enum {
    SB_PEER_E_SHORT = -1,    /* shorter than its header or its declared parts */
    SB_PEER_E_MAGIC = -2,    /* not "SBSY" */
    SB_PEER_E_VERSION = -3,  /* a version this build does not read, or flags set */
    SB_PEER_E_KIND = -4,     /* an unknown kind */
    SB_PEER_E_LENGTH = -5,   /* bytes left over, or a name empty or too long */
    SB_PEER_E_TOO_MANY = -6, /* more hashes than the reader allows */
};

typedef struct sb_peer_msg {
    uint8_t kind;
    uint64_t sender, seq, request;
    /* SENT only */
    uint32_t prompt_tokens;
    const char *pool; /* not NUL-terminated: pool_len bytes (into the frame when decoded) */
    size_t pool_len;
    const char *endpoint;
    size_t endpoint_len;
    const unsigned char *hashes; /* n_hashes little-endian u64s, unaligned: sb_peer_msg_hash */
    size_t n_hashes;
} sb_peer_msg;

/* The encoded size of m, with n hashes for a SENT. */
size_t sb_peer_msg_size(const sb_peer_msg *m, size_t n_hashes);
/* Writes m (its hashes from `hashes`, n_hashes of them; m->hashes is not read) into out.
 * Returns the bytes written, or 0 if cap is too small or a name is empty or too long. */
size_t sb_peer_msg_encode(const sb_peer_msg *m, const uint64_t *hashes, size_t n_hashes, unsigned char *out,
                          size_t cap);
/* Reads one frame into *out (zeroed first). 0, or an SB_PEER_E_* code. */
int sb_peer_msg_decode(const unsigned char *buf, size_t len, size_t max_hashes, sb_peer_msg *out);
/* The i-th hash of a decoded SENT (i < n_hashes). */
uint64_t sb_peer_msg_hash(const sb_peer_msg *m, size_t i);
/* A name for a decode failure code. */
const char *sb_peer_msg_error(int code);

#endif
