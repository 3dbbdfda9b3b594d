/* Ponytail's prefill attention kernel for sm_90a (kernels/attn_prefill.cu, issue 18): the
 * parameter block shared by the kernel and the host code that fills it, and the tile sizes.
 *
 * Status: correct on the H200 (tests/gpu/checks/prefill.sh: fp32 reference, memcheck, racecheck,
 * synccheck) and faster than torch's flash kernel, but still behind cuDNN's (0.69-0.97x of its
 * speed at d = 128), which the SDPA policy already runs for prefill; so the shim swaps it in only
 * with PONYTAIL_ATTN_PREFILL=1 (torch's flash launches with seqlen_q > 16; launcher:
 * kernels/attn_prefill_launch.c). Design and measurements: docs/prefill.md.
 *
 * One CTA computes BM = 128 query rows (PT_PREFILL_BM(d)) of one (batch, head): three warpgroups, the first
 * loading Q once and K/V tiles of BN = 128 keys through a ring of PT_PREFILL_STAGES(d) stages
 * with TMA, the other two each computing 64 of the rows (S = Q K^T and O += P V on wgmma,
 * online softmax in registers, the two warpgroups taking turns on the tensor cores). Causal is
 * bottom-right aligned (query row i sees keys j <= i + sk - sq), as
 * FA2's; K/V tiles past the diagonal are never loaded. GQA: query head h reads KV head
 * h / (h / h_k), never expanded. Output: O in the input dtype, LSE (fp32, natural log,
 * [b, h, sq] contiguous) as FA2's softmax_lse. */
#ifndef PT_KERNELS_ATTN_PREFILL_H
#define PT_KERNELS_ATTN_PREFILL_H
#include <cuda.h>
#include <stdint.h>

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
/* Persistent grid, an experiment chosen at compile time (-DPT_PREFILL_PERSISTENT=1) until it is
 * measured: one CTA per SM walks the (m-block, head, batch) tiles, its K/V ring and the
 * warpgroups' turns running on from one tile to the next, so that a tile's Q and first K/V
 * load while the previous tile finishes. The launch is then 1D, min(tiles, SMs) CTAs. */
#ifndef PT_PREFILL_PERSISTENT
#define PT_PREFILL_PERSISTENT 0
#endif
/* K/V tiles in flight: as many as fit beside Q in the 227 KB of shared memory a CTA may take
 * (d = 128: 32 KB of Q + 3 x 64 KB; d = 64: 16 KB + 4 x 32 KB). */
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
  int m_blocks;               /* ceil(sq / BM) = gridDim.x (without PT_PREFILL_PERSISTENT) */
  int tiles;                  /* m_blocks * h * b: the persistent grid's walk */
  float scale_log2;           /* softmax scale * log2(e) */
};

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
