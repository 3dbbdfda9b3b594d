// Prefill attention for sm_90a (issue 18): TMA loads, wgmma, warp specialisation.
// Status and layout: kernels/attn_prefill.h. Written from the PTX ISA (wgmma, the shared
// memory matrix descriptors, cp.async.bulk.tensor, mbarrier) and the FlashAttention papers.
//
// Grid (m_blocks, h, b), 384 threads:
//  - warpgroup 0 (40 registers after setmaxnreg), one thread: the producer. It loads the CTA's
//    Q tile once, then K and V tiles of BN keys into a ring of PT_PREFILL_STAGES(d) stages
//    (TMA; completion counted on a "full" mbarrier per tile), waiting on the tile's own "empty"
//    mbarrier (K and V separately) before it reuses a stage.
//  - warpgroups 1 and 2 (232 registers): the consumers, 64 query rows each. Per K/V tile j,
//    in its turn (the two warpgroups alternate on the tensor cores, FA3's ping-pong), a
//    warpgroup issues S_j = Q K_j^T (wgmma, both operands in shared memory, K-major) and
//    O += P_{j-1} V_{j-1} (wgmma, P from registers, V read MN-major through its descriptor);
//    then, while P V still runs, it masks S_j (keys past sk, causal) and runs the online
//    softmax (log2 domain, scale folded into the exponent); once P V is done it releases V,
//    rescales O and packs P_j. At the end O / l and the LSE go to global memory.
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
using pt_attn::online_softmax_scaled;
using pt_attn::row_lse;
using pt_attn::smem_u32;

constexpr int BN = PT_PREFILL_BN, SUB = PT_PREFILL_SUB;

