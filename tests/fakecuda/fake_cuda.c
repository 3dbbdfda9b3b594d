/* A fake libcuda.so.1 for CPU tests: host memory behind every allocation
 * (VMM included: reserve = PROT_NONE mapping, physical handle = memfd,
 * map = MAP_FIXED|MAP_SHARED, access = mprotect), counted launches of named
 * fake kernels, and cuGetProcAddress returning a DISTINCT function per
 * variant (cuMemAlloc v2000 vs v3020, legacy vs _ptsz) like the real driver.
 * Every entry point counts its call and can be made to fail (fakecuda.h). */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"

#define FC_EXPORT __attribute__((visibility("default")))
#define FC_ENTER(sym)                                          \
  static int fc_id_;                                           \
  if (!__atomic_load_n(&fc_id_, __ATOMIC_RELAXED))             \
    __atomic_store_n(&fc_id_, fakecuda_id(#sym), __ATOMIC_RELAXED); \
  {                                                            \
    int fc_err_ = fakecuda_hit(fc_id_);                        \
    if (fc_err_) return (CUresult)fc_err_;                     \
  }

#define FC_GRAN (2u << 20)
#define FC_TOTAL (80ull << 30)
#define FC_FUNC_MAGIC 0xF00Cu
#define FC_KERN_MAGIC 0xCE11u

static uint64_t fc_in_use, fc_argsum;
/* Per device: bytes of linear + VMM physical memory; FAKECUDA_DEVMEM caps
 * each device (0 = no cap) so tests can fill a device. */
static uint64_t fc_dev_bytes[2], fc_devmem_cap;
static int fc_devmem_read;
static uint64_t fc_vmm_handles, fc_va_reserved;
static uint64_t fc_host_vmm_bytes; /* cuMemCreate on a host location, live */
static uint64_t fc_exports, fc_imports, fc_imports_live; /* shareable-handle counters */

static uint64_t fc_cap(void) {
  if (!__atomic_load_n(&fc_devmem_read, __ATOMIC_ACQUIRE)) {
    const char *e = getenv("FAKECUDA_DEVMEM");
    __atomic_store_n(&fc_devmem_cap, e ? strtoull(e, NULL, 0) : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fc_devmem_read, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&fc_devmem_cap, __ATOMIC_RELAXED);
}
/* Charges size to dev; 0 or CUDA_ERROR_OUT_OF_MEMORY over the cap. */
static CUresult fc_charge(int dev, size_t size) {
  uint64_t cap = fc_cap();
  uint64_t n = __atomic_add_fetch(&fc_dev_bytes[dev], size, __ATOMIC_RELAXED);
  if (cap && n > cap) {
    __atomic_sub_fetch(&fc_dev_bytes[dev], size, __ATOMIC_RELAXED);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  __atomic_fetch_add(&fc_in_use, size, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}
static void fc_uncharge(int dev, size_t size) {
  __atomic_sub_fetch(&fc_dev_bytes[dev], size, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&fc_in_use, size, __ATOMIC_RELAXED);
}
FC_EXPORT void fakecuda_set_devmem(uint64_t cap) {
  (void)fc_cap();
  __atomic_store_n(&fc_devmem_cap, cap, __ATOMIC_RELAXED);
}
FC_EXPORT uint64_t fakecuda_device_bytes(int dev) {
  return dev >= 0 && dev < 2 ? __atomic_load_n(&fc_dev_bytes[dev], __ATOMIC_RELAXED) : 0;
}
FC_EXPORT uint64_t fakecuda_vmm_exports(void) { return __atomic_load_n(&fc_exports, __ATOMIC_RELAXED); }
FC_EXPORT uint64_t fakecuda_vmm_imports(int live) {
  return __atomic_load_n(live ? &fc_imports_live : &fc_imports, __ATOMIC_RELAXED);
}
FC_EXPORT uint64_t fakecuda_vmm_handles(void) { return __atomic_load_n(&fc_vmm_handles, __ATOMIC_RELAXED); }
FC_EXPORT uint64_t fakecuda_va_reserved(void) { return __atomic_load_n(&fc_va_reserved, __ATOMIC_RELAXED); }

/* ---- kernels ----------------------------------------------------------- */
struct fc_kern;
struct fc_func {
  unsigned magic;
  char name[256];
  int nparams;
  uint64_t launches;
  struct fc_kern *kern;
  struct fc_func *next;
};
struct fc_kern {
  unsigned magic;
  struct fc_func *func;
};
struct fc_module {
  int n;
  struct fc_func *f[64];
};

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_func *fc_funcs;

/* Parameters: "<name>_p<N>" has N 8-byte parameters, others one. */
static int fc_nparams(const char *name) {
  const char *p = strstr(name, "_p");
  if (p && p[2] >= '0' && p[2] <= '9') return atoi(p + 2);
  return 1;
}

static struct fc_func *fc_func_new(const char *name) {
  struct fc_func *f = calloc(1, sizeof *f);
  struct fc_kern *k = calloc(1, sizeof *k);
  f->magic = FC_FUNC_MAGIC;
  strncpy(f->name, name, sizeof f->name - 1);
  f->nparams = fc_nparams(name);
  f->kern = k;
  k->magic = FC_KERN_MAGIC;
  k->func = f;
  pthread_mutex_lock(&fc_lock);
  f->next = fc_funcs;
  fc_funcs = f;
  pthread_mutex_unlock(&fc_lock);
  return f;
}

static struct fc_func *fc_func_of(CUfunction h) {
  struct fc_func *f = (struct fc_func *)h;
  return f && f->magic == FC_FUNC_MAGIC ? f : NULL;
}
static struct fc_kern *fc_kern_of(CUkernel h) {
  struct fc_kern *k = (struct fc_kern *)h;
  return k && k->magic == FC_KERN_MAGIC ? k : NULL;
}

FC_EXPORT uint64_t fakecuda_launches(const char *name) {
  uint64_t n = 0;
  pthread_mutex_lock(&fc_lock);
  for (struct fc_func *f = fc_funcs; f; f = f->next)
    if (!strcmp(f->name, name)) n += __atomic_load_n(&f->launches, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&fc_lock);
  return n;
}
FC_EXPORT uint64_t fakecuda_arg_sum(void) { return __atomic_load_n(&fc_argsum, __ATOMIC_RELAXED); }
FC_EXPORT void *fakecuda_hidden_function(const char *name) { return fc_func_new(name); }
FC_EXPORT uint64_t fakecuda_bytes_in_use(void) { return __atomic_load_n(&fc_in_use, __ATOMIC_RELAXED); }

static CUresult fc_launch(CUfunction h, void **params) {
  struct fc_func *f = fc_func_of(h);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  __atomic_fetch_add(&f->launches, 1, __ATOMIC_RELAXED);
  if (params && params[0]) __atomic_fetch_add(&fc_argsum, *(uint64_t *)params[0], __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                  unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                                  void **extra) {
  FC_ENTER(cuLaunchKernel);
  return fc_launch(f, params);
}
FC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                       CUstream s, void **params, void **extra) {
  FC_ENTER(cuLaunchKernel_ptsz);
  return fc_launch(f, params);
}
FC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  FC_ENTER(cuLaunchKernelEx);
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  return fc_launch(f, params);
}
FC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  FC_ENTER(cuLaunchKernelEx_ptsz);
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  return fc_launch(f, params);
}

/* Module image: '\n'-separated kernel names. */
FC_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  FC_ENTER(cuModuleLoadData);
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  struct fc_module *m = calloc(1, sizeof *m);
  char *names = strdup(image), *save = NULL;
  for (char *t = strtok_r(names, "\n", &save); t && m->n < 64; t = strtok_r(NULL, "\n", &save))
    m->f[m->n++] = fc_func_new(t);
  free(names);
  *module = (CUmodule)m;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  FC_ENTER(cuModuleUnload);
  return hmod ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; /* functions stay valid: tests keep handles */
}
FC_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  FC_ENTER(cuModuleGetFunction);
  struct fc_module *m = (struct fc_module *)hmod;
  if (!hfunc || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->f[i]->name, name)) {
      *hfunc = (CUfunction)m->f[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}
/* A CUlibrary is a fake module here. */
FC_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jo, void **jv,
                                     unsigned int nj, CUlibraryOption *lo, void **lv, unsigned int nl) {
  FC_ENTER(cuLibraryLoadData);
  struct fc_module *m = calloc(1, sizeof *m);
  char *names = strdup(code), *save = NULL;
  for (char *t = strtok_r(names, "\n", &save); t && m->n < 64; t = strtok_r(NULL, "\n", &save))
    m->f[m->n++] = fc_func_new(t);
  free(names);
  *library = (CUlibrary)m;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  FC_ENTER(cuLibraryGetKernel);
  struct fc_module *m = (struct fc_module *)library;
  if (!pKernel || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->f[i]->name, name)) {
      *pKernel = (CUkernel)m->f[i]->kern;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}
FC_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  FC_ENTER(cuKernelGetFunction);
  struct fc_kern *k = fc_kern_of(kernel);
  if (!pFunc || !k) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = (CUfunction)k->func;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
  FC_ENTER(cuKernelGetName);
  struct fc_kern *k = fc_kern_of(hfunc);
  if (!name || !k) return CUDA_ERROR_INVALID_HANDLE;
  *name = k->func->name;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
  FC_ENTER(cuFuncGetName);
  struct fc_func *f = fc_func_of(hfunc);
  if (!name || !f) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
  FC_ENTER(cuFuncGetParamInfo);
  struct fc_func *f = fc_func_of(func);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (paramIndex >= (size_t)f->nparams) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = paramIndex * 8;
  if (paramSize) *paramSize = 8;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
  FC_ENTER(cuFuncGetAttribute);
  if (!pi || !fc_func_of(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *pi = 0;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  FC_ENTER(cuFuncSetAttribute);
  return fc_func_of(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- device, context ------------------------------------------------------ */
/* The calling thread's current context: device 0's primary by default (as
 * after the runtime initialised the thread); -1 = none (cuCtxSetCurrent(NULL)). */
static __thread int fc_cur_dev;
static __thread int fc_ctx_stack[16], fc_ctx_depth;
static int fc_ctx_dummy[2];
static int fc_ctx_dev(CUcontext c) {
  return c == (CUcontext)&fc_ctx_dummy[1] ? 1 : c == (CUcontext)&fc_ctx_dummy[0] ? 0 : -1;
}
static CUcontext fc_ctx_of(int dev) { return dev < 0 ? NULL : (CUcontext)&fc_ctx_dummy[dev]; }

FC_EXPORT CUresult cuInit(unsigned int flags) {
  FC_ENTER(cuInit);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDriverGetVersion(int *v) {
  FC_ENTER(cuDriverGetVersion);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  FC_ENTER(cuDeviceGet);
  if (!d || ordinal < 0 || ordinal > 1) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  FC_ENTER(cuDeviceGetName);
  if (!name || len < 1 || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "FakeCUDA H200");
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDeviceGetCount(int *count) {
  FC_ENTER(cuDeviceGetCount);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = 2;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  FC_ENTER(cuDeviceGetAttribute);
  if (!pi || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
  /* 9.0 (an H200), or FAKECUDA_CC="MAJOR.MINOR" to stand in for another GPU */
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: {
    int major = 9, minor = 0;
    const char *e = getenv("FAKECUDA_CC");
    if (e && sscanf(e, "%d.%d", &major, &minor) != 2) major = 9, minor = 0;
    *pi = attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? major : minor;
    break;
  }
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *pi = 1; break;
  default: *pi = 0;
  }
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  FC_ENTER(cuDevicePrimaryCtxRetain);
  if (!pctx || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = (CUcontext)&fc_ctx_dummy[dev];
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
  FC_ENTER(cuCtxGetCurrent);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = fc_ctx_of(fc_cur_dev);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  FC_ENTER(cuCtxSetCurrent);
  if (ctx && fc_ctx_dev(ctx) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  fc_cur_dev = ctx ? fc_ctx_dev(ctx) : -1;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FC_ENTER(cuCtxPushCurrent_v2);
  if (fc_ctx_dev(ctx) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (fc_ctx_depth == 16) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_ctx_stack[fc_ctx_depth++] = fc_cur_dev;
  fc_cur_dev = fc_ctx_dev(ctx);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  FC_ENTER(cuCtxPopCurrent_v2);
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = fc_ctx_of(fc_cur_dev);
  fc_cur_dev = fc_ctx_depth ? fc_ctx_stack[--fc_ctx_depth] : -1;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
  FC_ENTER(cuCtxGetDevice);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = fc_cur_dev;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  FC_ENTER(cuDevicePrimaryCtxGetState);
  if (dev < 0 || dev > 1) return CUDA_ERROR_INVALID_DEVICE;
  if (flags) *flags = 0;
  if (active) *active = 1;
  return CUDA_SUCCESS;
}
/* Peer access: records which contexts enabled access to which peer. */
static int fc_peer[2][2];
FC_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  FC_ENTER(cuCtxEnablePeerAccess);
  int p = fc_ctx_dev(peer);
  if (p < 0 || flags) return CUDA_ERROR_INVALID_VALUE;
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (p == fc_cur_dev) return CUDA_ERROR_INVALID_DEVICE;
  if (fc_peer[fc_cur_dev][p]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  fc_peer[fc_cur_dev][p] = 1;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxSynchronize(void) {
  FC_ENTER(cuCtxSynchronize);
  return CUDA_SUCCESS;
}

/* ---- linear memory ---------------------------------------------------------
 * A 64-byte header before each block keeps its size for the accounting. */
static CUresult fc_alloc(CUdeviceptr *dptr, size_t size) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (!size) return CUDA_ERROR_INVALID_VALUE;
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  int dev = fc_cur_dev;
  CUresult r = fc_charge(dev, size);
  if (r != CUDA_SUCCESS) return r;
  char *p = aligned_alloc(64, 64 + ((size + 63) & ~(size_t)63));
  if (!p) {
    fc_uncharge(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ((size_t *)p)[0] = size;
  ((size_t *)p)[1] = (size_t)dev;
  *dptr = (CUdeviceptr)(p + 64);
  return CUDA_SUCCESS;
}
static CUresult fc_free(CUdeviceptr dptr) {
  if (!dptr) return CUDA_SUCCESS;
  char *p = (char *)dptr - 64;
  fc_uncharge((int)((size_t *)p)[1], ((size_t *)p)[0]);
  free(p);
  return CUDA_SUCCESS;
}

/* The pre-3.2 32-bit variants: distinct functions the shim must not wrap. */
FC_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
  FC_ENTER(cuMemAlloc);
  return CUDA_ERROR_NOT_SUPPORTED;
}
FC_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  FC_ENTER(cuMemFree);
  return CUDA_ERROR_NOT_SUPPORTED;
}
FC_EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
  FC_ENTER(cuMemGetInfo);
  return CUDA_ERROR_NOT_SUPPORTED;
}
FC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  FC_ENTER(cuMemAlloc_v2);
  return fc_alloc(dptr, bytesize);
}
FC_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FC_ENTER(cuMemFree_v2);
  return fc_free(dptr);
}
FC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s) {
  FC_ENTER(cuMemAllocAsync);
  return fc_alloc(dptr, bytesize);
}
FC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s) {
  FC_ENTER(cuMemAllocAsync_ptsz);
  return fc_alloc(dptr, bytesize);
}
FC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  FC_ENTER(cuMemFreeAsync);
  return fc_free(dptr);
}
FC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  FC_ENTER(cuMemFreeAsync_ptsz);
  return fc_free(dptr);
}
FC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
  FC_ENTER(cuMemGetInfo_v2);
  if (!free_ || !total) return CUDA_ERROR_INVALID_VALUE;
  uint64_t cap = fc_cap(), tot = cap ? cap : FC_TOTAL;
  int dev = fc_cur_dev < 0 ? 0 : fc_cur_dev;
  uint64_t used = cap ? __atomic_load_n(&fc_dev_bytes[dev], __ATOMIC_RELAXED) : __atomic_load_n(&fc_in_use, __ATOMIC_RELAXED);
  *total = tot;
  *free_ = used < tot ? tot - used : 0;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s) {
  FC_ENTER(cuMemsetD8Async);
  memset((void *)dst, uc, n);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FC_ENTER(cuMemcpyAsync);
  memmove((void *)dst, (const void *)src, n);
  return CUDA_SUCCESS;
}
/* Synchronous copies and page-locked host memory (a sleeping pool's copies):
 * device memory is host memory here, so both are plain memory operations. */
FC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  FC_ENTER(cuMemcpyDtoH_v2);
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  /* FAKECUDA_COPY_DELAY_MS: a copy that waits for a long kernel. */
  const char *d = getenv("FAKECUDA_COPY_DELAY_MS");
  if (d && atoi(d) > 0) {
    struct timespec t = {atoi(d) / 1000, (long)(atoi(d) % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
  memcpy(dst, (const void *)src, n);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  FC_ENTER(cuMemcpyDtoD_v2);
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  memmove((void *)dst, (const void *)src, n);
  return CUDA_SUCCESS;
}
FC_EXPORT uint64_t fakecuda_host_vmm_bytes(void) { return __atomic_load_n(&fc_host_vmm_bytes, __ATOMIC_RELAXED); }
FC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  FC_ENTER(cuMemcpyHtoD_v2);
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  memcpy((void *)dst, src, n);
  return CUDA_SUCCESS;
}
static uint64_t fc_host_live;
FC_EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  FC_ENTER(cuMemHostAlloc);
  (void)flags;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = malloc(n ? n : 1);
  if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
  __atomic_fetch_add(&fc_host_live, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemFreeHost(void *p) {
  FC_ENTER(cuMemFreeHost);
  free(p);
  if (p) __atomic_fetch_sub(&fc_host_live, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}
/* Registered host ranges (cuMemHostRegister): the driver page-locks memory
 * the program owns; here it only counts them and refuses a second
 * registration of a start address or an unregistration of an unknown one. */
#define FC_MAX_REG 4096
static void *fc_reg[FC_MAX_REG];
static pthread_mutex_t fc_reg_mu = PTHREAD_MUTEX_INITIALIZER;
FC_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
  FC_ENTER(cuMemHostRegister_v2);
  (void)flags;
  if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&fc_reg_mu);
  int free_at = -1;
  for (int i = 0; i < FC_MAX_REG; i++) {
    if (fc_reg[i] == p) {
      free_at = -2;
      r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
      break;
    }
    if (!fc_reg[i] && free_at == -1) free_at = i;
  }
  if (free_at >= 0) {
    fc_reg[free_at] = p;
    memset(p, 0, 1); /* the range must be the caller's, writable */
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&fc_reg_mu);
  return r;
}
FC_EXPORT CUresult cuMemHostUnregister(void *p) {
  FC_ENTER(cuMemHostUnregister);
  CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  pthread_mutex_lock(&fc_reg_mu);
  for (int i = 0; i < FC_MAX_REG && p; i++)
    if (fc_reg[i] == p) {
      fc_reg[i] = NULL;
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&fc_reg_mu);
  return r;
}
FC_EXPORT uint64_t fakecuda_host_registered(void) {
  uint64_t n = 0;
  pthread_mutex_lock(&fc_reg_mu);
  for (int i = 0; i < FC_MAX_REG; i++) n += fc_reg[i] != NULL;
  pthread_mutex_unlock(&fc_reg_mu);
  return n;
}
FC_EXPORT uint64_t fakecuda_host_allocs(void) { return __atomic_load_n(&fc_host_live, __ATOMIC_RELAXED); }

FC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  FC_ENTER(cuPointerGetAttribute);
  if (!data || !ptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = CU_MEMORYTYPE_DEVICE; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; return CUDA_SUCCESS;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}
static int fc_pool_dummy[2];
FC_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  FC_ENTER(cuDeviceGetDefaultMemPool);
  if (!pool || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_DEVICE;
  *pool = (CUmemoryPool)&fc_pool_dummy[dev];
  return CUDA_SUCCESS;
}
/* The device's current pool: the default one, unless a test set another. */
static CUmemoryPool fc_cur_pool[2];
FC_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
  FC_ENTER(cuDeviceGetMemPool);
  if (!pool || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_DEVICE;
  *pool = fc_cur_pool[dev] ? fc_cur_pool[dev] : (CUmemoryPool)&fc_pool_dummy[dev];
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  FC_ENTER(cuDeviceSetMemPool);
  if (!pool || dev < 0 || dev > 1) return CUDA_ERROR_INVALID_VALUE;
  fc_cur_pool[dev] = pool;
  return CUDA_SUCCESS;
}
/* Access to a pool: checked like the driver (a known pool, devices 0 and 1). */
FC_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
  FC_ENTER(cuMemPoolSetAccess);
  if (!pool || !map || !count) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++)
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || map[i].location.id < 0 || map[i].location.id > 1)
      return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  FC_ENTER(cuMemPoolGetAttribute);
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  *(uint64_t *)value = 0;
  return CUDA_SUCCESS;
}
static int fc_vmm_mapped(CUdeviceptr p);
FC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr) {
  FC_ENTER(cuIpcGetMemHandle);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  /* Like the driver: legacy IPC names cuMemAlloc allocations, not VMM mappings. */
  if (fc_vmm_mapped(dptr)) return CUDA_ERROR_INVALID_VALUE;
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &dptr, sizeof dptr);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags) {
  FC_ENTER(cuIpcOpenMemHandle_v2);
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  memcpy(pdptr, h.reserved, sizeof *pdptr);
  return CUDA_SUCCESS;
}
/* The pre-11.0 symbol: the same ABI. */
FC_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags) {
  FC_ENTER(cuIpcOpenMemHandle);
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  memcpy(pdptr, h.reserved, sizeof *pdptr);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  FC_ENTER(cuIpcCloseMemHandle);
  return CUDA_SUCCESS;
}

