/* `ponytail bench`: argument errors (exit 2 + usage) and, on a machine
 * without a GPU, a clear message and exit 1 before anything is run. */
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_no_gpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
