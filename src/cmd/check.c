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
    printf("%s: ok (%zu pools, %zu model names, %zu endpoints, listen %s:%u)\n", path, cfg->n_pools, models, eps,
           cfg->listen_host, cfg->listen_port);
    sb_config_free(cfg);
    return 0;
}
