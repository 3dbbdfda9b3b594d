/* `ponytail run`: argument errors, LD_PRELOAD composition (existing entries
 * kept, shim first), flag -> PONYTAIL_* mapping, exit status passthrough; and
 * the environment / preload helpers of tools/lib/spawn.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdlib.h>

#include "tests/unit/tools/test_run_exec.h"
#include "tools/lib/spawn.h"

static const char *ponytail;
static char fake_shim[PATH_MAX];

static void test_usage_errors(void **state) {
  (void)state;
  const char *cases[][4] = {
      {"run", NULL},                           /* no command */
      {"run", "--bogus", "--", "true"},        /* unknown flag */
      {"run", "--log", "loud", "true"},        /* bad level */
      {"run", "--stats=xml", "--", "true"},    /* bad stats form */
      {"run", "--stats-file", NULL},           /* missing value */
      {"run", "--of", "--", "true"},           /* abbreviations are not taken */
      {"run", "--stats-every", "0", "true"},   /* seconds >= 1 */
      {"run", "--stats-every", "5s", "true"},  /* a plain number */
      {"run", "--stats-every", "5", "true"},   /* needs a stats file (none in the environment) */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[6] = {(char *)ponytail};
    for (int k = 0; k < 4 && cases[i][k]; k++) argv[k + 1] = (char *)cases[i][k];
    char *env[] = {"PONYTAIL_STATS_FILE", NULL}; /* unset: --stats-every must find no file */
    struct pt_test_out r = pt_test_exec(argv, env);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "usage: ponytail run"));
    pt_test_out_free(&r);
  }
  char *help[] = {(char *)ponytail, "run", "--help", NULL};
  struct pt_test_out r = pt_test_exec(help, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "--stats-file"));
  pt_test_out_free(&r);
}

static void test_preload_and_env(void **state) {
  (void)state;
  char *argv[] = {(char *)ponytail, "run", "--shim", fake_shim, "--stats=json", "--stats-file", "/tmp/s.%p",
                  "--log", "debug", "--off", "--", "/bin/sh", "-c",
                  "echo \"P=$LD_PRELOAD\"; echo \"S=$PONYTAIL_STATS\"; echo \"F=$PONYTAIL_STATS_FILE\"; "
                  "echo \"L=$PONYTAIL_LOG\"; echo \"E=$PONYTAIL_ENABLE\"",
                  NULL};
  char *env[] = {"LD_PRELOAD=libkeepme.so", NULL};
  struct pt_test_out r = pt_test_exec(argv, env);
  assert_int_equal(r.status, 0);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "P=%s:libkeepme.so\n", fake_shim);
  assert_non_null(strstr(r.out, want));
  assert_non_null(strstr(r.out, "S=json\n"));
  assert_non_null(strstr(r.out, "F=/tmp/s.%p\n"));
  assert_non_null(strstr(r.out, "L=debug\n"));
  assert_non_null(strstr(r.out, "E=0\n"));
  pt_test_out_free(&r);

  /* No flags: only LD_PRELOAD changes; --stats alone is the table. */
  char *argv2[] = {(char *)ponytail, "run", "--shim", fake_shim, "--stats", "/bin/sh", "-c",
                   "echo \"P=$LD_PRELOAD\"; echo \"S=$PONYTAIL_STATS\"; echo \"E=${PONYTAIL_ENABLE-unset}\"", NULL};
  char *env2[] = {"LD_PRELOAD", "PONYTAIL_ENABLE", NULL};
  r = pt_test_exec(argv2, env2);
  assert_int_equal(r.status, 0);
  snprintf(want, sizeof want, "P=%s\n", fake_shim);
  assert_non_null(strstr(r.out, want));
  assert_non_null(strstr(r.out, "S=1\n"));
  assert_non_null(strstr(r.out, "E=unset\n"));
  pt_test_out_free(&r);

  /* --stats-every: the variable set, and the stats on (JSON) when nothing else asked for them. */
  char *argv4[] = {(char *)ponytail, "run", "--shim", fake_shim, "--stats-every", "5", "--stats-file", "/tmp/s.%p",
                   "--", "/bin/sh", "-c", "echo \"V=$PONYTAIL_STATS_EVERY S=$PONYTAIL_STATS\"", NULL};
  char *env4[] = {"PONYTAIL_STATS", NULL};
  r = pt_test_exec(argv4, env4);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "V=5 S=json\n"));
  pt_test_out_free(&r);

  /* --flag=VALUE works too; options end at "--": CMD keeps its own --log. */
  char shim_eq[PATH_MAX + 16];
  snprintf(shim_eq, sizeof shim_eq, "--shim=%s", fake_shim);
  char *argv3[] = {(char *)ponytail, "run", shim_eq, "--log=info", "--", "/bin/sh", "-c",
                   "echo \"L=$PONYTAIL_LOG A=$0\"", "--log=bogus", NULL};
  r = pt_test_exec(argv3, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "L=info A=--log=bogus\n"));
  pt_test_out_free(&r);
}

