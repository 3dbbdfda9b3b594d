/* Placeholder until this subcommand lands; replaced by its implementation. */
#include <stdio.h>
#include "tools/cmd.h"
int pt_cmd_config(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "ponytail config: not built yet\n");
  return 2;
}
