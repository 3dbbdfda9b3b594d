/* Tests of the kernel lister (tools/lib/kernels.c, fatbin.c, cubin.c, ptx.c) on
 * the fixture shared objects nvcc built from kernels_fixture.cu at build
 * time: argv[1] uncompressed cubins + zstd PTX (nvcc's default), argv[2]
 * everything LZ4-compressed. Without nvcc there are no fixtures: skip (77). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tools/lib/fatbin.h"
#include "tools/lib/kernels.h"

static const char *fx_default, *fx_lz4;

struct want {
  const char *name;
  unsigned nparams;
  struct pt_kparam p[8];
  uint64_t bytes;
};

/* The layouts of kernels_fixture.cu (C ABI offsets). */
static const struct want wants[] = {
    {"pt_fx_ptrs", 3, {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, 20},
    {"pt_fx_scalars", 7, {{0, 0, 1}, {1, 2, 2}, {2, 4, 4}, {3, 8, 8}, {4, 16, 8}, {5, 24, 4}, {6, 32, 8}}, 40},
    {"_Z12pt_fx_structi2ByPd", 3, {{0, 0, 4}, {1, 8, 24}, {2, 32, 8}}, 40},
    {"_Z10pt_fx_grid3Big", 1, {{0, 0, 128}}, 128},
    {"pt_fx_none", 0, {{0, 0, 0}}, 0},
    {"_ZN4ptfx5scaleIfEEvPT_S1_", 2, {{0, 0, 8}, {1, 8, 4}}, 12},
};

static const struct pt_fatbin_kernel *find(const struct pt_kernel_list *l, const char *name, const char *arch) {
  const struct pt_fatbin_kernel *hit = NULL;
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->k[i].name, name) && !strcmp(l->k[i].arch, arch)) {
      assert_null(hit); /* listed once per arch */
      hit = &l->k[i];
    }
  if (!hit) fprintf(stderr, "missing %s %s\n", arch, name);
  return hit;
}

static void check_fixture(const char *path, int expect_ptx) {
  struct pt_kernel_list l = {0};
  char err[512];
  int rc = pt_kernels_scan_file(path, &l, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  for (size_t i = 0; i < l.nnotes; i++) {
    fprintf(stderr, "note: %s\n", l.notes[i].text);
    assert_false(l.notes[i].is_error);
  }
  const char *archs[] = {"sm_80", "sm_90", "compute_90"};
  for (size_t a = 0; a < 3; a++) {
    if (a == 2 && !expect_ptx) continue;
    for (size_t w = 0; w < sizeof wants / sizeof wants[0]; w++) {
      const struct pt_fatbin_kernel *k = find(&l, wants[w].name, archs[a]);
      assert_non_null(k);
      assert_int_equal(k->ptx, a == 2);
      assert_true(k->params_known);
      assert_int_equal(k->nparams, wants[w].nparams);
      assert_int_equal(k->param_bytes, wants[w].bytes);
      for (unsigned p = 0; p < wants[w].nparams; p++) {
        assert_int_equal(k->params[p].ordinal, wants[w].p[p].ordinal);
        assert_int_equal(k->params[p].offset, wants[w].p[p].offset);
        assert_int_equal(k->params[p].size, wants[w].p[p].size);
      }
    }
  }
  /* nothing listed for an arch that was not built */
  assert_null(find(&l, "pt_fx_ptrs", "sm_75"));
  pt_kernel_list_free(&l);
}

static void test_fixture_default(void **state) {
  (void)state;
  /* the PTX is zstd-compressed: listed when libzstd.so.1 is present, else a
   * (non-error) note says so */
  struct pt_kernel_list l = {0};
  char err[512];
  assert_int_equal(pt_kernels_scan_file(fx_default, &l, err, sizeof err), 0);
  int zstd_missing = 0;
  for (size_t i = 0; i < l.nnotes; i++)
    if (strstr(l.notes[i].text, "compressed (zstd), not listed")) zstd_missing = 1;
  pt_kernel_list_free(&l);
  check_fixture(fx_default, !zstd_missing);
}

static void test_fixture_lz4(void **state) {
  (void)state;
  check_fixture(fx_lz4, 1);
}

static void test_errors(void **state) {
  (void)state;
  struct pt_kernel_list l = {0};
  char err[512];
  assert_int_equal(pt_kernels_scan_file("/nonexistent/x.so", &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "No such file"));
  assert_int_equal(pt_kernels_scan_file("/", &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "not a regular file"));
  const uint8_t junk[] = "hello, not an ELF";
  assert_int_equal(pt_kernels_scan_memory(junk, sizeof junk, &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "not an ELF file"));
  assert_int_equal(pt_kernels_scan_memory(junk, 2, &l, err, sizeof err), -1);
  /* a host ELF without device code: this test program itself */
  assert_int_equal(pt_kernels_scan_file("/proc/self/exe", &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "no .nv_fatbin"));
  /* truncated ELF header */
  const uint8_t elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  assert_int_equal(pt_kernels_scan_memory(elf, sizeof elf, &l, err, sizeof err), -1);
  /* fatbin header announcing more than there is */
  uint8_t fb[32] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0xff, 0xff};
  assert_int_equal(pt_kernels_scan_memory(fb, sizeof fb, &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "corrupt fatbin"));
  assert_int_equal(l.n, 0);
  pt_kernel_list_free(&l);
}

