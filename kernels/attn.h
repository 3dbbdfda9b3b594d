/* Neutral attention descriptor and the C ABI of Ponytail's fused decode
 * attention kernels. Nothing framework-specific: hooks/ translate a
 * framework's launch into this, kernels/ run it. Strides are in elements. */
#ifndef PT_ATTN_H
#define PT_ATTN_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pt_dtype { PT_DTYPE_FP16 = 0, PT_DTYPE_BF16 = 1 };

struct pt_attn_desc {
  const void *q;  /* [b, seqlen_q, h, d] through the strides below */
  const void *k;  /* [b, seqlen_k, h_k, d] */
  const void *v;  /* [b, seqlen_k, h_k, d] */
  void *o;        /* [b, seqlen_q, h, d] */
  float *lse;     /* softmax log-sum-exp (natural log), [b, h, seqlen_q] contiguous, or NULL */
  int dtype;      /* enum pt_dtype, same for q, k, v, o */
  int b, h, h_k;  /* batch, query heads, KV heads (h % h_k == 0) */
  int seqlen_q;   /* query rows per (batch, head); decode: 1..16 */
  int seqlen_k;   /* keys per batch entry */
  int head_dim;   /* 64, 128 or 256 */
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  float scale;    /* softmax scale (applied to q.k) */
  int causal;     /* bottom-right aligned causal mask, as FA2 does for seqlen_q <= seqlen_k */
};

#ifdef __cplusplus
}
#endif
#endif
