/* VMM backend: see backend_vmm.h. The only file of allocator/ that includes
 * cuda.h. Every CUresult is checked and returned unchanged. */
#include "allocator/backend_vmm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "common/driver.h"
#include "common/now_ns.h"

#define VMM_MAX_ACCESS 64

struct vmm_ctx {
  /* The real driver table the shim handed pt_backend_vmm_create (filled, never
   * changed): read through the context every call already has. */
  const struct pt_driver *drv;
  int ordinal;
  CUdevice dev;
  CUcontext ctx; /* the device's primary context, retained */
  size_t gran;
  CUmemAllocationProp prop;
  /* The host tier's granules: pinned host memory on the host NUMA node closest
   * to the device (one reserved range holds them beside device granules; a
   * kernel reads them over the link), else on the host as a whole. Without a
   * shareable handle type: tier blocks are never exported. */
  CUmemAllocationProp host_prop;
  /* Devices given read/write on every mapping: the pool's own first, then
   * peers (cudaDeviceEnablePeerAccess). */
  CUmemAccessDesc access[VMM_MAX_ACCESS];
  int naccess;
  /* Granules are created with a POSIX file descriptor handle type, so any of
   * them can be exported later (CUDA IPC of pooled memory). */
  bool exportable;
  /* Time spent in the driver's mapping calls and in blocking waits (ns),
   * so the stats can say what the pool cost the host (busy_ns). */
  uint64_t vmm_ns, wait_ns;
};

/* Runs expr with the pool's device context current on this thread, and
 * restores the caller's context. A failed pop is reported only when expr
 * itself succeeded. */
#define VMM_CALL(v, expr)                                       \
  do {                                                          \
    CUresult r_ = (v)->drv->cuCtxPushCurrent((v)->ctx);         \
    if (r_ != CUDA_SUCCESS) return (int)r_;                     \
    CUresult e_ = (expr);                                       \
    CUcontext old_;                                             \
    r_ = (v)->drv->cuCtxPopCurrent(&old_);                      \
    return (int)(e_ != CUDA_SUCCESS ? e_ : r_);                 \
  } while (0)

/* r = expr, run with the context current; r = the push's error when it
 * cannot be made current. A failed pop is ignored: what expr did (a mapping,
 * a registration) stands, and its result is the caller's. */
#define VMM_IN_CTX(v, r, expr)                             \
  do {                                                     \
    (r) = (v)->drv->cuCtxPushCurrent((v)->ctx);            \
    if ((r) == CUDA_SUCCESS) {                             \
      (r) = (expr);                                        \
      CUcontext old_;                                      \
      (void)(v)->drv->cuCtxPopCurrent(&old_);              \
    }                                                      \
  } while (0)

/* A sleep's helper thread (pool_sleep_host.c, pool_sleep.c) at its start: see backend.h. */
static void vmm_thread_start(void *c) {
  struct vmm_ctx *v = c;
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (v->drv->cuThreadExchangeStreamCaptureMode) (void)v->drv->cuThreadExchangeStreamCaptureMode(&m);
}

static int vmm_granularity(void *c, size_t *out) {
  *out = ((struct vmm_ctx *)c)->gran;
  return 0;
}

static int raw_reserve(void *c, size_t size, uintptr_t *va) {
  struct vmm_ctx *v = c;
  CUdeviceptr p = 0;
  CUresult r;
  CUresult pr = v->drv->cuCtxPushCurrent(v->ctx);
  if (pr != CUDA_SUCCESS) return (int)pr;
  r = v->drv->cuMemAddressReserve(&p, size, v->gran, 0, 0);
  CUcontext old;
  pr = v->drv->cuCtxPopCurrent(&old);
  if (r == CUDA_SUCCESS) *va = (uintptr_t)p;
  return (int)(r != CUDA_SUCCESS ? r : pr);
}

static int raw_unreserve(void *c, uintptr_t va, size_t size) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuMemAddressFree((CUdeviceptr)va, size));
}

/* size bytes of physical memory of kind prop (the device's, or the host
 * tier's), created with the pool's context current. */