/* ---- virtual memory management ---------------------------------------------- */
struct fc_phys {
  int fd;
  int dev;      /* charged to this device; -1: imported; -2: host memory (a host NUMA location) */
  int location; /* the device the memory lives on, imported handles too */
  size_t size;
  int exportable; /* created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested */
};

/* Every cuMemSetAccess, newest last, so tests can ask which devices may
 * access an address (peer access on pooled memory). */
struct fc_access {
  uintptr_t va;
  size_t size;
  unsigned mask; /* bit d: device d has read/write access */
};
static struct fc_access *fc_accs;
static size_t fc_naccs, fc_cap_accs;
static pthread_mutex_t fc_acc_lock = PTHREAD_MUTEX_INITIALIZER;
static void fc_access_note(uintptr_t va, size_t size, unsigned mask) {
  pthread_mutex_lock(&fc_acc_lock);
  if (fc_naccs == fc_cap_accs) {
    size_t cap = fc_cap_accs ? fc_cap_accs * 2 : 64;
    struct fc_access *n = realloc(fc_accs, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&fc_acc_lock);
      return;
    }
    fc_accs = n;
    fc_cap_accs = cap;
  }
  fc_accs[fc_naccs++] = (struct fc_access){va, size, mask};
  pthread_mutex_unlock(&fc_acc_lock);
}
/* Bit mask of the devices the newest cuMemSetAccess covering va granted
 * read/write access to (0: never set). */
