/* What the shim adds to PyTorch's expandable segments, host side: one
 * segment cycle as PyTorch's allocator makes it when its cache grows and is
 * emptied (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease of
 * 2 MiB segments, 8 at a time), through the stand-in libc10_cuda.so of the
 * preload tests (tests/preload/fake_c10.c) and the fake driver. Run by
 * bench/vmm_overhead.sh under the shim with PONYTAIL_TORCH_VMM=on (the handles
 * kept and translated) and =off (passed through), alternately; prints the median
 * ns per segment of RUNS runs of N cycles. The fake's own calls are syscalls
 * (memfd_create, ftruncate, mmap), a few microseconds; the real driver's are
 * slower, so the ratio here bounds the shim's share from above. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_time.h"

#define N 2000
#define SEGS 8
#define RUNS 7

int fc10_init(int device, uint64_t segment_bytes);
int fc10_map(int first, int n);
int fc10_unmap(int first, int n);

int main(void) {
  CUcontext c = NULL;
  if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) || fc10_init(0, 2u << 20)) {
    fprintf(stderr, "vmm_overhead: setup failed\n");
    return 1;
  }
  double t[RUNS];
  for (int r = 0; r < RUNS; r++) {
    double t0 = bench_now_ns();
    for (int i = 0; i < N; i++)
      if (fc10_map(0, SEGS) || fc10_unmap(0, SEGS)) {
        fprintf(stderr, "vmm_overhead: a cycle failed\n");
        return 1;
      }
    t[r] = (bench_now_ns() - t0) / ((double)N * SEGS);
  }
  printf("%.1f\n", bench_median(t, RUNS));
  return 0;
}
