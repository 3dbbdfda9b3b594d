/* The monotonic clock in nanoseconds, for the host-time figures of the pool
 * (map_ns, wait_ns), the replay's per-operation times and the shim's IPC
 * times. */
#ifndef PT_COMMON_NOW_NS_H
#define PT_COMMON_NOW_NS_H
#include <stdint.h>
#include <time.h>

static inline uint64_t pt_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
