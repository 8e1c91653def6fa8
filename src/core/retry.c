/* retry: the proxy's retry rules; see the header. */
#include "core/retry.h"

#include <string.h>

static const char *const reason_names[SB_RETRY_REASONS] = {"connect-failure", "reset", "timeout", "status"};

sb_retry_policy sb_retry_policy_default(void)
{
    sb_retry_policy p = {.on = 1u << SB_RETRY_CONNECT | 1u << SB_RETRY_RESET,
                         .attempts = 3,
                         .backoff_ms = 25,
                         .max_backoff_ms = 250,
                         .budget_ratio = 0.2,
                         .min_retries = 3};
    static const int statuses[] = {500, 502, 503, 504};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        p.statuses[(statuses[i] - 500) / 64] |= 1ull << ((statuses[i] - 500) % 64);
    return p;
}

const char *sb_retry_reason_name(enum sb_retry_reason r)
{
    return (unsigned)r < SB_RETRY_REASONS ? reason_names[r] : "unknown";
}

int sb_retry_reason_find(const char *s)
{
    for (int i = 0; i < SB_RETRY_STATUS; i++)
        if (!strcmp(s, reason_names[i]))
            return i;
    return -1;
}

bool sb_retry_on(const sb_retry_policy *p, enum sb_retry_reason reason, int status)
{
    if (reason == SB_RETRY_STATUS)
        return status >= 500 && status < 628 && (p->statuses[(status - 500) / 64] >> ((status - 500) % 64) & 1);
    return (unsigned)reason < SB_RETRY_REASONS && (p->on >> reason & 1);
}

bool sb_retry_budget_allows(const sb_retry_policy *p, uint64_t retries_in_flight, uint64_t requests_in_flight)
{
    double budget = p->budget_ratio * (double)requests_in_flight;
    if (budget < p->min_retries)
        budget = p->min_retries;
    return (double)retries_in_flight + 1 <= budget; /* counting the one asked for */
}

uint32_t sb_retry_backoff_ms(const sb_retry_policy *p, uint32_t retry, uint64_t rnd)
{
    uint64_t d = p->backoff_ms;
    for (uint32_t i = 1; i < retry && d < p->max_backoff_ms; i++)
        d *= 2;
    if (d > p->max_backoff_ms)
        d = p->max_backoff_ms;
    if (d < 2)
        return (uint32_t)d;
    /* The upper half: never much shorter than asked, never in step with the others. */
    return (uint32_t)(d - d / 2 + rnd % (d / 2 + 1));
}
