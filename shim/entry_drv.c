/* Driver entry points and the exact-variant routing of cuGetProcAddress.
 *
 * The driver hands out one function per (name, requested version, stream
 * mode). The shim substitutes its wrapper only when the request resolves to a
 * variant it implements with the identical ABI (e.g. cuMemAlloc at >= 3020 is
 * cuMemAlloc_v2; below that it is the 32-bit cuMemAlloc, left alone), and
 * remembers the driver's pointer as the wrapper's real function. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "shim/capture_decl.h"
#include "shim/cudart_decl.h"
#include "shim/entry_drv.h"
#include "shim/entry_gated.h"
#include "shim/gate.h"
#include "shim/launch.h"
#include "common/log.h"

/* cuda.h with __CUDA_API_VERSION_INTERNAL declares the _ptsz launch/alloc
 * variants; the plain ones are redeclared at its end. */
void *const pt_wrapper[PT_SYM_COUNT] = {
    [PT_SYM_cudaMalloc] = (void *)cudaMalloc,
    [PT_SYM_cudaFree] = (void *)cudaFree,
    [PT_SYM_cudaMallocAsync] = (void *)cudaMallocAsync,
    [PT_SYM_cudaMallocAsync_ptsz] = (void *)cudaMallocAsync_ptsz,
    [PT_SYM_cudaFreeAsync] = (void *)cudaFreeAsync,
    [PT_SYM_cudaFreeAsync_ptsz] = (void *)cudaFreeAsync_ptsz,
    [PT_SYM_cudaMallocFromPoolAsync] = (void *)cudaMallocFromPoolAsync,
    [PT_SYM_cudaMallocFromPoolAsync_ptsz] = (void *)cudaMallocFromPoolAsync_ptsz,
    [PT_SYM_cudaMemGetInfo] = (void *)cudaMemGetInfo,
    [PT_SYM_cudaMemPoolGetAttribute] = (void *)cudaMemPoolGetAttribute,
    [PT_SYM_cudaMemPoolSetAttribute] = (void *)cudaMemPoolSetAttribute,
    [PT_SYM_cudaIpcGetMemHandle] = (void *)cudaIpcGetMemHandle,
    [PT_SYM_cudaIpcOpenMemHandle] = (void *)cudaIpcOpenMemHandle,
    [PT_SYM_cudaIpcCloseMemHandle] = (void *)cudaIpcCloseMemHandle,
    [PT_SYM_cudaDeviceEnablePeerAccess] = (void *)cudaDeviceEnablePeerAccess,
    [PT_SYM_cudaMemPoolTrimTo] = (void *)cudaMemPoolTrimTo,
    [PT_SYM_cudaMemPoolSetAccess] = (void *)cudaMemPoolSetAccess,
    [PT_SYM_cudaStreamBeginCapture] = (void *)cudaStreamBeginCapture,
    [PT_SYM_cudaStreamBeginCapture_ptsz] = (void *)cudaStreamBeginCapture_ptsz,
    [PT_SYM_cudaStreamBeginCaptureToGraph] = (void *)cudaStreamBeginCaptureToGraph,
    [PT_SYM_cudaStreamBeginCaptureToGraph_ptsz] = (void *)cudaStreamBeginCaptureToGraph_ptsz,
    [PT_SYM_cudaDeviceSetMemPool] = (void *)cudaDeviceSetMemPool,
    [PT_SYM_cudaMemSetMemPool] = (void *)cudaMemSetMemPool,
    [PT_SYM___cudaRegisterFatBinary] = (void *)__cudaRegisterFatBinary,
    [PT_SYM___cudaRegisterFatBinaryEnd] = (void *)__cudaRegisterFatBinaryEnd,
    [PT_SYM___cudaUnregisterFatBinary] = (void *)__cudaUnregisterFatBinary,
    [PT_SYM___cudaRegisterFunction] = (void *)__cudaRegisterFunction,
    [PT_SYM___cudaGetKernel] = (void *)__cudaGetKernel,
    [PT_SYM___cudaLaunchKernel] = (void *)__cudaLaunchKernel,
    [PT_SYM___cudaLaunchKernel_ptsz] = (void *)__cudaLaunchKernel_ptsz,
    [PT_SYM_cudaLaunchKernel] = (void *)cudaLaunchKernel,
    [PT_SYM_cudaLaunchKernel_ptsz] = (void *)cudaLaunchKernel_ptsz,
    [PT_SYM_cudaLaunchKernelExC] = (void *)cudaLaunchKernelExC,
    [PT_SYM_cudaLaunchKernelExC_ptsz] = (void *)cudaLaunchKernelExC_ptsz,
    [PT_SYM_cudaGraphLaunch] = (void *)cudaGraphLaunch,
    [PT_SYM_cudaGraphLaunch_ptsz] = (void *)cudaGraphLaunch_ptsz,
    [PT_SYM_cuGetProcAddress] = (void *)cuGetProcAddress,
    [PT_SYM_cuGetProcAddress_v2] = (void *)cuGetProcAddress_v2,
    [PT_SYM_cuLaunchKernel] = (void *)cuLaunchKernel,
    [PT_SYM_cuLaunchKernel_ptsz] = (void *)cuLaunchKernel_ptsz,
    [PT_SYM_cuLaunchKernelEx] = (void *)cuLaunchKernelEx,
    [PT_SYM_cuLaunchKernelEx_ptsz] = (void *)cuLaunchKernelEx_ptsz,
    [PT_SYM_cuModuleGetFunction] = (void *)cuModuleGetFunction,
    [PT_SYM_cuLibraryGetKernel] = (void *)cuLibraryGetKernel,
    [PT_SYM_cuKernelGetFunction] = (void *)cuKernelGetFunction,
    [PT_SYM_cuMemAlloc_v2] = (void *)cuMemAlloc_v2,
    [PT_SYM_cuMemFree_v2] = (void *)cuMemFree_v2,
    [PT_SYM_cuMemAllocAsync] = (void *)cuMemAllocAsync,
    [PT_SYM_cuMemAllocAsync_ptsz] = (void *)cuMemAllocAsync_ptsz,
    [PT_SYM_cuMemFreeAsync] = (void *)cuMemFreeAsync,
    [PT_SYM_cuMemFreeAsync_ptsz] = (void *)cuMemFreeAsync_ptsz,
    [PT_SYM_cuMemGetInfo_v2] = (void *)cuMemGetInfo_v2,
    [PT_SYM_cuCtxEnablePeerAccess] = (void *)cuCtxEnablePeerAccess,
    [PT_SYM_cuMemPoolSetAccess] = (void *)cuMemPoolSetAccess,
    [PT_SYM_cuIpcGetMemHandle] = (void *)cuIpcGetMemHandle,
    [PT_SYM_cuIpcOpenMemHandle] = (void *)cuIpcOpenMemHandle,
    [PT_SYM_cuIpcOpenMemHandle_v2] = (void *)cuIpcOpenMemHandle_v2,
    [PT_SYM_cuIpcCloseMemHandle] = (void *)cuIpcCloseMemHandle,
    [PT_SYM_cuStreamBeginCapture] = (void *)cuStreamBeginCapture,
    [PT_SYM_cuStreamBeginCapture_ptsz] = (void *)cuStreamBeginCapture_ptsz,
    [PT_SYM_cuStreamBeginCapture_v2] = (void *)cuStreamBeginCapture_v2,
    [PT_SYM_cuStreamBeginCapture_v2_ptsz] = (void *)cuStreamBeginCapture_v2_ptsz,
    [PT_SYM_cuStreamBeginCaptureToGraph] = (void *)cuStreamBeginCaptureToGraph,
    [PT_SYM_cuStreamBeginCaptureToGraph_ptsz] = (void *)cuStreamBeginCaptureToGraph_ptsz,
    [PT_SYM_cuStreamEndCapture] = (void *)cuStreamEndCapture,
    [PT_SYM_cuStreamEndCapture_ptsz] = (void *)cuStreamEndCapture_ptsz,
    [PT_SYM_cuDeviceSetMemPool] = (void *)cuDeviceSetMemPool,
    [PT_SYM_cuMemSetMemPool] = (void *)cuMemSetMemPool,
    [PT_SYM_cuStreamDestroy] = (void *)cuStreamDestroy,
    [PT_SYM_cuStreamDestroy_v2] = (void *)cuStreamDestroy_v2,
    [PT_SYM_cuMemCreate] = (void *)cuMemCreate,
    [PT_SYM_cuMemRelease] = (void *)cuMemRelease,
    [PT_SYM_cuMemMap] = (void *)cuMemMap,
    [PT_SYM_cuMemUnmap] = (void *)cuMemUnmap,
    [PT_SYM_cuMemSetAccess] = (void *)cuMemSetAccess,
    [PT_SYM_cuMemExportToShareableHandle] = (void *)cuMemExportToShareableHandle,
    [PT_SYM_cuMemGetAllocationPropertiesFromHandle] = (void *)cuMemGetAllocationPropertiesFromHandle,
};

