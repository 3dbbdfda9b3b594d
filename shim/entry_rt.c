/* Exported runtime entry points: kernel registration (stub -> name,
 * handle -> stub) and the launch entry points. CUDA 13 host stubs call
 * __cudaGetKernel(&handle, stub) once, then __cudaLaunchKernel(handle, ...).
 *
 * __CUDA_API_VERSION_INTERNAL makes the toolkit headers declare every exact
 * variant (plain and _ptsz) under its own name, so each definition below is
 * checked against the toolkit's prototype. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda_runtime_api.h>

#include "shim/cudart_decl.h"
#include "shim/gate.h"
#include "shim/launch.h"
#include "common/log.h"
#include "shim/shim.h"

typedef void **(*pt_regfat_fn)(void *);
typedef void (*pt_fathandle_fn)(void **);
typedef void (*pt_regfunc_fn)(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *, dim3 *,
                              int *);
typedef cudaError_t (*pt_getkernel_fn)(cudaKernel_t *, const void *);
typedef cudaError_t (*pt_handle_launch_fn)(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*pt_stub_launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*pt_launch_ex_fn)(const cudaLaunchConfig_t *, const void *, void **);
typedef cudaError_t (*pt_graph_launch_fn)(cudaGraphExec_t, cudaStream_t);

/* ---- registration ------------------------------------------------------- */

PT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
  pt_regfat_fn real = (pt_regfat_fn)pt_real(PT_SYM___cudaRegisterFatBinary);
  if (pt_active()) PT_COUNT(__cudaRegisterFatBinary);
  return real ? real(fatCubin) : NULL;
}

PT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) {
  pt_fathandle_fn real = (pt_fathandle_fn)pt_real(PT_SYM___cudaRegisterFatBinaryEnd);
  if (pt_active()) PT_COUNT(__cudaRegisterFatBinaryEnd);
  if (real) real(fatCubinHandle);
}

PT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle) {
  pt_fathandle_fn real = (pt_fathandle_fn)pt_real(PT_SYM___cudaUnregisterFatBinary);
  if (pt_active()) PT_COUNT(__cudaUnregisterFatBinary);
  if (real) real(fatCubinHandle);
}

PT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
                                      dim3 *gDim, int *wSize) {
  pt_regfunc_fn real = (pt_regfunc_fn)pt_real(PT_SYM___cudaRegisterFunction);
  if (pt_active()) {
    PT_COUNT(__cudaRegisterFunction);
    /* deviceFun is the mangled name; deviceName the stringised stub name. */
    const char *name = deviceFun ? deviceFun : deviceName;
    struct pt_kernel *k = pt_registry_kernel(name);
    if (k) pt_registry_bind(hostFun, k);
    else PT_INTERNAL_ERROR();
  }
  if (real) real(fatCubinHandle, hostFun, deviceFun, deviceName, thread_limit, tid, bid, bDim, gDim, wSize);
}

PT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *stub) {
  pt_getkernel_fn real = (pt_getkernel_fn)pt_real(PT_SYM___cudaGetKernel);
  if (!pt_active()) return real ? real(kernel, stub) : cudaErrorInsufficientDriver;
  PT_COUNT(__cudaGetKernel);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r = real(kernel, stub);
  if (r == cudaSuccess && kernel && *kernel) {
    /* handle -> the stub's record (named at __cudaRegisterFunction). */
    struct pt_kernel *k = pt_kernel_rt(stub);
    if (k) pt_registry_bind(*kernel, k);
  }
  return r;
}

/* ---- launches ----------------------------------------------------------- */

static int pt_rt_original(const struct pt_launch *l);

static inline cudaError_t pt_rt_call(enum pt_sym sym, void *real, const void *func, dim3 g, dim3 b, void **args,
                                     size_t smem, cudaStream_t s) {
  if (sym == PT_SYM___cudaLaunchKernel || sym == PT_SYM___cudaLaunchKernel_ptsz)
    return ((pt_handle_launch_fn)real)((cudaKernel_t)func, g, b, args, smem, s);
  return ((pt_stub_launch_fn)real)(func, g, b, args, smem, s);
}

/* The common body of the four (handle|stub) x (legacy|ptsz) launches. */
static inline cudaError_t pt_rt_launch_in(enum pt_sym sym, int ptsz, const void *func, dim3 g, dim3 b, void **args,
                                       size_t smem, cudaStream_t s) {
  void *real = pt_real(sym);
  if (!pt_active()) return real ? pt_rt_call(sym, real, func, g, b, args, smem, s) : cudaErrorInsufficientDriver;
  pt_count_call(sym);
  if (PT_UNLIKELY(!real)) return cudaErrorInsufficientDriver;
  struct pt_kernel *k = pt_kernel_rt(func);
  if (PT_LIKELY(k != NULL)) {
    pt_count_launch(k);
    if (PT_UNLIKELY(k->hook_id > 0)) {
      struct pt_launch_ctx c = {
          .l = {.path = PT_PATH_RUNTIME, .func = func, .grid = {g.x, g.y, g.z}, .block = {b.x, b.y, b.z},
                .smem = (unsigned)smem, .stream = s, .args = args, .per_thread_stream = ptsz,
                .launch_original = pt_rt_original},
          .sym = sym};
      int st;
      if (pt_launch_hooked(k, &c, &st)) return (cudaError_t)st;
    }
  }
  cudaError_t r;
  PT_RT_CALL(r, pt_rt_call(sym, real, func, g, b, args, smem, s));
  return r;
}

