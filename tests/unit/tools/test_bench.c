/* `ponytail bench`: argument errors (exit 2 + usage), the verdict's flags and
 * documented exit codes, --sweep's bad specs and conflicting flags (exit 2
 * with the reason), and, on a machine without a GPU, a clear message and
 * exit 1 before anything is run. (The verdict's logic: tests/examples/test_verdict.py;
 * the sweep's figures: test_sweep.c; a whole sweep on the fake CUDA: test_bench_sweep.sh.) */
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
  assert_non_null(strstr(r.out, "--sweep SPEC"));
  assert_non_null(strstr(r.out, "--verdict-every"));
  assert_non_null(strstr(r.out, "worst over its points"));
  pt_test_out_free(&r);
}

/* A bad --sweep says what is wrong with it, before anything runs. */
static void test_sweep_usage_errors(void **state) {
  (void)state;
  const char *cases[][6] = {
      {"--sweep", "prmpt=512", "unknown key 'prmpt'"},
      {"--sweep", "prompt=", "prompt= has no values"},
      {"--sweep", "prompt=512,x", "bad prompt value 'x'"},
      {"--sweep", "512,2048", "'512' has no key"},
      {"--sweep", "prompt=512,512", "prompt 512 given twice"},
      {"--sweep", "batch=0", "bad batch value '0'"},
      {"--sweep", NULL, "missing value after"},
      {"--verdict-every", NULL, "--verdict-every applies to --sweep only"},
      {"--sweep", "prompt=512", "--prompt and --sweep prompt=... both set the prompt length", "--prompt", "1024"},
      {"--sweep", "batch=1,8", "--batch and --sweep batch=... both set the batch size", "--batch", "4"},
      {"--sweep", "prompt=512", "prompt given twice", "--sweep", "prompt=1024"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[8] = {(char *)ponytail, "bench", (char *)cases[i][0], (char *)cases[i][1], NULL};
    if (cases[i][3]) {
      argv[4] = (char *)cases[i][3];
      argv[5] = (char *)cases[i][4];
    }
    struct pt_test_out r = pt_test_exec(argv, NULL);
    assert_int_equal(r.status, 2);
    if (!strstr(r.err, cases[i][2])) fail_msg("case %zu: want '%s' in: %s", i, cases[i][2], r.err);
    assert_non_null(strstr(r.err, "usage: ponytail bench"));
    assert_string_equal(r.out, "");
    pt_test_out_free(&r);
  }
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
  /* so do the sweep's */
  char *sweep[] = {(char *)ponytail, "bench", "--sweep", "prompt=512,2k", "--sweep", "batch=1,8", "--verdict-every",
                   "--verdict-steps", "4", "--new-tokens", "16", NULL};
  r = pt_test_exec(sweep, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "no GPU"));
  assert_null(strstr(r.err, "usage:"));
  assert_string_equal(r.out, "");
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_sweep_usage_errors),
                                     cmocka_unit_test(test_verdict_flags_accepted), cmocka_unit_test(test_no_gpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
