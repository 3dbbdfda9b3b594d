/* The gated driver wrappers (shim/entry_gated.c, shim/gated.def): their
 * addresses by symbol, for the cuGetProcAddress routing (shim/entry_drv.c);
 * NULL for every other symbol. */
#ifndef PT_SHIM_ENTRY_GATED_H
#define PT_SHIM_ENTRY_GATED_H
#include "shim/shim.h"

extern void *const pt_gated_wrapper[PT_SYM_COUNT];

#endif
