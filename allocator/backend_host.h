/* The host backend: the backend interface over mmap, for tests and replay.
 *
 * Physical handles are runs of granules of one memfd (sparse: ftruncate
 * commits no RAM, released handles are hole-punched); mapping places a handle
 * at a fixed VA with MAP_FIXED|MAP_SHARED, so a stitched handle shows the
 * same bytes at its new address. Like the driver, a handle is mapped whole
 * and unmap must cover whole mappings. Reserved VA is a PROT_NONE MAP_NORESERVE mapping;
 * set_access makes a mapped range read/write.
 *
 * Streams are simulated: markers complete at once, unless a test holds them
 * (then they stay pending until completed, synced, or the device synced).
 * Fault injection: the Nth call of an op fails with the error given. */
#ifndef PT_ALLOC_BACKEND_HOST_H
#define PT_ALLOC_BACKEND_HOST_H
#include <stdbool.h>
#include "allocator/backend.h"

/* Error codes of the host backend (the values mirror CUresult's, so that
 * code reading them is the same for both backends). */
enum {
  PT_HOST_OK = 0,
  PT_HOST_ERR_INVALID = 1,
  PT_HOST_ERR_OOM = 2,
  PT_HOST_ERR_NOT_READY = 600,
  PT_HOST_ERR_SYSTEM = 999, /* mmap/memfd failed */
};

/* granule 0 = 2 MiB. max_granules 0 = unlimited; otherwise create fails with
 * PT_HOST_ERR_OOM past it (a "device" of that size). 0 on success. */
int pt_backend_host_create(struct pt_backend *out, size_t granule, uint64_t max_granules);

enum pt_host_op { PT_HOST_OP_CREATE, PT_HOST_OP_MAP, PT_HOST_OP_SET_ACCESS, PT_HOST_OP_RESERVE,
                  PT_HOST_OP_RECORD, PT_HOST_OP_HOST_ALLOC, PT_HOST_OP_COPY, PT_HOST_OP_UNMAP,
                  PT_HOST_OP_CREATE_HOST, PT_HOST_OP_HOST_LOCK, PT_HOST_OP_COUNT };

/* Makes the nth call (1-based, counted from now) of op return err; 0 disarms. */
void pt_backend_host_fail_at(struct pt_backend *bk, enum pt_host_op op, unsigned nth, int err);
/* hold: markers recorded from now on stay pending until completed. */
void pt_backend_host_hold_markers(struct pt_backend *bk, bool hold);
/* Completes every pending marker (the simulated GPU catches up). */
void pt_backend_host_complete_markers(struct pt_backend *bk);

struct pt_host_counters {
  uint64_t live_handles;    /* created and not released */
  uint64_t live_granules;   /* the granules of those handles */
  uint64_t mapped_granules; /* currently mapped */
  uint64_t reserved_bytes;  /* currently reserved VA */
  uint64_t live_markers;
  uint64_t creates, releases, maps, unmaps, records, waits, marker_syncs, device_syncs;
  /* The last stream_wait: the waiting stream, the stream its marker was
   * recorded on, and that record's sequence number (see record_seq). */
  pt_bk_stream last_wait_stream, last_wait_marker_stream;
  uint64_t last_wait_record_seq;
  uint64_t record_seq; /* number of records so far (a clock for tests) */
  uint64_t host_allocs;  /* live host_alloc buffers (a sleeping pool's copies) */
  uint64_t host_bytes;   /* bytes ever given by host_alloc */
  uint64_t host_registered; /* live host_alloc buffers of kind PT_HOST_BUF_REGISTERED */
  uint64_t host_free_mismatch; /* host_free calls whose size or kind differed from the alloc's */
  uint64_t tier_granules; /* live granules made by create_host (the host tier) */
};
void pt_backend_host_counters(struct pt_backend *bk, struct pt_host_counters *out);
/* create_host fails with PT_HOST_ERR_OOM past this many live tier granules (0 = unlimited): the
 * host running out of memory it can pin. */
void pt_backend_host_tier_cap(struct pt_backend *bk, uint64_t max_granules);
/* Device granules in use outside the pool (another allocation, the
 * context): create's capacity and device_free count them. */
void pt_backend_host_others(struct pt_backend *bk, uint64_t granules);

#endif
