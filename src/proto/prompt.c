/* prompt: canonical prompt, chained block hashes and prefix key (see prompt.h).
 *
 * One pass over the prompt's tokens, which sb_inspect found and checked: text is decoded
 * into the canonical form as it is hashed, a block at a time, so the canonical prompt is
 * never materialised. Every walk is over direct children (messages, parts, keys) or, for a
 * non-text part, once over its subtree: O(prompt tokens and bytes), whatever the shape. */

/* For XXH3_state_t's definition: streaming states live on the stack, never on the heap. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "proto/prompt.h"
#include "proto/request_keys.h"

#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Blocks up to this size are staged in a stack buffer and hashed one-shot (fastest for the
 * usual 64..1024-byte blocks); larger ones stream through an XXH3 state, same result. */
#define STAGE_MAX 4096
/* Room past a block in the stage: decoding goes a chunk at a time (see decode_chunk). */
#define STAGE_SLACK 128
#define DEFAULT_PREFIX_CHARS 100

/* Canonical prompt markers (prompt.h): each is emitted after a 00 byte. */
enum { M_NUL = 1, M_FIELD = 2, M_MESSAGE = 3, M_PART = 4, M_OPAQUE = 5 };

struct hasher {
    const sb_json_tok *t;
    int n;
    const char *b;

    /* block chain */
    size_t bb;   /* block bytes */
    size_t fill; /* bytes of the current block seen so far */
    uint64_t prev;
    uint64_t *hashes;
    size_t cap, nh;
    int hashing; /* 0 once cap blocks are hashed: from then on bytes are only counted */
    unsigned char *stage;
    XXH3_state_t *big;
    size_t total;

    /* prefix key */
    XXH3_state_t *pk;
    size_t pk_left;
    int pk_on;  /* feeding bytes into pk now */
    int pk_msg; /* inside the message (or prompt part) the key covers */
    int pk_started, pk_done;
};

static void push_block(struct hasher *h, uint64_t v)
{
    h->hashes[h->nh++] = v;
    h->prev = v;
    h->fill = 0;
    if (h->nh == h->cap)
        h->hashing = 0;
}

/* Adds n bytes (fill + n <= bb) to the block under construction. */
static void stage(struct hasher *h, const unsigned char *p, size_t n)
{
    if (h->bb <= STAGE_MAX) {
        memcpy(h->stage + h->fill, p, n);
    } else {
        if (h->fill == 0)
            XXH3_64bits_reset_withSeed(h->big, h->prev);
        XXH3_64bits_update(h->big, p, n);
    }
    h->fill += n;
    if (h->fill == h->bb)
        push_block(h, h->bb <= STAGE_MAX ? XXH3_64bits_withSeed(h->stage, h->bb, h->prev) : XXH3_64bits_digest(h->big));
}

/* Counts n canonical bytes and feeds them to the prefix key while it is on. */
static inline void count(struct hasher *h, const void *p, size_t n)
{
    h->total += n;
    if (h->pk_on) {
        size_t take = n < h->pk_left ? n : h->pk_left;
        XXH3_64bits_update(h->pk, p, take);
        h->pk_left -= take;
        h->pk_on = h->pk_left > 0;
    }
}

/* Appends n bytes to the canonical prompt. Whole blocks lying in p are hashed in place:
 * the common case of long unescaped text is never copied. */
static void emit(struct hasher *h, const void *p, size_t n)
{
    const unsigned char *c = p;

    count(h, c, n);
    if (!h->hashing)
        return;
    if (h->fill) {
        size_t take = h->bb - h->fill < n ? h->bb - h->fill : n;
        stage(h, c, take);
        c += take;
        n -= take;
    }
    for (; n >= h->bb && h->hashing; c += h->bb, n -= h->bb)
        push_block(h, XXH3_64bits_withSeed(c, h->bb, h->prev));
    if (n && h->hashing)
        stage(h, c, n);
}

static void mark(struct hasher *h, unsigned char m)
{
    unsigned char two[2] = {0, m};
    emit(h, two, 2);
}

/* Index of the first backslash in s[0..n), or n. */
static size_t raw_span(const char *s, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i bs = _mm_set1_epi8('\\');

    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, bs));
        if (mask)
            return i + (size_t)__builtin_ctz(mask);
    }
#endif
    for (; i < n && s[i] != '\\'; i++)
        ;
    return i;
}

/* Bit k set where p[k] (k < 64) is a backslash. */
static uint64_t backslash_mask64(const char *p)
{
    uint64_t m = 0;
#ifdef __SSE2__
    const __m128i bs = _mm_set1_epi8('\\');

    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        m |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, bs)) << (16 * k);
    }
#else
    for (int k = 0; k < 64; k++)
        m |= (uint64_t)(p[k] == '\\') << k;
