// Prefill attention for sm_90a (issue 18): TMA loads, wgmma, warp specialisation.
// Status and layout: kernels/attn_prefill.h. Written from the PTX ISA (wgmma, the shared
// memory matrix descriptors, cp.async.bulk.tensor, mbarrier) and the FlashAttention papers.
//
// A 1D grid of CTAs (pt_prefill_ctas: one per SM, or one per tile) walking the (m-block, head,
// batch) tiles; 384 threads at d = 128, 512 at d = 64:
//  - warpgroup 0 (setmaxnreg.dec), one thread: the producer. For each of the CTA's tiles it
//    loads the Q tile (once the previous tile's last S is done: q_empty), then K and V tiles of
//    BN keys into a ring of PT_PREFILL_STAGES(d) stages (TMA; completion counted on a "full"
//    mbarrier per tile), waiting on the tile's own "empty" mbarrier (K and V separately) before
//    it reuses a stage; the ring runs on from one tile to the next.
//  - warpgroups 1 and 2 (and 3 at d = 64; setmaxnreg.inc): the consumers, 64 query rows
//    each. Per K/V tile j, in its turn (the warpgroups alternate on the tensor cores, FA3's
//    ping-pong), a warpgroup issues S_j = Q K_j^T (wgmma, both operands in shared memory,
//    K-major) and O += P_{j-1} V_{j-1} (wgmma, P from registers, V read MN-major);
//    then, while P V still runs, it masks S_j (keys past sk, causal; only on the tiles that
//    need it) and runs the online softmax (log2 domain, scale folded into the exponent, a lazy
//    running max); once P V is done it releases V, packs P_j and rescales O (only when a row's
//    max moved). At the end O / l and the LSE go to global memory. In the _skip kernels
//    (d = 64) a warpgroup computes only the K/V tiles its own rows need and takes empty turns
//    (its place in the round robin, the stages released) for the rest of its tile's.
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
// The online softmax's running max moves only by more than 8 (log2 units; exponentials stay
// under 256), so that O's rescale, once the max has settled, is skipped (see rescale_if).
// Experiment 4 moves it on every rise, as before version 6.
constexpr int LAZY = (PT_PREFILL_EXP & 4) != 0 ? 0 : 8;

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
// SLEEP: each try_wait carries a suspend-time hint (0.1 ms), so that a thread that usually
// waits sleeps until the phase completes instead of spinning (mbar_wait_sleep); its watchdog
// counts fewer, longer rounds.
template <bool SLEEP> static __device__ __forceinline__ void mbar_wait_loop(uint32_t bar, uint32_t parity, int tag) {
  uint32_t done = 0;
#ifdef PT_PREFILL_WATCHDOG
  long long spins = 0;
#endif
  while (!done) {
    if (SLEEP)
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity), "r"(100000u)
          : "memory");
    else
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
#ifdef PT_PREFILL_WATCHDOG
    if (!done && ++spins == (SLEEP ? (1ll << 16) : (1ll << 24))) {
      printf("pt_prefill watchdog: block (%d,%d,%d) thread %d stuck on barrier %d parity %u\n", (int)blockIdx.x,
             (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, tag, parity);
      __trap();
    }
#else
    (void)tag;
#endif
  }
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, int tag) {
  mbar_wait_loop<false>(bar, parity, tag);
}
// The producer's wait for a free stage. It usually waits (the ring is full while the consumers
// are the bottleneck), and a plain try_wait returns after a few cycles: its thread then spins,
// issuing two instructions per round on the scheduler it shares with two consumer warps (a
// fifth of that scheduler's issue slots in the profile, bench/records/2026-12-02-prefill-profile.md).
// With the hint the thread sleeps until the phase completes (or the hint runs out, and it asks
// again). Experiment 1: the plain wait.
static __device__ __forceinline__ void mbar_wait_sleep(uint32_t bar, uint32_t parity, int tag) {
  mbar_wait_loop<(PT_PREFILL_EXP & 1) == 0>(bar, parity, tag);
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

// Shared-memory matrix descriptors (128-byte swizzle, layout type 1 in bits 62-63). K-major
// operands (Q, K: the reduced dim contiguous in 128-byte rows): SBO = 1024 bytes between groups
// of 8 rows, LBO unused; a k16 step inside the 64-element row moves the start by 32 bytes.
// MN-major operand (V: the output dim contiguous): LBO = bytes between 64-element chunks of the
// output dim (one sub-tile), SBO = 1024 bytes between groups of 8 keys. Built below (desc_s).

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

// K/V tiles this CTA reads (kernels/attn_prefill.h, shared with the host's grid choice).
static __device__ __forceinline__ int n_tiles(const pt_prefill_kparams &p, int m0, int bm) {
  return pt_prefill_n_tiles(&p, m0, bm);
}

// Descriptors of one tile's wgmma steps. Each is its operand's base descriptor plus a constant:
// the low word holds the start address in 16-byte units (14 bits; shared memory stays under
// 256 KB, so the sum never carries into the LBO field), and the high word is the same for every
// step (SBO = 1024 bytes, the 128-byte swizzle). The bases are warp-uniform (the warpgroup
// index comes from a shuffle, the stage from the loop counters), so ptxas keeps this in the
// uniform datapath: one add per descriptor. Built from each address's bits with gdesc() per
// step instead, it took about 170 of the loop's 746 instructions per warp and tile (profile,
// bench/records/2026-12-02-prefill-profile.md). They are computed before the wgmma.fence and
// pinned there (the empty asm): ptxas serialises the wgmma pipeline when non-wgmma
// instructions define a wgmma's inputs while earlier wgmmas are in flight.
constexpr uint32_t DESC_HI = 0x40000000u | (1024u >> 4);  // layout type 1 (bits 62-63), SBO
static __device__ __forceinline__ uint64_t desc_at(uint32_t lo) { return ((uint64_t)DESC_HI << 32) | lo; }
// Low word of a K-major base (Q, K; LBO 16, unused), and of V's MN-major base (LBO = one sub-tile).
static __device__ __forceinline__ uint32_t desc_lo_k(uint32_t saddr) { return ((saddr & 0x3FFFFu) >> 4) | (1u << 16); }
static __device__ __forceinline__ uint32_t desc_lo_v(uint32_t saddr) {
  return ((saddr & 0x3FFFFu) >> 4) | (((uint32_t)(BN * SUB * 2) >> 4) << 16);
}
template <int N> static __device__ __forceinline__ void pin(uint64_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+l"(d[i])::"memory");
}
// S = Q K^T: d / 16 k16 steps over Q (this warpgroup's 64 rows) and K, both K-major; a step
// moves 32 bytes inside the 128-byte row, or to the next 64-column sub-tile.
template <int D, int BM>
static __device__ __forceinline__ void desc_s(uint64_t (&dq)[D / 16], uint64_t (&dk)[D / 16], uint32_t q_lo,
                                              uint32_t k_lo) {
  constexpr uint32_t Q_SUB = BM * SUB * 2, KV_SUB = BN * SUB * 2;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    dq[ks] = desc_at(q_lo + ((ks / 4) * Q_SUB + (ks % 4) * 32) / 16);
    dk[ks] = desc_at(k_lo + ((ks / 4) * KV_SUB + (ks % 4) * 32) / 16);
  }
}
// P V: BN / 16 k16 steps of 16 keys (2048 bytes of every V sub-tile), V read MN-major.
static __device__ __forceinline__ void desc_v(uint64_t (&dv)[BN / 16], uint32_t v_lo) {
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) dv[j] = desc_at(v_lo + j * 16 * 128 / 16);
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
// where control flow would make ptxas serialise the wgmma pipeline. MASK = false: a tile that
// no row of the warpgroup needs masked (mask_from), built without the compare and select (a
// third of the loop's instructions otherwise, on every tile).
template <bool MASK>
static __device__ __forceinline__ void softmax_tile(float (&s)[BN / 8][4], const pt_prefill_kparams &p, int n0,
                                                    int r0, int slab0, int diag, float &m_0, float &m_1,
                                                    float &l_0, float &l_1, float &al0, float &al1) {
  if (!MASK) {
    online_softmax_scaled<LAZY>(s, p.scale_log2, m_0, m_1, l_0, l_1, al0, al1);
    return;
  }
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
  online_softmax_scaled<LAZY>(s, p.scale_log2, m_0, m_1, l_0, l_1, al0, al1);
}

