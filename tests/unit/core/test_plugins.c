/* Tests core/plugins and the plug-ins it registers: each filter, scorer and picker on
 * hand-built candidates, the registry, and the built-in profiles' composition. */
#include "sb_test.h"

#include <math.h>

#include "core/sched.h"

#define T0 SB_MS(10000)
#define STALE SB_MS(1000)
#define MAXN 8

static sb_endpoint eps[MAXN];
static sb_candidate cands[MAXN];
static sb_profile prof;
static uint64_t rng;
static sb_sched_ctx ctx;

/* n fresh endpoints (reported at T0, nothing waiting) as candidates, and a context at T0. */
static void setup(size_t n)
{
    memset(eps, 0, sizeof(eps));
    memset(cands, 0, sizeof(cands));
    for (size_t i = 0; i < n; i++) {
        eps[i].index = (uint32_t)i;
        sb_endpoint_report r = {.have_waiting = true, .have_running = true, .have_kv = true,
                                .requests_total = -1};
        sb_endpoint_report_set(&eps[i], &r, SB_REPORT_SCRAPE, T0);
        cands[i] = (sb_candidate){.ep = &eps[i], .slot = (int32_t)i};
    }
    sb_profile_init(&prof, "test");
    rng = 12345;
    ctx = (sb_sched_ctx){.now = T0, .stale_ns = STALE, .rng = &rng, .profile = &prof};
}

static const sb_filter_def *filter(const char *name)
{
    const sb_filter_def *f = sb_filter_find(name);
    assert_non_null(f);
    return f;
}

static void score(const char *name, const sb_sched_request *req, size_t n, double *out)
{
    const sb_scorer_def *s = sb_scorer_find(name);
    assert_non_null(s);
    s->score(&ctx, req, cands, n, out);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] >= 0.0 && out[i] <= 1.0);
}

static const sb_sched_request base_req = {.adapter = -1};

/* ---- registry and built-in profiles ---- */

static void test_registry(void **state)
{
    (void)state;
    const char *f[] = {"healthy", "lora", "saturation", "labels", "gate"};
    const char *s[] = {"queue",         "running",     "kv-cache", "in-flight", "pending-prefill",
                       "lora-affinity", "sent-tokens", "lru",      "kv-room"};
    const char *p[] = {"max-score", "weighted-random", "p2c", "softmax", "round-robin"};
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(filter(f[i])->name, f[i]);
    for (size_t i = 0; i < 9; i++) {
        const sb_scorer_def *d = sb_scorer_find(s[i]);
        assert_non_null(d);
        assert_int_equal(d->category, !strcmp(s[i], "lora-affinity") ? SB_AFFINITY : SB_DISTRIBUTION);
    }
    for (size_t i = 0; i < 5; i++)
        assert_non_null(sb_picker_find(p[i]));
    assert_null(sb_filter_find("queue"));
    assert_null(sb_scorer_find("healthy"));
    assert_null(sb_picker_find("random"));
    size_t n = 0;
    for (const sb_filter_def *const *it = sb_filters_all(); *it; it++)
        n++;
    assert_int_equal(n, 5);
    n = 0;
    for (const sb_scorer_def *const *it = sb_scorers_all(); *it; it++)
        n++;
    assert_int_equal(n, 16);
    n = 0;
    for (const sb_picker_def *const *it = sb_pickers_all(); *it; it++)
        n++;
    assert_int_equal(n, 5);
}

static double weight_of(const sb_profile *p, const char *scorer)
{
    for (size_t i = 0; i < p->n_scorers; i++)
        if (!strcmp(p->scorers[i].def->name, scorer))
            return p->scorers[i].weight;
    return 0;
}

