/* Host side of Ponytail's prefill kernel (kernels/attn_prefill.cu): which
 * descriptors it takes, and the launch. The kernel reads Q, K and V through
 * TMA descriptors (CUtensorMap), encoded here per launch from the
 * descriptor's pointers and strides: a host-only driver call, so the launch
 * stays capture-safe. The module itself is loaded by attn_launch.c. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_module.h"
#include "kernels/attn_plan.h"
#include "kernels/attn_prefill.h"

/* The kernel's parameter block is laid out by nvcc from the same header: the
 * tensor maps must be 128-byte aligned on this side too (C11 _Alignas in
 * cuda.h), or the fields after them would sit at other offsets. */
_Static_assert(_Alignof(CUtensorMap) == 128, "CUtensorMap must be 128-byte aligned");
_Static_assert(offsetof(struct pt_prefill_kparams, o) == 3 * sizeof(CUtensorMap),
               "pt_prefill_kparams: o right after the three tensor maps");
/* The fatbin is built with the default, persistent walk (a 1D grid, pt_prefill_ctas); the
 * other walks are variants of the test library (tests/gpu/checks/prefill.sh) only. */
_Static_assert(PT_PREFILL_PERSISTENT == 1, "the shim's prefill launch assumes the persistent walk");

/* TMA global strides: positive multiples of 16 bytes (8 elements), under 2^40 bytes. */
static inline int pf_tma_stride(int64_t s) { return s > 0 && pt_attn_mult8(s) && s < ((int64_t)1 << 38); }

const char *pt_attn_prefill_supported(const struct pt_attn_desc *d) {
#ifndef PT_ATTN_HAVE_PREFILL_FATBIN
  (void)d;
  return "kernels not built";
#else
  if (!d) return "no descriptor";
  if (d->dtype != PT_DTYPE_FP16 && d->dtype != PT_DTYPE_BF16) return "dtype not fp16/bf16";
  if (d->head_dim != 64 && d->head_dim != 128) return "prefill head_dim not 64/128";
  if (pt_attn_v_dim(d) != d->head_dim) return "prefill head_dim of v differs";
  if (d->b < 1 || d->h < 1 || d->h_k < 1 || d->seqlen_q < 1) return "empty or negative shape";
  if (d->seqlen_k < 1) return "seqlen_k < 1";
  if (d->h % d->h_k != 0) return "h not a multiple of h_k";
  if (d->b > 65535 || d->h > 65535) return "batch or heads > 65535";
  if (d->causal && d->seqlen_q > d->seqlen_k) return "causal with seqlen_q > seqlen_k";
  if (!(d->scale == d->scale) || isinf(d->scale)) return "scale not finite";
  /* The softmax takes each row's max on the raw scores (the scale folded into the exponent
   * afterwards), which keeps their order only for a positive scale. */
  if (!(d->scale > 0.f)) return "scale not positive";
  if (d->bias) return "attention bias (prefill)";
  if (!d->q || !d->k || !d->v || !d->o) return "null pointer";
  if (!pt_attn_contiguous(d->q_dim_stride) || !pt_attn_contiguous(d->k_dim_stride) ||
      !pt_attn_contiguous(d->v_dim_stride) || !pt_attn_contiguous(d->o_dim_stride))
    return "last dim not contiguous";
  if (!pt_attn_aligned16(d->q) || !pt_attn_aligned16(d->k) || !pt_attn_aligned16(d->v) ||
      !pt_attn_aligned16(d->o))
    return "misaligned pointer";
  if (!pf_tma_stride(d->q_batch_stride) || !pf_tma_stride(d->q_row_stride) ||
      !pf_tma_stride(d->q_head_stride) || !pf_tma_stride(d->k_batch_stride) ||
      !pf_tma_stride(d->k_row_stride) || !pf_tma_stride(d->k_head_stride) ||
      !pf_tma_stride(d->v_batch_stride) || !pf_tma_stride(d->v_row_stride) ||
      !pf_tma_stride(d->v_head_stride))
    return "prefill q/k/v stride not a positive multiple of 8";
  if (!pt_attn_mult8(d->o_batch_stride) || !pt_attn_mult8(d->o_row_stride) ||
      !pt_attn_mult8(d->o_head_stride))
    return "stride not a multiple of 8";
  const long long m_blocks = (d->seqlen_q + PT_PREFILL_BM(d->head_dim) - 1) / PT_PREFILL_BM(d->head_dim);
  /* The kernel's walk counts tiles in int and steps by the grid size, which may be the tile
   * count itself (one CTA per tile): keep t + gridDim.x in range. */
  if (m_blocks * d->h * d->b > INT_MAX / 2) return "too many tiles";
  return NULL;
#endif
}

/* A 4D (d, seq, heads, batch) view of a [b, seq, heads, d] tensor with element strides
 * (row, head, batch); box (64, rows, 1, 1), 128-byte swizzle, zeros past the edges: what the
 * kernel's TMA loads expect (kernels/attn_prefill.h). */
