/* tools/lib/sweep.c, the part of `ponytail bench --sweep` that runs nothing: the
 * spec (good and bad --sweep values and their reasons), the order of the
 * points, the summary rows of a recorded sweep result (fixtures/sweep_result.json,
 * written by the sweep itself with the fake generate.py of fixtures/sweep/:
 * made-up figures, one failed point), the tables, the overall verdict line
 * and the exit status over the points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/json.h"
#include "tools/lib/sweep.h"

static const char *fixtures;

static void test_parse(void **state) {
  (void)state;
  struct pt_sweep_spec s;
  char why[256];
  memset(&s, 0, sizeof s);
  assert_int_equal(pt_sweep_parse("prompt=512,2048,8192,32768", &s, why, sizeof why), 0);
  assert_int_equal(s.nprompt, 4);
  assert_int_equal(s.prompt[3], 32768);
  assert_int_equal(s.nbatch, 0);
  assert_int_equal(pt_sweep_npoints(&s), 4);
  /* a second --sweep adds the other key */
  assert_int_equal(pt_sweep_parse("batch=1,8", &s, why, sizeof why), 0);
  assert_int_equal(pt_sweep_npoints(&s), 8);
  /* k = x1024, both keys in one value */
  memset(&s, 0, sizeof s);
  assert_int_equal(pt_sweep_parse("prompt=512,4k,32K,batch=8", &s, why, sizeof why), 0);
  assert_int_equal(s.nprompt, 3);
  assert_int_equal(s.prompt[1], 4096);
  assert_int_equal(s.prompt[2], 32768);
  assert_int_equal(s.nbatch, 1);
  assert_int_equal(s.batch[0], 8);
}

