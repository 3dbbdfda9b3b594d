/* The pool's slow path: mapping more granules (growth and stitching),
 * trimming, and tearing down. Runs under the pool's mutex.
 *
 * Layout rule: two mapped granules that are neighbours in VA always belong
 * to the same segment (their blocks are linked). New ranges are therefore
 * placed with an unmapped guard slot on each side, or right after a segment
 * (extending it, with a guard after). Unmapping granules out of a free block
 * cuts its segment in two. */
#include <stdlib.h>
#include "allocator/pool_internal.h"
#include "allocator/pool_plan.h"

static inline uint64_t g_up(uint64_t x, uint64_t g) { return (x + g - 1) / g * g; }
static inline uint64_t g_down(uint64_t x, uint64_t g) { return x / g * g; }

int pt_arena_slot(const struct pt_pool *p, uintptr_t va, struct pt_arena **a, uint64_t *slot) {
  for (int i = 0; i < p->narenas; i++) {
    struct pt_arena *ar = (struct pt_arena *)&p->arenas[i];
    if (va >= ar->base && va - ar->base < ar->nslots * p->gran) {
      *a = ar;
      *slot = (va - ar->base) / p->gran;
      return 0;
    }
  }
  return -1;
}

/* The whole handles inside free block b, as slots [*s0, *s1) of *ar; returns
 * their granules (0: none). Only these can be unmapped (stitch, trim). */
static uint64_t blk_span(const struct pt_pool *p, const struct pt_blk *b, struct pt_arena **ar, uint64_t *s0,
                         uint64_t *s1) {
  uint64_t G = p->gran, a = g_up(b->addr, G), e = g_down(b->addr + b->size, G), s, t;
  if (e <= a || pt_arena_slot(p, a, ar, &s)) return 0;
  t = s + (e - a) / G;
  while (s < t && !(*ar)->hlen[s]) s++;
  if (s < t) {
    uint64_t h = pt_head_of(*ar, t - 1);
    if (h + (*ar)->hlen[h] > t) t = h;
  }
  if (t <= s) return 0;
  *s0 = s;
  *s1 = t;
  return t - s;
}

static uint64_t blk_granules(const struct pt_pool *p, const struct pt_blk *b) {
  struct pt_arena *ar;
  uint64_t s0, s1;
  return blk_span(p, b, &ar, &s0, &s1);
}

/* A place for k granules with guard slots around, in arena a: the lowest
 * (up) or the highest (!up). A free run right after a mapped run of L slots
 * starts L/8 slots later than its guard: address space costs nothing, and
 * the mapped run's last block can then grow in place (see the tail in
 * pt_grow) when a tensor that grows a little every step (a KV cache
 * extended by torch.cat) outgrows it, instead of moving to a fresh range,
 * which remaps all of it. Placed highest, the new range also leaves k/8
 * slots above itself for that (or none, where only that fits). */
static bool arena_find(const struct pt_arena *a, uint64_t k, bool up, uint64_t *out) {
  uint64_t i = 0, u0 = 0;
  bool found = false;
  while (i < a->nslots) {
    if (pt_bit(a->bits, i)) {
      if (!i || !pt_bit(a->bits, i - 1)) u0 = i;
      i++;
      continue;
    }
    uint64_t z0 = i;
    while (i < a->nslots) {
      if (!(i & 63) && i + 64 <= a->nslots && !a->bits[i >> 6]) {
        i += 64;
        continue;
      }
      if (pt_bit(a->bits, i)) break;
      i++;
    }
    uint64_t s = z0 ? z0 + 1 + (z0 - u0) / 8 : 0, end = i == a->nslots ? i : i - 1;
    if (s + k > end) continue;
    if (up) {
      *out = s;
      return true;
    }
    *out = end >= k + k / 8 && end - k - k / 8 >= s ? end - k - k / 8 : end - k;
    found = true; /* a higher free run may follow */
  }
  return found;
}

