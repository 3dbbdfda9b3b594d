// Split-KV merge of the fused attention kernels: each split s of a (batch,
// KV head) leaves a partial per row r -- O_s unnormalised (fp32, D columns),
// m_s its running max and l_s its row sum, scores in the log2 domain -- and
// the merge writes O = sum_s w_s O_s / L, w_s = 2^(m_s - M), M = max_s m_s,
// L = sum_s w_s l_s, and LSE = (M + log2 L) ln 2, in a fixed order
// (deterministic). Two in-launch combines:
//  - merge_cluster: the splits form one thread-block cluster and each CTA
//    holds its partial in its own shared memory (part_o [rows][D] floats,
//    part_ml [rows] (m, l), at the same offsets in every CTA); the merge reads
//    them through DSMEM.
//  - merge_splits: the partials are in the global workspace (ws_o
//    [ns][rows][D], ws_ml [ns][rows]); split_count_last tells the one CTA
//    that arrived last (per-unit counter, self-resetting), which merges.
// Row r of a unit is query position r / group of head kh * group + r % group
// of batch bi; O is written through p.o and its strides, LSE to p.lse.
//
// Contract (the caller guarantees):
//  - blockDim.x == NT (a multiple of 32), 1-D; every thread of the CTA calls
//    (merge_splits has __syncthreads inside).
//  - merge_cluster: a cluster launch of p.cluster <= PT_ATTN_MAX_CLUSTER CTAs;
//    cluster_sync() by all of them after writing the partials and before the
//    call, and again after it (no CTA leaves while another still reads its
//    shared memory). part_o 16-byte aligned.
//  - merge_splits: smem (>= 16-byte aligned) holds PT_ATTN_MAX_SPLITS *
//    PT_ATTN_MAX_ROWS float2, PT_ATTN_MAX_ROWS floats and NT float4, and may
//    be overwritten; ns <= PT_ATTN_MAX_SPLITS, rows <= PT_ATTN_MAX_ROWS; the
//    other splits' partials are visible (split_count_last's acquire).
//    merge_splits_staged: the same, smem holding ns * rows * (D floats +
//    float2) + rows floats instead; no cp.async group of the caller pending.
//  - split_count_last: one thread of the CTA, after a __syncthreads that
//    orders the CTA's partial stores before it; the counter starts at 0.
//  - O 8-byte aligned per 4 columns (store4). A row that saw no key in any
//    split (L == 0: masked entirely by a bias) gets O = 0 and LSE = -inf.
#ifndef PT_KERNELS_ATTN_MERGE_CUH
#define PT_KERNELS_ATTN_MERGE_CUH
#include <stdint.h>

#include "kernels/attn_kparams.h"
#include "kernels/ptx.cuh"
#include "kernels/softmax.cuh"

