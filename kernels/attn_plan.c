/* Planning of the fused decode launch: which descriptors the kernel takes,
 * how many KV splits, and the workspace layout. Pure host code. */
#include <math.h>
#include <stdint.h>

#include "kernels/attn_plan.h"

const int pt_attn_plan_dims[PT_ATTN_NDKIND] = {64, 80, 96, 128, 256, 192};
const int pt_attn_plan_vdims[PT_ATTN_NDKIND] = {64, 80, 96, 128, 256, 128};

/* The width a head_dim's kernel lays its tiles out at (decode's D): 80 and 96
 * run padded on d = 128's, 192 (with v 128) on d = 256's, so their shared
 * memory, stages and occupancy are those of d = 128 and d = 256. */
static int plan_width(int d) { return d == 80 || d == 96 ? 128 : d == 192 ? 256 : d; }

/* Shared memory per CTA: the K/V ring (stages x 64 keys x d x 2 tensors x 2
 * bytes), the 16 padded query rows, then a bias ring of bias_rows rows per
 * stage, d the padded width. Must match cfg<D> and the layout in
 * attn_decode.cu. */
static unsigned plan_stages(int d) { return d == 64 ? 4 : (d == 128 ? PT_ATTN_NSTAGE_D128 : 3); }
static unsigned plan_smem_for(int hd, int bias_rows) {
  const int d = plan_width(hd);
  const unsigned stages = plan_stages(d);
  return stages * PT_ATTN_BK * (unsigned)d * 2u * 2u + PT_ATTN_MAX_ROWS * (unsigned)d * 2u +
         stages * (unsigned)bias_rows * PT_ATTN_BIAS_LD * 2u;
}
unsigned pt_attn_plan_smem(int d) { return plan_smem_for(d, PT_ATTN_MAX_ROWS); }

/* CTAs resident per SM at that shared memory (the kernels' launch bounds
 * promise at least this many). */
static int plan_occupancy(int hd) {
  const int d = plan_width(hd);
  return d == 64 ? 3 : (d == 128 ? PT_ATTN_OCC_D128 : 1);
}

/* The index of the pair (head_dim, v head size) in pt_attn_plan_dims and
 * pt_attn_plan_vdims, or -1. */
static int plan_dkind(int hd, int vd) {
  for (int i = 0; i < PT_ATTN_NDKIND; ++i)
    if (pt_attn_plan_dims[i] == hd && pt_attn_plan_vdims[i] == vd) return i;
  return -1;
}

int pt_attn_plan_split_div = 1;
int pt_attn_plan_split_mul = 1;
int pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
int pt_attn_plan_pdl = 0;
int pt_attn_plan_masked_short = 1;
int pt_attn_plan_clusters_off = 0;


