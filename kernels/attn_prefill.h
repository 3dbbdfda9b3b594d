/* Ponytail's prefill attention kernel for sm_90a (kernels/attn_prefill.cu, issue 18): the
 * parameter block shared by the kernel and the host code that fills it, and the tile sizes.
 *
 * Status: correct on the H200 (tests/gpu/checks/prefill.sh: fp32 reference, memcheck, racecheck,
 * synccheck) and, since version 7, faster than cuDNN's kernel at the 48 points of issue 18's
 * grid (version 6: 47, the 48th a tie; version 7 adds the d = 64 _skip kernels,
 * pt_prefill_skip_pays). The shim swaps it in for torch's flash
 * launches with seqlen_q > 16 (PONYTAIL_ATTN_PREFILL, on by default; the SDPA policy moves a
 * prefill call from cuDNN to flash where this kernel takes it; launcher:
 * kernels/attn_prefill_launch.c). Design and measurements:
 * docs/prefill.md.
 *
 * A CTA computes tiles of BM query rows (PT_PREFILL_BM(d): 128 at d = 128, 192 at d = 64) of
 * one (batch, head), one after another (the persistent walk below): a producer warpgroup loads
 * Q and K/V tiles of BN = 128 keys through a ring of PT_PREFILL_STAGES(d) stages with TMA, and
 * two or three consumer warpgroups each compute 64 of the rows (S = Q K^T and O += P V on
 * wgmma, online softmax in registers, the warpgroups taking turns on the tensor cores). Causal is
 * bottom-right aligned (query row i sees keys j <= i + sk - sq), as
 * FA2's; K/V tiles past the diagonal are never loaded. GQA: query head h reads KV head
 * h / (h / h_k), never expanded. Output: O in the input dtype, LSE (fp32, natural log,
 * [b, h, sq] contiguous) as FA2's softmax_lse. */
#ifndef PT_KERNELS_ATTN_PREFILL_H
#define PT_KERNELS_ATTN_PREFILL_H
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Consumer warpgroups per CTA, 64 query rows each. d = 64 takes three (192 rows, FA3's choice
 * there: more GEMM work per softmax): +0 to +15 % over two at the 8 points timed, replays
 * interleaved (bench/records/2026-12-01-prefill-kernel.md); -DPT_PREFILL_D64_CONSUMERS=2 builds
 * the two-consumer version. d = 128 takes two: three consumers get 160 registers each, under its
 * 64 + 64 accumulators and P. */
#ifndef PT_PREFILL_D64_CONSUMERS
#define PT_PREFILL_D64_CONSUMERS 3
#endif
#define PT_PREFILL_CONSUMERS(d) ((d) == 64 ? PT_PREFILL_D64_CONSUMERS : 2)
#define PT_PREFILL_BM(d) (64 * PT_PREFILL_CONSUMERS(d))            /* query rows per CTA */
#define PT_PREFILL_THREADS(d) (128 * (PT_PREFILL_CONSUMERS(d) + 1)) /* with the producer warpgroup */
#define PT_PREFILL_BN 128     /* keys per K/V tile */
/* Persistent grid (version 6): a 1D grid of CTAs walks the (m-block, head, batch) tiles, each
 * CTA's K/V ring and warpgroup turns running on from one tile to the next, so that a tile's Q
 * and first K/V load while the previous tile finishes; pt_prefill_ctas picks the CTA count
 * (one per SM, or one per tile where a static walk would balance badly). Compile-time variants
 * for measurements (tests/gpu/checks/prefill.sh): 0 the grid (m_blocks, h, b) of one CTA per
 * tile (version 5), 2 the persistent code and walk with one CTA per tile always. */
#ifndef PT_PREFILL_PERSISTENT
#define PT_PREFILL_PERSISTENT 1
#endif
/* Compile-time experiments (0 in production builds; tests/gpu/checks/prefill.sh builds
 * variants with -DPT_PREFILL_EXP=...). Bits that each undo one change, to measure it: 1 the
 * producer waits without a suspend-time hint, 2 the mask is applied on every K/V tile (both
 * version 5), 4 the running max moves on every rise instead of lazily (version 6). (Bits 8, a
 * snake deal of the walk, and 16, the ring's stage carried from tile to tile, were tried and
 * not kept: bench/records/2026-12-02-prefill-default.md.) */
#ifndef PT_PREFILL_EXP
#define PT_PREFILL_EXP 0
#endif
/* K/V tiles in flight: as many as fit beside Q in the 227 KB of shared memory a CTA may take
 * (d = 128: 32 KB of Q + 3 x 64 KB; d = 64: 24 KB (192 rows) + 4 x 32 KB). */
