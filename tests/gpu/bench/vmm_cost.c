/* What does growing the pool cost per 2 MiB, by physical handle size? Maps 1 GiB as handles of
 * 2..512 MiB (one mapping per handle), plain and exportable (POSIX fd handles, what
 * PONYTAIL_IPC=fd creates), and times cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap /
 * cuMemRelease per 2 MiB granule; cuMemAlloc + cuMemFree of 1 GiB for comparison. Also asks
 * whether 2 MiB of a larger handle can be mapped, or unmapped out of its mapping (what moving
 * single granules of a large handle would need).
 * Build: cc -O2 -I. -I/usr/local/cuda/include tests/gpu/bench/vmm_cost.c -o vmm_cost -lcuda
 * Run: ./vmm_cost [reps]   (median of reps; prints one table) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/bench_time.h"

#define CK(x)                                                              \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)r_); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static double now_us(void) { return bench_now_ns() / 1e3; }

#define TOTAL ((size_t)1 << 30)
#define GRAN ((size_t)2 << 20)
#define MAXH 512

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || reps > 64) reps = 5;
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const size_t ngran = TOTAL / GRAN;
  printf("%-28s %9s %9s %9s %9s %9s %9s   (us per 2 MiB granule, median of %d)\n", "handle / mapping", "create",
         "map", "access", "unmap", "release", "sum", reps);
  size_t sizes[] = {GRAN, 4 * GRAN, 16 * GRAN, 64 * GRAN, 256 * GRAN};
  for (int exp = 0; exp < 2; exp++) {
    prop.requestedHandleTypes = exp ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++) {
      size_t hs = sizes[si], nh = TOTAL / hs;
      double t[5][64];
      for (int rep = 0; rep < reps; rep++) {
        CUdeviceptr va;
        CK(cuMemAddressReserve(&va, TOTAL, GRAN, 0, 0));
        CUmemGenericAllocationHandle h[MAXH];
        double t0 = now_us();
        for (size_t i = 0; i < nh; i++) CK(cuMemCreate(&h[i], hs, &prop, 0));
        double t1 = now_us();
        for (size_t i = 0; i < nh; i++) CK(cuMemMap(va + i * hs, hs, 0, h[i], 0));
        double t2 = now_us();
        for (size_t i = 0; i < nh; i++) CK(cuMemSetAccess(va + i * hs, hs, &acc, 1));
        double t3 = now_us();
        CK(cuMemsetD8(va, 1, TOTAL)); /* touch it all, so nothing is deferred to first use */
        CK(cuCtxSynchronize());
        double t4 = now_us();
        for (size_t i = 0; i < nh; i++) CK(cuMemUnmap(va + i * hs, hs));
        double t5 = now_us();
        for (size_t i = 0; i < nh; i++) CK(cuMemRelease(h[i]));
        double t6 = now_us();
        CK(cuMemAddressFree(va, TOTAL));
        t[0][rep] = (t1 - t0) / ngran;
        t[1][rep] = (t2 - t1) / ngran;
        t[2][rep] = (t3 - t2) / ngran;
        t[3][rep] = (t5 - t4) / ngran;
        t[4][rep] = (t6 - t5) / ngran;
      }
      double m[5], sum = 0;
      for (int k = 0; k < 5; k++) sum += (m[k] = bench_median(t[k], reps));
      char name[64];
      snprintf(name, sizeof name, "%zu MiB%s", hs >> 20, exp ? ", exportable" : "");
      printf("%-28s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, m[0], m[1], m[2], m[3], m[4], sum);
    }
  }
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  /* cuMemAlloc for comparison: alloc + free of 1 GiB per 2 MiB. */
  double a[64], f[64];
  for (int rep = 0; rep < reps; rep++) {
    CUdeviceptr p;
    double t0 = now_us();
    CK(cuMemAlloc(&p, TOTAL));
    double t1 = now_us();
    CK(cuMemsetD8(p, 1, TOTAL));
    CK(cuCtxSynchronize());
    double t2 = now_us();
    CK(cuMemFree(p));
    double t3 = now_us();
    a[rep] = (t1 - t0) / ngran;
    f[rep] = (t3 - t2) / ngran;
  }
  printf("%-28s %9.2f %9s %9s %9.2f %9s %9.2f\n", "cuMemAlloc/cuMemFree 1 GiB", bench_median(a, reps), "-", "-",
         bench_median(f, reps), "-", bench_median(a, reps) + bench_median(f, reps));
  /* Can 2 MiB of a 32 MiB handle be mapped, or one granule of its mapping be unmapped? */
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  CK(cuMemAddressReserve(&va, 16 * GRAN, GRAN, 0, 0));
  CK(cuMemCreate(&h, 16 * GRAN, &prop, 0));
  CUresult r = cuMemMap(va, GRAN, 0, h, 0);
  printf("map of 2 MiB (offset 0) of a 32 MiB handle: CUresult %d\n", (int)r);
  if (r == CUDA_SUCCESS) CK(cuMemUnmap(va, GRAN));
  r = cuMemMap(va, GRAN, GRAN, h, 0);
  printf("map of 2 MiB (offset 2 MiB) of a 32 MiB handle: CUresult %d\n", (int)r);
  if (r == CUDA_SUCCESS) CK(cuMemUnmap(va, GRAN));
  CK(cuMemMap(va, 16 * GRAN, 0, h, 0));
  CK(cuMemSetAccess(va, 16 * GRAN, &acc, 1));
  r = cuMemUnmap(va + 4 * GRAN, GRAN);
  printf("unmap of 2 MiB inside a 32 MiB mapping: CUresult %d\n", (int)r);
  if (r != CUDA_SUCCESS) CK(cuMemUnmap(va, 16 * GRAN));
  else {
    (void)cuMemUnmap(va, 4 * GRAN);
    (void)cuMemUnmap(va + 5 * GRAN, 11 * GRAN);
  }
  CK(cuMemRelease(h));
  CK(cuMemAddressFree(va, 16 * GRAN));
  return 0;
}
