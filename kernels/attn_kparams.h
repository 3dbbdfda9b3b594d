/* Kernel-side parameter blocks, shared by the .cu kernels and the C host
 * code that fills them (one definition, so the by-value layouts can't
 * drift), and the launch plan of the decode kernel (kernels/attn_plan.c). */
#ifndef PT_ATTN_KPARAMS_H
#define PT_ATTN_KPARAMS_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Keys per pipeline stage (a tile); each of the 4 warps of a CTA owns 16. */
#define PT_ATTN_BK 64
/* K/V stages of the d = 128 kernel's ring (d = 64 takes 4, d = 256 3). With 3, two CTAs fit in
 * an SM's shared memory; with 4 (an experiment on bytes in flight, issue 17: build with
 * -DPT_ATTN_NSTAGE_D128=4) one. The kernel's launch bounds and the planner's occupancy follow. */
#ifndef PT_ATTN_NSTAGE_D128
#define PT_ATTN_NSTAGE_D128 3
#endif
#define PT_ATTN_OCC_D128 (PT_ATTN_NSTAGE_D128 >= 4 ? 1 : 2)
#define PT_ATTN_THREADS 128
#define PT_ATTN_MAX_ROWS 16
/* Shared-memory row pitch (elements) of a staged bias tile: PT_ATTN_BK keys
 * plus 8, so the 8 rows an mma fragment reads start on different banks. */
#define PT_ATTN_BIAS_LD (PT_ATTN_BK + 8)
/* Upper bound on KV splits: bounds the last CTA's per-split weight table. */
#define PT_ATTN_MAX_SPLITS 256
/* One 32-bit counter per (batch, KV head) in the workspace's fixed head;
 * a split launch (nsplit > 1) never has more units than this. */
#define PT_ATTN_MAX_COUNTERS 1024
/* Largest split count the kernel can merge inside a thread-block cluster
 * (such launches need no workspace). Above 8, the portable cluster size, the
 * kernels are loaded with the non-portable cluster attribute (H100/H200 allow
 * 16). The plan uses clusters of up to PT_ATTN_PLAN_CLUSTER. */
#define PT_ATTN_MAX_CLUSTER 16
#define PT_ATTN_PORTABLE_CLUSTER 8
#ifndef PT_ATTN_PLAN_CLUSTER /* a timing build may raise it: -DPT_ATTN_PLAN_CLUSTER=16 */
#define PT_ATTN_PLAN_CLUSTER 8
#endif
/* Splits of at most this many tiles are short: a cluster plan is taken for them even when it
 * covers few SMs (kernels/attn_plan.c). */
#define PT_ATTN_PLAN_SHORT_TILES 8
/* A masked launch whose cluster splits hold more tiles than this (and at most
 * PT_ATTN_PLAN_SHORT_TILES) takes the workspace plan when it has twice the splits. */
#define PT_ATTN_MASKED_SHORT_TILES 4
/* A masked launch takes twice the workspace path's splits when each split
 * still holds at least this many tiles (4096 keys; kernels/attn_plan.c). */
#define PT_ATTN_MASKED_LONG_TILES 64
/* Multiprocessors the split heuristic plans for (H100/H200). Only speed
 * depends on it; a fixed value keeps the workspace size a pure function of
 * the descriptor. */
#define PT_ATTN_PLAN_SMS 132
/* Threads of the (single-CTA) compare kernel. */
#define PT_ATTN_CMP_THREADS 512
/* Threads per query row of the planted-fault kernel (kernels/attn_fault.cu). */
#define PT_ATTN_FAULT_THREADS 256

