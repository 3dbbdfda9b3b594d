/* Subcommands of the `ponytail` CLI. Each returns the process exit status:
 * 0 success, 1 runtime failure, 2 usage error (usage already on stderr). */
#ifndef PT_TOOLS_CMD_H
#define PT_TOOLS_CMD_H
#include <getopt.h>
#include <stdio.h>

int pt_cmd_run(int argc, char **argv);
int pt_cmd_config(int argc, char **argv);
int pt_cmd_capacity(int argc, char **argv);
int pt_cmd_kernels(int argc, char **argv);
int pt_cmd_trace(int argc, char **argv);
int pt_cmd_replay(int argc, char **argv);
int pt_cmd_bench(int argc, char **argv);
int pt_cmd_timeline(int argc, char **argv);
int pt_cmd_plot_sweep(int argc, char **argv);
int pt_cmd_doctor(int argc, char **argv);
int pt_cmd_shim_path(int argc, char **argv);
int pt_cmd_sleep(int argc, char **argv);
int pt_cmd_wake(int argc, char **argv);
int pt_cmd_stats(int argc, char **argv);

/* argv[0] of the ponytail process, for finding the shim and examples/. */
extern const char *pt_tool_argv0;

/* tools/cli.c. A usage error of `ponytail CMD`: "ponytail CMD: MSG[: ARG]",
 * a blank line and CMD's usage on stderr. Returns 2, the usage-error exit
 * status. */
int pt_cmd_usage_error(const char *cmd, void (*usage)(FILE *), const char *msg, const char *arg);

/* tools/cli.c. getopt_long for the subcommands. Set optind = 0 before the
 * first call (a command may run more than once in a process). optstring
 * starts with "+:" (stop at the first operand, as `run ... CMD`) or "-:"
 * (operands anywhere, returned as 1 with optarg); "--" ends the options
 * either way. Prints nothing: returns '?' for an unknown option, a long
 * option given a value it does not take, or an abbreviated long option
 * (only full names are accepted), ':' for a missing value (optopt: the
 * option's val). *word is the argv element read, for messages. A long
 * option's value may follow as --flag=VALUE or as the next argument. */
int pt_getopt(int argc, char **argv, const char *optstring, const struct option *lo, const char **word);

#endif
