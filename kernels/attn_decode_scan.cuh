// The masked decode's key-range scan (kernels/attn_decode.cu): before its first K/V tile a CTA
// reads its bias rows once and narrows its split to the keys some row may see, so that leading
// and trailing fully-masked keys (left or right padding) are never read from K/V. Also the
// addressing of a bias row, which the K/V ring's bias copies share. Kept apart from the decode
// loop because it is a pass of its own, run once per CTA before the loop, with its own tuning
// (SCAN_CPT) and history.
#ifndef PT_KERNELS_ATTN_DECODE_SCAN_CUH
#define PT_KERNELS_ATTN_DECODE_SCAN_CUH
#include <stdint.h>

#include "kernels/attn_kparams.h"
#include "kernels/ptx.cuh"

namespace pt_attn {

// Bias row i (of p.bias_rows) of a (batch, KV head) unit; bb is the bias of
// the unit's batch entry. Broadcast over heads (bias_hs == 0) the CTA rows of
// one query position share a row, so row i is query position i; otherwise
// row i is CTA row i: row_of's query position i / group of head kh * group + i % group, spelled
// out here because through row_of the d 64 kt kernels compile to other code (instruction order),
// which these kernels were not measured with.
template <typename T>
__device__ __forceinline__ const T *bias_src(const pt_attn_kparams &p, const T *bb, int kh, int group,
                                             int i) {
  return p.bias_hs == 0 ? bb + i * p.bias_rs
                        : bb + (kh * group + i % group) * p.bias_hs + (i / group) * p.bias_rs;
}

// Whether a key of one 8-key chunk (16 bytes at `key`, a multiple of 8) of a
// bias row may be seen: its bias is not -inf (NaN counts as seen: torch's
// kernels propagate it). Keys at or past key_end are left out.
template <typename T>
__device__ __forceinline__ bool chunk_visible(const T *row, int key, int key_end) {
  constexpr uint32_t NI = dt<T>::NEG_INF_BITS;
  if (key + 8 <= key_end) {
    const uint4 v = *reinterpret_cast<const uint4 *>(row + key);
    return (v.x & 0xffffu) != NI || (v.x >> 16) != NI || (v.y & 0xffffu) != NI || (v.y >> 16) != NI ||
           (v.z & 0xffffu) != NI || (v.z >> 16) != NI || (v.w & 0xffffu) != NI || (v.w >> 16) != NI;
  }
  const uint16_t *const bits = reinterpret_cast<const uint16_t *>(row);
  bool any = false;
  for (int k = key; k < key_end; ++k) any |= bits[k] != NI;
  return any;
}

// 8-key chunks each thread tests per step of the key-range scan: with one
// bias row, SCAN_CPT independent 16-byte loads in flight per thread, so a
// step covers NT * SCAN_CPT * 8 = 8192 keys for one memory latency.
constexpr int SCAN_CPT = 8;

// Narrows [key_begin, key_end) (key_begin a multiple of 8) to the keys some
// row of this CTA may see, to 8-key granularity; an empty range when every
// key is masked. The keys let back in around the visible ones are masked for
// every row, so computing them is harmless. Every thread of the CTA calls it
// (it synchronises once); the loops are uniform.
//
// It runs before the first K/V load, so its latency is paid by every masked
// launch: one pass over the range (one memory round trip per 8192 keys, all
// of a split of up to 8192 keys at once), each thread keeping the first and
// last visible chunk it saw, reduced per warp and then over the 4 warps
// through shared memory. A first version scanned from the front and then from
// the back, with a barrier round per direction: 1.3-2.0 us per launch, 0.9-1.5
// for one pass (bench/records/2026-12-02-decode-tail.md).
template <typename T, int NT>
__device__ __forceinline__ void narrow_to_visible(const pt_attn_kparams &p, const T *bb, int kh,
                                                  int group, int &key_begin, int &key_end) {
  __shared__ int s_vis_lo[NT / 32], s_vis_hi[NT / 32];
  const int tid = threadIdx.x, nb = p.bias_rows;
  const int c0 = key_begin >> 3, c1 = (key_end + 7) >> 3;  // chunks [c0, c1)
  int first = key_end, last = -1;                          // keys
#pragma unroll 1
  for (int cb = c0; cb < c1; cb += NT * SCAN_CPT) {
    bool vis[SCAN_CPT];
#pragma unroll
    for (int j = 0; j < SCAN_CPT; ++j) vis[j] = false;
#pragma unroll 1
    for (int i = 0; i < nb; ++i) {
      const T *const row = bias_src(p, bb, kh, group, i);
#pragma unroll
      for (int j = 0; j < SCAN_CPT; ++j) {
        const int c = cb + j * NT + tid;
        if (c < c1) vis[j] |= chunk_visible(row, c * 8, key_end);
      }
    }
#pragma unroll
    for (int j = 0; j < SCAN_CPT; ++j) {
      const int c = cb + j * NT + tid;
      if (vis[j]) {
        first = min(first, c * 8);
        last = max(last, min(c * 8 + 7, key_end - 1));
      }
    }
  }
  first = __reduce_min_sync(0xffffffffu, first);
  last = __reduce_max_sync(0xffffffffu, last);
  if ((tid & 31) == 0) {
    s_vis_lo[tid >> 5] = first;
    s_vis_hi[tid >> 5] = last;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < NT / 32; ++w) {
    first = min(first, s_vis_lo[w]);
    last = max(last, s_vis_hi[w]);
  }
  key_begin = first < key_end ? first : key_end;
  key_end = first < key_end ? last + 1 : key_end;
}

}  // namespace pt_attn

#endif
