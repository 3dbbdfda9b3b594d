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
};
void pt_route_sleep_figures(struct pt_route_sleep_figures *f);

/* Every pool asleep (discard: contents dropped) or none; *failed_dev is the
 * device whose pool failed (-1: none). Returns 0 or the pool's error. */
int pt_route_sleep(bool discard, struct pt_pool_sleep_info *sum, int *failed_dev);
/* Every sleeping pool awake, or all still asleep. */
int pt_route_wake(struct pt_pool_sleep_info *sum, int *failed_dev);

#endif
