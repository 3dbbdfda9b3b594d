/* CPU tests of kernels/attn_plan.c: every refusal reason of
 * pt_attn_decode_supported, the split plan's invariants over a sweep of
 * shapes, the workspace layout, and (when nvcc built it) the embedded
 * fatbin's container magic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/attn.h"
#include "kernels/attn_kparams.h"
#include "kernels/attn_plan.h"

#include "tests/unit/kernels/hf_desc.h"

static void test_valid_shapes(void **state) {
  (void)state;
  static const int dims[] = {64, 80, 96, 128, 256};
  for (int i = 0; i < 5; ++i) {
    struct pt_attn_desc d = hf_desc(8, 32, 8, 4100, dims[i]);
    assert_null(pt_attn_plan_check(&d));
    d.dtype = PT_DTYPE_FP16;
    assert_null(pt_attn_plan_check(&d));
  }
  /* ngroups-swapped: seqlen_q = 16 query heads of one KV head, h = h_k. */
  struct pt_attn_desc d = hf_desc(4, 8, 8, 100, 128);
  d.seqlen_q = 16;
  assert_null(pt_attn_plan_check(&d));
  /* causal with seqlen_q == seqlen_k; one key. */
  d = hf_desc(1, 4, 4, 4, 64);
  d.seqlen_q = 4;
  d.causal = 1;
  assert_null(pt_attn_plan_check(&d));
  d = hf_desc(1, 1, 1, 1, 128);
  assert_null(pt_attn_plan_check(&d));
  /* dim strides 1 and 0 both mean contiguous; LSE may be NULL. */
  d.q_dim_stride = 1;
  d.o_dim_stride = 0;
  d.lse = NULL;
  assert_null(pt_attn_plan_check(&d));
  /* v's head size: 0 and head_dim itself both mean equal sizes; MLA's 192 / 128 pair. */
  for (int i = 0; i < 5; ++i) {
    d = hf_desc(8, 32, 8, 4100, dims[i]);
    d.v_head_dim = dims[i];
    assert_null(pt_attn_plan_check(&d));
  }
  d = mla_desc(8, 32, 8, 4100);
  assert_null(pt_attn_plan_check(&d));
  d.dtype = PT_DTYPE_FP16;
  assert_null(pt_attn_plan_check(&d));
  d = mla_desc(2, 128, 128, 1000);  /* DeepSeek-V3: 128 heads, no GQA */
  d.seqlen_q = 16;
  assert_null(pt_attn_plan_check(&d));
}

#define REFUSE(expr_, reason_)                                     \
  do {                                                             \
    struct pt_attn_desc d = hf_desc(8, 32, 8, 4100, 128);          \
    expr_;                                                         \
    const char *why = pt_attn_plan_check(&d);                      \
    assert_non_null(why);                                          \
    assert_string_equal(why, reason_);                             \
    assert_int_equal(pt_attn_decode_workspace_bytes(&d), 0);       \
  } while (0)

