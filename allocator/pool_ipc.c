/* Export of pooled blocks: see pool_ipc.h. */
#include "allocator/pool_ipc.h"

#include <unistd.h>
#include "allocator/pool_internal.h"

/* The live block holding ptr. Block starts are in the live map; an interior
 * pointer (rare: cudaIpcGetMemHandle is normally given an allocation's base)
 * is found by a scan of the live blocks. Under the pool's mutex. */
static struct pt_blk *block_holding(struct pt_pool *p, uintptr_t a) {
  struct pt_blk *b = pt_ptrmap_get(&p->live, a);
  if (b) return b;
  for (uint64_t i = 0; i < p->live.cap; i++) {
    struct pt_blk *c = p->live.keys[i] ? p->live.vals[i] : NULL;
    if (c && a - c->addr < c->size) return c;
  }
  return NULL;
}

static void fill_info(const struct pt_pool *p, const struct pt_blk *b, struct pt_pool_block_info *out) {
  uintptr_t g0 = b->addr & ~(uintptr_t)(p->gran - 1);
  uintptr_t g1 = (b->addr + b->size + p->gran - 1) & ~(uintptr_t)(p->gran - 1);
  out->start = b->addr;
  out->size = b->size;
  out->offset = b->addr - g0;
  out->gran = p->gran;
  out->ngran = (g1 - g0) / p->gran;
}

int pt_pool_block_info(struct pt_pool *p, const void *ptr, struct pt_pool_block_info *out) {
  if (!ptr || !pt_pool_in_range(p, ptr)) return p->bk.ops->err_invalid;
  pthread_mutex_lock(&p->mu);
  struct pt_blk *b = block_holding(p, (uintptr_t)ptr);
  if (b) fill_info(p, b, out);
  pthread_mutex_unlock(&p->mu);
  return b ? 0 : p->bk.ops->err_invalid;
}

int pt_pool_export(struct pt_pool *p, uintptr_t start, uint64_t size, uint64_t first, uint64_t count, int *fds) {
  const struct pt_backend_ops *ops = p->bk.ops;
  if (!ops->export_fd || !count) return ops->err_invalid;
  pthread_mutex_lock(&p->mu);
  int rc = ops->err_invalid;
  struct pt_blk *b = pt_ptrmap_get(&p->live, start);
  struct pt_pool_block_info in;
  struct pt_arena *a = NULL;
  uint64_t slot = 0, done = 0;
  if (!b || b->size != size) goto out;
  fill_info(p, b, &in);
  if (first >= in.ngran || count > in.ngran - first) goto out;
  /* A live block's granules are mapped and stay so while it lives: neither
   * stitching nor trimming touches a granule under a live block. */
  if (pt_arena_slot(p, in.start - in.offset, &a, &slot) || slot + in.ngran > a->nslots) goto out;
  for (; done < count; done++) {
    uint64_t s = slot + first + done;
    if (!pt_bit(a->bits, s)) {
      rc = ops->err_invalid;
      break;
    }
    if ((rc = ops->export_fd(p->bk.ctx, a->handles[s], &fds[done])) != 0) break;
  }
  if (done == count) rc = 0;
out:
  pthread_mutex_unlock(&p->mu);
  if (rc)
    for (uint64_t i = 0; i < done; i++) close(fds[i]);
  return rc;
}
