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

/* true when slots [s, s+k) are unmapped and the slot after is unmapped or
 * past the arena's end. */
static bool slots_free(const struct pt_arena *a, uint64_t s, uint64_t k) {
  if (s + k > a->nslots) return false;
  for (uint64_t i = s; i < s + k; i++)
    if (pt_bit(a->bits, i)) return false;
  return s + k == a->nslots || !pt_bit(a->bits, s + k);
}

/* First place (lowest address) for k granules with guard slots around. A
 * free run right after a mapped run of L slots starts L/8 slots later than
 * its guard: address space costs nothing, and the mapped run's last block
 * can then grow in place (see the tail in pt_grow) when a tensor that grows
 * a little every step (a KV cache extended by torch.cat) outgrows it, instead
 * of moving to a fresh range, which remaps all of it. */
static bool arena_find(const struct pt_arena *a, uint64_t k, uint64_t *out) {
  uint64_t i = 0, u0 = 0;
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
    if (s + k <= end) {
      *out = s;
      return true;
    }
  }
  return false;
}

static int arena_add(struct pt_pool *p, uint64_t min_slots) {
  if (p->narenas == PT_POOL_MAX_ARENAS) return p->bk.ops->err_oom;
  uint64_t bytes = p->arena_bytes > min_slots * p->gran ? p->arena_bytes : min_slots * p->gran;
  struct pt_arena a = {.nslots = bytes / p->gran};
  a.bits = calloc((a.nslots + 63) / 64, sizeof *a.bits);
  a.handles = calloc(a.nslots, sizeof *a.handles);
  a.hlen = calloc(a.nslots, sizeof *a.hlen);
  int rc = !a.bits || !a.handles || !a.hlen ? p->bk.ops->err_oom : p->bk.ops->reserve(p->bk.ctx, bytes, &a.base);
  if (rc) {
    free(a.bits);
    free(a.handles);
    free(a.hlen);
    return rc;
  }
  p->arenas[p->narenas] = a;
  /* Published after the arena is filled in, for the lock-free range check. */
  __atomic_store_n(&p->narenas, p->narenas + 1, __ATOMIC_RELEASE);
  return 0;
}

static int place_fresh(struct pt_pool *p, uint64_t k, uintptr_t *va) {
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < p->narenas; i++) {
      uint64_t s;
      if (arena_find(&p->arenas[i], k, &s)) {
        *va = p->arenas[i].base + s * p->gran;
        return 0;
      }
    }
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
 * pieces stay indexed. */
static int take_handles(struct pt_pool *p, struct pt_blk *b, uint64_t cnt, bool exact, struct pt_hspan *out,
                        uint64_t *nout, uint64_t *got) {
  const uint64_t G = p->gran;
  struct pt_arena *ar;
  uint64_t s0, s1, sa, sb;
  if (!cnt || !blk_span(p, b, &ar, &s0, &s1)) return 0;
  if (!b->prev && b->next) {
    for (sa = sb = s0; sb < s1 && sb - s0 < cnt && (!exact || sb - s0 + ar->hlen[sb] <= cnt);) sb += ar->hlen[sb];
  } else {
    for (sa = sb = s1; sa > s0 && s1 - sa < cnt;) {
      uint64_t h = pt_head_of(ar, sa - 1);
      if (exact && s1 - h > cnt) break;
      sa = h;
    }
  }
  if (sa == sb) return 0;
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

/* New physical memory, appended to h[*nh..], until *ng reaches upto or
 * *grown reaches limit: handles of up to p->chunk granules, since the
 * driver's cost is per handle. 0, or create_span's error (what was created
 * before it stays in h). */
static int create_upto(struct pt_pool *p, uint64_t upto, uint64_t limit, struct pt_hspan *h, uint64_t *nh,
                       uint64_t *ng, uint64_t *grown) {
  while (*ng < upto && *grown < limit) {
    uint64_t want = upto - *ng;
    if (want > p->chunk) want = p->chunk;
    if (want > limit - *grown) want = limit - *grown;
    int rc = create_span(p, want, &h[*nh]);
    if (rc) return rc;
    *grown += h[*nh].n;
    *ng += h[(*nh)++].n;
  }
  return 0;
}

/* Granules that may be stitched: wholly free granules of free blocks other
 * than `skip`, split into those whose work is done and those pending. */
static void count_free_granules(struct pt_pool *p, struct pt_blk **c, uint64_t n,
                                const struct pt_blk *skip, uint64_t *done, uint64_t *pending) {
  *done = *pending = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (c[i] == skip) continue;
    uint64_t g = blk_granules(p, c[i]);
    if (!g) continue;
    (void)pt_fences_settle(p, c[i], false);
    if (c[i]->nfence) *pending += g;
    else *done += g;
  }
}