#endif
    return m;
}

/* Copies n bytes in 16-byte moves: reads and writes up to 15 bytes past n. */
static void copy16s(unsigned char *d, const char *s, size_t n)
{
    for (size_t x = 0; x < n; x += 16)
        memcpy(d + x, s + x, 16);
}

/* Decodes the escape at s (s < end) into out, in canonical form (\u0000 as 00 01): at most
 * 4 bytes. Returns the bytes written and sets *adv to the input consumed. */
static inline int canon_escape(const char *s, const char *end, unsigned char *out, size_t *adv)
{
    int m;

    if (end - s >= 2 && sb_json_simple_escape[(unsigned char)s[1]]) {
        out[0] = sb_json_simple_escape[(unsigned char)s[1]];
        *adv = 2;
        return 1;
    }
    m = sb_json_decode_escape(s, (size_t)(end - s), out, adv);
    if (m < 0) { /* cannot happen on a body sb_inspect accepted; keep the byte rather than loop */
        out[0] = '\\';
        *adv = 1;
        return 1;
    }
    if (m == 1 && out[0] == 0) {
        out[1] = M_NUL;
        return 2;
    }
    return m;
}

/* Decodes the 64 input bytes at p, and the end of an escape starting in them, into o.
 * Needs CHUNK_READ input bytes at p and room for 90 bytes at o (at most 75 written, and
 * 16-byte moves overrun by up to 15: STAGE_SLACK covers it). Returns the bytes written
 * (never more than read) and sets *used to the input read (64..75). Raw runs between
 * escapes are found from one bit mask per 64 bytes, not by a scan per run: with an escape
 * every 20 bytes, per-run scans cost more than the copying. */
#define CHUNK_READ 80
static size_t decode_chunk(unsigned char *o, const char *p, const char *end, size_t *used)
{
    uint64_t m = backslash_mask64(p);
    size_t i = 0, out = 0, adv;

    while (m) {
        size_t k = (size_t)__builtin_ctzll(m);
        copy16s(o + out, p + i, k - i);
        out += k - i;
        out += (size_t)canon_escape(p + k, end, o + out, &adv);
        i = k + adv;
        if (i >= 64) {
            *used = i;
            return out;
        }
        m &= ~(uint64_t)0 << i;
    }
    copy16s(o + out, p + i, 64 - i);
    *used = 64;
    return out + 64 - i;
}

/* The usual case of emit_json_text: blocks staged in memory and still hashing. Blocks that
 * lie whole in a raw run are hashed in place (a block begun in the stage is topped up and
 * the following ones hashed in place); the rest is decoded straight into the stage,
 * a chunk at a time (the stage holds a block plus a chunk's overrun, carried over to the
 * next block). Returns where it stopped: at end, or earlier if the last hashed block used
 * up the caller's slots (the bytes decoded past it are counted already). */
static const char *stage_json_text(struct hasher *h, const char *s, const char *end)
{
    unsigned char *st = h->stage;
    const size_t bb = h->bb;
    const char *bs = NULL; /* the next backslash (or end) at or after s, if bs >= s */
    size_t fill = h->fill, f0, off, used, adv;

    while (s < end && h->hashing) {
        if (!bs || bs < s)
            bs = s + raw_span(s, (size_t)(end - s));
        if ((size_t)(bs - s) >= bb - fill) { /* the block ends in raw text */
            if (fill == 0) {
                count(h, s, bb);
                push_block(h, XXH3_64bits_withSeed(s, bb, h->prev));
            } else {
                memcpy(st + fill, s, bb - fill);
                count(h, st + fill, bb - fill);
                push_block(h, XXH3_64bits_withSeed(st, bb, h->prev));
            }
            s += bb - fill;
            fill = 0;
            continue;
        }
        if (bs == end) { /* raw text to the end, short of a block */
            memcpy(st + fill, s, (size_t)(end - s));
            count(h, st + fill, (size_t)(end - s));
            fill += (size_t)(end - s);
            s = end;
            break;
        }
        f0 = fill;
        while (fill < bb && s < end) {
            if (end - s >= CHUNK_READ) {
                fill += decode_chunk(st + fill, s, end, &used);
                s += used;
            } else if (*s == '\\') {
                fill += (size_t)canon_escape(s, end, st + fill, &adv);
                s += adv;
            } else {
                st[fill++] = (unsigned char)*s++;
            }
        }
        count(h, st + f0, fill - f0);
        for (off = 0; fill - off >= bb && h->hashing; off += bb)
            push_block(h, XXH3_64bits_withSeed(st + off, bb, h->prev));
        memmove(st, st + off, fill - off);
        fill -= off;
    }
    h->fill = fill;
    return s;
}

