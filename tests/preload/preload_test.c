/* Programs run under LD_PRELOAD=libponytail_shim.so with the fake CUDA
 * libraries (tests/fakecuda). Each scenario runs in a forked child whose exit
 * writes the shim's JSON stats to <dir>/stats.<pid>.json; the parent then
 * checks the child's results and the stats.
 *
 *   preload_test SCENARIO DIR
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakecuda.h"
#include "preload_check.h"
#include "shim/cudart_decl.h"

static const char *g_dir;


/* ---- stats JSON ------------------------------------------------------------ */


/* Launches of a kernel in "kernels.top" (-1 if absent); action copied out. */
static long long stat_kernel(const char *json, const char *name, char *action, size_t alen) {
  char key[512];
  snprintf(key, sizeof key, "{\"name\":\"%s\",\"launches\":", name);
  const char *p = strstr(json, key);
  if (!p) return -1;
  long long n = atoll(p + strlen(key));
  const char *a = strstr(p, "\"action\":\"");
  if (a && action) {
    a += 10;
    size_t i = 0;
    while (a[i] && a[i] != '"' && i + 1 < alen) {
      action[i] = a[i];
      i++;
    }
    action[i] = 0;
  }
  return n;
}

static long long stat_registered(const char *json) {
  const char *p = strstr(json, "\"registered\":");
  return p ? atoll(p + 13) : -1;
}

static const char *where(void *p, const char **sym) {
  static Dl_info info;
  if (!dladdr(p, &info)) return "";
  if (sym) *sym = info.dli_sname ? info.dli_sname : "";
  const char *b = strrchr(info.dli_fname, '/');
  return b ? b + 1 : info.dli_fname;
}
static int in_shim(void *p) { return strstr(where(p, NULL), "ponytail_shim") != NULL; }

