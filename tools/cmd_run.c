/* Placeholder until this subcommand lands; replaced by its implementation. */
#include <stdio.h>
#include "tools/cmd.h"
int pt_cmd_run(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "ponytail run: not built yet\n");
  return 2;
}
