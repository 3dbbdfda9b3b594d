/* The control socket of `ponytail sleep` / `ponytail wake` (issue 50).
 *
 * Who may talk to it: only this process's user. The socket lives in a
 * directory that is created mode 0700 and is refused when it exists with
 * another owner, as a symbolic link, or with any access for group or others
 * (so nobody else can even reach the socket, or swap it); the socket itself is
 * made owner-only; and every peer's credentials are checked (SO_PEERCRED:
 * the same effective uid, or root). One request per connection, one
 * connection at a time: the thread answers a request before it accepts the
 * next, and a peer that does not send its line within a few seconds is
 * dropped.
 *
 * When: the thread starts with the process's first pool or the first handle
 * of PyTorch's own mapped memory it keeps (shim/route_vmm.c; a process with
 * neither has nothing to put to sleep), never at load: the shim is loaded into
 * every process of a preloaded tree. The socket is removed at exit (and the
 * sockets of processes that ended without exiting, by the next thread to
 * start: sweep_stale); a forked
 * child neither inherits the thread nor serves the parent's socket. */
#include "shim/control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/control_path.h"
#include "common/log.h"
#include "common/options.h"
#include "common/thread.h"
#include "shim/gate.h"
#include "shim/real.h"
#include "shim/sleep.h"
#include "shim/stats.h"

#define CTL_REQ_MAX 64
#define CTL_REP_MAX 4096
#define CTL_TIMEOUT_S 5

static pthread_mutex_t ctl_mu = PTHREAD_MUTEX_INITIALIZER;
static int ctl_fd = -1;
static pid_t ctl_pid; /* the process whose socket ctl_path is */
static char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

static int control_dir(char *out, size_t n) {
  return pt_control_dir_of(pt_opt_str(PT_OPT_CONTROL_DIR), secure_getenv("XDG_RUNTIME_DIR"), (unsigned)geteuid(),
                           out, n);
}

/* The directory exists (made here if not) as ours alone: 0 or -1 (logged). */
static int private_dir(const char *dir) {
  if (mkdir(dir, 0700) && errno != EEXIST) {
    pt_warn("control: cannot create %s (%s): no control socket", dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(dir, &st)) {
    pt_warn("control: %s: %s: no control socket", dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    pt_warn("control: %s is not a directory of uid %u with mode 0700 (it is %s, uid %u, mode %03o): no control "
            "socket; set PONYTAIL_CONTROL_DIR to a private directory",
            dir, (unsigned)geteuid(), S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a link" : "a file",
            (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
    return -1;
  }
  return 0;
}

static bool peer_ok(int c) {
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl)) return false;
  return cr.uid == geteuid() || cr.uid == 0;
}

/* One line, without its newline, within the timeout: 0, else -1. */
static int read_line(int c, char *buf, size_t n) {
  size_t len = 0;
  while (len + 1 < n) {
    ssize_t k = recv(c, buf + len, n - 1 - len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    len += (size_t)k;
    char *nl = memchr(buf, '\n', len);
    if (nl) {
      *nl = 0;
      return 0;
    }
  }
  return -1;
}

static void send_all(int c, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(c, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= (size_t)k;
  }
}

/* "stats" / "stats json": what PONYTAIL_STATS writes at exit, now ("ok" on
 * the first line, then the stats), for a process that runs long (a server)
 * or a check that wants figures between phases. Takes no sleep lock: the
 * figures are counters and the pools' own locked snapshots. */
static void send_stats(int c, bool json) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    static const char no[] = "error: out of memory for the stats\n";
    send_all(c, no, sizeof no - 1);
    return;
  }
  fputs("ok\n", f);
  if (json) pt_stats_write_json(f, "request");
  else pt_stats_write_text(f, "request");
  if (fclose(f) == 0) send_all(c, buf, len);
  free(buf);
}

/* The directory of the sockets, for the sweep below (set with ctl_fd). */
static char ctl_dir[sizeof ctl_path];

/* Sockets of processes that ended without the exit handler (_exit, a
 * signal: vLLM's offline engine core ends with _exit) stay in the directory;
 * the control thread removes, once, those that nothing listens on. A live
 * process in another pid namespace sharing the directory accepts the
 * connection (and reads an empty request), so only the dead go; files younger
 * than a minute are left alone, since a process between its bind and its
 * listen refuses connections too. At most 4096 names are looked at. */
static void sweep_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  unsigned seen = 0, removed = 0;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) && seen < 4096) {
    const char *nm = e->d_name;
    size_t len = strlen(nm);
    char *end;
    if (len < 6 || strcmp(nm + len - 5, ".sock")) continue;
    long pid = strtol(nm, &end, 10);
    if (end != nm + len - 5 || pid <= 0 || pid == (long)getpid()) continue;
    seen++;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct stat st;
    if (snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, nm) >= (int)sizeof a.sun_path) continue;
    if (lstat(a.sun_path, &st) || !S_ISSOCK(st.st_mode) || now - st.st_mtime < 60) continue;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) break;
    /* Unlinked only if the name still holds the file looked at: a process
     * given that pid since may have bound a new socket there meanwhile. */
    struct stat st2;
    if (connect(s, (struct sockaddr *)&a, sizeof a) && errno == ECONNREFUSED && !lstat(a.sun_path, &st2) &&
        st2.st_ino == st.st_ino && st2.st_dev == st.st_dev && st2.st_mtime == st.st_mtime && !unlink(a.sun_path))
      removed++;
    close(s);
  }
  closedir(d);
  if (removed) pt_debug("control: removed %u stale socket(s) from %s", removed, dir);
}