FC_EXPORT unsigned fakecuda_access_mask(const void *va) {
  unsigned m = 0;
  pthread_mutex_lock(&fc_acc_lock);
  for (size_t i = fc_naccs; i-- > 0;)
    if ((uintptr_t)va - fc_accs[i].va < fc_accs[i].size) {
      m = fc_accs[i].mask;
      break;
    }
  pthread_mutex_unlock(&fc_acc_lock);
  return m;
}

FC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option) {
  FC_ENTER(cuMemGetAllocationGranularity);
  if (!g || !prop) return CUDA_ERROR_INVALID_VALUE;
  *g = FC_GRAN;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
  FC_ENTER(cuMemAddressReserve);
  if (!ptr || !size || size % FC_GRAN) return CUDA_ERROR_INVALID_VALUE;
  /* Over-reserve to honour the granularity alignment, then trim. */
  size_t align = alignment > FC_GRAN ? alignment : FC_GRAN;
  char *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  __atomic_fetch_add(&fc_va_reserved, size, __ATOMIC_RELAXED);
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
  size_t tail = (uintptr_t)p + size + align - (a + size);
  if (tail) munmap((char *)a + size, tail);
  *ptr = (CUdeviceptr)a;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FC_ENTER(cuMemAddressFree);
  if (!ptr || !size || size % FC_GRAN) return CUDA_ERROR_INVALID_VALUE;
  if (munmap((void *)ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  __atomic_fetch_sub(&fc_va_reserved, size, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
  FC_ENTER(cuMemCreate);
  if (!handle || !prop || !size || size % FC_GRAN) return CUDA_ERROR_INVALID_VALUE;
  /* Host memory (the pool's host tier): not charged to a device, capped by
   * FAKECUDA_HOSTMEM (0/unset: no cap) as pinning is by the host's limits. */
  const int host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA || prop->location.type == CU_MEM_LOCATION_TYPE_HOST;
  int dev = host ? -2 : prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  if (!host && (dev < 0 || dev > 1)) return CUDA_ERROR_INVALID_DEVICE;
  if (host) {
    const char *e = getenv("FAKECUDA_HOSTMEM");
    uint64_t cap = e ? strtoull(e, NULL, 0) : 0, n = __atomic_add_fetch(&fc_host_vmm_bytes, size, __ATOMIC_RELAXED);
    if (cap && n > cap) {
      __atomic_sub_fetch(&fc_host_vmm_bytes, size, __ATOMIC_RELAXED);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } else if (fc_charge(dev, size) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fc_phys *ph = calloc(1, sizeof *ph);
  if (!ph) {
    if (host) __atomic_sub_fetch(&fc_host_vmm_bytes, size, __ATOMIC_RELAXED);
    else fc_uncharge(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* The name carries the device to an importing process (fc_fd_location). */
  ph->fd = memfd_create(host ? "fakecuda-host" : dev ? "fakecuda-dev1" : "fakecuda-dev0", MFD_CLOEXEC);
  if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size)) {
    if (ph->fd >= 0) close(ph->fd);
    free(ph);
    if (host) __atomic_sub_fetch(&fc_host_vmm_bytes, size, __ATOMIC_RELAXED);
    else fc_uncharge(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ph->size = size;
  ph->dev = ph->location = dev;
  /* Like the driver: only granules created with the POSIX fd handle type
   * can be exported later. */
  ph->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  __atomic_fetch_add(&fc_vmm_handles, 1, __ATOMIC_RELAXED);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FC_ENTER(cuMemRelease);
  struct fc_phys *ph = (struct fc_phys *)(uintptr_t)handle;
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  /* Like the driver: existing mappings keep the memory alive (memfd). */
  if (ph->dev >= 0) fc_uncharge(ph->dev, ph->size);
  else if (ph->dev == -2) __atomic_fetch_sub(&fc_host_vmm_bytes, ph->size, __ATOMIC_RELAXED);
  else __atomic_fetch_sub(&fc_imports_live, 1, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&fc_vmm_handles, 1, __ATOMIC_RELAXED);
  close(ph->fd);
  free(ph);
  return CUDA_SUCCESS;
}
/* Live mappings, so that cuMemMap and cuMemUnmap keep the driver's rules
 * (measured on the H200, tests/gpu/bench/vmm_cost.c): a handle is mapped whole, at
 * offset 0 (else CUDA_ERROR_NOT_SUPPORTED), and an unmap covers whole
 * mappings only. */
struct fc_map {
  uintptr_t va;
  size_t size;
};
static struct fc_map *fc_maps;
static size_t fc_nmaps, fc_cap_maps;
static pthread_mutex_t fc_map_lock = PTHREAD_MUTEX_INITIALIZER;

static int fc_vmm_mapped(CUdeviceptr p) {
  int hit = 0;
  pthread_mutex_lock(&fc_map_lock);
  for (size_t i = 0; i < fc_nmaps && !hit; i++) hit = p - fc_maps[i].va < fc_maps[i].size;
  pthread_mutex_unlock(&fc_map_lock);
  return hit;
}
FC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
  FC_ENTER(cuMemMap);
  struct fc_phys *ph = (struct fc_phys *)(uintptr_t)handle;
  if (!ptr || !ph || !size || size % FC_GRAN || offset % FC_GRAN || offset + size > ph->size)
    return CUDA_ERROR_INVALID_VALUE;
  if (offset || size != ph->size) return CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&fc_map_lock);
  CUresult r = CUDA_SUCCESS;
  for (size_t i = 0; i < fc_nmaps; i++)
    if (fc_maps[i].va < ptr + size && ptr < fc_maps[i].va + fc_maps[i].size) r = CUDA_ERROR_INVALID_VALUE;
  if (!r && fc_nmaps == fc_cap_maps) {
    size_t cap = fc_cap_maps ? fc_cap_maps * 2 : 256;
    struct fc_map *n = realloc(fc_maps, cap * sizeof *n);
    if (n) {
      fc_maps = n;
      fc_cap_maps = cap;
    } else {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  /* Mapped without access until cuMemSetAccess, as on the GPU. */
  if (!r && mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, 0) == MAP_FAILED)
    r = CUDA_ERROR_INVALID_VALUE;
  if (!r) fc_maps[fc_nmaps++] = (struct fc_map){ptr, size};
  pthread_mutex_unlock(&fc_map_lock);
  return r;
}
FC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FC_ENTER(cuMemUnmap);
  if (!ptr || !size || size % FC_GRAN) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fc_map_lock);
  CUresult r = CUDA_SUCCESS;
  for (size_t i = 0; i < fc_nmaps; i++) {
    uintptr_t a = fc_maps[i].va, e = a + fc_maps[i].size;
    if (a < ptr + size && ptr < e && (a < ptr || e > ptr + size)) r = CUDA_ERROR_INVALID_VALUE;
  }
  if (!r && mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
                MAP_FAILED)
    r = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; !r && i < fc_nmaps;) {
    if (fc_maps[i].va >= ptr && fc_maps[i].va < ptr + size) fc_maps[i] = fc_maps[--fc_nmaps];
    else i++;
  }
  pthread_mutex_unlock(&fc_map_lock);
  return r;
}
FC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  FC_ENTER(cuMemSetAccess);
  if (!ptr || !size || size % FC_GRAN || !desc || !count) return CUDA_ERROR_INVALID_VALUE;
  int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
             : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                 : PROT_NONE;
  unsigned mask = 0;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 || desc[i].location.id > 1)
      return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) mask |= 1u << desc[i].location.id;
  }
  if (mprotect((void *)ptr, size, prot)) return CUDA_ERROR_INVALID_VALUE;
  fc_access_note((uintptr_t)ptr, size, mask);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType, unsigned long long flags) {
  FC_ENTER(cuMemExportToShareableHandle);
  struct fc_phys *ph = (struct fc_phys *)(uintptr_t)handle;
  if (!ph || !shareableHandle) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !ph->exportable) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = dup(ph->fd);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  __atomic_fetch_add(&fc_exports, 1, __ATOMIC_RELAXED);
  *(int *)shareableHandle = fd;
  return CUDA_SUCCESS;
}
/* The device of an exported memfd, from its name ("/memfd:fakecuda-devN (deleted)"); -1 unknown. */
static int fc_fd_location(int fd) {
  char link[64], name[128];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, name, sizeof name - 1);
  if (n <= 0) return -1;
  name[n] = 0;
  const char *d = strstr(name, "fakecuda-dev");
  return d && (d[12] == '0' || d[12] == '1') ? d[12] - '0' : -1;
}
FC_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                          CUmemGenericAllocationHandle handle) {
  FC_ENTER(cuMemGetAllocationPropertiesFromHandle);
  struct fc_phys *ph = (struct fc_phys *)(uintptr_t)handle;
  if (!prop || !ph || ph->location < 0) return CUDA_ERROR_INVALID_VALUE;
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = ph->location;
  prop->requestedHandleTypes = ph->exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                  CUmemAllocationHandleType shHandleType) {
  FC_ENTER(cuMemImportFromShareableHandle);
  if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  struct fc_phys *ph = calloc(1, sizeof *ph);
  if (!ph) return CUDA_ERROR_OUT_OF_MEMORY;
  ph->fd = dup((int)(intptr_t)osHandle);
  off_t end = ph->fd >= 0 ? lseek(ph->fd, 0, SEEK_END) : -1;
  if (end <= 0) {
    if (ph->fd >= 0) close(ph->fd);
    free(ph);
    return CUDA_ERROR_INVALID_VALUE;
  }
  ph->size = (size_t)end;
  ph->exportable = 1;
  ph->dev = -1; /* imported: not charged to a device of this process */
  ph->location = fc_fd_location(ph->fd);
  __atomic_fetch_add(&fc_imports, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&fc_imports_live, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&fc_vmm_handles, 1, __ATOMIC_RELAXED);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
  return CUDA_SUCCESS;
}

