/* The growth planner (pool_plan.h): pure arithmetic over a view of the pool.
 * It includes nothing of the pool's internals, so it cannot call the backend
 * or change the pool. */
#include "allocator/pool_plan.h"
#include "allocator/pool.h" /* PT_POOL_SLACK_MIN_GRANULES */

static inline uint64_t granules(uint64_t bytes, uint64_t g) { return (bytes + g - 1) / g; }
static inline uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

int64_t pt_grow_where(const struct pt_grow_view *v, uint64_t r) {
  int64_t t = -1;
  for (uint64_t i = 0; i < v->nblk; i++) {
    const struct pt_grow_blk *b = &v->blk[i];
    if (b->size >= r || (t >= 0 && v->blk[t].size >= b->size)) continue;
    if (b->after >= granules(r - b->size, v->gran)) t = (int64_t)i;
  }
  return t;
}

void pt_grow_plan(const struct pt_grow_view *v, uint64_t r, int64_t tail, struct pt_grow_plan *o) {
  const uint64_t G = v->gran;
  *o = (struct pt_grow_plan){.tail = tail, .chunk = v->chunk, .may_wait = v->may_wait};
  o->k = tail >= 0 ? granules(r - v->blk[tail].size, G) : granules(r, G);
  for (uint64_t i = 0; i < v->nblk; i++) {
    if ((int64_t)i == tail) continue;
    if (!v->blk[i].pending) o->done += v->blk[i].granules;
    else if (v->may_wait) o->pending += v->blk[i].granules;
  }
  o->room = !v->limit ? UINT64_MAX : v->limit > v->used ? (v->limit - v->used) / G : 0;
  if (v->dev_bounded && o->room > v->dev_room) o->room = v->dev_room;
  /* New memory that stays under the peak costs no peak, and no wait; nor
   * does new memory within 1/128 above the peak of requested bytes (a bound
   * that growth itself does not raise): a host wait stalls a CPU-bound
   * caller until the device catches up, for a granule or two. */
  uint64_t cap = v->peak_requested + v->peak_requested / 128;
  if (cap < v->peak_physical) cap = v->peak_physical;
  o->headroom = cap > v->physical ? (cap - v->physical) / G : 0;
  if (o->room < o->k && o->done + o->pending + o->room < o->k) {
    o->oom = true;
    return;
  }
  /* New physical memory only for what free granules whose work is done
   * cannot cover: stitching those costs about what creating does, and keeps
   * the pool's physical memory close to its live memory. Granules whose work
   * is pending are waited for rather than replaced by new memory that would
   * raise the pool's peak: when the device runs behind the host (a GPU-bound
   * prefill), most freed memory is pending, and growing instead left the
   * peak at live + everything freed but not yet finished (8.4% in `ponytail
   * replay --min 1M --lag 100`, as on the H200). */
  const uint64_t k = o->k;
  uint64_t want = k > o->done ? k - o->done : 0;
  if (want > o->headroom) want -= min64(want - o->headroom, o->pending);
  if (want > o->room) want = o->room;
  o->slack = pt_grow_slack(v, r, k, want, o->headroom, tail >= 0 ? v->blk[tail].after : 0);
  o->k += o->slack;
  o->new_first = want + o->slack;
  o->new_under_peak = min64(want, o->headroom) + o->slack;
  o->new_over_peak = want - min64(want, o->headroom);
  o->stitch_done = min64(o->done, k - want);
  o->stitch_pending = min64(o->pending, k - want - o->stitch_done);
}

/* New memory for a free block's tail, for a large request, comes in whole
 * handles: what the last handle has beyond the request stays free right after
 * the new block. A KV-cache tensor that torch.cat re-allocates one token
 * longer every step needs one more granule every few dozen steps, all layers
 * at the same step; without slack each such step costs every layer a create
 * and a map, which on the H200 made those steps ~6 ms slower than stock's
 * (bench/records/2026-11-29-wall-time-taking-turns.md); with it most of them find the
 * granule mapped.
 * Only within the headroom (so never above the pool's peak), without a limit
 * or a tier's reserve (there one-granule handles and stitching keep memory
 * tight, and every granule on the device counts), and where the
 * arena's slots after the tail are free. */
uint64_t pt_grow_slack(const struct pt_grow_view *v, uint64_t r, uint64_t k, uint64_t want_new, uint64_t headroom,
                       uint64_t after) {
  if (!after || !want_new || v->limit || v->dev_bounded || v->chunk < 2 || r < PT_POOL_SLACK_MIN_GRANULES * v->gran) return 0;
  uint64_t extra = (v->chunk - want_new % v->chunk) % v->chunk;
  if (want_new + extra > headroom) extra = headroom > want_new ? headroom - want_new : 0;
  return k + extra <= after ? extra : 0;
}

/* Handles of up to chunk granules, since the driver's cost is per handle. */
uint64_t pt_grow_handle(uint64_t chunk, uint64_t missing, uint64_t budget_left) {
  return min64(min64(chunk, missing), budget_left);
}

void pt_grow_plan_elsewhere(struct pt_grow_plan *pl, uint64_t r, uint64_t gran) {
  pl->tail = -1;
  pl->k = granules(r, gran);
  pl->slack = 0;
}
