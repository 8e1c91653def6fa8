/* cmd: the command-line front. Each subcommand lives in its own file and is listed in
 * main.c's table. Commands return a process exit code. */
#ifndef SB_CMD_H
#define SB_CMD_H

#include <stddef.h>
#include <uv.h>

#include "net/gateway.h"
#include "proto/config.h"

int sb_cmd_serve(int argc, char **argv);
int sb_cmd_check(int argc, char **argv);
int sb_cmd_sim(int argc, char **argv);
int sb_cmd_demo(int argc, char **argv);
int sb_cmd_replay(int argc, char **argv);
int sb_cmd_agent(int argc, char **argv);

/* Starts the gateway on loop (sb_gateway_start) with the workers cfg asks for: `workers: auto`
 * (or none) is SWITCHBOARD_WORKERS when set, else the cores available; above one, the guard
 * (net/guard.h) is turned on first. */
int sb_cmd_gateway_start(uv_loop_t *loop, sb_config *cfg, sb_gateway **gw);
/* Runs loop (locked but while it waits, with workers) until nothing is left, then joins the
 * workers' threads. */
void sb_cmd_run(uv_loop_t *loop);

/* Reads a whole file into a NUL-terminated heap buffer; NULL with errno set on failure. */
char *sb_read_file(const char *path, size_t *len);
/* Reads and parses a config file, printing errors as FILE:LINE:COL: message, then reads the
 * secret files it names (sb_config_load_files). Returns NULL on any failure. The file's text
 * is wiped once parsed. */
sb_config *sb_load_config(const char *path);
/* Reads the secret files a parsed config names (auth.api_keys_file, admin.token_file, each
 * pool's upstream_api_key_file; relative paths from config_path's directory) into cfg, wiping
 * their text. Prints each problem naming the file (and line), never a secret. Returns 0, or -1
 * if any file is missing or malformed (cfg is then only fit to be freed). */
int sb_config_load_files(sb_config *cfg, const char *config_path);

#endif
