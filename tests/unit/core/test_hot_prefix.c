/* Tests core/hot_prefix (which leading run of a prompt is in demand beyond one endpoint's fair
 * share) and the prefix scorer's use of it: a system prompt every request shares is hot and
 * needs every endpoint; a conversation's own history, or one of 32 groups' prefixes over 8
 * endpoints, is not; demand decays when traffic stops; the table stays its size; a holder of a
 * hot run keeps only holders / needed of its credit. Time is passed in, never read. */
#include "sb_test.h"

#include "base/time.h"
#include "core/hot_prefix.h"
#include "core/sched.h"

extern const sb_scorer_def sb_scorer_prefix;

#define EPS 8
#define MS 1000000ULL

/* Chained hashes of a prompt: `shared` blocks common to its group, then `own` blocks of its
 * own. A chained hash depends on every block before it, as the router's do. */
static size_t prompt(uint64_t *h, uint64_t group, size_t shared, uint64_t own_id, size_t own)
{
    uint64_t x = 0x9E3779B97F4A7C15ULL * (group + 1);
    size_t n = 0;
    for (size_t i = 0; i < shared; i++)
        h[n++] = x = x * 6364136223846793005ULL + 1442695040888963407ULL + i;
    for (size_t i = 0; i < own; i++)
        h[n++] = x = x * 6364136223846793005ULL + own_id * 2654435761ULL + i + 1;
    return n;
}

/* 30 requests/s for 20 s, each a shared 62-block prefix then 13 blocks of its own. */
static void test_shared_system_prompt_is_hot(void **state)
{
    (void)state;
    sb_hot_prefix *hp = sb_hot_prefix_new(4096, 0x5ec7e7);
    assert_non_null(hp);
    uint64_t h[128];
    size_t hot = 0;
    double needed = 0;
    for (int i = 0; i < 600; i++) {
        size_t n = prompt(h, 0, 62, (uint64_t)i, 13);
        hot = sb_hot_prefix_observe(hp, h, n, (sb_ns)i * 33 * MS, EPS, 1.0, &needed);
    }
    /* The longest ladder length inside 62 blocks is 48; every request asks for it, so it
     * needs all eight endpoints. */
    assert_int_equal(hot, 48);
    assert_true(needed > 7.9 && needed < 8.1);
    sb_hot_prefix_free(hp);
}

/* The same traffic with 32 group prompts instead of one: each group is a 32nd of the pool's
 * requests, under an eighth, so none is hot; at share 0.2 (a fifth of a fair share) each is. */
static void test_groups_under_fair_share_are_not_hot(void **state)
{
    (void)state;
    sb_hot_prefix *hp = sb_hot_prefix_new(4096, 0x5ec7e7);
    uint64_t h[128];
    double needed = 0;
    for (int i = 0; i < 2000; i++) {
        size_t n = prompt(h, (uint64_t)(i % 32), 62, (uint64_t)i, 13);
        assert_int_equal(sb_hot_prefix_observe(hp, h, n, (sb_ns)i * 33 * MS, EPS, 1.0, &needed), 0);
    }
    size_t n = prompt(h, 5, 62, 99999, 13);
    assert_int_equal(sb_hot_prefix_observe(hp, h, n, 2000ULL * 33 * MS, EPS, 0.2, &needed), 48);
    assert_true(needed > 0.2 && needed < 0.35);
    sb_hot_prefix_free(hp);
}

/* A conversation's history: its turns come every few seconds among the pool's 30 requests/s,
 * never near a fair share. */
static void test_conversation_history_is_not_hot(void **state)
{
    (void)state;
    sb_hot_prefix *hp = sb_hot_prefix_new(4096, 0x5ec7e7);
    uint64_t h[256];
    double needed = 0;
    for (int i = 0; i < 900; i++) {
        sb_ns now = (sb_ns)i * 33 * MS;
        size_t n;
        if (i % 100 == 0) /* the conversation's next turn: its history grows */
            n = prompt(h, 7, 0, 424242, 20 + (size_t)i / 10);
        else
            n = prompt(h, 1000 + (uint64_t)i, 0, (uint64_t)i, 20);
        assert_int_equal(sb_hot_prefix_observe(hp, h, n, now, EPS, 1.0, &needed), 0);
    }
    sb_hot_prefix_free(hp);
}

/* K conversations on 8 endpoints, each a turn a second, each turn's history 10 blocks longer
 * than the last: a conversation is over a fair share of such a pool when K <= 8, but its turns
 * come one after another. A quiet pool (K = 1, 2: under 4 requests an endpoint) finds nothing
 * hot; at K = 8 no history is. At K = 4 the earlier turns that ended inside a long rung of the
 * ladder count as branching, and a rung of a history is sometimes found hot (35 of 160 picks
 * here), but with needed under 2: its holder keeps over half of that run's credit. A known
 * limit of counting by rate, not concurrency (docs/routing.md, "Hot prefixes"). */
