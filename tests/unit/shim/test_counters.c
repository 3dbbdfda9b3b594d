/* Per-thread call and launch counters (shim/counters.c): exact totals from
 * many threads at once, a reader summing while they count, blocks of exited
 * threads handed on (memory bounded by the peak thread count), kernel indices
 * on three pages and past the last one (the shared fallback). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "shim/counters.h"

int pt_hooks_match(const char *name) {
  (void)name;
  return 0;
}

#define THREADS 8
#define PER_THREAD 200000

static struct pt_kernel k_first, k_far, k_past;

static void *count_many(void *arg) {
  (void)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    pt_count_call(PT_SYM_cudaMalloc);
    pt_count_launch(&k_first);
    if (i % 4 == 0) pt_count_launch(&k_far);
    if (i % 8 == 0) pt_count_launch(&k_past);
  }
  return NULL;
}

static volatile int readers_stop;
static void *read_monotonic(void *arg) {
  int *bad = arg;
  uint64_t last_c = 0, last_k = 0;
  while (!__atomic_load_n(&readers_stop, __ATOMIC_ACQUIRE)) {
    uint64_t c = pt_calls_total(PT_SYM_cudaMalloc), k = pt_launches_total(&k_first);
    if (c < last_c || k < last_k) (*bad)++;
    last_c = c;
    last_k = k;
  }
  return NULL;
}

static void test_exact_under_threads(void **state) {
  (void)state;
  k_first.index = 0;
  k_far.index = 2 * PT_KPAGE + 17;                 /* a third page */
  k_past.index = PT_KPAGE * PT_KPAGES + 5;         /* past the pages: counted in the record */
  uint64_t c0 = pt_calls_total(PT_SYM_cudaMalloc);
  int bad = 0;
  pthread_t r, t[THREADS];
  assert_int_equal(pthread_create(&r, NULL, read_monotonic, &bad), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, count_many, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  __atomic_store_n(&readers_stop, 1, __ATOMIC_RELEASE);
  pthread_join(r, NULL);
  assert_int_equal(bad, 0);
  assert_int_equal(pt_calls_total(PT_SYM_cudaMalloc) - c0, (uint64_t)THREADS * PER_THREAD);
  assert_int_equal(pt_launches_total(&k_first), (uint64_t)THREADS * PER_THREAD);
  assert_int_equal(pt_launches_total(&k_far), (uint64_t)THREADS * PER_THREAD / 4);
  assert_int_equal(pt_launches_total(&k_past), (uint64_t)THREADS * PER_THREAD / 8);
  assert_int_equal(k_past.launches, (uint64_t)THREADS * PER_THREAD / 8);
  assert_int_equal(k_first.launches, 0); /* all of them per thread */
  /* Another kernel on the same page as k_first, never launched, reads 0. */
  struct pt_kernel other = {.index = 1};
  assert_int_equal(pt_launches_total(&other), 0);
}

static void *count_few(void *arg) {
  for (int i = 0; i < 1000; i++) pt_count_call(PT_SYM_cudaFree);
  pt_count_launch((struct pt_kernel *)arg);
  return NULL;
}

static void test_blocks_handed_on(void **state) {
  (void)state;
  struct pt_kernel k = {.index = 3};
  uint64_t c0 = pt_calls_total(PT_SYM_cudaFree);
  pt_count_call(PT_SYM_cudaFree); /* this thread holds a block too */
  size_t before = pt_counter_blocks();
  for (int i = 0; i < 200; i++) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, count_few, &k), 0);
    pthread_join(t, NULL);
  }
  /* One thread at a time: each reuses the block its predecessor left. */
  assert_true(pt_counter_blocks() <= before + 1);
  assert_int_equal(pt_calls_total(PT_SYM_cudaFree) - c0, 200 * 1000 + 1);
  assert_int_equal(pt_launches_total(&k), 200);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_under_threads),
      cmocka_unit_test(test_blocks_handed_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
