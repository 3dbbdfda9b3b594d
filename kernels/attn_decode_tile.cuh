// The decode kernel's tiles (kernels/attn_decode.cu): per head dim the stages, chunks and
// occupancy (cfg), the swizzled [rows][D] tile layout (swz), the zeroed padding of a tensor
// narrower than the kernel's D (zero_tile_pad), and the first step of the 4-warp merge that both
// decode loops share (warp_rescale). Device code, included by kernels/attn_decode.cu only.
#pragma once

#include <stdint.h>

#include "kernels/attn_kparams.h"
#include "kernels/ptx.cuh"

namespace pt_attn {

constexpr int BK = PT_ATTN_BK;
constexpr int NT = PT_ATTN_THREADS;

template <int D> struct cfg {
  // Stages: enough bytes in flight per SM with 3 (d64), 2 (d128) or 1 (d256)
  // CTAs resident; keep in sync with pt_attn_plan_make (kernels/attn_plan.c).
  static constexpr int NSTAGE = D == 64 ? 4 : (D == 128 ? PT_ATTN_NSTAGE_D128 : 3);
  static constexpr int CH = D / 8;          // 16-byte chunks per row
  static constexpr int TILE = BK * D;       // elements of one K (or V) tile
  static constexpr int RED_LD = D + 8;      // padded fp32 row of the warp merge
  static constexpr int MIN_BLOCKS = D == 64 ? 3 : (D == 128 ? PT_ATTN_OCC_D128 : 1);
};

// Element offset of 16-byte chunk ch of row `row` in a [rows][D] tile. The
// XOR spreads 8 consecutive rows of one chunk column over all 32 banks, so
// both the ldmatrix reads (8 rows, same chunk) and the cp.async writes (8
// chunks of a row) are conflict-free.
template <int D> __device__ __forceinline__ int swz(int row, int ch) {
  return row * D + ((ch ^ (row & 7)) << 3);
}

// Zeroes chunks RC.. CH - 1 of every row of the ring's K tiles (V = 0) or V tiles (V = 1): the
// padding of a tensor narrower than D, when K and V differ in width. Row r of stage s's tile is
// ring row (2s + V) * BK + r, and BK is a multiple of 8, so swz over the ring's rows is each
// tile's own swizzle.
template <typename T, int D, int NST, int RC, int V>
__device__ __forceinline__ void zero_tile_pad(T *ring, int tid) {
  constexpr int PC = D / 8 - RC;
  if constexpr (PC > 0) {
    for (int c = tid; c < NST * BK * PC; c += NT) {
      const int r = c / PC;  // row r % BK of stage r / BK
      *reinterpret_cast<uint4 *>(ring + swz<D>((r / BK * 2 + V) * BK + r % BK, RC + c % PC)) =
          make_uint4(0, 0, 0, 0);
    }
  }
}

// The 4-warp merge's first step, shared by both decode loops: the writer lanes publish this
// warp's (m, l) for its two rows ra and rb, every thread waits for all four warps, and gets the
// factors sc0 and sc1 that rescale its accumulators of those rows to the CTA's max. Only the rows
// and the writer lanes differ between the loops (keys-as-M: rows q0/q1, lanes g == 0; rows-as-M:
// rows g/g + 8, lanes t == 0).
__device__ __forceinline__ void warp_rescale(float *red_m, float *red_l, int warp, int ra, int rb,
                                             bool writer, float m0, float m1, float l0, float l1,
                                             float &sc0, float &sc1) {
  if (writer) {
    red_m[warp * 16 + ra] = m0;
    red_m[warp * 16 + rb] = m1;
    red_l[warp * 16 + ra] = l0;
    red_l[warp * 16 + rb] = l1;
  }
  __syncthreads();
  float M0 = NEG_INF, M1 = NEG_INF;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    M0 = fmaxf(M0, red_m[w * 16 + ra]);
    M1 = fmaxf(M1, red_m[w * 16 + rb]);
  }
  sc0 = ex2(m0 - (M0 == NEG_INF ? 0.f : M0));
  sc1 = ex2(m1 - (M1 == NEG_INF ? 0.f : M1));
}

}  // namespace pt_attn