static int arena_add(struct pt_pool *p, uint64_t min_slots) {
  if (p->narenas == PT_POOL_MAX_ARENAS) return p->bk.ops->err_oom;
  uint64_t bytes = p->arena_bytes > min_slots * p->gran ? p->arena_bytes : min_slots * p->gran;
  struct pt_arena a = {.nslots = bytes / p->gran};
  a.bits = calloc((a.nslots + 63) / 64, sizeof *a.bits);
  a.handles = calloc(a.nslots, sizeof *a.handles);
  a.hlen = calloc(a.nslots, sizeof *a.hlen);
  a.host = calloc(a.nslots, sizeof *a.host);
  int rc = !a.bits || !a.handles || !a.hlen || !a.host ? p->bk.ops->err_oom
                                                       : p->bk.ops->reserve(p->bk.ctx, bytes, &a.base);
  if (rc) {
    free(a.bits);
    free(a.handles);
    free(a.hlen);
    free(a.host);
    return rc;
  }
  p->arenas[p->narenas] = a;
  /* Published after the arena is filled in, for the lock-free range check. */
  __atomic_store_n(&p->narenas, p->narenas + 1, __ATOMIC_RELEASE);
  return 0;
}

int pt_place_fresh(struct pt_pool *p, uint64_t k, bool down, uintptr_t *va) {
  for (int pass = 0; pass < 2; pass++) {
    bool got = false;
    for (int i = 0; i < p->narenas; i++) {
      uint64_t s;
      if (!arena_find(&p->arenas[i], k, !down, &s)) continue;
      uintptr_t at = p->arenas[i].base + s * p->gran;
      if (!got || (down ? at > *va : at < *va)) *va = at;
      got = true;
    }
    if (got) return 0;
    if (pass) break;
    int rc = arena_add(p, k + 2);
    if (rc) return rc;
  }
  return p->bk.ops->err_oom;
}

/* Unmaps whole handles out of free block b, from its high end, or its low
 * end when b starts a segment that continues after it: until they hold cnt
 * granules, or b has no more; with exact, never more than cnt (it stops at
 * a handle that would pass it), else one handle may pass it. Appends them to
 * out[*nout..] and adds their granules to *got. b is split or consumed; its
 * pieces stay indexed. take_pick: the slots [*sa, *sb) of *ar it would
 * unmap (false: none), changing nothing. */
static bool take_pick(const struct pt_pool *p, const struct pt_blk *b, uint64_t cnt, bool exact,
                      struct pt_arena **ar, uint64_t *sa, uint64_t *sb) {
  uint64_t s0, s1;
  if (!cnt || !blk_span(p, b, ar, &s0, &s1)) return false;
  if (!b->prev && b->next) {
    for (*sa = *sb = s0; *sb < s1 && *sb - s0 < cnt && (!exact || *sb - s0 + (*ar)->hlen[*sb] <= cnt);)
      *sb += (*ar)->hlen[*sb];
  } else {
    for (*sa = *sb = s1; *sa > s0 && s1 - *sa < cnt;) {
      uint64_t h = pt_head_of(*ar, *sa - 1);
      if (exact && s1 - h > cnt) break;
      *sa = h;
    }
  }
  return *sa < *sb;
}

