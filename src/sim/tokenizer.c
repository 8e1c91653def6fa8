/* tokenizer: see tokenizer.h for the rule. */
#include "sim/tokenizer.h"

#include <stdbool.h>
#include <xxhash.h>

/* Words up to WORD_WHOLE bytes are one token; longer ones are cut every WORD_CUT bytes. These
 * two values put English prose at about 4 bytes per token (measured in the unit test), close to
 * Llama 3's tokenizer on the same text. */
#define WORD_WHOLE 6
#define WORD_CUT 4
#define SPACE_CUT 4

enum { WS, WORD, PUNCT };

static int byte_class(unsigned char c)
{
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return WS;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80)
        return WORD;
    return PUNCT;
}

/* A line break never rides with the next word (as in Llama 3's and GPT-4's pre-tokenizers, where
 * newlines are tokens of their own): text after a line break then tokenizes the same whatever
 * came before it, so a chat turn's answer tokenizes back to the ids generated for it. */
static bool is_line_break(unsigned char c)
{
    return c == '\n' || c == '\r';
}

static void emit(const char *p, size_t n, uint32_t *out, size_t cap, size_t *count)
{
    if (*count < cap)
        out[*count] = (uint32_t)(XXH3_64bits(p, n) & 0x7fffffffu);
    (*count)++;
}

size_t sb_tokenize(const char *text, size_t len, uint32_t *out, size_t cap)
{
    size_t count = 0, i = 0;
    while (i < len) {
        size_t ws = i;
        while (i < len && byte_class((unsigned char)text[i]) == WS)
            i++;
        /* Whitespace not attached to what follows: all of it at the end of the text or when it
         * ends in a line break, else all but its last byte. */
        size_t lone_end = i < len && i > ws && !is_line_break((unsigned char)text[i - 1]) ? i - 1 : i;
        for (size_t k = ws; k < lone_end; k += SPACE_CUT)
            emit(text + k, lone_end - k < SPACE_CUT ? lone_end - k : SPACE_CUT, out, cap, &count);
        if (i == len)
            break;
        size_t start = lone_end, w = i;
        if (byte_class((unsigned char)text[i]) == PUNCT) {
            i++;
        } else {
            while (i < len && byte_class((unsigned char)text[i]) == WORD)
                i++;
        }
        if (i - w <= WORD_WHOLE) {
            emit(text + start, i - start, out, cap, &count);
            continue;
        }
        /* Long word: the first cut carries the attached whitespace. */
        size_t k = w + WORD_CUT;
        emit(text + start, k - start, out, cap, &count);
        for (; k < i; k += WORD_CUT)
            emit(text + k, i - k < WORD_CUT ? i - k : WORD_CUT, out, cap, &count);
    }
    return count;
}
