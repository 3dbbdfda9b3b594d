// Fused split-KV decode attention with the split combine inside the same
// launch.
//
// Grid (nsplit, h_k, b), 128 threads (4 warps). A CTA owns one KV split of
// one (batch, KV head) and ALL query rows that share that KV head (rows =
// seqlen_q * h/h_k <= 16), so each K/V byte leaves HBM once. K/V tiles of 64
// keys stream through a cp.async ring (3-4 stages) in shared memory; each warp
// takes 16 keys of a tile and keeps its own online-softmax state (m, l, O in
// fp32 registers); QK^T and PV run on mma.sync m16n8k16. With at most 8 rows
// (decode with G <= 8) the keys are the mma's M and the rows its N (S^T = K
// Q^T, O^T += V^T P^T): no padded rows. With 9-16 rows the rows are M, padded
// to 16. The two layouts are separate kernels (the _kt ones for at most 8
// rows). At the end the 4 warps merge through shared memory; with
// one split the CTA writes O/LSE directly. With a few splits that form one
// thread-block cluster (p.cluster > 1) each CTA keeps its partial in shared
// memory and the cluster merges them through DSMEM (merge_cluster). Otherwise
// a CTA writes an unnormalised partial (O, m, l) to the workspace and bumps a
// per-(batch, KV head) counter: the CTA that brings it to nsplit merges all
// partials, writes O and LSE, and resets the counter to 0 so the workspace
// needs zeroing only once (graph replay safe).
//
// An additive bias (masked decode: padded batches, masked SDPA; p.bias) is
// added to the scaled scores. Its rows for a tile's 64 keys travel with the
// K/V tile through the cp.async ring (one row per query position when it is
// broadcast over heads), so the loop never waits on a global load for it.
// Before its first tile a CTA narrows its key range to the keys some row of it
// may see (bias not -inf), in one pass over the bias, 16 bytes at a time:
// leading and trailing fully-masked keys (left or right padding) are never
// read from K/V. A row that sees no key at all gets O = 0 and LSE = -inf.
//
// Head dims 80 and 96 (Phi, Phi-3) run on the d = 128 kernel, padded: the
// swizzled tile layout needs a multiple of 8 16-byte chunks per row and the
// mma loops step 16 or 32 dims, so rather than a layout of their own they
// keep d = 128's tiles, loops and occupancy and copy only the real chunks of
// each row. The padding chunks of the K/V ring are zeroed once per CTA and
// never written again, Q's are zero too, so the scores over 128 dims are the
// scores over the real ones and P V's extra columns are never stored. Global
// addressing, the workspace partials and the cluster partials use the real
// width (decode's DK = DV), so the plan's workspace (parts x head_dim floats) fits.
//
// MLA-shaped attention (DeepSeek-V3 under Hugging Face's SDPA: q and k 192
// wide, v 128) runs on the d = 256 kernel the same way, with a width for K
// (and Q) and another for V (decode's DK, DV): K rows copy their 24 real
// chunks, V rows their 16, each tile's padding chunks stay zero, and O, LSE
// and every partial are DV wide. The scores over 256 dims are the scores over
// q/k's 192; P V's columns past 128 are never stored.
//
// Scores live in the log2 domain (scale * log2(e) folded in once) so the
// softmax uses ex2 directly. The PTX wrappers are in kernels/ptx.cuh, the
// split merges (merge_cluster, merge_splits(_staged), split_count_last) in
// kernels/attn_merge.cuh, the masked key-range scan (narrow_to_visible,
// bias_src) in kernels/attn_decode_scan.cuh, the tile layout and the warps'
// merge step (cfg, swz, zero_tile_pad, warp_rescale) in
// kernels/attn_decode_tile.cuh, and the test builds' timeline (PT_TL) in
// kernels/attn_decode_timeline.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/attn_kparams.h"
#include "kernels/ptx.cuh"
#include "kernels/attn_merge.cuh"
#include "kernels/attn_decode_scan.cuh"
#include "kernels/attn_decode_timeline.cuh"
#include "kernels/attn_decode_tile.cuh"

