/* The allocation routing layer between the shim's entry points
 * (shim/entry_alloc.c) and the pool (allocator/pool.h).
 *
 * What goes where:
 * - Device allocations of at least PONYTAIL_KV_MIN bytes (synchronous calls)
 *   or PONYTAIL_KV_MIN_ASYNC bytes (stream-ordered calls; 0 by default: every
 *   size, since these are PyTorch's tensors under its cudaMallocAsync
 *   backend, and the driver's pool is slower for them) go to the pool of
 *   the device they are made for: the current context's device (driver entry
 *   points), else the runtime's current device (runtime entry points); for an
 *   explicit stream, the stream's device. Pools are created lazily, one per
 *   device ordinal, over the VMM backend.
 * - Everything else passes through to the real function: small requests,
 *   non-primary contexts, a thread without a context (driver API), streams
 *   being captured, explicit non-default memory pools, a device whose current
 *   memory pool is not its default one, and everything when PONYTAIL_POOL=0.
 * - Frees of pool pointers go back to the pool (cudaFree/cuMemFree keep their
 *   synchronous meaning); any other pointer passes through untouched.
 *
 * Results are the CUDA codes the real call would return. The numeric values
 * of the few codes involved are the same in both APIs (out of memory is 2,
 * invalid value 1, ...), so one int carries either; pt_route_rt_err maps a
 * backend CUresult to the runtime's cudaError_t where they differ.
 *
 * Never a global lock on the pass-through path: small requests take no lock
 * at all; with PONYTAIL_MEM_LIMIT set, pass-through pointers are tracked in a
 * lock-striped hash. */
#ifndef PT_SHIM_ROUTE_ALLOC_H
#define PT_SHIM_ROUTE_ALLOC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which API an entry point belongs to: decides how the device is found and
 * which error codes come back. */
enum pt_route_api { PT_API_RT, PT_API_DRV };

/* How to read the entry point's stream argument. */
enum pt_route_smode {
  PT_SM_SYNC,   /* no stream: cudaMalloc, cudaFree, cuMemAlloc, cuMemFree */
  PT_SM_LEGACY, /* 0 is the legacy default stream */
  PT_SM_PTSZ,   /* _ptsz variants: 0 is the per-thread default stream */
};

/* Which memory pool an async allocation asked for. */
enum pt_route_mpool {
  PT_MP_NONE,    /* synchronous allocation */
  PT_MP_CURRENT, /* cudaMallocAsync: the device's current pool */
  PT_MP_GIVEN,   /* cudaMallocFromPoolAsync: the pool argument */
};

/* The real call, made by the entry point (it knows the signature and sets
 * pt_tls_in_rt around runtime calls). Returns the real result. */
typedef int (*pt_route_real_alloc)(void *arg, void **ptr);
typedef int (*pt_route_real_free)(void *arg, void *ptr);

/* Reads the options, opens the trace and plugs the stats section in. Called
 * once from the shim's init (no CUDA call). */
void pt_route_setup(void);
/* After fork, in the child: a trace file named with %p is reopened. */
void pt_route_atfork_child(void);

int pt_route_alloc(enum pt_route_api api, enum pt_route_smode sm, enum pt_route_mpool mp, const void *mempool,
                   void **ptr, size_t size, uint64_t stream, pt_route_real_alloc real, void *arg);
int pt_route_free(enum pt_route_api api, enum pt_route_smode sm, void *ptr, uint64_t stream,
                  pt_route_real_free real, void *arg);

/* A device allocation the shim makes for itself (e.g. the decode kernel's
 * workspace), on the calling thread's current context: routed exactly as an
 * application's cuMemAlloc_v2 (pool when on, size >= PONYTAIL_KV_MIN and a
 * pool can be had; else the real cuMemAlloc_v2 of pt_drv, counted as
 * pass-through and under PONYTAIL_MEM_LIMIT; traced). Also counted as
 * internal_allocs / internal_bytes. Returns a CUresult. There is no internal
 * free: the callers keep these buffers for the life of the process. */
