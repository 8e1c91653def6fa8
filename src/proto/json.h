/* json: a zero-copy JSON tokenizer for bytes from outside (request bodies, model servers'
 * answers), linear in the input and bounded in nesting.
 *
 * Tokens are jsmn 1.1's (strict mode, parent links), field for field: a token is an offset
 * pair into the caller's bytes, its type, its number of direct children (`size`; a key has
 * one, its value) and its parent's index. Tokens come in document order, so a subtree is a
 * contiguous run of tokens (sb_json_skip). sb_json_tokenize accepts exactly what jsmn's strict
 * mode accepts, with the same tokens; sb_json_parse adds the checks jsmn leaves out, so that
 * what it accepts is RFC 8259 with two laxities kept for speed (raw control characters and
 * invalid UTF-8 inside strings pass through). A NUL byte ends the input for the tokenizer (as
 * in jsmn), so sb_json_parse rejects any input holding one.
 *
 * Cost: one pass over the bytes (string contents 64 bytes at a time) plus O(1) work per
 * token, whatever the shape. jsmn walks parent links from the last token on every close
 * bracket, which makes `[[[[...]]]]` quadratic (100,000 levels: about 10 s); here the open
 * containers form a stack threaded through the tokens themselves, so closing one is O(1), and
 * the syntax check walks each token once. Nesting deeper than max_depth is refused as soon as
 * the container that exceeds it opens (SB_JSON_TOO_DEEP), before any more is read.
 *
 * Not for: building a tree, decoding numbers, or validating a schema. Pure: no I/O; the only
 * allocation is the token array, and only when the caller did not lend one. */