static CUresult pf_encode(const struct pt_driver *drv, CUtensorMap *m, const void *base, int bf16,
                          int d, int seq, int heads, int b, int64_t rs, int64_t hs, int64_t bs,
                          unsigned box_rows) {
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)seq, (cuuint64_t)heads, (cuuint64_t)b};
  const cuuint64_t strides[3] = {(cuuint64_t)rs * 2u, (cuuint64_t)hs * 2u, (cuuint64_t)bs * 2u};
  const cuuint32_t box[4] = {PT_PREFILL_SUB, box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return drv->cuTensorMapEncodeTiled(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                     4, (void *)(uintptr_t)base, dims, strides, box, estr,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* pt_prefill_ctas and pt_prefill_skip_pays per shape, remembered: a model sends the same shape
 * once per layer, and for a causal launch of up to 8 tiles per SM the first walks every tile,
 * the second every m-block. A few recent shapes, replaced in turn. */
#define PF_PLANS 8
static struct {
  int key[8]; /* b, h, group, sq, sk, head_dim, causal, sms */
  int ctas, skip;
} pf_plans[PF_PLANS];
static int pf_nplans, pf_next;
static pthread_mutex_t pf_plans_lock = PTHREAD_MUTEX_INITIALIZER;

static int pf_plan(struct pt_prefill_kparams *p, int hd, int sms, int *skip) {
  const int key[8] = {p->b, p->h, p->group, p->sq, p->sk, hd, p->causal, sms};
  pthread_mutex_lock(&pf_plans_lock);
  for (int i = 0; i < pf_nplans; ++i)
    if (!memcmp(pf_plans[i].key, key, sizeof key)) {
      const int ctas = pf_plans[i].ctas;
      *skip = pf_plans[i].skip;
      pthread_mutex_unlock(&pf_plans_lock);
      return ctas;
    }
  pthread_mutex_unlock(&pf_plans_lock);
  const int ctas = pt_prefill_ctas(p, PT_PREFILL_BM(hd), sms);
  *skip = pt_prefill_skip_pays(p, hd);
  pthread_mutex_lock(&pf_plans_lock);
  memcpy(pf_plans[pf_next].key, key, sizeof key);
  pf_plans[pf_next].ctas = ctas;
  pf_plans[pf_next].skip = *skip;
  pf_next = (pf_next + 1) % PF_PLANS;
  if (pf_nplans < PF_PLANS) pf_nplans++;
  pthread_mutex_unlock(&pf_plans_lock);
  return ctas;
}

int pt_attn_prefill_launch(const struct pt_attn_desc *d, void *stream) {
  if (pt_attn_prefill_supported(d)) return CUDA_ERROR_NOT_SUPPORTED;
  const struct pt_driver *drv = pt_attn_driver();
  if (!drv->cuTensorMapEncodeTiled || !drv->cuLaunchKernel) return CUDA_ERROR_NOT_INITIALIZED;
  const int bf16 = d->dtype == PT_DTYPE_BF16, hd = d->head_dim;
  /* The module first: it says the SM count the plan needs, and the plan which of its kernels
   * runs (at d = 64, with or without tile skipping). */
  const CUfunction *fns;
  int sms = 0;
  CUresult r = pt_attn_prefill_functions((CUstream)stream, &fns, &sms);
  if (r != CUDA_SUCCESS) return r;

  struct pt_prefill_kparams p;
  memset(&p, 0, sizeof p);
  r = pf_encode(drv, &p.tq, d->q, bf16, hd, d->seqlen_q, d->h, d->b, d->q_row_stride, d->q_head_stride,
                d->q_batch_stride, PT_PREFILL_BM(hd));
  if (r == CUDA_SUCCESS)
    r = pf_encode(drv, &p.tk, d->k, bf16, hd, d->seqlen_k, d->h_k, d->b, d->k_row_stride,
                  d->k_head_stride, d->k_batch_stride, PT_PREFILL_BN);
  if (r == CUDA_SUCCESS)
    r = pf_encode(drv, &p.tv, d->v, bf16, hd, d->seqlen_k, d->h_k, d->b, d->v_row_stride,
                  d->v_head_stride, d->v_batch_stride, PT_PREFILL_BN);
  if (r != CUDA_SUCCESS) return r;
  p.o = d->o;
  p.lse = d->lse;
  p.o_bs = d->o_batch_stride;
  p.o_rs = d->o_row_stride;
  p.o_hs = d->o_head_stride;
  p.b = d->b;
  p.h = d->h;
  p.h_k = d->h_k;
  p.sq = d->seqlen_q;
  p.sk = d->seqlen_k;
  p.group = d->h / d->h_k;
  p.causal = d->causal != 0;
  p.m_blocks = (d->seqlen_q + PT_PREFILL_BM(hd) - 1) / PT_PREFILL_BM(hd);
  p.tiles = p.m_blocks * d->h * d->b;
  p.sec = pt_prefill_section(d->b, d->h, p.group, d->seqlen_k, hd);
  p.scale_log2 = d->scale * 1.4426950408889634f;
  int skip = 0;
  const int ctas = pf_plan(&p, hd, sms, &skip);
  const int which = hd == 128 ? (bf16 ? PT_PF_BF16_D128 : PT_PF_FP16_D128)
                    : skip    ? (bf16 ? PT_PF_BF16_D64_SKIP : PT_PF_FP16_D64_SKIP)
                              : (bf16 ? PT_PF_BF16_D64 : PT_PF_FP16_D64);
  void *args[1] = {&p};
  return drv->cuLaunchKernel(fns[which], (unsigned)ctas, 1, 1,
                             PT_PREFILL_THREADS(hd), 1, 1, pt_prefill_smem_bytes(hd), (CUstream)stream,
                             args, NULL);
}