#define PT_PREFILL_STAGES(d) ((d) == 128 ? 3 : 4)
/* Each tile is stored as d / 64 sub-tiles of [rows][64] elements (128-byte rows, the TMA's and
 * wgmma's 128-byte swizzle), each 1024-byte aligned. */
#define PT_PREFILL_SUB 64

/* The kernel's only parameter, passed by value (__grid_constant__: the TMA reads the maps from
 * the parameter space). Tensor maps: 4D (d, seq, head, batch) views of Q [b, sq, h, d] and
 * K, V [b, sk, h_k, d], 16-bit elements, box (64, BM or BN, 1, 1), 128-byte swizzle, rows past
 * the sequence filled with zeros. */
struct pt_prefill_kparams {
  CUtensorMap tq, tk, tv;
  void *o;
  float *lse;                 /* NULL: no LSE */
  int64_t o_bs, o_rs, o_hs;   /* O strides in elements, head_dim contiguous */
  int b, h, h_k, sq, sk;
  int group;                  /* h / h_k */
  int causal;
  int m_blocks;               /* ceil(sq / BM) (gridDim.x with PT_PREFILL_PERSISTENT=0) */
  int tiles;                  /* m_blocks * h * b: the persistent grid's walk */
  int sec;                    /* (batch, head) pairs per section of that walk: pt_prefill_section */
  float scale_log2;           /* softmax scale * log2(e) */
};

/* The persistent walk goes section by section: a section is `sec` consecutive (batch, head)
 * pairs (head fastest, so the `group` query heads of a KV head stay together), walked m-block by
 * m-block (causal: heaviest first) and, inside an m-block, pair by pair. The CTAs running at one
 * time then share the K/V of a section, which is sized to fit in about half the L2 (50 MB on the
 * H100/H200) beside the streamed Q and O. Walked heaviest m-block first over all pairs instead
 * (version 4's walk), 132 CTAs read 132 different heads' K/V at long prompts and ran up to 19 %
 * slower than one CTA per tile (bench/records/2026-12-02-prefill-profile.md). */
#define PT_PREFILL_SECTION_BYTES (24ll << 20)
#define PT_PREFILL_PLAN_CTAS 1024 /* pt_prefill_ctas balances grids of up to this many SMs */
static inline int pt_prefill_section(int b, int h, int group, int sk, int d) {
  const long long kv = 4ll * (sk > 0 ? sk : 1) * d; /* K and V bytes of one KV head */
  long long kvh = PT_PREFILL_SECTION_BYTES / kv;    /* KV heads per section */
  if (kvh < 1) kvh = 1;
  const long long pairs = kvh * (group > 0 ? group : 1), all = (long long)b * h;
  return (int)(pairs < all ? pairs : all);
}

#ifdef __CUDACC__
#define PT_PREFILL_HD __host__ __device__
#else
#define PT_PREFILL_HD
#endif
/* Tile t of the persistent walk (0 <= t < tiles): its m-block, head and batch entry. The
 * kernel and the host (pt_prefill_ctas, the unit tests) share it. */
static inline PT_PREFILL_HD void pt_prefill_walk(const struct pt_prefill_kparams *p, int t, int *mb, int *h,
                                                 int *bi) {
  const int sec_tiles = p->sec * p->m_blocks, sec = t / sec_tiles, r = t - sec * sec_tiles;
  const int left = p->h * p->b - sec * p->sec;
  const int n = p->sec < left ? p->sec : left; /* pairs in this section (the last may be short) */
  const int mr = r / n, pair = sec * p->sec + (r - mr * n);
  *mb = p->causal ? p->m_blocks - 1 - mr : mr;
  *h = pair % p->h;
  *bi = pair / p->h;
}

/* K/V tiles the CTA of the m-block starting at query row m0 (of bm rows) reads: all keys, or
 * (causal) up to the last one its last row sees. */
static inline PT_PREFILL_HD int pt_prefill_n_tiles(const struct pt_prefill_kparams *p, int m0, int bm) {
  int kmax = p->sk - 1;
  if (p->causal && m0 + bm - 1 + p->sk - p->sq < kmax) kmax = m0 + bm - 1 + p->sk - p->sq;
  return kmax < 0 ? 0 : kmax / PT_PREFILL_BN + 1;
}

/* K/V tiles tile t of the walk reads. */
static inline int pt_prefill_tile_cost(const struct pt_prefill_kparams *p, int bm, int t) {
  int mb, h, bi;
  pt_prefill_walk(p, t, &mb, &h, &bi);
  return pt_prefill_n_tiles(p, mb * bm, bm);
}

/* The busiest CTA's load over the mean (x 1000) when `ctas` CTAs take the walk's tiles in turn
 * (CTA c: tiles c, c + ctas, ...), counting each tile one K/V tile more than it reads (its Q load and epilogue). */
