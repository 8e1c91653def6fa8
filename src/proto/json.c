/* json: linear, depth-bounded JSON tokenizer with jsmn's token layout (see json.h). */
#include "proto/json.h"

#include "base/alloc.h"

#include <limits.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define FIRST_TOKENS 256

/* ---- string decoding ---- */

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

int sb_json_decode_escape(const char *s, size_t n, unsigned char *out, size_t *adv)
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
        k = sb_json_decode_escape(s + i, n - i, u, &adv);
        if (k < 0)
            return -1;
        for (int j = 0; j < k; j++, o++)
            if (o < cap)
                out[o] = (char)u[j];
        i += adv;
    }
    return (long)o;
}

/* ---- token storage ---- */

void sb_json_lend(sb_json *j, void *buf, size_t bytes)
{
    sb_json_free(j);
    j->tokens = buf;
    j->cap_tokens = bytes / sizeof(sb_json_tok);
    j->lent = true;
}

void sb_json_free(sb_json *j)
{
    if (!j->lent)
        sb_free(j->tokens);
    j->tokens = NULL;
    j->cap_tokens = 0;
    j->lent = false;
}

/* ---- tokenizing ---- */

/* The tokenizer is jsmn 1.1's strict mode with parent links (/usr/include/jsmn.h), written
 * out again: same tokens, same inputs accepted, same point of running out of tokens. Why not
 * jsmn itself: it reads string contents one byte at a time (on a 32 KiB chat body that was
 * 84% of inspect + hash, 16.5 of 19.7 us; here they are classified 64 bytes at a time), and
 * its close bracket walks parent links from the last token to the innermost open container,
 * O(depth) per bracket: quadratic on deep nesting. jsmn's quirks are kept on purpose (a NUL
 * byte ends the input; ':' and ',' only move the current parent; a close bracket with no open
 * container is accepted when the last token's root has its type and a parent is current),
 * since the syntax check below is written against them. tests/unit/proto/test_json.c compares
 * the tokens with jsmn's on the fuzz corpora and on mutated inputs.
 *
 * Why closing is O(1) and still jsmn's answer. jsmn closes the nearest open container among
 * the last token and its ancestors. Each new token's parent is the current parent (`super`),
 * and `super` only ever moves to the last token (':'), to its own parent (',', a close) or to
 * a new container; so by induction the open containers form one chain O1 > O2 > ... > Ok of
 * ancestors, and Ok is the nearest open one both from the last token and from `super`. The
 * chain is kept as a stack threaded through the open tokens' `end` fields (-2 - the index of
 * the next open one out; -1 for none), which jsmn leaves at -1 until the close: the close
 * pops Ok and writes its real end. When no container is open, jsmn walks to the last token's
 * root and accepts the bracket if the root has its type and `super` is set: the root of the
 * last token is tracked instead of walked to. */
struct tokenizer {
    sb_json *j;
    sb_json_tok *t; /* j->tokens */
    size_t cap;     /* usable tokens: min(j->cap_tokens, max) */
    size_t max;
    int next;       /* next token to allocate */
    int super;      /* current parent token, -1 at the root */
};

/* Grows the token array (doubling, up to max). Returns 0 or a negative sb_json_status. */
static int grow_tokens(struct tokenizer *z)
{
    size_t grow = z->cap ? z->cap * 2 : FIRST_TOKENS;
    void *t;

    if (z->cap >= z->max || z->j->lent)
        return SB_JSON_TOO_MANY;
    if (grow > z->max)
        grow = z->max;
    t = sb_realloc(z->j->tokens, grow * sizeof(sb_json_tok));
    if (!t)
        return SB_JSON_NOMEM;
    z->j->tokens = z->t = t;
    z->j->cap_tokens = z->cap = grow;
    return 0;
}

/* A new token, blank as jsmn makes it (type left for the caller), or NULL with *err set. */
static sb_json_tok *new_token(struct tokenizer *z, int *err)
{
    sb_json_tok *tok;

    if ((size_t)z->next >= z->cap && (*err = grow_tokens(z)) != 0)
        return NULL;
    tok = &z->t[z->next++];
    tok->start = tok->end = -1;
    tok->size = 0;
    tok->parent = -1;
    return tok;
}

