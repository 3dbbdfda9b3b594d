/* The growth planner (allocator/pool_plan.h) on hand-built views: where the
 * pool grows, and how many granules each source gives, in the policy's order
 * (pool.h): stitched granules whose work is done, new memory under the peak,
 * stitched pending granules after waiting, new memory above the peak. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "allocator/pool.h"
#include "allocator/pool_plan.h"

#define G ((uint64_t)2 << 20)

/* A free block of size bytes holding `granules` whole granules; after: the
 * granules its segment can grow by in place (0: it does not end one). */
static struct pt_grow_blk blk(uint64_t size, uint64_t granules, uint64_t after, bool pending) {
  return (struct pt_grow_blk){.size = size, .granules = granules, .after = after, .pending = pending};
}

/* No limit, one granule per handle, physical at 100 granules and at its
 * peak (no headroom) unless a test says otherwise. */
static struct pt_grow_view view(const struct pt_grow_blk *b, uint64_t n) {
  return (struct pt_grow_view){.gran = G, .chunk = 1, .physical = 100 * G, .peak_physical = 100 * G,
                               .may_wait = true, .blk = b, .nblk = n};
}

/* Where and plan, as pt_grow does when every block's fence state is known. */
static void plan_for(const struct pt_grow_view *v, uint64_t r, struct pt_grow_plan *pl) {
  pt_grow_plan(v, r, pt_grow_where(v, r), pl);
}

static void test_done_preferred(void **state) {
  (void)state;
  const struct pt_grow_blk b[] = {blk(3 * G, 3, 0, false), blk(3 * G, 3, 0, false), blk(8 * G, 8, 0, true)};
  struct pt_grow_view v = view(b, 3);
  v.peak_physical = 110 * G; /* 10 granules of headroom: new memory would cost no peak */
  struct pt_grow_plan pl;
  plan_for(&v, 4 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.tail, -1);
  assert_int_equal(pl.k, 4);
  assert_int_equal(pl.done, 6);
  assert_int_equal(pl.pending, 8);
  assert_int_equal(pl.headroom, 10);
  assert_int_equal(pl.stitch_done, 4);
  assert_int_equal(pl.new_first, 0);
  assert_int_equal(pl.new_under_peak, 0);
  assert_int_equal(pl.stitch_pending, 0);
  assert_int_equal(pl.new_over_peak, 0);
  assert_int_equal(pl.slack, 0);
}

static void test_new_under_peak(void **state) {
  (void)state;
  const struct pt_grow_blk b[] = {blk(G, 1, 0, false), blk(8 * G, 8, 0, true)};
  struct pt_grow_view v = view(b, 2);
  v.peak_physical = 110 * G;
  struct pt_grow_plan pl;
  plan_for(&v, 4 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.stitch_done, 1);
  assert_int_equal(pl.new_under_peak, 3); /* rather than waiting for the pending granules */
  assert_int_equal(pl.new_first, 3);
  assert_int_equal(pl.stitch_pending, 0);
  assert_int_equal(pl.new_over_peak, 0);
  /* The peak of requested bytes, plus 1/128, counts as the peak too. */
  v.peak_physical = 100 * G;
  v.peak_requested = 128 * G; /* cap 129 granules: 29 of headroom */
  plan_for(&v, 4 * G, &pl);
  assert_int_equal(pl.headroom, 29);
  assert_int_equal(pl.new_under_peak, 3);
  assert_int_equal(pl.stitch_pending, 0);
}

static void test_pending_when_needed(void **state) {
  (void)state;
  const struct pt_grow_blk b[] = {blk(G, 1, 0, false), blk(8 * G, 8, 0, true)};
  struct pt_grow_view v = view(b, 2);
  v.peak_physical = 101 * G; /* one granule of headroom */
  struct pt_grow_plan pl;
  plan_for(&v, 4 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.headroom, 1);
  assert_true(pl.may_wait);
  assert_int_equal(pl.stitch_done, 1);
  assert_int_equal(pl.new_under_peak, 1);
  assert_int_equal(pl.stitch_pending, 2);
  assert_int_equal(pl.new_over_peak, 0);
  assert_int_equal(pl.new_first, 1);
  /* Not allowed to wait: the pending granules are no source, new memory
   * above the peak covers the rest. */
  v.may_wait = false;
  plan_for(&v, 4 * G, &pl);
  assert_false(pl.oom);
  assert_false(pl.may_wait);
  assert_int_equal(pl.pending, 0);
  assert_int_equal(pl.stitch_done, 1);
  assert_int_equal(pl.new_under_peak, 1);
  assert_int_equal(pl.stitch_pending, 0);
  assert_int_equal(pl.new_over_peak, 2);
  assert_int_equal(pl.new_first, 3);
}

