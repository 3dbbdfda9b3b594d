/* Tests of the KV-cache arithmetic behind `ponytail capacity` (tools/lib/capacity.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tools/lib/capacity.h"
#include "tools/lib/json.h"

static struct pt_cap_shape resolve_ok(const struct pt_cap_in *f, const struct pt_cap_in *c) {
  struct pt_cap_shape s;
  char err[200] = "";
  int rc = pt_cap_resolve(f, c, &s, err, sizeof err);
  if (rc) fprintf(stderr, "resolve: %s\n", err);
  assert_int_equal(rc, 0);
  return s;
}

/* The issue's example: 32 layers, hidden 4096, batch 8, seq 2048, fp16 = 8 GiB. */
static void test_issue_example(void **state) {
  (void)state;
  struct pt_cap_in f = {.layers = 32, .hidden = 4096, .batch = 8, .seq = 2048, .elem_bytes = 2, .dtype = "fp16"};
  struct pt_cap_shape s = resolve_ok(&f, NULL);
  uint64_t b, t;
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_true(b == 8589934592ull);
  assert_int_equal(pt_cap_per_token(&s, &t), 0);
  assert_int_equal(t, 2 * 32 * 4096 * 2);
  assert_int_equal(s.kv_dim, 4096);
  assert_int_equal(s.kv_heads, 0); /* unknown: --hidden alone */
  /* The same with heads: 32 × 128, no GQA. */
  struct pt_cap_in g = {.layers = 32, .hidden = 4096, .heads = 32, .batch = 8, .seq = 2048};
  s = resolve_ok(&g, NULL);
  assert_int_equal(s.kv_heads, 32);
  assert_int_equal(s.head_dim, 128);
  assert_string_equal(s.dtype, "fp16"); /* the default */
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_true(b == 8589934592ull);
}

static void test_gqa(void **state) {
  (void)state;
  /* W of FACTS.md: 16 layers, 4 KV heads × 128, bf16: 32 KiB per token, 128 MiB per 4096-token sequence. */
  struct pt_cap_in f = {.layers = 16, .kv_heads = 4, .head_dim = 128, .seq = 4096, .elem_bytes = 2, .dtype = "bf16"};
  struct pt_cap_shape s = resolve_ok(&f, NULL);
  assert_int_equal(s.batch, 1);
  uint64_t b;
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_int_equal(b, 128ull << 20);
  /* --hidden + --heads + --kv-heads */
  struct pt_cap_in g = {.layers = 16, .hidden = 2048, .heads = 16, .kv_heads = 4, .seq = 4096, .batch = 32};
  s = resolve_ok(&g, NULL);
  assert_int_equal(s.head_dim, 128);
  assert_int_equal(s.kv_dim, 512);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_int_equal(b, 4096ull << 20); /* 32 × 128 MiB */
  /* fp32 and fp8 scale it */
  g.elem_bytes = pt_cap_dtype_bytes("float8_e4m3fn", &g.dtype);
  assert_int_equal(g.elem_bytes, 1);
  s = resolve_ok(&g, NULL);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_int_equal(b, 2048ull << 20);
}

static void test_resolve_errors(void **state) {
  (void)state;
  struct pt_cap_shape s;
  char err[200];
  struct { struct pt_cap_in f; const char *want; } cases[] = {
      {{.hidden = 4096, .seq = 1}, "the number of layers is missing"},
      {{.layers = 2, .hidden = 4096}, "the sequence length is missing"},
      {{.layers = 2, .seq = 1}, "the head geometry is missing"},
      {{.layers = 2, .seq = 1, .kv_heads = 8}, "head_dim is missing"},
      {{.layers = 2, .seq = 1, .head_dim = 8}, "the number of KV heads is missing"},
      {{.layers = 2, .seq = 1, .hidden = 4096, .kv_heads = 8}, "head_dim is missing"},
      {{.layers = 2, .seq = 1, .hidden = 4000, .heads = 3}, "hidden 4000 is not a multiple of 3 heads"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    err[0] = 0;
    assert_int_equal(pt_cap_resolve(&cases[i].f, NULL, &s, err, sizeof err), -1);
    if (!strstr(err, cases[i].want)) fprintf(stderr, "case %zu: '%s'\n", i, err);
    assert_non_null(strstr(err, cases[i].want));
  }
}

static void test_overflow(void **state) {
  (void)state;
  struct pt_cap_in f = {.layers = 1ull << 40, .kv_heads = 1ull << 20, .head_dim = 1ull << 10, .seq = 1, .elem_bytes = 2, .dtype = "fp16"};
  struct pt_cap_shape s = resolve_ok(&f, NULL);
  uint64_t b;
  assert_int_equal(pt_cap_per_token(&s, &b), -1);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), -1);
  assert_int_equal(pt_cap_max_batch(&s, UINT64_MAX), 0);
  assert_int_equal(pt_cap_max_seq(&s, UINT64_MAX), 0);
  /* per token fits, × seq × batch does not */
  struct pt_cap_in g = {.layers = 80, .kv_heads = 8, .head_dim = 128, .seq = UINT64_MAX / 2, .batch = 3};
  s = resolve_ok(&g, NULL);
  assert_int_equal(pt_cap_per_token(&s, &b), 0);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), -1);
  assert_int_equal(pt_cap_max_batch(&s, UINT64_MAX), 0);
  /* kv_heads × head_dim itself */
  struct pt_cap_in h = {.layers = 1, .kv_heads = UINT64_MAX, .head_dim = 2, .seq = 1};
  char err[100];
  assert_int_equal(pt_cap_resolve(&h, NULL, &s, err, sizeof err), -1);
  assert_non_null(strstr(err, "overflows"));
  /* exactly at the edge: 2 × 2^62 × 1 byte... = 2^63, fits */
  struct pt_cap_in e = {.layers = 1ull << 62, .kv_heads = 1, .head_dim = 1, .seq = 1, .elem_bytes = 1, .dtype = "fp8"};
  s = resolve_ok(&e, NULL);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_true(b == 1ull << 63);
  e.batch = 2;
  s = resolve_ok(&e, NULL);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), -1);
}

