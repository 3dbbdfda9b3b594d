/* Test API of the fake CUDA libraries (tests/fakecuda): call counts per exact
 * symbol, error injection and a few inspection helpers. Exported by
 * libfakecuda_ctl.so (counts, faults), which both fakes link, and by the fake
 * libcuda.so.1 (kernels, memory). */
#ifndef FAKECUDA_H
#define FAKECUDA_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Calls of one exact symbol of the fakes ("cudaMalloc", "cuMemAlloc_v2", ...). */
uint64_t fakecuda_count(const char *symbol);
/* Makes the nth call (1-based, counted from process start) of symbol return
 * err. Also from the environment: FAKECUDA_FAIL=sym:nth[:err][,sym:nth[:err]]
 * (default err: 2, out of memory in both APIs). */
void fakecuda_fail(const char *symbol, uint64_t nth, int err);
/* Launches of kernels with this name through the fake driver (all paths). */
uint64_t fakecuda_launches(const char *kernel_name);
/* Sum of the first 8-byte argument of every launch (to check arguments pass
 * through unchanged). */
uint64_t fakecuda_arg_sum(void);
/* A CUfunction created outside any intercepted call: the shim must name it
 * with cuFuncGetName at its first launch. */
void *fakecuda_hidden_function(const char *name);
/* Bytes currently allocated through the fake driver. */
uint64_t fakecuda_bytes_in_use(void);

/* Bytes of linear + VMM physical memory on device 0 or 1. */
uint64_t fakecuda_device_bytes(int dev);
/* Per-device memory cap (also FAKECUDA_DEVMEM=bytes); 0 = none. Over it,
 * cuMemAlloc*, cuMemCreate fail with CUDA_ERROR_OUT_OF_MEMORY. */
void fakecuda_set_devmem(uint64_t cap);
/* Live VMM physical handles and reserved VA bytes (leak checks). */
uint64_t fakecuda_vmm_handles(void);
uint64_t fakecuda_va_reserved(void);
/* Shareable-handle exports (cuMemExportToShareableHandle successes) and
 * imports (cuMemImportFromShareableHandle; live != 0: not yet released).
 * Only granules created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in
 * requestedHandleTypes can be exported (else CUDA_ERROR_NOT_SUPPORTED); the
 * export is a dup of the granule's memfd, so a mapping of the import shares
 * the exporter's bytes. */
uint64_t fakecuda_vmm_exports(void);
uint64_t fakecuda_vmm_imports(int live);
/* Devices (bit mask) the newest cuMemSetAccess covering va granted
 * read/write; 0 = never set. */
unsigned fakecuda_access_mask(const void *va);
/* Live cuMemHostAlloc buffers (not yet freed with cuMemFreeHost). */
uint64_t fakecuda_host_allocs(void);
/* Live cuMemHostRegister ranges (not yet unregistered). */
uint64_t fakecuda_host_registered(void);
/* Live bytes of cuMemCreate on a host location (the pool's host tier). */
uint64_t fakecuda_host_vmm_bytes(void);
/* Marks a fake stream as capturing (graph capture) or not. */
void fakecuda_set_capturing(void *stream, int on);

/* Internal to the fakes. */
int fakecuda_id(const char *symbol);
int fakecuda_hit(int id);

#ifdef __cplusplus
}
#endif
#endif