const unsigned char sb_json_simple_escape[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b', ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* Length of the escape at b[i] == '\\' (2 or 6), or 0 if jsmn rejects it. */
static size_t escape_len(const char *b, size_t i, size_t len)
{
    if (len - i < 2)
        return 0;
    if (sb_json_simple_escape[(unsigned char)b[i + 1]])
        return 2;
    if (b[i + 1] == 'u' && len - i >= 6 && is_hex(b[i + 2]) && is_hex(b[i + 3]) && is_hex(b[i + 4]) &&
        is_hex(b[i + 5]))
        return 6;
    return 0;
}

#ifdef __SSE2__
/* Bit k set where p[k] (k < 64) is a quote, a backslash or a NUL byte. */
static uint64_t special_mask64(const char *p)
{
    const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), zero = _mm_setzero_si128();
    uint64_t m = 0;

    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        __m128i e = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)), _mm_cmpeq_epi8(v, zero));
        m |= (uint64_t)(unsigned)_mm_movemask_epi8(e) << (16 * k);
    }
    return m;
}
#endif

/* Offset of the quote closing the string whose contents start at b[i], or -1 if the string
 * is unterminated, holds a NUL byte or an escape jsmn rejects. 64 bytes are classified at
 * once and their special bytes visited from the bit mask: escape-dense text (one every
 * 20 bytes) then costs no rescan per escape. */
static long string_end(const char *b, size_t i, size_t len)
{
    size_t adv;

#ifdef __SSE2__
    while (len - i >= 64) {
        size_t base = i;
        uint64_t m = special_mask64(b + base);

        for (;;) {
            m &= ~(uint64_t)0 << (i - base);
            if (!m) {
                i = base + 64;
                break;
            }
            i = base + (size_t)__builtin_ctzll(m);
            if (b[i] != '\\')
                return b[i] == '"' ? (long)i : -1;
            if ((adv = escape_len(b, i, len)) == 0)
                return -1;
            i += adv;
            if (i - base >= 64)
                break;
        }
    }
#endif
    for (; i < len; i++) {
        if (b[i] == '"')
            return (long)i;
        if (b[i] == '\0')
            return -1;
        if (b[i] == '\\') {
            if ((adv = escape_len(b, i, len)) == 0)
                return -1;
            i += adv - 1;
        }
    }
    return -1;
}

/* End of the primitive starting at b[i] (a delimiter: whitespace , ] }), or -1 if a byte
 * outside printable ASCII comes first or the input ends (strict mode wants a delimiter). */
static long primitive_end(const char *b, size_t i, size_t len)
{
    for (; i < len && b[i] != '\0'; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '\t' || c == '\r' || c == '\n' || c == ' ' || c == ',' || c == ']' || c == '}')
            return (long)i;
        if (c < 32 || c >= 127)
            return -1;
    }
    return -1;
}

/* One byte switch over the body, kept whole (133 lines, over the 80-line rule on purpose): it is
 * the hot loop of every request, a state machine whose states (expecting a key, a value, a
 * separator) are easier to check side by side than across helpers, as jsmn reads. */