static int take_handles(struct pt_pool *p, struct pt_blk *b, uint64_t cnt, bool exact, struct pt_hspan *out,
                        uint64_t *nout, uint64_t *got) {
  const uint64_t G = p->gran;
  struct pt_arena *ar;
  uint64_t sa, sb;
  if (!take_pick(p, b, cnt, exact, &ar, &sa, &sb)) return 0;
  uint64_t ga = ar->base + sa * G, gb = ar->base + sb * G, end = b->addr + b->size;
  bool left = ga > b->addr, right = gb < end;
  struct pt_blk *r = NULL;
  if (left && right && !(r = pt_blk_new(p))) return p->bk.ops->err_oom;
  int rc = p->bk.ops->unmap(p->bk.ctx, ga, gb - ga);
  if (rc) {
    if (r) pt_blk_put(p, r);
    return rc;
  }
  for (uint64_t s = sa; s < sb;) {
    uint64_t n = ar->hlen[s];
    out[(*nout)++] = (struct pt_hspan){ar->handles[s], n};
    ar->hlen[s] = 0;
    for (uint64_t i = s; i < s + n; i++) pt_bit_clr(ar->bits, i);
    s += n;
  }
  *got += sb - sa;
  pt_fit_remove(p, b);
  struct pt_blk *next = b->next;
  if (left) {
    b->size = ga - b->addr;
    b->next = NULL;
    pt_fit_insert(p, b);
  } else if (b->prev) {
    b->prev->next = NULL;
  }
  if (right) {
    if (!r) r = b; /* no left part: b becomes the right part */
    else {
      r->nfence = b->nfence;
      for (uint8_t i = 0; i < b->nfence; i++) r->fence[i] = b->fence[i];
    }
    r->addr = gb;
    r->size = end - gb;
    r->is_free = 1;
    r->prev = NULL;
    r->next = next;
    if (next) next->prev = r;
    pt_fit_insert(p, r);
  } else if (next) {
    next->prev = NULL;
  }
  if (!left && !right) pt_blk_put(p, b);
  return 0;
}

/* Maps h[0..nh) (k granules in all) at va..; on failure unmaps what it
 * mapped and releases every handle (the pool stays consistent, with less
 * physical memory). */
static int map_range(struct pt_pool *p, uintptr_t va, struct pt_hspan *h, uint64_t nh, uint64_t k) {
  const uint64_t G = p->gran;
  struct pt_arena *ar;
  uint64_t s, i = 0, done = 0;
  int rc = pt_arena_slot(p, va, &ar, &s) ? p->bk.ops->err_invalid : 0;
  for (; !rc && i < nh; i++) {
    if ((rc = p->bk.ops->map(p->bk.ctx, va + done * G, h[i].n * G, h[i].h))) break;
    ar->hlen[s + done] = (uint8_t)h[i].n;
    for (uint64_t j = 0; j < h[i].n; j++) {
      ar->handles[s + done + j] = h[i].h;
      pt_bit_set(ar->bits, s + done + j);
    }
    done += h[i].n;
  }
  if (!rc) rc = p->bk.ops->set_access(p->bk.ctx, va, k * G);
  if (!rc) return 0;
  if (done) (void)p->bk.ops->unmap(p->bk.ctx, va, done * G);
  for (uint64_t j = 0; j < done; j++) {
    pt_bit_clr(ar->bits, s + j);
    ar->hlen[s + j] = 0;
  }
  for (uint64_t j = 0; j < nh; j++) (void)p->bk.ops->release(p->bk.ctx, h[j].h);
  pt_stat_physical(p, -(int64_t)k);
  return rc;
}

/* New physical memory of up to n granules as one handle: the largest that
 * the device grants, halving on out-of-memory (a nearly full device). */
static int create_span(struct pt_pool *p, uint64_t n, struct pt_hspan *out) {
  for (;;) {
    int rc = p->bk.ops->create(p->bk.ctx, n * p->gran, &out->h);
    if (!rc) {
      out->n = n;
      pt_stat_physical(p, (int64_t)n);
      return 0;
    }
    if (rc != p->bk.ops->err_oom || n == 1) return rc;
    n /= 2;
  }
}

/* What pt_grow has gathered for the new range so far. */
struct grow_run {
  uint64_t k;      /* granules to gather: the plan's, less slack given up, plus slack added */
  uint64_t slack;  /* slack in k that an out-of-memory gives up */
  bool slack_done; /* slack was added (at most once per call) */
  struct pt_hspan *h; /* the handles: nh of them, ng granules in all (may pass k by part of a
                         stitched handle: the range is then that much larger) */
  uint64_t nh, ng;
  uint64_t grown, stitched; /* granules created, stitched */
};

/* New physical memory, appended to the run's handles, until ng reaches upto
 * or grown reaches budget. 0, or create_span's error (what was created
 * before it stays in the run). */
