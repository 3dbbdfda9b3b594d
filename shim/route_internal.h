/* Private to the allocation routing files (shim/route_*.c): the state they
 * share and the helpers one file gives the others. Not for the rest of the
 * shim, which calls the API of route_alloc.h.
 *
 * Who holds what:
 *   route_alloc.c        routing of allocations and frees (the hot path: the
 *                        device an allocation is for, capture checks, the
 *                        pool's stream identity, pass-through calls), the
 *                        sticky capture/mempool flags, stream retirement and
 *                        the shim's own allocations
 *   route_dev.c          devices and contexts, the per-device table devs[]
 *                        and its pools (created lazily), default memory pools
 *   route_passthrough.c  the limit's pass-through pointer table and reservation
 *   route_query.c        memory info, pool attributes, trims and access, peer
 *                        access, IPC of pooled memory
 *   route_stats.c        the counters and the stats section (JSON and text)
 *   route_setup.c        the settings R, the trace, setup and fork
 *
 * Everything declared here is hidden (shim/exports.map alone decides what
 * the .so exports). The hot path's small helpers, which the compiler inlined
 * when all of this was one file, are static inline here (or static in
 * route_alloc.c), so that the split adds no call to it; what it called before
 * (rt_route_device, capturing, rt_pool_get, rt_default_pool, pass_alloc) it
 * calls now. */
#ifndef PT_SHIM_ROUTE_INTERNAL_H
#define PT_SHIM_ROUTE_INTERNAL_H
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/backend_vmm.h"
#include "allocator/pool.h"
#include "allocator/trace.h"
#include "common/jsonw.h"
#include "common/log.h"
#include "common/now_ns.h"
#include "shim/gate.h"
#include "shim/real.h"
#include "shim/ipc.h"
#include "shim/route_alloc.h"
#include "shim/shim.h"
#include "shim/stats.h"
#include "shim/tier.h"

#define PT_ROUTE_MAX_DEV 64
#define PT_OOM 2 /* cudaErrorMemoryAllocation == CUDA_ERROR_OUT_OF_MEMORY */
#define PT_H_LEGACY ((uint64_t)(uintptr_t)CU_STREAM_LEGACY)
#define PT_H_PER_THREAD ((uint64_t)(uintptr_t)CU_STREAM_PER_THREAD)

/* Route counters (the pool counts the rest); JSON keys are the names. */
#define PT_ROUTE_COUNTERS(X)                                                        \
  X(passthrough_allocs)     /* successful pass-through allocations */               \
  X(passthrough_frees)      /* successful pass-through frees */                     \
  X(capture_passthrough)    /* routable allocations passed through: capture */      \
  X(capture_deferred_frees) /* pool blocks freed during capture, never reused */    \
  X(trim_retries)           /* pass-through OOMs retried after a trim */            \
  X(passthrough_rejections) /* pass-through allocations refused by the limit */     \
  X(ipc_refusals)           /* cudaIpcGetMemHandle on pooled memory, PONYTAIL_IPC=off */ \
  X(ipc_exports)            /* IPC handles given for pooled blocks */               \
  X(ipc_opens)              /* Ponytail IPC handles opened (mapped) */              \
  X(ipc_closes)             /* and closed */                                        \
  X(ipc_errors)             /* IPC export/open failures returned to the caller */   \
  X(ipc_export_ns)          /* host time in cudaIpcGetMemHandle of pooled blocks */ \
  X(ipc_open_ns)            /* in opening Ponytail handles (incl. the exporter) */  \
  X(ipc_close_ns)           /* in closing them (unmapping) */                       \
  X(peer_grants)            /* peer access extended to a pool */                    \
  X(pool_errors)            /* pools that could not be created or updated */        \
  X(tier_holds)             /* host tier: times the mover held the process to move back */ \
  X(internal_allocs)        /* the shim's own buffers (pt_route_internal_alloc) */  \
  X(internal_bytes)         /* and their bytes (kept for good, never freed) */

