/* A stand-in for PyTorch's libc10_cuda.so in the preload tests: its
 * expandable segments the way c10/cuda/CUDACachingAllocator.cpp makes them
 * (a reserved range, one physical handle per segment, POSIX-fd exportable,
 * mapped and given access per range; on out-of-memory the handles made by
 * this call are released and the map reports nothing mapped, so that the
 * caller frees its cache and asks again), the driver functions got through
 * cuGetProcAddress as PyTorch's DriverAPI gets them. Built as libc10_cuda.so:
 * the shim keeps handles only for callers in a library of that name. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>

#define SEGS 256

static PFN_cuMemCreate_v10020 p_create;
static PFN_cuMemRelease_v10020 p_release;
static PFN_cuMemMap_v10020 p_map;
static PFN_cuMemUnmap_v10020 p_unmap;
static PFN_cuMemSetAccess_v10020 p_access;
static PFN_cuMemAddressReserve_v10020 p_reserve;
static PFN_cuMemExportToShareableHandle_v10020 p_export;
static PFN_cuMemGetAllocationPropertiesFromHandle_v10020 p_props;

static CUdeviceptr base;
static uint64_t seg;
static int dev;
static CUmemGenericAllocationHandle handles[SEGS];

#define GET(name, ver, var)                                                                                  \
  if (cuGetProcAddress_v2(#name, (void **)&var, ver, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS) \
  return -1

__attribute__((visibility("default"))) int fc10_init(int device, uint64_t segment_bytes) {
  GET(cuMemCreate, 10020, p_create);
  GET(cuMemRelease, 10020, p_release);
  GET(cuMemMap, 10020, p_map);
  GET(cuMemUnmap, 10020, p_unmap);
  GET(cuMemSetAccess, 10020, p_access);
  GET(cuMemAddressReserve, 10020, p_reserve);
  GET(cuMemExportToShareableHandle, 10020, p_export);
  GET(cuMemGetAllocationPropertiesFromHandle, 10020, p_props);
  dev = device;
  seg = segment_bytes;
  memset(handles, 0, sizeof handles);
  return p_reserve(&base, seg * SEGS, 0, 0, 0) == CUDA_SUCCESS ? 0 : -1;
}

/* Maps segments [first, first + n): 0, -2 out of memory (nothing mapped),
 * or the CUDA error. */
__attribute__((visibility("default"))) int fc10_map(int first, int n) {
  for (int i = first; i < first + n; i++) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUresult r = p_create(&handles[i], seg, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      for (int j = first; j < i; j++) {
        if (p_release(handles[j])) return -3;
        handles[j] = 0;
      }
      handles[i] = 0;
      return -2;
    }
    if (r) return (int)r;
  }
  for (int i = first; i < first + n; i++) {
    CUresult r = p_map(base + (CUdeviceptr)i * seg, seg, 0, handles[i], 0);
    if (r) return (int)r;
  }
  CUmemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return (int)p_access(base + (CUdeviceptr)first * seg, seg * (uint64_t)n, &d, 1);
}

/* Unmaps segments [first, first + n) and releases their handles. */
__attribute__((visibility("default"))) int fc10_unmap(int first, int n) {
  for (int i = first; i < first + n; i++) {
    CUresult r = p_unmap(base + (CUdeviceptr)i * seg, seg);
    if (!r) r = p_release(handles[i]);
    if (r) return (int)r;
    handles[i] = 0;
  }
  return 0;
}

/* PyTorch's order reversed: the handle released first, the mapping later
 * (the mapping keeps the memory until then). */
__attribute__((visibility("default"))) int fc10_release_then_unmap(int i) {
  CUresult r = p_release(handles[i]);
  if (!r) r = p_unmap(base + (CUdeviceptr)i * seg, seg);
  handles[i] = 0;
  return (int)r;
}

__attribute__((visibility("default"))) void *fc10_ptr(int i) { return (void *)(uintptr_t)(base + (CUdeviceptr)i * seg); }
__attribute__((visibility("default"))) uint64_t fc10_handle(int i) { return handles[i]; }
__attribute__((visibility("default"))) int fc10_release(uint64_t h) { return (int)p_release(h); }
__attribute__((visibility("default"))) int fc10_export(int i, int *fd) {
  return (int)p_export(fd, handles[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}
__attribute__((visibility("default"))) int fc10_props(int i, CUmemAllocationProp *prop) {
  return (int)p_props(prop, handles[i]);
}
