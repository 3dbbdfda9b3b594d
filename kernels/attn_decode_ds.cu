// Decode attention by a D-split pair (an experiment of issue 17; planned only when
// pt_attn_plan_dsplit is set, kernels/attn_plan.c): where the split plan would give a (batch, KV
// head) two CTAs of one cluster, each streaming half of the keys and then merging through DSMEM,
// the two CTAs here walk ALL of the unit's keys and split head_dim instead. Tile t's scores are
// computed once, by its owner (rank t & 1), which alone loads that K tile; every CTA loads its
// half of V for every tile. The owner turns its scores into probabilities against the tile's own
// row maxima (as a flash block does) and pushes them, with those maxima and the row sums, into the
// partner's shared memory (st.async, counted on an mbarrier). Both CTAs then fold every tile, in
// tile order, into the same running (m, l) and into their own half of O: each ends with its half
// of the output rows and nothing to merge. The point is the end of the launch: no partial in
// shared memory, no cluster barrier, no DSMEM merge after the last tile (2.7 us of tail at B = 8,
// 4k keys in bench/records/2026-12-02-decode-tma.md; one CTA with no merge ends in 0.9).
//
// Bytes: each K and V byte still leaves HBM once; each CTA loads half the K tiles and half of
// every V tile, 32 KiB per step of two tiles, as a split CTA does per tile pair.
//
// The pipeline, per step k (tiles 2k and 2k + 1): the ring stage of step k holds the K tile this
// CTA owns, the bias rows for it and both tiles' V halves. Iteration k computes the scores of the
// own tile of step k and pushes its record, then folds both tiles of step k - 1 (the partner's
// record of step k - 1 has had a step to arrive). Records land in DS_SLOTS slots: a CTA can be at
// most one step ahead of its partner (each needs the other's previous record), so a slot is
// rewritten only after both of its readers' iterations are done (4 slots; 3 would not do, see
// below). Included by kernels/attn_kernels.cu after kernels/attn_decode.cu, whose helpers it uses.
#include "kernels/attn_kparams.h"
#include "kernels/ptx.cuh"