static int create_as(struct vmm_ctx *v, const CUmemAllocationProp *prop, size_t size, pt_bk_handle *h) {
  CUmemGenericAllocationHandle g = 0;
  CUresult pr = v->drv->cuCtxPushCurrent(v->ctx);
  if (pr != CUDA_SUCCESS) return (int)pr;
  CUresult r = v->drv->cuMemCreate(&g, size, prop, 0);
  CUcontext old;
  pr = v->drv->cuCtxPopCurrent(&old);
  if (r == CUDA_SUCCESS && pr != CUDA_SUCCESS) {
    (void)v->drv->cuMemRelease(g);
    return (int)pr;
  }
  if (r == CUDA_SUCCESS) *h = (pt_bk_handle)g;
  return (int)r;
}

static int raw_create(void *c, size_t size, pt_bk_handle *h) {
  struct vmm_ctx *v = c;
  return create_as(v, &v->prop, size, h);
}

static int raw_release(void *c, pt_bk_handle h) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuMemRelease((CUmemGenericAllocationHandle)h));
}

static int raw_map(void *c, uintptr_t va, size_t size, pt_bk_handle h) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuMemMap((CUdeviceptr)va, size, 0, (CUmemGenericAllocationHandle)h, 0));
}

static int raw_unmap(void *c, uintptr_t va, size_t size) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuMemUnmap((CUdeviceptr)va, size));
}

static int raw_set_access(void *c, uintptr_t va, size_t size) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuMemSetAccess((CUdeviceptr)va, size, v->access, (size_t)v->naccess));
}

static int vmm_add_accessor(void *c, int device) {
  struct vmm_ctx *v = c;
  for (int i = 0; i < v->naccess; i++)
    if (v->access[i].location.id == device) return 0;
  if (v->naccess == VMM_MAX_ACCESS || device < 0) return CUDA_ERROR_INVALID_VALUE;
  v->access[v->naccess].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  v->access[v->naccess].location.id = device;
  v->access[v->naccess].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  v->naccess++;
  return 0;
}

static int vmm_export_fd(void *c, pt_bk_handle h, int *fd) {
  struct vmm_ctx *v = c;
  if (!v->exportable || !v->drv->cuMemExportToShareableHandle) return CUDA_ERROR_NOT_SUPPORTED;
  int f = -1;
  CUresult pr = v->drv->cuCtxPushCurrent(v->ctx);
  if (pr != CUDA_SUCCESS) return (int)pr;
  CUresult r = v->drv->cuMemExportToShareableHandle(&f, (CUmemGenericAllocationHandle)h,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  CUcontext old;
  (void)v->drv->cuCtxPopCurrent(&old);
  if (r == CUDA_SUCCESS && f < 0) r = CUDA_ERROR_UNKNOWN;
  if (r == CUDA_SUCCESS) *fd = f;
  return (int)r;
}

/* IPC import: the importer's driver calls, each with the device's primary
 * context pushed; a failed pop is ignored, as the importer always did. */
static int vmm_import_reserve(void *c, size_t size, size_t align, uintptr_t *va) {
  struct vmm_ctx *v = c;
  CUdeviceptr p = 0;
  CUresult r;
  VMM_IN_CTX(v, r, v->drv->cuMemAddressReserve(&p, size, align, 0, 0));
  if (r == CUDA_SUCCESS) *va = (uintptr_t)p;
  return (int)r;
}

static int vmm_import_map(void *c, int fd, uintptr_t va, size_t size, int *owner) {
  struct vmm_ctx *v = c;
  if (!v->drv->cuMemImportFromShareableHandle) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult r = v->drv->cuCtxPushCurrent(v->ctx);
  if (r != CUDA_SUCCESS) return (int)r;
  CUmemGenericAllocationHandle h = 0;
  r = v->drv->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r == CUDA_SUCCESS && *owner < 0 && v->drv->cuMemGetAllocationPropertiesFromHandle) {
    CUmemAllocationProp prop;
    if (v->drv->cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS &&
        prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
      *owner = prop.location.id;
  }
  if (r == CUDA_SUCCESS) {
    r = v->drv->cuMemMap((CUdeviceptr)va, size, 0, h, 0);
    /* The mapping keeps the memory: the handle is not needed after it. */
    (void)v->drv->cuMemRelease(h);
  }
  CUcontext old;
  (void)v->drv->cuCtxPopCurrent(&old);
  return (int)r;
}

static int vmm_import_access(void *c, uintptr_t va, size_t size, const int *devices, int n) {
  struct vmm_ctx *v = c;
  CUmemAccessDesc d[VMM_MAX_ACCESS];
  if (n < 1 || n > VMM_MAX_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < n; i++)
    d[i] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = devices[i]},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUresult r;
  VMM_IN_CTX(v, r, v->drv->cuMemSetAccess((CUdeviceptr)va, size, d, (size_t)n));
  return (int)r;
}