/* New memory for a free block's tail, for a large request, comes in whole
 * handles: what the last handle has beyond the request stays free right after
 * the new block. A KV-cache tensor that torch.cat re-allocates one token
 * longer every step needs one more granule every few dozen steps, all layers
 * at the same step; without slack each such step costs every layer a create
 * and a map, which on the H200 made those steps ~6 ms slower than stock's
 * (bench/NOTES.md section 12); with it most of them find the granule mapped.
 * Only within the headroom (so never above the pool's peak), without a limit
 * (there one-granule handles and stitching keep memory tight), and where the
 * arena's slots after the tail are free. Returns the extra granules. */
static uint64_t tail_slack(struct pt_pool *p, const struct pt_blk *tail, uint64_t r, uint64_t k, uint64_t want_new,
                           uint64_t headroom) {
  if (!tail || !want_new || p->limit || p->chunk < 2 || r < PT_POOL_SLACK_MIN_GRANULES * p->gran) return 0;
  uint64_t extra = (p->chunk - want_new % p->chunk) % p->chunk;
  if (want_new + extra > headroom) extra = headroom > want_new ? headroom - want_new : 0;
  struct pt_arena *ar;
  uint64_t s;
  if (extra && (pt_arena_slot(p, tail->addr + tail->size, &ar, &s) || !slots_free(ar, s, k + extra))) extra = 0;
  return extra;
}

int pt_grow(struct pt_pool *p, uint64_t r) {
  const uint64_t G = p->gran;
  pt_streams_refresh(p);
  uint64_t n = p->nfree_blocks;
  struct pt_blk **c = malloc((n ? n : 1) * sizeof *c);
  struct pt_blk *nb = pt_blk_new(p);
  if (!c || !nb) {
    free(c);
    if (nb) pt_blk_put(p, nb);
    return p->bk.ops->err_oom;
  }
  n = pt_fit_collect(p, 0, c, n);

  /* The free segment tail that needs the fewest new granules. */
  struct pt_blk *tail = NULL;
  for (uint64_t i = 0; i < n; i++) {
    struct pt_blk *b = c[i];
    struct pt_arena *ar;
    uint64_t s;
    if (b->next || b->size >= r || (tail && tail->size >= b->size)) continue;
    if (pt_arena_slot(p, b->addr + b->size, &ar, &s)) continue;
    if (slots_free(ar, s, (r - b->size + G - 1) / G)) tail = b;
  }

  uint64_t used = p->st.physical_bytes + __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED);
  uint64_t room = !p->limit ? UINT64_MAX : p->limit > used ? (p->limit - used) / G : 0;
  uint64_t k = 0, done = 0, pending = 0;
  /* Try growing the tail; if even stitching everything cannot cover it, try
   * a fresh range, which may also use the tail's own granules. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass && !tail) break;
    if (pass) tail = NULL;
    k = tail ? (r - tail->size + G - 1) / G : (r + G - 1) / G;
    count_free_granules(p, c, n, tail, &done, &pending);
    if (room >= k || done + pending + room >= k) break;
  }
  /* Handles gathered for the new range: nh of them, ng granules in all (may
   * pass k by part of a stitched handle: the range is then that much larger). */
  struct pt_hspan *h = NULL;
  uint64_t nh = 0, ng = 0, stitched = 0;
  int rc = p->bk.ops->err_oom;
  if (room < k && done + pending + room < k) {
    p->st.limit_rejections++;
    goto fail;
  }
  /* k may rise to all of r (below), or by a tail's slack: room for that
   * many handles. */
  if (!(h = malloc(((r + G - 1) / G + p->chunk) * sizeof *h))) goto fail;
  /* New physical memory only for what free granules whose work is done
   * cannot cover: stitching those costs about what creating does, and keeps
   * the pool's physical memory close to its live memory. */
  uint64_t want_new = k > done ? k - done : 0;
  /* Granules whose work is pending are waited for rather than replaced by
   * new memory that would raise the pool's peak: when the device runs behind
   * the host (a GPU-bound prefill), most freed memory is pending, and
   * growing instead left the peak at live + everything freed but not yet
   * finished (8.4% in `ponytail replay --min 1M --lag 100`, as on the H200).
   * New memory that stays under the peak costs no peak, and no wait; nor
   * does new memory within 1/128 above the peak of requested bytes (a bound
   * that growth itself does not raise): a host wait stalls a CPU-bound
   * caller until the device catches up, for a granule or two. */
  uint64_t cap = p->st.peak_requested_bytes + p->st.peak_requested_bytes / 128;
  if (cap < p->st.peak_physical_bytes) cap = p->st.peak_physical_bytes;
  uint64_t headroom = cap > p->st.physical_bytes ? (cap - p->st.physical_bytes) / G : 0;
  if (want_new > headroom) {
    uint64_t wait = want_new - headroom < pending ? want_new - headroom : pending;
    want_new -= wait;
  }
  if (want_new > room) want_new = room;
  /* At most once per call: the slack of a tail that gets new memory, here
   * or in the gather's pass 1 (h has room for one chunk beyond r). It is
   * best effort: on out-of-memory the request is what it was. */
  uint64_t slack = tail_slack(p, tail, r, k, want_new, headroom);
  bool slack_done = slack > 0;
  want_new += slack;
  k += slack;
  uint64_t grown = 0;
  rc = create_upto(p, want_new, room, h, &nh, &ng, &grown);
  if (rc == p->bk.ops->err_oom && slack) k -= slack, slack = 0;
  if (rc && (rc != p->bk.ops->err_oom || ng + done + pending < k)) goto fail;
  rc = 0;
  /* Stitch: whole handles whose work is done first, then pending ones after
   * waiting for them; handles that fit what is missing (pass 0, 1), and
   * only when new memory cannot be had (pass 2), one that passes it. */