static void test_reasons(void **state) {
  (void)state;
  assert_string_equal(pt_attn_plan_check(NULL), "no descriptor");
  REFUSE(d.dtype = 7, "dtype not fp16/bf16");
  REFUSE(d.head_dim = 32, "head_dim not 64/80/96/128/256");
  REFUSE(d.head_dim = 72, "head_dim not 64/80/96/128/256");
  REFUSE(d.head_dim = 112, "head_dim not 64/80/96/128/256");
  REFUSE(d.head_dim = 0, "head_dim not 64/80/96/128/256");
  REFUSE(d.head_dim = 512, "head_dim not 64/80/96/128/256");
  /* Unequal q/k and v sizes: MLA's pair only; 192 with itself is no kernel either. */
  REFUSE((d.head_dim = 192, d.v_head_dim = 192), "head_dim not 64/80/96/128/256");
  REFUSE(d.head_dim = 192, "head_dim not 64/80/96/128/256");
  REFUSE(d.v_head_dim = 64, "head_dim q/k 192 with v 128 only");
  REFUSE(d.v_head_dim = 192, "head_dim q/k 192 with v 128 only");
  REFUSE(d.v_head_dim = -1, "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 192, d.v_head_dim = 64), "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 192, d.v_head_dim = 96), "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 192, d.v_head_dim = 256), "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 256, d.v_head_dim = 128), "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 64, d.v_head_dim = 128), "head_dim q/k 192 with v 128 only");
  REFUSE((d.head_dim = 96, d.v_head_dim = 80), "head_dim q/k 192 with v 128 only");
  REFUSE(d.b = 0, "empty or negative shape");
  REFUSE(d.h_k = -1, "empty or negative shape");
  REFUSE(d.seqlen_q = 0, "empty or negative shape");
  REFUSE(d.seqlen_k = 0, "seqlen_k < 1");
  REFUSE(d.h = 30, "h not a multiple of h_k");
  REFUSE(d.seqlen_q = 17, "seqlen_q > 16");
  REFUSE((d.h = 136, d.h_k = 8), "rows per kv head > 16");       /* G = 17 */
  REFUSE((d.seqlen_q = 2, d.h = 72), "rows per kv head > 16");   /* 2 x 9 */
  REFUSE((d.b = 65536), "batch or kv heads > 65535");
  REFUSE((d.causal = 1, d.seqlen_q = 8, d.h = 8, d.seqlen_k = 7), "causal with seqlen_q > seqlen_k");
  REFUSE(d.scale = 1.0f / 0.0f, "scale not finite");
  REFUSE(d.scale = 0.0f / 0.0f, "scale not finite");
  REFUSE(d.v = NULL, "null pointer");
  REFUSE(d.k_dim_stride = 2, "last dim not contiguous");
  REFUSE(d.o_dim_stride = -1, "last dim not contiguous");
  REFUSE(d.q = FAKE(0x10008), "misaligned pointer");
  REFUSE(d.o = FAKE(0x40002), "misaligned pointer");
  REFUSE(d.lse = FAKE(0x50002), "misaligned pointer");
  REFUSE(d.k_row_stride = 132, "stride not a multiple of 8");
  REFUSE(d.o_head_stride = 4, "stride not a multiple of 8");
  /* The bias is copied 8 keys (16 bytes) at a time. */
  REFUSE((d.bias = FAKE(0x60008), d.bias_row_stride = 4104), "bias not 16-byte aligned");
  REFUSE((d.bias = FAKE(0x60000), d.seqlen_q = 2, d.bias_row_stride = 4102), "bias not 16-byte aligned");
  REFUSE((d.bias = FAKE(0x60000), d.bias_head_stride = 4), "bias not 16-byte aligned");
  REFUSE((d.bias = FAKE(0x60000), d.bias_batch_stride = 41044), "bias not 16-byte aligned");
  /* a stride along an extent-1 dimension is never applied: any value passes */
  {
    struct pt_attn_desc e = hf_desc(1, 1, 1, 4100, 128);  /* b = h = 1, seqlen_q = 1 */
    e.bias = FAKE(0x60000);
    e.bias_batch_stride = 4101;
    e.bias_head_stride = 3;
    e.bias_row_stride = 4101;
    assert_null(pt_attn_plan_check(&e));
    e.seqlen_q = 2;
    e.q_row_stride = 128;
    e.o_row_stride = 128;
    assert_string_equal(pt_attn_plan_check(&e), "bias not 16-byte aligned");
  }
}

/* A bias (masked decode) with strides a multiple of 8, broadcast (stride 0)
 * or not, is accepted and changes neither the split plan nor the workspace;
 * only the shared memory grows by the staged bias rows: one per query row
 * when broadcast over heads, one per CTA row otherwise. */
static void test_bias_accepted(void **state) {
  (void)state;
  struct pt_attn_desc d = hf_desc(8, 32, 8, 4100, 128);
  d.seqlen_q = 2;  /* rows = 2 x 4 = 8 */
  const size_t ws = pt_attn_decode_workspace_bytes(&d);
  struct pt_attn_plan a, b, c;
  memset(&a, 0, sizeof a);  /* the padding too: the plans are compared bytewise */
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  pt_attn_plan_make(&d, &a);
  assert_int_equal(a.bias_rows, 0);
  d.bias = FAKE(0x70000);
  d.bias_batch_stride = 4104;
  d.bias_head_stride = 0;
  d.bias_row_stride = 4104;
  assert_null(pt_attn_plan_check(&d));
  pt_attn_plan_make(&d, &b);
  assert_int_equal(b.bias_rows, 2);
  d.bias_head_stride = 4104;
  assert_null(pt_attn_plan_check(&d));
  pt_attn_plan_make(&d, &c);
  assert_int_equal(c.bias_rows, 8);
  /* d128: 3 stages of bias_rows x (64 + 8) keys x 2 bytes */
  assert_int_equal(b.smem_bytes, a.smem_bytes + 3u * 2u * PT_ATTN_BIAS_LD * 2u);
  assert_int_equal(c.smem_bytes, a.smem_bytes + 3u * 8u * PT_ATTN_BIAS_LD * 2u);
  assert_true(c.smem_bytes <= pt_attn_plan_smem(128));
  b.smem_bytes = c.smem_bytes = a.smem_bytes;
  b.bias_rows = c.bias_rows = 0;
  assert_memory_equal(&a, &b, sizeof a);
  assert_memory_equal(&a, &c, sizeof a);
  assert_int_equal(pt_attn_decode_workspace_bytes(&d), ws);
}

