/* Tests of the CLI's strict JSON reader (tools/lib/json.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tools/lib/json.h"

static struct pt_json *parse(const char *s) {
  char err[200];
  struct pt_json *v = pt_json_parse(s, strlen(s), err, sizeof err);
  if (!v) fprintf(stderr, "unexpected parse error: %s\n", err);
  return v;
}

/* Asserts s fails to parse with an error starting with want_prefix. */
static void expect_error(const char *s, const char *want_prefix) {
  char err[200] = "untouched";
  struct pt_json *v = pt_json_parse(s, strlen(s), err, sizeof err);
  if (v) fprintf(stderr, "accepted: %s\n", s);
  assert_null(v);
  if (strncmp(err, want_prefix, strlen(want_prefix)))
    fprintf(stderr, "input %s: error '%s', want prefix '%s'\n", s, err, want_prefix);
  assert_int_equal(strncmp(err, want_prefix, strlen(want_prefix)), 0);
}

static void test_config_document(void **state) {
  (void)state;
  const char *doc =
      "{\n  \"num_hidden_layers\": 16,\n  \"hidden_size\": 2048,\n"
      "  \"rope_scaling\": null, \"tie\": false, \"ok\": true,\n"
      "  \"torch_dtype\": \"bfloat16\", \"eps\": 1e-05, \"list\": [1, [2, {}], []]\n}";
  struct pt_json *v = parse(doc);
  assert_non_null(v);
  assert_int_equal(pt_json_type(v), PT_JSON_OBJ);
  assert_int_equal(pt_json_len(v), 8);
  assert_string_equal(pt_json_key_at(v, 0), "num_hidden_layers");
  assert_null(pt_json_key_at(v, 8));
  uint64_t u = 0;
  assert_int_equal(pt_json_u64(pt_json_get(v, "num_hidden_layers"), &u), 0);
  assert_int_equal(u, 16);
  assert_int_equal(pt_json_u64(pt_json_get(v, "hidden_size"), &u), 0);
  assert_int_equal(u, 2048);
  assert_int_equal(pt_json_type(pt_json_get(v, "rope_scaling")), PT_JSON_NULL);
  assert_non_null(pt_json_get(v, "rope_scaling"));
  assert_null(pt_json_get(v, "absent"));
  assert_int_equal(pt_json_type(pt_json_get(v, "absent")), PT_JSON_NULL);
  assert_int_equal(pt_json_bool(pt_json_get(v, "tie"), 7), 0);
  assert_int_equal(pt_json_bool(pt_json_get(v, "ok"), 7), 1);
  assert_int_equal(pt_json_bool(pt_json_get(v, "hidden_size"), 7), 7);
  assert_string_equal(pt_json_str(pt_json_get(v, "torch_dtype")), "bfloat16");
  assert_null(pt_json_str(pt_json_get(v, "eps")));
  assert_true(pt_json_num(pt_json_get(v, "eps"), 0) == 1e-05);
  assert_int_not_equal(pt_json_u64(pt_json_get(v, "eps"), &u), 0);
  const struct pt_json *l = pt_json_get(v, "list");
  assert_int_equal(pt_json_len(l), 3);
  assert_int_equal(pt_json_type(pt_json_at(l, 1)), PT_JSON_ARR);
  assert_int_equal(pt_json_type(pt_json_at(pt_json_at(l, 1), 1)), PT_JSON_OBJ);
  assert_int_equal(pt_json_len(pt_json_at(pt_json_at(l, 1), 1)), 0);
  assert_null(pt_json_at(l, 3));
  assert_null(pt_json_get(l, "x"));           /* not an object */
  assert_null(pt_json_key_at(l, 0));          /* not an object */
  assert_int_equal(pt_json_len(pt_json_get(v, "hidden_size")), 0);
  pt_json_free(v);
  /* NULL-tolerant getters */
  assert_int_equal(pt_json_type(NULL), PT_JSON_NULL);
  assert_null(pt_json_get(NULL, "a"));
  assert_int_equal(pt_json_len(NULL), 0);
  assert_null(pt_json_at(NULL, 0));
  assert_true(pt_json_num(NULL, 2.5) == 2.5);
  assert_int_not_equal(pt_json_u64(NULL, &u), 0);
  assert_null(pt_json_str(NULL));
  assert_int_equal(pt_json_bool(NULL, 3), 3);
  pt_json_free(NULL);
}

