/* sim_request: reads the OpenAI-style requests a simulated replica receives.
 *
 * The simulator needs little from a request: the model name, the stream flags, the output
 * length, and the prompt as one text to tokenize. sb_sim_request_parse() extracts them with
 * proto/json.h (one linear pass, nesting bounded by SB_SIM_MAX_JSON_DEPTH) and renders the prompt text through a fixed template, so the same conversation gives
 * the same text, hence the same tokens, on every replica (prefix caching then works across
 * requests and replicas, as with a real chat template).
 *
 * Prompt text:
 *   - `messages` (chat, and /tokenize): for each message "<|ROLE|>\nCONTENT\n", CONTENT being
 *     the string content, or the concatenated `text` of the parts that have one (other parts,
 *     images and the like, contribute nothing); null or absent content is empty. Then
 *     "<|assistant|>\n", the generation prompt (vLLM's add_generation_prompt, on by default).
 *   - `prompt` (completions, and /tokenize): the string, or an array of strings concatenated.
 *     (vLLM runs an array as a batch with one choice per string; the simulator serves one
 *     choice.) Token-id prompts (arrays of numbers) are refused.
 * Output length: `max_completion_tokens`, else `max_tokens`, else SB_SIM_DEFAULT_MAX_TOKENS;
 * null means absent. It must be an integer >= 1.
 *
 * Not for: validating the OpenAI schema beyond the fields above (unknown fields are ignored,
 * as vLLM ignores most sampling parameters that do not change the output length here). */
#ifndef SB_SIM_SIM_REQUEST_H
#define SB_SIM_SIM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* vLLM's default when a completions request has no max_tokens (its CompletionRequest default,
 * 16); a chat request there defaults to the context left, which would make a simulated
 * request run for minutes, so the simulator uses 16 for both. */
#define SB_SIM_DEFAULT_MAX_TOKENS 16
#define SB_SIM_MODEL_MAX 256
/* The gateway's default bound (limits.max_json_depth): the simulator stands in for a model
 * server behind it, and refuses what no real request nests. */
#define SB_SIM_MAX_JSON_DEPTH 128

/* Which fields carry the prompt. */
typedef enum sb_sim_api {
    SB_SIM_API_CHAT = 0,    /* `messages` required */
    SB_SIM_API_COMPLETIONS, /* `prompt` required */
    SB_SIM_API_TOKENIZE,    /* `prompt` or `messages`; `model` optional */
} sb_sim_api;

typedef struct sb_sim_request {
    char model[SB_SIM_MODEL_MAX + 1]; /* decoded, NUL-terminated; "" if absent */
    size_t model_len;                 /* may exceed SB_SIM_MODEL_MAX: then no model matches */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool from_messages; /* the prompt came from `messages` */
    uint32_t max_tokens;
    const char *error; /* on -EINVAL: why, a static string for the 400 body */
} sb_sim_request;

/* Parses body[0..len) for `api`, fills *out and appends the prompt text to `prompt`.
 * Returns 0; -EINVAL if the body is malformed, nested deeper than SB_SIM_MAX_JSON_DEPTH, or
 * a field is invalid (out->error says which; `prompt` may hold a partial text); -ENOMEM.
 * Linear in len whatever the shape. Allocates a temporary token array, freed before it
 * returns; the prompt buffer is the caller's. */
int sb_sim_request_parse(const char *body, size_t len, sb_sim_api api, sb_sim_request *out, sb_buf *prompt);

#endif
