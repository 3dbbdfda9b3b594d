/* Allocation entry points, runtime and driver. Each function has ONE marked
 * place, "ROUTE:", where the routing layer (shim/route_alloc.h: pool routing,
 * memory limit, capped cudaMemGetInfo, pool attributes, IPC of pooled memory,
 * peer access) takes its decision; everything before it is bookkeeping that
 * must stay as is. The real calls are made here, through small adapters, so
 * that runtime calls keep pt_tls_in_rt set around them.
 *
 * Driver wrappers reached from inside a runtime call (pt_tls_in_rt: libcudart
 * implements cudaMalloc with the driver functions it got from
 * cuGetProcAddress, i.e. with these wrappers) are counted but never routed:
 * the runtime entry point already took the decision for that allocation. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "shim/route_alloc.h"
#include "shim/shim.h"

typedef cudaError_t (*pt_malloc_fn)(void **, size_t);
typedef cudaError_t (*pt_free_fn)(void *);
typedef cudaError_t (*pt_malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*pt_free_async_fn)(void *, cudaStream_t);
typedef cudaError_t (*pt_malloc_pool_fn)(void **, size_t, cudaMemPool_t, cudaStream_t);
typedef cudaError_t (*pt_meminfo_fn)(size_t *, size_t *);
typedef cudaError_t (*pt_poolattr_fn)(cudaMemPool_t, enum cudaMemPoolAttr, void *);
typedef cudaError_t (*pt_ipc_get_fn)(cudaIpcMemHandle_t *, void *);
typedef cudaError_t (*pt_ipc_open_fn)(void **, cudaIpcMemHandle_t, unsigned int);
typedef cudaError_t (*pt_ipc_close_fn)(void *);
typedef cudaError_t (*pt_peer_fn)(int, unsigned int);
typedef cudaError_t (*pt_trim_fn)(cudaMemPool_t, size_t);
typedef cudaError_t (*pt_pool_access_fn)(cudaMemPool_t, const struct cudaMemAccessDesc *, size_t);

/* ---- adapters: the real call behind the routing layer's callbacks -------- */
struct pt_rt_alloc_args {
  void *fn;
  size_t size;
  cudaStream_t s;
  cudaMemPool_t pool;
};
static int pt_rt_malloc_real(void *a, void **ptr) {
  struct pt_rt_alloc_args *x = a;
  cudaError_t r;
  PT_RT_CALL(r, ((pt_malloc_fn)x->fn)(ptr, x->size));
  return r;
}
static int pt_rt_malloc_async_real(void *a, void **ptr) {
  struct pt_rt_alloc_args *x = a;
  cudaError_t r;
  PT_RT_CALL(r, ((pt_malloc_async_fn)x->fn)(ptr, x->size, x->s));
  return r;
}
static int pt_rt_malloc_pool_real(void *a, void **ptr) {
  struct pt_rt_alloc_args *x = a;
  cudaError_t r;
  PT_RT_CALL(r, ((pt_malloc_pool_fn)x->fn)(ptr, x->size, x->pool, x->s));
  return r;
}
static int pt_rt_free_real(void *a, void *ptr) {
  cudaError_t r;
  PT_RT_CALL(r, ((pt_free_fn)a)(ptr));
  return r;
}
struct pt_rt_free_args {
  void *fn;
  cudaStream_t s;
};
static int pt_rt_free_async_real(void *a, void *ptr) {
  struct pt_rt_free_args *x = a;
  cudaError_t r;
  PT_RT_CALL(r, ((pt_free_async_fn)x->fn)(ptr, x->s));
  return r;
}
struct pt_cu_alloc_args {
  void *fn;
  size_t size;
  CUstream s;
};
static int pt_cu_alloc_real(void *a, void **ptr) {
  struct pt_cu_alloc_args *x = a;
  return ((PFN_cuMemAlloc_v3020)x->fn)((CUdeviceptr *)ptr, x->size);
}
static int pt_cu_alloc_async_real(void *a, void **ptr) {
  struct pt_cu_alloc_args *x = a;
  return ((PFN_cuMemAllocAsync_v11020)x->fn)((CUdeviceptr *)ptr, x->size, x->s);
}
static int pt_cu_free_real(void *a, void *ptr) { return ((PFN_cuMemFree_v3020)a)((CUdeviceptr)ptr); }
struct pt_cu_free_args {
  void *fn;
  CUstream s;
};
static int pt_cu_free_async_real(void *a, void *ptr) {
  struct pt_cu_free_args *x = a;
  return ((PFN_cuMemFreeAsync_v11020)x->fn)((CUdeviceptr)ptr, x->s);
}

