// Fused split-KV decode attention with the split combine inside the same
// launch.
//
// Grid (nsplit, h_k, b), 128 threads (4 warps). A CTA owns one KV split of
// one (batch, KV head) and ALL query rows that share that KV head (rows =
// seqlen_q * h/h_k <= 16, padded to the 16 rows of one mma tile), so each K/V
// byte leaves HBM once. K/V tiles of 64 keys stream through a cp.async ring
// (3-4 stages) in shared memory; each warp takes 16 keys of a tile and keeps
// its own online-softmax state (m, l, O in fp32 registers), QK^T and PV run on
// mma.sync m16n8k16. At the end the 4 warps merge through shared memory; with
// one split the CTA writes O/LSE directly. With a few splits that form one
// thread-block cluster (p.cluster > 1) each CTA keeps its partial in shared
// memory and the cluster merges them through DSMEM (merge_cluster). Otherwise
// a CTA writes an unnormalised partial (O, m, l) to the workspace and bumps a
// per-(batch, KV head) counter: the CTA that brings it to nsplit merges all
// partials, writes O and LSE, and resets the counter to 0 so the workspace
// needs zeroing only once (graph replay safe).
//
// Scores live in the log2 domain (scale * log2(e) folded in once) so the
// softmax uses ex2 directly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/attn_kparams.h"

