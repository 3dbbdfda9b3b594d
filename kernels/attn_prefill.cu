// Prefill attention for sm_90a (issue 18): TMA loads, wgmma, warp specialisation.
// Status and layout: kernels/attn_prefill.h. Written from the PTX ISA (wgmma, the shared
// memory matrix descriptors, cp.async.bulk.tensor, mbarrier) and the FlashAttention papers.
//
// Grid (m_blocks, h, b), 384 threads:
//  - warpgroup 0, one thread: the producer. It loads the CTA's Q tile once, then K/V tiles of
//    BN keys into a ring of NSTAGE stages (TMA, completion counted on a "full" mbarrier per
//    stage), waiting on the stage's "empty" mbarrier before it reuses it.
//  - warpgroups 1 and 2: the consumers, 64 query rows each. Per K/V tile: S = Q K^T (wgmma,
//    both operands in shared memory, K-major), the mask (key past sk, causal), the online
//    softmax in the log2 domain, P packed to 16-bit A fragments in registers, O += P V (wgmma,
//    B = V transposed through its descriptor), then every warp arrives on the stage's empty
//    barrier. At the end O / l and the LSE go to global memory.
// No cross-warpgroup overlap of softmax and GEMMs yet (FA3's ping-pong): first correctness.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#ifdef PT_PREFILL_WATCHDOG
#include <stdio.h>
#endif

#include "kernels/attn_prefill.h"
#include "kernels/attn_prefill_wgmma.cuh"
#include "kernels/softmax.cuh"

namespace pt_prefill {

// Shared with the decode kernel: PTX wrappers (kernels/ptx.cuh), the online softmax and the
// LSE (kernels/softmax.cuh).
using pt_attn::dt;
using pt_attn::NEG_INF;
using pt_attn::online_softmax;
using pt_attn::row_lse;
using pt_attn::smem_u32;

constexpr int BM = PT_PREFILL_BM, BN = PT_PREFILL_BN, NS = PT_PREFILL_NSTAGE, SUB = PT_PREFILL_SUB;

// ---- mbarrier and TMA -----------------------------------------------------------------
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed. `tag` names the
// barrier (0 q_full, 1 + s k_full, 1 + NS + s v_full, 1 + 2 NS + s empty) for the watchdog of
// test builds (-DPT_PREFILL_WATCHDOG): a wait that spins for seconds prints which barrier,
// block and thread, then traps, so that a deadlock fails the launch instead of hanging the
// test. Production builds compile the plain loop.
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, int tag) {
  uint32_t done = 0;
#ifdef PT_PREFILL_WATCHDOG
  long long spins = 0;
#endif
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#ifdef PT_PREFILL_WATCHDOG
    if (!done && ++spins == (1ll << 24)) {
      printf("pt_prefill watchdog: block (%d,%d,%d) thread %d stuck on barrier %d parity %u\n", (int)blockIdx.x,
             (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, tag, parity);
      __trap();
    }
#else
    (void)tag;
#endif
  }
}
// One box of a 4D tensor map into shared memory; completion counted on `bar`.
static __device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                   int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------
static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
template <int N> static __device__ __forceinline__ void fence_acc(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits 62-63). K-major
// operands (Q, K: the reduced dim contiguous in 128-byte rows): SBO = 1024 bytes between
// groups of 8 rows, LBO unused; a k16 step inside the 64-element row moves the start by 32
// bytes. MN-major operand (V: the output dim contiguous): LBO = bytes between 64-element
// chunks of the output dim (one sub-tile), SBO = 1024 bytes between groups of 8 keys.
static __device__ __forceinline__ uint64_t gdesc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

template <typename T> struct ops;
template <> struct ops<__nv_bfloat16> {
  static __device__ __forceinline__ void ss(float (&d)[8][4], uint64_t a, uint64_t b, int sc) {
    wgmma_ss_m64n64_bf16(d, a, b, sc);
  }
  static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n64_bf16(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n128_bf16(d, a, b);
  }
};
template <> struct ops<__half> {
  static __device__ __forceinline__ void ss(float (&d)[8][4], uint64_t a, uint64_t b, int sc) {
    wgmma_ss_m64n64_f16(d, a, b, sc);
  }
  static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n64_f16(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n128_f16(d, a, b);
  }
};

