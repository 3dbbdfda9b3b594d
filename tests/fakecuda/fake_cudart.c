/* A fake libcudart.so.13 for CPU tests. Like the real runtime it links no
 * driver: it dlopens libcuda.so.1, gets cuGetProcAddress_v2 with dlsym and
 * every driver function through it, and implements its entry points on top
 * (cudaMalloc -> cuMemAlloc_v2, __cudaLaunchKernel -> cuLaunchKernel, ...).
 * Kernels registered with __cudaRegisterFunction become fake driver modules
 * named after the kernel on first launch. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "shim/capture_decl.h"
#include "shim/cudart_decl.h"

#define FR_EXPORT __attribute__((visibility("default")))
#define FR_ENTER(sym)                                              \
  static int fr_id_;                                               \
  if (!__atomic_load_n(&fr_id_, __ATOMIC_RELAXED))                 \
    __atomic_store_n(&fr_id_, fakecuda_id(#sym), __ATOMIC_RELAXED); \
  {                                                                \
    int fr_err_ = fakecuda_hit(fr_id_);                            \
    if (fr_err_) return (cudaError_t)fr_err_;                      \
  }
#define FR_ENTER_VOID(sym)                                         \
  static int fr_id_;                                               \
  if (!__atomic_load_n(&fr_id_, __ATOMIC_RELAXED))                 \
    __atomic_store_n(&fr_id_, fakecuda_id(#sym), __ATOMIC_RELAXED); \
  (void)fakecuda_hit(fr_id_);

/* ---- the driver, through cuGetProcAddress ------------------------------ */
static struct {
  PFN_cuLaunchKernel_v4000 launch;
  PFN_cuLaunchKernel_v7000_ptsz launch_ptsz;
  PFN_cuLaunchKernelEx_v11060 launch_ex;
  PFN_cuLaunchKernelEx_v11060_ptsz launch_ex_ptsz;
  PFN_cuMemAlloc_v3020 alloc;
  PFN_cuMemFree_v3020 free;
  PFN_cuMemAllocAsync_v11020 alloc_async;
  PFN_cuMemAllocAsync_v11020_ptsz alloc_async_ptsz;
  PFN_cuMemFreeAsync_v11020 free_async;
  PFN_cuMemFreeAsync_v11020_ptsz free_async_ptsz;
  PFN_cuMemGetInfo_v3020 meminfo;
  PFN_cuModuleLoadData_v2000 load;
  PFN_cuModuleGetFunction_v2000 getfunc;
  PFN_cuFuncGetParamInfo_v12040 paraminfo;
} fr_drv;
/* Context handling, found with dlsym (not cuGetProcAddress, whose call
 * count the tests check): the runtime's per-thread device and the primary
 * context it makes current, like the real runtime. */
static struct {
  PFN_cuCtxGetCurrent_v4000 get_current;
  PFN_cuCtxSetCurrent_v4000 set_current;
  PFN_cuDevicePrimaryCtxRetain_v7000 retain;
  PFN_cuDeviceGetDefaultMemPool_v11020 default_pool;
  PFN_cuCtxEnablePeerAccess_v4000 enable_peer;
  PFN_cuMemPoolSetAccess_v11020 pool_access;
} fr_ctx;
static pthread_once_t fr_once = PTHREAD_ONCE_INIT;
static int fr_ok;
static __thread int fr_device;

static void fr_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return;
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) return;
  const cuuint64_t L = CU_GET_PROC_ADDRESS_LEGACY_STREAM, P = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CUdriverProcAddressQueryResult st;
  int bad = 0;
