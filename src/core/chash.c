#include "core/chash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"

/* Points and owners in two arrays rather than one array of pairs: the binary search touches
 * only the 8-byte points, so twice as many fit per cache line; the owner is read once. */
struct sb_chash {
    uint64_t *points; /* sorted ascending */
    uint16_t *owners; /* owners[k]: endpoint of points[k] (SB_CHASH_MAX_ENDPOINTS fits) */
    size_t n_points;
    size_t n;
    uint32_t vnodes;
};

typedef struct build_point {
    uint64_t point;
    uint64_t id_hash; /* tie-break on identity, not position, should two points collide */
    uint32_t owner;
} build_point;

static int cmp_build_point(const void *a, const void *b)
{
    const build_point *x = a, *y = b;
    if (x->point != y->point)
        return x->point < y->point ? -1 : 1;
    if (x->id_hash != y->id_hash)
        return x->id_hash < y->id_hash ? -1 : 1;
    return (x->owner > y->owner) - (x->owner < y->owner);
}

/* MurmurHash3's 64-bit finaliser: a bijection that spreads keys which are not already uniform
 * hashes (counters, small ids) over the whole ring. */
static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

sb_chash *sb_chash_new(const char *const *ids, size_t n, uint32_t vnodes)
{
    if (vnodes == 0)
        vnodes = SB_CHASH_DEFAULT_VNODES;
    if (n > SB_CHASH_MAX_ENDPOINTS || vnodes > SB_CHASH_MAX_VNODES)
        return NULL;
    sb_chash *ring = sb_calloc(1, sizeof(*ring));
    build_point *tmp = NULL;
    if (!ring)
        return NULL;
    ring->n = n;
    ring->vnodes = vnodes;
    ring->n_points = n * vnodes;
    size_t np = ring->n_points ? ring->n_points : 1;
    ring->points = sb_malloc(np * sizeof(uint64_t));
    ring->owners = sb_malloc(np * sizeof(uint16_t));
    tmp = sb_malloc(np * sizeof(build_point));
    if (!ring->points || !ring->owners || !tmp)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(ids[i]);
        uint64_t id_hash = XXH3_64bits(ids[i], len);
        /* The vnode index is the seed: one hash per point, no string formatting. */
        for (uint32_t v = 0; v < vnodes; v++)
            tmp[i * vnodes + v] = (build_point){XXH3_64bits_withSeed(ids[i], len, v), id_hash, (uint32_t)i};
    }
    qsort(tmp, ring->n_points, sizeof(build_point), cmp_build_point);
    for (size_t k = 0; k < ring->n_points; k++) {
        ring->points[k] = tmp[k].point;
        ring->owners[k] = (uint16_t)tmp[k].owner;
    }
    sb_free(tmp);
    return ring;
fail:
    sb_free(tmp);
    sb_chash_free(ring);
    return NULL;
}

void sb_chash_free(sb_chash *ring)
{
    if (!ring)
        return;
    sb_free(ring->points);
    sb_free(ring->owners);
    sb_free(ring);
}

size_t sb_chash_endpoint_count(const sb_chash *ring)
{
    return ring->n;
}
uint32_t sb_chash_vnodes(const sb_chash *ring)
{
    return ring->vnodes;
}

/* Index of the first point >= h, wrapping to 0 past the last. Branch-free halving: the
 * comparison compiles to a conditional move, so no mispredictions on random keys. */
static size_t lower_bound(const sb_chash *ring, uint64_t h)
{
    const uint64_t *p = ring->points;
    size_t len = ring->n_points;
    while (len > 1) {
        size_t half = len / 2;
        p = p[half - 1] < h ? p + half : p;
        len -= half;
    }
    size_t k = (size_t)(p - ring->points) + (*p < h);
    return k == ring->n_points ? 0 : k;
}

int sb_chash_owner(const sb_chash *ring, uint64_t key)
{
    if (ring->n_points == 0)
        return -1;
    return ring->owners[lower_bound(ring, mix(key))];
}

uint64_t sb_chash_load_bound(uint64_t total, size_t m, double c)
{
    if (m == 0)
        return 0;
    if (!(c >= 1.0)) /* also NaN */
        c = 1.0;
    if (c > 1000.0)
        c = 1000.0;
    /* Thousandths, in integers: a floating ceil would turn 1.1 * 10 / 11 into 2. Exact while
     * total stays below 2^44, far beyond any in-flight count. */
    uint64_t milli = (uint64_t)llround(c * 1000.0);
    uint64_t den = 1000u * (uint64_t)m;
    return (milli * (total + 1) + den - 1) / den;
}

int sb_chash_pick(const sb_chash *ring, uint64_t key, const bool *eligible, const uint32_t *load, size_t n, double c)
{
    size_t lim = n < ring->n ? n : ring->n;
    uint64_t total = 0;
    size_t m = 0;
    for (size_t i = 0; i < lim; i++)
        if (eligible[i]) {
            total += load[i];
            m++;
        }
    if (m == 0)
        return -1;
    uint64_t bound = sb_chash_load_bound(total, m, c);
    /* Some eligible endpoint is under the bound (their loads sum to total < c(total+1)), so
     * the walk ends within one turn of the ring. Consecutive points of one rejected endpoint
     * are skipped without a second look. */
    size_t k = lower_bound(ring, mix(key));
    uint32_t rejected = UINT32_MAX;
    for (size_t step = 0; step < ring->n_points; step++) {
        uint32_t e = ring->owners[k];
        if (e != rejected) {
            if (e < lim && eligible[e] && (uint64_t)load[e] + 1 <= bound)
                return (int)e;
            rejected = e;
        }
        k = k + 1 == ring->n_points ? 0 : k + 1;
    }
    return -1;
}

int sb_chash_first(const sb_chash *ring, uint64_t key, const uint64_t *allowed)
{
    if (ring->n_points == 0)
        return -1;
    size_t k = lower_bound(ring, mix(key));
    for (size_t step = 0; step < ring->n_points; step++) {
        uint32_t e = ring->owners[k];
        if ((allowed[e / 64] >> (e % 64)) & 1)
            return (int)e;
        k = k + 1 == ring->n_points ? 0 : k + 1;
    }
    return -1;
}