static void test_parse_errors(void **state) {
  (void)state;
  static const struct {
    const char *spec, *why;
  } bad[] = {
      {"", "empty"},
      {"prompt=", "prompt= has no values"},
      {"prompt=abc", "bad prompt value 'abc'"},
      {"prompt=0", "bad prompt value '0'"},
      {"prompt=-512", "bad prompt value '-512'"},
      {"prompt=1k5", "bad prompt value '1k5'"},
      {"prompt=2000000000", "bad prompt value"},
      {"batch=1,x", "bad batch value 'x'"},
      {"prmpt=512", "unknown key 'prmpt'"},
      {"512,1024", "'512' has no key"},
      {"prompt=512,512", "prompt 512 given twice"},
      {"prompt=512,,1024", "an empty prompt value"},
      {"prompt=512,", "an empty prompt value"},
      {"prompt=1,batch=2,prompt=3", "prompt given twice"},
      {"batch=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "more than 16 batch values"},
      {"prompt=1,2,3,4,5,6,7,8,9,batch=1,2,3,4,5,6,7,8", "72 points"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct pt_sweep_spec s;
    char why[256] = "";
    memset(&s, 0, sizeof s);
    if (pt_sweep_parse(bad[i].spec, &s, why, sizeof why) != -1) fail_msg("'%s' was accepted", bad[i].spec);
    if (!strstr(why, bad[i].why)) fail_msg("'%s': want '%s' in '%s'", bad[i].spec, bad[i].why, why);
  }
  /* a key already given by an earlier --sweep */
  struct pt_sweep_spec s;
  char why[256];
  memset(&s, 0, sizeof s);
  assert_int_equal(pt_sweep_parse("prompt=512", &s, why, sizeof why), 0);
  assert_int_equal(pt_sweep_parse("prompt=1024", &s, why, sizeof why), -1);
  assert_non_null(strstr(why, "prompt given twice"));
}

/* Every batch (outer) with every prompt (inner); a missing key takes the default. */
static void test_points(void **state) {
  (void)state;
  struct pt_sweep_spec s;
  char why[64];
  memset(&s, 0, sizeof s);
  assert_int_equal(pt_sweep_parse("prompt=512,2048,batch=1,8", &s, why, sizeof why), 0);
  static const long want[4][2] = {{512, 1}, {2048, 1}, {512, 8}, {2048, 8}};
  for (size_t i = 0; i < 4; i++) {
    long p, b;
    pt_sweep_point(&s, i, 99, 99, &p, &b);
    assert_int_equal(p, want[i][0]);
    assert_int_equal(b, want[i][1]);
  }
  memset(&s, 0, sizeof s);
  assert_int_equal(pt_sweep_parse("prompt=512,2048", &s, why, sizeof why), 0);
  long p, b;
  pt_sweep_point(&s, 1, 7, 8, &p, &b);
  assert_int_equal(p, 2048);
  assert_int_equal(b, 8);
}

static struct pt_json *load_fixture(void) {
  char path[4096], err[256];
  snprintf(path, sizeof path, "%s/sweep_result.json", fixtures);
  struct pt_json *d = pt_json_parse_file(path, err, sizeof err);
  if (!d) fail_msg("%s", err);
  return d;
}

static void rows_of(const struct pt_json *d, struct pt_sweep_row *rows, size_t *n) {
  const struct pt_json *pts = pt_json_get(d, "points");
  *n = pt_json_len(pts);
  for (size_t i = 0; i < *n; i++) assert_int_equal(pt_sweep_row_from_json(pt_json_at(pts, i), &rows[i]), 0);
}

#define NEAR(x, want) assert_true(fabs((x) - (want)) < 1e-6 * fabs(want) + 1e-9)

/* The figures follow from fixtures/sweep/generate.py's formulas: A's step
 * 10 + 2 k (1 + batch/16) ms, B's 10 + 0.5 k (k = prompt / 512), B's TTFT 1.1 x
 * A's, B's reserved int(0.9 x A's), NVML = reserved + 500 MiB. */
static void test_rows_from_fixture(void **state) {
  (void)state;
  struct pt_json *d = load_fixture();
  struct pt_sweep_row rows[8];
  size_t n;
  rows_of(d, rows, &n);
  assert_int_equal(n, 6);
  const struct pt_sweep_row *r = &rows[0];
  assert_int_equal(r->prompt, 512);
  assert_int_equal(r->batch, 1);
  assert_false(r->failed);
  assert_true(r->judged);
  assert_string_equal(r->verdict, "within");
  NEAR(r->a.step_ms, 12.125);
  NEAR(r->b.step_ms, 10.5);
  NEAR(r->step_speedup, 12.125 / 10.5);
  NEAR(r->tokens_speedup, 12.125 / 10.5); /* same tokens over the total time */
  NEAR(r->ttft_ratio, 1.1);
  const double ra = 1073741824.0 + 512 * 65536, rb = 996566630.0; /* int(0.9 * ra) */
  NEAR(r->reserved_saved_mib, (ra - rb) / 1048576);
  NEAR(r->reserved_saved_pct, 100 * (ra - rb) / ra);
  NEAR(r->nvml_saved_mib, (ra - rb) / 1048576);
  NEAR(r->nvml_saved_pct, 100 * (ra - rb) / (ra + 500 * 1048576.0));
  /* between the judged points: not judged */
  assert_false(rows[1].judged);
  assert_null(rows[1].verdict);
  NEAR(rows[2].step_speedup, (10 + 2 * 16 * (1 + 1 / 16.0)) / (10 + 0.5 * 16));
  /* the failed point: no figures */
  r = &rows[4];
  assert_int_equal(r->prompt, 2048);
  assert_int_equal(r->batch, 4);
  assert_true(r->failed);
  assert_true(isnan(r->step_speedup) && isnan(r->tokens_speedup) && isnan(r->nvml_saved_mib));
  /* the last point: judged */
  r = &rows[5];
  assert_true(r->judged);
  assert_string_equal(r->verdict, "within");
  NEAR(r->step_speedup, 50.0 / 18.0);
  /* the sweep's own summary rows agree with the ones derived here */
  const struct pt_json *sum = pt_json_get(pt_json_get(d, "summary"), "points");
  assert_int_equal(pt_json_len(sum), 6);
  for (size_t i = 0; i < n; i++) {
    const struct pt_json *s = pt_json_at(sum, i);
    double want = pt_json_num(pt_json_get(s, "step_speedup"), NAN);
    if (rows[i].failed) assert_true(isnan(want));
    else NEAR(rows[i].step_speedup, want);
  }
  /* not a sweep point */
  struct pt_sweep_row x;
  assert_int_equal(pt_sweep_row_from_json(d, &x), -1);
  assert_int_equal(pt_sweep_row_from_json(NULL, &x), -1);
  pt_json_free(d);
}

static char *print_to_string(const struct pt_sweep_row *rows, size_t n, int point) {
  FILE *f = tmpfile();
  assert_non_null(f);
  if (point) pt_sweep_print_point(f, rows);
  else pt_sweep_print_summary(f, rows, n);
  long len = ftell(f);
  rewind(f);
  char *s = calloc(1, (size_t)len + 1);
  assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  return s;
}

static void test_tables(void **state) {
  (void)state;
  struct pt_json *d = load_fixture();
  struct pt_sweep_row rows[8];
  size_t n;
  rows_of(d, rows, &n);
  char *t = print_to_string(rows, n, 0);
  assert_non_null(strstr(t, "speed-up"));
  assert_non_null(strstr(t, "      1     512     1.15x     1.15x  1.100       106    6.8%       106   10.0%  within\n"));
  assert_non_null(strstr(t, "      4    2048       n/a       n/a    n/a       n/a     n/a       n/a     n/a  failed\n"));
  assert_non_null(strstr(t, "      1    2048     1.54x"));
  assert_non_null(strstr(t, "  -\n")); /* not judged */
  free(t);
  t = print_to_string(&rows[0], 1, 1);
  assert_non_null(strstr(t, "TTFT (prefill, s)"));
  assert_non_null(strstr(t, "decode step p50 (ms)               12.125         10.500    0.866"));
  assert_non_null(strstr(t, "peak reserved (torch)            1056 MiB        950 MiB    0.900"));
  assert_non_null(strstr(t, "within PyTorch's own backend spread"));
  free(t);
  t = print_to_string(&rows[1], 1, 1);
  assert_non_null(strstr(t, "not judged at this point (--verdict-every judges every point)"));
  free(t);
  pt_json_free(d);
}

static struct pt_sweep_row row(long prompt, long batch, int judged, const char *verdict, int failed) {
  struct pt_sweep_row r;
  memset(&r, 0, sizeof r);
  r.prompt = prompt;
  r.batch = batch;
  r.judged = judged;
  r.verdict = verdict;
  r.failed = failed;
  return r;
}

static void test_verdict_and_exit(void **state) {
  (void)state;
  char line[1024];
  struct pt_json *d = load_fixture();
  struct pt_sweep_row rows[8];
  size_t n;
  rows_of(d, rows, &n);
  pt_sweep_verdict_line(rows, n, line, sizeof line);
  assert_string_equal(line, "verdict: within PyTorch's own backend spread at every judged point (2 of 6 judged: "
                            "batch 1, prompt 512; batch 4, prompt 8192); runs failed at batch 4, prompt 2048 "
                            "(see stderr)");
  assert_int_equal(pt_sweep_exit_status(rows, n), 1); /* the failed point */
  /* the sweep recorded the same line and status */
  assert_string_equal(pt_json_str(pt_json_get(pt_json_get(d, "summary"), "line")), line);
  pt_json_free(d);

  struct pt_sweep_row ok[2] = {row(512, 8, 1, "within", 0), row(4096, 8, 1, "within", 0)};
  pt_sweep_verdict_line(ok, 2, line, sizeof line);
  assert_string_equal(line, "verdict: within PyTorch's own backend spread at every point (2 of 2 judged: "
                            "batch 8, prompt 512; batch 8, prompt 4096)");
  assert_int_equal(pt_sweep_exit_status(ok, 2), 0);

  /* OUTSIDE at one point: 3, named */
  struct pt_sweep_row out[3] = {row(512, 8, 1, "within", 0), row(2048, 8, 0, NULL, 0), row(4096, 8, 1, "outside", 0)};
  pt_sweep_verdict_line(out, 3, line, sizeof line);
  assert_string_equal(line, "verdict: OUTSIDE PyTorch's own backend spread at batch 8, prompt 4096");
  assert_int_equal(pt_sweep_exit_status(out, 3), 3);

  /* NaN outranks OUTSIDE, and both outrank a failed run */
  struct pt_sweep_row nan[3] = {row(512, 8, 1, "outside", 0), row(2048, 8, 1, "nonfinite", 0), row(4096, 8, 1, NULL, 1)};
  pt_sweep_verdict_line(nan, 3, line, sizeof line);
  assert_non_null(strstr(line, "verdict: FAIL: NaN/Inf in the sampled logits at batch 8, prompt 2048"));
  assert_non_null(strstr(line, "runs failed at batch 8, prompt 4096"));
  assert_int_equal(pt_sweep_exit_status(nan, 3), 4);
  struct pt_sweep_row nan2[2] = {row(512, 8, 1, "nonfinite", 0), row(4096, 8, 1, "outside", 0)};
  assert_int_equal(pt_sweep_exit_status(nan2, 2), 4);

  /* a verdict that could not be formed: 1, named */
  struct pt_sweep_row err[2] = {row(512, 8, 1, "error", 0), row(4096, 8, 1, "within", 0)};
  pt_sweep_verdict_line(err, 2, line, sizeof line);
  assert_non_null(strstr(line, "verdict: n/a at batch 8, prompt 512 (the verdict runs failed: see stderr)"));
  assert_int_equal(pt_sweep_exit_status(err, 2), 1);

  /* --verdict-steps 0: nothing judged, nothing failed */
  struct pt_sweep_row none[2] = {row(512, 8, 0, NULL, 0), row(4096, 8, 0, NULL, 0)};
  pt_sweep_verdict_line(none, 2, line, sizeof line);
  assert_string_equal(line, "verdict: not judged at any point (--verdict-steps 0)");
  assert_int_equal(pt_sweep_exit_status(none, 2), 0);

  /* more than three points named: the rest counted */
  struct pt_sweep_row many[5];
  for (int i = 0; i < 5; i++) many[i] = row(512L << i, 1, 1, "outside", 0);
  pt_sweep_verdict_line(many, 5, line, sizeof line);
  assert_non_null(strstr(line, "batch 1, prompt 2048; and 2 more"));
  /* a short buffer is cut, never overrun */
  char small[24];
  pt_sweep_verdict_line(many, 5, small, sizeof small);
  assert_int_equal(strlen(small), sizeof small - 1);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  fixtures = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),       cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_points),      cmocka_unit_test(test_rows_from_fixture),
      cmocka_unit_test(test_tables),      cmocka_unit_test(test_verdict_and_exit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