int pt_route_internal_alloc(void **ptr, size_t size);
/* true when p is the start of a live block of one of the pools. */
bool pt_route_is_pooled(const void *p);

/* cudaMemGetInfo / cuMemGetInfo: applies the PONYTAIL_MEM_LIMIT view to the
 * real figures (unchanged without a limit). */
void pt_route_meminfo(enum pt_route_api api, size_t *free_bytes, size_t *total_bytes);
/* cudaMemPoolGetAttribute on a device's default pool: adds the pool's
 * reserved/used figures to *value (attr is a cudaMemPoolAttr). */
void pt_route_poolattr(const void *mempool, int attr, void *value);
/* A successful cudaMemPoolSetAttribute on a device's default pool: resetting
 * its ReservedMemHigh / UsedMemHigh restarts the highs pt_route_poolattr adds
 * (torch's reset_peak_memory_stats under its cudaMallocAsync backend). */
void pt_route_poolattr_set(const void *mempool, int attr);
/* cudaMemPoolTrimTo on a device's default pool: trims ours to keep bytes. */
void pt_route_pool_trim(const void *mempool, size_t keep);
/* IPC of pooled memory (shim/ipc.h). Each returns true when the call is the
 * pool's, with the result in *err (a cudaError_t for PT_API_RT, else a
 * CUresult); false: pass it through.
 * get: ptr lies in a pool; the 64-byte handle is written on success (or the
 * call is refused with PONYTAIL_IPC=off).
 * open: the 64-byte handle is Ponytail's; mapped for the current device.
 * close: ptr came from open. */
bool pt_route_ipc_get(enum pt_route_api api, void *handle, const void *ptr, int *err);
bool pt_route_ipc_open(enum pt_route_api api, void **ptr, const void *handle, int *err);
bool pt_route_ipc_close(void *ptr, int *err);
/* After a successful peer enable: current device `device` may now access
 * memory of `peer`; grants it access to peer's pool, now and later. */
void pt_route_peer_enabled(int device, int peer);

/* Sticky flags raised by shim/entry_capture.c before the real call: a stream
 * capture was begun somewhere in the process (from then on every
 * stream-ordered alloc and free asks whether its stream is capturing), and a
 * device's current mempool was set (from then on cudaMallocAsync asks which
 * pool is current). Until then those driver queries are skipped. */
void pt_route_capture_seen(void);
/* Streams capturing, process-wide (shim/entry_capture.c);
 * pt_capture_stream_gone after a stream's successful destruction. */
int64_t pt_captures_open(void);
void pt_capture_stream_gone(uint64_t stream);
void pt_capture_atfork_child(void);
void pt_route_mempool_set(void);
/* Before the application destroys stream (a CUstream / cudaStream_t): every
 * pool waits for the stream's pending frees and forgets it, so that no marker
 * is ever recorded on the dead handle (shim/entry_stream.c). Default-stream
 * handles and streams no pool knows are ignored. */
void pt_route_stream_retire(uint64_t stream);
/* cudaMemPoolSetAccess / cuMemPoolSetAccess succeeded on mempool (descs: count
 * CUmemAccessDesc). When mempool is a device's default pool, whose
 * stream-ordered allocations the pool now holds, each device given read or
 * read/write access gets read/write access to that device's pool, now and
 * later (as after a peer enable). Revoking is not mirrored: logged once. */
void pt_route_pool_access(const void *mempool, const void *descs, size_t count);
/* Runtime peer enable: the current device (runtime view); -1 if unknown. */
int pt_route_current_device(enum pt_route_api api);
/* Driver peer enable: the device of a context; -1 if unknown. */
int pt_route_ctx_device(void *ctx);

/* CUresult -> cudaError_t for results the pool produced. */
int pt_route_rt_err(int cu);

#endif
