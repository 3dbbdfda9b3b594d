/* The real CUDA functions, found at run time (the shim links no CUDA library).
 *
 * Driver functions are resolved once, lazily, through the real
 * cuGetProcAddress_v2 of libcuda.so.1 with the version each row names, so the
 * shim's own calls never go through its wrappers. Runtime functions are
 * resolved with dlsym(RTLD_NEXT), else from the already-loaded libcudart.so.*.
 *
 * Any module of the shim may call pt_drv.<name>(...) after pt_real_driver()
 * returned true; a NULL member means the driver lacks that function. The
 * layers below get the table handed to them (shim/init.c, pt_compose). */
#ifndef PT_REAL_H
#define PT_REAL_H
#include <stdbool.h>

#include "common/driver.h"

/* The one instance, filled by pt_real_driver(); handed as a const pointer to
 * the allocator, the kernels and the hooks by the composition root
 * (shim/init.c). */
extern struct pt_driver pt_drv;
/* For the shim's own threads that call the driver while the program runs (the
 * control thread, the host tier's mover), at their start: their stream-capture
 * interaction mode relaxed, so that none of their driver calls counts as an
 * unsafe call against a CUDA graph the program captures in global mode (which
 * would fail the call and invalidate the capture). They never capture. */
void pt_thread_relax_capture(void);

/* Resolves pt_drv once (thread-safe). false when libcuda.so.1 is absent or
 * cuGetProcAddress cannot be found: callers then pass through. */
bool pt_real_driver(void);

#endif
