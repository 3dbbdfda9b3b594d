/* shim/cupti.c against a fake libcupti.so.13 (found first through
 * LD_LIBRARY_PATH): the records file it writes, the fallback from
 * CONCURRENT_KERNEL to KERNEL, the "E <reason>" line when CUPTI cannot
 * attach, %p in the path, and that the report reader parses its output.
 * Each case runs in a forked child: the tracer is once-per-process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/cupti.h"
#include "common/options.h"
#include "tools/lib/trace_report.h"

static char dir[PATH_MAX];

/* Runs start/stop in a child with PONYTAIL_CUPTI=path and FAKECUPTI_FAIL=fail. */
static pid_t trace_in_child(const char *path, const char *fail) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("PONYTAIL_CUPTI", path, 1);
    setenv("PONYTAIL_LOG", "error", 1);
    if (fail) setenv("FAKECUPTI_FAIL", fail, 1);
    pt_opts_reload();
    pt_cupti_start();
    pt_cupti_stop();
    pt_cupti_stop(); /* a second stop is harmless */
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  return pid;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_records(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/ok", dir);
  trace_in_child(path, NULL);
  char *s = slurp(path);
  assert_non_null(s);
  assert_int_equal(strncmp(s, "# ponytail-cupti 1 pid=", 23), 0);
  assert_non_null(strstr(s, "\n# start start_ns=5000 kind=concurrent_kernel lib=libcupti.so.13\n"));
  assert_non_null(strstr(s, "\nK 100 200 7 kernA\nK 150 400 9 _ZN3foo3barEv\nK 500 600 7 (unnamed)\n"));
  assert_null(strstr(s, "K 120 130")); /* the memcpy record */
  assert_non_null(strstr(s, "\n# end stop_ns=90000 records=3 dropped=2\n"));
  assert_null(strstr(s, "\nE "));

  /* What the tracer writes is what the report reads. */
  struct pt_trace_report r;
  char why[256];
  const char *rec = path;
  assert_int_equal(pt_trace_load(&r, &rec, 1, NULL, 0, 0, why, sizeof why), 0);
  assert_true(r.cupti_ok);
  assert_int_equal(r.records, 3);
  assert_int_equal(r.dropped, 2);
  assert_int_equal(r.total_ns, 100 + 250 + 100);
  assert_int_equal(r.busy_ns, 300 + 100); /* [100,400] and [500,600] */
  assert_int_equal(r.span_ns, 90000 - 100);
  pt_trace_report_free(&r);
  unlink(path);
}

static void test_kernel_fallback(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/kernel", dir);
  trace_in_child(path, "concurrent");
  char *s = slurp(path);
  assert_non_null(s);
  assert_non_null(strstr(s, "kind=kernel "));
  assert_non_null(strstr(s, "K 100 200 7 kernA\n"));
  unlink(path);
}

static void test_cannot_attach(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  const char *fails[] = {"enable", "register"};
  const char *msgs[] = {"E cuptiActivityEnable(CONCURRENT_KERNEL and KERNEL) failed: FAKE_MULTIPLE_SUBSCRIBERS\n",
                        "E cuptiActivityRegisterCallbacks failed: FAKE_ERROR\n"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/fail-%s", dir, fails[i]);
    trace_in_child(path, fails[i]);
    char *s = slurp(path);
    assert_non_null(s);
    assert_int_equal(strncmp(s, "# ponytail-cupti 1 pid=", 23), 0);
    assert_non_null(strstr(s, msgs[i]));
    assert_null(strstr(s, "\nK "));
    struct pt_trace_report r;
    char why[256];
    const char *rec = path;
    assert_int_equal(pt_trace_load(&r, &rec, 1, NULL, 0, 0, why, sizeof why), 0);
    assert_false(r.cupti_ok);
    assert_non_null(strstr(r.cupti_error, "failed"));
    pt_trace_report_free(&r);
    unlink(path);
  }
}

static void test_paths(void **state) {
  (void)state;
  /* %p becomes the pid of the traced process. */
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/pid.%%p", dir);
  pid_t pid = trace_in_child(path, NULL);
  char probe[PATH_MAX + 32], want[64];
  snprintf(probe, sizeof probe, "%s/pid.%ld", dir, (long)pid);
  char *s = slurp(probe);
  assert_non_null(s);
  snprintf(want, sizeof want, "pid=%ld\n", (long)pid);
  assert_non_null(strstr(s, want));
  unlink(probe);
  /* An unwritable path: no file, no crash (trace_in_child checks the exit). */
  trace_in_child("/nonexistent-dir/cupti", NULL);
}

/* The first buffer CUPTI asks for (its first traced kernel, after the CUDA
 * runtime has started) registers an exit handler that flushes and closes the
 * file. The shim's own handler is registered at load and so runs after the
 * runtime's teardown, where a flush crashed on the H200; here the child never
 * calls pt_cupti_stop() and exits normally: the records and the end line must
 * still be there. */
static void test_flush_at_exit(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/atexit", dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("PONYTAIL_CUPTI", path, 1);
    setenv("PONYTAIL_LOG", "error", 1);
    pt_opts_reload();
    pt_cupti_start();
    /* The fake hands the tracer a buffer of records on a flush: the first
     * buffer request, as a traced kernel would make it. */
    void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    int (*flush)(uint32_t) = lib ? (int (*)(uint32_t))dlsym(lib, "cuptiActivityFlushAll") : NULL;
    if (!flush) _exit(3);
    flush(0);
    exit(0); /* atexit handlers run; pt_cupti_stop() is never called here */
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  char *s = slurp(path);
  assert_non_null(s);
  assert_non_null(strstr(s, "\nK 100 200 7 kernA\n"));
  /* records=6: the child's flush and the exit handler's forced one */
  assert_non_null(strstr(s, "\n# end stop_ns=90000 records=6 dropped="));
  unlink(path);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pt-test-cupti-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_records), cmocka_unit_test(test_kernel_fallback),
                                     cmocka_unit_test(test_cannot_attach), cmocka_unit_test(test_paths),
                                     cmocka_unit_test(test_flush_at_exit)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rmdir(dir);
  return rc;
}
