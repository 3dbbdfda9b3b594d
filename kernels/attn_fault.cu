// The planted fault of PONYTAIL_TEST_FAULT: scales the output O of a decode
// attention launch in place by a factor, so the correctness verdict of
// `ponytail bench` (and verify mode) has a known-wrong kernel to catch. It
// runs on the same stream right after Ponytail's kernel wrote O; a plain
// stream-ordered launch with no workspace, memset or synchronisation, so it
// is as capture-safe as the launch it follows.
//
// Grid (b * seqlen_q), PT_ATTN_FAULT_THREADS threads: one CTA per query row
// walks that row's h * head_dim elements through O's strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/attn_kparams.h"

namespace pt_attn_fault {

__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half *p, float v) { *p = __float2half(v); }

template <typename T> __device__ void scale(const pt_attn_fault_kparams &p) {
  const int64_t row = blockIdx.x;
  const int64_t bi = row / p.sq, i = row % p.sq;
  T *const o = static_cast<T *>(p.o) + bi * p.o_bs + i * p.o_rs;
  const int n = p.h * p.d;
  for (int idx = threadIdx.x; idx < n; idx += PT_ATTN_FAULT_THREADS) {
    T *const x = o + (int64_t)(idx / p.d) * p.o_hs + idx % p.d;
    store(x, to_f(*x) * p.factor);
  }
}

}  // namespace pt_attn_fault

extern "C" __global__ void __launch_bounds__(PT_ATTN_FAULT_THREADS)
    pt_attn_fault_bf16(const __grid_constant__ pt_attn_fault_kparams p) {
  pt_attn_fault::scale<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(PT_ATTN_FAULT_THREADS)
    pt_attn_fault_fp16(const __grid_constant__ pt_attn_fault_kparams p) {
  pt_attn_fault::scale<__half>(p);
}