static int create_upto(struct pt_pool *p, const struct pt_grow_plan *pl, struct grow_run *w, uint64_t upto,
                       uint64_t budget) {
  while (w->ng < upto && w->grown < budget) {
    int rc = create_span(p, pt_grow_handle(pl->chunk, upto - w->ng, budget - w->grown), &w->h[w->nh]);
    if (rc) return rc;
    w->grown += w->h[w->nh].n;
    w->ng += w->h[w->nh++].n;
  }
  return 0;
}

/* The granules its segment can grow by right after va (pt_grow_blk.after),
 * counted up to cap. */
static uint64_t slots_after(const struct pt_pool *p, uintptr_t va, uint64_t cap) {
  struct pt_arena *a;
  uint64_t s, n = 0;
  if (pt_arena_slot(p, va, &a, &s)) return 0;
  if (cap > a->nslots - s) cap = a->nslots - s;
  while (n < cap) {
    uint64_t i = s + n, w = a->bits[i >> 6] >> (i & 63);
    if (w) {
      n += (uint64_t)__builtin_ctzll(w);
      break;
    }
    n += 64 - (i & 63);
  }
  if (n > cap) n = cap;
  /* The slot after the run must be unmapped too (a guard), or the end. */
  return s + n == a->nslots || !pt_bit(a->bits, s + n) ? n : n ? n - 1 : 0;
}

/* slots_after, as if slots [sa, sb) of arena x were unmapped too (the
 * handles a stitch would take). */
static uint64_t slots_after_without(const struct pt_pool *p, uintptr_t va, uint64_t cap, const struct pt_arena *x,
                                    uint64_t sa, uint64_t sb) {
  struct pt_arena *a;
  uint64_t s, n = 0;
  if (pt_arena_slot(p, va, &a, &s) || a != x || sa > s + cap) return slots_after(p, va, cap);
  if (cap > a->nslots - s) cap = a->nslots - s;
#define PT_FREE_SLOT(i) (!pt_bit(a->bits, (i)) || ((i) >= sa && (i) < sb))
  while (n < cap && PT_FREE_SLOT(s + n)) n++;
  bool guard = s + n == a->nslots || PT_FREE_SLOT(s + n);
#undef PT_FREE_SLOT
  return guard ? n : n ? n - 1 : 0;
}

/* The planner's view of the pool: every free block c[0..n) in vb, their
 * fence state left to view_settle. */
static void view_fill(struct pt_pool *p, uint64_t r, struct pt_blk **c, uint64_t n, struct pt_grow_blk *vb,
                      struct pt_grow_view *v) {
  const uint64_t cap = (r + p->gran - 1) / p->gran + PT_GROW_AFTER_EXTRA;
  for (uint64_t i = 0; i < n; i++) {
    vb[i] = (struct pt_grow_blk){.size = c[i]->size, .granules = blk_granules(p, c[i])};
    if (!c[i]->next) vb[i].after = slots_after(p, c[i]->addr + c[i]->size, cap);
  }
  *v = (struct pt_grow_view){
    .gran = p->gran, .chunk = p->chunk, .limit = p->limit,
    .dev_bounded = p->tier_reserve != 0, .dev_room = p->tier_reserve ? pt_dev_room(p, false) : 0,
    .used = p->st.physical_bytes + __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED),
    .physical = p->st.physical_bytes, .peak_physical = p->st.peak_physical_bytes,
    .peak_requested = p->st.peak_requested_bytes, .may_wait = true, .blk = vb, .nblk = n};
}

/* The fence state of the blocks with granules to stitch, but skip's: their
 * done fences dropped (querying markers, never waiting). */
static void view_settle(struct pt_pool *p, struct pt_blk **c, struct pt_grow_blk *vb, uint64_t n, int64_t skip) {
  for (uint64_t i = 0; i < n; i++) {
    if ((int64_t)i == skip || !vb[i].granules) continue;
    (void)pt_fences_settle(p, c[i], false);
    vb[i].pending = c[i]->nfence > 0;
  }
}

