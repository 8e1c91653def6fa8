#include "sb_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "proto/config.h"

/* Line numbers asserted below count from the first line of each YAML literal. */

static int parse_str(const char *yaml, sb_config **cfg, sb_config_errors *errs)
{
    *cfg = NULL;
    return sb_config_parse(yaml, strlen(yaml), cfg, errs);
}

static void print_errors(const sb_config_errors *errs)
{
    char buf[8192];
    sb_config_errors_format(errs, "test.yaml", buf, sizeof buf);
    fprintf(stderr, "%s", buf);
}

static bool has_error(const sb_config_errors *errs, int line, const char *needle)
{
    for (size_t i = 0; i < errs->n; i++)
        if (errs->items[i].line == line && strstr(errs->items[i].message, needle))
            return true;
    print_errors(errs);
    fprintf(stderr, "expected an error at line %d containing \"%s\"\n", line, needle);
    return false;
}

/* Parses yaml, expects failure with exactly one error at `line` containing `needle`. */
static void expect_one_error(const char *yaml, int line, const char *needle)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(yaml, &cfg, &errs), -1);
    assert_null(cfg);
    assert_true(has_error(&errs, line, needle));
    if (errs.total != 1)
        print_errors(&errs);
    assert_int_equal(errs.total, 1);
    assert_int_equal(errs.n, 1);
}

#define POOL_OK                                                                                                        \
    "pools:\n"                                                                                                         \
    "  - name: p\n"                                                                                                    \
    "    models: [m]\n"                                                                                                \
    "    endpoints: [\"127.0.0.1:9000\"]\n"

static const char full_yaml[] = "listen: \"[::1]:9090\"\n"
                                "limits:\n"
                                "  max_body_bytes: 8MiB\n"
                                "  max_header_bytes: 32768\n"
                                "  max_connections: 500\n"
                                "  max_prompt_blocks: 2048\n"
                                "  max_json_depth: 64\n"
                                "  max_json_tokens: 5000\n"
                                "  max_buffered_body_bytes: 1GiB\n"
                                "  linger_ms: 0\n"
                                "  linger_bytes: 1MiB\n"
                                "  max_refusing_connections: 8\n"
                                "timeouts:\n"
                                "  connect_ms: 250\n"
                                "  response_ms: 120000\n"
                                "  idle_ms: 5000\n"
                                "  header_ms: 3000\n"
                                "  upstream_idle_ms: 15000\n"
                                "upstream:\n"
                                "  max_idle_per_endpoint: 8\n"
                                "  orca_request: false\n"
                                "routing:\n"
                                "  block_bytes: 128\n"
                                "  default_pool: qwen\n"
                                "access_log: /var/log/switchboard/access.log\n"
                                "access_log_decisions: true\n"
                                "admin:\n"
                                "  debug_endpoints: false\n"
                                "pools:\n"
                                "  - name: llama\n"
                                "    models: [\"meta-llama/Llama-3.1-8B-Instruct\", \"llama-3.1-8b\"]\n"
                                "    adapters: [sql-lora, chat-lora]\n"
                                "    engine: sglang\n"
                                "    profile: round-robin\n"
                                "    endpoints:\n"
                                "      - \"10.0.0.1:8000\"\n"
                                "      - \"gpu-2.internal:8000\"\n"
                                "      - \"[fe80::1]:8001\"\n"
                                "      - address: \"10.0.0.4:8000\"\n"
                                "        labels: {zone: eu-west-1a, gpu: h100}\n"
                                "        draining: true\n"
                                "    probe:\n"
                                "      interval_ms: 200\n"
                                "      min_interval_ms: 100\n"
                                "      max_interval_ms: 2000\n"
                                "      timeout_ms: 300\n"
                                "      stale_ms: 5000\n"
                                "      path: /v1/metrics\n"
                                "      health_path: /healthz\n"
                                "      health_interval_ms: 0\n"
                                "      enabled: false\n"
                                "    health: {max_failures: 5, base_eject_ms: 500, max_eject_ms: 60000}\n"
                                "  - name: qwen\n"
                                "    models: [\"Qwen/Qwen2.5-7B-Instruct\"]\n"
                                "    engine: custom\n"
                                "    profile: eu-only\n"
                                "    metrics:\n"
                                "      running: engine_running\n"
                                "      waiting: engine_waiting\n"
                                "      kv_usage: \"engine:kv_usage_ratio\"\n"
                                "    endpoints: [\"10.0.0.9:8000\"]\n"
                                "profiles:\n"
                                "  eu-only:\n"
                                "    filters: [healthy, labels, saturation]\n"
                                "    scorers: {queue: 2, kv-cache: 1.5, in-flight: 0, prefix: 3}\n"
                                "    picker: softmax\n"
                                "    temperature: 0.25\n"
                                "    hot_prefix: 1.5\n"
                                "    queue_threshold: 8\n"
                                "    kv_threshold: 0.9\n"
                                "    labels: {zone: eu-west-1a}\n";

static void test_full_config(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    int rc = parse_str(full_yaml, &cfg, &errs);
    if (rc != 0)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    assert_string_equal(cfg->listen_host, "::1");
    assert_int_equal(cfg->listen_port, 9090);
    assert_int_equal(cfg->max_body_bytes, 8u << 20);
    assert_int_equal(cfg->max_header_bytes, 32768);
    assert_int_equal(cfg->max_connections, 500);
    assert_int_equal(cfg->max_prompt_blocks, 2048);
    assert_int_equal(cfg->max_json_depth, 64);
    assert_int_equal(cfg->max_json_tokens, 5000);
    assert_int_equal(cfg->max_buffered_body_bytes, (size_t)1 << 30);
    assert_int_equal(cfg->linger_ms, 0);
    assert_int_equal(cfg->linger_bytes, 1u << 20);
    assert_int_equal(cfg->max_refusing_connections, 8);
    assert_int_equal(cfg->connect_ms, 250);
    assert_int_equal(cfg->response_ms, 120000);
    assert_int_equal(cfg->idle_ms, 5000);
    assert_int_equal(cfg->header_ms, 3000);
    assert_int_equal(cfg->upstream_idle_ms, 15000);
    assert_int_equal(cfg->max_idle_per_endpoint, 8);
    assert_false(cfg->orca_request);
    assert_int_equal(cfg->block_bytes, 128);
    assert_string_equal(cfg->default_pool, "qwen");
    assert_string_equal(cfg->access_log, "/var/log/switchboard/access.log");
    assert_int_equal(cfg->n_pools, 2);

    const sb_pool_config *llama = &cfg->pools[0];
    assert_string_equal(llama->name, "llama");
    assert_int_equal(llama->n_models, 2);
    assert_string_equal(llama->models[0], "meta-llama/Llama-3.1-8B-Instruct");
    assert_string_equal(llama->models[1], "llama-3.1-8b");
    assert_int_equal(llama->n_adapters, 2);
    assert_string_equal(llama->adapters[0], "sql-lora");
    assert_string_equal(llama->adapters[1], "chat-lora");
    assert_string_equal(llama->engine, "sglang");
    assert_string_equal(llama->profile, "round-robin");
    assert_string_equal(llama->endpoints[0].host, "10.0.0.1");
    assert_int_equal(llama->endpoints[0].port, 8000);
    assert_string_equal(llama->endpoints[0].address, "10.0.0.1:8000");
    assert_string_equal(llama->endpoints[1].host, "gpu-2.internal");
    assert_string_equal(llama->endpoints[2].host, "fe80::1");
    assert_int_equal(llama->endpoints[2].port, 8001);
    assert_string_equal(llama->endpoints[2].address, "[fe80::1]:8001");
    assert_int_equal(llama->n_endpoints, 4);
    assert_int_equal(llama->endpoints[0].n_labels, 0);
    assert_false(llama->endpoints[0].draining);
    const sb_endpoint_config *ep = &llama->endpoints[3];
    assert_string_equal(ep->host, "10.0.0.4");
    assert_int_equal(ep->port, 8000);
    assert_string_equal(ep->address, "10.0.0.4:8000");
    assert_int_equal(ep->n_labels, 2);
    assert_string_equal(ep->label_keys[0], "zone");
    assert_string_equal(ep->label_values[0], "eu-west-1a");
    assert_string_equal(ep->label_keys[1], "gpu");
    assert_string_equal(ep->label_values[1], "h100");
    assert_true(ep->draining);
    assert_int_equal(llama->probe_interval_ms, 200);
    assert_int_equal(llama->probe_min_interval_ms, 100);
    assert_int_equal(llama->probe_max_interval_ms, 2000);
    assert_int_equal(llama->probe_timeout_ms, 300);
    assert_int_equal(llama->stale_ms, 5000);
    assert_string_equal(llama->probe_path, "/v1/metrics");
    assert_string_equal(llama->health_path, "/healthz");
    assert_int_equal(llama->health_interval_ms, 0);
    assert_false(llama->probe_enabled);
    assert_int_equal(llama->max_failures, 5);
    assert_int_equal(llama->base_eject_ms, 500);
    assert_int_equal(llama->max_eject_ms, 60000);
    assert_null(llama->metric_running);
    assert_true(cfg->log_decisions);
    assert_false(cfg->debug_endpoints);

    const sb_pool_config *qwen = &cfg->pools[1];
    assert_string_equal(qwen->name, "qwen");
    assert_int_equal(qwen->n_adapters, 0);
    assert_null(qwen->adapters);
    assert_string_equal(qwen->engine, "custom");
    assert_string_equal(qwen->profile, "eu-only");
    assert_string_equal(qwen->metric_running, "engine_running");
    assert_string_equal(qwen->metric_waiting, "engine_waiting");
    assert_string_equal(qwen->metric_kv_usage, "engine:kv_usage_ratio");
    assert_int_equal(qwen->probe_interval_ms, 100);

    assert_int_equal(cfg->n_profiles, 1);
    const sb_profile *eu = sb_config_profile(cfg, "eu-only");
    assert_ptr_equal(eu, &cfg->profiles[0]);
    assert_string_equal(eu->name, "eu-only");
    assert_int_equal(eu->n_filters, 3);
    assert_ptr_equal(eu->filters[0], sb_filter_find("healthy"));
    assert_ptr_equal(eu->filters[1], sb_filter_find("labels"));
    assert_ptr_equal(eu->filters[2], sb_filter_find("saturation"));
    assert_int_equal(eu->n_scorers, 4);
    assert_ptr_equal(eu->scorers[0].def, sb_scorer_find("queue"));
    assert_true(eu->scorers[0].weight == 2.0);
    assert_ptr_equal(eu->scorers[1].def, sb_scorer_find("kv-cache"));
    assert_true(eu->scorers[1].weight == 1.5);
    assert_ptr_equal(eu->scorers[2].def, sb_scorer_find("in-flight"));
    assert_true(eu->scorers[2].weight == 0.0);
    assert_ptr_equal(eu->scorers[3].def, sb_scorer_find("prefix"));
    assert_true(eu->scorers[3].weight == 3.0);
    assert_ptr_equal(eu->picker, sb_picker_find("softmax"));
    assert_true(eu->temperature == 0.25);
    assert_true(eu->hot_prefix == 1.5);
    assert_true(eu->queue_threshold == 8.0);
    assert_true(eu->kv_threshold == 0.9);
    assert_int_equal(eu->n_labels, 1);
    assert_string_equal(eu->label_keys[0], "zone");
    assert_string_equal(eu->label_values[0], "eu-west-1a");
    /* Built-ins resolve through the same call; an unknown name does not. */
    assert_ptr_equal(sb_config_profile(cfg, "round-robin"), sb_profile_builtin("round-robin"));
    assert_null(sb_config_profile(cfg, "eu-west"));
    assert_null(sb_config_profile(cfg, NULL));
    sb_config_free(cfg);
}

/* endpoints_from, `endpoints: []`, the discovery section and admin.max_body_bytes. */
static void test_discovery_keys(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(
        parse_str("discovery: { apply_ms: 5, drain_ms: 1000, max_endpoints: 8, retry_ms: 50, "
                  "retry_max_ms: 400 }\n"
                  "admin: { max_body_bytes: 4KiB }\n"
                  "pools:\n"
                  "  - name: p\n"
                  "    models: [m]\n"
                  "    endpoints_from: { dns: \"vllm-headless.ns.svc.cluster.local:8000\", interval_ms: 250 }\n"
                  "  - name: q\n"
                  "    models: [n]\n"
                  "    endpoints: []\n",
                  &cfg, &errs),
        0);
    assert_string_equal(cfg->pools[0].dns_host, "vllm-headless.ns.svc.cluster.local");
    assert_int_equal(cfg->pools[0].dns_port, 8000);
    assert_int_equal(cfg->pools[0].dns_interval_ms, 250);
    assert_int_equal(cfg->pools[0].n_endpoints, 0);
    assert_null(cfg->pools[1].dns_host);
    assert_int_equal(cfg->pools[1].n_endpoints, 0);
    assert_int_equal(cfg->discovery_apply_ms, 5);
    assert_int_equal(cfg->discovery_drain_ms, 1000);
    assert_int_equal(cfg->discovery_max_endpoints, 8);
    assert_int_equal(cfg->discovery_retry_ms, 50);
    assert_int_equal(cfg->discovery_retry_max_ms, 400);
    assert_int_equal(cfg->admin_max_body_bytes, 4096);
    sb_config_free(cfg);
    /* Defaults. */
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->discovery_apply_ms, 20);
    assert_int_equal(cfg->discovery_max_endpoints, 256);
    assert_int_equal(cfg->admin_max_body_bytes, 64 << 10);
    assert_null(cfg->pools[0].dns_host);
    sb_config_free(cfg);
    expect_one_error("pools:\n  - name: p\n    models: [m]\n    endpoints_from: { dns: \"nohost\" }\n", 4,
                     "pool 'p': endpoints_from.dns: bad address 'nohost': missing ':port'");
    expect_one_error("pools:\n  - name: p\n    models: [m]\n    endpoints_from: { interval_ms: 1000 }\n", 4,
                     "pool 'p': endpoints_from has no 'dns'");
    expect_one_error("pools:\n  - name: p\n    models: [m]\n    endpoints_from: { dns: \"a:1\", interval_ms: 99 }\n", 4,
                     "interval_ms must be an integer from 100");
    expect_one_error("pools:\n  - name: p\n    models: [m]\n    endpoints_from: { dns: \"a:1\", srv: x }\n", 4,
                     "unknown key 'srv' in pool 'p': endpoints_from");
    expect_one_error("discovery: { retry_ms: 5 }\n" POOL_OK, 1, "retry_ms");
}