// ---- mbarrier and TMA -----------------------------------------------------------------
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// An arrive, predicated inside the asm (no branch): it runs between wgmma issue and wait.
static __device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
               "r"((int)pred)
               : "memory");
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
// Ping-pong between the NC consumer warpgroups (FA3's warp scheduling barriers): named
// barrier 1 + w is warpgroup w's turn to issue its GEMMs. It waits there (bar.sync, its 128
// threads) until the warpgroup before it (round robin) has arrived (bar.arrive, 128 more) after
// issuing its own, so the tensor cores take them in turn and one's softmax overlaps the
// others' GEMMs. Barrier 0 is __syncthreads'.
static __device__ __forceinline__ void turn_wait(int w) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + w) : "memory");
}
template <int NC> static __device__ __forceinline__ void turn_pass(int w) {
  const int next = NC == 2 ? w ^ 1 : (w + 1 == NC ? 0 : w + 1);
  asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + next) : "memory");
}
static __device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// Register reallocation between warpgroups (all four warps of a warpgroup execute it): the
// producer gives back what its one loading thread does not need, the consumers take it.
// Two consumers: 128 x 40 + 256 x 232 = 64512 of the SM's 65536; three: 128 x 24 + 384 x 160.
template <int NC> static __device__ __forceinline__ void regs_producer() {
  if (NC == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
}
template <int NC> static __device__ __forceinline__ void regs_consumer() {
  if (NC == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
template <int N> static __device__ __forceinline__ void fence_acc(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}
// The same for the P fragments an in-flight P V wgmma reads: placed after its wait, it keeps
// them live (and their registers unreused) until then.
template <int N> static __device__ __forceinline__ void fence_frag(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
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
  static __device__ __forceinline__ void ss(float (&d)[16][4], uint64_t a, uint64_t b) {
    wgmma_ss_m64n128_bf16(d, a, b, 1);
  }
  static __device__ __forceinline__ void ss0(float (&d)[16][4], uint64_t a, uint64_t b) {
    wgmma_ss_m64n128_bf16_zero(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n64_bf16(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n128_bf16(d, a, b);
  }
};
template <> struct ops<__half> {
  static __device__ __forceinline__ void ss(float (&d)[16][4], uint64_t a, uint64_t b) {
    wgmma_ss_m64n128_f16(d, a, b, 1);
  }
  static __device__ __forceinline__ void ss0(float (&d)[16][4], uint64_t a, uint64_t b) {
    wgmma_ss_m64n128_f16_zero(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n64_f16(d, a, b);
  }
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_m64n128_f16(d, a, b);
  }
};

// K/V tiles this CTA reads: all keys, or (causal) up to the last one its last row sees.
static __device__ __forceinline__ int n_tiles(const pt_prefill_kparams &p, int m0, int bm) {
  int kmax = p.sk - 1;
  if (p.causal) kmax = min(kmax, m0 + bm - 1 + p.sk - p.sq);
  return kmax < 0 ? 0 : kmax / BN + 1;
}

// Descriptors of one tile's wgmma steps, computed before the wgmma.fence and pinned there
// (the empty asm): ptxas serialises the wgmma pipeline when non-wgmma instructions define a
// wgmma's inputs, descriptors included, while earlier wgmmas are in flight.
template <int N> static __device__ __forceinline__ void pin(uint64_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+l"(d[i])::"memory");
}
// S = Q K^T: d / 16 k16 steps over Q (this warpgroup's 64 rows) and K, both K-major; a step
// moves 32 bytes inside the 128-byte row, or to the next 64-column sub-tile.
template <int D> static __device__ __forceinline__ void desc_s(uint64_t (&dq)[D / 16], uint64_t (&dk)[D / 16],
                                                              uint32_t q_rows, uint32_t k_tile) {
  constexpr uint32_t Q_SUB = PT_PREFILL_BM(D) * SUB * 2, KV_SUB = BN * SUB * 2;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    dq[ks] = gdesc(q_rows + (ks / 4) * Q_SUB + (ks % 4) * 32, 16, 1024);
    dk[ks] = gdesc(k_tile + (ks / 4) * KV_SUB + (ks % 4) * 32, 16, 1024);
  }
}
// P V: BN / 16 k16 steps of 16 keys (2048 bytes of every V sub-tile), V read MN-major.
static __device__ __forceinline__ void desc_v(uint64_t (&dv)[BN / 16], uint32_t v_tile) {
  constexpr uint32_t KV_SUB = BN * SUB * 2;
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) dv[j] = gdesc(v_tile + j * 16 * 128, KV_SUB, 1024);
}

template <typename T, int D>
static __device__ __forceinline__ void issue_s(float (&s)[BN / 8][4], const uint64_t (&dq)[D / 16],
                                               const uint64_t (&dk)[D / 16]) {
  ops<T>::ss0(s, dq[0], dk[0]);  // the first step overwrites
#pragma unroll
  for (int ks = 1; ks < D / 16; ++ks) ops<T>::ss(s, dq[ks], dk[ks]);
}

template <typename T, int D>
static __device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&pa)[BN / 16][4],
                                                const uint64_t (&dv)[BN / 16]) {
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) ops<T>::rs(o, pa[j], dv[j]);
}