/* Stitches toward w->k, after the new memory the plan creates first: whole
 * handles whose work is done first, then pending ones after waiting for them;
 * handles that fit what is missing (pass 0, 1), then (pass 2), before new
 * memory above the headroom, one that passes it, with a tail only where the
 * range still fits the slots after the tail; last (pass 3, a tail only), one
 * that passes them, which sends the range elsewhere (pt_grow). Stitched
 * blocks are cleared from c. 0 or a backend error other than out-of-memory. */
static int gather(struct pt_pool *p, const struct pt_grow_view *v, const struct pt_grow_plan *pl, uint64_t r,
                  struct pt_blk **c, uint64_t n, struct grow_run *w) {
  const int oom = p->bk.ops->err_oom;
  struct pt_blk *tail = pl->tail >= 0 ? c[pl->tail] : NULL;
  int rc = 0;
  for (int pass = 0; pass < 4 && w->ng < w->k; pass++) {
    /* Free memory whose work is done but that lies in handles larger than
     * what is missing was counted as if it could be stitched: what it leaves
     * missing is created now, within the headroom, rather than waited for
     * (in a decode, the free memory is pending after every step and in large
     * handles: waiting for it stalled the host for nothing). */
    if (pass == 1) {
      uint64_t hr = pl->headroom > w->grown ? pl->headroom - w->grown : 0;
      if (!w->slack_done) {
        uint64_t after = tail ? slots_after(p, tail->addr + tail->size, w->k + pl->chunk) : 0;
        w->slack = pt_grow_slack(v, r, w->k, w->k - w->ng, hr, after);
        w->slack_done = w->slack > 0;
        w->k += w->slack;
      }
      rc = create_upto(p, pl, w, w->k, pl->headroom < pl->room ? pl->headroom : pl->room);
      if (rc == oom && w->slack) w->k -= w->slack, w->slack = 0;
    }
    if (rc && rc != oom) return rc;
    rc = 0;
    if (pass == 3 && !tail) break; /* pass 2 took every handle it could */
    for (uint64_t i = 0; i < n && w->ng < w->k; i++) {
      struct pt_blk *b = c[i];
      if (!b || b == tail) continue;
      bool wait = pass > 0 && pl->may_wait; /* pass 0: only work that is done */
      if (!blk_granules(p, b) || (!wait && b->nfence)) continue;
      /* Before new memory, a tail's range must still fit the slots after it
       * (counting the ones the stitch frees): past them it must hold all of
       * r elsewhere, which can take more new memory than the tail is
       * missing, an out-of-memory over the limit or on a full device where
       * creating what is missing succeeds. Such a handle waits for pass 3. */
      struct pt_arena *xa;
      uint64_t xs, xe;
      if (pass == 2 && tail && take_pick(p, b, w->k - w->ng, false, &xa, &xs, &xe) &&
          w->ng + (xe - xs) > slots_after_without(p, tail->addr + tail->size, w->k + pl->chunk, xa, xs, xe))
        continue;
      if (wait && pt_fences_settle(p, b, true)) continue; /* new memory, if allowed */
      uint64_t before = w->ng;
      if ((rc = take_handles(p, b, w->k - w->ng, pass < 2, w->h, &w->nh, &w->ng))) return rc;
      w->stitched += w->ng - before;
      if (w->ng > before) c[i] = NULL; /* b may be gone: never look at it again */
    }
    /* What stitching could not cover: new memory, within the limit. It comes
     * after a stitched handle that passes what is missing: that one's extra
     * granules stay free after the new block, but they are memory the pool
     * has, where new memory here (above the headroom) raises its peak.
     * Created first, it left the padded batch-16 trace at 2.3% over peak live
     * with --lag 4 instead of 1.3% (bench/records/2026-12-01-pool-padded-b16.md). */
    if (pass == 2 && w->ng < w->k && (rc = create_upto(p, pl, w, w->k, pl->room)) && rc != oom) return rc;
    rc = 0;
  }
  return 0;
}