static void test_lz4(void **state) {
  (void)state;
  /* literals "abc", then a 9-byte match at offset 3 (overlapping), then literal "Z" */
  const uint8_t src[] = {0x35, 'a', 'b', 'c', 3, 0, 0x10, 'Z'};
  uint8_t out[32];
  long n = pt_lz4_block_decompress(src, sizeof src, out, sizeof out);
  assert_int_equal(n, 13);
  assert_memory_equal(out, "abcabcabcabcZ", 13);
  assert_int_equal(pt_lz4_block_decompress(src, sizeof src, out, 12), -1);  /* too small */
  const uint8_t bad_off[] = {0x14, 'a', 9, 0, 0x10, 'Z'};
  assert_int_equal(pt_lz4_block_decompress(bad_off, sizeof bad_off, out, sizeof out), -1);
  const uint8_t zero_off[] = {0x14, 'a', 0, 0, 0x10, 'Z'};
  assert_int_equal(pt_lz4_block_decompress(zero_off, sizeof zero_off, out, sizeof out), -1);
  const uint8_t trunc[] = {0xf0, 255};
  assert_int_equal(pt_lz4_block_decompress(trunc, sizeof trunc, out, sizeof out), -1);
  /* a long literal run: 15 + 5 = 20 bytes */
  uint8_t lit[2 + 20] = {0xf0, 5};
  memset(lit + 2, 'x', 20);
  assert_int_equal(pt_lz4_block_decompress(lit, sizeof lit, out, sizeof out), 20);
}

