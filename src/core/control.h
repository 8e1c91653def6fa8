/* control: the adaptive loop's glue to the router, one pool at a time, as the gateway's
 * adaptive timer (net/gateway.c) and replay's tick (replay/driver.c) both run it: so replay
 * measures the rule the gateway applies, not a copy of it.
 *
 * A pool routes by the configurator's snapshots (core/adaptive.h) only when it is configured
 * to (`adaptive: true`, replay's --adaptive) and its base profile has weight to move
 * (sb_adaptive_movable); otherwise its detectors still tick (for metrics) and it routes by its
 * base profile. After the pools' ticks, the caller releases flow control's queues
 * (core/admission.h, sb_admission_tick): new reports may have opened the gate.
 *
 * Pure: no I/O, no clock. */
#ifndef SB_CORE_CONTROL_H
#define SB_CORE_CONTROL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/time.h"
#include "core/adaptive.h"
#include "core/router.h"

/* Puts a's current snapshot in force for pool when `adaptive` and base (the profile a was
 * built over) can move weight; returns whether it did (else the pool's profile is left as it
 * is). For start-up and reloads, after sb_adaptive_new or sb_adaptive_set_base. */
bool sb_control_publish(sb_router *r, uint32_t pool, const sb_adaptive *a, const sb_profile *base, bool adaptive);

/* One tick of pool's detectors over its endpoints at now (the pool's staleness bound); a
 * snapshot the tick published goes in force as sb_control_publish says. Returns
 * sb_adaptive_tick's bits, for the caller to log regime changes. */
unsigned sb_control_tick(sb_router *r, uint32_t pool, sb_adaptive *a, const sb_profile *base, bool adaptive,
                         sb_ns now);

#endif