#define FR_GET(field, name, flags) bad |= gpa(name, (void **)&fr_drv.field, 13000, flags, &st) != CUDA_SUCCESS
  FR_GET(launch, "cuLaunchKernel", L);
  FR_GET(launch_ptsz, "cuLaunchKernel", P);
  FR_GET(launch_ex, "cuLaunchKernelEx", L);
  FR_GET(launch_ex_ptsz, "cuLaunchKernelEx", P);
  FR_GET(alloc, "cuMemAlloc", L);
  FR_GET(free, "cuMemFree", L);
  FR_GET(alloc_async, "cuMemAllocAsync", L);
  FR_GET(alloc_async_ptsz, "cuMemAllocAsync", P);
  FR_GET(free_async, "cuMemFreeAsync", L);
  FR_GET(free_async_ptsz, "cuMemFreeAsync", P);
  FR_GET(meminfo, "cuMemGetInfo", L);
  FR_GET(load, "cuModuleLoadData", L);
  FR_GET(getfunc, "cuModuleGetFunction", L);
  FR_GET(paraminfo, "cuFuncGetParamInfo", L);
#undef FR_GET
  fr_ctx.get_current = (PFN_cuCtxGetCurrent_v4000)dlsym(h, "cuCtxGetCurrent");
  fr_ctx.set_current = (PFN_cuCtxSetCurrent_v4000)dlsym(h, "cuCtxSetCurrent");
  fr_ctx.retain = (PFN_cuDevicePrimaryCtxRetain_v7000)dlsym(h, "cuDevicePrimaryCtxRetain");
  fr_ctx.default_pool = (PFN_cuDeviceGetDefaultMemPool_v11020)dlsym(h, "cuDeviceGetDefaultMemPool");
  fr_ctx.enable_peer = (PFN_cuCtxEnablePeerAccess_v4000)dlsym(h, "cuCtxEnablePeerAccess");
  fr_ctx.pool_access = (PFN_cuMemPoolSetAccess_v11020)dlsym(h, "cuMemPoolSetAccess");
  bad |= !fr_ctx.get_current || !fr_ctx.set_current || !fr_ctx.retain || !fr_ctx.default_pool || !fr_ctx.enable_peer ||
         !fr_ctx.pool_access;
  fr_ok = !bad;
}

/* Like the runtime: a thread without a current context gets the primary
 * context of its runtime device. */
static CUresult fr_ctx_ensure(void) {
  CUcontext c = NULL;
  if (fr_ctx.get_current(&c) == CUDA_SUCCESS && c) return CUDA_SUCCESS;
  CUresult r = fr_ctx.retain(&c, fr_device);
  return r == CUDA_SUCCESS ? fr_ctx.set_current(c) : r;
}

static int fr_driver(void) {
  pthread_once(&fr_once, fr_load);
  return fr_ok && fr_ctx_ensure() == CUDA_SUCCESS;
}

static cudaError_t fr_err(CUresult r) {
  switch (r) {
  case CUDA_SUCCESS: return cudaSuccess;
  case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
  case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
  case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
  default: return (cudaError_t)r;
  }
}

/* ---- registered kernels -------------------------------------------------- */
struct fr_kernel {
  const void *stub;
  char name[256];
  char handle; /* &handle is the cudaKernel_t: distinct from the stub */
  CUfunction f;
};
#define FR_MAX 1024
static struct fr_kernel fr_kernels[FR_MAX];
static int fr_nkernels;
static pthread_mutex_t fr_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fr_kernel *fr_find(const void *p) {
  int n = __atomic_load_n(&fr_nkernels, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (fr_kernels[i].stub == p || (const void *)&fr_kernels[i].handle == p) return &fr_kernels[i];
  return NULL;
}

/* The kernel's CUfunction, loaded on first launch (like lazy module loading). */
static CUresult fr_function(struct fr_kernel *k, CUfunction *f) {
  CUfunction cur = __atomic_load_n(&k->f, __ATOMIC_ACQUIRE);
  if (cur) {
    *f = cur;
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&fr_lock);
  CUresult r = CUDA_SUCCESS;
  if (!k->f) {
    CUmodule m;
    r = fr_drv.load(&m, k->name);
    if (r == CUDA_SUCCESS) r = fr_drv.getfunc(&cur, m, k->name);
    if (r == CUDA_SUCCESS) __atomic_store_n(&k->f, cur, __ATOMIC_RELEASE);
  }
  *f = k->f;
  pthread_mutex_unlock(&fr_lock);
  return r;
}

static int fr_fatbin_dummy;

FR_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
  static int id;
  if (!id) id = fakecuda_id("__cudaRegisterFatBinary");
  (void)fakecuda_hit(id);
  return (void **)&fr_fatbin_dummy;
}
FR_EXPORT void __cudaRegisterFatBinaryEnd(void **h) { FR_ENTER_VOID(__cudaRegisterFatBinaryEnd); }
FR_EXPORT void __cudaUnregisterFatBinary(void **h) { FR_ENTER_VOID(__cudaUnregisterFatBinary); }
FR_EXPORT void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                                      int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim,
                                      int *wSize) {
  FR_ENTER_VOID(__cudaRegisterFunction);
  pthread_mutex_lock(&fr_lock);
  if (fr_nkernels < FR_MAX) {
    struct fr_kernel *k = &fr_kernels[fr_nkernels];
    k->stub = hostFun;
    strncpy(k->name, deviceFun, sizeof k->name - 1);
    __atomic_store_n(&fr_nkernels, fr_nkernels + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&fr_lock);
}
FR_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *stub) {
  FR_ENTER(__cudaGetKernel);
  struct fr_kernel *k = fr_find(stub);
  if (!k || !kernel) return cudaErrorInvalidDeviceFunction;
  *kernel = (cudaKernel_t)&k->handle;
  return cudaSuccess;
}

