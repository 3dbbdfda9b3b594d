/* `ponytail trace`: argument errors, no GPU -> exit 1, and the report built
 * offline (--from-files) from fixture CUPTI records and shim stats: ranking,
 * shares, the union of kernel intervals, actions matched by name, and the
 * "CUPTI could not attach" path. Also the name shortening and classifiers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>

#include "tests/unit/tools/test_run_exec.h"
#include "tools/lib/json.h"
#include "tools/lib/trace_report.h"

static const char *ponytail, *fixtures;

static char *fixture(const char *name) { return pt_test_path(fixtures, name); }

static void test_usage_errors(void **state) {
  (void)state;
  const char *cases[][3] = {{NULL}, {"--top", "-1"}, {"--bogus"}, {"--from-files", "onlyone"}, {"--wall", "x"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[6] = {(char *)ponytail, "trace"};
    for (int k = 0; k < 3 && cases[i][k]; k++) argv[k + 2] = (char *)cases[i][k];
    struct pt_test_out r = pt_test_exec(argv, NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "usage: ponytail trace"));
    pt_test_out_free(&r);
  }
  char *help[] = {(char *)ponytail, "trace", "--help", NULL};
  struct pt_test_out r = pt_test_exec(help, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "--from-files"));
  pt_test_out_free(&r);
}

static void test_no_gpu(void **state) {
  (void)state;
  if (access("/dev/nvidiactl", F_OK) == 0) skip();
  char *argv[] = {(char *)ponytail, "trace", "--", "/bin/true", NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "no GPU"));
  pt_test_out_free(&r);
}

static struct pt_json *trace_json(const char *rec, const char *stats, const char *wall, int *status) {
  char *argv[10] = {(char *)ponytail, "trace", "--json", "--from-files", (char *)rec, (char *)stats, NULL};
  if (wall) {
    argv[6] = "--wall";
    argv[7] = (char *)wall;
  }
  struct pt_test_out r = pt_test_exec(argv, NULL);
  *status = r.status;
  char err[256];
  struct pt_json *j = pt_json_parse(r.out, strlen(r.out), err, sizeof err);
  pt_test_out_free(&r);
  return j;
}

static double num(const struct pt_json *o, const char *a, const char *b) {
  const struct pt_json *v = pt_json_get(o, a);
  if (b) v = pt_json_get(v, b);
  return pt_json_num(v, NAN);
}

static void test_report(void **state) {
  (void)state;
  int st;
  struct pt_json *j = trace_json(fixture("trace_cupti_records.txt"), fixture("trace_shim_stats.json"), NULL, &st);
  assert_int_equal(st, 0);
  assert_non_null(j);
  assert_true(pt_json_bool(pt_json_get(pt_json_get(j, "cupti"), "ok"), 0));
  assert_int_equal((int)num(j, "cupti", "records"), 6); /* the garbage line is skipped */
  /* 4000 + 3000 + 2000 + 1000 ns; union of [1,4] [5,7] [8,9] [10,13] us. */
  assert_float_equal(num(j, "gpu_time_us", NULL), 10.0, 1e-9);
  assert_float_equal(num(j, "gpu_busy_us", NULL), 9.0, 1e-9);
  assert_float_equal(num(j, "wall_us", NULL), 20.0, 1e-9); /* traced span: 1000..21000 ns */
  assert_float_equal(num(j, "gpu_busy_fraction", NULL), 0.45, 1e-9);
  assert_float_equal(num(j, "attention", "share"), 0.3, 1e-9); /* flash + pt_attn */
  assert_int_equal((int)num(j, "attention", "launches"), 2);
  assert_float_equal(num(j, "cat", "share"), 0.3, 1e-9);
  const struct pt_json *k = pt_json_get(j, "kernels");
  assert_int_equal(pt_json_len(k), 4);
  static const struct {
    const char *prefix, *action;
    int launches;
    double total, share;
  } want[] = {{"nvjet_hsh", "-", 2, 4.0, 0.4},
              {"_ZN2at6native12_GLOBAL__N_119CatArrayBatchedCopy", "passthrough", 2, 3.0, 0.3},
              {"_ZN13pytorch_flash24flash_fwd_splitkv_kernel", "swapped", 1, 2.0, 0.2},
              {"pt_attn_decode_bf16", "-", 1, 1.0, 0.1}};
  for (size_t i = 0; i < 4; i++) {
    const struct pt_json *e = pt_json_at(k, i);
    const char *name = pt_json_str(pt_json_get(e, "name"));
    assert_non_null(name);
    assert_int_equal(strncmp(name, want[i].prefix, strlen(want[i].prefix)), 0);
    assert_string_equal(pt_json_str(pt_json_get(e, "action")), want[i].action);
    assert_int_equal((int)num(e, "launches", NULL), want[i].launches);
    assert_float_equal(num(e, "total_us", NULL), want[i].total, 1e-9);
    assert_float_equal(num(e, "mean_us", NULL), want[i].total / want[i].launches, 1e-9);
    assert_float_equal(num(e, "share", NULL), want[i].share, 1e-9);
  }
  assert_int_equal((int)num(j, "shim", "registered"), 21569);
  pt_json_free(j);

  /* The process wall time, when given, is what the busy fraction is over. */
  j = trace_json(fixture("trace_cupti_records.txt"), fixture("trace_shim_stats.json"), "0.00009", &st);
  assert_int_equal(st, 0);
  assert_float_equal(num(j, "wall_us", NULL), 90.0, 1e-6);
  assert_float_equal(num(j, "gpu_busy_fraction", NULL), 0.1, 1e-9);
  pt_json_free(j);

  /* Text table: short names, top N. */
  char *argv[] = {(char *)ponytail, "trace", "--top", "2", "--from-files", fixture("trace_cupti_records.txt"),
                  fixture("trace_shim_stats.json"), NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "at::native::(anonymous)::CatArrayBatchedCopy<...>"));
  assert_null(strstr(r.out, "pytorch_flash::flash_fwd_splitkv_kernel")); /* third: beyond --top 2 */
  assert_non_null(strstr(r.out, "2 more kernels"));
  assert_non_null(strstr(r.out, "attention"));
  assert_non_null(strstr(r.out, "30.0% of GPU time"));
  assert_non_null(strstr(r.out, "45.0%"));

  /* --flag=VALUE is the same as --flag VALUE (getopt_long). */
  char rec[PATH_MAX + 16];
  snprintf(rec, sizeof rec, "--from-files=%s", fixture("trace_cupti_records.txt"));
  char *eq[] = {(char *)ponytail, "trace", "--top=2", rec, fixture("trace_shim_stats.json"), NULL};
  struct pt_test_out r2 = pt_test_exec(eq, NULL);
  assert_int_equal(r2.status, 0);
  assert_string_equal(r2.out, r.out);
  pt_test_out_free(&r2);
  pt_test_out_free(&r);
}