/* Emits a JSON string's raw text decoded, NUL bytes as 00 01. The body holds no raw NUL
 * (sb_inspect rejected it), so only \u0000 can produce one. Staged blocks go through
 * stage_json_text; the rest (blocks streamed through an XXH3 state, or bytes only counted
 * once the slots are used up) goes out here: long raw runs as they are, escapes and short
 * runs decoded into a small buffer first. */
static void emit_json_text(struct hasher *h, const char *s, size_t n)
{
    const char *end = s + n;
    unsigned char tmp[512];
    size_t k = 0;

    if (h->hashing && h->bb <= STAGE_MAX)
        s = stage_json_text(h, s, end);
    while (s < end) {
        size_t run = raw_span(s, (size_t)(end - s)), adv;

        if (k && (run > 64 || k + run > sizeof tmp - 4)) {
            emit(h, tmp, k);
            k = 0;
        }
        if (run > 64) {
            emit(h, s, run);
        } else {
            memcpy(tmp + k, s, run);
            k += run;
        }
        s += run;
        if (s == end)
            break;
        k += (size_t)canon_escape(s, end, tmp + k, &adv);
        s += adv;
    }
    if (k)
        emit(h, tmp, k);
}

static void emit_str(struct hasher *h, int v)
{
    emit_json_text(h, h->b + h->t[v].start, (size_t)(h->t[v].end - h->t[v].start));
}

/* A text field that the prefix key may cover. */
static void emit_text_field(struct hasher *h, int v)
{
    h->pk_on = h->pk_msg && h->pk_left > 0;
    emit_str(h, v);
    h->pk_on = 0;
}

static void begin_prefix_scope(struct hasher *h)
{
    if (h->pk_done)
        return;
    h->pk_msg = 1;
    h->pk_started = 1;
}

static void end_prefix_scope(struct hasher *h)
{
    if (h->pk_msg)
        h->pk_done = 1;
    h->pk_msg = 0;
}

/* A non-text part: 00 05, type, 00 02, then each scalar value of the subtree at v in
 * document order, each followed by 00 02 (inspect.h). type_tok (a string, or -1) is named
 * outside the subtree; a `type` key directly in v is skipped since it was named already. */
static void emit_opaque(struct hasher *h, const char *type_lit, size_t type_len, int type_tok, int v)
{
    const sb_json_tok *t = h->t;
    int end = sb_json_skip(t, h->n, v);

    mark(h, M_OPAQUE);
    if (type_tok >= 0)
        emit_str(h, type_tok);
    else
        emit(h, type_lit, type_len);
    mark(h, M_FIELD);
    for (int j = v; j < end;) {
        int p = t[j].parent;
        if (t[j].type == SB_JSON_STRING && p >= 0 && t[p].type == SB_JSON_OBJECT) { /* a key */
            j = p == v && sb_json_str_is(h->b, &t[j], SB_KEY("type")) ? sb_json_skip(t, h->n, j + 1) : j + 1;
            continue;
        }
        if (t[j].type == SB_JSON_STRING) {
            emit_str(h, j);
            mark(h, M_FIELD);
        } else if (t[j].type == SB_JSON_PRIMITIVE) {
            emit(h, h->b + t[j].start, (size_t)(t[j].end - t[j].start));
            mark(h, M_FIELD);
        }
        j++;
    }
}

static void emit_part(struct hasher *h, int part)
{
    int v[PART_KEYS];

    sb_json_find_keys(h->t, h->n, h->b, part, sb_part_keys, PART_KEYS, v);
    if (sb_json_present(h->t, v[PART_TEXT], h->b)) {
        emit_text_field(h, v[PART_TEXT]);
    } else {
        int type = sb_json_present(h->t, v[PART_TYPE], h->b) ? v[PART_TYPE] : -1;
        emit_opaque(h, "", 0, type, part);
    }
    mark(h, M_PART);
}

static void emit_message(struct hasher *h, int m)
{
    const sb_json_tok *t = h->t;
    int v[MSG_KEYS], c;

    sb_json_find_keys(t, h->n, h->b, m, sb_message_keys, MSG_KEYS, v);
    if (!sb_json_present(t, v[MSG_ROLE], h->b)) { /* a /v1/responses item such as a function call */
        mark(h, M_FIELD);
        emit_opaque(h, "", 0, sb_json_present(t, v[MSG_TYPE], h->b) ? v[MSG_TYPE] : -1, m);
        mark(h, M_PART);
        mark(h, M_MESSAGE);
        return;
    }
    emit_str(h, v[MSG_ROLE]);
    mark(h, M_FIELD);
    if (sb_json_str_is(h->b, &t[v[MSG_ROLE]], SB_KEY("user")))
        begin_prefix_scope(h);
    c = v[MSG_CONTENT];
    if (sb_json_present(t, c, h->b) && t[c].type == SB_JSON_STRING) {
        emit_text_field(h, c);
        mark(h, M_PART);
    } else if (sb_json_present(t, c, h->b)) {
        for (int i = 0, p = c + 1; i < t[c].size; i++, p = sb_json_skip(t, h->n, p))
            emit_part(h, p);
    }
    end_prefix_scope(h);
    if (sb_json_present(t, v[MSG_TOOL_CALLS], h->b)) {
        emit_opaque(h, SB_KEY("tool_calls"), -1, v[MSG_TOOL_CALLS]);
        mark(h, M_PART);
    }
    mark(h, M_MESSAGE);
}