namespace pt_attn {

constexpr float LOG2E = 1.4426950408889634f;

// KT: the keys-as-M loop (rows <= 8, the launcher's choice) or the rows-as-M loop. Each is its
// own kernel, so that a launch's code holds only the loop it runs. A launch that follows other
// kernels (as attention does in a model, after the projections stream their weights through L2)
// fetches its code from DRAM, and a kernel that also held the other loop (16 KiB at d = 128)
// took 2-4 us longer there, with the same instructions executed; back to back the two were
// within 0.5 us (bench/records/2026-12-03-decode-clocks.md, calls 6 and 7).
//
// D: the width of the tiles and the mma loops (64, 128 or 256); DK: the head_dim of q and k,
// DV: that of v and o. D itself for both, or 80 / 96 for both on D = 128, or 192 / 128 on
// D = 256 (padded: the file's head comment). With DK == DV == D every PAD test below is a
// constant false, and with DK == DV every test that tells K from V a constant true, so those
// kernels compile to the code they had before the widths were split.
template <typename T, int D, int DK, int DV, bool KT>
__device__ __forceinline__ void decode(const pt_attn_kparams &p) {
#ifdef PT_ATTN_TIMELINE
  unsigned long long tl[PT_TL_N] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, tl_mid = 0;
#endif
  PT_TL(0);
  using C = cfg<D>;
  constexpr int NST = C::NSTAGE, CH = C::CH, TILE = C::TILE, LD = C::RED_LD;
  constexpr bool PAD = DK != D || DV != D;
  // Real 16-byte chunks of a Q/K row and of a V row; CH - RCK, CH - RCV padding ones (PAD).
  constexpr int RCK = DK / 8, RCV = DV / 8, RCX = RCK > RCV ? RCK : RCV;
  static_assert(DK % 8 == 0 && DV % 8 == 0 && DK <= D && DV <= D, "real widths: 16-byte chunks within D");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;
  T *const sKV = reinterpret_cast<T *>(smem);          // stage s: K at 2s*TILE, V after it
  T *const sQ = sKV + NST * 2 * TILE;                  // [16][D]

  // Launched with programmatic dependent launch (a timing experiment, pt_attn_plan_pdl) the CTA
  // may start before the previous kernel in the stream has finished: every read of its outputs
  // (Q, K/V, the bias) waits here. Other launches skip it (a uniform branch).
  if (p.pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x, kh = blockIdx.y, bi = blockIdx.z;
  const int group = p.group, rows = p.rows;

  // Q's rows first, into registers: issued after the K/V prologue they would queue behind it
  // (at B = 32, 1k keys, 16 MiB of prologue held Q back 4.5 us and the first tile with it), and
  // before the bias scan they cost nothing extra. Chunk c = tid + j * NT (16 bytes) is row c / CH
  // (row_of: its query position and head); zero rows pad to 16. Stored to
  // shared memory after the prologue. Measured with the L2 policy below: 0.8-1.4 us off the
  // latency-bound launches (bench/records/2026-12-02-decode-balance.md).
  constexpr int QCH = (16 * CH + NT - 1) / NT;
  uint4 qreg[QCH];
#pragma unroll
  for (int j = 0; j < QCH; ++j) {
    const int c = tid + j * NT, r = c / CH, ch = c % CH;
    qreg[j] = make_uint4(0, 0, 0, 0);
    if (c < 16 * CH && r < rows && (!PAD || ch < RCK)) {
      const unit_row w = row_of(kh, group, r);
      qreg[j] = *reinterpret_cast<const uint4 *>(static_cast<const T *>(p.q) + bi * p.q_bs + w.i * p.q_rs +
                                                 w.hh * p.q_hs + ch * 8);
    }
  }
  // Padded: zero the padding chunks of every K and V row of every stage, once, before any tile
  // is copied (here, while Q's loads are in flight). No copy ever writes them, so they stay zero
  // for the whole loop; the barrier after Q's store to shared memory orders these stores before
  // the first tile is read. The ring is NST * 2 tiles of BK rows (BK a multiple of 8), so swz
  // over its rows taken as one array is each tile's own swizzle. With K and V of different
  // widths (MLA) each tile kind is zeroed past its own. V's padding columns only feed P V's
  // columns that are never stored, but zeros keep those accumulators finite all the same.
  if constexpr (PAD && DK == DV) {
    constexpr int PCH = CH - RCK;
    for (int c = tid; c < NST * 2 * BK * PCH; c += NT)
      *reinterpret_cast<uint4 *>(sKV + swz<D>(c / PCH, RCK + c % PCH)) = make_uint4(0, 0, 0, 0);
  } else if constexpr (PAD) {
    zero_tile_pad<T, D, NST, RCK, 0>(sKV, tid);
    zero_tile_pad<T, D, NST, RCV, 1>(sKV, tid);
  }

  // K/V are read once: copied with an L2 evict_first policy, so that the stream does not push
  // out what is read again (the bias, the workspace partials, the merge's code).
  const uint64_t kv_policy = (PT_ATTN_EXP & PT_ATTN_EXP_KVNORMAL) ? l2_evict_normal() : l2_evict_first();

  int key_begin = split * p.tiles_per_split * BK;
  int key_end = min(p.sk, key_begin + p.tiles_per_split * BK);

  // The bias ring: nb rows of PT_ATTN_BIAS_LD keys per stage, after Q.
  const int nb = p.bias_rows;
  T *const sB = sQ + 16 * D;
  const T *const bb = nb ? static_cast<const T *>(p.bias) + bi * p.bias_bs : nullptr;
  // This CTA's (batch, KV head) in K and V: key 0, dim 0.
  const T *const kh_k = static_cast<const T *>(p.k) + bi * p.k_bs + kh * p.k_hs;
  const T *const kh_v = static_cast<const T *>(p.v) + bi * p.v_bs + kh * p.v_hs;
  // Under a mask the first tile's K/V wait for the scan's round trip. Its lines (the split's
  // first tile as planned) are hinted into L2 before the scan, so that when the scan keeps the
  // split's start the prologue reads them from L2. Where the scan moves the start (a split that
  // begins in padding) the hint wastes one tile's bytes, early in the launch. Measured on H200:
  // B1 KV32k G 1 / 8 masked 36.7 / 37.9 -> 35.8 / 37.3 us, B8 KV4k -0.3 to -0.5, B32 KV1k
  // -0.8 to -0.9; two tiles helped B1 KV32k more and B8 KV4k not at all
  // (bench/records/2026-12-03-decode-kt.md).
  if (nb && !(PT_ATTN_EXP & PT_ATTN_EXP_NOHINT)) {
    constexpr int LPR = (RCX * 16 + 127) / 128;  // 128-byte lines per key row (the wider of K, V)
    const int nkeys = min(key_end - key_begin, BK);
    for (int j = tid; j < nkeys * LPR; j += NT) {
      const int64_t key = key_begin + j / LPR;
      const int off = (j % LPR) * 64;
      if (DK >= DV || off < DK) prefetch_l2(kh_k + key * p.k_rs + off);
      if (DV >= DK || off < DV) prefetch_l2(kh_v + key * p.v_rs + off);
    }
  }
  if (nb && !(PT_ATTN_EXP & PT_ATTN_EXP_NOSCAN)) narrow_to_visible<T, NT>(p, bb, kh, group, key_begin, key_end);
  PT_TL(1);
  const int ntiles = key_end > key_begin ? (key_end - key_begin + BK - 1) / BK : 0;

  // Each thread copies the same chunk column of rows r0, r0 + 128/CH, ...
  const int ld_ch = tid % CH, ld_r0 = tid / CH;
  constexpr int LD_STEP = NT / CH, LD_ITERS = BK * CH / NT;
  const T *const kcol = kh_k + ld_ch * 8;
  const T *const vcol = kh_v + ld_ch * 8;

  auto load_tile = [&](int tile, int stage) {
    const int key0 = key_begin + tile * BK;
    T *const dk = sKV + stage * 2 * TILE;
    T *const dv = dk + TILE;
    // Padded: the threads of a padding chunk column copy nothing (the column stays zero); where
    // K and V differ in width, a column real in one only copies that one.
    if (!PAD || ld_ch < RCX) {
#pragma unroll
      for (int i = 0; i < LD_ITERS; ++i) {
        const int row = ld_r0 + i * LD_STEP;
        const int key = key0 + row;
        const bool ok = key < key_end;
        const int64_t kk = ok ? key : key_begin;  // always a valid address
        const int off = swz<D>(row, ld_ch);
        if (DK >= DV || ld_ch < RCK)
          cp_async16_policy(smem_u32(dk + off), kcol + kk * p.k_rs, ok ? 16 : 0, kv_policy);
        if (DV >= DK || ld_ch < RCV)
          cp_async16_policy(smem_u32(dv + off), vcol + kk * p.v_rs, ok ? 16 : 0, kv_policy);
      }
    }
    // The tile's bias, 8 keys per copy, in the same commit group: read next
    // to the K/V tile with no global load in the loop. The chunk holding sk
    // is copied key by key and keys past sk are zeros (the loop masks them
    // anyway): no byte past the bias row's last key is read. These plain
    // shared stores are ordered by the barrier before the stage is read.
    T *const db = sB + stage * nb * PT_ATTN_BIAS_LD;
    for (int c = tid; c < nb * (BK / 8); c += NT) {
      const int i = c / (BK / 8), ch = c % (BK / 8);
      const int key = key0 + ch * 8;
      const int n = key < p.sk ? min(8, p.sk - key) : 0;
      T *const dst = db + i * PT_ATTN_BIAS_LD + ch * 8;
      if (n == 8) {
        cp_async16(smem_u32(dst), bias_src(p, bb, kh, group, i) + key, 16);
      } else {
        const uint16_t *const src = reinterpret_cast<const uint16_t *>(bias_src(p, bb, kh, group, i) + key);
        uint16_t *const d16 = reinterpret_cast<uint16_t *>(dst);
#pragma unroll
        for (int j = 0; j < 8; ++j) d16[j] = j < n ? src[j] : uint16_t(0);
      }
    }
  };

  // Prologue: NST-1 tiles in flight.
#pragma unroll
  for (int s = 0; s < NST - 1; ++s) {
    if (s < ntiles) load_tile(s, s);
    cp_async_commit();
  }

  // Q rows -> shared memory (loaded before the scan, above).
#pragma unroll
  for (int j = 0; j < QCH; ++j) {
    const int c = tid + j * NT;
    if (c < 16 * CH) *reinterpret_cast<uint4 *>(sQ + swz<D>(c / CH, c % CH)) = qreg[j];
  }
  __syncthreads();
  PT_TL(2);

  // Both loops below (the two mma layouts) step the ring the same way. Start of step `it`: tile
  // `it` landed and visible to all, stage (it - 1) % NST free, so tile it + NST - 1 goes into it.
  auto tile_begin = [&](int it) {
    cp_async_wait<NST - 2>();
    __syncthreads();
#ifdef PT_ATTN_TIMELINE
    if (it == 0) PT_TL(3);
    if (it == ntiles / 2 && threadIdx.x == 0) tl_mid = gtimer();
#endif
    const int nt = it + NST - 1;
    if (nt < ntiles && !(PT_ATTN_EXP & PT_ATTN_EXP_NOLOAD)) load_tile(nt, nt % NST);
    cp_async_commit();
  };
  // After the last step: nothing in flight, and the K/V ring is free for the merges below.
  auto loop_end = [&]() {
    cp_async_wait<0>();
    __syncthreads();
    PT_TL(4);
  };
  // The warp merge's buffers (the K/V ring is free once the loop is done).
  float *const red_o = reinterpret_cast<float *>(smem);  // [4][16][LD]
  float *const red_m = red_o + 4 * 16 * LD;              // [4][16]
  float *const red_l = red_m + 64;                       // [4][16]
  const int mi = lane >> 3;
  // KT, rows <= 8 (decode with G <= 8): keys as the mma's M, query rows as its N (S^T = K Q^T,
  // O^T += V^T P^T), so an m16n8k16 carries 16 keys x 8 rows and no padded rows: half the
  // mma.sync and half the output accumulators of the layout below (16 rows, at most 8 real).
  // P^T's fragments come from the score accumulators by movmatrix (an 8x8 transpose in
  // registers). Each thread holds keys g, g + 8 of its warp's 16 and rows 2t, 2t + 1; rows
  // past `rows` are zero Q rows whose results are never read. Measured on H200: 1.6-1.9 us
  // off B = 8 at 4k keys masked (34.1-34.8 -> 32.2-33.0), 3 us off B = 32 at 4k keys
  // (bench/records/2026-12-03-decode-kt.md).
  if constexpr (KT) {
    // Q^T as the B operand: two registers per 16 dims (rows g, dims 2t.. and 2t + 8..).
    uint32_t qb[D / 16][2];
#pragma unroll
    for (int p2 = 0; p2 < D / 32; ++p2) {
      uint32_t r[4];
      ldsm_x4(r, smem_u32(sQ + swz<D>(lane & 7, p2 * 4 + mi)));
      qb[2 * p2][0] = r[0];
      qb[2 * p2][1] = r[1];
      qb[2 * p2 + 1][0] = r[2];
      qb[2 * p2 + 1][1] = r[3];
    }
    const int q0 = 2 * t, q1 = 2 * t + 1;
    const int bq0 = (p.bias_hs == 0 ? q0 / group : q0) * PT_ATTN_BIAS_LD;
    const int bq1 = (p.bias_hs == 0 ? q1 / group : q1) * PT_ATTN_BIAS_LD;
    int lq0 = key_end - 1, lq1 = key_end - 1;
    if (p.causal) {
      lq0 = min(lq0, q0 / group + p.sk - p.sq);
      lq1 = min(lq1, q1 / group + p.sk - p.sq);
    }
    float acc[D / 16][4];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;  // rows q0, q1
    const float sl2 = p.scale_log2;
    for (int it = 0; it < ntiles; ++it) {
      tile_begin(it);
      const int kw0 = key_begin + it * BK + warp * 16;
      if (kw0 >= key_end) continue;
      if constexpr ((PT_ATTN_EXP & PT_ATTN_EXP_NOCOMPUTE) != 0) continue;
      const T *const tK = sKV + (it % NST) * 2 * TILE;
      const T *const tV = tK + TILE;
      // S^T: two independent chains over the head dims, added at the end.
      float sa[4] = {0.f, 0.f, 0.f, 0.f}, sb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldsm_x4(a, smem_u32(tK + swz<D>(warp * 16 + (mi & 1) * 8 + (lane & 7), ks * 2 + (mi >> 1))));
        if (ks & 1)
          dt<T>::mma(sb, a, qb[ks][0], qb[ks][1]);
        else
          dt<T>::mma(sa, a, qb[ks][0], qb[ks][1]);
      }
      // s[0]: key g row q0, s[1]: key g row q1, s[2]: key g + 8 row q0, s[3]: key g + 8 row q1.
      float s[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] = sa[j] + sb[j];
      float bs[4] = {0.f, 0.f, 0.f, 0.f};
      if (nb) {
        const T *const tb = sB + (it % NST) * nb * PT_ATTN_BIAS_LD + warp * 16 + g;
        if (q0 < rows) {
          bs[0] = dt<T>::to_float(tb[bq0]) * LOG2E;
          bs[2] = dt<T>::to_float(tb[bq0 + 8]) * LOG2E;
        }
        if (q1 < rows) {
          bs[1] = dt<T>::to_float(tb[bq1]) * LOG2E;
          bs[3] = dt<T>::to_float(tb[bq1 + 8]) * LOG2E;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = kw0 + g + (j >> 1) * 8;
        const int lim = (j & 1) ? lq1 : lq0;
        s[j] = key <= lim ? fmaf(s[j], sl2, bs[j]) : NEG_INF;
      }
      // Online softmax per row (column of S^T): the row's 16 keys are on the 8 lanes of one t.
      float mx0 = fmaxf(s[0], s[2]), mx1 = fmaxf(s[1], s[3]);
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
      const float al0 = ex2(m0 - mu0), al1 = ex2(m1 - mu1);
      m0 = mn0;
      m1 = mn1;
      s[0] = ex2(s[0] - mu0);
      s[2] = ex2(s[2] - mu0);
      s[1] = ex2(s[1] - mu1);
      s[3] = ex2(s[3] - mu1);
      l0 = l0 * al0 + s[0] + s[2];
      l1 = l1 * al1 + s[1] + s[3];
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        acc[n][0] *= al0;
        acc[n][1] *= al1;
        acc[n][2] *= al0;
        acc[n][3] *= al1;
      }
      // P^T as the B operand: keys 2t, 2t + 1 (and + 8) of row g.
      const uint32_t pb0 = movmatrix_trans(dt<T>::pack(s[0], s[1]));
      const uint32_t pb1 = movmatrix_trans(dt<T>::pack(s[2], s[3]));
#pragma unroll
      for (int dm = 0; dm < D / 16; ++dm) {
        uint32_t a[4];
        ldsm_x4_t(a, smem_u32(tV + swz<D>(warp * 16 + (mi >> 1) * 8 + (lane & 7), dm * 2 + (mi & 1))));
        dt<T>::mma(acc[dm], a, pb0, pb1);
      }
    }
    loop_end();
    if constexpr ((PT_ATTN_EXP & PT_ATTN_EXP_NOMERGE) != 0) return;  // diagnostic: no epilogue
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, o);
      l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    float sc0, sc1;
    warp_rescale(red_m, red_l, warp, q0, q1, g == 0, m0, m1, l0, l1, sc0, sc1);
    float *const r0 = red_o + (warp * 16 + q0) * LD + g;
    float *const r1 = r0 + LD;
#pragma unroll
    for (int dm = 0; dm < D / 16; ++dm) {
      r0[dm * 16] = acc[dm][0] * sc0;
      r1[dm * 16] = acc[dm][1] * sc1;
      r0[dm * 16 + 8] = acc[dm][2] * sc0;
      r1[dm * 16 + 8] = acc[dm][3] * sc1;
    }
  } else {

    constexpr bool Q_IN_REGS = D <= 128;
    constexpr int QF = Q_IN_REGS ? D / 16 : 1;
    uint32_t qf[QF][4];
    if constexpr (Q_IN_REGS) {
#pragma unroll
      for (int ks = 0; ks < QF; ++ks)
        ldsm_x4(qf[ks], smem_u32(sQ + swz<D>((mi & 1) * 8 + (lane & 7), ks * 2 + (mi >> 1))));
    }

    // Offsets of the staged bias rows of this thread's two mma rows (g, g + 8).
    const int bslot0 = (p.bias_hs == 0 ? g / group : g) * PT_ATTN_BIAS_LD;
    const int bslot1 = (p.bias_hs == 0 ? (g + 8) / group : g + 8) * PT_ATTN_BIAS_LD;

    // Last key each of this thread's two rows (g, g+8) may see in this split.
    int lim0 = key_end - 1, lim1 = key_end - 1;
    if (p.causal) {
      lim0 = min(lim0, g / group + p.sk - p.sq);
      lim1 = min(lim1, (g + 8) / group + p.sk - p.sq);
    }

    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const float sl2 = p.scale_log2;

    for (int it = 0; it < ntiles; ++it) {
      tile_begin(it);
      const int kw0 = key_begin + it * BK + warp * 16;
      if (kw0 >= key_end) continue;  // warp-uniform: this warp's 16 keys are all past the split
      if constexpr ((PT_ATTN_EXP & PT_ATTN_EXP_NOCOMPUTE) != 0) continue;  // diagnostic: the stream alone
      const T *const tK = sKV + (it % NST) * 2 * TILE;
      const T *const tV = tK + TILE;

      // S = Q K^T for 16 rows x 16 keys (two n8 tiles).
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        if constexpr (Q_IN_REGS) {
#pragma unroll
          for (int j = 0; j < 4; ++j) a[j] = qf[ks][j];
        } else {
          ldsm_x4(a, smem_u32(sQ + swz<D>((mi & 1) * 8 + (lane & 7), ks * 2 + (mi >> 1))));
        }
        uint32_t b[4];
        ldsm_x4(b, smem_u32(tK + swz<D>(warp * 16 + (mi >> 1) * 8 + (lane & 7), ks * 2 + (mi & 1))));
        dt<T>::mma(s[0], a, b[0], b[1]);
        dt<T>::mma(s[1], a, b[2], b[3]);
      }

      // Bias of this thread's keys (kw0 + n*8 + 2t, + 1) for rows g and g + 8,
      // in the log2 domain; 0 without a bias.
      float bs[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      if (nb) {
        const T *const tb = sB + (it % NST) * nb * PT_ATTN_BIAS_LD + warp * 16 + 2 * t;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const float2 b0 = g < rows ? dt<T>::unpack(*reinterpret_cast<const uint32_t *>(tb + bslot0 + n * 8))
                                     : make_float2(0.f, 0.f);
          const float2 b1 = g + 8 < rows
                                ? dt<T>::unpack(*reinterpret_cast<const uint32_t *>(tb + bslot1 + n * 8))
                                : make_float2(0.f, 0.f);
          bs[n][0] = b0.x * LOG2E;
          bs[n][1] = b0.y * LOG2E;
          bs[n][2] = b1.x * LOG2E;
          bs[n][3] = b1.y * LOG2E;
        }
      }

      // Mask (split end, causal), scale into the log2 domain, add the bias.
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int key = kw0 + n * 8 + 2 * t + (j & 1);
          const int lim = j < 2 ? lim0 : lim1;
          s[n][j] = key <= lim ? fmaf(s[n][j], sl2, bs[n][j]) : NEG_INF;
        }
      }

      // Online softmax (kernels/softmax.cuh); a row the split never lets see a key keeps
      // m = -inf.
      float al0, al1;
      online_softmax(s, m0, m1, l0, l1, al0, al1);
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][0] *= al0;
        acc[n][1] *= al0;
        acc[n][2] *= al1;
        acc[n][3] *= al1;
      }

      // O += P V: the two S accumulator tiles are exactly one k16 A fragment.
      uint32_t pa[4];
      pa[0] = dt<T>::pack(s[0][0], s[0][1]);
      pa[1] = dt<T>::pack(s[0][2], s[0][3]);
      pa[2] = dt<T>::pack(s[1][0], s[1][1]);
      pa[3] = dt<T>::pack(s[1][2], s[1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldsm_x4_t(b, smem_u32(tV + swz<D>(warp * 16 + (mi & 1) * 8 + (lane & 7), dn * 2 + (mi >> 1))));
        dt<T>::mma(acc[2 * dn], pa, b[0], b[1]);
        dt<T>::mma(acc[2 * dn + 1], pa, b[2], b[3]);
      }
    }
    loop_end();
    if constexpr ((PT_ATTN_EXP & PT_ATTN_EXP_NOMERGE) != 0) return;  // diagnostic: no epilogue

    // Row sums were kept per thread: add the 4 lanes of each row.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

    // ---- merge the 4 warps through shared memory ---------------------------
    {
      float sc0, sc1;
      warp_rescale(red_m, red_l, warp, g, g + 8, t == 0, m0, m1, l0, l1, sc0, sc1);
      float *const r0 = red_o + (warp * 16 + g) * LD + 2 * t;
      float *const r1 = r0 + 8 * LD;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<float2 *>(r0 + n * 8) = make_float2(acc[n][0] * sc0, acc[n][1] * sc0);
        *reinterpret_cast<float2 *>(r1 + n * 8) = make_float2(acc[n][2] * sc1, acc[n][3] * sc1);
      }
    }
  }
  __syncthreads();
  PT_TL(5);

  // From here on rows are DV wide (padded: P V's columns past DV are never stored): O, the
  // cluster and workspace partials, the merges.
  const int unit = bi * p.h_k + kh;
  const int nitems = rows * (DV / 4);
  const bool in_cluster = p.cluster > 1;
  // Cluster mode: this CTA's partial stays in its own shared memory, after
  // the warp-merge buffers (16-byte aligned: red_o + red_m + red_l).
  float *const part_o = red_l + 64;                                    // [rows][DV]
  float2 *const part_ml = reinterpret_cast<float2 *>(part_o + 16 * DV);  // [rows]
  // Workspace partials of this unit (split path only).
  float2 *const ws_ml = p.nsplit > 1 && !in_cluster
      ? reinterpret_cast<float2 *>(p.ws + p.ws_ml_off) + (int64_t)unit * p.nsplit * rows
      : nullptr;
  float *const ws_o = p.nsplit > 1 && !in_cluster
      ? reinterpret_cast<float *>(p.ws + p.ws_o_off) + (int64_t)unit * p.nsplit * rows * DV
      : nullptr;
  for (int item = tid; item < nitems; item += NT) {
    const int r = item / (DV / 4), d = (item % (DV / 4)) * 4;
    float M = NEG_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, red_m[w * 16 + r]);
    const float Mu = M == NEG_INF ? 0.f : M;
    float L = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      L += red_l[w * 16 + r] * ex2(red_m[w * 16 + r] - Mu);
      const float4 x = *reinterpret_cast<const float4 *>(red_o + (w * 16 + r) * LD + d);
      o.x += x.x;
      o.y += x.y;
      o.z += x.z;
      o.w += x.w;
    }
    if (p.nsplit == 1) {
      // Without a bias every row sees key 0 (seqlen_q <= seqlen_k when
      // causal), so L > 0; a row the bias masks entirely gets O = 0.
      store_row4<T>(p, bi, kh, group, r, d, o, L > 0.f ? 1.f / L : 0.f);
      if (d == 0 && p.lse) store_row_lse(p, bi, kh, group, r, M, L);
    } else if (in_cluster) {
      *reinterpret_cast<float4 *>(part_o + r * DV + d) = o;
      if (d == 0) part_ml[r] = make_float2(M, L);
    } else {
      *reinterpret_cast<float4 *>(ws_o + ((int64_t)split * rows + r) * DV + d) = o;
      if (d == 0) ws_ml[split * rows + r] = make_float2(M, L);
    }
  }
  PT_TL(6);
  if (p.nsplit == 1) {
    PT_TL_END(6);
    return;
  }
  if (in_cluster) {
    cluster_sync();  // every CTA's partial is written and visible
    PT_TL(7);
    merge_cluster<T, DV, NT>(p, part_o, part_ml, bi, kh, rows, group, nitems);
    PT_TL(8);
    cluster_sync();  // no CTA leaves while another still reads its shared memory
    PT_TL_END(8);
    return;
  }

  // ---- the last CTA of this (batch, KV head) merges the splits ------------
  // One thread publishes the CTA's partial and counts it with a single
  // acq_rel atomic (release for our stores, which the barrier orders before
  // it; acquire for the other CTAs' partials when we are last).
  __syncthreads();
  if (tid == 0) s_last = split_count_last(reinterpret_cast<unsigned int *>(p.ws) + unit, p.nsplit);
  __syncthreads();
  PT_TL(7);
  if (!s_last) {
    PT_TL_END(7);
    return;
  }

  // The partials staged in the K/V ring when they fit (e.g. 64 KiB at 16 splits of 8 rows and
  // d = 128, of its 96 KiB), else loaded in batches.
  constexpr int RING_BYTES = NST * 2 * TILE * static_cast<int>(sizeof(T));
  if (p.nsplit * rows * (DV * 4 + 8) + rows * 4 <= RING_BYTES)
    merge_splits_staged<T, DV, NT>(p, smem, ws_ml, ws_o, p.nsplit, bi, kh, rows, group, nitems);
  else
    merge_splits<T, DV, NT>(p, smem, ws_ml, ws_o, p.nsplit, bi, kh, rows, group, nitems);
  PT_TL(8);
  PT_TL_END(8);
}

}  // namespace pt_attn