static int vmm_import_unmap(void *c, uintptr_t va, size_t mapped, size_t size) {
  struct vmm_ctx *v = c;
  CUcontext old;
  /* Without the context the calls are still tried (VA is process-wide). */
  bool pushed = v->drv->cuCtxPushCurrent(v->ctx) == CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  if (mapped) r = v->drv->cuMemUnmap((CUdeviceptr)va, mapped);
  CUresult f = v->drv->cuMemAddressFree((CUdeviceptr)va, size);
  if (pushed) (void)v->drv->cuCtxPopCurrent(&old);
  return (int)(r != CUDA_SUCCESS ? r : f);
}

static int vmm_marker_create(void *c, pt_bk_marker *m) {
  struct vmm_ctx *v = c;
  CUevent e = NULL;
  CUresult pr = v->drv->cuCtxPushCurrent(v->ctx);
  if (pr != CUDA_SUCCESS) return (int)pr;
  CUresult r = v->drv->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  CUcontext old;
  pr = v->drv->cuCtxPopCurrent(&old);
  if (r == CUDA_SUCCESS && pr != CUDA_SUCCESS) {
    (void)v->drv->cuEventDestroy(e);
    return (int)pr;
  }
  if (r == CUDA_SUCCESS) *m = (pt_bk_marker)(uintptr_t)e;
  return (int)r;
}

static int vmm_marker_destroy(void *c, pt_bk_marker m) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuEventDestroy((CUevent)(uintptr_t)m));
}

static int vmm_marker_record(void *c, pt_bk_marker m, pt_bk_stream s) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuEventRecord((CUevent)(uintptr_t)m, (CUstream)(uintptr_t)s));
}

static int vmm_marker_query(void *c, pt_bk_marker m) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuEventQuery((CUevent)(uintptr_t)m));
}

static int raw_marker_sync(void *c, pt_bk_marker m) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuEventSynchronize((CUevent)(uintptr_t)m));
}

static int vmm_stream_wait(void *c, pt_bk_stream s, pt_bk_marker m) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuStreamWaitEvent((CUstream)(uintptr_t)s, (CUevent)(uintptr_t)m, 0));
}

static int raw_device_sync(void *c) {
  struct vmm_ctx *v = c;
  VMM_CALL(v, v->drv->cuCtxSynchronize());
}

/* The ops the pool sees: the calls above, timed. */
#define VMM_TIMED(field, call)                                                   \
  do {                                                                           \
    struct vmm_ctx *v_ = c;                                                      \
    uint64_t t0_ = pt_now_ns();                                                     \
    int r_ = (call);                                                             \
    __atomic_fetch_add(&v_->field, pt_now_ns() - t0_, __ATOMIC_RELAXED);            \
    return r_;                                                                   \
  } while (0)
