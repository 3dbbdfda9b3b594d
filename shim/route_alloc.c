/* Allocation routing: see route_alloc.h for what goes where. This file is
 * the hot path: the device an allocation or free is for, the capture check,
 * the pool's identity of a stream, the pool call or the pass-through call
 * (route_internal.h says which file holds the rest). Notes on the less
 * obvious choices:
 *
 * Streams. The pool orders reuse by stream identity. The legacy default
 * stream (0, or cudaStreamLegacy) is one identity (0). A per-thread default
 * stream (0 in a _ptsz entry point, or cudaStreamPerThread) is a different
 * stream on every thread behind one handle, so it cannot be an identity:
 * a free on it is recorded as a free on the legacy stream (work on the
 * legacy stream, e.g. the pool's marker, waits for all earlier work of every
 * blocking stream, per-thread default streams included), and an allocation on
 * it waits on the host for pending frees into its block, as a synchronous
 * allocation (cudaMalloc, cuMemAlloc) does, since any stream may then use it.
 *
 * Capture. An allocation on a stream being captured passes through (the
 * graph owns it) and is not counted against the limit. A pool block freed
 * while capturing is kept out of reuse for good: the free runs when the graph
 * is launched, which the pool cannot follow (counted: capture_deferred_frees).
 *
 * Limit: see route_passthrough.c. */
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

/* ---- errors ----------------------------------------------------------------
 * The runtime's codes were aligned with the driver's: every CUresult the pool
 * or the VMM backend returns has the cudaError_t of the same number (out of
 * memory 2, invalid value 1, not initialized 3, invalid device 101, invalid
 * context 201 = cudaErrorDeviceUninitialized, invalid handle 400, not
 * supported 801, unknown 999). Only a code the runtime lacks is mapped. */
int pt_route_rt_err(int cu) {
  switch (cu) {
  case CUDA_ERROR_NOT_MAPPED:
  case CUDA_ERROR_ALREADY_MAPPED:
  case CUDA_ERROR_NOT_MAPPED_AS_POINTER: return cudaErrorInvalidValue;
  default: return cu;
  }
}

/* ---- devices and contexts ----------------------------------------------- */

/* initial-exec: no __tls_get_addr call on the hot path (the shim is preloaded,
 * so its TLS is in the static block). */
static __thread CUcontext tls_ctx __attribute__((tls_model("initial-exec"))); /* last primary context seen */
static __thread int tls_dev __attribute__((tls_model("initial-exec")));

