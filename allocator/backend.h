/* The pool's view of device memory: a small ops table over an opaque context.
 *
 * Two implementations: backend_vmm.c (CUDA driver virtual memory) and
 * backend_host.c (mmap of a memfd, for tests and `ponytail replay`). The pool
 * never includes cuda.h; it only sees these integers.
 *
 * Preconditions, stated once for every op:
 * - Results are 0 on success, otherwise the backend's own error code (a
 *   CUresult for the VMM backend), which the pool propagates unchanged. The
 *   three codes the pool must recognise are in struct pt_backend_ops.
 * - Addresses and sizes handed to reserve/create/map/unmap/set_access are
 *   multiples of the granularity. A handle is one or more granules, created
 *   together and mapped whole, at most once at a time (the driver maps no
 *   part of a handle: offset 0 and the handle's size only). unmap covers
 *   whole mappings only.
 * - Streams are opaque 64-bit values (a CUstream; 0 = the legacy default
 *   stream). Markers are event-like: record captures the stream's work queued
 *   so far; re-recording replaces what a later query/sync/wait refers to.
 * - Ops may be called from any thread, but never concurrently on one context
 *   (the pool calls them under its mutex), except during a sleep or a wake
 *   with helper threads (pool_sleep_host.c, pool_sleep.c), while the pool's mutex is held: a
 *   sleep's helpers call host_alloc and create_host concurrently with each
 *   other and with the sleeping thread's map, set_access, copy_to_host and
 *   copy_d2d; a wake's helper calls create, map, set_access, unmap and
 *   release concurrently with the waking thread's copy_to_device and
 *   copy_d2d. A sleep's preparation (pt_pool_sleep_prepare) calls
 *   host_alloc, create_host, host_lock, host_free and release without the
 *   mutex, from its thread and its helpers, concurrently with each other and
 *   with any op the pool calls under its mutex. */
#ifndef PT_ALLOC_BACKEND_H
#define PT_ALLOC_BACKEND_H
#include <stddef.h>
#include <stdint.h>

typedef uint64_t pt_bk_handle; /* physical memory of one or more granules */
typedef uint64_t pt_bk_marker; /* an event-like marker */
typedef uint64_t pt_bk_stream; /* an opaque stream */

/* host_alloc's kinds of host memory: allocated page-locked by the driver;
 * ordinary memory faulted in by the calling thread and then registered with
 * the driver; or the same faulted in only, not yet page-locked (host_lock
 * makes it a REGISTERED buffer: the faulting, kernel work, can then run on
 * helper threads while one thread makes every driver call). */
enum { PT_HOST_BUF_PINNED, PT_HOST_BUF_REGISTERED, PT_HOST_BUF_FAULTED };

struct pt_backend_ops {
  const char *name;
  int err_oom;       /* "no physical memory left": the pool may stitch instead */
  int err_not_ready; /* marker_query: recorded work not finished yet */
  int err_invalid;   /* returned by the pool for a pointer it does not own */

  int (*granularity)(void *ctx, size_t *out);
  int (*reserve)(void *ctx, size_t size, uintptr_t *va); /* granule-aligned VA, inaccessible */
  int (*unreserve)(void *ctx, uintptr_t va, size_t size);
  int (*create)(void *ctx, size_t size, pt_bk_handle *h); /* size bytes of physical memory */
  int (*release)(void *ctx, pt_bk_handle h);               /* must not be mapped */
  int (*map)(void *ctx, uintptr_t va, size_t size, pt_bk_handle h); /* all of h (size bytes) at va */
  int (*unmap)(void *ctx, uintptr_t va, size_t size);
  int (*set_access)(void *ctx, uintptr_t va, size_t size); /* read/write for the pool's device */

  int (*marker_create)(void *ctx, pt_bk_marker *m);
  int (*marker_destroy)(void *ctx, pt_bk_marker m);
  int (*marker_record)(void *ctx, pt_bk_marker m, pt_bk_stream s);
  int (*marker_query)(void *ctx, pt_bk_marker m); /* 0 done, err_not_ready, else error */
  int (*marker_sync)(void *ctx, pt_bk_marker m);  /* blocks until the marker is done */
  int (*stream_wait)(void *ctx, pt_bk_stream s, pt_bk_marker m); /* s's later work waits for m */
  int (*device_sync)(void *ctx); /* all work on the device is done */
  /* Optional (NULL: not supported): from now on set_access also grants
   * read/write to this device ordinal (peer access). Idempotent. */
  int (*add_accessor)(void *ctx, int device);

