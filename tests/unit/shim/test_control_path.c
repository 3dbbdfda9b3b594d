/* The control socket's path rule (common/control_path.c), which the shim binds,
 * the CLI computes from a target's environment, and examples/generate.py
 * repeats in Python (tests/examples/test_generate.py checks that copy against
 * the same cases): PONYTAIL_CONTROL_DIR, else $XDG_RUNTIME_DIR/ponytail when
 * absolute, else /tmp/ponytail-<uid>; paths that do not fit are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/control_path.h"

static void dir_rule(void **state) {
  (void)state;
  char out[256];
  assert_int_equal(pt_control_dir_of("/srv/ctl", "/run/user/7", 7, out, sizeof out), 0);
  assert_string_equal(out, "/srv/ctl");
  assert_int_equal(pt_control_dir_of("", "/run/user/7", 7, out, sizeof out), 0);
  assert_string_equal(out, "/run/user/7/ponytail");
  assert_int_equal(pt_control_dir_of(NULL, "/run/user/7", 7, out, sizeof out), 0);
  assert_string_equal(out, "/run/user/7/ponytail");
  /* A relative XDG_RUNTIME_DIR is ignored (the spec requires an absolute one). */
  assert_int_equal(pt_control_dir_of("", "run/user/7", 1234, out, sizeof out), 0);
  assert_string_equal(out, "/tmp/ponytail-1234");
  assert_int_equal(pt_control_dir_of(NULL, NULL, 0, out, sizeof out), 0);
  assert_string_equal(out, "/tmp/ponytail-0");
}

static void sock_rule(void **state) {
  (void)state;
  char out[64];
  assert_int_equal(pt_control_sock_of("/tmp/ponytail-0", 4242, out, sizeof out), 0);
  assert_string_equal(out, "/tmp/ponytail-0/4242.sock");
}

static void too_long(void **state) {
  (void)state;
  char out[20];
  /* "/tmp/ponytail-1234" is 18 characters: fits in 20 with its NUL ... */
  assert_int_equal(pt_control_dir_of(NULL, NULL, 1234, out, sizeof out), 0);
  /* ... one more digit does not fit in 19, and a longer directory not in 20. */
  assert_int_equal(pt_control_dir_of(NULL, NULL, 12345, out, 19), -1);
  assert_int_equal(pt_control_dir_of("/a/directory/too/long", NULL, 0, out, sizeof out), -1);
  assert_int_equal(pt_control_sock_of("/tmp/ponytail-0", 123456, out, sizeof out), -1);
  assert_int_equal(pt_control_sock_of("/tmp/x", 1, out, sizeof out), 0);
  assert_string_equal(out, "/tmp/x/1.sock");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dir_rule),
      cmocka_unit_test(sock_rule),
      cmocka_unit_test(too_long),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
