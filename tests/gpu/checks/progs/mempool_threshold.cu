/* The reported crash case: cuda-samples' streamOrderedAllocation, self-checking.
 *
 * Phase 1 (basicStreamOrderedAllocation): a non-blocking stream, three
 * cudaMallocAsync of 4 MiB, pageable cudaMemcpyAsync in, c = a + b, the frees
 * stream-ordered, a synchronize, the result checked, and the stream DESTROYED
 * (as the sample does).
 * Phase 2 (streamOrderedAllocationPostSync): a NEW non-blocking stream, two
 * events, the default pool's release threshold set to UINT64_MAX, then 20
 * iterations of the same work (alloc x3, pageable H2D x2, kernel, D2H, free
 * x3, synchronize), timed with the events, every iteration checked.
 *
 *   mempool_threshold [keep-stream]
 * keep-stream: phase 2 reuses phase 1's stream (destroyed at the end only),
 * which tells a stream-lifetime problem from anything else phase 2 does. */
#include <math.h>

#include "prog_common.h"

#define MAX_ITER 20

__global__ void vectorAddGPU(const float *a, const float *b, float *c, int N) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < N) c[idx] = a[idx] + b[idx];
}

static void verify(const float *a, const float *b, const float *c, int n, const char *what, int it) {
  for (int i = 0; i < n; i++) {
    float ref = a[i] + b[i];
    if (memcmp(&ref, &c[i], sizeof ref))
      FAIL("%s iteration %d: c[%d] = %.9g, expected %.9g", what, it, i, (double)c[i], (double)ref);
  }
}

/* One round of the sample's work on stream s. */
static void round_trip(cudaStream_t s, const float *a, const float *b, float *c, int nelem) {
  size_t bytes = (size_t)nelem * sizeof(float);
  float *d_a = NULL, *d_b = NULL, *d_c = NULL;
  CK(cudaMallocAsync((void **)&d_a, bytes, s));
  CK(cudaMallocAsync((void **)&d_b, bytes, s));
  CK(cudaMallocAsync((void **)&d_c, bytes, s));
  if (!d_a || !d_b || !d_c) FAIL("cudaMallocAsync returned NULL");
  CK(cudaMemcpyAsync(d_a, a, bytes, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(d_b, b, bytes, cudaMemcpyHostToDevice, s));
  dim3 block(256);
  dim3 grid((unsigned)((nelem + 255) / 256));
  vectorAddGPU<<<grid, block, 0, s>>>(d_a, d_b, d_c, nelem);
  CK_LAUNCH();
  CK(cudaFreeAsync(d_a, s));
  CK(cudaFreeAsync(d_b, s));
  CK(cudaMemcpyAsync(c, d_c, bytes, cudaMemcpyDeviceToHost, s));
  CK(cudaFreeAsync(d_c, s));
  CK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
  int keep_stream = argc > 1 && !strcmp(argv[1], "keep-stream");
  const int dev = 0, nelem = 1048576;
  size_t bytes = (size_t)nelem * sizeof(float);
  int pools = 0;
  CK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev));
  if (!pools) FAIL("device %d does not support memory pools", dev);

  /* pageable host memory, as in the sample */
  float *a = (float *)xmalloc(bytes), *b = (float *)xmalloc(bytes), *c = (float *)xmalloc(bytes);
  uint32_t seed = 12345;
  for (int n = 0; n < nelem; n++) {
    a[n] = (float)(lcg(&seed) >> 8) / 16777216.0f;
    b[n] = (float)(lcg(&seed) >> 8) / 16777216.0f;
  }
  uint64_t h = FNV_INIT;

  /* ---- phase 1 ---- */
  printf("Starting basicStreamOrderedAllocation()\n");
  CK(cudaSetDevice(dev));
  cudaStream_t s1;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  memset(c, 0, bytes);
  round_trip(s1, a, b, c, nelem);
  verify(a, b, c, nelem, "phase 1", 0);
  h = fnv1a(h, c, bytes);
  printf("basicStreamOrderedAllocation PASSED\n");
  if (!keep_stream) CK(cudaStreamDestroy(s1));
  fflush(stdout);

  /* ---- phase 2 ---- */
  printf("Starting streamOrderedAllocationPostSync()\n");
  fflush(stdout);
  CK(cudaSetDevice(dev));
  cudaStream_t s2 = s1;
  if (!keep_stream) CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t start, end;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&end));
  cudaMemPool_t memPool;
  CK(cudaDeviceGetDefaultMemPool(&memPool, dev));
  uint64_t thresholdVal = UINT64_MAX;
  CK(cudaMemPoolSetAttribute(memPool, cudaMemPoolAttrReleaseThreshold, (void *)&thresholdVal));
  uint64_t got = 0;
  CK(cudaMemPoolGetAttribute(memPool, cudaMemPoolAttrReleaseThreshold, &got));
  if (got != UINT64_MAX) FAIL("release threshold reads back %llu", (unsigned long long)got);

  CK(cudaEventRecord(start, s2));
  for (int i = 0; i < MAX_ITER; i++) {
    memset(c, 0, bytes);
    round_trip(s2, a, b, c, nelem);
    verify(a, b, c, nelem, "phase 2", i);
  }
  CK(cudaEventRecord(end, s2));
  CK(cudaEventSynchronize(end));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, start, end));
  printf("INFO mempool_threshold: total elapsed time = %f ms over %d iterations\n", ms, MAX_ITER);
  h = fnv1a(h, c, bytes);
  printf("streamOrderedAllocationPostSync PASSED\n");
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(end));
  CK(cudaStreamDestroy(s2));
  CK(cudaDeviceSynchronize());
  free(a);
  free(b);
  free(c);
  printf("RESULT mempool_threshold %016llx iters=%d mode=%s\n", (unsigned long long)h, MAX_ITER,
         keep_stream ? "keep-stream" : "destroy-stream");
  return 0;
}