static int vmm_reserve(void *c, size_t size, uintptr_t *va) { VMM_TIMED(vmm_ns, raw_reserve(c, size, va)); }
static int vmm_unreserve(void *c, uintptr_t va, size_t size) { VMM_TIMED(vmm_ns, raw_unreserve(c, va, size)); }
static int vmm_create(void *c, size_t size, pt_bk_handle *h) { VMM_TIMED(vmm_ns, raw_create(c, size, h)); }
static int vmm_release(void *c, pt_bk_handle h) { VMM_TIMED(vmm_ns, raw_release(c, h)); }
static int vmm_map(void *c, uintptr_t va, size_t size, pt_bk_handle h) { VMM_TIMED(vmm_ns, raw_map(c, va, size, h)); }
static int vmm_unmap(void *c, uintptr_t va, size_t size) { VMM_TIMED(vmm_ns, raw_unmap(c, va, size)); }
static int vmm_set_access(void *c, uintptr_t va, size_t size) { VMM_TIMED(vmm_ns, raw_set_access(c, va, size)); }
static int vmm_marker_sync(void *c, pt_bk_marker m) { VMM_TIMED(wait_ns, raw_marker_sync(c, m)); }
static int vmm_device_sync(void *c) { VMM_TIMED(wait_ns, raw_device_sync(c)); }

static void vmm_busy_ns(void *c, uint64_t *vmm_ns, uint64_t *wait_ns) {
  struct vmm_ctx *v = c;
  *vmm_ns = __atomic_load_n(&v->vmm_ns, __ATOMIC_RELAXED);
  *wait_ns = __atomic_load_n(&v->wait_ns, __ATOMIC_RELAXED);
}

/* The primary context stays retained: the pool lives until the process
 * exits, and the application holds the same context anyway. */
static void vmm_destroy(void *c) { free(c); }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* PT_HOST_BUF_REGISTERED and _FAULTED: ordinary memory (transparent huge
 * pages asked for), its pages faulted in here by the calling thread, which
 * may be one of a sleep's helpers: the kernel's zeroing, most of the cost of
 * page-locked memory, then runs on every helper at once, and the driver's
 * registration finds the pages there. REGISTERED registers it here too;
 * FAULTED leaves that to host_lock, on the thread that copies: on the H100
 * helpers registering while it copied slowed its copies from 54 to ~9 GB/s
 * (bench/records/2026-12-07-sleep-kinds.md). PyTorch's
 * pinned_use_cuda_host_register gets its pinned memory the same way. Where
 * the kernel cannot populate (EINVAL before 5.14) the registration faults
 * the pages itself; where memory runs out, either call fails and nothing is
 * touched. */
