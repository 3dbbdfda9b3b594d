/* Sleep and wake of every device's pool (shim/route_sleep.c), for the sleep
 * state machine (shim/sleep.c). Called with the gate closed. */
#ifndef PT_SHIM_ROUTE_SLEEP_H
#define PT_SHIM_ROUTE_SLEEP_H
#include <stdbool.h>
#include <stdint.h>

#include "allocator/pool.h"

/* What a sleep report needs to know about the pools and the devices they are
 * on. Device figures are device-wide (every process), from cuMemGetInfo. */
struct pt_route_sleep_figures {
  uint64_t pools, asleep_pools;
  uint64_t physical_bytes, live_bytes; /* the pools' */
  uint64_t device_used_bytes, device_total_bytes;
  uint64_t passthrough_live; /* allocations passed to CUDA and not freed (count) */
  uint64_t ipc_exports_live; /* pooled blocks exported by CUDA IPC, still live */
  uint64_t tier_bytes;       /* the pools' host-tier bytes (PONYTAIL_HOST_TIER) */
  /* PyTorch's own mapped memory the shim keeps (shim/route_vmm.h). */
  uint64_t torch_handles, torch_bytes, torch_host_bytes, torch_exported;
};
void pt_route_sleep_figures(struct pt_route_sleep_figures *f);

/* Every pool asleep (discard: contents dropped) or none; *failed_dev is the
 * device whose pool failed (-1: none). Returns 0 or the pool's error. */
int pt_route_sleep(bool discard, struct pt_pool_sleep_info *sum, int *failed_dev);
/* The host memory the next sleep of every pool will copy into, got now while
 * the process runs (no gate: pt_pool_sleep_prepare holds each pool's mutex
 * only briefly). A failure on one device leaves what the devices before it
 * kept (their next sleep uses it); *failed_dev names the device. */
int pt_route_sleep_prepare(struct pt_pool_sleep_info *sum, int *failed_dev);
/* Frees every pool's host memory kept for the next sleep; returns its bytes. */
uint64_t pt_route_sleep_unprepare(void);
/* Every sleeping pool awake, or all still asleep. The host memory that held
 * the bytes is left to pt_route_wake_release, which runs with the gate open
 * (the process runs again meanwhile); its time adds to sum->host_ns. */
int pt_route_wake(struct pt_pool_sleep_info *sum, int *failed_dev);
void pt_route_wake_release(struct pt_pool_sleep_info *sum);

/* The host tier's move back (shim/tier.c), with the gate closed: every device
 * drained, then each pool's host granules moved to the device while it has
 * room. *moved: bytes moved; *left: host-tier bytes still on the host.
 * 0 or the first error (the pools stay consistent: pool.h). */
int pt_route_tier_promote(uint64_t *moved, uint64_t *left);
/* Whether a move could do anything: some pool holds host-tier bytes and its
 * device has at least a granule free (driver's figure plus the pool's own
 * free memory, within PONYTAIL_MEM_LIMIT). Without the gate. */
bool pt_route_tier_room(void);

#endif
