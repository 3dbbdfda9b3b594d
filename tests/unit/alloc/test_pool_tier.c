/* The host tier (allocator/pool_tier.c) on the host backend with a small
 * "device": allocations past it succeed on host granules at fixed addresses,
 * every byte written is read back, frees give the host memory back at once,
 * the tier's size and the host's pinning limit are respected with nothing
 * lost, a limit counts only device granules, the device's reserve is left
 * free (others' memory counted), and promotion moves host granules back to
 * the device at the same addresses with the bytes intact. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "allocator/backend_host.h"
#include "allocator/pool.h"
#include "tests/pattern.h"
#include "tests/unit/alloc/pool_assert.h"

#define MiB ((uint64_t)1 << 20)
#define G (2 * MiB)

/* device_granules: the host backend's device size; tier: PONYTAIL_HOST_TIER. */
static struct pt_pool *new_pool(struct pt_backend *bk, uint64_t device_granules, uint64_t tier, uint64_t limit) {
  struct pt_pool *p;
  assert_int_equal(pt_backend_host_create(bk, 0, device_granules), 0);
  struct pt_pool_config cfg = {.keep_bytes = 0, .arena_bytes = 4ull << 30, .chunk_bytes = 4 * G,
                               .tier_bytes = tier, .limit_bytes = limit};
  assert_int_equal(pt_pool_create(*bk, 0, &cfg, &p), 0);
  return p;
}

static void fill(void *b, uint64_t size, uint64_t key) { pt_pat_fill(b, size, key, 4096); }
static void verify(const void *b, uint64_t size, uint64_t key) {
  uint64_t off = pt_pat_bad(b, size, key, 4096);
  if (off != UINT64_MAX) fail_msg("block %llu: byte %llu lost", (unsigned long long)key, (unsigned long long)off);
}

static struct pt_pool_stats stats(struct pt_pool *p) {
  struct pt_pool_stats st;
  pt_pool_stats(p, &st);
  return st;
}

static struct pt_host_counters counters(struct pt_backend *bk) {
  struct pt_host_counters c;
  pt_backend_host_counters(bk, &c);
  return c;
}

/* A 64 MiB device, a 256 MiB tier: 48 MiB fits, then 40 MiB takes the last
 * 16 MiB of the device and 24 MiB of host, then 64 MiB all on the host. */
static void test_past_the_device(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk, 32, 256 * MiB, 0);
  void *a, *b, *c;
  assert_int_equal(pt_pool_alloc_any(p, 48 * MiB, &a), 0);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(pt_pool_alloc_any(p, 40 * MiB, &b), 0);
  assert_int_equal(stats(p).tier_bytes, 24 * MiB);
  assert_int_equal(pt_pool_alloc(p, 64 * MiB, 7, &c), 0);
  assert_int_equal(stats(p).tier_bytes, 88 * MiB);
  assert_int_equal(stats(p).tier_allocs, 2);
  assert_int_equal(stats(p).physical_bytes, 64 * MiB);
  assert_int_equal(counters(&bk).tier_granules, 44);
  assert_int_equal(pt_pool_block_size(p, b), 40 * MiB);
  fill(a, 48 * MiB, 1), fill(b, 40 * MiB, 2), fill(c, 64 * MiB, 3);
  verify(a, 48 * MiB, 1), verify(b, 40 * MiB, 2), verify(c, 64 * MiB, 3);
  assert_pool_consistent(p);
  /* Frees give the tier's host memory back at once; the device part too. */
  assert_int_equal(pt_pool_free(p, c, 7), 0);
  assert_int_equal(stats(p).tier_bytes, 24 * MiB);
  assert_int_equal(counters(&bk).tier_granules, 12);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(stats(p).tier_frees, 2);
  assert_int_equal(counters(&bk).tier_granules, 0);
  assert_int_equal(stats(p).physical_bytes, 48 * MiB);
  assert_pool_consistent(p);
  /* The device has room again: a new allocation lands there, not on the host. */
  assert_int_equal(pt_pool_alloc_any(p, 16 * MiB, &b), 0);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  verify(a, 48 * MiB, 1);
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* The tier's size and the host's pinning limit: a request past either fails
 * with out-of-memory, counted, and nothing already allocated changes. */