static void test_builtin_profiles(void **state)
{
    (void)state;
    const char *const *names = sb_profile_builtin_names();
    size_t n = 0;
    for (; names[n]; n++) {
        const sb_profile *p = sb_profile_builtin(names[n]);
        assert_non_null(p);
        assert_string_equal(p->name, names[n]);
        assert_non_null(p->picker);
        /* Every built-in profile starts by dropping unhealthy endpoints. */
        assert_true(p->n_filters >= 1);
        assert_string_equal(p->filters[0]->name, "healthy");
    }
    assert_int_equal(n, 9);
    assert_null(sb_profile_builtin("prefix-only-typo"));

    /* paddler: the most free slots, with Paddler's buffer (30, 10 s, 503, 504) and the slots
     * gate; the others carry no buffer. */
    const sb_profile *pd = sb_profile_builtin("paddler");
    assert_true(weight_of(pd, "slots") > weight_of(pd, "in-flight"));
    assert_true(sb_profile_slots_gate(pd));
    assert_int_equal(pd->buffer_max_queued, 30);
    assert_int_equal(pd->buffer_max_wait_ms, 10000);
    assert_int_equal(pd->buffer_full_status, 503);
    assert_int_equal(pd->buffer_timeout_status, 504);
    for (size_t i = 0; names[i]; i++)
        if (strcmp(names[i], "paddler") != 0)
            assert_int_equal(sb_profile_builtin(names[i])->buffer_max_queued, 0);

    const sb_profile *rr = sb_profile_builtin("round-robin");
    assert_string_equal(rr->picker->name, "round-robin");
    assert_int_equal(rr->n_filters, 1);
    assert_int_equal(rr->n_scorers, 0);

    const sb_profile *lr = sb_profile_builtin("least-request");
    assert_int_equal(lr->n_scorers, 1);
    assert_string_equal(lr->scorers[0].def->name, "in-flight");
    assert_string_equal(lr->picker->name, "max-score");

    const sb_profile *lo = sb_profile_builtin("load-only");
    assert_true(weight_of(lo, "queue") > 0 && weight_of(lo, "kv-cache") > 0);
    for (size_t i = 0; i < lo->n_scorers; i++)
        assert_int_equal(lo->scorers[i].def->category, SB_DISTRIBUTION);

    const sb_profile *d = sb_profile_builtin("default");
    /* The gate filter, not saturation (docs/benchmarks.md section 10). */
    assert_int_equal(d->n_filters, 3);
    assert_string_equal(d->filters[1]->name, "lora");
    assert_string_equal(d->filters[2]->name, "gate");
    assert_true(weight_of(d, "prefix") == 6 && weight_of(d, "queue") == 1 && weight_of(d, "kv-cache") == 1);
    assert_true(weight_of(d, "in-flight") == 1.5 && weight_of(d, "pending-prefill") == 3);
    assert_true(weight_of(d, "sent-tokens") == 2);
    assert_true(weight_of(d, "lora-affinity") > 0);
    assert_string_equal(d->picker->name, "max-score");
    assert_true(d->queue_threshold == 5 && d->kv_threshold == 0.8);
    /* Asking twice gives the same profile. */
    assert_ptr_equal(sb_profile_builtin("default"), d);

    /* default-events: `default` with the prefix weighed less (the precise index's matches pull
     * harder), every other scorer, filter and picker as `default`'s; a pool with KV events that
     * names the built-in `default` routes with it, and only then. */
    const sb_profile *de = sb_profile_builtin("default-events");
    assert_true(weight_of(de, "prefix") < weight_of(d, "prefix") && weight_of(de, "prefix") > 0);
    assert_int_equal(de->n_scorers, d->n_scorers);
    for (size_t i = 0; i < d->n_scorers; i++)
        if (strcmp(d->scorers[i].def->name, "prefix") != 0)
            assert_true(weight_of(de, d->scorers[i].def->name) == d->scorers[i].weight);
    assert_int_equal(de->n_filters, d->n_filters);
    for (size_t i = 0; i < d->n_filters; i++)
        assert_ptr_equal(de->filters[i], d->filters[i]);
    assert_ptr_equal(de->picker, d->picker);
    /* ...and both spread a hot prefix (core/hot_prefix.h) at the same threshold: the events
     * show every gateway the one holder of a prefix all traffic shares, and the approximate
     * index gathers new conversations onto the holders it knows. */
    assert_true(de->hot_prefix == 1.0);
    assert_true(d->hot_prefix == de->hot_prefix);
    assert_ptr_equal(sb_profile_with_events(d), de);
    assert_ptr_equal(sb_profile_with_events(de), de);
    assert_ptr_equal(sb_profile_with_events(lr), lr);
    sb_profile mine;
    sb_profile_init(&mine, "default");
    assert_ptr_equal(sb_profile_with_events(&mine), &mine); /* only the built-in is swapped */
}

