/* Private to kernels/: what the prefill launcher (attn_prefill_launch.c)
 * takes from the loader of attn_launch.c, which owns the driver table and the
 * per-context modules. */
#ifndef PT_KERNELS_ATTN_MODULE_H
#define PT_KERNELS_ATTN_MODULE_H
#include <cuda.h>

#include "common/driver.h"

/* The driver table handed to pt_attn_set_driver (a table of NULL members
 * before that). */
const struct pt_driver *pt_attn_driver(void);

/* The d = 64 _SKIP kernels: the warpgroups skip K/V tiles past their own rows
 * (pt_prefill_skip_pays in kernels/attn_prefill.h says when). */
enum {
  PT_PF_BF16_D64, PT_PF_BF16_D128, PT_PF_FP16_D64, PT_PF_FP16_D128,
  PT_PF_BF16_D64_SKIP, PT_PF_FP16_D64_SKIP, PT_PF_COUNT
};

/* The prefill kernels of the stream's context, indexed by PT_PF_* (*fns points
 * at PT_PF_COUNT functions owned by the context's module), the module loaded on
 * first use (and the decode module with it), and the SM count of the
 * context's device in *sms (0 when the driver did not say). CUDA_ERROR_NOT_SUPPORTED
 * when this build has no prefill fatbin or the GPU is not compute capability
 * 9.0; a failed load is remembered for the context. The module is never loaded
 * while the stream is being captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 * nothing tried: a later launch outside a capture loads it). */
CUresult pt_attn_prefill_functions(CUstream stream, const CUfunction **fns, int *sms);

#endif
