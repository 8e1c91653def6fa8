/* sim_request: OpenAI-style request parsing for the simulator (see sim_request.h). */
#include "sim/sim_request.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "proto/json.h"

#define KEY(s) s, sizeof(s) - 1

typedef struct parse {
    const char *b;
    const sb_json_tok *t;
    int n;
    sb_sim_request *out;
} parse;

/* Keys compare decoded, as vLLM's JSON reader sees them ("mod\u0065l" is "model"). */
static bool tok_is(const parse *p, int i, const char *s, size_t n) { return sb_json_str_is(p->b, &p->t[i], s, n); }

static bool is_null(const parse *p, int i)
{
    return p->t[i].type == SB_JSON_PRIMITIVE && p->b[p->t[i].start] == 'n';
}

/* Reads a boolean (null reads as false). Returns 0 or -EINVAL. */
static int read_bool(parse *p, int i, bool *v, const char *error)
{
    const sb_json_tok *t = &p->t[i];
    char c = p->b[t->start];
    if (t->type != SB_JSON_PRIMITIVE || (c != 't' && c != 'f' && c != 'n')) {
        p->out->error = error;
        return -EINVAL;
    }
    *v = c == 't';
    return 0;
}

/* Reads a positive integer that fits in 32 bits; null leaves *v alone. */
static int read_count(parse *p, int i, uint32_t *v, const char *error)
{
    const sb_json_tok *t = &p->t[i];
    if (is_null(p, i))
        return 0;
    if (t->type != SB_JSON_PRIMITIVE)
        goto bad;
    uint64_t x = 0;
    for (int k = t->start; k < t->end; k++) {
        char c = p->b[k];
        if (c < '0' || c > '9' || x > UINT32_MAX)
            goto bad;
        x = x * 10 + (uint64_t)(c - '0');
    }
    if (x < 1 || x > UINT32_MAX)
        goto bad;
    *v = (uint32_t)x;
    return 0;
bad:
    p->out->error = error;
    return -EINVAL;
}

/* Appends the decoded string token i to b. */
static int append_string(parse *p, int i, sb_buf *b)
{
    const sb_json_tok *t = &p->t[i];
    size_t n = (size_t)(t->end - t->start);
    if (sb_buf_reserve(b, n + 1) < 0)
        return -ENOMEM;
    long r = sb_json_unescape(p->b + t->start, n, b->data + b->len, n + 1);
    if (r < 0) {
        p->out->error = "invalid escape in a string";
        return -EINVAL;
    }
    b->len += (size_t)r; /* escapes only shrink: r <= n */
    b->data[b->len] = '\0';
    return 0;
}

static int append_content(parse *p, int v, sb_buf *b)
{
    if (p->t[v].type == SB_JSON_STRING)
        return append_string(p, v, b);
    if (is_null(p, v))
        return 0;
    if (p->t[v].type != SB_JSON_ARRAY)
        goto bad;
    for (int k = 0, part = v + 1; k < p->t[v].size; k++, part = sb_json_skip(p->t, p->n, part)) {
        if (p->t[part].type != SB_JSON_OBJECT)
            goto bad;
        for (int f = 0, key = part + 1; f < p->t[part].size; f++, key = sb_json_skip(p->t, p->n, key + 1))
            if (tok_is(p, key, KEY("text")) && p->t[key + 1].type == SB_JSON_STRING) {
                int rc = append_string(p, key + 1, b);
                if (rc < 0)
                    return rc;
            }
    }
    return 0;
bad:
    p->out->error = "messages[].content must be a string, null or an array of parts";
    return -EINVAL;
}

static int render_messages(parse *p, int v, sb_buf *b)
{
    if (p->t[v].type != SB_JSON_ARRAY || p->t[v].size == 0) {
        p->out->error = "messages must be a non-empty array";
        return -EINVAL;
    }
    for (int k = 0, m = v + 1; k < p->t[v].size; k++, m = sb_json_skip(p->t, p->n, m)) {
        if (p->t[m].type != SB_JSON_OBJECT) {
            p->out->error = "messages[] must be objects";
            return -EINVAL;
        }
        int role = -1, content = -1;
        for (int f = 0, key = m + 1; f < p->t[m].size; f++, key = sb_json_skip(p->t, p->n, key + 1)) {
            if (tok_is(p, key, KEY("role")))
                role = key + 1;
            else if (tok_is(p, key, KEY("content")))
                content = key + 1;
        }
        if (role < 0 || p->t[role].type != SB_JSON_STRING) {
            p->out->error = "messages[].role must be a string";
            return -EINVAL;
        }
        int rc = 0;
        if (sb_buf_puts(b, "<|") < 0 || (rc = append_string(p, role, b)) == -ENOMEM || sb_buf_puts(b, "|>\n") < 0)
            return -ENOMEM;
        if (rc < 0)
            return rc;
        if (content >= 0 && (rc = append_content(p, content, b)) < 0)
            return rc;
        if (sb_buf_puts(b, "\n") < 0)
            return -ENOMEM;
    }
    return sb_buf_puts(b, "<|assistant|>\n") < 0 ? -ENOMEM : 0;
}

