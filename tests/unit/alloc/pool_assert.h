/* The pool's own consistency check (allocator/pool_check.c) as a cmocka
 * failure naming the line of pool_check.c that found the fault; shared by the
 * pool tests. Include after <cmocka.h>. */
#ifndef PT_TEST_POOL_ASSERT_H
#define PT_TEST_POOL_ASSERT_H
#include "allocator/pool.h"

static void assert_pool_consistent(struct pt_pool *p) {
  const char *why;
  int line = pt_pool_check(p, &why);
  if (line) fail_msg("pool_check.c:%d: %s", line, why);
}

#endif