static void test_supported_build(void **state) {
  (void)state;
  struct pt_attn_desc d = hf_desc(8, 32, 8, 4100, 128);
#ifdef PT_ATTN_HAVE_FATBIN
  assert_null(pt_attn_decode_supported(&d));
  d.head_dim = 80;
  assert_null(pt_attn_decode_supported(&d));
  d.head_dim = 96;
  assert_null(pt_attn_decode_supported(&d));
  d.head_dim = 72;
  assert_string_equal(pt_attn_decode_supported(&d), "head_dim not 64/80/96/128/256");
  d = mla_desc(8, 32, 8, 4100);
  assert_null(pt_attn_decode_supported(&d));
  d.v_head_dim = 64;
  assert_string_equal(pt_attn_decode_supported(&d), "head_dim q/k 192 with v 128 only");
#else
  assert_string_equal(pt_attn_decode_supported(&d), "kernels not built");
#endif
}

/* Invariants of the plan over a sweep: the splits tile the keys exactly, no
 * split is empty, a split launch fits the counter head of the workspace and
 * the per-split weight table, the regions do not overlap and are aligned. */
static void test_plan_sweep(void **state) {
  (void)state;
  static const int bs[] = {1, 2, 3, 8, 17, 32, 64, 256, 4096};
  static const int hks[] = {1, 2, 4, 8, 32};
  static const int gs[] = {1, 2, 4, 8, 16};
  static const int sks[] = {1, 17, 63, 64, 65, 128, 129, 1000, 4100, 32768, 131072, 1 << 20};
  static const int dims[] = {64, 80, 96, 128, 256};
  for (size_t ib = 0; ib < sizeof bs / sizeof *bs; ++ib)
    for (size_t ih = 0; ih < sizeof hks / sizeof *hks; ++ih)
      for (size_t ig = 0; ig < sizeof gs / sizeof *gs; ++ig)
        for (size_t is = 0; is < sizeof sks / sizeof *sks; ++is)
          for (size_t id = 0; id < sizeof dims / sizeof *dims; ++id) {
            struct pt_attn_desc d =
                hf_desc(bs[ib], hks[ih] * gs[ig], hks[ih], sks[is], dims[id]);
            assert_null(pt_attn_plan_check(&d));
            struct pt_attn_plan pl;
            pt_attn_plan_make(&d, &pl);
            const int64_t units = (int64_t)bs[ib] * hks[ih];
            assert_int_equal(pl.group, gs[ig]);
            assert_int_equal(pl.rows, gs[ig]);
            assert_int_equal(pl.tiles, (sks[is] + PT_ATTN_BK - 1) / PT_ATTN_BK);
            assert_true(pl.nsplit >= 1 && pl.nsplit <= PT_ATTN_MAX_SPLITS);
            assert_true(pl.tiles_per_split >= 1);
            assert_true((int64_t)pl.nsplit * pl.tiles_per_split >= pl.tiles);
            assert_true((int64_t)(pl.nsplit - 1) * pl.tiles_per_split < pl.tiles);
            assert_true(pl.smem_bytes <= 227u * 1024u);
            assert_int_equal(pt_attn_plan_dims[pl.dkind], dims[id]);
            size_t ws = pt_attn_decode_workspace_bytes(&d);
            assert_int_equal(ws, pl.ws_bytes);
            /* A cluster is all the splits of a unit (at most
             * PT_ATTN_PLAN_CLUSTER), one CTA per SM at most, and needs no
             * workspace. */
            assert_true(pl.cluster == 1 || pl.cluster == pl.nsplit);
            assert_true(pl.cluster <= PT_ATTN_PLAN_CLUSTER);
            if (pl.cluster > 1) assert_true(units * pl.nsplit <= PT_ATTN_PLAN_SMS);
            if (pl.nsplit == 1 || pl.cluster > 1) {
              assert_int_equal(ws, 0);
              continue;
            }
            assert_true(units <= PT_ATTN_MAX_COUNTERS);
            assert_true(units * 4 <= PT_ATTN_WS_COUNTER_BYTES);
            assert_int_equal(pl.ws_ml_off, PT_ATTN_WS_COUNTER_BYTES);
            const int64_t parts = units * pl.nsplit * pl.rows;
            assert_true(pl.ws_o_off >= pl.ws_ml_off + parts * 8);
            assert_int_equal(pl.ws_o_off % 16, 0);
            assert_int_equal(ws, pl.ws_o_off + parts * dims[id] * 4);
          }
}