namespace pt_attn {

constexpr int BK = PT_ATTN_BK;
constexpr int NT = PT_ATTN_THREADS;
constexpr float NEG_INF = -__builtin_huge_valf();
constexpr float LN2 = 0.693147180559945309f;

template <int D> struct cfg {
  // Stages: enough bytes in flight per SM with 3 (d64), 2 (d128) or 1 (d256)
  // CTAs resident; keep in sync with pt_attn_plan_make (kernels/attn_plan.c).
  static constexpr int NSTAGE = D == 64 ? 4 : 3;
  static constexpr int CH = D / 8;          // 16-byte chunks per row
  static constexpr int TILE = BK * D;       // elements of one K (or V) tile
  static constexpr int RED_LD = D + 8;      // padded fp32 row of the warp merge
  static constexpr int MIN_BLOCKS = D == 64 ? 3 : (D == 128 ? 2 : 1);
};

// Element offset of 16-byte chunk ch of row `row` in a [rows][D] tile. The
// XOR spreads 8 consecutive rows of one chunk column over all 32 banks, so
// both the ldmatrix reads (8 rows, same chunk) and the cp.async writes (8
// chunks of a row) are conflict-free.
template <int D> __device__ __forceinline__ int swz(int row, int ch) {
  return row * D + ((ch ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread-block-cluster helpers (sm_90): the CTAs of one (batch, KV head) form
// a cluster when the split count is small, and merge their partials through
// distributed shared memory instead of global memory and a counter.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: release our shared-memory writes,
// acquire the others'.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The address of the same shared variable in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ float2 ld_cluster_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
  // .cg: stream through L2 only; src_bytes 0 zero-fills (keys past the split).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T> struct dt;
template <> struct dt<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct dt<__half> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Writes 4 consecutive output elements (8 bytes; the launcher checked 16-byte
// alignment of o and of its strides).
template <typename T>
__device__ __forceinline__ void store4(T *dst, float a, float b, float c, float d) {
  uint2 v;
  v.x = dt<T>::pack(a, b);
  v.y = dt<T>::pack(c, d);
  *reinterpret_cast<uint2 *>(dst) = v;
}


// The last CTA of a (batch, KV head): O = sum_s w_s O_s / L with
// w_s = 2^(m_s - M), M = max_s m_s, L = sum_s w_s l_s. The partials were just
// written by other SMs, so they are read from L2 (ld.cg). The merge is
// latency-bound: the first batch of partial-O loads is issued before the
// (m, l) round trip (it does not depend on the weights), each thread keeps NB
// loads in flight, and when a row set has few items, groups of threads take
// interleaved splits and are summed in a fixed order (deterministic).
template <typename T, int D>
__device__ __forceinline__ void merge_splits(const pt_attn_kparams &p, unsigned char *smem,
                                          const float2 *ws_ml, const float *ws_o, int ns,
                                          int bi, int kh, int rows, int group, int nitems) {
  constexpr int NB = D == 64 ? 16 : 32;  // float4 loads in flight per thread
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float2 *const wml = reinterpret_cast<float2 *>(smem);                 // [ns][rows]: (m, l) -> (w, l)
  float *const inv_l = reinterpret_cast<float *>(wml + PT_ATTN_MAX_SPLITS * PT_ATTN_MAX_ROWS);
  float4 *const gsum = reinterpret_cast<float4 *>(inv_l + PT_ATTN_MAX_ROWS);  // [NT]

  // Items (row, 4 columns) are taken in passes of at most NT; in a pass of
  // pi items, ngrp = NT / pi thread groups split the KV splits between them.
  int base = 0;
  int pi = min(nitems, NT), ngrp = NT / pi;
  int item = tid % pi, grp = tid / pi;
  float4 x[NB];
  auto issue = [&](int s_first) {
    const int r = (base + item) / (D / 4), d = ((base + item) % (D / 4)) * 4;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int s = s_first + j * ngrp;
      x[j] = grp < ngrp && s < ns
                 ? __ldcg(reinterpret_cast<const float4 *>(ws_o + ((int64_t)s * rows + r) * D + d))
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  issue(grp);

  // (m, l) of every split and row -> shared memory, then per-row weights.
  const int nml = ns * rows;
#pragma unroll 4
  for (int i = tid; i < nml; i += NT) wml[i] = __ldcg(&ws_ml[i]);
  __syncthreads();
  for (int r = warp; r < rows; r += 4) {
    float M = NEG_INF;
    for (int s = lane; s < ns; s += 32) M = fmaxf(M, wml[s * rows + r].x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float Mu = M == NEG_INF ? 0.f : M;
    float L = 0.f;
    for (int s = lane; s < ns; s += 32) {
      const float2 ml = wml[s * rows + r];
      const float w = ex2(ml.x - Mu);
      wml[s * rows + r].x = w;
      L += w * ml.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    if (lane == 0) {
      inv_l[r] = 1.f / L;
      if (p.lse) {
        const int i = r / group, hh = kh * group + r % group;
        p.lse[((int64_t)bi * p.h + hh) * p.sq + i] = (M + __log2f(L)) * LN2;
      }
    }
  }
  __syncthreads();

  for (;;) {
    const int it = base + item;
    const int r = it / (D / 4), d = (it % (D / 4)) * 4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s_first = grp;;) {
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int s = s_first + j * ngrp;
        const float w = grp < ngrp && s < ns ? wml[s * rows + r].x : 0.f;
        o.x += w * x[j].x;
        o.y += w * x[j].y;
        o.z += w * x[j].z;
        o.w += w * x[j].w;
      }
      s_first += NB * ngrp;
      if (grp >= ngrp || s_first >= ns) break;
      issue(s_first);
    }
    bool write = grp < ngrp;
    if (ngrp > 1) {
      gsum[tid] = o;
      __syncthreads();
      write = tid < pi;
      if (write) {
        o = gsum[tid];
        for (int q = 1; q < ngrp; ++q) {
          const float4 y = gsum[q * pi + tid];
          o.x += y.x;
          o.y += y.y;
          o.z += y.z;
          o.w += y.w;
        }
      }
    }
    if (write) {
      const int i = r / group, hh = kh * group + r % group;
      const float inv = inv_l[r];
      store4(static_cast<T *>(p.o) + bi * p.o_bs + i * p.o_rs + hh * p.o_hs + d, o.x * inv,
             o.y * inv, o.z * inv, o.w * inv);
    }
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

// Cluster merge: the p.cluster CTAs of a (batch, KV head) each hold their
// split's partial (O unnormalised, (m, l) per row) in shared memory. Items
// (row, 4 columns) are dealt round-robin over the cluster's CTAs and threads,
// so the merge runs on all of the cluster's SMs at once; each item reads its
// row's partial from every CTA through DSMEM (a few hundred ns, no L2 trip,
// no atomic) and writes O (and LSE for column 0). Deterministic: splits are
// summed in rank order.
template <typename T, int D>
__device__ __forceinline__ void merge_cluster(const pt_attn_kparams &p, const float *part_o,
                                              const float2 *part_ml, int bi, int kh, int rows,
                                              int group, int nitems) {
  const int C = p.cluster;
  const int rank = static_cast<int>(cluster_rank());
  const uint32_t o_base = smem_u32(part_o), ml_base = smem_u32(part_ml);
  constexpr int CHUNK = 8;  // partial-O loads in flight per thread
  for (int it = rank + C * threadIdx.x; it < nitems; it += C * NT) {
    const int r = it / (D / 4), d = (it % (D / 4)) * 4;
    float2 ml[PT_ATTN_MAX_CLUSTER];
#pragma unroll
    for (int s = 0; s < PT_ATTN_MAX_CLUSTER; ++s)
      if (s < C) ml[s] = ld_cluster_f2(cluster_map(ml_base + r * 8, s));
    float M = NEG_INF;
#pragma unroll
    for (int s = 0; s < PT_ATTN_MAX_CLUSTER; ++s)
      if (s < C) M = fmaxf(M, ml[s].x);
    const float Mu = M == NEG_INF ? 0.f : M;
    float L = 0.f;
#pragma unroll
    for (int s = 0; s < PT_ATTN_MAX_CLUSTER; ++s) {
      if (s < C) {
        ml[s].x = ex2(ml[s].x - Mu);  // weight; 0 for a split that saw no key of this row
        L += ml[s].x * ml[s].y;
      }
    }
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int c0 = 0; c0 < PT_ATTN_MAX_CLUSTER; c0 += CHUNK) {
      if (c0 >= C) break;
      float4 x[CHUNK];
#pragma unroll
      for (int j = 0; j < CHUNK; ++j)
        if (c0 + j < C) x[j] = ld_cluster_f4(cluster_map(o_base + (r * D + d) * 4, c0 + j));
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        if (c0 + j < C) {
          const float w = ml[c0 + j].x;
          o.x += w * x[j].x;
          o.y += w * x[j].y;
          o.z += w * x[j].z;
          o.w += w * x[j].w;
        }
      }
    }
    // Every row sees key 0 (split 0), so L > 0.
    const int i = r / group, hh = kh * group + r % group;
    const float inv = 1.f / L;
    store4(static_cast<T *>(p.o) + bi * p.o_bs + i * p.o_rs + hh * p.o_hs + d, o.x * inv,
           o.y * inv, o.z * inv, o.w * inv);
    if (d == 0 && p.lse) p.lse[((int64_t)bi * p.h + hh) * p.sq + i] = (M + __log2f(L)) * LN2;
  }
}

template <typename T, int D>
__device__ __forceinline__ void decode(const pt_attn_kparams &p) {
  using C = cfg<D>;
  constexpr int NST = C::NSTAGE, CH = C::CH, TILE = C::TILE, LD = C::RED_LD;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;
  T *const sKV = reinterpret_cast<T *>(smem);          // stage s: K at 2s*TILE, V after it
  T *const sQ = sKV + NST * 2 * TILE;                  // [16][D]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x, kh = blockIdx.y, bi = blockIdx.z;
  const int group = p.group, rows = p.rows;

  const int key_begin = split * p.tiles_per_split * BK;
  const int key_end = min(p.sk, key_begin + p.tiles_per_split * BK);
  const int ntiles = (key_end - key_begin + BK - 1) / BK;

  // Each thread copies the same chunk column of rows r0, r0 + 128/CH, ...
  const int ld_ch = tid % CH, ld_r0 = tid / CH;
  constexpr int LD_STEP = NT / CH, LD_ITERS = BK * CH / NT;
  const T *const kcol = static_cast<const T *>(p.k) + bi * p.k_bs + kh * p.k_hs + ld_ch * 8;
  const T *const vcol = static_cast<const T *>(p.v) + bi * p.v_bs + kh * p.v_hs + ld_ch * 8;

  auto load_tile = [&](int tile, int stage) {
    const int key0 = key_begin + tile * BK;
    T *const dk = sKV + stage * 2 * TILE;
    T *const dv = dk + TILE;
#pragma unroll
    for (int i = 0; i < LD_ITERS; ++i) {
      const int row = ld_r0 + i * LD_STEP;
      const int key = key0 + row;
      const bool ok = key < key_end;
      const int64_t kk = ok ? key : key_begin;  // always a valid address
      const int off = swz<D>(row, ld_ch);
      cp_async16(smem_u32(dk + off), kcol + kk * p.k_rs, ok ? 16 : 0);
      cp_async16(smem_u32(dv + off), vcol + kk * p.v_rs, ok ? 16 : 0);
    }
  };

  // Prologue: NST-1 tiles in flight before Q is even touched.
#pragma unroll
  for (int s = 0; s < NST - 1; ++s) {
    if (s < ntiles) load_tile(s, s);
    cp_async_commit();
  }

  // Q rows -> shared memory (zero rows pad to 16). Row r is query position
  // r / group of head kh * group + r % group.
  {
    const T *const qb = static_cast<const T *>(p.q) + bi * p.q_bs;
    for (int c = tid; c < 16 * CH; c += NT) {
      const int r = c / CH, ch = c % CH;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < rows) {
        const int i = r / group, hh = kh * group + r % group;
        val = *reinterpret_cast<const uint4 *>(qb + i * p.q_rs + hh * p.q_hs + ch * 8);
      }
      *reinterpret_cast<uint4 *>(sQ + swz<D>(r, ch)) = val;
    }
  }
  __syncthreads();

  constexpr bool Q_IN_REGS = D <= 128;
  constexpr int QF = Q_IN_REGS ? D / 16 : 1;
  uint32_t qf[QF][4];
  const int mi = lane >> 3;
  if constexpr (Q_IN_REGS) {
#pragma unroll
    for (int ks = 0; ks < QF; ++ks)
      ldsm_x4(qf[ks], smem_u32(sQ + swz<D>((mi & 1) * 8 + (lane & 7), ks * 2 + (mi >> 1))));
  }

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
    cp_async_wait<NST - 2>();
    __syncthreads();  // tile `it` visible to all; stage (it-1) % NST free to refill
    {
      const int nt = it + NST - 1;
      if (nt < ntiles) load_tile(nt, nt % NST);
      cp_async_commit();
    }
    const int kw0 = key_begin + it * BK + warp * 16;
    if (kw0 >= key_end) continue;  // warp-uniform: this warp's 16 keys are all past the split
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

    // Mask (split end, causal) and scale into the log2 domain.
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = kw0 + n * 8 + 2 * t + (j & 1);
        const int lim = j < 2 ? lim0 : lim1;
        s[n][j] = key <= lim ? s[n][j] * sl2 : NEG_INF;
      }
    }

    // Online softmax; a row the split never lets see a key keeps m = -inf,
    // so the exponent base is guarded to stay NaN-free.
    float mx0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    float mx1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
    const float al0 = ex2(m0 - mu0), al1 = ex2(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      s[n][0] = ex2(s[n][0] - mu0);
      s[n][1] = ex2(s[n][1] - mu0);
      s[n][2] = ex2(s[n][2] - mu1);
      s[n][3] = ex2(s[n][3] - mu1);
    }
    l0 = l0 * al0 + (s[0][0] + s[0][1]) + (s[1][0] + s[1][1]);
    l1 = l1 * al1 + (s[0][2] + s[0][3]) + (s[1][2] + s[1][3]);
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
  cp_async_wait<0>();
  __syncthreads();  // the K/V ring is reused below

  // Row sums were kept per thread: add the 4 lanes of each row.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

  // ---- merge the 4 warps through shared memory ---------------------------
  float *const red_o = reinterpret_cast<float *>(smem);  // [4][16][LD]
  float *const red_m = red_o + 4 * 16 * LD;              // [4][16]
  float *const red_l = red_m + 64;                       // [4][16]
  if (t == 0) {
    red_m[warp * 16 + g] = m0;
    red_m[warp * 16 + g + 8] = m1;
    red_l[warp * 16 + g] = l0;
    red_l[warp * 16 + g + 8] = l1;
  }
  __syncthreads();
  {
    float M0 = NEG_INF, M1 = NEG_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      M0 = fmaxf(M0, red_m[w * 16 + g]);
      M1 = fmaxf(M1, red_m[w * 16 + g + 8]);
    }
    const float sc0 = ex2(m0 - (M0 == NEG_INF ? 0.f : M0));
    const float sc1 = ex2(m1 - (M1 == NEG_INF ? 0.f : M1));
    float *const r0 = red_o + (warp * 16 + g) * LD + 2 * t;
    float *const r1 = r0 + 8 * LD;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2 *>(r0 + n * 8) = make_float2(acc[n][0] * sc0, acc[n][1] * sc0);
      *reinterpret_cast<float2 *>(r1 + n * 8) = make_float2(acc[n][2] * sc1, acc[n][3] * sc1);
    }
  }
  __syncthreads();

  const int unit = bi * p.h_k + kh;
  const int nitems = rows * (D / 4);
  const bool in_cluster = p.cluster > 1;
  // Cluster mode: this CTA's partial stays in its own shared memory, after
  // the warp-merge buffers (16-byte aligned: red_o + red_m + red_l).
  float *const part_o = red_l + 64;                                   // [rows][D]
  float2 *const part_ml = reinterpret_cast<float2 *>(part_o + 16 * D);  // [rows]
  // Workspace partials of this unit (split path only).
  float2 *const ws_ml = p.nsplit > 1 && !in_cluster
      ? reinterpret_cast<float2 *>(p.ws + p.ws_ml_off) + (int64_t)unit * p.nsplit * rows
      : nullptr;
  float *const ws_o = p.nsplit > 1 && !in_cluster
      ? reinterpret_cast<float *>(p.ws + p.ws_o_off) + (int64_t)unit * p.nsplit * rows * D
      : nullptr;
  for (int item = tid; item < nitems; item += NT) {
    const int r = item / (D / 4), d = (item % (D / 4)) * 4;
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
      // Every row sees key 0 (seqlen_q <= seqlen_k when causal), so L > 0.
      const int i = r / group, hh = kh * group + r % group;
      const float inv = 1.f / L;
      store4(static_cast<T *>(p.o) + bi * p.o_bs + i * p.o_rs + hh * p.o_hs + d, o.x * inv,
             o.y * inv, o.z * inv, o.w * inv);
      if (d == 0 && p.lse) p.lse[((int64_t)bi * p.h + hh) * p.sq + i] = (M + __log2f(L)) * LN2;
    } else if (in_cluster) {
      *reinterpret_cast<float4 *>(part_o + r * D + d) = o;
      if (d == 0) part_ml[r] = make_float2(M, L);
    } else {
      *reinterpret_cast<float4 *>(ws_o + ((int64_t)split * rows + r) * D + d) = o;
      if (d == 0) ws_ml[split * rows + r] = make_float2(M, L);
    }
  }
  if (p.nsplit == 1) return;
  if (in_cluster) {
    cluster_sync();  // every CTA's partial is written and visible
    merge_cluster<T, D>(p, part_o, part_ml, bi, kh, rows, group, nitems);
    cluster_sync();  // no CTA leaves while another still reads its shared memory
    return;
  }

