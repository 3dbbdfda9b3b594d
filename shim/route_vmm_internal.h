/* Private to shim/route_vmm.c (the handle table, the translated calls, the
 * host tier's placement, the stats) and shim/route_vmm_move.c (what moves
 * physical memory with the process held: sleep, wake, prepare, the host
 * tier's move back): the table and what both use. */
#ifndef PT_SHIM_ROUTE_VMM_INTERNAL_H
#define PT_SHIM_ROUTE_VMM_INTERNAL_H
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

#define VMM_TAG ((uint64_t)0x5054u << 48) /* 'PT': not a canonical address, so never a driver pointer */
#define VMM_ACC 4                          /* access descriptors kept per handle (devices granted) */

/* One handle PyTorch's allocator made, kept by the shim. */
struct vh {
  CUmemGenericAllocationHandle real; /* the driver's; 0 while asleep */
  CUmemAllocationProp prop;          /* as PyTorch asked (a device location) */
  CUcontext ctx;                     /* current at creation: the sleep's copies run in it */
  uint64_t size;
  CUdeviceptr va;                    /* its one whole mapping (0: none) */
  CUmemAccessDesc acc[VMM_ACC];
  uint8_t nacc;
  uint8_t used, app;                 /* app: PyTorch has not released it */
  uint8_t host;                      /* on the host tier */
  uint8_t exported, twice;           /* exported; mapped more than once or in part: never moved */
  uint8_t asleep, woke;              /* woke: in the wake under way (undone if it fails) */
  uint8_t charged;                   /* counted under PONYTAIL_MEM_LIMIT */
  uint16_t gen;                      /* the slot's generation, in its handle value: a stale value misses */
  int dev;
  uint64_t host_off;                 /* its bytes in the sleep's host copy */
};

/* The stats' "torch_vmm" (route_vmm.c writes them), under vmm_mu but
 * host_bytes, which pooled frees read without it (pt_vmm_host_bytes). */
struct pt_vmm_stats {
  uint64_t handles, bytes, peak_bytes, host_bytes, peak_host_bytes;
  uint64_t creates, releases, tier_allocs, tier_deferrals, tier_refusals, tier_moved_bytes, limit_rejections;
  uint64_t sleeps, slept_bytes, wakes, errors;
};

#pragma GCC visibility push(hidden)
extern pthread_mutex_t vmm_mu; /* guards the table, the stats and the move file's host copies */
extern struct vh *vmm_tab;     /* slots [0, vmm_ntab); a handle value names its slot */
extern uint64_t vmm_ntab;
extern struct pt_vmm_stats vmm_stats;

/* route_vmm.c, under vmm_mu: e's bytes added to (sign 1) or taken from (-1)
 * the figures of where it lives. */
void vmm_account(struct vh *e, int sign);
/* The limit's charge of size bytes on dev's pool (true: within it, *charged
 * says whether anything was charged) and its return. */
bool vmm_charge(int dev, uint64_t size, uint8_t *charged);
void vmm_uncharge(int dev, uint64_t size);
/* route_vmm_move.c: its host copies forgotten in a forked child. */
void vmm_move_atfork_child(void);
#pragma GCC visibility pop

#endif
