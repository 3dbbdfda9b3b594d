/* Placeholder until this subcommand lands; replaced by its implementation. */
#include <stdio.h>
#include "tools/cmd.h"
int pt_cmd_timeline(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "ponytail timeline: not built yet\n");
  return 2;
}
