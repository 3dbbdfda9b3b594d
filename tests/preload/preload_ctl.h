/* The shim's control socket, as `ponytail sleep` talks to it, for the
 * preload test programs (tests/preload/preload_sleep.c, preload_vmm.c).
 * g_ctl: the control directory, set by ctl_setup(). */
#ifndef PT_PRELOAD_CTL_H
#define PT_PRELOAD_CTL_H
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/control_path.h"
#include "common/options.h"

static char g_ctl[4096];

/* The control socket of process pid, by the shim's own rule; -1 when its
 * path does not fit. */
static __attribute__((unused)) int sock_addr(struct sockaddr_un *a, int pid) {
  char path[sizeof g_ctl + 32];
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (pt_control_sock_of(g_ctl, pid, path, sizeof path) || strlen(path) >= sizeof a->sun_path) return -1;
  memcpy(a->sun_path, path, strlen(path) + 1);
  return 0;
}

/* One request to this process's control socket; the answer, or NULL with
 * errno set (connect failed). */
static __attribute__((unused)) char *ask(const char *req) {
  static char rep[8192];
  struct sockaddr_un a;
  if (sock_addr(&a, (int)getpid())) return NULL;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return NULL;
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    int e = errno;
    close(s);
    errno = e;
    return NULL;
  }
  char line[64];
  snprintf(line, sizeof line, "%s\n", req);
  if (write(s, line, strlen(line)) != (ssize_t)strlen(line)) {
    close(s);
    return NULL;
  }
  size_t n = 0;
  ssize_t k;
  while ((k = read(s, rep + n, sizeof rep - 1 - n)) > 0) n += (size_t)k;
  rep[n] = 0;
  close(s);
  return rep;
}

static __attribute__((unused)) long long field(const char *rep, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\n%s=", key);
  const char *p = rep ? strstr(rep, k) : NULL;
  return p ? atoll(p + strlen(k)) : -1;
}

/* g_ctl: PONYTAIL_CONTROL_DIR, read through the options table as the shim
 * reads it (the program's own copy of it: the shim's is hidden). */
static __attribute__((unused)) void ctl_setup(void) {
  pt_opts_init();
  snprintf(g_ctl, sizeof g_ctl, "%s", pt_opt_str(PT_OPT_CONTROL_DIR));
}

/* Waits up to 2 s for this process's control thread to answer (it starts
 * with the first pool or kept handle); false when it never did. */
static __attribute__((unused)) bool ctl_wait(void) {
  struct timespec t = {0, 10 * 1000000L};
  for (int i = 0; i < 200; i++) {
    if (ask("status")) return true;
    nanosleep(&t, NULL);
  }
  return false;
}

#endif
