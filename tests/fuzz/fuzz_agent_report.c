/* fuzz_agent_report: libFuzzer target for src/proto/agent_report.c (outside input: agents'
 * report bodies on the admin listener, and model servers' /v1/models answers).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each). The committed corpus
 * (tests/fuzz/corpus/agent_report) is also replayed by tests/unit/proto/test_agent_report.c.
 *
 * Besides crashes and sanitizer reports, it checks: an accepted report keeps its bounds
 * (idle <= total, kv_usage in [0,1], models within the bound, strings NUL-terminated inside
 * their fields), and it survives a round trip: rendered and parsed again, the same fields. */
#include "proto/agent_report.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

static _Alignas(int) char scratch[SB_AGENT_SCRATCH_BYTES];
static sb_agent_report r, back;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    sb_agent_models_parse((const char *)data, size, scratch, sizeof scratch, &r);
    CHECK(r.n_models <= SB_AGENT_MAX_MODELS);
    if (sb_agent_report_parse((const char *)data, size, scratch, sizeof scratch, &r, err, sizeof err) != 0)
        return 0;
    CHECK(!r.have_slots || r.slots_idle <= r.slots_total);
    CHECK(!r.have_kv || (r.kv_usage >= 0 && r.kv_usage <= 1));
    CHECK(r.n_models <= SB_AGENT_MAX_MODELS);
    CHECK(memchr(r.address, 0, sizeof r.address) && memchr(r.agent, 0, sizeof r.agent));
    sb_buf b = {0};
    CHECK(sb_agent_report_render(&r, &b) == 0);
    CHECK(sb_agent_report_parse(b.data, b.len, scratch, sizeof scratch, &back, err, sizeof err) == 0);
    CHECK(!strcmp(back.address, r.address) && !strcmp(back.agent, r.agent) && back.n_models == r.n_models);
    CHECK(back.have_slots == r.have_slots && back.slots_total == r.slots_total && back.slots_idle == r.slots_idle);
    CHECK(back.queue == r.queue && back.running == r.running && back.seq == r.seq);
    sb_buf_free(&b);
    return 0;
}
