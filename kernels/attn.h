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
  const void *v;  /* [b, seqlen_k, h_k, dv] (dv: pt_attn_v_dim, below) */
  void *o;        /* [b, seqlen_q, h, dv] */
  float *lse;     /* softmax log-sum-exp (natural log), [b, h, seqlen_q] contiguous, or NULL */
  int dtype;      /* enum pt_dtype, same for q, k, v, o */
  int b, h, h_k;  /* batch, query heads, KV heads (h % h_k == 0) */
  int seqlen_q;   /* query rows per (batch, head); decode: 1..16 */
  int seqlen_k;   /* keys per batch entry */
  int head_dim;   /* decode: 64, 80, 96, 128 or 256; prefill: 64 or 128 */
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  float scale;    /* softmax scale (applied to q.k) */
  int causal;     /* bottom-right aligned causal mask, as FA2 does for seqlen_q <= seqlen_k */
  /* Element stride of the last (head_dim) dimension of q, k, v, o. 0 (a
   * zero-initialised descriptor) and 1 both mean contiguous, which the
   * kernels require; any other value is refused ("last dim not contiguous"). */
  int64_t q_dim_stride, k_dim_stride, v_dim_stride, o_dim_stride;
  /* Additive attention bias (masked decode, issue 17), or NULL for none: one
   * value of the q/k/v dtype per (batch, query head, query row, key), added
   * to the scaled score q.k * scale before the softmax; -inf masks a key.
   * Keys are contiguous (element stride 1); the other strides may be 0 to
   * broadcast (a padding mask shared by every head has bias_head_stride 0).
   * Leading and trailing keys masked for every row of a (batch, KV head) are
   * skipped without reading K/V (left or right padding). A row whose keys are
   * all masked gets O = 0 and LSE = -inf. */
  const void *bias;
  int64_t bias_batch_stride, bias_head_stride, bias_row_stride;
  /* Head size of v and o where it differs from head_dim (that of q and k):
   * 0, as a zero-initialised descriptor has it, means head_dim, so a caller
   * that never sets it describes equal sizes. Decode takes 128 with head_dim
   * 192 (MLA-shaped attention: DeepSeek-V3 under SDPA) and no other unequal
   * pair; prefill takes none. Read it through pt_attn_v_dim. */
  int v_head_dim;
};

/* The head size of v and o: v_head_dim, or head_dim when it is 0. */
static inline int pt_attn_v_dim(const struct pt_attn_desc *d) {
  return d->v_head_dim ? d->v_head_dim : d->head_dim;
}

/* ---- Fused split-KV decode attention (kernels/attn_decode.cu) ----------
 *
 * One launch computes O (input dtype) and LSE (fp32, natural log, [b, h,
 * seqlen_q] contiguous, as FA2's softmax_lse) for query rows = seqlen_q *
 * (h / h_k) <= 16 per KV head; the partial results of the KV splits are
 * combined inside the same launch: by the thread-block cluster of each
 * (batch, KV head) when the splits form one (no workspace), else by the
 * last CTA of each (batch, KV head) through the workspace. Needs sm_90+.
 *
 * Requirements (checked by pt_attn_decode_supported): fp16/bf16, head_dim
 * 64/80/96/128/256 for q, k and v (80 and 96 run padded on the d = 128
 * kernel's layout), or q/k 192 with v 128 (padded on d = 256's), seqlen_q <= 16 and rows per KV head <= 16, seqlen_k >= 1, causal
 * only with seqlen_q <= seqlen_k, last dim contiguous, every pointer 16-byte
 * aligned and every stride a multiple of 8 elements, b and h_k <= 65535; a
 * bias likewise 16-byte aligned with strides a multiple of 8 (it is copied
 * 8 keys at a time) along every dimension of extent > 1. */

/* NULL when the descriptor can run on Ponytail's decode kernel, else a short
 * static reason (usable as a stats key). Pure host code, no CUDA call. */
const char *pt_attn_decode_supported(const struct pt_attn_desc *d);

/* Device workspace this descriptor needs (0 when the launch needs none: a
 * single KV split, or splits merged inside a cluster). The first PT_ATTN_WS_COUNTER_BYTES bytes of every
 * workspace are self-resetting counters: the workspace must be ZEROED ONCE
 * when it is first allocated (pt_attn_workspace_prepare) and not written by
 * anything else afterwards. A workspace of N bytes serves any descriptor whose
 * pt_attn_decode_workspace_bytes() is <= N. One workspace must not be used by
 * two launches that can run concurrently (e.g. on two streams). */
size_t pt_attn_decode_workspace_bytes(const struct pt_attn_desc *d);
#define PT_ATTN_WS_COUNTER_BYTES 4096

/* Zeroes a freshly allocated workspace (cuMemsetD8Async on stream) and loads
 * the kernels into the stream's context, so that later launches, also under
 * stream capture, do neither. Call it once per new workspace, outside
 * capture. Returns a CUresult. */
int pt_attn_workspace_prepare(void *ws, size_t bytes, void *stream);

