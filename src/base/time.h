/* time: the one time type. Pure modules take `now_ns` as an argument and never read a clock;
 * only net/ and cmd/ read the monotonic clock (uv_hrtime) and pass it down. */
#ifndef SB_BASE_TIME_H
#define SB_BASE_TIME_H

#include <stdint.h>

typedef uint64_t sb_ns;

#define SB_NS_PER_US 1000ULL
#define SB_NS_PER_MS 1000000ULL
#define SB_NS_PER_S 1000000000ULL
#define SB_MS(x) ((sb_ns)(x) * SB_NS_PER_MS)
#define SB_US(x) ((sb_ns)(x) * SB_NS_PER_US)

#endif
