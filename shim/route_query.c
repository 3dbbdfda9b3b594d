/* What the application asks of, or tells, the routing beyond alloc and
 * free: memory info under the limit, the attributes, trims and access of a
 * device's default memory pool, peer access, and IPC of pooled memory. */
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

/* ---- queries ------------------------------------------------------------- */

void pt_route_meminfo(enum pt_route_api api, size_t *free_bytes, size_t *total_bytes) {
  if ((!R.limit && !R.tier_info) || !R.pool_on || !free_bytes || !total_bytes) return;
  int dev = rt_route_device(api, PT_SM_SYNC, 0);
  struct pt_pool *pool = dev >= 0 ? rt_pool_get(dev) : NULL;
  if (!pool) return;
  /* PONYTAIL_HOST_TIER_INFO: the device's free memory less the reserve the
   * pool leaves free (a program that asks for all it is told is free then
   * gets it, the last of it from the tier): the real figure, before the
   * limit's view, since the reserve is about the device itself. */
  if (R.tier_info) *free_bytes = *free_bytes > R.tier_reserve ? *free_bytes - (size_t)R.tier_reserve : 0;
  if (R.limit) {
    struct pt_pool_usage u;
    pt_pool_usage(pool, &u);
    uint64_t used = u.physical_bytes + u.passthrough_bytes;
    uint64_t f = used < R.limit ? R.limit - used : 0;
    if (f < *free_bytes) *free_bytes = (size_t)f;
    *total_bytes = (size_t)R.limit;
  }
  /* And the tier as more memory of this device. */
  if (R.tier_info) {
    uint64_t room = pt_pool_tier_room(pool), theirs = pt_vmm_host_bytes(); /* PyTorch's share of the tier */
    *free_bytes += (size_t)(room > theirs ? room - theirs : 0);
    *total_bytes += (size_t)R.tier;
  }
}

/* The ordinal whose default pool mempool is, among devices with a pool. */
static struct pt_pool *pool_of_mempool(const void *mempool) {
  if (!mempool || !R.pool_on) return NULL;
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && (const void *)rt_default_pool(d) == mempool) return p;
  }
  return NULL;
}

void pt_route_poolattr(const void *mempool, int attr, void *value) {
  struct pt_pool *p = value ? pool_of_mempool(mempool) : NULL;
  if (!p) return;
  struct pt_pool_usage u;
  pt_pool_usage(p, &u);
  /* Current figures add exactly. High-water marks: the driver pool's high
   * plus ours is an upper bound of the combined high (they may not have
   * peaked at the same time); both restart when the application resets them
   * (pt_route_poolattr_set). */
  uint64_t add;
  switch (attr) {
  case cudaMemPoolAttrReservedMemCurrent: add = u.physical_bytes; break;
  case cudaMemPoolAttrReservedMemHigh: add = u.high_physical_bytes; break;
  case cudaMemPoolAttrUsedMemCurrent: add = u.live_bytes; break;
  case cudaMemPoolAttrUsedMemHigh: add = u.high_live_bytes; break;
  default: return;
  }
  *(uint64_t *)value += add;
}

void pt_route_poolattr_set(const void *mempool, int attr) {
  struct pt_pool *p = pool_of_mempool(mempool);
  if (!p) return;
  if (attr == cudaMemPoolAttrUsedMemHigh) pt_pool_reset_highs(p, true, false);
  else if (attr == cudaMemPoolAttrReservedMemHigh) pt_pool_reset_highs(p, false, true);
}

static void route_pool_trim(const void *mempool, size_t keep) {
  struct pt_pool *p = pool_of_mempool(mempool);
  if (p) (void)pt_pool_trim(p, keep);
}

void pt_route_pool_trim(const void *mempool, size_t keep) {
  struct pt_tblock *g = pt_gate_enter();
  route_pool_trim(mempool, keep);
  pt_gate_leave(g);
}

/* IPC on pooled memory (shim/ipc_internal.h has the scheme). The legacy handle
 * names a cudaMalloc allocation of the driver, which VMM-mapped memory is
 * not: with PONYTAIL_IPC=fd the pool's granules are exportable and the
 * handle is Ponytail's own; with off, the call is refused with
 * cudaErrorInvalidValue and a line saying how to keep such buffers out of the
 * pool. Never silent: every failure is returned and logged. */