/* ---- fake kernels registered like an nvcc host stub does -------------------- */
static void stub_a(void) {}
static void stub_b(void) {}
static void stub_c(void) {}
static void register_kernels(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub_a, (char *)"_Z8kernel_av", "_Z8kernel_av", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(h, (const char *)stub_b, (char *)"_Z8kernel_bPf_p2", "_Z8kernel_bPf_p2", -1, 0, 0, 0, 0,
                         0);
  __cudaRegisterFunction(h, (const char *)stub_c, (char *)"_Z8kernel_cv", "_Z8kernel_cv", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(h);
}

/* ---- scenario: every entry point passes through and is counted ------------- */
static int sc_passthrough(void) {
  void *p = NULL;
  CHECK_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  CHECK(p != NULL);
  memset(p, 0xab, 1000); /* host memory behind the fake */
  CHECK_EQ(fakecuda_bytes_in_use(), 1000);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(cudaMallocAsync(&p, 64, 0), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
  CHECK_EQ(cudaMallocAsync_ptsz(&p, 64, 0), cudaSuccess);
  CHECK_EQ(cudaFreeAsync_ptsz(p, 0), cudaSuccess);
  CHECK_EQ(cudaMallocFromPoolAsync(&p, 64, (cudaMemPool_t)&p, 0), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
  CHECK_EQ(cudaMallocFromPoolAsync(&p, 64, NULL, 0), cudaErrorInvalidValue); /* errors unchanged */
  CHECK_EQ(cudaMallocFromPoolAsync_ptsz(&p, 64, (cudaMemPool_t)&p, 0), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess);
  size_t fr = 0, tot = 0;
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(tot, 80ull << 30);
  CHECK_EQ(fr, 80ull << 30);
  unsigned long long v = 0;
  CHECK_EQ(cudaMemPoolGetAttribute((cudaMemPool_t)&p, cudaMemPoolAttrUsedMemCurrent, &v), cudaSuccess);
  CHECK_EQ(v, 4096ull * cudaMemPoolAttrUsedMemCurrent);
  cudaIpcMemHandle_t ih;
  void *q = NULL;
  CHECK_EQ(cudaIpcGetMemHandle(&ih, (void *)0x1234), cudaSuccess);
  CHECK_EQ(cudaIpcOpenMemHandle(&q, ih, 0), cudaSuccess);
  CHECK(q == (void *)0x1234);
  CHECK_EQ(cudaIpcCloseMemHandle(q), cudaSuccess);
  CHECK_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  CHECK_EQ(cudaDeviceEnablePeerAccess(7, 0), cudaErrorInvalidDevice);
  CHECK_EQ(cudaGraphLaunch((cudaGraphExec_t)&p, 0), cudaSuccess);
  CHECK_EQ(cudaGraphLaunch_ptsz((cudaGraphExec_t)&p, 0), cudaSuccess);
  __cudaUnregisterFatBinary(NULL);
  /* driver entry points, called directly (linked against libcuda.so.1) */
  CUdeviceptr d = 0;
  CHECK_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
  CHECK(d != 0);
  CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  CHECK_EQ(cuMemAllocAsync(&d, 4096, 0), CUDA_SUCCESS);
  CHECK_EQ(cuMemFreeAsync(d, 0), CUDA_SUCCESS);
  CHECK_EQ(cuMemAllocAsync_ptsz(&d, 4096, 0), CUDA_SUCCESS);
  CHECK_EQ(cuMemFreeAsync_ptsz(d, 0), CUDA_SUCCESS);
  CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
  CHECK_EQ(cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(fakecuda_bytes_in_use(), 0);
  return g_failed;
}

static void check_passthrough(const char *js) {
  static const struct {
    const char *sym;
    int n;
  } want[] = {
      {"cudaMalloc", 1}, {"cudaFree", 1}, {"cudaMallocAsync", 1}, {"cudaMallocAsync_ptsz", 1},
      {"cudaFreeAsync", 3}, {"cudaFreeAsync_ptsz", 1}, {"cudaMallocFromPoolAsync", 2},
      {"cudaMallocFromPoolAsync_ptsz", 1}, {"cudaMemGetInfo", 1}, {"cudaMemPoolGetAttribute", 1},
      {"cudaIpcGetMemHandle", 1}, {"cudaIpcOpenMemHandle", 1}, {"cudaIpcCloseMemHandle", 1},
      {"cudaDeviceEnablePeerAccess", 2}, {"cudaGraphLaunch", 1}, {"cudaGraphLaunch_ptsz", 1},
      {"__cudaUnregisterFatBinary", 1},
      /* driver: direct calls + those libcudart forwarded through cuGetProcAddress */
      {"cuMemAlloc_v2", 1 + 2}, {"cuMemFree_v2", 1 + 1}, {"cuMemAllocAsync", 1 + 2},
      {"cuMemAllocAsync_ptsz", 1 + 2}, {"cuMemFreeAsync", 1 + 3}, {"cuMemFreeAsync_ptsz", 1 + 1},
      {"cuMemGetInfo_v2", 1 + 1}, {"cuGetProcAddress_v2", 14},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    long long n = stat_call(js, want[i].sym);
    if (n != want[i].n) {
      fprintf(stderr, "calls[%s] = %lld, want %d\n", want[i].sym, n, want[i].n);
      g_failed = 1;
    }
  }
  CHECK_EQ(stat_call(js, "cudaLaunchKernel"), 0); /* only called symbols are listed */
  CHECK(strstr(js, "\"version\":\"") != NULL);
  CHECK(strstr(js, "\"pid\":") != NULL);
  CHECK(strstr(js, "\"hooks\":{") != NULL);
}

/* ---- scenario: kernel names on both launch paths --------------------------- */
static int sc_kernels(void) {
  register_kernels();
  uint64_t arg = 5;
  void *args[] = {&arg, &arg};
  dim3 g = {2, 1, 1}, b = {128, 1, 1};
  cudaKernel_t ka = NULL;
  CHECK_EQ(__cudaGetKernel(&ka, (const void *)stub_a), cudaSuccess);
  CHECK(ka != NULL && (void *)ka != (void *)stub_a);
  for (int i = 0; i < 7; i++) CHECK_EQ(__cudaLaunchKernel(ka, g, b, args, 0, 0), cudaSuccess);
  CHECK_EQ(__cudaLaunchKernel_ptsz(ka, g, b, args, 0, 0), cudaSuccess);
  for (int i = 0; i < 3; i++) CHECK_EQ(cudaLaunchKernel((const void *)stub_b, g, b, args, 0, 0), cudaSuccess);
  CHECK_EQ(cudaLaunchKernel_ptsz((const void *)stub_b, g, b, args, 0, 0), cudaSuccess);
  cudaLaunchConfig_t cfg = {.gridDim = g, .blockDim = b};
  CHECK_EQ(cudaLaunchKernelExC(&cfg, (const void *)stub_c, args), cudaSuccess);
  CHECK_EQ(cudaLaunchKernelExC_ptsz(&cfg, (const void *)stub_c, args), cudaSuccess);
  CHECK_EQ(cudaLaunchKernel((const void *)sc_kernels, g, b, args, 0, 0), cudaErrorInvalidDeviceFunction);
  /* driver path: module functions, library kernels, and a function the shim
   * never saw being created (named at first launch with cuFuncGetName) */
  CUmodule m;
  CUfunction f1, f2, fh;
  CHECK_EQ(cuModuleLoadData(&m, "drv_kernel_one\ndrv_kernel_two"), CUDA_SUCCESS);
  CHECK_EQ(cuModuleGetFunction(&f1, m, "drv_kernel_one"), CUDA_SUCCESS);
  for (int i = 0; i < 5; i++) CHECK_EQ(cuLaunchKernel(f1, 1, 1, 1, 32, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
  CHECK_EQ(cuLaunchKernel_ptsz(f1, 1, 1, 1, 32, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
  CUlibrary lib;
  CUkernel kk;
  CHECK_EQ(cuLibraryLoadData(&lib, "lib_kernel_x", NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
  CHECK_EQ(cuLibraryGetKernel(&kk, lib, "lib_kernel_x"), CUDA_SUCCESS);
  CHECK_EQ(cuKernelGetFunction(&f2, kk), CUDA_SUCCESS);
  CUlaunchConfig dc = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
  CHECK_EQ(cuLaunchKernelEx(&dc, f2, args, NULL), CUDA_SUCCESS);
  CHECK_EQ(cuLaunchKernelEx_ptsz(&dc, f2, args, NULL), CUDA_SUCCESS);
  fh = (CUfunction)fakecuda_hidden_function("hidden_kernel_z");
  for (int i = 0; i < 4; i++) CHECK_EQ(cuLaunchKernel(fh, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
  CHECK_EQ(cuLaunchKernel((CUfunction)&arg, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  /* every launch reached the fake with its argument unchanged */
  CHECK_EQ(fakecuda_launches("_Z8kernel_av"), 8);
  CHECK_EQ(fakecuda_launches("_Z8kernel_bPf_p2"), 4);
  CHECK_EQ(fakecuda_launches("_Z8kernel_cv"), 2);
  CHECK_EQ(fakecuda_launches("drv_kernel_one"), 6);
  CHECK_EQ(fakecuda_launches("lib_kernel_x"), 2);
  CHECK_EQ(fakecuda_launches("hidden_kernel_z"), 4);
  CHECK_EQ(fakecuda_arg_sum(), 5 * (8 + 4 + 2 + 6 + 2 + 4));
  return g_failed;
}

static void check_kernels(const char *js) {
  char act[32] = "";
  CHECK_EQ(stat_kernel(js, "_Z8kernel_av", act, sizeof act), 8);
  CHECK(!strcmp(act, "passthrough"));
  CHECK_EQ(stat_kernel(js, "_Z8kernel_bPf_p2", NULL, 0), 4);
  CHECK_EQ(stat_kernel(js, "_Z8kernel_cv", NULL, 0), 2);
  CHECK_EQ(stat_kernel(js, "drv_kernel_one", NULL, 0), 6);
  CHECK_EQ(stat_kernel(js, "lib_kernel_x", NULL, 0), 2);
  CHECK_EQ(stat_kernel(js, "hidden_kernel_z", NULL, 0), 4);
  CHECK(stat_registered(js) >= 6);
  CHECK_EQ(stat_call(js, "__cudaRegisterFunction"), 3);
  CHECK_EQ(stat_call(js, "__cudaGetKernel"), 1);
  CHECK_EQ(stat_call(js, "__cudaLaunchKernel"), 7);
  CHECK_EQ(stat_call(js, "__cudaLaunchKernel_ptsz"), 1);
  CHECK_EQ(stat_call(js, "cudaLaunchKernel"), 3 + 1);
  CHECK_EQ(stat_call(js, "cudaLaunchKernel_ptsz"), 1);
  CHECK_EQ(stat_call(js, "cudaLaunchKernelExC"), 1);
  CHECK_EQ(stat_call(js, "cudaLaunchKernelExC_ptsz"), 1);
  /* forwarded runtime launches are counted as driver calls too */
  CHECK_EQ(stat_call(js, "cuLaunchKernel"), 7 + 3 + 5 + 4 + 1);
  CHECK_EQ(stat_call(js, "cuLaunchKernel_ptsz"), 1 + 1 + 1);
  CHECK_EQ(stat_call(js, "cuLaunchKernelEx"), 1 + 1);
  CHECK_EQ(stat_call(js, "cuLaunchKernelEx_ptsz"), 1 + 1);
  CHECK_EQ(stat_call(js, "cuLibraryGetKernel"), 1);
  CHECK_EQ(stat_call(js, "cuKernelGetFunction"), 1);
  CHECK(stat_call(js, "cuModuleGetFunction") >= 1);
}

/* ---- scenario: dlsym / cuGetProcAddress routing ------------------------------ */
typedef char (*marker_fn)(void);
char next_a_lookup(void); /* tests/preload/next_a.c */

static int sc_routing(void) {
  const char *s = NULL;
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(h != NULL);
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  CHECK(gpa && in_shim((void *)gpa));
  where((void *)gpa, &s);
  CHECK(!strcmp(s, "cuGetProcAddress_v2"));
  struct {
    const char *name;
    int ver;
    cuuint64_t flags;
    int shim;
    const char *sym;
  } cases[] = {
      {"cuMemAlloc", 2000, 0, 0, "cuMemAlloc"},
      {"cuMemAlloc", 3020, 0, 1, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, 0, 1, "cuMemAlloc_v2"},
      {"cuMemFree", 2000, 0, 0, "cuMemFree"},
      {"cuMemGetInfo", 12000, 0, 1, "cuMemGetInfo_v2"},
      {"cuLaunchKernel", 13000, 0, 1, "cuLaunchKernel"},
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 1, "cuLaunchKernel"},
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 1, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernel", 6000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 0, "cuLaunchKernel"},
      {"cuLaunchKernelEx", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 1, "cuLaunchKernelEx_ptsz"},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 1, "cuMemAllocAsync_ptsz"},
      {"cuMemFreeAsync", 12000, 0, 1, "cuMemFreeAsync"},
      {"cuModuleGetFunction", 12000, 0, 1, "cuModuleGetFunction"},
      {"cuLibraryGetKernel", 12000, 0, 1, "cuLibraryGetKernel"},
      {"cuKernelGetFunction", 12000, 0, 1, "cuKernelGetFunction"},
      {"cuGetProcAddress", 13000, 0, 1, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, 0, 1, "cuGetProcAddress"},
      {"cuStreamSynchronize", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 0, "cuStreamSynchronize_ptsz"},
      {"cuMemCreate", 13000, 0, 1, "cuMemCreate"}, /* PyTorch's expandable segments (shim/entry_vmm.c) */
      {"cuMemAddressReserve", 13000, 0, 0, "cuMemAddressReserve"},
      {"cuInit", 13000, 0, 0, "cuInit"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(cases[i].name, &fn, cases[i].ver, cases[i].flags, &st), CUDA_SUCCESS);
    const char *obj = where(fn, &s);
    int shim = strstr(obj, "ponytail_shim") != NULL;
    if (shim != cases[i].shim || strcmp(s, cases[i].sym)) {
      fprintf(stderr, "gpa(%s, %d, %llu) -> %s:%s, want %s:%s\n", cases[i].name, cases[i].ver,
              (unsigned long long)cases[i].flags, obj, s, cases[i].shim ? "shim" : "libcuda", cases[i].sym);
      g_failed = 1;
    }
  }
  /* errors of the real lookup reach the caller unchanged */
  void *fn = (void *)1;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  CHECK_EQ(gpa("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK_EQ(gpa("cuLibraryGetKernel", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
  CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  /* the v1 cuGetProcAddress wrapper routes the same way */
  PFN_cuGetProcAddress_v11030 gpa1 = NULL;
  CHECK_EQ(gpa("cuGetProcAddress", (void **)&gpa1, 11030, 0, &st), CUDA_SUCCESS);
  CHECK_EQ(gpa1("cuMemAlloc", &fn, 12000, 0), CUDA_SUCCESS);
  CHECK(in_shim(fn));
  /* dlsym on the driver handle: exact names only */
  CHECK(!in_shim(dlsym(h, "cuMemAlloc")));
  CHECK(in_shim(dlsym(h, "cuMemAlloc_v2")));
  CHECK(in_shim(dlsym(h, "cuLaunchKernel_ptsz")));
  CHECK(in_shim(dlsym(h, "cuGetProcAddress")));
  CHECK(!in_shim(dlsym(h, "cuInit")));
  CHECK(in_shim(dlsym(h, "cuMemCreate")));
  CHECK(!in_shim(dlsym(h, "cuMemAddressReserve")));
  CHECK(dlsym(h, "cuNoSuchThing") == NULL && dlerror() != NULL);
  /* runtime names: RTLD_DEFAULT finds the shim; a libcudart handle too */
  CHECK(in_shim(dlsym(RTLD_DEFAULT, "cudaMalloc")));
  void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  CHECK(rt != NULL);
  CHECK(in_shim(dlsym(rt, "cudaMalloc")));
  CHECK(in_shim(dlsym(rt, "__cudaLaunchKernel")));
  CHECK(!in_shim(dlsym(rt, "cudaFuncGetName")));
  CHECK(!strcmp(where(dlsym(rt, "cudaFuncGetName"), NULL), "libcudart.so.13"));
  /* the wrappers handed out work */
  PFN_cuMemAlloc_v3020 al = (PFN_cuMemAlloc_v3020)dlsym(h, "cuMemAlloc_v2");
  CUdeviceptr d = 0;
  CHECK_EQ(al(&d, 100), CUDA_SUCCESS);
  CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  /* RTLD_NEXT is resolved relative to the caller (next_a.so -> next_b.so),
   * not relative to the shim */
  CHECK_EQ(next_a_lookup(), 'B');
  marker_fn m = (marker_fn)dlsym(RTLD_NEXT, "pt_test_marker"); /* from the executable: next_a.so */
  CHECK(m && m() == 'a');
  CHECK(in_shim(dlsym(RTLD_NEXT, "cudaMalloc"))); /* the shim comes next after the executable */
  return g_failed;
}

/* ---- scenario: fork ---------------------------------------------------------- */
static int sc_fork(void) {
  register_kernels();
  void *p;
  dim3 g = {1, 1, 1};
  CHECK_EQ(cudaMalloc(&p, 10), cudaSuccess);
  CHECK_EQ(cudaLaunchKernel((const void *)stub_a, g, g, NULL, 0, 0), cudaSuccess);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    void *q;
    int bad = cudaMalloc(&q, 10) != cudaSuccess || cudaFree(q) != cudaSuccess;
    for (int i = 0; i < 3; i++) bad |= cudaLaunchKernel((const void *)stub_a, g, g, NULL, 0, 0) != cudaSuccess;
    bad |= fakecuda_launches("_Z8kernel_av") != 4;
    exit(bad);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char *js = read_stats(g_dir, (int)pid);
  CHECK(js != NULL);
  if (js) {
    CHECK_EQ(stat_kernel(js, "_Z8kernel_av", NULL, 0), 4); /* inherited 1 + 3 */
    CHECK_EQ(stat_call(js, "cudaMalloc"), 2);
  }
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(cudaLaunchKernel((const void *)stub_a, g, g, NULL, 0, 0), cudaSuccess);
  CHECK_EQ(fakecuda_launches("_Z8kernel_av"), 2);
  return g_failed;
}

/* ---- scenario: 8 threads ----------------------------------------------------- */
#define TH 8
#define PER 20000
static CUfunction g_fth;
static void *thread_main(void *arg) {
  long id = (long)arg;
  dim3 g = {1, 1, 1};
  uint64_t one = 1;
  void *args[] = {&one};
  int bad = 0;
  cudaKernel_t k = NULL;
  bad |= __cudaGetKernel(&k, (const void *)stub_a) != cudaSuccess;
  for (int i = 0; i < PER; i++) {
    if (id & 1) bad |= __cudaLaunchKernel(k, g, g, args, 0, 0) != cudaSuccess;
    else bad |= cuLaunchKernel(g_fth, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL) != CUDA_SUCCESS;
  }
  return (void *)(long)bad;
}
static int sc_threads(void) {
  register_kernels();
  CUmodule m;
  CHECK_EQ(cuModuleLoadData(&m, "thread_kernel"), CUDA_SUCCESS);
  CHECK_EQ(cuModuleGetFunction(&g_fth, m, "thread_kernel"), CUDA_SUCCESS);
  pthread_t t[TH];
  for (long i = 0; i < TH; i++) pthread_create(&t[i], NULL, thread_main, (void *)i);
  for (int i = 0; i < TH; i++) {
    void *r;
    pthread_join(t[i], &r);
    CHECK(r == NULL);
  }
  CHECK_EQ(fakecuda_launches("_Z8kernel_av"), TH / 2 * PER);
  CHECK_EQ(fakecuda_launches("thread_kernel"), TH / 2 * PER);
  CHECK_EQ(fakecuda_arg_sum(), TH * PER);
  return g_failed;
}
static void check_threads(const char *js) {
  CHECK_EQ(stat_kernel(js, "_Z8kernel_av", NULL, 0), TH / 2 * PER);
  CHECK_EQ(stat_kernel(js, "thread_kernel", NULL, 0), TH / 2 * PER);
  CHECK_EQ(stat_call(js, "__cudaLaunchKernel"), TH / 2 * PER);
  CHECK_EQ(stat_call(js, "cuLaunchKernel"), TH * PER);
  CHECK_EQ(stat_call(js, "__cudaGetKernel"), TH);
}

/* ---- scenario: injected errors reach the application unchanged ---------------- */
static int sc_faults(void) {
  register_kernels();
  /* FAKECUDA_FAIL=cudaMalloc:2:2,cuMemAlloc_v2:3:999 set by the test */
  void *p;
  CHECK_EQ(cudaMalloc(&p, 8), cudaSuccess);
  CHECK_EQ(cudaMalloc(&p, 8), cudaErrorMemoryAllocation);
  CUdeviceptr d;
  CHECK_EQ(cuMemAlloc_v2(&d, 8), CUDA_SUCCESS); /* the 2nd cuMemAlloc_v2 call (1st was cudaMalloc's) */
  CHECK_EQ(cuMemAlloc_v2(&d, 8), 999);
  fakecuda_fail("__cudaLaunchKernel", 2, cudaErrorLaunchFailure);
  fakecuda_fail("cuLaunchKernel", 2, CUDA_ERROR_LAUNCH_TIMEOUT);
  fakecuda_fail("cudaMemGetInfo", 1, cudaErrorInitializationError);
  fakecuda_fail("cuGetProcAddress_v2", 16, CUDA_ERROR_INVALID_VALUE);
  cudaKernel_t k;
  dim3 g = {1, 1, 1};
  CHECK_EQ(__cudaGetKernel(&k, (const void *)stub_a), cudaSuccess);
  CHECK_EQ(__cudaLaunchKernel(k, g, g, NULL, 0, 0), cudaSuccess);
  CHECK_EQ(__cudaLaunchKernel(k, g, g, NULL, 0, 0), cudaErrorLaunchFailure);
  CHECK_EQ(__cudaLaunchKernel(k, g, g, NULL, 0, 0), (cudaError_t)CUDA_ERROR_LAUNCH_TIMEOUT); /* 2nd driver launch */
  size_t a, b;
  CHECK_EQ(cudaMemGetInfo(&a, &b), cudaErrorInitializationError);
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  void *fn = NULL;
  CHECK_EQ(gpa("cuLaunchKernel", &fn, 13000, 0, NULL), CUDA_SUCCESS); /* 15th */
  CHECK_EQ(gpa("cuLaunchKernel", &fn, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  return g_failed;
}

/* ---- scenario: PONYTAIL_ENABLE=0 is pure pass-through ------------------------- */
static int sc_disabled(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(!in_shim(dlsym(h, "cuMemAlloc_v2")));
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  void *fn = NULL;
  CHECK_EQ(gpa("cuLaunchKernel", &fn, 13000, 0, NULL), CUDA_SUCCESS);
  CHECK(!in_shim(fn));
  int rc = sc_passthrough();
  g_failed |= rc;
  rc = sc_kernels();
  return g_failed | rc;
}

/* ---- scenario: hook verdicts (shim variant with tests/preload/test_hooks.c) -- */
static void stub_swap(void) {}
static void stub_fall(void) {}
static void stub_skip(void) {}
static void stub_orig(void) {}
static int sc_hooks(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub_swap, (char *)"_Z6swapmev", "_Z6swapmev", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(h, (const char *)stub_fall, (char *)"_Z6fallmev_p3", "_Z6fallmev_p3", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(h, (const char *)stub_skip, (char *)"_Z6skipmev", "_Z6skipmev", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(h, (const char *)stub_orig, (char *)"_Z6origmev", "_Z6origmev", -1, 0, 0, 0, 0, 0);
  dim3 g = {1, 1, 1};
  uint64_t v = 3;
  void *args[] = {&v, &v, &v};
  const void *stubs[] = {(const void *)stub_swap, (const void *)stub_fall, (const void *)stub_skip,
                         (const void *)stub_orig};
  for (int s = 0; s < 4; s++) {
    cudaKernel_t k;
    CHECK_EQ(__cudaGetKernel(&k, stubs[s]), cudaSuccess);
    for (int i = 0; i < 3; i++) CHECK_EQ(__cudaLaunchKernel(k, g, g, args, 0, 0), cudaSuccess);
    cudaLaunchConfig_t cfg = {.gridDim = g, .blockDim = g};
    CHECK_EQ(cudaLaunchKernelExC(&cfg, stubs[s], args), cudaSuccess);
  }
  /* The shim's parameter probes ran off the end of each kernel's list: the
   * runtime's last error must still read success (PyTorch checks it after
   * every launch), and an error the app left pending must survive a launch. */
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  const char *nm = NULL;
  CHECK(cudaFuncGetName(&nm, (const void *)sc_hooks) != cudaSuccess);
  cudaKernel_t ko;
  CHECK_EQ(__cudaGetKernel(&ko, stubs[3]), cudaSuccess);
  CHECK_EQ(__cudaLaunchKernel(ko, g, g, args, 0, 0), cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  /* driver path */
  CUmodule m;
  CUfunction f;
  CHECK_EQ(cuModuleLoadData(&m, "drv_fallme_p3\ndrv_swapme\ndrv_origme"), CUDA_SUCCESS);
  const char *names[] = {"drv_fallme_p3", "drv_swapme", "drv_origme"};
  for (int s = 0; s < 3; s++) {
    CHECK_EQ(cuModuleGetFunction(&f, m, names[s]), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
    CUlaunchConfig dc = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
    CHECK_EQ(cuLaunchKernelEx(&dc, f, args, NULL), CUDA_SUCCESS);
  }
  CHECK_EQ(fakecuda_launches("_Z6swapmev"), 0);
  CHECK_EQ(fakecuda_launches("_Z6fallmev_p3"), 4);
  CHECK_EQ(fakecuda_launches("_Z6skipmev"), 0);
  CHECK_EQ(fakecuda_launches("_Z6origmev"), 5);
  CHECK_EQ(fakecuda_launches("drv_swapme"), 0);
  CHECK_EQ(fakecuda_launches("drv_fallme_p3"), 2);
  CHECK_EQ(fakecuda_launches("drv_origme"), 2);
  return g_failed;
}
static void check_hooks(const char *js) {
  char act[32];
  CHECK_EQ(stat_kernel(js, "_Z6swapmev", act, sizeof act), 4);
  CHECK(!strcmp(act, "swapped"));
  CHECK_EQ(stat_kernel(js, "_Z6fallmev_p3", act, sizeof act), 4);
  CHECK(!strcmp(act, "fallback"));
  CHECK_EQ(stat_kernel(js, "_Z6skipmev", act, sizeof act), 4);
  CHECK(!strcmp(act, "swapped"));
  CHECK_EQ(stat_kernel(js, "_Z6origmev", act, sizeof act), 5);
  CHECK_EQ(stat_kernel(js, "drv_fallme_p3", act, sizeof act), 2);
  CHECK(!strcmp(act, "fallback"));
  CHECK_EQ(stat_kernel(js, "drv_swapme", act, sizeof act), 2);
  CHECK(!strcmp(act, "swapped"));
  CHECK(strstr(js, "\"fallback_reasons\":{\"test reason\":6}") != NULL);
  /* every hooked kernel in "hooked", with totals over them all */
  CHECK(strstr(js, "\"hooked\":[") != NULL);
  CHECK(strstr(js, "{\"name\":\"_Z6fallmev_p3\",\"launches\":4,\"swapped\":0,\"skipped\":0,\"fallbacks\":4}") != NULL);
  CHECK(strstr(js, "\"fallbacks\":6,\"fallback_reasons\"") != NULL);
  CHECK(strstr(js, "\"hooks\":{\"verified\":3,\"verify_failures\":1,\"faults_planted\":0,\"verify_skipped\":0}") != NULL);
  /* the forwarded driver launches of runtime launches were not hooked again:
   * origme's 5 runtime launches reached the driver once each */
  CHECK_EQ(stat_call(js, "cuLaunchKernel"), 3 + 3 + 3 + 1);
  /* each decision logged once per kernel */
  const char *pid = strstr(js, "\"pid\":");
  char *log = read_log(g_dir, pid ? atoi(pid + 6) : 0);
  CHECK(log != NULL);
  if (!log) return;
  int swaps = 0, falls = 0;
  for (const char *p = log; (p = strstr(p, "custom kernel ")); p++) swaps++;
  for (const char *p = log; (p = strstr(p, ": fallback ")); p++) falls++;
  CHECK_EQ(swaps, 4); /* _Z6swapmev, _Z6origmev, drv_swapme, drv_origme */
  CHECK_EQ(falls, 2);
  CHECK(strstr(log, "info: fallback _Z6fallmev_p3: test reason\n") != NULL);
}

/* ---- scenario: the hooks' workspace comes from the routing layer -------------
 * Test hook "wsme" (tests/preload/test_hooks.c) allocates 8 MiB with
 * pt_route_internal_alloc, as hooks/flash_ops.c does for the decode kernel's
 * workspace. Run twice: pooled (the launch is swapped), and with
 * PONYTAIL_POOL=0 (the real cuMemAlloc_v2, counted as pass-through; the hook
 * falls back with a reason). */
#define WS_BYTES (8ull << 20)
static void stub_ws(void) {}
static const char *g_scenario; /* the scenario's name, set before it forks */
/* wspool_nopool runs with PONYTAIL_POOL=0 (tests/preload/meson.build). */
static int ws_pool_off(void) { return !strcmp(g_scenario, "wspool_nopool"); }
static int sc_wspool(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub_ws, (char *)"_Z4wsmev", "_Z4wsmev", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(h);
  uint64_t allocs0 = fakecuda_count("cuMemAlloc_v2"), bytes0 = fakecuda_bytes_in_use();
  cudaKernel_t k;
  dim3 g = {1, 1, 1};
  CHECK_EQ(__cudaGetKernel(&k, (const void *)stub_ws), cudaSuccess);
  CHECK_EQ(__cudaLaunchKernel(k, g, g, NULL, 0, 0), cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  if (ws_pool_off()) {
    /* passed through to the real allocator, then the original launch */
    CHECK_EQ(fakecuda_count("cuMemAlloc_v2"), allocs0 + 1);
    CHECK_EQ(fakecuda_bytes_in_use(), bytes0 + WS_BYTES);
    CHECK_EQ(fakecuda_count("cuMemCreate"), 0);
    CHECK_EQ(fakecuda_launches("_Z4wsmev"), 1);
  } else {
    /* from the pool (VMM), not the real allocator; the launch swapped */
    CHECK_EQ(fakecuda_count("cuMemAlloc_v2"), allocs0);
    CHECK(fakecuda_count("cuMemCreate") >= 1);
    CHECK(fakecuda_device_bytes(0) >= WS_BYTES);
    CHECK_EQ(fakecuda_launches("_Z4wsmev"), 0);
  }
  return g_failed;
}
static void check_wspool(const char *js) {
  char act[32] = "";
  CHECK_EQ(stat_kernel(js, "_Z4wsmev", act, sizeof act), 1);
  CHECK_EQ(alloc_stat(js, "internal_allocs"), 1);
  CHECK_EQ(alloc_stat(js, "internal_bytes"), WS_BYTES);
  CHECK_EQ(stat_call(js, "cuMemAlloc_v2"), 0); /* the shim's own call is not the app's */
  if (!ws_pool_off()) {
    CHECK(!strcmp(act, "swapped"));
    CHECK(strstr(js, "\"routing\":true") != NULL);
    CHECK(alloc_stat(js, "pooled_allocs") >= 1);
    CHECK_EQ(alloc_stat(js, "passthrough_allocs"), 0);
    CHECK_EQ(alloc_stat(js, "live_bytes"), WS_BYTES);
    return;
  }
  CHECK(!strcmp(act, "fallback"));
  CHECK(strstr(js, "\"routing\":false") != NULL);
  CHECK_EQ(alloc_stat(js, "pooled_allocs"), 0);
  CHECK_EQ(alloc_stat(js, "passthrough_allocs"), 1);
  CHECK(strstr(js, "\"fallback_reasons\":{\"workspace not pooled\":1}") != NULL);
  const char *pid = strstr(js, "\"pid\":");
  char *log = read_log(g_dir, pid ? atoi(pid + 6) : 0);
  CHECK(log != NULL);
  if (log) CHECK(strstr(log, "info: fallback _Z4wsmev: workspace not pooled\n") != NULL);
}

/* ---- scenario: attention Ponytail does not swap says so --------------------
 * The real hooks (hooks/attn_report.c): a cuDNN SDPA kernel through the
 * driver and torch's mem-efficient forward through the runtime, twice each,
 * run unchanged, each counted as a fallback with its reason and logged once;
 * a cuDNN kernel that is not attention stays pass-through. attn_report runs
 * with PONYTAIL_ATTN_MASKED=0 (on, the default, the mem-efficient forward
 * goes to its hook: attn_masked); attn_report_off runs with PONYTAIL_ATTN=off
 * and the option at its default: every reason reads "disabled". */
#define AR_CUDNN "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0"
#define AR_MEFF "_Z40fmha_cutlassF_bf16_aligned_64x128_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutlass10bfloat16_tENS1_4arch4Sm80ELb1ELi64ELi128ELi128ELb1ELb1EE6ParamsE"
#define AR_LEAN "_ZN5cudnn6fusion21lean_reduction_kernelIfLi256EEEvv"
#define AR_R_CUDNN "cuDNN SDPA: torch's SDPA choice never reached Ponytail (PONYTAIL_TORCH_SDPA=flash routes SDPA to flash)"
#define AR_R_MEFF "mem-efficient SDPA (attention mask or unsupported shape): masked decode off (PONYTAIL_ATTN_MASKED=0)"
static void stub_meff(void) {}
static int sc_attn_report(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub_meff, (char *)AR_MEFF, AR_MEFF, -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(h);
  uint64_t v = 7;
  void *args[] = {&v};
  dim3 g = {1, 1, 1};
  CUmodule m;
  CUfunction fc, fl;
  CHECK_EQ(cuModuleLoadData(&m, AR_CUDNN "\n" AR_LEAN), CUDA_SUCCESS);
  CHECK_EQ(cuModuleGetFunction(&fc, m, AR_CUDNN), CUDA_SUCCESS);
  CHECK_EQ(cuModuleGetFunction(&fl, m, AR_LEAN), CUDA_SUCCESS);
  CUlaunchConfig dc = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
  CHECK_EQ(cuLaunchKernel(fc, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
  CHECK_EQ(cuLaunchKernelEx(&dc, fc, args, NULL), CUDA_SUCCESS);
  CHECK_EQ(cuLaunchKernel(fl, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL), CUDA_SUCCESS);
  for (int i = 0; i < 2; i++) CHECK_EQ(cudaLaunchKernel((const void *)stub_meff, g, g, args, 0, 0), cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  /* the originals ran with their arguments; no parameter query was made */
  CHECK_EQ(fakecuda_launches(AR_CUDNN), 2);
  CHECK_EQ(fakecuda_launches(AR_MEFF), 2);
  CHECK_EQ(fakecuda_launches(AR_LEAN), 1);
  CHECK_EQ(fakecuda_arg_sum(), 7 * 5);
  CHECK_EQ(fakecuda_count("cuFuncGetParamInfo"), 0);
  CHECK_EQ(fakecuda_count("cudaFuncGetParamInfo"), 0);
  return g_failed;
}
static void check_attn_report(const char *js) {
  int off = !strcmp(g_scenario, "attn_report_off");
  const char *rc = off ? "disabled" : AR_R_CUDNN, *rm = off ? "disabled" : AR_R_MEFF;
  char act[32] = "", want[512];
  CHECK_EQ(stat_kernel(js, AR_CUDNN, act, sizeof act), 2);
  CHECK(!strcmp(act, "fallback"));
  CHECK_EQ(stat_kernel(js, AR_MEFF, act, sizeof act), 2);
  CHECK(!strcmp(act, "fallback"));
  CHECK_EQ(stat_kernel(js, AR_LEAN, act, sizeof act), 1);
  CHECK(!strcmp(act, "passthrough"));
  if (off) snprintf(want, sizeof want, "\"fallback_reasons\":{\"disabled\":4}");
  else snprintf(want, sizeof want, "\"fallback_reasons\":{\"%s\":2,\"%s\":2}", rc, rm);
  CHECK(strstr(js, want) != NULL);
  const char *pid = strstr(js, "\"pid\":");
  char *log = read_log(g_dir, pid ? atoi(pid + 6) : 0);
  if (!log) log = read_log(g_dir, getpid()); /* opened at load in the parent, inherited */
  CHECK(log != NULL);
  if (!log) return;
  int falls = 0;
  for (const char *p = log; (p = strstr(p, ": fallback ")); p++) falls++;
  CHECK_EQ(falls, 2);
  snprintf(want, sizeof want, "info: fallback %s: %s\n", AR_CUDNN, rc);
  CHECK(strstr(log, want) != NULL);
  snprintf(want, sizeof want, "info: fallback %s: %s\n", AR_MEFF, rm);
  CHECK(strstr(log, want) != NULL);
}

/* ---- scenario: PONYTAIL_ATTN_MASKED=1 hands torch's mem-efficient forward
 * to its hook (hooks/torch_mem_eff.c) --------------------------------------
 * The same kernel name as attn_report, under the option: the shim now asks
 * its parameter size (the hook reads the launch), the fake's one 8-byte
 * parameter is no Params layout, so both launches run the original with
 * that reason, logged once. attn_masked_default: the same with the option
 * unset (on by default). */
#define AM_R_SIZE "Params layout not recognised (8 bytes)"
static int sc_attn_masked(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub_meff, (char *)AR_MEFF, AR_MEFF, -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(h);
  uint64_t v = 7;
  void *args[] = {&v};
  dim3 g = {1, 1, 1};
  for (int i = 0; i < 2; i++) CHECK_EQ(cudaLaunchKernel((const void *)stub_meff, g, g, args, 0, 0), cudaSuccess);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  CHECK_EQ(fakecuda_launches(AR_MEFF), 2);
  CHECK_EQ(fakecuda_arg_sum(), 7 * 2);
  CHECK(fakecuda_count("cudaFuncGetParamInfo") >= 1);
  return g_failed;
}
static void check_attn_masked(const char *js) {
  char act[32] = "", want[512];
  CHECK_EQ(stat_kernel(js, AR_MEFF, act, sizeof act), 2);
  CHECK(!strcmp(act, "fallback"));
  CHECK(strstr(js, "\"fallback_reasons\":{\"" AM_R_SIZE "\":2}") != NULL);
  const char *pid = strstr(js, "\"pid\":");
  char *log = read_log(g_dir, pid ? atoi(pid + 6) : 0);
  if (!log) log = read_log(g_dir, getpid());
  CHECK(log != NULL);
  if (!log) return;
  snprintf(want, sizeof want, "info: fallback %s: %s\n", AR_MEFF, AM_R_SIZE);
  CHECK(strstr(log, want) != NULL);
}

struct scenario {
  const char *name;
  int (*run)(void);
  void (*check)(const char *json); /* NULL: no stats expected */
  int expect_stats;
};
/* ---- stats snapshots (PONYTAIL_STATS_EVERY=1) ------------------------------- */

/* The exec'd children of sc_snapshot: n small cudaMalloc/cudaFree pairs, then
 * either wait to be killed (SIGKILL: no exit stats) or exit after 1.3 s,
 * with one more pair, so that a snapshot came first. */
static int snapshot_child(const char *mode) {
  void *p = NULL;
  for (int i = 0; i < 3; i++) {
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) return 1;
  }
  if (!strcmp(mode, "--killed-child")) {
    sleep(30); /* killed long before */
    return 1;
  }
  usleep(1300 * 1000);
  if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) return 1;
  int seen = 0, bad = shim_threads_unblocked(0, &seen); /* the snapshot thread takes no signal */
  if (bad || seen < 1) {
    fprintf(stderr, "snapshot child: %d of %d shim threads can take signals\n", bad, seen);
    return 1;
  }
  return 0;
}

static pid_t spawn_self(const char *mode) {
  fflush(NULL);
  pid_t c = fork();
  if (c == 0) {
    execl("/proc/self/exe", "preload_test", mode, g_dir, (char *)NULL);
    _exit(127);
  }
  return c;
}

/* A whole JSON object: starts with '{', its last non-space character is '}'. */
static int whole_json(const char *js) {
  if (!js || js[0] != '{') return 0;
  size_t n = strlen(js);
  while (n && (js[n - 1] == '\n' || js[n - 1] == ' ')) n--;
  return n && js[n - 1] == '}';
}

/* The stats child c left once it exited with status 0: a whole JSON object
 * that says it was written as `written` ("exit" or "snapshot"). */
static char *stats_after_exit(pid_t c, const char *written) {
  int st = 0;
  waitpid(c, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char *js = read_stats(g_dir, (int)c), want[64];
  snprintf(want, sizeof want, "\"written\":\"%s\"", written);
  CHECK(whole_json(js));
  CHECK(js && strstr(js, want));
  return js;
}

static int sc_snapshot(void) {
  void *p = NULL; /* a call of its own: this process writes exit stats too (check_snapshot) */
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  /* 1: a process killed with SIGKILL leaves its last snapshot. */
  pid_t a = spawn_self("--killed-child");
  CHECK(a > 0);
  char *js = NULL;
  for (int i = 0; i < 100; i++) { /* up to 5 s: the first snapshot comes after 1 s */
    usleep(50 * 1000);
    js = read_stats(g_dir, (int)a);
    if (js && strstr(js, "\"written\":\"snapshot\"") && stat_call(js, "cudaMalloc") == 3) break;
  }
  CHECK(js && strstr(js, "\"written\":\"snapshot\""));
  CHECK(whole_json(js));
  CHECK_EQ(js ? stat_call(js, "cudaMalloc") : -2, 3);
  kill(a, SIGKILL);
  int st = 0;
  waitpid(a, &st, 0);
  CHECK(WIFSIGNALED(st));
  js = read_stats(g_dir, (int)a);
  CHECK(whole_json(js)); /* the snapshot stays: the kill wrote nothing */
  CHECK(js && strstr(js, "\"written\":\"snapshot\""));
  /* 2: a process that exits: its exit stats replace the snapshots. */
  pid_t b = spawn_self("--exiting-child");
  CHECK(b > 0);
  js = stats_after_exit(b, "exit");
  CHECK_EQ(js ? stat_call(js, "cudaMalloc") : -2, 4);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/stats.%d.json.tmp", g_dir, (int)b);
  CHECK(access(tmp, F_OK) != 0); /* no temporary file left behind */
  /* 3: a forked child (no exec) that ends with _exit, as a Python
   * multiprocessing fork child does (vLLM's engine core): no exit stats, so
   * its first call must have started snapshots of its own. */
  fflush(NULL);
  pid_t c = fork();
  if (c == 0) _exit(snapshot_child("--exiting-child")); /* its calls, then its threads' masks */
  CHECK(c > 0);
  stats_after_exit(c, "snapshot");
  return g_failed;
}

static void check_snapshot(const char *js) {
  CHECK(strstr(js, "\"written\":\"exit\"") != NULL); /* the scenario child's own exit stats */
}

static const struct scenario scenarios[] = {
    {"passthrough", sc_passthrough, check_passthrough, 1},
    {"kernels", sc_kernels, check_kernels, 1},
    {"routing", sc_routing, NULL, 1},
    {"fork", sc_fork, NULL, 1},
    {"threads", sc_threads, check_threads, 1},
    {"faults", sc_faults, NULL, 1},
    {"garbage", sc_passthrough, NULL, 0}, /* garbage PONYTAIL_* values: works, defaults kept */
    {"disabled", sc_disabled, NULL, 0},
    {"hooks", sc_hooks, check_hooks, 1},
    {"wspool", sc_wspool, check_wspool, 1},
    {"wspool_nopool", sc_wspool, check_wspool, 1},
    {"attn_report", sc_attn_report, check_attn_report, 1},
    {"attn_report_off", sc_attn_report, check_attn_report, 1},
    {"attn_masked", sc_attn_masked, check_attn_masked, 1},
    {"attn_masked_default", sc_attn_masked, check_attn_masked, 1},
    {"snapshot", sc_snapshot, check_snapshot, 1},
};

char pt_test_marker(void) { return 'A'; }

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SCENARIO DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[2];
  mkdir(g_dir, 0755); /* may exist */
  if (!strcmp(argv[1], "--killed-child") || !strcmp(argv[1], "--exiting-child")) return snapshot_child(argv[1]);
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    if (strcmp(scenarios[i].name, argv[1])) continue;
    g_scenario = scenarios[i].name;
    int status;
    char *js = run_child(g_dir, scenarios[i].run, &status, NULL);
    if (status) {
      fprintf(stderr, "scenario %s: child failed (status %d)\n", argv[1], status);
      return 1;
    }
    if (scenarios[i].expect_stats && !js) {
      fprintf(stderr, "scenario %s: no stats file\n", argv[1]);
      return 1;
    }
    if (!scenarios[i].expect_stats && js) {
      fprintf(stderr, "scenario %s: unexpected stats file\n", argv[1]);
      return 1;
    }
    if (js && scenarios[i].check) scenarios[i].check(js);
    if (g_failed) fprintf(stderr, "stats: %.4000s\n", js ? js : "(none)");
    return g_failed;
  }
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return 2;
}
