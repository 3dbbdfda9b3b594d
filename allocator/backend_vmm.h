/* The VMM backend: the backend interface over the CUDA driver's virtual
 * memory API (cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess), called
 * through the table of real driver functions its creator hands it (the
 * shim's, filled; a test's fakes). The allocator includes nothing of the
 * shim: the table's type is in the common layer (common/driver.h).
 *
 * Bound to one device ordinal. Never relies on a current context on the
 * calling thread: the device's primary context is retained once and pushed
 * and popped around every call. Error codes are CUresults. */
#ifndef PT_ALLOC_BACKEND_VMM_H
#define PT_ALLOC_BACKEND_VMM_H
#include "allocator/backend.h"

/* flags: PT_VMM_EXPORTABLE creates every granule with a POSIX file
 * descriptor handle type (when the device supports it), so that export_fd
 * works; without it export_fd answers CUDA_ERROR_NOT_SUPPORTED.
 * drv: the driver table, filled, that the backend keeps and calls for its
 * whole life (NULL: the driver is not there).
 * 0 on success, else a CUresult (CUDA_ERROR_NOT_INITIALIZED when the driver
 * or one of the functions the backend needs is missing). */
#define PT_VMM_EXPORTABLE 1u
struct pt_driver;
int pt_backend_vmm_create(struct pt_backend *out, int device_ordinal, unsigned flags,
                          const struct pt_driver *drv);

#endif
