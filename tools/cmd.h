/* Subcommands of the `ponytail` CLI. Each returns the process exit status:
 * 0 success, 1 runtime failure, 2 usage error (usage already on stderr). */
#ifndef PT_TOOLS_CMD_H
#define PT_TOOLS_CMD_H
#include <stdio.h>

int pt_cmd_run(int argc, char **argv);
int pt_cmd_config(int argc, char **argv);
int pt_cmd_capacity(int argc, char **argv);
int pt_cmd_kernels(int argc, char **argv);
int pt_cmd_trace(int argc, char **argv);
int pt_cmd_replay(int argc, char **argv);
int pt_cmd_bench(int argc, char **argv);
int pt_cmd_timeline(int argc, char **argv);

/* argv[0] of the ponytail process, for finding the shim and examples/. */
extern const char *pt_tool_argv0;

/* A usage error of `ponytail CMD`: "ponytail CMD: MSG[: ARG]", a blank line
 * and CMD's usage on stderr. Returns 2, the usage-error exit status. */
int pt_cmd_usage_error(const char *cmd, void (*usage)(FILE *), const char *msg, const char *arg);

#endif
