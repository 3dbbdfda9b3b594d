/* Helpers shared by the `ponytail` subcommands (tools/commands/cmd_*.c): the usage
 * error path and the option parser. See cmd.h. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"

int pt_cmd_usage_error(const char *cmd, void (*usage)(FILE *), const char *msg, const char *arg) {
  fprintf(stderr, "ponytail %s: %s%s%s\n\n", cmd, msg, arg ? ": " : "", arg ? arg : "");
  usage(stderr);
  return 2;
}

/* 1 when word ("--name" or "--name=value") spells out one of lo's names. */
static int pt_long_exact(const char *word, const struct option *lo) {
  size_t n = strcspn(word + 2, "=");
  for (; lo->name; lo++)
    if (strlen(lo->name) == n && !strncmp(word + 2, lo->name, n)) return 1;
  return 0;
}

int pt_getopt(int argc, char **argv, const char *optstring, const struct option *lo, const char **word) {
  int at = optind ? optind : 1;
  opterr = 0;
  int c = getopt_long(argc, argv, optstring, lo, NULL);
  *word = at < argc ? argv[at] : "";
  /* getopt_long takes any unambiguous prefix (--sta for --stats); the
   * commands accept only the full names. */
  if (c != -1 && c != 1 && c != '?' && !strncmp(*word, "--", 2) && !pt_long_exact(*word, lo)) return '?';
  return c;
}
