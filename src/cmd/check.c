#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"

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
        snprintf(listen, sizeof listen, "listen %s:%u", cfg->listen_host, cfg->listen_port);
    printf("%s: ok (%zu pools, %zu model names, %zu endpoints, %s, %s%s%s)\n", path, cfg->n_pools, models, eps, listen,
           admin, ep, auth);
    sb_config_free(cfg);
    return 0;
}