struct pt_route_counters {
#define PT_RC_MEMBER(n) uint64_t n;
  PT_ROUTE_COUNTERS(PT_RC_MEMBER)
#undef PT_RC_MEMBER
};
extern struct pt_route_counters rc_; /* route_stats.c */
#define RC_INC(n) __atomic_fetch_add(&rc_.n, 1, __ATOMIC_RELAXED)
#define RC_ADD(n, v) __atomic_fetch_add(&rc_.n, (v), __ATOMIC_RELAXED)

struct pt_rdev {
  struct pt_pool *pool;      /* published with release; never freed */
  int failed;                /* pool creation failed: pass through for good */
  CUcontext primary;         /* retained primary context, NULL until known */
  CUmemoryPool default_pool; /* cached cuDeviceGetDefaultMemPool */
  uint64_t accessors;        /* peers granted access before the pool existed */
};

#pragma GCC visibility push(hidden)

/* The settings, read once by pt_route_setup (route_setup.c). */
struct pt_route_settings {
  bool pool_on;
  bool ipc; /* PONYTAIL_IPC=fd: exportable granules, real IPC of pooled blocks */
  uint64_t kv_min, kv_min_async, keep, limit, chunk;
  bool order_up; /* PONYTAIL_POOL_ORDER=up */
  uint64_t tier;  /* PONYTAIL_HOST_TIER (bytes, per pool) */
  uint64_t tier_reserve; /* PONYTAIL_HOST_TIER_RESERVE (bytes of the device left free) */
  bool tier_info; /* PONYTAIL_HOST_TIER_INFO */
  bool tier_retry; /* PONYTAIL_HOST_TIER_RETRY */
  struct pt_trace_writer *trace;
};
extern struct pt_route_settings R;
/* route_dev.c */
extern struct pt_rdev devs[PT_ROUTE_MAX_DEV];
extern int ndev; /* 1 + the highest ordinal with a pool (atomic) */
extern pthread_mutex_t create_mu;
/* route_alloc.c: raised once, read with acquire (see pt_route_capture_seen). */
extern int capture_seen, mempool_set;

/* ---- route_alloc.c (the hot path keeps it in its own file) ---------------- */
int rt_route_device(enum pt_route_api api, enum pt_route_smode sm, uint64_t stream);

/* ---- route_dev.c ---------------------------------------------------------- */
CUcontext rt_primary_of(int dev, bool force);
int rt_ctx_device(CUcontext c);
int rt_device(void);
CUmemoryPool rt_default_pool(int dev);
struct pt_pool *rt_pool_get(int dev);
uint64_t rt_trim_all(void);

/* ---- route_passthrough.c -------------------------------------------------- */
struct ph_ent {
  uintptr_t key; /* 0 = empty */
  uint64_t size;
  int dev;
};
int rt_ph_put(const void *ptr, uint64_t size, int dev);
bool rt_ph_take(const void *ptr, struct ph_ent *out);
bool rt_limit_reserve(struct pt_pool *pool, uint64_t size);

/* ---- route_stats.c -------------------------------------------------------- */
void rt_stats_json(struct pt_jw *w);
void rt_stats_text(FILE *f);

/* ---- hot-path helpers ----------------------------------------------------- */
static inline bool explicit_stream(uint64_t s) { return s && s != PT_H_LEGACY && s != PT_H_PER_THREAD; }

static inline bool have_driver(void) {
  return pt_real_driver() && pt_drv.cuCtxGetCurrent && pt_drv.cuCtxGetDevice && pt_drv.cuDeviceGet &&
         pt_drv.cuCtxPushCurrent && pt_drv.cuCtxPopCurrent;
}

static inline struct pt_pool *pool_at(int dev) { return __atomic_load_n(&devs[dev].pool, __ATOMIC_ACQUIRE); }

/* The pool whose address space holds ptr (no lock). */
static inline struct pt_pool *pool_of_ptr(const void *ptr) {
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && pt_pool_in_range(p, ptr)) return p;
  }
  return NULL;
}

#pragma GCC visibility pop

#endif