static cudaError_t fr_launch(const void *func, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s, int ptsz) {
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  struct fr_kernel *k = fr_find(func);
  if (!k) return cudaErrorInvalidDeviceFunction;
  CUfunction f;
  CUresult r = fr_function(k, &f);
  if (r != CUDA_SUCCESS) return fr_err(r);
  r = (ptsz ? fr_drv.launch_ptsz : fr_drv.launch)(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, (CUstream)s,
                                                  args, NULL);
  return fr_err(r);
}

FR_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t smem,
                                         cudaStream_t s) {
  FR_ENTER(__cudaLaunchKernel);
  return fr_launch(kernel, g, b, args, smem, s, 0);
}
FR_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t smem,
                                              cudaStream_t s) {
  FR_ENTER(__cudaLaunchKernel_ptsz);
  return fr_launch(kernel, g, b, args, smem, s, 1);
}
FR_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                                       cudaStream_t s) {
  FR_ENTER(cudaLaunchKernel);
  return fr_launch(func, g, b, args, smem, s, 0);
}
FR_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                                            cudaStream_t s) {
  FR_ENTER(cudaLaunchKernel_ptsz);
  return fr_launch(func, g, b, args, smem, s, 1);
}

static cudaError_t fr_launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args, int ptsz) {
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  if (!config) return cudaErrorInvalidValue;
  struct fr_kernel *k = fr_find(func);
  if (!k) return cudaErrorInvalidDeviceFunction;
  CUfunction f;
  CUresult r = fr_function(k, &f);
  if (r != CUDA_SUCCESS) return fr_err(r);
  CUlaunchConfig c = {.gridDimX = config->gridDim.x, .gridDimY = config->gridDim.y, .gridDimZ = config->gridDim.z,
                      .blockDimX = config->blockDim.x, .blockDimY = config->blockDim.y,
                      .blockDimZ = config->blockDim.z, .sharedMemBytes = (unsigned)config->dynamicSmemBytes,
                      .hStream = (CUstream)config->stream};
  return fr_err((ptsz ? fr_drv.launch_ex_ptsz : fr_drv.launch_ex)(&c, f, args, NULL));
}
FR_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
  FR_ENTER(cudaLaunchKernelExC);
  return fr_launch_ex(config, func, args, 0);
}
FR_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) {
  FR_ENTER(cudaLaunchKernelExC_ptsz);
  return fr_launch_ex(config, func, args, 1);
}
FR_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  FR_ENTER(cudaGraphLaunch);
  return exec ? cudaSuccess : cudaErrorInvalidValue;
}
FR_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) {
  FR_ENTER(cudaGraphLaunch_ptsz);
  return exec ? cudaSuccess : cudaErrorInvalidValue;
}
/* The runtime's per-thread "last error": failed queries set it, like the
 * real runtime, so tests can check the shim leaves it as it found it. */