static void test_tier_full(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk, 8, 32 * MiB, 0);
  void *a, *b, *c;
  assert_int_equal(pt_pool_alloc_any(p, 16 * MiB, &a), 0);
  fill(a, 16 * MiB, 1);
  assert_int_equal(pt_pool_alloc_any(p, 24 * MiB, &b), 0); /* all host */
  fill(b, 24 * MiB, 2);
  assert_int_equal(pt_pool_alloc_any(p, 10 * MiB, &c), PT_HOST_ERR_OOM); /* 8 MiB of tier left */
  assert_int_equal(stats(p).tier_refusals, 1);
  assert_int_equal(stats(p).tier_bytes, 24 * MiB);
  assert_int_equal(counters(&bk).tier_granules, 12);
  assert_pool_consistent(p);
  /* The host cannot pin more than 2 granules: a 6 MiB request fails, releasing what it made. */
  pt_backend_host_tier_cap(&bk, 14);
  assert_int_equal(pt_pool_alloc_any(p, 6 * MiB, &c), PT_HOST_ERR_OOM);
  assert_int_equal(stats(p).tier_refusals, 2);
  assert_int_equal(counters(&bk).tier_granules, 12);
  /* A failing create_host (not out-of-memory) is returned as it is. */
  pt_backend_host_tier_cap(&bk, 0);
  pt_backend_host_fail_at(&bk, PT_HOST_OP_CREATE_HOST, 1, PT_HOST_ERR_SYSTEM);
  assert_int_equal(pt_pool_alloc_any(p, 4 * MiB, &c), PT_HOST_ERR_SYSTEM);
  /* A failing map: everything it made is released. */
  pt_backend_host_fail_at(&bk, PT_HOST_OP_MAP, 1, PT_HOST_ERR_SYSTEM);
  assert_int_equal(pt_pool_alloc_any(p, 8 * MiB, &c), PT_HOST_ERR_SYSTEM);
  assert_int_equal(counters(&bk).tier_granules, 12);
  assert_pool_consistent(p);
  verify(a, 16 * MiB, 1), verify(b, 24 * MiB, 2);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* No tier (0), or a backend without create_host: out-of-memory as before. */
static void test_no_tier(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk, 8, 0, 0);
  void *a, *b;
  assert_int_equal(pt_pool_alloc_any(p, 16 * MiB, &a), 0);
  assert_int_equal(pt_pool_alloc_any(p, 2 * MiB, &b), PT_HOST_ERR_OOM);
  assert_int_equal(stats(p).tier_refusals, 0);
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  pt_pool_destroy(p);
}

/* Under PONYTAIL_MEM_LIMIT the device part stops at the limit (device
 * granules only count against it), the rest goes to the host. */
static void test_limit(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk, 0, 1024 * MiB, 32 * MiB);
  void *a, *b;
  assert_int_equal(pt_pool_alloc_any(p, 24 * MiB, &a), 0);
  assert_int_equal(pt_pool_alloc_any(p, 24 * MiB, &b), 0);
  assert_int_equal(stats(p).physical_bytes, 32 * MiB);
  assert_int_equal(stats(p).tier_bytes, 16 * MiB);
  fill(b, 24 * MiB, 5);
  assert_pool_consistent(p);
  /* Promotion respects the limit: nothing can move while it is reached. */
  uint64_t moved = 1;
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0);
  assert_int_equal(moved, 0);
  /* Freeing a makes room: promotion moves b's host granules back, bytes and address kept. */
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0);
  assert_int_equal(moved, 16 * MiB);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(stats(p).tier_moved_bytes, 16 * MiB);
  assert_int_equal(stats(p).physical_bytes, 24 * MiB);
  assert_int_equal(counters(&bk).tier_granules, 0);
  verify(b, 24 * MiB, 5);
  assert_pool_consistent(p);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* Promotion on a full device moves what fits, by whole handles, and a copy
 * failure leaves the granule on the host with its bytes; max_bytes bounds it. */
