/* PyTorch's own mapped memory (expandable segments) under the shim
 * (shim/route_vmm.c, entry points in shim/entry_vmm.c).
 *
 * With expandable_segments:True PyTorch does not call cudaMalloc: it reserves
 * address ranges and maps physical handles of its own (cuMemCreate, 20 MiB
 * and 2 MiB) into them. That memory never reaches the pool, so before this
 * `ponytail sleep`, the host tier and PONYTAIL_MEM_LIMIT did not reach it.
 * Here the shim keeps those handles (PONYTAIL_TORCH_VMM): PyTorch gets a
 * handle value of the shim's (never a driver pointer), every call that takes
 * it is translated, and the physical memory behind it can then be released
 * and made again at the same address (sleep and wake), put on the host
 * (the host tier) and moved back, without PyTorch noticing.
 *
 * Only handles PyTorch's allocator asks for (the caller of cuMemCreate lies in
 * libc10_cuda.so; NCCL's, vLLM's and anyone else's pass through untouched),
 * device-located and pinned. */
#ifndef PT_SHIM_ROUTE_VMM_H
#define PT_SHIM_ROUTE_VMM_H
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "allocator/pool.h"

struct pt_jw;

/* Whether handle is one the shim gave PyTorch (a value no driver hands out). */
static inline bool pt_vmm_is_ours(CUmemGenericAllocationHandle h) { return (h >> 48) == 0x5054u; }

/* Whether a cuMemCreate with these arguments, called from ra, is one to keep. */
bool pt_vmm_wants(const CUmemAllocationProp *prop, unsigned long long flags, const void *ra);

/* The translated calls (the entry point has passed the gate). real: the
 * driver's function for the call. */
CUresult pt_vmm_create(void *real, CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags);
CUresult pt_vmm_release(void *real, CUmemGenericAllocationHandle h);
CUresult pt_vmm_map(void *real, CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                    unsigned long long flags);
CUresult pt_vmm_unmap(void *real, CUdeviceptr va, size_t size);
CUresult pt_vmm_set_access(void *real, CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult pt_vmm_export(void *real, void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                       unsigned long long flags);
CUresult pt_vmm_props(void *real, CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
/* Whether any mapping is kept (the unmap and set-access entry points need
 * not take the lock otherwise). */
bool pt_vmm_any(void);

/* For the sleep report and its refusals. */
struct pt_vmm_figures {
  uint64_t handles;       /* kept handles */
  uint64_t device_bytes;  /* on the device (or asleep) */
  uint64_t host_bytes;    /* on the host tier */
  uint64_t exported;      /* handles exported to another process (never released under it) */
  uint64_t asleep_bytes;
};
void pt_vmm_figures(struct pt_vmm_figures *f);

/* Sleep (the gate closed): every kept device handle's bytes copied to host
 * memory (unless discard), the handle unmapped and released; the address
 * stays reserved by PyTorch. Handles mapped twice or in part stay (counted
 * in *kept_bytes). 0, or the CUDA error with nothing changed. */
int pt_vmm_sleep(bool discard, struct pt_pool_sleep_info *sum, uint64_t *kept_bytes);
/* Wake: new handles at the same addresses, access as PyTorch set it, the
 * bytes back. 0, or the error with everything asleep as before. The host
 * copy stays until pt_vmm_wake_release (or goes back to sleep with
 * pt_vmm_resleep, when the pools cannot wake). */
int pt_vmm_wake(struct pt_pool_sleep_info *sum);
void pt_vmm_resleep(void);
void pt_vmm_wake_release(void);
/* `ponytail sleep --prepare`: host memory for the next sleep of PyTorch's
 * memory, got while the process runs (sum->bytes; sum->reused_bytes: kept
 * already). Kept too after a wake under PONYTAIL_SLEEP_REUSE. unprepare
 * frees it and returns its bytes. */
int pt_vmm_prepare(struct pt_pool_sleep_info *sum);
uint64_t pt_vmm_unprepare(void);

/* The host tier's move back (the gate closed): host handles copied to new
 * device handles at the same address while the device has room beyond
 * PONYTAIL_HOST_TIER_RESERVE (and the limit). */
int pt_vmm_promote(uint64_t *moved);
bool pt_vmm_tier_room(void);
uint64_t pt_vmm_host_bytes(void);

void pt_vmm_stats_json(struct pt_jw *w);
void pt_vmm_stats_text(FILE *f);
/* In a forked child: the parent's handles are forgotten. */
void pt_vmm_atfork_child(void);

#endif