#ifndef SB_PROTO_JSON_H
#define SB_PROTO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 128 levels: tool and structured-output schemas, the deepest thing in real requests, nest a
 * few dozen JSON levels at most (each schema level is two containers: the `properties`
 * object, then the property's schema). */
#define SB_JSON_DEFAULT_MAX_DEPTH 128
#define SB_JSON_DEFAULT_MAX_TOKENS ((size_t)1 << 20)

/* Values as jsmn's jsmntype_t, so a token array reads the same under either header. */
typedef enum sb_json_type {
    SB_JSON_UNDEFINED = 0,
    SB_JSON_OBJECT = 1,
    SB_JSON_ARRAY = 2,
    SB_JSON_STRING = 3,
    SB_JSON_PRIMITIVE = 4, /* number, true, false or null */
} sb_json_type;

/* jsmntok_t with JSMN_PARENT_LINKS. start/end: byte offsets [start, end); for a string, its
 * contents without the quotes. parent: -1 for a root. */
typedef struct sb_json_tok {
    sb_json_type type;
    int start;
    int end;
    int size;
    int parent;
} sb_json_tok;

enum sb_json_status {
    SB_JSON_BAD = -1,      /* malformed, truncated or (sb_json_parse) not exactly one value */
    SB_JSON_TOO_MANY = -2, /* more tokens than max_tokens (or the lent buffer), or input >= 2 GiB */
    SB_JSON_TOO_DEEP = -3, /* more than max_depth containers open at once */
    SB_JSON_NOMEM = -4,    /* the token array could not grow */
};

/* Tokenizer state: initialise with {0}, set the public bounds, and reuse it across inputs
 * (the token array is kept, so a reused tokenizer makes no allocation). Either the tokenizer
 * owns a growing array (the default: doubled from 256 tokens up to max_tokens, freed by
 * sb_json_free) or the caller lends one (sb_json_lend: never grown, never freed). One input
 * at a time. */
typedef struct sb_json {
    /* public: bounds, 0 = the default */
    size_t max_tokens;  /* SB_JSON_DEFAULT_MAX_TOKENS; capped at INT_MAX / 2 */
    size_t max_depth;   /* SB_JSON_DEFAULT_MAX_DEPTH; a root container is depth 1 */
    /* read-only */
    sb_json_tok *tokens;
    size_t cap_tokens;
    uint64_t steps;     /* work of the last call, failed or not: one per structural byte or
                           token visited, one per link followed by the syntax check. Tests
                           assert it grows linearly with the input; it costs one add a step. */
    /* private */
    bool lent;
} sb_json;

/* Makes the tokenizer use buf (bytes long, aligned for int) for its tokens: no allocation.
 * Any array the tokenizer owned is freed first. */
void sb_json_lend(sb_json *j, void *buf, size_t bytes);

/* Frees an owned token array; the tokenizer is left empty and reusable (bounds kept). */
void sb_json_free(sb_json *j);

/* Tokenizes b[0..len) exactly as jsmn 1.1 (strict, parent links) would, into j->tokens.
 * Returns the number of tokens (>= 0), or a negative sb_json_status. Like jsmn, it does not
 * check separators, literals, key/value pairing or what follows the first value. */
int sb_json_tokenize(sb_json *j, const char *b, size_t len);

/* Tokenizes and checks b[0..len): exactly one JSON value (any type at the root; a bare number
 * or literal at the root needs whitespace after it, as in jsmn's strict mode), with nothing
 * but whitespace around it. Returns the number of tokens (>= 1), or a negative
 * sb_json_status. TOO_DEEP and TOO_MANY are reported as soon as the bound is crossed, before
 * the rest of the input is looked at, so they take precedence over later syntax errors. */
int sb_json_parse(sb_json *j, const char *b, size_t len);

/* Index of the token after i's subtree (t[0..n) from a successful tokenize). Tokens are in
 * document order with increasing starts, so this is a galloping search from i: O(log of the
 * subtree's size), not a walk over nested values; skipping each of n siblings in turn costs
 * O(their tokens) in all. */
int sb_json_skip(const sb_json_tok *t, int n, int i);

/* Whether string token k equals name[0..name_len) once decoded ("mod\u0065l" is "model").
 * Escaped strings are decoded only when they could match (into a 32-byte buffer: names
 * longer than that never match an escaped token). */
bool sb_json_str_is(const char *b, const sb_json_tok *k, const char *name, size_t name_len);

/* A key to look up in an object, by its decoded name. */
typedef struct sb_json_key {
    const char *name;
    size_t len;
} sb_json_key;

/* For each keys[k], sets vals[k] to the token index of its value in object obj (t[0..n)
 * from a successful parse), or -1 if the object has no such key. Keys are compared decoded
 * (sb_json_str_is) and the last duplicate wins, as in Python's json module. O(the object's
 * keys times nkeys), plus one sb_json_skip per value. Inline: callers pass constant key
 * tables, and the loop specialised for them is what request inspection runs per message. */
static inline void sb_json_find_keys(const sb_json_tok *t, int n, const char *b, int obj, const sb_json_key *keys,
                                     int nkeys, int *vals)
{
    int key = obj + 1;

    for (int k = 0; k < nkeys; k++)
        vals[k] = -1;
    for (int c = 0; c < t[obj].size; c++) {
        for (int k = 0; k < nkeys; k++) {
            if (sb_json_str_is(b, &t[key], keys[k].name, keys[k].len)) {
                vals[k] = key + 1;
                break;
            }
        }
        key = sb_json_skip(t, n, key + 1);
    }
}

/* Whether token v is present and not null (v may be -1): how request readers treat an
 * optional field, since clients send null for "not set". */
static inline bool sb_json_present(const sb_json_tok *t, int v, const char *b)
{
    return v >= 0 && !(t[v].type == SB_JSON_PRIMITIVE && b[t[v].start] == 'n');
}

/* Decodes the JSON string token body s[0..n) (without quotes) into out (cap bytes),
 * handling all escapes; \u0000 decodes to a NUL byte, a lone surrogate to U+FFFD.
 * Returns the decoded length, which may exceed cap (output truncated), or -1 for an invalid
 * escape (unknown letter, bad hex, or input ending inside an escape). */
long sb_json_unescape(const char *s, size_t n, char *out, size_t cap);

/* Decodes the one escape at s[0] == '\\' (n bytes available) into out (up to 4 bytes of
 * UTF-8). Returns the bytes written and sets *adv to the input consumed (2, 6 or 12 for a
 * surrogate pair), or -1 for an invalid escape. */
int sb_json_decode_escape(const char *s, size_t n, unsigned char *out, size_t *adv);

/* The byte a one-letter escape (the letter after the backslash) stands for; 0 if the letter
 * is not one ('u' is not). */
extern const unsigned char sb_json_simple_escape[256];

#endif
