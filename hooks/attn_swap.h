/* What every decode-attention swap shares, whichever framework kernel it
 * replaces (torch_flash.c: FlashAttention-2; torch_mem_eff.c: torch's
 * mem-efficient SDPA): the table of CUDA actions, the checks before a swap,
 * the replacement launch with its workspace, verify mode, the planted fault
 * of PONYTAIL_TEST_FAULT, and their statistics.
 *
 * Every CUDA call goes through struct pt_flash_ops, so the decision logic
 * runs in CPU tests with fakes (pt_flash_set_ops); the default table
 * (flash_ops.c) binds the driver table and the allocator the shim hands the
 * hooks (pt_hooks_set_driver, pt_hooks_set_alloc) and kernels/attn.h. The
 * pt_flash_ names are historical (the FA2 hook came first); the table and
 * the counters are one for all hooks. */
#ifndef PT_ATTN_SWAP_H
#define PT_ATTN_SWAP_H
#include <stddef.h>
#include <stdint.h>
#include "hooks/hook.h"
#include "kernels/attn.h"

/* Every CUDA action a hook takes. Results are CUresult values (0 = OK). */
struct pt_flash_ops {
  const char *(*supported)(const struct pt_attn_desc *d);
  size_t (*ws_bytes)(const struct pt_attn_desc *d);
  int (*ws_prepare)(void *ws, size_t bytes, void *stream);
  int (*launch)(const struct pt_attn_desc *d, void *ws, size_t ws_bytes, void *stream);
  int (*compare)(const struct pt_attn_desc *ref, const void *test_o, const float *test_lse,
                 float *result, void *stream);
  int (*is_capturing)(void *stream, int *capturing); /* *capturing = 1 while captured */
  int (*ctx_current)(void **ctx);
  int (*mem_alloc)(void **dptr, size_t bytes);
  int (*copy_to_host)(void *dst, const void *src, size_t bytes, void *stream);
  int (*stream_sync)(void *stream);
  /* PONYTAIL_TEST_FAULT: O *= factor on stream (kernels/attn.h). */
  int (*fault)(const struct pt_attn_desc *d, float factor, void *stream);
  /* The prefill kernel (kernels/attn.h): descriptors with seqlen_q over
   * PT_ATTN_DECODE_MAX_Q go to these instead of supported/launch; it takes
   * no workspace. */
  const char *(*prefill_supported)(const struct pt_attn_desc *d);
  int (*prefill_launch)(const struct pt_attn_desc *d, void *stream);
};

/* The longest query the decode kernel takes; a longer one is prefill and
 * goes to the prefill kernel (the hooks send it only with
 * PONYTAIL_ATTN_PREFILL). */
#define PT_ATTN_DECODE_MAX_Q 16
static inline int pt_attn_is_prefill(const struct pt_attn_desc *d) {
  return d->seqlen_q > PT_ATTN_DECODE_MAX_Q;
}

/* The default (real) table; NULL members mean "unavailable". */
extern const struct pt_flash_ops pt_flash_default_ops;
/* Replaces the table (tests); NULL restores the default. Returns the old one. */
const struct pt_flash_ops *pt_flash_set_ops(const struct pt_flash_ops *ops);
/* The table in use. */
const struct pt_flash_ops *pt_attn_ops(void);

/* Verify mode tolerance: max|O - O_ref| / max|O_ref|, same for the LSE. */
#define PT_FLASH_VERIFY_TOL_O 1e-2f
#define PT_FLASH_VERIFY_TOL_LSE 1e-3f
/* 1 when the 4 compare floats {max|dO|, max|O_ref|, max|dLSE|, max|LSE_ref|}
 * are within tolerance (NaN/Inf fail). */
int pt_flash_verify_ok(const float r[4], float *rel_o, float *rel_lse);

/* Verified launches, verify failures and planted faults of every hook. */
void pt_flash_get_stats(struct pt_hooks_stats *out);

/* PONYTAIL_TEST_FAULT=N: the factor (1 - N/100) Ponytail's output is scaled
 * by, N capped at PT_FLASH_FAULT_MAX; 1 when N is 0 (off). */
#define PT_FLASH_FAULT_MAX 1000
float pt_flash_fault_factor(uint64_t n);

/* Reasons produced by the shared steps (and the workspace cache, flash_ws.c). */
extern const char pt_flash_r_disabled[], pt_flash_r_no_ws_capture[], pt_flash_r_ws_full[],
    pt_flash_r_ws_alloc[], pt_flash_r_launch_failed[], pt_flash_r_no_driver[],
    pt_flash_r_per_thread[], pt_flash_r_prefill_gpu[], pt_flash_r_prefill_capture[];

/* ---- the steps of a swap, in the order a hook takes them ---------------- */

static inline struct pt_hook_outcome pt_hook_pass(const char *reason) {
  struct pt_hook_outcome o = {PT_HOOK_PASS, reason, 0};
  return o;
}
static inline struct pt_hook_outcome pt_hook_done(int verdict, int status) {
  struct pt_hook_outcome o = {verdict, NULL, status};
  return o;
}

/* CU_STREAM_PER_THREAD (0x2) or the NULL stream of a _ptsz launch: one
 * handle for many real streams, so no per-stream workspace can be kept. */
static inline int pt_attn_per_thread_stream(const struct pt_launch *l) {
  return l->stream == (void *)0x2 || (l->per_thread_stream && !l->stream);
}

/* Can Ponytail's kernel run d on this stream now: the table is bound, the
 * kernel takes the descriptor, and the capture state is known (*capturing).
 * NULL or a static reason. */
const char *pt_attn_swap_check(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                               void *stream, int *capturing);

/* Launches Ponytail's kernel for d in place of the original: the stream's
 * workspace when the shape needs one, then the planted fault when
 * PONYTAIL_TEST_FAULT is set. SWAPPED, or PASS with a reason (the original
 * then runs). */
struct pt_hook_outcome pt_attn_swap_launch(const struct pt_flash_ops *ops,
                                           const struct pt_attn_desc *d, void *stream,
                                           int capturing);

/* Verify mode, outside capture, for a launch whose output is complete when
 * it returns: the original runs, then Ponytail's kernel into scratch and the
 * compare. SWAPPED with the original's status. */
struct pt_hook_outcome pt_attn_verify_launch(const struct pt_flash_ops *ops,
                                             const struct pt_attn_desc *d,
                                             const struct pt_launch *l);

/* Runs Ponytail's kernel into scratch and compares it with the reference the
 * original wrote to d->o / d->lse; counts and logs. Outside capture only. */
void pt_attn_verify_run(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                        void *stream);

/* Tests only: forget the statistics, the verify shapes and the workspaces. */
void pt_attn_swap_reset(void);

#endif
