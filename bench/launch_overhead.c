/* Launch interception overhead: ns added per launch by libponytail_shim.so.
 *
 * Run under LD_PRELOAD=libponytail_shim.so with the fake CUDA libraries on
 * LD_LIBRARY_PATH (bench/launch_overhead.sh does both). In one process run:
 *   - "bare": a second copy of the fake runtime and driver loaded with
 *     dlmopen(LM_ID_NEWLM): a fresh link-map namespace, where the preloaded
 *     shim does not exist;
 *   - "shim": the same fakes in the main namespace, reached through the shim
 *     (the PLT for runtime calls; cuGetProcAddress for the driver).
 * The same fake work runs in both, so the difference is the shim's cost.
 * Each arm: 10^6 launches, 5 alternating runs, median ns/launch. With
 * THREADS=T (T > 1) it then runs both runtime arms again in T threads at once
 * (ns per launch per thread): what the shim's counters cost when several
 * threads launch the same kernel, as a server with a thread per GPU does. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_time.h"

#include "shim/cudart_decl.h"

#define N 1000000
#define RUNS 5

typedef void **(*regfat_fn)(void *);
typedef void (*regfunc_fn)(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *, dim3 *,
                           int *);
typedef cudaError_t (*getkernel_fn)(cudaKernel_t *, const void *);
typedef cudaError_t (*launch_fn)(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);

struct arm {
  const char *name;
  launch_fn rt_launch;
  cudaKernel_t handle;
  PFN_cuLaunchKernel_v4000 drv_launch;
  CUfunction func;
};

static void stub(void) {}

static int setup(struct arm *a, void *rt, void *cu, regfat_fn regfat, regfunc_fn regfunc, getkernel_fn getk,
                 launch_fn launch) {
  void **h = regfat((void *)"fatbin");
  regfunc(h, (const char *)stub, (char *)"bench_kernel", "bench_kernel", -1, 0, 0, 0, 0, 0);
  if (getk(&a->handle, (const void *)stub) != cudaSuccess) return -1;
  a->rt_launch = launch;
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(cu, "cuGetProcAddress_v2");
  PFN_cuModuleLoadData_v2000 load;
  PFN_cuModuleGetFunction_v2000 getf;
  if (!gpa || gpa("cuLaunchKernel", (void **)&a->drv_launch, 13000, 0, NULL) ||
      gpa("cuModuleLoadData", (void **)&load, 13000, 0, NULL) ||
      gpa("cuModuleGetFunction", (void **)&getf, 13000, 0, NULL))
    return -1;
  CUmodule m;
  if (load(&m, "bench_drv_kernel") || getf(&a->func, m, "bench_drv_kernel")) return -1;
  (void)rt;
  return 0;
}

static double run_rt(const struct arm *a) {
  dim3 g = {1, 1, 1};
  uint64_t v = 1;
  void *args[] = {&v};
  double t0 = bench_now_ns();
  for (int i = 0; i < N; i++) a->rt_launch(a->handle, g, g, args, 0, 0);
  return (bench_now_ns() - t0) / N;
}

static double run_drv(const struct arm *a) {
  uint64_t v = 1;
  void *args[] = {&v};
  double t0 = bench_now_ns();
  for (int i = 0; i < N; i++) a->drv_launch(a->func, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL);
  return (bench_now_ns() - t0) / N;
}

struct par {
  const struct arm *a;
  pthread_barrier_t *go;
  double ns;
};

static void *par_run(void *arg) {
  struct par *p = arg;
  pthread_barrier_wait(p->go);
  p->ns = run_rt(p->a);
  return NULL;
}

/* Mean ns/launch over T threads launching at once through arm a. */
static double run_rt_threads(const struct arm *a, int t) {
  pthread_t th[64];
  struct par p[64];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)t);
  for (int i = 0; i < t; i++) {
    p[i] = (struct par){.a = a, .go = &go};
    pthread_create(&th[i], NULL, par_run, &p[i]);
  }
  double sum = 0;
  for (int i = 0; i < t; i++) {
    pthread_join(th[i], NULL);
    sum += p[i].ns;
  }
  pthread_barrier_destroy(&go);
  return sum / t;
}

int main(void) {
  /* bare: fresh namespace */
  void *rt2 = dlmopen(LM_ID_NEWLM, "libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!rt2) {
    fprintf(stderr, "dlmopen: %s\n", dlerror());
    return 1;
  }
  Lmid_t ns;
  dlinfo(rt2, RTLD_DI_LMID, &ns);
  void *cu2 = dlmopen(ns, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  struct arm bare = {.name = "bare"}, shim = {.name = "shim"};
  if (!cu2 ||
      setup(&bare, rt2, cu2, (regfat_fn)dlsym(rt2, "__cudaRegisterFatBinary"),
            (regfunc_fn)dlsym(rt2, "__cudaRegisterFunction"), (getkernel_fn)dlsym(rt2, "__cudaGetKernel"),
            (launch_fn)dlsym(rt2, "__cudaLaunchKernel"))) {
    fprintf(stderr, "bare setup failed\n");
    return 1;
  }
  /* shim: the main namespace, through the PLT */
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (setup(&shim, NULL, cu, __cudaRegisterFatBinary, __cudaRegisterFunction, __cudaGetKernel,
            __cudaLaunchKernel)) {
    fprintf(stderr, "shim setup failed\n");
    return 1;
  }
  Dl_info info;
  int shimmed = dladdr((void *)shim.drv_launch, &info) && strstr(info.dli_fname, "ponytail_shim");
  if (!shimmed) fprintf(stderr, "warning: the shim is not preloaded: both arms are bare\n");

  double rt_b[RUNS], rt_s[RUNS], dr_b[RUNS], dr_s[RUNS];
  run_rt(&bare), run_rt(&shim), run_drv(&bare), run_drv(&shim); /* warm-up */
  for (int r = 0; r < RUNS; r++) {
    rt_b[r] = run_rt(&bare);
    rt_s[r] = run_rt(&shim);
    dr_b[r] = run_drv(&bare);
    dr_s[r] = run_drv(&shim);
  }
  double mrb = bench_median(rt_b, RUNS), mrs = bench_median(rt_s, RUNS), mdb = bench_median(dr_b, RUNS), mds = bench_median(dr_s, RUNS);
  printf("launch overhead, %d launches x %d runs, median ns/launch%s\n", N, RUNS, shimmed ? "" : " (NOT SHIMMED)");
  printf("  runtime  __cudaLaunchKernel: bare %6.1f  shim %6.1f  added %6.1f\n", mrb, mrs, mrs - mrb);
  printf("  driver   cuLaunchKernel:     bare %6.1f  shim %6.1f  added %6.1f\n", mdb, mds, mds - mdb);
  int t = getenv("THREADS") ? atoi(getenv("THREADS")) : 1;
  if (t > 1 && t <= 64) {
    for (int r = 0; r < RUNS; r++) {
      rt_b[r] = run_rt_threads(&bare, t);
      rt_s[r] = run_rt_threads(&shim, t);
    }
    mrb = bench_median(rt_b, RUNS), mrs = bench_median(rt_s, RUNS);
    printf("  runtime, %2d threads at once:  bare %6.1f  shim %6.1f  added %6.1f\n", t, mrb, mrs, mrs - mrb);
  }
  return 0;
}