/* ---- streams and events ------------------------------------------------------ */
struct fc_stream {
  int capturing;
  int dev;
  int destroyed; /* kept, not freed: a later stream gets another handle, as on the GPU */
};
/* A destroyed stream used again (the driver would read freed memory). */
static int fc_dead_stream(CUstream s, const char *fn) {
  struct fc_stream *fs = (struct fc_stream *)s;
  if (!fs || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || !fs->destroyed) return 0;
  fprintf(stderr, "fakecuda: %s on destroyed stream %p\n", fn, (void *)s);
  return 1;
}
struct fc_event {
  int recorded;
};
FC_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  FC_ENTER(cuStreamCreate);
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  struct fc_stream *fs = calloc(1, sizeof *fs);
  if (!fs) return CUDA_ERROR_OUT_OF_MEMORY;
  fs->dev = fc_cur_dev;
  *s = (CUstream)fs;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  FC_ENTER(cuStreamDestroy_v2);
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || fc_dead_stream(s, "cuStreamDestroy_v2"))
    return CUDA_ERROR_INVALID_HANDLE;
  ((struct fc_stream *)s)->destroyed = 1;
  return CUDA_SUCCESS;
}
static CUresult fc_is_capturing(CUstream s, CUstreamCaptureStatus *st) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  struct fc_stream *fs = (struct fc_stream *)s;
  *st = fs && fs != (struct fc_stream *)CU_STREAM_LEGACY && fs != (struct fc_stream *)CU_STREAM_PER_THREAD &&
                fs->capturing
            ? CU_STREAM_CAPTURE_STATUS_ACTIVE
            : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
  FC_ENTER(cuStreamIsCapturing);
  return fc_is_capturing(s, st);
}
FC_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) {
  FC_ENTER(cuStreamIsCapturing_ptsz);
  return fc_is_capturing(s, st);
}
/* Stream capture: begin marks the stream capturing (the legacy and
 * per-thread streams cannot be captured), end clears it and returns no graph. */