static void *ctl_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  static char rep[CTL_REP_MAX];
  pt_thread_relax_capture();
  sweep_stale(ctl_dir);
  for (;;) {
    int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EBADF || errno == EINVAL) return NULL; /* closed: fork child or exit */
      struct timespec d = {0, 100000000};
      nanosleep(&d, NULL);
      continue;
    }
    struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
    (void)setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[CTL_REQ_MAX];
    if (!peer_ok(c)) {
      static const char no[] = "error: permission denied: the process belongs to another user\n";
      send_all(c, no, sizeof no - 1);
      pt_warn("control: refused a request from another user");
    } else if (read_line(c, req, sizeof req) == 0) {
      if (!strcmp(req, "stats") || !strcmp(req, "stats json")) send_stats(c, req[5] != 0);
      else {
        pt_sleep_request(req, rep, sizeof rep);
        send_all(c, rep, strlen(rep));
        close(c);
        c = -1;
        pt_sleep_after_reply(); /* a wake's host memory, freed once its answer is out */
      }
    }
    if (c >= 0) close(c);
  }
}

void pt_control_start(void) {
  if (!pt_opt_bool(PT_OPT_CONTROL)) return;
  pthread_mutex_lock(&ctl_mu);
  if (ctl_fd >= 0 && ctl_pid == getpid()) {
    pthread_mutex_unlock(&ctl_mu);
    return;
  }
  pt_gate_setup();
  char dir[sizeof ctl_path];
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int fd = -1;
  if (control_dir(dir, sizeof dir) || private_dir(dir)) goto out;
  if (pt_control_sock_of(dir, (int)getpid(), a.sun_path, sizeof a.sun_path)) {
    pt_warn("control: socket path under %s too long: no control socket", dir);
    goto out;
  }
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) goto fail;
  (void)unlink(a.sun_path); /* a stale socket of an earlier process with this pid */
  if (bind(fd, (struct sockaddr *)&a, sizeof a) || chmod(a.sun_path, 0600) || listen(fd, 4)) goto fail;
  memcpy(ctl_dir, dir, sizeof ctl_dir);
  int rc = pt_thread_start(ctl_main, (void *)(intptr_t)fd);
  if (rc) {
    errno = rc;
    goto fail;
  }
  ctl_fd = fd;
  ctl_pid = getpid();
  memcpy(ctl_path, a.sun_path, sizeof ctl_path);
  pt_info("control: `ponytail sleep %d` and `ponytail wake %d` answer on %s", (int)getpid(), (int)getpid(),
          ctl_path);
  goto out;
fail:
  pt_warn("control: no control socket (%s)", strerror(errno));
  if (fd >= 0) {
    close(fd);
    (void)unlink(a.sun_path);
  }
out:
  pthread_mutex_unlock(&ctl_mu);
}

void pt_control_stop(void) {
  pthread_mutex_lock(&ctl_mu);
  if (ctl_fd >= 0 && ctl_pid == getpid()) {
    (void)unlink(ctl_path);
    ctl_path[0] = 0;
  }
  pthread_mutex_unlock(&ctl_mu);
}

void pt_control_atfork_child(void) {
  /* The parent's socket and thread are the parent's: the child closes its
   * copy of the descriptor and starts its own with its first pool. */
  if (ctl_fd >= 0) close(ctl_fd);
  ctl_fd = -1;
  ctl_path[0] = 0;
  pthread_mutex_init(&ctl_mu, NULL);
}