/* Orders a new range's handles largest first, stably (they are mapped in
 * this order). The new block starts the range: handles of a whole chunk then
 * keep handle ends on the chunk's grid from its start, so the blocks that
 * later reuse the range (often the same sizes, or multiples of the chunk)
 * end on handle ends too, and free whole handles when freed; the odd-sized
 * handles (stitched, or a request's remainder) gather at the range's end.
 * In the order they were gathered (new memory and stitched handles as each
 * pass found them), handle ends fell off that grid and blocks straddled handles,
 * pinning free granules: 2.5% over peak live on hf-b8-p512-n64 with --lag 4
 * instead of 1.6% (bench/records/2026-12-01-pool-padded-b16.md). */
static void hspans_by_size(struct pt_hspan *h, uint64_t n) {
  for (uint64_t i = 1; i < n; i++) {
    struct pt_hspan x = h[i];
    uint64_t j = i;
    for (; j > 0 && h[j - 1].n < x.n; j--) h[j] = h[j - 1];
    h[j] = x;
  }
}

/* The executor of pool_plan.h's plan: the backend calls, the pool's state
 * and stats, and undoing what it did on failure. */
int pt_grow(struct pt_pool *p, uint64_t r, bool down) {
  const uint64_t G = p->gran;
  pt_streams_refresh(p);
  uint64_t n = p->nfree_blocks;
  struct pt_blk **c = malloc((n ? n : 1) * sizeof *c);
  struct pt_grow_blk *vb = malloc((n ? n : 1) * sizeof *vb);
  struct pt_blk *nb = pt_blk_new(p);
  struct grow_run w = {0};
  int rc = p->bk.ops->err_oom;
  if (!c || !vb || !nb) goto fail;
  n = pt_fit_collect(p, 0, c, n);

  struct pt_grow_view v;
  struct pt_grow_plan pl;
  view_fill(p, r, c, n, vb, &v);
  int64_t t = pt_grow_where(&v, r);
  view_settle(p, c, vb, n, t);
  pt_grow_plan(&v, r, t, &pl);
  if (pl.oom && t >= 0) {
    /* Even stitching everything cannot cover the tail: a new segment, which
     * may also use the tail's own granules. */
    view_settle(p, c, vb, n, -1);
    pt_grow_plan(&v, r, -1, &pl);
  }
  if (pl.oom) {
    p->st.limit_rejections++;
    goto fail;
  }
  /* k may rise to all of r (elsewhere, below), or by a tail's slack: room
   * for that many handles. */
  if (!(w.h = malloc(((r + G - 1) / G + pl.chunk) * sizeof *w.h))) goto fail;
  /* The slack is added at most once per call: here or in the gather's pass
   * 1 (h has room for one chunk beyond r). It is best effort: on
   * out-of-memory the request is what it was. */
  w.k = pl.k;
  w.slack = pl.slack;
  w.slack_done = w.slack > 0;
  rc = create_upto(p, &pl, &w, pl.new_first, pl.room);
  if (rc == p->bk.ops->err_oom && w.slack) w.k -= w.slack, w.slack = 0;
  if (rc && (rc != p->bk.ops->err_oom || w.ng + pl.done + pl.pending < w.k)) goto fail;
  /* A stitched handle may have brought more than the tail needs: the slots
   * after it must hold all of it, else the range goes elsewhere, and must
   * then hold all of r by itself: gathered again, once (without a tail). */
  for (int round = 0; round < 2; round++) {
    if ((rc = gather(p, &v, &pl, r, c, n, &w))) goto fail;
    rc = p->bk.ops->err_oom;
    if (w.ng < w.k) goto fail;
    if (pl.tail < 0 || w.ng <= slots_after(p, c[pl.tail]->addr + c[pl.tail]->size, w.ng)) break;
    pt_grow_plan_elsewhere(&pl, r, G);
    /* The range no longer grows a tail: k is exactly r, with no slack that
     * an out-of-memory could take off it (before the split, the old slack
     * was subtracted again, which could leave k short of r). */
    w.k = pl.k;
    w.slack = 0;
    if (w.ng >= w.k) break;
  }
  struct pt_blk *tail = pl.tail >= 0 ? c[pl.tail] : NULL;
  uintptr_t va = tail ? tail->addr + tail->size : 0;
  if (!tail && (rc = pt_place_fresh(p, w.ng, down, &va))) goto fail;
  hspans_by_size(w.h, w.nh);
  if ((rc = map_range(p, va, w.h, w.nh, w.ng))) {
    w.nh = w.ng = 0; /* map_range released them */
    goto fail;
  }
  nb->addr = va;
  nb->size = w.ng * G;
  nb->is_free = 1;
  if (tail) {
    pt_fit_remove(p, tail);
    tail->size += nb->size;
    pt_blk_put(p, nb);
    pt_fit_insert(p, tail);
  } else {
    pt_fit_insert(p, nb);
  }
  if (w.grown) p->st.grows++;
  if (w.stitched) {
    p->st.stitches++;
    p->st.stitched_bytes += w.stitched * G;
  }
  free(c);
  free(vb);
  free(w.h);
  return 0;
fail:
  for (uint64_t j = 0; j < w.nh; j++) (void)p->bk.ops->release(p->bk.ctx, w.h[j].h);
  pt_stat_physical(p, -(int64_t)w.ng);
  if (nb) pt_blk_put(p, nb);
  free(c);
  free(vb);
  free(w.h);
  return rc;
}

