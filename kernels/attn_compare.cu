// Verify-mode comparison: reference O/LSE (torch's kernel, strided) against
// Ponytail's (contiguous scratch), reduced on the GPU to 4 floats so the hook
// copies back 16 bytes. One CTA: decode outputs are small (b*h*d elements),
// and a single block needs no inter-block state, hence no workspace and no
// memset, which keeps the launch capture-safe.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/attn_kparams.h"

namespace pt_attn_cmp {

constexpr int NT = PT_ATTN_CMP_THREADS;

__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

// |x| with NaN and Inf mapped to +Inf, so a plain fmaxf reduction (which
// would drop NaNs) still reports them.
__device__ __forceinline__ float mag(float x) {
  const float a = fabsf(x);
  return a <= 3.402823466e38f ? a : __int_as_float(0x7f800000);
}

__device__ __forceinline__ float block_max(float v, float *sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // sh may still be read by the previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < NT / 32 ? sh[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T> __device__ void compare(const pt_attn_cmp_kparams &p) {
  __shared__ float sh[NT / 32];
  const T *const ref = static_cast<const T *>(p.ref_o);
  const T *const tst = static_cast<const T *>(p.test_o);
  float dmax = 0.f, rmax = 0.f;
  const int64_t n = (int64_t)p.b * p.sq * p.h * p.d;
  for (int64_t idx = threadIdx.x; idx < n; idx += NT) {
    const int dd = (int)(idx % p.d);
    int64_t rest = idx / p.d;
    const int hh = (int)(rest % p.h);
    rest /= p.h;
    const int i = (int)(rest % p.sq);
    const int64_t bi = rest / p.sq;
    const float r = to_f(ref[bi * p.o_bs + i * p.o_rs + hh * p.o_hs + dd]);
    const float x = to_f(tst[idx]);
    dmax = fmaxf(dmax, mag(r - x));
    rmax = fmaxf(rmax, mag(r));
  }
  float ldmax = 0.f, lrmax = 0.f;
  if (p.ref_lse && p.test_lse) {
    const int64_t nl = (int64_t)p.b * p.h * p.sq;
    for (int64_t idx = threadIdx.x; idx < nl; idx += NT) {
      const float r = p.ref_lse[idx];
      ldmax = fmaxf(ldmax, mag(r - p.test_lse[idx]));
      lrmax = fmaxf(lrmax, mag(r));
    }
  }
  dmax = block_max(dmax, sh);
  rmax = block_max(rmax, sh);
  ldmax = block_max(ldmax, sh);
  lrmax = block_max(lrmax, sh);
  if (threadIdx.x == 0) {
    p.result[0] = dmax;
    p.result[1] = rmax;
    p.result[2] = ldmax;
    p.result[3] = lrmax;
  }
}

}  // namespace pt_attn_cmp

extern "C" __global__ void __launch_bounds__(pt_attn_cmp::NT)
    pt_attn_compare_bf16(const __grid_constant__ pt_attn_cmp_kparams p) {
  pt_attn_cmp::compare<__nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(pt_attn_cmp::NT)
    pt_attn_compare_fp16(const __grid_constant__ pt_attn_cmp_kparams p) {
  pt_attn_cmp::compare<__half>(p);
}
