/* Invariant checks for tests: O(n log n), never called by the shim. */
#include <stdlib.h>
#include "allocator/pool_internal.h"

#define FAIL(msg)      \
  do {                 \
    *why = msg;        \
    rc = __LINE__;     \
    goto out;          \
  } while (0)

static int cmp_addr(const void *a, const void *b) {
  uintptr_t x = (*(struct pt_blk *const *)a)->addr, y = (*(struct pt_blk *const *)b)->addr;
  return x < y ? -1 : x > y;
}

/* In-order walk: checks key order and heap order, collects the blocks. */
static int walk(const struct pt_blk *t, const struct pt_blk **last, struct pt_blk **out, uint64_t *n,
                uint64_t max) {
  if (!t) return 0;
  if (t->tl && t->tl->prio > t->prio) return -1;
  if (t->tr && t->tr->prio > t->prio) return -1;
  if (walk(t->tl, last, out, n, max)) return -1;
  if (*last && ((*last)->size > t->size || ((*last)->size == t->size && (*last)->addr >= t->addr)))
    return -1;
  if (*n >= max) return -1;
  out[(*n)++] = (struct pt_blk *)t;
  *last = t;
  return walk(t->tr, last, out, n, max);
}

static bool mapped(const struct pt_pool *p, uintptr_t va) {
  struct pt_arena *a;
  uint64_t s;
  return !pt_arena_slot(p, va, &a, &s) && pt_bit(a->bits, s);
}