namespace pt_attn {

// Timing diagnostics (test builds only, -DPT_ATTN_DS_EXP=N): 1 waits for a record with the
// mbarrier's default (CTA-scope) acquire instead of cluster scope; 2 exchanges nothing and folds
// the own record for both tiles (wrong results: the exchange's cost); 4 streams the ring and
// computes nothing (wrong results: the stream's cost); 8 pushes the records but neither waits for
// nor reads the partner's (wrong results: the push's cost).
#ifndef PT_ATTN_DS_EXP
#define PT_ATTN_DS_EXP 0
#endif
// A step's records are folded DS_LAG steps after they are pushed (the exchange's slack). Ring
// stages: 2 steps in flight, the one scored, and DS_LAG waiting for their fold. Record slots: a
// CTA runs at most DS_LAG steps ahead of its partner, and a slot is rewritten only once both of
// its readers' iterations are done: 2 * DS_LAG + 2 (see the fold).
constexpr int DS_LAG = PT_ATTN_DS_LAG;
constexpr int DS_NST = PT_ATTN_DS_NSTAGE;
constexpr int DS_AHEAD = 2;
constexpr int DS_SLOTS = 2 * DS_LAG + 2;
static_assert(DS_NST == DS_LAG + 1 + DS_AHEAD, "ring stages");

template <typename T, int D>
__device__ __forceinline__ void decode_ds(const pt_attn_kparams &p) {
  static_assert(D == 128, "the D-split pair is built for d = 128");
  constexpr int CH = D / 8, HD = D / 2, HCH = HD / 8;
  constexpr int KT = BK * D, VT = BK * HD, STG = KT + 2 * VT;
  constexpr int NW = NT / 32;
  // One step's record: per warp and lane, the P fragment (8 probabilities) and (mt0, mt1, ls0, ls1).
  constexpr uint32_t REC_BYTES = NW * 32 * 32;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(16) uint4 s_rec[DS_SLOTS][NW][32][2];  // the partner's records
  __shared__ __align__(8) uint64_t s_bar[DS_SLOTS];
  T *const sKV = reinterpret_cast<T *>(smem);
  T *const sQ = sKV + DS_NST * STG;
  T *const sB = sQ + 16 * D;

#ifdef PT_ATTN_TIMELINE_ALL
  // Timeline builds: one TLC line per CTA as decode() prints them (tests/gpu/checks/timeline_ctas.py),
  // its "tiles" the pair's steps (32 KiB each, as a split CTA's tile).
  unsigned long long tl_start = gtimer(), tl_first = 0, tl_mid = 0, tl_loop = 0;
#endif
  if (p.pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int kh = blockIdx.y, bi = blockIdx.z;
  const int rank = static_cast<int>(cluster_rank());
  const int group = p.group, rows = p.rows;

  // The record barriers, armed for their first use, before the cluster barrier's arrive: the
  // partner waits on that barrier before its first push.
  if (tid == 0) {
#pragma unroll
    for (int j = 0; j < DS_SLOTS; ++j) mbar_init(smem_u32(&s_bar[j]), 1);
    fence_mbar_init_cluster();
#pragma unroll
    for (int j = 0; j < DS_SLOTS; ++j) mbar_arrive_expect_tx(smem_u32(&s_bar[j]), REC_BYTES);
  }
  cluster_arrive_release();

  constexpr int QCH = (16 * CH + NT - 1) / NT;
  uint4 qreg[QCH];
#pragma unroll
  for (int j = 0; j < QCH; ++j) {
    const int c = tid + j * NT, r = c / CH, ch = c % CH;
    qreg[j] = make_uint4(0, 0, 0, 0);
    if (c < 16 * CH && r < rows) {
      const int i = r / group, hh = kh * group + r % group;
      qreg[j] = *reinterpret_cast<const uint4 *>(static_cast<const T *>(p.q) + bi * p.q_bs + i * p.q_rs +
                                                 hh * p.q_hs + ch * 8);
    }
  }
  const uint64_t kv_policy = l2_evict_first();

  // Both CTAs narrow the whole unit's key range the same way: the same tiles, the same owners.
  int key_begin = 0, key_end = p.sk;
  const int nb = p.bias_rows;
  const T *const bb = nb ? static_cast<const T *>(p.bias) + bi * p.bias_bs : nullptr;
  if (nb && !(PT_ATTN_EXP & PT_ATTN_EXP_NOSCAN)) narrow_to_visible<T, NT>(p, bb, kh, group, key_begin, key_end);
  const int ntiles = key_end > key_begin ? (key_end - key_begin + BK - 1) / BK : 0;
  const int nsteps = (ntiles + 1) >> 1;

  // K: 16 chunks a row, 8 rows a pass; a V half: 8 chunks a row, 16 rows a pass.
  const int ld_ch = tid % CH, ld_r0 = tid / CH;
  constexpr int LD_STEP = NT / CH, LD_ITERS = BK * CH / NT;
  const int vl_ch = tid % HCH, vl_r0 = tid / HCH;
  constexpr int VL_STEP = NT / HCH, VL_ITERS = BK * HCH / NT;
  const T *const kcol = static_cast<const T *>(p.k) + bi * p.k_bs + kh * p.k_hs + ld_ch * 8;
  const T *const vcol = static_cast<const T *>(p.v) + bi * p.v_bs + kh * p.v_hs + rank * HD + vl_ch * 8;

  auto load_step = [&](int k, int stage) {
    T *const dk = sKV + stage * STG;
    T *const dv = dk + KT;
    const int own = 2 * k + rank;
    if (own < ntiles) {
      const int key0 = key_begin + own * BK;
#pragma unroll
      for (int i = 0; i < LD_ITERS; ++i) {
        const int row = ld_r0 + i * LD_STEP, key = key0 + row;
        const bool ok = key < key_end;
        const int64_t kk = ok ? key : key_begin;
        cp_async16_policy(smem_u32(dk + swz<D>(row, ld_ch)), kcol + kk * p.k_rs, ok ? 16 : 0, kv_policy);
      }
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
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int tile = 2 * k + j;
      if (tile >= ntiles) break;
      const int key0 = key_begin + tile * BK;
#pragma unroll
      for (int i = 0; i < VL_ITERS; ++i) {
        const int row = vl_r0 + i * VL_STEP, key = key0 + row;
        const bool ok = key < key_end;
        const int64_t kk = ok ? key : key_begin;
        cp_async16_policy(smem_u32(dv + j * VT + swz<HD>(row, vl_ch)), vcol + kk * p.v_rs, ok ? 16 : 0,
                          kv_policy);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < DS_AHEAD; ++s) {
    if (s < nsteps) load_step(s, s);
    cp_async_commit();
  }
#pragma unroll
  for (int j = 0; j < QCH; ++j) {
    const int c = tid + j * NT;
    if (c < 16 * CH) *reinterpret_cast<uint4 *>(sQ + swz<D>(c / CH, c % CH)) = qreg[j];
  }
  __syncthreads();
  const int mi = lane >> 3;
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    ldsm_x4(qf[ks], smem_u32(sQ + swz<D>((mi & 1) * 8 + (lane & 7), ks * 2 + (mi >> 1))));

  const int bslot0 = (p.bias_hs == 0 ? g / group : g) * PT_ATTN_BIAS_LD;
  const int bslot1 = (p.bias_hs == 0 ? (g + 8) / group : g + 8) * PT_ATTN_BIAS_LD;
  int lim0 = key_end - 1, lim1 = key_end - 1;
  if (p.causal) {
    lim0 = min(lim0, g / group + p.sk - p.sq);
    lim1 = min(lim1, (g + 8) / group + p.sk - p.sq);
  }
  const float sl2 = p.scale_log2;
  const uint32_t peer = static_cast<uint32_t>(rank ^ 1);

  float acc[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
  uint4 own_p[DS_LAG], own_ms[DS_LAG];  // this CTA's records of the last DS_LAG steps, newest first
#pragma unroll
  for (int i = 0; i < DS_LAG; ++i) own_p[i] = own_ms[i] = make_uint4(0, 0, 0, 0);
  bool joined = false;                                    // waited on the cluster barrier

  for (int k = 0; k < nsteps + DS_LAG; ++k) {
    cp_async_wait<DS_AHEAD - 1>();  // step k's stage has landed (step k + 1's may still fly)
    __syncthreads();                // visible to every warp; step k - DS_LAG - 1's stage is free
#ifdef PT_ATTN_TIMELINE_ALL
    if (k == 0) tl_first = gtimer();
    if (k == nsteps / 2) tl_mid = gtimer();
#endif
    {
      const int nk = k + DS_AHEAD;
      if (nk < nsteps) load_step(nk, nk % DS_NST);
      cp_async_commit();
    }
    // 1. The own tile of step k: scores, the tile's row maxima, probabilities, the record.
    uint4 new_p = own_p[0], new_ms = own_ms[0];
    const int own = 2 * k + rank;
    if (k < nsteps && own < ntiles && !(PT_ATTN_DS_EXP & 4)) {  // CTA-uniform
      const T *const tK = sKV + (k % DS_NST) * STG;
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t b[4];
        ldsm_x4(b, smem_u32(tK + swz<D>(warp * 16 + (mi >> 1) * 8 + (lane & 7), ks * 2 + (mi & 1))));
        dt<T>::mma(s[0], qf[ks], b[0], b[1]);
        dt<T>::mma(s[1], qf[ks], b[2], b[3]);
      }
      float bs[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      if (nb) {
        const T *const tb = sB + (k % DS_NST) * nb * PT_ATTN_BIAS_LD + warp * 16 + 2 * t;
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
      const int kw0 = key_begin + own * BK + warp * 16;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int key = kw0 + n * 8 + 2 * t + (j & 1);
          const int lim = j < 2 ? lim0 : lim1;
          s[n][j] = key <= lim ? fmaf(s[n][j], sl2, bs[n][j]) : NEG_INF;
        }
      }
      float mx0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
      float mx1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mu0 = mx0 == NEG_INF ? 0.f : mx0, mu1 = mx1 == NEG_INF ? 0.f : mx1;
      float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][0] = ex2(s[n][0] - mu0);
        s[n][1] = ex2(s[n][1] - mu0);
        s[n][2] = ex2(s[n][2] - mu1);
        s[n][3] = ex2(s[n][3] - mu1);
        ls0 += s[n][0] + s[n][1];
        ls1 += s[n][2] + s[n][3];
      }
      new_p = make_uint4(dt<T>::pack(s[0][0], s[0][1]), dt<T>::pack(s[0][2], s[0][3]),
                         dt<T>::pack(s[1][0], s[1][1]), dt<T>::pack(s[1][2], s[1][3]));
      new_ms = make_uint4(__float_as_uint(mx0), __float_as_uint(mx1), __float_as_uint(ls0), __float_as_uint(ls1));
      if (!(PT_ATTN_DS_EXP & 2)) {
        if (!joined) {  // the partner's barriers are initialised once it has arrived
          cluster_wait_acquire();
          joined = true;
        }
        const int slot = k % DS_SLOTS;
        const uint32_t dst = cluster_map(smem_u32(&s_rec[slot][warp][lane][0]), peer);
        const uint32_t bar = cluster_map(smem_u32(&s_bar[slot]), peer);
        st_async_v4(dst, new_p, bar);
        st_async_v4(dst + 16, new_ms, bar);
      }
    }
    // 2. Fold both tiles of step k - DS_LAG into (m, l) and this CTA's half of O at once: one new
    // row max over both, one rescale of O, each tile's probabilities scaled to that max (in
    // their own precision: exact when the max did not move) and multiplied straight into O.
    // A first form folded the tiles one after the other through fp32 temporaries: every step
    // then ran ~1.1 us, a chain of two dependent folds (bench/records/2026-12-03-decode-dsplit.md).
    if (k >= DS_LAG && !(PT_ATTN_DS_EXP & 4)) {
      const int kp = k - DS_LAG;
      const bool two = 2 * kp + 1 < ntiles;  // CTA-uniform; the step's first tile always exists
      uint4 rp = own_p[DS_LAG - 1], rms = own_ms[DS_LAG - 1];  // the peer's tile (diagnostics: own)
      const bool peer_tile = rank == 0 ? two : true;
      if (peer_tile && !(PT_ATTN_DS_EXP & (2 | 8))) {
        const int slot = kp % DS_SLOTS;
        if (PT_ATTN_DS_EXP & 1)
          mbar_wait_cta(smem_u32(&s_bar[slot]), static_cast<uint32_t>((kp / DS_SLOTS) & 1));
        else
          mbar_wait_cluster(smem_u32(&s_bar[slot]), static_cast<uint32_t>((kp / DS_SLOTS) & 1));
        rp = s_rec[slot][warp][lane][0];
        rms = s_rec[slot][warp][lane][1];
        // Armed again for the slot's next record (step kp + DS_SLOTS). The partner cannot push
        // it before every thread here has read this one (iteration kp + DS_LAG): to start
        // iteration kp + DS_SLOTS it must have folded step kp + DS_SLOTS - 1 - DS_LAG, whose
        // record each warp here pushes only after the barrier at the top of that iteration,
        // which is past this one when DS_SLOTS - 2 - DS_LAG >= DS_LAG. (At DS_LAG 1 with 3
        // slots the partner would need only our record of step kp + 1, pushed at the top of
        // this iteration, before these reads: a race.)
        if (tid == 0) mbar_arrive_expect_tx(smem_u32(&s_bar[slot]), REC_BYTES);
      }
      // Records in tile order: rank 0 owns the step's first tile, rank 1 the second.
      const uint4 pA = rank == 0 ? own_p[DS_LAG - 1] : rp, mA = rank == 0 ? own_ms[DS_LAG - 1] : rms;
      const uint4 pB = rank == 0 ? rp : own_p[DS_LAG - 1], mB = rank == 0 ? rms : own_ms[DS_LAG - 1];
      const float mA0 = __uint_as_float(mA.x), mA1 = __uint_as_float(mA.y);
      const float mB0 = two ? __uint_as_float(mB.x) : NEG_INF, mB1 = two ? __uint_as_float(mB.y) : NEG_INF;
      const float mn0 = fmaxf(m0, fmaxf(mA0, mB0)), mn1 = fmaxf(m1, fmaxf(mA1, mB1));
      const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
      const float a0 = ex2(m0 - mu0), a1 = ex2(m1 - mu1);
      const float bA0 = ex2(mA0 - mu0), bA1 = ex2(mA1 - mu1);
      const float bB0 = ex2(mB0 - mu0), bB1 = ex2(mB1 - mu1);  // 0 without a second tile
      m0 = mn0;
      m1 = mn1;
      l0 = l0 * a0 + __uint_as_float(mA.z) * bA0 + (two ? __uint_as_float(mB.z) * bB0 : 0.f);
      l1 = l1 * a1 + __uint_as_float(mA.w) * bA1 + (two ? __uint_as_float(mB.w) * bB1 : 0.f);
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        acc[n][0] *= a0;
        acc[n][1] *= a0;
        acc[n][2] *= a1;
        acc[n][3] *= a1;
      }
      // A fragment: [0] row g, [1] row g + 8, [2] row g, [3] row g + 8.
      auto scaled = [&](const uint4 &pp, float s0, float s1, uint32_t (&o)[4]) {
        const uint32_t in[4] = {pp.x, pp.y, pp.z, pp.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float sc = (i & 1) ? s1 : s0;
          const float2 f = dt<T>::unpack(in[i]);
          o[i] = dt<T>::pack(f.x * sc, f.y * sc);
        }
      };
      uint32_t fa[4], fb[4];
      scaled(pA, bA0, bA1, fa);
      const T *const tV = sKV + (kp % DS_NST) * STG + KT;
#pragma unroll
      for (int dn = 0; dn < HD / 16; ++dn) {
        uint32_t b[4];
        ldsm_x4_t(b, smem_u32(tV + swz<HD>(warp * 16 + (mi & 1) * 8 + (lane & 7), dn * 2 + (mi >> 1))));
        dt<T>::mma(acc[2 * dn], fa, b[0], b[1]);
        dt<T>::mma(acc[2 * dn + 1], fa, b[2], b[3]);
      }
      if (two) {
        scaled(pB, bB0, bB1, fb);
#pragma unroll
        for (int dn = 0; dn < HD / 16; ++dn) {
          uint32_t b[4];
          ldsm_x4_t(b, smem_u32(tV + VT + swz<HD>(warp * 16 + (mi & 1) * 8 + (lane & 7), dn * 2 + (mi >> 1))));
          dt<T>::mma(acc[2 * dn], fb, b[0], b[1]);
          dt<T>::mma(acc[2 * dn + 1], fb, b[2], b[3]);
        }
      }
    }
#pragma unroll
    for (int i = DS_LAG - 1; i > 0; --i) {
      own_p[i] = own_p[i - 1];
      own_ms[i] = own_ms[i - 1];
    }
    own_p[0] = new_p;
    own_ms[0] = new_ms;
  }
  if (!joined) cluster_wait_acquire();  // every arrive has its wait (a CTA that owned no tile)
  if (PT_ATTN_DS_EXP & 8) cluster_sync();  // push-only diagnostic: no CTA leaves while pushed to
#ifdef PT_ATTN_TIMELINE_ALL
  tl_loop = gtimer();
#endif
  cp_async_wait<0>();
  __syncthreads();  // the ring is reused below

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

  // The 4 warps' states merged through shared memory, as in decode(), over this CTA's half of O.
  constexpr int LD = HD + 8;
  float *const red_o = reinterpret_cast<float *>(smem);  // [4][16][LD]
  float *const red_m = red_o + NW * 16 * LD;             // [4][16]
  float *const red_l = red_m + NW * 16;
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
    for (int w = 0; w < NW; ++w) {
      M0 = fmaxf(M0, red_m[w * 16 + g]);
      M1 = fmaxf(M1, red_m[w * 16 + g + 8]);
    }
    const float sc0 = ex2(m0 - (M0 == NEG_INF ? 0.f : M0));
    const float sc1 = ex2(m1 - (M1 == NEG_INF ? 0.f : M1));
    float *const r0 = red_o + (warp * 16 + g) * LD + 2 * t;
    float *const r1 = r0 + 8 * LD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<float2 *>(r0 + n * 8) = make_float2(acc[n][0] * sc0, acc[n][1] * sc0);
      *reinterpret_cast<float2 *>(r1 + n * 8) = make_float2(acc[n][2] * sc1, acc[n][3] * sc1);
    }
  }
  __syncthreads();
  const int nitems = rows * (HD / 4);
  for (int item = tid; item < nitems; item += NT) {
    const int r = item / (HD / 4), d = (item % (HD / 4)) * 4;
    float M = NEG_INF;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, red_m[w * 16 + r]);
    const float Mu = M == NEG_INF ? 0.f : M;
    float L = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      L += red_l[w * 16 + r] * ex2(red_m[w * 16 + r] - Mu);
      const float4 x = *reinterpret_cast<const float4 *>(red_o + (w * 16 + r) * LD + d);
      o.x += x.x;
      o.y += x.y;
      o.z += x.z;
      o.w += x.w;
    }
    const int i = r / group, hh = kh * group + r % group;
    const float inv = L > 0.f ? 1.f / L : 0.f;
    store4(static_cast<T *>(p.o) + bi * p.o_bs + i * p.o_rs + hh * p.o_hs + rank * HD + d, o.x * inv,
           o.y * inv, o.z * inv, o.w * inv);
    if (d == 0 && rank == 0 && p.lse) p.lse[((int64_t)bi * p.h + hh) * p.sq + i] = row_lse(M, L);
  }
#ifdef PT_ATTN_TIMELINE_ALL
  if (tid == 0)
    printf("TLC %d,%d,%d tiles %d start %llu tile0 %llu mid %llu loopend %llu end %llu\n", rank, kh, bi, nsteps,
           tl_start, tl_first, tl_mid, tl_loop, gtimer());
#endif
}

}  // namespace pt_attn

#define PT_ATTN_DECODE_DS_KERNEL(NAME, T)                                                     \
  extern "C" __global__ void __launch_bounds__(PT_ATTN_THREADS, 1)                            \
      NAME(const __grid_constant__ pt_attn_kparams p) {                                       \
    pt_attn::decode_ds<T, 128>(p);                                                            \
  }

PT_ATTN_DECODE_DS_KERNEL(pt_attn_decode_ds_bf16_d128, __nv_bfloat16)
PT_ATTN_DECODE_DS_KERNEL(pt_attn_decode_ds_fp16_d128, __half)