// The mask (keys past sk, causal past the diagonal) and the online softmax in the log2
// domain, in place: S becomes exp2(S * sl2 - m) (the scale folded into the exponent's FMA),
// the running maxima and sums advance, and al0 / al1 are the factors O is rescaled by before
// its next P V. Branch-free (selects, bitwise logic): it runs while a P V wgmma is in flight,
// where control flow would make ptxas serialise the wgmma pipeline.
static __device__ __forceinline__ void softmax_tile(float (&s)[BN / 8][4], const pt_prefill_kparams &p, int n0,
                                                    int r0, int slab0, int diag, float &m_0, float &m_1,
                                                    float &l_0, float &l_1, float &al0, float &al1) {
  const int lane = threadIdx.x % 32;
  const bool need_mask = (n0 + BN > p.sk) | ((p.causal != 0) & (n0 + BN - 1 > slab0 + diag));
  // Keys this thread's rows see: key < lim0 (row r0) and key < lim1 (row r0 + 8).
  const int lim0 = p.causal ? min(p.sk, r0 + diag + 1) : p.sk;
  const int lim1 = p.causal ? min(p.sk, r0 + 8 + diag + 1) : p.sk;
  const int kb = n0 + 2 * (lane % 4);  // this thread's first key; block i adds 8 i, element j & 1
#pragma unroll
  for (int i = 0; i < BN / 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      s[i][j] = (need_mask & (kb + 8 * i + (j & 1) >= (j >= 2 ? lim1 : lim0))) ? NEG_INF : s[i][j];
  online_softmax_scaled(s, p.scale_log2, m_0, m_1, l_0, l_1, al0, al1);
}

// P (the exponentials in S's accumulators) as the A fragments of BN / 16 k16 steps:
// columns [16j, 16j + 16) are accumulator blocks 2j and 2j + 1.
template <typename T>
static __device__ __forceinline__ void pack_p(const float (&s)[BN / 8][4], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) {
    pa[j][0] = dt<T>::pack(s[2 * j][0], s[2 * j][1]);
    pa[j][1] = dt<T>::pack(s[2 * j][2], s[2 * j][3]);
    pa[j][2] = dt<T>::pack(s[2 * j + 1][0], s[2 * j + 1][1]);
    pa[j][3] = dt<T>::pack(s[2 * j + 1][2], s[2 * j + 1][3]);
  }
}

template <int N> static __device__ __forceinline__ void rescale(float (&o)[N][4], float al0, float al1) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    o[i][0] *= al0;
    o[i][1] *= al0;
    o[i][2] *= al1;
    o[i][3] *= al1;
  }
}

