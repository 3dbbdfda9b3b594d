/* Once-only initialisation, fork and exit handling, and the composition root
 * (pt_compose) that wires the lower layers to the shim.
 *
 * Init is lazy (first intercepted call) because the shim is loaded into every
 * process of a preloaded tree, most of which never touch CUDA. The only
 * constructor work is the wiring (pointer stores, no call into CUDA) and the
 * framework policy, which must set environment variables before the
 * application reads them. */
#include <pthread.h>
#include <stdlib.h>

#include "common/log.h"
#include "hooks/hook.h"
#include "kernels/attn.h"
#include "shim/sleep.h"
#include "shim/control.h"
#include "shim/cupti.h"
#include "shim/real.h"
#include "shim/registry.h"
#include "shim/route_alloc.h"
#include "shim/shim.h"
#include "shim/stats.h"

int pt_state;
__thread int pt_tls_in_rt __attribute__((tls_model("initial-exec")));

static pthread_once_t pt_init_once = PTHREAD_ONCE_INIT;
static __thread int pt_tls_in_init __attribute__((tls_model("initial-exec")));
static int pt_cupti_on;

/* The stats file lock before the registry's: a snapshot holds it while it
 * takes the registry lock, so fork takes them in the same order. */
static void pt_atfork_prepare(void) {
  pt_stats_atfork_prepare();
  pt_registry_atfork_prepare();
}
static void pt_atfork_parent(void) {
  pt_registry_atfork_parent();
  pt_stats_atfork_parent();
}
static void pt_atfork_child(void) {
  pt_registry_atfork_child();
  pt_stats_atfork_child();
  pt_control_atfork_child();
  pt_sleep_atfork_child();
  pt_capture_atfork_child();
  pt_route_atfork_child();
  /* A %p log file names the parent: the child gets its own. */
  pt_log_reopen();
  /* No thread but the forking one survives: the child's first intercepted
   * call starts its stats snapshots (pt_init). Not started here: a child that
   * only execs, or exits, never needs them. A forked child that ends with
   * _exit (Python multiprocessing's fork start method: vLLM's engine core)
   * writes no exit stats, so its snapshots are all it leaves. */
  if (__atomic_load_n(&pt_state, __ATOMIC_RELAXED) == PT_STATE_ON)
    __atomic_store_n(&pt_state, PT_STATE_FORKED, __ATOMIC_RELEASE);
}

static void pt_exit(void) {
  int s = __atomic_load_n(&pt_state, __ATOMIC_ACQUIRE);
  if (s != PT_STATE_ON && s != PT_STATE_FORKED) return;
  if (pt_cupti_on) pt_cupti_stop();
  pt_sleep_exit();
  pt_control_stop();
  pt_stats_write();
}

static void pt_init_run(void) {
  pt_tls_in_init = 1;
  pt_opts_init();
  if (!pt_opt_bool(PT_OPT_ENABLE)) {
    __atomic_store_n(&pt_state, PT_STATE_OFF, __ATOMIC_RELEASE);
    pt_tls_in_init = 0;
    return;
  }
  if (pthread_atfork(pt_atfork_prepare, pt_atfork_parent, pt_atfork_child) != 0) {
    PT_INTERNAL_ERROR();
    pt_warn("pthread_atfork failed: a forked child may inherit a held registry lock");
  }
  pt_route_setup();
  if (atexit(pt_exit) != 0) {
    PT_INTERNAL_ERROR();
    pt_warn("atexit failed: no exit stats");
  }
  pt_stats_start_snapshots();
  /* Publish before starting CUPTI: it calls into CUDA, i.e. into our
   * wrappers, from this thread. */
  __atomic_store_n(&pt_state, PT_STATE_ON, __ATOMIC_RELEASE);
  pt_debug("initialised (version %s)", PT_VERSION);
  if (pt_opt_str(PT_OPT_CUPTI)[0]) {
    pt_cupti_on = 1;
    pt_cupti_start();
  }
  pt_tls_in_init = 0;
}

int pt_init(void) {
  /* A CUDA call made by the init itself (from this thread) passes through. */
  if (pt_tls_in_init) return PT_STATE_OFF;
  pthread_once(&pt_init_once, pt_init_run);
  int s = __atomic_load_n(&pt_state, __ATOMIC_ACQUIRE);
  if (s == PT_STATE_FORKED) {
    /* The first call of a forked child (one thread wins; the others go on as on). */
    if (__atomic_compare_exchange_n(&pt_state, &s, PT_STATE_ON, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      pt_stats_start_snapshots();
    return PT_STATE_ON;
  }
  return s == PT_STATE_UNINIT ? PT_STATE_OFF : s;
}

/* The composition root. The layers below the shim include nothing of it
 * (tests/unit/layering.sh): what they need from it is handed to them here,
 * once at load, before any intercepted call can reach them. The kernel
 * launcher and the hooks get the driver table (a const pointer: filled later,
 * lazily, but always before a hooked launch, see pt_launch_hooked), the hooks
 * the allocator of their workspaces (routed as an application's
 * cuMemAlloc_v2). The VMM backend gets the same table when the routing layer
 * creates a device's pool (rt_pool_get). */
static void pt_compose(void) {
  pt_attn_set_driver(&pt_drv);
  pt_hooks_set_driver(&pt_drv);
  pt_hooks_set_alloc(pt_route_internal_alloc);
}

__attribute__((constructor)) static void pt_ctor(void) {
  pt_compose();
  pt_opts_init();
  if (pt_opt_bool(PT_OPT_ENABLE)) pt_hooks_policy_apply();
}
