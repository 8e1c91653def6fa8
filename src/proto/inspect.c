/* inspect: OpenAI request body inspection and prompt block hashing (see inspect.h).
 *
 * Two passes over tokens, one over bytes: jsmn tokenizes the body (the only byte-by-byte
 * pass), a token walk checks what jsmn's strict mode lets through (separators, literals,
 * a single root), then field lookups only touch top-level keys and skip nested values by
 * binary search on token offsets. sb_prompt_hash revisits only the prompt's string tokens. */
#define JSMN_STATIC
#define JSMN_PARENT_LINKS
#define JSMN_STRICT
#include <jsmn.h>

/* For XXH3_state_t's definition: streaming states live on the stack, never on the heap. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "proto/inspect.h"

#include "base/alloc.h"

#include <limits.h>
#include <stdbool.h>
#include <string.h>

#define DEFAULT_MAX_TOKENS ((size_t)1 << 20)
#define FIRST_TOKENS 256
/* Blocks up to this size are staged in a stack buffer and hashed one-shot (fastest for the
 * usual 64..1024-byte blocks); larger ones stream through an XXH3 state, same result. */
#define STAGE_MAX 4096
#define DEFAULT_PREFIX_CHARS 100

#define KEY(s) s, sizeof(s) - 1

/* Canonical prompt markers (inspect.h): each is emitted after a 00 byte. */
enum { M_NUL = 1, M_FIELD = 2, M_MESSAGE = 3, M_PART = 4, M_OPAQUE = 5 };

/* ---- JSON string decoding ---- */

static long hex4(const char *s, size_t n)
{
    long v = 0;
    if (n < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    return v;
}

static int utf8_encode(long cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the escape at s[0] == '\\' (n bytes available) into out (up to 4 bytes).
 * Returns the number of bytes written and sets *adv to the input consumed, or -1. */
static int decode_escape(const char *s, size_t n, unsigned char *out, size_t *adv)
{
    long cp, lo;

    *adv = 2;
    if (n < 2)
        return -1;
    switch (s[1]) {
    case '"': out[0] = '"'; return 1;
    case '\\': out[0] = '\\'; return 1;
    case '/': out[0] = '/'; return 1;
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': break;
    default: return -1;
    }
    cp = hex4(s + 2, n - 2);
    if (cp < 0)
        return -1;
    *adv = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        lo = n >= 12 && s[6] == '\\' && s[7] == 'u' ? hex4(s + 8, n - 8) : -1;
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            *adv = 12;
        } else {
            cp = 0xFFFD; /* lone high surrogate: the next escape is decoded on its own */
        }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
    }
    return utf8_encode(cp, out);
}

long sb_json_unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t i = 0, o = 0;

    while (i < n) {
        const char *bs = memchr(s + i, '\\', n - i);
        size_t run = (bs ? (size_t)(bs - s) : n) - i;
        unsigned char u[4];
        size_t adv;
        int k;

        if (o < cap)
            memcpy(out + o, s + i, run < cap - o ? run : cap - o);
        o += run;
        i += run;
        if (!bs)
            break;
        k = decode_escape(s + i, n - i, u, &adv);
        if (k < 0)
            return -1;
        for (int j = 0; j < k; j++, o++)
            if (o < cap)
                out[o] = (char)u[j];
        i += adv;
    }
    return (long)o;
}

/* ---- tokenizing and syntax ---- */

void sb_inspect_ctx_free(sb_inspect_ctx *ctx)
{
    sb_free(ctx->tokens);
    ctx->tokens = NULL;
    ctx->cap_tokens = 0;
    ctx->n_tokens = 0;
}

/* Runs jsmn, growing the token array on JSMN_ERROR_NOMEM and resuming where it stopped
 * (jsmn keeps its position and only indexes tokens, so a moved array is fine). A reused
 * context is already big enough, so the steady state is one pass with no allocation.
 * Returns the token count or a negative sb_inspect_status. */