  // ---- the last CTA of this (batch, KV head) merges the splits ------------
  // One thread publishes the CTA's partial and counts it with a single
  // acq_rel atomic (release for our stores, which the barrier orders before
  // it; acquire for the other CTAs' partials when we are last).
  __syncthreads();
  if (tid == 0) {
    unsigned int *const cnt = reinterpret_cast<unsigned int *>(p.ws) + unit;
    unsigned int done;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
                 : "=r"(done)
                 : "l"(cnt)
                 : "memory");
    const int last = done == static_cast<unsigned int>(p.nsplit - 1);
    // Self-reset: every split has counted, so nothing else touches it in
    // this launch; the next launch on the stream sees 0 again.
    if (last) asm volatile("st.relaxed.gpu.global.u32 [%0], 0;\n" ::"l"(cnt) : "memory");
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;

  merge_splits<T, D>(p, smem, ws_ml, ws_o, p.nsplit, bi, kh, rows, group, nitems);
}

}  // namespace pt_attn

#define PT_ATTN_DECODE_KERNEL(NAME, T, D)                                                \
  extern "C" __global__ void __launch_bounds__(PT_ATTN_THREADS,                          \
                                               pt_attn::cfg<D>::MIN_BLOCKS)              \
      NAME(const __grid_constant__ pt_attn_kparams p) {                                  \
    pt_attn::decode<T, D>(p);                                                            \
  }

PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d64, __nv_bfloat16, 64)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d128, __nv_bfloat16, 128)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_bf16_d256, __nv_bfloat16, 256)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d64, __half, 64)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d128, __half, 128)
PT_ATTN_DECODE_KERNEL(pt_attn_decode_fp16_d256, __half, 256)