namespace pt_attn {

// Row r of a (batch, KV head kh) unit: query position i = r / group of query head
// hh = kh * group + r % group (a unit holds its KV head's group query heads for each query
// position, heads fastest). Every access by row goes through this: the Q load, a per-head bias
// row, the O and LSE stores.
struct unit_row {
  int i, hh;
};
static __device__ __forceinline__ unit_row row_of(int kh, int group, int r) {
  return {r / group, kh * group + r % group};
}

// The output of row r of unit (bi, kh). store_row4 writes its columns d .. d + 3 from the
// unnormalised o and inv = 1 / L; store_row_lse its LSE (the caller checks p.lse). Every path
// that ends a row (one split, the three merges) stores through these two.
template <typename T>
static __device__ __forceinline__ void store_row4(const pt_attn_kparams &p, int bi, int kh, int group, int r,
                                                  int d, const float4 &o, float inv) {
  const unit_row w = row_of(kh, group, r);
  store4(static_cast<T *>(p.o) + bi * p.o_bs + w.i * p.o_rs + w.hh * p.o_hs + d, o.x * inv, o.y * inv,
         o.z * inv, o.w * inv);
}
static __device__ __forceinline__ void store_row_lse(const pt_attn_kparams &p, int bi, int kh, int group, int r,
                                                     float M, float L) {
  const unit_row w = row_of(kh, group, r);
  p.lse[((int64_t)bi * p.h + w.hh) * p.sq + w.i] = row_lse(M, L);
}

// A row's merge constants once its weights are known: 1 / L into inv_l (0: a row its bias
// masks entirely) and its LSE. One thread per row.
static __device__ __forceinline__ void split_row_done(const pt_attn_kparams &p, float *inv_l, int r, float M,
                                                      float L, int bi, int kh, int group) {
  inv_l[r] = L > 0.f ? 1.f / L : 0.f;
  if (p.lse) store_row_lse(p, bi, kh, group, r, M, L);
}

// The per-split weights of every row, a warp per row: wml[s][r] = (m, l) -> (w, l) with
// w = 2^(m - M), then split_row_done. Every thread of the CTA calls it (warp-uniform loops).
template <int NT>
static __device__ __forceinline__ void split_weights_warp(const pt_attn_kparams &p, float2 *wml, float *inv_l,
                                                          int ns, int rows, int bi, int kh, int group) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll 1
  for (int r = warp; r < rows; r += NT / 32) {
    float M = NEG_INF;
#pragma unroll 1
    for (int s = lane; s < ns; s += 32) M = fmaxf(M, wml[s * rows + r].x);
    M = warp_max(M);
    const float Mu = M == NEG_INF ? 0.f : M;
    float L = 0.f;
#pragma unroll 1
    for (int s = lane; s < ns; s += 32) {
      const float2 ml = wml[s * rows + r];
      const float w = ex2(ml.x - Mu);
      wml[s * rows + r].x = w;
      L += w * ml.y;
    }
    L = warp_sum(L);
    if (lane == 0) split_row_done(p, inv_l, r, M, L, bi, kh, group);
  }
}

// The last CTA of a (batch, KV head): O = sum_s w_s O_s / L with
// w_s = 2^(m_s - M), M = max_s m_s, L = sum_s w_s l_s. The partials were just
// written by other SMs, so they are read from L2 (ld.cg). The merge is
// latency-bound: the first batch of partial-O loads is issued before the
// (m, l) round trip (it does not depend on the weights), each thread keeps NB
// loads in flight, and when a row set has few items, groups of threads take
// interleaved splits and are summed in a fixed order (deterministic).
//
// The code is kept small on purpose. Only the last CTA of a unit runs it, once,
// at the end of the launch, after the K/V stream has evicted it from L2: its
// instructions come from DRAM, one cache line after another. A first version
// unrolled 32 predicated loads per batch (about 3000 PTX lines) and spent 8-9 us
// in this function for 16 KiB of partials (B=1, 32k keys;
// bench/records/2026-12-02-decode-tail.md). So: one rolled loop, NB loads per
// trip, every load unconditional (the split index is clamped to a valid one
// and its weight is 0).
template <typename T, int D, int NT>
static __device__ __forceinline__ void merge_splits(const pt_attn_kparams &p, unsigned char *smem,
                                                    const float2 *ws_ml, const float *ws_o,
                                                    int ns, int bi, int kh, int rows, int group,
                                                    int nitems) {
  constexpr int NB = 16;  // float4 loads in flight per thread
  const int tid = threadIdx.x;
  float2 *const wml = reinterpret_cast<float2 *>(smem);                 // [ns][rows]: (m, l) -> (w, l)
  float *const inv_l = reinterpret_cast<float *>(wml + PT_ATTN_MAX_SPLITS * PT_ATTN_MAX_ROWS);
  float4 *const gsum = reinterpret_cast<float4 *>(inv_l + PT_ATTN_MAX_ROWS);  // [NT]

  // Items (row, 4 columns) are taken in passes of at most NT; in a pass of
  // pi items, ngrp = NT / pi thread groups split the KV splits between them
  // (threads past ngrp * pi load like the others and are ignored).
  int base = 0;
  int pi = min(nitems, NT), ngrp = NT / pi;
  int item = tid % pi, grp = tid / pi;
  float4 x[NB];
  auto issue = [&](int s_first) {
    const int it = base + item, r = it / (D / 4), d = (it % (D / 4)) * 4;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int s = min(s_first + j * ngrp, ns - 1);
      x[j] = __ldcg(reinterpret_cast<const float4 *>(ws_o + ((int64_t)s * rows + r) * D + d));
    }
  };
  issue(grp);

  // (m, l) of every split and row -> shared memory, then per-row weights.
  const int nml = ns * rows;
