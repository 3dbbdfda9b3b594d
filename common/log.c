/* Logging. Formats each line into a stack buffer and writes it with one
 * write(2): no malloc (the shim logs from inside allocator entry points) and
 * no stdio locks (safe after fork and from any thread). A thread-local guard
 * drops messages logged while a message is being written (e.g. if opening
 * the log file were intercepted). */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PT_LOG_LINE 1024

static const char *const pt_level_word[] = {"error", "warn", "info", "debug"};

static int pt_log_fd = -1; /* -1: not opened yet */
static __thread int pt_log_busy;

bool pt_log_enabled(int level) { return level <= pt_opt_enum(PT_OPT_LOG); }

/* Expands %p to the pid; other characters are copied. Returns 0 or -1 when the
 * result does not fit. Shared with the stats file, the allocation trace and
 * the CUPTI trace. */
int pt_path_expand(const char *pattern, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = pattern; *p; p++) {
    if (p[0] == '%' && p[1] == 'p') {
      int n = snprintf(out + o, len - o, "%d", (int)getpid());
      if (n < 0 || (size_t)n >= len - o) return -1;
      o += (size_t)n;
      p++;
    } else {
      if (o + 1 >= len) return -1;
      out[o++] = *p;
    }
  }
  if (o >= len) return -1;
  out[o] = 0;
  return 0;
}

static void pt_write_all(int fd, const char *buf, size_t n) {
  while (n) {
    ssize_t w = write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    buf += w;
    n -= (size_t)w;
  }
}

/* The process that opened pt_log_fd. A forked child that logs before any
 * fork handler could run (the shim registers them at its lazy init, but the
 * policy logs from the constructor) would otherwise write into the parent's
 * %p file. */
static int pt_log_pid;

static int pt_log_open(void) {
  int fd = __atomic_load_n(&pt_log_fd, __ATOMIC_ACQUIRE);
  const char *pattern = pt_opt_str(PT_OPT_LOG_FILE);
  if (fd >= 0 && __atomic_load_n(&pt_log_pid, __ATOMIC_RELAXED) != (int)getpid() && strstr(pattern, "%p")) {
    pt_log_reopen();
    fd = -1;
  }
  if (fd >= 0) return fd;
  int nfd = 2;
  if (pattern[0]) {
    char path[4096];
    int saved = errno;
    if (pt_path_expand(pattern, path, sizeof path) == 0)
      nfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    else
      nfd = -1;
    if (nfd < 0) {
      char msg[256];
      int n = snprintf(msg, sizeof msg, "ponytail[%d]: warn: cannot open PONYTAIL_LOG_FILE (%s); logging to stderr\n",
                       (int)getpid(), strerror(errno));
      nfd = 2;
      if (n > 0) pt_write_all(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    }
    errno = saved;
  }
  int expected = -1;
  __atomic_store_n(&pt_log_pid, (int)getpid(), __ATOMIC_RELAXED);
  if (!__atomic_compare_exchange_n(&pt_log_fd, &expected, nfd, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    if (nfd > 2) close(nfd); /* another thread won */
    return expected;
  }
  return nfd;
}

void pt_log_reopen(void) {
  int fd = __atomic_exchange_n(&pt_log_fd, -1, __ATOMIC_ACQ_REL);
  if (fd > 2) close(fd);
}

int pt_log_format(char *buf, size_t len, int level, const char *fmt, va_list ap) {
  if (!buf || len < 2) return 0;
  if (level < PT_LOG_ERROR) level = PT_LOG_ERROR;
  if (level > PT_LOG_DEBUG) level = PT_LOG_DEBUG;
  int n = snprintf(buf, len, "ponytail[%d]: %s: ", (int)getpid(), pt_level_word[level]);
  if (n < 0) n = 0;
  if ((size_t)n >= len - 1) n = (int)len - 2;
  int m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
  if (m < 0) m = 0;
  size_t total = (size_t)n + (size_t)m;
  if (total > len - 2) total = len - 2; /* truncated: keep room for '\n' */
  /* One message = one line. */
  while (total > 0 && buf[total - 1] == '\n') total--;
  buf[total++] = '\n';
  buf[total] = 0;
  return (int)total;
}

void pt_vlog(int level, const char *fmt, va_list ap) {
  if (!pt_log_enabled(level)) return;
  if (pt_log_busy) return;
  pt_log_busy = 1;
  int saved = errno; /* logging must not disturb the caller's errno */
  char buf[PT_LOG_LINE];
  int n = pt_log_format(buf, sizeof buf, level, fmt, ap);
  int fd = pt_log_open();
  if (n > 0) pt_write_all(fd, buf, (size_t)n);
  errno = saved;
  pt_log_busy = 0;
}

void pt_log(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pt_vlog(level, fmt, ap);
  va_end(ap);
}
