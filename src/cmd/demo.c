#include <stdio.h>

#include "cmd/cmd.h"

int sb_cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "switchboard demo: not built yet\n");
    return 2;
}