#pragma unroll 4  // 4 loads in flight: ns * rows reaches 4096 (256 splits x 16 rows)
  for (int i = tid; i < nml; i += NT) wml[i] = __ldcg(&ws_ml[i]);
  __syncthreads();
  split_weights_warp<NT>(p, wml, inv_l, ns, rows, bi, kh, group);
  __syncthreads();

#pragma unroll 1
  for (;;) {
    const int it = base + item;
    const int r = it / (D / 4), d = (it % (D / 4)) * 4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
    for (int s_first = grp;;) {
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int s = s_first + j * ngrp;
        const float w = s < ns ? wml[min(s, ns - 1) * rows + r].x : 0.f;
        o.x += w * x[j].x;
        o.y += w * x[j].y;
        o.z += w * x[j].z;
        o.w += w * x[j].w;
      }
      s_first += NB * ngrp;
      if (s_first >= ns) break;
      issue(s_first);
    }
    bool write = grp < ngrp;
    if (ngrp > 1) {
      gsum[tid] = o;
      __syncthreads();
      write = tid < pi;
      if (write) {
        o = gsum[tid];
#pragma unroll 1
        for (int q = 1; q < ngrp; ++q) {
          const float4 y = gsum[q * pi + tid];
          o.x += y.x;
          o.y += y.y;
          o.z += y.z;
          o.w += y.w;
        }
      }
    }
    if (write) store_row4<T>(p, bi, kh, group, r, d, o, inv_l[r]);
    base += pi;
    if (base >= nitems) break;
    __syncthreads();  // gsum is reused by the next pass
    pi = min(nitems - base, NT);
    ngrp = NT / pi;
    item = tid % pi;
    grp = tid / pi;
    issue(grp);
  }
}

// merge_splits when every partial fits in the K/V ring's shared memory (the caller checks:
// ns * rows * (D floats + (m, l)) + rows floats): the (m, l) loads first, then all of O by
// cp.async in one go (one L2 round trip for the lot, no registers held while it flies), then
// the weights and the sums from shared memory. Same weights as merge_splits, the splits summed
// one after another. B = 1, 32k keys, G 8 (16 splits of 8 rows, 64 KiB): -0.6 to -0.7 us per
// launch, and -0.3 more with the weights one lane per (split, row); the merge then takes about
// 2 us, mostly the weights and the sums, not the copy (bench/records/2026-12-03-decode-pair.md).
template <typename T, int D, int NT>
static __device__ __forceinline__ void merge_splits_staged(const pt_attn_kparams &p, unsigned char *smem,
                                                           const float2 *ws_ml, const float *ws_o, int ns,
                                                           int bi, int kh, int rows, int group, int nitems) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#ifdef PT_ATTN_TIMELINE
  // Timeline builds only: the phases of this merge in unit (0, 0) (bench/records/2026-12-03-decode-pair.md).
  unsigned long long tm[5];
