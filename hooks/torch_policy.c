/* Framework policy, applied from the shim's constructor before the program
 * reads its environment: steer an unmodified PyTorch program onto the paths
 * Ponytail accelerates, never overriding what the user set. Runs before
 * anything else in the process may have started threads that read the
 * environment, which is what makes setenv() acceptable here. */
#include <stdlib.h>
#include <string.h>

#include "hooks/hook.h"
#include "shim/log.h"
#include "shim/options.h"

/* SDPA prefers cuDNN on torch 2.11 + Hopper; this makes it pick FA2. */
#define PT_ENV_CUDNN_DEPRIO "TORCH_CUDNN_SDPA_DEPRIORITIZED"
/* With this backend every tensor is a cudaMallocAsync the pool can route. */
#define PT_ENV_ALLOC_CONF "PYTORCH_CUDA_ALLOC_CONF"
#define PT_ALLOC_ASYNC "backend:cudaMallocAsync"

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

  if (pt_opt_enum(PT_OPT_TORCH_ALLOC) == PT_TORCH_ALLOC_ASYNC && pt_opt_bool(PT_OPT_POOL)) {
    const char *cur = getenv(PT_ENV_ALLOC_CONF);
    if (!cur) {
      if (setenv(PT_ENV_ALLOC_CONF, PT_ALLOC_ASYNC, 0) == 0)
        pt_info("policy: set " PT_ENV_ALLOC_CONF "=" PT_ALLOC_ASYNC " (every tensor reaches the pool)");
    } else if (!strstr(cur, "cudaMallocAsync")) {
      pt_info("policy: " PT_ENV_ALLOC_CONF "=%s set by the user: allocation routing sees only "
              "the segments PyTorch's allocator asks for", cur);
    }
  }
}