static void test_defaults(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_string_equal(cfg->listen_host, "127.0.0.1");
    assert_int_equal(cfg->listen_port, 8080);
    assert_int_equal(cfg->max_body_bytes, 16u << 20);
    assert_int_equal(cfg->max_header_bytes, 64u << 10);
    assert_int_equal(cfg->max_connections, 10000);
    assert_int_equal(cfg->max_prompt_blocks, 16384);
    assert_int_equal(cfg->max_json_depth, 128);
    assert_int_equal(cfg->max_json_tokens, 1u << 20);
    assert_int_equal(cfg->max_buffered_body_bytes, 256u << 20);
    assert_int_equal(cfg->linger_ms, 5000);
    assert_int_equal(cfg->drain_ms, 30000);
    assert_int_equal(cfg->linger_bytes, 64u << 20);
    assert_int_equal(cfg->max_refusing_connections, 64);
    assert_int_equal(cfg->connect_ms, 1000);
    assert_int_equal(cfg->response_ms, 600000);
    assert_int_equal(cfg->idle_ms, 60000);
    assert_int_equal(cfg->header_ms, 10000);
    assert_int_equal(cfg->upstream_idle_ms, 30000);
    assert_int_equal(cfg->max_idle_per_endpoint, 1024);
    assert_true(cfg->orca_request);
    assert_int_equal(cfg->block_bytes, 64);
    assert_null(cfg->default_pool);
    assert_null(cfg->access_log);
    assert_int_equal(cfg->n_pools, 1);
    assert_true(cfg->debug_endpoints);
    assert_false(cfg->log_decisions);
    assert_int_equal(cfg->n_profiles, 0);
    assert_null(cfg->profiles);
    const sb_pool_config *pc = &cfg->pools[0];
    assert_string_equal(pc->engine, "auto");
    assert_string_equal(pc->profile, "default");
    assert_ptr_equal(sb_config_profile(cfg, pc->profile), sb_profile_builtin("default"));
    assert_int_equal(pc->probe_interval_ms, 100);
    assert_int_equal(pc->probe_min_interval_ms, 50);
    assert_int_equal(pc->probe_max_interval_ms, 1000);
    assert_int_equal(pc->probe_timeout_ms, 500);
    /* Stale only past twice the slowest (idle) scrape interval. */
    assert_int_equal(pc->stale_ms, 2 * pc->probe_max_interval_ms);
    assert_false(pc->adaptive); /* off by default: docs/benchmarks.md section 10 */
    assert_string_equal(pc->probe_path, "/metrics");
    assert_string_equal(pc->health_path, "/health");
    assert_int_equal(pc->health_interval_ms, 2000);
    assert_true(pc->probe_enabled);
    assert_int_equal(pc->max_failures, 3);
    assert_int_equal(pc->base_eject_ms, 1000);
    assert_int_equal(pc->max_eject_ms, 30000);
    assert_null(pc->metric_running);
    assert_null(pc->metric_waiting);
    assert_null(pc->metric_kv_usage);
    assert_int_equal(pc->endpoints[0].n_labels, 0);
    assert_null(pc->endpoints[0].label_keys);
    assert_false(pc->endpoints[0].draining);
    sb_config_free(cfg);

    /* llama.cpp keeps /metrics too; empty probe and health sections keep every default. */
    assert_int_equal(parse_str(POOL_OK "    engine: llamacpp\n    probe:\n    health: {}\n", &cfg, &errs), 0);
    assert_string_equal(cfg->pools[0].probe_path, "/metrics");
    assert_int_equal(cfg->pools[0].probe_interval_ms, 100);
    assert_int_equal(cfg->pools[0].max_failures, 3);
    sb_config_free(cfg);
}

/* Sections written with no entries (everything commented out) keep their defaults. */
static void test_empty_sections_keep_defaults(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("limits:\ntimeouts: {}\nrouting:\naccess_log:\n" POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->max_body_bytes, 16u << 20);
    assert_int_equal(cfg->connect_ms, 1000);
    assert_null(cfg->access_log);
    sb_config_free(cfg);
}

static void test_size_suffixes(void **state)
{
    static const struct {
        const char *text;
        size_t bytes;
    } ok[] = {
        {"65536", 65536},          {"64KiB", 64u << 10},    {"64kib", 64u << 10},
        {"512k", 512u << 10},      {"512K", 512u << 10},    {"2KB", 2048},
        {"16MiB", 16u << 20},      {"16M", 16u << 20},      {"\"16 MiB\"", 16u << 20},
        {"1GiB", (size_t)1 << 30}, {"3g", (size_t)3 << 30}, {"100B", 100},
        {"'8MiB'", 8u << 20},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "limits:\n  max_body_bytes: %s\n" POOL_OK, ok[i].text);
        sb_config *cfg;
        sb_config_errors errs;
        int rc = parse_str(yaml, &cfg, &errs);
        if (rc != 0)
            print_errors(&errs);
        assert_int_equal(rc, 0);
        assert_int_equal(cfg->max_body_bytes, ok[i].bytes);
        sb_config_free(cfg);
    }
    static const char *const bad[] = {"16XB",          "MiB", "-1", "1.5MiB", "16MiBs", "0x10", "99999999999999999999",
                                      "17179869184GiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "limits:\n  max_body_bytes: %s\n" POOL_OK, bad[i]);
        expect_one_error(yaml, 2, "limits.max_body_bytes must be a size in bytes");
    }
    /* Suffixes are for byte sizes only. */
    expect_one_error("limits:\n  max_connections: 10k\n" POOL_OK, 2,
                     "limits.max_connections must be a non-negative integer, got '10k'");
}

static void test_listen_addresses(void **state)
{
    static const struct {
        const char *listen;
        const char *host;
        unsigned port;
    } ok[] = {
        {"0.0.0.0:80", "0.0.0.0", 80},
        {"\"[::]:8080\"", "::", 8080},
        {"\"[::ffff:10.0.0.1]:1\"", "::ffff:10.0.0.1", 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "listen: %s\n" POOL_OK, ok[i].listen);
        sb_config *cfg;
        sb_config_errors errs;
        int rc = parse_str(yaml, &cfg, &errs);
        if (rc != 0)
            print_errors(&errs);
        assert_int_equal(rc, 0);
        assert_string_equal(cfg->listen_host, ok[i].host);
        assert_int_equal(cfg->listen_port, ok[i].port);
        sb_config_free(cfg);
    }
}

static void test_error_bad_addresses(void **state)
{
    static const struct {
        const char *listen;
        const char *why;
    } bad[] = {
        {"localhost", "missing ':port'"},         {"\":8080\"", "missing host"},
        {"localhost:65535", "must be an IP address"},
        {"\"::1:8080\"", "must be in brackets"},  {"\"[::1]8080\"", "expected ':port'"},
        {"\"[::1:8080\"", "missing ']'"},         {"\"[zz::1]:80\"", "invalid IPv6"},
        {"10.0.0.300:80", "invalid IPv4"},        {"\"bad host:80\"", "invalid host name"},
        {"127.0.0.1:0", "port must be"},          {"127.0.0.1:65536", "port must be"},
        {"127.0.0.1:http", "port must be"},       {"\"127.0.0.1:\"", "port must be"},
        {"\"127.0.0.1:000080\"", "port must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "# comment\nlisten: %s\n" POOL_OK, bad[i].listen);
        expect_one_error(yaml, 2, bad[i].why);
    }
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints:\n"
                     "      - \"127.0.0.1:9000\"\n"
                     "      - \"127.0.0.1:99999\"\n",
                     6, "pool 'p': endpoints[1]: bad address '127.0.0.1:99999': port must be");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints:\n"
                     "      - \"127.0.0.1:9000\"\n"
                     "      - \"127.0.0.1:9000\"\n",
                     6, "endpoint '127.0.0.1:9000' is listed twice");
}

/* `adaptive:` takes a bool or a mapping of the configurator's parameters, checked as a whole,
 * with every error at its line. */
static void test_adaptive_mapping(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    const char *ok = POOL_OK "    adaptive: { enabled: true, x0: 0.2, share_saturated: -1, imbalance_tau_ms: 250 }\n";
    if (parse_str(ok, &cfg, &errs) != 0)
        print_errors(&errs);
    assert_non_null(cfg);
    const sb_pool_config *pc = &cfg->pools[0];
    assert_true(pc->adaptive);
    assert_float_equal(pc->adaptive_params.x0, 0.2, 1e-12);
    assert_float_equal(pc->adaptive_params.share_saturated, -1, 1e-12);
    assert_int_equal(pc->adaptive_params.detector[SB_DETECT_IMBALANCE].tau_ns, SB_MS(250));
    /* untouched parameters keep their defaults */
    assert_float_equal(pc->adaptive_params.k, sb_adaptive_params_default().k, 1e-12);
    sb_config_free(cfg);
    assert_int_equal(parse_str(POOL_OK "    adaptive: { enabled: false }\n", &cfg, &errs), 0);
    assert_false(cfg->pools[0].adaptive);
    sb_config_free(cfg);
    /* Parameters without `enabled` turn it on (the pool default is off): tuning a loop that
     * never runs would be a silent no-op. */
    assert_int_equal(parse_str(POOL_OK "    adaptive: { x0: 0.3 }\n", &cfg, &errs), 0);
    assert_true(cfg->pools[0].adaptive);
    assert_float_equal(cfg->pools[0].adaptive_params.x0, 0.3, 1e-12);
    sb_config_free(cfg);
    assert_int_equal(parse_str(POOL_OK "flow_control: { queue_threshold: 2, kv_threshold: 0.9 }\n", &cfg, &errs), 0);
    assert_float_equal(cfg->flow_gate_queue, 2, 0);
    assert_float_equal(cfg->flow_gate_kv, 0.9, 0);
    sb_config_free(cfg);
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_float_equal(cfg->flow_gate_queue, 1, 0);
    assert_true(cfg->flow_gate_kv < 0);
    sb_config_free(cfg);
    expect_one_error(POOL_OK "flow_control: { kv_threshold: 2 }\n", 5, "kv_threshold");
    assert_int_equal(parse_str(POOL_OK "flow_control:\n  max_bytes: { critical: 2MiB, sheddable: 0 }\n"
                                       "  max_queued_total: 100\n  max_bytes_total: 8MiB\n", &cfg, &errs), 0);
    assert_int_equal(cfg->flow_max_bytes[0], 2u << 20);
    assert_int_equal(cfg->flow_max_bytes[1], 64u << 20); /* untouched: the default */
    assert_int_equal(cfg->flow_max_bytes[2], 0);
    assert_int_equal(cfg->flow_max_queued_total, 100);
    assert_int_equal(cfg->flow_max_bytes_total, 8u << 20);
    sb_config_free(cfg);
    expect_one_error(POOL_OK "flow_control:\n  max_bytes: { urgent: 1 }\n", 6, "urgent");
    expect_one_error(POOL_OK "flow_control:\n  max_queued_total: 2000000\n", 6, "max_queued_total");
    assert_int_equal(parse_str(POOL_OK "flow_control:\n  max_queued_total: 0\n", &cfg, &errs), 0);
    assert_int_equal(cfg->flow_max_queued_total, 0); /* the sum of the bands' */
    sb_config_free(cfg);
    expect_one_error(POOL_OK "    adaptive:\n      x00: 1\n", 6, "unknown key 'x00'");
    expect_one_error(POOL_OK "    adaptive:\n      k: fast\n", 6, "must be a number");
    expect_one_error(POOL_OK "    adaptive:\n      min_publish_ms: -5\n", 6, "duration");
    expect_one_error(POOL_OK "    adaptive:\n      enabled: yes\n", 6, "true or false");
    expect_one_error(POOL_OK "    adaptive:\n      min_publish_ms: 20\n", 6, "at least 100");
    expect_one_error(POOL_OK "    adaptive: { x0: 0.5, x0: 0.2 }\n", 5, "x0");
    assert_int_equal(parse_str(POOL_OK "flow_control: { queue_threshold: -1 }\n", &cfg, &errs), 0);
    assert_true(cfg->flow_gate_queue < 0);
    sb_config_free(cfg);
    /* each value fine alone, wrong together: reported at the mapping */
    expect_one_error(POOL_OK "    adaptive:\n      imbalance_enter: 0.1\n      imbalance_exit: 0.2\n", 6,
                     "exit < enter");
}

static void test_error_unknown_keys(void **state)
{
    expect_one_error("lisen: \"127.0.0.1:80\"\n" POOL_OK, 1, "unknown key 'lisen' at the top level");
    expect_one_error("limits:\n  max_body_bytes: 1\n  max_bodybytes: 2\n" POOL_OK, 3,
                     "unknown key 'max_bodybytes' in limits");
    expect_one_error("timeouts: {connect: 5}\n" POOL_OK, 1, "unknown key 'connect' in timeouts");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoint: [\"127.0.0.1:9000\"]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     4, "unknown key 'endpoint' in pool 'p'");
    expect_one_error("routing:\n  block_bytes: 64\n  block_bytes: 128\n" POOL_OK, 3,
                     "duplicate key 'block_bytes' in routing (first at line 2)");
}

static void test_error_wrong_types(void **state)
{
    expect_one_error("limits: 5\n" POOL_OK, 1, "limits must be a mapping, got a scalar");
    expect_one_error("upstream: [1]\n" POOL_OK, 1, "upstream must be a mapping, got a list");
    expect_one_error("listen: [a]\n" POOL_OK, 1, "listen must be a string, got a list");
    expect_one_error("timeouts:\n  connect_ms: abc\n" POOL_OK, 2,
                     "timeouts.connect_ms must be an integer number of milliseconds, got 'abc'");
    expect_one_error("timeouts:\n  connect_ms: \"1000\"\n" POOL_OK, 2,
                     "timeouts.connect_ms must be an integer number of milliseconds");
    expect_one_error("timeouts:\n  connect_ms: {a: 1}\n" POOL_OK, 2,
                     "timeouts.connect_ms must be a scalar, got a mapping");
    expect_one_error("upstream:\n  orca_request: yes\n" POOL_OK, 2,
                     "upstream.orca_request must be true or false, got 'yes'");
    expect_one_error("upstream:\n  orca_request: \"true\"\n" POOL_OK, 2, "upstream.orca_request must be true or false");
    expect_one_error("routing:\n  default_pool: [p]\n" POOL_OK, 2, "routing.default_pool must be a string, got a list");
    expect_one_error("access_log: {a: b}\n" POOL_OK, 1, "access_log must be a string");
    expect_one_error("pools: {name: p}\n", 1, "pools must be a list, got a mapping");
    expect_one_error("pools:\n  - p\n", 2, "pools[0] must be a mapping, got a scalar");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: m\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "pool 'p': models must be a list, got a scalar");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m, [x]]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "pool 'p': models[1] must be a string, got a list");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m, \"\"]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "pool 'p': models[1] must not be empty");
    expect_one_error("pools:\n"
                     "  - name: [p]\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "pools[0].name must be a string, got a list");
    expect_one_error("pools:\n"
                     "  - name: \"p q\"\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "pool name 'p q' may only contain");
    /* 63 bytes is a name; 64 is refused (decision records and labels keep 63). */
    expect_one_error("pools:\n"
                     "  - name: a123456789a123456789a123456789a123456789a123456789a123456789abcd\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "is longer than 63 characters");
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("pools:\n"
                               "  - name: a123456789a123456789a123456789a123456789a123456789a123456789abc\n"
                               "    models: [m]\n"
                               "    endpoints: [\"127.0.0.1:9000\"]\n",
                               &cfg, &errs),
                     0);
    assert_int_equal(strlen(cfg->pools[0].name), 63);
    sb_config_free(cfg);
    expect_one_error("[1, 2]\n", 1, "the configuration must be a mapping, got a list");
    expect_one_error("? [a]\n: b\n" POOL_OK, 1, "keys in the top level must be strings");
}

static void test_error_out_of_range(void **state)
{
    expect_one_error("limits:\n  max_body_bytes: 0\n" POOL_OK, 2, "limits.max_body_bytes must be at least 1, got 0");
    expect_one_error("limits:\n  max_connections: 0\n" POOL_OK, 2, "limits.max_connections must be at least 1");
    expect_one_error("routing:\n  block_bytes: 4\n" POOL_OK, 2,
                     "routing.block_bytes must be between 8 and 4096, got 4");
    expect_one_error("routing:\n  block_bytes: 8KiB\n" POOL_OK, 2,
                     "routing.block_bytes must be between 8 and 4096, got 8192");
    expect_one_error("timeouts:\n  idle_ms: 0\n" POOL_OK, 2,
                     "timeouts.idle_ms must be between 1 and 4294967295, got 0");
    expect_one_error("timeouts:\n  idle_ms: 4294967296\n" POOL_OK, 2,
                     "timeouts.idle_ms must be between 1 and 4294967295");
    expect_one_error("shutdown:\n  drain_ms: 3600001\n" POOL_OK, 2,
                     "shutdown.drain_ms must be between 0 and 3600000, got 3600001");
    expect_one_error("shutdown:\n  drain_ms: soon\n" POOL_OK, 2, "shutdown.drain_ms");

    /* The edges themselves are accepted. */
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("routing: {block_bytes: 4KiB}\n"
                               "upstream: {max_idle_per_endpoint: 0}\n"
                               "timeouts: {idle_ms: 4294967295}\n"
                               "shutdown: {drain_ms: 0}\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_int_equal(cfg->drain_ms, 0);
    assert_int_equal(cfg->block_bytes, 4096);
    assert_int_equal(cfg->max_idle_per_endpoint, 0);
    assert_int_equal(cfg->idle_ms, 4294967295u);
    sb_config_free(cfg);
}

static void test_error_empty_and_missing(void **state)
{
    expect_one_error("listen: 127.0.0.1:80\n", 1, "missing required key 'pools'");
    expect_one_error("listen: 127.0.0.1:80\npools: []\n", 2, "pools must list at least one pool");
    expect_one_error("listen: 127.0.0.1:80\npools:\n", 2, "pools must list at least one pool");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: []\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "pool 'p': models must not be empty");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints:\n",
                     4, "pool 'p': endpoints must not be empty (write [] for a pool filled by registrations)");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "pool 'p' has no 'models'");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n",
                     2, "pool 'p' has no 'endpoints' (nor 'endpoints_from')");
    expect_one_error("pools:\n"
                     "  - models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "pools[0] has no 'name'");
    /* Adapters may be empty. */
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("pools:\n"
                               "  - name: p\n"
                               "    models: [m]\n"
                               "    adapters: []\n"
                               "    endpoints: [\"127.0.0.1:9000\"]\n",
                               &cfg, &errs),
                     0);
    assert_int_equal(cfg->pools[0].n_adapters, 0);
    sb_config_free(cfg);
}

