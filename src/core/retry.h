/* retry: the rules of the proxy's retries, as pure functions: which failure may be retried,
 * how long to wait before the next attempt, and the retry budget that keeps a sick fleet
 * from being hammered twice. The proxy (net/proxy.c) does the I/O; this file decides.
 *
 * What is retried is only ever a request nothing of whose answer reached the client: a
 * connect failure, a connection reset or closed before the answer, a response timeout before
 * the first byte (off by default: a timed-out request may be running on the endpoint), or a
 * listed 5xx status read before anything was forwarded. The next attempt goes to an endpoint
 * the request has not tried (the proxy decides again with the tried ones excluded).
 *
 * Pure: no I/O, no clock; randomness is an argument. */
#ifndef SB_CORE_RETRY_H
#define SB_CORE_RETRY_H

#include <stdbool.h>
#include <stdint.h>

/* Why an attempt failed (the label of switchboard_retries_total's `reason`). */
enum sb_retry_reason {
    SB_RETRY_CONNECT = 0, /* connect failure (refused, unreachable, connect timeout) */
    SB_RETRY_RESET,       /* reset or closed before the answer was read */
    SB_RETRY_TIMEOUT,     /* no response byte within response_ms */
    SB_RETRY_STATUS,      /* a retryable 5xx status */
    SB_RETRY_REASONS
};

/* Attempts at most, the first included: a bound on the exclusion list. */
#define SB_RETRY_MAX_ATTEMPTS 8

typedef struct sb_retry_policy {
    uint32_t on;          /* bit (1 << reason) per retried reason but SB_RETRY_STATUS */
    uint64_t statuses[2]; /* bit (status - 500) per retried status, 500..627 */
    uint32_t attempts;    /* the first included, 1..SB_RETRY_MAX_ATTEMPTS; 1 = no retries */
    uint32_t backoff_ms;  /* before the first retry, doubled per retry; 0 = none */
    uint32_t max_backoff_ms;
    double budget_ratio;  /* retries in flight at most this share of requests in flight */
    uint32_t min_retries; /* ...but always this many (a lone request may still retry) */
} sb_retry_policy;

/* Defaults: on connect failure, reset, 500, 502, 503, 504; 3 attempts; 25 ms doubling up to
 * 250 ms; budget 20% of requests in flight, at least 3 retries (Envoy's retry budget:
 * budget_percent 20, min_retry_concurrency 3). */
sb_retry_policy sb_retry_policy_default(void);

const char *sb_retry_reason_name(enum sb_retry_reason r);
/* The reason named s (connect-failure, reset, timeout), or -1. */
int sb_retry_reason_find(const char *s);

/* Whether the policy retries a failure of this reason (status: the 5xx read, for
 * SB_RETRY_STATUS; ignored otherwise). */
bool sb_retry_on(const sb_retry_policy *p, enum sb_retry_reason reason, int status);

/* Whether one more retry may start now: retries_in_flight (requests already past their first
 * attempt) plus this one at most max(min_retries, budget_ratio * requests_in_flight). */
bool sb_retry_budget_allows(const sb_retry_policy *p, uint64_t retries_in_flight, uint64_t requests_in_flight);

/* The wait before retry number `retry` (1 for the first): backoff_ms doubled per retry up to
 * max_backoff_ms, jittered into its upper half by `rnd` (any 64 random bits) so requests that
 * failed together do not come back together. */
uint32_t sb_retry_backoff_ms(const sb_retry_policy *p, uint32_t retry, uint64_t rnd);

#endif