/* The built-ins are a constant table written apart from sb_profile_init: their plug-in
 * parameters must stay the defaults that sb_profile_init gives a profile of the same name. */
static void test_builtin_profiles_start_from_defaults(void **state)
{
    (void)state;
    const char *const *names = sb_profile_builtin_names();
    for (size_t n = 0; names[n]; n++) {
        const sb_profile *b = sb_profile_builtin(names[n]);
        sb_profile ref;
        sb_profile_init(&ref, names[n]);
        assert_string_equal(b->name, ref.name);
        assert_true(b->queue_threshold == ref.queue_threshold);
        assert_true(b->kv_threshold == ref.kv_threshold);
        assert_true(b->temperature == ref.temperature);
        assert_int_equal(b->n_labels, 0);
        if (strcmp(names[n], "round-robin"))
            assert_ptr_equal(b->picker, ref.picker);
        for (size_t i = b->n_filters; i < SB_MAX_FILTERS; i++)
            assert_null(b->filters[i]);
        for (size_t i = b->n_scorers; i < SB_MAX_SCORERS; i++)
            assert_null(b->scorers[i].def);
    }
}

static void test_profile_init(void **state)
{
    (void)state;
    sb_profile p;
    memset(&p, 0xab, sizeof(p));
    char long_name[100];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[99] = 0;
    sb_profile_init(&p, long_name);
    assert_int_equal(strlen(p.name), SB_PROFILE_NAME_MAX - 1);
    assert_int_equal(p.n_filters, 0);
    assert_int_equal(p.n_scorers, 0);
    assert_int_equal(p.n_labels, 0);
    assert_string_equal(p.picker->name, "max-score");
    assert_true(p.queue_threshold == 5 && p.kv_threshold == 0.8 && p.temperature == 0.1);
}

/* ---- filters ---- */

static void test_filter_healthy(void **state)
{
    (void)state;
    setup(7);
    eps[1].health = SB_HEALTH_EJECTED;
    eps[1].ejected_until = T0 + 1;
    eps[2].draining = true;
    eps[3].active_down = true;
    eps[4].health = SB_HEALTH_HALF_OPEN;
    eps[4].trial_in_flight = true;
    eps[5].health = SB_HEALTH_HALF_OPEN;   /* no trial out: it may take one */
    eps[6].health = SB_HEALTH_EJECTED;     /* backoff over: half-open now */
    eps[6].ejected_until = T0;
    cands[0].removed_by = NULL;
    filter("healthy")->run(&ctx, &base_req, cands, 7);
    const char *want[] = {NULL, "healthy", "healthy", "healthy", "healthy", NULL, NULL};
    for (size_t i = 0; i < 7; i++) {
        if (want[i])
            assert_string_equal(cands[i].removed_by, want[i]);
        else
            assert_null(cands[i].removed_by);
    }
    assert_false(filter("healthy")->soft);
}

static void test_filter_keeps_earlier_verdict(void **state)
{
    (void)state;
    setup(2);
    cands[0].removed_by = "retry-excluded";
    eps[0].draining = true;
    filter("healthy")->run(&ctx, &base_req, cands, 2);
    assert_string_equal(cands[0].removed_by, "retry-excluded");
    assert_null(cands[1].removed_by);
}

