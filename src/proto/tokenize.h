/* tokenize: the wire of an engine's `POST /tokenize` (vLLM, SGLang, llama.cpp), which the
 * gateway asks for a request's token ids under the engine's own tokenizer and chat template
 * (the precise index, core/kv_index.h, is keyed by token ids).
 *
 * Two halves, both pure and bounded:
 * - the request body: vLLM's TokenizeChatRequest `{"model":M,"messages":[...]}` with the
 *   client's messages copied verbatim (the engine applies the very template the completion
 *   will), and the fields that change what the template renders copied verbatim when the
 *   client sent them (`tools`, `chat_template`, `chat_template_kwargs`,
 *   `add_generation_prompt`, `continue_final_message`, `add_special_tokens`); or
 *   TokenizeCompletionRequest `{"model":M,"prompt":"..."}` (with `add_special_tokens`).
 *   Both defaults match the completion endpoints' (generation prompt on; special tokens off
 *   for chat, on for prompts), so a field the client left out needs no copy either;
 * - the answer: `{"tokens":[...], "count":N, ...}`; other keys (`max_model_len`,
 *   `token_strs`) are ignored.
 *
 * Not for: sending (net/http_get.h does) or caching (core/tok_cache.h). No allocation but the
 * caller's sb_json token array (the caller sets its bounds). */
#ifndef SB_PROTO_TOKENIZE_H
#define SB_PROTO_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/json.h"

enum sb_tokenize_status {
    SB_TOKENIZE_OK = 0,
    SB_TOKENIZE_BAD = -1,      /* not JSON, nested past the sb_json's max_depth, not an object,
                                  no `tokens` array, an element that is not an integer in
                                  [0, 2^32), or `count` disagreeing */
    SB_TOKENIZE_TOO_MANY = -2, /* more ids than the caller's room, or more JSON tokens than the
                                  sb_json's max_tokens */
    SB_TOKENIZE_NOMEM = -3,    /* the sb_json token array could not grow */
    SB_TOKENIZE_NO_PROMPT = -4 /* (builder) neither messages nor a string prompt */
};

/* Parses the answer body[0..len) with j (its bounds apply: nesting, tokens) into out[0..cap).
 * On success returns SB_TOKENIZE_OK and sets *n_tokens; else a negative status, *n_tokens
 * unspecified and out possibly partly written. Linear in len. */
int sb_tokenize_parse_answer(sb_json *j, const char *body, size_t len, uint32_t *out, size_t cap, size_t *n_tokens);

/* Builds the /tokenize body for the request body[0..) whose JSON tokens are t[0..n) (from a
 * successful sb_json_parse; t[0] its root object), for the served model name
 * model[0..model_len) (escaped here). Writes at most cap bytes to out and returns the full
 * length (> cap: nothing usable was written; call again with that much room), or
 * SB_TOKENIZE_NO_PROMPT when the request has no `messages` array and no string `prompt`
 * (a token-id prompt needs no tokenizing; a batch of prompts is not one request's prefix). */
long sb_tokenize_build_body(const char *body, const sb_json_tok *t, int n, const char *model, size_t model_len,
                            char *out, size_t cap);

/* The tokenize cache's context key (core/tok_cache.h) for the same request: XXH3-64 of the
 * model name, the request's kind (messages or prompt), and the template-shaping fields the
 * builder copies, in a fixed order (the client's key order does not matter), each as written.
 * Two requests whose /tokenize bodies differ only in their messages or prompt have the same
 * context. Pure; never fails (a request with no prompt gets a key all the same). */
uint64_t sb_tokenize_context_key(const char *body, const sb_json_tok *t, int n, const char *model, size_t model_len);
/* The cache's prompt key for the same request, without building its body: XXH3-64 of the
 * `messages` array (or the `prompt` string) as the client wrote it, the part the builder copies
 * verbatim; with the context key it names the body. SB_TOKENIZE_OK with *out set, or
 * SB_TOKENIZE_NO_PROMPT as sb_tokenize_build_body. Linear in that value's length. */
int sb_tokenize_prompt_key(const char *body, const sb_json_tok *t, int n, uint64_t *out);

#endif