static void test_error_empty_document(void **state)
{
    expect_one_error("", 1, "the configuration is empty");
    expect_one_error("# only a comment\n", 1, "the configuration is empty");
    expect_one_error(POOL_OK "---\n" POOL_OK, 6, "only one YAML document is allowed");
}

static void test_error_duplicate_pool_names(void **state)
{
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [a]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n"
                     "  - name: p\n"
                     "    models: [b]\n"
                     "    endpoints: [\"127.0.0.1:9001\"]\n",
                     5, "duplicate pool name 'p'");
}

#define TWO_POOLS(fallbacks_a)                                                                                         \
    "pools:\n"                                                                                                         \
    "  - name: a\n"                                                                                                    \
    "    models: [ma]\n"                                                                                               \
    "    endpoints: [\"127.0.0.1:9000\"]\n"                                                                            \
    "    fallbacks: " fallbacks_a "\n"                                                                                 \
    "  - name: b\n"                                                                                                    \
    "    models: [mb, mb-alias]\n"                                                                                     \
    "    endpoints: [\"127.0.0.1:9001\"]\n"                                                                            \
    "    fallbacks: [a]\n"

/* fallbacks: names or {pool, model}, resolved to pool indices in order; A -> B beside B -> A is
 * fine (only the requested pool's list is followed). */
static void test_fallbacks(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    int rc = parse_str(TWO_POOLS("[{pool: b, model: gpt-4o-mini}]"), &cfg, &errs);
    if (rc)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    assert_int_equal(cfg->pools[0].n_fallbacks, 1);
    assert_string_equal(cfg->pools[0].fallbacks[0].pool_name, "b");
    assert_int_equal(cfg->pools[0].fallbacks[0].pool, 1);
    assert_string_equal(cfg->pools[0].fallbacks[0].model, "gpt-4o-mini");
    assert_int_equal(cfg->pools[1].n_fallbacks, 1);
    assert_int_equal(cfg->pools[1].fallbacks[0].pool, 0);
    assert_null(cfg->pools[1].fallbacks[0].model); /* the fallback pool's served name */
    sb_config_free(cfg);
    /* Missing or null: none. */
    assert_int_equal(parse_str(TWO_POOLS("null"), &cfg, &errs), 0);
    assert_int_equal(cfg->pools[0].n_fallbacks, 0);
    sb_config_free(cfg);
}

static void test_error_fallbacks(void **state)
{
    /* Every error at the line of the item at fault (line 5: a's fallbacks). */
    expect_one_error(TWO_POOLS("[nope]"), 5, "fallback 'nope' is not a pool of this file");
    expect_one_error(TWO_POOLS("[b, {pool: nope, model: x}]"), 5, "fallback 'nope' is not a pool");
    expect_one_error(TWO_POOLS("[a]"), 5, "a pool cannot fall back to itself ('a')");
    expect_one_error(TWO_POOLS("[b, {pool: b}]"), 5, "pool 'b' is already a fallback of pool 'a'");
    expect_one_error(TWO_POOLS("[{model: x}]"), 5, "has no 'pool'");
    expect_one_error(TWO_POOLS("[{pool: b, modle: x}]"), 5, "unknown key 'modle'");
    expect_one_error(TWO_POOLS("[{pool: b, model: \"\"}]"), 5, "model must not be empty");
    expect_one_error(TWO_POOLS("b"), 5, "must be a list of pools");
    expect_one_error(TWO_POOLS("[[b]]"), 5, "must be a string");
    expect_one_error(TWO_POOLS("[b, b, b, b, b, b, b, b, b]"), 5, "at most 8 fallbacks, got 9");
}

#define PROVIDER_FALLBACK(auth, provider_key)                                                                          \
    auth "pools:\n"                                                                                                    \
         "  - name: local\n"                                                                                           \
         "    models: [llama]\n"                                                                                       \
         "    endpoints: [\"127.0.0.1:9000\"]\n"                                                                       \
         "    fallbacks: [{pool: openai, model: gpt-4o-mini}]\n"                                                       \
         "  - name: openai\n"                                                                                          \
         "    models: [openai-fallback]\n"                                                                             \
         "    endpoints: [\"https://api.example.com\"]\n" provider_key

/* With auth on, an https:// fallback (an external provider) without its own key would be sent
 * the clients' gateway keys: refused at the fallback's line. Its own key, or auth off: fine. */
static void test_error_fallback_to_provider_without_key(void **state)
{
    expect_one_error(PROVIDER_FALLBACK("auth: { api_keys: [sk-gateway-key-1] }\n", ""), 6,
                     "fallback 'openai' is reached over https:// without its own upstream_api_key");
    expect_one_error(PROVIDER_FALLBACK("auth: { api_keys_file: /nonexistent/keys }\n", ""), 6,
                     "the clients' gateway keys would be sent to it");
    const char *ok[] = {
        PROVIDER_FALLBACK("auth: { api_keys: [sk-gateway-key-1] }\n", "    upstream_api_key: sk-provider\n"),
        PROVIDER_FALLBACK("auth: { api_keys: [sk-gateway-key-1] }\n", "    upstream_api_key_file: /etc/key\n"),
        PROVIDER_FALLBACK("", ""),
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        sb_config *cfg;
        sb_config_errors errs;
        int rc = parse_str(ok[i], &cfg, &errs);
        if (rc)
            print_errors(&errs);
        assert_int_equal(rc, 0);
        sb_config_free(cfg);
    }
}

#define PROVIDER_POOL(extra)                                                                                           \
    "pools:\n"                                                                                                         \
    "  - name: openai\n"                                                                                               \
    "    kind: provider\n"                                                                                             \
    "    models: [gpt-4o-mini]\n"                                                                                      \
    "    endpoints: [\"https://api.example.com\"]\n" extra

/* kind: provider: no scrape, no active health check, least-request, unless the file says
 * otherwise where that is allowed (a health check, a profile); kind: engine is the default. */
static void test_provider_pool(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    int rc = parse_str(PROVIDER_POOL(""), &cfg, &errs);
    if (rc)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    const sb_pool_config *pc = &cfg->pools[0];
    assert_true(pc->provider);
    assert_false(pc->probe_enabled);
    assert_int_equal(pc->health_interval_ms, 0);
    assert_string_equal(pc->profile, "least-request");
    sb_config_free(cfg);

    rc = parse_str(PROVIDER_POOL("    profile: round-robin\n"
                                 "    probe: { enabled: false, health_path: /v1/models, health_interval_ms: 30000 }\n"),
                   &cfg, &errs);
    if (rc)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    pc = &cfg->pools[0];
    assert_string_equal(pc->profile, "round-robin");
    assert_string_equal(pc->health_path, "/v1/models");
    assert_int_equal(pc->health_interval_ms, 30000);
    assert_false(pc->probe_enabled);
    assert_false(pc->prefix_share); /* off unless a pool says so */
    sb_config_free(cfg);

    rc = parse_str("pools:\n"
                   "  - name: p\n"
                   "    models: [m]\n"
                   "    prefix_share: true\n"
                   "    endpoints: [\"127.0.0.1:9000\"]\n",
                   &cfg, &errs);
    assert_int_equal(rc, 0);
    assert_true(cfg->pools[0].prefix_share);
    sb_config_free(cfg);
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    prefix_share: maybe\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     4, "prefix_share");
    /* kind: engine, written or not: model servers, as before. */
    rc = parse_str("pools:\n"
                   "  - name: p\n"
                   "    kind: engine\n"
                   "    models: [m]\n"
                   "    endpoints: [\"127.0.0.1:9000\"]\n",
                   &cfg, &errs);
    assert_int_equal(rc, 0);
    assert_false(cfg->pools[0].provider);
    assert_true(cfg->pools[0].probe_enabled);
    assert_int_equal(cfg->pools[0].health_interval_ms, 2000);
    assert_string_equal(cfg->pools[0].profile, "default");
    sb_config_free(cfg);
}

static void test_error_provider_pool(void **state)
{
    /* What only model servers have, each at its own line. */
    expect_one_error(PROVIDER_POOL("    engine: vllm\n"), 6, "a provider pool has no engine");
    expect_one_error(PROVIDER_POOL("    probe: { enabled: true }\n"), 6, "a provider has no /metrics to scrape");
    expect_one_error(PROVIDER_POOL("    probe: { sync_max_age_ms: 100 }\n"), 6, "a provider has no /metrics");
    expect_one_error(PROVIDER_POOL("    kv_events: { port: 5557 }\n"), 6, "a provider publishes no KV events");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    kind: vendor\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "unknown kind 'vendor' (expected engine or provider)");
    /* With auth on, a provider pool needs a key of its own, fallback or not (auth may come
     * after the pools); at its kind line. */
    expect_one_error(PROVIDER_POOL("auth: { api_keys: [sk-gateway-key-1] }\n"), 3,
                     "a provider pool needs its own upstream_api_key");
    sb_config *cfg;
    sb_config_errors errs;
    int rc = parse_str(PROVIDER_POOL("    upstream_api_key: sk-provider\nauth: { api_keys: [sk-gateway-key-1] }\n"),
                       &cfg, &errs);
    if (rc)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    sb_config_free(cfg);
}

static void test_error_duplicate_names(void **state)
{
    /* A model in two pools. */
    expect_one_error("pools:\n"
                     "  - name: a\n"
                     "    models: [m, alias]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n"
                     "  - name: b\n"
                     "    models:\n"
                     "      - other\n"
                     "      - m\n"
                     "    endpoints: [\"127.0.0.1:9001\"]\n",
                     8, "name 'm' is already served by pool 'a' (line 3)");
    /* An alias repeated within one pool. */
    expect_one_error("pools:\n"
                     "  - name: a\n"
                     "    models: [m, alias, alias]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     3, "name 'alias' appears twice in pool 'a'");
    /* An adapter that shadows another pool's model. */
    expect_one_error("pools:\n"
                     "  - name: a\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n"
                     "  - name: b\n"
                     "    models: [n]\n"
                     "    adapters: [lora, m]\n"
                     "    endpoints: [\"127.0.0.1:9001\"]\n",
                     7, "name 'm' is already served by pool 'a'");
    /* An adapter in two pools. */
    expect_one_error("pools:\n"
                     "  - name: a\n"
                     "    models: [m]\n"
                     "    adapters: [lora]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n"
                     "  - name: b\n"
                     "    models: [n]\n"
                     "    adapters: [lora]\n"
                     "    endpoints: [\"127.0.0.1:9001\"]\n",
                     8, "name 'lora' is already served by pool 'a' (line 4)");
}

static void test_error_unknown_profile_and_engine(void **state)
{
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    profile: fastest\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     4, "pool 'p': unknown profile 'fastest'");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n"
                     "    engine: ollama\n",
                     5, "pool 'p': unknown engine 'ollama'");
    static const char *const profiles[] = {"round-robin", "least-request", "default"};
    for (size_t i = 0; i < 3; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, POOL_OK "    profile: %s\n", profiles[i]);
        sb_config *cfg;
        sb_config_errors errs;
        assert_int_equal(parse_str(yaml, &cfg, &errs), 0);
        assert_string_equal(cfg->pools[0].profile, profiles[i]);
        sb_config_free(cfg);
    }
}

/* A pool using profile `x`, followed by a `profiles:` map whose lines start at line 6. */
#define POOL_WITH_PROFILE(x)                                                                                           \
    "pools:\n"                                                                                                         \
    "  - name: p\n"                                                                                                    \
    "    models: [m]\n"                                                                                                \
    "    profile: " x "\n"                                                                                             \
    "    endpoints: [\"127.0.0.1:9000\"]\n"