template <typename T, int D>
__device__ __forceinline__ void prefill(const pt_prefill_kparams &p) {
  constexpr int ND = D / SUB;                       // 64-element sub-tiles per row
  constexpr int NS = PT_PREFILL_STAGES(D);          // K/V tiles in flight
  constexpr int NC = PT_PREFILL_CONSUMERS(D);       // consumer warpgroups
  constexpr int BM = PT_PREFILL_BM(D);              // query rows: 64 per consumer
  constexpr bool PERSIST = PT_PREFILL_PERSISTENT != 0;
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
  // q_full, k_full[NS], v_full[NS], k_empty[NS], v_empty[NS], q_empty
  const uint32_t bars = sV + NS * KV_BYTES;
  const uint32_t q_full = bars, q_empty = bars + 8u * (1 + 4 * NS);
  auto k_full = [&](int s) { return bars + 8u * (1 + s); };
  auto v_full = [&](int s) { return bars + 8u * (1 + NS + s); };
  auto k_empty = [&](int s) { return bars + 8u * (1 + 2 * NS + s); };
  auto v_empty = [&](int s) { return bars + 8u * (1 + 3 * NS + s); };

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  // The CTA's tiles (m-block, head, batch). One per CTA: the grid is (m_blocks, h, b), causal
  // m-blocks reversed (heavy blocks first). Persistent (PT_PREFILL_PERSISTENT, an experiment):
  // a 1D grid walks the tiles t = blockIdx.x, + gridDim.x, ..., numbered heaviest m-block
  // first, then head, then batch, so each round of the walk costs every CTA about the same.
  const int t_first = PERSIST ? (int)blockIdx.x : 0, t_step = PERSIST ? (int)gridDim.x : 1;
  const int t_end = PERSIST ? p.tiles : 1;
  auto tile = [&](int t, int &mb, int &h, int &bi) {
    if (!PERSIST) {
      mb = p.causal ? p.m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
      h = blockIdx.y;
      bi = blockIdx.z;
      return;
    }
    const int hb = p.h * p.b, mr = t / hb, rem = t - mr * hb;
    mb = p.causal ? p.m_blocks - 1 - mr : mr;
    h = rem % p.h;
    bi = rem / p.h;
  };

  if (tid == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 4 * NC);
    for (int s = 0; s < NS; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 4 * NC);  // every warp of the consumer warpgroups
      mbar_init(v_empty(s), 4 * NC);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer ------------------------------------------------------------------------
    // The ring runs on across the CTA's tiles: g counts the K/V tiles loaded so far.
    regs_producer<NC>();
    if (tid == 0) {
      int g = 0, k = 0;
      for (int t = t_first; t < t_end; t += t_step, ++k) {
        int mb, h, bi;
        tile(t, mb, h, bi);
        const int m0 = mb * BM, nt = n_tiles(p, m0, BM), hk = h / p.group;
        // The previous tile's consumers are done with Q once their last S has completed.
        if (k > 0) mbar_wait(q_empty, (uint32_t)((k - 1) & 1), 1 + 4 * NS);
        mbar_expect_tx(q_full, Q_BYTES);
#pragma unroll
        for (int c = 0; c < ND; ++c) tma_load_4d(sQ + c * Q_SUB, &p.tq, c * SUB, m0, h, bi, q_full);
        for (int it = 0; it < nt; ++it) {
          const int gg = g + it, s = gg % NS;
          const uint32_t ph = (uint32_t)((gg / NS - 1) & 1);  // the phase the stage's last use completed
          if (gg >= NS) mbar_wait(k_empty(s), ph, 1 + 2 * NS + s);
          mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
          for (int c = 0; c < ND; ++c)
            tma_load_4d(sK + s * KV_BYTES + c * KV_SUB, &p.tk, c * SUB, it * BN, hk, bi, k_full(s));
          if (gg >= NS) mbar_wait(v_empty(s), ph, 1 + 3 * NS + s);
          mbar_expect_tx(v_full(s), KV_BYTES);
#pragma unroll
          for (int c = 0; c < ND; ++c)
            tma_load_4d(sV + s * KV_BYTES + c * KV_SUB, &p.tv, c * SUB, it * BN, hk, bi, v_full(s));
        }
        g += nt;
      }
    }
    return;  // the consumers below never synchronise with this warpgroup again
  }

  // ---- consumers ---------------------------------------------------------------------------
  // Per K/V tile j, software-pipelined inside the warpgroup: S_j = Q K_j^T and O += P_{j-1}
  // V_{j-1} are issued together; the softmax of S_j runs while P V is still on the tensor
  // cores, and O is rescaled once that wgmma has finished.
  regs_consumer<NC>();
  const int cw = wg - 1;                                  // rows [m0 + 64 cw, m0 + 64 cw + 64)
  const int diag = p.sk - p.sq;                           // causal: row r sees keys <= r + diag
  const uint32_t q_rows = sQ + cw * 64 * 128;
  float s[BN / 8][4];
  uint32_t pa[BN / 16][4];
  uint64_t dq[D / 16], dk[D / 16], dv[BN / 16];
  // Turns: each warpgroup issues GEMMs in nt + 1 turns per tile (S of K/V tile 0, then S and
  // P V together for K/V tiles 1 .. nt - 1, then the last P V), each opened by its turn_wait
  // and closed by a turn_pass to the next warpgroup (round robin). Warpgroup 0 goes first (the
  // last one passes it the first turn); the last does not pass after its very last turn, so
  // every arrival meets its wait.
  if (cw == NC - 1) turn_pass<NC>(cw);
  int g = 0, k = 0;
  for (int t = t_first; t < t_end; t += t_step, ++k) {
    int mb, h, bi;
    tile(t, mb, h, bi);
    const int m0 = mb * BM, nt = n_tiles(p, m0, BM);
    const bool last_tile = t + t_step >= t_end;
    const int slab0 = m0 + 64 * cw;
    const int r0 = slab0 + 16 * warp + lane / 4;          // this thread's rows r0 and r0 + 8

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_0 = NEG_INF, m_1 = NEG_INF, l_0 = 0.f, l_1 = 0.f, al0, al1;

    mbar_wait(q_full, (uint32_t)(k & 1), 0);
    // K/V tile 0: S alone.
    {
      const int st = g % NS;
      mbar_wait(k_full(st), (uint32_t)((g / NS) & 1), 1 + st);
      desc_s<D>(dq, dk, q_rows, sK + st * KV_BYTES);
      pin(dq);
      pin(dk);
      turn_wait(cw);
      wg_fence();
      issue_s<T, D>(s, dq, dk);
      wg_commit();
      turn_pass<NC>(cw);
      wg_wait0();
      fence_acc(s);
      mbar_arrive_if(k_empty(st), lane == 0);
      if (PERSIST && nt == 1) mbar_arrive_if(q_empty, lane == 0);  // the tile's last S
      softmax_tile(s, p, 0, r0, slab0, diag, m_0, m_1, l_0, l_1, al0, al1);  // O is 0: factor unused
      pack_p<T>(s, pa);
    }

    for (int it = 1; it < nt; ++it) {
      const int gg = g + it, st = gg % NS, pst = (gg - 1) % NS;
      mbar_wait(k_full(st), (uint32_t)((gg / NS) & 1), 1 + st);
      desc_s<D>(dq, dk, q_rows, sK + st * KV_BYTES);
      desc_v(dv, sV + pst * KV_BYTES);
      pin(dq);
      pin(dk);
      pin(dv);
      fence_acc(s);
      turn_wait(cw);
      wg_fence();
      issue_s<T, D>(s, dq, dk);                           // S_it
      wg_commit();
      fence_acc(s);
      rescale(o, al0, al1);                               // while S_it runs
      mbar_wait(v_full(pst), (uint32_t)(((gg - 1) / NS) & 1), 1 + NS + pst);
      fence_acc(o);
      wg_fence();
      issue_pv<T, D>(o, pa, dv);                          // O += P_{it-1} V_{it-1}
      wg_commit();
      fence_acc(o);
      turn_pass<NC>(cw);
      wg_wait1();                                         // S_it is done, P V may still run
      fence_acc(s);
      mbar_arrive_if(k_empty(st), lane == 0);
      if (PERSIST) mbar_arrive_if(q_empty, lane == 0 && it == nt - 1);  // the tile's last S
      softmax_tile(s, p, it * BN, r0, slab0, diag, m_0, m_1, l_0, l_1, al0, al1);
      wg_wait0();                                         // P_{it-1} V_{it-1} is done
      fence_acc(o);
      fence_frag(pa);
      mbar_arrive_if(v_empty(pst), lane == 0);
      pack_p<T>(s, pa);
    }
    // The last K/V tile's P V.
    {
      const int lst = (g + nt - 1) % NS;
      rescale(o, al0, al1);
      desc_v(dv, sV + lst * KV_BYTES);
      pin(dv);
      mbar_wait(v_full(lst), (uint32_t)(((g + nt - 1) / NS) & 1), 1 + NS + lst);
      fence_acc(o);
      turn_wait(cw);
      wg_fence();
      issue_pv<T, D>(o, pa, dv);
      wg_commit();
      if (cw != NC - 1 || !last_tile) turn_pass<NC>(cw);
      wg_wait0();
      fence_acc(o);
      fence_frag(pa);
      if (PERSIST) mbar_arrive_if(v_empty(lst), lane == 0);  // the ring runs on into the next tile
    }
    g += nt;

    // ---- epilogue --------------------------------------------------------------------------
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
}

}  // namespace pt_prefill

#define PT_PREFILL_KERNEL(NAME, T, D)                                                          \
  extern "C" __global__ void __launch_bounds__(PT_PREFILL_THREADS(D), 1)                       \
      NAME(const __grid_constant__ pt_prefill_kparams p) {                                     \
    pt_prefill::prefill<T, D>(p);                                                              \
  }

PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d64, __nv_bfloat16, 64)
PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d128, __nv_bfloat16, 128)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d64, __half, 64)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d128, __half, 128)