/* The device an allocation or free is for, or -1: pass it through. */
int rt_route_device(enum pt_route_api api, enum pt_route_smode sm, uint64_t stream) {
  if (!have_driver()) return -1;
  CUcontext cur = NULL;
  if (pt_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
  int dev;
  if (!cur) {
    /* No context on this thread: the runtime would use the primary context
     * of its current device; a driver call would fail. */
    if (api != PT_API_RT || (dev = rt_device()) < 0 || !(cur = rt_primary_of(dev, true))) return -1;
  } else if (cur == tls_ctx) {
    dev = tls_dev;
  } else {
    CUdevice d;
    if (pt_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= PT_ROUTE_MAX_DEV) return -1;
    if (rt_primary_of((int)d, false) != cur) return -1; /* a non-primary context */
    tls_ctx = cur;
    tls_dev = dev = (int)d;
  }
  if (sm != PT_SM_SYNC && explicit_stream(stream)) {
    CUcontext sc = NULL;
    if (!pt_drv.cuStreamGetCtx || pt_drv.cuStreamGetCtx((CUstream)(uintptr_t)stream, &sc) != CUDA_SUCCESS)
      return -1;
    if (sc != cur) {
      /* cudaMallocAsync allocates on the stream's device. */
      int d2 = rt_ctx_device(sc);
      if (d2 < 0 || rt_primary_of(d2, false) != sc) return -1;
      dev = d2;
    }
  }
  return dev;
}


/* See pt_route_capture_seen: no stream can be capturing before the first
 * begin-capture call, so until then the query (~25 ns per alloc and per free)
 * is skipped. Acquire pairs with the release below: a thread that sees the
 * flag also sees the capture's begin ordered before its own call. */
int capture_seen, mempool_set;

void pt_route_capture_seen(void) {
  if (!__atomic_load_n(&capture_seen, __ATOMIC_RELAXED)) __atomic_store_n(&capture_seen, 1, __ATOMIC_RELEASE);
}
void pt_route_mempool_set(void) {
  if (!__atomic_load_n(&mempool_set, __ATOMIC_RELAXED)) __atomic_store_n(&mempool_set, 1, __ATOMIC_RELEASE);
}

/* true: the stream is being captured, or that cannot be told (pass through). */
static bool capturing(enum pt_route_smode sm, uint64_t stream) {
  if (!__atomic_load_n(&capture_seen, __ATOMIC_ACQUIRE)) return false;
  if (!pt_drv.cuStreamIsCapturing) return true;
  uint64_t h = stream;
  if (!h && sm == PT_SM_PTSZ) h = PT_H_PER_THREAD;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (pt_drv.cuStreamIsCapturing((CUstream)(uintptr_t)h, &st) != CUDA_SUCCESS) return true;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The pool's identity of a stream (see the top of this file). *any: the
 * allocation must be usable by every stream. */
static uint64_t pool_stream(enum pt_route_smode sm, uint64_t s, bool *any) {
  *any = false;
  if (sm == PT_SM_SYNC) {
    *any = true;
    return 0;
  }
  if (s == PT_H_PER_THREAD || (!s && sm == PT_SM_PTSZ)) {
    *any = true;
    return 0;
  }
  return s == PT_H_LEGACY ? 0 : s;
}


/* An async allocation is routed only from the device's default pool: an
 * explicit or application-set pool may have properties (IPC export, access,
 * release threshold) the pool does not give. */
static bool default_pool_ok(int dev, enum pt_route_mpool mp, const void *mempool) {
  if (mp == PT_MP_NONE) return true;
  CUmemoryPool def = rt_default_pool(dev);
  if (!def) return false;
  if (mp == PT_MP_GIVEN) return mempool == (const void *)def;
  /* The current pool is the default one until a set-mempool call. */
  if (!__atomic_load_n(&mempool_set, __ATOMIC_ACQUIRE) || !pt_drv.cuDeviceGetMemPool) return true;
  CUmemoryPool cur = NULL;
  CUdevice d;
  if (pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS || pt_drv.cuDeviceGetMemPool(&cur, d) != CUDA_SUCCESS)
    return false;
  return cur == def;
}


void pt_route_stream_retire(uint64_t stream) {
  if (!explicit_stream(stream)) return;
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    int rc = p ? pt_pool_stream_retire(p, stream) : 0;
    if (rc) {
      /* The wait for the stream failed: the context is broken (sticky
       * error) and so will every later call on it be. */
      PT_INTERNAL_ERROR();
      PT_LOG_ONCE(PT_LOG_WARN, "retiring a destroyed stream failed with CUDA error %d", rc);
    }
  }
}


/* ---- allocation ---------------------------------------------------------- */

/* dev: the device if known, -1 to find it (only needed with a limit), -2
 * when it cannot be known. track: count it against the limit. */
static int pass_alloc(enum pt_route_api api, enum pt_route_smode sm, void **ptr, size_t size, uint64_t stream,
                      pt_route_real_alloc real, void *arg, int dev, bool track) {
  struct pt_pool *pool = NULL;
  if (track && R.limit && R.pool_on) {
    if (dev == -1) dev = rt_route_device(api, sm, stream);
    if (dev >= 0 && (pool = rt_pool_get(dev)) && !rt_limit_reserve(pool, size)) {
      RC_INC(passthrough_rejections);
      pt_debug("pass-through allocation of %zu bytes over PONYTAIL_MEM_LIMIT on device %d", size, dev);
      return PT_OOM;
    }
  }
  int r = real(arg, ptr);
  if (r == PT_OOM && __atomic_load_n(&ndev, __ATOMIC_ACQUIRE) && rt_trim_all()) {
    /* The device is full, maybe of our unused memory: give it back, retry once. */
    RC_INC(trim_retries);
    r = real(arg, ptr);
  }
  if (r != 0) {
    if (pool) pt_pool_note_passthrough(pool, -(int64_t)size);
    return r;
  }
  RC_INC(passthrough_allocs);
  if (pool && rt_ph_put(*ptr, size, dev)) {
    /* Cannot remember it: do not count it (its free would not uncount it). */
    pt_pool_note_passthrough(pool, -(int64_t)size);
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "out of memory tracking pass-through pointers: the limit undercounts");
  }
  pt_trace_alloc(R.trace, false, size, *ptr, stream);
  return 0;
}