static __thread cudaError_t fr_last_error;
static cudaError_t fr_set_last(cudaError_t e) {
  if (e != cudaSuccess) fr_last_error = e;
  return e;
}
FR_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
  FR_ENTER(cudaRuntimeGetVersion);
  if (!v) return cudaErrorInvalidValue;
  *v = 13000;
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t e = fr_last_error;
  fr_last_error = cudaSuccess;
  return e;
}
FR_EXPORT cudaError_t cudaPeekAtLastError(void) { return fr_last_error; }
FR_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func) {
  FR_ENTER(cudaFuncGetName);
  struct fr_kernel *k = fr_find(func);
  if (!k || !name) return fr_set_last(cudaErrorInvalidDeviceFunction);
  *name = k->name;
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t i, size_t *off, size_t *size) {
  FR_ENTER(cudaFuncGetParamInfo);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  struct fr_kernel *k = fr_find(func);
  if (!k) return fr_set_last(cudaErrorInvalidDeviceFunction);
  CUfunction f;
  CUresult r = fr_function(k, &f);
  if (r == CUDA_SUCCESS) r = fr_drv.paraminfo(f, i, off, size);
  return fr_set_last(fr_err(r));
}

/* ---- memory -------------------------------------------------------------- */
FR_EXPORT cudaError_t cudaMalloc(void **p, size_t size) {
  FR_ENTER(cudaMalloc);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  if (!p) return cudaErrorInvalidValue;
  return fr_err(fr_drv.alloc((CUdeviceptr *)p, size));
}
FR_EXPORT cudaError_t cudaFree(void *p) {
  FR_ENTER(cudaFree);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.free((CUdeviceptr)p));
}
FR_EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) {
  FR_ENTER(cudaMallocAsync);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.alloc_async((CUdeviceptr *)p, size, (CUstream)s));
}
FR_EXPORT cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, cudaStream_t s) {
  FR_ENTER(cudaMallocAsync_ptsz);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.alloc_async_ptsz((CUdeviceptr *)p, size, (CUstream)s));
}
FR_EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  FR_ENTER(cudaFreeAsync);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.free_async((CUdeviceptr)p, (CUstream)s));
}
FR_EXPORT cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) {
  FR_ENTER(cudaFreeAsync_ptsz);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.free_async_ptsz((CUdeviceptr)p, (CUstream)s));
}

/* ---- stream capture and the current pool ------------------------------------
 * Like the real runtime, through driver functions got from cuGetProcAddress
 * (resolved on first use, so other tests' cuGetProcAddress counts stay). */