static void test_cupti_failed(void **state) {
  (void)state;
  char *argv[] = {(char *)ponytail, "trace", "--from-files", fixture("trace_cupti_failed.txt"),
                  fixture("trace_shim_stats.json"), NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CUPTI could not attach"));
  assert_non_null(strstr(r.out, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"));
  assert_non_null(strstr(r.out, "shim launch counts"));
  assert_non_null(strstr(r.out, "other_kernel"));
  assert_non_null(strstr(r.out, "swapped"));
  pt_test_out_free(&r);

  int st;
  struct pt_json *j = trace_json(fixture("trace_cupti_failed.txt"), fixture("trace_shim_stats.json"), NULL, &st);
  assert_int_equal(st, 0);
  assert_false(pt_json_bool(pt_json_get(pt_json_get(j, "cupti"), "ok"), 1));
  const struct pt_json *sk = pt_json_get(pt_json_get(j, "shim"), "kernels");
  assert_int_equal(pt_json_len(sk), 3);
  assert_string_equal(pt_json_str(pt_json_get(pt_json_at(sk, 0), "name")), "other_kernel");
  assert_int_equal((int)num(pt_json_at(sk, 0), "launches", NULL), 5);
  pt_json_free(j);

  /* Neither file: both absences are reported, not an error. */
  char *none[] = {(char *)ponytail, "trace", "--from-files", "/nonexistent/r", "/nonexistent/s", NULL};
  r = pt_test_exec(none, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "no CUPTI records file"));
  assert_non_null(strstr(r.out, "no shim statistics"));
  pt_test_out_free(&r);

  /* Unreadable stats JSON is an error. */
  char *bad[] = {(char *)ponytail, "trace", "--from-files", fixture("trace_cupti_records.txt"),
                 fixture("timeline_bad.json"), NULL};
  r = pt_test_exec(bad, NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "shim stats"));
  pt_test_out_free(&r);
}

static void test_names(void **state) {
  (void)state;
  char out[64];
  pt_trace_short_name("_ZN13pytorch_flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi128EEEv16Flash_fwd_params",
                      out, sizeof out);
  assert_string_equal(out, "pytorch_flash::flash_fwd_splitkv_kernel<...>");
  pt_trace_short_name("_Z10add_kernelPfS_i", out, sizeof out);
  assert_string_equal(out, "add_kernel");
  pt_trace_short_name("_ZNSt6vectorIiE9push_backEv", out, sizeof out);
  assert_string_equal(out, "std::vector<...>");
  pt_trace_short_name("void at::native::elementwise_kernel<128, 4, Lambda>(int, Lambda)", out, sizeof out);
  assert_string_equal(out, "at::native::elementwise_kernel<...>");
  pt_trace_short_name("_Zgarbage", out, sizeof out);
  assert_string_equal(out, "_Zgarbage");
  char small[12];
  pt_trace_short_name("a_very_long_kernel_name_indeed", small, sizeof small);
  assert_string_equal(small, "a_very_l...");
  pt_trace_short_name("_ZN3foo999tooshortE", out, sizeof out); /* length beyond the string */
  assert_string_equal(out, "_ZN3foo999tooshortE");

  assert_true(pt_trace_is_attention("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35"));
  assert_true(pt_trace_is_attention("fmha_cutlassF_bf16_aligned_64x128_rf_sm80"));
  assert_true(pt_trace_is_attention("pt_attn_decode_bf16"));
  assert_true(pt_trace_is_attention("_ZN2at6native18MultiHeadAttentionE"));
  assert_false(pt_trace_is_attention("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT"));
  assert_true(pt_trace_is_cat("_ZN2at6native12_GLOBAL__N_119CatArrayBatchedCopyIN3c108BFloat16EjLi4ELi64ELi64EEEv"));
  assert_false(pt_trace_is_cat("catastrophe"));
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  ponytail = argv[1];
  fixtures = argv[2];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_no_gpu),
                                     cmocka_unit_test(test_report), cmocka_unit_test(test_cupti_failed),
                                     cmocka_unit_test(test_names)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
