/* Test-only shared library around kernels/attn_launch.c for the GPU scripts
 * (tests/gpu/checks/attn_check.py via ctypes, tests/gpu/checks/attn_sancheck.c).
 *
 * The launcher calls the driver through the table handed to
 * pt_attn_set_driver (struct pt_driver, common/driver.h), which the shim
 * normally fills and hands over; here the table is filled by linking -lcuda and
 * resolving every member with cuGetProcAddress. The exported helpers take raw device
 * pointers and element strides so Python needs no mirror of the descriptor. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_plan.h"
#include "common/driver.h"

static struct pt_driver pt_drv;

/* The bias every following descriptor carries (pt_test_set_bias; NULL: none),
 * so the entry points below keep their signatures. */
static struct {
  const void *p;
  int64_t bs, hs, rs;
} pt_test_bias;

bool pt_real_driver(void); /* also called by attn_sancheck.c */
bool pt_real_driver(void) {
  static int done;
  if (done) return done > 0;
  if (cuInit(0) != CUDA_SUCCESS) {
    done = -1;
    return false;
  }
#define PT_FILL(name, ver)                                                                  \
  {                                                                                         \
    void *fp = NULL;                                                                        \
    CUdriverProcAddressQueryResult st;                                                      \
    if (cuGetProcAddress(#name, &fp, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS) \
      memcpy(&pt_drv.name, &fp, sizeof fp);                                                 \
  }
  PT_DRIVER_FUNCS(PT_FILL)
#undef PT_FILL
  pt_attn_set_driver(&pt_drv);
  done = 1;
  return true;
}

/* strides: q_b, q_r, q_h, k_b, k_r, k_h, v_b, v_r, v_h, o_b, o_r, o_h; hd: q's and k's head
 * size, dv: v's and o's (0 or hd: the same). Every entry point below takes dv last, so that
 * attn_check.py passing it to a library built from an older tree (ATTN_VARIANTS name@DIR) leaves
 * that library's own arguments where it reads them. */
static void fill_desc(struct pt_attn_desc *d, const void *q, const void *k, const void *v,
                      void *o, float *lse, int dtype, int b, int h, int h_k, int sq, int sk,
                      int hd, const int64_t *st, float scale, int causal, int dv) {
  memset(d, 0, sizeof *d);
  d->q = q;
  d->k = k;
  d->v = v;
  d->o = o;
  d->lse = lse;
  d->dtype = dtype;
  d->b = b;
  d->h = h;
  d->h_k = h_k;
  d->seqlen_q = sq;
  d->seqlen_k = sk;
  d->head_dim = hd;
  d->v_head_dim = dv;
  d->q_batch_stride = st[0];
  d->q_row_stride = st[1];
  d->q_head_stride = st[2];
  d->k_batch_stride = st[3];
  d->k_row_stride = st[4];
  d->k_head_stride = st[5];
  d->v_batch_stride = st[6];
  d->v_row_stride = st[7];
  d->v_head_stride = st[8];
  d->o_batch_stride = st[9];
  d->o_row_stride = st[10];
  d->o_head_stride = st[11];
  d->scale = scale;
  d->causal = causal;
  d->bias = pt_test_bias.p;
  d->bias_batch_stride = pt_test_bias.bs;
  d->bias_head_stride = pt_test_bias.hs;
  d->bias_row_stride = pt_test_bias.rs;
}

/* Masked cases: the additive bias (q's dtype, keys contiguous, element
 * strides per batch, query head, query row) of the following calls. */
__attribute__((visibility("default"))) void pt_test_set_bias(const void *bias, int64_t bs, int64_t hs,
                                                             int64_t rs) {
  pt_test_bias.p = bias;
  pt_test_bias.bs = bs;
  pt_test_bias.hs = hs;
  pt_test_bias.rs = rs;
}

__attribute__((visibility("default"))) int pt_test_init(void) {
  return pt_real_driver() ? 0 : -1;
}

__attribute__((visibility("default"))) const char *
pt_test_supported(const void *q, const void *k, const void *v, void *o, float *lse, int dtype,
                  int b, int h, int h_k, int sq, int sk, int hd, const int64_t *st, float scale,
                  int causal, int dv) {
  struct pt_attn_desc d;
  fill_desc(&d, q, k, v, o, lse, dtype, b, h, h_k, sq, sk, hd, st, scale, causal, dv);
  const char *why = pt_attn_decode_supported(&d);
  return why ? why : "";
}

__attribute__((visibility("default"))) uint64_t
pt_test_ws_bytes(const void *q, const void *k, const void *v, void *o, float *lse, int dtype,
                 int b, int h, int h_k, int sq, int sk, int hd, const int64_t *st, float scale,
                 int causal, int dv) {
  struct pt_attn_desc d;
  fill_desc(&d, q, k, v, o, lse, dtype, b, h, h_k, sq, sk, hd, st, scale, causal, dv);
  return pt_attn_decode_workspace_bytes(&d);
}

__attribute__((visibility("default"))) int pt_test_ws_prepare(void *ws, uint64_t bytes,
                                                              void *stream) {
  return pt_attn_workspace_prepare(ws, bytes, stream);
}

__attribute__((visibility("default"))) int
pt_test_decode(const void *q, const void *k, const void *v, void *o, float *lse, int dtype, int b,
               int h, int h_k, int sq, int sk, int hd, const int64_t *st, float scale, int causal,
               void *ws, uint64_t ws_bytes, void *stream, int dv) {
  struct pt_attn_desc d;
  fill_desc(&d, q, k, v, o, lse, dtype, b, h, h_k, sq, sk, hd, st, scale, causal, dv);
  return pt_attn_decode_launch(&d, ws, ws_bytes, stream);
}

/* The plan of a decode launch: its split count and cluster size (1: none). */
__attribute__((visibility("default"))) void
pt_test_plan(const void *q, const void *k, const void *v, void *o, float *lse, int dtype, int b, int h,
             int h_k, int sq, int sk, int hd, const int64_t *st, float scale, int causal, int *nsplit,
             int *cluster, int dv) {
  struct pt_attn_desc d;
  fill_desc(&d, q, k, v, o, lse, dtype, b, h, h_k, sq, sk, hd, st, scale, causal, dv);
  *nsplit = *cluster = 0;
  if (pt_attn_plan_check(&d)) return;
  struct pt_attn_plan pl;
  pt_attn_plan_make(&d, &pl);
  *nsplit = pl.nsplit;
  *cluster = pl.cluster;
}

/* ref O strides in o_strides as for decode; test O contiguous [b, sq, h, O's head size]: dv
 * under a q/k head size hd when dv is neither 0 nor hd (MLA), else hd. */
__attribute__((visibility("default"))) int
pt_test_compare(const void *ref_o, float *ref_lse, const void *test_o, const float *test_lse,
                int dtype, int b, int h, int sq, int hd, const int64_t *o_strides, float *result,
                void *stream, int dv) {
  struct pt_attn_desc d;
  memset(&d, 0, sizeof d);
  d.o = (void *)(uintptr_t)ref_o;
  d.lse = ref_lse;
  d.dtype = dtype;
  d.b = b;
  d.h = h;
  d.h_k = h;
  d.seqlen_q = sq;
  d.head_dim = hd;
  d.v_head_dim = dv;
  d.o_batch_stride = o_strides[0];
  d.o_row_stride = o_strides[1];
  d.o_head_stride = o_strides[2];
  return pt_attn_compare_launch(&d, test_o, test_lse, result, stream);
}

/* Timing experiments only: divide the planned split count by div (default 1). */
__attribute__((visibility("default"))) void pt_test_set_split_div(int div) {
  pt_attn_plan_split_div = div;
}

/* Timing experiments only: multiply the workspace path's split count by mul (default 1). */
__attribute__((visibility("default"))) void pt_test_set_split_mul(int mul) {
  pt_attn_plan_split_mul = mul;
}

/* Timing and correctness experiments: the largest split count merged in a
 * cluster (1 = every split launch through the workspace). */
__attribute__((visibility("default"))) void pt_test_set_cluster_max(int n) {
  pt_attn_plan_cluster_max = n;
}

/* Timing experiments only: launch with programmatic dependent launch (1) or not (0). */
__attribute__((visibility("default"))) void pt_test_set_pdl(int on) {
  pt_attn_plan_pdl = on;
}

/* Timing experiments only: the masked short-split rule of the planner on (1, default) or off. */
__attribute__((visibility("default"))) void pt_test_set_masked_short(int on) {
  pt_attn_plan_masked_short = on;
}