/* The launch waits at the gate while the process sleeps (shim/gate.h). */
static inline cudaError_t pt_rt_launch(enum pt_sym sym, int ptsz, const void *func, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s) {
  if (PT_UNLIKELY(!pt_active())) return pt_rt_launch_in(sym, ptsz, func, g, b, args, smem, s);
  struct pt_tblock *gt = pt_gate_enter();
  cudaError_t r = pt_rt_launch_in(sym, ptsz, func, g, b, args, smem, s);
  pt_gate_leave(gt);
  return r;
}

static inline cudaError_t pt_rt_launch_ex_in(enum pt_sym sym, int ptsz, const cudaLaunchConfig_t *config,
                                          const void *func, void **args) {
  pt_launch_ex_fn real = (pt_launch_ex_fn)pt_real(sym);
  if (!pt_active()) return real ? real(config, func, args) : cudaErrorInsufficientDriver;
  pt_count_call(sym);
  if (PT_UNLIKELY(!real)) return cudaErrorInsufficientDriver;
  struct pt_kernel *k = pt_kernel_rt(func);
  if (PT_LIKELY(k != NULL)) {
    pt_count_launch(k);
    if (PT_UNLIKELY(k->hook_id > 0) && config) {
      struct pt_launch_ctx c = {
          .l = {.path = PT_PATH_RUNTIME, .func = func,
                .grid = {config->gridDim.x, config->gridDim.y, config->gridDim.z},
                .block = {config->blockDim.x, config->blockDim.y, config->blockDim.z},
                .smem = (unsigned)config->dynamicSmemBytes, .stream = config->stream, .args = args,
                .per_thread_stream = ptsz, .launch_original = pt_rt_original},
          .sym = sym, .config = config};
      int st;
      if (pt_launch_hooked(k, &c, &st)) return (cudaError_t)st;
    }
  }
  cudaError_t r;
  PT_RT_CALL(r, real(config, func, args));
  return r;
}

/* The launch waits at the gate while the process sleeps (shim/gate.h). */
static inline cudaError_t pt_rt_launch_ex(enum pt_sym sym, int ptsz, const cudaLaunchConfig_t *config, const void *func, void **args) {
  if (PT_UNLIKELY(!pt_active())) return pt_rt_launch_ex_in(sym, ptsz, config, func, args);
  struct pt_tblock *gt = pt_gate_enter();
  cudaError_t r = pt_rt_launch_ex_in(sym, ptsz, config, func, args);
  pt_gate_leave(gt);
  return r;
}

/* launch_original for hooks: repeats the launch exactly as it was called. */
static int pt_rt_original(const struct pt_launch *l) {
  const struct pt_launch_ctx *c = (const struct pt_launch_ctx *)l;
  void *real = pt_real(c->sym);
  if (!real) return cudaErrorInsufficientDriver;
  cudaError_t r;
  pt_tls_in_rt++;
  if (c->sym == PT_SYM_cudaLaunchKernelExC || c->sym == PT_SYM_cudaLaunchKernelExC_ptsz) {
    r = ((pt_launch_ex_fn)real)(c->config, l->func, l->args);
  } else {
    dim3 g = {l->grid[0], l->grid[1], l->grid[2]}, b = {l->block[0], l->block[1], l->block[2]};
    r = pt_rt_call(c->sym, real, l->func, g, b, l->args, l->smem, (cudaStream_t)l->stream);
  }
  pt_tls_in_rt--;
  return r;
}

PT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                         size_t sharedMem, cudaStream_t stream) {
  return pt_rt_launch(PT_SYM___cudaLaunchKernel, 0, kernel, gridDim, blockDim, args, sharedMem, stream);
}

PT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                              size_t sharedMem, cudaStream_t stream) {
  return pt_rt_launch(PT_SYM___cudaLaunchKernel_ptsz, 1, kernel, gridDim, blockDim, args, sharedMem, stream);
}

PT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream) {
  return pt_rt_launch(PT_SYM_cudaLaunchKernel, 0, func, gridDim, blockDim, args, sharedMem, stream);
}

PT_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                            size_t sharedMem, cudaStream_t stream) {
  return pt_rt_launch(PT_SYM_cudaLaunchKernel_ptsz, 1, func, gridDim, blockDim, args, sharedMem, stream);
}

PT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
  return pt_rt_launch_ex(PT_SYM_cudaLaunchKernelExC, 0, config, func, args);
}

PT_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) {
  return pt_rt_launch_ex(PT_SYM_cudaLaunchKernelExC_ptsz, 1, config, func, args);
}

/* Graph launches: counted only (the kernels inside were captured earlier). */
static inline cudaError_t pt_graph_launch_in(enum pt_sym sym, cudaGraphExec_t exec, cudaStream_t s) {
  pt_graph_launch_fn real = (pt_graph_launch_fn)pt_real(sym);
  if (pt_active()) pt_count_call(sym);
  if (!real) return cudaErrorInsufficientDriver;
  pt_tls_in_rt++;
  cudaError_t r = real(exec, s);
  pt_tls_in_rt--;
  return r;
}

/* The launch waits at the gate while the process sleeps (shim/gate.h). */
static inline cudaError_t pt_graph_launch(enum pt_sym sym, cudaGraphExec_t exec, cudaStream_t s) {
  if (PT_UNLIKELY(!pt_active())) return pt_graph_launch_in(sym, exec, s);
  struct pt_tblock *gt = pt_gate_enter();
  cudaError_t r = pt_graph_launch_in(sym, exec, s);
  pt_gate_leave(gt);
  return r;
}

PT_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return pt_graph_launch(PT_SYM_cudaGraphLaunch, graphExec, stream);
}

PT_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return pt_graph_launch(PT_SYM_cudaGraphLaunch_ptsz, graphExec, stream);
}