static void test_new_over_peak_last(void **state) {
  (void)state;
  const struct pt_grow_blk b[] = {blk(G, 1, 0, false), blk(G + 4096, 1, 0, true)};
  struct pt_grow_view v = view(b, 2);
  v.peak_physical = 101 * G;
  struct pt_grow_plan pl;
  plan_for(&v, 5 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.k, 5);
  assert_int_equal(pl.stitch_done, 1);
  assert_int_equal(pl.new_under_peak, 1);
  assert_int_equal(pl.stitch_pending, 1);
  assert_int_equal(pl.new_over_peak, 2);
  assert_int_equal(pl.new_first, 3); /* all new memory is created before stitching */
}

static void test_limit(void **state) {
  (void)state;
  struct pt_grow_blk b[] = {blk(G, 1, 0, false), blk(G, 1, 0, true)};
  struct pt_grow_view v = view(b, 1);
  v.peak_physical = 110 * G;
  v.limit = 12 * G;
  v.used = 10 * G; /* room for 2 new granules */
  struct pt_grow_plan pl;
  plan_for(&v, 4 * G, &pl); /* 1 done + 2 new < 4 */
  assert_true(pl.oom);
  assert_int_equal(pl.room, 2);
  assert_int_equal(pl.new_first + pl.stitch_done + pl.stitch_pending, 0);
  v.nblk = 2; /* a pending granule too: 1 + 1 + 2 = 4 */
  plan_for(&v, 4 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.new_first, 2); /* no more than the limit allows */
  assert_int_equal(pl.new_under_peak, 2);
  assert_int_equal(pl.stitch_done, 1);
  assert_int_equal(pl.stitch_pending, 1);
  v.may_wait = false; /* the pending granule cannot be had */
  plan_for(&v, 4 * G, &pl);
  assert_true(pl.oom);
  v.may_wait = true;
  v.used = 13 * G; /* over the limit already (pass-through): no room */
  plan_for(&v, 2 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.room, 0);
  assert_int_equal(pl.new_first, 0);
  plan_for(&v, 3 * G, &pl);
  assert_true(pl.oom);
  v.limit = 0;
  plan_for(&v, 3 * G, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.room, UINT64_MAX);
}

static void test_in_place(void **state) {
  (void)state;
  const uint64_t r = 5 * G;
  const struct pt_grow_blk b[] = {
    blk(G, 1, 10, false),    /* can grow by 4, but smaller than [3] and [4] */
    blk(2 * G, 2, 0, false), /* does not end its segment */
    blk(3 * G, 3, 1, false), /* 1 free slot after it: needs 2 */
    blk(3 * G, 3, 2, false), /* the one */
    blk(3 * G, 3, 5, false), /* as large, higher address */
    blk(r, 5, 9, false),     /* not smaller than the request */
  };
  struct pt_grow_view v = view(b, 6);
  v.peak_physical = 120 * G;
  assert_int_equal(pt_grow_where(&v, r), 3);
  struct pt_grow_plan pl;
  pt_grow_plan(&v, r, 3, &pl);
  assert_false(pl.oom);
  assert_int_equal(pl.tail, 3);
  assert_int_equal(pl.k, 2);
  assert_int_equal(pl.done, 1 + 2 + 3 + 3 + 5); /* not the tail's own */
  assert_int_equal(pl.stitch_done, 2);
  /* A new segment instead: the whole request, the tail's granules too. */
  pt_grow_plan(&v, r, -1, &pl);
  assert_int_equal(pl.tail, -1);
  assert_int_equal(pl.k, 5);
  assert_int_equal(pl.done, 1 + 2 + 3 + 3 + 3 + 5);
  /* Without [3], [4] is the one; with neither, [0]; then none. */
  v.nblk = 3;
  assert_int_equal(pt_grow_where(&v, r), 0);
  v.nblk = 1;
  assert_int_equal(pt_grow_where(&v, 12 * G), -1); /* 11 more: no */
  assert_int_equal(pt_grow_where(&v, 11 * G), 0);  /* 10 more: yes */
  /* A stitched handle brought more than the slots after the tail hold. */
  v.nblk = 6;
  pt_grow_plan(&v, r, 3, &pl);
  pt_grow_plan_elsewhere(&pl, r, G);
  assert_int_equal(pl.tail, -1);
  assert_int_equal(pl.k, 5);
  assert_int_equal(pl.slack, 0);
}

