/* The launch path shared by the runtime and driver entry points: the kernel
 * record for a launch (one lock-free lookup; naming on a miss) and the hook
 * call with its verdict. */
#ifndef PT_LAUNCH_H
#define PT_LAUNCH_H
#include <stdbool.h>

#include "hooks/hook.h"
#include "shim/registry.h"
#include "shim/shim.h"

/* A launch as the hooks see it (l, first member) plus what launch_original
 * needs to repeat it exactly. */
struct pt_launch_ctx {
  struct pt_launch l;
  enum pt_sym sym;    /* the entry point that was called */
  const void *config; /* cudaLaunchConfig_t* / CUlaunchConfig* of the Ex variants */
  void **extra;       /* cuLaunchKernel's extra */
};

struct pt_kernel *pt_kernel_name_rt(const void *key);  /* slow path: stub or cudaKernel_t */
struct pt_kernel *pt_kernel_name_drv(const void *key); /* slow path: CUfunction or CUkernel */

static inline struct pt_kernel *pt_kernel_rt(const void *key) {
  struct pt_kernel *k = pt_registry_lookup(key);
  return PT_LIKELY(k != NULL) ? k : pt_kernel_name_rt(key);
}
static inline struct pt_kernel *pt_kernel_drv(const void *key) {
  struct pt_kernel *k = pt_registry_lookup(key);
  return PT_LIKELY(k != NULL) ? k : pt_kernel_name_drv(key);
}

/* For a record with hook_id > 0: asks the hook. true = handled (swapped or
 * skipped; *status is what the entry point returns); false = launch the
 * original (a fallback has been counted and logged if the hook gave a reason). */
bool pt_launch_hooked(struct pt_kernel *k, struct pt_launch_ctx *c, int *status);

#endif