/* d (a padded head size) and r (the kernel's own size it runs on), masked or not alike: d is
 * accepted, and the two plans *p and *q split, cluster, stage and place the workspace alike. */
static void plans_alike(struct pt_attn_desc *d, struct pt_attn_desc *r, int masked, struct pt_attn_plan *p,
                        struct pt_attn_plan *q) {
  if (masked) {
    d->bias = r->bias = FAKE(0x60000);
    d->bias_batch_stride = r->bias_batch_stride = (d->seqlen_k + 7) / 8 * 8;
  }
  assert_null(pt_attn_plan_check(d));
  pt_attn_plan_make(d, p);
  pt_attn_plan_make(r, q);
  assert_int_equal(p->nsplit, q->nsplit);
  assert_int_equal(p->tiles_per_split, q->tiles_per_split);
  assert_int_equal(p->cluster, q->cluster);
  assert_int_equal(p->smem_bytes, q->smem_bytes);
  assert_int_equal(p->bias_rows, q->bias_rows);
  assert_int_equal(p->ws_ml_off, q->ws_ml_off);
  assert_int_equal(p->ws_o_off, q->ws_o_off);
}

/* head_dim 80 and 96 run on the d = 128 kernel, padded: the same shared memory, stages and
 * occupancy, hence the same split plan, as d = 128 for every shape (masked or not); only the
 * workspace's O partials are their real width (the kernel writes DR floats a row). */
static void test_plan_padded(void **state) {
  (void)state;
  assert_int_equal(pt_attn_plan_smem(80), pt_attn_plan_smem(128));
  assert_int_equal(pt_attn_plan_smem(96), pt_attn_plan_smem(128));
  static const int bs[] = {1, 2, 8, 32, 64};
  static const int sks[] = {1, 65, 1000, 4100, 32768, 131072};
  static const int gs[] = {1, 3, 8, 16};
  static const int pads[] = {80, 96};
  for (size_t ib = 0; ib < sizeof bs / sizeof *bs; ++ib)
    for (size_t is = 0; is < sizeof sks / sizeof *sks; ++is)
      for (size_t ig = 0; ig < sizeof gs / sizeof *gs; ++ig)
        for (int m = 0; m < 2; ++m)
          for (size_t ip = 0; ip < 2; ++ip) {
            const int hd = pads[ip];
            struct pt_attn_desc d = hf_desc(bs[ib], 4 * gs[ig], 4, sks[is], hd);
            struct pt_attn_desc r = hf_desc(bs[ib], 4 * gs[ig], 4, sks[is], 128);
            struct pt_attn_plan p, q;
            plans_alike(&d, &r, m, &p, &q);
            assert_int_equal(p.dkind, ip == 0 ? 1 : 2);
            assert_int_equal(q.dkind, 3);
            const int64_t parts = (int64_t)bs[ib] * 4 * p.nsplit * p.rows;
            if (p.ws_bytes)
              assert_int_equal(p.ws_bytes, p.ws_o_off + parts * hd * 4);
            else
              assert_int_equal(q.ws_bytes, 0);
            assert_int_equal(pt_attn_decode_workspace_bytes(&d), p.ws_bytes);
          }
}

