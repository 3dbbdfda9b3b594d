/* Stream-ordered allocation inside CUDA graphs.
 * Graph 1: a global-mode stream capture of cudaMallocAsync + two kernels +
 * cudaFreeAsync (the temporary lives inside the graph), instantiated once and
 * launched 10 times on fresh inputs written by a kernel outside the graph.
 * Graph 2: a captured cudaMallocAsync whose allocation outlives the graph,
 * instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch, launched 3
 * times (each launch frees the previous one's block), the last block read
 * and freed with cudaFreeAsync outside the graph.
 * The graph's input and output buffers are plain cudaMalloc (16 MiB: pooled
 * by the shim). Every launch's output is checked on the host. */
#include "prog_common.h"

#define N (4u << 20) /* elements: 16 MiB of unsigned */

__global__ void k_set(unsigned *p, unsigned n, unsigned salt) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i * 3u + salt;
}
__global__ void k_scale(const unsigned *in, unsigned *tmp, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tmp[i] = in[i] * 2u + 1u;
}
__global__ void k_add(const unsigned *tmp, unsigned *out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tmp[i] + i;
}

int main(void) {
  const unsigned blocks = (N + 255) / 256;
  const size_t bytes = (size_t)N * 4;
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned *in = NULL, *out = NULL;
  CK(cudaMalloc((void **)&in, bytes));
  CK(cudaMalloc((void **)&out, bytes));
  unsigned *h = (unsigned *)xmalloc(bytes);
  uint64_t dig = FNV_INIT;

  /* ---- graph 1: the allocation lives and dies inside the graph ---- */
  unsigned *tmp = NULL;
  cudaGraph_t g1;
  cudaGraphExec_t e1;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync((void **)&tmp, bytes, s));
  k_scale<<<blocks, 256, 0, s>>>(in, tmp, N);
  CK_LAUNCH();
  k_add<<<blocks, 256, 0, s>>>(tmp, out, N);
  CK_LAUNCH();
  CK(cudaFreeAsync(tmp, s));
  CK(cudaStreamEndCapture(s, &g1));
  CK(cudaGraphInstantiate(&e1, g1, 0));
  for (unsigned it = 0; it < 10; it++) {
    k_set<<<blocks, 256, 0, s>>>(in, N, it * 1000u);
    CK_LAUNCH();
    CK(cudaGraphLaunch(e1, s));
    CK(cudaMemcpyAsync(h, out, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (unsigned i = 0; i < N; i++) {
      unsigned want = (i * 3u + it * 1000u) * 2u + 1u + i;
      if (h[i] != want) FAIL("graph 1 launch %u: out[%u] = %u, expected %u", it, i, h[i], want);
    }
    dig = fnv1a(dig, h, bytes);
  }

  /* ---- graph 2: the allocation outlives the graph (auto-free on launch) ---- */
  unsigned *keep = NULL;
  cudaGraph_t g2;
  cudaGraphExec_t e2;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync((void **)&keep, bytes, s));
  k_set<<<blocks, 256, 0, s>>>(keep, N, 777u);
  CK_LAUNCH();
  CK(cudaStreamEndCapture(s, &g2));
  CK(cudaGraphInstantiate(&e2, g2, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (unsigned it = 0; it < 3; it++) {
    CK(cudaGraphLaunch(e2, s));
    CK(cudaMemcpyAsync(h, keep, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (unsigned i = 0; i < N; i++)
      if (h[i] != i * 3u + 777u) FAIL("graph 2 launch %u: keep[%u] = %u", it, i, h[i]);
  }
  dig = fnv1a(dig, h, bytes);
  CK(cudaFreeAsync(keep, s)); /* the last launch's block, freed outside the graph */
  CK(cudaStreamSynchronize(s));

  CK(cudaGraphExecDestroy(e1));
  CK(cudaGraphExecDestroy(e2));
  CK(cudaGraphDestroy(g1));
  CK(cudaGraphDestroy(g2));
  CK(cudaDeviceGraphMemTrim(0));
  CK(cudaFree(in));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  CK(cudaDeviceSynchronize());
  free(h);
  printf("RESULT graph_alloc %016llx launches=13\n", (unsigned long long)dig);
  return 0;
}
