/* An independent JSON validator for the tokenizer tests (test_json.c, test_inspect.c): RFC 8259
 * with inspect.h's two laxities (raw control bytes and invalid UTF-8 inside strings), written
 * as plain recursive descent so it shares nothing with src/proto/json.c. v_value returns the
 * end of the value at p, or NULL; it gives up past JSON_REF_MAX_DEPTH levels (define it before
 * including this file). Header-only: each test binary includes it once. */
#ifndef SB_TEST_JSON_REFERENCE_H
#define SB_TEST_JSON_REFERENCE_H

#include <stdint.h>
#include <string.h>

#ifndef JSON_REF_MAX_DEPTH
#error "define JSON_REF_MAX_DEPTH before including json_reference.h"
#endif

static const char *v_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int v_digit(const char *p, const char *e) { return p < e && *p >= '0' && *p <= '9'; }

static const char *v_string(const char *p, const char *e)
{
    for (p++; p < e && *p != '"'; p++) {
        if (*p == '\0')
            return NULL;
        if (*p == '\\') {
            if (++p == e)
                return NULL;
            if (*p == 'u') {
                for (int k = 0; k < 4; k++)
                    if (++p == e || *p == '\0' || !strchr("0123456789abcdefABCDEF", *p))
                        return NULL;
            } else if (*p == '\0' || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return p < e ? p + 1 : NULL;
}

static const char *v_value(const char *p, const char *e, int depth)
{
    static const char *lits[] = {"true", "false", "null"};

    if (p == e || depth > JSON_REF_MAX_DEPTH)
        return NULL;
    if (*p == '"')
        return v_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = v_ws(p + 1, e);
        if (p < e && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (p == e || *p != '"' || !(p = v_string(p, e)))
                    return NULL;
                p = v_ws(p, e);
                if (p == e || *p != ':')
                    return NULL;
                p = v_ws(p + 1, e);
            }
            if (!(p = v_value(p, e, depth + 1)))
                return NULL;
            p = v_ws(p, e);
            if (p < e && *p == close)
                return p + 1;
            if (p == e || *p != ',')
                return NULL;
            p = v_ws(p + 1, e);
        }
    }
    for (int k = 0; k < 3; k++)
        if ((size_t)(e - p) >= strlen(lits[k]) && memcmp(p, lits[k], strlen(lits[k])) == 0)
            return p + strlen(lits[k]);
    if (p < e && *p == '-')
        p++;
    if (p < e && *p == '0')
        p++;
    else if (v_digit(p, e))
        while (v_digit(p, e))
            p++;
    else
        return NULL;
    if (p < e && *p == '.') {
        if (!v_digit(++p, e))
            return NULL;
        while (v_digit(p, e))
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (!v_digit(p, e))
            return NULL;
        while (v_digit(p, e))
            p++;
    }
    return p;
}

/* One to three random edits of s (len bytes) into out (cap bytes): a byte replaced by one of
 * `special`, a fragment of `frags` inserted (an empty fragment stands for a NUL byte), a byte
 * deleted, or the end cut off. rnd supplies the randomness, so each test keeps its own stream.
 * Returns the new length. */
static size_t json_ref_mutate(const char *s, size_t len, char *out, size_t cap, const char *const *frags,
                              size_t n_frags, const char *special, uint64_t (*rnd)(void))
{
    size_t n = len, edits = 1 + rnd() % 3, n_special = strlen(special);

    memcpy(out, s, len);
    for (size_t k = 0; k < edits; k++) {
        size_t at = n ? rnd() % n : 0;
        switch (rnd() % 4) {
        case 0:
            if (n)
                out[at] = special[rnd() % n_special];
            break;
        case 1: {
            size_t f = rnd() % n_frags;
            size_t fl = frags[f][0] ? strlen(frags[f]) : 1;
            if (n + fl <= cap) {
                memmove(out + at + fl, out + at, n - at);
                memcpy(out + at, frags[f], fl);
                n += fl;
            }
            break;
        }
        case 2:
            if (n) {
                memmove(out + at, out + at + 1, n - at - 1);
                n--;
            }
            break;
        default:
            n = n ? rnd() % n : 0;
            break;
        }
    }
    return n;
}

#endif