static int internal_real(void *arg, void **ptr);

static int route_alloc(enum pt_route_api api, enum pt_route_smode sm, enum pt_route_mpool mp, const void *mempool,
                       void **ptr, size_t size, uint64_t stream, pt_route_real_alloc real, void *arg) {
  if (!ptr || !size || !R.pool_on || size < (sm == PT_SM_SYNC ? R.kv_min : R.kv_min_async))
    return pass_alloc(api, sm, ptr, size, stream, real, arg, -1, ptr != NULL);
  int dev = rt_route_device(api, sm, stream);
  if (dev < 0) return pass_alloc(api, sm, ptr, size, stream, real, arg, -2, false);
  if (sm != PT_SM_SYNC && capturing(sm, stream)) {
    RC_INC(capture_passthrough);
    return pass_alloc(api, sm, ptr, size, stream, real, arg, dev, false);
  }
  struct pt_pool *pool = default_pool_ok(dev, mp, mempool) ? rt_pool_get(dev) : NULL;
  if (!pool) return pass_alloc(api, sm, ptr, size, stream, real, arg, dev, true);
  bool any;
  uint64_t sid = pool_stream(sm, stream, &any);
  void *p = NULL;
  uint64_t tier0 = R.tier ? pt_pool_tier_bytes(pool) : 0;
  bool deferred = false;
  /* PONYTAIL_HOST_TIER_RETRY: only where a second ask will come, a program's
   * cudaMalloc outside graph capture (PyTorch empties its cache and asks again
   * only then); never the shim's own workspaces, which ask once. */
  bool retry = sm == PT_SM_SYNC && R.tier_retry && real != internal_real &&
               !(__atomic_load_n(&capture_seen, __ATOMIC_ACQUIRE) && pt_captures_open() > 0);
  int rc = !any ? pt_pool_alloc(pool, size, sid, &p)
                : retry ? pt_pool_alloc_any_retry(pool, size, &p, &deferred) : pt_pool_alloc_any(pool, size, &p);
  if (rc) {
    if (rc != PT_OOM) PT_LOG_ONCE(PT_LOG_WARN, "pool allocation failed with CUDA error %d (returned to the caller)", rc);
    else if (deferred)
      PT_LOG_ONCE(PT_LOG_INFO, "host tier: the first ask past device %d (%zu bytes) answered out-of-memory, so that "
                  "the program frees what it caches (PyTorch empties its cache and asks again); the same size asked "
                  "again within 5 s gets the tier (PONYTAIL_HOST_TIER_RETRY=0: the first ask)", dev, size);
    else if (R.tier)
      PT_LOG_ONCE(PT_LOG_WARN, "host tier: an allocation of %zu bytes on device %d fits neither the device nor the "
                  "tier (PONYTAIL_HOST_TIER=%" PRIu64 ", %" PRIu64 " in use, or host memory could not be pinned): "
                  "out of memory", size, dev, R.tier, pt_pool_tier_bytes(pool));
    return api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  }
  if (R.tier && pt_pool_tier_bytes(pool) > tier0) {
    PT_LOG_ONCE(PT_LOG_INFO, "host tier in use on device %d: allocations past the device are placed partly in host "
                "memory (slower to read); stats: tier_bytes", dev);
    pt_debug("host tier: %zu bytes at %p, %" PRIu64 " bytes of the tier in use", size, p, pt_pool_tier_bytes(pool));
  }
  *ptr = p;
  pt_trace_alloc(R.trace, true, size, p, stream);
  return 0;
}

/* Allocations and frees, pooled or passed through, wait at the gate while the
 * process sleeps (shim/gate.h): the pool's memory is then on the host or gone. */
