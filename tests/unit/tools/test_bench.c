/* `ponytail bench`: argument errors (exit 2 + usage), the verdict's flags and
 * documented exit codes, and, on a machine without a GPU, a clear message and
 * exit 1 before anything is run. (The verdict's logic: tests/examples/test_verdict.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/tools/test_run_exec.h"

static const char *ponytail;

static void test_usage_errors(void **state) {
  (void)state;
  const char *cases[][3] = {
      {"--bogus", "1"},          {"--batch", "0"},      {"--batch", "x"},
      {"--dtype", "int8"},       {"--pad", "1.5"},      {"--repeats", "0"},
      {"--shim-env", "NOEQUAL"}, {"--new-tokens", NULL}, {"stray", "arg"},
      {"--stock-env", "=x"},
      /* the verdict's flags */
      {"--verdict-steps", "-1"}, {"--verdict-steps", "x"},   {"--verdict-steps", NULL},
      {"--reference-sdpa", "fastest"}, {"--verdict-margin", "0.5"}, {"--verdict-margin", "x"},
      {"--same-path", "stray"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[5] = {(char *)ponytail, "bench", (char *)cases[i][0], (char *)cases[i][1], NULL};
    struct pt_test_out r = pt_test_exec(argv, NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "usage: ponytail bench"));
    pt_test_out_free(&r);
  }
  char *help[] = {(char *)ponytail, "bench", "--help", NULL};
  struct pt_test_out r = pt_test_exec(help, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "--shim-env"));
  assert_non_null(strstr(r.out, "--stock-env"));
  assert_non_null(strstr(r.out, "--kv-heads"));
  assert_non_null(strstr(r.out, "--verdict-steps N"));
  assert_non_null(strstr(r.out, "--reference-sdpa"));
  assert_non_null(strstr(r.out, "--same-path"));
  assert_non_null(strstr(r.out, "--verdict-margin"));
  assert_non_null(strstr(r.out, "within PyTorch's own backend spread"));
  /* The exit codes are documented. */
  assert_non_null(strstr(r.out, "Exit status: 0"));
  assert_non_null(strstr(r.out, "3 verdict OUTSIDE"));
  assert_non_null(strstr(r.out, "4 NaN/Inf"));
  pt_test_out_free(&r);
}

/* Valid verdict flags pass the argument check: without a GPU the run then stops at the probe
 * (exit 1), not with a usage error. */
static void test_verdict_flags_accepted(void **state) {
  (void)state;
  if (access("/dev/nvidiactl", F_OK) == 0) skip();
  char *argv[] = {(char *)ponytail, "bench", "--verdict-steps", "0", "--reference-sdpa", "math", "--same-path",
                  "--verdict-margin", "1.5", "--dtype", "fp32", NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "no GPU"));
  assert_null(strstr(r.err, "usage:"));
  pt_test_out_free(&r);
}

static void test_no_gpu(void **state) {
  (void)state;
  if (access("/dev/nvidiactl", F_OK) == 0) skip(); /* a GPU machine: nothing to check here */
  char *argv[] = {(char *)ponytail, "bench", "--batch", "2", "--out", "/nonexistent/never-written.json", NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "no GPU"));
  assert_string_equal(r.out, ""); /* no table, no partial result */
  pt_test_out_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  ponytail = argv[1];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_usage_errors),
                                     cmocka_unit_test(test_verdict_flags_accepted), cmocka_unit_test(test_no_gpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