int sb_json_tokenize(sb_json *j, const char *b, size_t len)
{
    struct tokenizer z = {j, j->tokens, 0, j->max_tokens ? j->max_tokens : SB_JSON_DEFAULT_MAX_TOKENS, 0, -1};
    const size_t max_depth = j->max_depth ? j->max_depth : SB_JSON_DEFAULT_MAX_DEPTH;
    size_t depth = 0;    /* open containers */
    int open = -1;       /* the innermost open container */
    int root_super = -1; /* the root of super's tree (when super != -1) */
    int root_last = -1;  /* the root of the last token's tree */
    uint64_t steps = 0;
    int err = 0;

    j->steps = 0;
    if (len >= INT_MAX) /* token offsets are ints */
        return SB_JSON_TOO_MANY;
    if (z.max > INT_MAX / 2)
        z.max = INT_MAX / 2;
    z.cap = j->cap_tokens < z.max ? j->cap_tokens : z.max;
    if ((!z.t || !z.cap) && (err = grow_tokens(&z)) != 0)
        return err; /* as jsmn's caller did: room for tokens before the first byte */
    for (size_t pos = 0; pos < len; pos++) {
        char c = b[pos];
        sb_json_tok *tok, *sup;
        long end;

        steps++;
        switch (c) {
        case '\0':
            goto done; /* jsmn reads a NUL byte as the end of input */
        case '{':
        case '[':
            if (depth == max_depth) {
                err = SB_JSON_TOO_DEEP;
                goto out;
            }
            if (!(tok = new_token(&z, &err)))
                goto out;
            if (z.super != -1) {
                sup = &z.t[z.super];
                if (sup->type == SB_JSON_OBJECT)
                    goto bad; /* a container as a key */
                sup->size++;
                tok->parent = z.super;
            }
            tok->type = c == '{' ? SB_JSON_OBJECT : SB_JSON_ARRAY;
            tok->start = (int)pos;
            tok->end = -2 - open; /* the stack link, until it closes */
            open = z.next - 1;
            depth++;
            root_last = z.super == -1 ? open : root_super;
            root_super = root_last;
            z.super = open;
            break;
        case '}':
        case ']': {
            sb_json_type type = c == '}' ? SB_JSON_OBJECT : SB_JSON_ARRAY;
            if (z.next < 1)
                goto bad;
            if (open == -1) { /* jsmn's walk would reach the root without meeting an open one */
                if (z.t[root_last].type != type || z.super == -1)
                    goto bad;
                break;
            }
            tok = &z.t[open];
            if (tok->type != type)
                goto bad;
            open = -2 - tok->end;
            tok->end = (int)pos + 1;
            depth--;
            z.super = tok->parent; /* in the closed one's tree, which is the last token's */
            break;
        }
        case '"':
            if ((end = string_end(b, pos + 1, len)) < 0)
                goto bad;
            if (!(tok = new_token(&z, &err)))
                goto out;
            tok->type = SB_JSON_STRING;
            tok->start = (int)pos + 1;
            tok->end = (int)end;
            tok->parent = z.super;
            root_last = z.super == -1 ? z.next - 1 : root_super;
            if (z.super != -1)
                z.t[z.super].size++;
            pos = (size_t)end;
            break;
        case '\t':
        case '\r':
        case '\n':
        case ' ':
            break;
        case ':':
            z.super = z.next - 1;
            root_super = root_last;
            break;
        case ',':
            if (z.super != -1 && z.t[z.super].type != SB_JSON_ARRAY && z.t[z.super].type != SB_JSON_OBJECT)
                z.super = z.t[z.super].parent; /* same tree: root_super holds */
            break;
        case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7':
        case '8': case '9': case 't': case 'f': case 'n':
            if (z.super != -1) {
                sup = &z.t[z.super];
                if (sup->type == SB_JSON_OBJECT || (sup->type == SB_JSON_STRING && sup->size != 0))
                    goto bad; /* a primitive as a key, or a second value */
            }
            if ((end = primitive_end(b, pos, len)) < 0)
                goto bad;
            if (!(tok = new_token(&z, &err)))
                goto out;
            tok->type = SB_JSON_PRIMITIVE;
            tok->start = (int)pos;
            tok->end = (int)end;
            tok->parent = z.super;
            root_last = z.super == -1 ? z.next - 1 : root_super;
            if (z.super != -1)
                z.t[z.super].size++;
            pos = (size_t)end - 1; /* the delimiter is read next */
            break;
        default:
            goto bad;
        }
    }
done:
    j->steps = steps;
    if (open != -1)
        return SB_JSON_BAD; /* an unclosed container */
    return z.next;
bad:
    err = SB_JSON_BAD;
out:
    j->steps = steps;
    return err;
}

/* ---- syntax ---- */

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

static int is_container(const sb_json_tok *t) { return t->type == SB_JSON_OBJECT || t->type == SB_JSON_ARRAY; }

