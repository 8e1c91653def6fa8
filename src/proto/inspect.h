/* inspect: reads an OpenAI-style request body without building a copy of it.
 *
 * sb_inspect() tokenizes the JSON body once (proto/json.h: zero-copy, tokens are offsets into
 * the caller's body, linear in the body whatever its shape, nesting bounded) and fills an
 * sb_inspect_result with what routing needs: the model name (decoded), where the model string
 * sits in the body (so the data path can splice in a served name for an alias without
 * re-serialising), stream / stream_options.include_usage, user, and the prompt's location
 * (completion `prompt` as a string or array of strings, or chat `messages` with role and
 * content, content as a string or an array of parts with `text`).
 *
 * JSON accepted: RFC 8259 nested at most json.max_depth deep, checked token by token
 * (separators, literals, numbers, a single root object, nothing but whitespace after it).
 * Two laxities, for speed, since the model server validates the body fully anyway: raw
 * control characters inside strings and invalid UTF-8 are passed through. A raw NUL byte
 * anywhere is malformed.
 * Duplicate keys: the last one wins, at every level, as in Python's json module (which the
 * model servers use), so the gateway routes on the same value the server acts on. Keys are
 * compared decoded ("mod\u0065l" is "model"), for the same reason.
 * null is read as absent for every optional field (stream, stream_options, include_usage,
 * user, messages / prompt / input, instructions, content).
 *
 * What sb_inspect found is what proto/prompt.h canonicalises and hashes (sb_prompt_hash takes
 * the same context and result), so the two agree on which fields are the prompt.
 *
 * Not for: validating the full OpenAI schema (the model server does that), rewriting, or
 * hashing (proto/prompt.h). Pure: no I/O, no allocation except the token array, which the
 * caller passes in (see sb_inspect_ctx). */
#ifndef SB_PROTO_INSPECT_H
#define SB_PROTO_INSPECT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/json.h"

#define SB_MODEL_NAME_MAX 256
#define SB_USER_MAX 256

enum sb_api_kind {
    SB_API_CHAT = 0,     /* /v1/chat/completions */
    SB_API_COMPLETIONS,  /* /v1/completions */
    SB_API_EMBEDDINGS,   /* /v1/embeddings (`input` read as the prompt, like `prompt`) */
    SB_API_RESPONSES,    /* /v1/responses (`input` string or message array, `instructions`) */
};

enum sb_inspect_status {
    SB_INSPECT_OK = 0,
    SB_INSPECT_BAD_JSON = -1,     /* not a JSON object, or malformed / truncated JSON */
    SB_INSPECT_NO_MODEL = -2,     /* `model` missing, null, empty or not a string */
    SB_INSPECT_BAD_FIELD = -3,    /* a known field has the wrong type (message in `error_field`) */
    SB_INSPECT_TOO_COMPLEX = -4,  /* more JSON tokens than the context allows, or body >= 2 GiB */
    SB_INSPECT_NOMEM = -5,
    SB_INSPECT_TOO_DEEP = -6,     /* more than json.max_depth arrays / objects open at once */
};

/* Reusable tokenizer storage: initialise with {0} and set the bounds json.max_tokens
 * (0 = 1<<20) and json.max_depth (0 = 128, SB_JSON_DEFAULT_MAX_DEPTH); they may change between
 * calls. sb_inspect grows json.tokens up to max_tokens and keeps it for the next call, so a
 * reused context tokenizes in one pass with no allocation. Free with sb_inspect_ctx_free
 * (which leaves the context empty and reusable, bounds kept). One context serves one request
 * at a time. */
typedef struct sb_inspect_ctx {
    sb_json json;      /* tokenizer: bounds (public), tokens and steps (read-only) */
    int n_tokens;      /* tokens used by the last sb_inspect; 0 after a failure */
} sb_inspect_ctx;

void sb_inspect_ctx_free(sb_inspect_ctx *ctx);

typedef struct sb_inspect_result {
    enum sb_api_kind kind;
    char model[SB_MODEL_NAME_MAX + 1]; /* decoded, NUL-terminated */
    size_t model_len;
    size_t model_tok_start;  /* body offset of the model value's opening quote */
    size_t model_tok_end;    /* body offset just past its closing quote */
    int stream;              /* 1 if "stream": true */
    int include_usage;       /* 1 if stream_options.include_usage is true */
    /* How to ask for usage in a stream that did not: replace body[usage_edit_start,
     * usage_edit_end) with usage_edit[0..usage_edit_len) (a static string), a splice that
     * leaves every other byte as the client sent it. usage_edit is NULL when there is nothing
     * to do: not a stream, include_usage already true, an API without stream_options
     * (/v1/embeddings, /v1/responses), or stream_options.continuous_usage_stats true (vLLM would
     * then put usage in every chunk, which no stripping of one chunk could hide). The edit:
     * no stream_options: `,"stream_options":{"include_usage":true}` before the root's closing
     * brace (a stream request has a member already: `stream`); stream_options null: the object
     * in its place; an object without include_usage: `"include_usage":true` (and a comma) after
     * its brace; include_usage false or null: `true` in its place (the last duplicate: the one
     * the server reads). */
    const char *usage_edit;
    size_t usage_edit_len;
    size_t usage_edit_start, usage_edit_end;
    char user[SB_USER_MAX + 1]; /* decoded, NUL-terminated; empty if absent */
    size_t user_len;
    int prompt_tok;          /* token index of `prompt` / `messages` / `input` value, -1 if none */
    int instructions_tok;    /* token index of /v1/responses `instructions`, -1 if none */
    size_t n_messages;       /* chat / responses: number of messages (instructions count as
                                one); completion / embeddings: number of prompt parts */
    const char *error_field; /* for SB_INSPECT_BAD_FIELD: the field name, static string,
                                e.g. "stream", "messages.content"; NULL otherwise */
} sb_inspect_result;

/* Tokenizes `body` (len bytes, need not be NUL-terminated) and fills *res.
 * Returns SB_INSPECT_OK or a negative sb_inspect_status; on failure *res is partially filled
 * and must not be used except error_field. Checks, in this order whatever the key order:
 * JSON (TOO_DEEP and TOO_COMPLEX as soon as the bound is crossed, before any syntax error
 * later in the body; then BAD_JSON), model, stream, stream_options, user, instructions, the prompt.
 * `model` and `user` are rejected (SB_INSPECT_BAD_FIELD) when longer than their buffers or
 * when they decode to a NUL byte, since a C string compare would read a different name.
 * The ctx keeps pointers into nothing: `body` must stay unchanged and alive until
 * sb_prompt_hash (proto/prompt.h) is done with the same ctx and result. */
int sb_inspect(sb_inspect_ctx *ctx, enum sb_api_kind kind, const char *body, size_t len,
               sb_inspect_result *res);

#endif