static void set_lora(sb_endpoint *ep, uint32_t max, uint32_t count, uint64_t running, uint64_t waiting)
{
    ep->report.have_lora = true;
    ep->report.max_lora = max;
    ep->report.lora_running_count = count;
    ep->report.lora_running_mask = running;
    ep->report.lora_waiting_mask = waiting;
}

static void test_filter_lora(void **state)
{
    (void)state;
    setup(5);
    set_lora(&eps[0], 2, 2, 1u << 3, 0);   /* adapter 3 loaded, full */
    set_lora(&eps[1], 2, 1, 1u << 0, 0);   /* room for one more */
    set_lora(&eps[2], 2, 2, 3, 1u << 3);   /* full, 3 only waiting */
    /* eps[3]: no LoRA report: unknown is not full */
    set_lora(&eps[4], 0, 5, 0, 0);         /* max unknown: room assumed */
    sb_sched_request req = {.adapter = 3};
    filter("lora")->run(&ctx, &req, cands, 5);
    assert_null(cands[0].removed_by);
    assert_null(cands[1].removed_by);
    assert_string_equal(cands[2].removed_by, "lora");
    assert_null(cands[3].removed_by);
    assert_null(cands[4].removed_by);
    assert_true(filter("lora")->soft);
    /* A base-model request is not filtered. */
    cands[2].removed_by = NULL;
    filter("lora")->run(&ctx, &base_req, cands, 5);
    for (size_t i = 0; i < 5; i++)
        assert_null(cands[i].removed_by);
    /* Adapters past the 64-bit mask: only room counts. */
    req.adapter = 70;
    filter("lora")->run(&ctx, &req, cands, 5);
    assert_string_equal(cands[0].removed_by, "lora");
    assert_null(cands[1].removed_by);
}

static void test_filter_saturation(void **state)
{
    (void)state;
    setup(7);
    eps[0].report.waiting = 5;            /* at the threshold: kept */
    eps[1].report.waiting = 6;            /* over */
    eps[2].report.waiting = 4;            /* 4 reported + 2 sent since = 6: over */
    sb_endpoint_dispatch(&eps[2], 0, T0);
    sb_endpoint_dispatch(&eps[2], 0, T0);
    eps[3].report.kv_usage = 0.81;        /* over */
    eps[4].report.kv_usage = 0.8;         /* at: kept */
    eps[5].report_ns = T0 - STALE - 1;    /* stale (as sb_sched_run marks it) */
    cands[5].stale = true;
    filter("saturation")->run(&ctx, &base_req, cands, 7);
    const bool removed[] = {false, true, true, true, false, true, false};
    for (size_t i = 0; i < 7; i++) {
        if (removed[i])
            assert_string_equal(cands[i].removed_by, "saturation");
        else
            assert_null(cands[i].removed_by);
    }
    assert_true(filter("saturation")->soft);
    /* The profile's thresholds, not constants. */
    setup(2);
    prof.queue_threshold = 1;
    eps[0].report.waiting = 2;
    filter("saturation")->run(&ctx, &base_req, cands, 2);
    assert_non_null(cands[0].removed_by);
    assert_null(cands[1].removed_by);
}

