/* Log line format, level filtering and the PONYTAIL_LOG_FILE destination. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log.h"

static int fmt(char *buf, size_t len, int level, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = pt_log_format(buf, len, level, f, ap);
  va_end(ap);
  return n;
}

static void test_format(void **state) {
  char buf[256], want[256];
  int n = fmt(buf, sizeof buf, PT_LOG_INFO, "custom kernel %s", "k1");
  snprintf(want, sizeof want, "ponytail[%d]: info: custom kernel k1\n", (int)getpid());
  assert_string_equal(buf, want);
  assert_int_equal(n, (int)strlen(want));
  fmt(buf, sizeof buf, PT_LOG_ERROR, "x\n");
  snprintf(want, sizeof want, "ponytail[%d]: error: x\n", (int)getpid());
  assert_string_equal(buf, want); /* one newline */
  /* truncation keeps the newline and the terminator inside the buffer */
  char small[32];
  memset(small, 'Z', sizeof small);
  n = fmt(small, sizeof small, PT_LOG_WARN, "%s", "a very long message that does not fit");
  assert_int_equal(n, 31);
  assert_int_equal(small[30], '\n');
  assert_int_equal(small[31], 0);
}

static void test_path_expand(void **state) {
  char out[64], want[64];
  assert_int_equal(pt_path_expand("/tmp/x.%p.log", out, sizeof out), 0);
  snprintf(want, sizeof want, "/tmp/x.%d.log", (int)getpid());
  assert_string_equal(out, want);
  assert_int_equal(pt_path_expand("plain", out, sizeof out), 0);
  assert_string_equal(out, "plain");
  assert_int_equal(pt_path_expand("0123456789", out, 5), -1);
}

static void test_file_and_levels(void **state) {
  char dir[] = "/tmp/pt_log_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char pattern[128], path[128];
  snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
  snprintf(path, sizeof path, "%s/log.%d", dir, (int)getpid());
  setenv("PONYTAIL_LOG_FILE", pattern, 1);
  setenv("PONYTAIL_LOG", "info", 1);
  pt_opts_reload();
  assert_true(pt_log_enabled(PT_LOG_INFO));
  assert_false(pt_log_enabled(PT_LOG_DEBUG));
  pt_info("hello %d", 42);
  pt_debug("not written");
  pt_error("bye");
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char buf[512] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  char want[256];
  snprintf(want, sizeof want, "ponytail[%d]: info: hello 42\nponytail[%d]: error: bye\n", (int)getpid(),
           (int)getpid());
  assert_int_equal(n, strlen(want));
  assert_string_equal(buf, want);
  /* a symlink is refused (O_NOFOLLOW): the log falls back to stderr */
  char link[160];
  snprintf(link, sizeof link, "%s/link", dir);
  assert_int_equal(symlink(path, link), 0);
  setenv("PONYTAIL_LOG_FILE", link, 1);
  pt_opts_reload();
  pt_error("to stderr");
  f = fopen(path, "r");
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  assert_int_equal(n, strlen(want)); /* unchanged */
  unlink(link);
  unlink(path);
  rmdir(dir);
  unsetenv("PONYTAIL_LOG_FILE");
  unsetenv("PONYTAIL_LOG");
  pt_opts_reload();
}

/* The contents of path (empty when missing). */
static const char *slurp(const char *path) {
  static char buf[1024];
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* A child forked after the parent opened its %p log writes its own file,
 * even when no fork handler ran (the shim registers them lazily). */
static void test_fork_child_own_file(void **state) {
  (void)state;
  char dir[] = "/tmp/pt_logf_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char pattern[128], ppath[128], cpath[128];
  snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
  snprintf(ppath, sizeof ppath, "%s/log.%d", dir, (int)getpid());
  setenv("PONYTAIL_LOG_FILE", pattern, 1);
  setenv("PONYTAIL_LOG", "info", 1);
  pt_opts_reload();
  pt_info("parent line");
  pid_t c = fork();
  assert_true(c >= 0);
  if (c == 0) {
    pt_info("child line");
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(c, &st, 0), c);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  snprintf(cpath, sizeof cpath, "%s/log.%d", dir, (int)c);
  assert_null(strstr(slurp(ppath), "child line"));
  assert_non_null(strstr(slurp(ppath), "parent line"));
  assert_non_null(strstr(slurp(cpath), "child line"));
  unlink(ppath);
  unlink(cpath);
  rmdir(dir);
  unsetenv("PONYTAIL_LOG_FILE");
  unsetenv("PONYTAIL_LOG");
  pt_opts_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format),
      cmocka_unit_test(test_path_expand),
      cmocka_unit_test(test_file_and_levels),
      cmocka_unit_test(test_fork_child_own_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