/* ---- runtime ------------------------------------------------------------- */

PT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
  pt_malloc_fn real = PT_REAL(cudaMalloc, pt_malloc_fn);
  if (!pt_active()) return real ? real(devPtr, size) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMalloc);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: pool (size >= PONYTAIL_KV_MIN) or pass through; limit check. */
  struct pt_rt_alloc_args a = {.fn = (void *)real, .size = size};
  return (cudaError_t)pt_route_alloc(PT_API_RT, PT_SM_SYNC, PT_MP_NONE, NULL, devPtr, size, 0, pt_rt_malloc_real, &a);
}

PT_EXPORT cudaError_t cudaFree(void *devPtr) {
  pt_free_fn real = PT_REAL(cudaFree, pt_free_fn);
  if (!pt_active()) return real ? real(devPtr) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaFree);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: a pooled pointer goes back to the pool; others pass through. */
  return (cudaError_t)pt_route_free(PT_API_RT, PT_SM_SYNC, devPtr, 0, pt_rt_free_real, (void *)real);
}

static inline cudaError_t pt_malloc_async(enum pt_sym sym, void **devPtr, size_t size, cudaStream_t s) {
  pt_malloc_async_fn real = (pt_malloc_async_fn)pt_real(sym);
  if (!pt_active()) return real ? real(devPtr, size, s) : cudaErrorInsufficientDriver;
  pt_count_call(sym);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: stream-ordered pool allocation or pass through. */
  struct pt_rt_alloc_args a = {.fn = (void *)real, .size = size, .s = s};
  return (cudaError_t)pt_route_alloc(PT_API_RT, sym == PT_SYM_cudaMallocAsync_ptsz ? PT_SM_PTSZ : PT_SM_LEGACY,
                                     PT_MP_CURRENT, NULL, devPtr, size, (uint64_t)(uintptr_t)s,
                                     pt_rt_malloc_async_real, &a);
}

PT_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  return pt_malloc_async(PT_SYM_cudaMallocAsync, devPtr, size, hStream);
}
PT_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream) {
  return pt_malloc_async(PT_SYM_cudaMallocAsync_ptsz, devPtr, size, hStream);
}

static inline cudaError_t pt_free_async(enum pt_sym sym, void *devPtr, cudaStream_t s) {
  pt_free_async_fn real = (pt_free_async_fn)pt_real(sym);
  if (!pt_active()) return real ? real(devPtr, s) : cudaErrorInsufficientDriver;
  pt_count_call(sym);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: stream-ordered free of a pooled pointer, or pass through. */
  struct pt_rt_free_args a = {.fn = (void *)real, .s = s};
  return (cudaError_t)pt_route_free(PT_API_RT, sym == PT_SYM_cudaFreeAsync_ptsz ? PT_SM_PTSZ : PT_SM_LEGACY, devPtr,
                                    (uint64_t)(uintptr_t)s, pt_rt_free_async_real, &a);
}

PT_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  return pt_free_async(PT_SYM_cudaFreeAsync, devPtr, hStream);
}
PT_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream) {
  return pt_free_async(PT_SYM_cudaFreeAsync_ptsz, devPtr, hStream);
}

static inline cudaError_t pt_malloc_pool(enum pt_sym sym, void **ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t s) {
  pt_malloc_pool_fn real = (pt_malloc_pool_fn)pt_real(sym);
  if (!pt_active()) return real ? real(ptr, size, pool, s) : cudaErrorInsufficientDriver;
  pt_count_call(sym);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: only the device's default pool is adopted; others pass through. */
  struct pt_rt_alloc_args a = {.fn = (void *)real, .size = size, .s = s, .pool = pool};
  return (cudaError_t)pt_route_alloc(PT_API_RT,
                                     sym == PT_SYM_cudaMallocFromPoolAsync_ptsz ? PT_SM_PTSZ : PT_SM_LEGACY,
                                     PT_MP_GIVEN, pool, ptr, size,
                                     (uint64_t)(uintptr_t)s, pt_rt_malloc_pool_real, &a);
}

