#include "proto/peer_msg.h"

#include <string.h>

static const unsigned char magic[4] = {'S', 'B', 'S', 'Y'};

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

size_t sb_peer_msg_size(const sb_peer_msg *m, size_t n_hashes)
{
    if (m->kind != SB_PEER_SENT)
        return SB_PEER_HEADER_BYTES;
    return SB_PEER_HEADER_BYTES + SB_PEER_SENT_BYTES + m->pool_len + m->endpoint_len + 8 * n_hashes;
}

static int name_ok(size_t len)
{
    return len > 0 && len <= SB_PEER_MAX_NAME;
}

size_t sb_peer_msg_encode(const sb_peer_msg *m, const uint64_t *hashes, size_t n_hashes, unsigned char *out, size_t cap)
{
    if (m->kind < SB_PEER_SENT || m->kind > SB_PEER_HEARTBEAT)
        return 0;
    if (m->kind == SB_PEER_SENT && (!name_ok(m->pool_len) || !name_ok(m->endpoint_len) || n_hashes > UINT32_MAX))
        return 0;
    size_t need = sb_peer_msg_size(m, n_hashes);
    if (need > cap)
        return 0;
    memcpy(out, magic, 4);
    out[4] = 1;
    out[5] = m->kind;
    put16(out + 6, 0);
    put64(out + 8, m->sender);
    put64(out + 16, m->seq);
    put64(out + 24, m->request);
    if (m->kind != SB_PEER_SENT)
        return need;
    unsigned char *p = out + SB_PEER_HEADER_BYTES;
    put32(p, m->prompt_tokens);
    put16(p + 4, (uint16_t)m->pool_len);
    put16(p + 6, (uint16_t)m->endpoint_len);
    put32(p + 8, (uint32_t)n_hashes);
    p += SB_PEER_SENT_BYTES;
    memcpy(p, m->pool, m->pool_len);
    p += m->pool_len;
    memcpy(p, m->endpoint, m->endpoint_len);
    p += m->endpoint_len;
    for (size_t i = 0; i < n_hashes; i++, p += 8)
        put64(p, hashes[i]);
    return need;
}

int sb_peer_msg_decode(const unsigned char *buf, size_t len, size_t max_hashes, sb_peer_msg *out)
{
    memset(out, 0, sizeof(*out));
    if (len < SB_PEER_HEADER_BYTES)
        return SB_PEER_E_SHORT;
    if (memcmp(buf, magic, 4))
        return SB_PEER_E_MAGIC;
    if (buf[4] != 1 || buf[6] || buf[7]) /* flags: none defined in version 1 */
        return SB_PEER_E_VERSION;
    uint8_t kind = buf[5];
    if (kind < SB_PEER_SENT || kind > SB_PEER_HEARTBEAT)
        return SB_PEER_E_KIND;
    out->kind = kind;
    out->sender = get64(buf + 8);
    out->seq = get64(buf + 16);
    out->request = get64(buf + 24);
    if (kind != SB_PEER_SENT)
        return len == SB_PEER_HEADER_BYTES ? 0 : SB_PEER_E_LENGTH;
    size_t left = len - SB_PEER_HEADER_BYTES;
    const unsigned char *p = buf + SB_PEER_HEADER_BYTES;
    if (left < SB_PEER_SENT_BYTES)
        return SB_PEER_E_SHORT;
    out->prompt_tokens = get32(p);
    size_t pl = get16(p + 4), el = get16(p + 6), nh = get32(p + 8);
    p += SB_PEER_SENT_BYTES, left -= SB_PEER_SENT_BYTES;
    if (!name_ok(pl) || !name_ok(el))
        return SB_PEER_E_LENGTH;
    if (nh > max_hashes)
        return SB_PEER_E_TOO_MANY;
    /* nh <= max_hashes, a bound the reader sets well below SIZE_MAX / 8. */
    size_t need = pl + el + 8 * nh;
    if (left < need)
        return SB_PEER_E_SHORT;
    if (left > need)
        return SB_PEER_E_LENGTH;
    out->pool = (const char *)p;
    out->pool_len = pl;
    out->endpoint = (const char *)p + pl;
    out->endpoint_len = el;
    out->hashes = p + pl + el;
    out->n_hashes = nh;
    return 0;
}

uint64_t sb_peer_msg_hash(const sb_peer_msg *m, size_t i)
{
    return get64(m->hashes + 8 * i);
}

const char *sb_peer_msg_error(int code)
{
    switch (code) {
    case 0: return "ok";
    case SB_PEER_E_SHORT: return "short";
    case SB_PEER_E_MAGIC: return "magic";
    case SB_PEER_E_VERSION: return "version";
    case SB_PEER_E_KIND: return "kind";
    case SB_PEER_E_LENGTH: return "length";
    case SB_PEER_E_TOO_MANY: return "too_many_hashes";
    default: return "unknown";
    }
}