// The first K/V tile that some row of the warpgroup's slab [slab0, slab0 + 64) needs masked:
// tiles before it end at or before sk and (causal) at or before the slab's first row's last key.
static __device__ __forceinline__ int mask_from(const pt_prefill_kparams &p, int slab0, int diag) {
  int j = p.sk / BN;  // tile sk / BN is the first to reach past sk (when sk % BN != 0)
  if (p.causal) j = min(j, (slab0 + diag + 1) / BN);
  return j;
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

template <bool B> struct bool_const {
  static constexpr bool value = B;
};

// O rescaled to the running max of the tile just through the softmax, once the previous P V
// has finished (wait_group 0: no wgmma in flight, so the branch costs the pipeline nothing).
// Outside the warpgroup's turn, it no longer delays the next GEMMs' issue, as it did between
// S and P V (version 5). Skipped when no row of the warp moved its max: with the lazy max
// (LAZY) that is almost every tile once the first few have set it.
template <int N> static __device__ __forceinline__ void rescale_if(float (&o)[N][4], float al0, float al1) {
  if (!__any_sync(0xffffffffu, (al0 != 1.f) | (al1 != 1.f))) return;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    o[i][0] *= al0;
    o[i][1] *= al0;
    o[i][2] *= al1;
    o[i][3] *= al1;
  }
}