// K/V tiles this CTA reads: all keys, or (causal) up to the last one its last row sees.
static __device__ __forceinline__ int n_tiles(const pt_prefill_kparams &p, int m0) {
  int kmax = p.sk - 1;
  if (p.causal) kmax = min(kmax, m0 + BM - 1 + p.sk - p.sq);
  return kmax < 0 ? 0 : kmax / BN + 1;
}

template <typename T, int D>
__device__ __forceinline__ void prefill(const pt_prefill_kparams &p) {
  constexpr int ND = D / SUB;                       // 64-element sub-tiles per row
  constexpr uint32_t Q_SUB = BM * SUB * 2;          // bytes of one Q sub-tile
  constexpr uint32_t KV_SUB = BN * SUB * 2;         // bytes of one K or V sub-tile
  constexpr uint32_t Q_BYTES = ND * Q_SUB, KV_BYTES = ND * KV_SUB;
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte alignment: the 128-byte swizzle's atom (descriptor base offset 0).
  unsigned char *const smem =
      reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + Q_BYTES;                 // stage s at sK + s * KV_BYTES
  const uint32_t sV = sK + NS * KV_BYTES;
  const uint32_t bars = sV + NS * KV_BYTES;         // q_full, k_full[NS], v_full[NS], empty[NS]
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8u * (1 + s); };
  auto v_full = [&](int s) { return bars + 8u * (1 + NS + s); };
  auto empty = [&](int s) { return bars + 8u * (1 + 2 * NS + s); };

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int mb = p.causal ? p.m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;  // heavy blocks first
  const int h = blockIdx.y, bi = blockIdx.z, hk = h / p.group;
  const int m0 = mb * BM;
  const int nt = n_tiles(p, m0);

  if (tid == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < NS; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(empty(s), 8);  // every warp of both consumer warpgroups
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer ------------------------------------------------------------------------
    if (tid == 0) {
      mbar_expect_tx(q_full, Q_BYTES);
#pragma unroll
      for (int c = 0; c < ND; ++c) tma_load_4d(sQ + c * Q_SUB, &p.tq, c * SUB, m0, h, bi, q_full);
      for (int it = 0; it < nt; ++it) {
        const int s = it % NS;
        if (it >= NS) mbar_wait(empty(s), (uint32_t)((it / NS - 1) & 1), 1 + 2 * NS + s);
        mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
        for (int c = 0; c < ND; ++c)
          tma_load_4d(sK + s * KV_BYTES + c * KV_SUB, &p.tk, c * SUB, it * BN, hk, bi, k_full(s));
        mbar_expect_tx(v_full(s), KV_BYTES);
#pragma unroll
        for (int c = 0; c < ND; ++c)
          tma_load_4d(sV + s * KV_BYTES + c * KV_SUB, &p.tv, c * SUB, it * BN, hk, bi, v_full(s));
      }
    }
    return;  // the consumers below never synchronise with this warpgroup again
  }

  // ---- consumers ---------------------------------------------------------------------------
  const int cw = wg - 1;                                  // rows [m0 + 64 cw, m0 + 64 cw + 64)
  const int r0 = m0 + 64 * cw + 16 * warp + lane / 4;     // this thread's rows r0 and r0 + 8
  const int diag = p.sk - p.sq;                           // causal: row r sees keys <= r + diag
  const int slab_last = m0 + 64 * cw + 63;
  const float sl2 = p.scale_log2;

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_0 = NEG_INF, m_1 = NEG_INF, l_0 = 0.f, l_1 = 0.f;

  mbar_wait(q_full, 0, 0);
  for (int it = 0; it < nt; ++it) {
    const int s = it % NS;
    const uint32_t ph = (uint32_t)((it / NS) & 1);
    const int n0 = it * BN;
    // A tile wholly past this slab's causal limit: nothing to compute, but the stage is
    // released like any other.
    const bool skip = p.causal && n0 > slab_last + diag;
    if (!skip) {
      mbar_wait(k_full(s), ph, 1 + s);
      float sc[BN / 8][4];
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t qa = sQ + (ks / 4) * Q_SUB + cw * 64 * 128 + (ks % 4) * 32;
        const uint32_t ka = sK + s * KV_BYTES + (ks / 4) * KV_SUB + (ks % 4) * 32;
        ops<T>::ss(sc, gdesc(qa, 16, 1024), gdesc(ka, 16, 1024), ks > 0);
      }
      wg_commit();
      wg_wait0();
      fence_acc(sc);

      // Mask: keys past sk (the TMA filled them with zeros), causal beyond the diagonal.
      const bool need_mask = n0 + BN > p.sk || (p.causal && n0 + BN - 1 > m0 + 64 * cw + diag);
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int key = n0 + 8 * i + 2 * (lane % 4) + (j & 1);
          const int row = r0 + (j >= 2 ? 8 : 0);
          const bool masked = need_mask && (key >= p.sk || (p.causal && key > row + diag));
          sc[i][j] = masked ? NEG_INF : sc[i][j] * sl2;
        }
      }
      // Online softmax (log2 domain, kernels/softmax.cuh); a row that has seen no key keeps
      // m = -inf.
      float al0, al1;
      online_softmax(sc, m_0, m_1, l_0, l_1, al0, al1);
      // P as the A fragments of BN / 16 k16 steps: columns [16j, 16j + 16) are the
      // accumulator blocks 2j and 2j + 1.
      uint32_t pa[BN / 16][4];
