// The fastest single kernel we can write that only reads N bytes (issue 17's floor question):
// a grid-stride loop of 16-byte loads (streaming __ldcs, evict-first, or read-only __ldg), UNROLL loads in
// flight per thread, the words XOR-folded so the loads cannot be dropped. Built by
// tests/gpu/bench/read_floor.sh with nvcc into a shared library that read_floor.py calls through
// ctypes on torch's current stream (so torch's CUDA-graph capture records it).
#include <cuda_runtime.h>
#include <stdint.h>

template <bool STREAM>
__device__ __forceinline__ uint4 ld(const uint4 *a) {
  return STREAM ? __ldcs(a) : __ldg(a);
}

template <int UNROLL, bool STREAM>
__global__ void __launch_bounds__(512) read_fold(const uint4 *__restrict__ p, size_t n, unsigned *out) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = ld<STREAM>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = ld<STREAM>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(out, 1u);  // practically never: keeps every load live
}

// Returns a cudaError_t. bytes must be a multiple of 16, p 16-byte aligned.
extern "C" __attribute__((visibility("default"))) int pt_read_fold(const void *p, size_t bytes, int blocks,
                                                                   int threads, int unroll, int streaming,
                                                                   void *out, void *stream) {
  const size_t n = bytes / 16;
  cudaStream_t s = (cudaStream_t)stream;
  const uint4 *q = (const uint4 *)p;
  unsigned *o = (unsigned *)out;
#define PT_RF(U)                                                                    \
  case U:                                                                           \
    if (streaming) read_fold<U, true><<<blocks, threads, 0, s>>>(q, n, o);          \
    else read_fold<U, false><<<blocks, threads, 0, s>>>(q, n, o);                   \
    break;
  switch (unroll) {
    PT_RF(1)
    PT_RF(2)
    PT_RF(4)
    PT_RF(8)
    default: return (int)cudaErrorInvalidValue;
  }
#undef PT_RF
  return (int)cudaGetLastError();
}

// The decode kernel's access order instead of a grid stride: CTA b reads its own contiguous chunk
// of `per` 16-byte words (as a decode CTA streams its split's K/V), the CTA's threads striding
// through it with UNROLL loads in flight. With rot, CTA b starts at sixteenth (b * 7) % 16 of its
// chunk and wraps around, so CTAs that run in lockstep are not at the same offset of their chunks
// at the same time. per must be a multiple of 16 * UNROLL * blockDim.x.
template <int UNROLL>
__global__ void __launch_bounds__(512) read_chunk(const uint4 *__restrict__ p, size_t per, int rot, unsigned *out) {
  const uint4 *const c = p + (size_t)blockIdx.x * per;
  const size_t start = rot ? (size_t)((blockIdx.x * 7) % 16) * (per / 16) : 0;
  unsigned acc = 0;
  for (size_t j = threadIdx.x; j < per; j += (size_t)UNROLL * blockDim.x) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      size_t i = start + j + (size_t)u * blockDim.x;
      if (i >= per) i -= per;
      v[u] = __ldcs(c + i);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(out, 1u);
}

// Returns a cudaError_t; cudaErrorInvalidValue when bytes do not split into blocks chunks of whole
// passes (16 * unroll * threads words each).
extern "C" __attribute__((visibility("default"))) int pt_read_chunk(const void *p, size_t bytes, int blocks,
                                                                    int threads, int unroll, int rot, void *out,
                                                                    void *stream) {
  const size_t n = bytes / 16, per = n / (size_t)blocks;
  if (per * blocks != n || per % (16 * (size_t)unroll * threads) != 0) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  const uint4 *q = (const uint4 *)p;
  unsigned *o = (unsigned *)out;
  switch (unroll) {
    case 4: read_chunk<4><<<blocks, threads, 0, s>>>(q, per, rot, o); break;
    case 8: read_chunk<8><<<blocks, threads, 0, s>>>(q, per, rot, o); break;
    default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}
