/* `ponytail timeline`: argument and input errors (exit 2), and the outputs
 * from a fixture bench result: a PNG checked byte by byte (signature, IHDR,
 * every chunk's CRC, IDAT inflating to exactly height x (1 + 3 x width),
 * both series' colours present) and a well-formed SVG holding both series'
 * polylines, the legend labels and the peak annotations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <limits.h>
#include <zlib.h>

#include "tests/unit/tools/test_run_exec.h"

static const char *ponytail, *fixtures;
static char tmpdir[PATH_MAX];

/* The series colours tools/commands/cmd_timeline.c uses. */
#define COL_A 0x1f77b4u
#define COL_B 0xe4572eu

static char *fixture(const char *name) { return pt_test_path(fixtures, name); }

static struct pt_test_out timeline(const char *in, const char *out, const char *extra) {
  char *argv[8] = {(char *)ponytail, "timeline", (char *)in, "-o", (char *)out, NULL};
  if (extra) {
    argv[5] = "--size";
    argv[6] = (char *)extra;
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
      {fixture("bench_no_timeline.json"), out, "no memory timeline"},
      {fixture("bench_result.json"), "x.jpg", "must end in .png or .svg"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct pt_test_out r = timeline(cases[i].in, cases[i].out, NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, cases[i].msg));
    pt_test_out_free(&r);
  }
  char *noout[] = {(char *)ponytail, "timeline", fixture("bench_result.json"), NULL};
  struct pt_test_out r = pt_test_exec(noout, NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "usage: ponytail timeline"));
  pt_test_out_free(&r);
  char *badmetric[] = {(char *)ponytail, "timeline", fixture("bench_result.json"), "-o", out, "--metric", "x", NULL};
  r = pt_test_exec(badmetric, NULL);
  assert_int_equal(r.status, 2);
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
  snprintf(out, sizeof out, "%s/t.png", tmpdir);
  struct pt_test_out r = timeline(fixture("bench_result.json"), out, "640x400");
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "A stock"));
  pt_test_out_free(&r);

  size_t len;
  uint8_t *png = read_all(out, &len);
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(len > 8 + 25 + 12);
  assert_memory_equal(png, sig, 8);
  size_t off = 8, idat_len = 0, chunks = 0;
  uint8_t *idat = malloc(len);
  assert_non_null(idat);
  uint32_t w = 0, h = 0;
  int seen_iend = 0;
  while (off + 12 <= len) {
    uint32_t n = be32(png + off);
    assert_true(off + 12 + n <= len);
    const uint8_t *type = png + off + 4, *data = png + off + 8;
    uLong crc = crc32(crc32(0L, Z_NULL, 0), type, 4 + n);
    assert_int_equal((uint32_t)crc, be32(data + n));
    if (chunks == 0) {
      assert_memory_equal(type, "IHDR", 4);
      assert_int_equal(n, 13);
      w = be32(data);
      h = be32(data + 4);
      assert_int_equal(data[8], 8); /* bit depth */
      assert_int_equal(data[9], 2); /* RGB */
      assert_int_equal(data[12], 0); /* not interlaced */
    }
    if (!memcmp(type, "IDAT", 4)) {
      memcpy(idat + idat_len, data, n);
      idat_len += n;
    }
    if (!memcmp(type, "IEND", 4)) {
      seen_iend = 1;
      assert_int_equal(off + 12 + n, len); /* nothing after IEND */
    }
    off += 12 + n;
    chunks++;
  }
  assert_true(seen_iend);
  assert_int_equal(w, 640);
  assert_int_equal(h, 400);
  size_t raw_len = (size_t)h * (1 + 3 * (size_t)w);
  uLongf got = raw_len + 16; /* room to detect a too-long stream */
  uint8_t *raw = malloc(got);
  assert_non_null(raw);
  assert_int_equal(uncompress(raw, &got, idat, idat_len), Z_OK);
  assert_int_equal(got, raw_len);
  size_t a = 0, b = 0, white = 0;
  for (size_t y = 0; y < h; y++) {
    const uint8_t *row = raw + y * (1 + 3 * (size_t)w);
    assert_int_equal(row[0], 0); /* filter None */
    for (size_t x = 0; x < w; x++) {
      uint32_t c = (uint32_t)row[1 + 3 * x] << 16 | (uint32_t)row[2 + 3 * x] << 8 | row[3 + 3 * x];
      a += c == COL_A;
      b += c == COL_B;
      white += c == 0xffffffu;
    }
  }
  /* Both curves drawn, on a mostly white background. */
  assert_true(a > 200);
  assert_true(b > 200);
  assert_true(white > (size_t)w * h / 2);
  free(raw);
  free(idat);
  free(png);
}

/* A small well-formedness check: tags nest and close, attribute values are
 * quoted, one root element, nothing but whitespace outside it. Returns the
 * number of elements, or -1. */
