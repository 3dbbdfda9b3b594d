/* The growth planner: what pt_grow (pool_grow.c, the executor) does when no
 * free block fits a request, decided by pure functions over a read-only view
 * of the pool. They call no backend function and change nothing, so the
 * policy in pool.h can be tested on hand-built states
 * (tests/unit/alloc/test_grow_plan.c).
 *
 * A plan says where the new granules go (in place after a segment that ends
 * in a free block, the "tail", or a new segment), how many, and how many
 * each source gives, by preference: stitched granules whose work is done,
 * new memory under the pool's peak, stitched granules whose work is pending
 * (after waiting), new memory above the peak. The executor creates the new
 * memory first (what the stitchable granules cannot cover), then stitches,
 * each source filling what is still missing; the amounts below are what each
 * gives when every stitched handle fits what is missing and every create
 * succeeds. A shortfall (a handle larger than what is missing, a failed
 * wait, a device out of memory) falls through to the next source: new memory
 * within the headroom, then a handle that passes what is missing (memory the
 * pool has: its extra granules stay free after the new block; for a tail,
 * one the slots after it still hold), then new memory within the limit,
 * then (a tail) a handle that passes those slots: the range then goes
 * elsewhere (pt_grow_plan_elsewhere). */
#ifndef PT_ALLOC_POOL_PLAN_H
#define PT_ALLOC_POOL_PLAN_H
#include <stdbool.h>
#include <stdint.h>

/* pt_grow_blk.after is counted up to the request's granules plus this: any
 * in-place growth and its slack fit under it. */
#define PT_GROW_AFTER_EXTRA 256u

/* A free block as the planner sees it. */
struct pt_grow_blk {
  uint64_t size;     /* bytes */
  uint64_t granules; /* in the whole handles inside it: what stitching can move */
  /* Granules its segment can grow by in place: unmapped slots right after the
   * block with an unmapped slot (or the arena's end) after them; 0 when the
   * block does not end its segment. At most granules(r) + PT_GROW_AFTER_EXTRA. */
  uint64_t after;
  bool pending;      /* its work is not known finished (it has fences left) */
};

struct pt_grow_view {
  uint64_t gran;  /* bytes per granule */
  uint64_t chunk; /* granules per new handle (1..255) */
  uint64_t limit; /* bytes, 0 = none */
  bool dev_bounded;  /* dev_room applies: a host tier's reserve (pool_tier.c) */
  uint64_t dev_room; /* then: new granules the device allows now */
  uint64_t used;  /* bytes counted against the limit: physical + pass-through */
  uint64_t physical, peak_physical, peak_requested; /* bytes (the pool's stats) */
  bool may_wait;  /* pending granules may be waited for and stitched */
  const struct pt_grow_blk *blk; /* the free blocks, by (size, address) */
  uint64_t nblk;
};

struct pt_grow_plan {
  bool oom;      /* the limit leaves too little even after stitching every free granule */
  bool may_wait; /* the view's */
  int64_t tail;  /* blk index grown in place; -1: a new segment */
  uint64_t k;    /* granules to map, slack included */
  uint64_t slack; /* of k: the rest of the last new handle, left free after the request */
  uint64_t chunk; /* granules per new handle */
  uint64_t done, pending; /* stitchable granules of the other free blocks (pending: 0 unless may_wait) */
  uint64_t room;     /* new granules the limit allows (UINT64_MAX: no limit) */
  uint64_t headroom; /* new granules that keep physical memory under the peak */
  uint64_t new_first; /* created before stitching: new_under_peak + new_over_peak */
  /* Granules from each source, by preference (see above); 0 when oom. */
  uint64_t stitch_done, new_under_peak, stitch_pending, new_over_peak;
};

/* Where to grow for r bytes: the largest free block smaller than r (the
 * lowest address among equals) whose segment can grow in place by the rest;
 * -1 when none can (a new segment). */
int64_t pt_grow_where(const struct pt_grow_view *v, uint64_t r);

/* The plan for r bytes at tail (pt_grow_where's answer, or -1). Reads the
 * pending flags of the blocks other than tail only. A plan that is oom with
 * a tail may not be with a new segment, which can use the tail's granules
 * too: the caller then plans again with -1 (with the tail's fence state). */
void pt_grow_plan(const struct pt_grow_view *v, uint64_t r, int64_t tail, struct pt_grow_plan *out);

/* Tail slack: new memory for a tail, for a request of at least
 * PT_POOL_SLACK_MIN_GRANULES granules, comes in whole handles (the extra
 * stays free after the new block), within the headroom, without a limit,
 * and where the slots after the tail hold k + the extra (after: the tail's
 * pt_grow_blk.after, 0 without a tail). Returns the extra granules. */
uint64_t pt_grow_slack(const struct pt_grow_view *v, uint64_t r, uint64_t k, uint64_t want_new, uint64_t headroom,
                       uint64_t after);

/* Granules of the next new handle: up to chunk, what is missing, and what
 * the budget has left. */
uint64_t pt_grow_handle(uint64_t chunk, uint64_t missing, uint64_t budget_left);

/* The gathered granules (a stitched handle may pass k) do not fit the slots
 * after the plan's tail: the range goes to a new segment instead, and must
 * then hold all of r by itself (k = granules of r, no slack). What was
 * gathered stays gathered. */
void pt_grow_plan_elsewhere(struct pt_grow_plan *pl, uint64_t r, uint64_t gran);

#endif
