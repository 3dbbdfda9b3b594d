/* Stream-capture and current-mempool entry points. Nothing is routed here:
 * each one only raises a sticky flag (shim/route_alloc.h) before the real
 * call, so that the allocation hot path can skip two driver queries per call
 * until the process does either thing:
 *  - cuStreamIsCapturing on every stream-ordered alloc and free (~25 ns
 *    each): no stream can be capturing before some begin-capture call;
 *  - cuDeviceGet + cuDeviceGetMemPool on every cudaMallocAsync (~30 ns): a
 *    device's current pool is its default pool until a set-mempool call.
 * Every variant is wrapped, runtime and driver (exported and handed out by
 * cuGetProcAddress), so that a capture begun through any of them is seen;
 * the runtime's own calls reach the driver wrappers too (harmless: the flag
 * only ever goes up). */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "shim/capture_decl.h"
#include "shim/gate.h"
#include "shim/real.h"
#include "shim/route_alloc.h"
#include "shim/shim.h"

/* ---- runtime ------------------------------------------------------------- */

typedef cudaError_t (*pt_begin_fn)(cudaStream_t, enum cudaStreamCaptureMode);
typedef cudaError_t (*pt_begin_graph_fn)(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *,
                                         const cudaGraphEdgeData *, size_t, enum cudaStreamCaptureMode);

/* A runtime begin passes the gate here, before libcudart (which reaches the
 * driver's begin, where the gate nests): a thread never waits at the gate
 * inside the runtime, holding what the runtime holds. */
static cudaError_t rt_begin(enum pt_sym sym, cudaStream_t s, enum cudaStreamCaptureMode mode) {
  pt_route_capture_seen(); /* before the real call, whatever happens next */
  pt_begin_fn real = (pt_begin_fn)pt_real(sym);
  if (!real) return cudaErrorInsufficientDriver;
  bool gated = pt_active();
  if (gated) pt_count_call(sym);
  struct pt_tblock *g = gated ? pt_gate_enter() : NULL;
  cudaError_t r;
  PT_RT_CALL(r, real(s, mode));
  if (gated) pt_gate_leave(g);
  return r;
}
PT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return rt_begin(PT_SYM_cudaStreamBeginCapture, stream, mode);
}
PT_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return rt_begin(PT_SYM_cudaStreamBeginCapture_ptsz, stream, mode);
}

static cudaError_t rt_begin_graph(enum pt_sym sym, cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
                                  const cudaGraphEdgeData *data, size_t n, enum cudaStreamCaptureMode mode) {
  pt_route_capture_seen();
  pt_begin_graph_fn real = (pt_begin_graph_fn)pt_real(sym);
  if (!real) return cudaErrorInsufficientDriver;
  bool gated = pt_active();
  if (gated) pt_count_call(sym);
  struct pt_tblock *gt = gated ? pt_gate_enter() : NULL;
  cudaError_t r;
  PT_RT_CALL(r, real(s, g, deps, data, n, mode));
  if (gated) pt_gate_leave(gt);
  return r;
}
PT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                    const cudaGraphNode_t *dependencies,
                                                    const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                                    enum cudaStreamCaptureMode mode) {
  return rt_begin_graph(PT_SYM_cudaStreamBeginCaptureToGraph, stream, graph, dependencies, dependencyData,
                        numDependencies, mode);
}
PT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                         const cudaGraphNode_t *dependencies,
                                                         const cudaGraphEdgeData *dependencyData,
                                                         size_t numDependencies, enum cudaStreamCaptureMode mode) {
  return rt_begin_graph(PT_SYM_cudaStreamBeginCaptureToGraph_ptsz, stream, graph, dependencies, dependencyData,
                        numDependencies, mode);
}

PT_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  pt_route_mempool_set();
  typedef cudaError_t (*fn_t)(int, cudaMemPool_t);
  fn_t real = PT_REAL(cudaDeviceSetMemPool, fn_t);
  if (!real) return cudaErrorInsufficientDriver;
  if (pt_active()) PT_COUNT(cudaDeviceSetMemPool);
  cudaError_t r;
  PT_RT_CALL(r, real(device, memPool));
  return r;
}
PT_EXPORT cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location, enum cudaMemAllocationType type,
                                        cudaMemPool_t memPool) {
  pt_route_mempool_set();
  typedef cudaError_t (*fn_t)(struct cudaMemLocation *, enum cudaMemAllocationType, cudaMemPool_t);
  fn_t real = PT_REAL(cudaMemSetMemPool, fn_t);
  if (!real) return cudaErrorInsufficientDriver;
  if (pt_active()) PT_COUNT(cudaMemSetMemPool);
  cudaError_t r;
  PT_RT_CALL(r, real(location, type, memPool));
  return r;
}

/* ---- driver -------------------------------------------------------------- */

/* The streams that began a capture and have not ended it, process-wide. A
 * sleep and the host tier's move drain the device, and synchronizing a
 * context while one of its streams captures is invalid: it would fail and
 * invalidate the program's capture. So they hold the process only when none
 * is open (shim/sleep.c). Recorded at the driver entry points alone, which
 * the runtime's calls reach too; a begin waits at the gate while the process
 * is held, so none starts once the set was read under a closed gate.
 *
 * An entry leaves only on the thread that owns the capture: after an end
 * (whatever it returned) that thread asks the driver whether its stream
 * still captures (the per-thread default stream's handle means that
 * thread's stream, and a capture may end by an error code this file does
 * not know), and after a stream's successful destruction. Never from
 * another thread: the control thread asking about CU_STREAM_PER_THREAD would
 * ask about its own stream, and a stream whose context is gone is not to be
 * touched. So an entry can only outlive its capture (a context destroyed
 * while capturing): the sleep is then refused, which is safe, and says so. */