static void test_profiles(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    /* profiles: may come before or after the pools naming them; an omitted setting keeps
     * sb_profile_init's default. */
    int rc = parse_str("profiles:\n"
                       "  fast:\n"
                       "    filters: [healthy]\n"
                       "    scorers: {queue: 1}\n"
                       "  empty:\n"
                       "  pairs: {picker: p2c, scorers: {running: 1, lora-affinity: 3}}\n" POOL_WITH_PROFILE("fast"),
                       &cfg, &errs);
    if (rc != 0)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    assert_int_equal(cfg->n_profiles, 3);
    const sb_profile *fast = sb_config_profile(cfg, "fast");
    assert_non_null(fast);
    assert_int_equal(fast->n_filters, 1);
    assert_int_equal(fast->n_scorers, 1);
    assert_ptr_equal(fast->picker, sb_picker_find("max-score"));
    assert_true(fast->temperature == 0.1);
    assert_true(fast->hot_prefix == 0.0);
    assert_true(fast->queue_threshold == 5.0);
    assert_true(fast->kv_threshold == 0.8);
    assert_int_equal(fast->n_labels, 0);
    const sb_profile *empty = sb_config_profile(cfg, "empty");
    assert_non_null(empty);
    assert_int_equal(empty->n_filters, 0);
    assert_int_equal(empty->n_scorers, 0);
    assert_ptr_equal(empty->picker, sb_picker_find("max-score"));
    const sb_profile *pairs = sb_config_profile(cfg, "pairs");
    assert_ptr_equal(pairs->picker, sb_picker_find("p2c"));
    assert_int_equal(pairs->n_scorers, 2);
    assert_ptr_equal(pairs->scorers[1].def, sb_scorer_find("lora-affinity"));
    assert_true(pairs->scorers[1].weight == 3.0);
    sb_config_free(cfg);

    /* Every built-in name works without being defined, and the edges of each range. */
    static const char *const builtins[] = {"round-robin", "least-request", "load-only", "default"};
    for (size_t i = 0; i < 4; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, POOL_OK "    profile: %s\n", builtins[i]);
        assert_int_equal(parse_str(yaml, &cfg, &errs), 0);
        assert_ptr_equal(sb_config_profile(cfg, cfg->pools[0].profile), sb_profile_builtin(builtins[i]));
        sb_config_free(cfg);
    }
    assert_int_equal(parse_str(POOL_WITH_PROFILE("x") "profiles:\n"
                                                      "  x: {kv_threshold: 0, queue_threshold: 0, temperature: 1e-3,"
                                                      " scorers: {queue: 0.0}}\n",
                               &cfg, &errs),
                     0);
    assert_true(cfg->profiles[0].kv_threshold == 0.0);
    assert_true(cfg->profiles[0].queue_threshold == 0.0);
    assert_true(cfg->profiles[0].temperature == 1e-3);
    sb_config_free(cfg);
    assert_int_equal(parse_str(POOL_WITH_PROFILE("x") "profiles:\n  x: {kv_threshold: 1}\n", &cfg, &errs), 0);
    assert_true(cfg->profiles[0].kv_threshold == 1.0);
    sb_config_free(cfg);
    /* Every filter and every scorer at once: the registry's full lists fit the limits. */
    assert_int_equal(parse_str(POOL_WITH_PROFILE("all") "profiles:\n"
                                                        "  all:\n"
                                                        "    filters: [healthy, lora, saturation, labels]\n"
                                                        "    labels: {a: b, c: d, e: f, g: h}\n"
                                                        "    scorers: {queue: 1, running: 1, kv-cache: 1, in-flight: 1,"
                                                        " pending-prefill: 1, lora-affinity: 1}\n",
                               &cfg, &errs),
                     0);
    assert_int_equal(cfg->profiles[0].n_filters, 4);
    assert_int_equal(cfg->profiles[0].n_scorers, 6);
    assert_int_equal(cfg->profiles[0].n_labels, 4);
    assert_string_equal(cfg->profiles[0].label_values[3], "h");
    sb_config_free(cfg);
}

static void test_error_profiles(void **state)
{
    /* Built-in names cannot be redefined. */
    static const char *const builtins[] = {"round-robin", "least-request", "load-only", "default"};
    for (size_t i = 0; i < 4; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, POOL_OK "profiles:\n  %s: {picker: p2c}\n", builtins[i]);
        char want[128];
        snprintf(want, sizeof want, "profile '%s' would shadow the built-in profile", builtins[i]);
        expect_one_error(yaml, 6, want);
    }
    expect_one_error(POOL_WITH_PROFILE("fastest"), 4,
                     "pool 'p': unknown profile 'fastest' (built in: round-robin, "
                     "least-request, load-only, default, default-events, prefix-only");
    /* A profile defined elsewhere in the file is found; a typo of it is not. */
    expect_one_error(POOL_WITH_PROFILE("eu-olny") "profiles:\n  eu-only: {}\n", 4, "unknown profile 'eu-olny'");
    expect_one_error(POOL_OK "profiles: [a]\n", 5, "profiles must be a mapping, got a list");
    expect_one_error(POOL_OK "profiles:\n  \"a b\": {}\n", 6, "profile name 'a b' may only contain");
    expect_one_error(POOL_OK "profiles:\n  "
                             "a123456789a123456789a123456789a123456789a123456789a123456789abcd: {}\n",
                     6, "is longer than 63 characters");
    expect_one_error(POOL_OK "profiles:\n  x: [healthy]\n", 6, "profile 'x' must be a mapping, got a list");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filter: [healthy]\n", 7, "unknown key 'filter' in profile 'x'");
    /* filters */
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: healthy\n", 7,
                     "profile 'x': filters must be a list, got a scalar");
    expect_one_error(
        POOL_OK "profiles:\n  x:\n    filters:\n      - healthy\n      - healty\n", 9,
        "profile 'x': filters[1]: unknown filter 'healty' (known: healthy, lora, saturation, labels, gate)");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [healthy, lora, healthy]\n", 7,
                     "filters[2]: filter 'healthy' is listed twice");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [healthy, lora, saturation, healthy, lora, saturation,"
                             " healthy, lora, saturation]\n",
                     7, "profile 'x': filters: at most 8 filters, got 9");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [healthy, [lora]]\n", 7,
                     "profile 'x': filters[1] must be a string, got a list");
    /* scorers */
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers: [queue]\n", 7,
                     "profile 'x': scorers must be a mapping, got a list");
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers:\n      queue: 1\n      prefixx: 2\n", 9,
                     "profile 'x': scorers: unknown scorer 'prefixx' (known: queue, running, kv-cache, in-flight, "
                     "pending-prefill, lora-affinity, prefix, prefix-tokens, predicted-latency");
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers: {queue: -1}\n", 7,
                     "profile 'x': scorers.queue must be at least 0, got -1");
    static const char *const bad_weights[] = {"\"2\"", "two", "0x10", ".inf", "nan", "1e999", "[1]", "~", "1.2.3"};
    for (size_t i = 0; i < sizeof bad_weights / sizeof bad_weights[0]; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, POOL_OK "profiles:\n  x:\n    scorers: {queue: %s}\n", bad_weights[i]);
        expect_one_error(yaml, 7, "profile 'x': scorers.queue must be a number");
    }
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers: {queue: 1, queue: 2}\n", 7,
                     "duplicate key 'queue' in profile 'x': scorers");
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers: {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1,"
                             " j: 1, k: 1, l: 1, m: 1}\n",
                     7, "profile 'x': scorers: at most 12 scorers, got 13");
    /* picker and parameters */
    expect_one_error(POOL_OK "profiles:\n  x:\n    picker: random\n", 7,
                     "profile 'x': unknown picker 'random' (known: max-score, weighted-random, p2c, softmax, "
                     "round-robin)");
    expect_one_error(POOL_OK "profiles:\n  x:\n    temperature: 0\n", 7,
                     "profile 'x': temperature must be greater than 0, got 0");
    expect_one_error(POOL_OK "profiles:\n  x:\n    scorers: {queue: 1}\n    hot_prefix: 1\n", 8,
                     "profile 'x': hot_prefix takes effect only with the 'prefix' scorer in scorers");
    expect_one_error(POOL_OK "profiles:\n  x:\n    hot_prefix: -1\n", 7,
                     "profile 'x': hot_prefix must be between 0 and 1000, got -1");
    expect_one_error(POOL_OK "profiles:\n  x:\n    queue_threshold: -0.5\n", 7,
                     "profile 'x': queue_threshold must be at least 0, got -0.5");
    expect_one_error(POOL_OK "profiles:\n  x:\n    kv_threshold: 1.01\n", 7,
                     "profile 'x': kv_threshold must be between 0 and 1, got 1.01");
    expect_one_error(POOL_OK "profiles:\n  x:\n    kv_threshold: \"0.5\"\n", 7,
                     "profile 'x': kv_threshold must be a number, got '0.5'");
    /* labels */
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [labels]\n    labels: {a: 1, b: 2, c: 3, d: 4, e: 5}\n",
                     8, "profile 'x': labels: at most 4 labels, got 5");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [healthy]\n    labels: {zone: a}\n", 8,
                     "profile 'x': labels take effect only with the 'labels' filter");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [healthy, labels]\n", 7,
                     "profile 'x': the 'labels' filter needs labels");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [labels]\n    labels: {zone: \"a b\"}\n", 8,
                     "label value 'a b' may only contain");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [labels]\n    labels: {\"a=b\": c}\n", 8,
                     "label name 'a=b' may only contain");
    expect_one_error(POOL_OK "profiles:\n  x:\n    filters: [labels]\n    labels: [zone]\n", 8,
                     "profile 'x': labels must be a mapping, got a list");
}

static void test_probe_and_health(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    /* interval at both bounds; only health checks may be turned off with 0. */
    assert_int_equal(parse_str(POOL_OK "    probe: {interval_ms: 50, min_interval_ms: 50, max_interval_ms: 50}\n",
                               &cfg, &errs),
                     0);
    assert_int_equal(cfg->pools[0].probe_interval_ms, 50);
    sb_config_free(cfg);
    expect_one_error(POOL_OK "    probe:\n      interval_ms: 20\n", 6,
                     "pool 'p': probe: interval_ms (20) must be between min_interval_ms (50) and max_interval_ms "
                     "(1000)");
    expect_one_error(POOL_OK "    probe:\n      interval_ms: 5000\n", 6, "interval_ms (5000) must be between");
    /* Moving a bound past the default interval blames the bound that was written. */
    expect_one_error(POOL_OK "    probe:\n      timeout_ms: 100\n      min_interval_ms: 200\n", 7,
                     "interval_ms (100) must be between min_interval_ms (200)");
    expect_one_error(POOL_OK "    probe:\n      max_interval_ms: 80\n", 6,
                     "interval_ms (100) must be between min_interval_ms (50) and max_interval_ms (80)");
    expect_one_error(POOL_OK "    probe:\n      min_interval_ms: 500\n      max_interval_ms: 400\n", 6,
                     "pool 'p': probe: min_interval_ms (500) must not exceed max_interval_ms (400)");
    expect_one_error(POOL_OK "    probe:\n      interval_ms: 0\n", 6,
                     "pool 'p': probe.interval_ms must be between 1 and 4294967295, got 0");
    expect_one_error(POOL_OK "    probe:\n      stale_ms: 0\n", 6, "pool 'p': probe.stale_ms must be between 1");
    expect_one_error(POOL_OK "    probe:\n      timeout_ms: 1s\n", 6,
                     "pool 'p': probe.timeout_ms must be an integer number of milliseconds, got '1s'");
    expect_one_error(POOL_OK "    probe:\n      path: metrics\n", 6,
                     "pool 'p': probe.path must be a path starting with '/'");
    expect_one_error(POOL_OK "    probe:\n      health_path: \"/he alth\"\n", 6,
                     "pool 'p': probe.health_path must be a path starting with '/', without spaces");
    expect_one_error(POOL_OK "    probe:\n      enabled: no\n", 6, "pool 'p': probe.enabled must be true or false");
    expect_one_error(POOL_OK "    probe:\n      interval: 100\n", 6, "unknown key 'interval' in pool 'p': probe");
    expect_one_error(POOL_OK "    probe: 100\n", 5, "pool 'p': probe must be a mapping, got a scalar");
    /* A field error is reported alone, without a range error built on the default it left. */
    expect_one_error(POOL_OK "    probe:\n      min_interval_ms: x\n      interval_ms: 10\n", 6,
                     "probe.min_interval_ms must be");

    assert_int_equal(parse_str(POOL_OK "    health:\n      max_failures: 1\n      base_eject_ms: 30000\n", &cfg, &errs),
                     0);
    assert_int_equal(cfg->pools[0].max_failures, 1);
    assert_int_equal(cfg->pools[0].base_eject_ms, 30000);
    sb_config_free(cfg);
    expect_one_error(POOL_OK "    health:\n      max_failures: 0\n", 6,
                     "pool 'p': health.max_failures must be between 1 and 4294967295, got 0");
    expect_one_error(POOL_OK "    health:\n      max_failures: 4294967296\n", 6, "health.max_failures must be between");
    expect_one_error(POOL_OK "    health:\n      max_eject_ms: 10\n", 6,
                     "pool 'p': health: base_eject_ms (1000) must not exceed max_eject_ms (10)");
    expect_one_error(POOL_OK "    health:\n      max_eject_ms: 100\n      base_eject_ms: 200\n", 7,
                     "base_eject_ms (200) must not exceed max_eject_ms (100)");
    expect_one_error(POOL_OK "    health:\n      ejection_ms: 10\n", 6, "unknown key 'ejection_ms' in pool 'p': health");
}

static void test_retry_and_ejection(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    /* Defaults: core/retry.h's policy, and the failure-rate rule on. */
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->retry.attempts, 3);
    assert_true(sb_retry_on(&cfg->retry, SB_RETRY_RESET, 0));
    assert_true(sb_retry_on(&cfg->retry, SB_RETRY_STATUS, 503));
    assert_true(cfg->pools[0].failure_rate == 0.25);
    assert_int_equal(cfg->pools[0].max_eject_percent, 50);
    sb_config_free(cfg);
    /* `on` replaces the list whole. */
    assert_int_equal(parse_str("retry:\n  on: [connect-failure, timeout, 503]\n  attempts: 5\n  backoff_ms: 0\n"
                               "  budget_ratio: 0.5\n  min_retries: 1\n" POOL_OK
                               "    health: {failure_rate: 0.5, min_requests: 20, window_ms: 5000, "
                               "max_eject_percent: 100}\n",
                               &cfg, &errs),
                     0);
    assert_true(sb_retry_on(&cfg->retry, SB_RETRY_CONNECT, 0));
    assert_true(sb_retry_on(&cfg->retry, SB_RETRY_TIMEOUT, 0));
    assert_false(sb_retry_on(&cfg->retry, SB_RETRY_RESET, 0));
    assert_true(sb_retry_on(&cfg->retry, SB_RETRY_STATUS, 503));
    assert_false(sb_retry_on(&cfg->retry, SB_RETRY_STATUS, 500));
    assert_int_equal(cfg->retry.attempts, 5);
    assert_int_equal(cfg->retry.backoff_ms, 0);
    assert_true(cfg->retry.budget_ratio == 0.5);
    assert_int_equal(cfg->retry.min_retries, 1);
    assert_true(cfg->pools[0].failure_rate == 0.5);
    assert_int_equal(cfg->pools[0].min_requests, 20);
    assert_int_equal(cfg->pools[0].window_ms, 5000);
    assert_int_equal(cfg->pools[0].max_eject_percent, 100);
    sb_config_free(cfg);
    expect_one_error("retry:\n  on: [reset, 404]\n" POOL_OK, 2,
                     "retry.on: '404' is neither connect-failure, reset, timeout nor a status from 500 to 599");
    expect_one_error("retry:\n  on: reset\n" POOL_OK, 2, "retry.on must be a list");
    expect_one_error("retry:\n  attempts: 0\n" POOL_OK, 2, "retry.attempts must be between 1 and 8");
    expect_one_error("retry:\n  attempts: 9\n" POOL_OK, 2, "retry.attempts must be between 1 and 8");
    expect_one_error("retry:\n  budget_ratio: 2\n" POOL_OK, 2, "retry.budget_ratio must be between 0 and 1");
    expect_one_error("retry:\n  backoff_ms: 500\n" POOL_OK, 2, "backoff_ms (500) must not exceed max_backoff_ms (250)");
    expect_one_error("retry:\n  tries: 2\n" POOL_OK, 2, "unknown key 'tries' in retry");
    expect_one_error(POOL_OK "    health:\n      failure_rate: 1.5\n", 6,
                     "pool 'p': health: failure_rate must be between 0 and 1");
    expect_one_error(POOL_OK "    health:\n      max_eject_percent: 0\n", 6,
                     "health.max_eject_percent must be between 1 and 100");
}