static int faulted_alloc(size_t size, void **p) {
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  (void)madvise(m, size, MADV_HUGEPAGE);
  /* A child forked while the process sleeps (a subprocess started by a
   * thread that is not held) neither needs these bytes nor should share
   * page-locked pages copy-on-write. */
  (void)madvise(m, size, MADV_DONTFORK);
  if (madvise(m, size, MADV_POPULATE_WRITE) && errno != EINVAL) {
    munmap(m, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *p = m;
  return 0;
}

/* Page-locks faulted memory: the one registration both kinds below make. */
static int host_register(struct vmm_ctx *v, void *p, size_t size) {
  if (!v->drv->cuMemHostRegister || !v->drv->cuMemHostUnregister) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult r;
  VMM_IN_CTX(v, r, v->drv->cuMemHostRegister(p, size, 0));
  return (int)r;
}

static int vmm_host_lock(void *c, void *p, size_t size) {
  struct vmm_ctx *v = c;
  uint64_t t0 = pt_now_ns();
  int r = host_register(v, p, size);
  __atomic_fetch_add(&v->wait_ns, pt_now_ns() - t0, __ATOMIC_RELAXED);
  return r;
}

static int registered_alloc(struct vmm_ctx *v, size_t size, void **p) {
  if (!v->drv->cuMemHostRegister || !v->drv->cuMemHostUnregister) return CUDA_ERROR_NOT_SUPPORTED;
  void *m;
  int rc = faulted_alloc(size, &m);
  if (rc) return rc;
  if ((rc = host_register(v, m, size))) {
    munmap(m, size);
    return rc;
  }
  *p = m;
  return 0;
}

/* A sleeping pool's bytes (pool_sleep.c): page-locked host memory, so that
 * the copies run at the link's speed; synchronous copies by unified address.
 * Drivers without these functions answer CUDA_ERROR_NOT_SUPPORTED (sleep
 * can then only drop the pool's contents). */
static int vmm_host_alloc(void *c, size_t size, int how, void **p) {
  struct vmm_ctx *v = c;
  uint64_t t0 = pt_now_ns();
  CUresult r;
  if (how == PT_HOST_BUF_REGISTERED) {
    r = (CUresult)registered_alloc(v, size, p);
  } else if (how == PT_HOST_BUF_FAULTED) {
    r = (CUresult)faulted_alloc(size, p);
  } else {
    if (!v->drv->cuMemHostAlloc) return CUDA_ERROR_NOT_SUPPORTED;
    VMM_IN_CTX(v, r, v->drv->cuMemHostAlloc(p, size, 0));
  }
  __atomic_fetch_add(&v->wait_ns, pt_now_ns() - t0, __ATOMIC_RELAXED); /* several threads: pool_sleep_host.c */
  return (int)r;
}

static int vmm_host_free(void *c, void *p, size_t size, int how) {
  struct vmm_ctx *v = c;
  if (how == PT_HOST_BUF_FAULTED) return munmap(p, size) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (how == PT_HOST_BUF_REGISTERED) {
    if (!v->drv->cuMemHostUnregister) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r;
    VMM_IN_CTX(v, r, v->drv->cuMemHostUnregister(p));
    /* A range the driver still holds registered is left mapped (lost,
     * not unmapped under the driver's page-locking). */
    if (r == CUDA_SUCCESS) munmap(p, size);
    return (int)r;
  }
  if (!v->drv->cuMemFreeHost) return CUDA_ERROR_NOT_SUPPORTED;
  VMM_CALL(v, v->drv->cuMemFreeHost(p));
}

static int vmm_copy_to_host(void *c, void *dst, uintptr_t src, size_t size) {
  struct vmm_ctx *v = c;
  if (!v->drv->cuMemcpyDtoH) return CUDA_ERROR_NOT_SUPPORTED;
  VMM_CALL(v, v->drv->cuMemcpyDtoH(dst, (CUdeviceptr)src, size));
}

static int vmm_copy_to_device(void *c, uintptr_t dst, const void *src, size_t size) {
  struct vmm_ctx *v = c;
  if (!v->drv->cuMemcpyHtoD) return CUDA_ERROR_NOT_SUPPORTED;
  VMM_CALL(v, v->drv->cuMemcpyHtoD((CUdeviceptr)dst, src, size));
}

/* The host tier's granules (host_prop, set up with the backend). */
static int raw_create_host(void *c, size_t size, pt_bk_handle *h) {
  struct vmm_ctx *v = c;
  return create_as(v, &v->host_prop, size, h);
}
static int vmm_create_host(void *c, size_t size, pt_bk_handle *h) { VMM_TIMED(vmm_ns, raw_create_host(c, size, h)); }

static int vmm_copy_d2d(void *c, uintptr_t dst, uintptr_t src, size_t size) {
  struct vmm_ctx *v = c;
  if (!v->drv->cuMemcpyDtoD) return CUDA_ERROR_NOT_SUPPORTED;
  VMM_CALL(v, v->drv->cuMemcpyDtoD((CUdeviceptr)dst, (CUdeviceptr)src, size));
}

/* The real cuMemGetInfo (the shim's own answers it with the limit's and the
 * tier's view): what the driver has left on the device for everyone. */
static int vmm_device_free(void *c, uint64_t *bytes) {
  struct vmm_ctx *v = c;
  if (!v->drv->cuMemGetInfo) return CUDA_ERROR_NOT_SUPPORTED;
  size_t f = 0, t = 0;
  CUresult r;
  VMM_IN_CTX(v, r, v->drv->cuMemGetInfo(&f, &t));
  if (r == CUDA_SUCCESS) *bytes = f;
  return (int)r;
}

static const struct pt_backend_ops vmm_ops = {
  .name = "vmm",
  .err_oom = CUDA_ERROR_OUT_OF_MEMORY,
  .err_not_ready = CUDA_ERROR_NOT_READY,
  .err_invalid = CUDA_ERROR_INVALID_VALUE,
  .granularity = vmm_granularity,
  .reserve = vmm_reserve,
  .unreserve = vmm_unreserve,
  .create = vmm_create,
  .release = vmm_release,
  .map = vmm_map,
  .unmap = vmm_unmap,
  .set_access = vmm_set_access,
  .marker_create = vmm_marker_create,
  .marker_destroy = vmm_marker_destroy,
  .marker_record = vmm_marker_record,
  .marker_query = vmm_marker_query,
  .marker_sync = vmm_marker_sync,
  .stream_wait = vmm_stream_wait,
  .device_sync = vmm_device_sync,
  .destroy = vmm_destroy,
  .add_accessor = vmm_add_accessor,
  .export_fd = vmm_export_fd,
  .busy_ns = vmm_busy_ns,
  .thread_start = vmm_thread_start,
  .import_reserve = vmm_import_reserve,
  .import_map = vmm_import_map,
  .import_access = vmm_import_access,
  .import_unmap = vmm_import_unmap,
  .host_alloc = vmm_host_alloc,
  .host_free = vmm_host_free,
  .copy_to_host = vmm_copy_to_host,
  .copy_to_device = vmm_copy_to_device,
  .host_lock = vmm_host_lock,
  .create_host = vmm_create_host,
  .copy_d2d = vmm_copy_d2d,
  .device_free = vmm_device_free,
};

int pt_backend_vmm_create(struct pt_backend *out, int ordinal, unsigned flags,
                          const struct pt_driver *drv) {
  if (!drv) return CUDA_ERROR_NOT_INITIALIZED;
  /* Every function this backend calls, checked once here. */
  if (!drv->cuInit || !drv->cuDeviceGet || !drv->cuDevicePrimaryCtxRetain ||
      !drv->cuCtxPushCurrent || !drv->cuCtxPopCurrent || !drv->cuCtxSynchronize ||
      !drv->cuMemAddressReserve || !drv->cuMemAddressFree || !drv->cuMemCreate ||
      !drv->cuMemRelease || !drv->cuMemMap || !drv->cuMemUnmap || !drv->cuMemSetAccess ||
      !drv->cuMemGetAllocationGranularity || !drv->cuEventCreate || !drv->cuEventDestroy ||
      !drv->cuEventRecord || !drv->cuEventQuery || !drv->cuEventSynchronize ||
      !drv->cuStreamWaitEvent)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = drv->cuInit(0);
  if (r != CUDA_SUCCESS) return (int)r;
  struct vmm_ctx *v = calloc(1, sizeof *v);
  if (!v) return CUDA_ERROR_OUT_OF_MEMORY;
  v->drv = drv;
  v->ordinal = ordinal;
  if ((r = drv->cuDeviceGet(&v->dev, ordinal)) != CUDA_SUCCESS ||
      (r = drv->cuDevicePrimaryCtxRetain(&v->ctx, v->dev)) != CUDA_SUCCESS) {
    free(v);
    return (int)r;
  }
  v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  v->prop.location.id = v->dev;
  /* Exportable granules only where the device says POSIX fds work; else
   * export answers CUDA_ERROR_NOT_SUPPORTED and the caller logs it. */
  int fd_ok = 0;
  if ((flags & PT_VMM_EXPORTABLE) && drv->cuDeviceGetAttribute && drv->cuMemExportToShareableHandle &&
      drv->cuDeviceGetAttribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, v->dev) ==
          CUDA_SUCCESS &&
      fd_ok) {
    v->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    v->exportable = true;
  }
  int numa = -1;
  if (!drv->cuDeviceGetAttribute ||
      drv->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, v->dev) != CUDA_SUCCESS)
    numa = -1;
  v->host_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->host_prop.location.type = numa >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
  v->host_prop.location.id = numa >= 0 ? numa : 0;
  v->access[0].location = v->prop.location;
  v->access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  v->naccess = 1;
  size_t g = 0;
  if ((r = drv->cuMemGetAllocationGranularity(&g, &v->prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) !=
          CUDA_SUCCESS ||
      !g) {
    free(v);
    return r != CUDA_SUCCESS ? (int)r : CUDA_ERROR_UNKNOWN;
  }
  /* The pool needs a power of two; 2 MiB on every GPU measured so far. */
  if (g & (g - 1)) {
    free(v);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  v->gran = g;
  out->ops = &vmm_ops;
  out->ctx = v;
  return 0;
}
