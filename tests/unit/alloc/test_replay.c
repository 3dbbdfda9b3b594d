/* Replay of the shared traces (overhead <= 2%) and `ponytail replay` error
 * handling. argv[1..] are the trace files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "allocator/replay.h"
#include "tests/unit/alloc/scratch_dir.h"
#include "tools/cmd.h"

const char *pt_tool_argv0 = "ponytail";
static int ntraces;
static char **traces;
static struct pt_replay_trace **loaded; /* traces[i] parsed, on first use */

/* traces[i], parsed once for every test that replays it. */
static const struct pt_replay_trace *trace_at(int i) {
  if (!loaded[i]) {
    char err[512];
    if (pt_replay_load(traces[i], &loaded[i], err, sizeof err)) fail_msg("%s", err);
  }
  return loaded[i];
}

/* Runs `ponytail replay args...` in this process; captures stdout and
 * stderr into out/err (NUL-terminated, truncated to n). */
static int run_cli(char *out, char *err, size_t n, int argc, const char **argv) {
  char po[128], pe[128];
  snprintf(po, sizeof po, "%s/stdout", dir);
  snprintf(pe, sizeof pe, "%s/stderr", dir);
  fflush(stdout), fflush(stderr);
  int so = dup(1), se = dup(2);
  int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
  dup2(fo, 1), dup2(fe, 2);
  int rc = pt_cmd_replay(argc, (char **)argv);
  fflush(stdout), fflush(stderr);
  dup2(so, 1), dup2(se, 2);
  close(so), close(se), close(fo), close(fe);
  const char *paths[2] = {po, pe};
  char *bufs[2] = {out, err};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(paths[i], "r");
    size_t k = f ? fread(bufs[i], 1, n - 1, f) : 0;
    bufs[i][k] = 0;
    if (f) fclose(f);
  }
  return rc;
}

/* The small shared trace (docs/cli.md's and the CLI tests' figures are its). */
static const char *small_trace(void) {
  const char *t = NULL;
  for (int i = 0; i < ntraces; i++)
    if (strstr(traces[i], "hf-b8-p512-n64")) t = traces[i];
  assert_non_null(t);
  return t;
}

static void test_shared_traces(void **state) {
  (void)state;
  assert_true(ntraces >= 2);
  for (int i = 0; i < ntraces; i++) {
    const struct pt_replay_trace *t = trace_at(i);
    char err[512];
    struct pt_replay_opts o = {.keep_bytes = PT_POOL_KEEP_DEFAULT, .time_ops = true};
    struct pt_replay_result r;
    assert_int_equal(pt_replay_run(t, &o, &r, err, sizeof err), 0);
    print_message("%s: peak live %.1f MiB, peak physical %.1f MiB, overhead %.3f%%, stitches %llu, "
                  "trims %llu, ns/op p50 %.0f p99 %.0f\n",
                  strrchr(traces[i], '/') ? strrchr(traces[i], '/') + 1 : traces[i],
                  r.peak_live_bytes / 1048576.0, r.peak_physical_bytes / 1048576.0, r.overhead * 100,
                  (unsigned long long)r.pool.stitches, (unsigned long long)r.pool.trims, r.op_p50, r.op_p99);
    assert_int_equal(r.failed_allocs, 0);
    assert_int_equal(r.allocs, r.pool.pooled_allocs);
    assert_true(r.frees <= r.allocs && r.allocs - r.frees <= 2); /* what lived to the process's exit */
    assert_true(r.peak_physical_bytes >= r.peak_live_bytes);
    assert_true(r.overhead <= 0.02);
  }
}

/* The keep default (2G) against 1G: about the same peak on every trace
 * (growth reuses free memory first, so keep only decides what is handed back
 * between peaks, and through it which handles later blocks land in: within
 * 0.1% of peak live, 6946 against 6944 MiB on the batch-32 trace when
 * written), and on the batch-32 trace, whose prefill frees gigabytes of
 * temporaries per layer, fewer trims, grows and stitches: memory trimmed at
 * 1G was created again moments later. Lag 100: a device behind the host. */
