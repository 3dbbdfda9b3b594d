/* Slow paths of the launch: naming a kernel seen for the first time, the
 * lazily computed parameter size, and acting on a hook's verdict. */
#include "shim/launch.h"

#include <cuda.h>
#include <driver_types.h>

#include "common/log.h"
#include "shim/real.h"
#include "shim/stats.h"

typedef int (*pt_rt_getname_fn)(const char **, const void *);
typedef int (*pt_rt_paraminfo_fn)(const void *, size_t, size_t *, size_t *);
typedef int (*pt_rt_lasterror_fn)(void);

/* A failed runtime query sets the thread's "last error", which the
 * application reads after its own launch (PyTorch's launch check calls
 * cudaGetLastError): a probe that runs off the end of a parameter list would
 * then look like a failed launch. So the shim only queries the runtime when
 * no error is pending, and clears what its own queries left behind, leaving
 * the state exactly as it found it. */
static bool pt_rt_error_clean(void) {
  pt_rt_lasterror_fn peek = (pt_rt_lasterror_fn)pt_real(PT_SYM_cudaPeekAtLastError);
  return peek && pt_real(PT_SYM_cudaGetLastError) && peek() == 0;
}

static void pt_rt_error_restore(void) {
  pt_rt_lasterror_fn get = (pt_rt_lasterror_fn)pt_real(PT_SYM_cudaGetLastError);
  if (get) (void)get();
}

static struct pt_kernel *pt_name_and_bind(const void *key, const char *name) {
  struct pt_kernel *k = pt_registry_kernel(name ? name : "");
  if (!k) {
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "out of memory naming a kernel: launches pass through unnamed");
    return NULL;
  }
  pt_registry_bind(key, k);
  return k;
}

/* Driver names: a CUfunction from a module we did not see, or a CUkernel. */
static const char *pt_driver_name(const void *key) {
  const char *name = NULL;
  if (!key || !pt_real_driver()) return NULL;
  if (pt_drv.cuFuncGetName && pt_drv.cuFuncGetName(&name, (CUfunction)key) == CUDA_SUCCESS && name) return name;
  name = NULL;
  if (pt_drv.cuKernelGetName && pt_drv.cuKernelGetName(&name, (CUkernel)key) == CUDA_SUCCESS && name) return name;
  return NULL;
}

struct pt_kernel *pt_kernel_name_rt(const void *key) {
  if (!key) return NULL;
  const char *name = NULL;
  pt_rt_getname_fn getname = (pt_rt_getname_fn)pt_real(PT_SYM_cudaFuncGetName);
  if (getname && pt_rt_error_clean()) {
    if (getname(&name, key) != 0) name = NULL;
    pt_rt_error_restore();
  }
  if (!name) name = pt_driver_name(key);
  pt_debug("kernel %p named at first launch: %s", key, name ? name : "(unnamed)");
  return pt_name_and_bind(key, name);
}

struct pt_kernel *pt_kernel_name_drv(const void *key) {
  if (!key) return NULL;
  const char *name = pt_driver_name(key);
  pt_debug("function %p named at first launch: %s", key, name ? name : "(unnamed)");
  return pt_name_and_bind(key, name);
}

/* Total parameter bytes (end of the last parameter); 0 when unknown. */
static size_t pt_param_bytes(const struct pt_launch *l) {
  size_t total = 0, off = 0, size = 0;
  if (l->path == PT_PATH_RUNTIME) {
    pt_rt_paraminfo_fn info = (pt_rt_paraminfo_fn)pt_real(PT_SYM_cudaFuncGetParamInfo);
    if (!info || !pt_rt_error_clean()) return 0;
    for (size_t i = 0; i < 4096 && info(l->func, i, &off, &size) == 0; i++) total = off + size;
    pt_rt_error_restore();
  } else {
    if (!pt_real_driver() || !pt_drv.cuFuncGetParamInfo) return 0;
    for (size_t i = 0; i < 4096 && pt_drv.cuFuncGetParamInfo((CUfunction)l->func, i, &off, &size) == CUDA_SUCCESS;
         i++)
      total = off + size;
  }
  return total;
}

bool pt_launch_hooked(struct pt_kernel *k, struct pt_launch_ctx *c, int *status) {
  /* Hooks and kernels call the driver through pt_drv: resolve it before the
   * first hooked launch (once; a cheap check afterwards). */
  (void)pt_real_driver();
  size_t pb = 0;
  /* Report-only hooks read nothing of the launch: no parameter-size query. */
  if (pt_hook_reads_launch(k->hook_id)) {
    pb = __atomic_load_n(&k->param_bytes, __ATOMIC_RELAXED);
    if (pb == PT_PARAM_UNSET) {
      pb = pt_param_bytes(&c->l);
      __atomic_store_n(&k->param_bytes, pb, __ATOMIC_RELAXED);
    }
  }
  c->l.param_bytes = pb;
  struct pt_hook_outcome o = pt_hooks_launch(k->hook_id, k->name, &c->l);
  switch (o.verdict) {
  case PT_HOOK_SWAPPED:
    __atomic_fetch_add(&k->swapped, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&k->logged_swap, 1, __ATOMIC_RELAXED)) pt_info("custom kernel %s", k->name);
    *status = o.status;
    return true;
  case PT_HOOK_SKIPPED:
    __atomic_fetch_add(&k->skipped, 1, __ATOMIC_RELAXED);
    *status = o.status;
    return true;
  case PT_HOOK_PASS:
    if (o.reason) {
      __atomic_fetch_add(&k->fallbacks, 1, __ATOMIC_RELAXED);
      pt_stats_fallback(o.reason);
      if (!__atomic_exchange_n(&k->logged_fallback, 1, __ATOMIC_RELAXED))
        pt_info("fallback %s: %s", k->name, o.reason);
    }
    return false;
  default:
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "hook returned unknown verdict %d for %s: passing through", o.verdict, k->name);
    return false;
  }
}