static void test_scalars_at_top(void **state) {
  (void)state;
  struct pt_json *v = parse("  42 ");
  int64_t i = 0;
  uint64_t u = 0;
  assert_int_equal(pt_json_u64(v, &u), 0);
  assert_int_equal(u, 42);
  pt_json_free(v);
  v = parse("\"x\"");
  assert_string_equal(pt_json_str(v), "x");
  pt_json_free(v);
  v = parse("null");
  assert_non_null(v);
  assert_int_equal(pt_json_type(v), PT_JSON_NULL);
  pt_json_free(v);
  v = parse("-9223372036854775808");
  assert_int_equal(pt_json_i64(v, &i), 0);
  assert_true(i == INT64_MIN);
  assert_int_not_equal(pt_json_u64(v, &u), 0);
  pt_json_free(v);
}

static void test_numbers_exact(void **state) {
  (void)state;
  struct { const char *s; int u_ok; uint64_t u; } cases[] = {
      {"0", 1, 0},
      {"-0", 1, 0},
      {"18446744073709551615", 1, UINT64_MAX},
      {"18446744073709551616", 0, 0},
      {"9007199254740993", 1, 9007199254740993ull}, /* not representable as double */
      {"1e3", 1, 1000},
      {"1.5e1", 1, 15},
      {"4096.0", 1, 4096},
      {"2.50E+2", 1, 250},
      {"1.5", 0, 0},
      {"1e-3", 0, 0},
      {"100e-2", 1, 1},
      {"-1", 0, 0},
      {"1e400", 0, 0},
      {"0.000", 1, 0},
      {"0e99999999999", 1, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    struct pt_json *v = parse(cases[k].s);
    assert_non_null(v);
    assert_int_equal(pt_json_type(v), PT_JSON_NUM);
    uint64_t u = 12345;
    int rc = pt_json_u64(v, &u);
    if (cases[k].u_ok != (rc == 0)) fprintf(stderr, "case %s\n", cases[k].s);
    assert_int_equal(rc == 0, cases[k].u_ok);
    if (cases[k].u_ok) assert_true(u == cases[k].u);
    pt_json_free(v);
  }
  struct pt_json *v = parse("[-2.5, 1e-2, 123456789.125]");
  assert_true(pt_json_num(pt_json_at(v, 0), 0) == -2.5);
  assert_true(pt_json_num(pt_json_at(v, 1), 0) == 1e-2);
  assert_true(pt_json_num(pt_json_at(v, 2), 0) == 123456789.125);
  int64_t i;
  assert_int_not_equal(pt_json_i64(pt_json_at(v, 0), &i), 0);
  pt_json_free(v);
  v = parse("-42");
  assert_int_equal(pt_json_i64(v, &i), 0);
  assert_int_equal(i, -42);
  pt_json_free(v);
}

static void test_strings(void **state) {
  (void)state;
  struct pt_json *v = parse("[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\","
                            " \"h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"nul\\u0000x\"]");
  assert_non_null(v);
  assert_string_equal(pt_json_str(pt_json_at(v, 0)), "a\"b\\c/d\b\f\n\r\t");
  assert_string_equal(pt_json_str(pt_json_at(v, 1)), "\xc3\xa9\xe2\x82\xac");
  assert_string_equal(pt_json_str(pt_json_at(v, 2)), "\xf0\x9f\x98\x80");
  assert_string_equal(pt_json_str(pt_json_at(v, 3)), "h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  assert_int_equal(pt_json_str_len(pt_json_at(v, 4)), 5);
  assert_memory_equal(pt_json_str(pt_json_at(v, 4)), "nul\0x", 5);
  pt_json_free(v);
}

static void test_duplicate_keys_last_wins(void **state) {
  (void)state;
  struct pt_json *v = parse("{\"a\": 1, \"a\": 2}");
  uint64_t u;
  assert_int_equal(pt_json_u64(pt_json_get(v, "a"), &u), 0);
  assert_int_equal(u, 2);
  assert_int_equal(pt_json_len(v), 2);
  pt_json_free(v);
}

static void test_errors(void **state) {
  (void)state;
  expect_error("", "line 1 col 1: value expected");
  expect_error("   \n  ", "line 2 col 3: value expected");
  expect_error("{\"a\": 1,\n \"b\": }", "line 2 col 7: unexpected '}'");
  expect_error("[1,]", "line 1 col 4: unexpected ']'");
  expect_error("{\"a\":1,}", "line 1 col 8: object key");
  expect_error("{a:1}", "line 1 col 2: object key");
  expect_error("{\"a\" 1}", "line 1 col 6: ':' expected");
  expect_error("[1 2]", "line 1 col 4: ',' or ']' expected");
  expect_error("[1", "line 1 col 1: unterminated array");
  expect_error("{\"a\":1", "line 1 col 1: unterminated object");
  expect_error("\"abc", "line 1 col 1: unterminated string");
  expect_error("01", "line 1 col 2: leading zero");
  expect_error("-", "line 1 col 2: bad number");
  expect_error("1.", "line 1 col 3: digit expected after '.'");
  expect_error("1e+", "line 1 col 4: digit expected in exponent");
  expect_error("+1", "line 1 col 1: unexpected '+'");
  expect_error(".5", "line 1 col 1: unexpected '.'");
  expect_error("NaN", "line 1 col 1: unexpected 'N'");
  expect_error("Infinity", "line 1 col 1: unexpected 'I'");
  expect_error("tru", "line 1 col 1: unexpected 't'");
  expect_error("nul", "line 1 col 1: unexpected 'n'");
  expect_error("1 2", "line 1 col 3: trailing data");
  expect_error("{} x", "line 1 col 4: trailing data");
  expect_error("// c\n1", "line 1 col 1: unexpected '/'");
  expect_error("\"a\tb\"", "line 1 col 3: control character");
  expect_error("\"\\x\"", "line 1 col 2: bad escape");
  expect_error("\"\\u12zz\"", "line 1 col 6: bad hex digit");
  expect_error("\"\\u12", "line 1 col 4: truncated");
  expect_error("\"\\ud83d\"", "line 1 col 2: high surrogate without a low");
  expect_error("\"\\ud83d\\u0041\"", "line 1 col 2: high surrogate without a low");
  expect_error("\"\\ude00\"", "line 1 col 2: lone low surrogate");
  expect_error("\"\xc3\"", "line 1 col 2: invalid UTF-8");
  expect_error("\"\xc0\xaf\"", "line 1 col 2: invalid UTF-8");            /* overlong '/' */
  expect_error("\"\xed\xa0\x80\"", "line 1 col 2: invalid UTF-8");        /* encoded surrogate */
  expect_error("\"\xf4\x90\x80\x80\"", "line 1 col 2: invalid UTF-8");    /* > U+10FFFF */
  expect_error("\"\xff\"", "line 1 col 2: invalid UTF-8");
  expect_error("\xef\xbb\xbf{}", "line 1 col 1: unexpected byte 0xef");   /* BOM: strict */
  /* NUL inside the buffer is data, not an end */
  char err[100];
  assert_null(pt_json_parse("1\0", 2, err, sizeof err));
  /* err may be NULL or tiny */
  assert_null(pt_json_parse("[", 1, NULL, 0));
  char tiny[4];
  assert_null(pt_json_parse("[", 1, tiny, sizeof tiny));
  assert_int_equal(strlen(tiny), 3);
}

static void test_depth_limit(void **state) {
  (void)state;
  size_t n = PT_JSON_MAX_DEPTH;
  char *s = malloc(2 * n + 2);
  for (size_t i = 0; i < n; i++) { s[i] = '['; s[2 * n - 1 - i] = ']'; }
  s[2 * n] = 0;
  struct pt_json *v = pt_json_parse(s, 2 * n, NULL, 0);
  assert_non_null(v); /* exactly the limit */
  pt_json_free(v);
  free(s);
  n = 100000; /* far deeper: an error, not a stack overflow */
  s = malloc(n + 1);
  memset(s, '[', n);
  char err[100];
  assert_null(pt_json_parse(s, n, err, sizeof err));
  assert_non_null(strstr(err, "nesting deeper than"));
  free(s);
}

static void test_parse_file(void **state) {
  (void)state;
  char path[] = "/tmp/pt_test_json_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{\"k\": [true]}\n", f);
  fclose(f);
  char err[300];
  struct pt_json *v = pt_json_parse_file(path, err, sizeof err);
  assert_non_null(v);
  assert_int_equal(pt_json_bool(pt_json_at(pt_json_get(v, "k"), 0), 0), 1);
  pt_json_free(v);
  f = fopen(path, "w");
  fputs("{\"k\":\n [tru]}", f);
  fclose(f);
  assert_null(pt_json_parse_file(path, err, sizeof err));
  assert_non_null(strstr(err, ": line 2 col 3: unexpected 't'"));
  unlink(path);
  assert_null(pt_json_parse_file(path, err, sizeof err));
  assert_non_null(strstr(err, "No such file"));
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* Never crashes, leaks or reads out of bounds (ASan build) on random,
 * truncated and mutated input; the parser sees exact-length heap copies so
 * any over-read is caught. */
static void test_fuzz(void **state) {
  (void)state;
  const char *seed =
      "{\"a\": [1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {\"c\": {}},"
      " \"d\": 18446744073709551615, \"e\": \"h\xc3\xa9\"}";
  size_t sl = strlen(seed);
  struct pt_json *ok = pt_json_parse(seed, sl, NULL, 0);
  assert_non_null(ok);
  pt_json_free(ok);
  const char alphabet[] = "{}[]\":,\\/u0123456789abcdefABCDEF.-+eEtrunlsf \n\t\x80\xc3\xed\xf0\xff";
  char err[128];
  for (size_t cut = 0; cut < sl; cut++) { /* every truncation fails cleanly */
    char *b = malloc(cut ? cut : 1);
    memcpy(b, seed, cut);
    assert_null(pt_json_parse(b, cut, err, sizeof err));
    free(b);
  }
  for (int it = 0; it < 20000; it++) {
    size_t n = sl;
    char *b = malloc(n);
    memcpy(b, seed, n);
    int muts = 1 + (int)(rnd() % 4);
    for (int m = 0; m < muts; m++) {
      size_t at = rnd() % n;
      switch (rnd() % 3) {
      case 0: b[at] = alphabet[rnd() % (sizeof alphabet - 1)]; break;
      case 1: b[at] = (char)rnd(); break;
      case 2: n = at + 1; break; /* truncate */
      }
    }
    struct pt_json *v = pt_json_parse(b, n, err, sizeof err);
    if (v) {
      /* walk it: getters stay in bounds */
      for (size_t i = 0; i < pt_json_len(v) + 1; i++) {
        (void)pt_json_key_at(v, i);
        (void)pt_json_type(pt_json_at(v, i));
      }
      pt_json_free(v);
    } else {
      assert_int_equal(strncmp(err, "line ", 5), 0);
    }
    free(b);
  }
  for (int it = 0; it < 5000; it++) { /* pure random from the JSON alphabet */
    size_t n = rnd() % 64;
    char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) b[i] = alphabet[rnd() % (sizeof alphabet - 1)];
    pt_json_free(pt_json_parse(b, n, err, sizeof err));
    free(b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_document), cmocka_unit_test(test_scalars_at_top),
      cmocka_unit_test(test_numbers_exact),   cmocka_unit_test(test_strings),
      cmocka_unit_test(test_duplicate_keys_last_wins), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_depth_limit),     cmocka_unit_test(test_parse_file),
      cmocka_unit_test(test_fuzz),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
