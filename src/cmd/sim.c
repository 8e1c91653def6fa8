#include <stdio.h>

#include "cmd/cmd.h"

int sb_cmd_sim(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "switchboard sim: not built yet\n");
    return 2;
}