#pragma unroll
      for (int j = 0; j < BN / 16; ++j) {
        pa[j][0] = dt<T>::pack(sc[2 * j][0], sc[2 * j][1]);
        pa[j][1] = dt<T>::pack(sc[2 * j][2], sc[2 * j][3]);
        pa[j][2] = dt<T>::pack(sc[2 * j + 1][0], sc[2 * j + 1][1]);
        pa[j][3] = dt<T>::pack(sc[2 * j + 1][2], sc[2 * j + 1][3]);
      }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= al0;
        o[i][1] *= al0;
        o[i][2] *= al1;
        o[i][3] *= al1;
      }

      mbar_wait(v_full(s), ph, 1 + NS + s);
      fence_acc(o);
      wg_fence();
#pragma unroll
      for (int j = 0; j < BN / 16; ++j) {
        const uint32_t va = sV + s * KV_BYTES + j * 16 * 128;
        ops<T>::rs(o, pa[j], gdesc(va, KV_SUB, 1024));
      }
      wg_commit();
      wg_wait0();
      fence_acc(o);
    } else {
      // Keep the full barriers' phases in step with the producer's.
      mbar_wait(k_full(s), ph, 1 + s);
      mbar_wait(v_full(s), ph, 1 + NS + s);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));
  }

  // ---- epilogue ----------------------------------------------------------------------------
  l_0 += __shfl_xor_sync(0xffffffffu, l_0, 1);
  l_0 += __shfl_xor_sync(0xffffffffu, l_0, 2);
  l_1 += __shfl_xor_sync(0xffffffffu, l_1, 1);
  l_1 += __shfl_xor_sync(0xffffffffu, l_1, 2);
  const float inv0 = l_0 > 0.f ? 1.f / l_0 : 0.f, inv1 = l_1 > 0.f ? 1.f / l_1 : 0.f;
  T *const ob = static_cast<T *>(p.o) + bi * p.o_bs + h * p.o_hs;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r0 + 8 * half;
    if (row >= p.sq) continue;
    const float inv = half ? inv1 : inv0;
    T *const orow = ob + (int64_t)row * p.o_rs;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = 8 * i + 2 * (lane % 4);
      *reinterpret_cast<uint32_t *>(orow + col) =
          dt<T>::pack(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
    }
    if (p.lse && lane % 4 == 0) {
      const float m = half ? m_1 : m_0, l = half ? l_1 : l_0;
      p.lse[((int64_t)bi * p.h + h) * p.sq + row] = row_lse(m, l);
    }
  }
}

}  // namespace pt_prefill

#define PT_PREFILL_KERNEL(NAME, T, D)                                                          \
  extern "C" __global__ void __launch_bounds__(PT_PREFILL_THREADS, 1)                          \
      NAME(const __grid_constant__ pt_prefill_kparams p) {                                     \
    pt_prefill::prefill<T, D>(p);                                                              \
  }

PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d64, __nv_bfloat16, 64)
PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d128, __nv_bfloat16, 128)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d64, __half, 64)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d128, __half, 128)
