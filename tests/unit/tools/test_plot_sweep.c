/* `ponytail plot-sweep`: argument and input errors (exit 2), and the plot of a
 * recorded sweep (fixtures/sweep_result.json: batch 1 and 4 at prompts 512,
 * 2048, 8192, the batch-4 point at 2048 failed): a PNG of the requested size
 * whose pixels hold both batch colours, and an SVG with three panels, a log2
 * prompt axis (512, 1k, ..., 8k), a parity line, one polyline per panel for
 * batch 1 and, for batch 4, markers only (its failed middle point breaks the
 * line); the summary table on stdout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <zlib.h>

#include "tests/unit/tools/test_run_exec.h"

static const char *ponytail, *fixtures;
static char tmpdir[PATH_MAX];

/* The first two series colours of tools/commands/cmd_plot_sweep.c: batch 1, batch 4. */
#define COL_B1 0x1f77b4u
#define COL_B4 0xe4572eu

static char *fixture(const char *name) { return pt_test_path(fixtures, name); }

static struct pt_test_out plot(const char *in, const char *out, const char *size) {
  char *argv[8] = {(char *)ponytail, "plot-sweep", (char *)in, "-o", (char *)out, NULL};
  if (size) {
    argv[5] = "--size";
    argv[6] = (char *)size;
  }
  return pt_test_exec(argv, NULL);
}

static void test_errors(void **state) {
  (void)state;
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/x.png", tmpdir);
  struct {
    const char *in, *out, *msg;
  } cases[] = {
      {"/nonexistent/result.json", out, "cannot read"},
      {fixture("timeline_bad.json"), out, "cannot read"},
      {fixture("bench_result.json"), out, "is not a sweep result"},
      {fixture("sweep_result.json"), "x.jpg", "must end in .png or .svg"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct pt_test_out r = plot(cases[i].in, cases[i].out, NULL);
    assert_int_equal(r.status, 2);
    if (!strstr(r.err, cases[i].msg)) fail_msg("case %zu: want '%s' in: %s", i, cases[i].msg, r.err);
    pt_test_out_free(&r);
  }
  char *noout[] = {(char *)ponytail, "plot-sweep", fixture("sweep_result.json"), NULL};
  struct pt_test_out r = pt_test_exec(noout, NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "usage: ponytail plot-sweep"));
  pt_test_out_free(&r);
  char *badmem[] = {(char *)ponytail, "plot-sweep", fixture("sweep_result.json"), "-o", out, "--memory", "x", NULL};
  r = pt_test_exec(badmem, NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--memory takes auto|nvml|reserved"));
  pt_test_out_free(&r);
  r = plot(fixture("sweep_result.json"), out, "100x100");
  assert_int_equal(r.status, 2);
  pt_test_out_free(&r);
  /* a sweep none of whose points finished */
  char none[PATH_MAX + 16];
  snprintf(none, sizeof none, "%s/none.json", tmpdir);
  FILE *f = fopen(none, "w");
  assert_non_null(f);
  fputs("{\"points\": [{\"prompt\": 512, \"batch\": 8, \"status\": \"failed\", \"judged\": true}]}", f);
  fclose(f);
  r = plot(none, out, NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "nothing to plot"));
  pt_test_out_free(&r);
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  uint8_t *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void test_png(void **state) {
  (void)state;
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/s.png", tmpdir);
  struct pt_test_out r = plot(fixture("sweep_result.json"), out, "900x960");
  assert_int_equal(r.status, 0);
  /* the summary as the sweep printed it, then what was written */
  assert_non_null(strstr(r.out, "verdict: within PyTorch's own backend spread at every judged point"));
  assert_non_null(strstr(r.out, "      4    2048       n/a"));
  assert_non_null(strstr(r.out, "(5 of 6 points, 2 batch sizes; memory: NVML peak device memory)"));
  pt_test_out_free(&r);

  size_t len;
  uint8_t *png = read_all(out, &len);
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(len > 8 + 25 + 12);
  assert_memory_equal(png, sig, 8);
  assert_memory_equal(png + 12, "IHDR", 4);
  uint32_t w = be32(png + 16), h = be32(png + 20);
  assert_int_equal(w, 900);
  assert_int_equal(h, 960); /* three panels of 320 */
  size_t off = 8, idat_len = 0;
  uint8_t *idat = malloc(len);
  assert_non_null(idat);
  while (off + 12 <= len) {
    uint32_t n = be32(png + off);
    assert_true(off + 12 + n <= len);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), png + off + 4, 4 + n);
    assert_int_equal((uint32_t)crc, be32(png + off + 8 + n));
    if (!memcmp(png + off + 4, "IDAT", 4)) {
      memcpy(idat + idat_len, png + off + 8, n);
      idat_len += n;
    }
    off += 12 + n;
  }
  assert_int_equal(off, len);
  size_t raw_len = (size_t)h * (1 + 3 * (size_t)w);
  uLongf got = raw_len + 16;
  uint8_t *raw = malloc(got);
  assert_non_null(raw);
  assert_int_equal(uncompress(raw, &got, idat, idat_len), Z_OK);
  assert_int_equal(got, raw_len);
  /* both batch sizes drawn in each third of the image (their panels) */
  for (int panel = 0; panel < 3; panel++) {
    size_t b1 = 0, b4 = 0;
    for (size_t y = (size_t)panel * h / 3; y < (size_t)(panel + 1) * h / 3; y++) {
      const uint8_t *row = raw + y * (1 + 3 * (size_t)w);
      for (size_t x = 0; x < w; x++) {
        uint32_t c = (uint32_t)row[1 + 3 * x] << 16 | (uint32_t)row[2 + 3 * x] << 8 | row[3 + 3 * x];
        b1 += c == COL_B1;
        b4 += c == COL_B4;
      }
    }
    if (b1 < 200 || b4 < 100) fail_msg("panel %d: %zu batch-1 and %zu batch-4 pixels", panel, b1, b4);
  }
  free(raw);
  free(idat);
  free(png);
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

