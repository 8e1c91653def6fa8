/* multi-turn: chat conversations that grow turn by turn. Turn k's prompt is the system prompt
 * (shared by every conversation), then the k-1 earlier user messages and answers, then the new
 * user message; each answer is `output` tokens. Conversations start as a Poisson process at
 * rate / turns, so that the offered request rate is about `rate` when the fleet keeps up; the
 * next turn arrives an exponentially distributed think time after the client received the
 * previous answer (closed loop per conversation, as a person at a chat window). The defaults
 * are round figures of a chat assistant, not a published benchmark's. */
#include <errno.h>

#include "base/alloc.h"
#include "replay/workload.h"

enum { TURNS, SYSTEM, USER, OUTPUT, THINK_MS };

static const sb_replay_param params[] = {
    {"turns", 5, 1, 1000, "turns per conversation"},
    {"system", 1000, 0, 1e6, "system prompt tokens (shared by all conversations)"},
    {"user", 200, 1, 1e6, "user message tokens per turn"},
    {"output", 200, 1, 1e6, "answer tokens per turn"},
    {"think_ms", 5000, 0, 3.6e6, "mean think time between an answer and the next turn, ms"},
    {NULL, 0, 0, 0, NULL},
};

static int generate(const double *v, const sb_replay_gen_opts *o, sb_replay_workload *w, char *err, size_t errcap)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ULL + 2;
    uint32_t turns = (uint32_t)v[TURNS];
    sb_replay_span *s = sb_malloc((2 * (size_t)turns + 1) * sizeof(*s));
    if (!s)
        return -ENOMEM;
    uint64_t unique = 0, n = 0;
    double t = 0;
    for (uint64_t conv = 0;; conv++) {
        t += sb_replay_exp(&rng, 1e9 * turns / o->rate);
        if (!sb_replay_gen_more(o, n, (sb_ns)t))
            break;
        uint32_t ns = 0;
        if (v[SYSTEM] >= 1)
            s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_SHARED, 2ULL << 40), (uint32_t)v[SYSTEM]};
        long prev = -1;
        for (uint32_t k = 0; k < turns && (!o->requests || n < o->requests); k++, n++) {
            if (k > 0) /* the previous answer joins the history */
                s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_UNIQUE, unique++), (uint32_t)v[OUTPUT]};
            s[ns++] = (sb_replay_span){sb_replay_span_id(SB_REPLAY_NS_UNIQUE, unique++), (uint32_t)v[USER]};
            sb_replay_request r = {.arrival_ns = k ? 0 : (sb_ns)t,
                                   .max_tokens = (uint32_t)v[OUTPUT],
                                   .followup = SB_REPLAY_NO_REQUEST,
                                   .session = conv + 1,
                                   .is_followup = k > 0,
                                   .think_ns = k ? (sb_ns)sb_replay_exp(&rng, v[THINK_MS] * 1e6) : 0};
            long idx = sb_replay_workload_add(w, &r, s, ns);
            if (idx < 0) {
                sb_free(s);
                return -ENOMEM;
            }
            if (prev >= 0)
                w->reqs[prev].followup = (uint32_t)idx;
            prev = idx;
        }
    }
    sb_free(s);
    return 0;
}

const sb_replay_generator sb_gen_multi_turn = {
    .name = "multi-turn",
    .summary = "conversations growing turn by turn, next turn a think time after the answer",
    .params = params,
    .generate = generate,
};
