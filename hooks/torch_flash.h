/* The torch (and upstream) FlashAttention-2 hook: name matching, the launch
 * decision, the combine-skip state machine, verify mode, and the per-stream
 * workspace cache.
 *
 * Every CUDA call the hook makes goes through struct pt_flash_ops, so the
 * decision logic runs in CPU tests with fakes (pt_flash_set_ops); the default
 * table (flash_ops.c) binds the driver table and the allocator the shim hands
 * the hooks (pt_hooks_set_driver, pt_hooks_set_alloc) and kernels/attn.h. */
#ifndef PT_TORCH_FLASH_H
#define PT_TORCH_FLASH_H
#include <stddef.h>
#include <stdint.h>
#include "hooks/flash_params.h"
#include "hooks/hook.h"
#include "kernels/attn.h"

/* Hook ids (hook.h: > 0) of the three kernel families. Equal to enum
 * pt_flash_kernel on purpose. */
enum {
  PT_HOOK_FLASH_SPLITKV = PT_FLASH_K_SPLITKV,
  PT_HOOK_FLASH_COMBINE = PT_FLASH_K_COMBINE,
  PT_HOOK_FLASH_FWD = PT_FLASH_K_FWD,
};

/* Recognises torch's pytorch_flash:: and upstream flash:: FA2 forward kernels
 * by mangled-name prefix; 0 for anything else (backward kernels included). */
int pt_flash_match(const char *mangled_name);

/* Every CUDA action the hook takes. Results are CUresult values (0 = OK). */
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
};

/* The default (real) table; NULL members mean "unavailable". */
extern const struct pt_flash_ops pt_flash_default_ops;
/* Replaces the table (tests); NULL restores the default. Returns the old one. */
const struct pt_flash_ops *pt_flash_set_ops(const struct pt_flash_ops *ops);

/* The verdict for one launch of a kernel that matched with hook_id. */
struct pt_hook_outcome pt_flash_launch(int hook_id, const struct pt_launch *l);

/* Verify mode tolerance: max|O - O_ref| / max|O_ref|, same for the LSE. */
#define PT_FLASH_VERIFY_TOL_O 1e-2f
#define PT_FLASH_VERIFY_TOL_LSE 1e-3f
/* 1 when the 4 compare floats {max|dO|, max|O_ref|, max|dLSE|, max|LSE_ref|}
 * are within tolerance (NaN/Inf fail). */
int pt_flash_verify_ok(const float r[4], float *rel_o, float *rel_lse);

void pt_flash_get_stats(struct pt_hooks_stats *out);

/* PONYTAIL_TEST_FAULT=N: the factor (1 - N/100) Ponytail's output is scaled
 * by, N capped at PT_FLASH_FAULT_MAX; 1 when N is 0 (off). */
#define PT_FLASH_FAULT_MAX 1000
float pt_flash_fault_factor(uint64_t n);

/* Reasons produced here (beyond flash_params.h's). */
extern const char pt_flash_r_disabled[], pt_flash_r_no_ws_capture[], pt_flash_r_ws_full[],
    pt_flash_r_ws_alloc[], pt_flash_r_launch_failed[], pt_flash_r_no_driver[],
    pt_flash_r_per_thread[];

/* Tests only: forget every workspace, pending combine and statistic. */
void pt_flash_reset_for_tests(void);

#endif