/* ---- exact-variant routing ---------------------------------------------- */

enum { PT_MODE_ANY, PT_MODE_LEGACY, PT_MODE_PTDS };

/* (name asked for, first driver API version of the variant, stream mode,
 * variant). The versions are those of the PFN_<name>_v<version> typedefs of
 * cudaTypedefs.h. */
static const struct {
  const char *name;
  int min_version;
  int mode;
  enum pt_sym sym;
} pt_variants[] = {
    {"cuGetProcAddress", 11030, PT_MODE_ANY, PT_SYM_cuGetProcAddress},
    {"cuGetProcAddress", 12000, PT_MODE_ANY, PT_SYM_cuGetProcAddress_v2},
    {"cuLaunchKernel", 4000, PT_MODE_LEGACY, PT_SYM_cuLaunchKernel},
    {"cuLaunchKernel", 7000, PT_MODE_PTDS, PT_SYM_cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, PT_MODE_LEGACY, PT_SYM_cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, PT_MODE_PTDS, PT_SYM_cuLaunchKernelEx_ptsz},
    {"cuModuleGetFunction", 2000, PT_MODE_ANY, PT_SYM_cuModuleGetFunction},
    {"cuLibraryGetKernel", 12000, PT_MODE_ANY, PT_SYM_cuLibraryGetKernel},
    {"cuKernelGetFunction", 12000, PT_MODE_ANY, PT_SYM_cuKernelGetFunction},
    {"cuMemAlloc", 3020, PT_MODE_ANY, PT_SYM_cuMemAlloc_v2},
    {"cuMemFree", 3020, PT_MODE_ANY, PT_SYM_cuMemFree_v2},
    {"cuMemGetInfo", 3020, PT_MODE_ANY, PT_SYM_cuMemGetInfo_v2},
    {"cuMemAllocAsync", 11020, PT_MODE_LEGACY, PT_SYM_cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, PT_MODE_PTDS, PT_SYM_cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, PT_MODE_LEGACY, PT_SYM_cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, PT_MODE_PTDS, PT_SYM_cuMemFreeAsync_ptsz},
    {"cuCtxEnablePeerAccess", 4000, PT_MODE_ANY, PT_SYM_cuCtxEnablePeerAccess},
    {"cuMemPoolSetAccess", 11020, PT_MODE_ANY, PT_SYM_cuMemPoolSetAccess},
    {"cuIpcGetMemHandle", 4010, PT_MODE_ANY, PT_SYM_cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", 4010, PT_MODE_ANY, PT_SYM_cuIpcOpenMemHandle},
    {"cuIpcOpenMemHandle", 11000, PT_MODE_ANY, PT_SYM_cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", 4010, PT_MODE_ANY, PT_SYM_cuIpcCloseMemHandle},
    {"cuStreamBeginCapture", 10000, PT_MODE_LEGACY, PT_SYM_cuStreamBeginCapture},
    {"cuStreamBeginCapture", 10000, PT_MODE_PTDS, PT_SYM_cuStreamBeginCapture_ptsz},
    {"cuStreamBeginCapture", 10010, PT_MODE_LEGACY, PT_SYM_cuStreamBeginCapture_v2},
    {"cuStreamBeginCapture", 10010, PT_MODE_PTDS, PT_SYM_cuStreamBeginCapture_v2_ptsz},
    {"cuStreamBeginCaptureToGraph", 12030, PT_MODE_LEGACY, PT_SYM_cuStreamBeginCaptureToGraph},
    {"cuStreamBeginCaptureToGraph", 12030, PT_MODE_PTDS, PT_SYM_cuStreamBeginCaptureToGraph_ptsz},
    {"cuStreamEndCapture", 10000, PT_MODE_LEGACY, PT_SYM_cuStreamEndCapture},
    {"cuStreamEndCapture", 10000, PT_MODE_PTDS, PT_SYM_cuStreamEndCapture_ptsz},
    {"cuDeviceSetMemPool", 11020, PT_MODE_ANY, PT_SYM_cuDeviceSetMemPool},
    {"cuMemSetMemPool", 13000, PT_MODE_ANY, PT_SYM_cuMemSetMemPool},
    {"cuStreamDestroy", 2000, PT_MODE_ANY, PT_SYM_cuStreamDestroy},
    {"cuStreamDestroy", 4000, PT_MODE_ANY, PT_SYM_cuStreamDestroy_v2},
    {"cuMemCreate", 10020, PT_MODE_ANY, PT_SYM_cuMemCreate},
    {"cuMemRelease", 10020, PT_MODE_ANY, PT_SYM_cuMemRelease},
    {"cuMemMap", 10020, PT_MODE_ANY, PT_SYM_cuMemMap},
    {"cuMemUnmap", 10020, PT_MODE_ANY, PT_SYM_cuMemUnmap},
    {"cuMemSetAccess", 10020, PT_MODE_ANY, PT_SYM_cuMemSetAccess},
    {"cuMemExportToShareableHandle", 10020, PT_MODE_ANY, PT_SYM_cuMemExportToShareableHandle},
    {"cuMemGetAllocationPropertiesFromHandle", 10020, PT_MODE_ANY, PT_SYM_cuMemGetAllocationPropertiesFromHandle},
#include "shim/gated_push.h"
#define PT_GATED(SYM, ASKED, VER, MODE, SIG) {#ASKED, VER, PT_MODE_##MODE, PT_SYM_##SYM},
#include "shim/gated.def"
#undef PT_GATED
#include "shim/gated_pop.h"
};

int pt_drv_variant(const char *symbol, int version, uint64_t flags) {
  if (!symbol || symbol[0] != 'c' || symbol[1] != 'u') return -1;
  int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best = -1, best_ver = -1;
  for (size_t i = 0; i < sizeof pt_variants / sizeof pt_variants[0]; i++) {
    if (strcmp(pt_variants[i].name, symbol)) continue;
    if (pt_variants[i].min_version > version) continue;
    if (pt_variants[i].mode == PT_MODE_LEGACY && ptds) continue;
    if (pt_variants[i].mode == PT_MODE_PTDS && !ptds) continue;
    if (pt_variants[i].min_version > best_ver) {
      best_ver = pt_variants[i].min_version;
      best = (int)pt_variants[i].sym;
    }
  }
  return best;
}

void *pt_drv_substitute(enum pt_sym sym, void *p) {
  void *w = pt_wrapper[sym] ? pt_wrapper[sym] : pt_gated_wrapper[sym];
  if (!p || !w || p == w) return NULL;
  void *real = pt_real_offer(sym, p);
  if (real == w) return NULL; /* never let a wrapper call itself */
  if (real != p) pt_debug("%s: driver returned %p, wrapper keeps %p", pt_sym_name[sym], p, real);
  return w;
}

void pt_drv_route(const char *symbol, int version, uint64_t flags, void **pfn) {
  if (!pfn || !*pfn) return;
  int v = pt_drv_variant(symbol, version, flags);
  if (v < 0) return;
  void *w = pt_drv_substitute((enum pt_sym)v, *pfn);
  if (w) *pfn = w;
}

/* ---- cuGetProcAddress ----------------------------------------------------- */

PT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
  PFN_cuGetProcAddress_v12000 real = (PFN_cuGetProcAddress_v12000)pt_real(PT_SYM_cuGetProcAddress_v2);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(symbol, pfn, cudaVersion, flags, symbolStatus);
  PT_COUNT(cuGetProcAddress_v2);
  CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS) pt_drv_route(symbol, cudaVersion, flags, pfn);
  return r;
}

