/* Driver entry points of virtual memory management (cuMemCreate and the calls
 * that take its handle or map it), for PyTorch's expandable segments
 * (shim/route_vmm.h). A handle the shim did not give passes straight to the
 * driver, uncounted (NCCL and others call these; of them only cuMemCreate
 * is counted, every call). A handle the shim gave is translated in every state of
 * the shim, so that the driver never sees one. Every translated call passes
 * the gate, so that a sleep or the host tier's move never meets a mapping half
 * made. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>

#include "shim/gate.h"
#include "shim/real.h"
#include "shim/route_vmm.h"
#include "shim/shim.h"

PT_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
  PFN_cuMemCreate_v10020 real = PT_REAL(cuMemCreate, PFN_cuMemCreate_v10020);
  if (!pt_active()) return real ? real(handle, size, prop, flags) : PT_DRV_NO_DRIVER;
  PT_COUNT(cuMemCreate);
  if (!real) return PT_DRV_NO_DRIVER;
  /* The caller, read here: this frame is the one PyTorch's call enters. */
  if (!pt_vmm_wants(prop, flags, __builtin_return_address(0))) return real(handle, size, prop, flags);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_create((void *)real, handle, size, prop, flags);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  PFN_cuMemRelease_v10020 real = PT_REAL(cuMemRelease, PFN_cuMemRelease_v10020);
  if (!pt_vmm_is_ours(handle)) return real ? real(handle) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemRelease);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_release((void *)real, handle);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
  PFN_cuMemMap_v10020 real = PT_REAL(cuMemMap, PFN_cuMemMap_v10020);
  if (!pt_vmm_is_ours(handle) || !real) return real ? real(ptr, size, offset, handle, flags) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemMap);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_map((void *)real, ptr, size, offset, handle, flags);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  PFN_cuMemUnmap_v10020 real = PT_REAL(cuMemUnmap, PFN_cuMemUnmap_v10020);
  if (!pt_vmm_any() || !real) return real ? real(ptr, size) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemUnmap);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_unmap((void *)real, ptr, size);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  PFN_cuMemSetAccess_v10020 real = PT_REAL(cuMemSetAccess, PFN_cuMemSetAccess_v10020);
  if (!pt_vmm_any() || !real) return real ? real(ptr, size, desc, count) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemSetAccess);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_set_access((void *)real, ptr, size, desc, count);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType, unsigned long long flags) {
  PFN_cuMemExportToShareableHandle_v10020 real =
      PT_REAL(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020);
  if (!pt_vmm_is_ours(handle) || !real)
    return real ? real(shareableHandle, handle, handleType, flags) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemExportToShareableHandle);
  struct pt_tblock *g = pt_gate_enter();
  CUresult r = pt_vmm_export((void *)real, shareableHandle, handle, handleType, flags);
  pt_gate_leave(g);
  return r;
}

PT_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real =
      PT_REAL(cuMemGetAllocationPropertiesFromHandle, PFN_cuMemGetAllocationPropertiesFromHandle_v10020);
  if (!pt_vmm_is_ours(handle)) return real ? real(prop, handle) : PT_DRV_NO_DRIVER;
  if (pt_active()) PT_COUNT(cuMemGetAllocationPropertiesFromHandle);
  return pt_vmm_props((void *)real, prop, handle);
}
