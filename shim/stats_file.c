/* Where the stats go: once at exit (PONYTAIL_STATS, PONYTAIL_STATS_FILE), and
 * with PONYTAIL_STATS_EVERY=N also every N seconds while the process runs.
 *
 * Why snapshots: serving engines end their GPU workers with SIGKILL (SGLang's
 * kill_process_tree does, at every shutdown), so the process that ran the
 * kernels never reaches exit and its exit stats never appear. A snapshot is
 * written to a temporary file and renamed over the stats file, so a reader,
 * or a SIGKILL in the middle of a write, never leaves half a file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/options.h"
#include "common/thread.h"
#include "shim/shim.h"
#include "shim/stats.h"

/* Held while a stats file is written: the exit write and a snapshot never
 * interleave, and fork never copies a half-taken lock (pt_stats_atfork_*). */
static pthread_mutex_t file_mu = PTHREAD_MUTEX_INITIALIZER;
static int exit_written; /* under file_mu: snapshots stop once the exit stats are out */

static void write_stats(FILE *f, int mode, const char *written) {
  if (mode == PT_STATS_JSON) pt_stats_write_json(f, written);
  else pt_stats_write_text(f, written);
}

/* path opened for writing (created 0644, truncated, never through a
 * symlink), or NULL with errno set. */
static FILE *open_stats(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

void pt_stats_write(void) {
  int mode = pt_opt_enum(PT_OPT_STATS);
  if (mode == PT_STATS_OFF) return;
  pthread_mutex_lock(&file_mu);
  if (exit_written) {
    pthread_mutex_unlock(&file_mu);
    return;
  }
  exit_written = 1;
  const char *pattern = pt_opt_str(PT_OPT_STATS_FILE);
  FILE *f = NULL;
  if (pattern[0]) {
    char path[4096];
    /* Opened in place, not renamed over: the name may be /dev/stdout or a pipe. */
    if (pt_path_expand(pattern, path, sizeof path) == 0) f = open_stats(path);
    if (!f) {
      pt_warn("cannot open PONYTAIL_STATS_FILE \"%s\"; writing the stats to stderr", pattern);
    }
  }
  write_stats(f ? f : stderr, mode, "exit");
  if (f) fclose(f);
  else fflush(stderr);
  pthread_mutex_unlock(&file_mu);
}

/* One snapshot: PATH.tmp written, then renamed over PATH. 0, or -1 with errno. */
static int write_snapshot(const char *path, int mode) {
  char tmp[4096 + 8];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  FILE *f = open_stats(tmp); /* never unlinked on failure: it may be someone's symlink */
  if (!f) return -1;
  write_stats(f, mode, "snapshot");
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    (void)unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

static void *snapshot_main(void *arg) {
  unsigned secs = (unsigned)(uintptr_t)arg;
  int mode = pt_opt_enum(PT_OPT_STATS);
  char path[4096];
  if (pt_path_expand(pt_opt_str(PT_OPT_STATS_FILE), path, sizeof path)) {
    pt_warn("PONYTAIL_STATS_EVERY: the expanded PONYTAIL_STATS_FILE is too long: no snapshots");
    return NULL;
  }
  /* Only a regular file (or none yet) is replaced by rename: never a device
   * or a pipe someone named as the stats file. */
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    pt_warn("PONYTAIL_STATS_EVERY: %s is not a regular file: no snapshots (the exit stats still go there)", path);
    return NULL;
  }
  for (int warned = 0;;) {
    struct timespec ts = {.tv_sec = (time_t)secs, .tv_nsec = 0};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
    pthread_mutex_lock(&file_mu);
    int stop = exit_written;
    int rc = stop ? 0 : write_snapshot(path, mode);
    int e = errno;
    pthread_mutex_unlock(&file_mu);
    if (stop) return NULL;
    if (rc && !warned++) {
      PT_INTERNAL_ERROR();
      pt_warn("PONYTAIL_STATS_EVERY: cannot write a snapshot to %s (%s); trying again every %u s", path,
              strerror(e), secs);
    }
  }
}

void pt_stats_start_snapshots(void) {
  uint64_t secs = pt_opt_size(PT_OPT_STATS_EVERY);
  if (!secs || pt_opt_enum(PT_OPT_STATS) == PT_STATS_OFF) return;
  if (!pt_opt_str(PT_OPT_STATS_FILE)[0]) {
    pt_warn("PONYTAIL_STATS_EVERY needs PONYTAIL_STATS_FILE (snapshots are not written to stderr): no snapshots");
    return;
  }
  if (secs > 86400) secs = 86400;
  int rc = pt_thread_start(snapshot_main, (void *)(uintptr_t)secs);
  if (rc) {
    PT_INTERNAL_ERROR();
    pt_warn("PONYTAIL_STATS_EVERY: no snapshot thread (%s)", strerror(rc));
  }
}

void pt_stats_atfork_prepare(void) { pthread_mutex_lock(&file_mu); }
void pt_stats_atfork_parent(void) { pthread_mutex_unlock(&file_mu); }
/* The child has no snapshot thread until its first intercepted call starts
 * one (shim/init.c: PT_STATE_FORKED), and writes its own exit stats. */
void pt_stats_atfork_child(void) {
  pthread_mutex_init(&file_mu, NULL);
  exit_written = 0;
}
