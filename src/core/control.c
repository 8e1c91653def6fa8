/* control: see the header. */
#include "core/control.h"

bool sb_control_publish(sb_router *r, uint32_t pool, const sb_adaptive *a, const sb_profile *base, bool adaptive)
{
    if (!adaptive || !sb_adaptive_movable(base))
        return false;
    sb_router_set_profile(r, pool, sb_adaptive_profile(a));
    return true;
}

unsigned sb_control_tick(sb_router *r, uint32_t pool, sb_adaptive *a, const sb_profile *base, bool adaptive,
                         sb_ns now)
{
    const sb_pool_params *pp = sb_router_pool_params(r, pool);
    unsigned changed = sb_adaptive_tick(a, sb_router_endpoint(r, pool, 0), sb_router_endpoint_count(r, pool),
                                        pp->stale_ns, now);
    if (changed & SB_ADAPTIVE_PUBLISHED)
        sb_control_publish(r, pool, a, base, adaptive);
    return changed;
}