PT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  PFN_cuGetProcAddress_v11030 real = (PFN_cuGetProcAddress_v11030)pt_real(PT_SYM_cuGetProcAddress);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(symbol, pfn, cudaVersion, flags);
  PT_COUNT(cuGetProcAddress);
  CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) pt_drv_route(symbol, cudaVersion, flags, pfn);
  return r;
}

/* ---- kernel naming ------------------------------------------------------- */

/* Makes the handle just returned for name identify name's record. */
static inline void pt_drv_bind_name(const void *handle, const char *name) {
  if (!handle || !name) return;
  struct pt_kernel *k = pt_registry_kernel(name);
  if (k) pt_registry_bind(handle, k);
}

PT_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  PFN_cuModuleGetFunction_v2000 real = (PFN_cuModuleGetFunction_v2000)pt_real(PT_SYM_cuModuleGetFunction);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(hfunc, hmod, name);
  PT_COUNT(cuModuleGetFunction);
  CUresult r = real(hfunc, hmod, name);
  if (r == CUDA_SUCCESS && hfunc) pt_drv_bind_name(*hfunc, name);
  return r;
}

PT_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  PFN_cuLibraryGetKernel_v12000 real = (PFN_cuLibraryGetKernel_v12000)pt_real(PT_SYM_cuLibraryGetKernel);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(pKernel, library, name);
  PT_COUNT(cuLibraryGetKernel);
  CUresult r = real(pKernel, library, name);
  if (r == CUDA_SUCCESS && pKernel) pt_drv_bind_name(*pKernel, name);
  return r;
}

