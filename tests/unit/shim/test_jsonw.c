/* JSON writer: nesting, commas, escapes, numbers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/jsonw.h"

static void test_doc(void **state) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  struct pt_jw w;
  pt_jw_init(&w, f, false);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "s", "a\"b\\c\nd\x01");
  pt_jw_u64(&w, "u", UINT64_MAX);
  pt_jw_i64(&w, "i", -5);
  pt_jw_bool(&w, "t", true);
  pt_jw_str(&w, "n", NULL);
  pt_jw_dbl(&w, "nan", NAN);
  pt_jw_arr_begin(&w, "a");
  pt_jw_u64(&w, NULL, 1);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_obj_end(&w);
  pt_jw_arr_begin(&w, NULL);
  pt_jw_arr_end(&w);
  pt_jw_arr_end(&w);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
  fclose(f);
  assert_string_equal(buf, "{\"s\":\"a\\\"b\\\\c\\nd\\u0001\",\"u\":18446744073709551615,\"i\":-5,\"t\":true,"
                           "\"n\":null,\"nan\":null,\"a\":[1,{},[]]}\n");
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_doc)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