  void (*destroy)(void *ctx); /* frees the context (not the memory the pool holds) */
  /* Optional (NULL: not supported): a new file descriptor that shares handle
   * h with another process (CUDA IPC of pooled memory). The caller owns the
   * descriptor and closes it; the memory itself is unaffected. */
  int (*export_fd)(void *ctx, pt_bk_handle h, int *fd);
  /* Optional (NULL: not measured): host time spent so far in the mapping ops
   * (reserve/unreserve/create/release/map/unmap/set_access) and blocked in
   * marker_sync/device_sync, in ns. May be called without the pool's mutex. */
  void (*busy_ns)(void *ctx, uint64_t *map_ns, uint64_t *wait_ns);
  /* Optional: run first by each helper thread of a sleep, a prepare or a
   * wake (pool_sleep_host.c, pool_sleep.c). The VMM backend sets the thread's stream-capture
   * interaction mode to relaxed: its driver calls (page-locking, freeing
   * page-locked memory, mapping) must not count as unsafe calls against a
   * CUDA graph the program captures meanwhile in global mode, which would
   * fail them and invalidate the capture. Helpers never capture. */
  void (*thread_start)(void *ctx);

  /* Optional (NULL: not supported): mapping memory that another process
   * exported (CUDA IPC import; the caller is the shim's importer, never the
   * pool). Unlike the ops above they touch no state of the context, so they
   * may run from any thread, concurrently with each other and with any op;
   * they are not counted in busy_ns. A backend that cannot import answers
   * err_invalid. Sizes are multiples of the exporter's granule.
   * import_reserve: size bytes of inaccessible VA aligned to align (a power
   *   of two), freed only by import_unmap.
   * import_map: imports the physical memory behind descriptor fd (the caller
   *   keeps and closes fd), maps all of it (size bytes) at va inside such a
   *   range, and drops the imported handle (the mapping keeps the memory).
   *   When *owner < 0 on entry, sets it to the device ordinal the memory
   *   lives on (this process's numbering) if the backend can tell.
   * import_access: read/write on [va, va+size) for exactly the n device
   *   ordinals in devices (1 <= n).
   * import_unmap: unmaps [va, va+mapped) (mapped 0: nothing) and frees the
   *   size bytes of VA reserved at va; returns the first error, going on. */
  int (*import_reserve)(void *ctx, size_t size, size_t align, uintptr_t *va);
  int (*import_map)(void *ctx, int fd, uintptr_t va, size_t size, int *owner);
  int (*import_access)(void *ctx, uintptr_t va, size_t size, const int *devices, int n);
  int (*import_unmap)(void *ctx, uintptr_t va, size_t mapped, size_t size);

  /* Optional (NULL: not supported; a sleeping pool can then only drop its
   * contents): page-locked host memory that keeps a sleeping pool's bytes,
   * and synchronous copies between it and mapped pool memory (pool_sleep.c).
   * Called under the pool's mutex like the mapping ops. how: PT_HOST_BUF_*,
   * the kind of page-locked memory; host_free gets the size and kind it was
   * allocated with. */
  int (*host_alloc)(void *ctx, size_t size, int how, void **p);
  int (*host_free)(void *ctx, void *p, size_t size, int how);
  int (*copy_to_host)(void *ctx, void *dst, uintptr_t src, size_t size);
  int (*copy_to_device)(void *ctx, uintptr_t dst, const void *src, size_t size);
  /* Optional (NULL: FAULTED buffers are not offered): page-locks a FAULTED
   * buffer of size bytes, which is then freed as REGISTERED. On failure it
   * stays FAULTED. */
  int (*host_lock)(void *ctx, void *p, size_t size);

  /* Optional (NULL: no host tier): size bytes of page-locked host memory as
   * a handle like create's, mapped, released and given access the same way,
   * that the device reads and writes over the link (pool_tier.c). Not
   * counted against the device's memory. copy_d2d copies between two mapped
   * pool ranges (moving a host granule back to the device), synchronously. */
  int (*create_host)(void *ctx, size_t size, pt_bk_handle *h);
  int (*copy_d2d)(void *ctx, uintptr_t dst, uintptr_t src, size_t size);
  /* Optional (NULL: not known): bytes of the device free now, every process
   * counted (cuMemGetInfo). The host tier's reserve is measured by it. */
  int (*device_free)(void *ctx, uint64_t *bytes);
};

struct pt_backend {
  const struct pt_backend_ops *ops;
  void *ctx;
};

#endif