static int xml_check(const char *s) {
  const char *stack[64];
  size_t lens[64];
  int depth = 0, elements = 0, roots = 0;
  const char *p = s;
  if (!strncmp(p, "<?xml", 5)) {
    p = strstr(p, "?>");
    if (!p) return -1;
    p += 2;
  }
  while (*p) {
    if (*p != '<') {
      if (depth == 0 && !isspace((unsigned char)*p)) return -1;
      if (*p == '>') return -1;
      if (*p == '&' && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) && strncmp(p, "&amp;", 5) &&
          strncmp(p, "&quot;", 6))
        return -1;
      p++;
      continue;
    }
    if (p[1] == '/') {
      const char *name = p + 2;
      size_t n = strcspn(name, " >");
      if (depth == 0 || n != lens[depth - 1] || strncmp(name, stack[depth - 1], n)) return -1;
      depth--;
      p = strchr(name, '>');
      if (!p) return -1;
      p++;
      continue;
    }
    const char *name = p + 1;
    size_t n = strcspn(name, " />");
    if (n == 0 || !isalpha((unsigned char)name[0])) return -1;
    const char *q = name + n;
    /* attributes: name="value" */
    for (;;) {
      while (isspace((unsigned char)*q)) q++;
      if (*q == '/' || *q == '>') break;
      size_t an = strcspn(q, "= />");
      if (an == 0 || q[an] != '=' || q[an + 1] != '"') return -1;
      const char *end = strchr(q + an + 2, '"');
      if (!end || memchr(q + an + 2, '<', (size_t)(end - (q + an + 2)))) return -1;
      q = end + 1;
    }
    elements++;
    if (depth == 0) roots++;
    if (*q == '/') {
      if (q[1] != '>') return -1;
      p = q + 2;
    } else {
      if (depth == 64) return -1;
      stack[depth] = name;
      lens[depth++] = n;
      p = q + 1;
    }
  }
  return depth == 0 && roots == 1 ? elements : -1;
}

static void test_svg(void **state) {
  (void)state;
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/t.svg", tmpdir);
  struct pt_test_out r = timeline(fixture("bench_result.json"), out, NULL);
  assert_int_equal(r.status, 0);
  pt_test_out_free(&r);
  size_t len;
  char *svg = (char *)read_all(out, &len);
  assert_true(xml_check(svg) > 10);
  assert_non_null(strstr(svg, "<svg "));
  /* Both series as polylines, in their colours. */
  int a = 0, b = 0;
  for (const char *p = svg; (p = strstr(p, "<polyline class=\"series\"")); p++) {
    const char *end = strchr(p, '>');
    if (strstr(p, "stroke=\"#1f77b4\"") && strstr(p, "stroke=\"#1f77b4\"") < end) a++;
    if (strstr(p, "stroke=\"#e4572e\"") && strstr(p, "stroke=\"#e4572e\"") < end) b++;
  }
  assert_true(a >= 1);
  assert_true(b >= 1);
  assert_non_null(strstr(svg, ">A stock</text>"));
  assert_non_null(strstr(svg, ">B ponytail</text>"));
  /* Peaks from the fixture: 8 GiB + 500 MiB and 6.5 GiB + 520 MiB of NVML. */
  assert_non_null(strstr(svg, "A stock peak 8.49 GiB at 3.0 s"));
  assert_non_null(strstr(svg, "B ponytail peak 7.01 GiB at 3.0 s"));
  assert_non_null(strstr(svg, "NVML"));
  assert_int_equal(xml_check("<svg><a></b></svg>"), -1); /* the checker itself rejects bad nesting */
  assert_int_equal(xml_check("<svg x=1/>"), -1);
  free(svg);

  /* --metric reserved labels the axis accordingly. */
  char *argv[] = {(char *)ponytail, "timeline", fixture("bench_result.json"), "-o", out, "--metric", "reserved",
                  "--title", "T & <x>", NULL};
  r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 0);
  pt_test_out_free(&r);
  svg = (char *)read_all(out, &len);
  assert_true(xml_check(svg) > 10);
  assert_non_null(strstr(svg, "memory_reserved"));
  assert_non_null(strstr(svg, "T &amp; &lt;x&gt;"));
  free(svg);
}

/* --metric tier: the host tier's bytes of a generate.py result sampled under
 * PONYTAIL_HOST_TIER (a sample whose query failed is null: a gap); a result
 * without such samples is refused. */
static void test_tier(void **state) {
  (void)state;
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/tier.svg", tmpdir);
  char *argv[] = {(char *)ponytail, "timeline", fixture("tier_result.json"), "-o", out, "--metric", "tier", NULL};
  struct pt_test_out r = pt_test_exec(argv, NULL);
  assert_int_equal(r.status, 0);
  pt_test_out_free(&r);
  size_t len;
  char *svg = (char *)read_all(out, &len);
  assert_true(xml_check(svg) > 10);
  assert_non_null(strstr(svg, "host tier"));
  assert_non_null(strstr(svg, "run peak 3.00 GiB at 1.0 s"));
  free(svg);
  char *none[] = {(char *)ponytail, "timeline", fixture("bench_result.json"), "-o", out, "--metric", "tier", NULL};
  r = pt_test_exec(none, NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "no host-tier samples"));
  pt_test_out_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  ponytail = argv[1];
  fixtures = argv[2];
  const char *tmp = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/pt-test-timeline-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(tmpdir)) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_errors), cmocka_unit_test(test_png),
                                     cmocka_unit_test(test_svg), cmocka_unit_test(test_tier)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char path[PATH_MAX + 16];
  const char *files[] = {"t.png", "t.svg", "x.png"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", tmpdir, files[i]);
    unlink(path);
  }
  rmdir(tmpdir);
  return rc;
}