static void test_custom_metrics(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK "    engine: custom\n"
                                       "    metrics: {running: a_running, waiting: \"b:waiting\", kv_usage: _kv}\n",
                               &cfg, &errs),
                     0);
    assert_string_equal(cfg->pools[0].metric_running, "a_running");
    assert_string_equal(cfg->pools[0].metric_waiting, "b:waiting");
    assert_string_equal(cfg->pools[0].metric_kv_usage, "_kv");
    sb_config_free(cfg);
    /* custom needs all three: one error per missing name, at `metrics`, else at `engine`. */
    expect_one_error(POOL_OK "    engine: custom\n"
                             "    metrics:\n"
                             "      running: r\n"
                             "      waiting: w\n",
                     6, "pool 'p': engine custom needs metrics.kv_usage");
    assert_int_equal(parse_str(POOL_OK "    engine: custom\n", &cfg, &errs), -1);
    assert_int_equal(errs.total, 3);
    assert_true(has_error(&errs, 5, "engine custom needs metrics.running"));
    assert_true(has_error(&errs, 5, "engine custom needs metrics.waiting"));
    assert_true(has_error(&errs, 5, "engine custom needs metrics.kv_usage"));
    /* Other engines have their own names. */
    expect_one_error(POOL_OK "    metrics: {running: r}\n", 5,
                     "pool 'p': metrics applies only to engine custom (this pool's engine is auto)");
    expect_one_error(POOL_OK "    engine: sglang\n    metrics:\n", 6, "metrics applies only to engine custom");
    expect_one_error(POOL_OK "    engine: custom\n    metrics: {running: 1r, waiting: w, kv_usage: k}\n", 6,
                     "pool 'p': metrics.running must be a Prometheus metric name");
    expect_one_error(POOL_OK "    engine: custom\n    metrics: {running: r, waiting: \"w{a}\", kv_usage: k}\n", 6,
                     "metrics.waiting must be a Prometheus metric name");
    expect_one_error(POOL_OK "    engine: custom\n    metrics: {running: r, waiting: w, kv_usage: k, lora: l}\n", 6,
                     "unknown key 'lora' in pool 'p': metrics");
    /* An unknown engine is reported alone. */
    expect_one_error(POOL_OK "    engine: tgi\n    metrics: {running: r}\n", 5, "unknown engine 'tgi'");
}

static void test_endpoint_mappings(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    int rc = parse_str("pools:\n"
                       "  - name: p\n"
                       "    models: [m]\n"
                       "    endpoints:\n"
                       "      - address: \"[::1]:9000\"\n"
                       "      - {address: \"h:1\", draining: false, labels: {}}\n"
                       "      - address: \"h:2\"\n"
                       "        labels: {a: \"1\", b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, rack/zone: x.y_z-1}\n"
                       "      - \"h:3\"\n",
                       &cfg, &errs);
    if (rc != 0)
        print_errors(&errs);
    assert_int_equal(rc, 0);
    const sb_pool_config *pc = &cfg->pools[0];
    assert_int_equal(pc->n_endpoints, 4);
    assert_string_equal(pc->endpoints[0].host, "::1");
    assert_string_equal(pc->endpoints[0].address, "[::1]:9000");
    assert_false(pc->endpoints[1].draining);
    assert_int_equal(pc->endpoints[1].n_labels, 0);
    assert_int_equal(pc->endpoints[2].n_labels, 8);
    assert_string_equal(pc->endpoints[2].label_keys[7], "rack/zone");
    assert_string_equal(pc->endpoints[2].label_values[7], "x.y_z-1");
    assert_string_equal(pc->endpoints[3].address, "h:3");
    sb_config_free(cfg);

#define EP(item) "pools:\n  - name: p\n    models: [m]\n    endpoints:\n      - " item "\n"
    expect_one_error(EP("{labels: {a: b}}"), 5, "pool 'p': endpoints[0] has no 'address'");
    expect_one_error(EP("{address: \"h:0\"}"), 5, "pool 'p': endpoints[0].address: bad address 'h:0': port must be");
    expect_one_error(EP("{address: \"h:1\", weight: 2}"), 5, "unknown key 'weight' in pool 'p': endpoints[0]");
    expect_one_error(EP("{address: \"h:1\", draining: 1}"), 5,
                     "pool 'p': endpoints[0].draining must be true or false, got '1'");
    expect_one_error(EP("[\"h:1\"]"), 5, "pool 'p': endpoints[0] must be \"host:port\" or a mapping, got a list");
    expect_one_error(EP("address: \"h:1\"\n        labels: [a]"), 6,
                     "pool 'p': endpoints[0].labels must be a mapping, got a list");
    expect_one_error(EP("address: \"h:1\"\n        labels: {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"), 6,
                     "pool 'p': endpoints[0].labels: at most 8 labels, got 9");
    expect_one_error(EP("address: \"h:1\"\n        labels: {a: [1]}"), 6,
                     "pool 'p': endpoints[0].labels.a must be a string, got a list");
    expect_one_error(EP("address: \"h:1\"\n        labels: {\"\": x}"), 6, "label name '' may only contain");
    /* Duplicates are found across both forms, at the second address. */
    expect_one_error(EP("\"h:1\"\n      - draining: true\n        address: \"h:1\""), 7,
                     "pool 'p': endpoint 'h:1' is listed twice");
#undef EP
}

static const sb_api_key *find_key(const sb_config *cfg, const char *key)
{
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest(key, strlen(key), d);
    return sb_auth_keys_find(&cfg->api_keys, d);
}

/* No error message may quote a secret: the loader's output is printed and may be logged. */
static void expect_no_secret(const sb_config_errors *errs, const char *secret)
{
    for (size_t i = 0; i < errs->n; i++)
        assert_null(strstr(errs->items[i].message, secret));
}

