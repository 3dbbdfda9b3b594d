/* Environment building and fork/exec for the subcommands that run a workload.
 * The parent never touches CUDA, so forking it is always safe. */
#include "tools/lib/spawn.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int pt_env_reserve(struct pt_env *e, size_t need) {
  if (need + 1 <= e->cap) return 0;
  size_t cap = e->cap ? e->cap * 2 : 64;
  while (cap < need + 1) cap *= 2;
  char **v = realloc(e->v, cap * sizeof *v);
  if (!v) return -1;
  e->v = v;
  e->cap = cap;
  return 0;
}

int pt_env_from_environ(struct pt_env *e) {
  e->v = NULL;
  e->n = e->cap = 0;
  if (pt_env_reserve(e, 0) != 0) return -1;
  for (char **p = environ; p && *p; p++) {
    if (pt_env_reserve(e, e->n + 1) != 0) return -1;
    if (!(e->v[e->n] = strdup(*p))) return -1;
    e->n++;
  }
  e->v[e->n] = NULL;
  return 0;
}

static ssize_t pt_env_find(const struct pt_env *e, const char *key) {
  size_t kl = strlen(key);
  for (size_t i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], key, kl) && e->v[i][kl] == '=') return (ssize_t)i;
  return -1;
}

const char *pt_env_get(const struct pt_env *e, const char *key) {
  ssize_t i = pt_env_find(e, key);
  return i < 0 ? NULL : e->v[i] + strlen(key) + 1;
}

int pt_env_set(struct pt_env *e, const char *key, const char *val) {
  ssize_t i = pt_env_find(e, key);
  if (!val) {
    if (i >= 0) {
      free(e->v[i]);
      memmove(&e->v[i], &e->v[i + 1], (e->n - (size_t)i) * sizeof *e->v); /* moves the NULL too */
      e->n--;
    }
    return 0;
  }
  size_t len = strlen(key) + strlen(val) + 2;
  char *kv = malloc(len);
  if (!kv) return -1;
  snprintf(kv, len, "%s=%s", key, val);
  if (i >= 0) {
    free(e->v[i]);
    e->v[i] = kv;
    return 0;
  }
  if (pt_env_reserve(e, e->n + 1) != 0) {
    free(kv);
    return -1;
  }
  e->v[e->n++] = kv;
  e->v[e->n] = NULL;
  return 0;
}

int pt_env_put(struct pt_env *e, const char *kv) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) return -1;
  char key[256];
  size_t kl = (size_t)(eq - kv);
  if (kl >= sizeof key) return -1;
  memcpy(key, kv, kl);
  key[kl] = '\0';
  return pt_env_set(e, key, eq + 1);
}

void pt_env_free(struct pt_env *e) {
  for (size_t i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
  e->v = NULL;
  e->n = e->cap = 0;
}

/* Appends every entry of `existing` other than `shim` to buf (':'-joined). */
static void pt_preload_append(char *buf, size_t len, const char *shim, const char *existing) {
  const char *p = existing ? existing : "";
  while (*p) {
    size_t n = strcspn(p, ": ");
    if (n > 0 && !(strlen(shim) == n && !strncmp(p, shim, n))) {
      size_t used = strlen(buf);
      snprintf(buf + used, len - used, "%s%.*s", used ? ":" : "", (int)n, p);
    }
    p += n;
    p += strspn(p, ": ");
  }
}

char *pt_preload_compose(const char *shim, const char *existing) {
  size_t len = strlen(shim) + (existing ? strlen(existing) : 0) + 2;
  char *buf = malloc(len);
  if (!buf) return NULL;
  snprintf(buf, len, "%s", shim);
  pt_preload_append(buf, len, shim, existing);
  return buf;
}

char *pt_preload_remove(const char *shim, const char *existing) {
  size_t len = (existing ? strlen(existing) : 0) + 1;
  char *buf = malloc(len);
  if (!buf) return NULL;
  buf[0] = '\0';
  pt_preload_append(buf, len, shim, existing);
  return buf;
}

double pt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int pt_spawn_wait(char *const argv[], char *const envp[], int stdout_fd, double *wall_s) {
  double t0 = pt_now_s();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "ponytail: fork: %s\n", strerror(errno));
    return 127;
  }
  if (pid == 0) {
    if (stdout_fd >= 0 && stdout_fd != 1 && dup2(stdout_fd, 1) < 0) _exit(127);
    /* execvpe searches PATH of *our* environment, which is what the user typed against. */
    execvpe(argv[0], argv, envp);
    fprintf(stderr, "ponytail: cannot execute '%s': %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      st = 127 << 8;
      break;
    }
  }
  if (wall_s) *wall_s = pt_now_s() - t0;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 127;
}
