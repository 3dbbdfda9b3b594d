/* Driver routing shared by cuGetProcAddress (shim/entry_drv.c) and dlsym
 * (shim/dlsym.c). */
#ifndef PT_ENTRY_DRV_H
#define PT_ENTRY_DRV_H
#include <stdint.h>

#include "shim/shim.h"

/* The shim's own function for a symbol (RT and DRV kinds), else NULL. */
extern void *const pt_wrapper[PT_SYM_COUNT];

/* After a successful real cuGetProcAddress(symbol, version, flags) that
 * returned *pfn: replaces *pfn by the shim's wrapper when the request names
 * exactly a variant the shim implements. */
void pt_drv_route(const char *symbol, int version, uint64_t flags, void **pfn);

/* Which variant (PT_SYM_*) a request resolves to, -1 when none the shim
 * implements (exposed for tests). */
int pt_drv_variant(const char *symbol, int version, uint64_t flags);

/* Offers a real pointer for sym and returns the wrapper to hand out instead,
 * or NULL when it must not be substituted (p is already a wrapper). */
void *pt_drv_substitute(enum pt_sym sym, void *p);

#endif
