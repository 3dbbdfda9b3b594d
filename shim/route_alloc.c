/* Allocation routing: see route_alloc.h for what goes where. Notes on the
 * less obvious choices:
 *
 * Streams. The pool orders reuse by stream identity. The legacy default
 * stream (0, or cudaStreamLegacy) is one identity (0). A per-thread default
 * stream (0 in a _ptsz entry point, or cudaStreamPerThread) is a different
 * stream on every thread behind one handle, so it cannot be an identity:
 * a free on it is recorded as a free on the legacy stream (work on the
 * legacy stream, e.g. the pool's marker, waits for all earlier work of every
 * blocking stream, per-thread default streams included), and an allocation on
 * it waits on the host for pending frees into its block, as a synchronous
 * allocation (cudaMalloc, cuMemAlloc) does, since any stream may then use it.
 *
 * Contexts. Only primary contexts are routed: the pool's markers live in the
 * device's primary context and must be recorded on streams of that context.
 * A primary context is retained once per device, and only if it is already
 * active (cuDevicePrimaryCtxGetState), so that a process working on one GPU
 * never creates contexts on the others.
 *
 * Capture. An allocation on a stream being captured passes through (the
 * graph owns it) and is not counted against the limit. A pool block freed
 * while capturing is kept out of reuse for good: the free runs when the graph
 * is launched, which the pool cannot follow (counted: capture_deferred_frees).
 *
 * Limit (PONYTAIL_MEM_LIMIT, per device): pool physical bytes plus the
 * requested bytes of live pass-through allocations made outside capture. The
 * pass-through bytes are reserved before the real call (so concurrent calls
 * cannot overshoot together) and their pointers kept in a lock-striped hash
 * for their frees. Without a limit nothing is tracked. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/backend_vmm.h"
#include "allocator/now_ns.h"
#include "allocator/pool.h"
#include "allocator/trace.h"
#include "shim/jsonw.h"
#include "shim/log.h"
#include "shim/real.h"
#include "shim/ipc.h"
#include "shim/route_alloc.h"
#include "shim/shim.h"
#include "shim/stats.h"

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
  X(internal_allocs)        /* the shim's own buffers (pt_route_internal_alloc) */  \
  X(internal_bytes)         /* and their bytes (kept for good, never freed) */

struct pt_route_counters {
#define PT_RC_MEMBER(n) uint64_t n;
  PT_ROUTE_COUNTERS(PT_RC_MEMBER)
#undef PT_RC_MEMBER
};
static struct pt_route_counters rc_;
#define RC_INC(n) __atomic_fetch_add(&rc_.n, 1, __ATOMIC_RELAXED)
#define RC_ADD(n, v) __atomic_fetch_add(&rc_.n, (v), __ATOMIC_RELAXED)

struct pt_rdev {
  struct pt_pool *pool;      /* published with release; never freed */
  int failed;                /* pool creation failed: pass through for good */
  CUcontext primary;         /* retained primary context, NULL until known */
  CUmemoryPool default_pool; /* cached cuDeviceGetDefaultMemPool */
  uint64_t accessors;        /* peers granted access before the pool existed */
};

static struct {
  bool pool_on;
  bool ipc; /* PONYTAIL_IPC=fd: exportable granules, real IPC of pooled blocks */
  uint64_t kv_min, kv_min_async, keep, limit, chunk;
  struct pt_trace_writer *trace;
} R;
static struct pt_rdev devs[PT_ROUTE_MAX_DEV];
static int ndev; /* 1 + the highest ordinal with a pool (atomic) */
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- errors ----------------------------------------------------------------
 * The runtime's codes were aligned with the driver's: every CUresult the pool
 * or the VMM backend returns has the cudaError_t of the same number (out of
 * memory 2, invalid value 1, not initialized 3, invalid device 101, invalid
 * context 201 = cudaErrorDeviceUninitialized, invalid handle 400, not
 * supported 801, unknown 999). Only a code the runtime lacks is mapped. */
int pt_route_rt_err(int cu) {
  switch (cu) {
  case CUDA_ERROR_NOT_MAPPED:
  case CUDA_ERROR_ALREADY_MAPPED:
  case CUDA_ERROR_NOT_MAPPED_AS_POINTER: return cudaErrorInvalidValue;
  default: return cu;
  }
}

/* ---- devices and contexts ----------------------------------------------- */

/* initial-exec: no __tls_get_addr call on the hot path (the shim is preloaded,
 * so its TLS is in the static block). */
static __thread CUcontext tls_ctx __attribute__((tls_model("initial-exec"))); /* last primary context seen */
static __thread int tls_dev __attribute__((tls_model("initial-exec")));

/* dev's primary context, retained once. Unless force, only when it is active
 * already (a context on another GPU is never created for a lookup). */