static void test_exit_status(void **state) {
  (void)state;
  char *argv[] = {(char *)ponytail, "run", "--shim", fake_shim, "--", "/bin/sh", "-c", "exit 7", NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 7);
  pt_test_out_free(&r);
  char *missing[] = {(char *)ponytail, "run", "--shim", fake_shim, "--", "/nonexistent/cmd", NULL};
  r = pt_test_exec(missing, NULL);
  assert_int_equal(r.status, 127);
  assert_non_null(strstr(r.err, "cannot execute"));
  pt_test_out_free(&r);
  char *noshim[] = {(char *)ponytail, "run", "--shim", "/nonexistent/libponytail_shim.so", "--", "true", NULL};
  r = pt_test_exec(noshim, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "not found"));
  pt_test_out_free(&r);
}

static void test_preload_compose(void **state) {
  (void)state;
  char *s = pt_preload_compose("/x/shim.so", NULL);
  assert_string_equal(s, "/x/shim.so");
  free(s);
  s = pt_preload_compose("/x/shim.so", "a.so b.so:/x/shim.so::c.so");
  assert_string_equal(s, "/x/shim.so:a.so:b.so:c.so");
  free(s);
  s = pt_preload_remove("/x/shim.so", "/x/shim.so a.so");
  assert_string_equal(s, "a.so");
  free(s);
  s = pt_preload_remove("/x/shim.so", "/x/shim.so");
  assert_string_equal(s, "");
  free(s);
  /* A prefix of the shim path is a different library. */
  s = pt_preload_remove("/x/shim.so", "/x/shim.so.1");
  assert_string_equal(s, "/x/shim.so.1");
  free(s);
}

static void test_env(void **state) {
  (void)state;
  setenv("PT_TEST_A", "1", 1);
  struct pt_env e;
  assert_int_equal(pt_env_from_environ(&e), 0);
  assert_string_equal(pt_env_get(&e, "PT_TEST_A"), "1");
  assert_int_equal(pt_env_set(&e, "PT_TEST_A", "2"), 0);
  assert_string_equal(pt_env_get(&e, "PT_TEST_A"), "2");
  assert_int_equal(pt_env_put(&e, "PT_TEST_B=x=y"), 0);
  assert_string_equal(pt_env_get(&e, "PT_TEST_B"), "x=y");
  assert_int_equal(pt_env_put(&e, "novalue"), -1);
  size_t n = e.n;
  assert_int_equal(pt_env_set(&e, "PT_TEST_A", NULL), 0);
  assert_null(pt_env_get(&e, "PT_TEST_A"));
  assert_int_equal(e.n, n - 1);
  assert_null(e.v[e.n]);
  /* PT_TEST_AB must not match PT_TEST_A. */
  assert_int_equal(pt_env_set(&e, "PT_TEST_AB", "z"), 0);
  assert_null(pt_env_get(&e, "PT_TEST_A"));
  pt_env_free(&e);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_run PONYTAIL\n");
    return 2;
  }
  ponytail = argv[1];
  /* Any readable file serves as "the shim": ld.so warns and ignores it. */
  const char *tmp = getenv("TMPDIR");
  snprintf(fake_shim, sizeof fake_shim, "%s/pt-test-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(fake_shim);
  if (fd < 0) return 1;
  close(fd);
  char real[PATH_MAX];
  if (realpath(fake_shim, real)) snprintf(fake_shim, sizeof fake_shim, "%s", real);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors),   cmocka_unit_test(test_preload_and_env),
      cmocka_unit_test(test_exit_status),    cmocka_unit_test(test_preload_compose),
      cmocka_unit_test(test_env),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  unlink(fake_shim);
  return rc;
}
