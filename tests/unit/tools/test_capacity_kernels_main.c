/* A `ponytail` with only the capacity and kernels subcommands, for the CLI
 * tests of those two: it calls the same pt_cmd_* functions as tools/ponytail.c
 * but does not need every other subcommand to link. */
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"

const char *pt_tool_argv0;

int main(int argc, char **argv) {
  pt_tool_argv0 = argv[0];
  if (argc > 1 && !strcmp(argv[1], "capacity")) return pt_cmd_capacity(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "kernels")) return pt_cmd_kernels(argc - 1, argv + 1);
  fprintf(stderr, "usage: %s capacity|kernels ARGS...\n", argv[0]);
  return 2;
}
