/* Stream destruction. The pool remembers, per stream, the frees whose work
 * may still be pending there, and later records markers on that stream to
 * learn when they are done (allocator/pool.h, "Stream order"). Once the
 * application destroys the stream, its handle is dangling: a marker recorded
 * on it is a use after free inside the driver (a plain CUDA program that
 * destroys its stream, then reuses the memory on another stream, died with
 * SIGSEGV). So before the real destroy every pool retires the stream: it
 * waits for the stream's frees and forgets it. The wait is only for frees
 * still in flight on that stream; torch never destroys its streams.
 *
 * The runtime's cudaStreamDestroy reaches the driver through entry points the
 * shim hands out (cuGetProcAddress routing), and a static cudart only that
 * way; the runtime wrapper catches a libcudart that resolved the driver by
 * other means. A stream retired twice is harmless: the second finds nothing. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "shim/capture_decl.h"
#include "shim/route_alloc.h"
#include "shim/shim.h"

PT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  typedef cudaError_t (*fn_t)(cudaStream_t);
  fn_t real = PT_REAL(cudaStreamDestroy, fn_t);
  if (!real) return cudaErrorInsufficientDriver;
  if (pt_active()) {
    PT_COUNT(cudaStreamDestroy);
    pt_route_stream_retire((uint64_t)(uintptr_t)stream);
  }
  cudaError_t r;
  PT_RT_CALL(r, real(stream));
  if (r == cudaSuccess && pt_active()) pt_capture_stream_gone((uint64_t)(uintptr_t)stream);
  return r;
}

static CUresult drv_destroy(enum pt_sym sym, CUstream s) {
  PFN_cuStreamDestroy_v4000 real = (PFN_cuStreamDestroy_v4000)pt_real(sym);
  if (!real) return PT_DRV_NO_DRIVER;
  if (pt_active()) {
    pt_count_call(sym);
    pt_route_stream_retire((uint64_t)(uintptr_t)s);
  }
  CUresult r = real(s);
  if (r == CUDA_SUCCESS && pt_active()) pt_capture_stream_gone((uint64_t)(uintptr_t)s);
  return r;
}
PT_EXPORT CUresult cuStreamDestroy(CUstream hStream) { return drv_destroy(PT_SYM_cuStreamDestroy, hStream); }
PT_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) { return drv_destroy(PT_SYM_cuStreamDestroy_v2, hStream); }