static void test_few_conversations_are_never_hot(void **state)
{
    (void)state;
    static const unsigned ks[] = {1, 2, 4, 8};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        sb_hot_prefix *hp = sb_hot_prefix_new(4096, 0x5ec7e7);
        uint64_t h[512];
        double needed = 0;
        for (unsigned turn = 0; turn < 40; turn++)
            for (unsigned k = 0; k < ks[t]; k++) {
                size_t n = prompt(h, 300 + k, 0, 77 + k, 10 + 10 * (size_t)turn);
                sb_ns now = (sb_ns)turn * 1000 * MS + (sb_ns)k * (1000 / ks[t]) * MS;
                size_t hot = sb_hot_prefix_observe(hp, h, n, now, EPS, 1.0, &needed);
                if (ks[t] != 4)
                    assert_int_equal(hot, 0);
                else if (hot)
                    assert_true(needed < 2.0);
            }
        sb_hot_prefix_free(hp);
    }
}

/* Demand decays: a minute after the shared prompt's traffic stopped, it is not hot. */
static void test_demand_decays(void **state)
{
    (void)state;
    sb_hot_prefix *hp = sb_hot_prefix_new(4096, 0x5ec7e7);
    uint64_t h[128];
    double needed = 0;
    size_t n = 0;
    for (int i = 0; i < 600; i++) {
        n = prompt(h, 0, 62, (uint64_t)i, 13);
        sb_hot_prefix_observe(hp, h, n, (sb_ns)i * 33 * MS, EPS, 1.0, &needed);
    }
    assert_int_equal(sb_hot_prefix_observe(hp, h, n, 20000 * MS, EPS, 1.0, &needed), 48);
    assert_int_equal(sb_hot_prefix_observe(hp, h, n, 80000 * MS, EPS, 1.0, &needed), 0);
    assert_true(needed == 0);
    sb_hot_prefix_free(hp);
}

/* Many distinct prompts: the table keeps its size, and a hot prefix among them stays found
 * (the replaced slots are those asked for once). */
static void test_bounded_and_hot_survives_churn(void **state)
{
    (void)state;
    sb_hot_prefix *hp = sb_hot_prefix_new(256, 0x5ec7e7);
    size_t bytes = sb_hot_prefix_bytes(hp);
    uint64_t h[128];
    double needed = 0;
    size_t hot = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = i % 2 ? prompt(h, 0, 62, (uint64_t)i, 13) : prompt(h, 5000 + (uint64_t)i, 60, (uint64_t)i, 13);
        size_t k = sb_hot_prefix_observe(hp, h, n, (sb_ns)i * 10 * MS, EPS, 1.0, &needed);
        if (i % 2)
            hot = k;
    }
    assert_int_equal(sb_hot_prefix_bytes(hp), bytes);
    assert_int_equal(hot, 48);
    assert_int_equal(sb_hot_prefix_observe(NULL, h, 3, 0, EPS, 1.0, &needed), 0);
    sb_hot_prefix_free(hp);
}

/* Peek answers as observe would without counting: on a fresh table nothing (and writes
 * nothing), and peeking between observes changes none of what they return. */
static void test_peek_counts_nothing(void **state)
{
    (void)state;
    sb_hot_prefix *a = sb_hot_prefix_new(4096, 9), *b = sb_hot_prefix_new(4096, 9);
    uint64_t h[128];
    double na, nb;
    size_t n0 = prompt(h, 0, 62, 0, 13);
    assert_int_equal(sb_hot_prefix_peek(b, h, n0, 0, EPS, 1.0, &nb), 0);
    assert_float_equal(nb, 0.0, 1e-12);
    size_t hot_seen = 0;
    for (int i = 0; i < 400; i++) {
        size_t n = prompt(h, 0, 62, (uint64_t)i, 13); /* as test_shared_system_prompt_is_hot */
        sb_ns now = (sb_ns)i * 33 * MS;
        for (int k = 0; k < 3; k++)
            sb_hot_prefix_peek(b, h, n, now, EPS, 1.0, &nb);
        size_t ka = sb_hot_prefix_observe(a, h, n, now, EPS, 1.0, &na);
        size_t kb = sb_hot_prefix_observe(b, h, n, now, EPS, 1.0, &nb);
        assert_int_equal(ka, kb);
        assert_float_equal(na, nb, 1e-9);
        /* A peek right after answers as the observe did. */
        assert_int_equal(sb_hot_prefix_peek(b, h, n, now, EPS, 1.0, &nb), kb);
        assert_float_equal(na, nb, 1e-6);
        hot_seen += ka > 0;
    }
    assert_true(hot_seen > 300); /* the comparison covered hot answers, not only zeros */
    sb_hot_prefix_free(a);
    sb_hot_prefix_free(b);
}