/* The real driver table every load and launch calls, handed once at load by
 * the shim (shim/init.c), which fills it before any hooked launch; a test
 * passes one of fakes. Until then every launch answers
 * CUDA_ERROR_NOT_INITIALIZED. kernels/ includes nothing of the shim. */
struct pt_driver;
void pt_attn_set_driver(const struct pt_driver *drv);

/* Launches the decode kernel on stream (a CUstream / cudaStream_t). No
 * allocation, no memset, no synchronisation: safe while the stream is being
 * captured into a CUDA graph, provided the kernels were already loaded in this
 * context (first launch or pt_attn_workspace_prepare outside capture).
 * workspace may be NULL when pt_attn_decode_workspace_bytes(d) == 0.
 * Returns a CUresult: CUDA_ERROR_NOT_SUPPORTED when supported() refuses,
 * CUDA_ERROR_INVALID_VALUE when ws_bytes is too small. Calls the driver
 * table given to pt_attn_set_driver, which must be filled. */
int pt_attn_decode_launch(const struct pt_attn_desc *d, void *workspace, size_t ws_bytes,
                          void *stream);

/* ---- Prefill attention (kernels/attn_prefill.cu, issue 18) --------------
 *
 * One launch computes O (input dtype) and LSE (fp32, natural log, [b, h,
 * seqlen_q] contiguous, as FA2's softmax_lse) for any query length; the hooks
 * send it the launches with seqlen_q > 16 (prefill). Warp-specialised TMA and
 * wgmma code for sm_90a only: it runs on compute capability 9.0 (H100, H200),
 * and its module is loaded into a context on the first prefill launch there.
 *
 * Requirements (checked by pt_attn_prefill_supported): fp16/bf16, head_dim
 * 64/128 (v the same), no bias, causal only with seqlen_q <= seqlen_k (bottom-right
 * aligned), h a multiple of h_k, b and h <= 65535, last dim contiguous,
 * q/k/v/o 16-byte aligned, every q/k/v stride a positive multiple of 8
 * elements (the TMA takes strides in multiples of 16 bytes) and every O
 * stride a multiple of 8. */

/* NULL when the descriptor can run on the prefill kernel, else a short
 * static reason (usable as a stats key). Pure host code, no CUDA call. */
const char *pt_attn_prefill_supported(const struct pt_attn_desc *d);

/* Launches the prefill kernel on stream: three TMA descriptors encoded on the
 * host (cuTensorMapEncodeTiled, no CUDA stream work) and one cuLaunchKernel.
 * No workspace, allocation, memset or synchronisation: safe under stream
 * capture once the module is loaded in the context (a first launch outside
 * capture). Returns a CUresult: CUDA_ERROR_NOT_SUPPORTED when supported()
 * refuses or the GPU is not compute capability 9.0,
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED for a first launch under capture,
 * the driver's error when it refuses the tensor maps or the launch. */
int pt_attn_prefill_launch(const struct pt_attn_desc *d, void *stream);

/* 1 when this build has the prefill kernel and the current context's device
 * can run it (compute capability 9.0), else 0 (no current context, another
 * GPU, a build without the kernel, a module that failed to load in this
 * context). Asked of the driver once per device; loads nothing. For the SDPA policy, which decides before any launch whether a
 * prefill call should reach torch's flash kernel for Ponytail to swap. */
int pt_attn_prefill_available(void);

/* ---- Verify-mode comparison (kernels/attn_compare.cu) -------------------
 *
 * ref describes the reference output: ref->o with its strides, ref->lse
 * ([b, h, seqlen_q] contiguous, may be NULL) and b, h, seqlen_q, the head
 * size of o (pt_attn_v_dim), dtype. test_o is contiguous [b, seqlen_q, h,
 * pt_attn_v_dim(ref)] in the same dtype,
 * test_lse contiguous [b, h, seqlen_q] or NULL. Writes 4 floats to device
 * memory result: max|O_ref - O_test|, max|O_ref|, max|LSE_ref - LSE_test|,
 * max|LSE_ref| (the LSE pair is 0 when either LSE is NULL). A NaN or Inf in
 * either input turns the corresponding maximum into +Inf, so it fails any
 * tolerance. Stream-ordered, capture-safe, no allocation. Returns a CUresult. */
int pt_attn_compare_launch(const struct pt_attn_desc *ref, const void *test_o,
                           const float *test_lse, float *result, void *stream);

/* ---- Planted fault (kernels/attn_fault.cu), PONYTAIL_TEST_FAULT ---------
 *
 * Multiplies d->o ([b, seqlen_q, h, pt_attn_v_dim(d)] through d's O strides, dtype
 * d->dtype) by factor in place, on stream. A test knob: it makes Ponytail's
 * output wrong on purpose so that the correctness checks have a fault to
 * catch. Stream-ordered, capture-safe, no allocation; meant to follow a
 * successful pt_attn_decode_launch (the kernels are then loaded in the
 * stream's context). Returns a CUresult. */
int pt_attn_fault_launch(const struct pt_attn_desc *d, float factor, void *stream);

#ifdef __cplusplus
}
#endif
#endif
