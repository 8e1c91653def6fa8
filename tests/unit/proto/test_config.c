#include "sb_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "core/policy.h"
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
                                "  - name: qwen\n"
                                "    models: [\"Qwen/Qwen2.5-7B-Instruct\"]\n"
                                "    endpoints: [\"10.0.0.9:8000\"]\n";

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
    assert_int_equal(llama->n_endpoints, 3);
    assert_string_equal(llama->endpoints[0].host, "10.0.0.1");
    assert_int_equal(llama->endpoints[0].port, 8000);
    assert_string_equal(llama->endpoints[0].address, "10.0.0.1:8000");
    assert_string_equal(llama->endpoints[1].host, "gpu-2.internal");
    assert_string_equal(llama->endpoints[2].host, "fe80::1");
    assert_int_equal(llama->endpoints[2].port, 8001);
    assert_string_equal(llama->endpoints[2].address, "[fe80::1]:8001");

    const sb_pool_config *qwen = &cfg->pools[1];
    assert_string_equal(qwen->name, "qwen");
    assert_int_equal(qwen->n_adapters, 0);
    assert_null(qwen->adapters);
    assert_string_equal(qwen->engine, "vllm");
    assert_string_equal(qwen->profile, "default");
    sb_config_free(cfg);
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
    assert_int_equal(cfg->connect_ms, 1000);
    assert_int_equal(cfg->response_ms, 600000);
    assert_int_equal(cfg->idle_ms, 60000);
    assert_int_equal(cfg->header_ms, 10000);
    assert_int_equal(cfg->upstream_idle_ms, 30000);
    assert_int_equal(cfg->max_idle_per_endpoint, 64);
    assert_true(cfg->orca_request);
    assert_int_equal(cfg->block_bytes, 64);
    assert_null(cfg->default_pool);
    assert_null(cfg->access_log);
    assert_int_equal(cfg->n_pools, 1);
    assert_string_equal(cfg->pools[0].engine, "vllm");
    assert_string_equal(cfg->pools[0].profile, "default");
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
        {"localhost:65535", "localhost", 65535},
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

    /* The edges themselves are accepted. */
    sb_config *cfg;
    sb_config_errors errs;
    assert_int_equal(parse_str("routing: {block_bytes: 4KiB}\n"
                               "upstream: {max_idle_per_endpoint: 0}\n"
                               "timeouts: {idle_ms: 4294967295}\n" POOL_OK,
                               &cfg, &errs),
                     0);
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
                     "    endpoints: []\n",
                     4, "pool 'p': endpoints must not be empty");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n"
                     "    endpoints:\n",
                     4, "pool 'p': endpoints must not be empty");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    endpoints: [\"127.0.0.1:9000\"]\n",
                     2, "pool 'p' has no 'models'");
    expect_one_error("pools:\n"
                     "  - name: p\n"
                     "    models: [m]\n",
                     2, "pool 'p' has no 'endpoints'");
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

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *data = malloc(1 << 20);
    assert_non_null(data);
    *len = fread(data, 1, 1 << 20, f);
    assert_true(*len < (1 << 20));
    fclose(f);
    return data;
}

static sb_config *parse_example(const char *path)
{
    size_t len;
    char *text = read_file(path, &len);
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
    sb_config_free(cfg);
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

static void test_policy_names(void **state)
{
    assert_int_equal(sb_policy_find("round-robin"), SB_POLICY_ROUND_ROBIN);
    assert_int_equal(sb_policy_find("least-request"), SB_POLICY_LEAST_REQUEST);
    assert_int_equal(sb_policy_find(SB_POLICY_DEFAULT_NAME), SB_POLICY_LEAST_REQUEST);
    assert_int_equal(sb_policy_find("Round-Robin"), -1);
    assert_int_equal(sb_policy_find(""), -1);
    assert_int_equal(sb_policy_find(NULL), -1);
    assert_string_equal(sb_policy_name(SB_POLICY_ROUND_ROBIN), "round-robin");
    assert_string_equal(sb_policy_name(SB_POLICY_LEAST_REQUEST), "least-request");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_sections_keep_defaults),
        cmocka_unit_test(test_size_suffixes),
        cmocka_unit_test(test_listen_addresses),
        cmocka_unit_test(test_error_bad_addresses),
        cmocka_unit_test(test_error_unknown_keys),
        cmocka_unit_test(test_error_wrong_types),
        cmocka_unit_test(test_error_out_of_range),
        cmocka_unit_test(test_error_empty_and_missing),
        cmocka_unit_test(test_error_empty_document),
        cmocka_unit_test(test_error_duplicate_pool_names),
        cmocka_unit_test(test_error_duplicate_names),
        cmocka_unit_test(test_error_unknown_profile_and_engine),
        cmocka_unit_test(test_error_default_pool),
        cmocka_unit_test(test_error_yaml_syntax),
        cmocka_unit_test(test_multiple_errors),
        cmocka_unit_test(test_error_overflow_list),
        cmocka_unit_test(test_errors_format),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_example_switchboard),
        cmocka_unit_test(test_example_demo),
        cmocka_unit_test(test_policy_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