static void test_filter_labels(void **state)
{
    (void)state;
    setup(4);
    const char *k[] = {"zone", "gpu"};
    eps[0].label_keys[0] = "zone", eps[0].label_values[0] = "a";
    eps[0].label_keys[1] = "gpu", eps[0].label_values[1] = "h100";
    eps[0].n_labels = 2;
    eps[1].label_keys[0] = "gpu", eps[1].label_values[0] = "h100";
    eps[1].label_keys[1] = "zone", eps[1].label_values[1] = "a";
    eps[1].n_labels = 2;
    eps[2].label_keys[0] = "zone", eps[2].label_values[0] = "b";
    eps[2].label_keys[1] = "gpu", eps[2].label_values[1] = "h100";
    eps[2].n_labels = 2;
    eps[3].label_keys[0] = "zone", eps[3].label_values[0] = "a"; /* no gpu label */
    eps[3].n_labels = 1;
    prof.label_keys[0] = k[0], prof.label_values[0] = "a";
    prof.label_keys[1] = k[1], prof.label_values[1] = "h100";
    prof.n_labels = 2;
    filter("labels")->run(&ctx, &base_req, cands, 4);
    assert_null(cands[0].removed_by);
    assert_null(cands[1].removed_by);
    assert_string_equal(cands[2].removed_by, "labels");
    assert_string_equal(cands[3].removed_by, "labels");
    assert_false(filter("labels")->soft);
    /* No selector: everything matches. */
    setup(2);
    filter("labels")->run(&ctx, &base_req, cands, 2);
    assert_null(cands[0].removed_by);
    assert_null(cands[1].removed_by);
}

/* ---- scorers ---- */

static void test_scorer_queue_min_max(void **state)
{
    (void)state;
    setup(3);
    double out[MAXN];
    eps[0].report.waiting = 0;
    eps[1].report.waiting = 5;
    eps[2].report.waiting = 10;
    score("queue", &base_req, 3, out);
    assert_true(out[0] == 1.0 && fabs(out[1] - 0.5) < 1e-12 && out[2] == 0.0);
    /* Sent since the report counts as waiting. */
    for (int i = 0; i < 10; i++)
        sb_endpoint_dispatch(&eps[0], 0, T0);
    score("queue", &base_req, 3, out);
    assert_true(out[0] == 0.0 && fabs(out[1] - 1.0) < 1e-12);
    /* Equal loads: 1.0 for all, not 0/0. */
    setup(3);
    score("queue", &base_req, 3, out);
    for (size_t i = 0; i < 3; i++)
        assert_true(out[i] == 1.0);
}

/* sent-tokens: endpoints in different epochs (one idle for a long time, one changed just
 * before the window moved, one just after) score as their decayed sums say: the per-epoch
 * factor the scorer shares is the same number sb_endpoint_sent_tokens computes. */
static void test_scorer_sent_tokens_epochs(void **state)
{
    (void)state;
    setup(3);
    double out[MAXN];
    sb_ns tau = SB_SENT_TOKENS_TAU_NS, boundary = 30 * SB_SENT_EPOCH_NS;
    sb_endpoint_sent_tokens_add(&eps[0], 9000, boundary - 20 * SB_SENT_EPOCH_NS);
    sb_endpoint_sent_tokens_add(&eps[1], 20000, boundary - tau);
    sb_endpoint_sent_tokens_add(&eps[2], 12000, boundary + tau / 2);
    assert_true(eps[1].sent_epoch_ns != eps[2].sent_epoch_ns);
    sb_ns saved = ctx.now;
    ctx.now = boundary + tau;
    score("sent-tokens", &base_req, 3, out);
    double v[3], lo = 1e300, hi = 0;
    for (size_t i = 0; i < 3; i++) {
        v[i] = sb_endpoint_sent_tokens(&eps[i], ctx.now);
        lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    }
    assert_true(v[0] < 1e-6);      /* long gone */
    for (size_t i = 0; i < 3; i++) /* min-max, lower is better (the range exceeds the minimum) */
        assert_float_equal(out[i], (hi - v[i]) / (hi - lo), 1e-9);
    ctx.now = saved;
}