#define PT_TLM(i) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tm[i]))
#else
#define PT_TLM(i) do { } while (0)
#endif
  PT_TLM(0);
  float *const so = reinterpret_cast<float *>(smem);              // [ns][rows][D]
  float2 *const wml = reinterpret_cast<float2 *>(so + ns * rows * D);  // [ns][rows]
  float *const inv_l = reinterpret_cast<float *>(wml + ns * rows);     // [rows]
  const int nml = ns * rows;
  float2 ml0 = make_float2(0.f, 0.f), ml1 = ml0;
  if (tid < nml) ml0 = __ldcg(&ws_ml[tid]);
  if (tid + NT < nml) ml1 = __ldcg(&ws_ml[tid + NT]);
  const int nch = ns * rows * (D / 4);
#pragma unroll 4
  for (int c = tid; c < nch; c += NT) cp_async16(smem_u32(so + c * 4), ws_o + c * 4, 16);
  cp_async_commit();
  if (tid < nml) wml[tid] = ml0;
  if (tid + NT < nml) wml[tid + NT] = ml1;
#pragma unroll 1
  for (int i = tid + 2 * NT; i < nml; i += NT) wml[i] = __ldcg(&ws_ml[i]);
  __syncthreads();
  PT_TLM(1);
  // The weights, one lane per (split, row): a row's ns splits take P lanes (the power of two
  // >= ns, at most 32), a warp 32 / P rows at once, every row in one pass at 16 splits of 8 rows.
  // A warp per row, one after the other, took 0.55 us per row; this 0.8 us for all 8 rows (calls
  // 4 and 5 of bench/records/2026-12-03-decode-pair.md). The sums' order is fixed (butterfly):
  // deterministic.
  if (ns <= 32) {
    const int P = ns <= 2 ? 2 : ns <= 4 ? 4 : ns <= 8 ? 8 : ns <= 16 ? 16 : 32;
    const int sub = lane / P, s = lane % P, per_warp = 32 / P;
#pragma unroll 1
    for (int r0 = warp * per_warp; r0 < rows; r0 += (NT / 32) * per_warp) {  // warp-uniform
      const int r = r0 + sub;
      const bool ok = r < rows && s < ns;
      const float2 ml = ok ? wml[s * rows + r] : make_float2(NEG_INF, 0.f);
      float M = ml.x;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        if (o < P) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
      const float Mu = M == NEG_INF ? 0.f : M;
      const float w = ok ? ex2(ml.x - Mu) : 0.f;
      if (ok) wml[s * rows + r].x = w;
      float L = w * ml.y;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        if (o < P) L += __shfl_xor_sync(0xffffffffu, L, o);
      if (s == 0 && r < rows) split_row_done(p, inv_l, r, M, L, bi, kh, group);
    }
  } else {
    split_weights_warp<NT>(p, wml, inv_l, ns, rows, bi, kh, group);
  }
  PT_TLM(2);
  cp_async_wait<0>();
  __syncthreads();
  PT_TLM(3);
#pragma unroll 1
  for (int it = tid; it < nitems; it += NT) {
    const int r = it / (D / 4), d = (it % (D / 4)) * 4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < ns; ++s) {
      const float w = wml[s * rows + r].x;
      const float4 x = *reinterpret_cast<const float4 *>(so + (s * rows + r) * D + d);
      o.x += w * x.x;
      o.y += w * x.y;
      o.z += w * x.z;
      o.w += w * x.w;
    }
    store_row4<T>(p, bi, kh, group, r, d, o, inv_l[r]);
  }
  PT_TLM(4);
#ifdef PT_ATTN_TIMELINE
  if (tid == 0 && bi == 0 && kh == 0)
    printf("TLM staged merge, unit 0 (%d splits x %d rows): (m, l) in %llu, weights %llu, copy waited %llu, "
           "sums %llu, total %llu ns\n",
           ns, rows, tm[1] - tm[0], tm[2] - tm[1], tm[3] - tm[2], tm[4] - tm[3], tm[4] - tm[0]);
#endif
#undef PT_TLM
}