static void test_keep_default(void **state) {
  (void)state;
  int seen_b32 = 0;
  for (int i = 0; i < ntraces; i++) {
    const struct pt_replay_trace *t = trace_at(i);
    char err[512];
    struct pt_replay_result d, g1;
    struct pt_replay_opts o = {.keep_bytes = PT_POOL_KEEP_DEFAULT, .lag_ops = 100};
    assert_int_equal(pt_replay_run(t, &o, &d, err, sizeof err), 0);
    o.keep_bytes = 1ull << 30;
    assert_int_equal(pt_replay_run(t, &o, &g1, err, sizeof err), 0);
    print_message("%s --lag 100: keep default / 1G: peak physical %.1f / %.1f MiB, trims %llu / %llu, grows %llu / "
                  "%llu, stitches %llu / %llu\n",
                  strrchr(traces[i], '/') ? strrchr(traces[i], '/') + 1 : traces[i], d.peak_physical_bytes / 1048576.0,
                  g1.peak_physical_bytes / 1048576.0, (unsigned long long)d.pool.trims,
                  (unsigned long long)g1.pool.trims, (unsigned long long)d.pool.grows,
                  (unsigned long long)g1.pool.grows, (unsigned long long)d.pool.stitches,
                  (unsigned long long)g1.pool.stitches);
    assert_true(d.peak_physical_bytes <= g1.peak_physical_bytes + d.peak_live_bytes / 1000);
    /* Every growth maps; every release follows an unmap or a never-mapped
     * failure path; the counts are consistent with the pool's own. */
    assert_true(d.maps >= d.pool.grows && d.creates >= d.pool.grows && d.releases <= d.creates);
    assert_true(d.pool.trims <= g1.pool.trims);
    if (strstr(traces[i], "hf-b32-p2048-n1024")) {
      seen_b32 = 1;
      assert_true(d.pool.trims < g1.pool.trims);
      assert_true(d.pool.grows + d.pool.stitches < g1.pool.grows + g1.pool.stitches);
      /* what that costs on the GPU: driver calls (1759 vs 3418 when written) */
      uint64_t cd = d.creates + d.maps + d.unmaps + d.releases, c1 = g1.creates + g1.maps + g1.unmaps + g1.releases;
      assert_true(cd * 10 < c1 * 7);
    }
  }
  assert_true(seen_b32);
}

/* docs/cli.md's figures for the small trace, through the CLI's JSON. */
static void test_cli_json(void **state) {
  (void)state;
  static char out[8192], err[8192];
  const char *small = small_trace();
  const char *argv[] = {"replay", small, "--json", "--keep", "256M"};
  assert_int_equal(run_cli(out, err, sizeof out, 5, argv), 0);
  assert_non_null(strstr(out, "\"allocs\": 46878"));
  assert_non_null(strstr(out, "\"frees\": 46877"));
  assert_non_null(strstr(out, "\"peak_live_bytes\": 2080641352"));
  const char *keys[] = {"\"peak_physical_bytes\"", "\"overhead\"", "\"ns_per_op_p50\"", "\"ns_per_op_p99\"",
                        "\"stitches\"", "\"trims\"", "\"driver_calls\": {"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) assert_non_null(strstr(out, keys[i]));
  const char *o = strstr(out, "\"overhead\": ");
  assert_true(strtod(o + 12, NULL) <= 0.02);
}

/* --min: allocations below it pass through, as in the shim (PONYTAIL_KV_MIN);
 * --lag: the device runs behind the host, so freed memory stays pending.
 * Large-only and lagging, the overhead must stay within the 2% goal (it was
 * 8.4% on the large trace with a lagging device before the pool waited for
 * pending granules instead of growing). */
