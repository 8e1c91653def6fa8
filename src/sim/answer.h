/* answer: the text a simulated replica generates, and its token ids.
 *
 * Every answer is the same word sequence: token i is word i of a 16-word cycle ("the model
 * server is fake and this text fills each token with one plain word here", the first word
 * without its leading space). Each word is exactly one token of the simulator's tokenizer
 * (sim/tokenizer.h: at most 6 letters, one space in front), so an answer sent back in the next
 * chat turn tokenizes to the very ids the engine generated and cached for it: a multi-turn
 * follow-up hits the previous answer's blocks, as on vLLM.
 *
 * Not for: anything resembling model output. Pure; no allocation. */
#ifndef SB_SIM_ANSWER_H
#define SB_SIM_ANSWER_H

#include <stdint.h>

/* The text of generated token i (0-based), a static NUL-terminated string. */
const char *sb_sim_answer_word(uint32_t i);

/* The token id of generated token i: sb_tokenize() of sb_sim_answer_word(i). */
uint32_t sb_sim_answer_token(uint32_t i);

#endif
