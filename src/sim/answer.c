/* answer: see answer.h. */
#include "sim/answer.h"

#include <string.h>

#include "sim/tokenizer.h"

/* Each a single token: one space and at most 6 letters (tokenizer.h's WORD_WHOLE). */
static const char *const words[] = {" the",   " model", " server", " is",   " fake", " and",   " this", " text",
                                    " fills", " each",  " token",  " with", " one",  " plain", " word", " here"};
#define N_WORDS (sizeof(words) / sizeof(words[0]))

const char *sb_sim_answer_word(uint32_t i)
{
    return i == 0 ? words[0] + 1 : words[i % N_WORDS];
}

uint32_t sb_sim_answer_token(uint32_t i)
{
    const char *w = sb_sim_answer_word(i);
    uint32_t id = 0;
    sb_tokenize(w, strlen(w), &id, 1);
    return id;
}