static void test_svg(void **state) {
  (void)state;
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/s.svg", tmpdir);
  char *argv[] = {(char *)ponytail, "plot-sweep", "-o", out, "--memory", "reserved", fixture("sweep_result.json"), NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "memory: torch peak reserved"));
  pt_test_out_free(&r);
  size_t len;
  char *svg = (char *)read_all(out, &len);
  assert_non_null(strstr(svg, "width=\"1200\" height=\"1200\""));
  assert_non_null(strstr(svg, ">Decode step speed-up: stock step p50 / Ponytail's</text>"));
  assert_non_null(strstr(svg, ">Tokens/s speed-up: Ponytail / stock</text>"));
  assert_non_null(strstr(svg, ">Memory saved by Ponytail: torch's peak reserved, stock - Ponytail</text>"));
  assert_int_equal(count(svg, ">prompt length (tokens, log2 scale)</text>"), 3);
  assert_int_equal(count(svg, ">batch 1</text>"), 3);
  assert_int_equal(count(svg, ">batch 4</text>"), 3);
  assert_int_equal(count(svg, ">1x = parity</text>"), 2);
  /* the log2 axis: every power of two between the points, in each panel */
  assert_int_equal(count(svg, ">512</text>"), 3);
  assert_int_equal(count(svg, ">1k</text>"), 3);
  assert_int_equal(count(svg, ">8k</text>"), 3);
  assert_null(strstr(svg, ">16k</text>"));
  /* batch 1: one line of three points per panel; batch 4: 512 and 8192 around
   * its failed 2048 are markers only */
  assert_int_equal(count(svg, "<polyline class=\"series\" fill=\"none\" stroke=\"#1f77b4\""), 3);
  assert_int_equal(count(svg, "<polyline class=\"series\" fill=\"none\" stroke=\"#e4572e\""), 0);
  assert_int_equal(count(svg, "width=\"9.0\" height=\"9.0\" fill=\"#1f77b4\""), 9);
  assert_int_equal(count(svg, "width=\"9.0\" height=\"9.0\" fill=\"#e4572e\""), 6);
  /* no peak annotations (those are the timeline's) */
  assert_null(strstr(svg, "batch 1 peak"));
  free(svg);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  ponytail = argv[1];
  fixtures = argv[2];
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/pt-plot-sweep-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_errors), cmocka_unit_test(test_png),
                                     cmocka_unit_test(test_svg)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  static const char *files[] = {"x.png", "none.json", "s.png", "s.svg"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", tmpdir, files[i]);
    unlink(path);
  }
  rmdir(tmpdir);
  return rc;
}
