/* Allocation entry points, runtime and driver: pass-through and counting for
 * now. Each function has ONE marked place, "ROUTE:", where the allocator
 * (pool routing, memory limit, capped cudaMemGetInfo, pool attributes, IPC of
 * pooled memory) takes its decision; everything before it is bookkeeping that
 * must stay as is.
 *
 * Driver wrappers reached from inside a runtime call (pt_tls_in_rt: libcudart
 * implements cudaMalloc with the driver functions it got from
 * cuGetProcAddress, i.e. with these wrappers) are counted but never routed:
 * the runtime entry point already took the decision for that allocation. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "shim/shim.h"

#define PT_REAL(sym, type) ((type)pt_real(PT_SYM_##sym))

/* Runtime real call with the in-runtime flag set around it. */
#define PT_RT_CALL(var, call) \
  do {                        \
    pt_tls_in_rt++;           \
    var = call;               \
    pt_tls_in_rt--;           \
  } while (0)

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

/* ---- runtime ------------------------------------------------------------- */

PT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
  pt_malloc_fn real = PT_REAL(cudaMalloc, pt_malloc_fn);
  if (!pt_active()) return real ? real(devPtr, size) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaMalloc);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: pool (size >= PONYTAIL_KV_MIN) or pass through; limit check. */
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr, size));
  return r;
}

PT_EXPORT cudaError_t cudaFree(void *devPtr) {
  pt_free_fn real = PT_REAL(cudaFree, pt_free_fn);
  if (!pt_active()) return real ? real(devPtr) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaFree);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: a pooled pointer goes back to the pool; others pass through. */
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr));
  return r;
}

static inline cudaError_t pt_malloc_async(enum pt_sym sym, void **devPtr, size_t size, cudaStream_t s) {
  pt_malloc_async_fn real = (pt_malloc_async_fn)pt_real(sym);
  if (!pt_active()) return real ? real(devPtr, size, s) : cudaErrorInsufficientDriver;
  __atomic_fetch_add(&pt_calls[sym].n, 1, __ATOMIC_RELAXED);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: stream-ordered pool allocation or pass through. */
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr, size, s));
  return r;
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
  __atomic_fetch_add(&pt_calls[sym].n, 1, __ATOMIC_RELAXED);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: stream-ordered free of a pooled pointer, or pass through. */
  cudaError_t r;
  PT_RT_CALL(r, real(devPtr, s));
  return r;
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
  __atomic_fetch_add(&pt_calls[sym].n, 1, __ATOMIC_RELAXED);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: explicit pools pass through unless the allocator adopts them. */
  cudaError_t r;
  PT_RT_CALL(r, real(ptr, size, pool, s));
  return r;
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
  return r;
}

PT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  pt_ipc_get_fn real = PT_REAL(cudaIpcGetMemHandle, pt_ipc_get_fn);
  if (!pt_active()) return real ? real(handle, devPtr) : cudaErrorInsufficientDriver;
  PT_COUNT(cudaIpcGetMemHandle);
  if (!real) return cudaErrorInsufficientDriver;
  /* ROUTE: pooled pointers need a VMM shareable handle instead. */
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
  }
  return real(dptr);
}

static inline CUresult pt_cu_alloc_async(enum pt_sym sym, CUdeviceptr *dptr, size_t bytesize, CUstream s) {
  PFN_cuMemAllocAsync_v11020 real = (PFN_cuMemAllocAsync_v11020)pt_real(sym);
  if (!pt_active()) return real ? real(dptr, bytesize, s) : PT_DRV_NO_DRIVER;
  __atomic_fetch_add(&pt_calls[sym].n, 1, __ATOMIC_RELAXED);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: stream-ordered driver allocation from the application. */
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
  __atomic_fetch_add(&pt_calls[sym].n, 1, __ATOMIC_RELAXED);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_tls_in_rt) {
    /* ROUTE: stream-ordered free of a pooled pointer. */
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
  if (!pt_tls_in_rt) {
    /* ROUTE: the capped / pool-adjusted view, as for cudaMemGetInfo. */
  }
  return r;
}
