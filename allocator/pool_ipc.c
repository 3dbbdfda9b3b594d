/* Export of pooled blocks: see pool_ipc.h. */
#include "allocator/pool_ipc.h"

#include <unistd.h>
#include "allocator/pool_internal.h"

/* The live block holding ptr. Block starts are in the live map; an interior
 * pointer (rare: cudaIpcGetMemHandle is normally given an allocation's base)
 * is found by a scan of the live blocks. Under the pool's mutex. */
static struct pt_blk *block_holding(struct pt_pool *p, uintptr_t a) {
  struct pt_blk *b = pt_ptrmap_get(&p->live, a);
  for (uint64_t i = 0; !b && i < p->live.cap; i++) {
    struct pt_blk *c = p->live.keys[i] ? p->live.vals[i] : NULL;
    if (c && a - c->addr < c->size) b = c;
  }
  /* A host-tier block is not exported: its host granules have no device
   * behind them for an importer to map (pool.h). */
  return b && !b->tier ? b : NULL;
}

/* The block and the whole handles under it (a handle is exported whole). */
static int fill_info(const struct pt_pool *p, const struct pt_blk *b, struct pt_pool_block_info *out,
                     struct pt_arena **ar, uint64_t *slot) {
  const uint64_t G = p->gran;
  uintptr_t g0 = b->addr & ~(uintptr_t)(G - 1), g1 = (b->addr + b->size + G - 1) & ~(uintptr_t)(G - 1);
  uint64_t s0, s1;
  /* A live block's granules are mapped and stay so while it lives: neither
   * stitching nor trimming touches a handle under a live block. */
  if (pt_arena_slot(p, g0, ar, &s0) || (g1 - g0) / G > (*ar)->nslots - s0) return p->bk.ops->err_invalid;
  s1 = s0 + (g1 - g0) / G;
  for (uint64_t s = s0; s < s1; s++)
    if (!pt_bit((*ar)->bits, s)) return p->bk.ops->err_invalid;
  s0 = pt_head_of(*ar, s0);
  uint64_t last = pt_head_of(*ar, s1 - 1);
  s1 = last + (*ar)->hlen[last];
  out->start = b->addr;
  out->size = b->size;
  out->offset = b->addr - ((*ar)->base + s0 * G);
  out->gran = G;
  out->ngran = s1 - s0;
  *slot = s0;
  return 0;
}

int pt_pool_block_info(struct pt_pool *p, const void *ptr, struct pt_pool_block_info *out) {
  if (!ptr || !pt_pool_in_range(p, ptr)) return p->bk.ops->err_invalid;
  pthread_mutex_lock(&p->mu);
  struct pt_blk *b = block_holding(p, (uintptr_t)ptr);
  struct pt_arena *a;
  uint64_t s;
  int rc = b ? fill_info(p, b, out, &a, &s) : p->bk.ops->err_invalid;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int pt_pool_export(struct pt_pool *p, uintptr_t start, uint64_t size, uint64_t first, uint32_t max, int *fds,
                   uint32_t *lens, uint32_t *n) {
  const struct pt_backend_ops *ops = p->bk.ops;
  *n = 0;
  if (!ops->export_fd || !max) return ops->err_invalid;
  pthread_mutex_lock(&p->mu);
  int rc = ops->err_invalid;
  struct pt_blk *b = pt_ptrmap_get(&p->live, start);
  struct pt_pool_block_info in;
  struct pt_arena *a = NULL;
  uint64_t slot = 0;
  if (!b || b->size != size || fill_info(p, b, &in, &a, &slot)) goto out;
  /* first must be where a handle begins. */
  if (first >= in.ngran || !a->hlen[slot + first]) goto out;
  rc = 0;
  for (uint64_t s = slot + first; *n < max && s < slot + in.ngran; s += a->hlen[s]) {
    if ((rc = ops->export_fd(p->bk.ctx, a->handles[s], &fds[*n])) != 0) break;
    lens[(*n)++] = a->hlen[s];
  }
out:
  pthread_mutex_unlock(&p->mu);
  if (rc) {
    for (uint32_t i = 0; i < *n; i++) close(fds[i]);
    *n = 0;
  }
  return rc;
}
