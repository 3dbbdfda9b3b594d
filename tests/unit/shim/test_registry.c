/* Kernel registry: names, bindings, rebinding, growth, concurrent inserts
 * with lock-free lookups. pt_hooks_match is stubbed here. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/hook.h"
#include "shim/registry.h"

static int match_calls;
int pt_hooks_match(const char *name) {
  __atomic_fetch_add(&match_calls, 1, __ATOMIC_RELAXED);
  return strstr(name, "flash") ? 7 : 0;
}

static void test_names(void **state) {
  int before = match_calls;
  struct pt_kernel *a = pt_registry_kernel("_Z6kernelv");
  struct pt_kernel *b = pt_registry_kernel("_Z6kernelv");
  struct pt_kernel *f = pt_registry_kernel("pytorch_flash::flash_fwd_splitkv_kernel");
  assert_non_null(a);
  assert_ptr_equal(a, b); /* one record per name */
  assert_int_equal(match_calls - before, 2); /* matched once per name */
  assert_int_equal(a->hook_id, 0);
  assert_int_equal(f->hook_id, 7);
  assert_int_equal(a->param_bytes, PT_PARAM_UNSET);
  assert_string_equal(pt_kernel_action_name(a), "passthrough");
  struct pt_kernel *u = pt_registry_kernel(NULL);
  assert_string_equal(u->name, "");
}

static void test_bind(void **state) {
  struct pt_kernel *a = pt_registry_kernel("bind_a"), *b = pt_registry_kernel("bind_b");
  static char keys[3];
  assert_null(pt_registry_lookup(&keys[0]));
  assert_null(pt_registry_lookup(NULL));
  pt_registry_bind(&keys[0], a);
  pt_registry_bind(&keys[1], a);
  pt_registry_bind(&keys[2], b);
  assert_ptr_equal(pt_registry_lookup(&keys[0]), a);
  assert_ptr_equal(pt_registry_lookup(&keys[1]), a);
  assert_ptr_equal(pt_registry_lookup(&keys[2]), b);
  pt_registry_bind(&keys[0], b); /* address reused by another kernel */
  assert_ptr_equal(pt_registry_lookup(&keys[0]), b);
  pt_registry_bind(NULL, a);
  assert_null(pt_registry_lookup(NULL));
}

/* Writers bind 4 x 20000 keys (forcing several table growths) while readers
 * look up keys already published: a published key is never lost. */
#define W 4
#define PER 20000
static uintptr_t base_key = 0x100000;
static struct pt_kernel *recs[W];
static int published[W];

static void *writer(void *arg) {
  long w = (long)arg;
  for (int i = 0; i < PER; i++) {
    pt_registry_bind((void *)(base_key + ((uintptr_t)(w * PER + i) << 4)), recs[w]);
    __atomic_store_n(&published[w], i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void *reader(void *arg) {
  long bad = 0;
  for (int round = 0; round < 200; round++)
    for (int w = 0; w < W; w++) {
      int n = __atomic_load_n(&published[w], __ATOMIC_ACQUIRE);
      for (int i = n > 64 ? n - 64 : 0; i < n; i++) {
        struct pt_kernel *k = pt_registry_lookup((void *)(base_key + ((uintptr_t)(w * PER + i) << 4)));
        /* a reader on a stale table may miss a brand-new key, never see a wrong one */
        if (k && k != recs[w]) bad++;
      }
    }
  return (void *)bad;
}

static void test_concurrent(void **state) {
  char name[32];
  for (int w = 0; w < W; w++) {
    snprintf(name, sizeof name, "conc_%d", w);
    recs[w] = pt_registry_kernel(name);
  }
  pthread_t t[W + 2];
  for (long w = 0; w < W; w++) pthread_create(&t[w], NULL, writer, (void *)w);
  for (int r = 0; r < 2; r++) pthread_create(&t[W + r], NULL, reader, NULL);
  for (int i = 0; i < W + 2; i++) {
    void *ret;
    pthread_join(t[i], &ret);
    assert_null(ret);
  }
  for (int w = 0; w < W; w++)
    for (int i = 0; i < PER; i++)
      assert_ptr_equal(pt_registry_lookup((void *)(base_key + ((uintptr_t)(w * PER + i) << 4))), recs[w]);
}

static void *namer(void *arg) {
  (void)arg;
  char name[32];
  for (int i = 0; i < 500; i++) {
    snprintf(name, sizeof name, "same_%d", i);
    if (!pt_registry_kernel(name)) return (void *)1;
  }
  return NULL;
}

static void count_prefix(struct pt_kernel *k, void *arg) {
  if (!strncmp(k->name, "same_", 5)) (*(int *)arg)++;
}

static void test_concurrent_names(void **state) {
  size_t before = pt_registry_count();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, namer, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  assert_int_equal(pt_registry_count() - before, 500); /* no duplicates */
  int n = 0;
  pt_registry_foreach(count_prefix, &n);
  assert_int_equal(n, 500);
}

static void test_actions(void **state) {
  struct pt_kernel *k = pt_registry_kernel("act");
  k->fallbacks = 2;
  assert_string_equal(pt_kernel_action_name(k), "fallback");
  k->swapped = 5;
  assert_string_equal(pt_kernel_action_name(k), "swapped");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),      cmocka_unit_test(test_bind),
      cmocka_unit_test(test_concurrent), cmocka_unit_test(test_concurrent_names),
      cmocka_unit_test(test_actions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
