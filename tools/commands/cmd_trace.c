/* `ponytail trace [--json] [--top N] -- CMD ARGS...`: runs CMD under the shim
 * with CUPTI kernel activity tracing (PONYTAIL_CUPTI) and JSON stats, then
 * ranks kernels by GPU time (tools/lib/trace_report.c does the arithmetic). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cmd.h"
#include "tools/lib/gpu_probe.h"
#include "tools/lib/shimpath.h"
#include "tools/lib/spawn.h"
#include "tools/lib/trace_report.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail trace [--json] [--top N] [--shim PATH] -- CMD [ARGS...]\n"
          "       ponytail trace --from-files RECORDS STATS [--wall SECONDS] [--json] [--top N]\n"
          "\n"
          "Runs CMD with the shim preloaded and CUPTI kernel activity tracing, then prints the\n"
          "kernels by total GPU time: launches, total and mean time, share, and what Ponytail did\n"
          "with them (passthrough, swapped, fallback; '-' = not in the shim's most-launched list);\n"
          "then the attention share, the torch.cat (CatArrayBatchedCopy) share, and how busy the\n"
          "GPU was over the process's wall time. If CUPTI cannot attach (e.g. nsys or ncu hold\n"
          "it), says so and prints the shim's own launch counts. Needs a GPU (exit 1 without).\n"
          "\n"
          "Options:\n"
          "  --json              print one JSON object (full kernel names) instead of the table\n"
          "  --top N             kernels to list (default 25; 0 = all)\n"
          "  --shim PATH         preload this shim instead of the one next to ponytail\n"
          "  --from-files R S    offline: build the report from a CUPTI records file R (written\n"
          "                      by the shim under PONYTAIL_CUPTI) and a stats JSON file S\n"
          "                      (PONYTAIL_STATS=json); no GPU needed\n"
          "  --wall SECONDS      with --from-files: the process wall time (default: the\n"
          "                      traced span recorded in R)\n"
          "  -h, --help          this help\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("trace", usage, msg, arg); }

static int pt_trace_report_files(const char *const *rec, size_t nrec, const char *const *st,
                                 size_t nst, double wall, int json, size_t top) {
  struct pt_trace_report r;
  char why[1024];
  if (pt_trace_load(&r, rec, nrec, st, nst, wall, why, sizeof why) != 0) {
    fprintf(stderr, "ponytail trace: %s\n", why);
    return 1;
  }
  if (json) pt_trace_print_json(&r, stdout, top);
  else pt_trace_print_text(&r, stdout, top);
  pt_trace_report_free(&r);
  return 0;
}

/* Collects dir/<prefix>* paths (one per traced process). */
static size_t pt_trace_glob(const char *dir, const char *prefix, char **out, size_t max) {
  DIR *d = opendir(dir);
  size_t n = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    if (!(out[n] = malloc(len))) break;
    snprintf(out[n++], len, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return n;
}

#define PT_TRACE_MAX_PROCS 256

int pt_cmd_trace(int argc, char **argv) {
  enum { O_JSON = 256, O_TOP, O_WALL, O_SHIM, O_FROM };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},         {"json", no_argument, NULL, O_JSON},
      {"top", required_argument, NULL, O_TOP},  {"wall", required_argument, NULL, O_WALL},
      {"shim", required_argument, NULL, O_SHIM}, {"from-files", required_argument, NULL, O_FROM},
      {NULL, 0, NULL, 0},
  };
  int json = 0, c;
  long top = 25;
  double wall = 0;
  const char *shim_arg = NULL, *from_rec = NULL, *from_stats = NULL, *w;
  char *end;
  optind = 0;
  /* '+': options end at "--" or at CMD, whose own flags stay untouched. */
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_JSON: json = 1; break;
    case O_TOP:
      top = strtol(optarg, &end, 10);
      if (*end || end == optarg || top < 0) return bad("--top takes a count >= 0", optarg);
      break;
    case O_WALL:
      wall = strtod(optarg, &end);
      if (*end || end == optarg || !(wall >= 0)) return bad("--wall takes seconds >= 0", optarg);
      break;
    case O_SHIM: shim_arg = optarg; break;
    case O_FROM: /* two values: RECORDS (optarg) and STATS */
      if (optind >= argc) return bad("--from-files takes RECORDS and STATS", NULL);
      from_rec = optarg;
      from_stats = argv[optind++];
      break;
    case ':':
      if (optopt == O_FROM) return bad("--from-files takes RECORDS and STATS", NULL);
      return bad("missing value after", w);
    default: return bad("unknown option", w);
    }
  }
  int i = optind;
  if (from_rec) {
    if (i < argc) return bad("--from-files takes no command", argv[i]);
    return pt_trace_report_files(&from_rec, 1, &from_stats, 1, wall, json, (size_t)top);
  }
  if (i >= argc) return bad("no command given", NULL);

  char why[PATH_MAX * 3];
  if (!pt_gpu_probe(why, sizeof why)) {
    fprintf(stderr, "ponytail trace: %s; tracing needs a GPU (use --from-files for recorded traces)\n", why);
    return 1;
  }
  char shim[PATH_MAX];
  if (pt_tool_find_shim(shim_arg, shim, sizeof shim, why, sizeof why) != 0) {
    fprintf(stderr, "ponytail trace: %s\n", why);
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX], cupti[PATH_MAX + 32], stats[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s/ponytail-trace.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "ponytail trace: cannot create a temporary directory %s: %s\n", dir, strerror(errno));
    return 1;
  }
  /* %p: a workload that starts worker processes gets one file per process. */
  snprintf(cupti, sizeof cupti, "%s/cupti.%%p", dir);
  snprintf(stats, sizeof stats, "%s/stats.%%p.json", dir);
  struct pt_env env;
  char *preload = NULL;
  int rc = 1;
  if (pt_env_from_environ(&env) != 0 || !(preload = pt_preload_compose(shim, pt_env_get(&env, "LD_PRELOAD"))) ||
      pt_env_set(&env, "LD_PRELOAD", preload) || pt_env_set(&env, PT_OPT_ENV(CUPTI), cupti) ||
      pt_env_set(&env, PT_OPT_ENV(STATS), "json") || pt_env_set(&env, PT_OPT_ENV(STATS_FILE), stats)) {
    fprintf(stderr, "ponytail trace: out of memory\n");
    goto out;
  }
  double wall_s = 0;
  /* The workload's stdout goes to stderr so ours holds only the report. */
  int st = pt_spawn_wait(argv + i, env.v, 2, &wall_s);
  char *rec[PT_TRACE_MAX_PROCS], *sts[PT_TRACE_MAX_PROCS];
  size_t nrec = pt_trace_glob(dir, "cupti.", rec, PT_TRACE_MAX_PROCS);
  size_t nst = pt_trace_glob(dir, "stats.", sts, PT_TRACE_MAX_PROCS);
  if (st != 0) fprintf(stderr, "ponytail trace: warning: '%s' exited with status %d\n", argv[i], st);
  rc = pt_trace_report_files((const char *const *)rec, nrec, (const char *const *)sts, nst, wall_s, json,
                             (size_t)top);
  if (st != 0 && rc == 0) rc = 1;
  for (size_t k = 0; k < nrec; k++) {
    unlink(rec[k]);
    free(rec[k]);
  }
  for (size_t k = 0; k < nst; k++) {
    unlink(sts[k]);
    free(sts[k]);
  }
out:
  rmdir(dir);
  free(preload);
  pt_env_free(&env);
  return rc;
}