static void test_scorers_stale_zeroed(void **state)
{
    (void)state;
    /* kv-cache is absolute (1 - usage): see test_scorer_running_and_kv. */
    const char *report_based[] = {"queue", "running"};
    for (size_t s = 0; s < 2; s++) {
        setup(3);
        double out[MAXN];
        /* Differences above the scorers' minimum range (4), so min-max applies as is. */
        eps[0].report.waiting = 0, eps[0].report.running = 0, eps[0].report.kv_usage = 0;
        eps[1].report.waiting = 2, eps[1].report.running = 2, eps[1].report.kv_usage = 0.2;
        eps[2].report.waiting = 8, eps[2].report.running = 8, eps[2].report.kv_usage = 0.4;
        cands[0].stale = true; /* the least loaded, per an old report */
        score(report_based[s], &base_req, 3, out);
        /* Stale scores as the most loaded and drops out of the normalisation. */
        assert_true(out[0] == 0.0);
        assert_true(out[1] == 1.0);
        assert_true(out[2] == 0.0);
        /* All stale: all 0. */
        cands[1].stale = cands[2].stale = true;
        score(report_based[s], &base_req, 3, out);
        for (size_t i = 0; i < 3; i++)
            assert_true(out[i] == 0.0);
    }
}

static void test_scorer_running_and_kv(void **state)
{
    (void)state;
    setup(3);
    double out[MAXN];
    eps[0].report.running = 8, eps[1].report.running = 2, eps[2].report.running = 4;
    score("running", &base_req, 3, out);
    assert_true(out[0] == 0.0 && out[1] == 1.0 && fabs(out[2] - 2.0 / 3) < 1e-12);
    /* KV is scored absolutely, 1 - usage (GIE's KV scorer), not ranked: a small difference
     * stays a small difference. Stale: 0. */
    eps[0].report.kv_usage = 0.1, eps[1].report.kv_usage = 0.9, eps[2].report.kv_usage = 0.5;
    score("kv-cache", &base_req, 3, out);
    assert_true(fabs(out[0] - 0.9) < 1e-12 && fabs(out[1] - 0.1) < 1e-12 && fabs(out[2] - 0.5) < 1e-12);
    eps[0].report.kv_usage = 0.100, eps[1].report.kv_usage = 0.101;
    score("kv-cache", &base_req, 3, out);
    assert_true(fabs(out[0] - out[1]) < 0.002);
    cands[2].stale = true;
    score("kv-cache", &base_req, 3, out);
    assert_true(out[2] == 0.0);
}

static void test_scorers_own_accounting_never_stale(void **state)
{
    (void)state;
    setup(3);
    double out[MAXN];
    sb_endpoint_dispatch(&eps[1], 500, T0);
    sb_endpoint_dispatch(&eps[2], 250, T0);
    sb_endpoint_dispatch(&eps[2], 250, T0);
    for (size_t i = 0; i < 3; i++)
        cands[i].stale = true;
    /* Loads 0, 1, 2 in-flight: under the minimum range of 4, one request costs a quarter. */
    score("in-flight", &base_req, 3, out);
    assert_true(out[0] == 1.0 && fabs(out[1] - 0.75) < 1e-12 && fabs(out[2] - 0.5) < 1e-12);
    /* Pending prefill 0, 500, 500 tokens over a minimum range of 4096. */
    score("pending-prefill", &base_req, 3, out);
    assert_true(out[0] == 1.0 && fabs(out[1] - (1 - 500.0 / 4096)) < 1e-12 && fabs(out[2] - out[1]) < 1e-12);
    /* Beyond the minimum range, plain min-max. */
    for (int i = 0; i < 8; i++)
        sb_endpoint_dispatch(&eps[2], 1000, T0);
    score("in-flight", &base_req, 3, out);
    assert_true(out[0] == 1.0 && fabs(out[1] - 0.9) < 1e-12 && out[2] == 0.0);
    /* Equal: 1.0. */
    setup(2);
    score("in-flight", &base_req, 2, out);
    assert_true(out[0] == 1.0 && out[1] == 1.0);
    score("pending-prefill", &base_req, 2, out);
    assert_true(out[0] == 1.0 && out[1] == 1.0);
    /* sent-tokens: 0 and 2048 tokens, read at the time of sending (the scorer's ctx.now):
     * half the minimum range. */
    sb_endpoint_sent_tokens_add(&eps[1], 2048, T0);
    score("sent-tokens", &base_req, 2, out);
    assert_true(out[0] == 1.0 && fabs(out[1] - 0.5) < 1e-12);
}

