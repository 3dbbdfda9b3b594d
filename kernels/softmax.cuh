// The online softmax of the attention kernels (decode: kernels/attn_decode.cu, prefill:
// kernels/attn_prefill.cu), in the log2 domain, over the m16n8 accumulator layout that both
// mma.sync and wgmma give a thread: s[i][0..1] are two columns of row g, s[i][2..3] the same
// columns of row g + 8, for N blocks of 8 columns; the other three lanes of the quad hold the
// rest of each row.
#ifndef PT_KERNELS_SOFTMAX_CUH
#define PT_KERNELS_SOFTMAX_CUH
#include "kernels/ptx.cuh"

namespace pt_attn {

constexpr float NEG_INF = -__builtin_huge_valf();
constexpr float LN2 = 0.693147180559945309f;

// LSE (natural log) of a row from its max M and sum L in the log2 domain;
// -inf for a row that saw no key (L == 0: masked entirely by its bias).
static __device__ __forceinline__ float row_lse(float M, float L) {
  return L > 0.f ? (M + __log2f(L)) * LN2 : NEG_INF;
}

// One step over scores already scaled into the log2 domain (masked: -inf). The running
// maxima m0, m1 take in the new scores (max over the quad), the scores become
// exp2(s - m), the running sums l0, l1 (this thread's part of each row) are rescaled and
// take them in, and al0, al1 are the factors the caller rescales its output accumulators by.
// A row that has seen no key yet keeps m = -inf: the exponent base is guarded, so nothing
// turns NaN and such a row's scores and factor are 0.
template <int N>
static __device__ __forceinline__ void online_softmax(float (&s)[N][4], float &m0, float &m1, float &l0,
                                                      float &l1, float &al0, float &al1) {
  float mx0 = fmaxf(s[0][0], s[0][1]), mx1 = fmaxf(s[0][2], s[0][3]);
#pragma unroll
  for (int i = 1; i < N; ++i) {
    mx0 = fmaxf(mx0, fmaxf(s[i][0], s[i][1]));
    mx1 = fmaxf(mx1, fmaxf(s[i][2], s[i][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
  const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
  al0 = ex2(m0 - mu0);
  al1 = ex2(m1 - mu1);
  m0 = mn0;
  m1 = mn1;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i][0] = ex2(s[i][0] - mu0);
    s[i][1] = ex2(s[i][1] - mu0);
    s[i][2] = ex2(s[i][2] - mu1);
    s[i][3] = ex2(s[i][3] - mu1);
  }
  l0 = l0 * al0;
  l1 = l1 * al1;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    l0 += s[i][0] + s[i][1];
    l1 += s[i][2] + s[i][3];
  }
}

// The same step over raw scores (masked: -inf), with the scale into the log2 domain `sl2`
// folded in: the maxima are taken on the raw scores (sl2 > 0 keeps their order) and each
// exponent is one FMA, exp2(s * sl2 - m). m0, m1 are kept in the log2 domain, as above.
// LAZY > 0: a running max moves only when the tile's max exceeds it by more than LAZY (log2
// units), so the exponentials stay below 2^LAZY and, once the max has settled, the factors are
// exactly 1 and the caller may skip rescaling its accumulators (fp32 holds the larger sums;
// the result is the same up to rounding, since O and l are scaled by the same stale max).
// A factor is exactly 1 whenever its row's max did not move (LAZY = 0: did not rise).
template <int LAZY, int N>
static __device__ __forceinline__ void online_softmax_scaled(float (&s)[N][4], float sl2, float &m0, float &m1,
                                                             float &l0, float &l1, float &al0, float &al1) {
  float mx0 = fmaxf(s[0][0], s[0][1]), mx1 = fmaxf(s[0][2], s[0][3]);
#pragma unroll
  for (int i = 1; i < N; ++i) {
    mx0 = fmaxf(mx0, fmaxf(s[i][0], s[i][1]));
    mx1 = fmaxf(mx1, fmaxf(s[i][2], s[i][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float x0 = mx0 * sl2, x1 = mx1 * sl2;  // -inf * sl2 = -inf
  const float mn0 = x0 > m0 + (float)LAZY ? x0 : m0, mn1 = x1 > m1 + (float)LAZY ? x1 : m1;
  const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
  al0 = mn0 == m0 ? 1.f : ex2(m0 - mu0);
  al1 = mn1 == m1 ? 1.f : ex2(m1 - mu1);
  m0 = mn0;
  m1 = mn1;
  float t0 = 0.f, t1 = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i][0] = ex2(fmaf(s[i][0], sl2, -mu0));
    s[i][1] = ex2(fmaf(s[i][1], sl2, -mu0));
    s[i][2] = ex2(fmaf(s[i][2], sl2, -mu1));
    s[i][3] = ex2(fmaf(s[i][3], sl2, -mu1));
    t0 += s[i][0] + s[i][1];
    t1 += s[i][2] + s[i][3];
  }
  l0 = l0 * al0 + t0;
  l1 = l1 * al1 + t1;
}

}  // namespace pt_attn
#endif