// D, DK, DV: decode's template arguments (DK or DV < D: a padded kernel, on D's layout and
// occupancy).
#define PT_ATTN_DECODE_KERNEL(NAME, T, D, DK, DV, KT)                                    \
  extern "C" __global__ void __launch_bounds__(PT_ATTN_THREADS,                          \
                                               pt_attn::cfg<D>::MIN_BLOCKS)              \
      NAME(const __grid_constant__ pt_attn_kparams p) {                                  \
    pt_attn::decode<T, D, DK, DV, KT>(p);                                                \
  }

// _kt: launches with at most 8 rows per KV head (kernels/attn_launch.c picks). d80 and d96 are
// padded d = 128 kernels, d192v128 (q/k 192, v 128: MLA) a padded d = 256 one.
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d64, __nv_bfloat16, 64, 64, 64, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d80, __nv_bfloat16, 128, 80, 80, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d96, __nv_bfloat16, 128, 96, 96, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d128, __nv_bfloat16, 128, 128, 128, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d256, __nv_bfloat16, 256, 256, 256, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d64, __half, 64, 64, 64, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d80, __half, 128, 80, 80, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d96, __half, 128, 96, 96, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d128, __half, 128, 128, 128, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d256, __half, 256, 256, 256, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d192v128, __nv_bfloat16, 256, 192, 128, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d192v128, __half, 256, 192, 128, false)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d64_kt, __nv_bfloat16, 64, 64, 64, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d80_kt, __nv_bfloat16, 128, 80, 80, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d96_kt, __nv_bfloat16, 128, 96, 96, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d128_kt, __nv_bfloat16, 128, 128, 128, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d256_kt, __nv_bfloat16, 256, 256, 256, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d64_kt, __half, 64, 64, 64, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d80_kt, __half, 128, 80, 80, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d96_kt, __half, 128, 96, 96, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d128_kt, __half, 128, 128, 128, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d256_kt, __half, 256, 256, 256, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d192v128_kt, __nv_bfloat16, 256, 192, 128, true)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d192v128_kt, __half, 256, 192, 128, true)