static int render_prompt(parse *p, int v, sb_buf *b)
{
    if (p->t[v].type == SB_JSON_STRING)
        return append_string(p, v, b);
    if (p->t[v].type == SB_JSON_ARRAY) {
        for (int k = 0, s = v + 1; k < p->t[v].size; k++, s = sb_json_skip(p->t, p->n, s)) {
            if (p->t[s].type != SB_JSON_STRING) {
                p->out->error = "prompt must be a string or an array of strings (token ids are not simulated)";
                return -EINVAL;
            }
            int rc = append_string(p, s, b);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    p->out->error = "prompt must be a string or an array of strings";
    return -EINVAL;
}

static int walk(parse *p, sb_sim_api api, sb_buf *prompt)
{
    const sb_json_tok *t = p->t;
    sb_sim_request *out = p->out;
    int messages = -1, text = -1, rc;
    uint32_t max_tokens = 0, max_completion_tokens = 0;
    for (int f = 0, key = 1; f < t[0].size; f++, key = sb_json_skip(t, p->n, key + 1)) {
        int v = key + 1;
        if (tok_is(p, key, KEY("model"))) {
            out->model[0] = '\0';
            out->model_len = 0;
            if (is_null(p, v))
                continue;
            if (t[v].type != SB_JSON_STRING) {
                out->error = "model must be a string";
                return -EINVAL;
            }
            long r = sb_json_unescape(p->b + t[v].start, (size_t)(t[v].end - t[v].start), out->model, SB_SIM_MODEL_MAX);
            if (r < 0) {
                out->error = "invalid escape in model";
                return -EINVAL;
            }
            out->model_len = (size_t)r;
            out->model[r > SB_SIM_MODEL_MAX ? SB_SIM_MODEL_MAX : r] = '\0';
        } else if (tok_is(p, key, KEY("stream"))) {
            if ((rc = read_bool(p, v, &out->stream, "stream must be a boolean")) < 0)
                return rc;
        } else if (tok_is(p, key, KEY("stream_options"))) {
            if (is_null(p, v))
                continue;
            if (t[v].type != SB_JSON_OBJECT) {
                out->error = "stream_options must be an object";
                return -EINVAL;
            }
            for (int g = 0, k2 = v + 1; g < t[v].size; g++, k2 = sb_json_skip(t, p->n, k2 + 1))
                if (tok_is(p, k2, KEY("include_usage")) &&
                    (rc = read_bool(p, k2 + 1, &out->include_usage, "include_usage must be a boolean")) < 0)
                    return rc;
        } else if (tok_is(p, key, KEY("max_tokens"))) {
            max_tokens = 0;
            if ((rc = read_count(p, v, &max_tokens, "max_tokens must be an integer >= 1")) < 0)
                return rc;
        } else if (tok_is(p, key, KEY("max_completion_tokens"))) {
            max_completion_tokens = 0;
            if ((rc = read_count(p, v, &max_completion_tokens, "max_completion_tokens must be an integer >= 1")) < 0)
                return rc;
        } else if (tok_is(p, key, KEY("messages"))) {
            messages = is_null(p, v) ? -1 : v;
        } else if (tok_is(p, key, KEY("prompt"))) {
            text = is_null(p, v) ? -1 : v;
        }
    }
    out->max_tokens = max_completion_tokens ? max_completion_tokens
                      : max_tokens          ? max_tokens
                                            : SB_SIM_DEFAULT_MAX_TOKENS;
    if (api == SB_SIM_API_CHAT || (api == SB_SIM_API_TOKENIZE && messages >= 0)) {
        if (messages < 0) {
            out->error = "messages is required";
            return -EINVAL;
        }
        out->from_messages = true;
        return render_messages(p, messages, prompt);
    }
    if (text < 0) {
        out->error = api == SB_SIM_API_TOKENIZE ? "prompt or messages is required" : "prompt is required";
        return -EINVAL;
    }
    return render_prompt(p, text, prompt);
}

int sb_sim_request_parse(const char *body, size_t len, sb_sim_api api, sb_sim_request *out, sb_buf *prompt)
{
    sb_json j = {.max_depth = SB_SIM_MAX_JSON_DEPTH};
    int n, rc;

    memset(out, 0, sizeof(*out));
    out->max_tokens = SB_SIM_DEFAULT_MAX_TOKENS;
    n = sb_json_parse(&j, body, len);
    switch (n) {
    case SB_JSON_NOMEM:
        rc = -ENOMEM;
        break;
    case SB_JSON_TOO_DEEP:
        out->error = "request body nests JSON arrays and objects too deep (more than 128 levels)";
        rc = -EINVAL;
        break;
    case SB_JSON_TOO_MANY:
        out->error = "request body has too many JSON values";
        rc = -EINVAL;
        break;
    case SB_JSON_BAD:
        out->error = "request body is not valid JSON";
        rc = -EINVAL;
        break;
    default:
        if (j.tokens[0].type != SB_JSON_OBJECT) {
            out->error = "request body must be a JSON object";
            rc = -EINVAL;
        } else {
            parse p = {body, j.tokens, n, out};
            rc = walk(&p, api, prompt);
        }
    }
    sb_json_free(&j);
    return rc;
}