/* The decode kernel's only parameter, passed by value (__grid_constant__). */
struct pt_attn_kparams {
  const void *q, *k, *v;
  void *o;
  float *lse;            /* NULL: no LSE */
  unsigned char *ws;     /* workspace; counters at 0 (NULL when nsplit == 1) */
  int64_t q_bs, q_rs, q_hs;
  int64_t k_bs, k_rs, k_hs;
  int64_t v_bs, v_rs, v_hs;
  int64_t o_bs, o_rs, o_hs;
  int64_t ws_ml_off;     /* byte offset of float2 (m, l) partials */
  int64_t ws_o_off;      /* byte offset of fp32 O partials */
  int b, h, h_k, sq, sk;
  int group;             /* h / h_k */
  int rows;              /* sq * group <= 16 */
  int nsplit;            /* KV splits (gridDim.x) */
  int tiles_per_split;   /* PT_ATTN_BK-key tiles per split */
  int causal;
  float scale_log2;      /* softmax scale * log2(e) */
  int cluster;           /* > 1: splits merge in a cluster of this size (== nsplit) */
  /* Additive bias (pt_attn_desc.bias): same dtype as q; keys contiguous;
   * element strides per batch, query head and query row. NULL: none. */
  const void *bias;
  int64_t bias_bs, bias_hs, bias_rs;
  int bias_rows;         /* distinct bias rows per CTA (pt_attn_plan.bias_rows); 0: no bias */
  int pdl;               /* launched with programmatic dependent launch (pt_attn_plan_pdl) */
};

/* Compile-time diagnostics of the decode kernel (tests/gpu timing builds only: ATTN_VARIANTS in
 * tests/gpu/checks/attn.sh, e.g. -DPT_ATTN_EXP=8). Production builds leave PT_ATTN_EXP at 0 and
 * compile none of them. NOCOMPUTE streams the tiles through the ring and computes nothing;
 * NOMERGE leaves after the loop (no warp merge, no split merge, no output; ptxas then drops the
 * loop's math as well, so it times the stream and the ring alone); NOLOAD loads no tile past the
 * prologue (the loop's compute alone, over stale tiles); all three give wrong results and say
 * where the time goes. NOSCAN skips the key-range narrowing under a bias (every key read, the
 * bias still applied: same results). NOHINT leaves out the first tile's L2 hint before the scan,
 * KVNORMAL streams K/V with the normal L2 policy instead of evict_first (both same results: were
 * those choices, made on back-to-back timings, right for a launch after other work?). */
#ifndef PT_ATTN_EXP
#define PT_ATTN_EXP 0
#endif
#define PT_ATTN_EXP_NOCOMPUTE 8
#define PT_ATTN_EXP_NOMERGE 16
#define PT_ATTN_EXP_NOSCAN 32
#define PT_ATTN_EXP_NOLOAD 64
#define PT_ATTN_EXP_NOHINT 128
#define PT_ATTN_EXP_KVNORMAL 256

/* The compare kernel's only parameter. */
struct pt_attn_cmp_kparams {
  const void *ref_o;
  const void *test_o;
  const float *ref_lse, *test_lse; /* both non-NULL, or LSE is skipped */
  float *result;
  int64_t o_bs, o_rs, o_hs;        /* ref O strides (elements) */
  int b, h, sq, d;
};

/* The planted-fault kernel's only parameter: O *= factor, in place. */
struct pt_attn_fault_kparams {
  void *o;
  int64_t o_bs, o_rs, o_hs; /* O strides (elements) */
  int b, h, sq, d;
  float factor;
};

/* How a descriptor is launched (host side). */
struct pt_attn_plan {
  int dkind;           /* the head sizes' index in pt_attn_plan_dims/vdims (kernels/attn_plan.h) */
  int group, rows;
  int tiles, nsplit, tiles_per_split;
  int cluster;         /* 1, or nsplit when the splits merge in one cluster */
  unsigned smem_bytes; /* dynamic shared memory per CTA */
  /* Distinct bias rows a CTA stages per tile: seqlen_q when the bias is
   * broadcast over heads (head stride 0), else rows; 0 without a bias. */
  int bias_rows;
  int64_t ws_ml_off, ws_o_off;
  uint64_t ws_bytes;   /* 0 when nsplit == 1 */
};

#ifdef __cplusplus
}
#endif
#endif