static CUcontext primary_of(int dev, bool force) {
  CUcontext c = __atomic_load_n(&devs[dev].primary, __ATOMIC_ACQUIRE);
  if (c) return c;
  CUdevice d;
  if (!pt_drv.cuDevicePrimaryCtxRetain || pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS) return NULL;
  if (!force && pt_drv.cuDevicePrimaryCtxGetState) {
    unsigned flags = 0;
    int active = 0;
    if (pt_drv.cuDevicePrimaryCtxGetState(d, &flags, &active) != CUDA_SUCCESS || !active) return NULL;
  }
  pthread_mutex_lock(&create_mu);
  c = devs[dev].primary;
  if (!c && pt_drv.cuDevicePrimaryCtxRetain(&c, d) == CUDA_SUCCESS)
    __atomic_store_n(&devs[dev].primary, c, __ATOMIC_RELEASE);
  else if (!devs[dev].primary)
    c = NULL;
  pthread_mutex_unlock(&create_mu);
  return c;
}

/* The device of any context (a known primary, else asked with it pushed). */
static int ctx_device(CUcontext c) {
  if (!c) return -1;
  for (int d = 0; d < PT_ROUTE_MAX_DEV; d++)
    if (__atomic_load_n(&devs[d].primary, __ATOMIC_ACQUIRE) == c) return d;
  CUdevice d = -1;
  CUcontext old;
  if (pt_drv.cuCtxPushCurrent(c) != CUDA_SUCCESS) return -1;
  CUresult r = pt_drv.cuCtxGetDevice(&d);
  (void)pt_drv.cuCtxPopCurrent(&old);
  return r == CUDA_SUCCESS && d >= 0 && d < PT_ROUTE_MAX_DEV ? (int)d : -1;
}

static bool explicit_stream(uint64_t s) { return s && s != PT_H_LEGACY && s != PT_H_PER_THREAD; }

static bool have_driver(void) {
  return pt_real_driver() && pt_drv.cuCtxGetCurrent && pt_drv.cuCtxGetDevice && pt_drv.cuDeviceGet &&
         pt_drv.cuCtxPushCurrent && pt_drv.cuCtxPopCurrent;
}

/* The runtime's current device (cudaGetDevice), -1 on failure. */
static int rt_device(void) {
  typedef cudaError_t (*get_fn)(int *);
  get_fn get = (get_fn)pt_real(PT_SYM_cudaGetDevice);
  int d = -1;
  if (!get) return -1;
  cudaError_t e;
  PT_RT_CALL(e, get(&d));
  return e == cudaSuccess && d >= 0 && d < PT_ROUTE_MAX_DEV ? d : -1;
}

