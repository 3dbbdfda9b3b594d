/* A scratch directory for a cmocka group of the allocator tests: pass
 * scratch_setup / scratch_teardown to cmocka_run_group_tests; the tests write
 * below `dir`, and teardown removes it with everything in it. */
#ifndef PT_TEST_SCRATCH_DIR_H
#define PT_TEST_SCRATCH_DIR_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int scratch_setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/pt-test-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int scratch_teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

#endif