template <typename T, int D, bool SKIP_TILES>
__device__ __forceinline__ void prefill(const pt_prefill_kparams &p) {
  constexpr int ND = D / SUB;                       // 64-element sub-tiles per row
  constexpr int NS = PT_PREFILL_STAGES(D);          // K/V tiles in flight
  constexpr int NC = PT_PREFILL_CONSUMERS(D);       // consumer warpgroups
  constexpr int BM = PT_PREFILL_BM(D);              // query rows: 64 per consumer
  constexpr bool PERSIST = PT_PREFILL_PERSISTENT != 0;
  // The _skip kernels (three consumers, d = 64: 192 rows a tile): a warpgroup skips the K/V
  // tiles that no row of its own 64 needs (causal: past its slab's diagonal; a slab past sq:
  // all), taking empty turns instead. The host launches them where that surplus is large
  // (pt_prefill_skip_pays): the loop built for it is slower where little is skipped.
  constexpr bool SKIP = SKIP_TILES && NC == 3;
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
  // The CTA's tiles (m-block, head, batch). Persistent (the default): a 1D grid walks the
  // tiles t = blockIdx.x, + gridDim.x, ..., numbered section by section (pt_prefill_walk): a
  // round of the walk costs every CTA about the same and reads one section's K/V.
  // PT_PREFILL_PERSISTENT=0: one tile per CTA, the grid (m_blocks, h, b), causal m-blocks
  // reversed (heavy blocks first). The loops below step t by a constant: with a dealt index as
  // the loop variable (odd rounds reversed), the kernel ran 2-4 % slower at some points
  // (bench/records/2026-12-02-prefill-profile.md).
  const int t_first = PERSIST ? (int)blockIdx.x : 0, t_step = PERSIST ? (int)gridDim.x : 1;
  const int t_end = PERSIST ? p.tiles : 1;
  auto tile = [&](int t, int &mb, int &h, int &bi) {
    if (!PERSIST) {
      mb = p.causal ? p.m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
      h = blockIdx.y;
      bi = blockIdx.z;
      return;
    }
    pt_prefill_walk(&p, t, &mb, &h, &bi);
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
        if (k > 0) mbar_wait_sleep(q_empty, (uint32_t)((k - 1) & 1), 1 + 4 * NS);
        mbar_expect_tx(q_full, Q_BYTES);
#pragma unroll
        for (int c = 0; c < ND; ++c) tma_load_4d(sQ + c * Q_SUB, &p.tq, c * SUB, m0, h, bi, q_full);
        for (int it = 0; it < nt; ++it) {
          const int gg = g + it, s = gg % NS;
          const uint32_t ph = (uint32_t)((gg / NS - 1) & 1);  // the phase the stage's last use completed
          if (gg >= NS) mbar_wait_sleep(k_empty(s), ph, 1 + 2 * NS + s);
          mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
          for (int c = 0; c < ND; ++c)
            tma_load_4d(sK + s * KV_BYTES + c * KV_SUB, &p.tk, c * SUB, it * BN, hk, bi, k_full(s));
          if (gg >= NS) mbar_wait_sleep(v_empty(s), ph, 1 + 3 * NS + s);
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
  // The warpgroup index through a shuffle: ptxas then treats it, and the shared-memory
  // addresses and descriptors derived from it, as warp-uniform (uniform registers, no per-step
  // conversion into them).
  const int cw = __shfl_sync(0xffffffffu, wg, 0) - 1;   // rows [m0 + 64 cw, m0 + 64 cw + 64)
  const int diag = p.sk - p.sq;                           // causal: row r sees keys <= r + diag
  const uint32_t q_lo = desc_lo_k(sQ + cw * 64 * 128), k_lo = desc_lo_k(sK), v_lo = desc_lo_v(sV);
  constexpr uint32_t KV_STEP = KV_BYTES / 16;             // one ring stage in descriptor units
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
    // K/V tiles this warpgroup computes: the first ntw of the tile's nt (SKIP), then nt - ntw
    // empty turns that release the rest of the ring's stages.
    const int ntw = SKIP ? (slab0 < p.sq ? min(nt, n_tiles(p, slab0, 64)) : 0) : nt;

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_0 = NEG_INF, m_1 = NEG_INF, l_0 = 0.f, l_1 = 0.f, al0, al1;

    mbar_wait(q_full, (uint32_t)(k & 1), 0);
    // An empty turn: the warpgroup's place in the round robin kept, and K/V tile jt's stage
    // released (every warp arrives, as after a computed tile). Its arrivals cannot run ahead
    // of the other warpgroups' releases of the stage's previous use: when its turn opens they
    // have issued the turn before, so they have released every tile up to two before it, and a
    // stage is reused only NS >= 3 tiles later. Some warpgroup computes every K/V tile of the
    // tile (the slab holding its last row below sq needs them all: n_tiles counts to that row),
    // so each stage's "full" phase is waited for before its "empty" phase can complete; were
    // all three to skip a tile, the producer's parity waits would alias and deadlock.
    auto empty_turn = [&](int jt) {
      const int st = (g + jt) % NS;
      turn_wait(cw);
      if (cw != NC - 1 || !last_tile || jt != nt - 1) turn_pass<NC>(cw);
      mbar_arrive_if(k_empty(st), lane == 0);
      if (PERSIST || jt != nt - 1) mbar_arrive_if(v_empty(st), lane == 0);
    };
    if (SKIP && ntw == 0) {
      // No row of this slab exists (past sq): one empty turn in place of S of tile 0, and Q is
      // free at once.
      if (PERSIST) mbar_arrive_if(q_empty, lane == 0);
      turn_wait(cw);
      turn_pass<NC>(cw);                                  // nt >= 1 turns follow
    }
    // K/V tile 0: S alone.
    if (!SKIP || ntw > 0) {
      const int st = g % NS;
      mbar_wait(k_full(st), (uint32_t)((g / NS) & 1), 1 + st);
      desc_s<D, BM>(dq, dk, q_lo, k_lo + st * KV_STEP);
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
      if (PERSIST && ntw == 1) mbar_arrive_if(q_empty, lane == 0);  // the warpgroup's last S
      // O is 0: the factor is unused. Unmasked when no row of the slab needs the mask here (no
      // wgmma is in flight, so the branch costs the pipeline nothing).
      if (mask_from(p, slab0, diag) > 0)
        softmax_tile<false>(s, p, 0, r0, slab0, diag, m_0, m_1, l_0, l_1, al0, al1);
      else
        softmax_tile<true>(s, p, 0, r0, slab0, diag, m_0, m_1, l_0, l_1, al0, al1);
      pack_p<T>(s, pa);
    }

    // K/V tile it (1 .. nt - 1); masked: built with the mask (the tiles from mask_from on).
    auto step = [&](int it, auto masked) {
      const int gg = g + it, st = gg % NS, pst = (gg - 1) % NS;
      mbar_wait(k_full(st), (uint32_t)((gg / NS) & 1), 1 + st);
      // V_{it-1} was requested before K_it (the producer loads K then V of each tile), so it
      // has normally arrived: waited for here, outside the turn, its check no longer holds
      // the turn up.
      mbar_wait(v_full(pst), (uint32_t)(((gg - 1) / NS) & 1), 1 + NS + pst);
      desc_s<D, BM>(dq, dk, q_lo, k_lo + st * KV_STEP);
      desc_v(dv, v_lo + pst * KV_STEP);
      pin(dq);
      pin(dk);
      pin(dv);
      fence_acc(s);
      turn_wait(cw);
      wg_fence();
      issue_s<T, D>(s, dq, dk);                           // S_it
      wg_commit();
      fence_acc(s);
      fence_acc(o);
      wg_fence();
      issue_pv<T, D>(o, pa, dv);                          // O += P_{it-1} V_{it-1}
      wg_commit();
      fence_acc(o);
      turn_pass<NC>(cw);
      wg_wait1();                                         // S_it is done, P V may still run
      fence_acc(s);
      mbar_arrive_if(k_empty(st), lane == 0);
      if (PERSIST) mbar_arrive_if(q_empty, lane == 0 && it == ntw - 1);  // the warpgroup's last S
      softmax_tile<decltype(masked)::value>(s, p, it * BN, r0, slab0, diag, m_0, m_1, l_0, l_1, al0, al1);
      wg_wait0();                                         // P_{it-1} V_{it-1} is done
      fence_acc(o);
      fence_frag(pa);
      mbar_arrive_if(v_empty(pst), lane == 0);
      pack_p<T>(s, pa);
      rescale_if(o, al0, al1);                            // to S_it's max, before P_it V_it adds in
    };
    int it = 1;
#if (PT_PREFILL_EXP & 2) == 0  // (experiment 2: the mask on every tile)
    for (const int nm = min(ntw, mask_from(p, slab0, diag)); it < nm; ++it) step(it, bool_const<false>());
#endif
    for (; it < ntw; ++it) step(it, bool_const<true>());
    // The last computed K/V tile's P V.
    if (!SKIP || ntw > 0) {
      const int lst = (g + ntw - 1) % NS;
      desc_v(dv, v_lo + lst * KV_STEP);
      pin(dv);
      mbar_wait(v_full(lst), (uint32_t)(((g + ntw - 1) / NS) & 1), 1 + NS + lst);
      fence_acc(o);
      turn_wait(cw);
      wg_fence();
      issue_pv<T, D>(o, pa, dv);
      wg_commit();
      if (cw != NC - 1 || !last_tile || ntw != nt) turn_pass<NC>(cw);
      wg_wait0();
      fence_acc(o);
      fence_frag(pa);
      if (PERSIST || ntw != nt) mbar_arrive_if(v_empty(lst), lane == 0);  // the ring runs on into the next tile
    }
    if (SKIP)
      for (int jt = max(ntw, 0); jt < nt; ++jt) empty_turn(jt);
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

#define PT_PREFILL_KERNEL(NAME, T, D, SKIP)                                                    \
  extern "C" __global__ void __launch_bounds__(PT_PREFILL_THREADS(D), 1)                       \
      NAME(const __grid_constant__ pt_prefill_kparams p) {                                     \
    pt_prefill::prefill<T, D, SKIP>(p);                                                        \
  }

PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d64, __nv_bfloat16, 64, false)
PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d128, __nv_bfloat16, 128, false)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d64, __half, 64, false)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d128, __half, 128, false)
// d = 64 with the warpgroups' tile skipping (pt_prefill_skip_pays picks them).
PT_PREFILL_KERNEL(pt_attn_prefill_bf16_d64_skip, __nv_bfloat16, 64, true)
PT_PREFILL_KERNEL(pt_attn_prefill_fp16_d64_skip, __half, 64, true)
