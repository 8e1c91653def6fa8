/* Tests core/chash (the bounded-load consistent-hash ring) and the hash-affinity scorers built
 * on it (core/scorers/session.c): distribution, stability under pool changes, independence
 * from id order, the load bound on a hot key, eligibility, and the scorers' contract. Keys come
 * from a seeded generator, so every run sees the same figures. */
#include "sb_test.h"

#include <math.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "core/chash.h"
#include "core/sched.h"

extern const sb_scorer_def sb_scorer_session, sb_scorer_prefix_hash, sb_scorer_cold_prefix;

#define KEYS 100000
#define MAXN 32
#define C 1.25

static char idbuf[MAXN][48];
static const char *ids[MAXN];

/* Endpoint ids as a real pool spells them: addresses. */
static void make_ids(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(idbuf[i], sizeof(idbuf[i]), "10.0.%zu.%zu:8000", i / 8, i % 8 + 10);
        ids[i] = idbuf[i];
    }
}

static uint64_t next_key(uint64_t *s)
{
    return sb_rand_next(s);
}

/* Each endpoint's share of KEYS random keys, against the fair share. With v points per
 * endpoint an endpoint's arc is within about 1/sqrt(v) (6% at 256) of fair, one standard
 * deviation; the key sample adds ~1.3% at 16 endpoints. The bounds below are four of those
 * deviations for the worst endpoint, and 10% for the spread over all of them. */
