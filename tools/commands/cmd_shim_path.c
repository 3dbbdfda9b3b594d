/* `ponytail shim-path`: prints the path of the shim that belongs to this
 * ponytail, the one `ponytail run` preloads, for programs started otherwise:
 *   LD_PRELOAD=$(ponytail shim-path) python serve.py
 * Found the way `run` finds it (tools/lib/shimpath.c: the build tree, or the
 * install, a wheel's included). On failure nothing goes to stdout, so that
 * $(...) never hands LD_PRELOAD a message; the reason goes to stderr. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"
#include "tools/lib/shimpath.h"

static void usage(FILE *f) {
  fprintf(f, "usage: ponytail shim-path\n"
             "\n"
             "Prints the absolute path of this ponytail's libponytail_shim.so (the one\n"
             "`ponytail run` preloads: its build tree's, or the installed one, pip's wheel\n"
             "included), for programs started another way:\n"
             "\n"
             "  LD_PRELOAD=$(ponytail shim-path) python serve.py\n"
             "\n"
             "Exit status: 0 found; 1 not found, or its path holds ':' or ' ', which\n"
             "LD_PRELOAD cannot carry (why on stderr, nothing on stdout); 2 usage error.\n");
}

int pt_cmd_shim_path(int argc, char **argv) {
  static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  const char *w;
  int c;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    return pt_cmd_usage_error("shim-path", usage, "unknown option", w);
  }
  if (optind < argc) return pt_cmd_usage_error("shim-path", usage, "unexpected argument", argv[optind]);
  char shim[PATH_MAX], why[PATH_MAX * 3];
  if (pt_tool_find_shim(NULL, shim, sizeof shim, why, sizeof why) != 0) {
    /* The lookup's advice is for the commands that take --shim; this one has nothing to pass. */
    static const char tail[] = "; pass --shim PATH";
    size_t n = strlen(why);
    if (n >= sizeof tail - 1 && !strcmp(why + n - (sizeof tail - 1), tail)) why[n - (sizeof tail - 1)] = '\0';
    fprintf(stderr, "ponytail shim-path: %s: build it (ninja -C build) or install it (pip install ., docs/install.md)\n",
            why);
    return 1;
  }
  if (strpbrk(shim, ": ")) {
    /* ld.so splits LD_PRELOAD on ':' and ' ' (as `ponytail run` refuses it too). */
    fprintf(stderr, "ponytail shim-path: the shim path '%s' contains ':' or ' ', which LD_PRELOAD cannot carry\n",
            shim);
    return 1;
  }
  printf("%s\n", shim);
  return 0;
}