uint64_t pt_trim_locked(struct pt_pool *p, uint64_t keep, bool wait) {
  const uint64_t G = p->gran;
  uint64_t free_phys = p->st.physical_bytes - pt_dev_live(p);
  if (free_phys <= keep) return 0;
  uint64_t need = (free_phys - keep + G - 1) / G, released = 0;
  uint64_t n = p->nfree_blocks;
  struct pt_blk **c = malloc((n ? n : 1) * sizeof *c);
  /* Whole handles are released, so one may take up to a handle more. */
  struct pt_hspan *h = malloc((need + 255) * sizeof *h);
  if (!c || !h) goto out;
  n = pt_fit_collect(p, G, c, n);
  /* Largest blocks first: they hold the most whole handles. */
  for (uint64_t i = n; i-- > 0 && released < need;) {
    struct pt_blk *b = c[i];
    uint64_t g = blk_granules(p, b), nh = 0, got = 0;
    if (!g || pt_fences_settle(p, b, wait) || b->nfence) continue;
    if (take_handles(p, b, need - released, false, h, &nh, &got)) continue;
    for (uint64_t j = 0; j < nh; j++) (void)p->bk.ops->release(p->bk.ctx, h[j].h);
    pt_stat_physical(p, -(int64_t)got);
    released += got;
  }
  if (released) {
    p->st.trims++;
    p->st.trimmed_bytes += released * G;
  }
out:
  free(c);
  free(h);
  return released * G;
}

void pt_unmap_all(struct pt_pool *p) {
  for (int i = 0; i < p->narenas; i++) {
    struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; s < a->nslots;) {
      if (!pt_bit(a->bits, s)) {
        s++;
        continue;
      }
      uint64_t e = s;
      while (e < a->nslots && pt_bit(a->bits, e)) e++;
      (void)p->bk.ops->unmap(p->bk.ctx, a->base + s * p->gran, (e - s) * p->gran);
      uint64_t dev = 0;
      for (uint64_t j = s; j < e; j++) {
        if (a->hlen[j]) (void)p->bk.ops->release(p->bk.ctx, a->handles[j]);
        dev += !a->host[j];
        a->hlen[j] = 0;
        a->host[j] = 0;
        pt_bit_clr(a->bits, j);
      }
      pt_stat_physical(p, -(int64_t)dev);
      s = e;
    }
  }
  p->free_root = NULL;
  p->nfree_blocks = 0;
}
