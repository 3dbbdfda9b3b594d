/* Framework policy, applied from the shim's constructor before the program
 * reads its environment: steer an unmodified PyTorch program onto the paths
 * Ponytail accelerates, never overriding what the user set. Runs before
 * anything else in the process may have started threads that read the
 * environment, which is what makes setenv() acceptable here. */
#include <stdlib.h>
#include <string.h>

#include "hooks/hook.h"
#include "common/log.h"
#include "common/options.h"

/* SDPA prefers cuDNN on torch 2.11 + Hopper; this makes it pick FA2. */
#define PT_ENV_CUDNN_DEPRIO "TORCH_CUDNN_SDPA_DEPRIORITIZED"
/* PyTorch's allocator configuration, set only when the user has none. */
#define PT_ENV_ALLOC_CONF "PYTORCH_CUDA_ALLOC_CONF"

/* The PYTORCH_CUDA_ALLOC_CONF value of each PONYTAIL_TORCH_ALLOC choice
 * (options.h order), with why, for the log. keep sets nothing: PyTorch's
 * caching allocator is the only one every PyTorch feature works with (the
 * async backend refuses CUDA-graph trees, private graph pools and IPC). */
static const struct {
  const char *conf, *why;
} alloc_policy[] = {
    [PT_TORCH_ALLOC_KEEP] = {NULL, NULL},
    [PT_TORCH_ALLOC_EXPANDABLE] = {"expandable_segments:True", "PyTorch maps its segments in place: less fragmentation"},
    [PT_TORCH_ALLOC_ASYNC] = {"backend:cudaMallocAsync", "every tensor reaches the pool"},
};

void pt_hooks_policy_apply(void) {
  if (!pt_opt_bool(PT_OPT_ENABLE)) return;

  if (pt_opt_enum(PT_OPT_TORCH_SDPA) == PT_TORCH_SDPA_FLASH) {
    if (!getenv(PT_ENV_CUDNN_DEPRIO)) {
      if (setenv(PT_ENV_CUDNN_DEPRIO, "1", 0) == 0)
        pt_info("policy: set " PT_ENV_CUDNN_DEPRIO "=1 (SDPA takes the flash path)");
    } else {
      pt_debug("policy: " PT_ENV_CUDNN_DEPRIO " set by the user, left alone");
    }
  }

  /* The prefill swap replaces torch's flash launches only: say where it
   * applies rather than let the option look broken. It is on by default, so
   * "no effect" is said only to a user who asked for it. */
  if (pt_opt_bool(PT_OPT_ATTN_PREFILL)) {
    if (pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF) {
      if (pt_opt_is_set(PT_OPT_ATTN_PREFILL))
        pt_info("policy: PONYTAIL_ATTN_PREFILL=1 has no effect: PONYTAIL_ATTN=off swaps nothing");
    } else if (pt_opt_enum(PT_OPT_TORCH_SDPA) == PT_TORCH_SDPA_AUTO) {
      pt_info("policy: prefill kernel on (PONYTAIL_ATTN_PREFILL): the SDPA policy sends a prefill call "
              "from cuDNN to flash where Ponytail's prefill kernel takes it (a build with the kernel, the "
              "current GPU of compute capability 9.0, head_dim 64 or 128, no mask, no dropout)");
    } else if (pt_opt_enum(PT_OPT_TORCH_SDPA) == PT_TORCH_SDPA_KEEP) {
      pt_info("policy: prefill kernel on (PONYTAIL_ATTN_PREFILL): it swaps torch's flash prefill launches "
              "only; with PONYTAIL_TORCH_SDPA=keep, SDPA keeps cuDNN for prefill unless the program asks "
              "for flash");
    }
  }

  int choice = pt_opt_enum(PT_OPT_TORCH_ALLOC);
  const char *conf = choice >= 0 && choice < (int)(sizeof alloc_policy / sizeof alloc_policy[0])
                         ? alloc_policy[choice].conf
                         : NULL;
  /* The async backend only makes sense with the pool to route its tensors to. */
  if (!conf || (choice == PT_TORCH_ALLOC_ASYNC && !pt_opt_bool(PT_OPT_POOL))) return;
  const char *cur = getenv(PT_ENV_ALLOC_CONF);
  if (!cur) {
    if (setenv(PT_ENV_ALLOC_CONF, conf, 0) == 0)
      pt_info("policy: set " PT_ENV_ALLOC_CONF "=%s (%s)", conf, alloc_policy[choice].why);
  } else if (strcmp(cur, conf) != 0) {
    pt_info("policy: " PT_ENV_ALLOC_CONF "=%s set by the user, left alone (PONYTAIL_TORCH_ALLOC "
            "would set %s)", cur, conf);
  }
}