static void test_scorer_lora_affinity_ladder(void **state)
{
    (void)state;
    setup(6);
    double out[MAXN];
    set_lora(&eps[0], 2, 2, 1u << 1, 0);          /* loaded */
    set_lora(&eps[1], 2, 1, 1u << 0, 0);          /* room */
    set_lora(&eps[2], 2, 2, 1u << 0 | 1u << 2, 1u << 1); /* full, requests wait for it */
    set_lora(&eps[3], 2, 2, 1u << 0 | 1u << 2, 0);       /* full, nothing */
    /* eps[4]: no LoRA report: room assumed */
    set_lora(&eps[5], 2, 2, 1u << 1, 1u << 1);    /* loaded and waiting: loaded wins */
    sb_sched_request req = {.adapter = 1};
    score("lora-affinity", &req, 6, out);
    const double want[] = {1.0, 0.8, 0.6, 0.0, 0.8, 1.0};
    for (size_t i = 0; i < 6; i++)
        assert_true(fabs(out[i] - want[i]) < 1e-12);
    /* Base-model requests: 1.0 everywhere. */
    score("lora-affinity", &base_req, 6, out);
    for (size_t i = 0; i < 6; i++)
        assert_true(out[i] == 1.0);
    /* Stale does not change affinity. */
    cands[0].stale = true;
    score("lora-affinity", &req, 6, out);
    assert_true(out[0] == 1.0);
}

/* ---- pickers ---- */

static size_t pick(const char *name, size_t n)
{
    const sb_picker_def *p = sb_picker_find(name);
    assert_non_null(p);
    size_t k = p->pick(&ctx, cands, n);
    assert_true(k < n);
    return k;
}

static void set_totals(const double *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cands[i].total = t[i];
}

static void test_picker_max_score(void **state)
{
    (void)state;
    setup(4);
    set_totals((double[]){0.2, 0.9, 0.5, 0.899999}, 4);
    for (int i = 0; i < 200; i++)
        assert_int_equal(pick("max-score", 4), 1);
    /* Ties spread evenly (first, middle and last positions alike). */
    set_totals((double[]){0.7, 0.1, 0.7, 0.7}, 4);
    size_t count[4] = {0};
    const int N = 30000;
    for (int i = 0; i < N; i++)
        count[pick("max-score", 4)]++;
    assert_int_equal(count[1], 0);
    for (size_t i = 0; i < 4; i += 1 + (i == 0))
        assert_true(fabs((double)count[i] / N - 1.0 / 3) < 0.02);
    assert_int_equal(pick("max-score", 1), 0);
}

static void test_picker_weighted_random(void **state)
{
    (void)state;
    setup(4);
    const double t[] = {0.1, 0.2, 0.3, 0.4};
    set_totals(t, 4);
    size_t count[4] = {0};
    const int N = 20000;
    for (int i = 0; i < N; i++)
        count[pick("weighted-random", 4)]++;
    double chi2 = 0;
    for (size_t i = 0; i < 4; i++) {
        double expect = N * t[i]; /* totals sum to 1 */
        chi2 += (count[i] - expect) * (count[i] - expect) / expect;
    }
    /* 3 degrees of freedom: 16.27 is the 0.1% critical value. */
    assert_true(chi2 < 16.27);
    /* A zero total is never picked while another is positive. */
    set_totals((double[]){0.0, 0.5, 0.0, 0.5}, 4);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pick("weighted-random", 4) % 2, 1);
    /* All zero: uniform. */
    set_totals((double[]){0, 0, 0, 0}, 4);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < N; i++)
        count[pick("weighted-random", 4)]++;
    for (size_t i = 0; i < 4; i++)
        assert_true(fabs((double)count[i] / N - 0.25) < 0.02);
}