static void test_tail_slack(void **state) {
  (void)state;
  const struct pt_grow_blk b[] = {blk(2 * G, 2, 100, false)};
  struct pt_grow_view v = view(b, 1);
  v.chunk = 16;
  v.peak_physical = 120 * G; /* 20 granules of headroom */
  struct pt_grow_plan pl;
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.tail, 0);
  assert_int_equal(pl.slack, 13); /* 3 granules needed, a handle of 16 created */
  assert_int_equal(pl.k, 16);
  assert_int_equal(pl.new_first, 16);
  assert_int_equal(pl.new_under_peak, 16);
  assert_int_equal(pl.chunk, 16);
  plan_for(&v, (uint64_t)PT_POOL_SLACK_MIN_GRANULES * G, &pl); /* the smallest request with slack */
  assert_int_equal(pl.slack, 14);
  plan_for(&v, (uint64_t)PT_POOL_SLACK_MIN_GRANULES * G - 256, &pl);
  assert_int_equal(pl.slack, 0);
  assert_int_equal(pl.k, 2);
  v.peak_physical = 110 * G; /* only within the headroom */
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 7);
  v.peak_physical = 120 * G;
  v.limit = 1000 * G; /* never under a limit */
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 0);
  v.limit = 0;
  v.chunk = 1;
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 0);
  v.chunk = 3; /* 3 granules are one whole handle already */
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 0);
  v.chunk = 4;
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 1);
  assert_int_equal(pl.new_first, 4);
  /* The slots after the tail must hold it all. */
  v.chunk = 16;
  assert_int_equal(pt_grow_slack(&v, 5 * G, 3, 3, 20, 16), 13);
  assert_int_equal(pt_grow_slack(&v, 5 * G, 3, 3, 20, 15), 0);
  assert_int_equal(pt_grow_slack(&v, 5 * G, 3, 3, 20, 0), 0); /* no tail */
  assert_int_equal(pt_grow_slack(&v, 5 * G, 3, 0, 20, 100), 0); /* no new memory */
  /* A new segment gets none, nor does a range moved to one. */
  pt_grow_plan(&v, 5 * G, -1, &pl);
  assert_int_equal(pl.slack, 0);
  assert_int_equal(pl.k, 5);
  plan_for(&v, 5 * G, &pl);
  assert_int_equal(pl.slack, 13);
  pt_grow_plan_elsewhere(&pl, 5 * G, G);
  assert_int_equal(pl.tail, -1);
  assert_int_equal(pl.slack, 0);
  assert_int_equal(pl.k, 5);
}

static void test_chunk_sizes(void **state) {
  (void)state;
  assert_int_equal(pt_grow_handle(16, 40, UINT64_MAX), 16);
  assert_int_equal(pt_grow_handle(16, 8, UINT64_MAX), 8);
  assert_int_equal(pt_grow_handle(16, 40, 5), 5);
  assert_int_equal(pt_grow_handle(1, 40, UINT64_MAX), 1);
  const struct pt_grow_blk b[] = {blk(G, 1, 0, false)};
  struct pt_grow_view v = view(b, 1);
  v.chunk = 255;
  v.peak_physical = 200 * G;
  struct pt_grow_plan pl;
  plan_for(&v, 40 * G, &pl);
  assert_int_equal(pl.chunk, 255);
  assert_int_equal(pl.new_first, 39); /* no slack without a tail */
}

/* The planner reads the view and nothing else: the same view, the same plan,
 * and the view unchanged. */
static void test_pure(void **state) {
  (void)state;
  struct pt_grow_blk b[] = {blk(G, 1, 0, false), blk(2 * G, 2, 3, true), blk(3 * G, 3, 0, true)};
  struct pt_grow_blk copy[3];
  memcpy(copy, b, sizeof b);
  struct pt_grow_view v = view(b, 3);
  v.chunk = 8;
  v.peak_physical = 103 * G;
  struct pt_grow_plan p1, p2;
  plan_for(&v, 5 * G, &p1);
  plan_for(&v, 5 * G, &p2);
  assert_int_equal(p1.tail, 1);
  const uint64_t f1[] = {p1.oom, p1.may_wait, (uint64_t)p1.tail, p1.k, p1.slack, p1.chunk, p1.done, p1.pending,
                         p1.room, p1.headroom, p1.new_first, p1.stitch_done, p1.new_under_peak,
                         p1.stitch_pending, p1.new_over_peak};
  const uint64_t f2[] = {p2.oom, p2.may_wait, (uint64_t)p2.tail, p2.k, p2.slack, p2.chunk, p2.done, p2.pending,
                         p2.room, p2.headroom, p2.new_first, p2.stitch_done, p2.new_under_peak,
                         p2.stitch_pending, p2.new_over_peak};
  assert_memory_equal(f1, f2, sizeof f1);
  assert_memory_equal(b, copy, sizeof b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_done_preferred), cmocka_unit_test(test_new_under_peak),
    cmocka_unit_test(test_pending_when_needed), cmocka_unit_test(test_new_over_peak_last),
    cmocka_unit_test(test_limit), cmocka_unit_test(test_in_place),
    cmocka_unit_test(test_tail_slack), cmocka_unit_test(test_chunk_sizes),
    cmocka_unit_test(test_pure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
