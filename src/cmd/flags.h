/* flags: command-line parsing shared by the commands: numbers with ranges, and the engine
 * model's flags (named like vLLM's engine arguments), which `sim` and `replay` both take.
 *
 * Errors are printed as "switchboard CMD: --flag wants ..., got '...'" and reported as -1. */
#ifndef SB_CMD_FLAGS_H
#define SB_CMD_FLAGS_H

#include <getopt.h>
#include <stdint.h>

#include "sim/engine.h"

int sb_flag_u32(const char *cmd, const char *flag, const char *s, uint32_t min, uint32_t max, uint32_t *out);
int sb_flag_u64(const char *cmd, const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out);
int sb_flag_double(const char *cmd, const char *flag, const char *s, double min, double max, double *out);

/* getopt_long codes of the engine flags: a range no command uses for its own options. */
enum {
    SB_EFLAG_FIRST = 0x4000,
    SB_EFLAG_MAX_NUM_SEQS = SB_EFLAG_FIRST,
    SB_EFLAG_MAX_BATCHED,
    SB_EFLAG_GPU_BLOCKS,
    SB_EFLAG_BLOCK_SIZE,
    SB_EFLAG_MAX_LORAS,
    SB_EFLAG_LORA_LOAD_MS,
    SB_EFLAG_NO_PREFIX,
    SB_EFLAG_STEP_MS,
    SB_EFLAG_PREFILL_US,
    SB_EFLAG_DECODE_US,
    SB_EFLAG_CONTEXT_US,
    SB_EFLAG_END,
};

/* The engine flags' entries, to put in a command's `struct option` table. */
#define SB_ENGINE_LONG_OPTIONS                                                                                     \
    {"max-num-seqs", required_argument, NULL, SB_EFLAG_MAX_NUM_SEQS},                                               \
        {"max-num-batched-tokens", required_argument, NULL, SB_EFLAG_MAX_BATCHED},                                  \
        {"num-gpu-blocks", required_argument, NULL, SB_EFLAG_GPU_BLOCKS},                                           \
        {"block-size", required_argument, NULL, SB_EFLAG_BLOCK_SIZE},                                               \
        {"max-loras", required_argument, NULL, SB_EFLAG_MAX_LORAS},                                                 \
        {"lora-load-ms", required_argument, NULL, SB_EFLAG_LORA_LOAD_MS},                                           \
        {"no-enable-prefix-caching", no_argument, NULL, SB_EFLAG_NO_PREFIX},                                        \
        {"step-overhead-ms", required_argument, NULL, SB_EFLAG_STEP_MS},                                            \
        {"prefill-token-us", required_argument, NULL, SB_EFLAG_PREFILL_US},                                         \
        {"decode-token-us", required_argument, NULL, SB_EFLAG_DECODE_US},                                           \
        {                                                                                                          \
        "context-token-us", required_argument, NULL, SB_EFLAG_CONTEXT_US                                            \
    }

/* True for a getopt code in the engine range. */
static inline int sb_is_engine_flag(int opt) { return opt >= SB_EFLAG_FIRST && opt < SB_EFLAG_END; }
/* Applies one engine flag to *ep. Returns 0, or -1 (message printed). */
int sb_engine_flag(const char *cmd, int opt, const char *arg, sb_engine_params *ep);

#endif