static void check_distribution(size_t n)
{
    make_ids(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    assert_non_null(ring);
    assert_int_equal(sb_chash_vnodes(ring), SB_CHASH_DEFAULT_VNODES);
    assert_int_equal(sb_chash_endpoint_count(ring), n);
    size_t count[MAXN] = {0};
    uint64_t s = 0x1234567;
    for (int k = 0; k < KEYS; k++) {
        int o = sb_chash_owner(ring, next_key(&s));
        assert_true(o >= 0 && (size_t)o < n);
        count[o]++;
    }
    double fair = (double)KEYS / (double)n, worst = 0, var = 0;
    for (size_t i = 0; i < n; i++) {
        double dev = (count[i] - fair) / fair;
        worst = fabs(dev) > worst ? fabs(dev) : worst;
        var += dev * dev;
    }
    double cv = sqrt(var / (double)n);
    printf("  %zu endpoints: worst share %+.1f%% of fair, spread (cv) %.1f%%\n", n, worst * 100, cv * 100);
    assert_true(worst < 0.25);
    assert_true(cv < 0.10);
    sb_chash_free(ring);
}

static void test_distribution_4(void **state)
{
    check_distribution(4);
}
static void test_distribution_16(void **state)
{
    check_distribution(16);
}

/* Small consecutive integers (not hashes) spread too: keys are remixed. */
static void test_sequential_keys_spread(void **state)
{
    make_ids(4);
    sb_chash *ring = sb_chash_new(ids, 4, 0);
    size_t count[4] = {0};
    for (uint64_t k = 1; k <= 10000; k++)
        count[sb_chash_owner(ring, k)]++;
    for (size_t i = 0; i < 4; i++)
        assert_true(count[i] > 1500);
    sb_chash_free(ring);
}

/* Removing endpoint `gone` of 16: only its keys move, and they are about 1/16 of all. */
static void test_remove_moves_only_its_keys(void **state)
{
    size_t n = 16, gone = 5;
    make_ids(n);
    const char *rest[MAXN];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (i != gone)
            rest[m++] = ids[i];
    sb_chash *a = sb_chash_new(ids, n, 0), *b = sb_chash_new(rest, m, 0);
    assert_non_null(a);
    assert_non_null(b);
    uint64_t s = 99;
    size_t moved = 0;
    for (int k = 0; k < KEYS; k++) {
        uint64_t key = next_key(&s);
        const char *before = ids[sb_chash_owner(a, key)], *after = rest[sb_chash_owner(b, key)];
        if (strcmp(before, after)) {
            assert_string_equal(before, ids[gone]);
            moved++;
        }
        assert_string_not_equal(after, ids[gone]);
    }
    double frac = (double)moved / KEYS;
    printf("  remove 1 of 16: %.2f%% of keys moved (1/16 = 6.25%%)\n", frac * 100);
    assert_true(frac > 0.5 / n && frac < 1.5 / n);
    sb_chash_free(a);
    sb_chash_free(b);
}

/* Adding a 17th: only keys that the newcomer takes move, about 1/17 of all. */
static void test_add_moves_only_to_newcomer(void **state)
{
    size_t n = 16;
    make_ids(n + 1);
    sb_chash *a = sb_chash_new(ids, n, 0), *b = sb_chash_new(ids, n + 1, 0);
    uint64_t s = 7;
    size_t moved = 0;
    for (int k = 0; k < KEYS; k++) {
        uint64_t key = next_key(&s);
        int before = sb_chash_owner(a, key), after = sb_chash_owner(b, key);
        if (before != after) {
            assert_int_equal(after, (int)n);
            moved++;
        }
    }
    double frac = (double)moved / KEYS;
    printf("  add a 17th: %.2f%% of keys moved (1/17 = 5.88%%)\n", frac * 100);
    assert_true(frac > 0.5 / (n + 1) && frac < 1.5 / (n + 1));
    sb_chash_free(a);
    sb_chash_free(b);
}

/* The same ids in another order: every key has the same owner id, bounded picks included. */
static void test_order_independent(void **state)
{
    size_t n = 12;
    make_ids(n);
    const char *rev[MAXN];
    for (size_t i = 0; i < n; i++)
        rev[i] = ids[n - 1 - i];
    sb_chash *a = sb_chash_new(ids, n, 0), *b = sb_chash_new(rev, n, 0);
    bool el[MAXN], el_rev[MAXN];
    uint32_t load[MAXN], load_rev[MAXN];
    uint64_t s = 3;
    for (size_t i = 0; i < n; i++) {
        el[i] = i % 3 != 0;
        load[i] = (uint32_t)(next_key(&s) % 5);
        el_rev[n - 1 - i] = el[i];
        load_rev[n - 1 - i] = load[i];
    }
    for (int k = 0; k < 10000; k++) {
        uint64_t key = next_key(&s);
        assert_string_equal(ids[sb_chash_owner(a, key)], rev[sb_chash_owner(b, key)]);
        int pa = sb_chash_pick(a, key, el, load, n, C), pb = sb_chash_pick(b, key, el_rev, load_rev, n, C);
        assert_true(pa >= 0 && pb >= 0);
        assert_string_equal(ids[pa], rev[pb]);
    }
    sb_chash_free(a);
    sb_chash_free(b);
}

/* Skipping ineligible endpoints is the same as a ring built from the eligible ones only
 * (points come from identity), and with no load the pick is that ring's owner. */
static void test_eligible_mask(void **state)
{
    size_t n = 16;
    make_ids(n);
    bool el[MAXN];
    uint32_t load[MAXN] = {0};
    const char *sub[MAXN];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        el[i] = (i * 7) % 3 == 1;
        if (el[i])
            sub[m++] = ids[i];
    }
    sb_chash *a = sb_chash_new(ids, n, 0), *b = sb_chash_new(sub, m, 0);
    uint64_t s = 11;
    for (int k = 0; k < 20000; k++) {
        uint64_t key = next_key(&s);
        int p = sb_chash_pick(a, key, el, load, n, C);
        assert_true(p >= 0 && el[p]);
        assert_string_equal(ids[p], sub[sb_chash_owner(b, key)]);
        if (el[sb_chash_owner(a, key)])
            assert_int_equal(p, sb_chash_owner(a, key));
    }
    sb_chash_free(a);
    sb_chash_free(b);
}

static void test_nothing_eligible(void **state)
{
    make_ids(4);
    sb_chash *ring = sb_chash_new(ids, 4, 0);
    bool el[4] = {false, false, false, false};
    uint32_t load[4] = {0, 0, 0, 0};
    assert_int_equal(sb_chash_pick(ring, 42, el, load, 4, C), -1);
    assert_int_equal(sb_chash_pick(ring, 42, el, load, 0, C), -1);
    uint64_t none = 0;
    assert_int_equal(sb_chash_first(ring, 42, &none), -1);
    sb_chash_free(ring);

    /* The empty ring: no owner, no pick. */
    sb_chash *empty = sb_chash_new(NULL, 0, 0);
    assert_non_null(empty);
    assert_int_equal(sb_chash_owner(empty, 42), -1);
    assert_int_equal(sb_chash_pick(empty, 42, el, load, 0, C), -1);
    sb_chash_free(empty);
}