PT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return pt_malloc_pool(PT_SYM_cudaMallocFromPoolAsync, ptr, size, memPool, stream);
}
PT_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                   cudaStream_t stream) {
  return pt_malloc_pool(PT_SYM_cudaMallocFromPoolAsync_ptsz, ptr, size, memPool, stream);
}

PT_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  pt_meminfo_fn real = PT_REAL(cudaMemGetInfo, pt_meminfo_fn);
  if (!pt_active()) return real ? real(free, total) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMemGetInfo);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(free, total));
  /* ROUTE: adjust free/total for the pool's cached memory and PONYTAIL_MEM_LIMIT. */
  if (r == cudaSuccess) pt_route_meminfo(PT_API_RT, free, total);
  return r;
}

PT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
  pt_poolattr_fn real = PT_REAL(cudaMemPoolGetAttribute, pt_poolattr_fn);
  if (!pt_active()) return real ? real(memPool, attr, value) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMemPoolGetAttribute);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(memPool, attr, value));
  /* ROUTE: add the pool's figures to the default pool's used/reserved attributes. */
  if (r == cudaSuccess) pt_route_poolattr(memPool, (int)attr, value);
  return r;
}

PT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
  pt_poolattr_fn real = PT_REAL(cudaMemPoolSetAttribute, pt_poolattr_fn);
  if (!pt_active()) return real ? real(memPool, attr, value) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMemPoolSetAttribute);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(memPool, attr, value));
  /* ROUTE: a reset of the default pool's highs restarts the pool's too. */
  if (r == cudaSuccess) pt_route_poolattr_set(memPool, (int)attr);
  return r;
}

PT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  pt_ipc_get_fn real = PT_REAL(cudaIpcGetMemHandle, pt_ipc_get_fn);
  if (!pt_active()) return real ? real(handle, devPtr) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaIpcGetMemHandle);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: a pooled pointer gets Ponytail's handle (exported granules). */
  int err;
  if (pt_route_ipc_get(PT_API_RT, handle, devPtr, &err)) return (cudaError_t)err;
  cudaError_t r;
  PT_RT_CALL(r, real(handle, devPtr));
  return r;
}

PT_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  pt_ipc_open_fn real = PT_REAL(cudaIpcOpenMemHandle, pt_ipc_open_fn);
  if (!pt_active()) return real ? real(devPtr, handle, flags) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaIpcOpenMemHandle);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: handles exported from a pool are opened by the allocator. */
  int err;
  if (pt_route_ipc_open(PT_API_RT, devPtr, &handle, &err)) return (cudaError_t)err;
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr, handle, flags));
  return r;
}

PT_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  pt_ipc_close_fn real = PT_REAL(cudaIpcCloseMemHandle, pt_ipc_close_fn);
  if (!pt_active()) return real ? real(devPtr) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaIpcCloseMemHandle);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: close what the allocator opened. */
  int err;
  if (pt_route_ipc_close(devPtr, &err)) return (cudaError_t)err;
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr));
  return r;
}

PT_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  pt_peer_fn real = PT_REAL(cudaDeviceEnablePeerAccess, pt_peer_fn);
  if (!pt_active()) return real ? real(peerDevice, flags) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaDeviceEnablePeerAccess);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(peerDevice, flags));
  /* ROUTE: on success, grant the peer access to the pool's mappings too. */
  if (r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled)
    pt_route_peer_enabled(pt_route_current_device(PT_API_RT), peerDevice);
  return r;
}

PT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  pt_trim_fn real = PT_REAL(cudaMemPoolTrimTo, pt_trim_fn);
  if (!pt_active()) return real ? real(memPool, minBytesToKeep) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMemPoolTrimTo);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(memPool, minBytesToKeep));
  /* ROUTE: trimming the default pool trims ours too. */
  if (r == cudaSuccess) pt_route_pool_trim(memPool, minBytesToKeep);
  return r;
}