static int tokenize(sb_inspect_ctx *ctx, const char *body, size_t len)
{
    size_t max = ctx->max_tokens ? ctx->max_tokens : DEFAULT_MAX_TOKENS;
    jsmn_parser p;

    if (max > INT_MAX / 2)
        max = INT_MAX / 2;
    jsmn_init(&p);
    for (;;) {
        size_t cap = ctx->cap_tokens < max ? ctx->cap_tokens : max;
        int r = JSMN_ERROR_NOMEM;
        size_t grow;
        void *t;

        if (ctx->tokens && cap)
            r = jsmn_parse(&p, body, len, ctx->tokens, (unsigned)cap);
        if (r >= 0)
            return (int)p.toknext;
        if (r != JSMN_ERROR_NOMEM)
            return SB_INSPECT_BAD_JSON;
        if (cap >= max)
            return SB_INSPECT_TOO_COMPLEX;
        grow = cap ? cap * 2 : FIRST_TOKENS;
        if (grow > max)
            grow = max;
        t = sb_realloc(ctx->tokens, grow * sizeof(jsmntok_t));
        if (!t)
            return SB_INSPECT_NOMEM;
        ctx->tokens = t;
        ctx->cap_tokens = grow;
    }
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* body[from..to) is whitespace, then `sep` if nonzero, then whitespace. */
static int gap_ok(const char *b, size_t from, size_t to, char sep)
{
    size_t i = from;

    if (from > to)
        return 0;
    while (i < to && is_ws(b[i]))
        i++;
    if (sep) {
        if (i == to || b[i] != sep)
            return 0;
        for (i++; i < to && is_ws(b[i]); i++)
            ;
    }
    return i == to;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* jsmn's strict mode takes any run starting with t, f, n, - or a digit as a primitive. */
static int literal_ok(const char *s, size_t n)
{
    size_t i = 0, d;

    switch (s[0]) {
    case 't': return n == 4 && memcmp(s, "true", 4) == 0;
    case 'f': return n == 5 && memcmp(s, "false", 5) == 0;
    case 'n': return n == 4 && memcmp(s, "null", 4) == 0;
    }
    if (s[i] == '-')
        i++;
    if (i < n && s[i] == '0')
        i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9')
        while (i < n && is_digit(s[i]))
            i++;
    else
        return 0;
    if (i < n && s[i] == '.') {
        for (d = ++i; i < n && is_digit(s[i]); i++)
            ;
        if (i == d)
            return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        for (d = i; i < n && is_digit(s[i]); i++)
            ;
        if (i == d)
            return 0;
    }
    return i == n;
}

static int is_container(const jsmntok_t *t) { return t->type == JSMN_OBJECT || t->type == JSMN_ARRAY; }

static int close_container(const jsmntok_t *t, const char *b, size_t *pos)
{
    if (!is_container(t))
        return 1;
    if (t->end < 1 || !gap_ok(b, *pos, (size_t)t->end - 1, 0))
        return 0;
    *pos = (size_t)t->end;
    return 1;
}

/* jsmn (strict) checks brackets, strings and escapes but not commas, colons, literals,
 * key/value pairing or what follows the root. Every body byte is either inside a token, a
 * bracket, or in a gap between tokens; this walk checks each gap holds exactly the expected
 * separator, in document order, in O(tokens + whitespace) and without recursion. */
static int check_syntax(const jsmntok_t *t, int n, const char *b, size_t len)
{
    size_t pos = 0, start;
    int cur = -1;

    if (n < 1 || t[0].type != JSMN_OBJECT)
        return 0;
    for (int i = 0; i < n; i++) {
        int p = t[i].parent;
        char sep = 0;

        if ((i == 0) != (p < 0))
            return 0; /* a second root */
        while (cur != p) {
            if (cur < 0 || !close_container(&t[cur], b, &pos))
                return 0;
            cur = t[cur].parent;
        }
        if (p >= 0) {
            switch (t[p].type) {
            case JSMN_OBJECT:
                if (t[i].type != JSMN_STRING || t[i].size != 1)
                    return 0; /* a key without exactly one value */
                /* fallthrough */
            case JSMN_ARRAY:
                sep = i == p + 1 ? 0 : ',';
                break;
            case JSMN_STRING: /* a value, after its key */
                if (i != p + 1 || t[p].parent < 0 || t[t[p].parent].type != JSMN_OBJECT)
                    return 0;
                sep = ':';
                break;
            default:
                return 0;
            }
        }
        start = (size_t)t[i].start - (t[i].type == JSMN_STRING);
        if (!gap_ok(b, pos, start, sep))
            return 0;
        if (t[i].type == JSMN_STRING) {
            pos = (size_t)t[i].end + 1;
        } else if (t[i].type == JSMN_PRIMITIVE) {
            if (!literal_ok(b + start, (size_t)(t[i].end - t[i].start)))
                return 0;
            pos = (size_t)t[i].end;
        } else {
            pos = start + 1;
        }
        cur = i;
    }
    for (; cur >= 0; cur = t[cur].parent)
        if (!close_container(&t[cur], b, &pos))
            return 0;
    return gap_ok(b, pos, len, 0);
}

/* ---- token tree navigation ---- */

/* Index of the token after i's subtree. Tokens are in document order with strictly
 * increasing starts, so the subtree ends at the first token starting past i's end:
 * a binary search, not a walk over nested values. */
static int skip(const jsmntok_t *t, int n, int i)
{
    int lo = i + 1, hi = n;

    if (!is_container(&t[i]) || t[i].size == 0)
        return i + 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t[mid].start < t[i].end)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether string token k equals name once decoded. Escaped keys are rare: decode only then. */
static int str_is(const char *b, const jsmntok_t *k, const char *name, size_t name_len)
{
    const char *s = b + k->start;
    size_t n = (size_t)(k->end - k->start);
    char tmp[32];

    if (k->type != JSMN_STRING)
        return 0;
    if (n == name_len)
        return memcmp(s, name, n) == 0; /* same length: decoding could only shorten it */
    if (n < name_len || name_len > sizeof tmp || !memchr(s, '\\', n))
        return 0;
    return sb_json_unescape(s, n, tmp, sizeof tmp) == (long)name_len &&
           memcmp(tmp, name, name_len) == 0;
}

struct want {
    const char *name;
    size_t len;
    int val; /* out: token index of the value, -1 if absent */
};

/* Finds the values of the wanted keys of object obj; the last duplicate wins. */
static void find_keys(const jsmntok_t *t, int n, const char *b, int obj, struct want *w, int nw)
{
    int key = obj + 1;

    for (int k = 0; k < nw; k++)
        w[k].val = -1;
    for (int c = 0; c < t[obj].size; c++) {
        for (int k = 0; k < nw; k++) {
            if (str_is(b, &t[key], w[k].name, w[k].len)) {
                w[k].val = key + 1;
                break;
            }
        }
        key = skip(t, n, key + 1);
    }
}

static int is_null(const jsmntok_t *t, const char *b) { return t->type == JSMN_PRIMITIVE && b[t->start] == 'n'; }

static int is_bool(const jsmntok_t *t, const char *b)
{
    return t->type == JSMN_PRIMITIVE && (b[t->start] == 't' || b[t->start] == 'f');
}

static int is_number(const jsmntok_t *t, const char *b)
{
    return t->type == JSMN_PRIMITIVE && (b[t->start] == '-' || is_digit(b[t->start]));
}

/* An absent or null value reads as absent. */
static int present(const jsmntok_t *t, int v, const char *b) { return v >= 0 && !is_null(&t[v], b); }

/* ---- field checks ---- */

struct names {
    const char *item, *role, *content;
};

static const struct names chat_names = {"messages", "messages.role", "messages.content"};
static const struct names responses_names = {"input", "input.role", "input.content"};

/* A content part: an object whose `type` and `text`, if present, are strings. */
static int part_ok(const jsmntok_t *t, int n, const char *b, int part)
{
    struct want w[] = {{KEY("type"), -1}, {KEY("text"), -1}};

    if (t[part].type != JSMN_OBJECT)
        return 0;
    find_keys(t, n, b, part, w, 2);
    for (int k = 0; k < 2; k++)
        if (present(t, w[k].val, b) && t[w[k].val].type != JSMN_STRING)
            return 0;
    return 1;
}

/* A chat message, or a /v1/responses input item (role optional: function calls and their
 * outputs have none). Returns NULL if fine, else the field to blame. */
static const char *check_message(const jsmntok_t *t, int n, const char *b, int m, int role_required,
                                 const struct names *nm)
{
    struct want w[] = {{KEY("role"), -1}, {KEY("content"), -1}, {KEY("type"), -1}};
    int c;

    if (t[m].type != JSMN_OBJECT)
        return nm->item;
    find_keys(t, n, b, m, w, 3);
    if (present(t, w[0].val, b) ? t[w[0].val].type != JSMN_STRING : role_required)
        return nm->role;
    if (!present(t, w[0].val, b)) /* read as one opaque part: its `type` names it */
        return present(t, w[2].val, b) && t[w[2].val].type != JSMN_STRING ? nm->item : NULL;
    c = w[1].val;
    if (!present(t, c, b) || t[c].type == JSMN_STRING)
        return NULL;
    if (t[c].type != JSMN_ARRAY)
        return nm->content;
    for (int i = 0, p = c + 1; i < t[c].size; i++, p = skip(t, n, p))
        if (!part_ok(t, n, b, p))
            return nm->content;
    return NULL;
}

/* Completion `prompt` / embeddings `input`: a string, an array of strings or of token-id
 * arrays, or one token-id array. Returns the number of parts, or -1. */
static long check_prompt(const jsmntok_t *t, int n, const char *b, int v)
{
    int tokens;

    if (t[v].type == JSMN_STRING)
        return 1;
    if (t[v].type != JSMN_ARRAY)
        return -1;
    tokens = t[v].size > 0 && t[v + 1].type == JSMN_PRIMITIVE;
    for (int i = 0, e = v + 1; i < t[v].size; i++, e = skip(t, n, e)) {
        if (tokens) {
            if (!is_number(&t[e], b))
                return -1;
        } else if (t[e].type == JSMN_ARRAY) {
            for (int j = 0; j < t[e].size; j++)
                if (!is_number(&t[e + 1 + j], b))
                    return -1;
        } else if (t[e].type != JSMN_STRING) {
            return -1;
        }
    }
    return tokens ? 1 : t[v].size;
}

/* Decodes a string field into buf (cap bytes + NUL). Returns its length, or -1 if it is too
 * long or holds a NUL byte (a C string compare would then read another name). */
static long decode_name(const jsmntok_t *v, const char *b, char *buf, size_t cap)
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
    const jsmntok_t *t;
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

    if (len >= INT_MAX) /* jsmn offsets are ints */
        return SB_INSPECT_TOO_COMPLEX;
    n = tokenize(ctx, body, len);
    if (n < 0)
        return n;
    t = ctx->tokens;
    if (!check_syntax(t, n, body, len))
        return SB_INSPECT_BAD_JSON;
    find_keys(t, n, body, 0, w, 6);

    /* A missing model is reported at the end, after the rest is read: a gateway with a
     * default pool routes such a request like any other. A model of the wrong type is not
     * "missing": it is reported at once. */
    bool no_model = false;
    v = w[0].val;
    if (v >= 0 && t[v].type != JSMN_STRING && !(t[v].type == JSMN_PRIMITIVE && body[t[v].start] == 'n'))
        return SB_INSPECT_NO_MODEL;
    if (v < 0 || t[v].type != JSMN_STRING) {
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
        if (t[v].type != JSMN_OBJECT)
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
        if (t[v].type != JSMN_STRING || (d = decode_name(&t[v], body, res->user, SB_USER_MAX)) < 0)
            return bad_field(res, "user");
        res->user_len = (size_t)d;
    }

    v = w[4].val;
    if (kind == SB_API_RESPONSES && present(t, v, body)) {
        if (t[v].type != JSMN_STRING)
            return bad_field(res, "instructions");
        res->instructions_tok = v;
        res->n_messages = 1;
    }

    v = w[5].val;
    if (present(t, v, body)) {
        if (kind == SB_API_CHAT || (kind == SB_API_RESPONSES && t[v].type != JSMN_STRING)) {
            const struct names *nm = kind == SB_API_CHAT ? &chat_names : &responses_names;
            if (t[v].type != JSMN_ARRAY)
                return bad_field(res, nm->item);
            for (int i = 0, m = v + 1; i < t[v].size; i++, m = skip(t, n, m))
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
    const jsmntok_t *t;
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

/* Appends n bytes to the canonical prompt. Whole blocks lying in p are hashed in place:
 * the common case of long unescaped text is never copied. */
static void emit(struct hasher *h, const void *p, size_t n)
{
    const unsigned char *c = p;

    h->total += n;
    if (h->pk_on) {
        size_t take = n < h->pk_left ? n : h->pk_left;
        XXH3_64bits_update(h->pk, c, take);
        h->pk_left -= take;
        h->pk_on = h->pk_left > 0;
    }
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

/* Emits a JSON string's raw text decoded, NUL bytes as 00 01. Raw runs go out by memchr
 * spans; runs of escapes are decoded into a small buffer first. The body holds no raw NUL
 * (sb_inspect rejected it), so only \u0000 can produce one. */
static void emit_json_text(struct hasher *h, const char *s, size_t n)
{
    const char *end = s + n;
    unsigned char tmp[64];
    size_t k = 0;

    while (s < end) {
        const char *bs = memchr(s, '\\', (size_t)(end - s));
        size_t run = (size_t)((bs ? bs : end) - s);
        unsigned char u[4];
        size_t adv;
        int m;

        if (run) {
            if (k)
                emit(h, tmp, k);
            k = 0;
            emit(h, s, run);
            s += run;
        }
        if (!bs)
            break;
        if (k > sizeof tmp - 4) {
            emit(h, tmp, k);
            k = 0;
        }
        m = decode_escape(s, (size_t)(end - s), u, &adv);
        if (m < 0) { /* cannot happen on a body jsmn accepted; keep the byte rather than loop */
            u[0] = '\\';
            m = 1;
            adv = 1;
        }
        if (m == 1 && u[0] == 0) {
            tmp[k++] = 0;
            tmp[k++] = M_NUL;
        } else {
            memcpy(tmp + k, u, (size_t)m);
            k += (size_t)m;
        }
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
    const jsmntok_t *t = h->t;
    int end = skip(t, h->n, v);

    mark(h, M_OPAQUE);
    if (type_tok >= 0)
        emit_str(h, type_tok);
    else
        emit(h, type_lit, type_len);
    mark(h, M_FIELD);
    for (int j = v; j < end;) {
        int p = t[j].parent;
        if (t[j].type == JSMN_STRING && p >= 0 && t[p].type == JSMN_OBJECT) { /* a key */
            j = p == v && str_is(h->b, &t[j], KEY("type")) ? skip(t, h->n, j + 1) : j + 1;
            continue;
        }
        if (t[j].type == JSMN_STRING) {
            emit_str(h, j);
            mark(h, M_FIELD);
        } else if (t[j].type == JSMN_PRIMITIVE) {
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
    const jsmntok_t *t = h->t;
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
    if (str_is(h->b, &t[w[0].val], KEY("user")))
        begin_prefix_scope(h);
    c = w[1].val;
    if (present(t, c, h->b) && t[c].type == JSMN_STRING) {
        emit_text_field(h, c);
        mark(h, M_PART);
    } else if (present(t, c, h->b)) {
        for (int i = 0, p = c + 1; i < t[c].size; i++, p = skip(t, h->n, p))
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
    const jsmntok_t *t = h->t;

    mark(h, M_OPAQUE);
    h->pk_on = h->pk_msg && h->pk_left > 0;
    for (int i = 0; i < t[arr].size; i++) {
        const jsmntok_t *e = &t[arr + 1 + i];
        emit(h, h->b + e->start, (size_t)(e->end - e->start));
        emit(h, ",", 1);
    }
    h->pk_on = 0;
}

static void emit_prompt(struct hasher *h, int v)
{
    const jsmntok_t *t = h->t;

    begin_prefix_scope(h); /* the first part is the key's */
    if (t[v].type == JSMN_STRING) {
        emit_text_field(h, v);
    } else if (t[v].size > 0 && t[v + 1].type == JSMN_PRIMITIVE) {
        emit_token_ids(h, v);
    } else {
        for (int i = 0, e = v + 1; i < t[v].size; i++, e = skip(t, h->n, e)) {
            if (t[e].type == JSMN_STRING)
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
    unsigned char stage_buf[STAGE_MAX];
    XXH3_state_t big, pk;
    struct hasher h = {0};
    const jsmntok_t *t = ctx->tokens;

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
        if (res->prompt_tok >= 0 && t[res->prompt_tok].type == JSMN_STRING) {
            emit_simple_message(&h, KEY("user"), res->prompt_tok, 1);
        } else if (res->prompt_tok >= 0) {
            int v = res->prompt_tok;
            for (int i = 0, m = v + 1; i < t[v].size; i++, m = skip(t, h.n, m))
                emit_message(&h, m);
        }
    } else if (res->prompt_tok >= 0) {
        emit_prompt(&h, res->prompt_tok);
    }
    out->n = h.nh;
    out->prompt_bytes = h.total;
    out->prefix_key = h.pk_started ? XXH3_64bits_digest(&pk) : 0;
}