/* Endpoints the ring does not know (n larger than the ring) are never picked. */
static void test_pick_ignores_unknown_endpoints(void **state)
{
    make_ids(2);
    sb_chash *ring = sb_chash_new(ids, 2, 16);
    bool el[4] = {false, false, true, true};
    uint32_t load[4] = {0};
    assert_int_equal(sb_chash_pick(ring, 42, el, load, 4, C), -1);
    el[1] = true;
    assert_int_equal(sb_chash_pick(ring, 42, el, load, 4, C), 1);
    sb_chash_free(ring);
}

static void test_load_bound(void **state)
{
    assert_int_equal(sb_chash_load_bound(0, 4, 1.25), 1);  /* ceil(1.25 * 1 / 4) */
    assert_int_equal(sb_chash_load_bound(3, 4, 1.25), 2);  /* ceil(5 / 4) */
    assert_int_equal(sb_chash_load_bound(7, 4, 1.25), 3);  /* ceil(10 / 4) */
    assert_int_equal(sb_chash_load_bound(15, 5, 1.25), 4); /* exactly 4 */
    assert_int_equal(sb_chash_load_bound(49, 5, 1.1), 11); /* exactly 11, where a float ceil gives 12 */
    assert_int_equal(sb_chash_load_bound(999, 8, 1.25), 157);
    assert_int_equal(sb_chash_load_bound(7, 8, 0.5), 1); /* c < 1 is 1 */
    assert_int_equal(sb_chash_load_bound(7, 8, NAN), 1);
    assert_int_equal(sb_chash_load_bound(5, 0, 1.25), 0);
}

/* A hot key (every request the same key) over 8 endpoints, 1000 sequential assignments with
 * completions in between: every assignment respects the bound at its time, the owner takes
 * the request whenever it is under the bound, and the overflow goes to the endpoints next on
 * the ring, in ring order. */
static void test_hot_key_bounded(void **state)
{
    size_t n = 8;
    make_ids(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    bool el[MAXN];
    uint32_t load[MAXN] = {0};
    size_t assigned[MAXN] = {0};
    for (size_t i = 0; i < n; i++)
        el[i] = true;
    uint64_t key = 0xfeedface, s = 5, total = 0;
    int owner = sb_chash_owner(ring, key);
    for (int step = 0; step < 1000; step++) {
        /* A request completes 40% of the time, uniformly among those in flight. */
        if (total && sb_rand_unit(&s) < 0.4) {
            uint64_t r = next_key(&s) % total;
            size_t e = 0;
            while (r >= load[e])
                r -= load[e++];
            load[e]--;
            total--;
        }
        uint64_t bound = sb_chash_load_bound(total, n, C);
        int p = sb_chash_pick(ring, key, el, load, n, C);
        assert_true(p >= 0);
        assert_true(load[p] + 1 <= bound);
        if (load[owner] + 1 <= bound)
            assert_int_equal(p, owner);
        else {
            /* The first endpoint clockwise that is under the bound. */
            uint64_t allowed = 0;
            for (size_t i = 0; i < n; i++)
                if (load[i] + 1 <= bound)
                    allowed |= 1ULL << i;
            assert_int_equal(p, sb_chash_first(ring, key, &allowed));
        }
        load[p]++;
        assigned[p]++;
        total++;
    }
    /* Requests arrive faster than they complete, so every endpoint ends up near the bound and
     * the owner's share of the traffic approaches the others'; it still takes at least its
     * fair share, and the last endpoint clockwise is never needed. */
    size_t unused = 0;
    for (size_t i = 0; i < n; i++)
        unused += assigned[i] == 0;
    printf("  hot key: owner took %zu of 1000, %zu endpoints never needed, %zu in flight at the end\n", assigned[owner],
           unused, (size_t)total);
    assert_true(assigned[owner] >= 1000 / n);

    /* No completions: the load can only grow, and never past ceil(c * average). */
    memset(load, 0, sizeof(load));
    for (int step = 0; step < 1000; step++) {
        int p = sb_chash_pick(ring, key, el, load, n, C);
        load[p]++;
        for (size_t i = 0; i < n; i++)
            assert_true(load[i] <= sb_chash_load_bound((uint64_t)step, n, C));
    }
    uint32_t max = 0;
    for (size_t i = 0; i < n; i++)
        max = load[i] > max ? load[i] : max;
    assert_int_equal(max, 157); /* ceil(1.25 * 1000 / 8): the owner fills to the bound */
    assert_int_equal(load[owner], 157);
    sb_chash_free(ring);
}

static void test_limits_and_alloc_failure(void **state)
{
    make_ids(8);
    assert_null(sb_chash_new(ids, 8, SB_CHASH_MAX_VNODES + 1));
    sb_chash *ring = sb_chash_new(ids, 8, 1);
    assert_non_null(ring);
    assert_int_equal(sb_chash_vnodes(ring), 1);
    sb_chash_free(ring);
    sb_chash_free(NULL);
    for (long k = 0; k < 4; k++) {
        sb_alloc_fail_after(k);
        ring = sb_chash_new(ids, 8, 0);
        sb_alloc_fail_after(-1);
        assert_null(ring); /* four allocations; the sanitizer checks nothing leaked */
    }
}

/* ---- the scorers ---- */

static sb_endpoint eps[MAXN];
static sb_candidate cands[MAXN];

static void scorer_setup(size_t n)
{
    memset(eps, 0, sizeof(eps));
    for (size_t i = 0; i < n; i++) {
        eps[i].index = (uint32_t)i;
        cands[i] = (sb_candidate){.ep = &eps[i], .slot = (int32_t)i};
    }
}

static size_t count_ones(const double *out, size_t n, size_t *which)
{
    size_t ones = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(out[i] == 0.0 || out[i] == 1.0);
        if (out[i] == 1.0) {
            ones++;
            *which = i;
        }
    }
    return ones;
}