static int close_container(const sb_json_tok *t, const char *b, size_t *pos)
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
 * separator, in document order, in O(tokens + whitespace) and without recursion. The walks
 * up parent links add up to O(tokens) on any token array the tokenizer makes: a container is
 * closed at most once (pos only moves forward, and a close needs pos before its end), and once
 * a walk has left a subtree, a later token whose parent lies in it makes the next walk run to
 * the root and fail. */
static int check_syntax(const sb_json_tok *t, int n, const char *b, size_t len, uint64_t *steps)
{
    size_t pos = 0, start;
    int cur = -1;

    if (n < 1)
        return 0;
    for (int i = 0; i < n; i++) {
        int p = t[i].parent;
        char sep = 0;

        if ((i == 0) != (p < 0))
            return 0; /* a second root */
        ++*steps;
        while (cur != p) {
            ++*steps;
            if (cur < 0 || !close_container(&t[cur], b, &pos))
                return 0;
            cur = t[cur].parent;
        }
        if (p >= 0) {
            switch (t[p].type) {
            case SB_JSON_OBJECT:
                if (t[i].type != SB_JSON_STRING || t[i].size != 1)
                    return 0; /* a key without exactly one value */
                /* fallthrough */
            case SB_JSON_ARRAY:
                sep = i == p + 1 ? 0 : ',';
                break;
            case SB_JSON_STRING: /* a value, after its key */
                if (i != p + 1 || t[p].parent < 0 || t[t[p].parent].type != SB_JSON_OBJECT)
                    return 0;
                sep = ':';
                break;
            default:
                return 0;
            }
        }
        start = (size_t)t[i].start - (t[i].type == SB_JSON_STRING);
        if (!gap_ok(b, pos, start, sep))
            return 0;
        if (t[i].type == SB_JSON_STRING) {
            pos = (size_t)t[i].end + 1;
        } else if (t[i].type == SB_JSON_PRIMITIVE) {
            if (!literal_ok(b + start, (size_t)(t[i].end - t[i].start)))
                return 0;
            pos = (size_t)t[i].end;
        } else {
            pos = start + 1;
        }
        cur = i;
    }
    for (; cur >= 0; cur = t[cur].parent, ++*steps)
        if (!close_container(&t[cur], b, &pos))
            return 0;
    return gap_ok(b, pos, len, 0);
}

int sb_json_parse(sb_json *j, const char *b, size_t len)
{
    int n = sb_json_tokenize(j, b, len);

    if (n < 0)
        return n;
    if (!check_syntax(j->tokens, n, b, len, &j->steps))
        return SB_JSON_BAD;
    return n;
}

/* ---- navigation ---- */

int sb_json_skip(const sb_json_tok *t, int n, int i)
{
    int lo = i + 1, hi = i + 1, step = 1;

    if ((t[i].type != SB_JSON_OBJECT && t[i].type != SB_JSON_ARRAY) || t[i].size == 0)
        return i + 1;
    /* Galloping, then binary search: O(log subtree), near i. A walk over n siblings then costs
     * O(tokens) in all, where a search over the whole rest of the array would cost
     * O(n log tokens), with cache misses at every far probe. */
    while (hi < n && t[hi].start < t[i].end) {
        lo = hi + 1;
        hi = step < n - hi ? hi + step : n;
        step *= 2;
    }
    if (hi > n)
        hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t[mid].start < t[i].end)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool sb_json_str_is(const char *b, const sb_json_tok *k, const char *name, size_t name_len)
{
    const char *s = b + k->start;
    size_t n = (size_t)(k->end - k->start);
    char tmp[32];

    if (k->type != SB_JSON_STRING)
        return false;
    if (n == name_len)
        return memcmp(s, name, n) == 0; /* same length: decoding could only shorten it */
    /* Decoding shrinks a string at most 6 to 1 (\u0041 is one byte): a longer token cannot
     * match, and is not scanned (a megabyte key compared against each wanted name). */
    if (n < name_len || name_len > sizeof tmp || n > 6 * name_len || !memchr(s, '\\', n))
        return false;
    return sb_json_unescape(s, n, tmp, sizeof tmp) == (long)name_len && memcmp(tmp, name, name_len) == 0;
}