static void test_admin_listener(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    /* Defaults: on loopback 8081, 64 connections, no token, /metrics open. */
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_string_equal(cfg->admin_host, "127.0.0.1");
    assert_int_equal(cfg->admin_port, 8081);
    assert_int_equal(cfg->admin_max_connections, 64);
    assert_false(cfg->admin_has_token);
    assert_false(cfg->admin_metrics_auth);
    sb_config_free(cfg);

    assert_int_equal(parse_str("admin:\n  listen: \"0.0.0.0:9100\"\n  max_connections: 8\n  token: s3cret-t0ken\n"
                               "  metrics_auth: true\n  debug_endpoints: false\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_string_equal(cfg->admin_host, "0.0.0.0");
    assert_int_equal(cfg->admin_port, 9100);
    assert_int_equal(cfg->admin_max_connections, 8);
    assert_true(cfg->admin_has_token);
    assert_true(cfg->admin_metrics_auth);
    assert_false(cfg->debug_endpoints);
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest("s3cret-t0ken", 12, d);
    assert_memory_equal(cfg->admin_token_digest, d, sizeof d);
    sb_config_free(cfg);

    /* null turns the listener off; a token file is recorded, read by the cmd layer. */
    assert_int_equal(parse_str("admin: { listen: null, token_file: admin.token }\n" POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->admin_host);
    assert_string_equal(cfg->admin_token_file, "admin.token");
    assert_false(cfg->admin_has_token);
    char text[] = "  tok-from-file\n";
    char msg[200];
    assert_int_equal(sb_config_set_admin_token(cfg, text, strlen("  tok-from-file\n"), msg, sizeof msg), 0);
    assert_true(cfg->admin_has_token);
    sb_auth_digest("tok-from-file", 13, d);
    assert_memory_equal(cfg->admin_token_digest, d, sizeof d);
    assert_null(strstr(text, "tok")); /* wiped */
    char empty[] = " \n";
    assert_int_equal(sb_config_set_admin_token(cfg, empty, 2, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "must hold one token"));
    sb_config_free(cfg);

    /* Secure by default: other hosts may reach a non-loopback address. */
    expect_one_error("admin:\n  listen: \"0.0.0.0:8081\"\n" POOL_OK, 2,
                     "admin.listen 0.0.0.0 is not a loopback address: set admin.token or admin.token_file");
    expect_one_error("admin:\n  listen: \"[::]:8081\"\n" POOL_OK, 2, "is not a loopback address");
    assert_int_equal(parse_str("admin: { listen: \"[::1]:8081\" }\n" POOL_OK, &cfg, &errs), 0);
    sb_config_free(cfg);
    /* Names are not resolved for listening: refused here rather than failing to bind later. */
    expect_one_error("admin: { listen: \"localhost:8081\" }\n" POOL_OK, 1, "admin.listen must be an IP address");
    expect_one_error("listen: \"localhost:8080\"\n" POOL_OK, 1, "listen must be an IP address");
    assert_int_equal(parse_str("admin: { listen: \"0.0.0.0:8081\", token_file: /etc/sb/admin }\n" POOL_OK, &cfg, &errs),
                     0);
    sb_config_free(cfg);
    expect_one_error("admin:\n  token: abc\n  token_file: f\n" POOL_OK, 3, "give token or token_file, not both");
    expect_one_error("admin:\n  metrics_auth: true\n" POOL_OK, 2, "admin.metrics_auth needs admin.token");
    expect_one_error("admin:\n  max_connections: 0\n" POOL_OK, 2, "admin.max_connections must be between 1");
    expect_one_error("admin:\n  listen: 8081\n" POOL_OK, 2, "admin.listen");
    expect_one_error("admin:\n  listen: \"127.0.0.1:8080\"\n" POOL_OK, 2, "admin.listen must differ from listen");
    /* The default admin address against a listen written on its port: reported at `listen`
     * (there is no admin.listen node; this crashed), and wildcards overlap every host. */
    expect_one_error("listen: \"127.0.0.1:8081\"\n" POOL_OK, 1, "must differ from listen (admin 127.0.0.1:8081, the default");
    expect_one_error("listen: \"0.0.0.0:8081\"\nadmin: { debug_endpoints: false }\n" POOL_OK, 1,
                     "admin.listen must differ from listen");
    expect_one_error("listen: \"127.0.0.1:9000\"\nadmin:\n  listen: \"[::]:9000\"\n  token: t\n" POOL_OK, 3,
                     "admin.listen must differ from listen");
    assert_int_equal(parse_str("listen: \"0.0.0.0:8080\"\n" POOL_OK, &cfg, &errs), 0);
    sb_config_free(cfg);
    assert_int_equal(parse_str("admin:\n  token: \"bad token\"\n" POOL_OK, &cfg, &errs), -1);
    assert_true(has_error(&errs, 2, "admin.token must be 1 to 4096 printable ASCII characters without blanks"));
    expect_no_secret(&errs, "bad token");
}

/* sync: gateway sync; off unless configured, defaults, peers, bounds. */
static void test_sync(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->sync_listen);
    assert_int_equal(cfg->n_sync_peers, 0);
    sb_config_free(cfg);

    assert_int_equal(parse_str("sync:\n  listen: \"tcp://0.0.0.0:5600\"\n" POOL_OK, &cfg, &errs), 0);
    assert_string_equal(cfg->sync_listen, "tcp://0.0.0.0:5600");
    assert_int_equal(cfg->n_sync_peers, 0);
    assert_int_equal(cfg->sync_heartbeat_ms, 1000);
    assert_int_equal(cfg->sync_peer_timeout_ms, 5000);
    assert_int_equal(cfg->sync_max_tracked, 65536);
    assert_int_equal(cfg->sync_max_request_ms, 600000);
    sb_config_free(cfg);

    assert_int_equal(parse_str("sync:\n  listen: \"ipc:///run/sb.sock\"\n  peers: [\"tcp://gw-b:5600\", "
                               "\"tcp://10.0.0.3:5600\"]\n  heartbeat_ms: 200\n  peer_timeout_ms: 1000\n"
                               "  max_tracked: 100\n  max_request_ms: 60000\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_string_equal(cfg->sync_listen, "ipc:///run/sb.sock");
    assert_int_equal(cfg->n_sync_peers, 2);
    assert_string_equal(cfg->sync_peers[0], "tcp://gw-b:5600");
    assert_string_equal(cfg->sync_peers[1], "tcp://10.0.0.3:5600");
    assert_int_equal(cfg->sync_heartbeat_ms, 200);
    assert_int_equal(cfg->sync_peer_timeout_ms, 1000);
    assert_int_equal(cfg->sync_max_tracked, 100);
    assert_int_equal(cfg->sync_max_request_ms, 60000);
    sb_config_free(cfg);

    assert_int_equal(parse_str("sync: null\n" POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->sync_listen);
    sb_config_free(cfg);

    expect_one_error("sync:\n  peers: [\"tcp://a:1\"]\n" POOL_OK, 2, "sync needs listen");
    expect_one_error("sync:\n  listen: \"0.0.0.0:5600\"\n" POOL_OK, 2, "sync.listen must be a ZMQ address");
    expect_one_error("sync:\n  listen: \"tcp://\"\n" POOL_OK, 2, "sync.listen must be a ZMQ address");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  peers: \"tcp://b:1\"\n" POOL_OK, 3,
                     "sync.peers must be a list");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  peers: [\"http://b:1\"]\n" POOL_OK, 3,
                     "sync.peers[] must be a ZMQ address");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  peers: [\"tcp://a:1\"]\n" POOL_OK, 3,
                     "names this gateway's own listen address");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  heartbeat_ms: 5000\n" POOL_OK, 2,
                     "must be longer than sync.heartbeat_ms");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  max_tracked: 0\n" POOL_OK, 3, "sync.max_tracked");
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  peer: []\n" POOL_OK, 3, "unknown key 'peer' in sync");
    char big[4096] = "sync:\n  listen: \"tcp://a:1\"\n  peers: [";
    for (int i = 0; i < 65; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"tcp://p%d:1\"", i ? ", " : "", i);
    snprintf(big + strlen(big), sizeof big - strlen(big), "]\n%s", POOL_OK);
    expect_one_error(big, 3, "at most 64 peers");

    /* key_file: recorded here, read by the cmd layer; its text must be one Z85 CURVE secret. */
    assert_int_equal(parse_str("sync: { listen: \"tcp://a:1\", key_file: keys/sync.key }\n" POOL_OK, &cfg, &errs), 0);
    assert_string_equal(cfg->sync_key_file, "keys/sync.key");
    assert_false(cfg->sync_has_key);
    char msg[200];
    char good[] = " \tJTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\r\n";
    assert_int_equal(sb_config_set_sync_key(cfg, good, strlen(good), msg, sizeof msg), 0);
    assert_true(cfg->sync_has_key);
    assert_string_equal(cfg->sync_key, "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6");
    assert_null(strstr(good, "JTKV"));                              /* wiped */
    char short_key[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh\n"; /* 39 */
    char long_key[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh66";  /* 41 */
    char bad_char[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh\\";  /* a backslash is not Z85 */
    char quote[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh\"";
    char inner_blank[] = "JTKVSB%%)wK0E.X)V>+}o?pNm {O&4W4b!Ni{Lh6";
    char *bad[] = {short_key, long_key, bad_char, quote, inner_blank};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = strlen(bad[i]);
        assert_int_equal(sb_config_set_sync_key(cfg, bad[i], n, msg, sizeof msg), -1);
        assert_non_null(strstr(msg, "must hold one CURVE secret key"));
        assert_null(strstr(msg, "JTKV")); /* the message names no part of the secret */
        for (size_t j = 0; j < n; j++)
            assert_int_equal(bad[i][j], 0); /* wiped, refused or not */
    }
    assert_string_equal(cfg->sync_key, "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"); /* kept */
    sb_config_free(cfg);

    /* rotation_key_file: a second key, only beside key_file, held apart from it. */
    assert_int_equal(
        parse_str("sync: { listen: \"tcp://a:1\", key_file: new.key, rotation_key_file: old.key }\n" POOL_OK, &cfg,
                  &errs),
        0);
    assert_string_equal(cfg->sync_key_file, "new.key");
    assert_string_equal(cfg->sync_rotation_key_file, "old.key");
    char other[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n";
    char rejected[] = "not a key";
    assert_int_equal(sb_config_set_sync_rotation_key(cfg, rejected, strlen(rejected), msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "sync.rotation_key_file must hold one CURVE secret key"));
    assert_false(cfg->sync_has_rotation_key);
    assert_int_equal(sb_config_set_sync_rotation_key(cfg, other, strlen(other), msg, sizeof msg), 0);
    assert_true(cfg->sync_has_rotation_key);
    assert_false(cfg->sync_has_key); /* the other key is untouched */
    assert_string_equal(cfg->sync_rotation_key, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
    sb_config_free(cfg);
    expect_one_error("sync:\n  listen: \"tcp://a:1\"\n  rotation_key_file: old.key\n" POOL_OK, 2,
                     "sync.rotation_key_file needs sync.key_file");
}

/* ext_proc: the endpoint picker's listener; off unless configured, defaults, bounds, modes. */
static void test_ext_proc(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->extproc_host);
    sb_config_free(cfg);

    assert_int_equal(parse_str("ext_proc:\n  listen: \"0.0.0.0:9002\"\n" POOL_OK, &cfg, &errs), 0);
    assert_string_equal(cfg->extproc_host, "0.0.0.0");
    assert_int_equal(cfg->extproc_port, 9002);
    assert_int_equal(cfg->extproc_fallbacks, 0);
    assert_int_equal(cfg->extproc_chunk_bytes, 62000);
    assert_int_equal(cfg->extproc_request_body_mode, SB_EXTPROC_MODE_FULL_DUPLEX);
    assert_int_equal(cfg->extproc_response_body_mode, SB_EXTPROC_MODE_FULL_DUPLEX);
    assert_int_equal(cfg->extproc_max_streams, 1024);
    assert_null(cfg->extproc_tls_cert);
    assert_false(cfg->extproc_has_token);
    sb_config_free(cfg);

    /* A token: kept as its digest only. */
    assert_int_equal(parse_str("ext_proc: { listen: \"0.0.0.0:9002\", token: picker-s3cret }\n" POOL_OK, &cfg, &errs),
                     0);
    assert_true(cfg->extproc_has_token);
    uint8_t d[SB_AUTH_DIGEST_LEN];
    sb_auth_digest("picker-s3cret", 13, d);
    assert_memory_equal(cfg->extproc_token_digest, d, sizeof d);
    sb_config_free(cfg);
    assert_int_equal(parse_str("ext_proc: { listen: \"0.0.0.0:9002\", token: \"two words\" }\n" POOL_OK, &cfg, &errs),
                     -1);
    expect_no_secret(&errs, "two words");

    assert_int_equal(parse_str("ext_proc:\n  listen: \"[::1]:9003\"\n  fallbacks: 0\n  chunk_bytes: 16KiB\n"
                               "  request_body_mode: buffered\n  response_body_mode: none\n  tls_cert: c.pem\n"
                               "  tls_key: k.pem\n  max_streams: 10\n  max_connections: 2\n  idle_ms: 5000\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_string_equal(cfg->extproc_host, "::1");
    assert_int_equal(cfg->extproc_port, 9003);
    assert_int_equal(cfg->extproc_fallbacks, 0);
    assert_int_equal(cfg->extproc_chunk_bytes, 16384);
    assert_int_equal(cfg->extproc_request_body_mode, SB_EXTPROC_MODE_BUFFERED);
    assert_int_equal(cfg->extproc_response_body_mode, SB_EXTPROC_MODE_NONE);
    assert_string_equal(cfg->extproc_tls_cert, "c.pem");
    assert_string_equal(cfg->extproc_tls_key, "k.pem");
    assert_int_equal(cfg->extproc_max_streams, 10);
    assert_int_equal(cfg->extproc_max_connections, 2);
    assert_int_equal(cfg->extproc_idle_ms, 5000);
    sb_config_free(cfg);

    expect_one_error("ext_proc:\n  fallbacks: 2\n" POOL_OK, 2, "ext_proc needs listen");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:9002\"\n  fallbacks: 8\n" POOL_OK, 3,
                     "ext_proc.fallbacks must be between 0 and 7");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:9002\"\n  request_body_mode: none\n" POOL_OK, 3,
                     "ext_proc.request_body_mode must be full_duplex_streamed or buffered, got 'none'");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:9002\"\n  response_body_mode: streamed\n" POOL_OK, 3,
                     "or buffered or none");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:9002\"\n  tls_cert: c.pem\n" POOL_OK, 2,
                     "give both tls_cert and tls_key");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:8080\"\n" POOL_OK, 2, "ext_proc.listen must differ from listen");
    expect_one_error("ext_proc:\n  listen: \"0.0.0.0:8081\"\n" POOL_OK, 2,
                     "ext_proc.listen must differ from admin.listen");
    expect_one_error("ext_proc:\n  listen: \"127.0.0.1:9002\"\n  chunk: 5\n" POOL_OK, 3,
                     "unknown key 'chunk' in ext_proc");
    expect_one_error("ext_proc: [1]\n" POOL_OK, 1, "ext_proc");

    /* listen: null turns the HTTP proxy listener off: a picker-only gateway; alone, an error. */
    assert_int_equal(parse_str("listen: null\next_proc: { listen: \"127.0.0.1:9002\" }\n" POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->listen_host);
    assert_string_equal(cfg->extproc_host, "127.0.0.1");
    sb_config_free(cfg);
    expect_one_error("listen: null\n" POOL_OK, 1, "without ext_proc nothing would be served");
}

/* A key written where a field name belongs is never quoted back (messages reach logs). */
static void test_misplaced_keys_not_echoed(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("auth:\n  api_keys:\n    - sk-live-SECRET123: { tenant: alice }\n" POOL_OK, &cfg, &errs), -1);
    assert_true(has_error(&errs, 3, "unknown field in auth.api_keys[0]"));
    expect_no_secret(&errs, "SECRET123");
    assert_int_equal(parse_str("auth:\n  sk-live-SECRET456: x\n" POOL_OK, &cfg, &errs), -1);
    assert_true(has_error(&errs, 2, "unknown field in auth"));
    expect_no_secret(&errs, "SECRET456");
}

static void test_client_auth(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("auth:\n"
                               "  api_keys:\n"
                               "    - sk-plain\n"
                               "    - { key: sk-team-a, tenant: team-a, band: critical }\n"
                               "    - key: sk-batch\n"
                               "      band: sheddable\n"
                               "  api_keys_file: keys.txt\n"
                               "flow_control:\n"
                               "  api_keys: { sk-plain: standard, sk-flow-only: critical }\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_true(cfg->auth_enabled);
    assert_string_equal(cfg->auth_api_keys_file, "keys.txt");
    assert_int_equal(cfg->api_keys.n, 4);
    assert_int_equal(sb_auth_keys_clients(&cfg->api_keys), 3);
    const sb_api_key *k = find_key(cfg, "sk-plain");
    assert_non_null(k);
    assert_true(k->admits);
    assert_int_equal(k->band, 1); /* from flow_control.api_keys, merged */
    assert_string_equal(k->tenant, "");
    k = find_key(cfg, "sk-team-a");
    assert_true(k->admits);
    assert_int_equal(k->band, 0);
    assert_string_equal(k->tenant, "team-a");
    k = find_key(cfg, "sk-batch");
    assert_int_equal(k->band, 2);
    k = find_key(cfg, "sk-flow-only");
    assert_false(k->admits);
    assert_null(find_key(cfg, "sk-unknown"));

    /* The keys file joins the table (union) and is wiped. */
    char file[] = "# team b\nsk-file-1 tenant=team-b band=critical\n\n  sk-file-2   # no fields\n";
    int line = -1;
    char msg[200];
    assert_int_equal(sb_config_set_keys_file(cfg, file, strlen(file), &line, msg, sizeof msg), 0);
    assert_null(strstr(file, "sk-file"));
    assert_int_equal(sb_auth_keys_clients(&cfg->api_keys), 5);
    k = find_key(cfg, "sk-file-1");
    assert_string_equal(k->tenant, "team-b");
    assert_int_equal(k->band, 0);
    assert_non_null(find_key(cfg, "sk-file-2"));
    assert_non_null(find_key(cfg, "sk-team-a"));
    /* A file repeating an inline key is refused, naming the line, not the key. */
    char dup[] = "sk-new\nsk-team-a\n";
    assert_int_equal(sb_config_set_keys_file(cfg, dup, strlen(dup), &line, msg, sizeof msg), -1);
    assert_int_equal(line, 2);
    assert_non_null(strstr(msg, "listed twice"));
    sb_config_free(cfg);

    /* An empty list still turns auth on: no key admits anything. */
    assert_int_equal(parse_str("auth: { api_keys: [] }\n" POOL_OK, &cfg, &errs), 0);
    assert_true(cfg->auth_enabled);
    assert_int_equal(cfg->api_keys.n, 0);
    sb_config_free(cfg);

    expect_one_error("auth:\n  api_keys: sk-a\n" POOL_OK, 2, "auth.api_keys must be a list, got a scalar");
    expect_one_error("auth:\n  keys: [a]\n" POOL_OK, 2, "unknown field 'keys' in auth");
    expect_one_error("auth:\n  api_keys:\n    - { tenant: t }\n" POOL_OK, 3, "auth.api_keys[0] has no 'key'");
    expect_one_error("auth:\n  api_keys:\n    - { key: k, band: vip }\n" POOL_OK, 3,
                     "auth.api_keys[0].band: unknown band 'vip'");
    expect_one_error("auth:\n  api_keys:\n    - { key: k, tenant: \"a b\" }\n" POOL_OK, 3,
                     "auth.api_keys[0].tenant must be 1 to 64 letters");
    expect_one_error("auth:\n  api_keys:\n    - { key: k, colour: red }\n" POOL_OK, 3,
                     "unknown field 'colour' in auth.api_keys[0]");
    expect_one_error(
        "auth:\n  api_keys:\n    - { key: k, band: critical }\nflow_control:\n  api_keys: { k: sheddable }\n" POOL_OK,
        5, "the same key is given two different bands");
    assert_int_equal(
        parse_str("auth:\n  api_keys:\n    - sk-twice-secret\n    - sk-twice-secret\n" POOL_OK, &cfg, &errs), -1);
    assert_true(has_error(&errs, 4, "auth.api_keys[1]: the same key is listed twice"));
    expect_no_secret(&errs, "sk-twice-secret");
    assert_int_equal(parse_str("auth:\n  api_keys: [\"sk leaked\"]\n" POOL_OK, &cfg, &errs), -1);
    expect_no_secret(&errs, "sk leaked");
}

static void test_upstream_api_key(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK "    upstream_api_key: sk-upstream\n"
                                       "  - name: q\n    models: [n]\n    endpoints: [\"127.0.0.1:9001\"]\n"
                                       "    upstream_api_key_file: up.key\n"
                                       "  - name: r\n    models: [o]\n    endpoints: [\"127.0.0.1:9002\"]\n",
                               &cfg, &errs),
                     0);
    assert_string_equal(cfg->pools[0].upstream_auth_header, "Authorization: Bearer sk-upstream\r\n");
    assert_null(cfg->pools[1].upstream_auth_header);
    assert_string_equal(cfg->pools[1].upstream_api_key_file, "up.key");
    assert_null(cfg->pools[2].upstream_auth_header);
    char text[] = "sk-from-file\n";
    char msg[200];
    assert_int_equal(sb_config_set_upstream_key(cfg, 1, text, strlen(text), msg, sizeof msg), 0);
    assert_string_equal(cfg->pools[1].upstream_auth_header, "Authorization: Bearer sk-from-file\r\n");
    assert_null(strstr(text, "sk-"));
    sb_config_free(cfg);
    expect_one_error(POOL_OK "    upstream_api_key: a\n    upstream_api_key_file: b\n", 6,
                     "pool 'p': give upstream_api_key or upstream_api_key_file, not both");
    expect_one_error(POOL_OK "    upstream_api_key: \"a\\r\\nX-Injected: 1\"\n", 5,
                     "upstream_api_key must be 1 to 4096 printable ASCII characters");
}

static void test_admin_and_decision_log(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("admin:\naccess_log_decisions: false\n" POOL_OK, &cfg, &errs), 0);
    assert_true(cfg->debug_endpoints);
    assert_false(cfg->log_decisions);
    sb_config_free(cfg);
    expect_one_error("admin:\n  debug: true\n" POOL_OK, 2, "unknown key 'debug' in admin");
    expect_one_error("admin:\n  debug_endpoints: off\n" POOL_OK, 2,
                     "admin.debug_endpoints must be true or false, got 'off'");
    expect_one_error("access_log_decisions: yes\n" POOL_OK, 1, "access_log_decisions must be true or false, got 'yes'");
    expect_one_error("access_log_decisions: {}\n" POOL_OK, 1,
                     "access_log_decisions must be true or false, got a mapping");
}

/* admin.decisions and admin.decision_candidates size the ring of recent decisions. */
static void test_admin_decisions_ring(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->admin_decisions, 512);
    assert_int_equal(cfg->admin_decision_candidates, 16);
    sb_config_free(cfg);
    assert_int_equal(parse_str("admin: { decisions: 0 }\n" POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->admin_decisions, 0);
    sb_config_free(cfg);
    assert_int_equal(parse_str("admin: { decisions: 2048, decision_candidates: 256 }\n" POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->admin_decision_candidates, 256);
    sb_config_free(cfg);
    expect_one_error("admin: { decisions: 65537 }\n" POOL_OK, 1, "admin.decisions");
    expect_one_error("admin: { decision_candidates: 0 }\n" POOL_OK, 1, "admin.decision_candidates");
    expect_one_error("admin: { decision_candidates: 257 }\n" POOL_OK, 1, "admin.decision_candidates");
    expect_one_error("admin: { decisions: -1 }\n" POOL_OK, 1, "admin.decisions");
    /* Each bound alone allows 5.5 GiB: their product is bounded too (a candidate is 336 bytes). */
    expect_one_error("admin: { decisions: 65536, decision_candidates: 9 }\n" POOL_OK, 1, "at most 524288 candidates");
    expect_one_error("admin: { decisions: 4096, decision_candidates: 129 }\n" POOL_OK, 1, "at most 524288 candidates");
}

/* metrics.max_models: the model label's bound, 32 by default, 1 .. 4096. */
static void test_metrics_max_models(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->metrics_max_models, 32);
    sb_config_free(cfg);
    assert_int_equal(parse_str("metrics: { max_models: 1 }\n" POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->metrics_max_models, 1);
    sb_config_free(cfg);
    expect_one_error("metrics:\n  max_models: 0\n" POOL_OK, 2, "metrics.max_models must be between 1 and 4096, got 0");
    expect_one_error("metrics:\n  max_models: 4097\n" POOL_OK, 2, "metrics.max_models must be between 1 and 4096");
    expect_one_error("metrics:\n  model_label: true\n" POOL_OK, 2, "unknown key 'model_label' in metrics");
}

static void test_error_default_pool(void **state)
{
    expect_one_error("routing:\n"
                     "  block_bytes: 64\n"
                     "  default_pool: lama\n" POOL_OK,
                     3, "routing.default_pool names no pool: 'lama'");
}

static void test_error_yaml_syntax(void **state)
{
    /* An unclosed flow sequence: libyaml notices at the next line's key. */
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("listen: \"127.0.0.1:8080\"\n"
                               "pools:\n"
                               "  - name: p\n"
                               "    models: [m, n\n"
                               "    endpoints: [\"127.0.0.1:9000\"]\n",
                               &cfg, &errs),
                     -1);
    assert_null(cfg);
    assert_int_equal(errs.total, 1);
    assert_int_equal(errs.items[0].line, 5);
    assert_non_null(strstr(errs.items[0].message, "YAML syntax error"));

    expect_one_error("limits:\n  max_body_bytes: 1\n bad: indentation\n", 3, "YAML syntax error");
    expect_one_error("a: b: c\n", 1, "mapping values are not allowed");
    expect_one_error("listen: \"unterminated\n", 2, "YAML syntax error");
    /* After a valid first document, a broken second one is still reported. */
    expect_one_error(POOL_OK "---\n]\n", 6, "YAML syntax error");
    /* Bad UTF-8 is located from the byte offset libyaml reports. */
    expect_one_error("pools:\n  - name: \xff\n", 2, "YAML syntax error");
}

static void test_multiple_errors(void **state)
{
    static const char yaml[] = "listen: \"localhost\"\n" /* 1: no port */
                               "limits:\n"
                               "  max_body_bytes: 0\n" /* 3: out of range */
                               "  colour: blue\n"      /* 4: unknown key */
                               "timeouts:\n"
                               "  connect_ms: -5\n" /* 6: not an integer */
                               "routing:\n"
                               "  default_pool: nowhere\n" /* 8: no such pool */
                               "pools:\n"
                               "  - name: a\n"
                               "    models: [m]\n"
                               "    engine: tgi\n"                  /* 12: unknown engine */
                               "    endpoints: [\"127.0.0.1:0\"]\n" /* 13: bad port */
                               "  - name: a\n"                      /* 14: duplicate pool */
                               "    models: [m]\n"                  /* 15: duplicate model */
                               "    profile: fast\n"                /* 16: unknown profile */
                               "    endpoints: [\"127.0.0.1:1\"]\n";
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(yaml, &cfg, &errs), -1);
    assert_null(cfg);
    static const struct {
        int line;
        const char *needle;
    } want[] = {
        {1, "missing ':port'"},         {3, "must be at least 1"},   {4, "unknown key 'colour'"},
        {6, "connect_ms must be"},      {8, "names no pool"},        {12, "unknown engine 'tgi'"},
        {13, "port must be"},           {14, "duplicate pool name"}, {15, "already served by"},
        {16, "unknown profile 'fast'"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_true(has_error(&errs, want[i].line, want[i].needle));
    assert_int_equal(errs.total, sizeof want / sizeof want[0]);
    /* Columns point at the offending value. */
    assert_int_equal(errs.items[0].column, 9);
}

static void test_error_overflow_list(void **state)
{
    /* More errors than the list keeps: total still counts them all. */
    char yaml[4096] = "limits:\n";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "  bad%d: 1\n", i);
        strcat(yaml, line);
    }
    strcat(yaml, POOL_OK);
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(yaml, &cfg, &errs), -1);
    assert_int_equal(errs.total, 40);
    assert_int_equal(errs.n, 32);
    char buf[8192];
    sb_config_errors_format(&errs, "x.yaml", buf, sizeof buf);
    assert_non_null(strstr(buf, "x.yaml:2:3: unknown key 'bad0' in limits\n"));
    assert_non_null(strstr(buf, "x.yaml: ... and 8 more errors\n"));
}