static void test_max_batch_seq(void **state) {
  (void)state;
  struct pt_cap_in f = {.layers = 16, .kv_heads = 4, .head_dim = 128, .seq = 4096, .batch = 8, .elem_bytes = 2, .dtype = "bf16"};
  struct pt_cap_shape s = resolve_ok(&f, NULL);
  /* per sequence 128 MiB; per token 32 KiB; budget exactly 10 sequences */
  uint64_t budget = 10ull * (128ull << 20);
  assert_int_equal(pt_cap_max_batch(&s, budget), 10);
  assert_int_equal(pt_cap_max_batch(&s, budget - 1), 9);
  assert_int_equal(pt_cap_max_seq(&s, budget), 10 * 4096 / 8);
  assert_int_equal(pt_cap_max_seq(&s, budget - 1), 10 * 4096 / 8 - 1);
  assert_int_equal(pt_cap_max_batch(&s, 0), 0);
  assert_int_equal(pt_cap_max_seq(&s, (32ull << 10) * 8 - 1), 0); /* not one token for all 8 */
  assert_int_equal(pt_cap_max_seq(&s, (32ull << 10) * 8), 1);
  /* budget = gpu × (1 − headroom) − weights */
  assert_int_equal(pt_cap_budget(100, 10, 0.1), 80);
  assert_int_equal(pt_cap_budget(141000000000ull, 0, 0.1), 126900000000ull); /* 0.9 is inexact: still exact bytes */
  assert_int_equal(pt_cap_budget(100, 90, 0.1), 0);  /* weights fill it */
  assert_int_equal(pt_cap_budget(100, 95, 0.1), 0);  /* weights exceed it */
  assert_int_equal(pt_cap_budget(100, 0, 0.0), 100);
  assert_int_equal(pt_cap_budget(100, 0, 1.0), 0);   /* invalid headroom */
  assert_int_equal(pt_cap_budget(100, 0, -0.5), 0);
  assert_true(pt_cap_budget(UINT64_MAX, 0, 0.0) > (UINT64_MAX / 4) * 3);
  /* 24 GiB, 10% headroom, W's weights 1628 MiB: 160 sequences of 4096 */
  uint64_t b = pt_cap_budget(24ull << 30, 1628ull << 20, 0.1);
  assert_int_equal(pt_cap_max_batch(&s, b), 160);
}

