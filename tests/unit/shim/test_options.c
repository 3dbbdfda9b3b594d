/* Options: parsers, the table's defaults, environment reading, bad values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/options.h"

static void test_bool(void **state) {
  bool b;
  const char *yes[] = {"1", "on", "ON", "true", "True", "yes"};
  const char *no[] = {"0", "off", "false", "NO", "no"};
  for (size_t i = 0; i < 6; i++) {
    b = false;
    assert_int_equal(pt_parse_bool(yes[i], &b), 0);
    assert_true(b);
  }
  for (size_t i = 0; i < 5; i++) {
    b = true;
    assert_int_equal(pt_parse_bool(no[i], &b), 0);
    assert_false(b);
  }
  assert_int_equal(pt_parse_bool("2", &b), -1);
  assert_int_equal(pt_parse_bool("", &b), -1);
  assert_int_equal(pt_parse_bool("yess", &b), -1);
  assert_int_equal(pt_parse_bool(NULL, &b), -1);
}

static void test_size(void **state) {
  uint64_t v;
  assert_int_equal(pt_parse_size("0", &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(pt_parse_size("4096", &v), 0);
  assert_int_equal(v, 4096);
  assert_int_equal(pt_parse_size("1K", &v), 0);
  assert_int_equal(v, 1024);
  assert_int_equal(pt_parse_size("1m", &v), 0);
  assert_int_equal(v, 1 << 20);
  assert_int_equal(pt_parse_size("24G", &v), 0);
  assert_int_equal(v, 24ull << 30);
  assert_int_equal(pt_parse_size("2T", &v), 0);
  assert_int_equal(v, 2ull << 40);
  assert_int_equal(pt_parse_size("3MiB", &v), 0);
  assert_int_equal(v, 3ull << 20);
  assert_int_equal(pt_parse_size("5KB", &v), 0);
  assert_int_equal(v, 5ull << 10);
  v = 7;
  assert_int_equal(pt_parse_size("12Q", &v), -1);
  assert_int_equal(pt_parse_size("-1", &v), -1);
  assert_int_equal(pt_parse_size("", &v), -1);
  assert_int_equal(pt_parse_size("G", &v), -1);
  assert_int_equal(pt_parse_size("1.5G", &v), -1);
  assert_int_equal(pt_parse_size("99999999999999999999", &v), -1);
  assert_int_equal(pt_parse_size("16777216T", &v), -1); /* 2^64: overflow */
  assert_int_equal(v, 7);
}

static void test_enum(void **state) {
  int e = -1;
  assert_int_equal(pt_parse_enum("warn", "error|warn|info|debug", &e), 0);
  assert_int_equal(e, 1);
  assert_int_equal(pt_parse_enum("DEBUG", "error|warn|info|debug", &e), 0);
  assert_int_equal(e, 3);
  assert_int_equal(pt_parse_enum("err", "error|warn", &e), -1);
  assert_int_equal(pt_parse_enum("", "error|warn", &e), -1);
  assert_int_equal(pt_parse_enum("json", "0|1|json", &e), 0);
  assert_int_equal(e, 2);
}

static void test_defaults_parse(void **state) {
  /* Every row's default must be valid for its type. */
  for (int i = 0; i < PT_OPT_COUNT; i++) {
    const struct pt_opt_info *o = &pt_opt_table[i];
    bool b;
    uint64_t u;
    int e;
    switch (o->type) {
    case PT_OPT_BOOL: assert_int_equal(pt_parse_bool(o->def, &b), 0); break;
    case PT_OPT_SIZE: assert_int_equal(pt_parse_size(o->def, &u), 0); break;
    case PT_OPT_ENUM: assert_int_equal(pt_parse_enum(o->def, o->choices, &e), 0); break;
    default: break;
    }
    assert_non_null(o->doc);
    assert_true(o->doc[0] != 0);
    assert_memory_equal(o->name, "PONYTAIL_", 9);
  }
}

static void test_env(void **state) {
  setenv("PONYTAIL_ENABLE", "off", 1);
  setenv("PONYTAIL_KV_MIN", "2M", 1);
  setenv("PONYTAIL_LOG", "debug", 1);
  setenv("PONYTAIL_STATS", "json", 1);
  setenv("PONYTAIL_TRACE", "/x/%p.trace", 1);
  setenv("PONYTAIL_POOL_KEEP", "lots", 1); /* bad: default kept */
  setenv("PONYTAIL_LOG_FILE", "/dev/null", 1);
  pt_opts_reload();
  assert_false(pt_opt_bool(PT_OPT_ENABLE));
  assert_true(pt_opt_is_set(PT_OPT_ENABLE));
  assert_int_equal(pt_opt_size(PT_OPT_KV_MIN), 2u << 20);
  assert_int_equal(pt_opt_enum(PT_OPT_LOG), PT_LOG_DEBUG);
  assert_int_equal(pt_opt_enum(PT_OPT_STATS), PT_STATS_JSON);
  assert_string_equal(pt_opt_str(PT_OPT_TRACE), "/x/%p.trace");
  assert_int_equal(pt_opt_size(PT_OPT_POOL_KEEP), 2ull << 30);
  assert_false(pt_opt_is_set(PT_OPT_POOL_KEEP));
  char buf[64];
  assert_string_equal(pt_opt_value_text(PT_OPT_KV_MIN, buf, sizeof buf), "2M");
  assert_string_equal(pt_opt_value_text(PT_OPT_POOL_KEEP, buf, sizeof buf), "2G");
  assert_string_equal(pt_opt_value_text(PT_OPT_LOG, buf, sizeof buf), "debug");
  assert_string_equal(pt_opt_value_text(PT_OPT_ENABLE, buf, sizeof buf), "0");
  /* the application changing its environment later does not matter */
  setenv("PONYTAIL_TRACE", "other", 1);
  assert_string_equal(pt_opt_str(PT_OPT_TRACE), "/x/%p.trace");
  unsetenv("PONYTAIL_ENABLE");
  unsetenv("PONYTAIL_KV_MIN");
  unsetenv("PONYTAIL_LOG");
  unsetenv("PONYTAIL_STATS");
  unsetenv("PONYTAIL_TRACE");
  unsetenv("PONYTAIL_POOL_KEEP");
  setenv("PONYTAIL_ATTN", "", 1); /* empty = unset */
  pt_opts_reload();
  assert_true(pt_opt_bool(PT_OPT_ENABLE));
  assert_int_equal(pt_opt_enum(PT_OPT_ATTN), PT_ATTN_ON);
  assert_string_equal(pt_opt_str(PT_OPT_TRACE), "");
  unsetenv("PONYTAIL_LOG_FILE");
  unsetenv("PONYTAIL_ATTN");
  pt_opts_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bool),     cmocka_unit_test(test_size), cmocka_unit_test(test_enum),
      cmocka_unit_test(test_defaults_parse), cmocka_unit_test(test_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