static void test_promote(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk, 16, 1024 * MiB, 0);
  void *a, *b, *c;
  assert_int_equal(pt_pool_alloc_any(p, 24 * MiB, &a), 0);
  assert_int_equal(pt_pool_alloc_any(p, 40 * MiB, &b), 0); /* 8 MiB device, 32 MiB host */
  assert_int_equal(stats(p).tier_bytes, 32 * MiB);
  fill(b, 40 * MiB, 9);
  uint64_t moved;
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0); /* the device is full */
  assert_int_equal(moved, 0);
  assert_int_equal(pt_pool_free_sync(p, a), 0); /* 24 MiB of device free */
  assert_int_equal(pt_pool_alloc_any(p, 8 * MiB, &c), 0);  /* 16 MiB left */
  assert_int_equal(pt_pool_tier_promote(p, 8 * MiB, &moved), 0);
  assert_int_equal(moved, 8 * MiB); /* max_bytes: two 4-granule handles would pass it */
  pt_backend_host_fail_at(&bk, PT_HOST_OP_COPY, 1, PT_HOST_ERR_SYSTEM);
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), PT_HOST_ERR_SYSTEM);
  assert_int_equal(moved, 0);
  assert_int_equal(stats(p).tier_bytes, 24 * MiB);
  verify(b, 40 * MiB, 9);
  assert_pool_consistent(p);
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0);
  assert_int_equal(moved, 8 * MiB); /* the device is full again */
  assert_int_equal(stats(p).tier_bytes, 16 * MiB);
  verify(b, 40 * MiB, 9);
  assert_pool_consistent(p);
  /* A pool holding host-tier memory refuses to sleep, untouched. */
  assert_int_equal(pt_pool_sleep(p, false, NULL), PT_HOST_ERR_INVALID);
  assert_false(pt_pool_asleep(p));
  assert_int_equal(pt_pool_free(p, b, 3), 0);
  assert_int_equal(pt_pool_free_sync(p, c), 0);
  assert_int_equal(counters(&bk).tier_granules, 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* PONYTAIL_HOST_TIER_RESERVE: with a tier, what spills (a tier block's
 * device part, promotion) leaves the reserve free as the device counts it,
 * memory used outside the pool included; the pool's other growth dips into
 * it down to a quarter (here 8 MiB, and 2 MiB). */
static void test_reserve(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p;
  assert_int_equal(pt_backend_host_create(&bk, 0, 32), 0); /* a 64 MiB device */
  struct pt_pool_config cfg = {.arena_bytes = 4ull << 30, .chunk_bytes = 4 * G, .tier_bytes = 256 * MiB,
                               .tier_reserve_bytes = 8 * MiB};
  assert_int_equal(pt_pool_create(bk, 0, &cfg, &p), 0);
  pt_backend_host_others(&bk, 4); /* 8 MiB outside the pool: 56 free, 48 of it for the pool */
  void *a, *b, *c;
  assert_int_equal(pt_pool_alloc_any(p, 40 * MiB, &a), 0);
  assert_int_equal(stats(p).tier_bytes, 0);
  /* 16 MiB free: growth could take 14 of the 16, too few; the tier block
   * takes 8 (down to the reserve) and the host the rest. */
  assert_int_equal(pt_pool_alloc_any(p, 16 * MiB, &b), 0);
  assert_int_equal(stats(p).physical_bytes, 48 * MiB);
  assert_int_equal(stats(p).tier_bytes, 8 * MiB);
  fill(a, 40 * MiB, 1), fill(b, 16 * MiB, 2);
  /* Others take 4 MiB more: 4 MiB free, 2 above the floor: a 4 MiB block
   * cannot grow there and spills, all of it to the host. */
  pt_backend_host_others(&bk, 6);
  assert_int_equal(pt_pool_alloc_any(p, 4 * MiB, &c), 0);
  assert_int_equal(stats(p).tier_bytes, 12 * MiB);
  assert_int_equal(stats(p).physical_bytes, 48 * MiB);
  assert_int_equal(pt_pool_free_sync(p, c), 0);
  /* Promotion too: with others back to 8 MiB, 8 MiB free is all reserve. */
  pt_backend_host_others(&bk, 4);
  assert_false(pt_pool_tier_movable(p)); /* what the shim's mover asks before it holds the process */
  uint64_t moved = 1;
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0);
  assert_int_equal(moved, 0);
  /* The program's own next block still lands on the device, in the reserve. */
  void *d;
  assert_int_equal(pt_pool_alloc_any(p, 4 * MiB, &d), 0);
  assert_int_equal(stats(p).tier_bytes, 8 * MiB);
  assert_int_equal(stats(p).physical_bytes, 52 * MiB);
  assert_int_equal(pt_pool_free_sync(p, d), 0);
  pt_backend_host_others(&bk, 0); /* 16 MiB free: 8 of it may take b's host handle */
  assert_true(pt_pool_tier_movable(p));
  assert_int_equal(pt_pool_tier_promote(p, 0, &moved), 0);
  assert_int_equal(moved, 8 * MiB);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_false(pt_pool_tier_movable(p)); /* nothing on the host */
  verify(a, 40 * MiB, 1), verify(b, 16 * MiB, 2);
  assert_pool_consistent(p);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* tier_ask_twice (PONYTAIL_HOST_TIER_RETRY): a first ask only the tier
 * could cover fails with out-of-memory and changes nothing; the same size
 * asked again is covered; asks of other sizes in between are remembered
 * apart (threads asking at once); an ask the device can meet is never
 * deferred. */
static void test_ask_twice(void **state) {
  (void)state;
  struct pt_backend bk;
  assert_int_equal(pt_backend_host_create(&bk, 0, 32), 0);
  struct pt_pool_config cfg = {.arena_bytes = 4ull << 30, .chunk_bytes = 4 * G, .tier_bytes = 256 * MiB,
                               .tier_ask_twice = 1};
  struct pt_pool *p;
  assert_int_equal(pt_pool_create(bk, 0, &cfg, &p), 0);
  void *a, *b = NULL, *c = NULL;
  bool was_deferred = true;
  assert_int_equal(pt_pool_alloc_any_retry(p, 48 * MiB, &a, &was_deferred), 0); /* fits: not deferred */
  assert_false(was_deferred);
  assert_int_equal(stats(p).tier_deferrals, 0);
  assert_int_equal(pt_pool_alloc_any_retry(p, 40 * MiB, &b, &was_deferred), bk.ops->err_oom);
  assert_true(was_deferred);
  assert_int_equal(pt_pool_alloc_any_retry(p, 24 * MiB, &c, NULL), bk.ops->err_oom);
  assert_int_equal(stats(p).tier_deferrals, 2);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(counters(&bk).tier_granules, 0);
  assert_int_equal(pt_pool_alloc_any_retry(p, 40 * MiB, &b, &was_deferred), 0); /* the second ask of each */
  assert_false(was_deferred);
  assert_int_equal(pt_pool_alloc_any_retry(p, 24 * MiB, &c, NULL), 0);
  assert_int_equal(stats(p).tier_allocs, 2);
  assert_int_equal(stats(p).tier_bytes, 48 * MiB); /* 16 MiB of b on the device */
  fill(b, 40 * MiB, 2), fill(c, 24 * MiB, 3);
  verify(b, 40 * MiB, 2), verify(c, 24 * MiB, 3);
  /* A third ask of a size already covered is a first ask again. */
  void *d;
  assert_int_equal(pt_pool_alloc_any_retry(p, 40 * MiB, &d, NULL), bk.ops->err_oom);
  assert_int_equal(stats(p).tier_deferrals, 3);
  /* A caller that asks once (stream-ordered, the shim's own, under capture) is covered at once. */
  void *e;
  assert_int_equal(pt_pool_alloc_any(p, 8 * MiB, &e), 0);
  assert_int_equal(stats(p).tier_deferrals, 3);
  assert_int_equal(pt_pool_free_sync(p, e), 0);
  assert_int_equal(pt_pool_free_sync(p, c), 0);
  assert_int_equal(pt_pool_free_sync(p, b), 0);
  /* A second ask the device meets (the caller freed what it cached) answers the first: the
   * next ask of that size past the device is a first ask again, not covered at once. */
  void *g, *h;
  assert_int_equal(pt_pool_alloc_any_retry(p, 20 * MiB, &g, NULL), bk.ops->err_oom); /* 16 MiB free: a first ask */
  assert_int_equal(pt_pool_free_sync(p, a), 0);                                /* the cache freed */
  assert_int_equal(pt_pool_alloc_any_retry(p, 20 * MiB, &g, NULL), 0);               /* on the device */
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(pt_pool_alloc_any_retry(p, 40 * MiB, &a, NULL), 0); /* 4 MiB left */
  uint64_t deferred = stats(p).tier_deferrals;
  assert_int_equal(pt_pool_alloc_any_retry(p, 20 * MiB, &h, NULL), bk.ops->err_oom); /* a first ask again */
  assert_int_equal(stats(p).tier_deferrals, deferred + 1);
  assert_int_equal(stats(p).tier_bytes, 0);
  assert_int_equal(pt_pool_free_sync(p, g), 0);
  assert_int_equal(pt_pool_free_sync(p, a), 0);
  assert_int_equal(counters(&bk).tier_granules, 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_past_the_device), cmocka_unit_test(test_tier_full), cmocka_unit_test(test_no_tier),
      cmocka_unit_test(test_limit),           cmocka_unit_test(test_promote),   cmocka_unit_test(test_reserve),
      cmocka_unit_test(test_ask_twice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