static void test_errors_format(void **state)
{
    sb_config_errors errs = {.n = 2, .total = 2};
    errs.items[0] = (sb_config_error){3, 7, "first"};
    errs.items[1] = (sb_config_error){0, 0, "out of memory"};
    char buf[256];
    sb_config_errors_format(&errs, "sb.yaml", buf, sizeof buf);
    assert_string_equal(buf, "sb.yaml:3:7: first\nsb.yaml: out of memory\n");
    /* A short buffer truncates but stays terminated. */
    char small[10];
    memset(small, 'x', sizeof small);
    sb_config_errors_format(&errs, "sb.yaml", small, sizeof small);
    assert_string_equal(small, "sb.yaml:3");
    sb_config_errors_format(&errs, "sb.yaml", small, 0);
    assert_int_equal(small[0], 's');
}

/* Every allocation the parser makes may fail: the result is an error, never a crash or a leak
 * (leaks show up under AddressSanitizer's LeakSanitizer at exit). */
static void test_allocation_failure(void **state)
{
    int successes = 0;
    for (long n = 0; n < 400; n++) {
        sb_config *cfg = NULL;
        sb_config_errors errs;
        sb_alloc_fail_after(n);
        int rc = sb_config_parse(full_yaml, strlen(full_yaml), &cfg, &errs);
        sb_alloc_fail_after(-1);
        if (rc == 0) {
            assert_non_null(cfg);
            assert_int_equal(cfg->n_pools, 2);
            sb_config_free(cfg);
            successes++;
        } else {
            assert_null(cfg);
            assert_int_equal(errs.total, 1);
            assert_int_equal(errs.items[0].line, 0);
            assert_non_null(strstr(errs.items[0].message, "out of memory"));
        }
    }
    /* The loop went past the last allocation, so every failure point was exercised. */
    assert_true(successes > 0);

    /* Failure injection on an invalid config, which also allocates the error path's state. */
    static const char bad[] = "limits: {x: 1}\n" POOL_OK "  - name: p\n    models: [m]\n"
                              "    endpoints: [\"h:1\"]\n";
    for (long n = 0; n < 100; n++) {
        sb_config *cfg = NULL;
        sb_config_errors errs;
        sb_alloc_fail_after(n);
        assert_int_equal(sb_config_parse(bad, strlen(bad), &cfg, &errs), -1);
        sb_alloc_fail_after(-1);
        assert_null(cfg);
        assert_true(errs.total >= 1);
    }
}


static sb_config *parse_example(const char *path)
{
    size_t len;
    char *text = sb_test_read_file(path, &len);
    sb_config *cfg = NULL;
    sb_config_errors errs;
    int rc = sb_config_parse(text, len, &cfg, &errs);
    free(text);
    if (rc != 0) {
        char buf[8192];
        sb_config_errors_format(&errs, path, buf, sizeof buf);
        fprintf(stderr, "%s", buf);
    }
    assert_int_equal(rc, 0);
    return cfg;
}

static void test_example_switchboard(void **state)
{
    sb_config *cfg = parse_example("examples/switchboard.yaml");
    assert_true(cfg->n_pools >= 1);
    /* It shows a user profile in use and the mapping form of an endpoint. */
    const sb_pool_config *llama = &cfg->pools[0];
    const sb_profile *prof = sb_config_profile(cfg, llama->profile);
    assert_non_null(prof);
    assert_true(prof >= cfg->profiles && prof < cfg->profiles + cfg->n_profiles);
    assert_true(prof->n_labels > 0);
    bool labelled = false;
    for (size_t i = 0; i < llama->n_endpoints; i++)
        labelled |= llama->endpoints[i].n_labels > 0;
    assert_true(labelled);
    sb_config_free(cfg);
}

/* Every pool key goes through its handler (the pool key table), each wrong in its own way: the
 * messages, their positions and their order (keys in file order, then the checks made once
 * every key is read) are the contract operators see. */
/* `kv_events:` per pool: defaults, the port shorthands, {host} expansion, and each bad value
 * reported with its key's path. */
static void test_kv_events(void **state)
{
    sb_config *cfg;
    sb_config_errors errs;
    /* Without the key, no subscription. */
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_null(cfg->pools[0].kv_events);
    sb_config_free(cfg);
    /* An empty mapping: vLLM's defaults (port 5557, no replay, every topic). */
    assert_int_equal(parse_str(POOL_OK "    kv_events: {}\n", &cfg, &errs), 0);
    const sb_kv_events_config *kc = cfg->pools[0].kv_events;
    assert_non_null(kc);
    assert_string_equal(kc->endpoint, "tcp://{host}:5557");
    assert_null(kc->replay_endpoint);
    assert_string_equal(kc->topic, "");
    assert_int_equal(kc->stale_after_ms, 10000);
    assert_int_equal(kc->replay_timeout_ms, 2000);
    assert_int_equal(kc->max_messages_per_turn, 64);
    assert_int_equal(kc->heartbeat_ms, 5000);
    assert_true(kc->replay_on_join);
    sb_kv_limits def = sb_kv_limits_default();
    assert_true(sb_kv_limits_equal(&kc->limits, &def));
    sb_config_free(cfg);
    assert_int_equal(parse_str("pools:\n"
                               "  - name: p\n"
                               "    models: [m]\n"
                               "    endpoints: [\"10.0.0.1:8000\", \"[fe80::1]:8000\"]\n"
                               "    kv_events:\n"
                               "      port: 6000\n"
                               "      replay_endpoint: \"tcp://{host}:6001\"\n"
                               "      topic: \"kv@pod@m\"\n"
                               "      stale_after_ms: 500\n"
                               "      replay_timeout_ms: 100\n"
                               "      max_messages_per_turn: 8\n"
                               "      heartbeat_ms: 1000\n"
                               "      replay_on_join: false\n"
                               "      max_batch_bytes: 1MiB\n"
                               "      max_events: 100\n"
                               "      max_hashes_per_event: 10\n"
                               "      max_tokens_per_event: 160\n"
                               "      max_batch_hashes: 1000\n"
                               "      max_batch_tokens: 16000\n",
                               &cfg, &errs),
                     0);
    kc = cfg->pools[0].kv_events;
    assert_string_equal(kc->endpoint, "tcp://{host}:6000");
    assert_string_equal(kc->replay_endpoint, "tcp://{host}:6001");
    assert_string_equal(kc->topic, "kv@pod@m");
    assert_int_equal(kc->heartbeat_ms, 1000);
    assert_false(kc->replay_on_join);
    assert_int_equal(kc->limits.max_payload_bytes, 1 << 20);
    assert_int_equal(kc->limits.max_batch_tokens, 16000);
    char addr[128];
    assert_int_equal(sb_config_kv_address(kc->endpoint, cfg->pools[0].endpoints[0].host, 8000, addr, sizeof addr), 0);
    assert_string_equal(addr, "tcp://10.0.0.1:6000");
    assert_int_equal(sb_config_kv_address(kc->endpoint, cfg->pools[0].endpoints[1].host, 8000, addr, sizeof addr), 0);
    assert_string_equal(addr, "tcp://[fe80::1]:6000");
    assert_int_equal(sb_config_kv_address("tcp://[{host}]:1", "::1", 8000, addr, sizeof addr), 0);
    assert_string_equal(addr, "tcp://[::1]:1");
    assert_int_equal(sb_config_kv_address(kc->endpoint, "10.0.0.1", 8000, addr, 19), -1); /* one byte short */
    assert_int_equal(sb_config_kv_address(kc->endpoint, "10.0.0.1", 8000, addr, 20), 0);
    /* The endpoint's own port, shifted: replicas of one host publishing on port + k. */
    assert_int_equal(sb_config_kv_address("tcp://{host}:{port+100}", "10.0.0.1", 8101, addr, sizeof addr), 0);
    assert_string_equal(addr, "tcp://10.0.0.1:8201");
    assert_int_equal(sb_config_kv_address("tcp://{host}:{port-8000}", "h", 8101, addr, sizeof addr), 0);
    assert_string_equal(addr, "tcp://h:101");
    assert_int_equal(sb_config_kv_address("tcp://{host}:{port-9000}", "h", 8101, addr, sizeof addr), -1);
    sb_config_free(cfg);

    expect_one_error(POOL_OK "    kv_events:\n      endpoint: \"http://{host}:5557\"\n", 6,
                     "pool 'p': kv_events.endpoint 'http://{host}:5557' must start with tcp://, ipc:// or inproc://");
    expect_one_error(POOL_OK "    kv_events:\n      endpoint: \"tcp://{host}\"\n", 6,
                     "pool 'p': kv_events.endpoint 'tcp://{host}' must end in :PORT");
    expect_one_error(POOL_OK "    kv_events:\n      endpoint: \"tcp://{pod}:5557\"\n", 6,
                     "may hold no placeholder but {host}");
    expect_one_error(POOL_OK "    kv_events:\n      replay_endpoint: \"tcp://{host}:99999\"\n", 6,
                     "pool 'p': kv_events.replay_endpoint 'tcp://{host}:99999' must end in :PORT (1 to 65535)");
    expect_one_error(POOL_OK "    kv_events:\n      endpoint: \"tcp://{host}:1\"\n      port: 2\n", 7,
                     "pool 'p': kv_events: give endpoint or port, not both");
    expect_one_error(POOL_OK "    kv_events:\n      port: 0\n", 6,
                     "pool 'p': kv_events.port must be between 1 and 65535, got 0");
    expect_one_error(POOL_OK "    kv_events:\n      max_batch_bytes: 10\n", 6,
                     "pool 'p': kv_events.max_batch_bytes must be between 64 and 1073741824, got 10");
    expect_one_error(POOL_OK "    kv_events:\n      max_events: 0\n", 6, "kv_events.max_events must be between 1");
    expect_one_error(POOL_OK "    kv_events:\n      reconnect_ms: 9000\n", 6,
                     "pool 'p': kv_events: reconnect_ms (9000) must not exceed reconnect_max_ms (5000)");
    expect_one_error(POOL_OK "    kv_events:\n      max_tokens_per_event: 2000000\n", 6,
                     "max_tokens_per_event (2000000) must not exceed max_batch_tokens (1048576)");
    expect_one_error(POOL_OK "    kv_events:\n      topics: x\n", 6, "unknown key 'topics' in pool 'p': kv_events");
    expect_one_error(POOL_OK "    kv_events: 5557\n", 5, "pool 'p': kv_events must be a mapping, got a scalar");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints: [\"10.0.0.1:8000\", \"10.0.0.2:8000\"]\n"
                     "    kv_events:\n"
                     "      endpoint: \"tcp://10.0.0.1:5557\"\n",
                     6,
                     "kv_events.endpoint 'tcp://10.0.0.1:5557' has neither {host} nor {port...}: all 2 endpoints would "
                     "read the same");
}