/* The device an allocation or free is for, or -1: pass it through. */
static int route_device(enum pt_route_api api, enum pt_route_smode sm, uint64_t stream) {
  if (!have_driver()) return -1;
  CUcontext cur = NULL;
  if (pt_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
  int dev;
  if (!cur) {
    /* No context on this thread: the runtime would use the primary context
     * of its current device; a driver call would fail. */
    if (api != PT_API_RT || (dev = rt_device()) < 0 || !(cur = primary_of(dev, true))) return -1;
  } else if (cur == tls_ctx) {
    dev = tls_dev;
  } else {
    CUdevice d;
    if (pt_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= PT_ROUTE_MAX_DEV) return -1;
    if (primary_of((int)d, false) != cur) return -1; /* a non-primary context */
    tls_ctx = cur;
    tls_dev = dev = (int)d;
  }
  if (sm != PT_SM_SYNC && explicit_stream(stream)) {
    CUcontext sc = NULL;
    if (!pt_drv.cuStreamGetCtx || pt_drv.cuStreamGetCtx((CUstream)(uintptr_t)stream, &sc) != CUDA_SUCCESS)
      return -1;
    if (sc != cur) {
      /* cudaMallocAsync allocates on the stream's device. */
      int d2 = ctx_device(sc);
      if (d2 < 0 || primary_of(d2, false) != sc) return -1;
      dev = d2;
    }
  }
  return dev;
}

int pt_route_current_device(enum pt_route_api api) {
  if (!have_driver()) return -1;
  CUcontext cur = NULL;
  if (pt_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
  if (!cur) return api == PT_API_RT ? rt_device() : -1;
  CUdevice d;
  if (pt_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= PT_ROUTE_MAX_DEV) return -1;
  return (int)d;
}

int pt_route_ctx_device(void *ctx) { return have_driver() ? ctx_device((CUcontext)ctx) : -1; }

/* See pt_route_capture_seen: no stream can be capturing before the first
 * begin-capture call, so until then the query (~25 ns per alloc and per free)
 * is skipped. Acquire pairs with the release below: a thread that sees the
 * flag also sees the capture's begin ordered before its own call. */
static int capture_seen, mempool_set;

void pt_route_capture_seen(void) {
  if (!__atomic_load_n(&capture_seen, __ATOMIC_RELAXED)) __atomic_store_n(&capture_seen, 1, __ATOMIC_RELEASE);
}
void pt_route_mempool_set(void) {
  if (!__atomic_load_n(&mempool_set, __ATOMIC_RELAXED)) __atomic_store_n(&mempool_set, 1, __ATOMIC_RELEASE);
}

/* true: the stream is being captured, or that cannot be told (pass through). */
static bool capturing(enum pt_route_smode sm, uint64_t stream) {
  if (!__atomic_load_n(&capture_seen, __ATOMIC_ACQUIRE)) return false;
  if (!pt_drv.cuStreamIsCapturing) return true;
  uint64_t h = stream;
  if (!h && sm == PT_SM_PTSZ) h = PT_H_PER_THREAD;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (pt_drv.cuStreamIsCapturing((CUstream)(uintptr_t)h, &st) != CUDA_SUCCESS) return true;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The pool's identity of a stream (see the top of this file). *any: the
 * allocation must be usable by every stream. */
static uint64_t pool_stream(enum pt_route_smode sm, uint64_t s, bool *any) {
  *any = false;
  if (sm == PT_SM_SYNC) {
    *any = true;
    return 0;
  }
  if (s == PT_H_PER_THREAD || (!s && sm == PT_SM_PTSZ)) {
    *any = true;
    return 0;
  }
  return s == PT_H_LEGACY ? 0 : s;
}

static CUmemoryPool default_pool(int dev) {
  CUmemoryPool p = __atomic_load_n(&devs[dev].default_pool, __ATOMIC_ACQUIRE);
  CUdevice d;
  if (p || !pt_drv.cuDeviceGetDefaultMemPool || pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS) return p;
  if (pt_drv.cuDeviceGetDefaultMemPool(&p, d) != CUDA_SUCCESS) return NULL;
  __atomic_store_n(&devs[dev].default_pool, p, __ATOMIC_RELEASE);
  return p;
}

/* An async allocation is routed only from the device's default pool: an
 * explicit or application-set pool may have properties (IPC export, access,
 * release threshold) the pool does not give. */
static bool default_pool_ok(int dev, enum pt_route_mpool mp, const void *mempool) {
  if (mp == PT_MP_NONE) return true;
  CUmemoryPool def = default_pool(dev);
  if (!def) return false;
  if (mp == PT_MP_GIVEN) return mempool == (const void *)def;
  /* The current pool is the default one until a set-mempool call. */
  if (!__atomic_load_n(&mempool_set, __ATOMIC_ACQUIRE) || !pt_drv.cuDeviceGetMemPool) return true;
  CUmemoryPool cur = NULL;
  CUdevice d;
  if (pt_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS || pt_drv.cuDeviceGetMemPool(&cur, d) != CUDA_SUCCESS)
    return false;
  return cur == def;
}

static struct pt_pool *pool_at(int dev) { return __atomic_load_n(&devs[dev].pool, __ATOMIC_ACQUIRE); }

/* The pool of dev, created on first use; NULL when it cannot be. */
static struct pt_pool *pool_get(int dev) {
  struct pt_pool *p = pool_at(dev);
  if (p || __atomic_load_n(&devs[dev].failed, __ATOMIC_RELAXED)) return p;
  pthread_mutex_lock(&create_mu);
  if (!devs[dev].pool && !devs[dev].failed) {
    struct pt_backend bk;
    struct pt_pool_config cfg = {
      .keep_bytes = R.keep, .limit_bytes = R.limit, .chunk_bytes = R.chunk};
    int rc = pt_backend_vmm_create(&bk, dev, R.ipc ? PT_VMM_EXPORTABLE : 0);
    if (!rc && (rc = pt_pool_create(bk, dev, &cfg, &p)) && bk.ops->destroy) bk.ops->destroy(bk.ctx);
    if (!rc) {
      for (int peer = 0; peer < PT_ROUTE_MAX_DEV; peer++)
        if ((devs[dev].accessors >> peer & 1) && pt_pool_grant_access(p, peer)) RC_INC(pool_errors);
      __atomic_store_n(&devs[dev].pool, p, __ATOMIC_RELEASE);
      if (__atomic_load_n(&ndev, __ATOMIC_RELAXED) <= dev) __atomic_store_n(&ndev, dev + 1, __ATOMIC_RELEASE);
      pt_debug("device %d: pool created (keep %" PRIu64 ", limit %" PRIu64 ", chunk %" PRIu64 ")", dev, R.keep,
               R.limit, R.chunk);
    } else {
      __atomic_store_n(&devs[dev].failed, 1, __ATOMIC_RELAXED);
      RC_INC(pool_errors);
      PT_INTERNAL_ERROR();
      pt_warn("device %d: no pool (CUDA error %d): its allocations pass through", dev, rc);
    }
  }
  p = devs[dev].pool;
  pthread_mutex_unlock(&create_mu);
  return p;
}

void pt_route_stream_retire(uint64_t stream) {
  if (!explicit_stream(stream)) return;
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    int rc = p ? pt_pool_stream_retire(p, stream) : 0;
    if (rc) {
      /* The wait for the stream failed: the context is broken (sticky
       * error) and so will every later call on it be. */
      PT_INTERNAL_ERROR();
      PT_LOG_ONCE(PT_LOG_WARN, "retiring a destroyed stream failed with CUDA error %d", rc);
    }
  }
}

/* The pool whose address space holds ptr (no lock). */
static struct pt_pool *pool_of_ptr(const void *ptr) {
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && pt_pool_in_range(p, ptr)) return p;
  }
  return NULL;
}

static uint64_t trim_all(void) {
  uint64_t n = 0;
  int nd = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < nd; d++) {
    struct pt_pool *p = pool_at(d);
    if (p) n += pt_pool_trim(p, 0);
  }
  return n;
}