PT_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  PFN_cuKernelGetFunction_v12000 real = (PFN_cuKernelGetFunction_v12000)pt_real(PT_SYM_cuKernelGetFunction);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(pFunc, kernel);
  PT_COUNT(cuKernelGetFunction);
  CUresult r = real(pFunc, kernel);
  if (r == CUDA_SUCCESS && pFunc && *pFunc) {
    struct pt_kernel *k = pt_kernel_drv(kernel);
    if (k) pt_registry_bind(*pFunc, k);
  }
  return r;
}

/* ---- launches ------------------------------------------------------------ */

static int pt_drv_original(const struct pt_launch *l);

static inline CUresult pt_drv_launch_in(enum pt_sym sym, int ptsz, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                                     void **params, void **extra) {
  PFN_cuLaunchKernel_v4000 real = (PFN_cuLaunchKernel_v4000)pt_real(sym);
  if (!pt_active()) return real ? real(f, gx, gy, gz, bx, by, bz, smem, s, params, extra) : PT_DRV_NO_DRIVER;
  pt_count_call(sym);
  if (PT_UNLIKELY(!real)) return PT_DRV_NO_DRIVER;
  /* Forwarded by libcudart: the runtime entry point counted and hooked it. */
  if (pt_tls_in_rt) return real(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
  struct pt_kernel *k = pt_kernel_drv(f);
  if (PT_LIKELY(k != NULL)) {
    pt_count_launch(k);
    if (PT_UNLIKELY(k->hook_id > 0)) {
      struct pt_launch_ctx c = {
          .l = {.path = PT_PATH_DRIVER, .func = f, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem,
                .stream = s, .args = params, .per_thread_stream = ptsz, .launch_original = pt_drv_original},
          .sym = sym, .extra = extra};
      int st;
      if (pt_launch_hooked(k, &c, &st)) return (CUresult)st;
    }
  }
  return real(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

/* The launch waits at the gate while the process sleeps (shim/gate.h). */
static inline CUresult pt_drv_launch(enum pt_sym sym, int ptsz, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
  /* Forwarded by libcudart: the runtime entry point already holds the gate. */
  if (PT_UNLIKELY(!pt_active()) || pt_tls_in_rt)
    return pt_drv_launch_in(sym, ptsz, f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
  struct pt_tblock *gt = pt_gate_enter();
  CUresult r = pt_drv_launch_in(sym, ptsz, f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
  pt_gate_leave(gt);
  return r;
}

static inline CUresult pt_drv_launch_ex_in(enum pt_sym sym, int ptsz, const CUlaunchConfig *config, CUfunction f,
                                        void **params, void **extra) {
  PFN_cuLaunchKernelEx_v11060 real = (PFN_cuLaunchKernelEx_v11060)pt_real(sym);
  if (!pt_active()) return real ? real(config, f, params, extra) : PT_DRV_NO_DRIVER;
  pt_count_call(sym);
  if (PT_UNLIKELY(!real)) return PT_DRV_NO_DRIVER;
  if (pt_tls_in_rt) return real(config, f, params, extra);
  struct pt_kernel *k = pt_kernel_drv(f);
  if (PT_LIKELY(k != NULL)) {
    pt_count_launch(k);
    if (PT_UNLIKELY(k->hook_id > 0) && config) {
      struct pt_launch_ctx c = {
          .l = {.path = PT_PATH_DRIVER, .func = f, .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
                .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
                .smem = config->sharedMemBytes, .stream = config->hStream, .args = params,
                .per_thread_stream = ptsz, .launch_original = pt_drv_original},
          .sym = sym, .config = config, .extra = extra};
      int st;
      if (pt_launch_hooked(k, &c, &st)) return (CUresult)st;
    }
  }
  return real(config, f, params, extra);
}

/* The launch waits at the gate while the process sleeps (shim/gate.h). */
static inline CUresult pt_drv_launch_ex(enum pt_sym sym, int ptsz, const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  if (PT_UNLIKELY(!pt_active()) || pt_tls_in_rt) return pt_drv_launch_ex_in(sym, ptsz, config, f, params, extra);
  struct pt_tblock *gt = pt_gate_enter();
  CUresult r = pt_drv_launch_ex_in(sym, ptsz, config, f, params, extra);
  pt_gate_leave(gt);
  return r;
}

static int pt_drv_original(const struct pt_launch *l) {
  const struct pt_launch_ctx *c = (const struct pt_launch_ctx *)l;
  void *real = pt_real(c->sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (c->sym == PT_SYM_cuLaunchKernelEx || c->sym == PT_SYM_cuLaunchKernelEx_ptsz)
    return ((PFN_cuLaunchKernelEx_v11060)real)((const CUlaunchConfig *)c->config, (CUfunction)l->func, l->args,
                                                c->extra);
  return ((PFN_cuLaunchKernel_v4000)real)((CUfunction)l->func, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                          l->block[1], l->block[2], l->smem, (CUstream)l->stream, l->args,
                                          c->extra);
}

PT_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                  void **extra) {
  return pt_drv_launch(PT_SYM_cuLaunchKernel, 0, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra);
}

PT_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra) {
  return pt_drv_launch(PT_SYM_cuLaunchKernel_ptsz, 1, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                       blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}

PT_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
  return pt_drv_launch_ex(PT_SYM_cuLaunchKernelEx, 0, config, f, kernelParams, extra);
}

PT_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                         void **extra) {
  return pt_drv_launch_ex(PT_SYM_cuLaunchKernelEx_ptsz, 1, config, f, kernelParams, extra);
}
