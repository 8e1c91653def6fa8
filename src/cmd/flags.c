#include "cmd/flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int sb_flag_u64(const char *cmd, const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < min || v > max) {
        fprintf(stderr, "switchboard %s: --%s wants an integer in [%llu, %llu], got '%s'\n", cmd, flag,
                (unsigned long long)min, (unsigned long long)max, s);
        return -1;
    }
    *out = v;
    return 0;
}

int sb_flag_u32(const char *cmd, const char *flag, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (sb_flag_u64(cmd, flag, s, min, max, &v) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int sb_flag_double(const char *cmd, const char *flag, const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "switchboard %s: --%s wants a number in [%g, %g], got '%s'\n", cmd, flag, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A double flag scaled into a field: milliseconds or microseconds to nanoseconds. */
static int scaled(const char *cmd, const char *flag, const char *s, double scale, double *out)
{
    double d;
    if (sb_flag_double(cmd, flag, s, 0, 1e6, &d) < 0)
        return -1;
    *out = d * scale;
    return 0;
}

int sb_engine_flag(const char *cmd, int opt, const char *a, sb_engine_params *ep)
{
    double d;
    switch (opt) {
    case SB_EFLAG_MAX_NUM_SEQS: return sb_flag_u32(cmd, "max-num-seqs", a, 1, UINT32_MAX, &ep->max_num_seqs);
    case SB_EFLAG_MAX_BATCHED:
        return sb_flag_u32(cmd, "max-num-batched-tokens", a, 1, UINT32_MAX, &ep->max_num_batched_tokens);
    case SB_EFLAG_GPU_BLOCKS: return sb_flag_u32(cmd, "num-gpu-blocks", a, 1, UINT32_MAX, &ep->num_gpu_blocks);
    case SB_EFLAG_BLOCK_SIZE: return sb_flag_u32(cmd, "block-size", a, 1, 4096, &ep->block_size);
    case SB_EFLAG_MAX_LORAS: return sb_flag_u32(cmd, "max-loras", a, 0, 1024, &ep->max_loras);
    case SB_EFLAG_LORA_LOAD_MS:
        if (scaled(cmd, "lora-load-ms", a, 1e6, &d) < 0)
            return -1;
        ep->lora_load_ns = (sb_ns)d;
        return 0;
    case SB_EFLAG_NO_PREFIX: ep->enable_prefix_caching = false; return 0;
    case SB_EFLAG_STEP_MS: return scaled(cmd, "step-overhead-ms", a, 1e6, &ep->step_overhead_ns);
    case SB_EFLAG_PREFILL_US: return scaled(cmd, "prefill-token-us", a, 1e3, &ep->prefill_token_ns);
    case SB_EFLAG_DECODE_US: return scaled(cmd, "decode-token-us", a, 1e3, &ep->decode_token_ns);
    case SB_EFLAG_CONTEXT_US: return scaled(cmd, "context-token-us", a, 1e3, &ep->context_token_ns);
    default: return -1;
    }
}