/* q/k 192 with v 128 (MLA) runs on the d = 256 kernel, padded: the same shared memory, stages
 * and occupancy, hence the same split plan, as d = 256 for every shape (masked or not, GQA or
 * DeepSeek-V3's 128 heads of their own); the workspace's O partials are v's width (the kernel
 * writes DV floats a row). */
static void test_plan_mla(void **state) {
  (void)state;
  assert_int_equal(pt_attn_plan_smem(192), pt_attn_plan_smem(256));
  assert_int_equal(pt_attn_plan_dims[5], 192);
  assert_int_equal(pt_attn_plan_vdims[5], 128);
  for (int i = 0; i < 5; ++i) assert_int_equal(pt_attn_plan_vdims[i], pt_attn_plan_dims[i]);
  static const int bs[] = {1, 2, 8, 32, 64};
  static const int sks[] = {1, 17, 65, 1000, 4100, 32768, 131072};
  static const int hks[] = {1, 4, 128};
  static const int gs[] = {1, 3, 8, 16};
  for (size_t ib = 0; ib < sizeof bs / sizeof *bs; ++ib)
    for (size_t is = 0; is < sizeof sks / sizeof *sks; ++is)
      for (size_t ih = 0; ih < sizeof hks / sizeof *hks; ++ih)
        for (size_t ig = 0; ig < sizeof gs / sizeof *gs; ++ig)
          for (int m = 0; m < 2; ++m) {
            const int hk = hks[ih], h = hk * gs[ig];
            struct pt_attn_desc d = mla_desc(bs[ib], h, hk, sks[is]);
            struct pt_attn_desc r = hf_desc(bs[ib], h, hk, sks[is], 256);
            struct pt_attn_plan p, q;
            plans_alike(&d, &r, m, &p, &q);
            assert_int_equal(p.dkind, 5);
            assert_int_equal(q.dkind, 4);
            const int64_t parts = (int64_t)bs[ib] * hk * p.nsplit * p.rows;
            if (p.ws_bytes) {
              assert_int_equal(p.ws_bytes, p.ws_o_off + parts * 128 * 4);
              assert_int_equal(q.ws_bytes, q.ws_o_off + parts * 256 * 4);
            } else {
              assert_int_equal(q.ws_bytes, 0);
            }
            assert_int_equal(pt_attn_decode_workspace_bytes(&d), p.ws_bytes);
          }
}

/* The shapes of the timing table: the grid should fill the GPU once. */
static void test_plan_fills_gpu(void **state) {
  (void)state;
  struct pt_attn_plan pl;
  struct pt_attn_desc d = hf_desc(1, 8, 8, 32768, 128);
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 32);               /* long splits: workspace path, 256 CTAs */
  assert_int_equal(pl.cluster, 1);
  pt_attn_plan_cluster_max = 16;                 /* allowed up to 16: 8 units x 16 = 128 CTAs */
  d = hf_desc(1, 8, 8, 32768, 128);
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 16);
  assert_int_equal(pl.cluster, 16);
  assert_int_equal(pl.ws_bytes, 0);
  d = hf_desc(1, 64, 8, 1024, 128);              /* short splits: 8 x 2 tiles */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 8);
  assert_int_equal(pl.cluster, 8);
  assert_int_equal(pl.tiles_per_split, 2);
  d = hf_desc(8, 32, 8, 4096, 128);              /* 64 units x 2 = 128 CTAs */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 2);
  d = hf_desc(8, 16, 4, 4100, 128);              /* workload W's layer: 32 units x 4 */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 4);
  assert_int_equal(pl.cluster, 4);
  d = hf_desc(6, 48, 8, 32768, 128);             /* 48 x 2 = 96 CTAs, long splits: workspace */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.nsplit, 5);                /* 264 slots / 48 units */
  assert_true(pl.ws_bytes > PT_ATTN_WS_COUNTER_BYTES);
  d = hf_desc(32, 32, 8, 4096, 128);
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 1);                /* 256 units already fill it */
  assert_int_equal(pl.cluster, 1);
}

/* A mask (bias) with long splits: twice the workspace path's splits, no
 * cluster (the padded rows' CTAs finish early; more CTAs than one wave let
 * the hardware refill their SMs), when each split still holds 64 tiles or
 * more. Shorter splits and unmasked launches keep their plans, and so does a
 * launch under the split test knobs. */
