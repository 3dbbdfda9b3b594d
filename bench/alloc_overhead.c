/* Allocation interception overhead, host side: what the shim adds to a
 * stream-ordered allocation + free pair of 4 KiB (one of the ~750 small
 * tensors of each HF decode step under torch's cudaMallocAsync backend) and
 * of 2 MiB. Whether a row is pooled or passed through is the environment's
 * choice (PONYTAIL_KV_MIN_ASYNC; bench/alloc_overhead.sh runs both).
 *
 * Run under LD_PRELOAD=libponytail_shim.so with the fake CUDA libraries on
 * LD_LIBRARY_PATH (bench/alloc_overhead.sh does both). As in
 * bench/launch_overhead.c, the "bare" arm is a second copy of the fake
 * runtime and driver loaded with dlmopen(LM_ID_NEWLM), where the preloaded
 * shim does not exist; the "shim" arm calls the same fakes through the shim.
 * Each arm: 10^6 pairs, 5 alternating runs, median ns per pair. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_time.h"

#define N 1000000
#define RUNS 5

typedef cudaError_t (*set_dev_fn)(int);
typedef cudaError_t (*malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*free_async_fn)(void *, cudaStream_t);

struct arm {
  malloc_async_fn alloc;
  free_async_fn free;
};

static double run(const struct arm *a, size_t size) {
  double t0 = bench_now_ns();
  for (int i = 0; i < N; i++) {
    void *p = NULL;
    if (a->alloc(&p, size, 0) != cudaSuccess || a->free(p, 0) != cudaSuccess) return -1;
  }
  return (bench_now_ns() - t0) / N;
}

static int setup(struct arm *a, void *rt) {
  set_dev_fn set = (set_dev_fn)dlsym(rt, "cudaSetDevice");
  a->alloc = (malloc_async_fn)dlsym(rt, "cudaMallocAsync");
  a->free = (free_async_fn)dlsym(rt, "cudaFreeAsync");
  return set && a->alloc && a->free && set(0) == cudaSuccess ? 0 : -1;
}

int main(void) {
  void *rt2 = dlmopen(LM_ID_NEWLM, "libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  struct arm bare, shim;
  if (!rt2 || setup(&bare, rt2)) {
    fprintf(stderr, "bare setup failed: %s\n", rt2 ? "cudaSetDevice" : dlerror());
    return 1;
  }
  /* The main namespace through the PLT: the preloaded shim's entry points. */
  shim.alloc = cudaMallocAsync;
  shim.free = cudaFreeAsync;
  if (cudaSetDevice(0) != cudaSuccess) {
    fprintf(stderr, "shim setup failed\n");
    return 1;
  }
  Dl_info info;
  int shimmed = dladdr((void *)shim.alloc, &info) && strstr(info.dli_fname, "ponytail_shim");
  if (!shimmed) fprintf(stderr, "warning: the shim is not preloaded: both arms are bare\n");
  const size_t sizes[] = {4096, (size_t)2 << 20};
  const char *what[] = {"4 KiB", "2 MiB"};
  printf("allocation overhead, %d cudaMallocAsync + cudaFreeAsync pairs x %d runs, median ns/pair%s\n", N, RUNS,
         shimmed ? "" : " (NOT SHIMMED)");
  for (int k = 0; k < 2; k++) {
    double b[RUNS], s[RUNS];
    run(&bare, sizes[k]), run(&shim, sizes[k]); /* warm-up (the pool grows once) */
    for (int r = 0; r < RUNS; r++) {
      b[r] = run(&bare, sizes[k]);
      s[r] = run(&shim, sizes[k]);
    }
    double mb = bench_median(b, RUNS), ms = bench_median(s, RUNS);
    printf("  %-22s bare (fake driver) %7.1f  shim %7.1f  difference %+7.1f\n", what[k], mb, ms, ms - mb);
  }
  return 0;
}
