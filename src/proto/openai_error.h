/* openai_error: OpenAI-shaped error bodies, {"error":{"message","type","param","code"}}.
 * Every refusal the gateway makes uses this shape, so OpenAI clients show the message. */
#ifndef SB_PROTO_OPENAI_ERROR_H
#define SB_PROTO_OPENAI_ERROR_H

#include "base/buf.h"

/* Appends the error JSON to b. `param` and `code` may be NULL (rendered as null).
 * Returns 0, or -1 on ENOMEM. */
int sb_openai_error(sb_buf *b, const char *message, const char *type, const char *param, const char *code);

#endif
