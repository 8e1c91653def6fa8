/* switchboard: an inference gateway for LLM model-server fleets. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "base/version.h"
#include "cmd/cmd.h"

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("switchboard %s (%s)\n", sb_version, sb_commit);
    return 0;
}

/* keygen [-o FILE]: a CURVE key pair for gateway sync (`sync.key_file`). The secret goes to
 * FILE, made with mode 0600 and never over an existing file, or to standard output; the public
 * key (what the fleet's members present to each other) to standard error. */
static int cmd_keygen(int argc, char **argv)
{
    const char *out = NULL;
    if (argc == 3 && !strcmp(argv[1], "-o")) {
        out = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: switchboard keygen [-o FILE]\n");
        return 2;
    }
    char pub[41], sec[41];
    if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) < 0) {
        fprintf(stderr, "switchboard keygen: this libzmq has no CURVE\n");
        return 1;
    }
    int rc = 0;
    if (out) {
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || write(fd, sec, 40) != 40 || write(fd, "\n", 1) != 1) {
            fprintf(stderr, "switchboard keygen: %s: %s\n", out, strerror(errno));
            rc = 1;
        }
        if (fd >= 0 && close(fd) < 0 && !rc) {
            fprintf(stderr, "switchboard keygen: %s: %s\n", out, strerror(errno));
            rc = 1;
        }
    } else {
        printf("%s\n", sec);
    }
    OPENSSL_cleanse(sec, sizeof sec);
    if (!rc)
        fprintf(stderr, "public key: %s\n", pub);
    return rc;
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"serve", sb_cmd_serve, "serve -c FILE       run the gateway"},
    {"check", sb_cmd_check, "check -c FILE       validate a config file"},
    {"sim", sb_cmd_sim, "sim [options]       run simulated vLLM-compatible model servers"},
    {"demo", sb_cmd_demo, "demo                a gateway in front of a simulated fleet"},
    {"agent", sb_cmd_agent, "agent [options]     report a model server's models and load to gateways"},
    {"replay", sb_cmd_replay, "replay [options]    compare routing policies on a simulated fleet, offline"},
    {"keygen", cmd_keygen, "keygen [-o FILE]    make a CURVE key for gateway sync (sync.key_file)"},
    {"version", cmd_version, "version             print the version and commit (also --version)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: switchboard COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %s\n", commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))
        return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "switchboard: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