static void test_scorer_abstains(void **state)
{
    size_t n = 4;
    make_ids(n);
    scorer_setup(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    double out[MAXN];
    sb_sched_request req = {.session_key = 0, .prefix_key = 0};
    sb_sched_ctx ctx = {.ring = ring};
    sb_scorer_session.score(&ctx, &req, cands, n, out);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 1.0);
    /* A key but no ring: still neutral. */
    ctx.ring = NULL;
    req.session_key = 77;
    sb_scorer_session.score(&ctx, &req, cands, n, out);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 1.0);
    assert_int_equal(sb_scorer_session.category, SB_AFFINITY);
    assert_int_equal(sb_scorer_prefix_hash.category, SB_AFFINITY);
    assert_string_equal(sb_scorer_session.name, "session");
    assert_string_equal(sb_scorer_prefix_hash.name, "prefix-hash");
    sb_chash_free(ring);
}

/* One candidate scores 1: the bounded pick among the candidates given (a filtered subset),
 * with in-flight as load; each scorer reads its own key. */
static void test_scorer_picks_bounded_owner(void **state)
{
    size_t n = 8;
    make_ids(n);
    scorer_setup(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    sb_sched_ctx ctx = {.ring = ring};
    uint64_t s = 21;
    for (size_t i = 0; i < n; i++)
        eps[i].in_flight = (uint32_t)(next_key(&s) % 4);
    /* Candidates: endpoints 1, 2, 4, 5, 7 (as a filter would leave them). */
    sb_candidate live[MAXN];
    size_t m = 0;
    bool el[MAXN] = {false};
    uint32_t load[MAXN];
    for (size_t i = 0; i < n; i++) {
        load[i] = eps[i].in_flight;
        if (i % 3 != 0) {
            live[m++] = cands[i];
            el[i] = true;
        }
    }
    double out[MAXN];
    for (int k = 0; k < 2000; k++) {
        uint64_t key = next_key(&s) | 1;
        int want = sb_chash_pick(ring, key, el, load, n, C);
        size_t which = 0;
        sb_sched_request req = {.session_key = key, .prefix_key = 0};
        sb_scorer_session.score(&ctx, &req, live, m, out);
        assert_int_equal(count_ones(out, m, &which), 1);
        assert_int_equal(live[which].ep->index, (uint32_t)want);
        /* prefix-hash ignores the session key... */
        sb_scorer_prefix_hash.score(&ctx, &req, live, m, out);
        for (size_t i = 0; i < m; i++)
            assert_true(out[i] == 1.0);
        /* ...and reads the prefix key. */
        req = (sb_sched_request){.prefix_key = key};
        sb_scorer_prefix_hash.score(&ctx, &req, live, m, out);
        assert_int_equal(count_ones(out, m, &which), 1);
        assert_int_equal(live[which].ep->index, (uint32_t)want);
    }
    sb_chash_free(ring);
}

/* A whole decision with the session scorer alone: one hot session over 4 endpoints with
 * dispatches counted as in-flight sticks to its owner, and spills only past the bound. */
static void test_session_decision_spills_at_bound(void **state)
{
    size_t n = 4;
    make_ids(n);
    scorer_setup(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    sb_profile prof;
    sb_profile_init(&prof, "session-hash");
    prof.scorers[prof.n_scorers++] = (sb_weighted_scorer){&sb_scorer_session, 1};
    uint64_t rng = 1;
    sb_sched_ctx ctx = {.now = SB_MS(1000), .stale_ns = SB_MS(1000), .rng = &rng, .profile = &prof, .ring = ring};
    sb_candidate dc[MAXN], dl[MAXN];
    double scores[MAXN * SB_MAX_SCORERS];
    sb_decision d = {.cands = dc, .live = dl, .scores = scores};
    sb_sched_request req = {.session_key = 0xabcdef};
    int owner = sb_chash_owner(ring, req.session_key);
    for (uint32_t step = 0; step < 40; step++) {
        int p = sb_sched_run(&ctx, &req, eps, n, &d);
        assert_true(p >= 0);
        uint64_t bound = sb_chash_load_bound(step, n, C);
        if (eps[owner].in_flight + 1 <= bound)
            assert_int_equal(p, owner);
        assert_true(eps[p].in_flight + 1 <= bound);
        eps[p].in_flight++;
    }
    assert_int_equal(eps[owner].in_flight, 13); /* ceil(1.25 * 40 / 4) */
    sb_chash_free(ring);
}

/* cold-prefix: a prompt no candidate holds any block of scores like prefix-hash (the bounded
 * owner of its prefix key, so gateway replicas agree where a new prefix goes); as soon as one
 * candidate holds a block, or for a prompt without blocks, every candidate scores 1. Found by
 * name in the registry, as a profile would name it. */
static void test_cold_prefix_only_when_cold(void **state)
{
    size_t n = 8;
    make_ids(n);
    scorer_setup(n);
    sb_chash *ring = sb_chash_new(ids, n, 0);
    const sb_scorer_def *cold = sb_scorer_find("cold-prefix");
    assert_non_null(cold);
    assert_ptr_equal(cold, &sb_scorer_cold_prefix);
    assert_int_equal(cold->category, SB_AFFINITY);
    uint32_t match[MAXN] = {0};
    uint64_t blocks[4] = {1, 2, 3, 4};
    sb_sched_ctx ctx = {.ring = ring, .prefix_match = match, .prefix_blocks = 4};
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++)
        eps[i].in_flight = (uint32_t)(next_key(&s) % 3);
    bool el[MAXN];
    uint32_t load[MAXN];
    for (size_t i = 0; i < n; i++) {
        el[i] = true;
        load[i] = eps[i].in_flight;
    }
    double out[MAXN];
    size_t which = 0;
    for (int k = 0; k < 500; k++) {
        uint64_t key = next_key(&s) | 1;
        sb_sched_request req = {.prefix_key = key, .block_hashes = blocks, .n_blocks = 4};
        memset(match, 0, sizeof(match));
        cold->score(&ctx, &req, cands, n, out);
        assert_int_equal(count_ones(out, n, &which), 1);
        assert_int_equal(which, (size_t)sb_chash_pick(ring, key, el, load, n, C));
        /* Warm: one endpoint (not necessarily the owner) holds the first block. */
        match[k % n] = 1;
        cold->score(&ctx, &req, cands, n, out);
        for (size_t i = 0; i < n; i++)
            assert_true(out[i] == 1.0);
    }
    /* No blocks (a prompt under one block): nothing to place. */
    memset(match, 0, sizeof(match));
    sb_sched_request tiny = {.prefix_key = 99};
    cold->score(&ctx, &tiny, cands, n, out);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 1.0);
    sb_chash_free(ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distribution_4),
        cmocka_unit_test(test_distribution_16),
        cmocka_unit_test(test_sequential_keys_spread),
        cmocka_unit_test(test_remove_moves_only_its_keys),
        cmocka_unit_test(test_add_moves_only_to_newcomer),
        cmocka_unit_test(test_order_independent),
        cmocka_unit_test(test_eligible_mask),
        cmocka_unit_test(test_nothing_eligible),
        cmocka_unit_test(test_pick_ignores_unknown_endpoints),
        cmocka_unit_test(test_load_bound),
        cmocka_unit_test(test_hot_key_bounded),
        cmocka_unit_test(test_limits_and_alloc_failure),
        cmocka_unit_test(test_scorer_abstains),
        cmocka_unit_test(test_scorer_picks_bounded_owner),
        cmocka_unit_test(test_session_decision_spills_at_bound),
        cmocka_unit_test(test_cold_prefix_only_when_cold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