PT_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                           size_t count) {
  pt_pool_access_fn real = PT_REAL(cudaMemPoolSetAccess, pt_pool_access_fn);
  if (!pt_active()) return real ? real(memPool, descList, count) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMemPoolSetAccess);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  PT_RT_CALL(r, real(memPool, descList, count));
  /* ROUTE: access to a default pool extends to the pool that now holds its
   * allocations. The runtime's descriptor has the driver's layout and values. */
  _Static_assert(sizeof(struct cudaMemAccessDesc) == sizeof(CUmemAccessDesc), "same layout");
  if (r == cudaSuccess) pt_route_pool_access(memPool, descList, count);
  return r;
}

/* ---- driver -------------------------------------------------------------- */

PT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  PFN_cuMemAlloc_v3020 real = PT_REAL(cuMemAlloc_v2, PFN_cuMemAlloc_v3020);
  if (!pt_active()) return real ? real(dptr, bytesize) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuMemAlloc_v2);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: driver allocation from the application (not via libcudart). */
    struct pt_cu_alloc_args a = {.fn = (void *)real, .size = bytesize};
    return (CUresult)pt_route_alloc(PT_API_DRV, PT_SM_SYNC, PT_MP_NONE, NULL, (void **)dptr, bytesize, 0,
                                    pt_cu_alloc_real, &a);
  }
  return real(dptr, bytesize);
}

PT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  PFN_cuMemFree_v3020 real = PT_REAL(cuMemFree_v2, PFN_cuMemFree_v3020);
  if (!pt_active()) return real ? real(dptr) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuMemFree_v2);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: free of a pooled pointer. */
    return (CUresult)pt_route_free(PT_API_DRV, PT_SM_SYNC, (void *)dptr, 0, pt_cu_free_real, (void *)real);
  }
  return real(dptr);
}

static inline CUresult pt_cu_alloc_async(enum pt_sym sym, CUdeviceptr *dptr, size_t bytesize, CUstream s) {
  PFN_cuMemAllocAsync_v11020 real = (PFN_cuMemAllocAsync_v11020)pt_real(sym);
  if (!pt_active()) return real ? real(dptr, bytesize, s) : PT_DRV_NO_DRIVER;
  pt_count_call(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: stream-ordered driver allocation from the application. */
    struct pt_cu_alloc_args a = {.fn = (void *)real, .size = bytesize, .s = s};
    return (CUresult)pt_route_alloc(PT_API_DRV, sym == PT_SYM_cuMemAllocAsync_ptsz ? PT_SM_PTSZ : PT_SM_LEGACY,
                                    PT_MP_CURRENT, NULL, (void **)dptr, bytesize, (uint64_t)(uintptr_t)s,
                                    pt_cu_alloc_async_real, &a);
  }
  return real(dptr, bytesize, s);
}

PT_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return pt_cu_alloc_async(PT_SYM_cuMemAllocAsync, dptr, bytesize, hStream);
}
PT_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return pt_cu_alloc_async(PT_SYM_cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}

static inline CUresult pt_cu_free_async(enum pt_sym sym, CUdeviceptr dptr, CUstream s) {
  PFN_cuMemFreeAsync_v11020 real = (PFN_cuMemFreeAsync_v11020)pt_real(sym);
  if (!pt_active()) return real ? real(dptr, s) : PT_DRV_NO_DRIVER;
  pt_count_call(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: stream-ordered free of a pooled pointer. */
    struct pt_cu_free_args a = {.fn = (void *)real, .s = s};
    return (CUresult)pt_route_free(PT_API_DRV, sym == PT_SYM_cuMemFreeAsync_ptsz ? PT_SM_PTSZ : PT_SM_LEGACY,
                                   (void *)dptr, (uint64_t)(uintptr_t)s, pt_cu_free_async_real, &a);
  }
  return real(dptr, s);
}

PT_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return pt_cu_free_async(PT_SYM_cuMemFreeAsync, dptr, hStream);
}
PT_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return pt_cu_free_async(PT_SYM_cuMemFreeAsync_ptsz, dptr, hStream);
}

