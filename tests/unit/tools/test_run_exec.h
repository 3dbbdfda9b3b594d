/* Test helpers for the CLI tests: run a program with extra environment and
 * collect its exit status, stdout and stderr; build a fixture's path.
 * Header-only so each test executable stays one file. */
#ifndef PT_TEST_RUN_EXEC_H
#define PT_TEST_RUN_EXEC_H
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* DIR/NAME in one of four rotating static buffers: enough for the paths of
 * one call's arguments. */
__attribute__((unused)) static char *pt_test_path(const char *dir, const char *name) {
  static char buf[4][PATH_MAX];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, PATH_MAX, "%s/%s", dir, name);
  return b;
}

struct pt_test_out {
  int status; /* exit code, or 128+signal */
  char *out, *err;
};

static char *pt_test_slurp(FILE *f) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  rewind(f);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  buf[n] = '\0';
  return buf;
}

/* env: NULL-terminated "K=V" list set in the child (a bare "K" unsets K). */
__attribute__((unused)) static struct pt_test_out pt_test_exec(char *const argv[], char *const env[]) {
  struct pt_test_out r = {127, NULL, NULL};
  FILE *o = tmpfile(), *e = tmpfile();
  if (!o || !e) return r;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    for (size_t i = 0; env && env[i]; i++) {
      const char *eq = strchr(env[i], '=');
      if (!eq) {
        unsetenv(env[i]);
        continue;
      }
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)(eq - env[i]), env[i]);
      setenv(key, eq + 1, 1);
    }
    dup2(fileno(o), 1);
    dup2(fileno(e), 2);
    execv(argv[0], argv);
    _exit(126);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = pt_test_slurp(o);
  r.err = pt_test_slurp(e);
  fclose(o);
  fclose(e);
  return r;
}

__attribute__((unused)) static void pt_test_out_free(struct pt_test_out *r) {
  free(r->out);
  free(r->err);
}

#endif