static struct pt_attn_desc masked(struct pt_attn_desc d) {
  d.bias = FAKE(0x60000);
  d.bias_batch_stride = d.seqlen_k + 8 - d.seqlen_k % 8;
  return d;
}
static void test_plan_masked_short(void **state) {
  (void)state;
  struct pt_attn_plan pl;
  struct pt_attn_desc d = hf_desc(1, 8, 8, 4096, 128);
  pt_attn_plan_make(&d, &pl);                     /* unmasked: a cluster of 8 splits of 8 tiles */
  assert_int_equal(pl.nsplit, 8);
  assert_int_equal(pl.cluster, 8);
  d = masked(d);
  pt_attn_plan_make(&d, &pl);                     /* masked: the workspace plan, 32 splits */
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.nsplit, 32);
  assert_int_equal(pl.tiles_per_split, 2);
  assert_true(pl.ws_bytes > PT_ATTN_WS_COUNTER_BYTES);
  assert_int_equal(pt_attn_decode_workspace_bytes(&d), pl.ws_bytes);
  pt_attn_plan_masked_short = 0;                  /* the knob: the cluster again */
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_masked_short = 1;
  assert_int_equal(pl.cluster, 8);
  d = masked(hf_desc(1, 64, 8, 4096, 128));       /* 8 rows per KV head: 16 splits */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.nsplit, 16);
  d = masked(hf_desc(2, 8, 8, 4096, 128));        /* 128 CTAs of 8 tiles -> 16 splits */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.nsplit, 16);
  d = masked(hf_desc(1, 8, 8, 2048, 128));        /* 4 tiles per cluster split: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.cluster, 8);
  d = masked(hf_desc(8, 8, 8, 1024, 128));        /* the workspace plan is one split: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 2);
  d = masked(hf_desc(8, 8, 8, 4096, 128));        /* 32 tiles per split: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.cluster, 2);
  d = masked(hf_desc(1, 8, 8, 4096, 128));        /* clusters off: the workspace plan as before */
  pt_attn_plan_cluster_max = 1;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 32);
}
static void test_plan_masked_long(void **state) {
  (void)state;
  struct pt_attn_plan pl;
  struct pt_attn_desc d = hf_desc(8, 8, 8, 32768, 128);
  pt_attn_plan_make(&d, &pl);                     /* unmasked: 64 units x 2, cluster */
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 2);
  d = masked(d);
  assert_null(pt_attn_plan_check(&d));
  pt_attn_plan_make(&d, &pl);                     /* masked: 264 / 64 = 4 splits, x 2 */
  assert_int_equal(pl.nsplit, 8);
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.tiles_per_split, 64);
  assert_true(pl.ws_bytes > PT_ATTN_WS_COUNTER_BYTES);
  assert_int_equal(pt_attn_decode_workspace_bytes(&d), pl.ws_bytes);
  d = masked(hf_desc(32, 8, 8, 32768, 128));      /* 256 units, one split each unmasked */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 1);
  d = masked(hf_desc(64, 8, 8, 32768, 128));      /* 512 units, past one wave: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 1);
  d = masked(hf_desc(8, 64, 8, 32768, 128));      /* 8 rows per KV head: 4 splits x 2 */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 8);
  assert_int_equal(pl.cluster, 1);
  d = masked(hf_desc(8, 8, 8, 32768, 128));       /* clusters off: the same plan */
  pt_attn_plan_cluster_max = 1;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 8);
  d = masked(hf_desc(1, 1, 1, 1 << 20, 128));     /* the split cap */
  pt_attn_plan_make(&d, &pl);
  assert_true(pl.nsplit <= PT_ATTN_MAX_SPLITS);
  assert_true(pl.tiles_per_split >= PT_ATTN_MASKED_LONG_TILES);
  d = masked(hf_desc(8, 8, 8, 16384, 128));       /* 8 splits would hold 32 tiles: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 2);
  d = masked(hf_desc(8, 8, 8, 4096, 128));        /* 32 tiles per split: cluster kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 2);
  assert_int_equal(pl.cluster, 2);
  d = masked(hf_desc(32, 8, 8, 4096, 128));       /* 64 tiles: one split kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 1);
  d = masked(hf_desc(1, 8, 8, 32768, 128));       /* 32 splits of 16 tiles: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 32);
  d = masked(hf_desc(2048, 8, 8, 32768, 128));    /* more units than counters: kept */
  pt_attn_plan_make(&d, &pl);
  assert_int_equal(pl.nsplit, 1);
  assert_int_equal(pl.ws_bytes, 0);
  d = masked(hf_desc(8, 8, 8, 32768, 128));       /* a split knob set: the knob plans */
  pt_attn_plan_cluster_max = 1;
  pt_attn_plan_split_mul = 4;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_split_mul = 1;
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 16);
}

