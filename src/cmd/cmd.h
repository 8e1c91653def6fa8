/* cmd: the command-line front. Each subcommand lives in its own file and is listed in
 * main.c's table. Commands return a process exit code. */
#ifndef SB_CMD_H
#define SB_CMD_H

#include <stddef.h>

#include "proto/config.h"

int sb_cmd_serve(int argc, char **argv);
int sb_cmd_check(int argc, char **argv);
int sb_cmd_sim(int argc, char **argv);
int sb_cmd_demo(int argc, char **argv);
int sb_cmd_replay(int argc, char **argv);

/* Reads a whole file into a NUL-terminated heap buffer; NULL with errno set on failure. */
char *sb_read_file(const char *path, size_t *len);
/* Reads and parses a config file, printing errors as FILE:LINE:COL: message.
 * Returns NULL on any failure. */
sb_config *sb_load_config(const char *path);

#endif
