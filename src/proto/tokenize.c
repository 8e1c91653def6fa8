/* tokenize: see tokenize.h. */
#include "proto/tokenize.h"

#include <string.h>

/* For XXH3_state_t's definition: the streaming state lives on the stack. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define KEY(s)                                                                                                         \
    {                                                                                                                  \
        s, sizeof(s) - 1                                                                                               \
    }

/* ---- the answer ---- */

/* A JSON number token that is a non-negative integer below 2^32, into *v. */
static bool read_u32(const char *b, const sb_json_tok *t, uint32_t *v)
{
    if (t->type != SB_JSON_PRIMITIVE)
        return false;
    size_t len = (size_t)(t->end - t->start);
    const char *p = b + t->start;
    if (len == 0 || len > 10 || (len > 1 && p[0] == '0'))
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false; /* a sign, a fraction, an exponent, a literal */
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    if (x > UINT32_MAX)
        return false;
    *v = (uint32_t)x;
    return true;
}

int sb_tokenize_parse_answer(sb_json *j, const char *body, size_t len, uint32_t *out, size_t cap, size_t *n_tokens)
{
    int n = sb_json_parse(j, body, len);
    if (n == SB_JSON_TOO_MANY)
        return SB_TOKENIZE_TOO_MANY;
    if (n == SB_JSON_NOMEM)
        return SB_TOKENIZE_NOMEM;
    if (n < 0)
        return SB_TOKENIZE_BAD;
    const sb_json_tok *t = j->tokens;
    if (t[0].type != SB_JSON_OBJECT)
        return SB_TOKENIZE_BAD;
    static const sb_json_key keys[] = {KEY("tokens"), KEY("count")};
    int v[2];
    sb_json_find_keys(t, n, body, 0, keys, 2, v);
    int arr = v[0];
    if (arr < 0 || t[arr].type != SB_JSON_ARRAY)
        return SB_TOKENIZE_BAD;
    size_t count = (size_t)t[arr].size;
    if (count > cap)
        return SB_TOKENIZE_TOO_MANY;
    /* Elements of a flat array are the next `size` tokens; a nested one is refused by
     * read_u32 on its container token before anything inside is read. */
    for (size_t i = 0; i < count; i++)
        if (!read_u32(body, &t[arr + 1 + (int)i], &out[i]))
            return SB_TOKENIZE_BAD;
    if (sb_json_present(t, v[1], body)) {
        uint32_t c;
        if (!read_u32(body, &t[v[1]], &c) || c != count)
            return SB_TOKENIZE_BAD;
    }
    *n_tokens = count;
    return SB_TOKENIZE_OK;
}

/* ---- the request ---- */

typedef struct writer {
    char *out;
    size_t cap, len;
} writer;

static void put(writer *w, const char *s, size_t n)
{
    if (w->len < w->cap)
        memcpy(w->out + w->len, s, w->len + n <= w->cap ? n : w->cap - w->len);
    w->len += n;
}

static void put_str(writer *w, const char *s)
{
    put(w, s, strlen(s));
}

/* model as a JSON string: quote, backslash and control characters escaped. */
static void put_json_string(writer *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    put(w, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(w, e, 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(w, e, 6);
        } else {
            put(w, (const char *)&c, 1);
        }
    }
    put(w, "\"", 1);
}

/* Value token v exactly as the client wrote it (a string with its quotes). */
static void put_raw(writer *w, const char *body, const sb_json_tok *t)
{
    int start = t->start, end = t->end;
    if (t->type == SB_JSON_STRING) {
        start--;
        end++;
    }
    put(w, body + start, (size_t)(end - start));
}

enum { K_MESSAGES, K_PROMPT, K_TOOLS, K_TEMPLATE, K_TEMPLATE_KW, K_GEN_PROMPT, K_CONTINUE, K_SPECIAL, K_N };

/* The request fields the body builder, the context key and the prompt key read. */
static const sb_json_key keys[K_N] = {
    [K_MESSAGES] = KEY("messages"),
    [K_PROMPT] = KEY("prompt"),
    [K_TOOLS] = KEY("tools"),
    [K_TEMPLATE] = KEY("chat_template"),
    [K_TEMPLATE_KW] = KEY("chat_template_kwargs"),
    [K_GEN_PROMPT] = KEY("add_generation_prompt"),
    [K_CONTINUE] = KEY("continue_final_message"),
    [K_SPECIAL] = KEY("add_special_tokens"),
};

