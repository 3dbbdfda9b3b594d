/* The real pt_flash_ops: the driver through the table the shim hands the
 * hooks (pt_hooks_set_driver; the shim fills it before any launch reaches a
 * hook), allocations through the function it hands them (pt_hooks_set_alloc),
 * and Ponytail's kernels. Kept apart from the decision logic so CPU tests link
 * that logic without a driver or the kernels. */
#include <cuda.h>

#include "common/driver.h"
#include "hooks/hook.h"
#include "hooks/torch_flash.h"
#include "kernels/attn.h"

/* Until the shim binds them (and for good in the ponytail CLI, which links
 * the hooks without the shim and never launches): a table of NULL members and
 * no allocator, so every call fails as "not initialized". Written once at
 * load, before any launch; read per call (one pointer load). */
static const struct pt_driver pt_fo_no_driver;
static const struct pt_driver *pt_fo_drv = &pt_fo_no_driver;
static int (*pt_fo_alloc)(void **dptr, size_t bytes);

void pt_hooks_set_driver(const struct pt_driver *drv) { pt_fo_drv = drv ? drv : &pt_fo_no_driver; }
void pt_hooks_set_alloc(int (*alloc)(void **dptr, size_t bytes)) { pt_fo_alloc = alloc; }

static int pt_fo_is_capturing(void *stream, int *capturing) {
  if (!pt_fo_drv->cuStreamIsCapturing) return CUDA_ERROR_NOT_INITIALIZED;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult rc = pt_fo_drv->cuStreamIsCapturing((CUstream)stream, &st);
  /* Invalidated counts as capturing: the capture still owns the stream and
   * allocating or synchronising would fail the same way. */
  *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return (int)rc;
}

static int pt_fo_ctx_current(void **ctx) {
  if (!pt_fo_drv->cuCtxGetCurrent) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext c = NULL;
  CUresult rc = pt_fo_drv->cuCtxGetCurrent(&c);
  *ctx = c;
  return rc == CUDA_SUCCESS && !c ? CUDA_ERROR_INVALID_CONTEXT : (int)rc;
}

static int pt_fo_mem_alloc(void **dptr, size_t bytes) {
  /* The shim's allocator routes it as an application's cuMemAlloc_v2 would
   * be (pt_route_internal_alloc): workspaces are >= 1 MiB, so with the
   * default PONYTAIL_KV_MIN they come from Ponytail's pool and count under
   * PONYTAIL_MEM_LIMIT; with PONYTAIL_POOL=0, the real cuMemAlloc_v2. Never
   * freed (flash_ws.h). */
  int (*alloc)(void **, size_t) = pt_fo_alloc;
  if (!alloc) return CUDA_ERROR_NOT_INITIALIZED;
  void *p = NULL;
  int rc = alloc(&p, bytes);
  *dptr = rc == CUDA_SUCCESS ? p : NULL;
  return rc;
}

static int pt_fo_copy_to_host(void *dst, const void *src, size_t bytes, void *stream) {
  if (!pt_fo_drv->cuMemcpyAsync) return CUDA_ERROR_NOT_INITIALIZED;
  return (int)pt_fo_drv->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                       bytes, (CUstream)stream);
}

static int pt_fo_stream_sync(void *stream) {
  if (!pt_fo_drv->cuStreamSynchronize) return CUDA_ERROR_NOT_INITIALIZED;
  return (int)pt_fo_drv->cuStreamSynchronize((CUstream)stream);
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
    .fault = pt_attn_fault_launch,
    .prefill_supported = pt_attn_prefill_supported,
    .prefill_launch = pt_attn_prefill_launch,
};