const char *pt_attn_plan_check(const struct pt_attn_desc *d) {
  if (!d) return "no descriptor";
  if (d->dtype != PT_DTYPE_FP16 && d->dtype != PT_DTYPE_BF16) return "dtype not fp16/bf16";
  /* Equal sizes take the list; of the unequal pairs only MLA's (DeepSeek-V3 under SDPA). */
  const int vd = pt_attn_v_dim(d);
  if (plan_dkind(d->head_dim, vd) < 0)
    return vd == d->head_dim ? "head_dim not 64/80/96/128/256" : "head_dim q/k 192 with v 128 only";
  if (d->b < 1 || d->h < 1 || d->h_k < 1 || d->seqlen_q < 1) return "empty or negative shape";
  if (d->seqlen_k < 1) return "seqlen_k < 1";
  if (d->h % d->h_k != 0) return "h not a multiple of h_k";
  if (d->seqlen_q > PT_ATTN_MAX_ROWS) return "seqlen_q > 16";
  if (d->h / d->h_k > PT_ATTN_MAX_ROWS || d->seqlen_q * (d->h / d->h_k) > PT_ATTN_MAX_ROWS)
    return "rows per kv head > 16";
  if (d->b > 65535 || d->h_k > 65535) return "batch or kv heads > 65535";
  if (d->causal && d->seqlen_q > d->seqlen_k) return "causal with seqlen_q > seqlen_k";
  if (!(d->scale == d->scale) || isinf(d->scale)) return "scale not finite";
  if (!d->q || !d->k || !d->v || !d->o) return "null pointer";
  if (!pt_attn_contiguous(d->q_dim_stride) || !pt_attn_contiguous(d->k_dim_stride) ||
      !pt_attn_contiguous(d->v_dim_stride) || !pt_attn_contiguous(d->o_dim_stride))
    return "last dim not contiguous";
  if (!pt_attn_aligned16(d->q) || !pt_attn_aligned16(d->k) || !pt_attn_aligned16(d->v) ||
      !pt_attn_aligned16(d->o) || ((uintptr_t)d->lse & 3u))
    return "misaligned pointer";
  if (!pt_attn_mult8(d->q_batch_stride) || !pt_attn_mult8(d->q_row_stride) ||
      !pt_attn_mult8(d->q_head_stride) || !pt_attn_mult8(d->k_batch_stride) ||
      !pt_attn_mult8(d->k_row_stride) || !pt_attn_mult8(d->k_head_stride) ||
      !pt_attn_mult8(d->v_batch_stride) || !pt_attn_mult8(d->v_row_stride) ||
      !pt_attn_mult8(d->v_head_stride) || !pt_attn_mult8(d->o_batch_stride) ||
      !pt_attn_mult8(d->o_row_stride) || !pt_attn_mult8(d->o_head_stride))
    return "stride not a multiple of 8";
  /* The kernel copies the bias 8 keys (16 bytes) at a time into shared
   * memory, next to the K/V tiles. A stride along a dimension of extent 1 is
   * never applied (torch checks the same way), so only the others count. */
  if (d->bias && (!pt_attn_aligned16(d->bias) ||
                  (d->b > 1 && !pt_attn_mult8(d->bias_batch_stride)) ||
                  (d->h > 1 && !pt_attn_mult8(d->bias_head_stride)) ||
                  (d->seqlen_q > 1 && !pt_attn_mult8(d->bias_row_stride))))
    return "bias not 16-byte aligned";
  return NULL;
}

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

/* A split count within what the kernel takes: splits of at least 2 tiles
 * (max_by_tiles), at most PT_ATTN_MAX_SPLITS. */
static int64_t cap_splits(int64_t ns, int64_t max_by_tiles) {
  if (ns > max_by_tiles) ns = max_by_tiles;
  return ns > PT_ATTN_MAX_SPLITS ? PT_ATTN_MAX_SPLITS : ns;
}

/* Workspace path: split the keys only as far as it takes to fill the GPU
 * once (two or three CTAs per SM): every extra split costs a partial write
 * + read and a longer merge in the last CTA. Splits keep at least 2 tiles
 * (the prologue fetches 2+ tiles at once, so a 1-tile split saves no
 * latency but doubles the partials). */
static int64_t workspace_splits(const struct pt_attn_desc *d, const struct pt_attn_plan *pl,
                                int64_t units, int64_t slots, int64_t max_by_tiles) {
  int64_t ns = cap_splits(slots / units, max_by_tiles);
  /* Measured on H200 (run 2, bench/records/2026-11-29-decode-attention-kernel.md): the last CTA's merge
   * reads ns x rows partial rows from L2 on one SM, so with 4+ rows per KV
   * head half the splits (but not under 8) is faster; and when the
   * batch x KV heads alone occupy a third of the SMs and a split would get
   * <= 4 tiles, the split path's fixed cost (count, merge) outweighs the
   * extra bandwidth: one split. */
  const int rows = d->seqlen_q * pl->group;
  if (rows >= 4 && ns > 8) ns = ns / 2 > 8 ? ns / 2 : 8;
  if (units * 3 >= PT_ATTN_PLAN_SMS && (pl->tiles + ns - 1) / ns <= 4) ns = 1;
  if (pt_attn_plan_split_div > 1) ns /= pt_attn_plan_split_div;
  if (pt_attn_plan_split_mul > 1) ns = cap_splits(ns * pt_attn_plan_split_mul, max_by_tiles);
  return ns < 1 ? 1 : ns;
}