static void *fr_proc(const char *name, cuuint64_t flags) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  PFN_cuGetProcAddress_v12000 gpa = h ? (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2") : NULL;
  void *fn = NULL;
  CUdriverProcAddressQueryResult st;
  if (!gpa || gpa(name, &fn, 13000, flags, &st) != CUDA_SUCCESS) return NULL;
  return fn;
}
static cudaError_t fr_begin(cudaStream_t s, enum cudaStreamCaptureMode mode, cuuint64_t flags) {
  PFN_cuStreamBeginCapture_v10010 fn = (PFN_cuStreamBeginCapture_v10010)fr_proc("cuStreamBeginCapture", flags);
  if (!fn) return cudaErrorInsufficientDriver;
  return fr_err(fn((CUstream)s, (CUstreamCaptureMode)mode));
}
FR_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  FR_ENTER(cudaStreamBeginCapture);
  return fr_begin(s, mode, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
}
FR_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  FR_ENTER(cudaStreamBeginCapture_ptsz);
  return fr_begin(s, mode, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
}
FR_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  FR_ENTER(cudaStreamEndCapture);
  PFN_cuStreamEndCapture_v10000 fn = (PFN_cuStreamEndCapture_v10000)fr_proc("cuStreamEndCapture", 0);
  if (!fn) return cudaErrorInsufficientDriver;
  return fr_err(fn((CUstream)s, (CUgraph *)g));
}
FR_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  FR_ENTER(cudaDeviceSetMemPool);
  PFN_cuDeviceSetMemPool_v11020 fn = (PFN_cuDeviceSetMemPool_v11020)fr_proc("cuDeviceSetMemPool", 0);
  if (!fn) return cudaErrorInsufficientDriver;
  return fr_err(fn((CUdevice)device, (CUmemoryPool)pool));
}
FR_EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  FR_ENTER(cudaMallocFromPoolAsync);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  if (!pool) return cudaErrorInvalidValue;
  return fr_err(fr_drv.alloc_async((CUdeviceptr *)p, size, (CUstream)s));
}
FR_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  FR_ENTER(cudaMallocFromPoolAsync_ptsz);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  if (!pool) return cudaErrorInvalidValue;
  return fr_err(fr_drv.alloc_async_ptsz((CUdeviceptr *)p, size, (CUstream)s));
}
FR_EXPORT cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
  FR_ENTER(cudaMemGetInfo);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_drv.meminfo(free_, total));
}
FR_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  FR_ENTER(cudaMemPoolGetAttribute);
  if (!pool || !value) return cudaErrorInvalidValue;
  *(unsigned long long *)value = 4096ull * (unsigned)attr; /* recognisable per attribute */
  return cudaSuccess;
}
/* Like the runtime: the highs can only be reset, with 0. */
FR_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  FR_ENTER(cudaMemPoolSetAttribute);
  if (!pool || !value) return cudaErrorInvalidValue;
  if ((attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh) &&
      *(unsigned long long *)value != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
  FR_ENTER(cudaIpcGetMemHandle);
  if (!h || !p) return cudaErrorInvalidValue;
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &p, sizeof p);
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags) {
  FR_ENTER(cudaIpcOpenMemHandle);
  if (!p) return cudaErrorInvalidValue;
  memcpy(p, h.reserved, sizeof *p);
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaIpcCloseMemHandle(void *p) {
  FR_ENTER(cudaIpcCloseMemHandle);
  return p ? cudaSuccess : cudaErrorInvalidValue;
}
FR_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  FR_ENTER(cudaDeviceEnablePeerAccess);
  if (peer < 0 || peer > 1) return cudaErrorInvalidDevice;
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  CUcontext c;
  CUresult r = fr_ctx.retain(&c, peer);
  if (r == CUDA_SUCCESS) r = fr_ctx.enable_peer(c, flags);
  if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return cudaErrorPeerAccessAlreadyEnabled;
  if (r == CUDA_ERROR_INVALID_DEVICE) return cudaErrorInvalidDevice;
  return fr_err(r);
}

FR_EXPORT cudaError_t cudaGetDevice(int *device) {
  FR_ENTER(cudaGetDevice);
  if (!device) return cudaErrorInvalidValue;
  *device = fr_device;
  return cudaSuccess;
}
FR_EXPORT cudaError_t cudaSetDevice(int device) {
  FR_ENTER(cudaSetDevice);
  pthread_once(&fr_once, fr_load);
  if (!fr_ok) return cudaErrorInsufficientDriver;
  if (device < 0 || device > 1) return cudaErrorInvalidDevice;
  CUcontext c;
  CUresult r = fr_ctx.retain(&c, device);
  if (r == CUDA_SUCCESS) r = fr_ctx.set_current(c);
  if (r == CUDA_SUCCESS) fr_device = device;
  return fr_err(r);
}
FR_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  FR_ENTER(cudaDeviceGetDefaultMemPool);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  if (!pool) return cudaErrorInvalidValue;
  return fr_err(fr_ctx.default_pool((CUmemoryPool *)pool, device));
}
/* Like the runtime: the driver's call (which the shim also intercepts). */
FR_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *descs, size_t count) {
  FR_ENTER(cudaMemPoolSetAccess);
  if (!fr_driver()) return cudaErrorInsufficientDriver;
  return fr_err(fr_ctx.pool_access((CUmemoryPool)pool, (const CUmemAccessDesc *)descs, count));
}
FR_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep) {
  FR_ENTER(cudaMemPoolTrimTo);
  return pool ? cudaSuccess : cudaErrorInvalidValue;
}
