/* The contract between the shim's launch path and hooks/.
 *
 * At registration the shim asks pt_hooks_match() once per kernel name and
 * stores the id in the kernel record; at launch, only records with an id > 0
 * call pt_hooks_launch(). The shim owns counting and logging ("custom kernel
 * <name>" / "fallback <name>: <reason>", once per name); hooks own the
 * decision and the replacement launch. */
#ifndef PT_HOOK_H
#define PT_HOOK_H
#include <stddef.h>
#include <stdint.h>

#include "hooks/torch_sdpa.h"

enum pt_launch_path { PT_PATH_RUNTIME = 0, PT_PATH_DRIVER = 1 };

struct pt_launch {
  int path;             /* enum pt_launch_path */
  const void *func;     /* runtime: the cudaKernel_t handle or stub; driver: the CUfunction */
  unsigned grid[3], block[3];
  unsigned smem;
  void *stream;         /* cudaStream_t == CUstream */
  void **args;          /* kernel arguments as passed (args[i] points at the i-th value) */
  size_t param_bytes;   /* total parameter bytes of the kernel, from *GetParamInfo; 0 = unknown */
  int per_thread_stream; /* 1 for the _ptsz / _ptds variants */
  /* Launches the original kernel with this launch's arguments (verify mode,
   * or a hook that decides late to fall back). Returns a CUresult / cudaError_t. */
  int (*launch_original)(const struct pt_launch *l);
};

enum pt_hook_verdict {
  PT_HOOK_PASS = 0,    /* launch the original (reason != NULL: a fallback) */
  PT_HOOK_SWAPPED = 1, /* Ponytail's kernel ran instead; status holds its result */
  PT_HOOK_SKIPPED = 2, /* launch dropped on purpose (e.g. the combine after a swapped split-KV) */
};

struct pt_hook_outcome {
  int verdict;          /* enum pt_hook_verdict */
  const char *reason;   /* static string, for PASS-as-fallback; NULL otherwise */
  int status;           /* 0 (success) or the CUDA error to return, for SWAPPED/SKIPPED */
};

/* Returns a hook id > 0 if a hook recognises this mangled kernel name, else 0.
 * Called once per kernel at registration; may be called from any thread. */
int pt_hooks_match(const char *mangled_name);

/* Short name of a hook id returned by pt_hooks_match (e.g. "torch_flash"),
 * for `ponytail kernels` and logs; NULL for 0 or an unknown id. (Added for
 * the tools; `ponytail kernels` references it weakly and prints the id when
 * it is not defined.) */
const char *pt_hooks_name(int id);

/* Ids from PT_HOOK_REPORT_FIRST on belong to report-only hooks (attention
 * Ponytail recognises but does not swap): their verdict is always PASS, with
 * a reason, and they read nothing of the launch, so the shim skips the
 * parameter-size query (cuFuncGetParamInfo) for them and param_bytes is 0. */
#define PT_HOOK_REPORT_FIRST 64
static inline int pt_hook_reads_launch(int hook_id) { return hook_id < PT_HOOK_REPORT_FIRST; }

/* The hook's verdict for one launch of a kernel that matched with hook_id. */
struct pt_hook_outcome pt_hooks_launch(int hook_id, const char *mangled_name,
                                       const struct pt_launch *l);

/* Framework policy applied once at load (e.g. TORCH_CUDNN_SDPA_DEPRIORITIZED,
 * PYTORCH_CUDA_ALLOC_CONF) before the application reads its environment. */
void pt_hooks_policy_apply(void);

/* Statistics the hooks keep beyond what the shim counts (verify mode: compared
 * launches and those out of tolerance). */
/* Largest scratch verify mode allocates for one launch (Ponytail's O and LSE
 * beside the original's); larger launches are counted in verify_skipped. */
#define PT_VERIFY_MAX_SCRATCH ((size_t)256 << 20)
struct pt_hooks_stats {
  uint64_t verified, verify_failures;
  uint64_t faults_planted; /* PONYTAIL_TEST_FAULT: outputs perturbed on purpose */
  uint64_t verify_skipped; /* verify mode: launches too large for its scratch (PT_VERIFY_MAX_SCRATCH) */
  struct pt_sdpa_stats sdpa; /* the per-call SDPA policy (torch_sdpa.h) */
};
void pt_hooks_get_stats(struct pt_hooks_stats *out);

/* What the hooks need from the layer above, handed down by the shim's
 * composition root (shim/init.c) once at load, so that hooks/ depends on no
 * shim object (the linker sees every dependency):
 *   pt_hooks_set_driver: the real driver table (filled by the shim before any
 *     launch reaches a hook);
 *   pt_hooks_set_alloc: how the hooks allocate their own device buffers (the
 *     shim routes them as an application's cuMemAlloc_v2).
 * Without them (the ponytail CLI links the hooks to list them and never
 * launches) every driver call and allocation fails as "not initialized". */
struct pt_driver;
void pt_hooks_set_driver(const struct pt_driver *drv);
void pt_hooks_set_alloc(int (*alloc)(void **dptr, size_t bytes));

#endif
