/* Replaying an allocation trace through the pool on the host backend: the
 * core of `ponytail replay`, also called by the tests. The trace's pointers
 * are keys only; every allocation gets its address from the pool. */
#ifndef PT_ALLOC_REPLAY_H
#define PT_ALLOC_REPLAY_H
#include <stdbool.h>
#include <stdint.h>
#include "allocator/pool.h"

struct pt_replay_trace; /* a whole trace, parsed and checked */

/* Reads and checks path: unknown lines, frees of unknown pointers, duplicate
 * live pointers, bad numbers, truncated gzip. 0, or -1 with
 * "PATH:LINE: message" in err. */
int pt_replay_load(const char *path, struct pt_replay_trace **out, char *err, size_t errlen);
void pt_replay_free(struct pt_replay_trace *t);

struct pt_replay_opts {
  uint64_t keep_bytes;  /* the pool's keep threshold */
  uint64_t limit_bytes; /* 0 = none */
  bool time_ops;        /* time every operation (clock_gettime) */
  /* Pooled (A) events smaller than this are replayed as pass-through, as
   * the shim does below PONYTAIL_KV_MIN: not pooled, not in peak live, their
   * frees not seen by the pool. 0 = every A event is pooled. */
  uint64_t min_bytes;
  /* A device running behind the host: stream markers complete only every
   * lag_ops pooled events (host backend held markers). 0 = at once. */
  uint64_t lag_ops;
  /* Largest handle the pool creates; 0 = the shim's choice
   * (pt_pool_chunk_auto: one granule with limit_bytes, else 32 MiB). */
  uint64_t chunk_bytes;
};

struct pt_replay_result {
  uint64_t allocs, frees;             /* pooled events replayed */
  uint64_t pass_allocs, pass_frees;   /* P/Q events, and A/R below min_bytes */
  uint64_t failed_allocs;             /* out of memory under the limit */
  uint64_t peak_live_bytes;           /* of the pooled events' requested sizes */
  uint64_t peak_physical_bytes;
  double overhead;                    /* peak physical / peak live - 1 */
  /* ns per operation, timer overhead subtracted (0 when not timed) */
  double alloc_p50, alloc_p99, free_p50, free_p99, op_p50, op_p99;
  /* The pool's calls to the backend's physical-memory API: on the GPU each is
   * a driver call (cuMemCreate, cuMemMap + cuMemSetAccess, cuMemUnmap,
   * cuMemRelease) that costs tens of microseconds of host time, and the
   * mapping changes also update the GPU's page tables. */
  uint64_t creates, maps, unmaps, releases;
  struct pt_pool_stats pool;
};

/* 0, or -1 with a message in err (the pool could not be created). */
int pt_replay_run(const struct pt_replay_trace *t, const struct pt_replay_opts *o,
                  struct pt_replay_result *res, char *err, size_t errlen);

#endif
