/* The type of the table of real CUDA driver functions: one member per row of
 * PT_DRIVER_FUNCS, typed PFN_<name>_v<version> with the version the row names
 * (the version the shim asks cuGetProcAddress for). This list is the single
 * source of both the type and the shim's filling of it (shim/real.c).
 *
 * Only the type lives here, in the common layer, so that the allocator's VMM
 * backend, the kernel launcher and the hooks can be handed a table
 * (const struct pt_driver *) by the shim, its one owner and filler, without
 * including anything of the shim. A NULL member means the driver lacks that
 * function. */
#ifndef PT_COMMON_DRIVER_H
#define PT_COMMON_DRIVER_H
#include <cuda.h>
#include <cudaTypedefs.h>

/* X(name, version used with cuGetProcAddress) ; member type is PFN_<name>_v<version> */
#define PT_DRIVER_FUNCS(X)                     \
  X(cuInit, 2000)                              \
  X(cuDriverGetVersion, 2020)                  \
  X(cuDeviceGet, 2000)                         \
  X(cuDeviceGetCount, 2000)                    \
  X(cuDeviceGetAttribute, 2000)                \
  X(cuDevicePrimaryCtxRetain, 7000)            \
  X(cuDevicePrimaryCtxGetState, 7000)          \
  X(cuDeviceGetMemPool, 11020)                 \
  X(cuCtxGetCurrent, 4000)                     \
  X(cuCtxSetCurrent, 4000)                     \
  X(cuCtxPushCurrent, 4000)                    \
  X(cuCtxPopCurrent, 4000)                     \
  X(cuCtxGetDevice, 2000)                      \
  X(cuCtxSynchronize, 2000)                    \
  X(cuLaunchKernel, 4000)                      \
  X(cuLaunchKernelEx, 11060)                   \
  X(cuModuleLoadData, 2000)                    \
  X(cuModuleGetFunction, 2000)                 \
  X(cuModuleUnload, 2000)                      \
  X(cuLibraryGetKernel, 12000)                 \
  X(cuKernelGetFunction, 12000)                \
  X(cuKernelGetName, 12030)                    \
  X(cuFuncGetName, 12030)                      \
  X(cuFuncGetParamInfo, 12040)                 \
  X(cuFuncGetAttribute, 2020)                  \
  X(cuFuncSetAttribute, 9000)                  \
  X(cuTensorMapEncodeTiled, 12000)             \
  X(cuMemAlloc, 3020)                          \
  X(cuMemFree, 3020)                           \
  X(cuMemAllocAsync, 11020)                    \
  X(cuMemFreeAsync, 11020)                     \
  X(cuMemGetInfo, 3020)                        \
  X(cuMemAddressReserve, 10020)                \
  X(cuMemAddressFree, 10020)                   \
  X(cuMemCreate, 10020)                        \
  X(cuMemRelease, 10020)                       \
  X(cuMemMap, 10020)                           \
  X(cuMemUnmap, 10020)                         \
  X(cuMemSetAccess, 10020)                     \
  X(cuMemGetAllocationGranularity, 10020)      \
  X(cuMemExportToShareableHandle, 10020)       \
  X(cuMemImportFromShareableHandle, 10020)     \
  X(cuMemGetAllocationPropertiesFromHandle, 10020) \
  X(cuMemPoolGetAttribute, 11020)              \
  X(cuDeviceGetDefaultMemPool, 11020)          \
  X(cuStreamIsCapturing, 10000)                \
  X(cuThreadExchangeStreamCaptureMode, 10010)  \
  X(cuStreamSynchronize, 2000)                 \
  X(cuStreamQuery, 2000)                       \
  X(cuStreamWaitEvent, 3020)                   \
  X(cuStreamGetCtx, 9020)                      \
  X(cuEventCreate, 2000)                       \
  X(cuEventRecord, 2000)                       \
  X(cuEventQuery, 2000)                        \
  X(cuEventSynchronize, 2000)                  \
  X(cuEventDestroy, 4000)                      \
  X(cuPointerGetAttribute, 4000)               \
  X(cuMemsetD8Async, 3020)                     \
  X(cuMemcpyAsync, 4000)                       \
  X(cuMemcpyDtoH, 3020)                        \
  X(cuMemcpyHtoD, 3020)                        \
  X(cuMemcpyDtoD, 3020)                        \
  X(cuMemHostAlloc, 2020)                      \
  X(cuMemFreeHost, 2000)                       \
  X(cuMemHostRegister, 6050)                   \
  X(cuMemHostUnregister, 4000)                 \
  X(cuIpcGetMemHandle, 4010)                   \
  X(cuIpcOpenMemHandle, 11000)                 \
  X(cuIpcCloseMemHandle, 4010)

struct pt_driver {
#define PT_DRV_MEMBER(name, ver) PFN_##name##_v##ver name;
  PT_DRIVER_FUNCS(PT_DRV_MEMBER)
#undef PT_DRV_MEMBER
};

#endif
