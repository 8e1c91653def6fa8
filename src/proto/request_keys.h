/* request_keys: the keys of an OpenAI request's messages and content parts, by name.
 *
 * Private to proto/: request inspection (inspect.c) checks these fields and prompt
 * canonicalisation (prompt.c) reads them, so both look them up through the same tables and
 * name each value slot rather than counting positions. Use with sb_json_find_keys:
 *   int v[MSG_KEYS];
 *   sb_json_find_keys(t, n, b, m, sb_message_keys, MSG_KEYS, v);   then v[MSG_ROLE] ...
 * Not for: the request's top-level keys (inspect.c alone reads those). */
#ifndef SB_PROTO_REQUEST_KEYS_H
#define SB_PROTO_REQUEST_KEYS_H

#include "proto/json.h"

/* A key's name and length: inside an sb_json_key initialiser, or as a (name, len) pair. */
#define SB_KEY(s) s, sizeof(s) - 1

/* A chat message or a /v1/responses input item. */
enum { MSG_ROLE, MSG_CONTENT, MSG_TOOL_CALLS, MSG_TYPE, MSG_KEYS };
static const sb_json_key sb_message_keys[MSG_KEYS] = {
    [MSG_ROLE] = {SB_KEY("role")},
    [MSG_CONTENT] = {SB_KEY("content")},
    [MSG_TOOL_CALLS] = {SB_KEY("tool_calls")},
    [MSG_TYPE] = {SB_KEY("type")},
};

/* One part of an array `content`. */
enum { PART_TYPE, PART_TEXT, PART_KEYS };
static const sb_json_key sb_part_keys[PART_KEYS] = {
    [PART_TYPE] = {SB_KEY("type")},
    [PART_TEXT] = {SB_KEY("text")},
};

#endif