static void test_pool_keys_each_reported_in_order(void **state)
{
    (void)state;
    const char *yaml = "pools:\n"
                       "  - engine: [x]\n"
                       "    name: p1\n"
                       "    models: 7\n"
                       "    adapters: {a: 1}\n"
                       "    endpoints: nope\n"
                       "    profile: [y]\n"
                       "    probe: 3\n"
                       "    health: {base_eject_ms: 9000, max_eject_ms: 10}\n"
                       "    adaptive: maybe\n"
                       "    upstream_api_key: \"\"\n"
                       "    upstream_api_key_file: {}\n"
                       "    metrics: [z]\n"
                       "    colour: blue\n";
    const char *expected = "t.yaml:2:13: pool 'p1': engine must be a string, got a list\n"
                           "t.yaml:4:13: pool 'p1': models must be a list, got a scalar\n"
                           "t.yaml:5:15: pool 'p1': adapters must be a list, got a mapping\n"
                           "t.yaml:6:16: pool 'p1': endpoints must be a list, got a scalar\n"
                           "t.yaml:7:14: pool 'p1': profile must be a string, got a list\n"
                           "t.yaml:8:12: pool 'p1': probe must be a mapping, got a scalar\n"
                           "t.yaml:9:29: pool 'p1': health: base_eject_ms (9000) must not exceed max_eject_ms (10)\n"
                           "t.yaml:10:15: pool 'p1': adaptive must be true or false, got 'maybe'\n"
                           "t.yaml:11:23: pool 'p1': upstream_api_key must not be empty\n"
                           "t.yaml:12:28: pool 'p1': upstream_api_key_file must be a string, got a mapping\n"
                           "t.yaml:13:14: pool 'p1': metrics must be a mapping, got a list\n"
                           "t.yaml:14:5: unknown key 'colour' in pool 'p1'\n"
                           "t.yaml:12:28: pool 'p1': give upstream_api_key or upstream_api_key_file, not both\n";
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str(yaml, &cfg, &errs), -1);
    assert_null(cfg);
    char buf[8192];
    sb_config_errors_format(&errs, "t.yaml", buf, sizeof buf);
    assert_string_equal(buf, expected);
}

static void test_example_demo(void **state)
{
    sb_config *cfg = parse_example("examples/demo.yaml");
    assert_string_equal(cfg->listen_host, "127.0.0.1");
    assert_int_equal(cfg->listen_port, 8080);
    assert_int_equal(cfg->n_pools, 2);
    const sb_pool_config *llama = &cfg->pools[0], *qwen = &cfg->pools[1];
    assert_string_equal(llama->name, "llama");
    assert_string_equal(llama->models[0], "meta-llama/Llama-3.1-8B-Instruct");
    assert_string_equal(llama->models[1], "llama-3.1-8b");
    assert_int_equal(llama->n_adapters, 2);
    assert_string_equal(llama->adapters[0], "sql-lora");
    assert_string_equal(llama->adapters[1], "chat-lora");
    assert_int_equal(llama->n_endpoints, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(llama->endpoints[i].host, "127.0.0.1");
        assert_int_equal(llama->endpoints[i].port, 8101 + i);
    }
    assert_string_equal(qwen->name, "qwen");
    assert_string_equal(qwen->models[0], "Qwen/Qwen2.5-7B-Instruct");
    assert_string_equal(qwen->models[1], "qwen-7b");
    assert_int_equal(qwen->n_endpoints, 1);
    assert_int_equal(qwen->endpoints[0].port, 8104);
    sb_config_free(cfg);
}

static void test_flow_control(void **state)
{
    (void)state;
    sb_config *cfg;
    sb_config_errors errs;
    /* Defaults: on, the default band deadlines, 1024 per band, no API keys. */
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_true(cfg->flow_enabled);
    assert_int_equal(cfg->flow_max_wait_ms[0], 30000);
    assert_int_equal(cfg->flow_max_wait_ms[1], 10000);
    assert_int_equal(cfg->flow_max_wait_ms[2], 2000);
    assert_int_equal(cfg->flow_max_queued[1], 1024);
    assert_int_equal(cfg->api_keys.n, 0);
    assert_false(cfg->auth_enabled);
    sb_config_free(cfg);
    assert_int_equal(parse_str(POOL_OK "flow_control:\n  enabled: false\n  max_wait_ms: { sheddable: 500 }\n"
                                       "  max_queued: { critical: 8, standard: 0 }\n"
                                       "  api_keys: { sk-a: critical, \"sk-b\": Sheddable }\n",
                               &cfg, &errs),
                     0);
    assert_false(cfg->flow_enabled);
    assert_int_equal(cfg->flow_max_wait_ms[2], 500);
    assert_int_equal(cfg->flow_max_wait_ms[0], 30000); /* untouched bands keep their defaults */
    assert_int_equal(cfg->flow_max_queued[0], 8);
    assert_int_equal(cfg->flow_max_queued[1], 0);
    /* Digests only, and bands without admission: flow_control.api_keys turns no auth on. */
    assert_int_equal(cfg->api_keys.n, 2);
    assert_false(cfg->auth_enabled);
    const sb_api_key *k = find_key(cfg, "sk-a");
    assert_non_null(k);
    assert_int_equal(k->band, 0);
    assert_false(k->admits);
    k = find_key(cfg, "sk-b");
    assert_non_null(k);
    assert_int_equal(k->band, 2);
    assert_null(find_key(cfg, "sk-c"));
    sb_config_free(cfg);
    /* A key is a bearer token: no blanks. The message never quotes it. */
    expect_one_error(POOL_OK "flow_control:\n  api_keys: { \"sk secret\": critical }\n", 6, "without blanks");
    expect_one_error(POOL_OK "flow_control:\n  api_keys: { sk-a: urgent }\n", 6, "unknown band 'urgent'");
    expect_one_error(POOL_OK "flow_control:\n  max_wait_ms: { vip: 5 }\n", 6,
                     "unknown key 'vip' in flow_control.max_wait_ms");
    expect_one_error(POOL_OK "flow_control:\n  queues: 3\n", 6, "unknown key 'queues' in flow_control");
    expect_one_error(POOL_OK "flow_control:\n  max_wait_ms: { critical: 0 }\n", 6, "critical");
}

/* ---- corpus replay (tests/fuzz/corpus/config, shared with tests/fuzz/fuzz_config.c) ---- */

#include <dirent.h>

/* Every file of the fuzzer's corpus, through the loader under ASan and UBSan: no crash, a
 * consistent verdict (a config and no error, or no config and at least one error, each placed
 * within the file), a bounded error text, and a config that sb_config_free releases. The corpus
 * path comes from this file's path as the compiler saw it (as in test_inspect.c). */
static void test_corpus_replay(void **state)
{
    (void)state;
    const char *me = __FILE__, *cut = strstr(me, "unit/proto/test_config.c");
    char dir[4096], path[8192], small[40], big[16384];
    struct dirent *e;
    DIR *d;
    int files = 0, ok = 0;

    assert_non_null(cut);
    snprintf(dir, sizeof dir, "%.*sfuzz/corpus/config", (int)(cut - me), me);
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open corpus %s", dir);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *data = malloc(len > 0 ? (size_t)len : 1); /* exact size: ASan sees overreads */
        assert_non_null(data);
        assert_int_equal(fread(data, 1, (size_t)len, f), (size_t)len);
        fclose(f);
        files++;
        /* An upper bound of libyaml's line breaks: LF, CR, NEL, LS and PS, in UTF-8 or UTF-16,
         * each hold one of these bytes. */
        size_t lines = 1;
        for (long i = 0; i < len; i++)
            lines += memchr("\n\r\x85\xa8\xa9\x28\x29", data[i], 7) != NULL;

        sb_config *cfg = NULL;
        sb_config_errors errs;
        int rc = sb_config_parse(data, (size_t)len, &cfg, &errs);
        /* The hand-written files say what they expect in their names. */
        bool want_ok = !strncmp(e->d_name, "valid", 5) || !strncmp(e->d_name, "example", 7);
        bool want_err = !strncmp(e->d_name, "invalid", 7);
        if ((want_ok && rc != 0) || (want_err && rc == 0))
            fail_msg("%s: parse returned %d, the file name says otherwise", path, rc);
        if (rc == 0) {
            ok++;
            assert_non_null(cfg);
            assert_int_equal(errs.total, 0);
            assert_int_equal(errs.n, 0);
            assert_true(cfg->n_pools >= 1);
            for (size_t i = 0; i < cfg->n_pools; i++) {
                const sb_pool_config *pc = &cfg->pools[i];
                assert_non_null(sb_config_profile(cfg, pc->profile ? pc->profile : "default"));
                assert_true(pc->n_models >= 1 && pc->n_endpoints >= 1);
            }
        } else {
            if (rc != -1)
                fail_msg("%s: rc %d", path, rc);
            assert_null(cfg);
            assert_true(errs.total >= 1 && errs.n >= 1);
        }
        assert_true(errs.n <= errs.total && errs.n <= sizeof errs.items / sizeof errs.items[0]);
        for (size_t i = 0; i < errs.n; i++) {
            const sb_config_error *it = &errs.items[i];
            if (it->line < 1 || (size_t)it->line > lines + 1 || it->column < 1 || it->column > len + 1)
                fail_msg("%s: error at %d:%d outside the file: %s", path, it->line, it->column, it->message);
            assert_non_null(memchr(it->message, '\0', sizeof it->message));
        }
        sb_config_errors_format(&errs, "f.yaml", big, sizeof big);
        memset(small, 'x', sizeof small);
        sb_config_errors_format(&errs, "f.yaml", small, sizeof small - 8);
        assert_true(strlen(big) < sizeof big - 1);
        assert_true(strlen(small) < sizeof small - 8);
        assert_memory_equal(small, big, strlen(small));
        for (size_t i = sizeof small - 8; i < sizeof small; i++)
            assert_int_equal(small[i], 'x'); /* nothing past the given capacity */
        sb_config_free(cfg);
        free(data);
    }
    closedir(d);
    assert_true(files >= 10);
    assert_true(ok > 0);
}

/* kv_index and tokenize: defaults, values, and bounds. */
static void test_kv_index_and_tokenize(void **state)
{
    (void)state;
    sb_config_errors errs;
    sb_config *cfg;
    assert_int_equal(parse_str(POOL_OK, &cfg, &errs), 0);
    assert_int_equal(cfg->kv_max_entries, (size_t)1 << 20);
    assert_int_equal(cfg->kv_block_size, 16);
    assert_int_equal(cfg->tokenize_cache_bytes, (size_t)64 << 20);
    assert_int_equal(cfg->tokenize_margin_tokens, 128);
    assert_int_equal(cfg->tokenize_timeout_ms, 2000);
    assert_int_equal(cfg->tokenize_wait_ms, 20);
    assert_int_equal(cfg->tokenize_max_answer_bytes, (size_t)8 << 20);
    sb_config_free(cfg);
    assert_int_equal(parse_str("kv_index:\n  max_entries: 4096\n  block_size: 32\n"
                               "tokenize:\n  cache_bytes: 1MiB\n  margin_tokens: 64\n  timeout_ms: 500\n"
                               "  wait_ms: 0\n  max_answer_bytes: 2MiB\n" POOL_OK,
                               &cfg, &errs),
                     0);
    assert_int_equal(cfg->kv_max_entries, 4096);
    assert_int_equal(cfg->kv_block_size, 32);
    assert_int_equal(cfg->tokenize_cache_bytes, 1u << 20);
    assert_int_equal(cfg->tokenize_margin_tokens, 64);
    assert_int_equal(cfg->tokenize_timeout_ms, 500);
    assert_int_equal(cfg->tokenize_wait_ms, 0);
    assert_int_equal(cfg->tokenize_max_answer_bytes, 2u << 20);
    sb_config_free(cfg);
    expect_one_error("kv_index:\n  block_size: 0\n" POOL_OK, 2,
                     "kv_index.block_size must be between 1 and 4096, got 0");
    expect_one_error("tokenize:\n  margin_tokens: 0\n" POOL_OK, 2,
                     "tokenize.margin_tokens must be between 1 and 65536, got 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_index_and_tokenize),
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_sections_keep_defaults),
        cmocka_unit_test(test_size_suffixes),
        cmocka_unit_test(test_listen_addresses),
        cmocka_unit_test(test_error_bad_addresses),
        cmocka_unit_test(test_adaptive_mapping),
        cmocka_unit_test(test_error_unknown_keys),
        cmocka_unit_test(test_error_wrong_types),
        cmocka_unit_test(test_error_out_of_range),
        cmocka_unit_test(test_error_empty_and_missing),
        cmocka_unit_test(test_error_empty_document),
        cmocka_unit_test(test_error_duplicate_pool_names),
        cmocka_unit_test(test_fallbacks),
        cmocka_unit_test(test_error_fallbacks),
        cmocka_unit_test(test_provider_pool),
        cmocka_unit_test(test_error_provider_pool),
        cmocka_unit_test(test_error_fallback_to_provider_without_key),
        cmocka_unit_test(test_error_duplicate_names),
        cmocka_unit_test(test_error_unknown_profile_and_engine),
        cmocka_unit_test(test_error_default_pool),
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_error_profiles),
        cmocka_unit_test(test_probe_and_health),
        cmocka_unit_test(test_retry_and_ejection),
        cmocka_unit_test(test_custom_metrics),
        cmocka_unit_test(test_endpoint_mappings),
        cmocka_unit_test(test_admin_and_decision_log),
        cmocka_unit_test(test_admin_decisions_ring),
        cmocka_unit_test(test_metrics_max_models),
        cmocka_unit_test(test_admin_listener),
        cmocka_unit_test(test_ext_proc),
        cmocka_unit_test(test_sync),
        cmocka_unit_test(test_client_auth),
        cmocka_unit_test(test_misplaced_keys_not_echoed),
        cmocka_unit_test(test_upstream_api_key),
        cmocka_unit_test(test_flow_control),
        cmocka_unit_test(test_error_yaml_syntax),
        cmocka_unit_test(test_multiple_errors),
        cmocka_unit_test(test_error_overflow_list),
        cmocka_unit_test(test_errors_format),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_example_switchboard),
        cmocka_unit_test(test_kv_events),
        cmocka_unit_test(test_pool_keys_each_reported_in_order),
        cmocka_unit_test(test_example_demo),
        cmocka_unit_test(test_discovery_keys),
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
