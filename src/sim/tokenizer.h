/* tokenizer: the simulator's deterministic stand-in for a model's tokenizer.
 *
 * It exists so that the same text gives the same token ids on every replica and in replay, and
 * so that token counts are realistic (about 4 bytes per token on English prose, like Llama 3's
 * tokenizer). It is not any real model's tokenizer and cannot decode ids back to text.
 *
 * The rule. Bytes are whitespace (space, \t, \n, \v, \f, \r), word bytes (ASCII letters and
 * digits, '_', and every byte >= 0x80, so UTF-8 text stays in words), or punctuation (the rest).
 * Text is cut into pieces: a word (a maximal run of word bytes) or a single punctuation byte,
 * each with the last byte of the whitespace run before it attached in front unless that byte is
 * a line break (\n or \r). The rest of a longer whitespace run is cut into pieces of up to 4
 * bytes on its own, as is a run that ends in a line break and whitespace at the end of the
 * text. So text that follows a line break tokenizes alike whatever precedes it: the chat
 * template's generation prompt ends in one, and an answer tokenizes back, inside the next
 * turn's prompt, to the ids the engine generated for it (sim/answer.h). A word longer than 6
 * bytes is cut every 4 bytes (the attached whitespace rides with the first cut): short words are
 * whole tokens, long ones several, as in BPE vocabularies. Each piece is one token, whose id
 * is the xxh3-64 hash of the piece's bytes (seed 0) truncated to its low 31 bits. */
#ifndef SB_SIM_TOKENIZER_H
#define SB_SIM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* Tokenizes text[0..len) (need not be NUL-terminated; NUL bytes are punctuation). Writes the
 * first min(count, cap) ids to out (out may be NULL when cap is 0) and returns count, the full
 * number of tokens: call with cap 0 to size a buffer. Pure: no allocation. */
size_t sb_tokenize(const char *text, size_t len, uint32_t *out, size_t cap);

#endif