static void test_sizes(void **state) {
  (void)state;
  struct { const char *s; int ok; uint64_t v; } cases[] = {
      {"0", 1, 0},
      {"1234", 1, 1234},
      {"1K", 1, 1024},
      {"1k", 1, 1024},
      {"2M", 1, 2ull << 20},
      {"80G", 1, 80ull << 30},
      {"80GiB", 1, 80ull << 30},
      {"80gib", 1, 80ull << 30},
      {"141GB", 1, 141000000000ull},
      {"1T", 1, 1ull << 40},
      {"1TB", 1, 1000000000000ull},
      {"1.5G", 1, 3ull << 29},
      {"1.5GB", 1, 1500000000ull},
      {"0.5K", 1, 512},
      {"16777215T", 1, 16777215ull << 40},
      {"16777216T", 0, 0},
      {"18446744073709551615", 1, UINT64_MAX},
      {"18446744073709551616", 0, 0},
      {"", 0, 0},
      {"G", 0, 0},
      {"-1G", 0, 0},
      {"1.5", 0, 0},
      {"1.G", 0, 0},
      {"1X", 0, 0},
      {"1GX", 0, 0},
      {"1 G", 0, 0},
      {"1Gi", 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t v = 777;
    int rc = pt_cap_parse_size(cases[i].s, &v);
    if ((rc == 0) != cases[i].ok || (rc == 0 && v != cases[i].v))
      fprintf(stderr, "size '%s': rc %d v %llu\n", cases[i].s, rc, (unsigned long long)v);
    assert_int_equal(rc == 0, cases[i].ok);
    if (cases[i].ok) assert_true(v == cases[i].v);
  }
  assert_int_equal(pt_cap_parse_size(NULL, NULL), -1);
}

static void test_dtypes(void **state) {
  (void)state;
  const char *c = NULL;
  assert_int_equal(pt_cap_dtype_bytes("fp32", &c), 4);
  assert_string_equal(c, "fp32");
  assert_int_equal(pt_cap_dtype_bytes("float32", &c), 4);
  assert_int_equal(pt_cap_dtype_bytes("torch.bfloat16", &c), 2);
  assert_string_equal(c, "bf16");
  assert_int_equal(pt_cap_dtype_bytes("float16", &c), 2);
  assert_string_equal(c, "fp16");
  assert_int_equal(pt_cap_dtype_bytes("BF16", &c), 2);
  assert_int_equal(pt_cap_dtype_bytes("fp8", &c), 1);
  assert_int_equal(pt_cap_dtype_bytes("float8_e5m2", &c), 1);
  assert_int_equal(pt_cap_dtype_bytes("int4", &c), 0);
  assert_int_equal(pt_cap_dtype_bytes("auto", &c), 0);
  assert_int_equal(pt_cap_dtype_bytes(NULL, &c), 0);
}

static struct pt_json *js(const char *s) {
  char err[200];
  struct pt_json *v = pt_json_parse(s, strlen(s), err, sizeof err);
  if (!v) fprintf(stderr, "%s\n", err);
  assert_non_null(v);
  return v;
}

static void test_hf_config(void **state) {
  (void)state;
  char err[200];
  struct pt_cap_in c;
  /* the bundled example (workload W) */
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/llama-1b-config.json", getenv("PT_SOURCE_ROOT") ? getenv("PT_SOURCE_ROOT") : ".");
  struct pt_json *doc = pt_json_parse_file(path, err, sizeof err);
  if (!doc) fprintf(stderr, "%s\n", err);
  assert_non_null(doc);
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), 0);
  pt_json_free(doc);
  assert_int_equal(c.layers, 16);
  assert_int_equal(c.heads, 16);
  assert_int_equal(c.kv_heads, 4);
  assert_int_equal(c.head_dim, 128);
  assert_int_equal(c.hidden, 2048);
  assert_int_equal(c.elem_bytes, 2);
  assert_string_equal(c.dtype, "bf16");
  struct pt_cap_in f = {.seq = 4096, .batch = 8};
  struct pt_cap_shape s = resolve_ok(&f, &c);
  uint64_t b;
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_int_equal(b, 1ull << 30);
  /* flags override the file, field by field */
  struct pt_cap_in o = {.seq = 4096, .batch = 8, .layers = 32, .elem_bytes = 4, .dtype = "fp32"};
  s = resolve_ok(&o, &c);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_int_equal(b, 4ull << 30);
  /* a head_dim derived from flags beats the file's head_dim */
  struct pt_cap_in d = {.seq = 1, .hidden = 2048, .heads = 32};
  s = resolve_ok(&d, &c);
  assert_int_equal(s.head_dim, 64);
  assert_int_equal(s.kv_heads, 4); /* still the file's KV heads */

  /* no num_key_value_heads: = num_attention_heads; no head_dim: hidden/heads; "dtype" key */
  doc = js("{\"num_hidden_layers\": 32, \"hidden_size\": 4096, \"num_attention_heads\": 32,"
           " \"head_dim\": null, \"dtype\": \"float16\"}");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), 0);
  pt_json_free(doc);
  struct pt_cap_in e = {.seq = 2048, .batch = 8};
  s = resolve_ok(&e, &c);
  assert_int_equal(s.kv_heads, 32);
  assert_int_equal(s.head_dim, 128);
  assert_int_equal(pt_cap_kv_bytes(&s, &b), 0);
  assert_true(b == 8589934592ull);

  /* multimodal: text_config */
  doc = js("{\"torch_dtype\": \"bfloat16\", \"text_config\": {\"num_hidden_layers\": 2, \"num_attention_heads\": 8,"
           " \"num_key_value_heads\": 2, \"hidden_size\": 1024}}");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), 0);
  pt_json_free(doc);
  assert_int_equal(c.layers, 2);
  assert_int_equal(c.elem_bytes, 2);
  s = resolve_ok(&e, &c);
  assert_int_equal(s.head_dim, 128);
  assert_int_equal(s.kv_dim, 256);

  /* errors */
  doc = js("{\"num_hidden_layers\": 2.5}");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), -1);
  assert_non_null(strstr(err, "\"num_hidden_layers\" is not a positive integer"));
  pt_json_free(doc);
  doc = js("{\"num_hidden_layers\": 2, \"torch_dtype\": \"int3\"}");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), -1);
  assert_non_null(strstr(err, "unknown dtype \"int3\""));
  pt_json_free(doc);
  doc = js("[1]");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), -1);
  pt_json_free(doc);
  doc = js("{\"num_hidden_layers\": 0}");
  assert_int_equal(pt_cap_from_hf_config(doc, &c, err, sizeof err), -1);
  pt_json_free(doc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_issue_example), cmocka_unit_test(test_gqa),
      cmocka_unit_test(test_resolve_errors), cmocka_unit_test(test_overflow),
      cmocka_unit_test(test_max_batch_seq), cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_dtypes),        cmocka_unit_test(test_hf_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