int pt_route_alloc(enum pt_route_api api, enum pt_route_smode sm, enum pt_route_mpool mp, const void *mempool,
                   void **ptr, size_t size, uint64_t stream, pt_route_real_alloc real, void *arg) {
  struct pt_tblock *g = pt_gate_enter();
  int r = route_alloc(api, sm, mp, mempool, ptr, size, stream, real, arg);
  pt_gate_leave(g);
  return r;
}

static int route_free(enum pt_route_api api, enum pt_route_smode sm, void *ptr, uint64_t stream,
                      pt_route_real_free real, void *arg) {
  struct pt_pool *pool = ptr ? pool_of_ptr(ptr) : NULL;
  if (pool) {
    int rc;
    if (sm != PT_SM_SYNC && capturing(sm, stream)) {
      if (!pt_pool_owns(pool, ptr)) return api == PT_API_RT ? cudaErrorInvalidValue : CUDA_ERROR_INVALID_VALUE;
      RC_INC(capture_deferred_frees);
      PT_LOG_ONCE(PT_LOG_WARN, "a pooled block was freed during stream capture: it is kept, not reused");
      return 0;
    }
    /* Traced before the free: once freed, another thread may get the same
     * address, and its line must come after this one. */
    if (R.trace && pt_pool_owns(pool, ptr)) pt_trace_free(R.trace, true, ptr, stream);
    bool any;
    rc = sm == PT_SM_SYNC ? pt_pool_free_sync(pool, ptr) : pt_pool_free(pool, ptr, pool_stream(sm, stream, &any));
    if (rc == 0) pt_ipc_block_freed(ptr); /* its export record goes with it */
    if (rc == 0 && R.tier && (pt_pool_tier_bytes(pool) || pt_vmm_host_bytes()))
      pt_tier_kick(); /* room for the host's bytes? */
    /* cudaFree gives the memory back to the device, and programs rely on it:
     * a caching allocator above us (PyTorch's empty_cache, its out-of-memory
     * retry) frees synchronously exactly when it wants the memory released.
     * So a synchronous free does not wait for PONYTAIL_POOL_KEEP (which is for
     * stream-ordered churn): every wholly free handle goes back now. */
    if (rc == 0 && sm == PT_SM_SYNC) (void)pt_pool_trim(pool, 0);
    return api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  }
  if (ptr) pt_trace_free(R.trace, false, ptr, stream);
  int r = real(arg, ptr);
  if (r == 0 && ptr) {
    RC_INC(passthrough_frees);
    struct ph_ent e;
    if (R.limit && rt_ph_take(ptr, &e)) {
      struct pt_pool *p = pool_at(e.dev);
      if (p) pt_pool_note_passthrough(p, -(int64_t)e.size);
    }
  }
  return r;
}

int pt_route_free(enum pt_route_api api, enum pt_route_smode sm, void *ptr, uint64_t stream,
                  pt_route_real_free real, void *arg) {
  struct pt_tblock *g = pt_gate_enter();
  int r = route_free(api, sm, ptr, stream, real, arg);
  pt_gate_leave(g);
  return r;
}

/* ---- the shim's own allocations ------------------------------------------ */

/* The real call: pt_drv's cuMemAlloc_v2, resolved from libcuda itself, so it
 * never re-enters the shim's exported cuMemAlloc_v2 (which would count the
 * call as the application's and route it a second time). */
static int internal_real(void *arg, void **ptr) {
  size_t size = *(const size_t *)arg;
  if (!pt_drv.cuMemAlloc) return CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr d = 0;
  CUresult r = pt_drv.cuMemAlloc(&d, size);
  if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
  return (int)r;
}

int pt_route_internal_alloc(void **ptr, size_t size) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  if (!pt_real_driver()) return CUDA_ERROR_NOT_INITIALIZED;
  int r = pt_route_alloc(PT_API_DRV, PT_SM_SYNC, PT_MP_NONE, NULL, ptr, size, 0, internal_real, &size);
  if (r == 0) {
    RC_INC(internal_allocs);
    RC_ADD(internal_bytes, size);
  }
  return r;
}

bool pt_route_is_pooled(const void *p) {
  struct pt_pool *pool = p ? pool_of_ptr(p) : NULL;
  return pool && pt_pool_owns(pool, p);
}
