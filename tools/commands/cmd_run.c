/* `ponytail run [options] -- CMD ARGS...`: exec CMD with this ponytail's shim
 * preloaded (existing LD_PRELOAD entries kept, after it) and the flags mapped
 * to PONYTAIL_* variables. exec, not fork: CMD's exit status is ours. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cmd.h"
#include "tools/lib/shimpath.h"
#include "tools/lib/spawn.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail run [options] -- CMD [ARGS...]\n"
          "\n"
          "Runs CMD with LD_PRELOAD = this ponytail's libponytail_shim.so, placed before any\n"
          "existing LD_PRELOAD entries (which are kept). The exit status is CMD's.\n"
          "\n"
          "Options:\n"
          "  --stats          print the shim's statistics table at exit (PONYTAIL_STATS=1)\n"
          "  --stats=json     write them as one JSON object (PONYTAIL_STATS=json)\n"
          "  --stats-file F   where the statistics go (PONYTAIL_STATS_FILE; %%p = pid)\n"
          "  --stats-every N  also rewrite that file every N seconds while CMD runs, for processes\n"
          "                   that are killed rather than exit (PONYTAIL_STATS_EVERY; needs a file)\n"
          "  --log LEVEL      error|warn|info|debug (PONYTAIL_LOG)\n"
          "  --off            load the shim in pure pass-through mode (PONYTAIL_ENABLE=0)\n"
          "  --shim PATH      preload this shim instead of the one next to ponytail\n"
          "  -h, --help       this help\n"
          "\n"
          "Other PONYTAIL_* options pass through from the environment (`ponytail config`).\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("run", usage, msg, arg); }

int pt_cmd_run(int argc, char **argv) {
  enum { O_STATS = 256, O_STATS_FILE, O_STATS_EVERY, O_LOG, O_OFF, O_SHIM };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},      {"stats", optional_argument, NULL, O_STATS},
      {"stats-file", required_argument, NULL, O_STATS_FILE}, {"log", required_argument, NULL, O_LOG},
      {"stats-every", required_argument, NULL, O_STATS_EVERY},
      {"off", no_argument, NULL, O_OFF},     {"shim", required_argument, NULL, O_SHIM},
      {NULL, 0, NULL, 0},
  };
  const char *stats = NULL, *stats_file = NULL, *stats_every = NULL, *log = NULL, *shim_arg = NULL, *w;
  int off = 0, c;
  optind = 0;
  /* '+': options end at "--" or at CMD, whose own flags stay untouched. */
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_STATS:
      if (!optarg || !strcmp(optarg, "1") || !strcmp(optarg, "text")) stats = "1";
      else if (!strcmp(optarg, "json")) stats = "json";
      else return bad("--stats takes =json (or nothing)", w);
      break;
    case O_STATS_FILE: stats_file = optarg; break;
    case O_STATS_EVERY: {
      char *end;
      long n = strtol(optarg, &end, 10);
      if (end == optarg || *end || n < 1 || n > 86400) return bad("--stats-every takes seconds, 1-86400", optarg);
      stats_every = optarg;
      break;
    }
    case O_LOG: log = optarg; break;
    case O_OFF: off = 1; break;
    case O_SHIM: shim_arg = optarg; break;
    case ':': return bad("missing value after", w);
    default: return bad("unknown option", w);
    }
  }
  int i = optind;
  if (i >= argc) return bad("no command given", NULL);
  if (log && strcmp(log, "error") && strcmp(log, "warn") && strcmp(log, "info") && strcmp(log, "debug"))
    return bad("--log takes error|warn|info|debug", log);

  if (stats_every) {
    /* Snapshots never go to stderr: without a file the shim would only warn. */
    const char *f = stats_file ? stats_file : getenv(PT_OPT_ENV(STATS_FILE));
    if (!f || !f[0]) return bad("--stats-every needs --stats-file (or PONYTAIL_STATS_FILE)", NULL);
    if (!stats && !getenv(PT_OPT_ENV(STATS))) stats = "json";
  }

  char shim[PATH_MAX], why[PATH_MAX * 3];
  if (pt_tool_find_shim(shim_arg, shim, sizeof shim, why, sizeof why) != 0) {
    fprintf(stderr, "ponytail run: %s\n", why);
    return 1;
  }
  if (strpbrk(shim, ": ")) {
    /* ld.so splits LD_PRELOAD on ':' and ' '; such a path cannot be preloaded. */
    fprintf(stderr, "ponytail run: the shim path '%s' contains ':' or ' ', which LD_PRELOAD cannot carry\n", shim);
    return 1;
  }
  char *preload = pt_preload_compose(shim, getenv("LD_PRELOAD"));
  if (!preload || setenv("LD_PRELOAD", preload, 1) != 0 ||
      (stats && setenv(PT_OPT_ENV(STATS), stats, 1) != 0) ||
      (stats_file && setenv(PT_OPT_ENV(STATS_FILE), stats_file, 1) != 0) ||
      (stats_every && setenv(PT_OPT_ENV(STATS_EVERY), stats_every, 1) != 0) ||
      (log && setenv(PT_OPT_ENV(LOG), log, 1) != 0) ||
      (off && setenv(PT_OPT_ENV(ENABLE), "0", 1) != 0)) {
    fprintf(stderr, "ponytail run: out of memory\n");
    return 1;
  }
  free(preload);
  fflush(stdout);
  execvp(argv[i], argv + i);
  fprintf(stderr, "ponytail run: cannot execute '%s': %s\n", argv[i], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
