/* inspect: OpenAI request body inspection (see inspect.h).
 *
 * One pass over bytes, then passes over tokens: sb_json_parse (proto/json.h) builds the
 * token array and checks the syntax (the only pass over every byte, linear whatever the
 * nesting, which is bounded), then field lookups only touch the keys of the objects they
 * read and skip nested values by a galloping search on token offsets. Every walk here is
 * over direct children (messages, parts, keys): O(tokens) in all, whatever the shape. */
#include "proto/inspect.h"
#include "proto/request_keys.h"

#include <stdbool.h>
#include <string.h>

void sb_inspect_ctx_free(sb_inspect_ctx *ctx)
{
    sb_json_free(&ctx->json);
    ctx->n_tokens = 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_bool(const sb_json_tok *t, const char *b)
{
    return t->type == SB_JSON_PRIMITIVE && (b[t->start] == 't' || b[t->start] == 'f');
}

static int is_number(const sb_json_tok *t, const char *b)
{
    return t->type == SB_JSON_PRIMITIVE && (b[t->start] == '-' || is_digit(b[t->start]));
}

/* ---- messages and parts ---- */

/* The names a message check blames, by API. */
struct names {
    const char *item, *role, *content;
};

static const struct names chat_names = {"messages", "messages.role", "messages.content"};
static const struct names responses_names = {"input", "input.role", "input.content"};

/* A content part: an object whose `type` and `text`, if present, are strings. */
static int part_ok(const sb_json_tok *t, int n, const char *b, int part)
{
    int v[PART_KEYS];

    if (t[part].type != SB_JSON_OBJECT)
        return 0;
    sb_json_find_keys(t, n, b, part, sb_part_keys, PART_KEYS, v);
    for (int k = 0; k < PART_KEYS; k++)
        if (sb_json_present(t, v[k], b) && t[v[k]].type != SB_JSON_STRING)
            return 0;
    return 1;
}

/* A chat message, or a /v1/responses input item (role optional: function calls and their
 * outputs have none). Returns NULL if fine, else the field to blame. */
static const char *check_message(const sb_json_tok *t, int n, const char *b, int m, int role_required,
                                 const struct names *nm)
{
    int v[MSG_KEYS], c;

    if (t[m].type != SB_JSON_OBJECT)
        return nm->item;
    sb_json_find_keys(t, n, b, m, sb_message_keys, MSG_KEYS, v);
    if (sb_json_present(t, v[MSG_ROLE], b) ? t[v[MSG_ROLE]].type != SB_JSON_STRING : role_required)
        return nm->role;
    if (!sb_json_present(t, v[MSG_ROLE], b)) /* read as one opaque part: its `type` names it */
        return sb_json_present(t, v[MSG_TYPE], b) && t[v[MSG_TYPE]].type != SB_JSON_STRING ? nm->item : NULL;
    c = v[MSG_CONTENT];
    if (!sb_json_present(t, c, b) || t[c].type == SB_JSON_STRING)
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

/* ---- top-level fields ---- */

/* The request's top-level keys; TOP_PROMPT's name depends on the API. */
enum { TOP_MODEL, TOP_STREAM, TOP_STREAM_OPTIONS, TOP_USER, TOP_INSTRUCTIONS, TOP_PROMPT, TOP_KEYS };

#define TOP_KEY_TABLE(prompt)                                                                                          \
    {                                                                                                                  \
        [TOP_MODEL] = {SB_KEY("model")}, [TOP_STREAM] = {SB_KEY("stream")},                                            \
        [TOP_STREAM_OPTIONS] = {SB_KEY("stream_options")}, [TOP_USER] = {SB_KEY("user")},                              \
        [TOP_INSTRUCTIONS] = {SB_KEY("instructions")}, [TOP_PROMPT] = {SB_KEY(prompt)},                                \
    }
static const sb_json_key top_keys[][TOP_KEYS] = {
    [SB_API_CHAT] = TOP_KEY_TABLE("messages"),
    [SB_API_COMPLETIONS] = TOP_KEY_TABLE("prompt"),
    [SB_API_EMBEDDINGS] = TOP_KEY_TABLE("input"),
    [SB_API_RESPONSES] = TOP_KEY_TABLE("input"),
};

/* An unknown kind reads as embeddings, as every check below treats it. */
static const sb_json_key *keys_of(enum sb_api_kind kind)
{
    return top_keys[(unsigned)kind <= SB_API_RESPONSES ? kind : SB_API_EMBEDDINGS];
}

/* What the field readers share: the parsed body and where its top-level values are. */
struct request {
    const sb_json_tok *t;
    int n;
    const char *body;
    enum sb_api_kind kind;
    int v[TOP_KEYS];
    bool no_model; /* reported last, once everything else has been checked */
};

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

/* A missing model is reported at the end, after the rest is read (rq->no_model): a gateway
 * with a default pool routes such a request like any other. A model of the wrong type is not
 * "missing": it is reported at once. */
static int read_model(struct request *rq, sb_inspect_result *res)
{
    const sb_json_tok *t = rq->t;
    int v = rq->v[TOP_MODEL];
    long d;

    if (v >= 0 && t[v].type != SB_JSON_STRING && sb_json_present(t, v, rq->body))
        return SB_INSPECT_NO_MODEL;
    if (v < 0 || t[v].type != SB_JSON_STRING) {
        rq->no_model = true;
        return SB_INSPECT_OK;
    }
    d = decode_name(&t[v], rq->body, res->model, SB_MODEL_NAME_MAX);
    if (d < 0)
        return bad_field(res, "model");
    if (d == 0)
        return SB_INSPECT_NO_MODEL;
    res->model_len = (size_t)d;
    res->model_tok_start = (size_t)t[v].start - 1;
    res->model_tok_end = (size_t)t[v].end + 1;
    return SB_INSPECT_OK;
}

/* The splices that ask a stream for usage (inspect.h, usage_edit). */
enum { USAGE_MEMBER, USAGE_OBJECT, USAGE_KEY, USAGE_KEY_COMMA, USAGE_TRUE };
static const struct {
    const char *text;
    size_t len;
} usage_edits[] = {
    [USAGE_MEMBER] = {SB_KEY(",\"stream_options\":{\"include_usage\":true}")},
    [USAGE_OBJECT] = {SB_KEY("{\"include_usage\":true}")},
    [USAGE_KEY] = {SB_KEY("\"include_usage\":true")},
    [USAGE_KEY_COMMA] = {SB_KEY("\"include_usage\":true,")},
    [USAGE_TRUE] = {SB_KEY("true")},
};

/* Sets the usage edit for a stream that did not ask, on the APIs that take stream_options. */
static void set_usage_edit(const struct request *rq, sb_inspect_result *res, int kind, int start, int end)
{
    if (!res->stream || res->include_usage || (rq->kind != SB_API_CHAT && rq->kind != SB_API_COMPLETIONS))
        return;
    res->usage_edit = usage_edits[kind].text;
    res->usage_edit_len = usage_edits[kind].len;
    res->usage_edit_start = (size_t)start;
    res->usage_edit_end = (size_t)end;
}

/* `stream` and `stream_options.include_usage`: booleans. */
static int read_stream(struct request *rq, sb_inspect_result *res)
{
    const sb_json_tok *t = rq->t;
    const char *b = rq->body;
    int v = rq->v[TOP_STREAM], iu, opt[2];
    static const sb_json_key stream_option_keys[] = {{SB_KEY("include_usage")}, {SB_KEY("continuous_usage_stats")}};

    if (sb_json_present(t, v, b)) {
        if (!is_bool(&t[v], b))
            return bad_field(res, "stream");
        res->stream = b[t[v].start] == 't';
    }
    v = rq->v[TOP_STREAM_OPTIONS];
    if (!sb_json_present(t, v, b)) {
        if (v >= 0) /* null: the object in its place */
            set_usage_edit(rq, res, USAGE_OBJECT, t[v].start, t[v].end);
        else
            set_usage_edit(rq, res, USAGE_MEMBER, t[0].end - 1, t[0].end - 1);
        return SB_INSPECT_OK;
    }
    if (t[v].type != SB_JSON_OBJECT)
        return bad_field(res, "stream_options");
    sb_json_find_keys(t, rq->n, b, v, stream_option_keys, 2, opt);
    iu = opt[0];
    if (sb_json_present(t, iu, b)) {
        if (!is_bool(&t[iu], b))
            return bad_field(res, "stream_options.include_usage");
        res->include_usage = b[t[iu].start] == 't';
    }
    if (opt[1] >= 0 && t[opt[1]].type == SB_JSON_PRIMITIVE && b[t[opt[1]].start] == 't')
        return SB_INSPECT_OK; /* continuous_usage_stats: usage in every chunk, not ours to ask */
    if (iu >= 0)
        set_usage_edit(rq, res, USAGE_TRUE, t[iu].start, t[iu].end);
    else
        set_usage_edit(rq, res, t[v].size ? USAGE_KEY_COMMA : USAGE_KEY, t[v].start + 1, t[v].start + 1);
    return SB_INSPECT_OK;
}

static int read_user(struct request *rq, sb_inspect_result *res)
{
    const sb_json_tok *t = rq->t;
    int v = rq->v[TOP_USER];
    long d;

    if (!sb_json_present(t, v, rq->body))
        return SB_INSPECT_OK;
    if (t[v].type != SB_JSON_STRING || (d = decode_name(&t[v], rq->body, res->user, SB_USER_MAX)) < 0)
        return bad_field(res, "user");
    res->user_len = (size_t)d;
    return SB_INSPECT_OK;
}

/* /v1/responses `instructions`: a string, read as a system message before the input. */
static int read_instructions(struct request *rq, sb_inspect_result *res)
{
    int v = rq->v[TOP_INSTRUCTIONS];

    if (rq->kind != SB_API_RESPONSES || !sb_json_present(rq->t, v, rq->body))
        return SB_INSPECT_OK;
    if (rq->t[v].type != SB_JSON_STRING)
        return bad_field(res, "instructions");
    res->instructions_tok = v;
    res->n_messages = 1;
    return SB_INSPECT_OK;
}

/* A message array: chat `messages`, or a /v1/responses `input` that is not a string. */
static int read_messages(const struct request *rq, int v, sb_inspect_result *res)
{
    const sb_json_tok *t = rq->t;
    const struct names *nm = rq->kind == SB_API_CHAT ? &chat_names : &responses_names;
    const char *field;

    if (t[v].type != SB_JSON_ARRAY)
        return bad_field(res, nm->item);
    for (int i = 0, m = v + 1; i < t[v].size; i++, m = sb_json_skip(t, rq->n, m))
        if ((field = check_message(t, rq->n, rq->body, m, rq->kind == SB_API_CHAT, nm)) != NULL)
            return bad_field(res, field);
    res->n_messages += (size_t)t[v].size;
    return SB_INSPECT_OK;
}

/* The prompt: `messages` (chat), `input` (responses: a string or messages; embeddings) or
 * `prompt` (completions). */
static int read_prompt(struct request *rq, sb_inspect_result *res)
{
    const sb_json_tok *t = rq->t;
    int v = rq->v[TOP_PROMPT], rc = SB_INSPECT_OK;

    if (!sb_json_present(t, v, rq->body))
        return SB_INSPECT_OK;
    if (rq->kind == SB_API_CHAT || (rq->kind == SB_API_RESPONSES && t[v].type != SB_JSON_STRING)) {
        rc = read_messages(rq, v, res);
    } else if (rq->kind == SB_API_RESPONSES) {
        res->n_messages += 1; /* a string input: one user message */
    } else {
        long parts = check_prompt(t, rq->n, rq->body, v);
        if (parts < 0)
            return bad_field(res, keys_of(rq->kind)[TOP_PROMPT].name);
        res->n_messages = (size_t)parts;
    }
    if (rc == SB_INSPECT_OK)
        res->prompt_tok = v;
    return rc;
}

static void reset_result(sb_inspect_result *res, enum sb_api_kind kind)
{
    res->kind = kind;
    res->model[0] = '\0';
    res->model_len = 0;
    res->model_tok_start = res->model_tok_end = 0;
    res->stream = res->include_usage = 0;
    res->usage_edit = NULL;
    res->usage_edit_len = res->usage_edit_start = res->usage_edit_end = 0;
    res->user[0] = '\0';
    res->user_len = 0;
    res->prompt_tok = res->instructions_tok = -1;
    res->n_messages = 0;
    res->error_field = NULL;
}

/* Tokenizes and checks the syntax. Returns the number of tokens, or a negative status. */
static int parse(sb_inspect_ctx *ctx, const char *body, size_t len)
{
    int n = sb_json_parse(&ctx->json, body, len);

    switch (n) {
    case SB_JSON_BAD: return SB_INSPECT_BAD_JSON;
    case SB_JSON_TOO_MANY: return SB_INSPECT_TOO_COMPLEX;
    case SB_JSON_TOO_DEEP: return SB_INSPECT_TOO_DEEP;
    case SB_JSON_NOMEM: return SB_INSPECT_NOMEM;
    }
    return ctx->json.tokens[0].type == SB_JSON_OBJECT ? n : SB_INSPECT_BAD_JSON;
}

/* The field readers, in the order inspect.h documents: the first failure is the answer. */
typedef int (*field_reader)(struct request *rq, sb_inspect_result *res);
static const field_reader readers[] = {read_model, read_stream, read_user, read_instructions, read_prompt};

int sb_inspect(sb_inspect_ctx *ctx, enum sb_api_kind kind, const char *body, size_t len, sb_inspect_result *res)
{
    struct request rq = {.body = body, .kind = kind};
    int rc;

    reset_result(res, kind);
    ctx->n_tokens = 0;
    rq.n = parse(ctx, body, len);
    if (rq.n < 0)
        return rq.n;
    rq.t = ctx->json.tokens;
    sb_json_find_keys(rq.t, rq.n, body, 0, keys_of(kind), TOP_KEYS, rq.v);
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if ((rc = readers[i](&rq, res)) != SB_INSPECT_OK)
            return rc;
    ctx->n_tokens = rq.n;
    return rq.no_model ? SB_INSPECT_NO_MODEL : SB_INSPECT_OK;
}
