/* Shared by the tests of core/adaptive and core/control: configurator parameters that react at
 * once (no smoothing, no publication interval), so a test's ticks show their effect directly. */
#ifndef SB_TEST_ADAPTIVE_H
#define SB_TEST_ADAPTIVE_H

#include "core/adaptive.h"

static inline sb_adaptive_params sb_test_adaptive_unsmoothed(void)
{
    sb_adaptive_params p = sb_adaptive_params_default();
    for (int d = 0; d < SB_DETECT_COUNT; d++)
        p.detector[d].tau_ns = 0;
    p.min_publish_ns = 0;
    return p;
}

#endif