static void test_picker_p2c(void **state)
{
    (void)state;
    setup(5);
    set_totals((double[]){0.3, 0.7}, 2);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pick("p2c", 2), 1);
    set_totals((double[]){0.7, 0.3}, 2);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pick("p2c", 2), 0);
    /* Two distinct candidates per pick: with 5, the best wins when it is one of the two
     * (4 pairs of 10: 0.4; drawing with replacement would give 0.36), the second best when
     * it is drawn without the best (3 of 10), the worst never. */
    set_totals((double[]){0.1, 0.9, 0.5, 0.6, 0.3}, 5);
    size_t count[5] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++)
        count[pick("p2c", 5)]++;
    assert_int_equal(count[0], 0);
    assert_true(fabs((double)count[1] / N - 0.4) < 0.012);
    assert_true(fabs((double)count[3] / N - 0.3) < 0.012);
    assert_true(fabs((double)count[2] / N - 0.2) < 0.012);
    assert_true(fabs((double)count[4] / N - 0.1) < 0.012);
    assert_int_equal(pick("p2c", 1), 0);
}

static void test_picker_softmax(void **state)
{
    (void)state;
    setup(3);
    set_totals((double[]){0.5, 0.6, 0.55}, 3);
    prof.temperature = 1e-4;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pick("softmax", 3), 1);
    prof.temperature = 0; /* clamped, not a division by zero */
    for (int i = 0; i < 100; i++)
        assert_int_equal(pick("softmax", 3), 1);
    prof.temperature = 1e6;
    size_t count[3] = {0};
    const int N = 30000;
    for (int i = 0; i < N; i++)
        count[pick("softmax", 3)]++;
    for (size_t i = 0; i < 3; i++)
        assert_true(fabs((double)count[i] / N - 1.0 / 3) < 0.02);
    /* At the default 0.1, a 0.1 lead is a factor e. */
    prof.temperature = 0.1;
    set_totals((double[]){0.5, 0.6}, 2);
    size_t hi = 0;
    for (int i = 0; i < N; i++)
        hi += pick("softmax", 2) == 1;
    assert_true(fabs((double)hi / N - exp(1) / (1 + exp(1))) < 0.015);
}

static void test_picker_round_robin(void **state)
{
    (void)state;
    setup(4);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(pick("round-robin", 4), i);
    /* Only live candidates are passed: endpoint 1 was removed. */
    sb_candidate live[3] = {cands[0], cands[2], cands[3]};
    memcpy(cands, live, sizeof(live));
    ctx.rr_cursor = 0;
    const uint32_t want[] = {0, 2, 3, 0, 2, 3};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(cands[pick("round-robin", 3)].ep->index, want[i]);
    /* The cursor on a removed endpoint moves to the next live one. */
    ctx.rr_cursor = 1;
    assert_int_equal(cands[pick("round-robin", 3)].ep->index, 2);
    ctx.rr_cursor = 99;
    assert_int_equal(cands[pick("round-robin", 3)].ep->index, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_builtin_profiles),
        cmocka_unit_test(test_builtin_profiles_start_from_defaults),
        cmocka_unit_test(test_profile_init),
        cmocka_unit_test(test_filter_healthy),
        cmocka_unit_test(test_filter_keeps_earlier_verdict),
        cmocka_unit_test(test_filter_lora),
        cmocka_unit_test(test_filter_saturation),
        cmocka_unit_test(test_filter_labels),
        cmocka_unit_test(test_scorer_queue_min_max),
        cmocka_unit_test(test_scorer_sent_tokens_epochs),
        cmocka_unit_test(test_scorers_stale_zeroed),
        cmocka_unit_test(test_scorer_running_and_kv),
        cmocka_unit_test(test_scorers_own_accounting_never_stale),
        cmocka_unit_test(test_scorer_lora_affinity_ladder),
        cmocka_unit_test(test_picker_max_score),
        cmocka_unit_test(test_picker_weighted_random),
        cmocka_unit_test(test_picker_p2c),
        cmocka_unit_test(test_picker_softmax),
        cmocka_unit_test(test_picker_round_robin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
