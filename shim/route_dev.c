/* Devices and contexts, and the per-device table devs[] with each device's
 * pool (created on first use, never freed) and its default memory pool.
 *
 * Contexts. Only primary contexts are routed: the pool's markers live in the
 * device's primary context and must be recorded on streams of that context.
 * A primary context is retained once per device, and only if it is already
 * active (cuDevicePrimaryCtxGetState), so that a process working on one GPU
 * never creates contexts on the others.
 *
 * The hot path's lookups in the table (pool_at, pool_of_ptr) are static
 * inline in route_internal.h. */
#include "shim/route_internal.h"
#include "shim/control.h"

struct pt_rdev devs[PT_ROUTE_MAX_DEV];
int ndev; /* 1 + the highest ordinal with a pool (atomic) */
pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- devices and contexts ----------------------------------------------- */

/* dev's primary context, retained once. Unless force, only when it is active
 * already (a context on another GPU is never created for a lookup). */
CUcontext rt_primary_of(int dev, bool force) {
  CUcontext c = __atomic_load_n(&devs[dev].primary, __ATOMIC_ACQUIRE);
  if (c) return c;
  CUdevice d;
  if (!pt_drv.cuDevicePrimaryCtxRetain || pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS) return NULL;
  if (!force && pt_drv.cuDevicePrimaryCtxGetState) {
    unsigned flags = 0;
    int active = 0;
    if (pt_drv.cuDevicePrimaryCtxGetState(d, &flags, &active) != CUDA_SUCCESS || !active) return NULL;
  }
  pthread_mutex_lock(&create_mu);
  c = devs[dev].primary;
  if (!c && pt_drv.cuDevicePrimaryCtxRetain(&c, d) == CUDA_SUCCESS)
    __atomic_store_n(&devs[dev].primary, c, __ATOMIC_RELEASE);
  else if (!devs[dev].primary)
    c = NULL;
  pthread_mutex_unlock(&create_mu);
  return c;
}

/* The device of any context (a known primary, else asked with it pushed). */
int rt_ctx_device(CUcontext c) {
  if (!c) return -1;
  for (int d = 0; d < PT_ROUTE_MAX_DEV; d++)
    if (__atomic_load_n(&devs[d].primary, __ATOMIC_ACQUIRE) == c) return d;
  CUdevice d = -1;
  CUcontext old;
  if (pt_drv.cuCtxPushCurrent(c) != CUDA_SUCCESS) return -1;
  CUresult r = pt_drv.cuCtxGetDevice(&d);
  (void)pt_drv.cuCtxPopCurrent(&old);
  return r == CUDA_SUCCESS && d >= 0 && d < PT_ROUTE_MAX_DEV ? (int)d : -1;
}

/* The runtime's current device (cudaGetDevice), -1 on failure. */
int rt_device(void) {
  typedef cudaError_t (*get_fn)(int *);
  get_fn get = (get_fn)pt_real(PT_SYM_cudaGetDevice);
  int d = -1;
  if (!get) return -1;
  cudaError_t e;
  PT_RT_CALL(e, get(&d));
  return e == cudaSuccess && d >= 0 && d < PT_ROUTE_MAX_DEV ? d : -1;
}

int pt_route_current_device(enum pt_route_api api) {
  if (!have_driver()) return -1;
  CUcontext cur = NULL;
  if (pt_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
  if (!cur) return api == PT_API_RT ? rt_device() : -1;
  CUdevice d;
  if (pt_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= PT_ROUTE_MAX_DEV) return -1;
  return (int)d;
}

int pt_route_ctx_device(void *ctx) { return have_driver() ? rt_ctx_device((CUcontext)ctx) : -1; }

CUmemoryPool rt_default_pool(int dev) {
  CUmemoryPool p = __atomic_load_n(&devs[dev].default_pool, __ATOMIC_ACQUIRE);
  CUdevice d;
  if (p || !pt_drv.cuDeviceGetDefaultMemPool || pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS) return p;
  if (pt_drv.cuDeviceGetDefaultMemPool(&p, d) != CUDA_SUCCESS) return NULL;
  __atomic_store_n(&devs[dev].default_pool, p, __ATOMIC_RELEASE);
  return p;
}

/* PONYTAIL_SLEEP_HOST's choices are the pool's sleep_host values. */
_Static_assert((int)PT_SLEEP_HOST_PINNED == (int)PT_SLEEP_IN_PINNED &&
                   (int)PT_SLEEP_HOST_HANDLES == (int)PT_SLEEP_IN_HANDLES &&
                   (int)PT_SLEEP_HOST_REGISTERED == (int)PT_SLEEP_IN_REGISTERED,
               "sleep_host values");

/* The pool of dev, created on first use; NULL when it cannot be. */
struct pt_pool *rt_pool_get(int dev) {
  struct pt_pool *p = pool_at(dev);
  if (p || __atomic_load_n(&devs[dev].failed, __ATOMIC_RELAXED)) return p;
  pthread_mutex_lock(&create_mu);
  if (!devs[dev].pool && !devs[dev].failed) {
    struct pt_backend bk;
    struct pt_pool_config cfg = {
      .keep_bytes = R.keep, .limit_bytes = R.limit, .chunk_bytes = R.chunk, .order_up = R.order_up,
      .tier_bytes = R.tier, .tier_reserve_bytes = R.tier_reserve, .tier_ask_twice = R.tier_retry,
      .sleep_host = pt_opt_enum(PT_OPT_SLEEP_HOST),
      .sleep_threads = (int)(pt_opt_size(PT_OPT_SLEEP_THREADS) > 64 ? 64 : pt_opt_size(PT_OPT_SLEEP_THREADS)),
      .sleep_reuse = pt_opt_bool(PT_OPT_SLEEP_REUSE)};
    /* The backend calls the driver through the shim's table, handed here
     * (the allocator includes nothing of the shim); NULL when it is absent. */
    int rc = pt_backend_vmm_create(&bk, dev, R.ipc ? PT_VMM_EXPORTABLE : 0,
                                   pt_real_driver() ? &pt_drv : NULL);
    if (!rc && (rc = pt_pool_create(bk, dev, &cfg, &p)) && bk.ops->destroy) bk.ops->destroy(bk.ctx);
    if (!rc) {
      for (int peer = 0; peer < PT_ROUTE_MAX_DEV; peer++)
        if ((devs[dev].accessors >> peer & 1) && pt_pool_grant_access(p, peer)) RC_INC(pool_errors);
      __atomic_store_n(&devs[dev].pool, p, __ATOMIC_RELEASE);
      if (__atomic_load_n(&ndev, __ATOMIC_RELAXED) <= dev) __atomic_store_n(&ndev, dev + 1, __ATOMIC_RELEASE);
      /* Info, not debug: with several GPUs the log then says which devices have a pool (issue 53). */
      pt_info("device %d: pool created (keep %" PRIu64 ", limit %" PRIu64 ", chunk %" PRIu64 ")", dev, R.keep,
               R.limit, R.chunk);
      pt_control_start(); /* a process with a pool can be put to sleep */
    } else {
      __atomic_store_n(&devs[dev].failed, 1, __ATOMIC_RELAXED);
      RC_INC(pool_errors);
      PT_INTERNAL_ERROR();
      pt_warn("device %d: no pool (CUDA error %d): its allocations pass through", dev, rc);
    }
  }
  p = devs[dev].pool;
  pthread_mutex_unlock(&create_mu);
  return p;
}

uint64_t rt_trim_all(void) {
  uint64_t n = 0;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) n += pt_pool_trim(p, 0);
  }
  return n;
}
