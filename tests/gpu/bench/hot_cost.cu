/* What does one allocation cost on the host, call by call? The driver queries the shim's routing
 * makes per call (context, stream context, capture status, current mem pool), the runtime's
 * cudaGetLastError that torch calls around each allocation, and stream-ordered alloc + free
 * pairs of 4 KiB, 256 KiB and 4 MiB through cudaMallocAsync / cudaFreeAsync on an explicit
 * stream (the default pool's release threshold at its maximum, as torch's backend sets it):
 * first with no device work queued (the host path alone), then with a small kernel launched on
 * every LAUNCH_EVERY-th new block, so that frees land behind work in flight, as in a decode
 * step ("+launch" rows). A kernel on every block made those rows GPU-bound (4.5 us per
 * iteration, the rate of back-to-back tiny kernels here); "launch only" is one launch, of which
 * the +launch rows hold 1/LAUNCH_EVERY per pair.
 * Run bare and under LD_PRELOAD=libponytail_shim.so: the pair rows then show what the shim's
 * routing adds (pooled, or passed through below PONYTAIL_KV_MIN_ASYNC).
 * Build: nvcc -O2 -cudart shared -I. tests/gpu/bench/hot_cost.cu -lcuda
 *        (libcudart shared: the shim interposes its exported symbols)
 * Run: ./hot_cost LABEL [reps]   (one line per row: LABEL row ns/op, median of reps) */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_time.h"

#define N 20000
#define MAXREPS 64

static const char *label = "bare";
static int reps = 7;

#define CKR(x)                                                             \
  do {                                                                     \
    int r_ = (int)(x);                                                     \
    if (r_) {                                                              \
      fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, r_);     \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static void report(const char *row, double *v) { printf("%-8s %-28s %9.1f\n", label, row, bench_median(v, reps)); }

/* Times the statement N times per rep; prints ns per iteration. */
#define TIME_ROW(row, ...)                           \
  do {                                               \
    double v_[MAXREPS];                              \
    for (int r_ = 0; r_ < reps; r_++) {              \
      double t0_ = bench_now_ns();                   \
      for (int i_ = 0; i_ < N; i_++) { __VA_ARGS__; } \
      v_[r_] = (bench_now_ns() - t0_) / N;           \
    }                                                \
    report(row, v_);                                 \
  } while (0)

__global__ void touch_kernel(unsigned char *p) { p[threadIdx.x] = (unsigned char)threadIdx.x; }

/* A window of live blocks, as tensors live across a few ops: allocate one, free the oldest
 * (launch: every LAUNCH_EVERY-th new block is written by a kernel before it is freed). */
#define WIN 16
#define LAUNCH_EVERY WIN /* k == 0 once per window */
static void pairs(const char *row, size_t size, cudaStream_t s, bool launch) {
  void *live[WIN] = {0};
  for (int i = 0; i < WIN; i++) CKR(cudaMallocAsync(&live[i], size, s));
  int k = 0;
  for (int w = 0; w < 2000; w++) { /* warm-up: let both pools reach their steady state */
    CKR(cudaFreeAsync(live[k], s));
    CKR(cudaMallocAsync(&live[k], size, s));
    k = (k + 1) % WIN;
  }
  TIME_ROW(row, {
    CKR(cudaFreeAsync(live[k], s));
    CKR(cudaMallocAsync(&live[k], size, s));
    if (launch && k == 0) touch_kernel<<<1, 32, 0, s>>>((unsigned char *)live[k]);
    k = (k + 1) % WIN;
  });
  for (int i = 0; i < WIN; i++) CKR(cudaFreeAsync(live[i], s));
  CKR(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
  if (argc > 1) label = argv[1];
  if (argc > 2) reps = atoi(argv[2]);
  if (reps < 1 || reps > MAXREPS) reps = 7;
  CKR(cudaSetDevice(0));
  CKR(cudaFree(0));
  cudaStream_t s;
  CKR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t mp;
  CKR(cudaDeviceGetDefaultMemPool(&mp, 0));
  uint64_t thr = UINT64_MAX;
  CKR(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &thr));
  CUdevice dev;
  CKR(cuDeviceGet(&dev, 0));
  CUcontext c;
  CUmemoryPool cp;
  CUstreamCaptureStatus st;
  TIME_ROW("cuCtxGetCurrent", CKR(cuCtxGetCurrent(&c)));
  TIME_ROW("cuStreamGetCtx", CKR(cuStreamGetCtx((CUstream)s, &c)));
  TIME_ROW("cuStreamIsCapturing", CKR(cuStreamIsCapturing((CUstream)s, &st)));
  TIME_ROW("cuDeviceGet+GetMemPool", {
    CKR(cuDeviceGet(&dev, 0));
    CKR(cuDeviceGetMemPool(&cp, dev));
  });
  TIME_ROW("cudaGetLastError", CKR(cudaGetLastError()));
  TIME_ROW("cudaGetDevice", {
    int d;
    CKR(cudaGetDevice(&d));
  });
  pairs("pair 4 KiB", 4096, s, false);
  pairs("pair 256 KiB", 256 << 10, s, false);
  pairs("pair 4 MiB", 4 << 20, s, false);
  void *one = NULL;
  CKR(cudaMalloc(&one, 4096));
  for (int w = 0; w < 2000; w++) touch_kernel<<<1, 32, 0, s>>>((unsigned char *)one);
  TIME_ROW("launch only", touch_kernel<<<1, 32, 0, s>>>((unsigned char *)one));
  CKR(cudaStreamSynchronize(s));
  CKR(cudaFree(one));
  pairs("pair+launch 4 KiB", 4096, s, true);
  pairs("pair+launch 256 KiB", 256 << 10, s, true);
  pairs("pair+launch 4 MiB", 4 << 20, s, true);
  CKR(cudaStreamDestroy(s));
  return 0;
}
