/* driver_bands: flow-control bands and tenants in a replay run (see driver_internal.h). */
#include "replay/driver_internal.h"

#include "replay/latency.h"

/* Per band: counts over every settled request, TTFT percentiles over the completed ones
 * (client side: queue wait included). e2e's storage, already summarised, is the scratch. */
void drv_summarise_bands(driver *d)
{
    sb_replay_result *out = d->out;
    sb_ns *v = d->e2e;
    double wait_sum[SB_BAND_COUNT] = {0};
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        sb_replay_band_result *br = &out->band[b];
        size_t k = 0;
        for (size_t i = 0; i < d->w->n; i++) {
            const req_rt *rt = &d->rt[i];
            if (rt->band != b || rt->outcome == SB_REPLAY_PENDING)
                continue;
            br->requests++;
            if (rt->outcome == SB_REPLAY_COMPLETED) {
                br->completed++;
                br->queued += rt->queued;
                wait_sum[b] += (double)(rt->dispatch_ns - rt->arrival_ns);
                v[k++] = rt->client_ttft_ns;
                continue;
            }
            br->shed++;
            br->refused += rt->status == 429;
            br->expired += rt->status == 503;
        }
        sb_replay_sort_ns(v, k);
        br->ttft_p50_ms = sb_replay_percentile(v, k, 0.50) * 1e-6;
        br->ttft_p90_ms = sb_replay_percentile(v, k, 0.90) * 1e-6;
        br->ttft_p99_ms = sb_replay_percentile(v, k, 0.99) * 1e-6;
        br->wait_mean_ms = k ? wait_sum[b] / (double)k * 1e-6 : 0;
        out->refused += br->refused;
        out->expired += br->expired;
    }
}

/* A hash of (seed, root index, stream) in [0, 1): the same conversation gets the same band
 * and tenant whatever the policy. splitmix64's finaliser. */
static double unit_hash(uint64_t seed, uint64_t root, uint64_t stream)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + root * 0xBF58476D1CE4E5B9ULL + stream * 0x94D049BB133111EBULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* Bands and tenants per conversation: a root draws them, its later turns inherit. */
void drv_assign_bands(driver *d)
{
    const sb_replay_opts *o = d->o;
    double sum = 0;
    for (int b = 0; b < SB_BAND_COUNT; b++)
        sum += o->band_mix[b];
    uint32_t tenants = o->tenants > 1 ? o->tenants : 1;
    for (size_t i = 0; i < d->w->n; i++) {
        if (d->w->reqs[i].is_followup)
            continue;
        uint8_t band = SB_BAND_STANDARD;
        if (sum > 0) {
            double u = unit_hash(o->seed, i, 1) * sum, acc = 0;
            band = SB_BAND_SHEDDABLE; /* rounding at the top end */
            for (int b = 0; b < SB_BAND_COUNT; b++) {
                acc += o->band_mix[b];
                if (u < acc && o->band_mix[b] > 0) {
                    band = (uint8_t)b;
                    break;
                }
            }
        }
        uint32_t tenant = (uint32_t)(unit_hash(o->seed, i, 2) * tenants);
        for (uint32_t k = (uint32_t)i; k != SB_REPLAY_NO_REQUEST; k = d->w->reqs[k].followup) {
            d->rt[k].band = band;
            d->rt[k].tenant = tenant;
        }
    }
}