gather:
  for (int pass = 0; pass < 3 && ng < k; pass++) {
    /* Free memory whose work is done but that lies in handles larger than
     * what is missing was counted above as if it could be stitched: what
     * it leaves missing is created now, within the headroom, rather than
     * waited for (in a decode, the free memory is pending after every step
     * and in large handles: waiting for it stalled the host for nothing). */
    if (pass == 1) {
      if (!slack_done && ng < k) {
        slack = tail_slack(p, tail, r, k, k - ng, headroom > grown ? headroom - grown : 0);
        slack_done = slack > 0;
        k += slack;
      }
      rc = create_upto(p, k, headroom < room ? headroom : room, h, &nh, &ng, &grown);
      if (rc == p->bk.ops->err_oom && slack) k -= slack, slack = 0;
    }
    /* What stitching could not cover: new memory, within the limit. */
    if (pass == 2) rc = create_upto(p, k, room, h, &nh, &ng, &grown);
    if (rc && rc != p->bk.ops->err_oom) goto fail;
    rc = 0;
    for (uint64_t i = 0; i < n && ng < k; i++) {
      struct pt_blk *b = c[i];
      if (!b || b == tail) continue;
      uint64_t g = blk_granules(p, b);
      if (!g || (pass == 0 && b->nfence)) continue;
      if (pass > 0 && pt_fences_settle(p, b, true)) continue; /* new memory, if allowed */
      uint64_t before = ng;
      if ((rc = take_handles(p, b, k - ng, pass < 2, h, &nh, &ng))) goto fail;
      stitched += ng - before;
      if (ng > before) c[i] = NULL; /* b may be gone: never look at it again */
    }
  }
  rc = p->bk.ops->err_oom;
  if (ng < k) goto fail;
  uintptr_t va = 0;
  if (tail) {
    /* A stitched handle may have brought more than the tail needs: the
     * slots after it must hold all of it, else the range goes elsewhere, and
     * must then hold all of r by itself. */
    struct pt_arena *ar;
    uint64_t s;
    if (pt_arena_slot(p, tail->addr + tail->size, &ar, &s) || !slots_free(ar, s, ng)) {
      tail = NULL;
      k = (r + G - 1) / G;
      if (ng < k) goto gather;
    } else {
      va = tail->addr + tail->size;
    }
  }
  if (!tail && (rc = place_fresh(p, ng, &va))) goto fail;
  if ((rc = map_range(p, va, h, nh, ng))) {
    nh = ng = 0; /* map_range released them */
    goto fail;
  }
  nb->addr = va;
  nb->size = ng * G;
  nb->is_free = 1;
  if (tail) {
    pt_fit_remove(p, tail);
    tail->size += nb->size;
    pt_blk_put(p, nb);
    pt_fit_insert(p, tail);
  } else {
    pt_fit_insert(p, nb);
  }
  if (grown) p->st.grows++;
  if (stitched) {
    p->st.stitches++;
    p->st.stitched_bytes += stitched * G;
  }
  free(c);
  free(h);
  return 0;
fail:
  for (uint64_t j = 0; j < nh; j++) (void)p->bk.ops->release(p->bk.ctx, h[j].h);
  pt_stat_physical(p, -(int64_t)ng);
  pt_blk_put(p, nb);
  free(c);
  free(h);
  return rc;
}

uint64_t pt_trim_locked(struct pt_pool *p, uint64_t keep, bool wait) {
  const uint64_t G = p->gran;
  uint64_t free_phys = p->st.physical_bytes - p->st.live_bytes;
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
      for (uint64_t j = s; j < e; j++) {
        if (a->hlen[j]) (void)p->bk.ops->release(p->bk.ctx, a->handles[j]);
        a->hlen[j] = 0;
        pt_bit_clr(a->bits, j);
      }
      pt_stat_physical(p, -(int64_t)(e - s));
      s = e;
    }
  }
  p->free_root = NULL;
  p->nfree_blocks = 0;
}