static inline unsigned pt_prefill_imbalance(const struct pt_prefill_kparams *p, int bm, int ctas) {
  if (ctas <= 0 || ctas > PT_PREFILL_PLAN_CTAS) return 1000u; /* not counted: taken as even */
  unsigned load[PT_PREFILL_PLAN_CTAS];
  memset(load, 0, sizeof(unsigned) * (size_t)ctas);
  unsigned long long total = 0;
  for (int t = 0; t < p->tiles; ++t) {
    const unsigned w = (unsigned)pt_prefill_tile_cost(p, bm, t) + 1u;
    load[t % ctas] += w;
    total += w;
  }
  unsigned mx = 0;
  for (int c = 0; c < ctas; ++c) mx = load[c] > mx ? load[c] : mx;
  return total ? (unsigned)((unsigned long long)mx * (unsigned)ctas * 1000u / total) : 1000u;
}

/* The launch's CTA count on a GPU of `sms` SMs (0: unknown). One CTA per SM,
 * unless the walk would load the SMs unevenly: causal tiles differ in cost (1 to sq / BN K/V
 * tiles), and with few tiles per SM the CTA that draws the heavy ones finishes last. Where the
 * busiest SM would carry over 10 % more than the mean, the launch takes one CTA per tile
 * (heaviest first within each section), and the hardware hands each SM its next CTA as it frees
 * up. On the grid (32 heads) that is B = 1 at S <= 4096, causal, where one CTA per tile
 * ran 1.02-1.08x faster than one per SM (bench/records/2026-12-02-prefill-profile.md).
 * Evaluated for up to 8 tiles per SM; beyond, the walk is within 8 % of even on that grid.
 * (A snake deal, odd rounds dealt in reverse, balanced better at B = 1, S = 4096 and d = 64,
 * B = 8, S = 2048, causal, but was not faster overall in either of two forms:
 * bench/records/2026-12-02-prefill-default.md.) */
static inline int pt_prefill_ctas(const struct pt_prefill_kparams *p, int bm, int sms) {
  if (sms <= 0 || p->tiles <= sms) return p->tiles;
  if (!p->causal || sms > PT_PREFILL_PLAN_CTAS || p->tiles > 8 * sms) return sms;
  return pt_prefill_imbalance(p, bm, sms) > 1100u ? p->tiles : sms;
}

/* Whether a launch takes the _skip kernel of its dtype (kernels/attn_prefill.cu; d = 64 with
 * three consumers only): there each consumer warpgroup computes only the K/V tiles some row of
 * its own 64 needs, and takes empty turns for the rest of its tile's (causal: those past the
 * slab's diagonal; a slab past sq: all). Causal tiles of 192 rows over 128-key K/V tiles leave
 * 10 % of the warpgroup-tiles surplus at S = 2048, 8 % at 4096, 2 % at 16384. The skipping
 * loop ran 2-4 % faster at causal S = 2048 and 4096 and 1.5-8 % slower at causal S >= 16384
 * and at every non-causal point (the 24 d = 64 points, interleaved:
 * bench/records/2026-12-02-default-check.md, call 5). So: causal, and a surplus of at least
 * PT_PREFILL_SKIP_PERMILLE of the warpgroup-tiles, counted here per (batch, head). */
#define PT_PREFILL_SKIP_PERMILLE 50
static inline int pt_prefill_skip_pays(const struct pt_prefill_kparams *p, int d) {
  if (d != 64 || PT_PREFILL_CONSUMERS(64) != 3 || !p->causal) return 0;
  const int bm = PT_PREFILL_BM(64);
  long long all = 0, need = 0;
  for (int mb = 0; mb < p->m_blocks; ++mb) {
    const int m0 = mb * bm, nt = pt_prefill_n_tiles(p, m0, bm);
    for (int w = 0; w < PT_PREFILL_CONSUMERS(64); ++w) {
      const int s0 = m0 + 64 * w;
      all += nt;
      if (s0 < p->sq) {
        const int n = pt_prefill_n_tiles(p, s0, 64);
        need += n < nt ? n : nt;
      }
    }
  }
  return all > 0 && (all - need) * 1000 >= (long long)PT_PREFILL_SKIP_PERMILLE * all;
}

/* Dynamic shared memory of a launch for head_dim d (64 or 128): Q, the K/V ring, the barriers. */
static inline unsigned pt_prefill_smem_bytes(int d) {
  const unsigned q = (unsigned)PT_PREFILL_BM(d) * (unsigned)d * 2u;
  const unsigned kv = 2u * (unsigned)PT_PREFILL_STAGES(d) * PT_PREFILL_BN * (unsigned)d * 2u;
  return 1024u /* alignment slack */ + q + kv + 256u /* barriers: 2 + 4 x stages, 8 bytes each */;
}

#ifdef __cplusplus
}
#endif
#endif