// Cluster merge: the p.cluster CTAs of a (batch, KV head) each hold their
// split's partial (O unnormalised, (m, l) per row) in shared memory. Items
// (row, 4 columns) are dealt round-robin over the cluster's CTAs and threads,
// so the merge runs on all of the cluster's SMs at once; each item reads its
// row's partial from every CTA through DSMEM (a few hundred ns, no L2 trip,
// no atomic) and writes O (and LSE for column 0). The splits are taken CHUNK
// at a time, (m, l) and O of a chunk in one round trip, folded into a running
// (M, L, O) as online softmax does: deterministic (rank order), and the code
// stays small (see merge_splits on why that matters at the end of a launch).
template <typename T, int D, int NT>
static __device__ __forceinline__ void merge_cluster(const pt_attn_kparams &p, const float *part_o,
                                                     const float2 *part_ml, int bi, int kh,
                                                     int rows, int group, int nitems) {
  const int C = p.cluster;
  const int rank = static_cast<int>(cluster_rank());
  const uint32_t o_base = smem_u32(part_o), ml_base = smem_u32(part_ml);
  constexpr int CHUNK = 8;  // splits per round trip
#pragma unroll 1
  for (int it = rank + C * threadIdx.x; it < nitems; it += C * NT) {
    const int r = it / (D / 4), d = (it % (D / 4)) * 4;
    float M = NEG_INF, L = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
    for (int c0 = 0; c0 < C; c0 += CHUNK) {
      float2 ml[CHUNK];
      float4 x[CHUNK];
      // Predicated, not clamped to the last rank: a clamped load read rank C - 1 again for every
      // j past it, 4x the DSMEM traffic of the merge at C = 2 (G 8 at B = 8, 4k keys: the merge
      // took 1.15 us against 0.58 at G 1; bench/records/2026-12-03-decode-ring.md).
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        const bool ok = c0 + j < C;
        const uint32_t s = static_cast<uint32_t>(ok ? c0 + j : 0);
        ml[j] = ld_cluster_f2_if(cluster_map(ml_base + r * 8, s), ok);
        x[j] = ld_cluster_f4_if(cluster_map(o_base + (r * D + d) * 4, s), ok);
      }
      float Mc = M;
#pragma unroll
      for (int j = 0; j < CHUNK; ++j)
        if (c0 + j < C) Mc = fmaxf(Mc, ml[j].x);
      const float Mu = Mc == NEG_INF ? 0.f : Mc;
      const float a = ex2(M - Mu);  // 0 while nothing was seen (M = -inf)
      L *= a;
      o.x *= a;
      o.y *= a;
      o.z *= a;
      o.w *= a;
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        // weight; 0 past the last rank or for a split that saw no key of this row
        const float w = c0 + j < C ? ex2(ml[j].x - Mu) : 0.f;
        L += w * ml[j].y;
        o.x += w * x[j].x;
        o.y += w * x[j].y;
        o.z += w * x[j].z;
        o.w += w * x[j].w;
      }
      M = Mc;
    }
    // Without a bias every row sees key 0 (split 0), so L > 0; a row its bias
    // masks entirely gets O = 0.
    store_row4<T>(p, bi, kh, group, r, d, o, L > 0.f ? 1.f / L : 0.f);
    if (d == 0 && p.lse) store_row_lse(p, bi, kh, group, r, M, L);
  }
}

// Counts one split of a unit on its workspace counter (acq_rel: release for
// this CTA's partial, acquire for the others' when last) and tells whether it
// was the last of nsplit (1) or not (0). The last one resets the counter to
// 0: every split has counted, so nothing else touches it in this launch, and
// the next launch on the stream sees 0 again.
static __device__ __forceinline__ int split_count_last(unsigned int *cnt, int nsplit) {
  const unsigned int done = atom_add1_acq_rel_gpu(cnt);
  const int last = done == static_cast<unsigned int>(nsplit - 1);
  if (last) st0_relaxed_gpu(cnt);
  return last;
}

}  // namespace pt_attn

#endif  // PT_KERNELS_ATTN_MERGE_CUH