static void test_ptx_and_nvinfo(void **state) {
  (void)state;
  const char *ptx =
      "// .entry commented_out(\n"
      ".visible .entry k1(\n\t.param .u64 .ptr.global.align 4 k1_p0,\n\t.param .u8 k1_p1,\n"
      "\t.param .align 8 .b8 k1_p2[24],\n\t.param .f32 k1_p3\n)\n{ ret; }\n"
      ".entry k2()\n{}\n.weak .entry k3\n{}\n";
  struct pt_kernel_list l = {0};
  assert_int_equal(pt_ptx_list(ptx, strlen(ptx), 90, &l), 0);
  assert_int_equal(l.n, 3);
  assert_string_equal(l.k[0].name, "k1");
  assert_string_equal(l.k[0].arch, "compute_90");
  assert_int_equal(l.k[0].nparams, 4);
  assert_int_equal(l.k[0].params[1].offset, 8);
  assert_int_equal(l.k[0].params[1].size, 1);
  assert_int_equal(l.k[0].params[2].offset, 16);
  assert_int_equal(l.k[0].params[2].size, 24);
  assert_int_equal(l.k[0].params[3].offset, 40);
  assert_int_equal(l.k[0].param_bytes, 44);
  assert_string_equal(l.k[1].name, "k2");
  assert_int_equal(l.k[1].nparams, 0);
  assert_string_equal(l.k[2].name, "k3");
  pt_kernel_list_free(&l);

  /* .nv.info: KPARAM_INFO last parameter first, CBANK_PARAM_SIZE, an HVAL, an unknown SVAL */
  const uint8_t info[] = {
      0x04, 0x37, 4, 0, 0x82, 0, 0, 0,
      0x04, 0x17, 12, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0x00, 0xf0, 0x11, 0x00, /* ordinal 1 at 8, 4 bytes */
      0x04, 0x17, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0xf0, 0x21, 0x00, /* ordinal 0 at 0, 8 bytes */
      0x03, 0x1b, 0xff, 0,
      0x03, 0x19, 12, 0,
  };
  struct pt_fatbin_kernel k = {0};
  assert_int_equal(pt_nvinfo_params(info, sizeof info, &k), 0);
  assert_int_equal(k.nparams, 2);
  assert_int_equal(k.params[0].offset, 0);
  assert_int_equal(k.params[0].size, 8);
  assert_int_equal(k.params[1].offset, 8);
  assert_int_equal(k.params[1].size, 4);
  assert_int_equal(k.param_bytes, 12);
  free(k.params);
  struct pt_fatbin_kernel k2 = {0};
  assert_int_equal(pt_nvinfo_params(info, sizeof info - 1, &k2), -1); /* truncated record */
  free(k2.params);
  const uint8_t badfmt[] = {0x09, 0x17, 0, 0};
  struct pt_fatbin_kernel k3 = {0};
  assert_int_equal(pt_nvinfo_params(badfmt, sizeof badfmt, &k3), -1);
  free(k3.params);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Mutates bytes at random offsets (biased to the device code and the ELF
 * headers) thousands of times: the lister must never crash (ASan build) and
 * must fail cleanly or list something. */
static void fuzz_file(const char *path, int iters_elf, int iters_fatbin) {
  size_t len;
  uint8_t *img = slurp(path, &len);
  size_t fb = 0; /* first fatbin container in the image */
  for (size_t i = 0; i + 4 <= len; i += 8)
    if (img[i] == 0x50 && img[i + 1] == 0xed && img[i + 2] == 0x55 && img[i + 3] == 0xba) { fb = i; break; }
  assert_true(fb > 0);
  size_t fblen = len - fb < 64 * 1024 ? len - fb : 64 * 1024;
  uint8_t *m = malloc(len);
  char err[512];
  int failed = 0;
  for (int it = 0; it < iters_elf + iters_fatbin; it++) {
    int whole = it < iters_elf;
    size_t base = whole ? 0 : fb, n = whole ? len : fblen;
    memcpy(m, img + base, n);
    int muts = 1 + (int)(rnd() % 4);
    for (int k = 0; k < muts; k++) {
      size_t at;
      uint32_t r = rnd() % 10;
      if (!whole || r < 6) at = (whole ? fb : 0) + rnd() % fblen;   /* the device code */
      else if (r < 8) at = rnd() % 64;                              /* ELF header */
      else at = rnd() % n;                                          /* anywhere (section headers at the end) */
      if (at >= n) at = n - 1;
      switch (rnd() % 4) {
      case 0: m[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
      case 1: m[at] = (uint8_t)rnd(); break;
      case 2: m[at] = (rnd() & 1) ? 0xff : 0; break;
      case 3: if (rnd() % 4 == 0) n = at + 1; break; /* truncate */
      }
    }
    struct pt_kernel_list l = {0};
    if (pt_kernels_scan_memory(m, n, &l, err, sizeof err)) {
      failed++;
      assert_true(strlen(err) > 0);
    }
    for (size_t i = 0; i < l.n; i++) assert_non_null(l.k[i].name);
    pt_kernel_list_free(&l);
  }
  fprintf(stderr, "fuzz %s: %d of %d mutated inputs rejected\n", path, failed, iters_elf + iters_fatbin);
  /* random bytes after a valid fatbin magic */
  for (int it = 0; it < 2000; it++) {
    size_t n = 16 + rnd() % 512;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
    b[0] = 0x50; b[1] = 0xed; b[2] = 0x55; b[3] = 0xba;
    struct pt_kernel_list l = {0};
    (void)pt_kernels_scan_memory(b, n, &l, err, sizeof err);
    pt_kernel_list_free(&l);
    free(b);
  }
  free(m);
  free(img);
}

static void test_fuzz(void **state) {
  (void)state;
  fuzz_file(fx_lz4, 600, 3000);
  fuzz_file(fx_default, 600, 3000);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "no fixtures (nvcc not found at build time): skipped\n");
    return 77;
  }
  fx_default = argv[1];
  fx_lz4 = argv[2];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixture_default), cmocka_unit_test(test_fixture_lz4),
      cmocka_unit_test(test_errors),          cmocka_unit_test(test_lz4),
      cmocka_unit_test(test_ptx_and_nvinfo),  cmocka_unit_test(test_fuzz),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
