/* CUDA IPC of pooled memory (cudaIpcGetMemHandle / cudaIpcOpenMemHandle /
 * cudaIpcCloseMemHandle on pool pointers). Called by shim/route_alloc.c,
 * which finds the pool, counts and decides pass-through. The exporter is
 * ipc_export.c, the importer ipc_import.c (its driver calls go through a VMM
 * backend's import ops); the scheme and its limits: ipc_internal.h.
 *
 * Results are CUDA codes whose number is the same in both APIs (invalid value
 * 1, out of memory 2, invalid handle 400 = cudaErrorInvalidResourceHandle,
 * not supported 801) or the driver's own result of a failed import/map. */
#ifndef PT_SHIM_IPC_H
#define PT_SHIM_IPC_H
#include <stdbool.h>

struct pt_pool;

#define PT_IPC_HANDLE_SIZE 64 /* sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle) */

/* true when the 64 bytes carry Ponytail's magic and version. */
bool pt_ipc_handle_ours(const void *handle);
/* Exporter: writes into handle a handle of the live block of pool that holds
 * ptr (device: the pool's device ordinal). */
int pt_ipc_export(struct pt_pool *pool, int device, const void *ptr, void *handle);
/* A pooled block that starts at start was freed: its export record goes. */
void pt_ipc_block_freed(const void *start);
/* Pooled blocks exported and still live (their records): a sleep would strand
 * the importers, so it is refused while any exist. */
uint64_t pt_ipc_live_exports(void);
/* Importer: maps the block named by handle (pt_ipc_handle_ours) for device
 * (ctx, the caller's context there, is not used: the device's backend pushes
 * its primary context around driver calls).
 * *ptr = the block's first byte. Opening one handle again returns the same
 * pointer (reference counted). */
int pt_ipc_open(const void *handle, void *ctx, int device, void **ptr);
/* true when ptr came from pt_ipc_open: drops one reference (unmapped at the
 * last) and sets *err; false: not ours, pass through. */
bool pt_ipc_close(void *ptr, int *err);
/* In a forked child: the parent's server thread and records are not ours. */
void pt_ipc_atfork_child(void);

#endif
