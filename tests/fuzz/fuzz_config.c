/* fuzz_config: libFuzzer target for src/proto/config.c (outside input: the operator's YAML
 * configuration file, through libyaml).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each).
 * Built and run by hand (the committed corpus is the seed; it is also replayed by the unit test
 * tests/unit/proto/test_config.c). config.c pulls in the plug-in registry (core/plugins.c and
 * the filters, scorers and pickers it lists), the profiles and adaptive parameters (core/sched.c,
 * core/adaptive.c) and the band names (core/flow.c); those need core/ (all but router.c) and
 * base/alloc.c and base/buf.c (bash, for the braces):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isrc tests/fuzz/fuzz_config.c \
 *         src/proto/config.c src/core/{adaptive,chash,endpoint,flow,plugins,prefix_index,sched}.c \
 *         src/core/{filters,pickers,scorers}/[a-z]*.c src/base/{alloc,buf}.c \
 *         -lyaml -lxxhash -lm -o /tmp/fuzz_config
 *   mkdir -p /tmp/corpus_config
 *   /tmp/fuzz_config -max_len=4096 -timeout=5 -rss_limit_mb=2048 -max_total_time=300 \
 *         /tmp/corpus_config tests/fuzz/corpus/config
 * (libyaml is the system's, not instrumented: coverage and ASan's bounds checks cover config.c
 * and what it calls, ASan's leak check covers libyaml's allocations too.)
 *
 * Besides crashes, leaks and sanitizer reports, it checks the loader's contract:
 *   - rc is 0 or -1; 0 gives a config and no error, -1 no config and at least one error;
 *   - n <= 32 and n <= total; every error has a line and column >= 1 (only the out-of-memory
 *     error, alone, has none), the line within the input's lines as libyaml counts them (LF,
 *     CR, CRLF, NEL, LS, PS) plus one (the end of the input), the column within the input's
 *     length plus one, and a NUL-terminated, non-empty message;
 *   - sb_config_errors_format never writes past its buffer, always NUL-terminates it, and a
 *     small buffer gets a prefix of what a large one gets;
 *   - the same input gives the same verdict and the same messages again (also with errs NULL);
 *   - a parsed config keeps the documented invariants (at least one pool, each with a name,
 *     models, endpoints, an engine and a profile that sb_config_profile resolves, ordered
 *     probe intervals and ejection bounds, labels within bounds), and sb_config_free frees it. */
#include "proto/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            abort();                                                                                                   \
    } while (0)

#define BIG_FORMAT (sizeof((sb_config_errors *)0)->items * 2 + 4096)

/* Line breaks as libyaml counts them. Its marks point at most one line past the last: at the
 * end of the input it starts a new line unless at column 0 (yaml_parser_fetch_stream_end), so
 * "a: [" (one line) reports the missing ']' at 2:1. */
static size_t count_breaks(const uint8_t *d, size_t n)
{
    size_t breaks = 0, lf = 0;
    if (n >= 2 && ((d[0] == 0xfe && d[1] == 0xff) || (d[0] == 0xff && d[1] == 0xfe))) {
        bool be = d[0] == 0xfe;
        for (size_t i = 2; i + 1 < n; i += 2) {
            unsigned u = be ? (unsigned)d[i] << 8 | d[i + 1] : (unsigned)d[i + 1] << 8 | d[i];
            breaks += u == 0x0a || u == 0x0d || u == 0x85 || u == 0x2028 || u == 0x2029;
        }
        /* Encoding errors are placed by counting '\n' bytes before the bad offset (config.c's
         * syntax_error): in UTF-16 those need not be the characters' line breaks. */
        for (size_t i = 0; i < n; i++)
            lf += d[i] == '\n';
        return breaks > lf ? breaks : lf;
    }
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\n' || (d[i] == '\r' && !(i + 1 < n && d[i + 1] == '\n')))
            breaks++;
        else if (d[i] == 0xc2 && i + 1 < n && d[i + 1] == 0x85)
            breaks++;
        else if (d[i] == 0xe2 && i + 2 < n && d[i + 1] == 0x80 && (d[i + 2] == 0xa8 || d[i + 2] == 0xa9))
            breaks++;
    }
    return breaks;
}

static void check_errors(const sb_config_errors *errs, size_t lines, size_t size)
{
    CHECK(errs->n <= sizeof errs->items / sizeof errs->items[0]);
    CHECK(errs->n <= errs->total);
    CHECK(errs->n == errs->total || errs->n == sizeof errs->items / sizeof errs->items[0]);
    for (size_t i = 0; i < errs->n; i++) {
        const sb_config_error *e = &errs->items[i];
        CHECK(memchr(e->message, '\0', sizeof e->message) != NULL && e->message[0] != '\0');
        if (e->line == 0) {
            /* Not tied to a node: only the out-of-memory report, which stands alone. */
            CHECK(e->column == 0 && errs->n == 1 && errs->total == 1 && strstr(e->message, "out of memory"));
            continue;
        }
        CHECK(e->line >= 1 && (size_t)e->line <= lines + 1);
        CHECK(e->column >= 1 && (size_t)e->column <= size + 1);
    }
}

/* Formats into a heap buffer of exactly cap bytes (ASan sees any write past it). */
static char *format(const sb_config_errors *errs, size_t cap)
{
    char *buf = malloc(cap ? cap : 1);
    CHECK(buf != NULL);
    if (cap == 0) {
        buf[0] = 'x';
        sb_config_errors_format(errs, "f.yaml", buf, 0);
        CHECK(buf[0] == 'x'); /* nothing written */
        return buf;
    }
    memset(buf, 'x', cap);
    sb_config_errors_format(errs, "f.yaml", buf, cap);
    CHECK(memchr(buf, '\0', cap) != NULL);
    return buf;
}

