/* inspect: OpenAI request body inspection and prompt block hashing (see inspect.h).
 *
 * One pass over bytes, then passes over tokens: sb_json_parse (proto/json.h) builds the
 * token array and checks the syntax (the only pass over every byte, linear whatever the
 * nesting, which is bounded), then field lookups only touch the keys of the objects they
 * read and skip nested values by a galloping search on token offsets. sb_prompt_hash revisits only
 * the prompt's tokens. Every walk here is over direct children (messages, parts, keys) or,
 * for a non-text part, once over its subtree: O(tokens) in all, whatever the shape. */

/* For XXH3_state_t's definition: streaming states live on the stack, never on the heap. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "proto/inspect.h"

#include <stdbool.h>
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

#define KEY(s) s, sizeof(s) - 1

/* Canonical prompt markers (inspect.h): each is emitted after a 00 byte. */
enum { M_NUL = 1, M_FIELD = 2, M_MESSAGE = 3, M_PART = 4, M_OPAQUE = 5 };

void sb_inspect_ctx_free(sb_inspect_ctx *ctx)
{
    sb_json_free(&ctx->json);
    ctx->n_tokens = 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---- token tree navigation ---- */

struct want {
    const char *name;
    size_t len;
    int val; /* out: token index of the value, -1 if absent */
};

/* Finds the values of the wanted keys of object obj; the last duplicate wins. */
static void find_keys(const sb_json_tok *t, int n, const char *b, int obj, struct want *w, int nw)
{
    int key = obj + 1;

    for (int k = 0; k < nw; k++)
        w[k].val = -1;
    for (int c = 0; c < t[obj].size; c++) {
        for (int k = 0; k < nw; k++) {
            if (sb_json_str_is(b, &t[key], w[k].name, w[k].len)) {
                w[k].val = key + 1;
                break;
            }
        }
        key = sb_json_skip(t, n, key + 1);
    }
}

static int is_null(const sb_json_tok *t, const char *b) { return t->type == SB_JSON_PRIMITIVE && b[t->start] == 'n'; }

static int is_bool(const sb_json_tok *t, const char *b)
{
    return t->type == SB_JSON_PRIMITIVE && (b[t->start] == 't' || b[t->start] == 'f');
}

static int is_number(const sb_json_tok *t, const char *b)
{
    return t->type == SB_JSON_PRIMITIVE && (b[t->start] == '-' || is_digit(b[t->start]));
}

/* An absent or null value reads as absent. */
static int present(const sb_json_tok *t, int v, const char *b) { return v >= 0 && !is_null(&t[v], b); }

/* ---- field checks ---- */

struct names {
    const char *item, *role, *content;
};

static const struct names chat_names = {"messages", "messages.role", "messages.content"};
static const struct names responses_names = {"input", "input.role", "input.content"};

/* A content part: an object whose `type` and `text`, if present, are strings. */
static int part_ok(const sb_json_tok *t, int n, const char *b, int part)
{
    struct want w[] = {{KEY("type"), -1}, {KEY("text"), -1}};

    if (t[part].type != SB_JSON_OBJECT)
        return 0;
    find_keys(t, n, b, part, w, 2);
    for (int k = 0; k < 2; k++)
        if (present(t, w[k].val, b) && t[w[k].val].type != SB_JSON_STRING)
            return 0;
    return 1;
}

/* A chat message, or a /v1/responses input item (role optional: function calls and their
 * outputs have none). Returns NULL if fine, else the field to blame. */
static const char *check_message(const sb_json_tok *t, int n, const char *b, int m, int role_required,
                                 const struct names *nm)
{
    struct want w[] = {{KEY("role"), -1}, {KEY("content"), -1}, {KEY("type"), -1}};
    int c;

    if (t[m].type != SB_JSON_OBJECT)
        return nm->item;
    find_keys(t, n, b, m, w, 3);
    if (present(t, w[0].val, b) ? t[w[0].val].type != SB_JSON_STRING : role_required)
        return nm->role;
    if (!present(t, w[0].val, b)) /* read as one opaque part: its `type` names it */
        return present(t, w[2].val, b) && t[w[2].val].type != SB_JSON_STRING ? nm->item : NULL;
    c = w[1].val;
    if (!present(t, c, b) || t[c].type == SB_JSON_STRING)
        return NULL;
    if (t[c].type != SB_JSON_ARRAY)
        return nm->content;
    for (int i = 0, p = c + 1; i < t[c].size; i++, p = sb_json_skip(t, n, p))
        if (!part_ok(t, n, b, p))
            return nm->content;
    return NULL;
}

/* Completion `prompt` / embeddings `input`: a string, an array of strings or of token-id
 * arrays, or one token-id array. Returns the number of parts, or -1. */
static long check_prompt(const sb_json_tok *t, int n, const char *b, int v)
{
    int tokens;

    if (t[v].type == SB_JSON_STRING)
        return 1;
    if (t[v].type != SB_JSON_ARRAY)
        return -1;
    tokens = t[v].size > 0 && t[v + 1].type == SB_JSON_PRIMITIVE;
    for (int i = 0, e = v + 1; i < t[v].size; i++, e = sb_json_skip(t, n, e)) {
        if (tokens) {
            if (!is_number(&t[e], b))
                return -1;
        } else if (t[e].type == SB_JSON_ARRAY) {
            for (int j = 0; j < t[e].size; j++)
                if (!is_number(&t[e + 1 + j], b))
                    return -1;
        } else if (t[e].type != SB_JSON_STRING) {
            return -1;
        }
    }
    return tokens ? 1 : t[v].size;
}

/* Decodes a string field into buf (cap bytes + NUL). Returns its length, or -1 if it is too
 * long or holds a NUL byte (a C string compare would then read another name). */
static long decode_name(const sb_json_tok *v, const char *b, char *buf, size_t cap)
{
    long d = sb_json_unescape(b + v->start, (size_t)(v->end - v->start), buf, cap);

    if (d < 0 || (size_t)d > cap || memchr(buf, '\0', (size_t)d))
        return -1;
    buf[d] = '\0';
    return d;
}

static int bad_field(sb_inspect_result *res, const char *field)
{
    res->error_field = field;
    return SB_INSPECT_BAD_FIELD;
}

int sb_inspect(sb_inspect_ctx *ctx, enum sb_api_kind kind, const char *body, size_t len,
               sb_inspect_result *res)
{
    const char *prompt_key = kind == SB_API_CHAT ? "messages" : kind == SB_API_COMPLETIONS ? "prompt" : "input";
    struct want w[] = {
        {KEY("model"), -1}, {KEY("stream"), -1}, {KEY("stream_options"), -1},
        {KEY("user"), -1},  {KEY("instructions"), -1}, {prompt_key, strlen(prompt_key), -1},
    };
    const sb_json_tok *t;
    const char *field;
    int n, v;
    long d;

    res->kind = kind;
    res->model[0] = '\0';
    res->model_len = 0;
    res->model_tok_start = res->model_tok_end = 0;
    res->stream = res->include_usage = 0;
    res->user[0] = '\0';
    res->user_len = 0;
    res->prompt_tok = res->instructions_tok = -1;
    res->n_messages = 0;
    res->error_field = NULL;
    ctx->n_tokens = 0;

    n = sb_json_parse(&ctx->json, body, len);
    switch (n) {
    case SB_JSON_BAD: return SB_INSPECT_BAD_JSON;
    case SB_JSON_TOO_MANY: return SB_INSPECT_TOO_COMPLEX;
    case SB_JSON_TOO_DEEP: return SB_INSPECT_TOO_DEEP;
    case SB_JSON_NOMEM: return SB_INSPECT_NOMEM;
    }
    t = ctx->json.tokens;
    if (t[0].type != SB_JSON_OBJECT)
        return SB_INSPECT_BAD_JSON;
    find_keys(t, n, body, 0, w, 6);

    /* A missing model is reported at the end, after the rest is read: a gateway with a
     * default pool routes such a request like any other. A model of the wrong type is not
     * "missing": it is reported at once. */
    bool no_model = false;
    v = w[0].val;
    if (v >= 0 && t[v].type != SB_JSON_STRING && !(t[v].type == SB_JSON_PRIMITIVE && body[t[v].start] == 'n'))
        return SB_INSPECT_NO_MODEL;
    if (v < 0 || t[v].type != SB_JSON_STRING) {
        no_model = true;
    } else {
        d = decode_name(&t[v], body, res->model, SB_MODEL_NAME_MAX);
        if (d < 0)
            return bad_field(res, "model");
        if (d == 0)
            return SB_INSPECT_NO_MODEL;
        res->model_len = (size_t)d;
        res->model_tok_start = (size_t)t[v].start - 1;
        res->model_tok_end = (size_t)t[v].end + 1;
    }

    v = w[1].val;
    if (present(t, v, body)) {
        if (!is_bool(&t[v], body))
            return bad_field(res, "stream");
        res->stream = body[t[v].start] == 't';
    }

    v = w[2].val;
    if (present(t, v, body)) {
        struct want iu = {KEY("include_usage"), -1};
        if (t[v].type != SB_JSON_OBJECT)
            return bad_field(res, "stream_options");
        find_keys(t, n, body, v, &iu, 1);
        if (present(t, iu.val, body)) {
            if (!is_bool(&t[iu.val], body))
                return bad_field(res, "stream_options.include_usage");
            res->include_usage = body[t[iu.val].start] == 't';
        }
    }

    v = w[3].val;
    if (present(t, v, body)) {
        if (t[v].type != SB_JSON_STRING || (d = decode_name(&t[v], body, res->user, SB_USER_MAX)) < 0)
            return bad_field(res, "user");
        res->user_len = (size_t)d;
    }

    v = w[4].val;
    if (kind == SB_API_RESPONSES && present(t, v, body)) {
        if (t[v].type != SB_JSON_STRING)
            return bad_field(res, "instructions");
        res->instructions_tok = v;
        res->n_messages = 1;
    }

    v = w[5].val;
    if (present(t, v, body)) {
        if (kind == SB_API_CHAT || (kind == SB_API_RESPONSES && t[v].type != SB_JSON_STRING)) {
            const struct names *nm = kind == SB_API_CHAT ? &chat_names : &responses_names;
            if (t[v].type != SB_JSON_ARRAY)
                return bad_field(res, nm->item);
            for (int i = 0, m = v + 1; i < t[v].size; i++, m = sb_json_skip(t, n, m))
                if ((field = check_message(t, n, body, m, kind == SB_API_CHAT, nm)) != NULL)
                    return bad_field(res, field);
            res->n_messages += (size_t)t[v].size;
        } else if (kind == SB_API_RESPONSES) {
            res->n_messages += 1; /* a string input: one user message */
        } else {
            long parts = check_prompt(t, n, body, v);
            if (parts < 0)
                return bad_field(res, prompt_key);
            res->n_messages = (size_t)parts;
        }
        res->prompt_tok = v;
    }
    ctx->n_tokens = n;
    return no_model ? SB_INSPECT_NO_MODEL : SB_INSPECT_OK;
}

/* ---- prompt hashing ---- */

struct hasher {
    const sb_json_tok *t;
    int n;
    const char *b;

    /* block chain */
    size_t bb;        /* block bytes */
    size_t fill;      /* bytes of the current block seen so far */
    uint64_t prev;
    uint64_t *hashes;
    size_t cap, nh;
    int hashing;      /* 0 once cap blocks are hashed: from then on bytes are only counted */
    unsigned char *stage;
    XXH3_state_t *big;
    size_t total;

    /* prefix key */
    XXH3_state_t *pk;
    size_t pk_left;
    int pk_on;        /* feeding bytes into pk now */
    int pk_msg;       /* inside the message (or prompt part) the key covers */
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
        push_block(h, h->bb <= STAGE_MAX ? XXH3_64bits_withSeed(h->stage, h->bb, h->prev)
                                         : XXH3_64bits_digest(h->big));
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
            j = p == v && sb_json_str_is(h->b, &t[j], KEY("type")) ? sb_json_skip(t, h->n, j + 1) : j + 1;
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
    struct want w[] = {{KEY("type"), -1}, {KEY("text"), -1}};

    find_keys(h->t, h->n, h->b, part, w, 2);
    if (present(h->t, w[1].val, h->b)) {
        emit_text_field(h, w[1].val);
    } else {
        int type = present(h->t, w[0].val, h->b) ? w[0].val : -1;
        emit_opaque(h, "", 0, type, part);
    }
    mark(h, M_PART);
}

static void emit_message(struct hasher *h, int m)
{
    const sb_json_tok *t = h->t;
    struct want w[] = {{KEY("role"), -1}, {KEY("content"), -1}, {KEY("tool_calls"), -1}, {KEY("type"), -1}};
    int c;

    find_keys(t, h->n, h->b, m, w, 4);
    if (!present(t, w[0].val, h->b)) { /* a /v1/responses item such as a function call */
        mark(h, M_FIELD);
        emit_opaque(h, "", 0, present(t, w[3].val, h->b) ? w[3].val : -1, m);
        mark(h, M_PART);
        mark(h, M_MESSAGE);
        return;
    }
    emit_str(h, w[0].val);
    mark(h, M_FIELD);
    if (sb_json_str_is(h->b, &t[w[0].val], KEY("user")))
        begin_prefix_scope(h);
    c = w[1].val;
    if (present(t, c, h->b) && t[c].type == SB_JSON_STRING) {
        emit_text_field(h, c);
        mark(h, M_PART);
    } else if (present(t, c, h->b)) {
        for (int i = 0, p = c + 1; i < t[c].size; i++, p = sb_json_skip(t, h->n, p))
            emit_part(h, p);
    }
    end_prefix_scope(h);
    if (present(t, w[2].val, h->b)) {
        emit_opaque(h, KEY("tool_calls"), -1, w[2].val);
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

void sb_prompt_hash(const sb_inspect_ctx *ctx, const char *body, const sb_inspect_result *res,
                    uint64_t seed, size_t block_bytes, sb_prompt_hashes *out)
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
            emit_simple_message(&h, KEY("system"), res->instructions_tok, 0);
        if (res->prompt_tok >= 0 && t[res->prompt_tok].type == SB_JSON_STRING) {
            emit_simple_message(&h, KEY("user"), res->prompt_tok, 1);
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