/* The cluster knob: at 1 every split launch uses the workspace (the plan of
 * the workspace path: 2 CTAs per SM). */
static void test_plan_cluster_knob(void **state) {
  (void)state;
  struct pt_attn_plan pl;
  struct pt_attn_desc d = hf_desc(8, 32, 8, 4096, 128);
  pt_attn_plan_cluster_max = 1;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 4);
  assert_int_equal(pl.cluster, 1);
  assert_true(pl.ws_bytes > PT_ATTN_WS_COUNTER_BYTES);
  assert_int_equal(pt_attn_decode_workspace_bytes(&d), 0); /* knob restored: cluster again */
  d = hf_desc(1, 64, 8, 1024, 128);
  pt_attn_plan_cluster_max = 1;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  assert_int_equal(pl.nsplit, 8);                /* 8 rows: halved, not under 8 */
  assert_int_equal(pl.cluster, 1);
  /* A split divisor that leaves one split of a cluster plan: no cluster, no workspace. */
  d = hf_desc(8, 32, 8, 4096, 128);
  pt_attn_plan_split_div = 2;
  pt_attn_plan_make(&d, &pl);
  pt_attn_plan_split_div = 1;
  assert_int_equal(pl.nsplit, 1);
  assert_int_equal(pl.cluster, 1);
  assert_int_equal(pl.ws_bytes, 0);
}

#ifdef PT_ATTN_HAVE_FATBIN
extern const unsigned char pt_attn_fatbin[];
extern const size_t pt_attn_fatbin_size;
static void test_fatbin_embedded(void **state) {
  (void)state;
  assert_true(pt_attn_fatbin_size > 16);
  assert_int_equal(((uintptr_t)pt_attn_fatbin) & 7, 0);
  /* fatbin container magic 0xBA55ED50, little endian */
  assert_int_equal(pt_attn_fatbin[0], 0x50);
  assert_int_equal(pt_attn_fatbin[1], 0xED);
  assert_int_equal(pt_attn_fatbin[2], 0x55);
  assert_int_equal(pt_attn_fatbin[3], 0xBA);
  /* every kernel the loader looks up is in it (names appear in the cubin's
   * symbol table and the PTX) */
  static const char *names[] = {"pt_attn_decode_bf16_d64", "pt_attn_decode_fp16_d256",
                                "pt_attn_decode_bf16_d128_kt", "pt_attn_decode_fp16_d64_kt",
                                "pt_attn_decode_bf16_d80", "pt_attn_decode_fp16_d96",
                                "pt_attn_decode_bf16_d96_kt", "pt_attn_decode_fp16_d80_kt",
                                "pt_attn_decode_bf16_d192v128", "pt_attn_decode_fp16_d192v128",
                                "pt_attn_decode_bf16_d192v128_kt", "pt_attn_decode_fp16_d192v128_kt",
                                "pt_attn_compare_bf16", "pt_attn_compare_fp16",
                                "pt_attn_fault_bf16",   "pt_attn_fault_fp16"};
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
    const size_t n = strlen(names[i]);
    int found = 0;
    for (size_t j = 0; j + n <= pt_attn_fatbin_size && !found; ++j)
      found = memcmp(pt_attn_fatbin + j, names[i], n) == 0;
    assert_true(found);
  }
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_valid_shapes),
    cmocka_unit_test(test_reasons),
    cmocka_unit_test(test_bias_accepted),
    cmocka_unit_test(test_supported_build),
    cmocka_unit_test(test_plan_sweep),
    cmocka_unit_test(test_plan_padded),
    cmocka_unit_test(test_plan_mla),
    cmocka_unit_test(test_plan_fills_gpu),
    cmocka_unit_test(test_plan_cluster_knob),
    cmocka_unit_test(test_plan_masked_long),
    cmocka_unit_test(test_plan_masked_short),
#ifdef PT_ATTN_HAVE_FATBIN
    cmocka_unit_test(test_fatbin_embedded),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