static bool route_ipc_get(enum pt_route_api api, void *handle, const void *ptr, int *err) {
  struct pt_pool *pool = ptr ? pool_of_ptr(ptr) : NULL;
  if (!pool) return false;
  if (!R.ipc) {
    RC_INC(ipc_refusals);
    PT_LOG_ONCE(PT_LOG_WARN,
                "cudaIpcGetMemHandle(%p): pooled memory cannot be exported with PONYTAIL_IPC=off; returning "
                "cudaErrorInvalidValue. Run with PONYTAIL_IPC=fd, PONYTAIL_POOL=0, or PONYTAIL_KV_MIN above the "
                "size of the buffers shared between processes",
                ptr);
    *err = api == PT_API_RT ? cudaErrorInvalidValue : CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  uint64_t t0 = pt_now_ns();
  int rc = handle ? pt_ipc_export(pool, pt_pool_device(pool), ptr, handle) : CUDA_ERROR_INVALID_VALUE;
  RC_ADD(ipc_export_ns, pt_now_ns() - t0);
  if (rc) RC_INC(ipc_errors);
  else RC_INC(ipc_exports);
  *err = api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  return true;
}

bool pt_route_ipc_get(enum pt_route_api api, void *handle, const void *ptr, int *err) {
  struct pt_tblock *g = pt_gate_enter();
  bool r = route_ipc_get(api, handle, ptr, err);
  pt_gate_leave(g);
  return r;
}

static bool route_ipc_open(enum pt_route_api api, void **ptr, const void *handle, int *err) {
  if (!handle || !pt_ipc_handle_ours(handle)) return false;
  int rc = CUDA_ERROR_INVALID_CONTEXT, dev = -1;
  CUcontext ctx = NULL;
  /* The importing device: the current context's, else the runtime's. */
  if (have_driver() && pt_drv.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS) {
    if (ctx) {
      CUdevice d;
      if (pt_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS) dev = (int)d;
    } else if (api == PT_API_RT && (dev = rt_device()) >= 0) {
      ctx = rt_primary_of(dev, true);
    }
  }
  if (dev >= 0 && ctx) {
    uint64_t t0 = pt_now_ns();
    rc = pt_ipc_open(handle, ctx, dev, ptr);
    RC_ADD(ipc_open_ns, pt_now_ns() - t0);
  } else {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: no device or context to map a Ponytail handle into");
  }
  if (rc) RC_INC(ipc_errors);
  else RC_INC(ipc_opens);
  *err = api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  return true;
}

bool pt_route_ipc_open(enum pt_route_api api, void **ptr, const void *handle, int *err) {
  struct pt_tblock *g = pt_gate_enter();
  bool r = route_ipc_open(api, ptr, handle, err);
  pt_gate_leave(g);
  return r;
}

static bool route_ipc_close(void *ptr, int *err) {
  uint64_t t0 = pt_now_ns();
  if (!pt_ipc_close(ptr, err)) return false;
  RC_ADD(ipc_close_ns, pt_now_ns() - t0);
  RC_INC(ipc_closes);
  return true;
}

bool pt_route_ipc_close(void *ptr, int *err) {
  struct pt_tblock *g = pt_gate_enter();
  bool r = route_ipc_close(ptr, err);
  pt_gate_leave(g);
  return r;
}

static void route_peer_enabled(int device, int peer) {
  if (!R.pool_on || device < 0 || peer < 0 || device >= PT_ROUTE_MAX_DEV || peer >= PT_ROUTE_MAX_DEV ||
      device == peer)
    return;
  pthread_mutex_lock(&create_mu);
  devs[peer].accessors |= (uint64_t)1 << device;
  struct pt_pool *p = devs[peer].pool;
  pthread_mutex_unlock(&create_mu);
  RC_INC(peer_grants);
  if (p && pt_pool_grant_access(p, device)) {
    RC_INC(pool_errors);
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "could not grant device %d access to the pool of device %d", device, peer);
  }
}

void pt_route_peer_enabled(int device, int peer) {
  struct pt_tblock *g = pt_gate_enter();
  route_peer_enabled(device, peer);
  pt_gate_leave(g);
}

/* The device whose default pool mempool is, among all devices (with a pool
 * or not yet); -1 if none. */
static int device_of_default_mempool(const void *mempool) {
  CUdevice d;
  for (int dev = 0; dev < PT_ROUTE_MAX_DEV && pt_drv.cuDeviceGet(&d, dev) == CUDA_SUCCESS; dev++)
    if ((const void *)rt_default_pool(dev) == mempool) return dev;
  return -1;
}

static void route_pool_access(const void *mempool, const void *descs, size_t count) {
  if (!R.pool_on || !mempool || !descs || !have_driver() || !pt_drv.cuDeviceGet) return;
  int owner = device_of_default_mempool(mempool);
  if (owner < 0) return; /* an application pool: its allocations pass through */
  const CUmemAccessDesc *d = descs;
  for (size_t i = 0; i < count; i++) {
    if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;
    if (d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      PT_LOG_ONCE(PT_LOG_INFO,
                  "memory pool access of device %d to the default pool of device %d revoked: Ponytail's pool "
                  "keeps the access it granted",
                  d[i].location.id, owner);
      continue;
    }
    pt_route_peer_enabled(d[i].location.id, owner);
  }
}

void pt_route_pool_access(const void *mempool, const void *descs, size_t count) {
  struct pt_tblock *g = pt_gate_enter();
  route_pool_access(mempool, descs, count);
  pt_gate_leave(g);
}