/* The prefix scorer: one holder of a hot 48-block run (of a 75-block prompt: a 62-block system
 * prompt, found hot up to the ladder's 48) that needs 8 holders keeps an eighth of the run's
 * credit; with eight holders, all of it. A match reaching the next ladder length (64) holds
 * the request's own continuation, a conversation's history: never discounted, and where one
 * endpoint holds it, the run counts for nothing on the others. */
static void test_prefix_scorer_discounts_scarce_hot_run(void **state)
{
    (void)state;
    sb_endpoint eps[EPS] = {0};
    sb_candidate c[EPS] = {0};
    uint32_t match[EPS] = {0};
    for (uint32_t i = 0; i < EPS; i++) {
        eps[i].index = i;
        c[i].ep = &eps[i];
    }
    match[0] = 62;
    sb_sched_ctx ctx = {.prefix_match = match, .prefix_blocks = 75, .hot_blocks = 48, .hot_needed = 8};
    sb_sched_request req = {0};
    double out[EPS];
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], (62 - 48 * 7.0 / 8) / 75, 1e-9);
    assert_float_equal(out[1], 0.0, 1e-12);
    /* A follow-up: endpoint 1 holds its history (70 blocks, past 64), endpoint 0 the system
     * prompt alone. The request is not placing the hot run but deciding whether to leave its
     * history: endpoint 1 keeps all its match, endpoint 0 only what it holds past the run. */
    match[1] = 70;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], (62 - 48) / 75.0, 1e-9);
    assert_float_equal(out[1], 70.0 / 75, 1e-9);
    /* ...with the run held by all the holders it needs, as well. */
    ctx.hot_needed = 2;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], (62 - 48) / 75.0, 1e-9);
    assert_float_equal(out[1], 70.0 / 75, 1e-9);
    ctx.hot_needed = 8;
    match[1] = 63; /* short of the next ladder length: as shared as the system prompt */
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[1], (63 - 48 * 6.0 / 8) / 75, 1e-9);
    assert_float_equal(out[0], (62 - 48 * 6.0 / 8) / 75, 1e-9);
    match[1] = 64; /* at it */
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[1], 64.0 / 75, 1e-9);
    assert_float_equal(out[0], (62 - 48) / 75.0, 1e-9);
    /* A 60-block prompt (between 48 and 64: the ladder's last length is the prompt's own):
     * holding all of it is holding past the hot run. */
    ctx.prefix_blocks = 60;
    match[0] = 55;
    match[1] = 60;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[1], 1.0, 1e-9);
    assert_float_equal(out[0], (55 - 48) / 60.0, 1e-9);
    ctx.prefix_blocks = 75;
    match[1] = 0;
    assert_int_equal(sb_hot_prefix_next_length(48), 64);
    assert_int_equal(sb_hot_prefix_next_length(64), 96);
    assert_int_equal(sb_hot_prefix_next_length(3), 4);
    /* Every endpoint holds the run, endpoint 0 the whole prompt: the run decides nothing. */
    match[0] = 75;
    for (uint32_t i = 1; i < EPS; i++)
        match[i] = 48;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], 1.0, 1e-9);
    assert_float_equal(out[1], 0.0, 1e-12);
    /* A first turn (nobody holds past the run) held by all 8: the whole run's credit. */
    match[0] = 50;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], 50.0 / 75, 1e-9);
    assert_float_equal(out[1], 48.0 / 75, 1e-9);
    match[0] = 75;
    /* Nobody holds the whole run (its only holder filtered out, say): the longest match among
     * the candidates stands for it, not a cliff to nothing. */
    for (uint32_t i = 0; i < EPS; i++)
        match[i] = i < 2 ? 20 : 0;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], 20 * 2.0 / 8 / 75, 1e-9);
    assert_float_equal(out[1], out[0], 1e-12);
    assert_float_equal(out[2], 0.0, 1e-12);
    match[0] = 75;
    ctx.hot_blocks = 0; /* off: the plain fraction */
    match[1] = 0;
    sb_scorer_prefix.score(&ctx, &req, c, EPS, out);
    assert_float_equal(out[0], 1.0, 1e-9);
    assert_float_equal(out[1], 0.0, 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_system_prompt_is_hot),
        cmocka_unit_test(test_groups_under_fair_share_are_not_hot),
        cmocka_unit_test(test_conversation_history_is_not_hot),
        cmocka_unit_test(test_few_conversations_are_never_hot),
        cmocka_unit_test(test_demand_decays),
        cmocka_unit_test(test_bounded_and_hot_survives_churn),
        cmocka_unit_test(test_peek_counts_nothing),
        cmocka_unit_test(test_prefix_scorer_discounts_scarce_hot_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