static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;
static CUstream *cap_streams;
static int cap_n, cap_cap; /* cap_n written under cap_mu, stored atomically so that
                              * pt_captures_open (every retrying allocation once a capture
                              * was seen) reads it without the lock */

static void capture_opened(CUstream s, CUresult r) {
  if (r != CUDA_SUCCESS) return;
  pthread_mutex_lock(&cap_mu);
  if (cap_n == cap_cap) {
    int nc = cap_cap ? cap_cap * 2 : 16;
    CUstream *g = realloc(cap_streams, (size_t)nc * sizeof *g);
    if (g) cap_streams = g, cap_cap = nc;
  }
  if (cap_n < cap_cap) cap_streams[cap_n] = s, __atomic_store_n(&cap_n, cap_n + 1, __ATOMIC_RELEASE);
  else PT_INTERNAL_ERROR(); /* out of memory: this capture is not seen (counted as an internal error) */
  pthread_mutex_unlock(&cap_mu);
}

/* On the thread that owns s's capture: s leaves the set once it no longer
 * captures (over: known without asking, as after a destruction). */
static void capture_check(CUstream s, bool over) {
  if (!over) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    over = !(pt_real_driver() && pt_drv.cuStreamIsCapturing && pt_drv.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
             st != CU_STREAM_CAPTURE_STATUS_NONE);
  }
  if (!over) return;
  pthread_mutex_lock(&cap_mu);
  for (int i = 0; i < cap_n; i++)
    if (cap_streams[i] == s) {
      cap_streams[i] = cap_streams[cap_n - 1], __atomic_store_n(&cap_n, cap_n - 1, __ATOMIC_RELEASE);
      break;
    }
  pthread_mutex_unlock(&cap_mu);
}

void pt_capture_stream_gone(uint64_t stream) { capture_check((CUstream)(uintptr_t)stream, true); }

int64_t pt_captures_open(void) { return __atomic_load_n(&cap_n, __ATOMIC_ACQUIRE); }

void pt_capture_atfork_child(void) {
  /* The parent's captures are the parent's; the lock may have been held. */
  pthread_mutex_init(&cap_mu, NULL);
  cap_n = 0;
}

static CUresult drv_begin(enum pt_sym sym, CUstream s, CUstreamCaptureMode mode, bool with_mode) {
  pt_route_capture_seen();
  void *real = pt_real(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return with_mode ? ((PFN_cuStreamBeginCapture_v10010)real)(s, mode)
                                     : ((PFN_cuStreamBeginCapture_v10000)real)(s);
  pt_count_call(sym);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = with_mode ? ((PFN_cuStreamBeginCapture_v10010)real)(s, mode)
                         : ((PFN_cuStreamBeginCapture_v10000)real)(s);
  capture_opened(s, r);
  pt_gate_leave(g);
  return r;
}
PT_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  return drv_begin(PT_SYM_cuStreamBeginCapture, hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
PT_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return drv_begin(PT_SYM_cuStreamBeginCapture_ptsz, hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
PT_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return drv_begin(PT_SYM_cuStreamBeginCapture_v2, hStream, mode, true);
}
PT_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return drv_begin(PT_SYM_cuStreamBeginCapture_v2_ptsz, hStream, mode, true);
}

static CUresult drv_begin_graph(enum pt_sym sym, CUstream s, CUgraph g, const CUgraphNode *deps,
                                const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode) {
  pt_route_capture_seen();
  PFN_cuStreamBeginCaptureToGraph_v12030 real = (PFN_cuStreamBeginCaptureToGraph_v12030)pt_real(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (!pt_active()) return real(s, g, deps, data, n, mode);
  pt_count_call(sym);
  struct pt_tblock *gt = pt_gate_enter();
  CUresult r = real(s, g, deps, data, n, mode);
  capture_opened(s, r);
  pt_gate_leave(gt);
  return r;
}
PT_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                               const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                               CUstreamCaptureMode mode) {
  return drv_begin_graph(PT_SYM_cuStreamBeginCaptureToGraph, hStream, hGraph, dependencies, dependencyData,
                         numDependencies, mode);
}
PT_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                    const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                    CUstreamCaptureMode mode) {
  return drv_begin_graph(PT_SYM_cuStreamBeginCaptureToGraph_ptsz, hStream, hGraph, dependencies, dependencyData,
                         numDependencies, mode);
}

/* The end of a capture: successful or not, the stream leaves the set once
 * the driver says it no longer captures. */
static CUresult drv_end(enum pt_sym sym, CUstream s, CUgraph *graph) {
  PFN_cuStreamEndCapture_v10000 real = (PFN_cuStreamEndCapture_v10000)pt_real(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (pt_active()) pt_count_call(sym);
  CUresult r = real(s, graph);
  capture_check(s, false);
  return r;
}
PT_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  return drv_end(PT_SYM_cuStreamEndCapture, hStream, phGraph);
}
PT_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  return drv_end(PT_SYM_cuStreamEndCapture_ptsz, hStream, phGraph);
}

PT_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  pt_route_mempool_set();
  PFN_cuDeviceSetMemPool_v11020 real = PT_REAL(cuDeviceSetMemPool, PFN_cuDeviceSetMemPool_v11020);
  if (!real) return PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuDeviceSetMemPool);
  return real(dev, pool);
}
PT_EXPORT CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool) {
  pt_route_mempool_set();
  PFN_cuMemSetMemPool_v13000 real = PT_REAL(cuMemSetMemPool, PFN_cuMemSetMemPool_v13000);
  if (!real) return PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemSetMemPool);
  return real(location, type, pool);
}
