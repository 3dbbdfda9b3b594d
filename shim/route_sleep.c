/* Sleep and wake of every device's pool, for shim/sleep.c (issue 50). The
 * caller has closed the gate (shim/gate.h): no application call touches a
 * pool meanwhile. Several pools sleep or wake all together or not at all. */
#include "shim/route_internal.h"
#include "shim/route_sleep.h"
#include "shim/route_vmm.h"

static void add_info(struct pt_pool_sleep_info *s, const struct pt_pool_sleep_info *i) {
  s->handles += i->handles;
  s->bytes += i->bytes;
  s->copied_bytes += i->copied_bytes;
  s->trimmed_bytes += i->trimmed_bytes;
  s->reused_bytes += i->reused_bytes;
  s->copy_ns += i->copy_ns;
  s->map_ns += i->map_ns;
  s->host_ns += i->host_ns;
}

/* Pushes dev's primary context for a driver call on the control thread. */
static bool push(int dev) {
  CUcontext c = __atomic_load_n(&devs[dev].primary, __ATOMIC_ACQUIRE);
  return c && pt_drv.cuCtxPushCurrent && pt_drv.cuCtxPushCurrent(c) == CUDA_SUCCESS;
}

static void pop(void) {
  CUcontext old;
  (void)pt_drv.cuCtxPopCurrent(&old);
}

/* Device d's free and total memory from the driver, in d's context: 0, or -1
 * (no driver entry, no context, or the query failed). */
static int dev_meminfo(int d, size_t *fr, size_t *tot) {
  int rc = -1;
  if (pt_drv.cuMemGetInfo && push(d)) {
    if (pt_drv.cuMemGetInfo(fr, tot) == CUDA_SUCCESS) rc = 0;
    pop();
  }
  return rc;
}

void pt_route_sleep_figures(struct pt_route_sleep_figures *f) {
  memset(f, 0, sizeof *f);
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (!p) continue;
    struct pt_pool_usage u;
    pt_pool_usage(p, &u);
    f->pools++;
    f->physical_bytes += u.physical_bytes;
    f->live_bytes += u.live_bytes;
    f->tier_bytes += pt_pool_tier_bytes(p);
    if (pt_pool_asleep(p)) f->asleep_pools++;
    size_t fr = 0, tot = 0;
    if (!dev_meminfo(d, &fr, &tot)) {
      f->device_used_bytes += tot - fr;
      f->device_total_bytes += tot;
    }
  }
  uint64_t a = __atomic_load_n(&rc_.passthrough_allocs, __ATOMIC_RELAXED);
  uint64_t fr = __atomic_load_n(&rc_.passthrough_frees, __ATOMIC_RELAXED);
  f->passthrough_live = a > fr ? a - fr : 0;
  f->ipc_exports_live = pt_ipc_live_exports();
  struct pt_vmm_figures v;
  pt_vmm_figures(&v);
  f->torch_handles = v.handles;
  f->torch_bytes = v.device_bytes;
  f->torch_host_bytes = v.host_bytes;
  f->torch_exported = v.exported;
}

int pt_route_sleep(bool discard, struct pt_pool_sleep_info *sum, int *failed_dev) {
  memset(sum, 0, sizeof *sum);
  *failed_dev = -1;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  /* Every device idle first: a kernel on one may read another's pool. */
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    int rc = p ? pt_pool_drain(p) : 0;
    if (rc) {
      *failed_dev = d;
      return rc;
    }
  }
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (!p) continue;
    struct pt_pool_sleep_info i;
    int rc = pt_pool_sleep(p, discard, &i);
    if (rc) {
      *failed_dev = d;
      /* The pools already asleep wake again: their memory was just freed. */
      for (int e = 0; e < d; e++) {
        struct pt_pool *q = pool_at(e);
        if (q && pt_pool_wake(q, NULL)) {
          RC_INC(pool_errors);
          pt_warn("sleep: device %d failed, and device %d could not be woken again", d, e);
        }
      }
      return rc;
    }
    add_info(sum, &i);
  }
  return 0;
}

int pt_route_sleep_prepare(struct pt_pool_sleep_info *sum, int *failed_dev) {
  memset(sum, 0, sizeof *sum);
  *failed_dev = -1;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (!p) continue;
    struct pt_pool_sleep_info i;
    int rc = pt_pool_sleep_prepare(p, &i);
    if (rc) {
      *failed_dev = d;
      return rc;
    }
    add_info(sum, &i);
  }
  return 0;
}

uint64_t pt_route_sleep_unprepare(void) {
  uint64_t bytes = 0;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) bytes += pt_pool_sleep_unprepare(p);
  }
  return bytes;
}

int pt_route_wake(struct pt_pool_sleep_info *sum, int *failed_dev) {
  memset(sum, 0, sizeof *sum);
  *failed_dev = -1;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE), rc = 0, d;
  /* Each pool mapped and filled (the two overlap with PONYTAIL_SLEEP_THREADS
   * > 1); if one device is full, the pools already filled are unmapped again
   * and none wakes. */
  for (d = 0; d < nd && !rc; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && pt_pool_asleep(p)) rc = pt_pool_wake_fill(p, sum);
  }
  if (rc) {
    *failed_dev = d - 1;
    for (int e = 0; e < nd; e++) {
      struct pt_pool *p = pool_at(e);
      if (p) pt_pool_wake_undo(p);
    }
    sum->copied_bytes = 0;
    return rc;
  }
  for (d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) pt_pool_wake_finish(p, sum);
  }
  return 0;
}

void pt_route_wake_release(struct pt_pool_sleep_info *sum) {
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) pt_pool_release_kept(p, sum);
  }
}

int pt_route_tier_promote(uint64_t *moved, uint64_t *left) {
  *moved = *left = 0;
  RC_INC(tier_holds); /* the mover runs this with the process held */
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE), rc = 0;
  for (int d = 0; d < nd && !rc; d++) { /* a kernel on one device may read another's pool */
    struct pt_pool *p = pool_at(d);
    if (p && pt_pool_tier_bytes(p)) rc = pt_pool_drain(p);
  }
  for (int d = 0; d < nd && !rc; d++) {
    struct pt_pool *p = pool_at(d);
    uint64_t m = 0;
    if (!p || !pt_pool_tier_bytes(p)) continue;
    rc = pt_pool_tier_promote(p, 0, &m);
    *moved += m;
  }
  /* Then PyTorch's own mapped memory (expandable segments). */
  uint64_t m = 0;
  if (!rc) rc = pt_vmm_promote(&m);
  *moved += m;
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) *left += pt_pool_tier_bytes(p);
  }
  *left += pt_vmm_host_bytes();
  return rc;
}

bool pt_route_tier_room(void) {
  /* Room for the smallest host handle, else the move would hold the process
   * (and drain the device) every retry to move nothing. */
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && pt_pool_tier_bytes(p) && pt_pool_tier_movable(p)) return true;
  }
  return pt_vmm_tier_room();
}