int pt_pool_check(struct pt_pool *p, const char **why) {
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  *why = "ok";
  uint64_t max = p->nfree_blocks + p->live.n, n = 0, mapped_g = 0, live = 0, total = 0, req = 0;
  struct pt_blk **all = malloc((max ? max : 1) * sizeof *all);
  const struct pt_blk *last = NULL;
  if (!all) FAIL("out of memory");
  if (walk(p->free_root, &last, all, &n, max)) FAIL("free index order/heap/count broken");
  if (n != p->nfree_blocks) FAIL("free block count wrong");
  for (uint64_t i = 0; i < n; i++)
    if (!all[i]->is_free) FAIL("allocated block in the free index");
  for (uint64_t i = 0; i < p->live.cap; i++) {
    if (!p->live.keys[i]) continue;
    struct pt_blk *b = p->live.vals[i];
    if (b->addr != p->live.keys[i] || b->is_free) FAIL("live map entry wrong");
    if (pt_ptrmap_get(&p->live, b->addr) != b) FAIL("live map lookup broken");
    if (n >= max) FAIL("live map count wrong");
    all[n++] = b;
    live += b->size;
    req += b->req;
    if (b->req > b->size || (b->size >= PT_POOL_ROUND_GRANULES * p->gran && b->size % p->gran))
      FAIL("block size vs request");
  }
  if (n != max) FAIL("live map count wrong");
  qsort(all, n, sizeof *all, cmp_addr);
  for (uint64_t i = 0; i < n; i++) {
    struct pt_blk *b = all[i], *c = i + 1 < n ? all[i + 1] : NULL;
    uintptr_t end = b->addr + b->size;
    total += b->size;
    if (!b->size || b->addr % PT_POOL_ALIGN || b->size % PT_POOL_ALIGN) FAIL("misaligned block");
    if (c && end > c->addr) FAIL("blocks overlap");
    for (uintptr_t g = b->addr / p->gran * p->gran; g < end; g += p->gran)
      if (!mapped(p, g)) FAIL("block on unmapped memory");
    if (c && end == c->addr) {
      if (b->next != c || c->prev != b) FAIL("adjacent blocks not linked");
      if (b->is_free && c->is_free) FAIL("free neighbours not coalesced");
    } else {
      if (b->next) FAIL("link to a non-adjacent block");
      if (end % p->gran) FAIL("segment ends inside a granule");
      if (mapped(p, end)) FAIL("mapped neighbour granule not in the segment");
    }
    if (i == 0 || all[i - 1]->addr + all[i - 1]->size != b->addr) {
      if (b->prev) FAIL("prev link to a non-adjacent block");
      if (b->addr % p->gran) FAIL("segment starts inside a granule");
      if (b->addr >= p->gran && mapped(p, b->addr - p->gran)) FAIL("mapped granule before a segment");
    }
    if (!b->is_free && b->nfence) FAIL("live block with fences");
    if (b->tier && (b->is_free || b->prev || b->next || b->size % p->gran)) FAIL("tier block not alone in its range");
  }
  /* Host slots lie exactly in tier blocks, and add up to tier_bytes. */
  uint64_t host_g = 0, tier_host_g = 0;
  for (int i = 0; i < p->narenas; i++)
    for (uint64_t s = 0; s < p->arenas[i].nslots; s++) {
      if (p->arenas[i].host[s] && !pt_bit(p->arenas[i].bits, s)) FAIL("host slot not mapped");
      host_g += p->arenas[i].host[s];
    }
  for (uint64_t i = 0; i < n; i++) {
    struct pt_arena *ar;
    uint64_t s0;
    if (!all[i]->tier || pt_arena_slot(p, all[i]->addr, &ar, &s0)) continue;
    for (uint64_t s = s0; s < s0 + all[i]->size / p->gran; s++) tier_host_g += ar->host[s];
  }
  if (host_g != tier_host_g) FAIL("host slot outside a tier block");
  if (host_g * p->gran != p->st.tier_bytes) FAIL("tier bytes accounting");
  for (int i = 0; i < p->narenas; i++) {
    const struct pt_arena *a = &p->arenas[i];
    for (uint64_t w = 0; w < (a->nslots + 63) / 64; w++) mapped_g += (uint64_t)__builtin_popcountll(a->bits[w]);
    /* Every mapped slot belongs to exactly one handle, mapped whole. */
    for (uint64_t s = 0; s < a->nslots;) {
      if (!pt_bit(a->bits, s)) {
        if (a->hlen[s]) FAIL("unmapped slot starts a handle");
        s++;
        continue;
      }
      uint64_t hn = a->hlen[s];
      if (!hn || hn > p->chunk || s + hn > a->nslots) FAIL("mapped slot outside a handle");
      for (uint64_t j = s + 1; j < s + hn; j++)
        if (!pt_bit(a->bits, j) || a->hlen[j] || a->handles[j] != a->handles[s]) FAIL("handle mapped in part");
      s += hn;
    }
  }
  if (live != p->st.live_bytes) FAIL("live bytes accounting");
  if (req != p->st.requested_bytes) FAIL("requested bytes accounting");
  /* A sleeping pool keeps its slots (bits, handle lengths) without their
   * physical memory: pool_sleep.c. Host-tier granules are mapped slots
   * outside physical_bytes: pool_tier.c. */
  uint64_t slots_bytes = p->st.physical_bytes + p->st.tier_bytes + (p->asleep ? p->st.asleep_bytes : 0);
  if (mapped_g * p->gran != slots_bytes) FAIL("physical bytes accounting");
  if (total != slots_bytes) FAIL("blocks do not cover the mapped memory");
  if (!p->asleep && p->st.asleep_bytes) FAIL("asleep bytes while awake");
  if (p->st.peak_live_bytes < p->st.live_bytes || p->st.peak_physical_bytes < p->st.physical_bytes ||
      p->st.peak_requested_bytes < p->st.requested_bytes)
    FAIL("peaks below current values");
out:
  free(all);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void pt_pool_shape(struct pt_pool *p, uint64_t *segments, uint64_t *free_blocks,
                   uint64_t *all_free_segments) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->nfree_blocks, segs = 0, whole = 0;
  struct pt_blk **c = malloc((n ? n : 1) * sizeof *c);
  n = c ? pt_fit_collect(p, 0, c, n) : 0;
  for (uint64_t i = 0; i < n; i++)
    if (!c[i]->prev && !c[i]->next) whole++;
  for (uint64_t i = 0; i < n; i++)
    if (!c[i]->prev) segs++;
  for (uint64_t i = 0; i < p->live.cap; i++)
    if (p->live.keys[i] && !p->live.vals[i]->prev) segs++;
  free(c);
  *segments = segs;
  *free_blocks = p->nfree_blocks;
  *all_free_segments = whole;
  pthread_mutex_unlock(&p->mu);
}