PT_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  PFN_cuMemGetInfo_v3020 real = PT_REAL(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020);
  if (!pt_active()) return real ? real(free, total) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuMemGetInfo_v2);
  if (!real) return PT_DRV_NO_DRIVER;
  CUresult r = real(free, total);
  if (!pt_tls_in_rt && r == CUDA_SUCCESS) {
    /* ROUTE: the capped / pool-adjusted view, as for cudaMemGetInfo. */
    pt_route_meminfo(PT_API_DRV, free, total);
  }
  return r;
}

PT_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  PFN_cuCtxEnablePeerAccess_v4000 real = PT_REAL(cuCtxEnablePeerAccess, PFN_cuCtxEnablePeerAccess_v4000);
  if (!pt_active()) return real ? real(peerContext, Flags) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuCtxEnablePeerAccess);
  if (!real) return PT_DRV_NO_DRIVER;
  CUresult r = real(peerContext, Flags);
  if (!pt_tls_in_rt && (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) {
    /* ROUTE: the current context's device may now access the peer's memory,
     * pooled memory included (the runtime's enable is handled above). */
    pt_route_peer_enabled(pt_route_current_device(PT_API_DRV), pt_route_ctx_device(peerContext));
  }
  return r;
}

/* The driver's IPC on pooled memory: the same routing as the runtime's (which
 * reaches these with pt_tls_in_rt set after it has handled its own). */
PT_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  PFN_cuIpcGetMemHandle_v4010 real = PT_REAL(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle_v4010);
  if (!pt_active()) return real ? real(pHandle, dptr) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuIpcGetMemHandle);
  if (!real) return PT_DRV_NO_DRIVER;
  /* ROUTE: a pooled pointer gets Ponytail's handle (exported granules). */
  int err;
  if (!pt_tls_in_rt && pt_route_ipc_get(PT_API_DRV, pHandle, (const void *)(uintptr_t)dptr, &err))
    return (CUresult)err;
  return real(pHandle, dptr);
}

static CUresult pt_cu_ipc_open(enum pt_sym sym, CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags) {
  PFN_cuIpcOpenMemHandle_v11000 real = (PFN_cuIpcOpenMemHandle_v11000)pt_real(sym);
  if (!pt_active()) return real ? real(pdptr, handle, flags) : PT_DRV_NO_DRIVER;
  pt_count_call(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  /* ROUTE: handles exported from a pool are opened by the allocator. */
  int err;
  void *p = NULL;
  if (!pt_tls_in_rt && pt_route_ipc_open(PT_API_DRV, &p, &handle, &err)) {
    if (pdptr && !err) *pdptr = (CUdeviceptr)(uintptr_t)p;
    return (CUresult)err;
  }
  return real(pdptr, handle, flags);
}
/* The 4.1 symbol and the 11.0 one have one ABI. */
PT_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return pt_cu_ipc_open(PT_SYM_cuIpcOpenMemHandle, pdptr, handle, Flags);
}
PT_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return pt_cu_ipc_open(PT_SYM_cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

PT_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  PFN_cuIpcCloseMemHandle_v4010 real = PT_REAL(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle_v4010);
  if (!pt_active()) return real ? real(dptr) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuIpcCloseMemHandle);
  if (!real) return PT_DRV_NO_DRIVER;
  /* ROUTE: close what the allocator opened. */
  int err;
  if (!pt_tls_in_rt && pt_route_ipc_close((void *)(uintptr_t)dptr, &err)) return (CUresult)err;
  return real(dptr);
}

PT_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
  PFN_cuMemPoolSetAccess_v11020 real = PT_REAL(cuMemPoolSetAccess, PFN_cuMemPoolSetAccess_v11020);
  if (!pt_active()) return real ? real(pool, map, count) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuMemPoolSetAccess);
  if (!real) return PT_DRV_NO_DRIVER;
  CUresult r = real(pool, map, count);
  /* ROUTE: as cudaMemPoolSetAccess (which reaches here with pt_tls_in_rt). */
  if (!pt_tls_in_rt && r == CUDA_SUCCESS) pt_route_pool_access(pool, map, count);
  return r;
}
