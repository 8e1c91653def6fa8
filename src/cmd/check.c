#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "net/tls.h"

/* The certificate files load and match (as serve and every reload would read them): a
 * `systemctl reload` that checks first fails on them, not later in the journal. 0 or -1. */
static int check_tls(const char *path, const char *what, const char *cert, const char *key)
{
    if (!cert)
        return 0;
    char err[256];
    SSL_CTX *ctx = sb_tls_server_ctx(cert, key, NULL, err, sizeof err);
    if (!ctx) {
        fprintf(stderr, "%s: %s certificate %s / key %s: %s\n", path, what, cert, key, err);
        return -1;
    }
    SSL_CTX_free(ctx);
    return 0;
}

int sb_cmd_check(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && i + 1 < argc)
            path = argv[++i];
        else {
            fprintf(stderr, "usage: switchboard check -c FILE\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: switchboard check -c FILE\n");
        return 2;
    }
    sb_config *cfg = sb_load_config(path);
    if (!cfg)
        return 1;
    int bad = check_tls(path, "tls", cfg->tls_cert, cfg->tls_key) < 0 ||
              check_tls(path, "ext_proc", cfg->extproc_tls_cert, cfg->extproc_tls_key) < 0;
    for (size_t i = 0; i < cfg->n_pools && !bad; i++) {
        const sb_pool_config *pc = &cfg->pools[i];
        char err[256];
        SSL_CTX *ctx =
            pc->tls ? sb_tls_client_ctx(pc->tls_ca_file, pc->tls_cert, pc->tls_key, pc->tls_verify, err, sizeof err)
                    : NULL;
        if (pc->tls && !ctx) {
            fprintf(stderr, "%s: pool %s: tls (ca_file %s, cert %s): %s\n", path, pc->name,
                    pc->tls_ca_file ? pc->tls_ca_file : "the system's", pc->tls_cert ? pc->tls_cert : "none", err);
            bad = 1;
        }
        SSL_CTX_free(ctx);
    }
    if (bad) {
        sb_config_free(cfg);
        return 1;
    }
    size_t eps = 0, models = 0;
    for (size_t i = 0; i < cfg->n_pools; i++) {
        eps += cfg->pools[i].n_endpoints;
        models += cfg->pools[i].n_models + cfg->pools[i].n_adapters;
    }
    char admin[300] = "admin off";
    if (cfg->admin_host)
        snprintf(admin, sizeof admin, "admin %s:%u%s", cfg->admin_host, cfg->admin_port,
                 cfg->admin_has_token ? " with token" : "");
    char auth[64] = "";
    char ep[300] = "";
    if (cfg->extproc_host)
        snprintf(ep, sizeof ep, ", ext_proc %s:%u%s", cfg->extproc_host, cfg->extproc_port,
                 cfg->extproc_tls_cert ? " with TLS" : "");
    if (cfg->auth_enabled)
        snprintf(auth, sizeof auth, ", %zu API keys", sb_auth_keys_clients(&cfg->api_keys));
    char listen[300] = "listen off";
    if (cfg->listen_host)
        snprintf(listen, sizeof listen, "listen %s:%u%s", cfg->listen_host, cfg->listen_port,
                 cfg->tls_cert ? " with TLS" : "");
    printf("%s: ok (%zu pools, %zu model names, %zu endpoints, %s, %s%s%s)\n", path, cfg->n_pools, models, eps, listen,
           admin, ep, auth);
    sb_config_free(cfg);
    return 0;
}