/* ---- pass-through pointers (only with a limit) ----------------------------
 * Open addressing, linear probing, backward-shift deletion; one mutex per
 * stripe so threads freeing different pointers rarely meet. */
#define PH_STRIPES 64
struct ph_ent {
  uintptr_t key; /* 0 = empty */
  uint64_t size;
  int dev;
};
struct ph_stripe {
  pthread_mutex_t mu;
  struct ph_ent *t;
  uint64_t cap, n;
} __attribute__((aligned(64)));
static struct ph_stripe ph[PH_STRIPES] = {[0 ... PH_STRIPES - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};

static inline uint64_t ph_hash(uintptr_t k) { return (uint64_t)(k >> 8) * 0x9E3779B97F4A7C15ull; }

static int ph_put_locked(struct ph_stripe *s, uintptr_t k, uint64_t size, int dev) {
  if ((s->n + 1) * 2 > s->cap) {
    uint64_t cap = s->cap ? s->cap * 2 : 64;
    struct ph_ent *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (uint64_t i = 0; i < s->cap; i++) {
      if (!s->t[i].key) continue;
      uint64_t j = (ph_hash(s->t[i].key) >> 6) & (cap - 1);
      while (t[j].key) j = (j + 1) & (cap - 1);
      t[j] = s->t[i];
    }
    free(s->t);
    s->t = t;
    s->cap = cap;
  }
  uint64_t j = (ph_hash(k) >> 6) & (s->cap - 1);
  while (s->t[j].key && s->t[j].key != k) j = (j + 1) & (s->cap - 1);
  if (!s->t[j].key) s->n++;
  s->t[j] = (struct ph_ent){k, size, dev};
  return 0;
}

static int ph_put(const void *ptr, uint64_t size, int dev) {
  uintptr_t k = (uintptr_t)ptr;
  struct ph_stripe *s = &ph[ph_hash(k) & (PH_STRIPES - 1)];
  pthread_mutex_lock(&s->mu);
  int rc = ph_put_locked(s, k, size, dev);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Removes ptr; true with its entry when it was there. */
static bool ph_take(const void *ptr, struct ph_ent *out) {
  uintptr_t k = (uintptr_t)ptr;
  struct ph_stripe *s = &ph[ph_hash(k) & (PH_STRIPES - 1)];
  bool found = false;
  pthread_mutex_lock(&s->mu);
  if (s->n) {
    uint64_t m = s->cap - 1, j = (ph_hash(k) >> 6) & m;
    while (s->t[j].key && s->t[j].key != k) j = (j + 1) & m;
    if (s->t[j].key == k) {
      found = true;
      *out = s->t[j];
      s->n--;
      /* Backward shift: move later entries of the run into the hole when
       * their home slot is not between the hole and them. */
      uint64_t hole = j, i = j;
      for (;;) {
        i = (i + 1) & m;
        if (!s->t[i].key) break;
        uint64_t home = (ph_hash(s->t[i].key) >> 6) & m;
        if (((i - home) & m) >= ((i - hole) & m)) {
          s->t[hole] = s->t[i];
          hole = i;
        }
      }
      s->t[hole].key = 0;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

/* Reserves size pass-through bytes on pool under the limit (trimming the
 * pool's unused memory first if needed). false: over the limit. */
static bool limit_reserve(struct pt_pool *pool, uint64_t size) {
  pt_pool_note_passthrough(pool, (int64_t)size);
  struct pt_pool_usage u;
  pt_pool_usage(pool, &u);
  if (u.physical_bytes + u.passthrough_bytes <= R.limit) return true;
  if (u.physical_bytes > u.live_bytes && pt_pool_trim(pool, 0)) {
    pt_pool_usage(pool, &u);
    if (u.physical_bytes + u.passthrough_bytes <= R.limit) return true;
  }
  pt_pool_note_passthrough(pool, -(int64_t)size);
  return false;
}

/* ---- allocation ---------------------------------------------------------- */

/* dev: the device if known, -1 to find it (only needed with a limit), -2
 * when it cannot be known. track: count it against the limit. */
static int pass_alloc(enum pt_route_api api, enum pt_route_smode sm, void **ptr, size_t size, uint64_t stream,
                      pt_route_real_alloc real, void *arg, int dev, bool track) {
  struct pt_pool *pool = NULL;
  if (track && R.limit && R.pool_on) {
    if (dev == -1) dev = route_device(api, sm, stream);
    if (dev >= 0 && (pool = pool_get(dev)) && !limit_reserve(pool, size)) {
      RC_INC(passthrough_rejections);
      pt_debug("pass-through allocation of %zu bytes over PONYTAIL_MEM_LIMIT on device %d", size, dev);
      return PT_OOM;
    }
  }
  int r = real(arg, ptr);
  if (r == PT_OOM && __atomic_load_n(&ndev, __ATOMIC_ACQUIRE) && trim_all()) {
    /* The device is full, maybe of our unused memory: give it back, retry once. */
    RC_INC(trim_retries);
    r = real(arg, ptr);
  }
  if (r != 0) {
    if (pool) pt_pool_note_passthrough(pool, -(int64_t)size);
    return r;
  }
  RC_INC(passthrough_allocs);
  if (pool && ph_put(*ptr, size, dev)) {
    /* Cannot remember it: do not count it (its free would not uncount it). */
    pt_pool_note_passthrough(pool, -(int64_t)size);
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "out of memory tracking pass-through pointers: the limit undercounts");
  }
  pt_trace_alloc(R.trace, false, size, *ptr, stream);
  return 0;
}

int pt_route_alloc(enum pt_route_api api, enum pt_route_smode sm, enum pt_route_mpool mp, const void *mempool,
                   void **ptr, size_t size, uint64_t stream, pt_route_real_alloc real, void *arg) {
  if (!ptr || !size || !R.pool_on || size < (sm == PT_SM_SYNC ? R.kv_min : R.kv_min_async))
    return pass_alloc(api, sm, ptr, size, stream, real, arg, -1, ptr != NULL);
  int dev = route_device(api, sm, stream);
  if (dev < 0) return pass_alloc(api, sm, ptr, size, stream, real, arg, -2, false);
  if (sm != PT_SM_SYNC && capturing(sm, stream)) {
    RC_INC(capture_passthrough);
    return pass_alloc(api, sm, ptr, size, stream, real, arg, dev, false);
  }
  struct pt_pool *pool = default_pool_ok(dev, mp, mempool) ? pool_get(dev) : NULL;
  if (!pool) return pass_alloc(api, sm, ptr, size, stream, real, arg, dev, true);
  bool any;
  uint64_t sid = pool_stream(sm, stream, &any);
  void *p = NULL;
  int rc = any ? pt_pool_alloc_any(pool, size, &p) : pt_pool_alloc(pool, size, sid, &p);
  if (rc) {
    if (rc != PT_OOM) PT_LOG_ONCE(PT_LOG_WARN, "pool allocation failed with CUDA error %d (returned to the caller)", rc);
    return api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  }
  *ptr = p;
  pt_trace_alloc(R.trace, true, size, p, stream);
  return 0;
}

int pt_route_free(enum pt_route_api api, enum pt_route_smode sm, void *ptr, uint64_t stream,
                  pt_route_real_free real, void *arg) {
  struct pt_pool *pool = ptr ? pool_of_ptr(ptr) : NULL;
  if (pool) {
    int rc;
    if (sm != PT_SM_SYNC && capturing(sm, stream)) {
      if (!pt_pool_owns(pool, ptr)) return api == PT_API_RT ? cudaErrorInvalidValue : CUDA_ERROR_INVALID_VALUE;
      RC_INC(capture_deferred_frees);
      PT_LOG_ONCE(PT_LOG_WARN, "a pooled block was freed during stream capture: it is kept, not reused");
      return 0;
    }
    /* Traced before the free: once freed, another thread may get the same
     * address, and its line must come after this one. */
    if (R.trace && pt_pool_owns(pool, ptr)) pt_trace_free(R.trace, true, ptr, stream);
    bool any;
    rc = sm == PT_SM_SYNC ? pt_pool_free_sync(pool, ptr) : pt_pool_free(pool, ptr, pool_stream(sm, stream, &any));
    if (rc == 0) pt_ipc_block_freed(ptr); /* its export record goes with it */
    /* cudaFree gives the memory back to the device, and programs rely on it:
     * a caching allocator above us (PyTorch's empty_cache, its out-of-memory
     * retry) frees synchronously exactly when it wants the memory released.
     * So a synchronous free does not wait for PONYTAIL_POOL_KEEP (which is for
     * stream-ordered churn): every wholly free handle goes back now. */
    if (rc == 0 && sm == PT_SM_SYNC) (void)pt_pool_trim(pool, 0);
    return api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  }
  if (ptr) pt_trace_free(R.trace, false, ptr, stream);
  int r = real(arg, ptr);
  if (r == 0 && ptr) {
    RC_INC(passthrough_frees);
    struct ph_ent e;
    if (R.limit && ph_take(ptr, &e)) {
      struct pt_pool *p = pool_at(e.dev);
      if (p) pt_pool_note_passthrough(p, -(int64_t)e.size);
    }
  }
  return r;
}

/* ---- the shim's own allocations ------------------------------------------ */

/* The real call: pt_drv's cuMemAlloc_v2, resolved from libcuda itself, so it
 * never re-enters the shim's exported cuMemAlloc_v2 (which would count the
 * call as the application's and route it a second time). */
static int internal_real(void *arg, void **ptr) {
  size_t size = *(const size_t *)arg;
  if (!pt_drv.cuMemAlloc) return CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr d = 0;
  CUresult r = pt_drv.cuMemAlloc(&d, size);
  if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
  return (int)r;
}

int pt_route_internal_alloc(void **ptr, size_t size) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  if (!pt_real_driver()) return CUDA_ERROR_NOT_INITIALIZED;
  int r = pt_route_alloc(PT_API_DRV, PT_SM_SYNC, PT_MP_NONE, NULL, ptr, size, 0, internal_real, &size);
  if (r == 0) {
    RC_INC(internal_allocs);
    RC_ADD(internal_bytes, size);
  }
  return r;
}

bool pt_route_is_pooled(const void *p) {
  struct pt_pool *pool = p ? pool_of_ptr(p) : NULL;
  return pool && pt_pool_owns(pool, p);
}

/* ---- queries ------------------------------------------------------------- */

void pt_route_meminfo(enum pt_route_api api, size_t *free_bytes, size_t *total_bytes) {
  if (!R.limit || !R.pool_on || !free_bytes || !total_bytes) return;
  int dev = route_device(api, PT_SM_SYNC, 0);
  struct pt_pool *pool = dev >= 0 ? pool_get(dev) : NULL;
  if (!pool) return;
  struct pt_pool_usage u;
  pt_pool_usage(pool, &u);
  uint64_t used = u.physical_bytes + u.passthrough_bytes;
  uint64_t f = used < R.limit ? R.limit - used : 0;
  if (f < *free_bytes) *free_bytes = (size_t)f;
  *total_bytes = (size_t)R.limit;
}

/* The ordinal whose default pool mempool is, among devices with a pool. */
static struct pt_pool *pool_of_mempool(const void *mempool) {
  if (!mempool || !R.pool_on) return NULL;
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (p && (const void *)default_pool(d) == mempool) return p;
  }
  return NULL;
}

void pt_route_poolattr(const void *mempool, int attr, void *value) {
  struct pt_pool *p = value ? pool_of_mempool(mempool) : NULL;
  if (!p) return;
  struct pt_pool_usage u;
  pt_pool_usage(p, &u);
  /* Current figures add exactly. High-water marks: the driver pool's high
   * plus ours is an upper bound of the combined high (they may not have
   * peaked at the same time); both restart when the application resets them
   * (pt_route_poolattr_set). */
  uint64_t add;
  switch (attr) {
  case cudaMemPoolAttrReservedMemCurrent: add = u.physical_bytes; break;
  case cudaMemPoolAttrReservedMemHigh: add = u.high_physical_bytes; break;
  case cudaMemPoolAttrUsedMemCurrent: add = u.live_bytes; break;
  case cudaMemPoolAttrUsedMemHigh: add = u.high_live_bytes; break;
  default: return;
  }
  *(uint64_t *)value += add;
}

void pt_route_poolattr_set(const void *mempool, int attr) {
  struct pt_pool *p = pool_of_mempool(mempool);
  if (!p) return;
  if (attr == cudaMemPoolAttrUsedMemHigh) pt_pool_reset_highs(p, true, false);
  else if (attr == cudaMemPoolAttrReservedMemHigh) pt_pool_reset_highs(p, false, true);
}

void pt_route_pool_trim(const void *mempool, size_t keep) {
  struct pt_pool *p = pool_of_mempool(mempool);
  if (p) (void)pt_pool_trim(p, keep);
}

/* IPC on pooled memory (shim/ipc.c has the scheme). The legacy handle
 * names a cudaMalloc allocation of the driver, which VMM-mapped memory is
 * not: with PONYTAIL_IPC=fd the pool's granules are exportable and the
 * handle is Ponytail's own; with off, the call is refused with
 * cudaErrorInvalidValue and a line saying how to keep such buffers out of the
 * pool. Never silent: every failure is returned and logged. */
bool pt_route_ipc_get(enum pt_route_api api, void *handle, const void *ptr, int *err) {
  struct pt_pool *pool = ptr ? pool_of_ptr(ptr) : NULL;
  if (!pool) return false;
  if (!R.ipc) {
    RC_INC(ipc_refusals);
    PT_LOG_ONCE(PT_LOG_WARN,
                "cudaIpcGetMemHandle(%p): pooled memory cannot be exported with PONYTAIL_IPC=off; returning "
                "cudaErrorInvalidValue. Run with PONYTAIL_IPC=fd, PONYTAIL_POOL=0, or PONYTAIL_KV_MIN above the "
                "size of the buffers shared between processes",
                ptr);
    *err = api == PT_API_RT ? cudaErrorInvalidValue : CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  uint64_t t0 = pt_now_ns();
  int rc = handle ? pt_ipc_export(pool, pt_pool_device(pool), ptr, handle) : CUDA_ERROR_INVALID_VALUE;
  RC_ADD(ipc_export_ns, pt_now_ns() - t0);
  if (rc) RC_INC(ipc_errors);
  else RC_INC(ipc_exports);
  *err = api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  return true;
}

bool pt_route_ipc_open(enum pt_route_api api, void **ptr, const void *handle, int *err) {
  if (!handle || !pt_ipc_handle_ours(handle)) return false;
  int rc = CUDA_ERROR_INVALID_CONTEXT, dev = -1;
  CUcontext ctx = NULL;
  /* The importing device: the current context's, else the runtime's. */
  if (have_driver() && pt_drv.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS) {
    if (ctx) {
      CUdevice d;
      if (pt_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS) dev = (int)d;
    } else if (api == PT_API_RT && (dev = rt_device()) >= 0) {
      ctx = primary_of(dev, true);
    }
  }
  if (dev >= 0 && ctx) {
    uint64_t t0 = pt_now_ns();
    rc = pt_ipc_open(handle, ctx, dev, ptr);
    RC_ADD(ipc_open_ns, pt_now_ns() - t0);
  } else {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: no device or context to map a Ponytail handle into");
  }
  if (rc) RC_INC(ipc_errors);
  else RC_INC(ipc_opens);
  *err = api == PT_API_RT ? pt_route_rt_err(rc) : rc;
  return true;
}

bool pt_route_ipc_close(void *ptr, int *err) {
  uint64_t t0 = pt_now_ns();
  if (!pt_ipc_close(ptr, err)) return false;
  RC_ADD(ipc_close_ns, pt_now_ns() - t0);
  RC_INC(ipc_closes);
  return true;
}

void pt_route_peer_enabled(int device, int peer) {
  if (!R.pool_on || device < 0 || peer < 0 || device >= PT_ROUTE_MAX_DEV || peer >= PT_ROUTE_MAX_DEV ||
      device == peer)
    return;
  pthread_mutex_lock(&create_mu);
  devs[peer].accessors |= (uint64_t)1 << device;
  struct pt_pool *p = devs[peer].pool;
  pthread_mutex_unlock(&create_mu);
  RC_INC(peer_grants);
  if (p && pt_pool_grant_access(p, device)) {
    RC_INC(pool_errors);
    PT_INTERNAL_ERROR();
    PT_LOG_ONCE(PT_LOG_WARN, "could not grant device %d access to the pool of device %d", device, peer);
  }
}

/* The device whose default pool mempool is, among all devices (with a pool
 * or not yet); -1 if none. */
static int device_of_default_mempool(const void *mempool) {
  CUdevice d;
  for (int dev = 0; dev < PT_ROUTE_MAX_DEV && pt_drv.cuDeviceGet(&d, dev) == CUDA_SUCCESS; dev++)
    if ((const void *)default_pool(dev) == mempool) return dev;
  return -1;
}

void pt_route_pool_access(const void *mempool, const void *descs, size_t count) {
  if (!R.pool_on || !mempool || !descs || !have_driver() || !pt_drv.cuDeviceGet) return;
  int owner = device_of_default_mempool(mempool);
  if (owner < 0) return; /* an application pool: its allocations pass through */
  const CUmemAccessDesc *d = descs;
  for (size_t i = 0; i < count; i++) {
    if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;
    if (d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      PT_LOG_ONCE(PT_LOG_INFO,
                  "memory pool access of device %d to the default pool of device %d revoked: Ponytail's pool "
                  "keeps the access it granted",
                  d[i].location.id, owner);
      continue;
    }
    pt_route_peer_enabled(d[i].location.id, owner);
  }
}

/* ---- stats --------------------------------------------------------------- */

/* fn(device, that device's pool stats, ctx) for every device with a pool. */
static void route_each_pool(void (*fn)(int, const struct pt_pool_stats *, void *), void *ctx) {
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (!p) continue;
    struct pt_pool_stats st;
    pt_pool_stats(p, &st);
    fn(d, &st, ctx);
  }
}

static void add_pool(int d, const struct pt_pool_stats *st, void *sum) {
  (void)d;
  pt_pool_stats_add(sum, st);
}

/* Every pool's figures summed; limit_rejections also counts the pass-through
 * allocations refused under the limit (the pools count only refused growth). */
static void route_stats_sum(struct pt_pool_stats *sum) {
  memset(sum, 0, sizeof *sum);
  route_each_pool(add_pool, sum);
  sum->limit_rejections += __atomic_load_n(&rc_.passthrough_rejections, __ATOMIC_RELAXED);
}

static void device_json(int d, const struct pt_pool_stats *st, void *w) {
  pt_jw_obj_begin(w, NULL);
  pt_jw_i64(w, "device", d);
  pt_pool_stats_json(st, w);
  pt_jw_obj_end(w);
}

static void route_stats_json(struct pt_jw *w) {
  struct pt_pool_stats sum;
  route_stats_sum(&sum);
  pt_jw_bool(w, "routing", R.pool_on);
  pt_jw_u64(w, "kv_min", R.kv_min);
  pt_jw_u64(w, "kv_min_async", R.kv_min_async);
  pt_jw_u64(w, "limit_bytes", R.limit);
  pt_jw_u64(w, "chunk_bytes", R.chunk);
  /* Whether the hot path asks the driver about captures / the current pool. */
  pt_jw_bool(w, "capture_seen", __atomic_load_n(&capture_seen, __ATOMIC_ACQUIRE) != 0);
  pt_jw_bool(w, "mempool_set", __atomic_load_n(&mempool_set, __ATOMIC_ACQUIRE) != 0);
  pt_pool_stats_json(&sum, w);
#define PT_RC_JSON(n) pt_jw_u64(w, #n, __atomic_load_n(&rc_.n, __ATOMIC_RELAXED));
  PT_ROUTE_COUNTERS(PT_RC_JSON)
#undef PT_RC_JSON
  pt_jw_u64(w, "trace_write_errors", pt_trace_write_errors(R.trace));
  pt_jw_arr_begin(w, "devices");
  route_each_pool(device_json, w);
  pt_jw_arr_end(w);
}

#define MIB(x) ((double)(x) / 1048576.0)
static void device_text(int d, const struct pt_pool_stats *st, void *f) {
  fprintf(f, "  alloc device %d: pooled %" PRIu64 ", live %.1f MiB, physical %.1f MiB (peak %.1f / %.1f MiB)\n", d,
          st->pooled_allocs, MIB(st->live_bytes), MIB(st->physical_bytes), MIB(st->peak_live_bytes),
          MIB(st->peak_physical_bytes));
}

static void route_stats_text(FILE *f) {
  struct pt_pool_stats s;
  route_stats_sum(&s);
  fprintf(f, "  alloc: routing %s (from %" PRIu64 " B, stream-ordered from %" PRIu64 " B), pooled %" PRIu64
             " (frees %" PRIu64 "), passthrough %" PRIu64 " (frees %" PRIu64 ")\n",
          R.pool_on ? "on" : "off", R.kv_min, R.kv_min_async, s.pooled_allocs, s.pooled_frees, rc_.passthrough_allocs,
          rc_.passthrough_frees);
  fprintf(f, "  alloc: peak live %.1f MiB, peak physical %.1f MiB, stitches %" PRIu64 ", trims %" PRIu64
             ", limit rejections %" PRIu64 "\n",
          MIB(s.peak_live_bytes), MIB(s.peak_physical_bytes), s.stitches, s.trims, s.limit_rejections);
  if (s.map_ns || s.wait_ns)
    fprintf(f, "  alloc: host time in mapping calls %.1f ms, waiting for the device %.1f ms (syncs %" PRIu64 ")\n",
            s.map_ns / 1e6, s.wait_ns / 1e6, s.syncs);
  if (rc_.capture_passthrough || rc_.capture_deferred_frees || rc_.trim_retries || rc_.ipc_refusals ||
      rc_.ipc_exports || rc_.ipc_opens || rc_.ipc_errors)
    fprintf(f, "  alloc: capture pass-through %" PRIu64 ", capture-deferred frees %" PRIu64 ", trim retries %" PRIu64
               ", IPC refusals %" PRIu64 ", IPC exports %" PRIu64 " opens %" PRIu64 " closes %" PRIu64
               " errors %" PRIu64 "\n",
            rc_.capture_passthrough, rc_.capture_deferred_frees, rc_.trim_retries, rc_.ipc_refusals,
            rc_.ipc_exports, rc_.ipc_opens, rc_.ipc_closes, rc_.ipc_errors);
  if (rc_.ipc_exports || rc_.ipc_opens)
    fprintf(f, "  alloc: IPC host time: exports %.2f ms, opens %.2f ms, closes %.2f ms\n", rc_.ipc_export_ns / 1e6,
            rc_.ipc_open_ns / 1e6, rc_.ipc_close_ns / 1e6);
  if (rc_.internal_allocs)
    fprintf(f, "  alloc: internal (shim's own buffers) %" PRIu64 ", %.1f MiB\n", rc_.internal_allocs,
            MIB(rc_.internal_bytes));
  route_each_pool(device_text, f);
}

/* ---- setup --------------------------------------------------------------- */

static void trace_open(void) {
  const char *pattern = pt_opt_str(PT_OPT_TRACE);
  if (!pattern[0]) return;
  char path[4096];
  if (pt_path_expand(pattern, path, sizeof path) != 0 || !(R.trace = pt_trace_open(path))) {
    pt_warn("cannot open PONYTAIL_TRACE \"%s\": no allocation trace", pattern);
    return;
  }
  pt_trace_comment(R.trace, "ponytail allocation trace: A/R pooled, P/Q passed through");
}

void pt_route_setup(void) {
  R.pool_on = pt_opt_bool(PT_OPT_POOL);
  R.ipc = pt_opt_enum(PT_OPT_IPC) == 0; /* fd|off */
  R.kv_min = pt_opt_size(PT_OPT_KV_MIN);
  /* Unset: every stream-ordered size (what PyTorch's tensors become under
   * PONYTAIL_TORCH_ALLOC=async), unless only PONYTAIL_KV_MIN was given. */
  R.kv_min_async = pt_opt_is_set(PT_OPT_KV_MIN_ASYNC) || !pt_opt_is_set(PT_OPT_KV_MIN)
                       ? pt_opt_size(PT_OPT_KV_MIN_ASYNC)
                       : R.kv_min;
  R.keep = pt_opt_size(PT_OPT_POOL_KEEP);
  R.limit = pt_opt_size(PT_OPT_MEM_LIMIT);
  R.chunk = pt_pool_chunk_auto(pt_opt_size(PT_OPT_POOL_CHUNK), R.limit); /* 0 = auto, resolved here */
  trace_open();
  pt_stats_alloc_json = route_stats_json;
  pt_stats_alloc_text = route_stats_text;
}

void pt_route_atfork_child(void) {
  pt_ipc_atfork_child();
  if (!R.trace || !strstr(pt_opt_str(PT_OPT_TRACE), "%p")) return;
  pt_trace_close(R.trace);
  R.trace = NULL;
  trace_open();
}
