#include "proto/usage.h"

#include <stdbool.h>
#include <string.h>

static const char *find_last(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (n < k)
        return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

/* Reads the integer after `"key":` inside [s, end), or -1. */
/* The value after `"key"` at p (p[0] is the opening quote of a key of k bytes): digits after
 * spaces, colons and tabs, or -1. */
static int64_t count_at(const char *p, const char *end, size_t k)
{
    p += k + 2;
    while (p < end && (*p == ' ' || *p == ':' || *p == '\t'))
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return -1;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9' && v < (INT64_MAX - 9) / 10)
        v = v * 10 + (*p++ - '0');
    return v;
}

/* The first "prompt_tokens", "completion_tokens" and "cached_tokens" keys of s[0..end) and
 * their counts (-1: absent, or not followed by a number), in one pass (three passes, one per
 * key, were ~850 instructions an answer). */
static void read_counts(const char *s, const char *end, sb_usage *out)
{
    static const struct {
        const char *key;
        size_t k;
    } keys[] = {{"prompt_tokens", 13}, {"completion_tokens", 17}, {"cached_tokens", 13}};
    int64_t *slot[] = {&out->prompt_tokens, &out->completion_tokens, &out->cached_tokens};
    bool seen[3] = {false, false, false};
    for (const char *p = s; p < end; p++) {
        p = memchr(p, '"', (size_t)(end - p));
        if (!p)
            return;
        for (int i = 0; i < 3; i++)
            if (!seen[i] && p + keys[i].k + 2 < end && p[1] == keys[i].key[0] &&
                memcmp(p + 1, keys[i].key, keys[i].k) == 0 && p[keys[i].k + 1] == '"') {
                seen[i] = true;
                *slot[i] = count_at(p, end, keys[i].k);
            }
    }
}

void sb_usage_scan(const char *text, size_t len, sb_usage *out)
{
    out->found = false;
    out->prompt_tokens = out->completion_tokens = out->cached_tokens = -1;
    const char *u = find_last(text, len, "\"usage\"");
    if (!u)
        return;
    const char *end = text + len;
    const char *p = u + 7;
    while (p < end && (*p == ' ' || *p == ':'))
        p++;
    if (p >= end || *p != '{')
        return; /* "usage": null */
    /* The object ends at its matching brace (nested prompt_tokens_details included). */
    int depth = 0;
    const char *q = p;
    for (; q < end; q++) {
        if (*q == '{')
            depth++;
        else if (*q == '}' && --depth == 0)
            break;
    }
    read_counts(p, q, out);
    out->found = out->prompt_tokens >= 0 || out->completion_tokens >= 0;
}

void sb_usage_tail_push(char *tail, size_t cap, size_t *len, const void *at, size_t n)
{
    if (n >= cap) {
        memcpy(tail, (const char *)at + n - cap, cap);
        *len = cap;
    } else if (n) {
        size_t keep = *len + n > cap ? cap - n : *len;
        memmove(tail, tail + *len - keep, keep);
        memcpy(tail + keep, at, n);
        *len = keep + n;
    }
}