static CUresult fc_begin(CUstream s) {
  struct fc_stream *fs = (struct fc_stream *)s;
  if (!fs || fs == (struct fc_stream *)CU_STREAM_LEGACY || fs == (struct fc_stream *)CU_STREAM_PER_THREAD)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (fs->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  fs->capturing = 1;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamBeginCapture(CUstream s) {
  FC_ENTER(cuStreamBeginCapture);
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  FC_ENTER(cuStreamBeginCapture_ptsz);
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCapture_v2);
  (void)mode;
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCapture_v2_ptsz);
  (void)mode;
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                               const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCaptureToGraph);
  (void)g, (void)deps, (void)data, (void)n, (void)mode;
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                    const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCaptureToGraph_ptsz);
  (void)g, (void)deps, (void)data, (void)n, (void)mode;
  return fc_begin(s);
}
FC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  FC_ENTER(cuStreamEndCapture);
  struct fc_stream *fs = (struct fc_stream *)s;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *g = NULL;
  if (!fs || fs == (struct fc_stream *)CU_STREAM_LEGACY || fs == (struct fc_stream *)CU_STREAM_PER_THREAD ||
      !fs->capturing)
    return CUDA_ERROR_ILLEGAL_STATE;
  fs->capturing = 0;
  return CUDA_SUCCESS;
}
/* Test helper: mark a fake stream as capturing (graph capture). */
FC_EXPORT void fakecuda_set_capturing(void *s, int on) {
  if (s) ((struct fc_stream *)s)->capturing = on;
}
FC_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  FC_ENTER(cuStreamSynchronize);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  FC_ENTER(cuStreamSynchronize_ptsz);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamQuery(CUstream s) {
  FC_ENTER(cuStreamQuery);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  FC_ENTER(cuStreamWaitEvent);
  return e && !fc_dead_stream(s, "cuStreamWaitEvent") ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
FC_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx) {
  FC_ENTER(cuStreamGetCtx);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
    *pctx = fc_ctx_of(((struct fc_stream *)s)->dev);
    return CUDA_SUCCESS;
  }
  if (fc_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *pctx = fc_ctx_of(fc_cur_dev);
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) {
  FC_ENTER(cuEventCreate);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  *e = (CUevent)calloc(1, sizeof(struct fc_event));
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  FC_ENTER(cuEventRecord);
  if (!e || fc_dead_stream(s, "cuEventRecord")) return CUDA_ERROR_INVALID_HANDLE;
  ((struct fc_event *)e)->recorded = 1;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuEventQuery(CUevent e) {
  FC_ENTER(cuEventQuery);
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; /* host work is always complete */
}
FC_EXPORT CUresult cuEventSynchronize(CUevent e) {
  FC_ENTER(cuEventSynchronize);
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
FC_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  FC_ENTER(cuEventDestroy_v2);
  free(e);
  return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ----------------------------------------------------------
 * (name asked, exact function, first version, stream mode), like the driver:
 * the highest version <= the requested one wins; the PTDS flag picks the
 * _ptsz variant where one exists. */
enum { FC_ANY, FC_LEGACY, FC_PTDS };
#define FC_ROW(name, fn, ver, mode) {#name, (void *)fn, ver, mode}
static const struct {
  const char *name;
  void *fn;
  int ver, mode;
} fc_procs[] = {
    FC_ROW(cuGetProcAddress, cuGetProcAddress, 11030, FC_ANY),
    FC_ROW(cuGetProcAddress, cuGetProcAddress_v2, 12000, FC_ANY),
    FC_ROW(cuInit, cuInit, 2000, FC_ANY),
    FC_ROW(cuDriverGetVersion, cuDriverGetVersion, 2020, FC_ANY),
    FC_ROW(cuDeviceGet, cuDeviceGet, 2000, FC_ANY),
    FC_ROW(cuDeviceGetCount, cuDeviceGetCount, 2000, FC_ANY),
    FC_ROW(cuDeviceGetName, cuDeviceGetName, 2000, FC_ANY),
    FC_ROW(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, FC_ANY),
    FC_ROW(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, FC_ANY),
    FC_ROW(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, FC_ANY),
    FC_ROW(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, FC_ANY),
    FC_ROW(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, FC_ANY),
    FC_ROW(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, FC_ANY),
    FC_ROW(cuCtxGetCurrent, cuCtxGetCurrent, 4000, FC_ANY),
    FC_ROW(cuCtxSetCurrent, cuCtxSetCurrent, 4000, FC_ANY),
    FC_ROW(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, FC_ANY),
    FC_ROW(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, FC_ANY),
    FC_ROW(cuCtxGetDevice, cuCtxGetDevice, 2000, FC_ANY),
    FC_ROW(cuCtxSynchronize, cuCtxSynchronize, 2000, FC_ANY),
    FC_ROW(cuLaunchKernel, cuLaunchKernel, 4000, FC_LEGACY),
    FC_ROW(cuLaunchKernel, cuLaunchKernel_ptsz, 7000, FC_PTDS),
    FC_ROW(cuLaunchKernelEx, cuLaunchKernelEx, 11060, FC_LEGACY),
    FC_ROW(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060, FC_PTDS),
    FC_ROW(cuModuleLoadData, cuModuleLoadData, 2000, FC_ANY),
    FC_ROW(cuModuleUnload, cuModuleUnload, 2000, FC_ANY),
    FC_ROW(cuModuleGetFunction, cuModuleGetFunction, 2000, FC_ANY),
    FC_ROW(cuLibraryLoadData, cuLibraryLoadData, 12000, FC_ANY),
    FC_ROW(cuLibraryGetKernel, cuLibraryGetKernel, 12000, FC_ANY),
    FC_ROW(cuKernelGetFunction, cuKernelGetFunction, 12000, FC_ANY),
    FC_ROW(cuKernelGetName, cuKernelGetName, 12030, FC_ANY),
    FC_ROW(cuFuncGetName, cuFuncGetName, 12030, FC_ANY),
    FC_ROW(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, FC_ANY),
    FC_ROW(cuFuncGetAttribute, cuFuncGetAttribute, 2020, FC_ANY),
    FC_ROW(cuFuncSetAttribute, cuFuncSetAttribute, 9000, FC_ANY),
    FC_ROW(cuMemAlloc, cuMemAlloc, 2000, FC_ANY),
    FC_ROW(cuMemAlloc, cuMemAlloc_v2, 3020, FC_ANY),
    FC_ROW(cuMemFree, cuMemFree, 2000, FC_ANY),
    FC_ROW(cuMemFree, cuMemFree_v2, 3020, FC_ANY),
    FC_ROW(cuMemGetInfo, cuMemGetInfo, 2000, FC_ANY),
    FC_ROW(cuMemGetInfo, cuMemGetInfo_v2, 3020, FC_ANY),
    FC_ROW(cuMemAllocAsync, cuMemAllocAsync, 11020, FC_LEGACY),
    FC_ROW(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, FC_PTDS),
    FC_ROW(cuMemFreeAsync, cuMemFreeAsync, 11020, FC_LEGACY),
    FC_ROW(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, FC_PTDS),
    FC_ROW(cuMemsetD8Async, cuMemsetD8Async, 3020, FC_ANY),
    FC_ROW(cuMemcpyAsync, cuMemcpyAsync, 4000, FC_ANY),
    FC_ROW(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020, FC_ANY),
    FC_ROW(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020, FC_ANY),
    FC_ROW(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020, FC_ANY),
    FC_ROW(cuMemHostAlloc, cuMemHostAlloc, 2020, FC_ANY),
    FC_ROW(cuMemFreeHost, cuMemFreeHost, 2000, FC_ANY),
    FC_ROW(cuMemHostRegister, cuMemHostRegister_v2, 6050, FC_ANY),
    FC_ROW(cuMemHostUnregister, cuMemHostUnregister, 4000, FC_ANY),
    FC_ROW(cuPointerGetAttribute, cuPointerGetAttribute, 4000, FC_ANY),
    FC_ROW(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, FC_ANY),
    FC_ROW(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, FC_ANY),
    FC_ROW(cuMemPoolSetAccess, cuMemPoolSetAccess, 11020, FC_ANY),
    FC_ROW(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, FC_ANY),
    FC_ROW(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, FC_ANY),
    FC_ROW(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000, FC_ANY),
    FC_ROW(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, FC_ANY),
    FC_ROW(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, FC_ANY),
    FC_ROW(cuMemAddressReserve, cuMemAddressReserve, 10020, FC_ANY),
    FC_ROW(cuMemAddressFree, cuMemAddressFree, 10020, FC_ANY),
    FC_ROW(cuMemCreate, cuMemCreate, 10020, FC_ANY),
    FC_ROW(cuMemRelease, cuMemRelease, 10020, FC_ANY),
    FC_ROW(cuMemMap, cuMemMap, 10020, FC_ANY),
    FC_ROW(cuMemUnmap, cuMemUnmap, 10020, FC_ANY),
    FC_ROW(cuMemSetAccess, cuMemSetAccess, 10020, FC_ANY),
    FC_ROW(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, FC_ANY),
    FC_ROW(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, FC_ANY),
    FC_ROW(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020, FC_ANY),
    FC_ROW(cuStreamCreate, cuStreamCreate, 2000, FC_ANY),
    FC_ROW(cuStreamDestroy, cuStreamDestroy_v2, 4000, FC_ANY),
    FC_ROW(cuStreamIsCapturing, cuStreamIsCapturing, 10000, FC_LEGACY),
    FC_ROW(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, 10000, FC_PTDS),
    FC_ROW(cuStreamBeginCapture, cuStreamBeginCapture, 10000, FC_LEGACY),
    FC_ROW(cuStreamBeginCapture, cuStreamBeginCapture_ptsz, 10000, FC_PTDS),
    FC_ROW(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010, FC_LEGACY),
    FC_ROW(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz, 10010, FC_PTDS),
    FC_ROW(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, FC_LEGACY),
    FC_ROW(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz, 12030, FC_PTDS),
    FC_ROW(cuStreamEndCapture, cuStreamEndCapture, 10000, FC_ANY),
    FC_ROW(cuStreamSynchronize, cuStreamSynchronize, 2000, FC_LEGACY),
    FC_ROW(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, FC_PTDS),
    FC_ROW(cuStreamQuery, cuStreamQuery, 2000, FC_ANY),
    FC_ROW(cuStreamWaitEvent, cuStreamWaitEvent, 3020, FC_ANY),
    FC_ROW(cuStreamGetCtx, cuStreamGetCtx, 9020, FC_ANY),
    FC_ROW(cuEventCreate, cuEventCreate, 2000, FC_ANY),
    FC_ROW(cuEventRecord, cuEventRecord, 2000, FC_ANY),
    FC_ROW(cuEventQuery, cuEventQuery, 2000, FC_ANY),
    FC_ROW(cuEventSynchronize, cuEventSynchronize, 2000, FC_ANY),
    FC_ROW(cuEventDestroy, cuEventDestroy_v2, 4000, FC_ANY),
};

static CUresult fc_proc(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *st) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best = -1, best_ptds = -1, found = 0;
  for (size_t i = 0; i < sizeof fc_procs / sizeof fc_procs[0]; i++) {
    if (strcmp(fc_procs[i].name, symbol)) continue;
    found = 1;
    if (fc_procs[i].ver > ver) continue;
    if (fc_procs[i].mode == FC_PTDS) {
      if (ptds && (best_ptds < 0 || fc_procs[i].ver > fc_procs[best_ptds].ver)) best_ptds = (int)i;
    } else if (best < 0 || fc_procs[i].ver > fc_procs[best].ver) {
      best = (int)i;
    }
  }
  if (best_ptds >= 0) best = best_ptds;
  if (best < 0) {
    *pfn = NULL;
    if (st) *st = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = fc_procs[best].fn;
  if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
  FC_ENTER(cuGetProcAddress_v2);
  return fc_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}
FC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  FC_ENTER(cuGetProcAddress);
  return fc_proc(symbol, pfn, cudaVersion, flags, NULL);
}