/* A message made of a role and one string (responses `instructions` / string `input`). */
static void emit_simple_message(struct hasher *h, const char *role, size_t role_len, int v, int keyed)
{
    emit(h, role, role_len);
    mark(h, M_FIELD);
    if (keyed)
        begin_prefix_scope(h);
    emit_text_field(h, v);
    end_prefix_scope(h);
    mark(h, M_PART);
    mark(h, M_MESSAGE);
}

static void emit_token_ids(struct hasher *h, int arr)
{
    const sb_json_tok *t = h->t;

    mark(h, M_OPAQUE);
    h->pk_on = h->pk_msg && h->pk_left > 0;
    for (int i = 0; i < t[arr].size; i++) {
        const sb_json_tok *e = &t[arr + 1 + i];
        emit(h, h->b + e->start, (size_t)(e->end - e->start));
        emit(h, ",", 1);
    }
    h->pk_on = 0;
}

static void emit_prompt(struct hasher *h, int v)
{
    const sb_json_tok *t = h->t;

    begin_prefix_scope(h); /* the first part is the key's */
    if (t[v].type == SB_JSON_STRING) {
        emit_text_field(h, v);
    } else if (t[v].size > 0 && t[v + 1].type == SB_JSON_PRIMITIVE) {
        emit_token_ids(h, v);
    } else {
        for (int i = 0, e = v + 1; i < t[v].size; i++, e = sb_json_skip(t, h->n, e)) {
            if (t[e].type == SB_JSON_STRING)
                emit_text_field(h, e);
            else
                emit_token_ids(h, e);
            end_prefix_scope(h);
            mark(h, M_MESSAGE);
        }
        return;
    }
    end_prefix_scope(h);
    mark(h, M_MESSAGE);
}

uint64_t sb_prompt_seed(const char *model, size_t model_len, const char *adapter, size_t adapter_len)
{
    XXH3_state_t st;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, model, model_len);
    XXH3_64bits_update(&st, "", 1);
    if (adapter_len)
        XXH3_64bits_update(&st, adapter, adapter_len);
    return XXH3_64bits_digest(&st);
}

void sb_prompt_hash(const sb_inspect_ctx *ctx, const char *body, const sb_inspect_result *res, uint64_t seed,
                    size_t block_bytes, sb_prompt_hashes *out)
{
    unsigned char stage_buf[STAGE_MAX + STAGE_SLACK];
    XXH3_state_t big, pk;
    struct hasher h = {0};
    const sb_json_tok *t = ctx->json.tokens;

    out->n = 0;
    out->prompt_bytes = 0;
    out->prefix_key = 0;
    if (ctx->n_tokens <= 0)
        return;
    XXH3_INITSTATE(&big);
    XXH3_INITSTATE(&pk);
    XXH3_64bits_reset(&pk);
    h.t = t;
    h.n = ctx->n_tokens;
    h.b = body;
    h.bb = block_bytes;
    h.prev = seed;
    h.hashes = out->hashes;
    h.cap = out->cap;
    h.hashing = block_bytes > 0 && out->cap > 0 && out->hashes;
    h.stage = stage_buf;
    h.big = &big;
    h.pk = &pk;
    h.pk_left = out->prefix_chars ? out->prefix_chars : DEFAULT_PREFIX_CHARS;

    if (res->kind == SB_API_CHAT || res->kind == SB_API_RESPONSES) {
        if (res->instructions_tok >= 0)
            emit_simple_message(&h, SB_KEY("system"), res->instructions_tok, 0);
        if (res->prompt_tok >= 0 && t[res->prompt_tok].type == SB_JSON_STRING) {
            emit_simple_message(&h, SB_KEY("user"), res->prompt_tok, 1);
        } else if (res->prompt_tok >= 0) {
            int v = res->prompt_tok;
            for (int i = 0, m = v + 1; i < t[v].size; i++, m = sb_json_skip(t, h.n, m))
                emit_message(&h, m);
        }
    } else if (res->prompt_tok >= 0) {
        emit_prompt(&h, res->prompt_tok);
    }
    out->n = h.nh;
    out->prompt_bytes = h.total;
    out->prefix_key = h.pk_started ? XXH3_64bits_digest(&pk) : 0;
}