static void test_min_lag(void **state) {
  (void)state;
  static char out[8192], err[8192];
  const char *small = small_trace();
  const char *argv[] = {"replay", small, "--json", "--min", "1M"};
  assert_int_equal(run_cli(out, err, sizeof out, 5, argv), 0);
  assert_non_null(strstr(out, "\"allocs\": 2689"));
  assert_non_null(strstr(out, "\"passthrough_allocs\": 44189"));
  assert_non_null(strstr(out, "\"passthrough_frees\": 44189"));
  assert_non_null(strstr(out, "\"peak_live_bytes\": 2080374784"));
  const char *bad[][2] = {{"--min", "x"}, {"--lag", "1M"}, {"--lag", "-1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *a[] = {"replay", small, bad[i][0], bad[i][1]};
    assert_int_equal(run_cli(out, err, sizeof out, 4, a), 2);
  }
  for (int i = 0; i < ntraces; i++) {
    const struct pt_replay_trace *t = trace_at(i);
    /* Handles of 32 MiB (the default) and of one granule (--chunk 2M): whole
     * handles strand some free memory under small blocks, within the goal.
     * One-granule handles strand parts of granules only; the rest is new
     * memory the planner creates rather than wait for a device behind the
     * host, up to 1/128 above the peak of requested bytes (pool_plan.c):
     * 0.75% on the padded batch-16 trace with --lag 100. */
    for (uint64_t lag = 0, chunk = 0; lag <= 100; chunk = !chunk, lag += chunk ? 0 : 100) {
      struct pt_replay_opts o = {
        .keep_bytes = PT_POOL_KEEP_DEFAULT, .min_bytes = 1 << 20, .lag_ops = lag, .chunk_bytes = chunk};
      struct pt_replay_result r, full;
      assert_int_equal(pt_replay_run(t, &o, &r, err, sizeof err), 0);
      o.min_bytes = 0;
      assert_int_equal(pt_replay_run(t, &o, &full, err, sizeof err), 0);
      print_message("%s --chunk %s --min 1M --lag %llu: peak live %.1f MiB, peak physical %.1f MiB, overhead %.3f%%, "
                    "stitches %llu, grows %llu, trims %llu, syncs %llu (--min 0: %.3f%%)\n",
                    strrchr(traces[i], '/') ? strrchr(traces[i], '/') + 1 : traces[i], chunk ? "2M" : "32M",
                    (unsigned long long)lag, r.peak_live_bytes / 1048576.0, r.peak_physical_bytes / 1048576.0,
                    r.overhead * 100, (unsigned long long)r.pool.stitches, (unsigned long long)r.pool.grows,
                    (unsigned long long)r.pool.trims, (unsigned long long)r.pool.syncs, full.overhead * 100);
      assert_int_equal(r.failed_allocs, 0);
      assert_int_equal(r.allocs, r.pool.pooled_allocs);
      assert_true(r.pass_allocs > 0 && r.pass_frees <= r.pass_allocs);
      assert_int_equal(r.allocs + r.pass_allocs, full.allocs + full.pass_allocs); /* a trace may hold P lines */
      assert_true(r.peak_live_bytes < full.peak_live_bytes);
      assert_true(r.peak_physical_bytes >= r.peak_live_bytes);
      assert_true(r.overhead <= 0.02);
      assert_true(full.overhead <= (chunk ? 1.0 / 128 : 0.02));
      /* Lagging: the pool waits for pending memory, but only at growths. */
      if (lag) assert_true(r.pool.syncs > 0 && r.pool.syncs <= r.pool.grows);
      else assert_int_equal(r.pool.syncs, 0);
    }
  }
}

static void expect_bad(const char *name, const char *text, size_t len, const char *where, const char *msg) {
  static char out[4096], err[4096];
  char path[128], want[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(text, 1, len, f);
  fclose(f);
  const char *argv[] = {"replay", path};
  assert_int_equal(run_cli(out, err, sizeof out, 2, argv), 2);
  snprintf(want, sizeof want, "ponytail replay: %s%s", path, where);
  if (!strstr(err, want) || !strstr(err, msg)) fail_msg("stderr '%s' lacks '%s' / '%s'", err, want, msg);
}

static void test_cli_errors(void **state) {
  (void)state;
  static char out[4096], err[4096];
#define BAD(name, text, where, msg) expect_bad(name, text, sizeof text - 1, where, msg)
  BAD("unknown.trace", "A 512 0x1000 (nil)\nZ 1 2 3\n", ":2: ", "unknown event");
  BAD("unknownptr.trace", "A 512 0x1000 (nil)\nR 0x1000 (nil)\nR 0x1000 (nil)\n", ":3: ", "free of unknown pointer");
  BAD("dup.trace", "# c\nA 512 0x1000 (nil)\nA 512 0x1000 (nil)\n", ":3: ", "allocated again");
  BAD("mixed.trace", "P 512 0x1000 (nil)\nR 0x1000 (nil)\n", ":2: ", "free of unknown pointer");
  /* A gzip file cut in the middle. */
  const char *small = traces[0];
  FILE *f = fopen(small, "rb");
  assert_non_null(f);
  static char gz[65536];
  size_t n = fread(gz, 1, sizeof gz, f);
  fclose(f);
  assert_true(n > 1000);
  expect_bad("cut.trace.gz", gz, n / 2, ":", "truncated gzip");
  /* Missing file, bad flags: exit 2, never a crash. */
  char missing[128];
  snprintf(missing, sizeof missing, "%s/none.trace", dir);
  const char *a1[] = {"replay", missing};
  assert_int_equal(run_cli(out, err, sizeof out, 2, a1), 2);
  assert_non_null(strstr(err, "cannot open"));
  const char *a2[] = {"replay", small, "--keep"};
  assert_int_equal(run_cli(out, err, sizeof out, 3, a2), 2);
  const char *a3[] = {"replay", small, "--limit", "12Q"};
  assert_int_equal(run_cli(out, err, sizeof out, 4, a3), 2);
  const char *a3b[] = {"replay", small, "--limit=12Q"}; /* --flag=VALUE is read, and checked */
  assert_int_equal(run_cli(out, err, sizeof out, 3, a3b), 2);
  assert_non_null(strstr(err, "--limit needs a size"));
  const char *a4[] = {"replay", "--bogus"};
  assert_int_equal(run_cli(out, err, sizeof out, 2, a4), 2);
  const char *a5[] = {"replay"};
  assert_int_equal(run_cli(out, err, sizeof out, 1, a5), 2);
  const char *a6[] = {"replay", "--help"};
  assert_int_equal(run_cli(out, err, sizeof out, 2, a6), 0);
  assert_non_null(strstr(out, "--limit SIZE"));
}

/* Under a limit below the trace's peak, allocations fail cleanly (exit 1);
 * just above it, stitching makes it fit. */
static void test_cli_limit(void **state) {
  (void)state;
  static char out[8192], err[8192];
  const char *small = small_trace();
  const char *a1[] = {"replay", small, "--limit", "1G"};
  assert_int_equal(run_cli(out, err, sizeof out, 4, a1), 1);
  assert_non_null(strstr(err, "allocations failed"));
  const char *a2[] = {"replay", small, "--limit", "2000M", "--json"};
  assert_int_equal(run_cli(out, err, sizeof out, 5, a2), 0);
  const char *s = strstr(out, "\"peak_physical_bytes\": ");
  assert_non_null(s);
  assert_true(strtoull(s + 23, NULL, 10) <= 2000ull << 20);
}

int main(int argc, char **argv) {
  ntraces = argc - 1;
  traces = argv + 1;
  loaded = calloc((size_t)(ntraces ? ntraces : 1), sizeof *loaded);
  if (!loaded) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_shared_traces),
      cmocka_unit_test(test_keep_default),
    cmocka_unit_test(test_cli_json),
    cmocka_unit_test(test_cli_errors),
    cmocka_unit_test(test_cli_limit),
    cmocka_unit_test(test_min_lag),
  };
  int rc = cmocka_run_group_tests(tests, scratch_setup, scratch_teardown);
  for (int i = 0; i < ntraces; i++)
    if (loaded[i]) pt_replay_free(loaded[i]);
  free(loaded);
  return rc;
}