static void check_format(const sb_config_errors *errs)
{
    static const size_t small[] = {0, 1, 2, 17, 64};
    char *big = format(errs, BIG_FORMAT);
    size_t big_len = strlen(big);

    CHECK(big_len + 1 < BIG_FORMAT); /* everything fits: nothing truncated */
    CHECK((errs->n == 0) == (big_len == 0));
    for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
        char *s = format(errs, small[k]);
        if (small[k] > 0) {
            size_t len = strlen(s);
            CHECK(len < small[k] && len <= big_len);
            CHECK(memcmp(s, big, len) == 0); /* a prefix of the whole text */
        }
        free(s);
    }
    free(big);
}

static void check_config(const sb_config *cfg)
{
    CHECK(cfg->listen_host != NULL && cfg->listen_port >= 1);
    CHECK(cfg->session_header != NULL);
    CHECK(cfg->n_pools >= 1 && cfg->pools != NULL);
    CHECK(cfg->block_bytes >= 8 && cfg->block_bytes <= 4096);
    for (size_t i = 0; i < cfg->api_keys.n; i++) {
        CHECK(cfg->api_keys.items[i].band >= -1 && cfg->api_keys.items[i].band <= 2);
        CHECK(cfg->api_keys.items[i].admits || cfg->api_keys.items[i].band >= 0);
        CHECK(sb_auth_keys_find(&cfg->api_keys, cfg->api_keys.items[i].digest) == &cfg->api_keys.items[i]);
    }
    CHECK(!cfg->admin_host || cfg->admin_has_token || cfg->admin_token_file ||
          sb_config_host_is_loopback(cfg->admin_host));
    for (size_t i = 0; i < cfg->n_profiles; i++)
        CHECK(sb_config_profile(cfg, cfg->profiles[i].name) == &cfg->profiles[i]);
    if (cfg->default_pool) {
        bool found = false;
        for (size_t i = 0; i < cfg->n_pools; i++)
            found |= !strcmp(cfg->pools[i].name, cfg->default_pool);
        CHECK(found);
    }
    for (size_t i = 0; i < cfg->n_pools; i++) {
        const sb_pool_config *pc = &cfg->pools[i];
        CHECK(pc->name != NULL && pc->engine != NULL && pc->profile != NULL);
        CHECK(pc->probe_path != NULL && pc->probe_path[0] == '/');
        CHECK(pc->health_path != NULL && pc->health_path[0] == '/');
        CHECK(sb_config_profile(cfg, pc->profile ? pc->profile : "default") != NULL);
        CHECK(pc->n_models >= 1);
        for (size_t j = 0; j < pc->n_models; j++)
            CHECK(pc->models[j] != NULL && pc->models[j][0] != '\0');
        for (size_t j = 0; j < pc->n_adapters; j++)
            CHECK(pc->adapters[j] != NULL && pc->adapters[j][0] != '\0');
        CHECK(pc->n_endpoints >= 1);
        for (size_t j = 0; j < pc->n_endpoints; j++) {
            const sb_endpoint_config *ep = &pc->endpoints[j];
            CHECK(ep->host != NULL && ep->address != NULL && ep->port >= 1);
            CHECK(ep->n_labels <= SB_MAX_LABELS);
            for (size_t l = 0; l < ep->n_labels; l++)
                CHECK(ep->label_keys[l] != NULL && ep->label_values[l] != NULL);
        }
        CHECK(pc->probe_min_interval_ms <= pc->probe_interval_ms);
        CHECK(pc->probe_interval_ms <= pc->probe_max_interval_ms);
        CHECK(pc->base_eject_ms <= pc->max_eject_ms);
        bool custom = !strcmp(pc->engine, "custom");
        CHECK(custom == (pc->metric_running != NULL));
        CHECK(custom == (pc->metric_waiting != NULL));
        CHECK(custom == (pc->metric_kv_usage != NULL));
    }
}

/* libFuzzer's entry point (it declares none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy: the parser gets a length, not a terminator, and ASan sees any read
     * past the end. */
    char *text = malloc(size ? size : 1);
    sb_config *cfg = NULL, *again = NULL;
    sb_config_errors errs, errs2;
    int rc, rc2;

    CHECK(text != NULL);
    memcpy(text, data, size);
    rc = sb_config_parse(text, size, &cfg, &errs);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        CHECK(cfg != NULL && errs.n == 0 && errs.total == 0);
        check_config(cfg);
    } else {
        CHECK(cfg == NULL && errs.n >= 1 && errs.total >= 1);
    }
    check_errors(&errs, count_breaks(data, size) + 1, size);
    check_format(&errs);

    /* Deterministic: the same verdict and messages again; errs may be NULL. */
    rc2 = sb_config_parse(text, size, &again, &errs2);
    CHECK(rc2 == rc && errs2.n == errs.n && errs2.total == errs.total);
    CHECK(memcmp(errs2.items, errs.items, errs.n * sizeof errs.items[0]) == 0);
    sb_config_free(again);
    again = NULL;
    CHECK(sb_config_parse(text, size, &again, NULL) == rc);
    CHECK((again != NULL) == (rc == 0));
    sb_config_free(again);

    sb_config_free(cfg);
    free(text);
    return 0;
}
