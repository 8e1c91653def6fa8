/* engine_calib: sb_engine_calibrate, measured by driving an engine through its public API. */
#include "sim/engine.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"

typedef struct calib_ctx {
    uint32_t n_target, n_first;
    sb_ns all_first_ns; /* when the last request got its first token */
    sb_ns first_ttft_ns;
    bool finished; /* some request finished: the batch is shrinking */
    sb_ns itl_sum_ns;
    uint64_t itl_n;
} calib_ctx;

static void calib_cb(void *ud, const sb_engine_event *ev)
{
    calib_ctx *c = ud;
    switch (ev->kind) {
    case SB_ENGINE_EV_FIRST_TOKEN:
        if (c->n_first++ == 0)
            c->first_ttft_ns = ev->usage.ttft_ns;
        if (c->n_first == c->n_target)
            c->all_first_ns = ev->time_ns;
        break;
    case SB_ENGINE_EV_TOKEN:
        /* Steady state: every request decoding, none gone, the gap wholly after the last
         * prefill. */
        if (c->n_first == c->n_target && !c->finished && ev->time_ns - ev->itl_ns >= c->all_first_ns) {
            c->itl_sum_ns += ev->itl_ns;
            c->itl_n++;
        }
        break;
    case SB_ENGINE_EV_FINISHED: c->finished = true; break;
    default: break;
    }
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Submits n requests with unique prompts at time 0 and runs the engine until idle. */
static int calib_run(const sb_engine_params *p, uint32_t n, uint32_t prompt, uint32_t max_tokens, calib_ctx *c)
{
    *c = (calib_ctx){.n_target = n};
    sb_engine *e = sb_engine_new(p);
    uint64_t *h = sb_malloc((prompt / p->block_size + 1) * sizeof *h);
    int rc = e && h ? 0 : -ENOMEM;
    uint64_t seed = 1;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        for (uint32_t k = 0; k < prompt / p->block_size; k++)
            h[k] = splitmix64(&seed);
        sb_engine_request q = {.id = i + 1, .block_hashes = h, .n_prompt = prompt, .max_tokens = max_tokens};
        rc = sb_engine_submit(e, &q, 0);
    }
    for (sb_ns t; rc == 0 && (t = sb_engine_next_event(e)) != SB_ENGINE_NEVER;)
        sb_engine_advance(e, t, calib_cb, c);
    sb_free(h);
    sb_engine_free(e);
    return rc;
}

int sb_engine_calibrate(const sb_engine_params *p, sb_engine_calibration *out)
{
    static const uint32_t prompts[3] = {1024, 8192, 32768};
    static const uint32_t batches[3] = {1, 64, 256};
    const uint32_t ctx_tokens = 1024, prefill_reqs = 64, prefill_len = 4096;
    if (sb_engine_params_check(p) != 0)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    calib_ctx c;
    for (int i = 0; i < 3; i++) {
        out->ttft_prompt_tokens[i] = prompts[i];
        int rc = calib_run(p, 1, prompts[i], 1, &c);
        if (rc == -ENOMEM)
            return rc;
        out->ttft_ns[i] = rc == 0 ? c.first_ttft_ns : 0;
    }
    out->itl_context_tokens = ctx_tokens;
    for (int i = 0; i < 3; i++) {
        uint32_t b = batches[i] < p->max_num_seqs ? batches[i] : p->max_num_seqs;
        out->itl_batch[i] = b;
        /* 128 tokens: long enough for a steady window after the last prefill at batch 256. */
        int rc = calib_run(p, b, ctx_tokens, 128, &c);
        if (rc == -ENOMEM)
            return rc;
        out->itl_ns[i] = rc == 0 && c.itl_n ? c.itl_sum_ns / c.itl_n : 0;
    }
    if (out->itl_ns[2])
        out->decode_tokens_per_s_256 = out->itl_batch[2] * 1e9 / (double)out->itl_ns[2];
    int rc = calib_run(p, prefill_reqs, prefill_len, 1, &c);
    if (rc == -ENOMEM)
        return rc;
    if (rc == 0 && c.all_first_ns)
        out->prefill_tokens_per_s = (double)prefill_reqs * prefill_len * 1e9 / (double)c.all_first_ns;
    return 0;
}