long sb_tokenize_build_body(const char *body, const sb_json_tok *t, int n, const char *model, size_t model_len,
                            char *out, size_t cap)
{
    static const char *const names[K_N] = {"messages",
                                           "prompt",
                                           "tools",
                                           "chat_template",
                                           "chat_template_kwargs",
                                           "add_generation_prompt",
                                           "continue_final_message",
                                           "add_special_tokens"};
    if (n < 1 || t[0].type != SB_JSON_OBJECT)
        return SB_TOKENIZE_NO_PROMPT;
    int v[K_N];
    sb_json_find_keys(t, n, body, 0, keys, K_N, v);
    writer w = {out, cap, 0};
    put_str(&w, "{\"model\":");
    put_json_string(&w, model, model_len);
    int first, last;
    if (v[K_MESSAGES] >= 0 && t[v[K_MESSAGES]].type == SB_JSON_ARRAY) {
        first = K_MESSAGES;
        last = K_SPECIAL;
    } else if (v[K_PROMPT] >= 0 && t[v[K_PROMPT]].type == SB_JSON_STRING) {
        first = K_PROMPT;
        last = K_PROMPT;
    } else {
        return SB_TOKENIZE_NO_PROMPT;
    }
    for (int k = first; k <= K_SPECIAL; k++) {
        bool wanted = k <= last || k == K_SPECIAL;
        if (k == K_PROMPT && first == K_MESSAGES)
            wanted = false;
        /* null means "not set" to the engines' request models as to ours. */
        if (!wanted || !sb_json_present(t, v[k], body))
            continue;
        put_str(&w, ",\"");
        put_str(&w, names[k]);
        put_str(&w, "\":");
        put_raw(&w, body, &t[v[k]]);
    }
    put_str(&w, "}");
    return (long)w.len;
}

uint64_t sb_tokenize_context_key(const char *body, const sb_json_tok *t, int n, const char *model, size_t model_len)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, model, model_len);
    int v[K_N];
    bool chat = false;
    if (n >= 1 && t[0].type == SB_JSON_OBJECT) {
        sb_json_find_keys(t, n, body, 0, keys, K_N, v);
        chat = v[K_MESSAGES] >= 0 && t[v[K_MESSAGES]].type == SB_JSON_ARRAY;
    } else {
        for (int k = 0; k < K_N; k++)
            v[k] = -1;
    }
    /* A separator no model name holds (a NUL), then the kind. */
    XXH3_64bits_update(&st, chat ? "\0c" : "\0p", 2);
    for (int k = chat ? K_TOOLS : K_SPECIAL; k <= K_SPECIAL; k++) {
        unsigned char tag[2] = {0, (unsigned char)k};
        XXH3_64bits_update(&st, tag, 2);
        if (!sb_json_present(t, v[k], body))
            continue;
        int start = t[v[k]].start, end = t[v[k]].end;
        if (t[v[k]].type == SB_JSON_STRING) {
            start--;
            end++;
        }
        /* Lengths framed, so one field's bytes never pass for the next's. */
        uint64_t len = (uint64_t)(end - start);
        XXH3_64bits_update(&st, &len, sizeof len);
        XXH3_64bits_update(&st, body + start, (size_t)(end - start));
    }
    return XXH3_64bits_digest(&st);
}

int sb_tokenize_prompt_key(const char *body, const sb_json_tok *t, int n, uint64_t *out)
{
    if (n < 1 || t[0].type != SB_JSON_OBJECT)
        return SB_TOKENIZE_NO_PROMPT;
    int v[K_N];
    sb_json_find_keys(t, n, body, 0, keys, K_N, v);
    const sb_json_tok *p;
    if (v[K_MESSAGES] >= 0 && t[v[K_MESSAGES]].type == SB_JSON_ARRAY)
        p = &t[v[K_MESSAGES]];
    else if (v[K_PROMPT] >= 0 && t[v[K_PROMPT]].type == SB_JSON_STRING)
        p = &t[v[K_PROMPT]];
    else
        return SB_TOKENIZE_NO_PROMPT;
    /* The bytes the builder copies verbatim: with the context key they identify its body. */
    *out = XXH3_64bits(body + p->start, (size_t)(p->end - p->start));
    return SB_TOKENIZE_OK;
}