void pt_attn_plan_make(const struct pt_attn_desc *d, struct pt_attn_plan *pl) {
  const int hd = d->head_dim, vd = pt_attn_v_dim(d);
  pl->dkind = plan_dkind(hd, vd);
  pl->group = d->h / d->h_k;
  pl->rows = d->seqlen_q * pl->group;
  pl->bias_rows = !d->bias ? 0 : d->bias_head_stride == 0 ? d->seqlen_q : pl->rows;
  pl->smem_bytes = plan_smem_for(hd, pl->bias_rows);
  pl->tiles = (d->seqlen_k + PT_ATTN_BK - 1) / PT_ATTN_BK;

  const int64_t units = (int64_t)d->b * d->h_k;
  const int64_t slots = (int64_t)PT_ATTN_PLAN_SMS * plan_occupancy(hd);
  const int64_t max_by_tiles = (pl->tiles + 1) / 2;
  int64_t ns = 1;
  int clustered = 0;

  /* Cluster path: one CTA per SM, the splits of a (batch, KV head) form one
   * thread-block cluster and merge through distributed shared memory (no
   * partials in global memory, no counter, no workspace, the merge spread
   * over the cluster's SMs). Measured on H200 (runs 4-8,
   * bench/records/2026-11-29-decode-attention-cluster-merge.md): it wins
   * when the grid covers the SMs once (>= 90% of them), or
   * when the splits are short (<= 8 tiles: latency-bound shapes); cluster
   * launches of two CTAs per SM, and clusters whose CTAs stream long splits,
   * run slower than the workspace path below, which those shapes keep. */
  const int cmax = __atomic_load_n(&pt_attn_plan_clusters_off, __ATOMIC_RELAXED) ? 1
                   : pt_attn_plan_cluster_max < PT_ATTN_MAX_CLUSTER ? pt_attn_plan_cluster_max
                                                                   : PT_ATTN_MAX_CLUSTER;
  if (units < PT_ATTN_PLAN_SMS && cmax >= 2) {
    int64_t nc = PT_ATTN_PLAN_SMS / units;
    if (nc > cmax) nc = cmax;
    if (nc > max_by_tiles) nc = max_by_tiles;
    const int div = pt_attn_plan_split_div > 1 ? pt_attn_plan_split_div : 1;
    if (nc >= 2 && (units * nc * 10 >= (int64_t)PT_ATTN_PLAN_SMS * 9 ||
                    (pl->tiles + nc - 1) / nc <= PT_ATTN_PLAN_SHORT_TILES)) {
      ns = nc / div;
      if (ns < 1) ns = 1;
      clustered = 1;
    }
  }

  /* Masked launches whose cluster splits are short but not tiny (5-8 tiles): the workspace
   * plan, when it has at least twice the splits. Measured on H200
   * (bench/records/2026-12-02-decode-tma.md, masked-plans, interleaved): B = 1 at 4k keys, 8 KV
   * heads, G 1/4/8 (clusters of 8 splits of 8 tiles; the workspace plan 32/16/16 splits) 2.3 /
   * 1.9 / 0.9 us faster, 4 and 2 KV heads 3.2-3.3 us, B = 2 at 4k keys 2.0 us. Not where the
   * cluster's splits hold 2-4 tiles (B = 1 at 1k-2k keys: the cluster equal or 1-2 us faster),
   * nor where the workspace plan is not twice the splits (B = 8 at 1k keys: one split, 5 us
   * slower) or the splits are longer (B = 8 at 4k keys, 32 tiles: within 1 us either way).
   * Unmasked, the two plans were within 0.7 us of each other at B = 1, 4k keys. Under CUDA-graph
   * capture the launch needs a spare workspace from an eager one (as below). */
  if (clustered && d->bias && pt_attn_plan_masked_short && units <= PT_ATTN_MAX_COUNTERS && units < slots &&
      pt_attn_plan_split_div <= 1 && pt_attn_plan_split_mul <= 1) {
    const int64_t tps = (pl->tiles + ns - 1) / ns;
    const int64_t w = workspace_splits(d, pl, units, slots, max_by_tiles);
    if (tps > PT_ATTN_MASKED_SHORT_TILES && tps <= PT_ATTN_PLAN_SHORT_TILES && w >= 2 * ns)
      clustered = 0;  /* the workspace path below plans it (its split count is w) */
  }

  if (!clustered && units <= PT_ATTN_MAX_COUNTERS && units < slots)
    ns = workspace_splits(d, pl, units, slots, max_by_tiles);

  /* Masked launches with long splits: twice the workspace path's splits,
   * more CTAs than one wave holds. A mask leaves the units uneven (under
   * left padding the CTAs of padded rows have fewer keys): in one wave their
   * SMs go idle while the others still stream, and more, shorter CTAs let the
   * hardware refill them. It pays only when each CTA stays long enough to
   * cover its own start and merge: PT_ATTN_MASKED_LONG_TILES tiles or more.
   * Measured on H200 (bench/records/2026-12-02-decode-tail.md, calls 4, 11,
   * 12, half the rows padded by 25 %): B8 KV32k (CTAs of 64 tiles) 237-239 us
   * on the cluster plan, 223-230 so; B32 KV32k (256 tiles) 878-894 -> 868-899;
   * with CTAs of 32 tiles it loses (B32 KV4k 116.6 -> 118.9 us) and of 8
   * (B8 KV4k 36.6 -> 38.5). Only where one wave was the plan (units below
   * the CTA slots): grids of more units already refill their SMs, and were
   * not measured. The split test knobs, when set, plan instead. A launch
   * under CUDA-graph capture needs the workspace this plan asks for to exist
   * already (a spare from an eager launch, hooks/flash_ws.c), or it keeps
   * torch's kernel. */
  if (d->bias && units < slots && units <= PT_ATTN_MAX_COUNTERS && pt_attn_plan_split_mul <= 1 &&
      pt_attn_plan_split_div <= 1) {
    const int64_t w =
        cap_splits(2 * workspace_splits(d, pl, units, slots, max_by_tiles), max_by_tiles);
    if (w > ns && (pl->tiles + w - 1) / w >= PT_ATTN_MASKED_LONG_TILES) {
      ns = w;
      clustered = 0;
    }
  }

  pl->tiles_per_split = (int)((pl->tiles + ns - 1) / ns);
  pl->nsplit = (pl->tiles + pl->tiles_per_split - 1) / pl->tiles_per_split;
  /* The cluster is all the splits (rounding the tiles may have left fewer
   * than planned); 1: no cluster. */
  pl->cluster = clustered ? pl->nsplit : 1;

  if (pl->nsplit == 1 || pl->cluster > 1) {
    pl->ws_ml_off = pl->ws_o_off = 0;
    pl->ws_bytes = 0;
    return;
  }
  const int64_t parts = units * pl->nsplit * pl->rows;
  pl->ws_ml_off = PT_ATTN_WS_COUNTER_BYTES;
  pl->ws_o_off = pl->ws_ml_off + round_up(parts * 8, 256);
  /* O partials are v's width: the kernel writes DV floats a row. */
  pl->ws_bytes = (uint64_t)(pl->ws_o_off + parts * vd * 4);
}

const char *pt_attn_decode_supported(const struct pt_attn_desc *d) {
#ifndef PT_ATTN_HAVE_FATBIN
  (void)d;
  return "kernels not built";
#else
  return pt_attn_plan_check(d);
#endif
}

size_t pt_attn_decode_workspace_bytes(const struct pt_attn_desc *d) {
  if (pt_attn_plan_check(d)) return 0;
  struct pt_attn_plan pl;
  pt_attn_plan_make(d, &pl);
  return (size_t)pl.ws_bytes;
}
