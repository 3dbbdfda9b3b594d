/* Shared by the preload test programs: failure-recording checks (a failed
 * check marks the scenario failed and the run goes on, so one run reports
 * every broken expectation), a whole-file reader for stats and logs, and
 * lookups in the stats JSON. */
#ifndef PT_PRELOAD_CHECK_H
#define PT_PRELOAD_CHECK_H
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_failed;

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      g_failed = 1;                                                         \
    }                                                                       \
  } while (0)
#define CHECK_EQ(a, b)                                                                                     \
  do {                                                                                                     \
    long long a_ = (long long)(a), b_ = (long long)(b);                                                    \
    if (a_ != b_) {                                                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, a_, b_); \
      g_failed = 1;                                                                                        \
    }                                                                                                      \
  } while (0)

/* The whole file in a static buffer (1 MiB at most), or NULL. */
static __attribute__((unused)) char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* The shim's log of process pid (PONYTAIL_LOG_FILE=dir/log.%p), as read_file. */
static __attribute__((unused)) char *read_log(const char *dir, int pid) {
  char path[4096];
  snprintf(path, sizeof path, "%s/log.%d", dir, pid);
  return read_file(path);
}

/* The shim's stats of process pid (PONYTAIL_STATS_FILE=dir/stats.%p.json), as read_file. */
static __attribute__((unused)) char *read_stats(const char *dir, int pid) {
  char path[4096];
  snprintf(path, sizeof path, "%s/stats.%d.json", dir, pid);
  return read_file(path);
}

/* Threads of this process other than the main thread and `skip` (a thread
 * of the test's own, 0 for none) that the shim started: *seen counts them.
 * Returns how many of them can take SIGINT, SIGTERM, SIGCHLD or SIGUSR1,
 * which must be none (common/thread.c starts them with all signals blocked),
 * or -1 when /proc cannot be read. */
static __attribute__((unused)) int shim_threads_unblocked(pid_t skip, int *seen) {
  char path[128];
  snprintf(path, sizeof path, "/proc/%d/task", (int)getpid());
  DIR *d = opendir(path);
  if (!d) return -1;
  int bad = 0;
  *seen = 0;
  for (struct dirent *e; (e = readdir(d));) {
    int tid = atoi(e->d_name);
    if (tid <= 0 || tid == (int)getpid() || tid == (int)skip) continue;
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)getpid(), tid);
    const char *st = read_file(path);
    const char *b = st ? strstr(st, "SigBlk:") : NULL;
    if (!b) continue; /* gone meanwhile */
    unsigned long long m = strtoull(b + 7, NULL, 16);
    unsigned long long want = 1ull << (SIGINT - 1) | 1ull << (SIGTERM - 1) | 1ull << (SIGCHLD - 1) |
                              1ull << (SIGUSR1 - 1);
    (*seen)++;
    if ((m & want) != want) bad++;
  }
  closedir(d);
  return bad;
}

/* Runs fn in a forked child, whose exit writes the shim's stats to
 * dir/stats.<pid>.json. *status: the child's exit status (128 when it did not
 * exit); *pid (if not NULL): the child. Returns the stats text, or NULL. */
static __attribute__((unused)) char *run_child(const char *dir, int (*fn)(void), int *status, pid_t *pid) {
  fflush(NULL);
  pid_t c = fork();
  if (c == 0) exit(fn());
  int st = 0;
  waitpid(c, &st, 0);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  if (pid) *pid = c;
  return read_stats(dir, (int)c);
}

/* The verdict of scenario `name` of a preload program: run runs in a child
 * (run_child), whose exit status must be 0 and whose stats file must exist;
 * check (if any) reads the stats; on any failure the stats' first `dump`
 * bytes go to stderr. Returns the program's exit status (0 passed). */
static __attribute__((unused)) int run_scenario(const char *dir, const char *name, int (*run)(void),
                                                void (*check)(const char *), pid_t *pid, int dump) {
  int status;
  char *js = run_child(dir, run, &status, pid);
  if (status) {
    fprintf(stderr, "scenario %s: child failed (status %d)\n", name, status);
    return 1;
  }
  if (!js) {
    fprintf(stderr, "scenario %s: no stats file\n", name);
    return 1;
  }
  if (check) check(js);
  if (g_failed) fprintf(stderr, "stats: %.*s\n", dump, js);
  return g_failed;
}

/* Count of a symbol in the stats JSON's "calls" (0 if absent, -1 without
 * a "calls" object). */
static __attribute__((unused)) long long stat_call(const char *json, const char *sym) {
  const char *calls = strstr(json, "\"calls\":{");
  if (!calls) return -1;
  const char *end = strchr(calls, '}');
  char key[128];
  snprintf(key, sizeof key, "\"%s\":", sym);
  const char *p = strstr(calls, key);
  if (!p || p > end) return 0;
  return atoll(p + strlen(key));
}

/* The first number after "key" in the stats' "alloc" object (before its
 * per-device list), or -1. */
static __attribute__((unused)) long long alloc_stat(const char *js, const char *key) {
  const char *a = strstr(js, "\"alloc\":{");
  if (!a) return -1;
  const char *end = strstr(a, "\"devices\":");
  char k[128];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(a, k);
  if (!p || (end && p > end)) return -1;
  return atoll(p + strlen(k));
}

/* A preload program's scenarios: its name (argv[1]), what runs in the child,
 * and what checks the child's stats (NULL: nothing). */
struct preload_scenario {
  const char *name;
  int (*run)(void);
  void (*check)(const char *);
};

/* The arguments every preload program takes, SCENARIO DIR: DIR made and put
 * in *dir, and the scenario of that name in sc[0..n); NULL (said on stderr)
 * for a wrong count or an unknown name, for which the program exits 2. */
static __attribute__((unused)) const struct preload_scenario *
preload_args(int argc, char **argv, const struct preload_scenario *sc, size_t n, const char **dir) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SCENARIO DIR\n", argv[0]);
    return NULL;
  }
  *dir = argv[2];
  mkdir(*dir, 0755);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(sc[i].name, argv[1])) return &sc[i];
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return NULL;
}

#endif
