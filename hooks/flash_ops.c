/* The real pt_flash_ops: the driver through pt_drv (shim/real.h; the shim
 * fills it before any launch reaches a hook) and Ponytail's kernels. Kept
 * apart from the decision logic so CPU tests link that logic without a
 * driver or the kernels. */
#include <cuda.h>

#include "hooks/torch_flash.h"
#include "kernels/attn.h"
#include "shim/real.h"
#include "shim/route_alloc.h"

/* Weak: the ponytail CLI links the hooks library (the kernels lister reports
 * hooks) without the shim's routing layer, and never launches; there the
 * symbol is absent and an allocation fails as "not initialized". */
#pragma weak pt_route_internal_alloc

static int pt_fo_is_capturing(void *stream, int *capturing) {
  if (!pt_drv.cuStreamIsCapturing) return CUDA_ERROR_NOT_INITIALIZED;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult rc = pt_drv.cuStreamIsCapturing((CUstream)stream, &st);
  /* Invalidated counts as capturing: the capture still owns the stream and
   * allocating or synchronising would fail the same way. */
  *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return (int)rc;
}

static int pt_fo_ctx_current(void **ctx) {
  if (!pt_drv.cuCtxGetCurrent) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext c = NULL;
  CUresult rc = pt_drv.cuCtxGetCurrent(&c);
  *ctx = c;
  return rc == CUDA_SUCCESS && !c ? CUDA_ERROR_INVALID_CONTEXT : (int)rc;
}

static int pt_fo_mem_alloc(void **dptr, size_t bytes) {
  /* Routed as an application's cuMemAlloc_v2 would be (shim/route_alloc.h):
   * workspaces are >= 1 MiB, so with the default PONYTAIL_KV_MIN they come
   * from Ponytail's pool and count under PONYTAIL_MEM_LIMIT; with
   * PONYTAIL_POOL=0, the real cuMemAlloc_v2. Never freed (flash_ws.h). */
  if (!pt_route_internal_alloc) return CUDA_ERROR_NOT_INITIALIZED;
  void *p = NULL;
  int rc = pt_route_internal_alloc(&p, bytes);
  *dptr = rc == CUDA_SUCCESS ? p : NULL;
  return rc;
}

static int pt_fo_copy_to_host(void *dst, const void *src, size_t bytes, void *stream) {
  if (!pt_drv.cuMemcpyAsync) return CUDA_ERROR_NOT_INITIALIZED;
  return (int)pt_drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                   bytes, (CUstream)stream);
}

static int pt_fo_stream_sync(void *stream) {
  if (!pt_drv.cuStreamSynchronize) return CUDA_ERROR_NOT_INITIALIZED;
  return (int)pt_drv.cuStreamSynchronize((CUstream)stream);
}

const struct pt_flash_ops pt_flash_default_ops = {
    .supported = pt_attn_decode_supported,
    .ws_bytes = pt_attn_decode_workspace_bytes,
    .ws_prepare = pt_attn_workspace_prepare,
    .launch = pt_attn_decode_launch,
    .compare = pt_attn_compare_launch,
    .is_capturing = pt_fo_is_capturing,
    .ctx_current = pt_fo_ctx_current,
    .mem_alloc = pt_fo_mem_alloc,
    .copy_to_host = pt_fo_copy_to_host,
    .stream_sync = pt_fo_stream_sync,
};
